#!/usr/bin/env bash
# bench/attack_latency.sh — what one attacker costs everyone else: the p99
# latency of a normal client (wrk: KServe infers on `simple`, 8 keep-alive
# connections) with no attack, then during each attack of issue 13, each
# for PHASE seconds against the same harkd, and harkd's peak RSS in each:
#   slowloris   SLOW (1000) connections dribbling a request head, a byte a second
#   params      4 clients posting bodies of 150,000 parameters (1.7 MB) in a loop
#   frames      4 WebSocket clients sending empty binary frames as fast as they can
#   fds         a second harkd limited to 256 file descriptors, and 300 idle
#               connections held open against it (fd exhaustion)
# The attackers are python3 (stdlib) processes; wrk is the neutral load.
# Env: BUILD_DIR, PHASE (10), SLOW (1000).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PHASE=${PHASE:-10}
SLOW=${SLOW:-1000}
bench_need "$HARKD" wrk curl "$PY"
ulimit -n 8192 2>/dev/null || true

cat >"$BENCH_TMP/infer.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}'
EOF

cat >"$BENCH_TMP/attack.py" <<'EOF'
import json, os, socket, struct, sys, time
kind, port, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.time() + secs
def conn():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s
if kind == "slowloris":
    n, socks = int(sys.argv[4]), []
    head = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 4096
    for _ in range(n):
        try:
            socks.append([conn(), 0])
        except OSError:
            break
    while time.time() < end:
        for s in socks:
            try:
                s[0].send(head[s[1] % len(head):s[1] % len(head) + 1]); s[1] += 1
            except OSError:
                pass
        time.sleep(1)
