"""What real Vosk clients (test_alternatives.py, test_words.py, the browser
and Node samples) and Riva clients rely on, against the real harkd over real
sockets: the n-best with alternative 0 equal to the plain final and every
alternative with its own words and confidence, 8 kHz for a Vosk stream that
names no rate, a WebSocket on any path outside /v2, config values read as
Vosk's Python reads them, phrase_list restricting what is recognised, and
Riva partials with a stability and offline alternatives with their words."""
import asyncio
import audioop
import json
import os
import re
import shutil
import wave

import websockets

from harness import SHIPPED_MODELS, Harkd, ServerTest, main, make_repo
from test_speech import FILES, CHUNK, joined, pcm, reference, stream

RIVA = None  # test_riva, imported by the Riva class only (it generates stubs)


def asr_config(name="asr", **params):
    """models/asr's config, renamed, with extra parameters."""
    with open(os.path.join(SHIPPED_MODELS, "asr", "config.pbtxt")) as f:
        text = f.read().replace('name: "asr"', f'name: "{name}"')
    for k, v in params.items():
        text = re.sub(r'\{ key: "%s" value: \{ string_value: "[^"]*" \} \},?\n' % k, "", text)
        text = text.replace("parameters [",
                            f'parameters [\n  {{ key: "{k}" value: {{ string_value: "{v}" }} }},', 1)
    return text


async def finals_of(uri, audio, cfg=None, chunk=CHUNK):
    """Streams audio after {"config": cfg} (none when cfg is None); returns
    the finals, the eof's last."""
    out = []
    async with websockets.connect(uri, max_size=None) as ws:
        if cfg is not None:
            await ws.send(json.dumps({"config": cfg}))
        for off in range(0, len(audio), chunk):
            await ws.send(audio[off:off + chunk])
            reply = json.loads(await asyncio.wait_for(ws.recv(), 60))
            if "partial" not in reply:
                out.append(reply)
        await ws.send('{"eof" : 1}')
        out.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
        await asyncio.wait_for(ws.wait_closed(), 30)
        assert ws.close_code == 1000, (ws.close_code, ws.close_reason)
    return out


async def closed_with(uri, messages):
    """Sends messages; returns the close (code, reason) the server ends with."""
    async with websockets.connect(uri, max_size=None) as ws:
        try:
            for m in messages:
                await ws.send(m)
            while True:
                await asyncio.wait_for(ws.recv(), 60)
        except websockets.ConnectionClosed as e:
            return e.code, e.reason


def text_of(finals):
    return " ".join(f["text"] for f in finals if f.get("text"))


