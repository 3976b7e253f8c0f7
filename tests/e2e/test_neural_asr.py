"""Neural streaming recognition (backend neural_asr) through the real harkd.

Exactness: a small streaming transducer with the icefall contract
(tools/asr_models: random weights, states on batch axes 0, 1 and 2, a
history masked by processed_lens) is served by harkd; the five LibriVox
recordings, streamed by 64 interleaved Vosk WebSocket streams in uneven
chunk sizes, must give token for token the text and word times of the
plain PyTorch reference (tools/asr_models/reference.py), which decodes
each file alone with torchaudio's fbank. That shows the C filter bank, the
batching of streams at different positions into one encoder call (states
gathered and scattered along discovered axes) and the batched search are
exact. A frame whose top two logits the reference finds within 1e-4 may
round either way when batched: files with such frames are compared only up
to the first of them. The same for a CTC model.

Beam search: a beam of one equals greedy search; wider beams give the
n-best. Serving on every endpoint and bad input: test_neural_serving.py.
"""
import asyncio
import json
import os
import random
import shutil
import tempfile
import unittest
import wave

import websockets

import asr_models
from harness import Harkd, main, metric_value

FILES = asr_models.LIBRIVOX


def read_pcm(path):
    with wave.open(path) as w:
        assert w.getframerate() == 16000 and w.getsampwidth() == 2 and w.getnchannels() == 1
        return w.readframes(w.getnframes())


def run(coro, timeout=300):
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def stream(url, pcm, sizes, words=True):
    """One Vosk stream: config, the audio in chunks of the given sizes
    (bytes, cycled), eof; returns (finals, partials)."""
    finals, partials = [], []
    async with websockets.connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"config": {"sample_rate": 16000, "words": words}}))
        pos, i = 0, 0
        while pos < len(pcm):
            n = sizes[i % len(sizes)]
            i += 1
            await ws.send(pcm[pos:pos + n])
            pos += n
            doc = json.loads(await ws.recv())
            (finals if "text" in doc else partials).append(doc)
        await ws.send('{"eof" : 1}')
        while True:
            try:
                doc = json.loads(await ws.recv())
            except websockets.ConnectionClosed as e:
                if e.code != 1000:
                    raise
                break
            (finals if "text" in doc else partials).append(doc)
    return finals, partials


def words_of(finals):
    out = []
    for f in finals:
        out.extend(f.get("result", []))
    return out


