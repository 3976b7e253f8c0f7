"""The neural recogniser (backend neural_asr) served by the real harkd on
every endpoint, and the bad input it must survive: the tiny random
transducer of test_neural_asr.py through Riva (StreamingRecognize,
Recognize) and KServe one-shot infer gives the reference's words; audio at
8 kHz is resampled; a client that vanishes mid-chunk and 10,000 streams
opened and ended leave no stream state behind; modules that break the
contract fail to load with a reason naming the model and what differs; a
module that throws mid-stream fails only the streams of that round.
"""
import asyncio
import json
import os
import shutil
import struct
import tempfile
import time
import unittest
from typing import List, Tuple

import torch
import websockets

import asr_models
import harness
from harness import Harkd, main, metric_value
from test_neural_asr import FILES, read_pcm, run, words_of

class Endpoints(unittest.TestCase):
    """The same model behind Riva (StreamingRecognize, Recognize) and
    KServe one-shot infer, audio at another rate, clients that vanish, and
    many streams opened and ended."""

    @classmethod
    def setUpClass(cls):
        cls.model = asr_models.model_dir("transducer", "tiny", 1)
        cls.ref = {r["file"]: r for r in asr_models.reference(cls.model, "transducer", FILES)}
        cls.repo = tempfile.mkdtemp(prefix="hark-nasr-ep-")
        off = {"rule1_min_trailing_silence": "0", "rule2_min_trailing_silence": "0",
               "rule3_min_utterance_length": "0"}
        asr_models.make_model_folder(cls.repo, "nasr", cls.model,
                                     asr_models.config("nasr", params=off))
        cls.server = Harkd(repo=cls.repo, grpc=True,
                           args=("--speech-model", "nasr", "--stream-backlog-limit", "100000"))
        import test_riva
        cls.riva = test_riva
        cls.channel = test_riva.grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        cls.stub = test_riva.rasr_grpc.RivaSpeechRecognitionStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()
        shutil.rmtree(cls.repo, True)

    def clean(self, path):
        """The reference's words for path, or None when it has near ties."""
        ref = self.ref[path]
        return None if ref.get("near_tie_frames") else ref

    def test_riva_streaming_and_recognize(self):
        path = next(f for f in FILES if self.clean(f))
        ref = self.ref[path]
        responses, _ = self.riva.stream(self.stub, read_pcm(path), chunk=3200)
        finals = [r.results[0] for r in responses if r.results and r.results[0].is_final]
        interim = [r.results[0] for r in responses if r.results and not r.results[0].is_final]
        stab = [r.stability for r in interim]
        self.assertTrue(all(0.0 <= v <= 1.0 for v in stab), stab)
        self.assertGreater(max(stab), 0.5, "no partial ever settled")
        self.assertLess(min(stab), 0.5, "a changing partial must not look settled")
        text = " ".join(f.alternatives[0].transcript for f in finals).strip()
        self.assertEqual(text, ref["text"])
        words = [w for f in finals for w in f.alternatives[0].words]
        self.assertEqual([w.word for w in words], [w["word"] for w in ref["words"]])
        self.assertAlmostEqual(words[0].start_time / 1000.0, ref["words"][0]["start"], delta=0.002)
        with open(path, "rb") as f:
            data = f.read()
        rc = self.riva.rasr.RecognitionConfig(language_code="en-US",
                                              enable_word_time_offsets=True)
        resp = self.stub.Recognize(self.riva.rasr.RecognizeRequest(config=rc, audio=data),
                                   timeout=120)
        self.assertEqual(" ".join(r.alternatives[0].transcript for r in resp.results).strip(),
                         ref["text"])

    def test_kserve_one_shot_wav(self):
        path = next(f for f in FILES if self.clean(f))
        with open(path, "rb") as f:
            data = f.read()
        doc = {"inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1, 1],
                           "parameters": {"binary_data_size": len(data) + 4}}]}
        header = json.dumps(doc).encode()
        status, _, raw = self.server.request(
            "POST", "/v2/models/nasr/infer", header + struct.pack("<I", len(data)) + data,
            {"Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(status, 200, raw[:300])
        out = {o["name"]: o for o in json.loads(raw)["outputs"]}
        self.assertEqual(out["TRANSCRIPT"]["data"], [self.ref[path]["text"]])
        self.assertEqual(out["IS_FINAL"]["data"], [True])
        seconds = (len(data) - 44) / 32000.0
        self.assertAlmostEqual(out["AUDIO_PROCESSED"]["data"][0], seconds, delta=0.01)
        self.assertEqual(out["WORDS"]["data"], [w["word"] for w in self.ref[path]["words"]])

    def test_audio_at_8khz_is_resampled(self):
        import audioop
        path = FILES[3]
        pcm16 = read_pcm(path)
        pcm8, _ = audioop.ratecv(pcm16, 2, 1, 16000, 8000, None)
        seconds = len(pcm16) / 32000.0

        async def go():
            finals = []
            async with websockets.connect(self.url(), max_size=None) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": 8000, "words": True}}))
                for i in range(0, len(pcm8), 1600):
                    await ws.send(pcm8[i:i + 1600])
                    await ws.recv()
                await ws.send('{"eof" : 1}')
                finals.append(json.loads(await ws.recv()))
            return finals
        words = words_of(run(go()))
        self.assertTrue(words, "nothing recognised at 8 kHz")
        # Times are the stream's own seconds, not the 16 kHz samples' count.
        self.assertLessEqual(words[-1]["end"], seconds + 0.4)
        self.assertGreater(words[-1]["end"], seconds / 2 + 0.5)

    def url(self):
        return f"ws://127.0.0.1:{self.server.http_port}/v2/models/nasr/stream"

    def streams_live(self):
        return metric_value(self.server.metrics(), "hark_asr_streams", model="nasr")

    def wait_streams(self, n, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline and self.streams_live() != n:
            time.sleep(0.05)
        self.assertEqual(self.streams_live(), n)

    def test_a_client_that_vanishes_mid_chunk(self):
        import socket as so
        ws = harness.RawWebSocket(self.server.http_port, "/v2/models/nasr/stream")
        ws.send(0x2, b"\x01\x00" * 2500)  # 156 ms: half a chunk
        ws.recv_frame()
        self.assertEqual(self.streams_live(), 1)
        ws.sock.setsockopt(so.SOL_SOCKET, so.SO_LINGER, struct.pack("ii", 1, 0))
        ws.sock.close()  # a reset, mid-chunk
        self.wait_streams(0)

    def test_ten_thousand_streams_leave_no_state(self):
        chunk = b"\x01\x00" * 1600

        async def one():
            async with websockets.connect(self.url()) as ws:
                await ws.send(chunk)
                await ws.recv()
                await ws.send('{"eof" : 1}')
                await ws.recv()

        async def many(n, parallel=32):
            sem = asyncio.Semaphore(parallel)

            async def guarded():
                async with sem:
                    await one()
            await asyncio.gather(*(guarded() for _ in range(n)))
        run(many(500), timeout=600)
        self.wait_streams(0)
        base = self.server.settled_rss_kib()
        run(many(10000), timeout=900)
        self.wait_streams(0)
        grown = self.server.settled_rss_kib() - base
        print(f"\n10,000 streams: harkd RSS {base / 1024:.1f} -> {(base + grown) / 1024:.1f} MiB")
        if not self.server.sanitized():  # ASan's quarantine holds freed memory; LSan checks at exit
            self.assertLess(grown, 40 * 1024, f"RSS grew {grown} KiB over 10,000 streams")


# ---- modules that break the contract ------------------------------------------------------


class Enc(torch.nn.Module):
    """Eight output frames per chunk; one state, a per-stream chunk counter
    (batch axis 0); throws at the counter `fail_at` (0: never)."""

    def __init__(self, fail_at: int = 0):
        super().__init__()
        self.fail_at = fail_at
        self.proj = torch.nn.Linear(80, 16)

    def forward(self, x: torch.Tensor, lens: torch.Tensor,
                states: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
        count = states[0] + 1
        if self.fail_at > 0 and bool((count >= self.fail_at).any()):
            raise RuntimeError("the encoder broke at chunk " + str(self.fail_at))
        return self.proj(x[:, :8, :]), lens // 4, [count]

    @torch.jit.export
    def get_init_states(self, batch_size: int = 1,
                        device: torch.device = torch.device("cpu")) -> List[torch.Tensor]:
        return [torch.zeros(batch_size, dtype=torch.int64)]


class EncNoInit(torch.nn.Module):
    def forward(self, x: torch.Tensor, lens: torch.Tensor,
                states: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
        return x[:, :8, :16], lens, states


class EncFixedState(Enc):
    @torch.jit.export
    def get_init_states(self, batch_size: int = 1,
                        device: torch.device = torch.device("cpu")) -> List[torch.Tensor]:
        return [torch.zeros(batch_size, dtype=torch.int64), torch.zeros(3, 4)]


class Dec(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.context_size = 2
        self.blank_id = 0
        self.emb = torch.nn.Embedding(6, 16)

    def forward(self, y: torch.Tensor, need_pad: bool = True) -> torch.Tensor:
        # icefall's: -1 (left of an utterance's first blank) embeds as zeros
        return (self.emb(y.clamp(min=0)) * (y >= 0).unsqueeze(-1)).sum(1, keepdim=True)


class DecNoStart(Dec):
    """Indexes -1 straight into its embedding: cannot take the start context."""

    def forward(self, y: torch.Tensor, need_pad: bool = True) -> torch.Tensor:
        return self.emb(y).sum(1, keepdim=True)


class Join(torch.nn.Module):
    def __init__(self, vocab=6):
        super().__init__()
        self.out = torch.nn.Linear(16, vocab)

    def forward(self, e: torch.Tensor, d: torch.Tensor, project_input: bool = True) -> torch.Tensor:
        return self.out(torch.tanh(e + d))


class Transducer(torch.nn.Module):
    def __init__(self, enc, vocab=6, dec=None):
        super().__init__()
        self.encoder = enc
        self.decoder = dec if dec is not None else Dec()
        self.joiner = Join(vocab)


class EncoderOnly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Enc()


class CtcHead(torch.nn.Module):
    def __init__(self, vocab=6):
        super().__init__()
        self.out = torch.nn.Linear(16, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x).log_softmax(-1)


class Ctc(torch.nn.Module):
    def __init__(self, chunk: int = 0):
        super().__init__()
        self.encoder = Enc()
        if chunk:
            self.encoder.decode_chunk_len = chunk
        self.ctc_output = CtcHead()


TOKENS = "<blk> 0\n<sos/eos> 1\n\u2581A 2\n\u2581B 3\nC 4\nD 5\n"


class BadModels(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = tempfile.mkdtemp(prefix="hark-nasr-bad-")
        cls.files = tempfile.mkdtemp(prefix="hark-nasr-mod-")

        def save(name, module):
            path = os.path.join(cls.files, name + ".pt")
            torch.jit.save(torch.jit.script(module), path)
            return path

        good = save("good", Transducer(Enc()))
        models = {
            "no_init": (save("no_init", Transducer(EncNoInit())), TOKENS),
            "fixed_state": (save("fixed_state", Transducer(EncFixedState())), TOKENS),
            "no_decoder": (save("no_decoder", EncoderOnly()), TOKENS),
            "no_tokens": (good, False),
            "bad_tokens": (good, "<blk> 0\nA\n"),
            "gap_tokens": (good, "<blk> 0\n\u2581A 2\n"),
            "few_tokens": (good, "<blk> 0\n\u2581A 1\n"),
            "throws": (save("throws", Transducer(Enc(fail_at=3))), TOKENS),
            "dec_no_start": (save("dec_no_start", Transducer(Enc(), dec=DecNoStart())), TOKENS),
            # a CTC blank anywhere in tokens.txt; none at all
            "ctc_blank3": (save("ctc", Ctc()), "<unk> 0\n\u2581A 1\nB 2\n<blk> 3\nC 4\nD 5\n"),
            "ctc_no_blank": (save("ctc", Ctc()), "<unk> 0\n\u2581A 1\nB 2\nX 3\nC 4\nD 5\n"),
            # the encoder says 24 frames a chunk, the config 32
            "chunk_differs": (save("ctc24", Ctc(chunk=24)), TOKENS),
        }
        for name, (module, tokens) in models.items():
            asr_models.make_model_folder(cls.repo, name, None, asr_models.config(name),
                                         tokens=tokens, module=module)
        cls.server = Harkd(repo=cls.repo, args=("--strict-readiness", "false"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, True)
        shutil.rmtree(cls.files, True)

    def index(self):
        status, doc = self.server.json("POST", "/v2/repository/index")
        self.assertEqual(status, 200)
        return {m["name"]: m for m in doc}

    def test_bad_models_fail_to_load_with_reasons(self):
        idx = self.index()
        expect = {
            "no_init": "encoder has no method get_init_states",
            "fixed_state": "state 1 ([3, 4] for batch 1, [3, 4] for batch 2) cannot batch",
            "no_decoder": "has no submodule 'decoder'",
            "no_tokens": "tokens.txt",
            "bad_tokens": "tokens.txt:2: expected '<token> <id>'",
            "gap_tokens": "id 1 is missing",
            "few_tokens": "joiner gives 6 logits, tokens.txt has 2 tokens",
            "dec_no_start": "the decoder fails on an utterance's start context [-1, ..., blank]",
            "ctc_no_blank": "tokens.txt must name its blank",
            "chunk_differs": "parameter decode_chunk_len is 32 but the encoder's decode_chunk_len "
                             "is 24",
        }
        for name, why in expect.items():
            self.assertEqual(idx[name]["state"], "UNAVAILABLE", idx[name])
            self.assertIn(f"model '{name}'", idx[name]["reason"])
            self.assertIn(why, idx[name]["reason"])
        self.assertEqual(idx["throws"]["state"], "READY", idx["throws"])
        self.assertEqual(idx["ctc_blank3"]["state"], "READY", idx["ctc_blank3"])

    def test_a_module_that_throws_fails_only_its_round(self):
        url = f"ws://127.0.0.1:{self.server.http_port}/v2/models/throws/stream"
        chunk = b"\x01\x00" * 5120  # 320 ms: one chunk a message

        async def long():
            async with websockets.connect(url) as ws:
                for _ in range(6):
                    await ws.send(chunk)
                    await ws.recv()
                return None

        async def short():
            async with websockets.connect(url) as ws:
                await ws.send(chunk)
                await ws.recv()
                await ws.send('{"eof" : 1}')
                doc = json.loads(await ws.recv())
                return doc

        async def go():
            try:
                await long()
                return "no error"
            except websockets.ConnectionClosed as e:
                return e.code, e.reason
        code, reason = run(go())
        self.assertEqual(code, 1011, reason)
        self.assertIn("the encoder broke at chunk 3", reason)
        doc = run(short())
        self.assertIn("text", doc)
        # The failed stream's state is gone; the short one ended.
        self.assertEqual(metric_value(self.server.metrics(), "hark_asr_streams", model="throws"), 0)


if __name__ == "__main__":
    main()
