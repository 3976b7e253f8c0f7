#!/usr/bin/env bash
# bench/http_instructions.sh — the user-space instructions one KServe HTTP
# request costs harkd, per build: harkd under valgrind's callgrind, wrk
# POSTing the `simple` infer body (as bench/http_regress.sh does) for
# DURATION seconds after a warm-up; callgrind's counters are zeroed after
# the warm-up and dumped after the run, and divided by the inferences
# `simple`'s statistics counted between. An instruction count does not
# depend on the host's speed or on what else runs, so builds compare on a
# busy shared machine where req/s cannot. It leaves out the kernel's share
# (sockets, TCP, wake-ups: ~2/3 of harkd's CPU time here), which
# http_regress.sh measures with nginx beside it. Under valgrind harkd's
# threads take turns, so the mix of inline and worker runs can differ
# from a native run's.
#
# The repository holds only `simple`. Env: BUILD_DIRS (space-separated
# build dirs, default "build"), DURATION seconds of counted load (10).
# shellcheck disable=SC2034 # BUILD_DIRS and DURATION are read through bench_command

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-10}
BUILD_DIRS=${BUILD_DIRS:-build}
INFER_PATH=/v2/models/simple/infer

bench_need valgrind callgrind_control wrk curl "$PY"
BENCH_REPO=$BENCH_TMP/repo
mkdir -p "$BENCH_REPO"
ln -s "$BENCH_ROOT/models/simple" "$BENCH_REPO/simple"

WRK_LUA=$BENCH_TMP/post.lua
$PY - "$WRK_LUA" <<'EOF'
import json, sys
z = [0] * 16
body = json.dumps({"inputs": [
    {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": z},
    {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": z}]}, separators=(",", ":"))
open(sys.argv[1], "w").write('wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\n'
                             'wrk.body = [==[' + body + ']==]\n')
EOF

# inferences URL: what `simple` has counted.
inferences() {
  curl -sf --max-time 10 "http://$1/v2/models/simple/stats" |
    $PY -c 'import json,sys; print(json.load(sys.stdin)["model_stats"][0]["inference_count"])'
}

declare -a NAME IR PER N
i=0
for dir in $BUILD_DIRS; do
  case $dir in /*) ;; *) dir=$BENCH_ROOT/$dir ;; esac
  bench_need "$dir/bin/harkd"
  port=$(bench_free_port)
  out=$BENCH_TMP/callgrind.$i
  bench_spawn "$BENCH_TMP/harkd.$i.log" valgrind --tool=callgrind --callgrind-out-file="$out" \
    "$dir/bin/harkd" --model-repository "$BENCH_REPO" --http-address 127.0.0.1 --http-port "$port" \
    --grpc-port -1 --metrics-port -1
  pid=$BENCH_LAST_PID
  bench_wait_http "http://127.0.0.1:$port/v2/health/ready" 180 ||
    { cat "$BENCH_TMP/harkd.$i.log" >&2; bench_die "harkd ($dir) did not become ready"; }
  url=http://127.0.0.1:$port$INFER_PATH
  timeout 60 wrk -t2 -c16 -d3s -s "$WRK_LUA" "$url" >/dev/null # warm-up, not counted
  callgrind_control -z "$pid" >/dev/null 2>&1
  before=$(inferences "127.0.0.1:$port")
  timeout $((DURATION + 60)) wrk -t2 -c16 -d"${DURATION}s" -s "$WRK_LUA" "$url" >/dev/null
  after=$(inferences "127.0.0.1:$port")
  callgrind_control -d "$pid" >/dev/null 2>&1
  for _ in $(seq 100); do [[ -s $out.1 ]] && break; sleep 0.1; done
  ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$out.1")
  [[ -n $ir ]] || bench_die "no callgrind dump from $dir"
  NAME[i]=${dir#"$BENCH_ROOT"/}
  IR[i]=$ir
  N[i]=$((after - before))
  PER[i]=$((ir / N[i]))
  bench_log "${NAME[i]}: $((after - before)) inferences, $ir instructions, ${PER[i]} a request"
  kill -TERM "$pid"
  i=$((i + 1))
done

cat <<EOF

### KServe HTTP request path: harkd's user-space instructions per request, by build

$(bench_machine).
Command: \`$(bench_command BUILD_DIRS DURATION)\`.
callgrind (valgrind $(valgrind --version | sed 's/valgrind-//')), wrk -t2 -c16 POSTing the \`simple\` body for ${DURATION} s after a 3 s
warm-up; instructions of all harkd's threads between the two, over the inferences counted.

| build | inferences | instructions | per request | / first build |
| --- | ---: | ---: | ---: | ---: |
EOF
for ((j = 0; j < i; j++)); do
  echo "| ${NAME[j]} | ${N[j]} | ${IR[j]} | ${PER[j]} | $(bench_ratio "${PER[j]}" "${PER[0]}") |"
done
