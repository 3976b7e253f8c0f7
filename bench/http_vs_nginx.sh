#!/usr/bin/env bash
# bench/http_vs_nginx.sh — how close hark's HTTP front end gets to nginx
# serving a static reply, under the same load generators.
#
# Starts harkd and a private nginx (non-daemon, temp prefix, loopback, one
# worker per core) whose reply to every POST is byte-for-byte hark's
# `simple` response with the same Content-Type (it also serves hark's
# metadata, so `hark perf` can drive it too). Then, for ROUNDS rounds and
# alternating the two servers, it runs: wrk -t2 -c16 posting the same JSON
# body; hark perf at concurrency 16; and hark perf at concurrency 1 against
# hark for its p99. harkd runs with its default --http-thread-count (one
# event loop per core); with ONE_LOOP=1 (the default) a second harkd with
# --http-thread-count 1 gets the same wrk run each round, for comparison.
# Reports the medians and the hark/nginx ratios (goals: ratio >= 0.5, p99
# at concurrency 1 < 1 ms) as a markdown snippet.
#
# Env: BUILD_DIR (default ./build), ROUNDS (3), DURATION seconds per run (5),
# ONE_LOOP (1; 0 skips the one-loop comparison).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
PERF_INTERVAL_MS=$((DURATION * 1000))
PERF_WARMUP_MS=${PERF_WARMUP_MS:-1000}
ONE_LOOP=${ONE_LOOP:-1}
WORKERS=$(nproc)
INFER_PATH=/v2/models/simple/infer

bench_need "$HARKD" "$HARK" wrk nginx curl "$PY"
if ((ONE_LOOP)); then
  bench_start_harkd --http-thread-count 1
  HARK1_URL=$HARKD_URL
fi
bench_start_harkd

# The request body: the zero-valued `simple` request hark perf also sends.
BODY=$BENCH_TMP/body.json
$PY -c 'import json; z=[0]*16; print(json.dumps({"inputs":[
  {"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":z},
  {"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":z}]}, separators=(",",":")), end="")' >"$BODY"

# hark's actual reply, metadata and content type, for nginx to replay.
REPLY=$BENCH_TMP/reply.json
CTYPE=$(curl -sf --max-time 5 -o "$REPLY" -w '%{content_type}' -H 'Content-Type: application/json' \
  --data-binary @"$BODY" "http://$HARKD_URL$INFER_PATH") || bench_die "harkd rejected the simple request"
META=$(curl -sf --max-time 5 "http://$HARKD_URL/v2/models/simple")
CONFIG=$(curl -sf --max-time 5 "http://$HARKD_URL/v2/models/simple/config")
for doc in "$(cat "$REPLY")" "$META" "$CONFIG"; do
  [[ $doc != *[\'\$\\]* ]] || bench_die "a reply holds a quote, \$ or backslash; nginx 'return' cannot replay it as is"
done
bench_log "hark's reply: $(wc -c <"$REPLY") bytes, $CTYPE"

start_nginx() {
  local p=$BENCH_TMP/nginx
  mkdir -p "$p/tmp"
  NGINX_PORT=$(bench_free_port)
  NGINX_URL=127.0.0.1:$NGINX_PORT
  cat >"$p/nginx.conf" <<EOF
daemon off;
master_process on;
worker_processes $WORKERS;
pid $p/nginx.pid;
error_log $p/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $p/tmp/body;
  proxy_temp_path $p/tmp/proxy;
  fastcgi_temp_path $p/tmp/fastcgi;
  uwsgi_temp_path $p/tmp/uwsgi;
  scgi_temp_path $p/tmp/scgi;
  client_body_buffer_size 1m;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  types { }
  default_type $CTYPE;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location = /v2/models/simple { return 200 '$META'; }
    location = /v2/models/simple/config { return 200 '$CONFIG'; }
    location / { return 200 '$(cat "$REPLY")'; }
  }
}
EOF
  nginx -t -q -p "$p" -c "$p/nginx.conf" 2>"$p/test.log" || { cat "$p/test.log" >&2; bench_die "bad nginx config"; }
  bench_spawn "$p/stdout.log" nginx -p "$p" -c "$p/nginx.conf"
  bench_wait_http "http://$NGINX_URL/v2/models/simple" 10 || { cat "$p/error.log" >&2; bench_die "nginx did not start"; }
  local got
  got=$(curl -sf --max-time 5 -X POST --data-binary @"$BODY" "http://$NGINX_URL$INFER_PATH")
  [[ $got == "$(cat "$REPLY")" ]] || bench_die "nginx's reply differs from hark's"
  bench_log "nginx ready at $NGINX_URL ($WORKERS workers, pid $BENCH_LAST_PID)"
}
start_nginx

WRK_LUA=$BENCH_TMP/post.lua
cat >"$WRK_LUA" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[$(cat "$BODY")]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK rps=%.1f p50_us=%d p99_us=%d requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50), latency:percentile(99),
    summary.requests, e.connect + e.read + e.write + e.status + e.timeout))
