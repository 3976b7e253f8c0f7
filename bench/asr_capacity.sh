#!/usr/bin/env bash
# bench/asr_capacity.sh — how many real-time streams one harkd serves within
# latency bounds, against what the bare library could at best on the same
# cores (goal: N / limit >= 0.8).
#
# limit = cores / (CPU seconds per audio second of bin/ps_bare, measured in
# this run): the streams the machine could decode if pocketsphinx alone
# used every core. N = the largest --parallel for which
#   hark transcribe --simulate-realtime --chunk-ms 100 --parallel N
# over the LibriVox files has p99 chunk latency <= 200 ms, p99 final latency
# <= 500 ms, no reply later than 2 s (--timeout-secs 2, and both maxima),
# and no errors. The search starts at the limit, doubles or halves until it
# brackets N, then bisects to within 5%.
#
# Then "connected but mostly silent": SILENT_STREAMS (200) streams, 90% of
# them sending silence, with harkd's peak RSS and the peak of every /metrics
# series whose name mentions decoders (if the server exposes any).
#
# Env: BUILD_DIR (default ./build), MODEL (asr), AUDIO_DIR, ITERATIONS (2:
# passes per trial, so each stream slot runs ~2 files), MAX_N (1000),
# SILENT_STREAMS (200; 0 skips that part).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODEL=${MODEL:-asr}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
ITERATIONS=${ITERATIONS:-2}
MAX_N=${MAX_N:-1000}
SILENT_STREAMS=${SILENT_STREAMS:-200}
PS_BARE=$BUILD_DIR/bin/ps_bare
P99_CHUNK_MS=200 P99_FINAL_MS=500 MAX_REPLY_MS=2000

bench_need "$HARKD" "$HARK" "$PS_BARE" curl "$PY"
shopt -s nullglob
FILES=("$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no .wav files in $AUDIO_DIR (apt install pocketsphinx-testdata)"
CORES=$(nproc)

bench_log "bare reference: ps_bare over ${#FILES[@]} files"
timeout 600 "$PS_BARE" --json "${FILES[@]}" >"$BENCH_TMP/bare.json" || bench_die "ps_bare failed"
BARE_PER=$(bench_json "$BENCH_TMP/bare.json" '"%.4f" % d["cpu_per_audio_second"]')
LIMIT=$(awk -v c="$CORES" -v b="$BARE_PER" 'BEGIN { printf "%.1f\n", c / b }')
bench_log "ps_bare: $BARE_PER CPU s per audio s -> limit $LIMIT streams on $CORES cores"

bench_start_harkd --model-control-mode explicit --load-model "$MODEL" # only what is measured
HARKD_PID=$BENCH_LAST_PID
curl -sf -o /dev/null "http://$HARKD_URL/v2/models/$MODEL/ready" || bench_die "model '$MODEL' is not ready"

# transcribe OUT.json N [ARGS...]: one real-time run at --parallel N; the
# exit status is hark's (1 when some stream failed), never fatal here.
transcribe() {
  local out=$1 n=$2; shift 2
  timeout $((ITERATIONS * 15 + 60)) "$HARK" transcribe --server "$HARKD_URL" --model "$MODEL" \
    --simulate-realtime --chunk-ms 100 --parallel "$n" --timeout-secs $((MAX_REPLY_MS / 1000)) --json "$@" \
    "${FILES[@]}" >"$out" 2>"$out.log"
}

# figures OUT.json: "chunk_p99 final_p99 chunk_max final_max errors timeouts streams".
figures() {
  bench_json "$1" '" ".join(str(x) for x in (d["chunk_latency_ms"]["p99"], d["final_latency_ms"]["p99"],
    d["chunk_latency_ms"]["max"], d["final_latency_ms"]["max"], d["errors"], d["timeouts"], d["streams"]))'
}

# settle: waits (up to 60 s) until the model has no request in flight and
# no stream state, so one trial's backlog cannot refuse the next trial's
# streams (harkd refuses new streams while the model is backlogged).
settle() {
  local i text
  for ((i = 0; i < 600; i++)); do
    text=$(curl -sf --max-time 1 "http://127.0.0.1:$HARKD_METRICS_PORT/metrics" 2>/dev/null) || true
    if grep -q "^nv_inference_pending_request_count{model=\"$MODEL\",[^}]*} 0$" <<<"$text" &&
      ! grep -q "^hark_asr_streams{model=\"$MODEL\",[^}]*} [1-9]" <<<"$text"; then
      return 0
    fi
    sleep 0.1
  done
  bench_log "warning: harkd still busy before the next trial"
}

declare -A SEEN # N -> "pass|fail figures"
# trial N: 0 when N streams meet every bound.
trial() {
  local n=$1 out=$BENCH_TMP/trial-$1.json f verdict
  if [[ -z ${SEEN[$n]:-} ]]; then
    settle
    transcribe "$out" "$n" --iterations "$ITERATIONS" || true
    if [[ -s $out ]] && f=$(figures "$out"); then
      verdict=$(awk -v c="$P99_CHUNK_MS" -v fi="$P99_FINAL_MS" -v m="$MAX_REPLY_MS" '{
        print ($1 <= c && $2 <= fi && $3 <= m && $4 <= m && $5 == 0 && $6 == 0) ? "pass" : "fail" }' <<<"$f")
    else
      f="no result: $(tail -c 300 "$out.log")" verdict=fail
    fi
    SEEN[$n]="$verdict $f"
    bench_log "  N=$n: $verdict (p99 chunk/final ms, max chunk/final ms, errors, timeouts, streams: $f)"
  fi
  [[ ${SEEN[$n]} == pass* ]]
}

