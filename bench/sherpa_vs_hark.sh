#!/usr/bin/env bash
# bench/sherpa_vs_hark.sh — issue 27: hark against sherpa-onnx on the same
# model (the bench's 20M transducer), the same LibriVox audio, the same
# cores, alternating, one engine at a time:
#
#   0. tools/sherpa/build.sh (sherpa-onnx-node from npm, pinned, cached;
#      stops here when missing or of another version), the model exported
#      by tools/sherpa/export_onnx.py (cached by the model's and the
#      exporter's hash), and bench/sherpa_check_tokens.py: sherpa's tokens
#      against hark's decoding on every file (reported; a difference is
#      said, not fatal: the figures then say so).
#   1. for each N in NS (1 16 64), ROUNDS (2) times, alternating: sherpa
#      (bench/sherpa_peer.js run N SECONDS: N real-time streams, 100 ms
#      pieces, their starts spread over STAGGER_MS (1000, both engines),
#      decodeStreams over every ready stream on a 10 ms loop, one
#      ONNX Runtime thread) and hark (bench/neural_streams.sh
#      FIGURES=streams NS=N INTRA=1: `hark transcribe --simulate-realtime`
#      over the Vosk WebSocket, max_batch_size 24 (its default), one intra-op thread).
#      Each: CPU seconds per stream-second (sherpa: its node process, which
#      feeds itself; hark: harkd alone, its client apart), window/chunk
#      p99 against the bars of issue 26 (200 ms), host load before.
#
# Env: NS ("1 16 64"), ROUNDS (2), SECONDS_PER_RUN (20: sherpa's run; hark's
# is neural_streams.sh's ITERATIONS=1 pass of the files), PRECISION (hark's
# precision parameter), BUILD_DIR, SHERPA_CACHE (/var/cache/hark/sherpa).
# Output: a markdown section on stdout; raw JSON lines in $OUT_JSON
# (default /tmp/sherpa_vs_hark.jsonl).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
PY=/usr/bin/python3
NS=${NS:-1 16 64}
ROUNDS=${ROUNDS:-2}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-20}
SHERPA_CACHE=${SHERPA_CACHE:-/var/cache/hark/sherpa}
OUT_JSON=${OUT_JSON:-/tmp/sherpa_vs_hark.jsonl}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
FILES=("$AUDIO_DIR"/*.wav)
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
BUILD_DIR=${BUILD_DIR:-$root/build}
for b in harkd hark; do
  [[ -x $BUILD_DIR/bin/$b ]] || { log "$BUILD_DIR/bin/$b is missing: cmake --build build --target harkd hark hark_neural_asr"; exit 1; }
done

NODE_PATH=$("$root/tools/sherpa/build.sh" "$SHERPA_CACHE") || {
  log "sherpa-onnx is not installed as tools/sherpa/build.sh wants it: stopping"
  exit 1
}
export NODE_PATH
MODEL_DIR=$($PY -c 'import sys; sys.path.insert(0, sys.argv[1]); import asr_models
print(asr_models.model_dir("transducer", "20m", 1))' "$root/tests/e2e")
stamp=$(cat "$MODEL_DIR/model.pt" "$root/tools/sherpa/export_onnx.py" | sha256sum | cut -c1-16)
ONNX_DIR=$SHERPA_CACHE/model-20m-$stamp
if [[ ! -s $ONNX_DIR/joiner.onnx ]]; then
  log "exporting $MODEL_DIR to $ONNX_DIR"
  rm -rf "$ONNX_DIR.tmp"
  nice "$PY" "$root/tools/sherpa/export_onnx.py" --model "$MODEL_DIR" --out "$ONNX_DIR.tmp" 2>&1 |
    grep -v -i warning >&2 || true
  [[ -s $ONNX_DIR.tmp/joiner.onnx ]] || { log "the export failed"; exit 1; }
  mv "$ONNX_DIR.tmp" "$ONNX_DIR"
fi

log "tokens: sherpa-onnx against hark's decoding"
TOKENS_OK=yes
TOKENS_REPORT=$("$PY" "$here/sherpa_check_tokens.py" "$MODEL_DIR" "$ONNX_DIR" "$NODE_PATH" "${FILES[@]}") ||
  TOKENS_OK=no
log "$TOKENS_REPORT"

: >"$OUT_JSON"
keep=$(mktemp -d)
trap 'rm -rf "$keep"' EXIT
for r in $(seq "$ROUNDS"); do
  for n in $NS; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    log "round $r, N=$n: sherpa-onnx (load $load)"
    node "$here/sherpa_peer.js" "$ONNX_DIR" run "$n" "$SECONDS_PER_RUN" "${FILES[@]}" |
      $PY -c 'import json,sys; d=json.loads(sys.stdin.read()); d.update(engine="sherpa", round=int(sys.argv[1]), load=float(sys.argv[2])); print(json.dumps(d))' "$r" "$load" >>"$OUT_JSON"
    tail -1 "$OUT_JSON" >&2
    load=$(cut -d' ' -f1 /proc/loadavg)
    log "round $r, N=$n: hark (load $load)"
    rm -f "$keep"/*.json
    FIGURES=streams NS=$n B1_CONFIGS= INTRA=1 ITERATIONS=1 KEEP_RESULTS=$keep \
      PRECISION=${PRECISION:-} "$here/neural_streams.sh" >/dev/null 2>"$keep/log" || true
    f=$(ls "$keep"/batched-*.json 2>/dev/null | head -1 || true)
    if [[ -n $f ]]; then
      $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); d.update(engine="hark", round=int(sys.argv[2]), load=float(sys.argv[3])); print(json.dumps(d))' "$f" "$r" "$load" >>"$OUT_JSON"
      tail -1 "$OUT_JSON" >&2
    else
      log "hark N=$n: no result: $(tail -3 "$keep/log")"
    fi
  done
done

$PY - "$OUT_JSON" "$TOKENS_OK" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("\n### sherpa-onnx against hark (issue 27)\n")
print(f"Tokens equal on every LibriVox file: {sys.argv[2]}.\n")
print("| engine | round | N | load before | CPU s per stream-s | p50 ms | p99 ms | max ms | within 200 ms p99 | mean batch | client CPU s/stream-s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for d in rows:
    if d["engine"] == "sherpa":
        ok = d["p99_ms"] is not None and d["p99_ms"] <= 200
        print(f"| sherpa-onnx | {d['round']} | {d['n']} | {d['load']} | {d['cpu_per_stream_s']:.4f} | "
              f"{d['p50_ms']:.0f} | {d['p99_ms']:.0f} | {d['max_ms']:.0f} | {'yes' if ok else 'no'} | "
              f"{d['mean_batch']:.1f} | (in its process) |")
    else:
        c = d.get("chunk", {})
        print(f"| hark | {d['round']} | {d['n']} | {d['load']} | {d['cpu_per_stream_s']} | "
              f"{c.get('p50', '-')} | {c.get('p99', '-')} | {c.get('max', '-')} | "
              f"{'yes' if d.get('pass') else 'no'} | {d['mean_batch']} | {d['client_cpu_per_stream_s']} |")
PY
