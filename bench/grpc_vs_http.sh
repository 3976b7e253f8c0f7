#!/usr/bin/env bash
# bench/grpc_vs_http.sh — KServe v2 inference over gRPC against the same
# over HTTP/REST, same server, same run, same load generator.
#
# Starts one harkd (HTTP and gRPC) and, for ROUNDS rounds, at each
# concurrency in CONCURRENCY, runs `hark perf -m simple` over HTTP (binary
# tensors, the closest to gRPC's raw_input_contents) and over gRPC, the two
# alternated within the round so drift hits both alike. Each client thread
# has its own connection either way. Reports, per concurrency, the medians
# of throughput and p50/p99 latency and the median of the per-round
# grpc/http throughput ratios, as a markdown snippet, with the load average
# before and after.
#
# Env: BUILD_DIR (default ./build), ROUNDS (3), DURATION seconds per run (5),
# CONCURRENCY ("1 4 16"), MODEL (simple).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CONCURRENCY=${CONCURRENCY:-"1 4 16"}
MODEL=${MODEL:-simple}
PERF_INTERVAL_MS=$((DURATION * 1000))
PERF_WARMUP_MS=${PERF_WARMUP_MS:-1000}

bench_need "$HARKD" "$HARK" curl "$PY"
GRPC_PORT=$(bench_free_port) # a later --grpc-port wins over lib.sh's -1
bench_start_harkd --grpc-port "$GRPC_PORT"

# run PROTO C OUT.json: one measured level.
run() {
  local url=$HARKD_URL
  [[ $1 == grpc ]] && url=127.0.0.1:$GRPC_PORT
  local extra=()
  [[ $1 == http ]] && extra=(--binary)
  bench_perf "$3" -m "$MODEL" -i "$1" -u "$url" "${extra[@]}" --concurrency-range "$2" \
    --measurement-interval "$PERF_INTERVAL_MS" --warmup "$PERF_WARMUP_MS"
}

declare -A THR P50 P99 RATIO # "proto c" / "c" -> space-separated per-round values
for ((r = 1; r <= ROUNDS; r++)); do
  bench_log "round $r/$ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))"
  for c in $CONCURRENCY; do
    order=(http grpc)
    ((r % 2 == 0)) && order=(grpc http) # alternate who goes first
    for p in "${order[@]}"; do
      out=$BENCH_TMP/$p-$c-$r.json
      run "$p" "$c" "$out"
      THR[$p $c]+="$(bench_json "$out" 'd["results"][0]["throughput_infer_per_sec"]') "
      P50[$p $c]+="$(bench_json "$out" 'd["results"][0]["latency_us"]["p50"]') "
      P99[$p $c]+="$(bench_json "$out" 'd["results"][0]["latency_us"]["p99"]') "
      errs=$(bench_json "$out" 'd["results"][0]["errors"]')
      [[ $errs == 0 ]] || bench_die "$p at concurrency $c: $errs failed requests"
    done
    g=$(awk '{print $NF}' <<<"${THR[grpc $c]}") h=$(awk '{print $NF}' <<<"${THR[http $c]}")
    RATIO[$c]+="$(bench_ratio "$g" "$h" 3) "
    bench_log "  c=$c: grpc $g infer/s, http $h infer/s"
  done
done

med() { read -ra v <<<"$1"; bench_median "${v[@]}"; }
# The command to rerun this, values quoted (CONCURRENCY has spaces).
command_line() {
  local v out="BUILD_DIR=${BUILD_DIR#"$BENCH_ROOT"/}"
  for v in ROUNDS DURATION CONCURRENCY MODEL; do out+=" $v=$(printf '%q' "${!v}")"; done
  echo "$out bench/$(basename "$0")"
}

cat <<EOF

### KServe inference: gRPC vs HTTP (\`hark perf\`, model \`$MODEL\`)

$(bench_machine); load average after: $(cut -d' ' -f1-3 /proc/loadavg). Command: \`$(command_line)\`.
One harkd serving both; per round and concurrency, \`hark perf -i http --binary\` and \`hark perf -i grpc\`
(raw_input_contents) back to back, order alternated by round, ${DURATION} s window after ${PERF_WARMUP_MS} ms warmup,
one connection per client thread. Medians of $ROUNDS rounds; ratio = median of the per-round grpc/http ratios.

| concurrency | gRPC infer/s | HTTP infer/s | gRPC / HTTP | gRPC p50 / p99 µs | HTTP p50 / p99 µs |
| ---: | ---: | ---: | ---: | ---: | ---: |
$(for c in $CONCURRENCY; do
  echo "| $c | $(med "${THR[grpc $c]}") | $(med "${THR[http $c]}") | $(med "${RATIO[$c]}") | $(med "${P50[grpc $c]}") / $(med "${P99[grpc $c]}") | $(med "${P50[http $c]}") / $(med "${P99[http $c]}") |"
done)

Per round (concurrency: gRPC / HTTP infer/s):
$(for c in $CONCURRENCY; do echo "- c=$c: gRPC ${THR[grpc $c]}/ HTTP ${THR[http $c]}"; done)
EOF
