#!/usr/bin/env bash
# bench/http_regress.sh — one command that shows whether the KServe HTTP
# request path got slower: wrk -t2 -c16 POSTing the `simple` infer body to
# each build's harkd and to nginx replaying harkd's exact reply, alternated
# ROUNDS times, with each build's req/s as a ratio of nginx's in the same
# round (issue 24 item 5; goal >= 0.9). Beside it, harkd's CPU seconds per
# request (utime + stime of all its threads from /proc/PID/task/*/stat,
# and by thread name), which a busy shared host disturbs far less than
# req/s: compare builds by that first.
#
# The repository holds only `simple` (a temp dir linking models/simple).
# harkd runs with its defaults (one event loop per core).
#
# Env: BUILD_DIRS (space-separated build dirs, default "build"; e.g.
# "/tmp/old/build build" to compare a tree before a change), ROUNDS (3),
# DURATION seconds per wrk run (5). Exits 1 when the last build's median
# ratio is below MIN_RATIO (default 0, i.e. never; set 0.9 to gate on it).
# shellcheck disable=SC2046,SC2034 # lists split on purpose; H_* read through col()

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
BUILD_DIRS=${BUILD_DIRS:-build}
MIN_RATIO=${MIN_RATIO:-0}
WORKERS=$(nproc)
INFER_PATH=/v2/models/simple/infer
HZ=$(getconf CLK_TCK)

bench_need wrk nginx curl "$PY"
BENCH_REPO=$BENCH_TMP/repo
mkdir -p "$BENCH_REPO"
ln -s "$BENCH_ROOT/models/simple" "$BENCH_REPO/simple"
export BENCH_REPO

BODY=$BENCH_TMP/body.json
$PY -c 'import json; z=[0]*16; print(json.dumps({"inputs":[
  {"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":z},
  {"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":z}]}, separators=(",",":")), end="")' >"$BODY"

