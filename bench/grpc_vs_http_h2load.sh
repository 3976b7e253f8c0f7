#!/usr/bin/env bash
# bench/grpc_vs_http_h2load.sh — the server's KServe inference rate over
# gRPC against the same over HTTP, one harkd, one neutral load generator
# (h2load, from nghttp2-client) for both, so neither side's client is what
# is measured.
#
# HTTP: POST /v2/models/$MODEL/infer with Triton's JSON body over HTTP/1.1
# keep-alive (h2load --h1). gRPC: unary
# inference.GRPCInferenceService/ModelInfer over h2c, the request a
# length-prefixed ModelInferRequest with raw_input_contents (what Triton's
# clients send), one call at a time per connection (-m 1), as HTTP/1.1 has.
# Both: CLIENTS connections on THREADS h2load threads, DURATION seconds after
# a one-second warm-up, alternated within each round. h2load counts HTTP
# status only, and a gRPC error travels in a 200's trailers, so the run also
# reads the server's nv_inference_request_success counter before and after
# each run: every request h2load counts must be a success there.
#
# Env: BUILD_DIR (./build), ROUNDS (3), DURATION (5), CLIENTS (16),
# THREADS (1), MODEL (simple: INT32 [1,16] INPUT0, INPUT1).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
CLIENTS=${CLIENTS:-16}
THREADS=${THREADS:-1}
MODEL=${MODEL:-simple}

bench_need "$HARKD" h2load curl "$PY"
GRPC_PORT=$(bench_free_port)
bench_start_harkd --grpc-port "$GRPC_PORT"

# The two request bodies: the same tensors.
cat >"$BENCH_TMP/infer.json" <<EOF
{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}
EOF
$PY - "$BENCH_ROOT/proto" "$BENCH_TMP" "$MODEL" <<'EOF'
import struct, sys
from grpc_tools import protoc
proto, out, model = sys.argv[1:4]
if protoc.main(["protoc", f"-I{proto}", f"--python_out={out}", f"{proto}/grpc_service.proto",
                f"{proto}/model_config.proto"]) != 0:
    sys.exit("protoc failed")
sys.path.insert(0, out)
import grpc_service_pb2 as pb
q = pb.ModelInferRequest(model_name=model)
for name, values in (("INPUT0", range(16)), ("INPUT1", [1] * 16)):
    q.inputs.add(name=name, datatype="INT32", shape=[1, 16])
    q.raw_input_contents.append(struct.pack("<16i", *values))
body = q.SerializeToString()
open(f"{out}/infer.grpc", "wb").write(b"\0" + struct.pack(">I", len(body)) + body)
EOF

successes() {
  curl -sf "http://127.0.0.1:$HARKD_METRICS_PORT/metrics" |
    awk -v m="$MODEL" '$1 ~ "^nv_inference_request_success[{]model=\"" m "\"" {s += $2} END {print s + 0}'
}

# run PROTO: one h2load run; prints "req/s completed".
run() {
  local args=(-c "$CLIENTS" -t "$THREADS" -m 1 -D "$DURATION" --warm-up-time 1)
  if [[ $1 == http ]]; then
    args+=(--h1 -H 'content-type: application/json' -d "$BENCH_TMP/infer.json"
      "http://$HARKD_URL/v2/models/$MODEL/infer")
  else
    args+=(-H 'content-type: application/grpc' -H 'te: trailers' -d "$BENCH_TMP/infer.grpc"
      "http://127.0.0.1:$GRPC_PORT/inference.GRPCInferenceService/ModelInfer")
  fi
  local before after out
  before=$(successes)
  out=$(timeout $((DURATION + 30)) h2load "${args[@]}" 2>&1) || { echo "$out" >&2; bench_die "h2load $1 failed"; }
  after=$(successes)
  local rps done2xx failed
  rps=$(awk '/^finished in/ {print $4}' <<<"$out" | tr -d ',')
  done2xx=$(awk '/^status codes:/ {print $3}' <<<"$out")
  failed=$(awk '/^requests:/ {for (i = 1; i <= NF; i++) if ($(i+1) ~ /^(failed|errored|timeout)/) n += $i} END {print n + 0}' <<<"$out")
  if [[ $failed != 0 || -z $done2xx || $done2xx == 0 ]]; then
    echo "$out" >&2
    tail -20 "$BENCH_TMP/harkd.log" >&2
    bench_die "$1: $failed failed, errored or timed-out requests, ${done2xx:-no} 2xx replies"
  fi
  # Warm-up requests count at the server, not in h2load's totals.
  ((after - before >= done2xx)) ||
    bench_die "$1: h2load saw $done2xx 2xx replies but the server counted $((after - before)) successes"
  echo "$rps $done2xx"
}

declare -A RPS
RATIOS=""
for ((r = 1; r <= ROUNDS; r++)); do
  bench_log "round $r/$ROUNDS (load $(cut -d' ' -f1 /proc/loadavg))"
  order=(http grpc)
  ((r % 2 == 0)) && order=(grpc http)
  for p in "${order[@]}"; do
    read -r rps n < <(run "$p")
    RPS[$p]+="$rps "
    bench_log "  $p: $rps req/s ($n requests)"
  done
  g=$(awk '{print $NF}' <<<"${RPS[grpc]}") h=$(awk '{print $NF}' <<<"${RPS[http]}")
  RATIOS+="$(bench_ratio "$g" "$h" 3) "
done

med() { read -ra v <<<"$1"; bench_median "${v[@]}"; }
cat <<EOF

### KServe inference: gRPC vs HTTP, both driven by h2load (model \`$MODEL\`)

$(bench_machine); load average after: $(cut -d' ' -f1-3 /proc/loadavg). Command: \`$(bench_command ROUNDS DURATION CLIENTS THREADS MODEL)\`.
h2load $CLIENTS clients on $THREADS thread(s), one request at a time per connection, ${DURATION} s after a 1 s warm-up;
HTTP/1.1 keep-alive with the JSON body vs unary ModelInfer over h2c with raw_input_contents; order alternated by round.
Every request h2load counted was a success in the server's \`nv_inference_request_success\`.

| | gRPC req/s | HTTP req/s | gRPC / HTTP |
| --- | ---: | ---: | ---: |
| median of $ROUNDS rounds | $(med "${RPS[grpc]}") | $(med "${RPS[http]}") | $(med "$RATIOS") |
| rounds | ${RPS[grpc]% } | ${RPS[http]% } | ${RATIOS% } |
EOF
