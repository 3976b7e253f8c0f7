#!/usr/bin/python3
"""Self-check of a streaming test model against the contract the server
relies on (see asrmodel.py):

  /usr/bin/python3 tools/asr_models/check_model.py [--model DIR --family F]

Without --model it builds the tiny transducer and ctc models (seed 1) in
memory, scripts them and round-trips them through torch.jit.save/load.

Checks, for each model:
 1. every state has exactly one axis whose size goes 1 -> 2 between
    get_init_states(1) and get_init_states(2) (the batch axis the server
    discovers), and the discovered axes are the documented ones;
 2. three streams at different positions (fresh, 3 chunks in, 10 chunks in:
    cache empty, partly filled, full) run as one batch for 6 chunks (states
    gathered with torch.cat along the discovered axes, scattered back with
    narrow) give the same encoder outputs and states as each run alone
    (within 1e-5, times max|output|/10 where that is over 1: a trained
    model's outputs run to ~100);
 3. masking: garbage in the cache positions a stream has not filled yet
    (all of a fresh stream's) changes nothing;
 4. decoder/joiner (or ctc_output) rows are independent of the batch;
 5. attributes (decode_chunk_len, pad_length, context_size, blank_id,
    vocab_size) and tokens.txt's <blk> 0.
Exits non-zero on the first failure.
"""

import argparse
import glob
import io
import os
import sys
from typing import List

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model  # noqa: E402
import reference  # noqa: E402

TOL = 1e-5
LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"


def fail(msg: str):
    print("FAIL:", msg)
    sys.exit(1)


def batch_axes(enc) -> List[int]:
    s1 = enc.get_init_states(1, torch.device("cpu"))
    s2 = enc.get_init_states(2, torch.device("cpu"))
    if len(s1) != len(s2):
        fail("state count depends on the batch size")
    axes = []
    for i, (a, b) in enumerate(zip(s1, s2)):
        if a.dim() != b.dim() or a.dtype != b.dtype:
            fail(f"state {i}: rank/dtype depends on the batch size")
        diff = [d for d in range(a.dim()) if a.shape[d] != b.shape[d]]
        if len(diff) != 1 or a.shape[diff[0]] != 1 or b.shape[diff[0]] != 2:
            fail(f"state {i}: {list(a.shape)} vs {list(b.shape)}")
        axes.append(diff[0])
    return axes


def gather(states_per_stream, axes):
    return [torch.cat([s[i] for s in states_per_stream], dim=axes[i])
            for i in range(len(axes))]


def scatter(states, axes, n):
    return [[st.narrow(axes[i], k, 1) for i, st in enumerate(states)]
            for k in range(n)]


