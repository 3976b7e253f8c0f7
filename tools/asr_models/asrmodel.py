"""Streaming ASR test models in the shape of icefall's streaming Zipformer
TorchScript export (zipformer/export.py --causal 1 --jit 1).

The scripted top-level module has submodules
  encoder  forward(features [N,T,C] f32, feature_lengths [N] i64,
                   states List[Tensor]) -> (encoder_out [N,T',D],
                   encoder_out_lens [N] i64, new_states)
           get_init_states(batch_size=1, device=cpu) -> List[Tensor]
           int attributes: decode_chunk_len (32), pad_length (13),
           chunk_size (16, at 50 Hz as icefall counts), left_context_len
           (at 50 Hz), subsampling_factor (4), output_dim
  decoder  (transducer) forward(y [N,context_size] i64, need_pad=True)
           -> [N,1,D_dec]; attributes context_size, blank_id, vocab_size
  joiner   (transducer) forward(encoder_out [N,D], decoder_out [N,D_dec],
           project_input=True) -> logits [N,V]; encoder_proj, decoder_proj
  ctc_output (ctc) [N,T',D] -> log-probs [N,T',V]

The encoder is exactly streaming: a chunk of T = decode_chunk_len +
pad_length = 45 feature frames gives T' = decode_chunk_len / 4 = 8 output
frames, and the output depends only on those T frames and the states.

States (the server finds each one's batch axis by comparing
get_init_states(1) with get_init_states(2)); for each stack s with layers
l = 0..L_s-1, in this order:
  cached_key   [left_s, N, H*dk]     float, batch axis 1   (per layer)
  cached_conv  [N, D_s, K_s - 1]     float, batch axis 0   (per layer)
then per stack, after its layers' pairs:
  cached_val   [L_s, left_s, N, H*dv] float, batch axis 2  (per stack)
and at the end:
  cached_embed_left_pad [N, D_embed, 2] float, batch axis 0
  processed_lens        [N]             int64, batch axis 0
processed_lens counts output frames (25 Hz) already processed; attention
masks the cache positions not yet filled (index j of left_s is valid iff
j >= left_s - min(processed_lens // ds_s, left_s)), so a fresh stream batched
with old ones gives the same output as alone.
"""

import math
from typing import List, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

LOG_EPS = math.log(1e-10)

# name -> encoder/decoder/joiner shape
CONFIGS = {
    # ~1M parameters: what the exactness tests run (64 streams x 5 files)
    "tiny": dict(
        embed_channels=(4, 16, 32),
        dims=(96, 128),
        layers=(2, 1),
        ff=(256, 384),
        heads=(4, 4),
        key_head_dim=16,
        val_head_dim=12,
        kernels=(15, 7),
        downsample=(1, 2),
        left_ctx=32,  # output frames (25 Hz) of left context
        output_dim=128,
        decoder_dim=128,
        joiner_dim=128,
    ),
    # ~20M parameters, shaped like sherpa-onnx's streaming-zipformer-en-20M
    # (6 stacks x 2 layers at downsampling 1,2,4,8,4,2, dims 192/256,
    # 3 feed-forwards, attention over a 2.56 s left-context cache, depthwise
    # conv): for the benchmark, where the cost matters, not fidelity
    "20m": dict(
        embed_channels=(8, 32, 128),
        dims=(192, 256, 256, 256, 256, 256),
        layers=(2, 2, 2, 2, 2, 2),
        ff=(576, 896, 896, 896, 896, 896),
        heads=(4, 4, 4, 8, 4, 4),
        key_head_dim=32,
        val_head_dim=12,
        kernels=(31, 31, 15, 15, 15, 31),
        downsample=(1, 2, 4, 8, 4, 2),
        left_ctx=64,
        output_dim=256,
        decoder_dim=512,
        joiner_dim=512,
    ),
}


