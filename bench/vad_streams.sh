#!/usr/bin/env bash
# bench/vad_streams.sh — how many real-time WebSocket streams the VAD-gated
# speech model (asr_silero: silero_vad batched across streams in front of
# pocketsphinx) serves with p99 reply latency <= P99_MS (100) and no
# errors, against the bare ceiling measured in the same run:
#
#   ceiling = frames/s of the bare libtorch loop at batch 512
#             (tools/silero/bare_loop.py, the same model.pt)
#             / 31.25 frames per stream-second
#
# (a) every stream silent (zeros; goal: >= 0.75 of the ceiling), at each
#     fraction of the ceiling in FRACTIONS;
# (b) the same N with SPEAKING (4) of them streaming the LibriVox
#     recordings (their decoders made beforehand, as on a server that has
#     served speech before; a client of their own): the silent streams'
#     latency (the bars) and the speakers' own (chunk and final, reported
#     against issue 11's speech bars), the decoders held (peak of the pool's
#     /metrics series), harkd's resident memory and the share of the two
#     cores harkd used, and the client's share beside it (the load
#     generator runs on the same cores: what it takes, harkd cannot have).
#
# Streams are `hark transcribe --simulate-realtime --chunk-ms 100` (a
# client process of one thread, two in (b)), ITERATIONS passes over the
# files' lengths.
# Env: BUILD_DIR, FRACTIONS ("0.25 0.5 0.75 1.0"), P99_MS (100), SPEAKING
# (4; 0: only the silent rows), ITERATIONS (2), AUDIO_DIR, NS (stream counts
# to try instead of FRACTIONS, e.g. "450": the same N for two builds, since
# the bare ceiling swings by 1.5x between runs minutes apart), VAD_INSTANCES
# VAD_DELAY_US and VAD_PAD (silero_vad's instance count, its oldest
# strategy's max_queue_delay_microseconds and its BATCH_PAD_MULTIPLE, 1 for
# none, in a copy of the repository; default: as models/ ships them),
# DECODE_THREADS (asr_silero's decode_threads there; 0: decoding on the
# engine's workers, the reference for the decode threads), HARKD_ARGS (more
# harkd flags, e.g. "--short-batch-us 0").
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

FRACTIONS=${FRACTIONS:-0.25 0.5 0.75 1.0}
NS=${NS:-}
P99_MS=${P99_MS:-100}
SPEAKING=${SPEAKING:-4}
ITERATIONS=${ITERATIONS:-2}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
MODEL_FILE=$BENCH_ROOT/models/silero_vad/1/model.pt
CORES=$(nproc)
VAD_INSTANCES=${VAD_INSTANCES:-}
VAD_DELAY_US=${VAD_DELAY_US:-}
VAD_PAD=${VAD_PAD:-}
DECODE_THREADS=${DECODE_THREADS:-}
HARKD_ARGS=${HARKD_ARGS:-}