elif kind == "params":
    body = json.dumps({"parameters": {f"p{i}": 0 for i in range(150000)},
                       "inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16},
                                  {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": [0] * 16}]}).encode()
    req = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
    while time.time() < end:
        try:
            s = conn(); s.sendall(req); s.recv(65536); s.close()
        except OSError:
            time.sleep(0.01)
elif kind == "frames":
    key = b"dGhlIHNhbXBsZSBub25jZQ=="
    while time.time() < end:
        try:
            s = conn()
            s.sendall(b"GET /v2/models/asr/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      b"Sec-WebSocket-Key: " + key + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
            s.recv(4096)
            s.setblocking(False)
            frame = b"\x82\x80" + b"\x00\x00\x00\x00"  # masked, empty, binary
            burst = frame * 4096
            while time.time() < end:
                try:
                    s.send(burst)
                except BlockingIOError:
                    time.sleep(0.001)
                try:
                    s.recv(1 << 16)
                except (BlockingIOError, OSError):
                    pass
        except OSError:
            time.sleep(0.05)
elif kind == "fds":
    n, socks = int(sys.argv[4]), []
    for _ in range(n):
        try:
            socks.append(conn())
        except OSError:
            time.sleep(0.01)
    time.sleep(max(0, end - time.time()))
EOF

peak_rss=0
# watch PID: harkd's peak RSS (kB) while the phase runs, into peak_rss.
watch_rss() {
  local pid=$1 r
  peak_rss=0
  while kill -0 "$WRK_PID" 2>/dev/null; do
    r=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || echo 0)
    ((r > peak_rss)) && peak_rss=$r
    sleep 0.2
  done
}

# phase NAME PORT PID [ATTACK ARGS...]: wrk for PHASE s (with the attack, if
# any, started a second earlier); one table row.
rows=()
phase() {
  local name=$1 port=$2 pid=$3; shift 3
  local apids=()
  if (($#)); then
    for ((i = 0; i < ${ATTACKERS:-1}; i++)); do
      "$PY" "$BENCH_TMP/attack.py" "$1" "$port" $((PHASE + 2)) "${@:2}" >/dev/null 2>&1 &
      apids+=($!)
    done
    sleep 1.5
  fi
  wrk -t1 -c8 -d"${PHASE}s" --latency -s "$BENCH_TMP/infer.lua" "http://127.0.0.1:$port/v2/models/simple/infer" \
    >"$BENCH_TMP/$name.wrk" 2>&1 &
  WRK_PID=$!
  local cpu0 cpu1
  cpu0=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  watch_rss "$pid"
  cpu1=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  wait "$WRK_PID" || true
  for p in "${apids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  local rps p50 p99 errs
  rps=$(awk '/Requests\/sec/ { print $2 }' "$BENCH_TMP/$name.wrk")
  p50=$(awk '$1 == "50%" { print $2 }' "$BENCH_TMP/$name.wrk")
  p99=$(awk '$1 == "99%" { print $2 }' "$BENCH_TMP/$name.wrk")
  errs=$(awk '/Socket errors|Non-2xx/ { printf "%s ", $0 }' "$BENCH_TMP/$name.wrk")
  # harkd's CPU over the row, in % of one core (clock ticks of 10 ms).
  local cpu=$(((cpu1 - cpu0) * 100 / $(getconf CLK_TCK) * 100 / (PHASE * 100)))
  bench_log "$name: $rps req/s, p50 $p50, p99 $p99, peak RSS $((peak_rss / 1024)) MiB, harkd CPU $cpu% ${errs}"
  rows+=("| $name | ${rps:-0} | ${p50:-–} | ${p99:-–} | $((peak_rss / 1024)) | $cpu | ${errs:-none} |")
  sleep 2
}

bench_start_harkd
MAIN_PID=$BENCH_LAST_PID
phase "none" "$HARKD_PORT" "$MAIN_PID"
phase "slowloris ($SLOW conns)" "$HARKD_PORT" "$MAIN_PID" slowloris "$SLOW"
ATTACKERS=4 phase "params (4 clients)" "$HARKD_PORT" "$MAIN_PID" params
ATTACKERS=4 phase "frames (4 clients)" "$HARKD_PORT" "$MAIN_PID" frames
phase "none, after" "$HARKD_PORT" "$MAIN_PID"

# fd exhaustion: a second harkd with 256 descriptors.
FD_PORT=$(bench_free_port)
bash -c 'ulimit -n 256; exec "$@"' _ "$HARKD" --model-repository "$BENCH_ROOT/models" \
  --model-control-mode explicit --load-model simple --http-address 127.0.0.1 --http-port "$FD_PORT" \
  --metrics-port "$(bench_free_port)" --grpc-port -1 >"$BENCH_TMP/harkd-fd.log" 2>&1 &
FD_PID=$!
BENCH_PIDS+=("$FD_PID")
BENCH_LAST_PID=$FD_PID
bench_wait_http "http://127.0.0.1:$FD_PORT/v2/health/ready" 30 || bench_die "the fd-limited harkd did not start"
phase "none (256 fds)" "$FD_PORT" "$FD_PID"
phase "fds (300 idle conns, 256 fds)" "$FD_PORT" "$FD_PID" fds 300
fd_log_lines=$(grep -c -i 'accept' "$BENCH_TMP/harkd-fd.log" || true)

cat <<EOF

### A normal client's latency under each attack

$(bench_machine). Command: \`$(bench_command PHASE SLOW)\`.
wrk -t1 -c8 for ${PHASE} s per row: KServe HTTP infers on \`simple\`; the attack starts 1.5 s
before. Peak RSS: harkd's, sampled every 0.2 s during the row; CPU: harkd's user+system time
over the row. In the fd rows wrk's connections that find no descriptor time out: that is the
attack working; what counts is that harkd keeps serving the connections it has and does not spin.

| attack | normal req/s | p50 | p99 | harkd peak RSS MiB | harkd CPU % of a core | wrk errors |
| --- | ---: | ---: | ---: | ---: | ---: | --- |
$(printf '%s\n' "${rows[@]}")

The fd-limited harkd's log has $fd_log_lines line(s) mentioning accept.
EOF
