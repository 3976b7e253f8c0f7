"""Riva Recognize (offline) on the audio Riva clients send, against the real
harkd: FLAC and OGG_OPUS (offline and streamed), WAV of float, 24/32-bit and 8-bit unsigned
samples, several channels (one result per channel with
separate_recognition_per_channel, else a downmix), rates outside 8..48 kHz
resampled, and empty or header-only audio refused with INVALID_ARGUMENT.
Also: GetRivaSpeechRecognitionConfig hides the model's file paths from a
caller that may not see the model repository, as ModelConfig does; and
Recognize on the VAD-gated asr_silero runs its VAD over the recording first.

Every recording is made at test time from pocketsphinx-testdata's LibriVox
WAVs with Python's wave module and Debian's python3-soundfile (libsndfile:
FLAC, Ogg Opus); none is kept in git.
"""
import audioop
import io
import os
import unittest
import wave

import grpc
import numpy as np
import soundfile

import harness
from test_riva import raudio, rasr, rasr_grpc
from test_speech import FILES, pcm, wer
from test_speech_gated import gated_repo, start as start_gated

KEY, SECRET = "repo-key", "repo-secret"


def asr_repo():
    root = harness.tempfile.mkdtemp(prefix="hark-riva-audio-")
    harness.atexit.register(harness.shutil.rmtree, root, True)
    os.symlink(os.path.join(harness.SHIPPED_MODELS, "asr"), os.path.join(root, "asr"))
    return root


def samples(path):
    rate, data = pcm(path)
    return rate, np.frombuffer(data, dtype="<i2")


def sf_bytes(x, rate, fmt, subtype):
    out = io.BytesIO()
    soundfile.write(out, x, rate, format=fmt, subtype=subtype)
    return out.getvalue()


def wav_bytes(frames, rate, width, channels=1):
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(frames)
    return out.getvalue()


def transcript(resp, i=0):
    return resp.results[i].alternatives[0].transcript if resp.results else ""


