#!/usr/bin/env bash
# bench/neural_precision.sh — issue 27's precision figures for backend
# neural_asr: the bench's 20M transducer served at each of PRECISIONS
# ("fp32 int8 bf16"; the `precision` parameter, made at load from the same
# FP32 TorchScript file):
#
#   1. agreement with FP32: one harkd serving the model three times (one
#      per precision, same config otherwise), `hark transcribe --json` of
#      the five LibriVox files through each (no pacing: the tokens do not
#      depend on it); per precision, the words that differ from FP32's
#      transcript (Levenshtein over words: substitutions + insertions +
#      deletions) against FP32's word count, per file and in all. The bench
#      model has random weights, so its "words" are the pieces between its
#      word-start tokens: a changed token changes a word. The trained
#      model's WER per precision is tests/e2e/test_neural_precision.py's.
#   2. per precision, bench/neural_streams.sh FIGURES="streams efficiency"
#      (INSTANCES 2, INTRA 1, no max_batch_size 1 search): the streams held
#      within issue 26's bars, harkd's CPU seconds per stream-second at that
#      N, the bare loop's (FP32: the bare loop knows no other precision),
#      and harkd's idle and per-stream resident memory. ORDER ("fp32 int8
#      bf16 fp32"): the runs in order, so FP32 is measured before and after.
#
# Env: BUILD_DIR, PRECISIONS, ORDER, MODEL_SIZE (20m), AUDIO_DIR, SKIP_STREAMS
# (1: agreement only). Output: markdown on stdout.
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PRECISIONS=${PRECISIONS:-fp32 int8 bf16}
ORDER=${ORDER:-fp32 int8 bf16 fp32}
MODEL_SIZE=${MODEL_SIZE:-20m}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
SKIP_STREAMS=${SKIP_STREAMS:-}
bench_need "$HARKD" "$HARK" curl "$PY"
shopt -s nullglob
FILES=("$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no .wav files in $AUDIO_DIR (apt install pocketsphinx-testdata)"
MODEL_DIR=$($PY -c 'import sys; sys.path.insert(0, sys.argv[1]); import asr_models
print(asr_models.model_dir("transducer", sys.argv[2], 1))' "$BENCH_ROOT/tests/e2e" "$MODEL_SIZE") ||
  bench_die "could not make the $MODEL_SIZE model"
bench_log "model: $MODEL_DIR"

# ---- 1. agreement ----------------------------------------------------------------
BENCH_REPO=$BENCH_TMP/repo
export BENCH_REPO
# shellcheck disable=SC2086 # PRECISIONS: a list, split on purpose
$PY - "$BENCH_ROOT/tests/e2e" "$BENCH_REPO" "$MODEL_DIR" $PRECISIONS <<'PY' || bench_die "cannot write the repository"
import sys
sys.path.insert(0, sys.argv[1])
import asr_models
repo, model = sys.argv[2:4]
for p in sys.argv[4:]:
    cfg = asr_models.config(f"nasr_{p}", max_batch=64, instances=1, params={"precision": p})
    asr_models.make_model_folder(repo, f"nasr_{p}", model, cfg)
PY
bench_start_harkd --stream-backlog-limit 1000000
for p in $PRECISIONS; do
  curl -sf -o /dev/null "http://$HARKD_URL/v2/models/nasr_$p/ready" ||
    bench_die "nasr_$p is not ready: $(grep -i "nasr_$p" "$BENCH_TMP/harkd.log" | tail -2)"
  timeout 600 "$HARK" transcribe --server "$HARKD_URL" --model "nasr_$p" --json "${FILES[@]}" \
    >"$BENCH_TMP/agree-$p.json" 2>"$BENCH_TMP/agree-$p.log" ||
    bench_die "transcribe on nasr_$p failed: $(tail -c 300 "$BENCH_TMP/agree-$p.log")"
done

cat <<EOF

### neural_asr: INT8 and BF16 against FP32 (issue 27)

$(bench_machine). Command: \`$(bench_command PRECISIONS ORDER MODEL_SIZE SKIP_STREAMS MAX_BATCH FIRST_WORD_PROBES)\`.
Model: \`$MODEL_SIZE\` transducer (\`$(basename "$MODEL_DIR")\`), the same model.pt at each precision.

**Agreement with FP32** (\`hark transcribe --json\` of the LibriVox files through each precision;
words that differ from FP32's transcript, by Levenshtein distance over words):

EOF
# shellcheck disable=SC2086 # the same list
$PY - "$BENCH_TMP" $PRECISIONS <<'PY'
import json, os, sys
tmp, precs = sys.argv[1], sys.argv[2:]
def words(p):
    d = json.load(open(os.path.join(tmp, f"agree-{p}.json")))
    return {os.path.basename(f["file"]): " ".join(s["transcript"] for s in f["streams"]).split()
            for f in d["files"]}
def dist(a, b):
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i] + [0] * len(b)
        for j, y in enumerate(b, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y))
        prev = cur
    return prev[-1]
ref = words("fp32")
files = sorted(ref)
print("| precision | " + " | ".join(files) + " | all | agreement |")
print("|---|" + "---:|" * (len(files) + 2))
for p in precs:
    w = words(p)
    per = [(dist(ref[f], w.get(f, [])), len(ref[f])) for f in files]
    d, n = sum(x for x, _ in per), sum(y for _, y in per)
    print(f"| {p} | " + " | ".join(f"{a}/{b}" for a, b in per) +
          f" | {d}/{n} | {100 * (1 - d / n if n else 0):.1f}% |")
PY
echo
echo "Idle RSS with the three loaded at once: $(( $(awk '/^VmRSS:/ { print $2 }' "/proc/$BENCH_LAST_PID/status") / 1024 )) MiB."
kill -TERM "$BENCH_LAST_PID" 2>/dev/null || true
wait "$BENCH_LAST_PID" 2>/dev/null || true

# ---- 2. streams and CPU per precision ------------------------------------------------
[[ -n $SKIP_STREAMS ]] && exit 0
echo
echo "**Streams within the bars, CPU and memory** (\`bench/neural_streams.sh\` FIGURES=\"streams efficiency\""
echo "INSTANCES=2 INTRA=1 B1_CONFIGS=\"\" PRECISION=P, in the order run):"
echo
echo "| run | precision | N held (smallest failing) | chunk p99 ms at N | harkd CPU s per stream-s | bare loop (FP32) at the same batch | mean batch | idle RSS MiB | RSS MiB per stream | load before |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
i=0
for p in $ORDER; do
  i=$((i + 1))
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$BENCH_TMP/streams-$i
  mkdir -p "$out"
  BUILD_DIR=$BUILD_DIR PRECISION=$p INSTANCES=2 INTRA=1 B1_CONFIGS="" FIGURES="streams efficiency" \
    KEEP_RESULTS=$out MODEL_DIR=$MODEL_DIR "$BENCH_ROOT/bench/neural_streams.sh" >"$out/report.md" 2>"$out/log" ||
    bench_die "neural_streams.sh at $p failed: $(tail -c 400 "$out/log")"
  $PY - "$out" "$p" "$i" "$load" <<'PY'
import glob, json, os, re, sys
out, p, i, load = sys.argv[1:5]
rep = open(os.path.join(out, "report.md")).read()
log = open(os.path.join(out, "log")).read()
m = re.search(r"\*\*N = (\d+)\*\* \(smallest failing: (\d+)\)", rep)
n, hi = (m.group(1), m.group(2)) if m else ("?", "?")
row = None
for f in glob.glob(os.path.join(out, "batched-*.json")):
    d = json.load(open(f))
    if str(d.get("n")) == n:
        row = d
h = re.search(r"\| harkd, every thread \| ([0-9.]+)", rep)
b = re.search(r"\| bare loop, batch (\d+), \d+ threads \| ([0-9.]+)", rep)
idle = re.search(r"idle RSS (\d+) MiB", log)
get = lambda k: row.get(k, "?") if row else "?"
print(f"| {i} | {p} | {n} ({hi}) | {row['chunk']['p99'] if row and 'chunk' in row else '?'} | {h.group(1) if h else '?'} | "
      f"{b.group(2) if b else '?'} | {get('mean_batch')} | {idle.group(1) if idle else '?'} | "
      f"{get('rss_per_stream_mib')} | {load} |")
PY
done
