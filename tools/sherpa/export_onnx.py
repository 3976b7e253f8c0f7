"""Export a tools/asr_models transducer (model.pt + tokens.txt, e.g. the
bench's 20M model) as the streaming Zipformer2 transducer sherpa-onnx
reads: encoder.onnx, decoder.onnx, joiner.onnx and tokens.txt.

  /usr/bin/python3 tools/sherpa/export_onnx.py --model DIR --out DIR2

The layout is what sherpa-onnx's OnlineZipformer2TransducerModel expects
(learnt from its source, online-zipformer2-transducer-model.cc):
  encoder(x [N,T,80], then 6 states per encoder layer: cached_key
          [left,N,key_dim], cached_nonlin_attn [1,N,left,3*dim/4],
          cached_val1 [left,N,value_dim], cached_val2 (same), cached_conv1
          [N,dim,kernel/2], cached_conv2 (same); then embed_states
          [N,128,3,19] and processed_lens [N] int64)
    -> (encoder_out [N,T',joiner_dim] (joiner.encoder_proj applied),
        the new states in the same order)
  metadata model_type=zipformer2, encoder_dims, query_head_dims,
  value_head_dims, num_heads, num_encoder_layers, cnn_module_kernels,
  left_context_len, T, decode_chunk_len (sherpa makes the initial states
  from these shapes);
  decoder(y [N,context_size] int64) -> [N,joiner_dim] (decoder_proj
  applied), metadata vocab_size, context_size;
  joiner(encoder_out [N,J], decoder_out [N,J]) -> logit [N,V].

asrmodel.py's states are not Zipformer2's, so the encoder wrapper maps
them: cached_key is Zipformer2's; cached_val1 carries a layer's slice of
the stack's cached_val; cached_conv1 carries cached_conv (the metadata's
cnn_module_kernels says 2*(K-1), so kernel/2 is K-1); embed_states carries
cached_embed_left_pad in its first D*2 values; cached_nonlin_attn,
cached_val2 and cached_conv2 pass through unchanged (a real Zipformer2
uses them; here sherpa carries them at their real size, and hark does
not: bench/RESULTS.md says so).

The decoder: sherpa and hark both start an utterance's context as
[-1, ..., -1, blank] (as icefall does), and asrmodel's decoder embeds -1
as zeros, as icefall's does; the exported decoder is that decoder.

Written here, beside the peer it serves (tools/sherpa/build.sh), not in
tools/asr_models, whose scripts make the test models.
"""
import argparse
import os
import shutil
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "asr_models")
sys.path.insert(0, TOOLS)
import asrmodel  # noqa: E402

EMBED_SHAPE = (128, 3, 19)  # sherpa's embed_states per stream, for 80 bins


def _repeat_interleave(x, repeats, dim=None):
    """torch.repeat_interleave(x [N,T,D], int, dim=1) as expand + reshape:
    torch 1.13 exports the former with the traced sizes baked in (ONNX
    Runtime then fails to broadcast at another batch or stack)."""
    if isinstance(repeats, int) and dim == 1 and x.dim() == 3:
        n, t, d = x.shape
        return x.unsqueeze(2).expand(n, t, repeats, d).reshape(n, t * repeats, d)
    return _REPEAT(x, repeats, dim=dim)


_REPEAT = torch.repeat_interleave


