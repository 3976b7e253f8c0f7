#!/usr/bin/env bash
# bench/soak.sh — continuous proof (issue 13): DURATION seconds of mixed
# load on the ASan+UBSan build of harkd, all of it at once for the whole
# run, then checks that it held up:
#
#   - real-time speech streams on both protocols, looping over the LibriVox
#     files: `hark transcribe --simulate-realtime --chunk-ms 100` over Vosk's
#     WebSocket and over Riva's gRPC StreamingRecognize (STREAMS each);
#   - KServe infers on `simple`, HTTP and gRPC alternately (`hark perf`
#     bursts of INFER_BURST_MS, INFER_PAUSE s apart);
#   - the repository API in a loop: fixed_cost and accumulate loaded and
#     unloaded, `simple` reloaded under its infer load, and `asr` reloaded
#     under its streams every ASR_RELOAD_SECS;
#   - faulty clients in a loop (bench/soak/faulty.py, Python's standard
#     library only): WebSocket streams that vanish mid-utterance (FIN or
#     RST), gRPC streams whose client is SIGKILLed mid-file, clients that
#     never read a reply (pipelined HTTP infers with 256 KiB answers, a
#     WebSocket stream), slowloris (an HTTP head, an HTTP body, the gRPC
#     preface, a byte a second), and messages over the limits (HTTP body
#     declared and sent, a WebSocket message, a gRPC message).
#
# harkd runs with short transport limits (header 5 s, body deadline 10 s,
# send 5 s) and small message limits, so the faulty clients meet them many
# times a run rather than once an hour.
#
# Checks, each printed PASS/FAIL with its figures (exit 1 on any FAIL):
#   alive      harkd ran the whole time, then on SIGTERM exited 0 within
#              EXIT_TIMEOUT (its --exit-timeout-secs) plus the sanitizers'
#              exit work (leak scan), EXIT_MARGIN s;
#   sanitizers no AddressSanitizer or UBSan report in harkd's stderr;
#   leaks      no LeakSanitizer report at exit (detect_leaks=1);
#   streams    every well-behaved stream harkd admitted got its final: in
#              `hark transcribe --json`, each stream is ok, or was refused at
#              connect with a reason (an HTTP status on the upgrade, or
#              gRPC RESOURCE_EXHAUSTED / UNAVAILABLE saying "too many
#              streams" or "overloaded", harkd's admission refusals);
#              anything else (a timeout, a lost final) fails;
#   infers     every KServe infer of the perf bursts answered (0 errors):
#              each accepted request gets a final, reloads included;
#   rss        VmRSS after the load stops and SETTLE s pass is at most
#              RSS_TOLERANCE % (10) above the warm-up's peak VmRSS (up to
#              the start point); the growth over the start point's own
#              sample is reported beside it.
#
# The RSS start point is the end of the warm-up: WARMUP s (default 60, or
# a third of a shorter run) AND at least one finished round of every load
# kind, an `asr` reload included. Before that, RSS grows for reasons that
# are not leaks: the decoder pool makes decoders up to the run's peak of
# concurrent utterances (~90 MiB each, kept for reuse), a reload holds two
# versions of a model at once, and ASan's quarantine (256 MiB) fills with
# freed blocks before it recycles them. ASan's allocator rarely gives
# memory back, so its RSS is a high-water mark: once every kind of load has
# reached its peak, what grows after is memory that is never reused — a
# leak, or a buffer without a bound. Only growth fails (a drop is fine).
# Under this load ASan's RSS also swings by a third within seconds (a
# 3-minute run, 2026-11-26: 800-1500 MiB in the load phase, as the
# quarantine recycles and a reload's pools come and go), so one sample at
# the start point is no baseline: a settle-end 15% over it, in a run whose
# load phase had dipped 25% under it, failed a run with no leak. The
# bound is over the warm-up's peak, the high-water mark every kind of load
# has reached once; what grows past that is never reused.
# RSS is sampled every SAMPLE_SECS into rss.csv (seconds, kB, phase).
#
# Env: BUILD_DIR (default build-asan), DURATION (1800), WARMUP, SETTLE (20),
# STREAMS (1 per protocol), ASR_RELOAD_SECS (60), INFER_BURST_MS (2000),
# INFER_PAUSE (5), REPLY_TIMEOUT (60: s a stream's reply may take before it
# counts as lost; slow replies are reported, not failed: on 2 shared cores
# under ASan a reload's new decoders hold chunks for seconds), EXIT_TIMEOUT (10), EXIT_MARGIN (60), RSS_TOLERANCE (10),
# SAMPLE_SECS (2), AUDIO_DIR, KEEP (a folder: keep the logs, JSON and
# rss.csv there), PIPELINE (set: the never-reading HTTP client pipelines
# its requests on one connection; off by default: harkd mishandles
# pipelined POSTs, see bench/RESULTS.md 2026-11-24).
BUILD_DIR=${BUILD_DIR:-build-asan}
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DURATION=${DURATION:-1800}
WARMUP=${WARMUP:-$((DURATION / 3 < 60 ? DURATION / 3 : 60))}
SETTLE=${SETTLE:-20}
STREAMS=${STREAMS:-1}
ASR_RELOAD_SECS=${ASR_RELOAD_SECS:-60}
INFER_BURST_MS=${INFER_BURST_MS:-2000}
INFER_PAUSE=${INFER_PAUSE:-5}
REPLY_TIMEOUT=${REPLY_TIMEOUT:-60}
EXIT_TIMEOUT=${EXIT_TIMEOUT:-10}
EXIT_MARGIN=${EXIT_MARGIN:-60}
RSS_TOLERANCE=${RSS_TOLERANCE:-10}
SAMPLE_SECS=${SAMPLE_SECS:-2}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
KEEP=${KEEP:-}
FAULTY=$BENCH_ROOT/bench/soak/faulty.py
# The limits the faulty clients aim just over.
HTTP_MAX=4194304 WS_MAX=1048576 GRPC_MAX=4194304

