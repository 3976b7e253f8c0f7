#!/usr/bin/env bash
# The demo: installs what is missing, builds, starts harkd on models/ and
# streams the five LibriVox recordings of Debian's pocketsphinx-testdata
# through `hark transcribe --simulate-realtime` (partials as they change,
# finals with word times, the latency report), then shows an inference on
# `simple` and the metrics. Leaves harkd running when given --serve.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build" >/dev/null
port=${HARK_HTTP_PORT:-8000}
mport=${HARK_METRICS_PORT:-8002}
# Process substitution, not a pipe, so that $! is harkd itself.
"$root/build/bin/harkd" --model-repository "$root/models" --http-port "$port" \
  --metrics-port "$mport" > >(sed "s/^/[harkd] /") 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 300); do
  kill -0 $pid 2>/dev/null || { echo "demo: harkd exited (port $port in use?)" >&2; exit 1; }
  curl -sf "localhost:$port/v2/health/ready" >/dev/null && break
  sleep 0.1
done
show() { echo; echo "\$ $1"; eval "$1"; echo; }
show "curl -s localhost:$port/v2/health/ready -w 'ready: HTTP %{http_code}\\n'"
audio=/usr/share/pocketsphinx/test/data/librivox
show "build/bin/hark transcribe $audio/*.wav --server localhost:$port --simulate-realtime --interim --words"
body='{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}'
show "curl -s localhost:$port/v2/models/simple/infer -d '$body'"
show "curl -s localhost:$mport/metrics | grep -E '^(hark_decoders_[a-z_]+|hark_asr_streams|hark_audio_seconds_total|nv_inference_(request_success|queue_duration_us))\\{model=\"asr\"'"
if [ "${1:-}" = "--serve" ]; then
  echo; echo "harkd is serving on :$port (HTTP) and :$mport (metrics); Ctrl-C stops it."
  wait $pid
fi
