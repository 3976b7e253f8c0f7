"""Model repository over HTTP: index, explicit load/unload, a model that
fails to load while the others serve, and unloading with requests in
flight (each still gets its final response)."""
import asyncio
import json
import os
import shutil
import threading
import time
import unittest

import websockets

from harness import Harkd, MODELS, main, make_repo, simple_request

SIMPLE = open(os.path.join(MODELS, "simple", "config.pbtxt")).read()
SLOW = """
name: "slow"
backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
parameters { key: "execute_delay_us" value: { string_value: "100000" } }
"""
ECHO = open(os.path.join(MODELS, "echo_asr", "config.pbtxt")).read()
BROKEN = 'name: "broken"\nbackend: "simple"\nmax_batch_size: 8\nbogus_field: 3\n'


class Repository(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = make_repo({"simple": SIMPLE, "slow": SLOW, "broken": BROKEN, "echo_asr": ECHO})
        os.makedirs(os.path.join(cls.repo, "simple", "2"))
        cls.server = Harkd(cls.repo, ["--model-control-mode", "explicit", "--load-model", "simple",
                                      "--load-model", "slow"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, ignore_errors=True)

    def index(self):
        status, doc = self.server.json("POST", "/v2/repository/index")
        self.assertEqual(status, 200, doc)
        return {(e["name"], e.get("version")): e for e in doc}

    def test_index_and_latest_version(self):
        idx = self.index()
        self.assertEqual(idx[("simple", "2")]["state"], "READY")
        self.assertNotIn(("simple", "1"), idx)  # latest policy: only version 2
        self.assertIn("broken", [k[0] for k in idx])
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request([1] * 16, [2] * 16))
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["model_version"], "2")

    def test_broken_model_reports_reason(self):
        status, doc = self.server.json("POST", "/v2/repository/models/broken/load")
        self.assertEqual(status, 400, doc)
        self.assertIn("bogus_field", doc["error"])
        self.assertIn("config.pbtxt:4", doc["error"])
        idx = self.index()
        entry = idx[("broken", None)]
        self.assertEqual(entry["state"], "UNAVAILABLE")
        self.assertIn("bogus_field", entry["reason"])
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request([1] * 16, [2] * 16))
        self.assertEqual(status, 200, doc)

    def test_load_unknown_and_bad_name(self):
        status, doc = self.server.json("POST", "/v2/repository/models/missing/load")
        self.assertEqual(status, 404, doc)
        status, doc = self.server.json("POST", "/v2/repository/models/..%2F..%2Fetc/load")
        self.assertIn(status, (400, 404), doc)

    def test_unload_with_requests_in_flight(self):
        results = []
        lock = threading.Lock()

        def one():
            r = self.server.json("POST", "/v2/models/slow/infer",
                                 {"inputs": [{"name": "INPUT0", "shape": [1, 16],
                                              "datatype": "FP32", "data": [1.0] * 16}]})
            with lock:
                results.append(r)
        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.05)
        status, doc = self.server.json("POST", "/v2/repository/models/slow/unload")
        self.assertEqual(status, 200, doc)
        for t in threads:
            t.join()
        self.assertEqual(len(results), 8)
        for status, doc in results:
            # In flight when unload began: served. Arrived after: refused.
            self.assertIn(status, (200, 400, 503), doc)
        self.assertGreaterEqual(sum(1 for s, _ in results if s == 200), 1)
        status, doc = self.server.json("GET", "/v2/models/slow/ready")
        self.assertNotEqual(status, 200)
        self.assertEqual(self.index()[("slow", None)]["state"], "UNAVAILABLE")
        status, doc = self.server.json("POST", "/v2/repository/models/slow/load")
        self.assertEqual(status, 200, doc)
        self.assertEqual(self.server.request("GET", "/v2/models/slow/ready")[0], 200)


    def test_reloads_while_streams_pin_old_versions_are_bounded(self):
        # Each reload leaves the old version serving the stream that pinned
        # it; reloads faster than streams end would pile versions up (a
        # speech model's decoder pool each). Two retiring versions at most:
        # the next reload is refused with the reason, and succeeds once
        # the streams have ended.
        def load():
            return self.server.json("POST", "/v2/repository/models/echo_asr/load")
        status, doc = load()
        self.assertEqual(status, 200, doc)
        uri = f"ws://127.0.0.1:{self.server.http_port}/v2/models/echo_asr/stream"

        async def go():
            streams = []
            for _ in range(2):  # each pins the version loaded now, then a reload
                ws = await websockets.connect(uri)
                await ws.send(b"\0\0" * 800)
                self.assertIn("partial", json.loads(await ws.recv()))
                streams.append(ws)
                status, doc = await asyncio.get_running_loop().run_in_executor(None, load)
                self.assertEqual(status, 200, doc)
            status, doc = await asyncio.get_running_loop().run_in_executor(None, load)
            self.assertEqual(status, 503, doc)
            self.assertIn("2 earlier versions of it still serve streams", doc["error"])
            for ws in streams:
                await ws.send('{"eof" : 1}')
                await ws.recv()
                await ws.close()
        asyncio.run(go())
        for _ in range(100):  # the retired versions finish with their streams
            status, doc = load()
            if status == 200:
                break
            time.sleep(0.1)
        self.assertEqual(status, 200, doc)


class NoneMode(unittest.TestCase):
    def test_load_refused_and_failed_model_not_ready(self):
        repo = make_repo({"simple": SIMPLE, "broken": BROKEN})
        try:
            server = Harkd(repo, wait_ready=False)
            try:
                # strict readiness: one model failed, so not ready; live though
                self.assertEqual(server.request("GET", "/v2/health/ready")[0], 400)
                status, doc = server.json("POST", "/v2/models/simple/infer",
                                          simple_request([1] * 16, [2] * 16))
                self.assertEqual(status, 200, doc)
                status, doc = server.json("POST", "/v2/repository/models/simple/unload")
                self.assertNotEqual(status, 200, doc)
                self.assertIn("explicit", doc["error"])
            finally:
                server.stop()
        finally:
            shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
