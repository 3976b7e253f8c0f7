#!/usr/bin/python3
"""Train a small streaming CTC model on speech synthesised with espeak-ng:
digit strings ("one two three", "zero" / "oh") and commands (yes no stop go
left right up down on off), word-level tokens (▁ONE ...).

  /usr/bin/python3 tools/asr_models/train_digits.py --out DIR \
      [--seed 1] [--train-utts 2000] [--test-utts 100] [--epochs 10] \
      [--threads 1] [--jobs 2]

Writes DIR/model.pt (TorchScript, the same streaming encoder contract as
asrmodel.py, CTC family: encoder + ctc_output), DIR/tokens.txt, a held-out
test set DIR/test/NNN.wav (16 kHz mono int16) with DIR/test/transcripts.txt
("NNN.wav WORD WORD ..." per line), and DIR/result.json (held-out WER with
reference.py's decoding, and the run's numbers). A second run with the same
script, reference.py, and arguments finds DIR/.key and only prints the
stored result.

The encoder: features normalised with fixed (training-set) mean and std,
a Conv1d (kernel 24, stride 4) over 8 cached + 32 new + 12 of the 13 pad
frames (120 ms lookahead), then a 2-layer unidirectional LSTM with a residual
around it and a feed-forward after. It is causal, so
training on whole utterances (8 zero frames of left padding, log(1e-10)
on the right) equals
chunk-by-chunk streaming. States:
  cached_feats   [N, 80, 8]  float, batch axis 0
  lstm h         [2, N, H]   float, batch axis 1
  lstm c         [2, N, H]   float, batch axis 1
  processed_lens [N]         int64, batch axis 0 (output frames so far)

Training speech: every voice in TRAIN_VOICES x variant, speeds 130..190,
pitches 30..70, gain 0.05..0.9, white noise at 10..40 dB SNR. The test set
is one held-out combination: voice TEST_VOICE (a base voice and variant
seen in training, never together), speed 165, pitch 60, 20 dB SNR, and
utterances synthesised fresh.
"""

import argparse
import concurrent.futures
import hashlib
import inspect
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import wave
from typing import List, Tuple

import torch
import torch.nn as nn
import torchaudio

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import asrmodel  # noqa: E402
import reference  # noqa: E402

DIGITS = ["ZERO", "OH", "ONE", "TWO", "THREE", "FOUR", "FIVE", "SIX",
          "SEVEN", "EIGHT", "NINE"]
COMMANDS = ["YES", "NO", "STOP", "GO", "LEFT", "RIGHT", "UP", "DOWN", "ON",
            "OFF"]
WORDS = DIGITS + COMMANDS
SPECIALS = ["<blk>", "<sos/eos>", "<unk>"]
TOKENS = SPECIALS + ["\u2581" + w for w in WORDS]

BASE_VOICES = ["en", "en-us", "en-gb-scotland", "en-gb-x-rp", "en-029",
               "en-us-nyc", "en-gb-x-gbclan"]
VARIANTS = ["", "+m1", "+m3", "+m5", "+m7", "+f1", "+f2", "+f3", "+f4",
            "+klatt", "+klatt3", "+croak"]
TEST_VOICE = "en-us+f3"
TRAIN_VOICES = [b + v for b in BASE_VOICES for v in VARIANTS
                if b + v != TEST_VOICE]
TEST_SPEED, TEST_PITCH, TEST_SNR = 165, 60, 20.0
SAMPLE_RATE = 16000
LEFT = 8  # cached feature frames
LOOKAHEAD = 12  # feature frames of right context (pad_length is 13)
MAX_FRAMES = 4000  # feature frames per training batch (with padding)


