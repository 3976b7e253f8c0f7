#!/usr/bin/env bash
# bench/asr_capacity.sh — how many real-time streams one harkd serves within
# latency bounds, against what the bare library could at best on the same
# cores (goal: N / limit >= 0.8).
#
# limit = cores / (CPU seconds per audio second of bin/ps_bare, measured in
# this run with the profile the model serves): the streams the machine
# could decode if pocketsphinx alone used every core. N = the largest --parallel for which
#   hark transcribe --simulate-realtime --chunk-ms 100 --parallel N
# over the LibriVox files has p99 chunk latency <= 200 ms, p99 final latency
# <= 500 ms, no reply later than 2 s (--timeout-secs 2, and both maxima),
# and no errors. The search starts at the limit, doubles or halves until it
# brackets N, then bisects to within 5%.
#
# PROTOCOL picks the client API: ws (Vosk's WebSocket, the default), grpc
# (Riva's StreamingRecognize, `--server grpc://...`), or both: the same
# search over each, one after the other against the same harkd in the same
# run, and the ratio of the two capacities (the goal: gRPC within 10% of
# WebSocket).
#
# Then "connected but mostly silent": SILENT_STREAMS (200) streams, 90% of
# them sending silence, with harkd's peak RSS and the peak of every /metrics
# series whose name mentions decoders (if the server exposes any); on the
# first protocol only.
#
# MODEL_PARAMS ("key=value ..."): parameters set over the model's own, in
# a copy of the repository made for the run (e.g. "degrade=true", or
# "profile=fast" for the fast profile's capacity). INSTANCES: the model's
# instance count instead of its config's.
#
# Before the search, one untimed warm-up trial at the limit lets the pool
# make its decoders (a server in service has them); after it:
#   - at AT_FRACTION (0.8) of the limit: the chunk latency hark adds over
#     the library's own step (p50 and p99, ps_bare's from the same run);
#   - OVERLOAD (1): harkd restarted with --max-streams at the capacity
#     found and its decoder pool made at load, and 2x the limit streams
#     started at once: those admitted must keep the bounds, the rest be
#     refused at connect with a reason.
#
# Env: BUILD_DIR (default ./build), MODEL (asr), AUDIO_DIR, ITERATIONS (2:
# passes per trial, so each stream slot runs ~2 files), MAX_N (1000),
# SILENT_STREAMS (200; 0 skips that part), PROTOCOL (ws | grpc | both),
# P99_CHUNK_MS (200), P99_FINAL_MS (500), MAX_REPLY_MS (2000: whole seconds),
# H2H_ROUNDS (2: alternated rounds at one N after the searches, PROTOCOL=both).
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MODEL=${MODEL:-asr}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
ITERATIONS=${ITERATIONS:-2}
MAX_N=${MAX_N:-1000}
SILENT_STREAMS=${SILENT_STREAMS:-200}
PROTOCOL=${PROTOCOL:-ws}
MODEL_PARAMS=${MODEL_PARAMS:-}
INSTANCES=${INSTANCES:-}
AT_FRACTION=${AT_FRACTION:-0.8}
OVERLOAD=${OVERLOAD:-1}
case $PROTOCOL in
  ws | grpc) PROTOCOLS=("$PROTOCOL") ;;
  both) PROTOCOLS=(ws grpc) ;;
  *) bench_die "PROTOCOL must be ws, grpc or both, not '$PROTOCOL'" ;;
esac
PS_BARE=$BUILD_DIR/bin/ps_bare
# The bounds; overridable to compare protocols on a machine too slow or
# busy for the real ones (say so next to the figure).
P99_CHUNK_MS=${P99_CHUNK_MS:-200} P99_FINAL_MS=${P99_FINAL_MS:-500} MAX_REPLY_MS=${MAX_REPLY_MS:-2000}

