"""Streaming speech end to end: the five LibriVox recordings of Debian's
pocketsphinx-testdata through the real harkd, over Vosk's WebSocket protocol
(python3-websockets as the client) and over KServe v2 HTTP, against what the
library itself gives for the same files (pocketsphinx_continuous)."""
import asyncio
import audioop
import glob
import json
import os
import struct
import subprocess
import wave

import websockets

from harness import ServerTest, main, metric_value

LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"
FILES = sorted(glob.glob(os.path.join(LIBRIVOX, "*.wav")))
CHUNK = 3200  # bytes: 100 ms of 16 kHz 16-bit mono


def reference(path):
    """The library's own transcript of a file, as its continuous tool prints it."""
    out = subprocess.run(["pocketsphinx_continuous", "-infile", path], capture_output=True,
                         text=True, check=True).stdout
    return " ".join(line.strip() for line in out.splitlines() if line.strip())


def pcm(path):
    with wave.open(path) as w:
        return w.getframerate(), w.readframes(w.getnframes())


def words(text):
    return text.split()


def wer(ref, hyp):
    r, h = words(ref), words(hyp)
    d = list(range(len(h) + 1))
    for i in range(1, len(r) + 1):
        prev, d[0] = d[0], i
        for j in range(1, len(h) + 1):
            cur = min(d[j] + 1, d[j - 1] + 1, prev + (r[i - 1] != h[j - 1]))
            prev, d[j] = d[j], cur
    return d[len(h)] / max(1, len(r))


async def stream(uri, audio, rate=16000, chunk=CHUNK, config=True, words_on=True, profile=None):
    """Streams audio; returns (finals, replies). Checks one reply per message."""
    finals, replies = [], []
    async with websockets.connect(uri, max_size=None) as ws:
        if config:
            cfg = {"sample_rate": rate, "words": words_on}
            if profile:
                cfg["profile"] = profile
            await ws.send(json.dumps({"config": cfg}))
        for off in range(0, len(audio), chunk):
            await ws.send(audio[off:off + chunk])
            reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
            replies.append(reply)
            if "text" in reply:
                finals.append(reply)
            else:
                assert "partial" in reply, reply
        await ws.send('{"eof" : 1}')
        reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
        assert "text" in reply, reply
        finals.append(reply)
        await asyncio.wait_for(ws.wait_closed(), 30)
        assert ws.close_code == 1000, (ws.close_code, ws.close_reason)
    return finals, replies


def joined(finals):
    return " ".join(f["text"] for f in finals if f["text"])


class SpeechTest(ServerTest):
    """One harkd on the test repository; the library's transcripts."""
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.refs = {f: reference(f) for f in FILES}
        cls.uri = f"ws://127.0.0.1:{cls.server.http_port}/"

    def run_async(self, coro):
        return asyncio.run(coro)

    def offline(self, data, parameters=None):
        """POSTs a recording to asr over KServe (binary extension); returns
        the outputs by name, after checking the status is 200."""
        doc = {"inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1],
                           "parameters": {"binary_data_size": len(data) + 4}}]}
        if parameters:
            doc["parameters"] = parameters
        header = json.dumps(doc).encode()
        status, _, raw = self.server.request(
            "POST", "/v2/models/asr/infer", header + struct.pack("<I", len(data)) + data,
            {"Inference-Header-Content-Length": str(len(header))})
        self.assertEqual(status, 200, raw[:300])
        return {o["name"]: o for o in json.loads(raw)["outputs"]}


