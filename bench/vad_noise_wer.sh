#!/usr/bin/env bash
# bench/vad_noise_wer.sh — word error rate of the VAD-gated model
# (asr_silero) against the energy VAD (asr) on the LibriVox recordings,
# clean and mixed with noise at 10 dB and 0 dB SNR: white noise (seeded),
# and babble (the other four recordings summed, looped to length). Also
# the recogniser's CPU seconds per audio second in each condition
# (hark_asr_compute_seconds_total / hark_audio_seconds_total of the model;
# the gated model's silero_vad time is reported beside it, from Triton's
# nv_inference_compute_infer_duration_us).
#
# Goal (issue 12): gated <= energy on clean audio and lower in noise.
# Files are streamed as fast as replies come (`hark transcribe`, 100 ms
# chunks), one at a time, so the figures don't depend on the host's load.
# Env: BUILD_DIR, AUDIO_DIR, SNRS ("10 0").
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
SNRS=${SNRS:-10 0}
bench_need "$HARKD" "$HARK" curl "$PY"
[[ -f $AUDIO_DIR/transcription ]] || bench_die "no $AUDIO_DIR/transcription (apt install pocketsphinx-testdata)"
[[ -f $BENCH_ROOT/models/silero_vad/1/model.pt ]] || bench_die "silero_vad is missing (scripts/setup.sh makes it)"

# The conditions: a folder of WAVs each.
$PY - "$AUDIO_DIR" "$BENCH_TMP/audio" "$SNRS" <<'PY' || bench_die "cannot make the noisy audio"
import array, glob, math, os, random, sys, wave
src, out, snrs = sys.argv[1], sys.argv[2], [float(s) for s in sys.argv[3].split()]
files = sorted(glob.glob(os.path.join(src, "*.wav")))
def read(p):
    with wave.open(p) as w:
        assert w.getnchannels() == 1 and w.getsampwidth() == 2 and w.getframerate() == 16000, p
        return array.array("h", w.readframes(w.getnframes()))
def write(p, x):
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with wave.open(p, "wb") as w:
        w.setnchannels(1); w.setsampwidth(2); w.setframerate(16000)
        w.writeframes(array.array("h", (max(-32768, min(32767, int(round(v)))) for v in x)).tobytes())
def power(x):
    return sum(v * v for v in x) / max(1, len(x))
audio = {f: read(f) for f in files}
rng = random.Random(12)
for f in files:
    speech = audio[f]
    write(os.path.join(out, "clean", os.path.basename(f)), speech)
    others = [audio[g] for g in files if g != f]
    babble = [sum(o[i % len(o)] for o in others) for i in range(len(speech))]
    white = [rng.gauss(0, 1) for _ in range(len(speech))]
    ps = power(speech)
    for kind, noise in (("white", white), ("babble", babble)):
        pn = power(noise)
        for snr in snrs:
            gain = math.sqrt(ps / (pn * 10 ** (snr / 10)))
            write(os.path.join(out, f"{kind}-{snr:g}dB", os.path.basename(f)),
                  [s + gain * n for s, n in zip(speech, noise)])
PY

bench_start_harkd --model-control-mode explicit --load-model asr --load-model silero_vad \
  --load-model asr_silero
curl -sf -o /dev/null "http://$HARKD_URL/v2/models/asr_silero/ready" || bench_die "asr_silero is not ready"

# counters MODEL: "compute audio vad_us" from /metrics.
counters() {
  curl -sf "http://127.0.0.1:$HARKD_METRICS_PORT/metrics" | $PY -c '
import re, sys
m, vals = sys.argv[1], {"c": 0.0, "a": 0.0, "v": 0.0}
for line in sys.stdin:
    if line.startswith("#"):
        continue
    name, _, value = line.rpartition(" ")
    if f"model=\"{m}\"" in name:
        if name.startswith("hark_asr_compute_seconds_total"): vals["c"] += float(value)
        if name.startswith("hark_audio_seconds_total"): vals["a"] += float(value)
    if "model=\"silero_vad\"" in name and name.startswith("nv_inference_compute_infer_duration_us"):
        vals["v"] += float(value)
print(vals["c"], vals["a"], vals["v"])' "$1"
}

rows=()
for dir in "$BENCH_TMP"/audio/clean "$BENCH_TMP"/audio/white-* "$BENCH_TMP"/audio/babble-*; do
  cond=$(basename "$dir")
  line="| $cond |"
  for model in asr asr_silero; do
    read -r c0 a0 v0 <<<"$(counters "$model")"
    timeout 600 "$HARK" transcribe --server "$HARKD_URL" --model "$model" --chunk-ms 100 --json \
      "$dir"/*.wav >"$BENCH_TMP/$cond-$model.json" 2>"$BENCH_TMP/$cond-$model.log" ||
      bench_die "$model on $cond failed: $(tail -c 300 "$BENCH_TMP/$cond-$model.log")"
    read -r c1 a1 v1 <<<"$(counters "$model")"
    cell=$($PY - "$BENCH_TMP/$cond-$model.json" "$AUDIO_DIR/transcription" "$c0" "$c1" "$a0" "$a1" \
      "$v0" "$v1" "$model" <<'PY'
import json, os, re, sys
d = json.load(open(sys.argv[1]))
c0, c1, a0, a1, v0, v1 = map(float, sys.argv[3:9])
refs = {}
for line in open(sys.argv[2]):
    m = re.match(r"\s*(.*?)\s*\(([^)]+)\)\s*$", line)
    if m:
        refs[m.group(2)] = [w for w in m.group(1).split() if w not in ("<s>", "</s>")]
def wer(r, h):
    dp = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, dp[0] = dp[0], i
        for j in range(1, len(h) + 1):
            cur = min(dp[j] + 1, dp[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev, dp[j] = dp[j], cur
    return dp[len(h)], len(r)
errs = words = 0
for f in d["files"]:
    fid = os.path.splitext(os.path.basename(f["file"]))[0]
    e, n = wer(refs[fid], f["streams"][0]["transcript"].split())
    errs, words = errs + e, words + n
cpu = (c1 - c0) / (a1 - a0) if a1 > a0 else float("nan")
vad = "" if sys.argv[9] == "asr" else f" + VAD {(v1 - v0) / 1e6 / (a1 - a0):.3f}" if a1 > a0 else ""
print(f"{errs / words:.3f} | {cpu:.3f}{vad}")
PY
)
    line="$line $cell |"
  done
  bench_log "$cond: $line"
  rows+=("$line")
done

cat <<EOF

### Word error rate in noise: asr_silero (silero VAD gate) vs asr (energy VAD)

$(bench_machine). Command: \`$(bench_command SNRS)\`.
The five LibriVox recordings (their \`transcription\` file as reference), clean and mixed
with white noise (seeded) and babble (the other four recordings summed) at each SNR;
each file streamed in 100 ms chunks as fast as replies come. CPU: the recogniser's
seconds per audio second over the condition (gated: + silero_vad's compute time).

| condition | asr WER | asr CPU s / audio s | asr_silero WER | asr_silero CPU s / audio s |
| --- | ---: | ---: | ---: | ---: |
$(printf '%s\n' "${rows[@]}")
EOF
