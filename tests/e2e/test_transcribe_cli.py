"""`hark transcribe` against the real harkd's Vosk WebSocket and Riva gRPC
API, on the deterministic echo_asr backend (a final's text is the
utterance's sample count), so every transcript and reply count can be
checked exactly: transcripts, one reply per chunk, the report's figures,
parallel streams on real-time pacing, silent streams, and the errors a user
sees for an unknown model, an unreachable server or a file that is not a
WAV. Then the LibriVox recordings through the real pocketsphinx model: the
gRPC path's transcripts equal the WebSocket path's."""
import glob
import json
import math
import os
import subprocess
import wave

import harness
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


LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"


# Riva's StreamingRecognize wants a streaming model: the same echo models
# with a sequence batcher.
SEQ = 'sequence_batching { oldest { max_candidate_sequences: 1024 } }\n'


class TranscribeCli(ServerTest):
    REPO = {"echo": ECHO % ("echo", 0), "echo_utt": ECHO % ("echo_utt", 8000),
            "gecho": ECHO % ("gecho", 0) + SEQ, "gecho_utt": ECHO % ("gecho_utt", 8000) + SEQ}
    ARGS = ("--speech-model", "echo")
    GRPC = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = harness.tempdir("hark-transcribe-")
        cls.wavs = {}
        for name, n in (("a", 12000), ("b", 20000), ("c", 4000)):
            cls.wavs[name] = (os.path.join(cls.tmp, name + ".wav"), n)
            write_wav(*cls.wavs[name])

    def grpc_url(self):
        return f"grpc://127.0.0.1:{self.server.grpc_port}"

    def run_cli(self, *args, server=None):
        cmd = [HARK, "transcribe", "--server", server or f"ws://127.0.0.1:{self.server.http_port}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def report(self, *args, server=None):
        p = self.run_cli("--json", *args, server=server)
        self.assertEqual(p.returncode, 0, p.stdout[-1500:] + p.stderr[-1500:])
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

    def test_stagger(self):
        path = self.wavs["c"][0]  # 0.25 s: 5 chunks of 50 ms, the last sent 0.2 s after the first
        d = self.report("--simulate-realtime", "--parallel", "4", "--chunk-ms", "50",
                        "--stagger-ms", "600", path)
        self.assertEqual((d["streams"], d["ok"]), (4, 4))
        self.assertGreaterEqual(d["wall_seconds"], 0.65)  # the 4th starts at 450 ms
        p = self.run_cli("--stagger-ms", "-1", path)
        self.assertEqual(p.returncode, 2)
        self.assertIn("bad --stagger-ms", p.stderr)

    def test_silent_fraction(self):
        d = self.report("--silent-fraction", "0.5", "--parallel", "4", self.wavs["a"][0])
        self.assertEqual(sum(1 for s in d["files"][0]["streams"] if s.get("silent")), 2)
        self.assertEqual(d["ok"], 4)

    def test_unknown_model(self):
        p = self.run_cli("--json", "--model", "nope", self.wavs["a"][0])
        self.assertEqual(p.returncode, 1)
        s = json.loads(p.stdout)["files"][0]["streams"][0]
        self.assertEqual((s["status"], s["http_status"]), ("error", 400))
        self.assertIn("nope", s["reason"])

    def test_grpc_transcripts_and_figures(self):
        paths = [self.wavs[k][0] for k in "abc"]
        d = self.report("--model", "gecho", *paths, server=self.grpc_url())
        self.assertEqual(d["server"], self.grpc_url())
        self.assertEqual((d["streams"], d["ok"], d["errors"], d["timeouts"]), (3, 3, 0, 0))
        chunks = 0
        for f, k in zip(d["files"], "abc"):
            n = self.wavs[k][1]
            self.assertEqual(f["streams"][0]["transcript"], str(n))
            chunks += math.ceil(n / 1600)
        self.assertEqual(d["chunk_latency_ms"]["count"], chunks)  # one response per audio message
        self.assertEqual(d["final_latency_ms"]["count"], 3)
        self.assertAlmostEqual(d["audio_seconds"], 36000 / 16000, places=2)
        lat = d["chunk_latency_ms"]
        self.assertTrue(0 <= lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"])

    def test_grpc_equals_websocket(self):
        path = self.wavs["b"][0]
        args = ("--model", "gecho_utt", "--words", "--chunk-ms", "50", path)
        ws = self.report(*args)
        gr = self.report(*args, server=self.grpc_url())
        ws_s, gr_s = ws["files"][0]["streams"][0], gr["files"][0]["streams"][0]
        self.assertEqual(gr_s["transcript"], ws_s["transcript"])
        self.assertEqual(gr_s["transcript"].split()[:2], ["8000", "8000"])
        self.assertEqual([f["text"] for f in gr_s["finals"]], [f["text"] for f in ws_s["finals"]])
        self.assertEqual(gr["chunk_latency_ms"]["count"], ws["chunk_latency_ms"]["count"])
        for g, w in zip(gr_s["finals"], ws_s["finals"]):
            self.assertEqual([x["word"] for x in g.get("result", [])],
                             [x["word"] for x in w.get("result", [])])
            for gx, wx in zip(g.get("result", []), w.get("result", [])):
                self.assertAlmostEqual(gx["start"], wx["start"], delta=0.002)  # Riva: whole ms
                self.assertAlmostEqual(gx["end"], wx["end"], delta=0.002)

    def test_grpc_text_output_interim(self):
        path, n = self.wavs["b"]
        p = self.run_cli("--model", "gecho_utt", "--interim", path, server=self.grpc_url())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        finals = [line.split("final: ")[1] for line in p.stdout.splitlines() if " final: " in line]
        self.assertEqual(finals[:2], ["8000", "8000"])
        self.assertIn(f"transcript: {' '.join(finals)}", p.stdout)
        self.assertIn("partial: ", p.stdout)
        self.assertIn(f"Server: {self.grpc_url()}", p.stdout)
        self.assertIn("Chunk latency (ms): p50", p.stdout)

    def test_grpc_parallel_realtime_iterations_silent(self):
        paths = [self.wavs[k][0] for k in "ac"]
        d = self.report("--model", "gecho", "--simulate-realtime", "--parallel", "4",
                        "--iterations", "2", "--chunk-ms", "50", *paths, server=self.grpc_url())
        self.assertEqual((d["streams"], d["ok"]), (8, 8))
        self.assertEqual([len(f["streams"]) for f in d["files"]], [4, 4])
        self.assertGreaterEqual(d["wall_seconds"], 0.65)
        for f in d["files"]:
            n = 12000 if f["file"].endswith("a.wav") else 4000
            self.assertEqual({s["transcript"] for s in f["streams"]}, {str(n)})
        d = self.report("--model", "gecho", "--silent-fraction", "0.5", "--parallel", "4",
                        self.wavs["a"][0], server=self.grpc_url())
        self.assertEqual(sum(1 for s in d["files"][0]["streams"] if s.get("silent")), 2)
        self.assertEqual(d["ok"], 4)

    def test_grpc_errors(self):
        p = self.run_cli("--json", "--model", "nope", self.wavs["a"][0], server=self.grpc_url())
        self.assertEqual(p.returncode, 1)
        s = json.loads(p.stdout)["files"][0]["streams"][0]
        self.assertEqual((s["status"], s["grpc_status"]), ("error", 3))  # INVALID_ARGUMENT
        self.assertIn("nope", s["reason"])
        p = self.run_cli(self.wavs["a"][0], server=f"grpc://127.0.0.1:{free_port()}")
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot connect", p.stderr)
        p = self.run_cli(self.wavs["a"][0], server="grpc://127.0.0.1:1/path")
        self.assertEqual(p.returncode, 2)
        p = self.run_cli("--json", "--model", "echo", self.wavs["a"][0], server=self.grpc_url())
        self.assertEqual(p.returncode, 1)  # not a streaming model: Riva's Recognize only
        s = json.loads(p.stdout)["files"][0]["streams"][0]
        self.assertEqual(s["grpc_status"], 3)  # INVALID_ARGUMENT

    def test_unreachable_and_bad_input(self):
        p = self.run_cli(self.wavs["a"][0], server=f"127.0.0.1:{free_port()}")
        self.assertEqual(p.returncode, 1)
        self.assertIn("cannot connect", p.stderr)
        p = self.run_cli(__file__)
        self.assertEqual(p.returncode, 2)
        self.assertIn("not a RIFF/WAVE file", p.stderr)
        p = self.run_cli("--parallel", "0", self.wavs["a"][0])
        self.assertEqual(p.returncode, 2)


class TranscribeManyStreams(ServerTest):
    """Hundreds of gRPC streams on the client's one thread and one channel
    (the server's stream admission opened wide: it is not under test)."""
    REPO = {"gecho": ECHO % ("gecho", 0) + SEQ}
    ARGS = ("--stream-backlog-limit", "100000")
    GRPC = True

    def test_300_streams(self):
        tmp = harness.tempdir("hark-transcribe-")
        path = os.path.join(tmp, "c.wav")
        write_wav(path, 4000)
        for pacing in ([], ["--simulate-realtime"]):
            cmd = [HARK, "transcribe", "--server", f"grpc://127.0.0.1:{self.server.grpc_port}",
                   "--model", "gecho", "--json", "--parallel", "300", *pacing, path]
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 0, p.stdout[-1500:] + p.stderr[-1500:])
            d = json.loads(p.stdout)
            self.assertEqual((d["streams"], d["ok"]), (300, 300))
            self.assertEqual({s["transcript"] for s in d["files"][0]["streams"]}, {"4000"})
            self.assertEqual(d["chunk_latency_ms"]["count"], 300 * 3)


class TranscribeLibriVox(ServerTest):
    """The real speech model: the same transcripts over gRPC and WebSocket."""
    GRPC = True

    def run_json(self, server, paths):
        # One stream at a time: all at once could meet the server's stream
        # admission (backlog) on a slow machine, which is not under test.
        cmd = [HARK, "transcribe", "--server", server, "--json", "--timeout-secs", "60", *paths]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
        failed = [s.get("reason") for f in json.loads(p.stdout or '{"files": []}')["files"]
                  for s in f["streams"] if s["status"] != "ok"] if p.stdout.startswith("{") else []
        self.assertEqual(p.returncode, 0, f"{server}: failed streams {failed}; {p.stderr[-1000:]}")
        d = json.loads(p.stdout)
        return {f["file"]: f["streams"][0]["transcript"] for f in d["files"]}, d

    def test_grpc_transcripts_equal_websocket(self):
        paths = sorted(glob.glob(os.path.join(LIBRIVOX, "*.wav")))
        self.assertGreaterEqual(len(paths), 3)
        ws, _ = self.run_json(f"ws://127.0.0.1:{self.server.http_port}", paths)
        gr, d = self.run_json(f"grpc://127.0.0.1:{self.server.grpc_port}", paths)
        self.assertEqual(gr, ws)
        self.assertTrue(all(len(t.split()) >= 3 for t in gr.values()), gr)
        self.assertEqual(d["final_latency_ms"]["count"], len(paths))

    def test_grpc_language_checked(self):
        path = sorted(glob.glob(os.path.join(LIBRIVOX, "*.wav")))[0]
        cmd = [HARK, "transcribe", "--server", f"grpc://127.0.0.1:{self.server.grpc_port}",
               "--json", "--language-code", "de-DE", path]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        s = json.loads(p.stdout)["files"][0]["streams"][0]
        self.assertEqual(s["grpc_status"], 3)  # INVALID_ARGUMENT
        self.assertIn("de-DE", s["reason"])


if __name__ == "__main__":
    main()