bench_need "$HARKD" "$HARK" "$PS_BARE" curl "$PY"
shopt -s nullglob
FILES=("$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no .wav files in $AUDIO_DIR (apt install pocketsphinx-testdata)"
CORES=$(nproc)

# The reference decodes with the profile the model serves: MODEL_PARAMS
# "profile=fast" compares hark's fast profile with the library under the
# same arguments (ps_bare --profile fast), not with its slower defaults.
# The model's own config may name the profile too (MODEL_PARAMS wins).
# Its "fast:<argument>" overrides are not mirrored in the reference: a
# model that sets any gets a warning.
BARE_PROFILE=accurate
grep -Eq 'key: *"profile" *value: *\{ *string_value: *"fast"' "$BENCH_ROOT/models/$MODEL/config.pbtxt" 2>/dev/null &&
  BARE_PROFILE=fast
[[ " $MODEL_PARAMS " == *" profile=fast "* ]] && BARE_PROFILE=fast
[[ " $MODEL_PARAMS " == *" profile=accurate "* ]] && BARE_PROFILE=accurate
if [[ $BARE_PROFILE == fast ]] && { [[ $MODEL_PARAMS == *fast:* ]] ||
  grep -q 'key: *"fast:' "$BENCH_ROOT/models/$MODEL/config.pbtxt" 2>/dev/null; }; then
  bench_log "warning: the model overrides fast-profile arguments (fast:...); ps_bare --profile fast uses the defaults"
fi
bench_log "bare reference: ps_bare --profile $BARE_PROFILE over ${#FILES[@]} files"
timeout 600 "$PS_BARE" --profile "$BARE_PROFILE" --json "${FILES[@]}" >"$BENCH_TMP/bare.json" || bench_die "ps_bare failed"
BARE_PER=$(bench_json "$BENCH_TMP/bare.json" '"%.4f" % d["cpu_per_audio_second"]')
LIMIT=$(awk -v c="$CORES" -v b="$BARE_PER" 'BEGIN { printf "%.1f\n", c / b }')
# The library's own floor under the latency bounds: CPU per block of speech
# (with a partial every 100 ms, as the client gets) and per utterance end.
timeout 600 "$PS_BARE" --profile "$BARE_PROFILE" --partial-ms 100 --json "${FILES[@]}" >"$BENCH_TMP/floor.json" || bench_die "ps_bare failed"
FLOOR=$(bench_json "$BENCH_TMP/floor.json" \
  '"p50 %.0f ms, p99 %.0f ms, max %.0f ms per 128 ms block; utterance end p50 %.0f ms, max %.0f ms" % (d["block_ms"]["p50"], d["block_ms"]["p99"], d["block_ms"]["max"], d["utterance_end_ms"]["p50"], d["utterance_end_ms"]["max"])')
bench_log "ps_bare: $BARE_PER CPU s per audio s -> limit $LIMIT streams on $CORES cores"

# model_repo DIR KEY=VALUE...: a repository in $BENCH_TMP/DIR holding a
# copy of the model with INSTANCES and the given parameters applied.
model_repo() {
  local repo=$BENCH_TMP/$1; shift
  mkdir -p "$repo"
  cp -r "$BENCH_ROOT/models/$MODEL" "$repo/$MODEL"
  $PY - "$repo/$MODEL/config.pbtxt" "$INSTANCES" "$@" <<'PY' || bench_die "cannot apply MODEL_PARAMS"
import re, sys
path, instances, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
text = open(path).read()
if instances:
    text, n = re.subn(r"(instance_group \[ \{ count: )\d+", r"\g<1>" + instances, text)
    assert n == 1, "no instance_group count to replace"
for kv in pairs:
    key, _, value = kv.partition("=")
    entry = '{ key: "%s" value: { string_value: "%s" } }' % (key, value)
    text, n = re.subn(r'\{ key: "%s" value: \{ string_value: "[^"]*" \} \}' % re.escape(key), entry, text)
    if n == 0:
        text = text.replace("parameters [", "parameters [\n  " + entry + ",", 1)
open(path, "w").write(text)
PY
  echo "$repo"
}

# The repository the run serves: the shipped one, or a copy of the model
# with MODEL_PARAMS / INSTANCES applied.
if [[ -n $MODEL_PARAMS || -n $INSTANCES ]]; then
  # shellcheck disable=SC2086 # the pairs split on purpose
  BENCH_REPO=$(model_repo repo $MODEL_PARAMS)
fi

GRPC_PORT=$(bench_free_port) # a later --grpc-port wins over lib.sh's -1
start_server() {
  bench_start_harkd --model-control-mode explicit --load-model "$MODEL" --grpc-port "$GRPC_PORT" "$@" # only what is measured
  HARKD_PID=$BENCH_LAST_PID
  curl -sf -o /dev/null "http://$HARKD_URL/v2/models/$MODEL/ready" || bench_die "model '$MODEL' is not ready"
}
start_server

# server_url PROTO: what `hark transcribe --server` takes for it.
server_url() { if [[ $1 == grpc ]]; then echo "grpc://127.0.0.1:$GRPC_PORT"; else echo "$HARKD_URL"; fi; }
PROTO=${PROTOCOLS[0]} # the protocol of the current search

# transcribe OUT.json N [ARGS...]: one real-time run at --parallel N over
# $PROTO; the exit status is hark's (1 when some stream failed), never
# fatal here.
transcribe() {
  local out=$1 n=$2; shift 2
  timeout $((ITERATIONS * 15 + 60)) "$HARK" transcribe --server "$(server_url "$PROTO")" --model "$MODEL" \
    --simulate-realtime --chunk-ms 100 --parallel "$n" --timeout-secs $((MAX_REPLY_MS / 1000)) --json "$@" \
    "${FILES[@]}" >"$out" 2>"$out.log"
}

# figures OUT.json: "chunk_p99 final_p99 chunk_max final_max errors timeouts streams".
figures() {
  bench_json "$1" '" ".join(str(x) for x in (d["chunk_latency_ms"]["p99"], d["final_latency_ms"]["p99"],
    d["chunk_latency_ms"]["max"], d["final_latency_ms"]["max"], d["errors"], d["timeouts"], d["streams"]))'
}