class Embed(nn.Module):
    """Conv2d subsampling x4 of [N,T,80] fbank to E = ((T-3)//2-1)//2 frames
    (10 for T = 45), then a depthwise time conv (kernel 5) over 2 cached
    frames + E frames, giving T' = (T - pad)//4 frames. Embed frame i of a
    chunk sees input frames 4i..4i+8, so frame i+8 of one chunk is frame i
    of the next: the cache (frames T'-2, T'-1) makes this equal to running
    the convolutions over the whole sequence."""

    def __init__(self, num_features: int, channels: Tuple[int, int, int],
                 out_dim: int):
        super().__init__()
        c1, c2, c3 = channels
        self.conv1 = nn.Conv2d(1, c1, 3, stride=(1, 2))
        self.conv2 = nn.Conv2d(c1, c2, 3, stride=2)
        self.conv3 = nn.Conv2d(c2, c3, 3, stride=2)
        f = (num_features - 3) // 2 + 1
        f = (f - 3) // 2 + 1
        f = (f - 3) // 2 + 1
        self.out = nn.Linear(c3 * f, out_dim)
        self.time_conv = nn.Conv1d(out_dim, out_dim, 5, groups=out_dim)
        self.norm = nn.LayerNorm(out_dim)
        self.out_dim = out_dim

    def forward(self, x: torch.Tensor, cache: torch.Tensor,
                t_out: int) -> Tuple[torch.Tensor, torch.Tensor]:
        # x [N,T,F] -> [N,1,T,F]
        x = x.unsqueeze(1)
        x = torch.tanh(self.conv1(x))
        x = torch.tanh(self.conv2(x))
        x = torch.tanh(self.conv3(x))  # [N,c3,E,f]
        n, c, e, f = x.shape
        x = x.permute(0, 2, 1, 3).reshape(n, e, c * f)
        x = self.out(x)  # [N,E,D]
        xt = x.transpose(1, 2)  # [N,D,E]
        new_cache = xt[:, :, t_out - 2:t_out]
        y = self.time_conv(torch.cat([cache, xt], dim=2))  # [N,D,E-2]
        y = y[:, :, :t_out].transpose(1, 2)
        return self.norm(y), new_cache


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.w1 = nn.Linear(dim, hidden)
        self.w2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(self.norm(x))))


