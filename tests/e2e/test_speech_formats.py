"""Speech recognition of other audio formats: 8 kHz (deterministic
resampling), streams that name no rate, mu-law and A-law WAV files.

Against the real harkd over real sockets, with the helpers of test_speech.
"""
import audioop
import io
import os
import shutil
import struct
import time
import wave

from harness import MODELS, Harkd, main, make_repo
from test_speech import FILES, SpeechTest, joined, pcm, stream, wer


class SpeechFormats(SpeechTest):
    def test_8khz_gives_one_transcript(self):
        # The same 8 kHz audio, streamed in different chunkings and sent
        # offline as a WAV, gives the same words every time: resampling is
        # deterministic. (With soxr's dither, seeded from the clock, these
        # two recordings gave two transcripts in three runs.)
        for path in (FILES[2], FILES[4]):
            rate, audio = pcm(path)
            low, _ = audioop.ratecv(audio, 2, 1, rate, 8000, None)
            got = set()
            for chunk in (1600, 1000, 4002):
                finals, _ = self.run_async(stream(self.uri, low, 8000, chunk=chunk))
                got.add(joined(finals))
            buf = io.BytesIO()
            with wave.open(buf, "wb") as w:
                w.setnchannels(1)
                w.setsampwidth(2)
                w.setframerate(8000)
                w.writeframes(low)
            data = buf.getvalue()
            outputs = self.offline(data)
            got.add(outputs["TRANSCRIPT"]["data"][0])
            self.assertEqual(len(got), 1, (path, got))
            self.assertTrue(next(iter(got)), path)

    def test_offline_recording_longer_than_the_stream_buffer(self):
        # A whole recording in one request is recognised slice by slice:
        # longer than max_buffered_ms (10 s, the bound on what a stream may
        # hold unprocessed) it is no longer refused, and what it costs is
        # bounded by the slice, not by its size (a 60 MB mu-law Recognize
        # was converted and resampled whole: 1.2 GB). 25 s here.
        audio = b"".join(pcm(p)[1] for p in FILES)
        buf = io.BytesIO()
        with wave.open(buf, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(16000)
            w.writeframes(audio)
        text = self.offline(buf.getvalue())["TRANSCRIPT"]["data"][0]
        # the recordings run together without their pauses, so the words
        # differ a little from each recording's own; most are there
        ref = " ".join(self.refs[p] for p in FILES)
        self.assertLess(wer(ref, text), 0.35, text)

    def test_default_sample_rate_for_streams_without_config(self):
        # Vosk's servers assume 8 kHz and its browser samples send raw PCM
        # with no config: --speech-sample-rate, or the model's
        # default_sample_rate, says what such a stream is.
        rate, audio = pcm(FILES[2])
        low, _ = audioop.ratecv(audio, 2, 1, rate, 8000, None)
        want, _ = self.run_async(stream(self.uri, low, 8000, chunk=1600))
        want = joined(want)
        self.assertTrue(want)
        with open(os.path.join(MODELS, "asr", "config.pbtxt")) as f:
            asr = f.read()
        asr8 = asr.replace('name: "asr"', 'name: "asr8"').replace(
            "parameters [", 'parameters [\n  { key: "default_sample_rate" '
            'value: { string_value: "8000" } },', 1)
        repo = make_repo({"asr": asr, "asr8": asr8})
        try:
            for args, path in ((["--speech-sample-rate", "8000"], "/"),
                               ([], "/v2/models/asr8/stream")):
                server = Harkd(repo, ["--model-control-mode", "explicit",
                                      "--load-model", "asr", "--load-model", "asr8", *args])
                try:
                    uri = f"ws://127.0.0.1:{server.http_port}{path}"
                    got, _ = self.run_async(stream(uri, low, 8000, chunk=1600, config=False))
                    self.assertEqual(joined(got), want, args)
                finally:
                    server.stop()
        finally:
            shutil.rmtree(repo, ignore_errors=True)
        bad = make_repo({"asr": asr.replace(
            "parameters [", 'parameters [\n  { key: "default_sample_rate" '
            'value: { string_value: "4000" } },', 1)})
        try:
            server = Harkd(bad, wait_ready=False)
            try:
                deadline = time.time() + 30
                while "default_sample_rate" not in server.output() and time.time() < deadline:
                    time.sleep(0.2)
                self.assertIn("bad value '4000' for parameter 'default_sample_rate'",
                              server.output())
            finally:
                server.proc.kill()
                server.proc.wait()
                server.log.close()
        finally:
            shutil.rmtree(bad, ignore_errors=True)

    def test_g711_wav_files(self):
        # mu-law and A-law WAV files (telephone recordings) are decoded as
        # raw G.711 is: their words equal those of the same samples sent as
        # 16-bit PCM, offline and streamed.
        rate, audio = pcm(FILES[2])
        low, _ = audioop.ratecv(audio, 2, 1, rate, 8000, None)
        for fmt, encode, decode in ((7, audioop.lin2ulaw, audioop.ulaw2lin),
                                    (6, audioop.lin2alaw, audioop.alaw2lin)):
            g711 = encode(low, 2)
            data = (b"RIFF" + struct.pack("<I", 36 + len(g711)) + b"WAVE"
                    + b"fmt " + struct.pack("<IHHIIHH", 16, fmt, 1, 8000, 8000, 1, 8)
                    + b"data" + struct.pack("<I", len(g711)) + g711)
            want, _ = self.run_async(stream(self.uri, decode(g711, 2), 8000, chunk=1600))
            want = joined(want)
            self.assertTrue(want)
            outputs = self.offline(data)
            self.assertEqual(outputs["TRANSCRIPT"]["data"][0], want, fmt)
            self.assertAlmostEqual(outputs["AUDIO_PROCESSED"]["data"][0], len(g711) / 8000,
                                   delta=0.05)
            got, _ = self.run_async(stream(self.uri, data, config=False, chunk=801))
            self.assertEqual(joined(got), want, fmt)

if __name__ == "__main__":
    main()
