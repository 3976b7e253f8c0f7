#!/usr/bin/env bash
# bench/asr_8k_determinism.sh — the same 8 kHz audio, the same words: each
# LibriVox recording, converted to 8 kHz 16-bit WAV, goes ITERATIONS times
# through each path (Vosk WebSocket and Riva StreamingRecognize with `hark
# transcribe`, offline KServe with a POST) and the distinct transcripts are
# counted, per path and over all three. One transcript per recording is the
# goal; before resampling was made deterministic, soxr's clock-seeded dither
# gave two or more on some recordings.
#
# Env: BUILD_DIR (./build), ITERATIONS (10), MODEL (asr), AUDIO_DIR.
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ITERATIONS=${ITERATIONS:-10}
MODEL=${MODEL:-asr}
AUDIO_DIR=${AUDIO_DIR:-/usr/share/pocketsphinx/test/data/librivox}
mapfile -t FILES < <(ls "$AUDIO_DIR"/*.wav)
((${#FILES[@]})) || bench_die "no WAV files in $AUDIO_DIR"

GRPC_PORT=$(bench_free_port)
bench_start_harkd --grpc-port "$GRPC_PORT"

# The 8 kHz copies (audioop's rate conversion, once: the input is fixed).
mkdir -p "$BENCH_TMP/8k"
$PY - "$BENCH_TMP/8k" "${FILES[@]}" <<'PY'
import audioop, os, sys, wave
for path in sys.argv[2:]:
    with wave.open(path) as w:
        rate, pcm = w.getframerate(), w.readframes(w.getnframes())
    low, _ = audioop.ratecv(pcm, 2, 1, rate, 8000, None)
    with wave.open(os.path.join(sys.argv[1], os.path.basename(path)), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(8000), w.writeframes(low)
PY
LOW=("$BENCH_TMP"/8k/*.wav)

# transcripts PATH-KIND OUT: one line per (file, iteration): "file<TAB>text".
transcripts() {
  local kind=$1 out=$2 i server
  : >"$out"
  for ((i = 1; i <= ITERATIONS; i++)); do
    if [[ $kind == offline ]]; then
      $PY - "$HARKD_URL" "$MODEL" "${LOW[@]}" >>"$out" <<'PY' || bench_die "offline pass failed"
import http.client, json, os, struct, sys
host, port = sys.argv[1].split(":")
conn = http.client.HTTPConnection(host, int(port), timeout=600)
for path in sys.argv[3:]:
    data = open(path, "rb").read()
    header = json.dumps({"inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1],
                                     "parameters": {"binary_data_size": len(data) + 4}}]}).encode()
    conn.request("POST", f"/v2/models/{sys.argv[2]}/infer",
                 header + struct.pack("<I", len(data)) + data,
                 {"Inference-Header-Content-Length": str(len(header))})
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        sys.exit(f"{path}: HTTP {r.status}")
    text = {o["name"]: o for o in json.loads(body)["outputs"]}["TRANSCRIPT"]["data"][0]
    print(f"{os.path.basename(path)}\t{text}")
PY
    else
      server=$HARKD_URL
      [[ $kind == riva ]] && server=grpc://127.0.0.1:$GRPC_PORT
      timeout 600 "$HARK" transcribe "${LOW[@]}" --server "$server" -m "$MODEL" --json \
        >"$BENCH_TMP/t.json" 2>"$BENCH_TMP/t.log" || { cat "$BENCH_TMP/t.log" >&2; bench_die "$kind pass failed"; }
      $PY -c 'import json,os,sys
for f in json.load(open(sys.argv[1]))["files"]:
    print(os.path.basename(f["file"]) + "\t" + f["streams"][0]["transcript"])' "$BENCH_TMP/t.json" >>"$out"
    fi
  done
  bench_log "$kind: $ITERATIONS passes over ${#LOW[@]} files"
}

for kind in ws riva offline; do transcripts "$kind" "$BENCH_TMP/$kind.tsv"; done

$PY - "$BENCH_TMP" "$ITERATIONS" "$(bench_machine)" "$(bench_command ITERATIONS MODEL)" <<'PY'
import collections, os, sys
tmp, n, machine, command = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
per = {k: collections.defaultdict(set) for k in ("ws", "riva", "offline")}
for k in per:
    for line in open(os.path.join(tmp, k + ".tsv")):
        f, _, t = line.rstrip("\n").partition("\t")
        per[k][f].add(t)
files = sorted(per["ws"])
print(f"""
### Speech: 8 kHz determinism, WebSocket, Riva and offline

{machine}. Command: `{command}`.
Each LibriVox recording converted to 8 kHz (audioop), then {n} times through each path: distinct
transcripts per path, and over all three ({3 * n} decodes per file).

| file | WebSocket | Riva | offline | all paths |
| --- | ---: | ---: | ---: | ---: |""")
worst = 0
for f in files:
    every = per["ws"][f] | per["riva"][f] | per["offline"][f]
    worst = max(worst, len(every))
    print(f"| {f} | {len(per['ws'][f])} | {len(per['riva'][f])} | {len(per['offline'][f])} | {len(every)} |")
print(f"\n- Most distinct transcripts of one recording over all paths: **{worst}** (goal 1).")
PY
