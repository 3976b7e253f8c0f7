"""`hark transcribe` against the real harkd's Vosk WebSocket, on the
deterministic echo_asr backend (a final's text is the utterance's sample
count), so every transcript and reply count can be checked exactly:
transcripts, one reply per chunk, the report's figures, parallel streams on
real-time pacing, silent streams, and the errors a user sees for an unknown
model, an unreachable server or a file that is not a WAV."""
import json
import math
import os
import subprocess
import tempfile
import wave

from harness import BIN_DIR, ServerTest, free_port, main

HARK = os.path.join(BIN_DIR, "hark")
ECHO = """
name: "%s"
backend: "echo_asr"
max_batch_size: 0
input [ { name: "AUDIO" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "TRANSCRIPT" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "IS_FINAL" data_type: TYPE_BOOL dims: [ 1 ] },
  { name: "WORDS" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "WORD_START" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "WORD_END" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "WORD_CONF" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "CONFIDENCE" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "ALTERNATIVES" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "ALTERNATIVE_CONFIDENCE" data_type: TYPE_FP32 dims: [ -1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "utterance_samples" value: { string_value: "%d" } }
parameters { key: "max_sequences" value: { string_value: "0" } }
"""


def write_wav(path, samples, rate=16000, channels=1):
    with wave.open(path, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(bytes(2 * channels * samples))


class TranscribeCli(ServerTest):
    REPO = {"echo": ECHO % ("echo", 0), "echo_utt": ECHO % ("echo_utt", 8000)}
    ARGS = ("--speech-model", "echo")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="hark-transcribe-")
        cls.wavs = {}
        for name, n in (("a", 12000), ("b", 20000), ("c", 4000)):
            cls.wavs[name] = (os.path.join(cls.tmp, name + ".wav"), n)
            write_wav(*cls.wavs[name])

    def run_cli(self, *args, server=None):
        cmd = [HARK, "transcribe", "--server", server or f"ws://127.0.0.1:{self.server.http_port}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def report(self, *args):
        p = self.run_cli("--json", *args)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return json.loads(p.stdout)

    def test_transcripts_and_figures(self):
        paths = [self.wavs[k][0] for k in "abc"]
        d = self.report(*paths)
        self.assertEqual((d["streams"], d["ok"], d["errors"], d["timeouts"]), (3, 3, 0, 0))
        chunks = 0
        for f, k in zip(d["files"], "abc"):
            n = self.wavs[k][1]
            self.assertEqual(f["file"], self.wavs[k][0])
            self.assertEqual(f["streams"][0]["transcript"], str(n))  # the whole file, one utterance
            chunks += math.ceil(n / 1600)  # 100 ms chunks at 16 kHz
        self.assertEqual(d["chunk_latency_ms"]["count"], chunks)
        self.assertEqual(d["final_latency_ms"]["count"], 3)
        self.assertAlmostEqual(d["audio_seconds"], 36000 / 16000, places=2)
        self.assertGreater(d["rtfx"], 0)
        lat = d["chunk_latency_ms"]
        self.assertTrue(0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"])

    def test_text_output_and_utterances(self):
        path, n = self.wavs["b"]
        p = self.run_cli("--model", "echo_utt", "--interim", path)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        finals = [line.split("final: ")[1] for line in p.stdout.splitlines() if " final: " in line]
        self.assertEqual(finals[:2], ["8000", "8000"])  # an utterance every 8000 samples
        self.assertIn(f"transcript: {' '.join(finals)}", p.stdout)
        self.assertIn("partial: ", p.stdout)
        self.assertIn("RTFX", p.stdout)
        self.assertIn("Chunk latency (ms): p50", p.stdout)

    def test_parallel_realtime_iterations(self):
        paths = [self.wavs[k][0] for k in "ac"]  # 0.75 s and 0.25 s
        d = self.report("--simulate-realtime", "--parallel", "4", "--iterations", "2",
                        "--chunk-ms", "50", *paths)
        self.assertEqual((d["streams"], d["ok"]), (8, 8))  # 2 passes of max(4, 2 files)
        self.assertEqual([len(f["streams"]) for f in d["files"]], [4, 4])
        self.assertGreaterEqual(d["wall_seconds"], 0.65)  # paced: a.wav's 15th chunk goes at 0.7 s
        for f in d["files"]:
            n = 12000 if f["file"].endswith("a.wav") else 4000
            self.assertEqual({s["transcript"] for s in f["streams"]}, {str(n)})

    def test_silent_fraction(self):
        d = self.report("--silent-fraction", "0.5", "--parallel", "4", self.wavs["a"][0])
        self.assertEqual(sum(1 for s in d["files"][0]["streams"] if s.get("silent")), 2)
        self.assertEqual(d["ok"], 4)

    def test_unknown_model(self):
        p = self.run_cli("--json", "--model", "nope", self.wavs["a"][0])
        self.assertEqual(p.returncode, 1)
        s = json.loads(p.stdout)["files"][0]["streams"][0]
        self.assertEqual((s["status"], s["http_status"]), ("error", 404))
        self.assertIn("nope", s["reason"])

    def test_unreachable_and_bad_input(self):
        p = self.run_cli(self.wavs["a"][0], server=f"127.0.0.1:{free_port()}")
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot connect", p.stderr)
        p = self.run_cli(__file__)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a RIFF/WAVE file", p.stderr)
        p = self.run_cli("--parallel", "0", self.wavs["a"][0])
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    main()