class RivaAudio(harness.ServerTest):
    GRPC = True
    ARGS = ("--grpc-max-message-bytes", "16777216",
            f"--grpc-restricted-protocol=model-repository:{KEY}={SECRET}")

    @classmethod
    def setUpClass(cls):
        cls.repo_dir = None
        cls.server = harness.Harkd(asr_repo(), cls.ARGS, grpc=True)
        cls.channel = grpc.insecure_channel(
            f"127.0.0.1:{cls.server.grpc_port}",
            options=[("grpc.max_send_message_length", 16 << 20),
                     ("grpc.max_receive_message_length", 16 << 20)])
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = rasr_grpc.RivaSpeechRecognitionStub(cls.channel)
        cls.rate, cls.x = samples(FILES[1])
        cls.ref = transcript(cls.recognize(cls.x.tobytes(), sample_rate_hertz=cls.rate))
        assert cls.ref, "the reference recognition is empty"

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        super().tearDownClass()

    @classmethod
    def recognize(cls, audio, encoding=raudio.LINEAR_PCM, **kw):
        cfg = rasr.RecognitionConfig(encoding=encoding, language_code="en-US", **kw)
        return cls.stub.Recognize(rasr.RecognizeRequest(config=cfg, audio=audio), timeout=120)

    def refused(self, audio, **kw):
        with self.assertRaises(grpc.RpcError) as ctx:
            self.recognize(audio, **kw)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT,
                         ctx.exception.details())
        return ctx.exception.details()

    # ---- encodings ------------------------------------------------------------

    def test_flac_gives_the_pcm_transcript(self):
        flac = sf_bytes(self.x, self.rate, "FLAC", "PCM_16")
        self.assertEqual(transcript(self.recognize(flac, encoding=raudio.FLAC)), self.ref)

    def test_ogg_opus_is_decoded(self):
        opus = sf_bytes(self.x, self.rate, "OGG", "OPUS")
        got = transcript(self.recognize(opus, encoding=raudio.OGGOPUS))
        self.assertLess(wer(self.ref, got), 0.35, (self.ref, got))

    def test_wav_float_24_and_32_bit_give_the_pcm_transcript(self):
        f = self.x.astype(np.float32) / 32768.0
        for subtype in ("FLOAT", "PCM_24", "PCM_32", "DOUBLE"):
            wav = sf_bytes(f, self.rate, "WAV", subtype)
            self.assertEqual(transcript(self.recognize(wav, encoding=raudio.ENCODING_UNSPECIFIED)),
                             self.ref, subtype)

    def test_wav_8_bit_unsigned(self):
        u8 = audioop.bias(audioop.lin2lin(self.x.tobytes(), 2, 1), 1, 128)
        got = transcript(self.recognize(wav_bytes(u8, self.rate, 1)))
        self.assertLess(wer(self.ref, got), 0.5, (self.ref, got))

    # ---- channels -------------------------------------------------------------

    def test_separate_recognition_per_channel(self):
        rate2, y = samples(FILES[2])
        self.assertEqual(rate2, self.rate)
        n = max(len(self.x), len(y))
        a = np.zeros(n, "<i2")
        b = np.zeros(n, "<i2")
        a[:len(self.x)] = self.x
        b[:len(y)] = y
        refs = [transcript(self.recognize(c.tobytes(), sample_rate_hertz=self.rate))
                for c in (a, b)]
        stereo = np.stack([a, b], axis=1)
        for audio, kw in ((wav_bytes(stereo.tobytes(), self.rate, 2, 2), {}),
                          (stereo.tobytes(), {"sample_rate_hertz": self.rate,
                                              "audio_channel_count": 2}),
                          (sf_bytes(stereo, self.rate, "FLAC", "PCM_16"),
                           {"encoding": raudio.FLAC})):
            resp = self.recognize(audio, enable_separate_recognition_per_channel=True, **kw)
            self.assertEqual([r.channel_tag for r in resp.results], [1, 2])
            self.assertEqual([transcript(resp, i) for i in (0, 1)], refs)

    def test_channels_are_mixed_down_without_separate_recognition(self):
        stereo = np.stack([self.x, self.x], axis=1)
        for audio, kw in ((wav_bytes(stereo.tobytes(), self.rate, 2, 2), {}),
                          (stereo.tobytes(), {"sample_rate_hertz": self.rate,
                                              "audio_channel_count": 2})):
            resp = self.recognize(audio, **kw)
            self.assertEqual(len(resp.results), 1)
            self.assertEqual(resp.results[0].channel_tag, 1)
            self.assertEqual(transcript(resp), self.ref)
        # interleaved PCM that is not whole frames
        self.assertIn("frames", self.refused(stereo.tobytes()[:-2], sample_rate_hertz=self.rate,
                                             audio_channel_count=2))

    # ---- rates ------------------------------------------------------------------

    def test_rates_outside_8_to_48_khz_are_resampled(self):
        hi, _ = audioop.ratecv(self.x.tobytes(), 2, 1, self.rate, 96000, None)
        got = transcript(self.recognize(hi, sample_rate_hertz=96000))
        self.assertLess(wer(self.ref, got), 0.2, (self.ref, got))
        got = transcript(self.recognize(wav_bytes(hi, 96000, 2)))
        self.assertLess(wer(self.ref, got), 0.2, (self.ref, got))
        lo, _ = audioop.ratecv(self.x.tobytes(), 2, 1, self.rate, 4000, None)
        resp = self.recognize(lo, sample_rate_hertz=4000)
        self.assertEqual(len(resp.results), 1)  # answered (telephone-band words or none)
        self.assertGreater(resp.results[0].audio_processed, 0)

    # ---- streaming ----------------------------------------------------------------

    def test_streaming_flac_and_ogg_opus(self):
        from test_riva import config, stream as riva_stream, text as riva_text
        flac = sf_bytes(self.x, self.rate, "FLAC", "PCM_16")
        responses, n = riva_stream(self.stub, flac, encoding=raudio.FLAC, rate=self.rate)
        self.assertIn(len(responses) - n, (0, 1))  # one response per message, then the final
        self.assertEqual(riva_text(responses), self.ref)
        opus = sf_bytes(self.x, self.rate, "OGG", "OPUS")
        responses, n = riva_stream(self.stub, opus, encoding=raudio.OGGOPUS, rate=self.rate)
        got = riva_text(responses)
        self.assertLess(wer(self.ref, got), 0.35, (self.ref, got))
        # a stream that is not a file it can decode ends with INVALID_ARGUMENT
        with self.assertRaises(grpc.RpcError) as ctx:
            riva_stream(self.stub, b"\0" * 5000, encoding=raudio.FLAC, rate=self.rate)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)

    # ---- empty audio --------------------------------------------------------------

    def test_empty_or_header_only_audio_is_invalid(self):
        self.assertIn("empty", self.refused(b"", sample_rate_hertz=16000))
        self.refused(wav_bytes(b"", 16000, 2))
        self.refused(wav_bytes(b"", 16000, 2, 2))
        self.refused(sf_bytes(np.zeros(0, "<i2"), 16000, "FLAC", "PCM_16"), encoding=raudio.FLAC)
        self.refused(b"not audio at all", encoding=raudio.FLAC)

    # ---- GetRivaSpeechRecognitionConfig ---------------------------------------------

    def test_config_hides_paths_from_a_caller_without_the_repository_key(self):
        req = rasr.RivaSpeechRecognitionConfigRequest(model_name="asr")
        for m in self.stub.GetRivaSpeechRecognitionConfig(req, timeout=30).model_config:
            self.assertEqual(m.parameters["hmm"], "<path hidden>")
            self.assertEqual(m.parameters["language_code"], "en-US")
        resp = self.stub.GetRivaSpeechRecognitionConfig(req, timeout=30,
                                                        metadata=((KEY, SECRET),))
        for m in resp.model_config:
            self.assertTrue(m.parameters["hmm"].startswith("/"), m.parameters["hmm"])


class RivaOfflineGated(unittest.TestCase):
    """asr_silero's utterances are opened by silero_vad's probabilities:
    Recognize runs the VAD over the whole recording first."""

    @classmethod
    def setUpClass(cls):
        cls.server = start_gated(gated_repo())
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = rasr_grpc.RivaSpeechRecognitionStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def recognize(self, audio, **kw):
        cfg = rasr.RecognitionConfig(model="asr_silero", language_code="en-US", **kw)
        return self.stub.Recognize(rasr.RecognizeRequest(config=cfg, audio=audio), timeout=120)

    def test_recognize_on_the_gated_model(self):
        from test_speech import reference
        for path in FILES[:2]:
            rate, audio = pcm(path)
            ref = reference(path)
            got = transcript(self.recognize(audio, encoding=raudio.LINEAR_PCM,
                                            sample_rate_hertz=rate))
            self.assertLess(wer(ref, got), 0.35, (ref, got))
            # a WAV at another rate and a FLAC go the same way
            hi, _ = audioop.ratecv(audio, 2, 1, rate, 44100, None)
            got = transcript(self.recognize(wav_bytes(hi, 44100, 2)))
            self.assertLess(wer(ref, got), 0.35, (ref, got))
        x = np.zeros(16000 * 2, "<i2")
        self.assertEqual(transcript(self.recognize(x.tobytes(), sample_rate_hertz=16000)), "")


if __name__ == "__main__":
    unittest.main()
