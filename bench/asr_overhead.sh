#!/usr/bin/env bash
# bench/asr_overhead.sh — what hark adds to pocketsphinx's own cost: CPU
# seconds per second of audio in harkd, serving one stream at a time over
# its WebSocket, against bin/ps_bare decoding the same files with the bare
# library in the same run (goal: overhead < 5%).
#
# harkd's CPU is utime + stime from /proc/PID/stat around one
# `hark transcribe --parallel 1` pass over the files (chunks sent as fast as
# replies come, not real-time paced), after one unmeasured warm-up pass so
# that decoder creation and model paging are excluded. ps_bare reports its
# own getrusage CPU, model load excluded. For ROUNDS rounds, alternating
# which goes first, then the median. Prints a markdown snippet.
#
# The reference does the work the protocol asks of any streaming server: a
# WebSocket client gets a partial hypothesis for every 100 ms audio message,
# so ps_bare asks the library for one per 100 ms of audio in an utterance
# (--partial-ms 100); the library's cost without partials is shown beside.
#
# Env: BUILD_DIR (default ./build), ROUNDS (3), MODEL (asr), AUDIO_DIR (the
# LibriVox recordings of pocketsphinx-testdata).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
MODEL=${MODEL:-asr}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
PS_BARE=$BUILD_DIR/bin/ps_bare
CLK_TCK=$(getconf CLK_TCK)

bench_need "$HARKD" "$HARK" "$PS_BARE" curl "$PY"
shopt -s nullglob
FILES=("$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no .wav files in $AUDIO_DIR (apt install pocketsphinx-testdata)"
bench_start_harkd --model-control-mode explicit --load-model "$MODEL" # only what is measured
HARKD_PID=$BENCH_LAST_PID
curl -sf -o /dev/null "http://$HARKD_URL/v2/models/$MODEL/ready" || bench_die "model '$MODEL' is not ready"

# median4 N...: the median with 4 decimals (bench_median rounds even counts to 1).
median4() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { printf "%.4f\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# cpu_seconds PID: user + system CPU of a process so far (fields 14 and 15
# of /proc/PID/stat, counted after the ")" that ends the command name).
cpu_seconds() {
  awk -v tck="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / tck }' "/proc/$1/stat"
}

# transcribe OUT.json: one pass, one stream at a time; dies on any failure.
transcribe() {
  timeout 600 "$HARK" transcribe --server "$HARKD_URL" --model "$MODEL" --parallel 1 --timeout-secs 30 \
    --json "${FILES[@]}" >"$1" 2>"$1.log" || { cat "$1.log" "$1" >&2; bench_die "hark transcribe failed"; }
}

# run_hark: sets HARK_PER (harkd CPU s per audio s), HARK_RTFX, OUT.
run_hark() {
  OUT=$BENCH_TMP/hark-$1.json
  local before after audio
  before=$(cpu_seconds "$HARKD_PID")
  transcribe "$OUT"
  after=$(cpu_seconds "$HARKD_PID")
  audio=$(bench_json "$OUT" 'd["audio_seconds"]')
  HARK_PER=$(awk -v a="$after" -v b="$before" -v s="$audio" 'BEGIN { printf "%.4f\n", (a - b) / s }')
  HARK_RTFX=$(bench_json "$OUT" 'd["rtfx"]')
}

# run_bare: sets BARE_PER (ps_bare CPU s per audio s, partials every 100 ms,
# as the client gets them), NOPART_PER (no partials), BARE_OUT.
run_bare() {
  BARE_OUT=$BENCH_TMP/bare-$1.json
  timeout 600 "$PS_BARE" --partial-ms 100 --json "${FILES[@]}" >"$BARE_OUT" || bench_die "ps_bare failed"
  BARE_PER=$(bench_json "$BARE_OUT" '"%.4f" % d["cpu_per_audio_second"]')
  timeout 600 "$PS_BARE" --json "${FILES[@]}" >"$BENCH_TMP/nopart-$1.json" || bench_die "ps_bare failed"
  NOPART_PER=$(bench_json "$BENCH_TMP/nopart-$1.json" '"%.4f" % d["cpu_per_audio_second"]')
}

bench_log "warm-up pass over ${#FILES[@]} files (not measured)"
transcribe "$BENCH_TMP/warmup.json"
hark_v=() bare_v=() over_v=() rtfx_v=() nopart_v=()
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then run_bare "$r"; run_hark "$r"; else run_hark "$r"; run_bare "$r"; fi
  over=$(awk -v h="$HARK_PER" -v b="$BARE_PER" 'BEGIN { printf "%.1f\n", (h / b - 1) * 100 }')
  hark_v+=("$HARK_PER") bare_v+=("$BARE_PER") over_v+=("$over") rtfx_v+=("$HARK_RTFX") nopart_v+=("$NOPART_PER")
  bench_log "round $r/$ROUNDS: harkd $HARK_PER CPU s/audio s, ps_bare $BARE_PER (no partials $NOPART_PER), overhead $over%, client RTFX $HARK_RTFX"
done

# Do the two agree on the words? Both start every file from the model's
# initial state (a hark stream from the initial cepstral mean and a new
# front end, ps_bare from a freshly loaded decoder), so they should: a
# difference means the two did not decode the same thing.
same=$($PY - "$OUT" "$BARE_OUT" <<'PY'
import json, sys
h, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
ht = {f["file"]: f["streams"][0]["transcript"] for f in h["files"]}
bt = {f["file"]: f["transcript"] for f in b["files"]}
print(sum(ht.get(k) == v for k, v in bt.items()), "of", len(bt))
PY
)
overhead=$(bench_median "${over_v[@]}")
verdict=$(awk -v v="$overhead" 'BEGIN { print (v < 5 ? "met" : "NOT met") }')
audio=$(bench_json "$OUT" 'd["audio_seconds"]')

cat <<EOF

### Speech: hark's CPU overhead over bare pocketsphinx

$(bench_machine). Command: \`$(bench_command ROUNDS MODEL)\`.
${#FILES[@]} files, $audio s of audio ($AUDIO_DIR), one stream at a time, 100 ms chunks sent as fast as replies
come. harkd: utime+stime from /proc around each pass, after a warm-up pass. ps_bare: the same files through
bare pocketsphinx as pocketsphinx_continuous decodes them (2048-sample blocks, utterances split by its VAD),
plus a partial hypothesis per 100 ms of audio in an utterance (what the client is sent), model load
excluded. Median of $ROUNDS rounds, order alternated.

| | CPU s per audio s | per round |
| --- | ---: | --- |
| harkd, model \`$MODEL\` over WebSocket | $(median4 "${hark_v[@]}") | ${hark_v[*]} |
| ps_bare, partials every 100 ms (the reference) | $(median4 "${bare_v[@]}") | ${bare_v[*]} |
| ps_bare, no partials (the library's floor) | $(median4 "${nopart_v[@]}") | ${nopart_v[*]} |

- Overhead: **${overhead}%** (goal < 5%: $verdict); per round: ${over_v[*]}.
- Client-side RTFX of the one-stream pass: $(bench_median "${rtfx_v[@]}"); transcripts identical to ps_bare's: $same files.
EOF
