"""Model lifecycle and shutdown against the real harkd: repository polling
(new, changed, removed and broken models), reloads that keep serving (a live
WebSocket stream finishes on the version it began on while new streams and
requests go to the new one), and graceful shutdown on SIGTERM (readiness
off at once, new work refused with 503, live streams finish, the rest are
closed with a reason after --exit-timeout-secs, exit code 0).

Poll tests copy models into a temporary repository; models/ is never
modified."""
import asyncio
import glob
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import wave

import websockets

from harness import MODELS, Harkd, main, make_repo, metric_value, simple_request

LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"
POLL = ("--model-control-mode", "poll", "--repository-poll-secs", "0.2")


def copy_repo(*names):
    root = tempfile.mkdtemp(prefix="hark-life-")
    for name in names:
        shutil.copytree(os.path.join(MODELS, name), os.path.join(root, name))
    return root


def edit_config(repo, name, old, new):
    path = os.path.join(repo, name, "config.pbtxt")
    with open(path) as f:
        text = f.read()
    assert old in text, (old, path)
    write_config(repo, name, text.replace(old, new))


def write_config(repo, name, text):
    # Write beside and rename: the poller never sees half a file.
    path = os.path.join(repo, name, "config.pbtxt")
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def wait_for(pred, timeout=15, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def utterance_samples(n):
    return f'key: "utterance_samples" value: {{ string_value: "{n}" }}'


def pcm(samples):
    return b"\x01\x00" * samples


def run(coro, timeout=120):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def index(server):
    status, doc = server.json("POST", "/v2/repository/index", {})
    assert status == 200, (status, doc)
    return {(e["name"], e.get("version", "")): e for e in doc}


def model_config(server, name):
    status, doc = server.json("GET", f"/v2/models/{name}/config")
    return doc if status == 200 else None


def infer_simple(server):
    return server.json("POST", "/v2/models/simple/infer",
                       simple_request(list(range(16)), [1] * 16))


class InferLoad:
    """Steady KServe infers on `simple` from a thread; counts any that fail."""

    def __init__(self, server):
        self.server, self.ok, self.failed = server, 0, []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop.is_set():
            status, doc = infer_simple(self.server)
            if status == 200 and doc["outputs"][0]["data"] == list(range(1, 17)):
                self.ok += 1
            else:
                self.failed.append((status, doc))
            time.sleep(0.01)

    def finish(self):
        self.stop.set()
        self.thread.join(30)
        return self.ok, self.failed


class Poll(unittest.TestCase):
    def setUp(self):
        self.repo = copy_repo("simple", "echo_asr")
        self.server = Harkd(self.repo, (*POLL, "--speech-model", "echo_asr"))

    def tearDown(self):
        try:
            self.server.stop()
        finally:
            shutil.rmtree(self.repo, ignore_errors=True)

    def test_new_changed_and_removed_models(self):
        s = self.server
        self.assertEqual(s.request("GET", "/v2/models/identity/ready")[0], 400)
        shutil.copytree(os.path.join(MODELS, "identity"), os.path.join(self.repo, "identity"))
        wait_for(lambda: s.request("GET", "/v2/models/identity/ready")[0] == 200, what="new model")
        self.assertEqual(index(s)[("identity", "1")]["state"], "READY")

        self.assertEqual(model_config(s, "simple")["max_batch_size"], 8)
        edit_config(self.repo, "simple", "max_batch_size: 8", "max_batch_size: 4")
        wait_for(lambda: (model_config(s, "simple") or {}).get("max_batch_size") == 4,
                 what="changed config")
        self.assertEqual(infer_simple(s)[0], 200)
        load = metric_value(s.metrics(), "nv_model_load_duration_secs", model="simple",
                            version="1")
        self.assertIsNotNone(load)
        self.assertGreater(load, 0)
        self.assertLess(load, 60)

        shutil.rmtree(os.path.join(self.repo, "identity"))
        wait_for(lambda: s.request("GET", "/v2/models/identity/ready")[0] != 200,
                 what="removed model")
        entry = index(s)[("identity", "")]
        self.assertEqual(entry["state"], "UNAVAILABLE")
        self.assertIn("unloaded", entry["reason"])
        status, doc = s.json("POST", "/v2/models/identity/infer", {"inputs": []})
        self.assertIn(status, (400, 404, 503))
        self.assertIn("identity", doc["error"])

        # Added back unchanged: loads again.
        shutil.copytree(os.path.join(MODELS, "identity"), os.path.join(self.repo, "identity"))
        wait_for(lambda: s.request("GET", "/v2/models/identity/ready")[0] == 200,
                 what="model added back")

    def test_broken_config_keeps_the_old_version_serving(self):
        s = self.server
        with open(os.path.join(MODELS, "simple", "config.pbtxt")) as f:
            write_config(self.repo, "simple", f.read() + "\nno_such_field: 1\n")
        entry = wait_for(lambda: index(s)[("simple", "1")].get("reason"), what="failure reason")
        self.assertIn("no_such_field", entry)
        self.assertEqual(index(s)[("simple", "1")]["state"], "READY")
        self.assertEqual(infer_simple(s)[0], 200)
        self.assertEqual(model_config(s, "simple")["max_batch_size"], 8)
        self.assertEqual(s.request("GET", "/v2/models/simple/ready")[0], 200)
        # Fixed: loads, and the reason goes.
        edit_config(self.repo, "simple", "no_such_field: 1", "")
        edit_config(self.repo, "simple", "max_batch_size: 8", "max_batch_size: 2")
        wait_for(lambda: (model_config(s, "simple") or {}).get("max_batch_size") == 2,
                 what="fixed config")
        self.assertNotIn("reason", index(s)[("simple", "1")])
        self.assertIn("failed to load model 'simple'", s.output())

    def test_a_new_broken_model_is_listed_with_its_reason(self):
        s = self.server
        os.makedirs(os.path.join(self.repo, "bad", "1"))
        write_config(self.repo, "bad", 'name: "bad"\nbackend: "simple"\nmax_batch_size: x\n')
        entry = wait_for(lambda: index(s).get(("bad", ""), {}).get("state") and
                         index(s)[("bad", "")], what="broken model in the index")
        self.assertEqual(entry["state"], "UNAVAILABLE")
        self.assertIn("max_batch_size", entry["reason"])
        self.assertEqual(s.request("GET", "/v2/health/ready")[0], 400)  # strict readiness

    def test_explicit_load_and_unload_are_refused(self):
        for action in ("load", "unload"):
            status, doc = self.server.json("POST", f"/v2/repository/models/simple/{action}")
            self.assertEqual(status, 400)
            self.assertEqual(doc["error"],
                             "explicit model load / unload is not allowed if polling is enabled")

    def test_reload_with_a_live_stream(self):
        """The stream that began before the reload finishes on the old
        version (utterance_samples 0: one final at eof holding every sample);
        a stream begun after gets the new config (a final every 1000
        samples); infers on simple succeed throughout."""
        s = self.server
        uri = f"ws://127.0.0.1:{s.http_port}/"
        load = InferLoad(s)

        async def go():
            async with websockets.connect(uri) as old:
                sent = 0
                for _ in range(3):
                    await old.send(pcm(800))
                    sent += 800
                    self.assertEqual(json.loads(await old.recv()), {"partial": f"{sent} samples"})
                for i in range(3):  # three reloads of echo_asr, and of simple
                    edit_config(self.repo, "echo_asr", utterance_samples(i * 1000),
                                utterance_samples((i + 1) * 1000))
                    edit_config(self.repo, "simple", f"max_batch_size: {8 - i}",
                                f"max_batch_size: {7 - i}")
                    want = str((i + 1) * 1000)
                    await asyncio.get_running_loop().run_in_executor(None, lambda: wait_for(
                        lambda: any(p["key"] == "utterance_samples" and
                                    p["value"]["string_value"] == want
                                    for p in _params(model_config(s, "echo_asr"))),
                        what="reloaded echo_asr"))
                    for _ in range(2):  # the live stream goes on, on the old version
                        await old.send(pcm(800))
                        sent += 800
                        self.assertEqual(json.loads(await old.recv()),
                                         {"partial": f"{sent} samples"})
                async with websockets.connect(uri) as new:
                    await new.send(pcm(3500))
                    reply = json.loads(await new.recv())
                    self.assertIn("text", reply)  # utterance_samples 3000: a final
                    await new.send('{"eof" : 1}')
                    await new.recv()
                await old.send('{"eof" : 1}')
                final = json.loads(await old.recv())
                self.assertEqual(final["text"], str(sent))
                await old.wait_closed()
                self.assertEqual(old.close_code, 1000)
        run(go())
        ok, failed = load.finish()
        self.assertEqual(failed, [])
        self.assertGreater(ok, 0)
        wait_for(lambda: "its live requests and streams finished" in s.output(),
                 what="the old version to unload after its stream")

    def test_removed_model_lets_live_streams_finish(self):
        s = self.server
        uri = f"ws://127.0.0.1:{s.http_port}/"

        async def go():
            async with websockets.connect(uri) as ws:
                await ws.send(pcm(100))
                await ws.recv()
                shutil.rmtree(os.path.join(self.repo, "echo_asr"))
                await asyncio.get_running_loop().run_in_executor(None, lambda: wait_for(
                    lambda: s.request("GET", "/v2/models/echo_asr/ready")[0] != 200,
                    what="unload"))
                with self.assertRaises(websockets.InvalidStatusCode) as cm:
                    await websockets.connect(uri)
                self.assertIn(cm.exception.status_code, (400, 503))
                await ws.send(pcm(100))  # the live stream goes on
                self.assertEqual(json.loads(await ws.recv()), {"partial": "200 samples"})
                await ws.send('{"eof" : 1}')
                self.assertEqual(json.loads(await ws.recv())["text"], "200")
        run(go())


def _params(config):
    params = (config or {}).get("parameters", {})
    if isinstance(params, dict):  # Triton's JSON: {key: {"string_value": v}}
        return [{"key": k, "value": v} for k, v in params.items()]
    return params


class UnloadTimeout(unittest.TestCase):
    def test_stream_outliving_the_unload_timeout_is_closed_with_a_reason(self):
        repo = copy_repo("echo_asr")
        server = Harkd(repo, (*POLL, "--speech-model", "echo_asr",
                              "--model-unload-timeout-secs", "1"))
        try:
            uri = f"ws://127.0.0.1:{server.http_port}/"

            async def go():
                async with websockets.connect(uri) as ws:
                    await ws.send(pcm(100))
                    await ws.recv()
                    edit_config(repo, "echo_asr", utterance_samples(0), utterance_samples(5000))
                    t0 = time.time()
                    try:
                        while time.time() - t0 < 15:
                            await ws.send(pcm(100))
                            self.assertIn("partial", json.loads(await ws.recv()))
                            await asyncio.sleep(0.1)
                        self.fail("the stream outlived the unload timeout")
                    except websockets.ConnectionClosed as e:
                        self.assertEqual(e.code, 1013)
                        self.assertIn("unloading", e.reason)
                    self.assertGreater(time.time() - t0, 0.8)
            run(go())
        finally:
            server.stop()
            shutil.rmtree(repo, ignore_errors=True)


class RealAsrReload(unittest.TestCase):
    """A reload of the real pocketsphinx model while a LibriVox recording
    streams: the stream's transcript equals the library's own."""

    def test_asr_reload_mid_stream(self):
        path = sorted(glob.glob(os.path.join(LIBRIVOX, "*.wav")))[1]
        ref = subprocess.run(["pocketsphinx_continuous", "-infile", path], capture_output=True,
                             text=True, check=True).stdout
        ref = " ".join(line.strip() for line in ref.splitlines() if line.strip())
        with wave.open(path) as w:
            rate, audio = w.getframerate(), w.readframes(w.getnframes())
        repo = copy_repo("asr", "simple")
        server = Harkd(repo, POLL)
        load = InferLoad(server)
        try:
            uri = f"ws://127.0.0.1:{server.http_port}/"

            async def go():
                finals = []
                chunk = 3200
                async with websockets.connect(uri, max_size=None) as ws:
                    await ws.send(json.dumps({"config": {"sample_rate": rate}}))
                    for i, off in enumerate(range(0, len(audio), chunk)):
                        if i == 10:  # 1 s in: change the config (a comment is a change)
                            with open(os.path.join(repo, "asr", "config.pbtxt"), "a") as f:
                                f.write("# reloaded mid-stream\n")
                        await ws.send(audio[off:off + chunk])
                        reply = json.loads(await ws.recv())
                        if "text" in reply:
                            finals.append(reply["text"])
                        await asyncio.sleep(0.05)
                    # Both versions live now (the old one holds this stream):
                    # /metrics still carries each series once.
                    wait_for(lambda: "reloaded model 'asr'" in server.output(), timeout=30,
                             what="the reload")
                    series = [line.rsplit(" ", 1)[0] for line in server.metrics().splitlines()
                              if line and not line.startswith("#")]
                    dups = sorted({x for x in series if series.count(x) > 1})
                    self.assertEqual(dups, [])
                    await ws.send('{"eof" : 1}')
                    finals.append(json.loads(await ws.recv())["text"])
                    await ws.wait_closed()
                    self.assertEqual(ws.close_code, 1000)
                return " ".join(t for t in finals if t)
            text = run(go(), timeout=180)
            self.assertEqual(text, ref)
            out = server.output()
            self.assertIn("reloaded model 'asr'", out)
            wait_for(lambda: "its live requests and streams finished" in server.output(),
                     timeout=30, what="the old asr to unload after the stream")
        finally:
            ok, failed = load.finish()
            server.stop()
            shutil.rmtree(repo, ignore_errors=True)
        self.assertEqual(failed, [])
        self.assertGreater(ok, 0)


class Shutdown(unittest.TestCase):
    def start(self, *args):
        self.repo = copy_repo("simple", "echo_asr")
        self.server = Harkd(self.repo, ("--speech-model", "echo_asr", *args))
        self.uri = f"ws://127.0.0.1:{self.server.http_port}/"

    def tearDown(self):
        try:
            self.server.stop()
        finally:
            shutil.rmtree(self.repo, ignore_errors=True)

    def sigterm_with_live_stream(self, exit_timeout, then):
        """Starts harkd, opens a stream that has had one reply, sends SIGTERM,
        then awaits then(ws, t0) with t0 the time of the signal; returns the
        server once the stream's connection is gone."""
        self.start("--exit-timeout-secs", str(exit_timeout))
        s = self.server

        async def go():
            async with websockets.connect(self.uri) as ws:
                await ws.send(pcm(100))
                await ws.recv()
                t0 = time.time()
                s.proc.send_signal(signal.SIGTERM)
                await then(ws, t0)
        run(go())
        return s

    def test_sigterm_drains_a_live_stream(self):
        async def then(ws, t0):
            s = self.server
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: s.request("GET", "/v2/health/ready")[0] == 400, timeout=2,
                what="not ready"))
            self.assertLess(time.time() - t0, 2)
            self.assertEqual(s.request("GET", "/v2/health/live")[0], 200)
            self.assertEqual(s.request("GET", "/v2/models/simple/ready")[0], 400)
            status, doc = await loop.run_in_executor(None, lambda: infer_simple(s))
            self.assertEqual(status, 503)
            self.assertIn("shutting down", doc["error"])
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                await websockets.connect(self.uri)
            self.assertEqual(cm.exception.status_code, 503)
            for i in range(5):  # the live stream keeps sending audio
                await ws.send(pcm(100))
                self.assertEqual(json.loads(await ws.recv()),
                                 {"partial": f"{200 + 100 * i} samples"})
            self.assertIsNone(s.proc.poll())
            await ws.send('{"eof" : 1}')
            self.assertEqual(json.loads(await ws.recv())["text"], "600")
            await ws.wait_closed()
            self.assertEqual(ws.close_code, 1000)
        s = self.sigterm_with_live_stream(30, then)
        self.assertEqual(s.proc.wait(10), 0)
        self.assertIn("drained", s.output())

    def test_stream_that_never_ends_is_closed_after_the_exit_timeout(self):
        async def then(ws, t0):
            try:
                while True:  # still served until the timeout
                    await ws.send(pcm(100))
                    self.assertIn("partial", json.loads(await ws.recv()))
                    await asyncio.sleep(0.2)
            except websockets.ConnectionClosed as e:
                self.assertEqual(e.code, 1001)
                self.assertEqual(e.reason, "server is shutting down")
            took = time.time() - t0
            self.assertGreater(took, 1.5)
            self.assertLess(took, 10)
        s = self.sigterm_with_live_stream(2, then)
        self.assertEqual(s.proc.wait(10), 0)
        self.assertIn("exit timeout", s.output())

    def test_a_stuck_backend_call_cannot_hold_the_exit(self):
        # Issue 13 finding 8: shutdown ran 37-60+ s past the exit timeout
        # while a backend call ran. A request that executes for 10 s is in
        # flight at SIGTERM; harkd exits (status 1, with the reason) within
        # the exit timeout plus the watchdog's 5 s grace.
        stuck = ('name: "stuck"\nbackend: "identity"\nmax_batch_size: 8\n'
                 'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                 'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n'
                 'parameters { key: "execute_delay_us" value: { string_value: "10000000" } }\n')
        self.repo = make_repo({"stuck": stuck})
        self.server = Harkd(self.repo, ("--exit-timeout-secs", "1"))
        s = self.server
        body = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                            "data": [1.0] * 16}]}
        t = threading.Thread(target=lambda: s.json("POST", "/v2/models/stuck/infer", body),
                             daemon=True)
        t.start()
        time.sleep(0.5)  # the request is executing
        t0 = time.time()
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(30)
        took = time.time() - t0
        self.assertEqual(rc, 1)
        self.assertLess(took, 1 + 5 + 3)
        self.assertGreater(took, 1 + 5 - 1)
        self.assertIn("shutdown did not finish within 6 s", s.stop(expect_rc=1))

    def test_second_signal_exits_at_once(self):
        async def then(ws, t0):
            s = self.server
            await asyncio.sleep(0.3)
            self.assertIsNone(s.proc.poll())  # draining, waiting for the stream
            t0 = time.time()
            s.proc.send_signal(signal.SIGINT)
            with self.assertRaises(websockets.ConnectionClosed) as cm:
                await ws.recv()
            self.assertEqual(cm.exception.code, 1001)
            await asyncio.get_running_loop().run_in_executor(None, s.proc.wait, 10)
            self.assertLess(time.time() - t0, 5)
        s = self.sigterm_with_live_stream(60, then)
        self.assertEqual(s.proc.returncode, 0)

    def test_idle_server_exits_at_once(self):
        self.start()
        t0 = time.time()
        self.server.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.server.proc.wait(10), 0)
        self.assertLess(time.time() - t0, 3)


if __name__ == "__main__":
    main()
