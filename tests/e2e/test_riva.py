"""Riva's speech recognition service (nvidia.riva.asr.RivaSpeechRecognition)
against the real harkd: the five LibriVox recordings of Debian's
pocketsphinx-testdata through StreamingRecognize and Recognize give what the
library itself gives, and what the WebSocket path gives; bad input ends the
call with a gRPC status; cancelled streams give their decoders back.

The client is Debian's python3-grpcio with stubs generated at test time from
hark's proto/riva_*.proto by grpc_tools.protoc: nothing of hark's C code is on
the client side.
"""
import asyncio
import audioop
import json
import os
import queue
import sys
import threading
import time
import unittest

import grpc

import harness
from test_speech import FILES, CHUNK, joined, pcm, reference, stream as ws_stream, wer

harness.grpc_stubs("riva_asr", "riva_audio", "riva_common")
import riva_asr_pb2 as rasr  # noqa: E402
import riva_asr_pb2_grpc as rasr_grpc  # noqa: E402
import riva_audio_pb2 as raudio  # noqa: E402
import riva_common_pb2 as rcommon  # noqa: E402

METHOD = "/nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize"


def config(rate=16000, interim=True, words=True, encoding=raudio.LINEAR_PCM,
           language_code="en-US", **kw):
    rc = rasr.RecognitionConfig(encoding=encoding, sample_rate_hertz=rate,
                                language_code=language_code, enable_word_time_offsets=words,
                                **kw)
    return rasr.StreamingRecognitionConfig(config=rc, interim_results=interim)


def stream(stub, audio, chunk=CHUNK, lockstep=True, timeout=120, **kw):
    """Streams audio after a streaming_config; returns every response. In
    lockstep each chunk waits for a response to the one before."""
    got = queue.Queue()
    sent = []

    def requests():
        yield rasr.StreamingRecognizeRequest(streaming_config=config(**kw),
                                             id=rcommon.RequestId(value="req-7"))
        for off in range(0, len(audio), chunk):
            sent.append(off)
            yield rasr.StreamingRecognizeRequest(audio_content=audio[off:off + chunk])
            if lockstep:
                got.get(timeout=60)

    responses = []
    for r in stub.StreamingRecognize(requests(), timeout=timeout):
        responses.append(r)
        got.put(1)
    return responses, len(sent)


def finals(responses):
    return [r.results[0] for r in responses if r.results and r.results[0].is_final]


def text(responses):
    return " ".join(f.alternatives[0].transcript for f in finals(responses)
                    if f.alternatives[0].transcript)


