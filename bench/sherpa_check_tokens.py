#!/usr/bin/python3
"""Do sherpa-onnx (on tools/sherpa/export_onnx.py's export) and hark's
decoding (tools/asr_models/reference.py: the plain-PyTorch decoder that
tests/e2e/test_neural_asr.py holds harkd's tokens equal to) give the same
tokens on the same audio?

  /usr/bin/python3 bench/sherpa_check_tokens.py MODEL_DIR ONNX_DIR NODE_PATH WAV...

Compared: the tokens emitted at encoder frames both decoded from the audio
itself, i.e. in the chunks that hold no padding (the two pad the last chunk
differently: sherpa with TAIL_MS of silence, the reference with log(1e-10)
features). Prints per file the tokens compared and how many differ (edit
distance); exits 1 when any differs.
"""
import json
import os
import subprocess
import sys
import wave

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))
import asr_models  # noqa: E402


def main():
    model, onnx_dir, node_path, *wavs = sys.argv[1:]
    ref = {os.path.basename(r["file"]): r for r in asr_models.reference(model, "transducer", wavs)}
    env = dict(os.environ, NODE_PATH=node_path)
    out = subprocess.run(["node", os.path.join(HERE, "sherpa_peer.js"), onnx_dir, "tokens", *wavs],
                         check=True, capture_output=True, text=True, env=env).stdout
    with open(os.path.join(model, "tokens.txt")) as f:
        ids = {line.split()[0].replace("\u2581", " "): int(line.split()[1]) for line in f if line.strip()}
    bad = 0
    for line in out.splitlines():
        doc = json.loads(line)
        r = ref[doc["file"]]
        with wave.open(os.path.join(os.path.dirname(wavs[0]), doc["file"])) as w:
            frames = 1 + (w.getnframes() - 400) // 160 if w.getnframes() >= 400 else 0
        # complete chunks of 45 frames advancing by 32; 8 output frames each
        full = max(0, (frames - 45) // 32 + 1) * 8
        mine = [t for t, fr in zip(r["tokens"], r["frames"]) if fr < full]
        theirs = [ids[t] for t in doc["tokens"]][:len(doc["tokens"])]
        # sherpa's tokens up to the same frame (its timestamps: seconds at 40 ms a frame)
        ts = doc.get("timestamps")
        if ts:
            theirs = [ids[t] for t, s in zip(doc["tokens"], ts) if round(s / 0.04) < full]
        d = asr_models.wer(mine, theirs)
        bad += d > 0
        print(f"{doc['file']}: {len(mine)} tokens (hark) {len(theirs)} (sherpa) over {full} frames;"
              f" differ {d}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