class VoskFidelity(ServerTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.base = f"ws://127.0.0.1:{cls.server.http_port}"
        cls.uri = cls.base + "/"

    def test_nbest_first_is_the_plain_final_and_every_alternative_has_its_words(self):
        seen_others = 0
        for path in FILES[:2]:  # 0870: "consider how much", whose n-best came shifted
            rate, audio = pcm(path)
            plain = asyncio.run(finals_of(self.uri, audio, {"sample_rate": rate}))
            nbest = asyncio.run(finals_of(self.uri, audio,
                                          {"sample_rate": rate, "max_alternatives": 5}))
            self.assertEqual(len(plain), len(nbest), path)
            for p, n in zip(plain, nbest):
                alts = n["alternatives"]
                self.assertTrue(1 <= len(alts) <= 5, n)
                self.assertEqual(alts[0]["text"], p["text"], path)
                self.assertEqual(alts[0].get("result", []), p.get("result", []), path)
                texts = [a["text"] for a in alts]
                self.assertEqual(len(texts), len(set(texts)), texts)
                for a in alts:
                    if a["text"]:
                        self.assertGreater(a["confidence"], 0.0, a)
                        self.assertEqual(" ".join(w["word"] for w in a["result"]), a["text"], a)
                    self.assertLessEqual(a["confidence"], 1.0, a)
                    for w in a.get("result", []):
                        self.assertTrue(0.0 <= w["conf"] <= 1.0, w)
                        self.assertLessEqual(w["start"], w["end"], w)
                seen_others += len(alts) - 1
        self.assertGreater(seen_others, 0)

    def test_max_alternatives_above_the_models_cap_is_refused(self):
        repo = make_repo({"asr": asr_config(max_alternatives=2)})
        try:
            server = Harkd(repo)
            try:
                uri = f"ws://127.0.0.1:{server.http_port}/"
                rate, audio = pcm(FILES[0])
                code, reason = asyncio.run(closed_with(uri, [
                    json.dumps({"config": {"sample_rate": rate, "max_alternatives": 3}}),
                    audio[:CHUNK]]))
                self.assertEqual(code, 1007, reason)
                self.assertIn("max_alternatives", reason)
                self.assertIn("2", reason)
                # at the cap: honoured
                got = asyncio.run(finals_of(uri, audio, {"sample_rate": rate,
                                                         "max_alternatives": 2}))
                self.assertTrue(all(1 <= len(f["alternatives"]) <= 2 for f in got))
            finally:
                server.stop()
        finally:
            shutil.rmtree(repo, ignore_errors=True)

    def test_a_stream_without_config_is_8khz_as_vosks_server_assumes(self):
        rate, audio = pcm(FILES[2])
        low, _ = audioop.ratecv(audio, 2, 1, rate, 8000, None)
        want = text_of(asyncio.run(finals_of(self.uri, low, {"sample_rate": 8000}, chunk=1600)))
        self.assertTrue(want)
        got = text_of(asyncio.run(finals_of(self.uri, low, None, chunk=1600)))
        self.assertEqual(got, want)
        # a WAV header names its own rate, and wins
        with open(FILES[2], "rb") as f:
            data = f.read()
        got = text_of(asyncio.run(finals_of(self.uri, data, None)))
        self.assertEqual(got, reference(FILES[2]))

    def test_speech_sample_rate_flag_still_sets_it(self):
        server = Harkd(args=["--speech-sample-rate", "16000"])
        try:
            rate, audio = pcm(FILES[3])
            got = text_of(asyncio.run(finals_of(f"ws://127.0.0.1:{server.http_port}/asr/en/",
                                                audio, None)))
            self.assertEqual(got, reference(FILES[3]))
        finally:
            server.stop()

    def test_any_path_outside_v2_serves_the_speech_model(self):
        rate, audio = pcm(FILES[1])
        want = reference(FILES[1])
        for path in ("/asr/en/", "/a/b/c?x=1"):
            got = asyncio.run(finals_of(self.base + path, audio, {"sample_rate": rate}))
            self.assertEqual(text_of(got), want, path)

        async def refused(path):
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                async with websockets.connect(self.base + path):
                    pass
            return cm.exception.status_code
        self.assertEqual(asyncio.run(refused("/v2/nothing/here")), 404)
        self.assertEqual(asyncio.run(refused("/v2")), 404)

    def test_config_values_read_as_vosk_reads_them(self):
        rate, audio = pcm(FILES[4])
        want = reference(FILES[4])
        # strings holding numbers, and "true" (Python's bool() of a string)
        got = asyncio.run(finals_of(self.uri, audio, {"sample_rate": "16000", "words": "true",
                                                      "max_alternatives": "2"}))
        self.assertEqual(" ".join(f["alternatives"][0]["text"] for f in got
                                  if f["alternatives"][0]["text"]), want)
        self.assertTrue(any(f["alternatives"][0].get("result") for f in got))
        # words: 0 is false; " 16000 " as float() reads it
        got = asyncio.run(finals_of(self.uri, audio, {"sample_rate": " 16000 ", "words": 0}))
        self.assertEqual(text_of(got), want)
        self.assertFalse(any("result" in f for f in got))
        # a fractional rate, as float() gives it
        hi, _ = audioop.ratecv(audio, 2, 1, rate, 44100, None)
        got = asyncio.run(finals_of(self.uri, hi, {"sample_rate": 44100.5}, chunk=8820))
        self.assertTrue(text_of(got))
        # what float() and int() refuse is refused, with the reason
        for cfg, part in (({"sample_rate": "fast"}, "sample_rate"),
                          ({"sample_rate": None}, "sample_rate"),
                          ({"sample_rate": [16000]}, "sample_rate"),
                          ({"max_alternatives": "2.5"}, "max_alternatives"),
                          ({"max_alternatives": None}, "max_alternatives")):
            code, reason = asyncio.run(closed_with(self.uri, [json.dumps({"config": cfg}),
                                                              audio[:CHUNK]]))
            self.assertEqual(code, 1007, cfg)
            self.assertIn(part, reason, cfg)

    def test_phrase_list_restricts_recognition_to_its_phrases(self):
        rate, audio = pcm(FILES[1])
        phrases = ["he was not", "young man", "Hello World", "[unk]"]
        vocabulary = {"he", "was", "not", "young", "man", "hello", "world"}
        got = asyncio.run(finals_of(self.uri, audio, {"sample_rate": rate,
                                                      "phrase_list": phrases}))
        said = text_of(got).split()
        self.assertTrue(said)
        self.assertLessEqual(set(said), vocabulary, said)
        for f in got:
            self.assertEqual([w["word"] for w in f.get("result", [])], f["text"].split())
        # the next stream, on the same decoders, has the whole vocabulary back
        got = asyncio.run(finals_of(self.uri, audio, {"sample_rate": rate}))
        self.assertEqual(text_of(got), reference(FILES[1]))
        # a word the model does not know is refused, by name
        for phrases, part in ((["hello zzqxv"], "zzqxv"), (["[unk]"], "no words")):
            code, reason = asyncio.run(closed_with(self.uri, [
                json.dumps({"config": {"sample_rate": rate, "phrase_list": phrases}}),
                audio[:CHUNK]]))
            self.assertEqual(code, 1007, reason)
            self.assertIn(part, reason)


class RivaFidelity(ServerTest):
    GRPC = True

    @classmethod
    def setUpClass(cls):
        global RIVA
        import test_riva
        RIVA = test_riva
        super().setUpClass()
        cls.channel = RIVA.grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        RIVA.grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = RIVA.rasr_grpc.RivaSpeechRecognitionStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        super().tearDownClass()

    def test_partials_carry_a_stability(self):
        rate, audio = pcm(FILES[1])
        responses, _ = RIVA.stream(self.stub, audio, rate=rate)
        partials = [r.results[0] for r in responses
                    if r.results and not r.results[0].is_final and
                    r.results[0].alternatives and r.results[0].alternatives[0].transcript]
        self.assertTrue(partials)
        for p in partials:
            self.assertTrue(0.0 <= p.stability <= 1.0, p)
        self.assertTrue(any(p.stability > 0.0 for p in partials), partials)
        for f in RIVA.finals(responses):
            self.assertEqual(f.stability, 0.0)

    def test_offline_alternatives_have_their_own_confidence_and_words(self):
        others = 0
        for path in FILES[:2]:
            with open(path, "rb") as f:
                data = f.read()
            rc = RIVA.rasr.RecognitionConfig(language_code="en-US", enable_word_time_offsets=True,
                                             max_alternatives=4)
            resp = self.stub.Recognize(RIVA.rasr.RecognizeRequest(config=rc, audio=data),
                                       timeout=120)
            for res in resp.results:
                for alt in res.alternatives:
                    self.assertGreater(alt.confidence, 0.0, alt)
                    self.assertEqual(" ".join(w.word for w in alt.words), alt.transcript)
                    for w in alt.words:
                        self.assertTrue(0.0 <= w.confidence <= 1.0, w)
                others += len(res.alternatives) - 1
        self.assertGreater(others, 0)


if __name__ == "__main__":
    main()