class Attention(nn.Module):
    """Self-attention over [left-context cache; this chunk], with a learned
    per-head position bias over (query, key) positions of the window."""

    def __init__(self, dim: int, heads: int, dk: int, dv: int, left: int,
                 t_chunk: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.heads = heads
        self.dk = dk
        self.dv = dv
        self.left = left
        self.q = nn.Linear(dim, heads * dk)
        self.k = nn.Linear(dim, heads * dk)
        self.v = nn.Linear(dim, heads * dv)
        self.o = nn.Linear(heads * dv, dim)
        self.pos_bias = nn.Parameter(
            0.5 * torch.randn(heads, t_chunk, left + t_chunk))

    def forward(self, x: torch.Tensor, cached_key: torch.Tensor,
                cached_val: torch.Tensor, valid_left: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        # x [N,T,D]; cached_key [left,N,H*dk]; cached_val [left,N,H*dv];
        # valid_left [N] int64: how many of the last cache entries are real
        n, t, _ = x.shape
        h = self.norm(x)
        q = self.q(h).reshape(n, t, self.heads, self.dk).transpose(1, 2)
        k_all = torch.cat([cached_key.transpose(0, 1), self.k(h)], dim=1)
        v_all = torch.cat([cached_val.transpose(0, 1), self.v(h)], dim=1)
        s = k_all.shape[1]
        k = k_all.reshape(n, s, self.heads, self.dk).permute(0, 2, 3, 1)
        v = v_all.reshape(n, s, self.heads, self.dv).transpose(1, 2)
        scores = torch.matmul(q, k) / math.sqrt(self.dk)  # [N,H,T,S]
        scores = scores + self.pos_bias[:, :t, :s]
        pos = torch.arange(s, device=x.device)
        # cache index j is unfilled iff j < left - valid_left
        masked = pos.unsqueeze(0) < (self.left - valid_left).unsqueeze(1)
        scores = scores.masked_fill(masked.unsqueeze(1).unsqueeze(2),
                                    float("-inf"))
        att = torch.softmax(scores, dim=-1)
        out = torch.matmul(att, v)  # [N,H,T,dv]
        out = out.transpose(1, 2).reshape(n, t, self.heads * self.dv)
        new_key = k_all[:, s - self.left:].transpose(0, 1)
        new_val = v_all[:, s - self.left:].transpose(0, 1)
        return self.o(out), new_key, new_val


class ConvModule(nn.Module):
    """Pointwise conv + GLU, causal depthwise conv with a K-1 frame cache,
    pointwise conv."""

    def __init__(self, dim: int, kernel: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.pw1 = nn.Linear(dim, 2 * dim)
        self.dw = nn.Conv1d(dim, dim, kernel, groups=dim)
        self.pw2 = nn.Linear(dim, dim)
        self.kernel = kernel

    def forward(self, x: torch.Tensor, cache: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        h = F.glu(self.pw1(self.norm(x)), dim=-1).transpose(1, 2)  # [N,D,T]
        h = torch.cat([cache, h], dim=2)
        new_cache = h[:, :, h.shape[2] - (self.kernel - 1):]
        h = F.silu(self.dw(h)).transpose(1, 2)
        return self.pw2(h), new_cache


class Layer(nn.Module):
    def __init__(self, dim: int, ff: int, heads: int, dk: int, dv: int,
                 kernel: int, left: int, t_chunk: int):
        super().__init__()
        self.ff1 = FeedForward(dim, ff * 3 // 4)
        self.att = Attention(dim, heads, dk, dv, left, t_chunk)
        self.conv = ConvModule(dim, kernel)
        self.ff2 = FeedForward(dim, ff)
        self.ff3 = FeedForward(dim, ff * 5 // 4)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, cached_key: torch.Tensor,
                cached_val: torch.Tensor, cached_conv: torch.Tensor,
                valid_left: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                           torch.Tensor]:
        x = x + 0.5 * self.ff1(x)
        a, new_key, new_val = self.att(x, cached_key, cached_val, valid_left)
        x = x + a
        c, new_conv = self.conv(x, cached_conv)
        x = x + c
        x = x + self.ff2(x)
        x = x + 0.5 * self.ff3(x)
        return self.norm(x), new_key, new_val, new_conv


class Stack(nn.Module):
    """Layers at 1/ds of the 25 Hz frame rate (learned-weight downsampling,
    repeat upsampling, residual around the stack)."""

    def __init__(self, in_dim: int, dim: int, num_layers: int, ff: int,
                 heads: int, dk: int, dv: int, kernel: int, left: int,
                 ds: int, t_out: int):
        super().__init__()
        assert t_out % ds == 0 and left % ds == 0
        self.ds = ds
        self.left = left // ds
        self.num_layers = num_layers
        self.dim = dim
        self.kernel = kernel
        self.key_dim = heads * dk
        self.val_dim = heads * dv
        self.proj_in = nn.Linear(in_dim, dim)
        self.ds_weights = nn.Parameter(torch.zeros(ds))
        self.layers = nn.ModuleList([
            Layer(dim, ff, heads, dk, dv, kernel, self.left, t_out // ds)
            for _ in range(num_layers)])

    def forward(self, x: torch.Tensor, states: List[torch.Tensor],
                processed_lens: torch.Tensor
                ) -> Tuple[torch.Tensor, List[torch.Tensor]]:
        x = self.proj_in(x)  # [N,T,D]
        n, t, d = x.shape
        w = torch.softmax(self.ds_weights, dim=0)
        z = (x.reshape(n, t // self.ds, self.ds, d)
             * w.reshape(1, 1, self.ds, 1)).sum(dim=2)
        valid_left = torch.clamp(processed_lens // self.ds, max=self.left)
        cached_vals = states[2 * self.num_layers]
        new_states: List[torch.Tensor] = []
        new_vals: List[torch.Tensor] = []
        i = 0
        for layer in self.layers:
            z, k, v, c = layer(z, states[2 * i], cached_vals[i],
                               states[2 * i + 1], valid_left)
            new_states.append(k)
            new_states.append(c)
            new_vals.append(v)
            i += 1
        new_states.append(torch.stack(new_vals, dim=0))
        z = torch.repeat_interleave(z, self.ds, dim=1)
        return x + z, new_states

    def init_states(self, batch_size: int, device: torch.device
                    ) -> List[torch.Tensor]:
        out: List[torch.Tensor] = []
        for _ in range(self.num_layers):
            out.append(torch.zeros(self.left, batch_size, self.key_dim,
                                   device=device))
            out.append(torch.zeros(batch_size, self.dim, self.kernel - 1,
                                   device=device))
        out.append(torch.zeros(self.num_layers, self.left, batch_size,
                               self.val_dim, device=device))
        return out


class Encoder(nn.Module):
    def __init__(self, cfg: dict, num_features: int = 80,
                 decode_chunk_len: int = 32, pad_length: int = 13):
        super().__init__()
        assert decode_chunk_len % 4 == 0
        self.decode_chunk_len = decode_chunk_len
        self.pad_length = pad_length
        self.subsampling_factor = 4
        # icefall's names: chunk_size and left_context_len count frames at
        # 50 Hz (the encoder_embed's rate); decode_chunk_len = 2 * chunk_size
        self.chunk_size = decode_chunk_len // 2
        self.left_context_len = cfg["left_ctx"] * 2
        self.t_out = decode_chunk_len // 4
        dims = cfg["dims"]
        self.embed = Embed(num_features, cfg["embed_channels"], dims[0])
        stacks = []
        prev = dims[0]
        for s in range(len(dims)):
            stacks.append(Stack(prev, dims[s], cfg["layers"][s], cfg["ff"][s],
                                cfg["heads"][s], cfg["key_head_dim"],
                                cfg["val_head_dim"], cfg["kernels"][s],
                                cfg["left_ctx"], cfg["downsample"][s],
                                self.t_out))
            prev = dims[s]
        self.stacks = nn.ModuleList(stacks)
        self.out_norm = nn.LayerNorm(prev)
        self.out = nn.Linear(prev, cfg["output_dim"])
        self.output_dim = cfg["output_dim"]
        self.embed_dim = dims[0]

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor,
                states: List[torch.Tensor]
                ) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
        t_out = (features.shape[1] - self.pad_length) // 4
        processed_lens = states[-1]
        x, new_embed = self.embed(features, states[-2], t_out)
        new_states: List[torch.Tensor] = []
        idx = 0
        for stack in self.stacks:
            n = 2 * stack.num_layers + 1
            x, st = stack(x, states[idx:idx + n], processed_lens)
            new_states.extend(st)
            idx += n
        x = self.out(self.out_norm(x))
        lens = torch.clamp(
            torch.div(feature_lengths - self.pad_length, 4,
                      rounding_mode="floor"), min=0)
        new_states.append(new_embed)
        new_states.append(processed_lens + lens)
        return x, lens, new_states

    @torch.jit.export
    def get_init_states(self, batch_size: int = 1,
                        device: torch.device = torch.device("cpu")
                        ) -> List[torch.Tensor]:
        states: List[torch.Tensor] = []
        for stack in self.stacks:
            states.extend(stack.init_states(batch_size, device))
        states.append(torch.zeros(batch_size, self.embed_dim, 2,
                                  device=device))
        states.append(torch.zeros(batch_size, dtype=torch.int64,
                                  device=device))
        return states


class Decoder(nn.Module):
    """icefall's stateless Decoder: embedding + grouped Conv1d over the last
    context_size tokens."""

    def __init__(self, vocab_size: int, dim: int, blank_id: int = 0,
                 context_size: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim)
        self.conv = nn.Conv1d(dim, dim, context_size, groups=dim // 4,
                              bias=False)
        self.blank_id = blank_id
        self.context_size = context_size
        self.vocab_size = vocab_size

    def forward(self, y: torch.Tensor, need_pad: bool = True) -> torch.Tensor:
        y = y.to(torch.int64)
        emb = self.embedding(y.clamp(min=0)) * (y >= 0).unsqueeze(-1)
        emb = emb.permute(0, 2, 1)  # [N,D,U]
        if need_pad:
            emb = F.pad(emb, (self.context_size - 1, 0))
        else:
            assert emb.size(-1) == self.context_size
        out = self.conv(emb).permute(0, 2, 1)
        return F.relu(out)


class Joiner(nn.Module):
    def __init__(self, encoder_dim: int, decoder_dim: int, joiner_dim: int,
                 vocab_size: int):
        super().__init__()
        self.encoder_proj = nn.Linear(encoder_dim, joiner_dim)
        self.decoder_proj = nn.Linear(decoder_dim, joiner_dim)
        self.output_linear = nn.Linear(joiner_dim, vocab_size)

    def forward(self, encoder_out: torch.Tensor, decoder_out: torch.Tensor,
                project_input: bool = True) -> torch.Tensor:
        if project_input:
            logit = self.encoder_proj(encoder_out) + \
                self.decoder_proj(decoder_out)
        else:
            logit = encoder_out + decoder_out
        return self.output_linear(torch.tanh(logit))


class CtcOutput(nn.Module):
    def __init__(self, dim: int, vocab_size: int):
        super().__init__()
        self.linear = nn.Linear(dim, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(self.linear(x), dim=-1)


class Transducer(nn.Module):
    def __init__(self, encoder: Encoder, decoder: Decoder, joiner: Joiner):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.joiner = joiner


class Ctc(nn.Module):
    def __init__(self, encoder: nn.Module, ctc_output: nn.Module):
        super().__init__()
        self.encoder = encoder
        self.ctc_output = ctc_output


def count_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())
