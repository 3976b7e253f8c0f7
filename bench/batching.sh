#!/usr/bin/env bash
# bench/batching.sh — what dynamic batching buys on a model whose every
# execution costs the same 2 ms whatever the batch (models/fixed_cost, max
# batch 8, dynamic batching) against the same model without it
# (models/fixed_cost_nobatch), both served by one harkd in the same run.
#
# For ROUNDS rounds, alternating the models, it runs hark perf at
# concurrency 16 (the gain: throughput ratio, goal >= 4x) and at
# concurrency 1 (the cost: with nothing to batch, any extra queue time is
# the batcher's overhead). Queue time per request comes from the
# /v2/models/{m}/stats "queue" ns/count delta around each run. Prints a
# markdown snippet.
#
# MODE=adaptive measures adaptive_queue_delay instead: the same 2 ms model
# with a fixed small delay (100 us), a fixed large one (5 ms) and an
# adaptive one between the two, at concurrency 1 (low load: latency, where
# adaptive should match small), 6 (a batch that never fills: large waits
# out its 5 ms every time) and 32 (high load: throughput), with the mean
# batch size from /v2/models/{m}/stats.
#
# Env: BUILD_DIR (default ./build), ROUNDS (3), DURATION seconds per run (5),
# MODE (batching | adaptive).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
PERF_INTERVAL_MS=$((DURATION * 1000))
PERF_WARMUP_MS=${PERF_WARMUP_MS:-1000}
BATCHED=fixed_cost
UNBATCHED=fixed_cost_nobatch

bench_need "$HARKD" "$HARK" curl "$PY"

# adaptive_model NAME DYNAMIC_BATCHING_BODY: models/fixed_cost under another
# name and batching block, in $BENCH_REPO.
adaptive_model() {
  mkdir -p "$BENCH_REPO/$1/1"
  sed -e "s/^name: .*/name: \"$1\"/" -e "s/^dynamic_batching .*/dynamic_batching { $2 }/" \
    "$BENCH_ROOT/models/fixed_cost/config.pbtxt" >"$BENCH_REPO/$1/config.pbtxt"
}

# exec_stats MODEL: "inferences executions" of the model so far.
exec_stats() {
  curl -sf --max-time 5 "http://$HARKD_URL/v2/models/$1/stats" |
    $PY -c 'import json,sys; s=json.load(sys.stdin)["model_stats"][0]; print(s["inference_count"], s["execution_count"])'
}

