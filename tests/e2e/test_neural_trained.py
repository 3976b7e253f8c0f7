"""A trained network, end to end: a small streaming CTC model that the
suite trains itself (tools/asr_models/train_digits.py, cached: speech
synthesised with espeak-ng — digit strings and commands, several voices,
speeds and noise) recognises its held-out utterances (a voice, speed and
noise it never heard together) through the real harkd's Vosk WebSocket and
Riva endpoints with WER <= 5%, with its default endpointing, and each
word's time lies within the utterance's speech. Gated by silero_vad
(parameter vad_model), the same model keeps its WER on utterances between
seconds of silence, its word times stay stream times, and silence costs no
encoder call.
"""
import array
import asyncio
import json
import os
import random
import struct
import sys
import shutil
import tempfile
import unittest
import wave

import websockets

import asr_models
from harness import Harkd, SHIPPED_MODELS, main, metric_value

MAX_WER = 0.05


def read_pcm(path):
    with wave.open(path) as w:
        return w.readframes(w.getnframes()), w.getframerate()


def speech_span(pcm, rate=16000):
    """Seconds from the first to the last 10 ms window whose energy is
    within 30 dB of the loudest."""
    x = array.array("h", pcm)
    win = rate // 100
    energy = [sum(v * v for v in x[i:i + win]) / win for i in range(0, len(x) - win, win)]
    top = max(energy) if energy else 0
    loud = [i for i, e in enumerate(energy) if e > top * 1e-3]
    return (loud[0] * 0.01, (loud[-1] + 1) * 0.01) if loud else (0.0, 0.0)


async def vosk(url, pcm):
    finals = []
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"config": {"sample_rate": 16000, "words": True}}))
        for i in range(0, len(pcm), 3200):
            await ws.send(pcm[i:i + 3200])
            doc = json.loads(await ws.recv())
            if "text" in doc:
                finals.append(doc)
        await ws.send('{"eof" : 1}')
        finals.append(json.loads(await ws.recv()))
    return finals


