#!/usr/bin/env bash
# bench/vad_throughput.sh — frames/s of silero_vad (Silero VAD v5, FRAMES
# 512-sample frames per request and sequence) through harkd with N
# concurrent sequences, against the bare library: the same TorchScript
# file called in a loop by libtorch at batch N (tools/silero/bare_loop.py),
# and against the same model with max_batch_size 1 (silero_vad_b1: no
# batching across streams), all in one run on one harkd.
#
# The load is tools/bench/vad_load (bin/vad_load): N keep-alive HTTP
# connections, one sequence each, closed loop, binary tensors. The bare
# loop uses as many libtorch threads as harkd gives the model in all: the
# intra-op threads per instance (from harkd's log; INTRA_OP_THREAD_COUNT, 1
# in the shipped config) times its instances (2 shipped). Prints a markdown snippet with the
# ratios hark/bare (goal >= 0.8 at N >= 64) and batched/unbatched
# (goal >= 5x).
#
# Env: BUILD_DIR (default ./build), SEQUENCES ("1 16 64 256 512"),
# DURATION and WARMUP, whole seconds per measurement and before it (5, 2),
# FRAMES per request (1: a 32 ms frame; 3 or 4: a streaming client's
# 100 ms chunk, what the gated speech model sends; the bare loop's calls
# carry as many).
# About 4 minutes.
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

SEQUENCES=${SEQUENCES:-1 16 64 256 512}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-2}
FRAMES=${FRAMES:-1}
export FRAMES
LOAD=$BUILD_DIR/bin/vad_load
MODEL_FILE=$BENCH_ROOT/models/silero_vad/1/model.pt

bench_need "$HARKD" "$LOAD" curl "$PY"
[[ -f $MODEL_FILE ]] || bench_die "$MODEL_FILE is missing (scripts/setup.sh makes it)"

# One repository: the shipped silero_vad and a copy limited to batch 1.
repo=$BENCH_TMP/models
mkdir -p "$repo/silero_vad_b1/1"
ln -s "$BENCH_ROOT/models/silero_vad" "$repo/silero_vad"
ln -s "$MODEL_FILE" "$repo/silero_vad_b1/1/model.pt"
sed -e 's/^name: "silero_vad"/name: "silero_vad_b1"/' -e 's/^max_batch_size: 512/max_batch_size: 1/' -e '/preferred_batch_size/d' -e '/BATCH_PAD_MULTIPLE/d' \
  "$BENCH_ROOT/models/silero_vad/config.pbtxt" >"$repo/silero_vad_b1/config.pbtxt"
grep -q '^max_batch_size: 1$' "$repo/silero_vad_b1/config.pbtxt" ||
  bench_die "models/silero_vad/config.pbtxt changed shape: cannot derive silero_vad_b1"

HARKD_PORT=$(bench_free_port)
HARKD_URL=127.0.0.1:$HARKD_PORT
bench_spawn "$BENCH_TMP/harkd.log" "$HARKD" --model-repository "$repo" \
  --http-address 127.0.0.1 --http-port "$HARKD_PORT" --metrics-port "$(bench_free_port)" \
  --grpc-port -1
bench_wait_http "http://$HARKD_URL/v2/health/ready" 60 ||
  { cat "$BENCH_TMP/harkd.log" >&2; bench_die "harkd did not become ready"; }
# The bare loop gets as many libtorch threads as harkd gives the model.
THREADS=$(grep -o "model 'silero_vad' .*intra-op threads [0-9]*" "$BENCH_TMP/harkd.log" | head -1 |
  grep -o '[0-9]*$')
[[ -n $THREADS ]] || bench_die "no intra-op thread count for silero_vad in harkd's log"
INSTANCES=$(grep -o '^instance_group \[ { count: [0-9]*' "$BENCH_ROOT/models/silero_vad/config.pbtxt" |
  grep -o '[0-9]*$')
[[ -n $INSTANCES ]] || bench_die "no instance count in models/silero_vad/config.pbtxt"
bench_log "harkd ready at $HARKD_URL; silero_vad: $INSTANCES instance(s) of $THREADS intra-op thread(s)"
THREADS=$((THREADS * INSTANCES))

# hark MODEL N: frames/s through harkd; sets FPS P50 P99.
hark() {
  local out=$BENCH_TMP/$1-$2.json
  timeout $((DURATION + WARMUP + 60)) "$LOAD" 127.0.0.1 "$HARKD_PORT" "$1" audio "${FRAMES}x512" "$2" \
    "$DURATION" "$WARMUP" >"$out" 2>"$out.log" || { cat "$out.log" >&2; bench_die "vad_load $1 $2 failed"; }
  FPS=$(bench_json "$out" 'd["frames_per_sec"]')
  P50=$(bench_json "$out" 'd["p50_us"]')
  P99=$(bench_json "$out" 'd["p99_us"]')
}

# bare N: frames/s of the bare loop at batch N; sets FPS.
bare() {
  FPS=$(timeout $((DURATION + 120)) "$PY" "$BENCH_ROOT/tools/silero/bare_loop.py" "$MODEL_FILE" \
    "$THREADS" "$DURATION" "$1" | $PY -c 'import json,sys; print(json.load(sys.stdin)["frames_per_sec"])')
}

rows=()
for n in $SEQUENCES; do
  hark silero_vad "$n"
  h=$FPS hp50=$P50 hp99=$P99
  hark silero_vad_b1 "$n"
  u=$FPS
  bare "$n"
  b=$FPS
  hb=$(bench_ratio "$h" "$b" 2)
  hu="$(bench_ratio "$h" "$u" 1)×"
  # At large N a max_batch_size 1 frame may wait longer than the window.
  [[ $hu == nan× ]] && hu="∞ (no max_batch_size 1 reply within ${DURATION} s)"
  bench_log "N=$n: hark $h frames/s (p50 $hp50 us, p99 $hp99 us), max_batch_size 1: $u, bare: $b;" \
    "hark/bare $hb, batched/unbatched $hu"
  rows+=("| $n | $h | $hp50 | $hp99 | $u | $b | $hb | $hu |")
done

cat <<EOF

### silero_vad throughput: hark vs bare libtorch, batched vs max_batch_size 1

$(bench_machine). Command: \`$(bench_command SEQUENCES DURATION WARMUP FRAMES)\`.
One harkd; N concurrent sequences, $FRAMES 512-sample frame(s) per request (vad_load, closed
loop, HTTP binary tensors); bare: the same model.pt at batch N, $FRAMES frame(s) per row, in a
libtorch loop, $THREADS threads (harkd: $INSTANCES instance(s) of $((THREADS / INSTANCES))).
${DURATION} s per measurement after ${WARMUP} s of warmup.

| N | hark frames/s | p50 µs | p99 µs | max_batch_size 1 frames/s | bare frames/s | hark/bare | batched/unbatched |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
$(printf '%s\n' "${rows[@]}")

Goals: hark/bare ≥ 0.8 at N ≥ 64; batched/unbatched ≥ 5×.
EOF
