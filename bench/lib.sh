# shellcheck shell=bash
# bench/lib.sh — helpers shared by the benchmark scripts (sourced, not run).
#
# Every process a script starts goes through `bench_spawn`, which records its
# pid; the EXIT trap stops exactly those pids and removes the scratch dir.
# Everything listens on 127.0.0.1 only, every run is bounded by `timeout`,
# and nothing is built here: binaries come from $BUILD_DIR (default ./build).

set -euo pipefail

BENCH_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$BENCH_ROOT/build}
case $BUILD_DIR in /*) ;; *) BUILD_DIR=$BENCH_ROOT/$BUILD_DIR ;; esac
HARKD=$BUILD_DIR/bin/harkd
HARK=$BUILD_DIR/bin/hark
PY=/usr/bin/python3 # Debian's: stdlib only, for JSON
BENCH_PIDS=()
BENCH_LOAD_START=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo '?') # noise before we start
BENCH_TMP=$(mktemp -d "${TMPDIR:-/tmp}/hark-bench.XXXXXX")

bench_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
bench_die() { bench_log "error: $*"; exit 1; }

bench_cleanup() {
  local pid
  for pid in "${BENCH_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${BENCH_PIDS[@]}"; do
    # Give each a few seconds to exit cleanly, then insist.
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$BENCH_TMP"
}
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

bench_need() {
  local f
  for f in "$@"; do
    [[ -x $f ]] || command -v "$f" >/dev/null 2>&1 ||
      bench_die "$f not found (build first: cmake -S . -B build && cmake --build build; or set BUILD_DIR)"
  done
}

# A port nobody listens on right now (the kernel picks it).
bench_free_port() {
  $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# bench_spawn LOGFILE CMD...: runs CMD in the background, remembers its pid.
bench_spawn() {
  local log=$1; shift
  "$@" >"$log" 2>&1 &
  BENCH_PIDS+=($!)
  BENCH_LAST_PID=$!
}

# bench_wait_http URL [SECONDS]: until URL answers 200.
bench_wait_http() {
  local url=$1 deadline=$((SECONDS + ${2:-30}))
  until curl -sf -o /dev/null --max-time 1 "$url"; do
    kill -0 "$BENCH_LAST_PID" 2>/dev/null || return 1
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# bench_start_harkd [HARKD ARGS...]: harkd on free loopback ports, serving
# $BENCH_REPO (default the repository's models/); sets HARKD_PORT, HARKD_URL.
# shellcheck disable=SC2120 # the extra arguments are optional
bench_start_harkd() {
  HARKD_PORT=$(bench_free_port)
  HARKD_METRICS_PORT=$(bench_free_port)
  HARKD_URL=127.0.0.1:$HARKD_PORT
  bench_spawn "$BENCH_TMP/harkd.log" "$HARKD" --model-repository "${BENCH_REPO:-$BENCH_ROOT/models}" \
    --http-address 127.0.0.1 --http-port "$HARKD_PORT" --metrics-port "$HARKD_METRICS_PORT" \
    --grpc-port -1 "$@"
  bench_wait_http "http://$HARKD_URL/v2/health/ready" 30 ||
    { cat "$BENCH_TMP/harkd.log" >&2; bench_die "harkd did not become ready"; }
  bench_log "harkd ready at $HARKD_URL (pid $BENCH_LAST_PID)"
}

# bench_perf OUT.json ARGS...: one bounded `hark perf --json` run.
bench_perf() {
  local out=$1; shift
  local limit=$(( (${PERF_INTERVAL_MS:-5000} * 3) / 1000 + 30 ))
  timeout "$limit" "$HARK" perf --json "$@" >"$out" 2>"$out.log" ||
    { cat "$out.log" >&2; bench_die "hark perf $* failed"; }
}

# bench_json FILE EXPR: a Python expression over the document `d`.
bench_json() {
  $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# bench_median N...: the median (middle value; mean of the two middle ones).
bench_median() {
  printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
    if (NR == 0) print "nan"; else if (NR % 2) print v[(NR+1)/2]; else printf "%.1f\n", (v[NR/2]+v[NR/2+1])/2 }'
}

# bench_ratio A B [DIGITS]: A / B.
bench_ratio() { awk -v a="$1" -v b="$2" -v d="${3:-2}" 'BEGIN { if (b == 0) print "nan"; else printf "%.*f\n", d, a / b }'; }

# bench_machine: one line describing where and when this ran.
bench_machine() {
  local cpu
  cpu=$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || true)
  printf '%s, nproc %s, %s, %s, load average %s before the run' "$(date -u +%Y-%m-%dT%H:%MZ)" \
    "$(nproc)" "$(uname -m)" "${cpu:-unknown CPU}" "$BENCH_LOAD_START"
}

# bench_command: how to rerun this script with the same settings.
bench_command() {
  local vars="" v
  for v in "$@"; do
    if [[ ${!v} == *" "* ]]; then vars+="$v=\"${!v}\" "; else vars+="$v=${!v} "; fi
  done
  printf 'BUILD_DIR=%s %sbench/%s' "${BUILD_DIR#"$BENCH_ROOT"/}" "$vars" "$(basename "$0")"
}

# bench_settle MODEL: waits (up to 60 s) until harkd (started by
# bench_start_harkd) has no request of MODEL in flight and no stream state,
# so one trial's backlog cannot refuse the next trial's streams (harkd
# refuses new streams while the model is backlogged).
bench_settle() {
  local i text
  for ((i = 0; i < 600; i++)); do
    text=$(curl -sf --max-time 1 "http://127.0.0.1:$HARKD_METRICS_PORT/metrics" 2>/dev/null) || true
    if grep -q "^nv_inference_pending_request_count{model=\"$1\",[^}]*} 0$" <<<"$text" &&
      ! grep -q "^hark_asr_streams{model=\"$1\",[^}]*} [1-9]" <<<"$text"; then
      return 0
    fi
    sleep 0.1
  done
  bench_log "warning: harkd still busy before the next trial"
}
