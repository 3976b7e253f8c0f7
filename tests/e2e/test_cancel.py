"""Cancelled offline jobs give the machine back (issue 24, item 2).

The attack of the report, scaled to a test: three Riva Recognize calls of
a few minutes of audio each (the LibriVox files repeated), cancelled by
their client after 2 s, on a harkd with two workers. The cancel reaches
the engine through the call's cancel token (hark_request_is_cancelled),
and pocketsphinx stops between blocks; whole recordings run in the
worker pool's bulk lane, at most workers - 1 at once. So

- while the attack runs, a live Vosk stream keeps its latency bars
  (nine replies in ten within 1 s, none over 2.5 s) and a KServe `simple` infer answers;

- harkd's CPU (utime + stime in /proc/<pid>/stat) falls back to idle
  within a few seconds of the cancel, where it used to go on decoding
  for minutes;
- and after it, the victims are served as well.
"""
import asyncio
import json
import os
import socket
import struct
import time

import grpc
import websockets

from harness import SHIPPED_MODELS, ServerTest, main, simple_request
from test_riva import raudio, rasr, rasr_grpc
from test_speech import CHUNK, FILES, pcm


def model_config(name):
    with open(os.path.join(SHIPPED_MODELS, name, "config.pbtxt")) as f:
        return f.read()


def recording(repeats):
    """Raw 16 kHz PCM: every LibriVox file, `repeats` times over."""
    audio = b"".join(pcm(f)[1] for f in FILES)
    return audio * repeats


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def vosk_latencies(uri, audio, chunk=CHUNK):
    """Streams `audio` at real time; returns each reply's latency (s)."""
    lat = []
    async with websockets.connect(uri, max_size=None) as ws:
        await ws.send(json.dumps({"config": {"sample_rate": 16000}}))
        for off in range(0, len(audio), chunk):
            t0 = time.monotonic()
            await ws.send(audio[off:off + chunk])
            json.loads(await asyncio.wait_for(ws.recv(), 30))
            lat.append(time.monotonic() - t0)
            await asyncio.sleep(max(0.0, chunk / 32000 - lat[-1]))
        await ws.send('{"eof" : 1}')
        await asyncio.wait_for(ws.recv(), 30)
    return lat


class Cancel(ServerTest):
    GRPC = True
    # Decoders made at load: the test is about workers, and a decoder made
    # on demand (~0.5 s of CPU) on a loaded host would blur it.
    REPO = {"asr": model_config("asr").replace(
                '{ key: "decoder_pool_size"',
                '{ key: "decoder_pool_preload" value: { string_value: "5" } },\n'
                '  { key: "decoder_pool_size"'),
            "simple": model_config("simple")}
    ARGS = ("--worker-threads", "2", "--grpc-max-message-bytes", str(32 << 20),
            "--http-max-input-size", str(32 << 20))

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.channel = grpc.insecure_channel(
            f"127.0.0.1:{cls.server.grpc_port}",
            options=[("grpc.max_send_message_length", 32 << 20)])
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = rasr_grpc.RivaSpeechRecognitionStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        super().tearDownClass()

    def simple_answers(self, timeout=5):
        a = list(range(16))
        t0 = time.monotonic()
        status, body = self.server.json("POST", "/v2/models/simple/infer",
                                        simple_request(a, a))
        self.assertEqual(status, 200, body)
        self.assertLess(time.monotonic() - t0, timeout)

    def assert_latency_bars(self, lat):
        """Nine replies in ten within 1 s, none over 2.5 s (a shared CI host
        stalls a process now and then; a starved stream waits for minutes)."""
        ordered = sorted(lat)
        self.assertLess(ordered[int(len(ordered) * 0.9)], 1.0, lat)
        self.assertLess(ordered[-1], 2.5, lat)

    def assert_goes_idle(self, since, busy):
        """Back to idle within a few seconds: at most 0.3 s of CPU over 2 s."""
        pid = self.server.proc.pid
        idle = None
        while time.monotonic() - since < 8:
            t0 = cpu_seconds(pid)
            time.sleep(2)
            idle = cpu_seconds(pid) - t0
            if idle < 0.3:
                break
        self.assertLess(idle, 0.3, f"harkd still decodes the cancelled work (busy {busy:.2f})")

    def test_closed_http_connection_stops_its_infer(self):
        pid = self.server.proc.pid
        audio = recording(8)
        doc = {"inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1],
                           "parameters": {"binary_data_size": len(audio) + 4}}]}
        header = json.dumps(doc).encode()
        conn = self.server.connect()
        conn.request("POST", "/v2/models/asr/infer",
                     header + struct.pack("<I", len(audio)) + audio,
                     {"Inference-Header-Content-Length": str(len(header))})
        time.sleep(1)
        busy0 = cpu_seconds(pid)
        time.sleep(1)
        busy = cpu_seconds(pid) - busy0
        self.assertGreater(busy, 0.1, "the infer is not decoding")
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        self.assert_goes_idle(time.monotonic(), busy)
        self.simple_answers()

    def test_cancelled_recognize_calls_stop_decoding(self):
        pid = self.server.proc.pid
        audio = recording(8)  # about 3.3 minutes each
        rc = rasr.RecognitionConfig(encoding=raudio.LINEAR_PCM, sample_rate_hertz=16000, language_code="en-US")
        calls = [self.stub.Recognize.future(rasr.RecognizeRequest(config=rc, audio=audio),
                                            timeout=600) for _ in range(3)]
        time.sleep(1)
        busy0 = cpu_seconds(pid)
        time.sleep(1)
        busy = cpu_seconds(pid) - busy0
        self.assertGreater(busy, 0.1, "the attack is not decoding")
        # While it runs: the whole recordings share one of the two workers
        # (the pool's bulk lane), so a live stream keeps its bars and a
        # cheap model answers.
        self.simple_answers()
        lat = asyncio.run(vosk_latencies(f"ws://127.0.0.1:{self.server.http_port}/",
                                         pcm(FILES[1])[1]))
        self.assert_latency_bars(lat)
        self.simple_answers()
        for c in calls:
            self.assertFalse(c.done(), "the attack ended before the cancel")
        for c in calls:
            c.cancel()
        cancelled_at = time.monotonic()
        for c in calls:
            self.assertTrue(c.cancelled())
        self.assert_goes_idle(cancelled_at, busy)
        # The victims: a live stream keeps its bars, a cheap model answers.
        self.simple_answers()
        lat = asyncio.run(vosk_latencies(f"ws://127.0.0.1:{self.server.http_port}/",
                                         pcm(FILES[1])[1]))
        self.assert_latency_bars(lat)
        self.simple_answers()


if __name__ == "__main__":
    main()
