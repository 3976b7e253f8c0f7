"""asr_silero: pocketsphinx whose utterances silero_vad opens and closes.

The real harkd serves asr (the library's energy VAD), asr_silero and
silero_vad. Each stream's audio goes, frame by frame, through silero_vad
(batched with other streams' frames) before asr_silero sees it; the
recogniser decodes only what the VAD calls speech, plus padding. Checked:
the five LibriVox recordings over Vosk's WebSocket and Riva's gRPC give
transcripts close to asr's (WER against the recordings' own transcripts is
printed for both), the two protocols agree, silence and noise give empty
finals without ever holding a decoder, Riva's endpointing_config changes
where utterances open and close, a stream that ends mid-frame and a client
that vanishes mid-frame are handled, and without silero_vad a stream on
asr_silero fails at once with the reason.
"""
import asyncio
import json
import os
import random
import struct
import time

import websockets

import harness
from test_riva import rasr, rasr_grpc, stream as riva_stream, text as riva_text
from test_speech import CHUNK, FILES, LIBRIVOX, joined, pcm, reference, stream as ws_stream, wer

import grpc


def truth():
    out = {}
    with open(os.path.join(LIBRIVOX, "transcription")) as f:
        for line in f:
            text, _, fid = line.rpartition("(")
            out[fid.strip(" )\n")] = text.replace("<s>", "").replace("</s>", "").strip()
    return out


def gated_repo(names=("asr_silero", "silero_vad")):
    """Links to shipped models. `asr` is left out: test_speech checks that its
    finals are the library's own (pocketsphinx_continuous) word for word, so
    the library's transcripts stand for it here, and each decoder pool
    costs harkd seconds of start on a loaded host."""
    root = harness.tempfile.mkdtemp(prefix="hark-gated-")
    harness.atexit.register(harness.shutil.rmtree, root, True)
    for name in names:
        os.symlink(os.path.join(harness.SHIPPED_MODELS, name), os.path.join(root, name))
    return root


def noise(seconds, amplitude, seed=7):
    rnd = random.Random(seed)
    n = int(16000 * seconds)
    return struct.pack("<%dh" % n, *(int(rnd.gauss(0, amplitude)) for _ in range(n)))


def start(repo):
    """harkd loads its models before it listens: on a loaded host a decoder
    pool and libtorch take longer than the harness's usual 30 s."""
    server = harness.Harkd(repo, grpc=True, wait_ready=False)
    server.wait_live(240)
    server.wait_ready(240)
    return server