bench_need "$HARKD" "$HARK" curl "$PY"
shopt -s nullglob
FILES=("$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no .wav files in $AUDIO_DIR (apt install pocketsphinx-testdata)"
((DURATION >= 60)) || bench_die "DURATION must be at least 60 s"

# The sanitizers as the suite sets them; leaks are always looked for.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1}:detect_leaks=1"
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$BENCH_ROOT/tests/lsan.supp}

D=$BENCH_TMP/soak
mkdir -p "$D"/{ws,grpc,perf,faulty}
STOP=$D/stop
GRPC_PORT=$(bench_free_port)
UPTIME_BEFORE=$(uptime)
bench_start_harkd --model-control-mode explicit --load-model asr --load-model simple --load-model identity \
  --grpc-port "$GRPC_PORT" --exit-timeout-secs "$EXIT_TIMEOUT" \
  --http-header-timeout-secs 5 --http-body-timeout-secs 5 --http-body-deadline-secs 10 --send-timeout-secs 5 \
  --http-max-input-size "$HTTP_MAX" --ws-max-message-bytes "$WS_MAX" --grpc-max-message-bytes "$GRPC_MAX"
HARKD_PID=$BENCH_LAST_PID
HARKD_LOG=$BENCH_TMP/harkd.log
T0=$SECONDS
SANITIZED=0
grep -q libasan "/proc/$HARKD_PID/maps" && SANITIZED=1
((SANITIZED)) || bench_log "warning: $HARKD is not an ASan build: the sanitizer and leak checks cannot run"

# Each load kind marks its first finished round in $D/round.KIND.
mark_round() { [[ -e $D/round.$1 ]] || echo $((SECONDS - T0)) >"$D/round.$1"; }

