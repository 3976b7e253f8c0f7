"""The bare-library reference for bench/vad_throughput.sh: the same
TorchScript file harkd serves as silero_vad, called in a loop by libtorch
(through Debian's python3-torch) at a fixed batch size, with each row's
state carried from call to call as hark carries it, nothing else around.

    /usr/bin/python3 tools/silero/bare_loop.py MODEL.pt THREADS SECONDS BATCH [BATCH ...]

THREADS is libtorch's intra-op thread count (hark's default for a model of
one instance: the cores it may use). Each call carries FRAMES (environment,
default 1) frames per row, [BATCH, FRAMES, 512], as a request to harkd does.
Prints one JSON object per batch size:
{"batch": B, "frames": T, "calls": n, "frames_per_sec": f}.
"""
import json
import os
import sys
import time

import torch


def main():
    if len(sys.argv) < 5:
        raise SystemExit(__doc__)
    path, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    torch.set_num_threads(threads)
    module = torch.jit.load(path)
    module.eval()
    frames = int(os.environ.get("FRAMES", "1"))
    gen = torch.Generator().manual_seed(1)
    for batch in (int(b) for b in sys.argv[4:]):
        audio = torch.rand(batch, frames, 512, generator=gen) * 0.02 - 0.01
        state = torch.zeros(batch, 2, 128)
        context = torch.zeros(batch, 64)
        with torch.no_grad():
            for _ in range(10):  # warm up (TorchScript's profiling runs)
                _, state, context = module(audio, state, context)
            calls = 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                _, state, context = module(audio, state, context)
                calls += 1
            elapsed = time.perf_counter() - start
        print(json.dumps({"batch": batch, "frames": frames, "calls": calls,
                          "frames_per_sec": round(calls * batch * frames / elapsed, 1)}),
              flush=True)


if __name__ == "__main__":
    main()