declare -A SEEN # PROTO:N -> "pass|fail figures"
# trial N: 0 when N streams meet every bound over $PROTO.
trial() {
  local n=$1 key=$PROTO:$1 out=$BENCH_TMP/trial-$PROTO-$1.json f verdict
  if [[ -z ${SEEN[$key]:-} ]]; then
    bench_settle "$MODEL"
    transcribe "$out" "$n" --iterations "$ITERATIONS" || true
    if [[ -s $out ]] && f=$(figures "$out"); then
      verdict=$(awk -v c="$P99_CHUNK_MS" -v fi="$P99_FINAL_MS" -v m="$MAX_REPLY_MS" '{
        print ($1 <= c && $2 <= fi && $3 <= m && $4 <= m && $5 == 0 && $6 == 0) ? "pass" : "fail" }' <<<"$f")
    else
      f="no result: $(tail -c 300 "$out.log")" verdict=fail
    fi
    SEEN[$key]="$verdict $f"
    bench_log "  $PROTO N=$n: $verdict (p99 chunk/final ms, max chunk/final ms, errors, timeouts, streams: $f)"
  fi
  [[ ${SEEN[$key]} == pass* ]]
}

declare -A CAP HI # PROTO -> the largest N that passed, the smallest that failed
# search: brackets and bisects N over $PROTO into CAP[$PROTO], HI[$PROTO].
search() {
  local n lo hi mid
  bench_log "searching N over $PROTO (p99 chunk <= $P99_CHUNK_MS ms, p99 final <= $P99_FINAL_MS ms, every reply <= $MAX_REPLY_MS ms)"
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
  CAP[$PROTO]=$lo HI[$PROTO]=$hi
}

