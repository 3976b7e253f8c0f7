#!/usr/bin/env bash
# bench/ws_read.sh — what harkd spends per WebSocket message, to compare
# builds (e.g. before and after a change to the WebSocket read path).
#
# For ROUNDS rounds, alternating the builds in BUILD_DIRS, it starts that
# build's harkd serving tests/models/echo_asr as the speech model and runs
# CONNS raw-socket clients at once (Debian's python3, one thread each way
# per connection), each sending MESSAGES masked binary frames of SAMPLES
# 16-bit samples as fast as the server takes them and reading the reply
# to each. The figure is harkd's own CPU time (utime + stime, from /proc)
# per message, which the client's speed does not change; messages/s is
# reported too, but the Python client may be what limits it.
#
# Env: BUILD_DIRS ("build"), ROUNDS (3), CONNS (4), MESSAGES (20000),
# SAMPLES (160).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

BUILD_DIRS=${BUILD_DIRS:-build}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-4}
MESSAGES=${MESSAGES:-20000}
SAMPLES=${SAMPLES:-160}

BENCH_REPO=$BENCH_TMP/repo
mkdir -p "$BENCH_REPO"
ln -s "$BENCH_ROOT/tests/models/echo_asr" "$BENCH_REPO/echo_asr"

cat >"$BENCH_TMP/client.py" <<'EOF'
import socket, sys, threading, time
port, conns, messages, samples = (int(a) for a in sys.argv[1:5])
mask = b"\x11\x22\x33\x44"
payload = bytes(c ^ mask[i % 4] for i, c in enumerate(b"\x01\x00" * samples))
n = len(payload)
head = bytes([0x82, 0x80 | 126]) + n.to_bytes(2, "big") if n >= 126 else bytes([0x82, 0x80 | n])
frames = (head + mask + payload) * messages

def one(errors):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    buf = buf.partition(b"\r\n\r\n")[2]
    sender = threading.Thread(target=s.sendall, args=(frames,))
    sender.start()
    got = 0
    while got < messages:
        while len(buf) >= 2 and len(buf) >= 2 + (buf[1] & 0x7F):
            size = buf[1] & 0x7F
            if size >= 126:
                errors.append("unexpected long reply")
                return
            if buf[0] != 0x81:
                errors.append(f"frame {buf[:40]!r}")
                return
            buf = buf[2 + size:]
            got += 1
        if got < messages:
            chunk = s.recv(65536)
            if not chunk:
                errors.append(f"closed after {got} replies")
                return
            buf += chunk
    sender.join()
    s.close()

errors = []
t0 = time.monotonic()
threads = [threading.Thread(target=one, args=(errors,)) for _ in range(conns)]
for t in threads: t.start()
for t in threads: t.join()
wall = time.monotonic() - t0
if errors:
    sys.exit("; ".join(errors))
print(f"{wall:.3f}")
EOF

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
tick=$(getconf CLK_TCK)

bench_need "$PY" curl
declare -A cpu_us rate
for b in $BUILD_DIRS; do
  d=$b
  case $d in /*) ;; *) d=$BENCH_ROOT/$d ;; esac
  [[ -x $d/bin/harkd ]] || bench_die "no harkd in $d"
done

bench_log "$(bench_machine)"
for ((r = 1; r <= ROUNDS; r++)); do
  for b in $BUILD_DIRS; do
    d=$b
    case $d in /*) ;; *) d=$BENCH_ROOT/$d ;; esac
    HARKD=$d/bin/harkd
    bench_start_harkd --speech-model echo_asr --ws-idle-timeout-secs 600
    pid=$BENCH_LAST_PID
    before=$(cpu_ticks "$pid")
    wall=$(timeout 600 "$PY" "$BENCH_TMP/client.py" "$HARKD_PORT" "$CONNS" "$MESSAGES" "$SAMPLES") ||
      bench_die "the client failed against $b"
    after=$(cpu_ticks "$pid")
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    total=$((CONNS * MESSAGES))
    us=$(awk -v t=$((after - before)) -v k="$tick" -v n="$total" 'BEGIN { printf "%.2f", t / k * 1e6 / n }')
    mps=$(awk -v w="$wall" -v n="$total" 'BEGIN { printf "%.0f", n / w }')
    bench_log "round $r $b: $total messages in $wall s ($mps/s); harkd CPU $us us per message"
    cpu_us[$b]+="$us "
    rate[$b]+="$mps "
  done
done

first=${BUILD_DIRS%% *}
# shellcheck disable=SC2086 # the lists split on purpose
ref=$(bench_median ${cpu_us[$first]})
echo
echo "$(bench_machine)"
echo "$CONNS connections x $MESSAGES binary messages of $SAMPLES samples, $ROUNDS rounds (medians):"
echo
echo "| build | harkd CPU us per message | runs | vs $first | messages/s |"
echo "|---|---|---|---|---|"
for b in $BUILD_DIRS; do
  # shellcheck disable=SC2086
  m=$(bench_median ${cpu_us[$b]})
  # shellcheck disable=SC2086
  echo "| $b | $m | ${cpu_us[$b]% } | $(bench_ratio "$m" "$ref") | $(bench_median ${rate[$b]}) |"
done