# One harkd per build; B_URL[i], B_PID[i], B_NAME[i].
declare -a B_URL B_PID B_NAME
i=0
for dir in $BUILD_DIRS; do
  case $dir in /*) ;; *) dir=$BENCH_ROOT/$dir ;; esac
  HARKD=$dir/bin/harkd
  bench_need "$HARKD"
  bench_start_harkd
  B_URL[i]=$HARKD_URL
  B_PID[i]=$BENCH_LAST_PID
  B_NAME[i]=${dir#"$BENCH_ROOT"/}
  i=$((i + 1))
done
NB=$i

REPLY=$BENCH_TMP/reply.json
CTYPE=$(curl -sf --max-time 5 -o "$REPLY" -w '%{content_type}' -H 'Content-Type: application/json' \
  --data-binary @"$BODY" "http://${B_URL[0]}$INFER_PATH") || bench_die "harkd rejected the simple request"
[[ $(cat "$REPLY") != *[\'\$\\]* ]] || bench_die "the reply holds a quote, \$ or backslash"
for ((i = 1; i < NB; i++)); do
  got=$(curl -sf --max-time 5 -H 'Content-Type: application/json' --data-binary @"$BODY" \
    "http://${B_URL[i]}$INFER_PATH") || bench_die "${B_NAME[i]} rejected the simple request"
  [[ $got == "$(cat "$REPLY")" ]] || bench_log "warning: ${B_NAME[i]}'s reply differs from ${B_NAME[0]}'s"
done

p=$BENCH_TMP/nginx
mkdir -p "$p/tmp"
NGINX_URL=127.0.0.1:$(bench_free_port)
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
    listen $NGINX_URL;
    location / { return 200 '$(cat "$REPLY")'; }
  }
}
EOF
nginx -t -q -p "$p" -c "$p/nginx.conf" 2>"$p/test.log" || { cat "$p/test.log" >&2; bench_die "bad nginx config"; }
bench_spawn "$p/stdout.log" nginx -p "$p" -c "$p/nginx.conf"
NGINX_PID=$BENCH_LAST_PID
for _ in $(seq 100); do curl -sf -o /dev/null --max-time 1 -X POST "http://$NGINX_URL$INFER_PATH" && break; sleep 0.1; done
[[ $(curl -sf --max-time 5 -X POST --data-binary @"$BODY" "http://$NGINX_URL$INFER_PATH") == "$(cat "$REPLY")" ]] ||
  bench_die "nginx's reply differs from harkd's"

WRK_LUA=$BENCH_TMP/post.lua
cat >"$WRK_LUA" <<EOF
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[$(cat "$BODY")]==]
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK rps=%.1f requests=%d errors=%d\n",
    summary.requests / (summary.duration / 1e6), summary.requests,
    e.connect + e.read + e.write + e.status + e.timeout))
end
EOF

# ticks PID...: utime+stime of every thread of those processes, as
# "name ticks" lines (threads of one name summed).
ticks() {
  local pid
  for pid in "$@"; do cat /proc/"$pid"/task/*/stat 2>/dev/null; done |
    sed -E 's/^[0-9]+ \((.*)\) /\1\t/' | awk -F'\t' '{ split($2, f, " "); t[$1] += f[12] + f[13] }
      END { for (n in t) print n, t[n] }'
}
ticks_total() { awk '{ s += $2 } END { print s + 0 }'; }
# nginx's master and its workers (children found through /proc: no procps needed).
nginx_pids() {
  local f stat pids=$NGINX_PID
  for f in /proc/[0-9]*/stat; do
    stat=$(cat "$f" 2>/dev/null) || continue
    stat=${stat##*) }
    read -r _ ppid _ <<<"$stat"
    [[ $ppid == "$NGINX_PID" ]] && pids+=" $(basename "$(dirname "$f")")"
  done
  echo "$pids"
}

# run_wrk URL SECONDS PIDS...: "rps requests cpu_us_per_request" and, in
# $BENCH_TMP/threads, the CPU µs per request by thread name.
run_wrk() {
  local url=$1 secs=$2; shift 2
  local out=$BENCH_TMP/wrk.out before after
  before=$(ticks "$@")
  timeout $((secs + 30)) wrk -t2 -c16 -d"$secs"s -s "$WRK_LUA" "http://$url$INFER_PATH" >"$out" 2>&1 ||
    { cat "$out" >&2; bench_die "wrk against $url failed"; }
  after=$(ticks "$@")
  local line rps reqs errors
  line=$(grep '^WRK ' "$out") || { cat "$out" >&2; bench_die "no wrk result"; }
  rps=$(sed -E 's/.*rps=([0-9.]+).*/\1/' <<<"$line")
  reqs=$(sed -E 's/.*requests=([0-9]+).*/\1/' <<<"$line")
  errors=${line##*errors=}
  ((errors == 0)) || bench_log "warning: wrk against $url saw $errors errors"
  awk -v hz="$HZ" -v n="$reqs" 'NR == FNR { b[$1] = $2; next } { d = $2 - b[$1]; if (d > 0)
    printf "%s %.1f\n", $1, d * 1e6 / hz / (n ? n : 1) }' <(echo "$before") <(echo "$after") |
    sort -k2 -gr | tr '\n' ' ' >"$BENCH_TMP/threads"
  echo "$rps $reqs $(awk -v hz="$HZ" -v n="$reqs" -v b="$(ticks_total <<<"$before")" \
    -v a="$(ticks_total <<<"$after")" 'BEGIN { printf "%.1f", (a - b) * 1e6 / hz / (n ? n : 1) }')"
}

bench_log "warming up (1 s each); load: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((i = 0; i < NB; i++)); do run_wrk "${B_URL[i]}" 1 "${B_PID[i]}" >/dev/null; done
run_wrk "$NGINX_URL" 1 $(nginx_pids) >/dev/null

declare -a N_RPS N_CPU
declare -A H_RPS H_CPU H_RATIO H_THREADS
LOADS=()
for ((r = 0; r < ROUNDS; r++)); do
  LOADS+=("$(cut -d' ' -f1 /proc/loadavg)")
  read -r rps _ cpu < <(run_wrk "$NGINX_URL" "$DURATION" $(nginx_pids))
  N_RPS[r]=$rps N_CPU[r]=$cpu
  bench_log "round $((r + 1))/$ROUNDS (load ${LOADS[-1]}): nginx $rps req/s, $cpu CPU µs/req"
  for ((i = 0; i < NB; i++)); do
    read -r rps _ cpu < <(run_wrk "${B_URL[i]}" "$DURATION" "${B_PID[i]}")
    H_RPS[$i,$r]=$rps H_CPU[$i,$r]=$cpu H_THREADS[$i,$r]=$(cat "$BENCH_TMP/threads")
    H_RATIO[$i,$r]=$(bench_ratio "$rps" "${N_RPS[r]}" 2)
    bench_log "  ${B_NAME[i]}: $rps req/s (${H_RATIO[$i,$r]} of nginx), $cpu CPU µs/req (${H_THREADS[$i,$r]})"
  done
done
LOAD_END=$(cut -d' ' -f1 /proc/loadavg)

col() { # col NAME I: the ROUNDS values of H_NAME[I,*]
  local -n a=$1
  local r
  for ((r = 0; r < ROUNDS; r++)); do echo "${a[$2,$r]}"; done
}
cat <<EOF

### KServe HTTP request path vs nginx, by build

$(bench_machine); load average ${LOADS[*]} at the rounds' starts, $LOAD_END at the end.
Command: \`BUILD_DIRS="$BUILD_DIRS" ROUNDS=$ROUNDS DURATION=$DURATION bench/$(basename "$0")\`.
wrk -t2 -c16 -d${DURATION}s POSTing the \`simple\` body ($(wc -c <"$BODY") bytes); nginx ($WORKERS workers) replays harkd's
$(wc -c <"$REPLY")-byte reply. Repository: \`simple\` only. Servers alternated each round; medians of $ROUNDS rounds.
CPU µs/req: utime+stime of all the server's threads over the run / requests.

| server | req/s | / nginx (per round) | median / nginx | CPU µs/req (per round) |
| --- | ---: | --- | ---: | --- |
| nginx | $(bench_median "${N_RPS[@]}") | | 1 | ${N_CPU[*]} |
$(for ((i = 0; i < NB; i++)); do
  echo "| ${B_NAME[i]} | $(bench_median $(col H_RPS $i)) | $(col H_RATIO $i | tr '\n' ' ') | $(bench_median $(col H_RATIO $i)) | $(col H_CPU $i | tr '\n' ' ') |"
done)

CPU µs/req by thread name (last round): $(for ((i = 0; i < NB; i++)); do echo -n "${B_NAME[i]}: ${H_THREADS[$i,$((ROUNDS - 1))]}; "; done)
EOF
last=$(bench_median $(col H_RATIO $((NB - 1))))
awk -v v="$last" -v g="$MIN_RATIO" 'BEGIN { exit !(v >= g) }' ||
  { bench_log "${B_NAME[NB - 1]}: median ratio $last < $MIN_RATIO"; exit 1; }