class Riva(harness.ServerTest):
    GRPC = True
    ARGS = ("--grpc-max-message-bytes", "4194304")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.refs = {f: reference(f) for f in FILES}
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = rasr_grpc.RivaSpeechRecognitionStub(cls.channel)
        cls.ws_uri = f"ws://127.0.0.1:{cls.server.http_port}/"

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        super().tearDownClass()

    def expect_code(self, code, requests, timeout=30):
        with self.assertRaises(grpc.RpcError) as ctx:
            for _ in self.stub.StreamingRecognize(iter(requests), timeout=timeout):
                pass
        self.assertEqual(ctx.exception.code(), code, ctx.exception.details())
        return ctx.exception.details()

    def wait_pool_idle(self):
        for _ in range(200):
            text_ = self.server.metrics()
            used = harness.metric_value(text_, "hark_decoders_in_use", model="asr")
            streams = harness.metric_value(text_, "hark_asr_streams", model="asr")
            if used == 0 and streams == 0:
                return
            time.sleep(0.1)
        self.fail(f"decoders in use {used}, streams {streams}")

    # ---- recognition ----------------------------------------------------------

    def test_each_recording_matches_the_library_and_the_websocket_path(self):
        truth = {}
        with open(os.path.join(os.path.dirname(FILES[0]), "transcription")) as f:
            for line in f:
                if "(" in line:
                    words, name = line.rsplit("(", 1)
                    truth[name.strip(") \n")] = words.strip().lower()
        for path in FILES:
            rate, audio = pcm(path)
            responses, n_audio = stream(self.stub, audio, rate=rate)
            # One response per audio message, plus the last utterance's final
            # answering the half-close.
            self.assertIn(len(responses) - n_audio, (0, 1), path)
            got = text(responses)
            self.assertEqual(got, self.refs[path], path)
            self.assertTrue(all(r.id.value == "req-7" for r in responses))
            ws_finals, _ = asyncio.run(ws_stream(self.ws_uri, audio, rate))
            self.assertEqual(got, joined(ws_finals), path)
            name = os.path.splitext(os.path.basename(path))[0]
            if name in truth:
                print(f"{name}: WER {wer(truth[name], got):.3f}", file=sys.stderr)

    def test_finals_carry_words_confidences_and_audio_processed(self):
        rate, audio = pcm(FILES[1])
        responses, _ = stream(self.stub, audio, rate=rate, max_alternatives=3)
        fs = finals(responses)
        self.assertTrue(fs)
        ws_finals, _ = asyncio.run(ws_stream(self.ws_uri, audio, rate))
        ws_words = [w for f in ws_finals for w in f.get("result", [])]
        words = [w for f in fs for w in f.alternatives[0].words]
        self.assertEqual([w.word for w in words], [w["word"] for w in ws_words])
        for w, ww in zip(words, ws_words):
            self.assertEqual(w.start_time, round(ww["start"] * 1000))
            self.assertEqual(w.end_time, round(ww["end"] * 1000))
            self.assertLessEqual(w.start_time, w.end_time)
            self.assertGreater(w.confidence, 0.0)
            self.assertLessEqual(w.confidence, 1.0)
        # the n-best of every final, though only the config asked for it
        self.assertTrue(any(len(f.alternatives) > 1 for f in fs), fs)
        for f in fs:
            self.assertTrue(1 <= len(f.alternatives) <= 3)
            self.assertGreater(f.alternatives[0].confidence, 0.0)
            self.assertEqual(f.channel_tag, 1)
            for alt in f.alternatives[1:]:  # each with its own words
                self.assertEqual(" ".join(w.word for w in alt.words), alt.transcript)
        duration = len(audio) / 2 / rate
        self.assertAlmostEqual(fs[-1].audio_processed, duration, delta=0.2)
        processed = [r.results[0].audio_processed for r in responses if r.results]
        self.assertEqual(processed, sorted(processed))
        partials = [r.results[0] for r in responses if r.results and not r.results[0].is_final]
        self.assertTrue(partials)
        self.assertTrue(all(not p.alternatives[0].words for p in partials))

    def test_without_interim_results_only_finals_come(self):
        rate, audio = pcm(FILES[2])
        responses, n_audio = stream(self.stub, audio, rate=rate, interim=False, words=False,
                                    lockstep=False)
        self.assertTrue(responses)
        self.assertLess(len(responses), n_audio)
        for r in responses:
            self.assertTrue(r.results[0].is_final)
            self.assertTrue(r.results[0].alternatives[0].transcript)
            self.assertFalse(r.results[0].alternatives[0].words)
        self.assertEqual(text(responses), self.refs[FILES[2]])

    def test_wav_header_is_read_when_the_encoding_is_unspecified(self):
        with open(FILES[1], "rb") as f:
            data = f.read()
        responses, _ = stream(self.stub, data, rate=0, encoding=raudio.ENCODING_UNSPECIFIED)
        self.assertEqual(text(responses), self.refs[FILES[1]])

    def test_other_rates_and_g711_match_the_websocket_path(self):
        rate, audio = pcm(FILES[1])
        high, _ = audioop.ratecv(audio, 2, 1, rate, 44100, None)
        ulaw, alaw = audioop.lin2ulaw(audio, 2), audioop.lin2alaw(audio, 2)
        cases = [  # (audio sent, rate, encoding, the same audio as 16-bit PCM)
            (high, 44100, raudio.LINEAR_PCM, high),
            # G.711 as hark expands it must equal Python's own expansion
            # (16 kHz G.711 keeps the resampler out of the comparison)
            (ulaw, rate, raudio.MULAW, audioop.ulaw2lin(ulaw, 2)),
            (alaw, rate, raudio.ALAW, audioop.alaw2lin(alaw, 2)),
        ]
        for data, r, enc, linear in cases:
            width = 1 if enc in (raudio.MULAW, raudio.ALAW) else 2
            responses, _ = stream(self.stub, data, chunk=r // 10 * width, rate=r, encoding=enc)
            ws_finals, _ = asyncio.run(ws_stream(self.ws_uri, linear, r, chunk=r // 10 * 2))
            self.assertTrue(text(responses), (r, enc))
            self.assertEqual(text(responses), joined(ws_finals), (r, enc))
        # 8 kHz telephone audio (G.711's own rate when none is given) is
        # recognised, with the loss an 8 kHz band costs a 16 kHz model.
        low, _ = audioop.ratecv(audio, 2, 1, rate, 8000, None)
        for data, r, enc in ((low, 8000, raudio.LINEAR_PCM),
                             (audioop.lin2alaw(low, 2), 0, raudio.ALAW)):
            width = 1 if enc == raudio.ALAW else 2
            responses, _ = stream(self.stub, data, chunk=800 * width, rate=r, encoding=enc)
            self.assertLess(wer(self.refs[FILES[1]], text(responses)), 0.9, (r, enc))
            last = finals(responses)[-1]
            self.assertAlmostEqual(last.audio_processed, len(low) / 2 / 8000, delta=0.2)

    def test_endpointing_config_sets_the_silence_that_ends_an_utterance(self):
        # two recordings with a second of silence between them
        audio = pcm(FILES[0])[1] + b"\0" * 32000 + pcm(FILES[1])[1]
        counts = {}
        for stop in (0, 3000, 200):
            ep = rasr.EndpointingConfig(stop_history=stop)
            responses, _ = stream(self.stub, audio, endpointing_config=ep)
            counts[stop] = len(finals(responses))
        self.assertEqual(counts[0], 2, counts)     # the model's 500 ms
        self.assertEqual(counts[3000], 1, counts)  # the pause is not the end
        self.assertGreater(counts[200], 2, counts)  # short pauses inside speech end it

    def test_concurrent_streams_match_streams_alone(self):
        results = {}

        def one(path):
            rate, audio = pcm(path)
            results[path] = text(stream(self.stub, audio, rate=rate)[0])
        threads = [threading.Thread(target=one, args=(p,)) for p in FILES[:3]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for p in FILES[:3]:
            self.assertEqual(results[p], self.refs[p], p)

    def test_recognize_a_whole_recording(self):
        with open(FILES[4], "rb") as f:
            data = f.read()
        rc = rasr.RecognitionConfig(language_code="en-US", enable_word_time_offsets=True,
                                    max_alternatives=2)
        resp = self.stub.Recognize(rasr.RecognizeRequest(config=rc, audio=data,
                                                         id=rcommon.RequestId(value="r1")),
                                   timeout=120)
        self.assertEqual(resp.id.value, "r1")
        self.assertEqual(len(resp.results), 1)
        best = resp.results[0].alternatives[0]
        self.assertEqual(best.transcript, self.refs[FILES[4]])
        self.assertEqual([w.word for w in best.words], best.transcript.split())
        rate, audio = pcm(FILES[4])
        self.assertAlmostEqual(resp.results[0].audio_processed, len(audio) / 2 / rate, delta=0.2)
        # raw PCM with its rate gives the same
        rc = rasr.RecognitionConfig(encoding=raudio.LINEAR_PCM, sample_rate_hertz=rate)
        resp = self.stub.Recognize(rasr.RecognizeRequest(config=rc, audio=audio), timeout=120)
        self.assertEqual(resp.results[0].alternatives[0].transcript, self.refs[FILES[4]])
        self.assertFalse(resp.results[0].alternatives[0].words)

    def test_profile_in_custom_configuration(self):
        # Riva's custom_configuration "profile" picks the latency profile:
        # the fast one's words equal the WebSocket's fast profile's.
        rate, audio = pcm(FILES[1])
        responses, _ = stream(self.stub, audio, rate=rate,
                              custom_configuration={"profile": "fast"})
        ws_finals, _ = asyncio.run(ws_stream(self.ws_uri, audio, rate, profile="fast"))
        self.assertTrue(text(responses))
        self.assertEqual(text(responses), joined(ws_finals))

    def test_speech_recognition_config(self):
        resp = self.stub.GetRivaSpeechRecognitionConfig(
            rasr.RivaSpeechRecognitionConfigRequest(), timeout=30)
        # A streaming model serves Recognize too: listed once per type, so
        # a client choosing a model by type finds it for either.
        by_type = {(m.model_name, m.parameters["type"]): dict(m.parameters)
                   for m in resp.model_config}
        self.assertEqual(by_type[("asr", "online")]["streaming"], "true")
        self.assertEqual(by_type[("asr", "offline")]["streaming"], "false")
        self.assertEqual(by_type[("asr", "online")]["language_code"], "en-US")
        self.assertNotIn("simple", {m.model_name for m in resp.model_config})
        self.assertEqual(len(resp.model_config), len(by_type))
        one = self.stub.GetRivaSpeechRecognitionConfig(
            rasr.RivaSpeechRecognitionConfigRequest(model_name="asr"), timeout=30)
        self.assertEqual(sorted((m.model_name, m.parameters["type"]) for m in one.model_config),
                         [("asr", "offline"), ("asr", "online")])
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.GetRivaSpeechRecognitionConfig(
                rasr.RivaSpeechRecognitionConfigRequest(model_name="simple"), timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.NOT_FOUND)

    # ---- bad input --------------------------------------------------------------

    def test_bad_input_ends_the_call_with_a_status(self):
        rate, audio = pcm(FILES[1])
        healthy = {}
        t = threading.Thread(target=lambda: healthy.update(r=stream(self.stub, audio, rate=rate)))
        t.start()
        cfg = rasr.StreamingRecognizeRequest(streaming_config=config())
        chunk = rasr.StreamingRecognizeRequest(audio_content=audio[:CHUNK])
        C = grpc.StatusCode
        cases = [
            ([chunk], C.INVALID_ARGUMENT, "first message"),
            ([cfg, chunk, cfg, chunk], C.INVALID_ARGUMENT, "only in the first"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(encoding=raudio.FLAC))],
             C.INVALID_ARGUMENT, "FLAC"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(encoding=raudio.OGGOPUS))],
             C.INVALID_ARGUMENT, "OGGOPUS"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(rate=4000))],
             C.INVALID_ARGUMENT, "8000..48000"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(audio_channel_count=2))],
             C.INVALID_ARGUMENT, "mono"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(language_code="de-DE"))],
             C.INVALID_ARGUMENT, "de-DE"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(model="nope"))],
             C.INVALID_ARGUMENT, "nope"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(model="simple"))],
             C.INVALID_ARGUMENT, "not a speech model"),
            ([cfg, rasr.StreamingRecognizeRequest(audio_content=b"\0" * (5 << 20))],
             C.RESOURCE_EXHAUSTED, ""),
            ([rasr.StreamingRecognizeRequest()], C.INVALID_ARGUMENT, "streaming_config or"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(
                custom_configuration={"profile": "quick"})), chunk],
             C.INVALID_ARGUMENT, "profile 'quick' does not exist"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(
                endpointing_config=rasr.EndpointingConfig(stop_threshold=1.5)))],
             C.INVALID_ARGUMENT, "thresholds"),
            ([rasr.StreamingRecognizeRequest(streaming_config=config(
                endpointing_config=rasr.EndpointingConfig(stop_history=-5)))],
             C.INVALID_ARGUMENT, "milliseconds"),
        ]
        for requests, code, words in cases:
            details = self.expect_code(code, requests)
            self.assertIn(words, details or "", details)
        raw = self.channel.stream_stream(METHOD, request_serializer=None,
                                         response_deserializer=None)
        with self.assertRaises(grpc.RpcError) as ctx:
            for _ in raw(iter([b"\xff\xff\xff"]), timeout=30):
                pass
        self.assertEqual(ctx.exception.code(), C.INVALID_ARGUMENT)
        self.assertIn("malformed nvidia.riva.asr.StreamingRecognizeRequest",
                      ctx.exception.details())
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.Recognize(rasr.RecognizeRequest(
                config=rasr.RecognitionConfig(encoding=raudio.FLAC), audio=b"x"), timeout=30)
        self.assertEqual(ctx.exception.code(), C.INVALID_ARGUMENT)
        t.join()
        self.assertEqual(text(healthy["r"][0]), self.refs[FILES[1]])
        self.wait_pool_idle()  # failed streams ended their sequences

    def test_cancelled_streams_give_their_decoders_back(self):
        rate, audio = pcm(FILES[0])

        def abandon(deadline=None):
            calls = []
            got = queue.Queue()

            def requests():
                yield rasr.StreamingRecognizeRequest(streaming_config=config(rate=rate))
                for off in range(0, 30 * CHUNK, CHUNK):  # 3 s: inside speech
                    yield rasr.StreamingRecognizeRequest(audio_content=audio[off:off + CHUNK])
                    got.get(timeout=60)
                got.get(timeout=60)  # never comes: the call is cancelled
            call = self.stub.StreamingRecognize(requests(), timeout=deadline)
            calls.append(call)
            try:
                for i, _ in enumerate(call):
                    got.put(1)
                    if deadline is None and i == 29:
                        call.cancel()
            except grpc.RpcError as e:
                return e.code()
            return None

        codes = [abandon() for _ in range(4)] + [abandon(deadline=4)]
        self.assertEqual(codes[:4], [grpc.StatusCode.CANCELLED] * 4)
        self.assertEqual(codes[4], grpc.StatusCode.DEADLINE_EXCEEDED)
        self.wait_pool_idle()
        text_ = self.server.metrics()
        self.assertLessEqual(harness.metric_value(text_, "hark_decoders_created", model="asr"),
                             harness.metric_value(text_, "hark_decoders_max", model="asr"))

    def test_a_thousand_streams_opened_and_cancelled(self):
        rate, audio = pcm(FILES[3])
        chunk = rasr.StreamingRecognizeRequest(audio_content=audio[16000:16000 + CHUNK])

        def burst(n):
            for i in range(n):
                got = threading.Event()

                def requests():
                    yield rasr.StreamingRecognizeRequest(streaming_config=config(rate=rate))
                    yield chunk
                    got.wait(30)
                call = self.stub.StreamingRecognize(requests(), timeout=30)
                next(call)  # the chunk's response: the sequence is live
                call.cancel()
                got.set()
        burst(100)
        self.wait_pool_idle()
        before = self.server.settled_rss_kib()
        burst(1000)
        self.wait_pool_idle()
        after = self.server.settled_rss_kib()
        if not self.server.sanitized():
            self.assertLess(after - before, 32 * 1024, (before, after))
        rate1, audio1 = pcm(FILES[1])
        self.assertEqual(text(stream(self.stub, audio1, rate=rate1)[0]), self.refs[FILES[1]])


