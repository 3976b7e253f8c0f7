#!/usr/bin/env bash
# The demo: installs what is missing, builds, starts harkd on models/ and
# shows it answering — an inference on `simple`, an ensemble, the metrics.
# Leaves harkd running in the foreground when given --serve.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build" >/dev/null
port=${HARK_HTTP_PORT:-8000}
mport=${HARK_METRICS_PORT:-8002}
"$root/build/bin/harkd" --model-repository "$root/models" --http-port "$port" \
  --metrics-port "$mport" 2>&1 | sed "s/^/[harkd] /" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do
  curl -sf "localhost:$port/v2/health/ready" >/dev/null && break
  sleep 0.1
done
show() { echo; echo "\$ $1"; eval "$1"; echo; }
show "curl -s localhost:$port/v2/health/ready -w 'ready: HTTP %{http_code}\\n'"
show "curl -s localhost:$port/v2/models/simple"
body='{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"INT32","data":[0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]},{"name":"INPUT1","shape":[1,16],"datatype":"INT32","data":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}]}'
show "curl -s localhost:$port/v2/models/simple/infer -d '$body'"
show "curl -s localhost:$port/v2/models/simple_ensemble/infer -d '$body'"
show "curl -s localhost:$mport/metrics | grep -E '^nv_inference_(request_success|count|exec_count|queue_duration_us)\\{model=\"simple\"'"
if [ "${1:-}" = "--serve" ]; then
  echo; echo "harkd is serving on :$port (HTTP) and :$mport (metrics); Ctrl-C stops it."
  wait $pid
fi