class DigitEncoder(nn.Module):
    def __init__(self, hidden: int = 192, num_features: int = 80,
                 decode_chunk_len: int = 32, pad_length: int = 13):
        super().__init__()
        self.decode_chunk_len = decode_chunk_len
        self.pad_length = pad_length
        self.chunk_size = decode_chunk_len // 2
        self.left_context_len = 0
        self.subsampling_factor = 4
        self.output_dim = hidden
        self.hidden = hidden
        self.num_features = num_features
        self.num_layers = 2
        self.left = LEFT
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("inv_std", torch.ones(num_features))
        # output frame j sees feature frames 4j-8 .. 4j+3+lookahead: the 8
        # before the chunk are cached, the lookahead (<= pad_length) comes
        # from the chunk's pad frames
        self.lookahead = LOOKAHEAD
        self.conv = nn.Conv1d(num_features, hidden, LEFT + 4 + LOOKAHEAD,
                              stride=4)
        self.lstm = nn.LSTM(hidden, hidden, num_layers=2, batch_first=True)
        # the residual around the LSTM and the feed-forward after it let
        # training leave CTC's all-blank plateau in ~100 steps (a bare LSTM
        # sat on it for 1000)
        self.ff = nn.Sequential(nn.Linear(hidden, 2 * hidden), nn.ReLU(),
                                nn.Linear(2 * hidden, hidden))

    def forward(self, features: torch.Tensor, feature_lengths: torch.Tensor,
                states: List[torch.Tensor]
                ) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
        main = features.shape[1] - self.pad_length
        x = features[:, :main + self.lookahead]
        x = ((x - self.mean) * self.inv_std).transpose(1, 2)
        x = torch.cat([states[0], x], dim=2)  # [N,80,LEFT+main+lookahead]
        new_cache = x[:, :, main:main + self.left]
        h = torch.relu(self.conv(x)).transpose(1, 2)  # [N,main/4,H]
        out, (hn, cn) = self.lstm(h, (states[1], states[2]))
        out = h + out
        out = out + self.ff(out)
        lens = torch.clamp(
            torch.div(feature_lengths - self.pad_length, 4,
                      rounding_mode="floor"), min=0)
        return out, lens, [new_cache, hn, cn, states[3] + lens]

    @torch.jit.export
    def get_init_states(self, batch_size: int = 1,
                        device: torch.device = torch.device("cpu")
                        ) -> List[torch.Tensor]:
        return [
            torch.zeros(batch_size, self.num_features, self.left,
                        device=device),
            torch.zeros(self.num_layers, batch_size, self.hidden,
                        device=device),
            torch.zeros(self.num_layers, batch_size, self.hidden,
                        device=device),
            torch.zeros(batch_size, dtype=torch.int64, device=device),
        ]

    def forward_full(self, feats: torch.Tensor) -> torch.Tensor:
        """Whole (padded) utterances [N,T,80] -> [N,T//4,H], equal to
        streaming them chunk by chunk."""
        x = ((feats - self.mean) * self.inv_std).transpose(1, 2)
        # left: the initial cache (zeros); right: the lookahead past the
        # end, log(1e-10) as the last streaming chunk is padded
        x = nn.functional.pad(x, (LEFT, 0))
        end = ((torch.full((feats.shape[0], self.lookahead, feats.shape[2]),
                           reference.LOG_EPS) - self.mean) * self.inv_std)
        x = torch.cat([x, end.transpose(1, 2)], dim=2)
        h = torch.relu(self.conv(x)).transpose(1, 2)
        out, _ = self.lstm(h)
        out = h + out
        return out + self.ff(out)


# --- speech synthesis ------------------------------------------------------

def random_text(rng: random.Random) -> List[str]:
    kind = rng.random()
    if kind < 0.5:  # a digit string
        return [rng.choice(DIGITS) for _ in range(rng.randint(2, 9))]
    if kind < 0.75:  # commands
        return [rng.choice(COMMANDS) for _ in range(rng.randint(1, 5))]
    return [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]


def speak(text: str, voice: str, speed: int, pitch: int) -> torch.Tensor:
    """espeak-ng's 22050 Hz output resampled to 16 kHz, float in [-1, 1)."""
    with tempfile.NamedTemporaryFile(suffix=".wav") as f:
        subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-p",
                        str(pitch), "-w", f.name, text.lower()], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with wave.open(f.name, "rb") as w:
            rate = w.getframerate()
            data = w.readframes(w.getnframes())
    s = torch.frombuffer(bytearray(data), dtype=torch.int16).float() / 32768
    return torchaudio.functional.resample(s, rate, SAMPLE_RATE)


def degrade(s: torch.Tensor, gain: float, snr_db: float,
            gen: torch.Generator) -> torch.Tensor:
    """Gain, white noise at snr_db against the speech's power, 0.3 s
    of noise-only lead-in/out, rounded to int16 values."""
    pad = torch.zeros(int(0.3 * SAMPLE_RATE))
    s = torch.cat([pad, s * gain, pad])
    power = float((s ** 2).mean()) + 1e-12
    noise = torch.randn(s.shape, generator=gen)
    s = s + noise * (power / 10 ** (snr_db / 10)) ** 0.5
    return torch.clamp(torch.round(s * 32768), -32768, 32767)