WARM_N=$(awk -v l="$LIMIT" 'BEGIN { n = int(l); print (n < 1 ? 1 : n) }')
bench_log "warm-up: $WARM_N streams, untimed (the pool makes its decoders)"
transcribe "$BENCH_TMP/warmup.json" "$WARM_N" --iterations 1 || true
for PROTO in "${PROTOCOLS[@]}"; do search; done
PROTO=${PROTOCOLS[0]}
lo=${CAP[$PROTO]} hi=${HI[$PROTO]}
RATIO=$(bench_ratio "$lo" "$LIMIT" 2)
verdict=$(awk -v v="$RATIO" 'BEGIN { print (v >= 0.8 ? "met" : "NOT met") }')

# Head to head (PROTOCOL=both): the two protocols alternated at one N
# (WebSocket's capacity, at least 1), H2H_ROUNDS rounds each, so drift on
# a shared machine hits both alike. Rows "proto: p50 chunk, p99 chunk,
# p99 final, errors, timeouts" per round.
h2h_report=""
if ((${#PROTOCOLS[@]} == 2)); then
  H2H_ROUNDS=${H2H_ROUNDS:-2}
  h2h_n=${CAP[ws]}
  ((h2h_n >= 1)) || h2h_n=1
  bench_log "head to head at N=$h2h_n, $H2H_ROUNDS rounds"
  for ((r = 1; r <= H2H_ROUNDS; r++)); do
    order=(ws grpc)
    ((r % 2 == 0)) && order=(grpc ws)
    for PROTO in "${order[@]}"; do
      bench_settle "$MODEL"
      out=$BENCH_TMP/h2h-$PROTO-$r.json
      transcribe "$out" "$h2h_n" --iterations "$ITERATIONS" || true
      if [[ -s $out ]]; then
        row=$(bench_json "$out" '"%s %s %s %s %s %s/%s" % (d["chunk_latency_ms"]["p50"], d["chunk_latency_ms"]["p99"],
          d["final_latency_ms"]["p99"], d["errors"], d["timeouts"], d["ok"], d["streams"])')
      else
        row="no result"
      fi
      bench_log "  round $r $PROTO: $row"
      h2h_report+="| $r | $PROTO | ${row// / | } |"$'\n'
    done
  done
  PROTO=${PROTOCOLS[0]}
fi

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
  bench_settle "$MODEL"
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

# At AT_FRACTION of the limit: the chunk latency hark adds over the
# library's own step.
at_report=""
AT_N=$(awk -v l="$LIMIT" -v f="$AT_FRACTION" 'BEGIN { n = int(l * f + 0.5); print (n < 1 ? 1 : n) }')
bench_settle "$MODEL"
transcribe "$BENCH_TMP/at.json" "$AT_N" --iterations "$ITERATIONS" || true
if [[ -s $BENCH_TMP/at.json ]]; then
  at_report=$($PY - "$BENCH_TMP/at.json" "$BENCH_TMP/floor.json" "$AT_N" "$AT_FRACTION" "$PROTO" <<'PY'
import json, sys
d, fl = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
c, f, b = d["chunk_latency_ms"], d["final_latency_ms"], fl["block_ms"]
print(f"- At {sys.argv[4]} of the limit ({sys.argv[3]} streams, {sys.argv[5]}): chunk latency p50 {c['p50']} / "
      f"p99 {c['p99']} / max {c['max']} ms, final p99 {f['p99']} / max {f['max']} ms, {d['errors']} errors, "
      f"{d['timeouts']} timeouts. The library's own step: p50 {b['p50']} / p99 {b['p99']} ms, so "
      f"**hark adds p50 {c['p50'] - b['p50']:.1f} ms, p99 {c['p99'] - b['p99']:.1f} ms** per chunk.")
PY
)
else
  at_report="- At $AT_FRACTION of the limit ($AT_N streams): no result: $(tail -c 300 "$BENCH_TMP/at.json.log")"
fi

# OVERLOAD: 2x the limit against a server capped at the capacity found.
over_report="(skipped: OVERLOAD=0)"
if ((OVERLOAD)) && ((lo >= 1)); then
  kill "$HARKD_PID" 2>/dev/null && wait "$HARKD_PID" 2>/dev/null || true
  # A server in service has its decoders: the new one makes its whole pool
  # at load (decoder_pool_preload). Made on demand while the admitted
  # streams start together, they cost those streams the chunk bar
  # (bench/RESULTS.md, 2026-11-27); one warm pass did not make them all.
  POOL=$($PY -c 'import re, sys
m = re.search(r"key: *\"decoder_pool_size\" *value: *\{ *string_value: *\"(\d+)\"", open(sys.argv[1]).read())
print(m.group(1) if m else 4 * int(sys.argv[2]))' "${BENCH_REPO:-$BENCH_ROOT/models}/$MODEL/config.pbtxt" "$CORES")
  # shellcheck disable=SC2086
  OVER_REPO=$(model_repo over-repo $MODEL_PARAMS decoder_pool_preload="$POOL")
  BENCH_REPO=$OVER_REPO start_server --max-streams "$lo"
  OVER_N=$(awk -v l="$LIMIT" 'BEGIN { n = int(2 * l + 0.5); print (n < 2 ? 2 : n) }')
  bench_log "overload: $OVER_N streams at once, --max-streams $lo"
  transcribe "$BENCH_TMP/warm2.json" "$lo" --iterations 1 || true # the new server's decoders
  bench_settle "$MODEL"
  transcribe "$BENCH_TMP/over.json" "$OVER_N" --iterations 1 &
  over_pid=$!
  sleep 2 # the admitted streams are live: what a refused client reads
  [[ $PROTO == ws ]] && curl -s --max-time 5 -o "$BENCH_TMP/refusal.txt" -w '%{http_code}' -H 'Connection: Upgrade' \
    -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' \
    "http://$HARKD_URL/v2/models/$MODEL/stream" >"$BENCH_TMP/refusal.status" || true
  wait "$over_pid" || true
  [[ -s $BENCH_TMP/over.json ]] || bench_die "the overload run gave no result: $(tail -c 300 "$BENCH_TMP/over.json.log")"
  refusal="HTTP $(cat "$BENCH_TMP/refusal.status" 2>/dev/null) $(head -c 300 "$BENCH_TMP/refusal.txt" 2>/dev/null)"
  over_report=$($PY - "$BENCH_TMP/over.json" "$OVER_N" "$lo" "$P99_CHUNK_MS" "$P99_FINAL_MS" "$MAX_REPLY_MS" <<'PY'
import collections, json, sys
d = json.load(open(sys.argv[1]))
n, cap, bc, bf, bm = sys.argv[2], sys.argv[3], *map(float, sys.argv[4:7])
reasons = collections.Counter()
for fi in d["files"]:
    for s in fi["streams"]:
        if s["status"] != "ok":
            reasons[(s["status"], s.get("http_status"), s.get("reason", ""))] += 1
c, f = d["chunk_latency_ms"], d["final_latency_ms"]
kept = c["p99"] <= bc and f["p99"] <= bf and c["max"] <= bm and f["max"] <= bm and d["timeouts"] == 0
refused_ok = all(st == "error" and (hs in (503, 429) or "too many" in r or "overloaded" in r) for (st, hs, r) in reasons)
print(f"- At 2x the limit ({n} streams at once, --max-streams {cap}): {d['ok']} admitted and finished, "
      f"{d['errors']} refused, {d['timeouts']} timed out; admitted streams: chunk p99 {c['p99']} / max {c['max']} ms, "
      f"final p99 {f['p99']} / max {f['max']} ms — bounds kept: {'yes' if kept else 'NO'}; every refusal at "
      f"connect with a reason: {'yes' if refused_ok else 'NO'}.")
for (st, hs, r), k in reasons.most_common(3):
    print(f"  - {k} × {st}" + (f" HTTP {hs}" if hs else "") + f": {r[:160]}")
PY
)
  [[ $PROTO == ws ]] && over_report+=$'\n'"  - what a client refused at connect reads (curl, during the run): $refusal"
  over_report+=$'\n'"  - the restarted server made its pool of $POOL decoders at load (decoder_pool_preload $POOL)"

fi

cat <<EOF

### Speech: real-time streams per machine

$(bench_machine). Command: \`$(bench_command MODEL MODEL_PARAMS INSTANCES ITERATIONS MAX_N SILENT_STREAMS PROTOCOL P99_CHUNK_MS P99_FINAL_MS MAX_REPLY_MS)\`.
Bounds: p99 chunk latency ≤ $P99_CHUNK_MS ms, p99 final latency ≤ $P99_FINAL_MS ms, every reply ≤ $MAX_REPLY_MS ms,
no errors; \`hark transcribe --simulate-realtime --chunk-ms 100\`, passes per trial: $ITERATIONS over
${#FILES[@]} LibriVox files. Limit = $CORES cores ÷ ps_bare's $BARE_PER CPU s per audio s (\`--profile $BARE_PROFILE\`, same run).
The bare library's own CPU time per step a reply waits for (ps_bare --profile $BARE_PROFILE --partial-ms 100, same run):
$FLOOR — no server can answer faster than the step it waits for.

| protocol | streams N | limit | N / limit | p99 chunk ms | p99 final ms | max chunk ms | max final ms |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
$(for p in "${PROTOCOLS[@]}"; do
  b=${SEEN[$p:${CAP[$p]}]:-"none - - - -"}
  echo "| $p | ${CAP[$p]} | $LIMIT | $(bench_ratio "${CAP[$p]}" "$LIMIT" 2) | $(cut -d' ' -f2 <<<"$b") | $(cut -d' ' -f3 <<<"$b") | $(cut -d' ' -f4 <<<"$b") | $(cut -d' ' -f5 <<<"$b") |"
done)

- Capacity ($PROTO): **$lo streams = ${RATIO}× the bare-library limit** (goal ≥ 0.8: $verdict)$( ((hi > MAX_N)) && echo "; the search stopped at MAX_N=$MAX_N").
$(if ((${#PROTOCOLS[@]} == 2)); then
  r=$(bench_ratio "${CAP[grpc]}" "${CAP[ws]}" 2)
  if ((CAP[ws] == 0)); then
    echo "- gRPC (Riva StreamingRecognize) vs WebSocket: no ratio, WebSocket served no N within the bounds (the head-to-head rounds below compare them at N=1)."
  else
    echo "- gRPC (Riva StreamingRecognize) vs WebSocket, same server, same run: **${CAP[grpc]} / ${CAP[ws]} = ${r}×** (goal: within 10%, i.e. ≥ 0.90: $(awk -v v="$r" 'BEGIN { print (v >= 0.9 ? "met" : "NOT met") }'))."
  fi
fi)
$(if [[ -n $h2h_report ]]; then
  echo "- Head to head at N=$h2h_n (protocols alternated, $H2H_ROUNDS rounds, same server):"
  echo
  echo "| round | protocol | p50 chunk ms | p99 chunk ms | p99 final ms | errors | timeouts | ok/streams |"
  echo "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
  printf '%s' "$h2h_report"
fi)

- Trials (protocol:N: verdict p99 chunk, p99 final, max chunk, max final, errors, timeouts, streams):
$(for k in $(printf '%s\n' "${!SEEN[@]}" | sort -t: -k1,1 -k2n); do echo "  $k: ${SEEN[$k]};"; done)
$at_report
$over_report
- Load average after the run: $(cut -d' ' -f1-3 /proc/loadavg).
$silent_report
EOF