class Trained(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.model = asr_models.trained_dir()
        cls.tests = asr_models.test_set(cls.model)
        cls.repo = tempfile.mkdtemp(prefix="hark-digits-")
        asr_models.make_model_folder(cls.repo, "digits", cls.model, asr_models.config(
            "digits", params={"family": "ctc"}))
        cls.server = Harkd(repo=cls.repo, grpc=True, args=("--stream-backlog-limit", "100000"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, True)

    def test_vosk_wer_and_word_times(self):
        url = f"ws://127.0.0.1:{self.server.http_port}/v2/models/digits/stream"

        async def go():
            sem = asyncio.Semaphore(16)

            async def one(path):
                async with sem:
                    return await vosk(url, read_pcm(path)[0])
            return await asyncio.gather(*(one(p) for p, _ in self.tests))
        errors = words = 0
        for (path, ref), finals in zip(self.tests, asyncio.run(go())):
            hyp = " ".join(f["text"] for f in finals if f["text"]).split()
            errors += asr_models.wer(ref, hyp)
            words += len(ref)
            start, end = speech_span(read_pcm(path)[0])
            for f in finals:
                for w in f.get("result", []):
                    self.assertGreaterEqual(w["start"], start - 0.25, (path, w, start, end))
                    self.assertLessEqual(w["end"], end + 0.35, (path, w, start, end))
                    self.assertLess(w["start"], w["end"], (path, w))
        print(f"\nVosk: WER {errors}/{words} = {100 * errors / words:.2f}%", file=sys.stderr)
        self.assertLessEqual(errors / words, MAX_WER, f"WER {errors}/{words}")

    def test_riva_wer(self):
        import test_riva
        channel = test_riva.grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}")
        stub = test_riva.rasr_grpc.RivaSpeechRecognitionStub(channel)
        errors = words = 0
        try:
            for i, (path, ref) in enumerate(self.tests):
                pcm, _ = read_pcm(path)
                if i % 2:  # half streamed, half offline
                    responses, _ = test_riva.stream(stub, pcm, chunk=3200, model="digits")
                    hyp = test_riva.text(responses).split()
                else:
                    with open(path, "rb") as f:
                        data = f.read()
                    rc = test_riva.rasr.RecognitionConfig(language_code="en-US", model="digits")
                    resp = stub.Recognize(test_riva.rasr.RecognizeRequest(config=rc, audio=data),
                                          timeout=60)
                    hyp = " ".join(r.alternatives[0].transcript for r in resp.results).split()
                errors += asr_models.wer(ref, hyp)
                words += len(ref)
        finally:
            channel.close()
        print(f"\nRiva: WER {errors}/{words} = {100 * errors / words:.2f}%", file=sys.stderr)
        self.assertLessEqual(errors / words, MAX_WER, f"WER {errors}/{words}")


def quiet(seconds, seed):
    """Room noise a VAD calls silence (sigma 30 of 32768)."""
    rnd = random.Random(seed)
    n = int(16000 * seconds)
    return struct.pack("<%dh" % n, *(int(rnd.gauss(0, 30)) for _ in range(n)))


class Gated(unittest.TestCase):
    """digits_vad: the trained model with utterances opened and closed by
    silero_vad (the speech front end runs it across streams and sends
    VAD_PROB); digits beside it, ungated, on the same audio."""

    LEAD, TAIL = 2.0, 1.5  # s of silence around each utterance

    @classmethod
    def setUpClass(cls):
        cls.model = asr_models.trained_dir()
        cls.tests = asr_models.test_set(cls.model)
        cls.repo = tempfile.mkdtemp(prefix="hark-digits-vad-")
        asr_models.make_model_folder(cls.repo, "digits", cls.model, asr_models.config(
            "digits", params={"family": "ctc"}))
        asr_models.make_model_folder(cls.repo, "digits_vad", cls.model, asr_models.config(
            "digits_vad", params={"family": "ctc"}, vad_model="silero_vad"))
        os.symlink(os.path.join(SHIPPED_MODELS, "silero_vad"),
                   os.path.join(cls.repo, "silero_vad"))
        cls.server = Harkd(repo=cls.repo, grpc=True, wait_ready=False,
                           args=("--stream-backlog-limit", "100000"))
        cls.server.wait_live(240)
        cls.server.wait_ready(240)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, True)

    def chunks(self, model):
        return metric_value(self.server.metrics(), "hark_asr_encoder_chunks_total", model=model)

    def run_all(self, model, pcms):
        url = f"ws://127.0.0.1:{self.server.http_port}/v2/models/{model}/stream"

        async def go():
            sem = asyncio.Semaphore(16)

            async def one(pcm):
                async with sem:
                    return await vosk(url, pcm)
            return await asyncio.gather(*(one(p) for p in pcms))
        return asyncio.run(go())

    def test_gated_wer_times_and_work(self):
        pcms, spans = [], []
        for i, (path, _) in enumerate(self.tests):
            pcm = read_pcm(path)[0]
            start, end = speech_span(pcm)
            pcms.append(quiet(self.LEAD, i) + pcm + quiet(self.TAIL, 1000 + i))
            spans.append((start + self.LEAD, end + self.LEAD))
        c0 = {m: self.chunks(m) for m in ("digits", "digits_vad")}
        gated = self.run_all("digits_vad", pcms)
        c1 = {m: self.chunks(m) for m in ("digits", "digits_vad")}
        plain = self.run_all("digits", pcms)
        c2 = {m: self.chunks(m) for m in ("digits", "digits_vad")}
        errors = words = perrors = 0
        for (path, ref), finals, (start, end), pf in zip(self.tests, gated, spans, plain):
            hyp = " ".join(f["text"] for f in finals if f["text"]).split()
            phyp = " ".join(f["text"] for f in pf if f["text"]).split()
            errors += asr_models.wer(ref, hyp)
            perrors += asr_models.wer(ref, phyp)
            words += len(ref)
            for f in finals:
                for w in f.get("result", []):  # stream times: after the leading silence
                    self.assertGreaterEqual(w["start"], start - 0.25, (path, w, start, end))
                    self.assertLessEqual(w["end"], end + 0.35, (path, w, start, end))
        gated_chunks = c1["digits_vad"] - c0["digits_vad"]
        plain_chunks = c2["digits"] - c1["digits"]
        print(f"\ngated: WER {errors}/{words} = {100 * errors / words:.2f}%, encoder chunks "
              f"{gated_chunks:.0f} gated against {plain_chunks:.0f}; ungated WER {perrors}/{words}", file=sys.stderr)
        self.assertLessEqual(errors / words, MAX_WER, f"WER {errors}/{words}")
        # segments start on the stream's chunk boundaries: the gate costs no accuracy
        self.assertLessEqual(errors, perrors + 3, (errors, perrors))
        # 3.5 s of each file's silence never reached the encoder
        self.assertLess(gated_chunks, 0.8 * plain_chunks, (gated_chunks, plain_chunks))

    def test_silence_costs_no_encoder_call(self):
        before = self.chunks("digits_vad")
        (finals,) = self.run_all("digits_vad", [quiet(6.0, 99)])
        self.assertEqual([f["text"] for f in finals if f["text"]], [])
        self.assertEqual(self.chunks("digits_vad"), before)


if __name__ == "__main__":
    main()