class Speech(SpeechTest):
    def test_each_recording_matches_the_library(self):
        truth = {}
        with open(os.path.join(LIBRIVOX, "transcription")) as f:
            for line in f:
                text, _, fid = line.rpartition("(")
                truth[fid.strip(" )\n")] = text.replace("<s>", "").replace("</s>", "").strip()
        hark_wer, lib_wer = [], []
        for path in FILES:
            rate, audio = pcm(path)
            finals, replies = self.run_async(stream(self.uri, audio, rate))
            self.assertEqual(len(replies), (len(audio) + CHUNK - 1) // CHUNK)
            self.assertEqual(joined(finals), self.refs[path], path)
            fid = os.path.basename(path)[:-4]
            hark_wer.append(wer(truth[fid], joined(finals)))
            lib_wer.append(wer(truth[fid], self.refs[path]))
            duration = len(audio) / 2 / rate
            last_end = 0.0
            for final in finals:
                for w in final.get("result", []):
                    self.assertLessEqual(last_end - 0.011, w["start"], w)
                    self.assertLessEqual(w["start"], w["end"], w)
                    self.assertLessEqual(w["end"], duration + 0.05, w)
                    self.assertTrue(0.0 <= w["conf"] <= 1.0, w)
                    last_end = w["end"]
        print(f"\nWER vs reference: hark {sum(hark_wer) / len(hark_wer):.3f}, "
              f"library {sum(lib_wer) / len(lib_wer):.3f}")

    def test_concurrent_streams_match_streams_alone(self):
        # more streams than instances, each as fast as replies come
        async def all_at_once():
            return await asyncio.gather(*(stream(self.uri, pcm(p)[1]) for p in FILES))
        results = self.run_async(all_at_once())
        for path, (finals, _) in zip(FILES, results):
            self.assertEqual(joined(finals), self.refs[path], path)

    def test_wav_header_in_the_stream_is_skipped(self):
        with open(FILES[1], "rb") as f:
            data = f.read()
        finals, _ = self.run_async(stream(self.uri, data, config=False))
        self.assertEqual(joined(finals), self.refs[FILES[1]])

    def test_other_sample_rates_are_resampled(self):
        # en-us is a 16 kHz model: 44.1 kHz audio loses nothing it uses;
        # 8 kHz audio lacks the band above 4 kHz, so it is recognised, but
        # worse (an 8 kHz model would be the fix, not the resampler).
        rate, audio = pcm(FILES[1])
        for new_rate, bound in ((44100, 0.5), (48000, 0.5), (22050, 0.5), (8000, 0.9)):
            converted, _ = audioop.ratecv(audio, 2, 1, rate, new_rate, None)
            chunk = new_rate // 10 * 2
            finals, _ = self.run_async(stream(self.uri, converted, new_rate, chunk=chunk))
            got = wer(self.refs[FILES[1]], joined(finals))
            self.assertLess(got, bound, (new_rate, finals))
            last = finals[-1].get("result") or [w for f in finals for w in f.get("result", [])]
            self.assertTrue(last, new_rate)
            self.assertLess(last[-1]["end"], len(converted) / 2 / new_rate + 0.05, new_rate)

    def test_streaming_finals_carry_n_best(self):
        # max_alternatives comes with the config only, yet every final of
        # the stream carries the n-best (as offline recognition does); a
        # final with no audio keeps the shape clients index into.
        rate, audio = pcm(FILES[1])

        async def go():
            out = []
            async with websockets.connect(self.uri) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": rate,
                                                     "max_alternatives": 3}}))
                for off in range(0, len(audio), CHUNK):
                    await ws.send(audio[off:off + CHUNK])
                    doc = json.loads(await ws.recv())
                    if "partial" not in doc:
                        out.append(doc)
                await ws.send('{"eof": 1}')
                out.append(json.loads(await ws.recv()))
            async with websockets.connect(self.uri) as ws:
                await ws.send(json.dumps({"config": {"max_alternatives": 2}}))
                await ws.send('{"eof": 1}')
                empty = json.loads(await ws.recv())
            return out, empty
        finals, empty = self.run_async(go())
        texts = " ".join(f["alternatives"][0]["text"] for f in finals
                         if f["alternatives"][0]["text"])
        self.assertEqual(texts, self.refs[FILES[1]])
        self.assertTrue(any(len(f["alternatives"]) > 1 for f in finals), finals)
        for f in finals:
            self.assertLessEqual(len(f["alternatives"]), 3)
            texts = [a["text"] for a in f["alternatives"]]
            self.assertEqual(len(texts), len(set(texts)), texts)
        self.assertEqual(empty, {"alternatives": [{"confidence": 1.0, "text": ""}]})

    def test_words_off_and_reset(self):
        rate, audio = pcm(FILES[1])

        async def go():
            async with websockets.connect(self.uri) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": rate, "words": False}}))
                half = len(audio) // 2 // CHUNK * CHUNK
                for off in range(0, half, CHUNK):
                    await ws.send(audio[off:off + CHUNK])
                    await ws.recv()
                await ws.send('{"reset":1}')
                first = json.loads(await ws.recv())
                for off in range(half, len(audio), CHUNK):
                    await ws.send(audio[off:off + CHUNK])
                    await ws.recv()
                await ws.send('{"eof": 1}')
                last = json.loads(await ws.recv())
                await ws.wait_closed()
                return first, last
        first, last = self.run_async(go())
        self.assertIn("text", first)
        self.assertNotIn("result", first)
        self.assertIn("text", last)
        self.assertTrue(first["text"], first)

    def test_offline_recognition_over_kserve(self):
        path = FILES[4]
        with open(path, "rb") as f:
            data = f.read()
        outputs = self.offline(data)
        self.assertEqual(outputs["TRANSCRIPT"]["data"][0], self.refs[path])
        self.assertEqual(outputs["IS_FINAL"]["data"][0], True)
        self.assertEqual(outputs["WORDS"]["data"], self.refs[path].split())
        starts, ends = outputs["WORD_START"]["data"], outputs["WORD_END"]["data"]
        self.assertEqual(starts, sorted(starts))
        self.assertTrue(all(s < e for s, e in zip(starts, ends)), (starts, ends))
        self.assertTrue(all(0 <= c <= 1 for c in outputs["WORD_CONF"]["data"]))
        self.assertTrue(0 < outputs["CONFIDENCE"]["data"][0] <= 1)
        duration = (len(data) - 44) / 2 / 16000
        self.assertAlmostEqual(outputs["AUDIO_PROCESSED"]["data"][0], duration, delta=0.01)

    def test_bad_input_closes_with_a_reason(self):
        async def expect_close(messages, codes):
            async with websockets.connect(self.uri) as ws:
                for m in messages:
                    await ws.send(m)
                try:
                    while True:
                        await asyncio.wait_for(ws.recv(), 10)
                except websockets.ConnectionClosed:
                    pass
                self.assertIn(ws.close_code, codes, (messages[:1], ws.close_reason))
                self.assertTrue(ws.close_reason, messages[:1])
                return ws.close_reason

        async def go():
            # a healthy stream runs alongside the bad ones, undisturbed
            healthy = asyncio.ensure_future(stream(self.uri, pcm(FILES[1])[1]))
            await expect_close(["not json"], (1003, 1007, 1008))
            await expect_close([b"\x01\x02\x03"], (1003, 1007, 1008))
            await expect_close(['{"config": {"sample_rate": "fast"}}'], (1003, 1007, 1008))
            await expect_close(['{"config": {"sample_rate": 4000}}'], (1003, 1007, 1008))
            finals, _ = await healthy
            self.assertEqual(joined(finals), self.refs[FILES[1]])
        self.run_async(go())

    def test_vanished_clients_return_their_decoders(self):
        rate, audio = pcm(FILES[0])

        async def vanish():
            ws = await websockets.connect(self.uri)
            await ws.send(json.dumps({"config": {"sample_rate": rate}}))
            for off in range(0, 30 * CHUNK, CHUNK):  # 3 s: well inside speech
                await ws.send(audio[off:off + CHUNK])
                await ws.recv()
            ws.transport.abort()  # no close frame: the client just vanishes

        async def go():
            await asyncio.gather(*(vanish() for _ in range(4)))
        self.run_async(go())
        for _ in range(100):
            text = self.server.metrics()
            used = metric_value(text, "hark_decoders_in_use", model="asr")
            streams = metric_value(text, "hark_asr_streams", model="asr")
            if used == 0 and streams == 0:
                break
            asyncio.run(asyncio.sleep(0.1))
        self.assertEqual((used, streams), (0, 0))
        self.assertGreaterEqual(metric_value(text, "hark_decoders_created", model="asr"), 4)
        self.assertLessEqual(metric_value(text, "hark_decoders_created", model="asr"),
                             metric_value(text, "hark_decoders_max", model="asr"))
        finals, _ = self.run_async(stream(self.uri, pcm(FILES[1])[1]))
        self.assertEqual(joined(finals), self.refs[FILES[1]])


if __name__ == "__main__":
    main()