# sampler: VmRSS every SAMPLE_SECS, with the phase the run is in.
sampler() {
  echo "seconds,rss_kb,phase" >"$D/rss.csv"
  while kill -0 "$HARKD_PID" 2>/dev/null; do
    awk -v t=$((SECONDS - T0)) -v p="$(cat "$D/phase" 2>/dev/null)" \
      '/^VmRSS:/ { print t "," $2 "," p }' "/proc/$HARKD_PID/status" >>"$D/rss.csv" 2>/dev/null || true
    sleep "$SAMPLE_SECS"
  done
}

# stream_loop PROTO: one file after another (STREAMS streams of each),
# real time, until the stop file; one JSON report per run.
stream_loop() {
  local proto=$1 url=$HARKD_URL i=0 f
  [[ $proto == grpc ]] && url=grpc://127.0.0.1:$GRPC_PORT
  while [[ ! -e $STOP ]]; do
    f=${FILES[i % ${#FILES[@]}]}
    timeout 120 "$HARK" transcribe --server "$url" --model asr --simulate-realtime --chunk-ms 100 \
      --parallel "$STREAMS" --timeout-secs "$REPLY_TIMEOUT" --json "$f" \
      >"$D/$proto/$i.json" 2>"$D/$proto/$i.log" || true
    i=$((i + 1))
    ((i % ${#FILES[@]})) || mark_round "$proto"
  done
}

# infer_loop: hark perf bursts on simple, HTTP and gRPC in turn.
infer_loop() {
  local i=0 proto url
  while [[ ! -e $STOP ]]; do
    proto=http url=$HARKD_URL
    ((i % 2)) && proto=grpc url=127.0.0.1:$GRPC_PORT
    timeout 60 "$HARK" perf -m simple -u "$url" -i "$proto" --concurrency-range 1:1 -p "$INFER_BURST_MS" \
      --warmup 0 --json >"$D/perf/$i.$proto.json" 2>"$D/perf/$i.$proto.log" || true
    i=$((i + 1))
    ((i >= 2)) && mark_round infer
    sleep "$INFER_PAUSE"
  done
}

# repo_call ACTION MODEL: one repository API call, logged as
# "seconds action model http_status time".
repo_call() {
  local code
  code=$(curl -s -o "$D/repo.body" -w '%{http_code} %{time_total}' --max-time 120 \
    -X POST "http://$HARKD_URL/v2/repository/models/$2/$1" || echo "000 0")
  echo "$((SECONDS - T0)) $1 $2 $code" >>"$D/repo.log"
  [[ $code == 200* ]] || echo "  $(cat "$D/repo.body" 2>/dev/null)" >>"$D/repo.log"
}

# reload_loop: load/unload cycles, simple reloaded, asr reloaded every
# ASR_RELOAD_SECS (the first time half-way through the warm-up, when the
# other loads have been running a while).
reload_loop() {
  local next_asr=$((T0 + WARMUP / 2)) m
  while [[ ! -e $STOP ]]; do
    for m in fixed_cost accumulate; do
      repo_call load "$m"
      sleep 1
      repo_call unload "$m"
      sleep 1
    done
    repo_call load simple
    mark_round repo
    if ((SECONDS >= next_asr)); then
      repo_call load asr
      mark_round asr_reload
      next_asr=$((SECONDS + ASR_RELOAD_SECS))
    fi
    sleep 1
  done
}

# faulty KIND PAUSE: bench/soak/faulty.py's rounds of KIND, PAUSE s apart.
faulty() {
  "$PY" "$FAULTY" "$1" --port "$HARKD_PORT" --grpc-port "$GRPC_PORT" --stop "$STOP" --audio-dir "$AUDIO_DIR" \
    --http-max "$HTTP_MAX" --ws-max "$WS_MAX" --grpc-max "$GRPC_MAX" --bound 30 --pause "$2" \
    ${PIPELINE:+--pipeline} >"$D/faulty/$1.jsonl" 2>"$D/faulty/$1.log" &
  local pid=$!
  # The first case it reports marks its round.
  while kill -0 "$pid" 2>/dev/null && [[ ! -s $D/faulty/$1.jsonl ]]; do sleep 1; done
  mark_round "faulty_$1"
  wait "$pid"
}

# grpc_vanish: a Riva stream whose client is SIGKILLed 1-3 s into a file.
grpc_vanish() {
  local i=0
  while [[ ! -e $STOP ]]; do
    timeout -s KILL "$((1 + RANDOM % 3))" "$HARK" transcribe --server "grpc://127.0.0.1:$GRPC_PORT" --model asr \
      --simulate-realtime --chunk-ms 100 "${FILES[i % ${#FILES[@]}]}" >/dev/null 2>&1 || true
    i=$((i + 1))
    echo "$i" >"$D/grpc_vanish.count"
    mark_round grpc_vanish
    sleep 6
  done
}

KINDS=(ws grpc infer repo asr_reload faulty_vanish faulty_noread faulty_slowloris faulty_oversize grpc_vanish)
echo warmup >"$D/phase"
bench_spawn "$D/sampler.log" sampler
bench_spawn "$D/ws.log" stream_loop ws
bench_spawn "$D/grpc.log" stream_loop grpc
bench_spawn "$D/infer.log" infer_loop
bench_spawn "$D/reload.log" reload_loop
# The faulty speech streams pause longer: on 2 cores under ASan every
# stream decoding counts, and the soak is about faults, not capacity.
for k in vanish:6 noread:4 slowloris:2 oversize:2; do bench_spawn "$D/faulty.${k%:*}.log" faulty "${k%:*}" "${k#*:}"; done
bench_spawn "$D/grpc_vanish.log" grpc_vanish
LOADERS=("${BENCH_PIDS[@]:2}") # all but harkd and the sampler
bench_log "soak: ${DURATION} s of mixed load on $HARKD (pid $HARKD_PID); warm-up ${WARMUP} s"

# rss_now: harkd's VmRSS in kB.
rss_now() { awk '/^VmRSS:/ { print $2 }' "/proc/$HARKD_PID/status" 2>/dev/null || echo 0; }

# The start point: WARMUP s passed and every kind finished a round.
START_AT=
while ((SECONDS - T0 < DURATION)) && kill -0 "$HARKD_PID" 2>/dev/null; do
  if [[ -z $START_AT ]] && ((SECONDS - T0 >= WARMUP)); then
    missing=()
    for k in "${KINDS[@]}"; do [[ -e $D/round.$k ]] || missing+=("$k"); done
    if ((${#missing[@]} == 0)); then
      START_AT=$((SECONDS - T0)) RSS_START=$(rss_now)
      echo load >"$D/phase"
      bench_log "start point at ${START_AT} s: RSS $((RSS_START / 1024)) MiB"
    fi
  fi
  sleep 1
done
touch "$STOP"
LOAD_END=$((SECONDS - T0))
bench_log "load stops at ${LOAD_END} s; waiting for the loaders' last rounds"
for pid in "${LOADERS[@]}"; do wait "$pid" 2>/dev/null || true; done
echo settle >"$D/phase"
bench_log "settling ${SETTLE} s"
sleep "$SETTLE"
ALIVE_END=0
kill -0 "$HARKD_PID" 2>/dev/null && ALIVE_END=1
RSS_END=$(rss_now)
METRICS=$(curl -sf --max-time 5 "http://127.0.0.1:$HARKD_METRICS_PORT/metrics" 2>/dev/null || true)

# SIGTERM; harkd must exit 0 within its exit timeout plus the leak scan.
rc=none exit_secs=-
if ((ALIVE_END)); then
  kill -TERM "$HARKD_PID"
  t=$SECONDS
  for ((i = 0; i < (EXIT_TIMEOUT + EXIT_MARGIN) * 10; i++)); do
    kill -0 "$HARKD_PID" 2>/dev/null || break
    sleep 0.1
  done
  exit_secs=$((SECONDS - t))
  if kill -0 "$HARKD_PID" 2>/dev/null; then
    rc="still running after $((EXIT_TIMEOUT + EXIT_MARGIN)) s"
  else
    rc=0
    wait "$HARKD_PID" || rc=$?
  fi
fi
UPTIME_AFTER=$(uptime)

# ---- checks -------------------------------------------------------------------
FAILS=0
check() { # check OK NAME FIGURES
  if (($1)); then echo "PASS $2: $3"; else echo "FAIL $2: $3"; FAILS=$((FAILS + 1)); fi
}
echo
echo "== soak: $(bench_command DURATION WARMUP SETTLE STREAMS ASR_RELOAD_SECS)"
echo "   $(bench_machine)"
echo "   uptime before: $UPTIME_BEFORE"
echo "   uptime after:  $UPTIME_AFTER"

check "$ALIVE_END" alive "harkd up through the ${LOAD_END} s of load and ${SETTLE} s of settle: $(
  ((ALIVE_END)) && echo yes || echo "NO, it died: $(grep -m1 -E 'ERROR: |runtime error:|Segmentation|Aborted' "$HARKD_LOG")")"
check "$([[ $rc == 0 ]] && echo 1 || echo 0)" exit "exit status $rc, ${exit_secs} s after SIGTERM (bound ${EXIT_TIMEOUT} + ${EXIT_MARGIN} s)"
asan=$(grep -c -E 'ERROR: AddressSanitizer|runtime error:|SUMMARY: UndefinedBehaviorSanitizer' "$HARKD_LOG" || true)
leaks=$(grep -c 'ERROR: LeakSanitizer' "$HARKD_LOG" || true)
leaked=$(grep -o 'SUMMARY: AddressSanitizer: [0-9]* byte(s) leaked in [0-9]* allocation(s)' "$HARKD_LOG" | head -1 || true)
if ((SANITIZED)); then
  check "$((asan == 0))" sanitizers "$asan AddressSanitizer/UBSan report(s) in harkd's stderr"
  check "$((leaks == 0))" leaks "$leaks LeakSanitizer report(s) at exit${leaked:+ ($leaked)}"
else
  echo "SKIP sanitizers, leaks: $HARKD is not a sanitizer build"
fi

# The speech streams, the infers and the faulty clients' outcomes.
"$PY" - "$D" <<'PY' >"$D/summary.txt" || echo "FAIL summary: cannot read the reports" >>"$D/summary.txt"
import collections, glob, json, os, sys
d = sys.argv[1]
ok = refused = failed = runs = noreport = 0
chunk_max = final_max = 0.0
reasons = collections.Counter()
for proto in ("ws", "grpc"):
    for path in glob.glob(os.path.join(d, proto, "*.json")):
        runs += 1
        try:
            doc = json.load(open(path))
        except ValueError:
            noreport += 1
            reasons[(proto, "no report: " + open(path[:-5] + ".log").read()[-200:].strip())] += 1
            continue
        chunk_max = max(chunk_max, doc["chunk_latency_ms"]["max"])
        final_max = max(final_max, doc["final_latency_ms"]["max"])
        for f in doc["files"]:
            for s in f["streams"]:
                if s["status"] == "ok":
                    ok += 1
                    continue
                reason = s.get("reason", "")
                # Refused at connect with a reason: an HTTP status on the
                # upgrade, or gRPC's refusals before any reply came.
                at_connect = bool(s.get("http_status")) or (
                    s.get("grpc_status") in (8, 14) and ("too many streams" in reason or "overloaded" in reason))
                if at_connect:
                    refused += 1
                else:
                    failed += 1
                reasons[(proto, "%s%s: %s" % (s["status"], " (refused)" if at_connect else "", reason[:160]))] += 1
streams = ok + refused + failed
good = failed == 0 and noreport == 0 and ok > 0
print("%s streams: %d streams in %d runs: %d got their final, %d refused at connect with a reason, "
      "%d admitted but lost (timeout or no final), %d runs without a report"
      % ("PASS" if good else "FAIL", streams, runs, ok, refused, failed, noreport))
for (proto, r), k in reasons.most_common(5):
    print("       %d x %s %s" % (k, proto, r))
print("INFO stream latency: slowest chunk reply %.0f ms, slowest final %.0f ms (a reply later than "
      "REPLY_TIMEOUT counts as lost)" % (chunk_max, final_max))
reqs = errs = bursts = 0
for path in glob.glob(os.path.join(d, "perf", "*.json")):
    try:
        doc = json.load(open(path))
    except ValueError:
        bursts += 1
        errs += 1  # a burst that gave no report: count it failed
        continue
    bursts += 1
    for r in doc["results"]:
        reqs += r["requests"]
        errs += r["errors"]
print("%s infers: %d KServe infers on simple in %d bursts (HTTP and gRPC), %d failed"
      % ("PASS" if errs == 0 and reqs > 0 else "FAIL", reqs, bursts, errs))
outcomes = collections.Counter()
for path in glob.glob(os.path.join(d, "faulty", "*.jsonl")):
    for line in open(path):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        outcomes[(o["kind"], o["case"], o["outcome"].split(" after ")[0] if o["kind"] != "vanish" else "vanished")] += 1
print("INFO faulty clients (kind/case: server's answer x count):")
for (kind, case, out), k in sorted(outcomes.items()):
    print("       %s/%s: %s x %d" % (kind, case, out, k))
PY
cat "$D/summary.txt"
grep -q '^FAIL' "$D/summary.txt" && FAILS=$((FAILS + $(grep -c '^FAIL' "$D/summary.txt")))
echo "INFO grpc streams SIGKILLed mid-file: $(cat "$D/grpc_vanish.count" 2>/dev/null || echo 0)"
repo_total=$(grep -c '^[0-9]' "$D/repo.log" 2>/dev/null || echo 0)
repo_bad=$(grep '^[0-9]' "$D/repo.log" 2>/dev/null | awk '$4 != 200' | wc -l)
echo "INFO repository calls: $repo_total ($(grep -c ' load asr ' "$D/repo.log" 2>/dev/null || echo 0) asr reloads), $repo_bad not 200"
echo "INFO limits hit (hark_limit_hits_total): $(grep '^hark_limit_hits_total' <<<"$METRICS" |
  sed -E 's/hark_limit_hits_total\{limit="([a-z_]+)"\} /\1=/' | tr '\n' ' ')"

if [[ -n $START_AT ]]; then
  growth=$(awk -v a="$RSS_START" -v b="$RSS_END" 'BEGIN { printf "%+.1f", (b - a) * 100 / a }')
  peak=$(awk -F, 'NR > 1 && $2 > m { m = $2 } END { print m + 0 }' "$D/rss.csv")
  warm=$(awk -F, -v s="$RSS_START" 'BEGIN { m = s } NR > 1 && $3 == "warmup" && $2 > m { m = $2 } END { print m + 0 }' "$D/rss.csv")
  over=$(awk -v a="$warm" -v b="$RSS_END" 'BEGIN { printf "%+.1f", (b - a) * 100 / a }')
  check "$(awk -v g="$over" -v t="$RSS_TOLERANCE" 'BEGIN { print (g <= t) ? 1 : 0 }')" rss \
    "VmRSS $((RSS_END / 1024)) MiB after ${SETTLE} s of settle, ${over}% over the warm-up's peak of $((warm / 1024)) MiB (bound +${RSS_TOLERANCE}%); ${growth}% over the start point's $((RSS_START / 1024)) MiB (${START_AT} s); peak $((peak / 1024)) MiB; $(($(wc -l <"$D/rss.csv") - 1)) samples"
else
  check 0 rss "no start point: the warm-up did not finish (no round yet of: ${missing[*]:-?})"
fi

if [[ -n $KEEP ]]; then
  mkdir -p "$KEEP" && cp -r "$D"/. "$KEEP"/ && cp "$HARKD_LOG" "$KEEP"/
  echo "logs, reports and rss.csv kept in $KEEP"
fi
if ((FAILS)); then
  echo "harkd's log, last lines:"
  tail -n 40 "$HARKD_LOG"
  echo "soak: $FAILS check(s) FAILED"
  exit 1
fi
echo "soak: every check passed"
