#!/usr/bin/python3
"""Plain-PyTorch reference decoder for hark's neural streaming recognition:
decodes each WAV ALONE, chunk by chunk, as the server must, and is the
oracle the server's results are compared against.

  /usr/bin/python3 tools/asr_models/reference.py --model DIR \
      --family transducer|ctc [--chunk 32] [--pad 13] [--scale 1] \
      [--json] WAV...

DIR holds model.pt (TorchScript, icefall streaming export shape) and
tokens.txt. WAVs are 16 kHz mono 16-bit PCM.

Features: torchaudio.compliance.kaldi.fbank (80 bins, 25/10 ms, povey window,
dither 0, snip_edges False, ...) of the int16 samples * scale / 32768.
Chunks: T = chunk + pad frames; offset 0; while offset + T <= frames: encode
frames[offset:offset+T], offset += chunk. Then, if offset < frames, pad the
features on the right with log(1e-10) up to offset + T and encode one last
chunk. Transducer: icefall's streaming greedy search (at most one symbol per
frame). CTC: per-frame argmax, repeats collapsed, blanks dropped; a token's
frame is its first frame.

Output without --json: one line per file, "PATH<TAB>TEXT". With --json: one
JSON object per line (JSON Lines), keys:
  file, tokens (ids), frames (global output frame of each token), pieces,
  text, words ([{word, start, end}] in seconds; start = first token's frame
  * shift, end = (last token's frame + 1) * shift, shift = chunk * 10 ms /
  T'), frame_shift, num_frames (encoder output frames), num_chunks,
  near_ties (count of frames whose top two logits are within 1e-4) and
  near_tie_frames (their global frame indices).
"""

import argparse
import json
import math
import os
import wave
from typing import List

import torch
import torchaudio

LOG_EPS = math.log(1e-10)
NEAR_TIE = 1e-4
SAMPLE_RATE = 16000


def read_wav(path: str) -> torch.Tensor:
    """int16 samples of a 16 kHz mono 16-bit WAV, as a float tensor."""
    with wave.open(path, "rb") as w:
        if (w.getframerate() != SAMPLE_RATE or w.getnchannels() != 1
                or w.getsampwidth() != 2):
            raise SystemExit(f"{path}: need 16 kHz mono 16-bit PCM")
        data = w.readframes(w.getnframes())
    s = torch.frombuffer(bytearray(data), dtype=torch.int16)
    return s.to(torch.float32)