bench_log "searching N (p99 chunk <= $P99_CHUNK_MS ms, p99 final <= $P99_FINAL_MS ms, every reply <= $MAX_REPLY_MS ms)"
n=$(awk -v l="$LIMIT" 'BEGIN { n = int(l); print (n < 1 ? 1 : n) }')
lo=0 hi=0
if trial "$n"; then
  lo=$n
  while ((hi == 0)); do
    ((lo * 2 <= MAX_N)) || { hi=$((MAX_N + 1)); break; }
    if trial $((lo * 2)); then lo=$((lo * 2)); else hi=$((lo * 2)); fi
  done
else
  hi=$n
  while ((lo == 0 && hi > 1)); do
    if trial $((hi / 2)); then lo=$((hi / 2)); else hi=$((hi / 2)); fi
  done
fi
while ((lo > 0 && hi - lo > 1 && (hi - lo) * 20 > lo)); do
  mid=$(((lo + hi) / 2))
  if trial "$mid"; then lo=$mid; else hi=$mid; fi
done
RATIO=$(bench_ratio "$lo" "$LIMIT" 2)
verdict=$(awk -v v="$RATIO" 'BEGIN { print (v >= 0.8 ? "met" : "NOT met") }')
best=${SEEN[$lo]:-"none -"}

# sample_server OUT: every 0.5 s, harkd's RSS (kB) and its decoder metrics.
sample_server() {
  while kill -0 "$HARKD_PID" 2>/dev/null; do
    awk '/^VmRSS:/ { print "rss", $2 }' "/proc/$HARKD_PID/status" >>"$1"
    curl -sf --max-time 1 "http://127.0.0.1:$HARKD_METRICS_PORT/metrics" 2>/dev/null |
      grep -i decoder | grep -v '^#' | sed 's/^/metric /' >>"$1" || true
    sleep 0.5
  done
}

silent_report="(skipped: SILENT_STREAMS=0)"
if ((SILENT_STREAMS > 0)); then
  bench_log "connected but mostly silent: $SILENT_STREAMS streams, 10% speaking"
  idle_rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$HARKD_PID/status")
  bench_spawn "$BENCH_TMP/sampler.log" sample_server "$BENCH_TMP/samples"
  sampler=$BENCH_LAST_PID
  settle
  transcribe "$BENCH_TMP/silent.json" "$SILENT_STREAMS" --iterations 1 --silent-fraction 0.9 || true
  kill "$sampler" 2>/dev/null || true
  [[ -s $BENCH_TMP/silent.json ]] || bench_die "the silent run gave no result: $(tail -c 300 "$BENCH_TMP/silent.json.log")"
  silent_report=$($PY - "$BENCH_TMP/silent.json" "$BENCH_TMP/samples" "$idle_rss" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
rss, series = [], {}
for line in open(sys.argv[2]) if len(sys.argv) > 2 else []:
    kind, _, rest = line.strip().partition(" ")
    if kind == "rss":
        rss.append(int(rest))
    elif kind == "metric" and " " in rest:
        name, value = rest.rsplit(" ", 1)
        try:
            series[name] = max(series.get(name, float("-inf")), float(value))
        except ValueError:
            pass
c, f = d["chunk_latency_ms"], d["final_latency_ms"]
print(f"- {d['streams']} streams ({d['ok']} ok, {d['errors']} errors, {d['timeouts']} timeouts), "
      f"10% speaking: chunk latency p50 {c['p50']} / p99 {c['p99']} / max {c['max']} ms, "
      f"final p99 {f['p99']} ms.")
if rss:
    print(f"- harkd RSS: {int(sys.argv[3]) / 1024:.1f} MiB idle, peak {max(rss) / 1024:.1f} MiB during the run.")
if series:
    print("- Decoder metrics, peak over the run: " + "; ".join(f"`{k}` {v:g}" for k, v in sorted(series.items())) + ".")
else:
    print("- Decoders in use: harkd's /metrics exposes no series mentioning decoders; not measured.")
PY
)
fi

cat <<EOF

### Speech: real-time streams per machine

$(bench_machine). Command: \`$(bench_command MODEL ITERATIONS MAX_N SILENT_STREAMS)\`.
Bounds: p99 chunk latency ≤ $P99_CHUNK_MS ms, p99 final latency ≤ $P99_FINAL_MS ms, every reply ≤ $MAX_REPLY_MS ms,
no errors; \`hark transcribe --simulate-realtime --chunk-ms 100\`, passes per trial: $ITERATIONS over
${#FILES[@]} LibriVox files. Limit = $CORES cores ÷ ps_bare's $BARE_PER CPU s per audio s (same run).

| streams N | limit | N / limit | p99 chunk ms | p99 final ms | max chunk ms | max final ms |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: |
| $lo | $LIMIT | $RATIO | $(cut -d' ' -f2 <<<"$best") | $(cut -d' ' -f3 <<<"$best") | $(cut -d' ' -f4 <<<"$best") | $(cut -d' ' -f5 <<<"$best") |

- Capacity: **$lo streams = ${RATIO}× the bare-library limit** (goal ≥ 0.8: $verdict)$( ((hi > MAX_N)) && echo "; the search stopped at MAX_N=$MAX_N").
- Trials (N: verdict p99 chunk, p99 final, max chunk, max final, errors, timeouts, streams):
$(for k in $(printf '%s\n' "${!SEEN[@]}" | sort -n); do echo "  $k: ${SEEN[$k]};"; done)
$silent_report
EOF
