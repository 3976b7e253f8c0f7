#!/usr/bin/env bash
# bench/reload.sh — do model reloads cost availability? Ten reloads of `asr`
# and of `simple` (the explicit load API, which reloads a loaded model) while
# STREAMS real-time WebSocket streams run (about half of the capacity
# bench/asr_capacity.sh measured here) and `hark perf` keeps a steady KServe
# HTTP infer load on `simple`; then the same run without reloads.
#
# Reported per run: streams finished / dropped (errors + timeouts of
# `hark transcribe`), failed infer requests (hark perf's errors), chunk
# latency p50/p99/max (chunk sent -> its reply), final latency p50/p99, and
# for the reload run: reload calls that failed, how long each reload call
# took (p50/max) and nv_model_load_duration_secs of the last asr load.
# The goal is zero failed requests and zero dropped streams.
#
# Env: BUILD_DIR (default ./build), STREAMS (3), ITERATIONS (3: passes of
# `hark transcribe` over the files), RELOADS (10), RELOAD_GAP (1.5 s between
# reload rounds), AUDIO_DIR.
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

STREAMS=${STREAMS:-3}
ITERATIONS=${ITERATIONS:-3}
RELOADS=${RELOADS:-10}
RELOAD_GAP=${RELOAD_GAP:-1.5}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}

bench_need "$HARKD" "$HARK" curl "$PY"
shopt -s nullglob
FILES=("$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no .wav files in $AUDIO_DIR (apt install pocketsphinx-testdata)"

bench_start_harkd --model-control-mode explicit --load-model asr --load-model simple
METRICS_URL=http://127.0.0.1:$HARKD_METRICS_PORT/metrics

# reloads OUT: RELOADS rounds of "reload asr, reload simple", RELOAD_GAP
# apart; one line per call: "model http_status seconds".
reloads() {
  local out=$1 i m code
  : >"$out"
  sleep 2 # the streams and the infer load are under way
  for ((i = 0; i < RELOADS; i++)); do
    for m in asr simple; do
      code=$(curl -s -o "$BENCH_TMP/reload.body" -w '%{http_code} %{time_total}' --max-time 120 \
        -X POST "http://$HARKD_URL/v2/repository/models/$m/load" || echo "000 0")
      echo "$m $code" >>"$out"
    done
    sleep "$RELOAD_GAP"
  done
  date +%s.%N >"$out.end"
}

# phase NAME RELOAD(0|1): streams + perf (+ reloads) at once.
phase() {
  local name=$1 reload=$2 perf_ms
  # perf's window spans the streams: about ITERATIONS passes of the files.
  perf_ms=$((ITERATIONS * 12000))
  bench_log "$name: $STREAMS real-time streams x $ITERATIONS passes, perf on simple for $((perf_ms / 1000)) s$(
    ((reload)) && echo ", $RELOADS reloads of asr and simple")"
  timeout $((perf_ms / 1000 + 60)) "$HARK" perf -u "$HARKD_URL" -m simple --concurrency-range 1:1 \
    -p "$perf_ms" --warmup 200 --json >"$BENCH_TMP/$name.perf.json" 2>"$BENCH_TMP/$name.perf.log" &
  local perf_pid=$!
  local reload_pid=
  if ((reload)); then
    reloads "$BENCH_TMP/$name.reloads" &
    reload_pid=$!
  fi
  timeout $((ITERATIONS * 40 + 120)) "$HARK" transcribe --server "$HARKD_URL" --model asr \
    --simulate-realtime --chunk-ms 100 --parallel "$STREAMS" --iterations "$ITERATIONS" \
    --timeout-secs 10 --json "${FILES[@]}" >"$BENCH_TMP/$name.tr.json" 2>"$BENCH_TMP/$name.tr.log" || true
  date +%s.%N >"$BENCH_TMP/$name.tr.end"
  if [[ -n $reload_pid ]]; then
    wait "$reload_pid" || true
  fi
  wait "$perf_pid" || true
  [[ -s $BENCH_TMP/$name.tr.json ]] || { cat "$BENCH_TMP/$name.tr.log" >&2; bench_die "transcribe gave no report"; }
  [[ -s $BENCH_TMP/$name.perf.json ]] || { cat "$BENCH_TMP/$name.perf.log" >&2; bench_die "perf gave no report"; }
}

# row NAME: one table row of figures.
row() {
  local name=$1
  $PY - "$BENCH_TMP/$name.tr.json" "$BENCH_TMP/$name.perf.json" "$name" <<'EOF'
import json, sys
tr, perf, name = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
c, f = tr["chunk_latency_ms"], tr["final_latency_ms"]
p = perf["results"][0]
dropped = tr["errors"] + tr["timeouts"]
print(f"| {name} | {tr['streams'] - dropped}/{tr['streams']} | {dropped} | "
      f"{int(p['errors'])}/{int(p['requests'])} | {p['throughput_infer_per_sec']:.0f} | "
      f"{c['p50']:.1f} / {c['p99']:.1f} / {c['max']:.1f} | {f['p50']:.1f} / {f['p99']:.1f} |")
EOF
}

phase without-reloads 0
phase with-reloads 1

RELOAD_FIG=$($PY - "$BENCH_TMP/with-reloads.reloads" <<'EOF'
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
out = []
for m in ("asr", "simple"):
    r = [x for x in rows if x[0] == m]
    t = sorted(float(x[2]) for x in r)
    bad = sum(1 for x in r if x[1] != "200")
    out.append(f"{m}: {len(r)} reload calls, {bad} failed, call time p50 {t[len(t)//2]:.2f} s, "
               f"max {t[-1]:.2f} s")
print("; ".join(out))
EOF
)
LOAD_SECS=$(curl -s "$METRICS_URL" | awk '/^nv_model_load_duration_secs\{model="asr"/ {print $2}')
OVERLAP=$($PY -c 'import sys; a, b = (float(open(p).read()) for p in sys.argv[1:]); print("yes" if b <= a else "no (%.1f s after)" % (b - a))' \
  "$BENCH_TMP/with-reloads.tr.end" "$BENCH_TMP/with-reloads.reloads.end")

{
  echo "Machine: $(bench_machine)"
  echo "Command: $(bench_command STREAMS ITERATIONS RELOADS RELOAD_GAP)"
  echo
  echo "| run | streams ok | dropped | failed infers | infer/s | chunk latency ms p50 / p99 / max | final latency ms p50 / p99 |"
  echo "| --- | --- | --- | --- | --- | --- | --- |"
  row without-reloads
  row with-reloads
  echo
  echo "Reloads: $RELOAD_FIG; all reloads done while the streams ran: $OVERLAP;"
  echo "nv_model_load_duration_secs of the last asr load: ${LOAD_SECS:-?} s."
}
FINISHED=$(grep -c "its live requests and streams finished" "$BENCH_TMP/harkd.log" || true)
bench_log "old asr/simple versions that served live work after their reload: $FINISHED"