class RivaDrain(unittest.TestCase):
    """SIGTERM: a live Riva stream finishes with its final; new streams and
    new Recognize calls get UNAVAILABLE; harkd exits 0."""

    def test_sigterm_lets_the_live_stream_finish(self):
        server = harness.Harkd(grpc=True, args=("--exit-timeout-secs", "60",
                                                "--log-verbose", "1", "--log-format", "json"))
        stopped = False
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
            stub = rasr_grpc.RivaSpeechRecognitionStub(channel)
            rate, audio = pcm(FILES[1])
            got, result = queue.Queue(), {}

            def requests():
                yield rasr.StreamingRecognizeRequest(streaming_config=config(rate=rate))
                for i, off in enumerate(range(0, len(audio), CHUNK)):
                    yield rasr.StreamingRecognizeRequest(audio_content=audio[off:off + CHUNK])
                    got.get(timeout=60)
                    if i == 10:
                        server.proc.send_signal(harness.signal.SIGTERM)
                        time.sleep(0.5)
                        try:
                            stub.GetRivaSpeechRecognitionConfig(
                                rasr.RivaSpeechRecognitionConfigRequest(), timeout=10)
                            cfg = rasr.StreamingRecognizeRequest(streaming_config=config())
                            for _ in stub.StreamingRecognize(iter([cfg]), timeout=10):
                                pass
                            result["new"] = "accepted"
                        except grpc.RpcError as e:
                            result["new"] = (e.code(), e.details())

            responses = []
            for r in stub.StreamingRecognize(requests(), timeout=120):
                responses.append(r)
                got.put(1)
            self.assertEqual(result["new"],
                             (grpc.StatusCode.UNAVAILABLE, "Server is shutting down"))
            self.assertEqual(text(responses), reference(FILES[1]))
            self.assertEqual(server.proc.wait(60), 0)
            lines = [json.loads(line) for line in server.stop().splitlines()
                     if line.startswith("{")]
            stopped = True
            opened = [d for d in lines if "riva: stream opened" in d["message"]]
            self.assertEqual(len(opened), 1, opened)
            sid = opened[0]["stream_id"]
            self.assertRegex(sid, r"^riva-\d+$")
            # the workers' lines about its requests name it too
            self.assertTrue(any(d.get("request_id") == sid for d in lines if d is not opened[0]))
            over = [d for d in lines if d.get("stream_id") == sid and "stream over" in d["message"]]
            self.assertEqual(len(over), 1, over)
        finally:
            channel.close()
            if not stopped:
                server.stop()


if __name__ == "__main__":
    harness.main()
