#!/usr/bin/env bash
# Measures harkd's memory with the asr model as decoders are created, for
# the sizing guide in docs/operations.md. Usage (from the repository root):
#
#   BUILD_DIR=build [MANY_STREAMS=M] deploy/measure-memory.sh [N...]   (default N: 1 2 4 8)
#
# Starts harkd on the default repository (loopback, free ports), then for
# each N streams N LibriVox recordings at once with `hark transcribe
# --parallel N` (as fast as replies come, so the N streams speak at the same
# time and each borrows its own decoder). Prints, per step, the decoders the
# pool has created (hark_decoders_created, from /metrics), harkd's RSS after
# the step (VmRSS) and its peak RSS so far (VmHWM). With MANY_STREAMS=M, a
# last step streams M at once at real time, SILENT_FRACTION of them (0.9)
# silence.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(1 2 4 8)
files=(/usr/share/pocketsphinx/test/data/librivox/*.wav)

port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
http=$(port); metrics=$(port)
log=$(mktemp /tmp/hark-measure-XXXXXX.log)
"$build/bin/harkd" --model-repository "$root/models" --http-address 127.0.0.1 \
  --http-port "$http" --metrics-port "$metrics" --grpc-port -1 \
  --stream-backlog-limit 100000 >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 300); do
  curl -sf "localhost:$http/v2/health/ready" >/dev/null && break
  sleep 0.1
done
curl -sf "localhost:$http/v2/health/ready" >/dev/null || { cat "$log"; exit 1; }

mib() { awk -v k="$1" '$1 == k":" {printf "%.1f", $2 / 1024}' "/proc/$pid/status"; }
metric() { curl -s "localhost:$metrics/metrics" | awk -v n="$1" '$1 ~ "^"n"\\{model=\"asr\"" {print $2}'; }

echo "$(date -u +%FT%TZ), nproc $(nproc), load average $(cut -d' ' -f1 /proc/loadavg); harkd pid $pid, model asr"
echo
echo "| streams at once | decoders created | pool max | RSS after (MiB) | peak RSS so far (MiB) |"
echo "| ---: | ---: | ---: | ---: | ---: |"
printf '| 0 (loaded, idle) | %s | %s | %s | %s |\n' "$(metric hark_decoders_created)" \
  "$(metric hark_decoders_max)" "$(mib VmRSS)" "$(mib VmHWM)"
for n in "${steps[@]}"; do
  "$build/bin/hark" transcribe "${files[@]}" --server "localhost:$http" --parallel "$n" \
    --timeout-secs 60 >/dev/null
  sleep 0.5
  printf '| %s | %s | %s | %s | %s |\n' "$n" "$(metric hark_decoders_created)" \
    "$(metric hark_decoders_max)" "$(mib VmRSS)" "$(mib VmHWM)"
done

# Many connected streams, few speaking (as a call centre's are): what the
# streams themselves cost beside the decoders.
many=${MANY_STREAMS:-0}
if [ "$many" -gt 0 ]; then
  hwm_before=$(mib VmHWM)
  summary=$("$build/bin/hark" transcribe "${files[@]}" --server "localhost:$http" --parallel "$many" \
    --silent-fraction "${SILENT_FRACTION:-0.9}" --simulate-realtime --timeout-secs 60 2>&1 |
    grep -E '^ *Streams:' || true)
  sleep 0.5
  printf '| %s, %s silent, real time | %s | %s | %s | %s (was %s) |\n' "$many" \
    "${SILENT_FRACTION:-0.9}" "$(metric hark_decoders_created)" "$(metric hark_decoders_max)" "$(mib VmRSS)" \
    "$(mib VmHWM)" "$hwm_before"
  echo
  echo "that step's client: $summary"
fi