def fbank(samples: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """[num_frames, 80] features of int16-valued samples."""
    wave_ = (samples * scale / 32768.0).unsqueeze(0)
    return torchaudio.compliance.kaldi.fbank(
        wave_, num_mel_bins=80, frame_length=25, frame_shift=10, dither=0.0,
        snip_edges=False, energy_floor=0.0, sample_frequency=SAMPLE_RATE,
        low_freq=20, high_freq=-400, window_type="povey",
        preemphasis_coefficient=0.97, remove_dc_offset=True)


def chunks(feats: torch.Tensor, chunk: int, pad: int):
    """The [T, 80] chunks a stream's encoder sees, in order."""
    t = chunk + pad
    n = feats.shape[0]
    offset = 0
    while offset + t <= n:
        yield feats[offset:offset + t]
        offset += chunk
    if offset < n:
        tail = feats[offset:]
        fill = torch.full((offset + t - n, feats.shape[1]), LOG_EPS)
        yield torch.cat([tail, fill], dim=0)


def encode(model, feats: torch.Tensor, chunk: int, pad: int):
    """Encoder output of one stream, chunk by chunk: [frames, D], and the
    number of chunks."""
    states = model.encoder.get_init_states(1, torch.device("cpu"))
    outs = []
    for c in chunks(feats, chunk, pad):
        x = c.unsqueeze(0)
        lens = torch.tensor([c.shape[0]], dtype=torch.int64)
        out, out_lens, states = model.encoder(x, lens, states)
        outs.append(out[0, :int(out_lens[0])])
    if not outs:
        return torch.zeros(0, 0), 0
    return torch.cat(outs, dim=0), len(outs)


def top2_gap(v: torch.Tensor) -> float:
    top = torch.topk(v, 2).values
    return float(top[0] - top[1])


def greedy_transducer(model, enc: torch.Tensor):
    """icefall's streaming greedy search, one stream, one symbol per frame
    at most. Returns (tokens, frames, near-tie frames)."""
    blank = int(model.decoder.blank_id)
    ctx = int(model.decoder.context_size)
    hyp: List[int] = [-1] * (ctx - 1) + [blank]  # as icefall and sherpa start
    tokens: List[int] = []
    frames: List[int] = []
    ties: List[int] = []

    def decoder_out():
        y = torch.tensor([hyp[-ctx:]], dtype=torch.int64)
        return model.decoder(y, False)[:, 0]  # [1, D_dec]

    dec = decoder_out()
    for t in range(enc.shape[0]):
        logits = model.joiner(enc[t:t + 1], dec, True)[0]  # [V]
        if top2_gap(logits) < NEAR_TIE:
            ties.append(t)
        y = int(torch.argmax(logits))
        if y != blank:
            hyp.append(y)
            tokens.append(y)
            frames.append(t)
            dec = decoder_out()
    return tokens, frames, ties


def greedy_ctc(model, enc: torch.Tensor, blank: int):
    """CTC greedy search: argmax per frame, repeats collapsed, blanks
    dropped; a token's frame is its first frame, and it ends at the last
    frame of its repeats. Returns (tokens, frames, ties, ends)."""
    tokens: List[int] = []
    frames: List[int] = []
    ties: List[int] = []
    ends: List[int] = []
    if enc.shape[0] == 0:
        return tokens, frames, ties, ends
    logp = model.ctc_output(enc.unsqueeze(0))[0]  # [T', V]
    prev = blank
    for t in range(logp.shape[0]):
        if top2_gap(logp[t]) < NEAR_TIE:
            ties.append(t)
        y = int(torch.argmax(logp[t]))
        if y != blank and y != prev:
            tokens.append(y)
            frames.append(t)
            ends.append(t)
        elif y != blank and ends:
            ends[-1] = t
        prev = y
    return tokens, frames, ties, ends


def read_tokens(path: str) -> List[str]:
    table = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split()
            if len(parts) == 2:
                table[int(parts[1])] = parts[0]
    return [table[i] for i in range(len(table))]


def words_of(pieces: List[str], frames: List[int], shift: float, ends=None):
    """Words: a piece starting with U+2581 starts a word, others extend the
    current one (or start one if there is none). A word starts at its first
    token's frame and ends after its last token's last frame (ends; a CTC
    token holds its repeats), times in seconds."""
    words = []
    for p, fr, last in zip(pieces, frames, ends if ends is not None else frames):
        if p.startswith("\u2581") or not words:
            words.append({"word": p.lstrip("\u2581"), "first": fr,
                          "last": last})
        else:
            words[-1]["word"] += p
            words[-1]["last"] = last
    return [{"word": w["word"], "start": round(w["first"] * shift, 6),
             "end": round((w["last"] + 1) * shift, 6)}
            for w in words if w["word"]]


def decode_file(model, family: str, toks: List[str], path: str,
                chunk: int, pad: int, scale: float) -> dict:
    feats = fbank(read_wav(path), scale)
    enc, nchunks = encode(model, feats, chunk, pad)
    if family == "transducer":
        tokens, frames, ties = (greedy_transducer(model, enc)
                                if enc.shape[0] else ([], [], []))
        ends = frames
    else:
        tokens, frames, ties, ends = greedy_ctc(model, enc, toks.index("<blk>"))
    t_out = enc.shape[0] // nchunks if nchunks else chunk // 4
    shift = chunk * 0.010 / t_out
    pieces = [toks[i] for i in tokens]
    text = "".join(pieces).replace("\u2581", " ").strip()
    return {
        "file": path,
        "tokens": tokens,
        "frames": frames,
        "pieces": pieces,
        "text": text,
        "words": words_of(pieces, frames, shift, ends),
        "frame_shift": shift,
        "num_frames": int(enc.shape[0]),
        "num_chunks": nchunks,
        "near_ties": len(ties),
        "near_tie_frames": ties,
    }


def load(model_dir: str):
    model = torch.jit.load(os.path.join(model_dir, "model.pt"),
                           map_location="cpu")
    model.eval()
    return model, read_tokens(os.path.join(model_dir, "tokens.txt"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="dir with model.pt, "
                    "tokens.txt")
    ap.add_argument("--family", choices=["transducer", "ctc"],
                    required=True)
    ap.add_argument("--chunk", type=int, default=32,
                    help="decode_chunk_len, feature frames")
    ap.add_argument("--pad", type=int, default=13,
                    help="pad_length, feature frames of right context")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="waveform = int16 * scale / 32768")
    ap.add_argument("--json", action="store_true",
                    help="one JSON object per file and line")
    ap.add_argument("wavs", nargs="+", metavar="WAV")
    a = ap.parse_args()
    torch.set_num_threads(1)
    model, toks = load(a.model)
    with torch.no_grad():
        for path in a.wavs:
            r = decode_file(model, a.family, toks, path, a.chunk, a.pad,
                            a.scale)
            if a.json:
                print(json.dumps(r, ensure_ascii=False), flush=True)
            else:
                print(f"{path}\t{r['text']}", flush=True)


if __name__ == "__main__":
    main()
