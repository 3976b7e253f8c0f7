#!/usr/bin/env bash
# bench/asr_profiles.sh — the two latency profiles of the speech model side
# by side, in one run: CPU per second of audio and word error rate of
# `fast` against `accurate` (the reference).
#
# One harkd; each pass posts the LibriVox recordings one after another over
# KServe (POST /v2/models/$MODEL/infer, the WAV as one BYTES element, request
# parameter profile), so the whole file is decoded as one stream would be.
# harkd's CPU is utime + stime from /proc around the pass; the client only
# reads files and waits. WER against the recordings' own transcription.
# Profiles alternate by round after a warm-up pass of each.
#
# Env: BUILD_DIR (./build), ROUNDS (3), MODEL (asr), AUDIO_DIR.
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
MODEL=${MODEL:-asr}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
mapfile -t FILES < <(ls "$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no WAV files in $AUDIO_DIR"
CLK_TCK=$(getconf CLK_TCK)

cpu_seconds() {
  awk -v tck="$CLK_TCK" '{ sub(/^.*\) /, ""); printf "%.3f\n", ($12 + $13) / tck }' "/proc/$1/stat"
}

bench_start_harkd
HPID=$BENCH_LAST_PID

# pass PROFILE OUT.json: every file once; the transcripts and audio seconds.
pass() {
  timeout 900 $PY - "$HARKD_URL" "$MODEL" "$1" "$2" "${FILES[@]}" <<'PY' || bench_die "pass $1 failed"
import http.client, json, struct, sys, wave
url, model, profile, out, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
host, port = url.split(":")
conn = http.client.HTTPConnection(host, int(port), timeout=600)
doc = {"files": [], "audio_seconds": 0.0}
for path in files:
    data = open(path, "rb").read()
    with wave.open(path) as w:
        doc["audio_seconds"] += w.getnframes() / w.getframerate()
    header = json.dumps({"parameters": {"profile": profile},
                         "inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1],
                                     "parameters": {"binary_data_size": len(data) + 4}}]}).encode()
    conn.request("POST", f"/v2/models/{model}/infer", header + struct.pack("<I", len(data)) + data,
                 {"Inference-Header-Content-Length": str(len(header))})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"{path}: HTTP {r.status} {body[:200]!r}")
    outs = {o["name"]: o for o in json.loads(body)["outputs"]}
    doc["files"].append({"file": path, "transcript": outs["TRANSCRIPT"]["data"][0]})
json.dump(doc, open(out, "w"))
PY
}

# wer OUT.json: word errors / reference words against the transcription.
wer() {
  $PY - "$1" "$AUDIO_DIR/transcription" <<'PY'
import json, os, sys
doc = json.load(open(sys.argv[1]))
truth = {}
for line in open(sys.argv[2]):
    text, _, fid = line.rpartition("(")
    truth[fid.strip(" )\n")] = text.replace("<s>", "").replace("</s>", "").split()
errors = words = 0
for f in doc["files"]:
    ref, hyp = truth[os.path.basename(f["file"])[:-4]], f["transcript"].split()
    d = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, d[0] = d[0], i
        for j, h in enumerate(hyp, 1):
            prev, d[j] = d[j], min(d[j] + 1, d[j - 1] + 1, prev + (r != h))
    errors += d[len(hyp)]
    words += len(ref)
print(f"{errors / words:.3f} {errors} {words}")
PY
}

# run PROFILE ROUND: sets PER (CPU s per audio s) and WER_<profile>.
run() {
  local out=$BENCH_TMP/$1-$2.json before after
  before=$(cpu_seconds "$HPID")
  pass "$1" "$out"
  after=$(cpu_seconds "$HPID")
  PER=$(awk -v a="$after" -v b="$before" -v s="$(bench_json "$out" 'd["audio_seconds"]')" \
    'BEGIN { printf "%.4f\n", (a - b) / s }')
  LAST_OUT=$out
}

bench_log "warm-up: one pass of each profile (not measured)"
pass accurate "$BENCH_TMP/warm-a.json"
pass fast "$BENCH_TMP/warm-f.json"
acc_v=() fast_v=() ratio_v=()
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then order=(accurate fast); else order=(fast accurate); fi
  for p in "${order[@]}"; do
    run "$p" "$r"
    if [[ $p == accurate ]]; then ACC=$PER ACC_OUT=$LAST_OUT; else FAST=$PER FAST_OUT=$LAST_OUT; fi
  done
  ratio=$(awk -v f="$FAST" -v a="$ACC" 'BEGIN { printf "%.3f\n", f / a }')
  acc_v+=("$ACC") fast_v+=("$FAST") ratio_v+=("$ratio")
  bench_log "round $r/$ROUNDS: accurate $ACC, fast $FAST CPU s/audio s (fast/accurate $ratio)"
done
read -r wer_a err_a words <<<"$(wer "$ACC_OUT")"
read -r wer_f err_f _ <<<"$(wer "$FAST_OUT")"
audio=$(bench_json "$ACC_OUT" 'd["audio_seconds"]')

cat <<EOF

### Speech: latency profiles, fast vs accurate

$(bench_machine). Command: \`$(bench_command ROUNDS MODEL)\`.
${#FILES[@]} files, $audio s of audio ($AUDIO_DIR), each posted whole over KServe with request
parameter \`profile\`, one at a time; harkd's utime+stime from /proc around each pass, after a warm-up
pass of each profile; median of $ROUNDS rounds, order alternated. WER against the recordings'
transcription ($words words).

| profile | CPU s per audio s | per round | WER | errors |
| --- | ---: | --- | ---: | ---: |
| \`accurate\` (the reference) | $(bench_median "${acc_v[@]}") | ${acc_v[*]} | $wer_a | $err_a |
| \`fast\` | $(bench_median "${fast_v[@]}") | ${fast_v[*]} | $wer_f | $err_f |

- fast / accurate CPU: **$(bench_median "${ratio_v[@]}")** (per round: ${ratio_v[*]}).
EOF