class Gated(harness.ServerTest):
    GRPC = True

    @classmethod
    def setUpClass(cls):
        cls.repo_dir = None
        cls.server = start(gated_repo())
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.stub = rasr_grpc.RivaSpeechRecognitionStub(cls.channel)
        base = f"ws://127.0.0.1:{cls.server.http_port}"
        cls.uri = f"{base}/v2/models/asr_silero/stream"

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        super().tearDownClass()

    def metric(self, name, model="asr_silero"):
        return harness.metric_value(self.server.metrics(), name, model=model)

    def wait_idle(self):
        for _ in range(300):
            if self.metric("hark_decoders_in_use") == 0 and self.metric("hark_asr_streams") == 0:
                return
            time.sleep(0.1)
        self.fail("asr_silero still holds decoders or streams")

    def test_recordings_close_to_the_energy_vad_over_both_protocols(self):
        ref = truth()
        wers = {"asr": [], "asr_silero": []}
        for path in FILES:
            rate, audio = pcm(path)
            fid = os.path.basename(path)[:-4]
            finals, replies = asyncio.run(ws_stream(self.uri, audio, rate))
            self.assertEqual(len(replies), (len(audio) + CHUNK - 1) // CHUNK)
            texts = {"asr_silero": joined(finals), "asr": reference(path)}
            for model in wers:
                wers[model].append(wer(ref[fid], texts[model]))
            # words carry stream times, in order, inside the recording
            duration = len(audio) / 2 / rate
            for final in finals:
                for w in final.get("result", []):
                    self.assertLessEqual(w["start"], w["end"], w)
                    self.assertLessEqual(w["end"], duration + 0.05, w)
            if path in FILES[:2]:  # Riva: the same stream, the same transcript
                responses, _ = riva_stream(self.stub, audio, rate=rate, model="asr_silero")
                self.assertEqual(riva_text(responses), texts["asr_silero"], path)
        mean = {m: sum(v) / len(v) for m, v in wers.items()}
        print(f"\nWER vs the recordings' transcripts: asr (energy VAD) {mean['asr']:.3f}, "
              f"asr_silero {mean['asr_silero']:.3f} "
              f"(per file: {[round(w, 3) for w in wers['asr_silero']]})")
        self.assertLessEqual(mean["asr_silero"], mean["asr"] + 0.05)
        self.wait_idle()

    def thread_cpu(self):
        """CPU seconds of harkd's threads so far, by thread name."""
        out = {}
        root = f"/proc/{self.server.proc.pid}/task"
        for tid in os.listdir(root):
            try:
                with open(f"{root}/{tid}/stat") as f:
                    head, _, rest = f.read().rpartition(")")
            except FileNotFoundError:
                continue
            name = head.partition("(")[2]
            fields = rest.split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf(
                "SC_CLK_TCK")
        return out

    def test_speech_decodes_off_the_workers(self):
        # A stream inside an utterance decodes on the pool's decode threads
        # (decode_threads), so the engine's workers stay free for the other
        # streams' chunks and silero_vad's forward calls: the recogniser's
        # CPU shows on `ps-decode`, not on `hark-worker`.
        rate, audio = pcm(FILES[0])
        before = self.thread_cpu()
        finals, _ = asyncio.run(ws_stream(self.uri, audio, rate))
        self.assertTrue(joined(finals))
        self.wait_idle()
        after = self.thread_cpu()
        spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("ps-decode", "hark-worker")}
        self.assertGreater(spent["ps-decode"], 2 * spent["hark-worker"], spent)

    def test_silence_and_noise_give_empty_finals_and_hold_no_decoder(self):
        streams = [bytes(16000 * 2 * 4), noise(4, 300), noise(4, 1500, seed=3)]
        held = []

        async def watch(done):
            while not done.is_set():
                held.append(self.metric("hark_decoders_in_use"))
                await asyncio.sleep(0.05)

        async def go():
            done = asyncio.Event()
            w = asyncio.create_task(watch(done))
            got = await asyncio.gather(*(ws_stream(self.uri, a) for a in streams))
            done.set()
            await w
            return got

        for finals, _ in asyncio.run(go()):
            self.assertEqual(joined(finals), "")
        self.assertTrue(held)
        self.assertEqual(max(held), 0, held)
        # the frames of concurrent streams shared forward calls
        text = self.server.metrics()
        count = harness.metric_value(text, "nv_inference_count", model="silero_vad", version="1")
        execs = harness.metric_value(text, "nv_inference_exec_count", model="silero_vad",
                                     version="1")
        self.assertGreater(count, execs)
        self.wait_idle()

    def test_endpointing_config_changes_where_utterances_open_and_close(self):
        rate, audio = pcm(FILES[0])

        def finals(**ep):
            cfg = rasr.EndpointingConfig(**ep) if ep else None
            responses, _ = riva_stream(self.stub, audio, rate=rate, model="asr_silero",
                                       endpointing_config=cfg)
            fin = [r.results[0] for r in responses if r.results and r.results[0].is_final]
            return [f.alternatives[0].transcript for f in fin if f.alternatives[0].transcript]

        default = finals()
        self.assertTrue(default)
        # any 2 of 8 frames of silence close an utterance: more, shorter ones
        eager = finals(stop_history=256, stop_threshold=0.25)
        self.assertGreater(len(eager), len(default), (eager, default))
        # 10 s of uninterrupted speech before one opens: none does
        self.assertEqual(finals(start_history=10000, start_threshold=1.0), [])
        self.wait_idle()

    def test_a_stream_ending_mid_frame_and_a_client_vanishing_mid_frame(self):
        rate, audio = pcm(FILES[1])
        cut = audio[:(len(audio) // 2 // 512) * 1024 - 2 * 300]  # 212 samples into a frame
        finals, _ = asyncio.run(ws_stream(self.uri, cut, rate))
        self.assertTrue(joined(finals))

        async def vanish():
            ws = await websockets.connect(self.uri, max_size=None)
            await ws.send(json.dumps({"config": {"sample_rate": 16000}}))
            await ws.send(audio[:32000 + 700])  # one second and 350 samples
            await asyncio.wait_for(ws.recv(), 30)
            await ws.send(audio[32700:32700 + 333])  # 166 samples and a half: odd, refused
            ws.transport.abort()

        asyncio.run(vanish())
        self.wait_idle()
        finals, _ = asyncio.run(ws_stream(self.uri, cut, rate))
        self.assertTrue(joined(finals))
        self.assertEqual(self.metric("hark_asr_streams"), 0)


class GatedWithoutVad(harness.ServerTest):
    """asr_silero served without silero_vad: its streams fail at once with
    the reason; harkd serves on."""
    GRPC = True

    @classmethod
    def setUpClass(cls):
        cls.repo_dir = None
        cls.server = start(gated_repo(("asr_silero",)))

    def test_streams_fail_naming_the_missing_vad(self):
        rate, audio = pcm(FILES[0])
        base = f"ws://127.0.0.1:{self.server.http_port}/v2/models"

        async def ws():
            async with websockets.connect(f"{base}/asr_silero/stream") as c:
                await c.send(audio[:CHUNK])
                try:
                    await asyncio.wait_for(c.recv(), 30)
                except websockets.ConnectionClosed:
                    pass
                await asyncio.wait_for(c.wait_closed(), 30)
                return c.close_code, c.close_reason

        code, reason = asyncio.run(ws())
        self.assertEqual(code, 1013, reason)
        self.assertIn("silero_vad", reason)
        with grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}") as ch:
            stub = rasr_grpc.RivaSpeechRecognitionStub(ch)
            with self.assertRaises(grpc.RpcError) as ctx:
                riva_stream(stub, audio[:CHUNK * 3], rate=rate, model="asr_silero")
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.UNAVAILABLE)
            self.assertIn("silero_vad", ctx.exception.details())
        status, _, _ = self.server.request("GET", "/v2/health/live")
        self.assertEqual(status, 200)
        self.assertEqual(harness.metric_value(self.server.metrics(), "hark_asr_streams",
                                              model="asr_silero"), 0)


if __name__ == "__main__":
    harness.main()