def synth_set(n: int, seed: int, test: bool, threads: int):
    """n utterances: (int16-valued samples, words)."""
    rng = random.Random(seed)
    jobs = []
    for _ in range(n):
        words = random_text(rng)
        if test:
            voice, speed, pitch = TEST_VOICE, TEST_SPEED, TEST_PITCH
            gain, snr = 0.5, TEST_SNR
        else:
            voice = rng.choice(TRAIN_VOICES)
            speed, pitch = rng.randint(130, 190), rng.randint(30, 70)
            gain, snr = rng.uniform(0.05, 0.9), rng.uniform(10, 40)
        sep = ", " if rng.random() < 0.2 else " "
        jobs.append((sep.join(words), words, voice, speed, pitch, gain, snr,
                     rng.randrange(1 << 30)))

    def one(job):
        text, words, voice, speed, pitch, gain, snr, nseed = job
        s = speak(text, voice, speed, pitch)
        return degrade(s, gain, snr,
                       torch.Generator().manual_seed(nseed)), words

    with concurrent.futures.ThreadPoolExecutor(threads) as ex:
        return list(ex.map(one, jobs))


def write_wav(path: str, samples: torch.Tensor):
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(SAMPLE_RATE)
        w.writeframes(samples.to(torch.int16).numpy().tobytes())


# --- training --------------------------------------------------------------

def batches(lengths: List[int], max_frames: int, rng: random.Random):
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out, cur = [], []
    for i in order:
        if cur and (len(cur) + 1) * lengths[i] > max_frames:
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    rng.shuffle(out)
    return out


