#!/usr/bin/python3
"""The bare-library reference for bench/neural_streams.sh: the same
TorchScript transducer harkd serves with backend neural_asr, driven by
libtorch (Debian's python3-torch) in a loop at a fixed batch of B streams,
nothing around it: no sockets, no requests, no per-stream state gathering
(the states stay batched from call to call).

    /usr/bin/python3 bench/nasr_bare_loop.py MODEL.pt THREADS SECONDS BATCH [BATCH ...]

Per call, as backends/neural_asr/net.cc does a round: B chunks of real
fbank features (45 frames x 80: decode_chunk_len 32 + pad_length 13, of the
LibriVox recordings through torchaudio's Kaldi fbank, as
tools/asr_models/reference.py computes them; row i reads the recordings
end to end from its own offset, so the rows are at different positions and
say different things) go through ONE encoder call; then greedy search
across the B rows: the encoder output projected once (joiner.encoder_proj),
per encoder frame one joiner call for all rows (project_input False), and
for the rows that emitted a token the softmax for its probability and one
decoder call (+ decoder_proj) on their new contexts. THREADS is libtorch's
intra-op thread count (set it to harkd's: cores / instances by default).

CPU is the process's (all threads: time.process_time), so libtorch's
workers are counted as /proc counts harkd's. Prints one JSON object per
batch size:
  {"batch", "threads", "calls", "stream_seconds" (calls x B x 0.32 s),
   "wall_s", "cpu_s", "cpu_per_stream_s" (CPU s per stream-second),
   "encoder_cpu_per_stream_s", "search_cpu_per_stream_s",
   "call_ms" (wall per call), "emit_fraction" (non-blank frames)}
Environment: AUDIO_DIR (the LibriVox folder), CHUNK (32), PAD (13), LINEAR
("xnnpack", the default, as harkd's linear_kernel default: the encoder, the
joiner and its projections through torch.utils.mobile_optimizer's
optimize_for_mobile, libtorch's own way to put linear layers on XNNPACK's
prepacked GEMM (it also freezes them and folds what it can, so it is a
reference at least as fast as harkd's load-time rewrite of the linear
layers alone); "blas": the modules as saved, their linear layers on
libtorch's BLAS, as harkd's linear_kernel blas).
"""
import glob
import json
import math
import os
import sys
import time
import wave

import torch
import torchaudio

LOG_EPS = math.log(1e-10)


def read_fbank(path):
    with wave.open(path, "rb") as w:
        if w.getframerate() != 16000 or w.getnchannels() != 1 or w.getsampwidth() != 2:
            raise SystemExit(f"{path}: need 16 kHz mono 16-bit PCM")
        data = w.readframes(w.getnframes())
    s = torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.float32)
    return torchaudio.compliance.kaldi.fbank(
        (s / 32768.0).unsqueeze(0), num_mel_bins=80, frame_length=25, frame_shift=10,
        dither=0.0, snip_edges=False, energy_floor=0.0, sample_frequency=16000,
        low_freq=20, high_freq=-400, window_type="povey", preemphasis_coefficient=0.97,
        remove_dc_offset=True)


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    path, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    batches = [int(b) for b in sys.argv[4:]]
    chunk, pad = int(os.environ.get("CHUNK", "32")), int(os.environ.get("PAD", "13"))
    audio = os.environ.get("AUDIO_DIR", "/usr/share/pocketsphinx/test/data/librivox")
    torch.set_num_threads(threads)
    files = sorted(glob.glob(os.path.join(audio, "*.wav")))
    if not files:
        raise SystemExit(f"no .wav files in {audio}")
    # The recordings end to end; every chunk the cycle holds, precomputed,
    # so a call costs a stack of B of them (harkd copies B chunks too).
    feats = torch.cat([read_fbank(f) for f in files], 0)
    T = chunk + pad
    n_chunks = (feats.shape[0] - T) // chunk + 1
    table = [feats[k * chunk:k * chunk + T].contiguous() for k in range(n_chunks)]

    model = torch.jit.load(path)
    model.eval()
    enc_m, dec_m, join_m = model.encoder, model.decoder, model.joiner
    enc_proj, dec_proj = join_m.encoder_proj, join_m.decoder_proj
    linear = os.environ.get("LINEAR", "xnnpack")
    if linear == "xnnpack":
        from torch.utils.mobile_optimizer import optimize_for_mobile
        enc_m = optimize_for_mobile(enc_m, preserved_methods=["get_init_states"])
        join_m, enc_proj, dec_proj = (optimize_for_mobile(m) for m in (join_m, enc_proj, dec_proj))
    elif linear != "blas":
        raise SystemExit(f"LINEAR must be xnnpack or blas, not {linear}")
    blank, ctx_size = int(dec_m.blank_id), int(dec_m.context_size)
    one_chunk_s = chunk * 0.01

    with torch.inference_mode():
        for B in batches:
            states = enc_m.get_init_states(B, torch.device("cpu"))
            ctx = torch.full((B, ctx_size), blank, dtype=torch.int64)
            dec = dec_proj(dec_m(ctx, False).squeeze(1))
            lens = torch.full((B,), T, dtype=torch.int64)
            pos = [(i * 7919) % n_chunks for i in range(B)]  # spread the rows out
            emitted = frames = 0

            def step():
                nonlocal states, dec, ctx, emitted, frames
                x = torch.stack([table[p] for p in pos])
                c0 = time.process_time()
                out, _, states = enc_m(x, lens, states)
                c1 = time.process_time()
                enc = enc_proj(out)
                for t in range(out.shape[1]):
                    logits = join_m(enc[:, t], dec, False)
                    best = logits.argmax(1)
                    rows = (best != blank).nonzero().squeeze(1)
                    frames += B
                    if rows.numel() == 0:
                        continue
                    emitted += rows.numel()
                    y = best.index_select(0, rows)
                    prob = logits.index_select(0, rows).softmax(1).gather(1, y.unsqueeze(1))
                    prob.tolist()  # what net.cc reads out per token
                    new_ctx = torch.cat([ctx.index_select(0, rows)[:, 1:], y.unsqueeze(1)], 1)
                    ctx.index_copy_(0, rows, new_ctx)
                    d = dec_proj(dec_m(new_ctx, False).squeeze(1))
                    dec.index_copy_(0, rows, d)
                for i in range(B):
                    pos[i] = (pos[i] + 1) % n_chunks
                return c1 - c0

            for _ in range(10):  # warm up (TorchScript's profiling runs)
                step()
            emitted = frames = 0
            calls, enc_cpu = 0, 0.0
            w0, c0 = time.perf_counter(), time.process_time()
            while time.perf_counter() - w0 < seconds:
                enc_cpu += step()
                calls += 1
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            ss = calls * B * one_chunk_s
            print(json.dumps({
                "batch": B, "threads": threads, "linear": linear, "calls": calls,
                "stream_seconds": round(ss, 2), "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
                "cpu_per_stream_s": round(cpu / ss, 5),
                "encoder_cpu_per_stream_s": round(enc_cpu / ss, 5),
                "search_cpu_per_stream_s": round((cpu - enc_cpu) / ss, 5),
                "call_ms": round(wall / calls * 1000, 2),
                "emit_fraction": round(emitted / max(frames, 1), 3)}), flush=True)


if __name__ == "__main__":
    main()