adaptive_mode() {
  local models=(fc_small fc_large fc_adaptive) levels=(1 6 32) r m c out before after
  BENCH_REPO=$BENCH_TMP/repo
  adaptive_model fc_small "max_queue_delay_microseconds: 100"
  adaptive_model fc_large "max_queue_delay_microseconds: 5000"
  adaptive_model fc_adaptive "adaptive_queue_delay { min_microseconds: 100 max_microseconds: 5000 }"
  bench_start_harkd
  declare -A A
  for ((r = 1; r <= ROUNDS; r++)); do
    bench_log "round $r/$ROUNDS: concurrency ${levels[*]} on ${models[*]} (${DURATION}s each)"
    for c in "${levels[@]}"; do
      for m in "${models[@]}"; do
        out=$BENCH_TMP/$m-$c-$r.json
        before=$(exec_stats "$m")
        bench_perf "$out" -m "$m" -u "$HARKD_URL" --concurrency-range "$c" \
          --measurement-interval "$PERF_INTERVAL_MS" --warmup "$PERF_WARMUP_MS"
        after=$(exec_stats "$m")
        local thr p50 p99 batch
        thr=$(bench_json "$out" 'd["results"][0]["throughput_infer_per_sec"]')
        p50=$(bench_json "$out" 'd["results"][0]["latency_us"]["p50"]')
        p99=$(bench_json "$out" 'd["results"][0]["latency_us"]["p99"]')
        batch=$(awk -v b="$before" -v a="$after" 'BEGIN { split(b, x, " "); split(a, y, " ");
          n = y[2] - x[2]; printf "%.2f\n", (n > 0 ? (y[1] - x[1]) / n : 0) }')
        A[$m,$c,thr]+="$thr " A[$m,$c,p50]+="$p50 " A[$m,$c,p99]+="$p99 " A[$m,$c,batch]+="$batch "
        bench_log "  $m c$c: $thr infer/s, p50 $p50 us, p99 $p99 us, mean batch $batch"
      done
    done
  done
  amed() { local v; read -ra v <<<"${A[$1,$2,$3]}"; bench_median "${v[@]}"; }
  cat <<EOF

### Adaptive queue delay on a fixed-cost model

$(bench_machine). Command: \`$(bench_command ROUNDS DURATION MODE)\`.
Median of $ROUNDS rounds, one harkd. models/fixed_cost (2 ms per execution, max batch 8, one
instance) with \`max_queue_delay_microseconds: 100\` (fc_small), \`5000\` (fc_large), and
\`adaptive_queue_delay { min_microseconds: 100 max_microseconds: 5000 }\` (fc_adaptive, target
depth 8). Mean batch: inference_count / execution_count over each run (warmup included).

| concurrency | model | infer/s | p50 µs | p99 µs | mean batch |
| ---: | --- | ---: | ---: | ---: | ---: |
EOF
  for c in "${levels[@]}"; do
    for m in "${models[@]}"; do
      echo "| $c | $m | $(amed "$m" "$c" thr) | $(amed "$m" "$c" p50) | $(amed "$m" "$c" p99) | $(amed "$m" "$c" batch) |"
    done
  done
  local lo hi
  lo=$(bench_ratio "$(amed fc_adaptive 1 p50)" "$(amed fc_small 1 p50)" 2)
  hi=$(bench_ratio "$(amed fc_adaptive 32 thr)" "$(amed fc_small 32 thr)" 2)
  echo
  echo "- Low load (c1) p50, adaptive / small: **${lo}×**; high load (c32) throughput, adaptive / small: **${hi}×**."
}

if [[ ${MODE:-batching} == adaptive ]]; then
  adaptive_mode
  exit 0
fi

for m in $BATCHED $UNBATCHED; do
  [[ -f $BENCH_ROOT/models/$m/config.pbtxt ]] || bench_die "models/$m is missing"
done
bench_start_harkd

# queue_stats MODEL: "count ns" of the model's cumulative queue statistics.
queue_stats() {
  curl -sf --max-time 5 "http://$HARKD_URL/v2/models/$1/stats" |
    $PY -c 'import json,sys; q=json.load(sys.stdin)["model_stats"][0]["inference_stats"]["queue"]; print(q["count"], q["ns"])'
}

# run MODEL CONCURRENCY: one hark perf run; sets THR P50 P99 QUEUE_US.
run() {
  local out=$BENCH_TMP/$1-$2.json before after
  before=$(queue_stats "$1") || bench_die "no stats for $1"
  bench_perf "$out" -m "$1" -u "$HARKD_URL" --concurrency-range "$2" \
    --measurement-interval "$PERF_INTERVAL_MS" --warmup "$PERF_WARMUP_MS"
  after=$(queue_stats "$1")
  THR=$(bench_json "$out" 'd["results"][0]["throughput_infer_per_sec"]')
  P50=$(bench_json "$out" 'd["results"][0]["latency_us"]["p50"]')
  P99=$(bench_json "$out" 'd["results"][0]["latency_us"]["p99"]')
  [[ $(bench_json "$out" 'd["results"][0]["errors"]') == 0 ]] || bench_log "warning: $1 at $2 saw errors"
  # The stats cover warmup too; the average per request is what matters.
  QUEUE_US=$(awk -v b="$before" -v a="$after" 'BEGIN { split(b, x, " "); split(a, y, " ");
    n = y[1] - x[1]; printf "%.1f\n", (n > 0 ? (y[2] - x[2]) / n / 1000 : 0) }')
}

declare -A R # R[model,concurrency,field] -> list of values, space separated
for ((r = 1; r <= ROUNDS; r++)); do
  bench_log "round $r/$ROUNDS: concurrency 16 and 1 on each model (${DURATION}s each)"
  for c in 16 1; do
    for m in $BATCHED $UNBATCHED; do
      run "$m" "$c"
      R[$m,$c,thr]+="$THR " R[$m,$c,p50]+="$P50 " R[$m,$c,p99]+="$P99 " R[$m,$c,queue]+="$QUEUE_US "
      bench_log "  $m c$c: $THR infer/s, p50 $P50 us, p99 $P99 us, queue $QUEUE_US us/request"
    done
  done
done
ratios=() # per round: batched / unbatched at concurrency 16
read -ra tb <<<"${R[$BATCHED,16,thr]}"
read -ra tu <<<"${R[$UNBATCHED,16,thr]}"
for ((i = 0; i < ROUNDS; i++)); do ratios+=("$(bench_ratio "${tb[i]}" "${tu[i]}" 2)"); done

med() { local v; read -ra v <<<"${R[$1,$2,$3]}"; bench_median "${v[@]}"; }
ratio=$(bench_median "${ratios[@]}")
verdict=$(awk -v v="$ratio" 'BEGIN { print (v >= 4 ? "met" : "NOT met") }')
q_cost=$(awk -v a="$(med $BATCHED 1 queue)" -v b="$(med $UNBATCHED 1 queue)" 'BEGIN { printf "%+.1f\n", a - b }')
p50_cost=$(awk -v a="$(med $BATCHED 1 p50)" -v b="$(med $UNBATCHED 1 p50)" 'BEGIN { printf "%+.1f\n", a - b }')

cat <<EOF

### Dynamic batching on a fixed-cost model

$(bench_machine). Command: \`$(bench_command ROUNDS DURATION)\`.
Median of $ROUNDS rounds, models alternated, one harkd. \`$BATCHED\`: 2 ms per execution, max batch 8,
dynamic batching; \`$UNBATCHED\`: the same without dynamic batching. Queue time: /v2/models/{m}/stats
queue ns / count over each run (warmup included).

| model | concurrency | infer/s | p50 µs | p99 µs | queue µs/request |
| --- | ---: | ---: | ---: | ---: | ---: |
| $BATCHED | 16 | $(med $BATCHED 16 thr) | $(med $BATCHED 16 p50) | $(med $BATCHED 16 p99) | $(med $BATCHED 16 queue) |
| $UNBATCHED | 16 | $(med $UNBATCHED 16 thr) | $(med $UNBATCHED 16 p50) | $(med $UNBATCHED 16 p99) | $(med $UNBATCHED 16 queue) |
| $BATCHED | 1 | $(med $BATCHED 1 thr) | $(med $BATCHED 1 p50) | $(med $BATCHED 1 p99) | $(med $BATCHED 1 queue) |
| $UNBATCHED | 1 | $(med $UNBATCHED 1 thr) | $(med $UNBATCHED 1 p50) | $(med $UNBATCHED 1 p99) | $(med $UNBATCHED 1 queue) |

- Throughput gain at concurrency 16: **${ratio}×** (goal ≥ 4×: $verdict); per round: ${ratios[*]}.
- Cost of batching with nothing to batch (concurrency 1, batched − unbatched): queue ${q_cost} µs/request, p50 ${p50_cost} µs.
EOF