end
EOF

# run_wrk HOST:PORT SECONDS: prints requests/s.
run_wrk() {
  local out=$BENCH_TMP/wrk.out
  timeout $(($2 + 30)) wrk -t2 -c16 -d"$2"s -s "$WRK_LUA" "http://$1$INFER_PATH" >"$out" 2>&1 ||
    { cat "$out" >&2; bench_die "wrk against $1 failed"; }
  local line errors
  line=$(grep '^WRK ' "$out") || { cat "$out" >&2; bench_die "no wrk result"; }
  errors=${line##*errors=}
  ((errors == 0)) || bench_log "warning: wrk against $1 saw $errors errors"
  line=${line#*rps=}
  echo "${line%% *}"
}

# run_perf HOST:PORT CONCURRENCY NAME: hark perf, result in $BENCH_TMP/NAME.json.
run_perf() {
  local out=$BENCH_TMP/$3.json
  bench_perf "$out" -m simple -u "$1" --concurrency-range "$2" \
    --measurement-interval "$PERF_INTERVAL_MS" --warmup "$PERF_WARMUP_MS"
  [[ $(bench_json "$out" 'd["results"][0]["errors"]') == 0 ]] || bench_log "warning: hark perf $3 saw errors"
}

bench_log "warming the servers up"
run_wrk "$HARKD_URL" 1 >/dev/null
run_wrk "$NGINX_URL" 1 >/dev/null
((ONE_LOOP)) && run_wrk "$HARK1_URL" 1 >/dev/null

declare -a WRK_H WRK_N WRK_R WRK_1 WRK_1R PERF_H PERF_N PERF_R P50_C1 P99_C1 THR_C1
for ((r = 1; r <= ROUNDS; r++)); do
  bench_log "round $r/$ROUNDS: wrk hark, wrk nginx, perf hark c16, perf nginx c16, perf hark c1 (${DURATION}s each)"
  WRK_H+=("$(run_wrk "$HARKD_URL" "$DURATION")")
  WRK_N+=("$(run_wrk "$NGINX_URL" "$DURATION")")
  WRK_R+=("$(bench_ratio "${WRK_H[-1]}" "${WRK_N[-1]}" 3)")
  if ((ONE_LOOP)); then
    WRK_1+=("$(run_wrk "$HARK1_URL" "$DURATION")")
    WRK_1R+=("$(bench_ratio "${WRK_1[-1]}" "${WRK_N[-1]}" 3)")
  fi
  run_perf "$HARKD_URL" 16 hark16
  run_perf "$NGINX_URL" 16 nginx16
  run_perf "$HARKD_URL" 1 hark1
  PERF_H+=("$(bench_json "$BENCH_TMP/hark16.json" 'd["results"][0]["throughput_infer_per_sec"]')")
  PERF_N+=("$(bench_json "$BENCH_TMP/nginx16.json" 'd["results"][0]["throughput_infer_per_sec"]')")
  PERF_R+=("$(bench_ratio "${PERF_H[-1]}" "${PERF_N[-1]}" 3)")
  P50_C1+=("$(bench_json "$BENCH_TMP/hark1.json" 'd["results"][0]["latency_us"]["p50"]')")
  P99_C1+=("$(bench_json "$BENCH_TMP/hark1.json" 'd["results"][0]["latency_us"]["p99"]')")
  THR_C1+=("$(bench_json "$BENCH_TMP/hark1.json" 'd["results"][0]["throughput_infer_per_sec"]')")
  bench_log "  wrk: hark ${WRK_H[-1]} req/s, nginx ${WRK_N[-1]} req/s (${WRK_R[-1]})${WRK_1:+, hark one loop ${WRK_1[-1]}}; hark perf c16: hark ${PERF_H[-1]}, nginx ${PERF_N[-1]} (${PERF_R[-1]}); c1 p99 ${P99_C1[-1]} us"
done

verdict() { awk -v v="$1" -v g="$2" -v op="$3" 'BEGIN { ok = op == ">=" ? v >= g : v < g; print ok ? "met" : "NOT met" }'; }
wrk_h=$(bench_median "${WRK_H[@]}")
wrk_n=$(bench_median "${WRK_N[@]}")
wrk_r=$(bench_median "${WRK_R[@]}")
one_row=""
if ((ONE_LOOP)); then
  one_row="| wrk -t2 -c16, ${DURATION}s, hark --http-thread-count 1 | $(bench_median "${WRK_1[@]}") | $wrk_n | $(bench_median "${WRK_1R[@]}") | $(verdict "$(bench_median "${WRK_1R[@]}")" 0.5 ">=") |"
fi
perf_h=$(bench_median "${PERF_H[@]}")
perf_n=$(bench_median "${PERF_N[@]}")
perf_r=$(bench_median "${PERF_R[@]}")
p50=$(bench_median "${P50_C1[@]}")
p99=$(bench_median "${P99_C1[@]}")
thr1=$(bench_median "${THR_C1[@]}")

cat <<EOF

### HTTP front end vs nginx static reply

$(bench_machine). Command: \`$(bench_command ROUNDS DURATION)\`.
Median of $ROUNDS rounds, servers alternated; ratio = median of the per-round hark/nginx ratios.
Body: \`simple\` JSON request ($(wc -c <"$BODY") bytes); nginx replays hark's $(wc -c <"$REPLY")-byte reply ($CTYPE), $WORKERS workers.
harkd: default \`--http-thread-count\` ($WORKERS event loops on this machine) unless the row says otherwise.

| load generator | hark req/s | nginx req/s | hark / nginx | goal ≥ 0.5 |
| --- | ---: | ---: | ---: | --- |
| wrk -t2 -c16, ${DURATION}s | $wrk_h | $wrk_n | $wrk_r | $(verdict "$wrk_r" 0.5 ">=") |
${one_row}
| hark perf, concurrency 16, ${DURATION}s | $perf_h | $perf_n | $perf_r | $(verdict "$perf_r" 0.5 ">=") |

| hark perf against hark, concurrency 1 | infer/s | p50 µs | p99 µs | goal p99 < 1000 µs |
| --- | ---: | ---: | ---: | --- |
| simple, JSON | $thr1 | $p50 | $p99 | $(verdict "$p99" 1000 "<") |

Per round (wrk hark/nginx req/s$( ((ONE_LOOP)) && echo ", hark one loop"); hark perf c16 hark/nginx; c1 p99 µs):
$(for ((i = 0; i < ROUNDS; i++)); do echo "- ${WRK_H[i]} / ${WRK_N[i]}$( ((ONE_LOOP)) && echo ", ${WRK_1[i]}"); ${PERF_H[i]} / ${PERF_N[i]}; ${P99_C1[i]}"; done)
EOF
