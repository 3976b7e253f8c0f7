"""The rounds of a batched neural_asr model (backend.c, the round
threads), served by the real harkd: a message that completes no encoder
window is answered at once, a chunk that completes one waits for the other
live streams' and they share one encoder call, and a whole recording does
not wait a round's delay for each of its chunks.
"""
import asyncio
import json
import shutil
import struct
import tempfile
import time
import unittest

import websockets

import asr_models
from harness import Harkd, main, metric_value
from test_neural_asr import FILES, read_pcm, run


class Rounds(unittest.TestCase):
    """A batched model's rounds (backend.c, the round threads): a message
    that completes no encoder window is answered at once, a chunk that
    completes one waits for the other live streams' (round_wait_ms) and
    they share one encoder call, and a whole recording does not wait a
    round's delay for each of its chunks. The wait is set far beyond any
    scheduling noise (10 s), so every check is an order, not a speed."""

    WAIT_S = 10.0

    @classmethod
    def setUpClass(cls):
        cls.model = asr_models.model_dir("transducer", "tiny", 1)
        cls.repo = tempfile.mkdtemp(prefix="hark-nasr-rounds-")
        params = {"round_wait_ms": str(int(cls.WAIT_S * 1000)),
                  "rule1_min_trailing_silence": "0", "rule2_min_trailing_silence": "0",
                  "rule3_min_utterance_length": "0"}
        asr_models.make_model_folder(cls.repo, "nasr", cls.model,
                                     asr_models.config("nasr", params=params))
        cls.server = Harkd(repo=cls.repo, args=("--speech-model", "nasr"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, True)

    def encoder(self):
        text = self.server.metrics()
        return (metric_value(text, "hark_asr_encoder_calls_total", model="nasr"),
                metric_value(text, "hark_asr_encoder_chunks_total", model="nasr"))

    def test_partials_answered_at_once_and_windows_share_a_round(self):
        pcm = read_pcm(FILES[0])
        url = f"ws://127.0.0.1:{self.server.http_port}/v2/models/nasr/stream"
        calls0, chunks0 = self.encoder()

        async def go():
            cfg = json.dumps({"config": {"sample_rate": 16000}})
            async with websockets.connect(url) as a, websockets.connect(url) as b:
                for ws in (a, b):  # both streams live, neither with a whole window
                    await ws.send(cfg)
                    await ws.send(pcm[:3200])
                    self.assertIn("partial", json.loads(await ws.recv()))
                # a's window is whole (0.1 + 0.5 s): held for b's
                await a.send(pcm[3200:19200])
                held = asyncio.ensure_future(a.recv())
                await asyncio.sleep(0.3)
                # b's 100 ms completes no window: answered while a's waits
                await b.send(pcm[3200:6400])
                self.assertIn("partial", json.loads(await asyncio.wait_for(b.recv(),
                                                                           self.WAIT_S - 2)))
                self.assertFalse(held.done(), "a held window was answered before the round")
                calls, _ = self.encoder()
                self.assertEqual(calls, calls0, "an encoder call ran with a's window alone")
                # b's window is whole too: every live stream is in, the round runs now
                await b.send(pcm[6400:19200])
                ra = json.loads(await asyncio.wait_for(held, self.WAIT_S - 2))
                rb = json.loads(await asyncio.wait_for(b.recv(), self.WAIT_S - 2))
                self.assertIn("partial", ra)
                self.assertIn("partial", rb)
                for ws in (a, b):
                    await ws.send('{"eof" : 1}')
                    while "text" not in json.loads(await ws.recv()):
                        pass
        run(go(), timeout=120)
        calls, chunks = self.encoder()
        self.assertGreaterEqual(chunks - chunks0, 2)
        # the first round held both windows: fewer calls than chunks
        self.assertLess(calls - calls0, chunks - chunks0)

    def test_a_recording_does_not_wait_a_round_per_chunk(self):
        """Two idle live streams keep 'every stream is in' false; a
        recording of 9 or more windows must not wait round_wait_ms for each."""
        pcm = max((read_pcm(f) for f in FILES), key=len)
        self.assertGreater(len(pcm), 3 * 32000)
        url = f"ws://127.0.0.1:{self.server.http_port}/v2/models/nasr/stream"
        header = struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(pcm), b"WAVE", b"fmt ", 16,
                             1, 1, 16000, 32000, 2, 16, b"data", len(pcm))
        data = header + pcm
        doc = {"inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1, 1],
                           "parameters": {"binary_data_size": len(data) + 4}}]}
        body = json.dumps(doc).encode()

        async def go():
            cfg = json.dumps({"config": {"sample_rate": 16000}})
            async with websockets.connect(url) as a, websockets.connect(url) as b:
                for ws in (a, b):
                    await ws.send(cfg)
                    await ws.send(pcm[:3200])
                    await ws.recv()
                t0 = time.monotonic()
                status, _, raw = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: self.server.request(
                        "POST", "/v2/models/nasr/infer",
                        body + struct.pack("<I", len(data)) + data,
                        {"Inference-Header-Content-Length": str(len(body))}))
                took = time.monotonic() - t0
                for ws in (a, b):
                    await ws.send('{"eof" : 1}')
                    while "text" not in json.loads(await ws.recv()):
                        pass
                return status, raw, took
        status, raw, took = run(go(), timeout=300)
        self.assertEqual(status, 200, raw[:300])
        out = {o["name"]: o for o in json.loads(raw)["outputs"]}
        self.assertAlmostEqual(out["AUDIO_PROCESSED"]["data"][0], len(pcm) / 32000, delta=0.01)
        # 9 windows at 10 s each would be 90 s; not even one wait
        self.assertLess(took, self.WAIT_S - 2)


if __name__ == "__main__":
    main()