def train(model, feats, targets, epochs: int, seed: int, log):
    rng = random.Random(seed)
    ctc = nn.CTCLoss(blank=0, zero_infinity=True)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    lengths = [f.shape[0] for f in feats]
    steps = epochs * len(batches(lengths, MAX_FRAMES, random.Random(0)))
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3,
                                                total_steps=steps,
                                                pct_start=0.15)
    model.train()
    for ep in range(epochs):
        t0 = time.time()
        tot, n = 0.0, 0
        for b in batches(lengths, MAX_FRAMES, rng):
            # a random tail of log(1e-10) frames, as the last streaming
            # chunk is padded
            fs = []
            for i in b:
                f = feats[i]
                if rng.random() < 0.5:
                    tail = torch.full((rng.randint(1, 44), f.shape[1]),
                                      reference.LOG_EPS)
                    f = torch.cat([f, tail])
                fs.append(f)
            t = max(f.shape[0] for f in fs)
            # padded with log(1e-10): the lookahead of an utterance's last
            # frames sees it, as in streaming
            x = torch.stack([nn.functional.pad(f, (0, 0, 0, t - f.shape[0]),
                                               value=reference.LOG_EPS)
                             for f in fs])
            in_lens = torch.tensor([f.shape[0] // 4 for f in fs])
            y = torch.cat([targets[i] for i in b])
            y_lens = torch.tensor([len(targets[i]) for i in b])
            logp = model.ctc_output(model.encoder.forward_full(x))
            loss = ctc(logp.transpose(0, 1), y, in_lens, y_lens)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            sched.step()
            tot += float(loss) * len(b)
            n += len(b)
        log(f"epoch {ep + 1}/{epochs}: loss {tot / n:.4f} "
            f"({time.time() - t0:.1f} s)")
    model.eval()


def edit_distance(a: List[str], b: List[str]) -> int:
    d = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(b) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] != b[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(b)]


def evaluate(out: str, log) -> dict:
    model, toks = reference.load(out)
    errs = words = 0
    bad = []
    with open(os.path.join(out, "test", "transcripts.txt")) as f:
        lines = [ln.split() for ln in f if ln.strip()]
    with torch.no_grad():
        for name, *ref in lines:
            r = reference.decode_file(model, "ctc", toks,
                                      os.path.join(out, "test", name), 32,
                                      13, 1.0)
            hyp = r["text"].split()
            e = edit_distance(ref, hyp)
            errs += e
            words += len(ref)
            if e:
                bad.append(f"{name}: ref {' '.join(ref)} | hyp {r['text']}")
    wer = errs / max(words, 1)
    for b in bad[:10]:
        log("  " + b)
    log(f"held-out WER {100 * wer:.2f}% ({errs}/{words} words, "
        f"{len(lines)} utterances)")
    return {"wer": wer, "errors": errs, "words": words,
            "utterances": len(lines)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--train-utts", type=int, default=2000)
    ap.add_argument("--test-utts", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (on a loaded machine OpenMP's "
                    "spinning makes 2 far slower than 1)")
    ap.add_argument("--jobs", type=int, default=2,
                    help="espeak-ng processes at once")
    a = ap.parse_args()

    h = hashlib.sha256()
    for fn in ("train_digits.py", "reference.py", "asrmodel.py"):
        with open(os.path.join(HERE, fn), "rb") as f:
            h.update(f.read())
    args = {k: v for k, v in vars(a).items() if k not in ("out", "threads", "jobs")}
    h.update(json.dumps(args, sort_keys=True).encode())
    key = h.hexdigest()
    key_path = os.path.join(a.out, ".key")
    result_path = os.path.join(a.out, "result.json")
    if os.path.exists(key_path) and os.path.exists(result_path):
        with open(key_path) as f:
            if f.read().strip() == key:
                with open(result_path) as f:
                    res = json.load(f)
                print(f"{a.out}: up to date; held-out WER "
                      f"{100 * res['wer']:.2f}%")
                return

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    os.makedirs(os.path.join(a.out, "test"), exist_ok=True)
    if os.path.exists(key_path):
        os.unlink(key_path)
    t_start = time.time()

    def log(msg):
        print(f"[{time.time() - t_start:6.1f} s] {msg}", flush=True)

    # the synthesised speech is cached on its own (it takes minutes):
    # keyed by what makes it
    sh = hashlib.sha256(json.dumps(
        [a.seed, a.train_utts, a.test_utts, TRAIN_VOICES, TEST_VOICE,
         TEST_SPEED, TEST_PITCH, TEST_SNR, WORDS, SAMPLE_RATE] +
        [inspect.getsource(fn) for fn in (random_text, speak, degrade,
                                          synth_set)]).encode()).hexdigest()
    synth_path = os.path.join(a.out, f"synth-{sh[:16]}.pt")
    if os.path.exists(synth_path):
        train_set, test_set = [[(x.float(), w) for x, w in part]
                               for part in torch.load(synth_path)]
    else:
        train_set = synth_set(a.train_utts, a.seed, False, a.jobs)
        test_set = synth_set(a.test_utts, a.seed + 1000, True, a.jobs)
        torch.save(([(x.to(torch.int16), w) for x, w in train_set],
                    [(x.to(torch.int16), w) for x, w in test_set]),
                   synth_path + ".tmp")
        os.replace(synth_path + ".tmp", synth_path)
    log(f"synthesised {len(train_set)} training utterances "
        f"({sum(s.numel() for s, _ in train_set) / SAMPLE_RATE:.0f} s), "
        f"{len(test_set)} test")
    with open(os.path.join(a.out, "test", "transcripts.txt"), "w") as f:
        for i, (s, words) in enumerate(test_set):
            write_wav(os.path.join(a.out, "test", f"{i:03d}.wav"), s)
            f.write(f"{i:03d}.wav {' '.join(words)}\n")

    feats = [reference.fbank(s) for s, _ in train_set]
    targets = [torch.tensor([TOKENS.index("\u2581" + w) for w in words])
               for _, words in train_set]
    allf = torch.cat(feats)
    enc = DigitEncoder(a.hidden)
    enc.mean.copy_(allf.mean(0))
    enc.inv_std.copy_(1.0 / allf.std(0).clamp(min=1e-3))
    model = asrmodel.Ctc(enc, asrmodel.CtcOutput(a.hidden, len(TOKENS)))
    nparams = asrmodel.count_params(model)
    log(f"model: {nparams} parameters")
    train(model, feats, targets, a.epochs, a.seed, log)
    train_s = time.time() - t_start

    scripted = torch.jit.script(model)
    # streaming (the scripted encoder, chunk by chunk, as reference.py runs
    # it) must equal the whole-utterance training path
    with torch.no_grad():
        f = reference.fbank(test_set[0][0])
        stream, _ = reference.encode(scripted, f, 32, 13)
        full = model.encoder.forward_full(f.unsqueeze(0))[0]
        n = full.shape[0]
        diff = float((stream[:n] - full).abs().max())
    log(f"streaming vs whole-utterance encoder: max |diff| {diff:.3g} "
        f"over {n} frames")
    if diff > 1e-4:
        raise SystemExit("streaming encoder differs from training's")
    torch.jit.save(scripted, os.path.join(a.out, "model.pt"))
    with open(os.path.join(a.out, "tokens.txt"), "w", encoding="utf-8") as f:
        for i, t in enumerate(TOKENS):
            f.write(f"{t} {i}\n")
    res = evaluate(a.out, log)
    res.update({"parameters": nparams, "seconds": round(time.time() -
                                                        t_start, 1),
                "train_seconds": round(train_s, 1), "args": args,
                "test_voice": TEST_VOICE, "test_speed": TEST_SPEED,
                "test_pitch": TEST_PITCH, "test_snr_db": TEST_SNR})
    with open(result_path, "w") as f:
        json.dump(res, f, indent=1)
    with open(key_path, "w") as f:
        f.write(key + "\n")


if __name__ == "__main__":
    main()
