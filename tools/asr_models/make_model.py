#!/usr/bin/python3
"""Write a random-weight streaming ASR test model in icefall's TorchScript
export shape (see asrmodel.py for the contract) and its tokens.txt.

  /usr/bin/python3 tools/asr_models/make_model.py --out DIR \
      --family transducer|ctc --size tiny|20m --seed N [--vocab 500]

Writes DIR/model.pt (torch.jit.script of the wrapper, torch.jit.save) and
DIR/tokens.txt, prints the parameter count. Everything is deterministic from
the seed. The output layer is scaled (top-2 logits rarely within 1e-4) and the
blank logit biased so that on speech a random model emits a non-blank token
on roughly a quarter of the output frames; <sos/eos> and <unk> never win.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import asrmodel  # noqa: E402

# pieces after <blk> <sos/eos> <unk>: words, suffixes, letters, then pairs
WORDS = """THE AND OF TO A IN THAT HE WAS IT HIS I WITH AS HAD FOR YOU HER
BE NOT BUT AT ON IS SHE ALL BY WHICH SO THEY THIS HIM MY FROM HAVE WERE
WOULD ONE SAID THERE NO WHEN WE OR AN THEIR WHAT ARE IF ME MORE BEEN
COULD WHO OUT UP THEM WILL VERY INTO DO SOME NOW THAN THEN ANY LITTLE
UPON ABOUT TIME MISTER OTHER OUR ONLY SUCH MADE MUST GREAT DID SHOULD
BEFORE MUCH MAN WELL OVER YOUR KNOW AFTER LIKE MRS DASHWOOD ELINOR
MARIANNE MOTHER SISTER HOUSE FAMILY NORLAND FORTUNE SON DAUGHTER YEAR
LIFE HEART LONG NEVER EVERY MIGHT THOUGHT OWN THOSE WHERE THROUGH HOW
HERSELF HIMSELF MAY SAY SEE GOOD TWO THREE DAY OLD""".split()
SUFFIXES = """S ED ING ER LY ES EN AL TION NESS MENT ABLE IES EST ITY OUS
IVE ANT ENCE RY ON AN IN OR AR LE TH ST ND RE""".split()
LETTERS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]


def make_tokens(vocab: int):
    toks = ["<blk>", "<sos/eos>", "<unk>"]
    seen = set(toks)

    def add(t):
        if t not in seen and len(toks) < vocab:
            toks.append(t)
            seen.add(t)

    for w in WORDS:
        add("\u2581" + w)
    for s in SUFFIXES:
        add(s)
    for c in LETTERS:
        add("\u2581" + c)
        add(c)
    add("'")
    for a in LETTERS:
        for b in LETTERS:
            add("\u2581" + a + b)
            add(a + b)
    assert len(toks) == vocab, (len(toks), vocab)
    return toks


# blank bias per (family, size): on the LibriVox recordings these give
# non-blank on roughly 20-40% of output frames (measured with reference.py)
BLANK_BIAS = {
    ("transducer", "tiny"): 7.8,
    ("transducer", "20m"): 4.0,
    ("ctc", "tiny"): 11.5,
    ("ctc", "20m"): 11.5,
}
OUTPUT_SCALE = 10.0


def build(family: str, size: str, seed: int, vocab: int,
          blank_bias=None):
    torch.manual_seed(seed)
    cfg = asrmodel.CONFIGS[size]
    enc = asrmodel.Encoder(cfg)
    if blank_bias is None:
        blank_bias = BLANK_BIAS[(family, size)]
    if family == "transducer":
        dec = asrmodel.Decoder(vocab, cfg["decoder_dim"])
        join = asrmodel.Joiner(cfg["output_dim"], cfg["decoder_dim"],
                               cfg["joiner_dim"], vocab)
        out = join.output_linear
        model = asrmodel.Transducer(enc, dec, join)
    else:
        head = asrmodel.CtcOutput(cfg["output_dim"], vocab)
        out = head.linear
        model = asrmodel.Ctc(enc, head)
    with torch.no_grad():
        # Without this the embed's output is ~90% one constant direction
        # (fbank's mean and the biases through ReLU-free but offset convs)
        # and a random model says the same token on every frame: conv1's
        # kernels sum to zero (deaf to a constant offset) and the embed's
        # convs and linear have no bias.
        emb = enc.embed
        emb.conv1.weight.sub_(emb.conv1.weight.mean(dim=(2, 3),
                                                    keepdim=True))
        for m in (emb.conv1, emb.conv2, emb.conv3, emb.out, emb.time_conv):
            m.bias.zero_()
        out.weight.mul_(OUTPUT_SCALE)
        out.bias.mul_(OUTPUT_SCALE)
        out.bias[0] += blank_bias
        out.bias[1] = -100.0
        out.bias[2] = -100.0
    model.eval()
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--family", choices=["transducer", "ctc"],
                    required=True)
    ap.add_argument("--size", choices=sorted(asrmodel.CONFIGS),
                    required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--vocab", type=int, default=500)
    ap.add_argument("--blank-bias", type=float, default=None,
                    help="override the calibrated blank logit bias")
    a = ap.parse_args()
    if os.environ.get("PYTHONHASHSEED") != "0":
        # TorchScript writes a module's constants in set order: with string
        # hashing fixed, the same seed gives a byte-identical model.pt
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable] + sys.argv)
    torch.set_num_threads(1)
    model = build(a.family, a.size, a.seed, a.vocab, a.blank_bias)
    n = asrmodel.count_params(model)
    scripted = torch.jit.script(model)
    os.makedirs(a.out, exist_ok=True)
    tmp = os.path.join(a.out, "model.pt.tmp")
    torch.jit.save(scripted, tmp)
    os.replace(tmp, os.path.join(a.out, "model.pt"))
    with open(os.path.join(a.out, "tokens.txt"), "w",
              encoding="utf-8") as f:
        for i, t in enumerate(make_tokens(a.vocab)):
            f.write(f"{t} {i}\n")
    enc = asrmodel.count_params(model.encoder)
    print(f"{a.family} {a.size} seed {a.seed}: {n} parameters "
          f"(encoder {enc}) -> {a.out}/model.pt")


if __name__ == "__main__":
    main()