class Encoder(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.enc = model.encoder
        self.proj = model.joiner.encoder_proj
        self.layers = [s.num_layers for s in self.enc.stacks]

    def forward(self, x: torch.Tensor, *states: torch.Tensor):
        n = x.shape[0]
        lens = torch.full((n,), x.shape[1], dtype=torch.int64)
        ours = []
        k = 0
        for num in self.layers:
            vals = []
            for _ in range(num):
                key, _nl, val1, _v2, conv1, _c2 = states[k:k + 6]
                ours += [key, conv1]
                vals.append(val1)
                k += 6
            ours.append(torch.stack(vals, dim=0))
        embed, processed = states[k], states[k + 1]
        d = self.enc.embed_dim
        ours.append(embed.reshape(n, -1)[:, :d * 2].reshape(n, d, 2))
        ours.append(processed)
        out, _, new = self.enc(x, lens, ours)
        out = self.proj(out)
        res = [out]
        k = 0
        j = 0
        for num in self.layers:
            vals = new[j + 2 * num]
            for i in range(num):
                res += [new[j + 2 * i], states[k + 1], vals[i], states[k + 3], new[j + 2 * i + 1],
                        states[k + 5]]
                k += 6
            j += 2 * num + 1
        e = new[j]
        total = EMBED_SHAPE[0] * EMBED_SHAPE[1] * EMBED_SHAPE[2]
        res.append(F.pad(e.reshape(n, -1), (0, total - 2 * d)).reshape(n, *EMBED_SHAPE))
        res.append(new[j + 1])
        return tuple(res)


class Decoder(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.dec = model.decoder
        self.proj = model.joiner.decoder_proj

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.proj(self.dec(y, need_pad=False).squeeze(1))


class Joiner(nn.Module):
    def __init__(self, model: nn.Module):
        super().__init__()
        self.j = model.joiner

    def forward(self, e: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        return self.j(e, d, project_input=False)


def add_meta(path, meta):
    import onnx
    m = onnx.load(path)
    for k, v in meta.items():
        p = m.metadata_props.add()
        p.key, p.value = k, str(v)
    onnx.save(m, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="folder with model.pt and tokens.txt")
    ap.add_argument("--out", required=True)
    ap.add_argument("--size", default="20m", choices=sorted(asrmodel.CONFIGS))
    a = ap.parse_args()
    torch.set_num_threads(1)
    torch.repeat_interleave = _repeat_interleave  # for the export (asrmodel calls it so)
    scripted = torch.jit.load(os.path.join(a.model, "model.pt"))
    cfg = asrmodel.CONFIGS[a.size]
    with open(os.path.join(a.model, "tokens.txt")) as f:
        vocab = sum(1 for line in f if line.strip())
    model = asrmodel.Transducer(
        asrmodel.Encoder(cfg),
        asrmodel.Decoder(vocab, cfg["decoder_dim"]),
        asrmodel.Joiner(cfg["output_dim"], cfg["decoder_dim"], cfg["joiner_dim"], vocab))
    model.load_state_dict(scripted.state_dict())
    model.eval()
    os.makedirs(a.out, exist_ok=True)
    enc = model.encoder
    T = enc.decode_chunk_len + enc.pad_length

    # The states in sherpa's order, for one stream, from the model's own.
    init = enc.get_init_states(1)
    states, names = [], []
    k = 0
    stacks = enc.stacks
    for s, st in enumerate(stacks):
        for i in range(st.num_layers):
            key, conv = init[k + 2 * i], init[k + 2 * i + 1]
            val = init[k + 2 * st.num_layers][i]
            nl = torch.zeros(1, 1, st.left, 3 * st.dim // 4)
            states += [key, nl, val, val.clone(), conv, conv.clone()]
            li = len(names) // 6
            names += [f"cached_key_{li}", f"cached_nonlin_attn_{li}", f"cached_val1_{li}",
                      f"cached_val2_{li}", f"cached_conv1_{li}", f"cached_conv2_{li}"]
        k += 2 * st.num_layers + 1
    states.append(torch.zeros(1, *EMBED_SHAPE))
    states.append(torch.zeros(1, dtype=torch.int64))
    names += ["embed_states", "processed_lens"]
    axes = {"x": {0: "N"}, "encoder_out": {0: "N"}}
    for nm, t in zip(names, states):
        ax = 1 if nm.startswith(("cached_key", "cached_nonlin", "cached_val")) else 0
        axes[nm] = {ax: "N"}
        axes["new_" + nm] = {ax: "N"}
    x = torch.zeros(1, T, 80)
    wrapper = Encoder(model)
    with torch.no_grad():
        ref = wrapper(x, *states)
    path = os.path.join(a.out, "encoder.onnx")
    torch.onnx.export(wrapper, (x, *states), path, input_names=["x"] + names,
                      output_names=["encoder_out"] + ["new_" + n for n in names],
                      dynamic_axes=axes, opset_version=13)
    add_meta(path, {
        "model_type": "zipformer2", "version": "1", "model_author": "hark tools/sherpa",
        "comment": "asrmodel.py transducer, states mapped (tools/sherpa/export_onnx.py)",
        "decode_chunk_len": enc.decode_chunk_len, "T": T,
        "num_encoder_layers": ",".join(str(s.num_layers) for s in stacks),
        "encoder_dims": ",".join(str(s.dim) for s in stacks),
        "cnn_module_kernels": ",".join(str(2 * (s.kernel - 1)) for s in stacks),
        "left_context_len": ",".join(str(s.left) for s in stacks),
        "query_head_dims": ",".join(str(s.key_dim // h) for s, h in zip(stacks, cfg["heads"])),
        "value_head_dims": ",".join(str(s.val_dim // h) for s, h in zip(stacks, cfg["heads"])),
        "num_heads": ",".join(str(h) for h in cfg["heads"]),
    })
    ctx = model.decoder.context_size
    y = torch.zeros(2, ctx, dtype=torch.int64)
    path = os.path.join(a.out, "decoder.onnx")
    torch.onnx.export(Decoder(model), (y,), path, input_names=["y"], output_names=["decoder_out"],
                      dynamic_axes={"y": {0: "N"}, "decoder_out": {0: "N"}}, opset_version=13)
    add_meta(path, {"context_size": ctx, "vocab_size": vocab})
    J = cfg["joiner_dim"]
    path = os.path.join(a.out, "joiner.onnx")
    torch.onnx.export(Joiner(model), (torch.zeros(2, J), torch.zeros(2, J)), path,
                      input_names=["encoder_out", "decoder_out"], output_names=["logit"],
                      dynamic_axes={"encoder_out": {0: "N"}, "decoder_out": {0: "N"},
                                    "logit": {0: "N"}}, opset_version=13)
    add_meta(path, {"joiner_dim": J})
    shutil.copy(os.path.join(a.model, "tokens.txt"), os.path.join(a.out, "tokens.txt"))
    # Debian has no onnxruntime for Python: bench/sherpa_check_tokens.py
    # checks the export through sherpa-onnx itself.
    print(f"wrote {a.out}: encoder_out {tuple(ref[0].shape)}, {len(names)} states", file=sys.stderr)


if __name__ == "__main__":
    main()