bench_need "$HARKD" "$HARK" curl "$PY"
[[ -f $MODEL_FILE ]] || bench_die "$MODEL_FILE is missing (scripts/setup.sh makes it)"
shopt -s nullglob
FILES=("$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no .wav files in $AUDIO_DIR (apt install pocketsphinx-testdata)"

bench_log "bare ceiling: the libtorch loop at batch 512, $CORES threads"
BARE=$(timeout 300 "$PY" "$BENCH_ROOT/tools/silero/bare_loop.py" "$MODEL_FILE" "$CORES" 10 512 |
  $PY -c 'import json,sys; print(json.load(sys.stdin)["frames_per_sec"])') || bench_die "bare loop failed"
CEILING=$(awk -v f="$BARE" 'BEGIN { printf "%.0f\n", f / 31.25 }')
bench_log "bare: $BARE frames/s at batch 512 -> ceiling $CEILING streams"

# Admission by backlog (--stream-backlog-limit, default 4 requests per
# instance) counts requests, which fits `asr`, where every request decodes;
# here each VAD round releases one cheap request per silent stream at once,
# so the count spikes with the number of streams and refuses new streams
# while replies are still fast. Off, so that the rows measure serving.
if [[ -n $VAD_INSTANCES$VAD_DELAY_US$VAD_PAD$DECODE_THREADS ]]; then
  BENCH_REPO=$BENCH_TMP/repo
  mkdir -p "$BENCH_REPO/silero_vad" "$BENCH_REPO/asr_silero"
  ln -s "$BENCH_ROOT/models/asr_silero/1" "$BENCH_REPO/asr_silero/1"
  ln -s "$BENCH_ROOT/models/silero_vad/1" "$BENCH_REPO/silero_vad/1"
  param=
  [[ -z $DECODE_THREADS ]] ||
    param="  { key: \"decode_threads\" value: { string_value: \"$DECODE_THREADS\" } },"
  awk -v p="$param" '{ print } /^parameters \[$/ && p != "" { print p }' \
    "$BENCH_ROOT/models/asr_silero/config.pbtxt" >"$BENCH_REPO/asr_silero/config.pbtxt"
  sed -e "${VAD_INSTANCES:+s/count: [0-9]* kind/count: $VAD_INSTANCES kind/}" \
    -e "${VAD_DELAY_US:+s/max_queue_delay_microseconds: [0-9]*/max_queue_delay_microseconds: $VAD_DELAY_US/}" \
    -e "${VAD_PAD:+/BATCH_PAD_MULTIPLE/s/string_value: \"[0-9]*\"/string_value: \"$VAD_PAD\"/}" \
    "$BENCH_ROOT/models/silero_vad/config.pbtxt" >"$BENCH_REPO/silero_vad/config.pbtxt"
fi
# The stream counts to try: NS as given, or FRACTIONS of this run's ceiling.
targets=()
if [[ -n $NS ]]; then
  for n in $NS; do
    targets+=("$n $(awk -v c="$CEILING" -v n="$n" 'BEGIN { printf "%.2f\n", n / c }')")
  done
else
  for f in $FRACTIONS; do
    targets+=("$(awk -v c="$CEILING" -v f="$f" 'BEGIN { n = int(c * f + 0.5); print (n < 1 ? 1 : n) }') $f")
  done
fi
# --max-streams (default 1,024 per protocol) well above the largest N: on a
# host whose ceiling is past 1,024 streams (an AVX-512 one measured ~3,000),
# the default refused every stream beyond it at connect, and those rows
# measured the cap, not serving (bench/RESULTS.md, 2026-11-27, evening).
# Twice N, since a stream's next iteration connects while the server may
# still be closing its last.
most=$(printf '%s\n' "${targets[@]}" | awk '$1 > m { m = $1 } END { print m + 0 }')
# shellcheck disable=SC2086 # HARKD_ARGS: flags, split on purpose
bench_start_harkd --model-control-mode explicit --load-model silero_vad --load-model asr_silero \
  --stream-backlog-limit 1000000 --max-streams $((2 * most > 1024 ? 2 * most : 1024)) $HARKD_ARGS
HARKD_PID=$BENCH_LAST_PID
curl -sf -o /dev/null "http://$HARKD_URL/v2/models/asr_silero/ready" || bench_die "asr_silero is not ready"
idle_rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$HARKD_PID/status")
# The speakers' decoders, made before any trial: a decoder takes ~1 s of
# CPU to make (it loads the model), and SPEAKING new ones inside the first
# (b) row held a core for seconds, timing out streams that a warm server
# serves (805 streams with 4 speaking on a fresh harkd: p99 1,559 ms; after
# the decoders existed: 234 ms, bench/RESULTS.md, 2026-11-27, evening).
if ((SPEAKING > 0)); then
  timeout 120 "$HARK" transcribe --server "$HARKD_URL" --model asr_silero --parallel "$SPEAKING" \
    --iterations 1 "${FILES[@]}" >/dev/null 2>&1 || bench_die "the decoders' warm-up failed"
fi

# sample FILE: harkd's RSS (kB) and its decoder series, twice a second.
sample() {
  while kill -0 "$HARKD_PID" 2>/dev/null; do
    echo "rss $(awk '/^VmRSS:/ { print $2 }' "/proc/$HARKD_PID/status")" >>"$1"
    curl -s --max-time 1 "http://127.0.0.1:$HARKD_METRICS_PORT/metrics" | grep -i decoder |
      grep -v '^#' | sed 's/^/metric /' >>"$1" || true
    sleep 0.5
  done
}

# cpu: harkd's user+system CPU seconds so far.
cpu() { awk '{ printf "%.2f\n", ($14 + $15) / 100 }' "/proc/$HARKD_PID/stat"; }

# client OUT N SILENT_FRACTION: one `hark transcribe` of N real-time streams.
client() {
  timeout $((ITERATIONS * 20 + 60)) "$HARK" transcribe --server "$HARKD_URL" --model asr_silero \
    --simulate-realtime --chunk-ms 100 --parallel "$2" --iterations "$ITERATIONS" \
    --silent-fraction "$3" --timeout-secs 2 --json "${FILES[@]}" >"$1" 2>"$1.log" || true
}

# trial NAME N SPEAKERS: one real-time run of N streams, SPEAKERS of them
# speaking; prints one report line and sets PASS (1 when the silent
# streams' p99 <= P99_MS and no stream had an error or timed out). The
# speakers are a client of their own, so that their latency is reported
# apart from the silent streams' (a p99 over both mixes two populations:
# 4 speakers of 400 are 1% of the chunks).
trial() {
  local name=$1 n=$2 speakers=$3 out=$BENCH_TMP/$1.json samples=$BENCH_TMP/$1.samples c0 w0 c1 w1
  : >"$samples"
  bench_settle asr_silero
  bench_spawn "$BENCH_TMP/$name.sampler.log" sample "$samples"
  local sampler=$BENCH_LAST_PID
  c0=$(cpu) w0=$(date +%s.%N)
  # (bash's `times` in the subshell: its children's CPU, the clients'.)
  (
    if ((speakers > 0)); then
      client "$out.speakers" "$speakers" 0 &
    fi
    client "$out" $((n - speakers)) 1
    wait
    times >"$out.times"
  )
  c1=$(cpu) w1=$(date +%s.%N)
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  [[ -s $out ]] || bench_die "$name gave no result: $(tail -c 300 "$out.log")"
  ((speakers == 0)) || [[ -s $out.speakers ]] ||
    bench_die "$name's speakers gave no result: $(tail -c 300 "$out.speakers.log")"
  local line
  line=$($PY - "$out" "$samples" "$idle_rss" "$P99_MS" "$c0" "$c1" "$w0" "$w1" "$CORES" "$out.times" \
    "$out.speakers" <<'PY'
import json, os, re, sys
d = json.load(open(sys.argv[1]))
p99_bar, c0, c1, w0, w1, cores = float(sys.argv[4]), *map(float, sys.argv[5:10])
spk = json.load(open(sys.argv[11])) if os.path.exists(sys.argv[11]) else None
# `times`: the shell's user and system time, then its children's.
child = open(sys.argv[10]).read().split("\n")[1]
client = sum(int(m) * 60 + float(s) for m, s in re.findall(r"(\d+)m([\d.]+)s", child))
rss, series = [], {}
for line in open(sys.argv[2]):
    kind, _, rest = line.strip().partition(" ")
    if kind == "rss" and rest:
        rss.append(int(rest))
    elif kind == "metric" and " " in rest:
        name, value = rest.rsplit(" ", 1)
        try:
            series[name] = max(series.get(name, float("-inf")), float(value))
        except ValueError:
            pass
c = d["chunk_latency_ms"]
errors, timeouts, streams = d["errors"], d["timeouts"], d["streams"]
speakers = "-"
if spk:
    errors, timeouts, streams = errors + spk["errors"], timeouts + spk["timeouts"], streams + spk["streams"]
    sc, sf = spk["chunk_latency_ms"], spk["final_latency_ms"]
    speakers = f"{sc['p50']} / {sc['p99']} / {sf['p99']}"
ok = c["p99"] <= p99_bar and errors == 0 and timeouts == 0
dec = "; ".join(f"{k} {v:g}" for k, v in sorted(series.items()) if "in_use" in k or "held" in k)
print(f"{int(ok)}|{streams}|{c['p50']}|{c['p99']}|{c['max']}|{speakers}|{errors}|{timeouts}|"
      f"{(max(rss) if rss else 0) / 1024:.0f}|{(c1 - c0) / (w1 - w0) / cores:.2f}|"
      f"{client / (w1 - w0) / cores:.2f}|{dec or '-'}")
PY
)
  PASS=${line%%|*}
  LINE=${line#*|}
}

rows=()
best=0
for t in "${targets[@]}"; do
  read -r n f <<<"$t"
  trial "silent-$n" "$n" 0
  bench_log "silent N=$n ($f of the ceiling): $LINE (pass=$PASS)"
  rows+=("| $n ($f) | all silent | ${LINE//|/ | } | $PASS |")
  ((PASS)) && ((n > best)) && best=$n
  if ((SPEAKING > 0 && n > SPEAKING)); then
    trial "speaking-$n" "$n" "$SPEAKING"
    bench_log "N=$n with $SPEAKING speaking: $LINE"
    rows+=("| $n ($f) | $SPEAKING speaking | ${LINE//|/ | } | $PASS |")
  fi
done

cat <<EOF

### asr_silero: real-time WebSocket streams within p99 ${P99_MS} ms

$(bench_machine). Command: \`$(bench_command FRACTIONS NS P99_MS SPEAKING ITERATIONS VAD_INSTANCES VAD_DELAY_US VAD_PAD DECODE_THREADS HARKD_ARGS)\`.
Bare ceiling: $BARE frames/s at batch 512 (the libtorch loop, $CORES threads) / 31.25 =
**$CEILING streams**. harkd idle RSS $((idle_rss / 1024)) MiB.

| N (of ceiling) | load | streams | silent: chunk p50 ms | p99 ms | max ms | speakers: chunk p50 / p99, final p99 ms | errors | timeouts | peak RSS MiB | harkd CPU share | client CPU share | decoders (peak) | within bars |
| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |
$(printf '%s\n' "${rows[@]}")

Largest all-silent N within the bars: **$best = $(awk -v b="$best" -v c="$CEILING" 'BEGIN { printf "%.2f", b / c }') of the ceiling** (goal >= 0.75).
EOF