def features(num: int) -> List[torch.Tensor]:
    """Feature sequences of the LibriVox recordings (synthetic if absent),
    each at least 20 chunks long."""
    out = []
    files = sorted(glob.glob(os.path.join(LIBRIVOX, "*.wav")))
    for f in files[:num]:
        out.append(reference.fbank(reference.read_wav(f)))
    g = torch.Generator().manual_seed(0)
    while len(out) < num:
        out.append(torch.randn(800, 80, generator=g) * 3 - 6)
    need = 20 * 32 + 13
    return [torch.cat([x] * (need // x.shape[0] + 1))[:need] for x in out]


def chunk_of(feats, k):
    return feats[k * 32:k * 32 + 45]


def run_alone(enc, feats, start, steps, states=None):
    if states is None:
        states = enc.get_init_states(1, torch.device("cpu"))
    outs = []
    lens = torch.tensor([45], dtype=torch.int64)
    for k in range(start, start + steps):
        o, _, states = enc(chunk_of(feats, k).unsqueeze(0), lens, states)
        outs.append(o)
    return outs, states


def maxdiff(a, b):
    return float((a.to(torch.float64) - b.to(torch.float64)).abs().max())


def check_encoder(model, expected_axes):
    enc = model.encoder
    if int(enc.decode_chunk_len) != 32 or int(enc.pad_length) != 13:
        fail("decode_chunk_len/pad_length are not 32/13")
    axes = batch_axes(enc)
    shapes = [list(s.shape) for s in enc.get_init_states(1,
                                                          torch.device("cpu"))]
    dtypes = [str(s.dtype).replace("torch.", "")
              for s in enc.get_init_states(1, torch.device("cpu"))]
    print(f"  {len(axes)} states; batch axes {axes}")
    for i, (sh, dt, ax) in enumerate(zip(shapes, dtypes, axes)):
        print(f"    state {i:2d}: {dt:7s} {sh} batch axis {ax}")
    if expected_axes is not None and axes != expected_axes:
        fail(f"batch axes {axes}, expected {expected_axes}")
    if dtypes[-1] != "int64" or axes[-1] != 0:
        fail("last state is not processed_lens [N] int64")

    feats = features(3)
    starts = [0, 3, 10]
    steps = 6
    # each stream alone: warm up to its start, then `steps` chunks
    warm = []
    alone_out = []
    alone_states = []
    for f, s in zip(feats, starts):
        _, st = run_alone(enc, f, 0, s)
        warm.append(st)
        o, st2 = run_alone(enc, f, s, steps, [x.clone() for x in st])
        alone_out.append(o)
        alone_states.append(st2)
    # the same streams as one batch
    states = gather(warm, axes)
    lens = torch.full((3,), 45, dtype=torch.int64)
    worst = 0.0
    scale = max(float(o.abs().max()) for k in alone_out for o in k)
    tol = TOL * max(1.0, scale / 10)
    for j in range(steps):
        x = torch.stack([chunk_of(f, s + j) for f, s in zip(feats, starts)])
        o, olens, states = enc(x, lens, states)
        if olens.tolist() != [8, 8, 8] or list(o.shape[:2]) != [3, 8]:
            fail(f"encoder_out {list(o.shape)} lens {olens.tolist()}")
        for k in range(3):
            worst = max(worst, maxdiff(o.narrow(0, k, 1), alone_out[k][j]))
    for k, st in enumerate(scatter(states, axes, 3)):
        for i, (a, b) in enumerate(zip(st, alone_states[k])):
            d = maxdiff(a, b)
            worst = max(worst, d)
    print(f"  batched (fresh, 3, 10 chunks in) vs alone, {steps} chunks: "
          f"max |diff| {worst:.3g} (outputs up to {scale:.3g}; tolerance "
          f"{tol:.3g})")
    if worst > tol:
        fail("batched output differs from alone")
    pl = states[-1].tolist()
    if pl != [8 * (s + steps) for s in starts]:
        fail(f"processed_lens {pl}")

    if int(enc.left_context_len) > 0:
        check_masking(enc, axes, feats, starts, warm)
    else:
        print("  no attention cache (left_context_len 0): masking check "
              "skipped")
    return feats, alone_out


def check_masking(enc, axes, feats, starts, warm):
    # masking: garbage in unfilled cache positions changes nothing
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for f, s in zip(feats[:2], starts[:2]):
        st = warm[starts.index(s)]
        # only the attention caches are masked: key (rank 3, batch axis 1,
        # time axis 0) and value (rank 4, batch axis 2, time axis 1)
        st2 = []
        for i, x in enumerate(st):
            y = x.clone()
            if x.dtype == torch.float32 and axes[i] in (1, 2):
                t_ax = 0 if axes[i] == 1 else 1
                left = x.shape[t_ax]
                # how many entries are real: processed frames at this cache's
                # rate; the rate is left_context_len/2 / left
                ds = (int(enc.left_context_len) // 2) // left
                real = min((8 * s) // ds, left)
                if left - real > 0:
                    y.narrow(t_ax, 0, left - real).copy_(
                        torch.randn(y.narrow(t_ax, 0, left - real).shape,
                                    generator=g) * 10)
            st2.append(y)
        o1, _ = run_alone(enc, f, s, 2, [x.clone() for x in st])
        o2, _ = run_alone(enc, f, s, 2, [x.clone() for x in st2])
        worst = max(worst, max(maxdiff(a, b) for a, b in zip(o1, o2)))
        if s == 0:
            # control: the same garbage with processed_lens claiming a full
            # cache must change the output, or this check proves nothing
            st3 = st2[:-1] + [torch.full_like(st2[-1], 10 ** 6)]
            o3, _ = run_alone(enc, f, s, 1, st3)
            control = maxdiff(o3[0], o1[0])
    print(f"  garbage in unfilled cache positions: max |diff| {worst:.3g} "
          f"(unmasked control: {control:.3g})")
    if worst > TOL:
        fail("unfilled cache positions are not masked")
    if control < 1e-3:
        fail("control: cache contents never matter")



def check_heads(model, family, toks, enc_out):
    e = torch.cat([o[0] for o in enc_out], dim=0)  # [3*8*steps.., D]
    e = e[:24]
    if family == "transducer":
        dec = model.decoder
        if int(dec.context_size) != 2 or int(dec.blank_id) != 0 or \
                int(dec.vocab_size) != len(toks):
            fail("decoder attributes")
        y = torch.randint(0, len(toks), (24, 2),
                          generator=torch.Generator().manual_seed(2))
        y[0] = 0
        d = dec(y, False)
        if list(d.shape[:2]) != [24, 1]:
            fail(f"decoder_out {list(d.shape)}")
        d = d[:, 0]
        lb = model.joiner(e, d, True)
        worst = 0.0
        for k in range(24):
            dk = dec(y[k:k + 1], False)[:, 0]
            worst = max(worst, maxdiff(dk, d[k:k + 1]))
            worst = max(worst, maxdiff(model.joiner(e[k:k + 1], dk, True),
                                       lb[k:k + 1]))
        # project_input=False takes already projected inputs
        lp = model.joiner(model.joiner.encoder_proj(e),
                          model.joiner.decoder_proj(d), False)
        worst = max(worst, maxdiff(lp, lb))
        if list(lb.shape) != [24, len(toks)]:
            fail(f"joiner out {list(lb.shape)}")
    else:
        lp = model.ctc_output(e.unsqueeze(0))
        if list(lp.shape) != [1, 24, len(toks)]:
            fail(f"ctc_output {list(lp.shape)}")
        worst = 0.0
        for k in range(24):
            worst = max(worst, maxdiff(model.ctc_output(e[k:k + 1]
                                                        .unsqueeze(0)),
                                       lp[:, k:k + 1]))
        s = float(lp.exp().sum(-1).sub(1).abs().max())
        if s > 1e-4:
            fail("ctc_output is not log-probabilities")
    # logits are scaled (x10): compare relative to their size
    tol = TOL * max(1.0, float(lp.abs().max()) / 10)
    print(f"  {family} head rows batched vs alone: max |diff| {worst:.3g} "
          f"(tolerance {tol:.3g})")
    if worst > tol:
        fail("head output depends on the batch")


def expected_axes(model):
    """Documented layout: per stack (key axis 1, conv axis 0) per layer,
    then the stack's stacked values (axis 2); then embed pad (0) and
    processed_lens (0)."""
    axes = []
    st = model.encoder.get_init_states(1, torch.device("cpu"))
    if not any(x.dim() == 4 for x in st):
        return None  # not make_model.py's layout (train_digits.py's)
    # count stacks from the rank-4 states (one per stack)
    i = 0
    while i < len(st) - 2:
        j = i
        while st[j].dim() == 3:
            j += 1
        axes += [1, 0] * ((j - i) // 2) + [2]
        i = j + 1
    return axes + [0, 0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="dir with model.pt and tokens.txt")
    ap.add_argument("--family", choices=["transducer", "ctc"])
    a = ap.parse_args()
    torch.set_num_threads(1)
    todo = []
    if a.model:
        if not a.family:
            ap.error("--model needs --family")
        m, toks = reference.load(a.model)
        todo.append((a.model, a.family, m, toks))
    else:
        toks = make_model.make_tokens(500)
        for fam in ("transducer", "ctc"):
            buf = io.BytesIO()
            torch.jit.save(torch.jit.script(
                make_model.build(fam, "tiny", 1, 500)), buf)
            buf.seek(0)
            todo.append((f"tiny {fam} seed 1", fam, torch.jit.load(buf),
                         toks))
    with torch.no_grad():
        for name, fam, m, toks in todo:
            print(f"{name}:")
            if toks[0] != "<blk>":
                fail("tokens.txt: id 0 is not <blk>")
            _, outs = check_encoder(m, expected_axes(m))
            check_heads(m, fam, toks, [o for k in outs for o in k])
    print("OK")


if __name__ == "__main__":
    main()