class NeuralTest(unittest.TestCase):
    FAMILY = "transducer"
    STREAMS = 64
    INSTANCES = 1  # round threads
    MAX_BATCH = 64

    @classmethod
    def setUpClass(cls):
        cls.model = asr_models.model_dir(cls.FAMILY, "tiny", 1)
        cls.ref = {r["file"]: r for r in asr_models.reference(cls.model, cls.FAMILY, FILES)}
        cls.repo = tempfile.mkdtemp(prefix="hark-nasr-")
        # Endpointing off: the reference knows nothing of utterances.
        off = {"rule1_min_trailing_silence": "0", "rule2_min_trailing_silence": "0",
               "rule3_min_utterance_length": "0"}
        asr_models.make_model_folder(cls.repo, "nasr", cls.model, asr_models.config(
            "nasr", max_batch=cls.MAX_BATCH, instances=cls.INSTANCES, params=off))
        cls.server = Harkd(repo=cls.repo, args=("--stream-backlog-limit", "100000"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, True)

    def url(self):
        return f"ws://127.0.0.1:{self.server.http_port}/v2/models/nasr/stream"

    def check_against_reference(self, path, finals):
        ref = self.ref[os.path.abspath(path)] if os.path.abspath(path) in self.ref else self.ref[path]
        got = words_of(finals)
        ties = ref.get("near_tie_frames") or []
        want = ref["words"]
        if ties:  # compare only the words that end before the first near tie
            limit = min(ties) * ref["frame_shift"]
            want = [w for w in want if w["end"] <= limit]
            got = got[:len(want)]
        self.assertEqual([w["word"] for w in got], [w["word"] for w in want], path)
        for g, w in zip(got, want):
            self.assertAlmostEqual(g["start"], w["start"], delta=1e-3, msg=path)
            self.assertAlmostEqual(g["end"], w["end"], delta=1e-3, msg=path)
        if not ties:
            self.assertEqual(" ".join(f["text"] for f in finals if f["text"]), ref["text"], path)
        return bool(ties)

    def test_interleaved_streams_equal_the_reference(self):
        rng = random.Random(7)
        pcms = {f: read_pcm(f) for f in FILES}
        jobs = []
        for i in range(self.STREAMS):
            f = FILES[i % len(FILES)]
            # uneven chunks, whole samples: 10 ms .. 700 ms
            sizes = [2 * rng.randint(160, 11200) for _ in range(7)]
            jobs.append((f, sizes))

        async def go():
            return await asyncio.gather(*(stream(self.url(), pcms[f], s) for f, s in jobs))
        results = run(go())
        tied = 0
        for (f, _), (finals, partials) in zip(jobs, results):
            tied += self.check_against_reference(f, finals)
            self.assertTrue(all(p["partial"] is not None for p in partials))
        self.assertLess(tied, len(jobs), "every file has a near tie: the model is no test")
        # Streams shared encoder calls: far fewer calls than chunks.
        text = self.server.metrics()
        calls = metric_value(text, "hark_asr_encoder_calls_total", model="nasr")
        chunks = metric_value(text, "hark_asr_encoder_chunks_total", model="nasr")
        self.assertGreater(chunks / calls, 2.0, (calls, chunks))
        self.assertEqual(metric_value(text, "hark_asr_streams", model="nasr"), 0)

    def test_same_text_every_run(self):
        async def go():
            a = await stream(self.url(), read_pcm(FILES[0]), [3200])
            b = await stream(self.url(), read_pcm(FILES[0]), [1000, 6400, 320])
            return a, b
        (fa, _), (fb, _) = run(go())
        self.assertEqual([f["text"] for f in fa if f["text"]], [f["text"] for f in fb if f["text"]])


class CtcTest(NeuralTest):
    FAMILY = "ctc"
    STREAMS = 10


class ConcurrentRoundsTest(NeuralTest):
    """Two round threads and rounds of at most 8 chunks: the 64 streams'
    rounds run two at a time through the same layers (each XNNPACK layer
    holds one call's sizes and pointers between its setup and its run; a
    lock of its own keeps a second thread out), and stay exact."""
    INSTANCES = 2
    MAX_BATCH = 8


class BeamTest(unittest.TestCase):
    """Modified beam search (transducer) and prefix beam search (CTC),
    batched across streams: a beam of one is the greedy search (so the
    reference's words), a wider beam gives distinct n-best alternatives,
    the first of them the final's own text."""

    @classmethod
    def setUpClass(cls):
        cls.model = asr_models.model_dir("transducer", "tiny", 1)
        cls.ctc = asr_models.model_dir("ctc", "tiny", 1)
        cls.ref = {r["file"]: r for r in asr_models.reference(cls.model, "transducer", FILES)}
        cls.repo = tempfile.mkdtemp(prefix="hark-nasr-beam-")
        off = {"rule1_min_trailing_silence": "0", "rule2_min_trailing_silence": "0",
               "rule3_min_utterance_length": "0"}
        beam = dict(off, decoding_method="modified_beam_search")
        asr_models.make_model_folder(cls.repo, "beam1", cls.model, asr_models.config(
            "beam1", params=dict(beam, num_active_paths="1")))
        asr_models.make_model_folder(cls.repo, "beam4", cls.model, asr_models.config(
            "beam4", params=dict(beam, num_active_paths="4")))
        asr_models.make_model_folder(cls.repo, "ctc4", cls.ctc, asr_models.config(
            "ctc4", params=dict(off, decoding_method="prefix_beam_search",
                                num_active_paths="4")))
        cls.server = Harkd(repo=cls.repo)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, True)

    def url(self, model):
        return f"ws://127.0.0.1:{self.server.http_port}/v2/models/{model}/stream"

    def test_a_beam_of_one_is_greedy(self):
        async def go():
            return await asyncio.gather(*(stream(self.url("beam1"), read_pcm(f), [4800, 2240])
                                          for f in FILES))
        for f, (finals, _) in zip(FILES, run(go())):
            ref = self.ref[f]
            got = [w["word"] for w in words_of(finals)]
            want = [w["word"] for w in ref["words"]]
            if ref.get("near_tie_frames"):
                continue
            self.assertEqual(got, want, f)

    def nbest(self, model, path, alternatives=3):
        async def go():
            async with websockets.connect(self.url(model), max_size=None) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": 16000, "words": True,
                                                     "max_alternatives": alternatives}}))
                pcm = read_pcm(path)
                for i in range(0, len(pcm), 6400):
                    await ws.send(pcm[i:i + 6400])
                    await ws.recv()
                await ws.send('{"eof" : 1}')
                return json.loads(await ws.recv())
        return run(go())

    def test_nbest_alternatives(self):
        for model in ("beam4", "ctc4"):
            doc = self.nbest(model, FILES[2])
            alts = doc["alternatives"]
            self.assertEqual(len(alts), 3, (model, doc))
            texts = [a["text"] for a in alts]
            self.assertEqual(len(set(texts)), 3, (model, texts))
            self.assertTrue(all(t for t in texts), (model, texts))
            confs = [a["confidence"] for a in alts]
            self.assertEqual(confs, sorted(confs, reverse=True), (model, confs))
            self.assertTrue(all(0 < c <= 1 for c in confs), (model, confs))
            # each alternative has its own words, which make its text; the
            # first is the final itself (its words those of a plain final)
            for a in alts:
                self.assertEqual(" ".join(w["word"] for w in a["result"]), a["text"], (model, a))
                self.assertTrue(all(w["start"] < w["end"] for w in a["result"]), (model, a))
            plain = self.nbest(model, FILES[2], alternatives=0)
            self.assertEqual(alts[0]["text"], plain["text"], model)
            self.assertEqual(alts[0]["result"], plain["result"], model)
            # deterministic
            self.assertEqual(self.nbest(model, FILES[2]), doc)

    def refused(self, model, config):
        async def go():
            async with websockets.connect(self.url(model), max_size=None) as ws:
                await ws.send(json.dumps({"config": dict({"sample_rate": 16000}, **config)}))
                await ws.send(read_pcm(FILES[0])[:6400])
                try:
                    while True:
                        await ws.recv()
                except websockets.ConnectionClosed as e:
                    return e.code, e.reason
        return run(go())

    def test_what_the_search_cannot_give_is_refused(self):
        code, reason = self.refused("beam4", {"max_alternatives": 5})
        self.assertNotEqual(code, 1000)
        self.assertIn("max_alternatives 5 is more than this model gives (4", reason)
        code, reason = self.refused("beam1", {"max_alternatives": 2})
        self.assertIn("max_alternatives 2 is more than this model gives (1", reason)
        code, reason = self.refused("beam4", {"phrase_list": ["one two", "three"]})
        self.assertNotEqual(code, 1000)
        self.assertIn("phrase_list", reason)


if __name__ == "__main__":
    main()
