"""Sequence batching seen from a KServe HTTP client of the real harkd:
running sums per sequence with interleaved concurrent sequences (uint64 and
string ids), START required, restart, idle expiry, one-shot requests,
implicit state, control inputs, metrics, and unloading with sequences
live (their state freed: the backend's live-state count returns to 0, and
an ASan build would report a leak); and issue 12's 10,000 sequences
started and ended, and hundreds left to idle out, after which the implicit
state the engine holds (hark_sequence_state_bytes) is back to 0."""
import http.client
import json
import os
import threading
import time
import unittest

from harness import Harkd, MODELS, main, make_repo, metric_value


def acc_config(name, idle_us=5000000, extra="", strategy=None, max_batch=4, count=2):
    strategy = strategy or ("oldest { max_candidate_sequences: 64 preferred_batch_size: [ 4 ] "
                            "max_queue_delay_microseconds: 1000 }")
    dims = "[ 1 ]"
    return f"""
name: "{name}"
backend: "accumulate"
max_batch_size: {max_batch}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: {dims} }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: {dims} }} ]
instance_group [ {{ count: {count} kind: KIND_CPU }} ]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  {strategy}
}}
{extra}
"""


with open(os.path.join(MODELS, "accumulate_implicit", "config.pbtxt")) as f:
    IMPLICIT = f.read()

REPO = {
    "accumulate": acc_config("accumulate"),
    "acc_direct": acc_config("acc_direct", strategy="direct { }", max_batch=2),
    "acc_short": acc_config("acc_short", idle_us=500000),
    "acc_slow": acc_config("acc_slow", max_batch=0, count=1,
                           strategy="oldest { max_candidate_sequences: 2 }",
                           extra='parameters { key: "execute_delay_us" '
                                 'value: { string_value: "300000" } }'),
    "accumulate_implicit": IMPLICIT,
}


def body(value, seq=None, start=False, end=False, batched=True):
    doc = {"inputs": [{"name": "INPUT", "shape": [1, 1] if batched else [1],
                       "datatype": "INT32", "data": [value]}]}
    params = {}
    if seq is not None:
        params["sequence_id"] = seq
    if start:
        params["sequence_start"] = True
    if end:
        params["sequence_end"] = True
    if params:
        doc["parameters"] = params
    return doc


class Sequences(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = make_repo(REPO)
        cls.server = Harkd(cls.repo, ["--max-queue-size", "16"])

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop()
        finally:
            import shutil
            shutil.rmtree(cls.repo, ignore_errors=True)

    def infer(self, model, doc):
        return self.server.json("POST", f"/v2/models/{model}/infer", doc)

    def out(self, doc):
        return doc["outputs"][0]["data"][0]

    def run_stream(self, model, seq, values, errors, batched=True):
        total = 0
        for i, v in enumerate(values):
            status, doc = self.infer(model, body(v, seq, start=i == 0, end=i == len(values) - 1,
                                                 batched=batched))
            total += v
            if status != 200 or self.out(doc) != total:
                errors.append((seq, i, status, doc, total))
                return
            if doc.get("parameters", {}).get("sequence_id") != seq:
                errors.append((seq, i, "sequence_id not echoed", doc))
                return

    def concurrent_streams(self, model, ids, steps=12, batched=True):
        errors = []
        threads = [threading.Thread(target=self.run_stream,
                                    args=(model, sid, [n * 10 + k for k in range(steps)], errors,
                                          batched))
                   for n, sid in enumerate(ids)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_interleaved_sequences_keep_their_sums(self):
        ids = [11, 12, 2**64 - 1, 2**40, "call-a", "call-b", "7", "stream \u00e9"]
        self.concurrent_streams("accumulate", ids)

    def test_direct_strategy(self):
        self.concurrent_streams("acc_direct", [101, 102, "d-1", "d-2", 105, 106])

    def test_implicit_state(self):
        # The engine feeds SUM_IN and takes SUM_OUT back; clients never see them.
        self.concurrent_streams("accumulate_implicit", [31, 32, "imp-a", "imp-b"], batched=False)
        status, doc = self.infer("accumulate_implicit", body(5, 41, start=True, batched=False))
        self.assertEqual(status, 200, doc)
        self.assertEqual([o["name"] for o in doc["outputs"]], ["OUTPUT"])
        # Control inputs: START true on the first request, CORRID the id.
        self.assertEqual(doc["parameters"]["control_START"], "1")
        self.assertEqual(doc["parameters"]["control_CORRID"], "41")
        status, doc = self.infer("accumulate_implicit", body(6, 41, end=True, batched=False))
        self.assertEqual((status, self.out(doc)), (200, 11), doc)
        self.assertEqual(doc["parameters"]["control_START"], "0")

    def test_missing_start_is_refused(self):
        for sid in (424242, "never-started"):
            status, doc = self.infer("accumulate", body(1, sid))
            self.assertEqual(status, 400, doc)
            self.assertIn(str(sid), doc["error"])
            self.assertIn("START", doc["error"])
        # After END the id is gone: it needs START again.
        self.assertEqual(self.infer("accumulate", body(1, 77, start=True, end=True))[0], 200)
        status, doc = self.infer("accumulate", body(1, 77))
        self.assertEqual(status, 400, doc)
        self.assertIn("START", doc["error"])

    def test_start_restarts_a_live_sequence(self):
        status, doc = self.infer("accumulate", body(5, "restart", start=True))
        self.assertEqual((status, self.out(doc)), (200, 5), doc)
        status, doc = self.infer("accumulate", body(5, "restart"))
        self.assertEqual((status, self.out(doc)), (200, 10), doc)
        status, doc = self.infer("accumulate", body(1, "restart", start=True))
        self.assertEqual((status, self.out(doc)), (200, 1), doc)
        status, doc = self.infer("accumulate", body(1, "restart", end=True))
        self.assertEqual((status, self.out(doc)), (200, 2), doc)

    def test_one_shot_without_sequence_id(self):
        # hark extension: no id means a one-shot sequence with fresh state.
        for _ in range(3):
            status, doc = self.infer("accumulate", body(9))
            self.assertEqual((status, self.out(doc)), (200, 9), doc)
            self.assertNotIn("sequence_id", doc.get("parameters", {}))

    def test_idle_sequence_times_out(self):
        status, doc = self.infer("acc_short", body(3, 555, start=True))
        self.assertEqual(status, 200, doc)
        status, doc = self.infer("acc_short", body(3, "idle-s", start=True))
        self.assertEqual(status, 200, doc)
        time.sleep(1.3)
        for sid in (555, "idle-s"):
            status, doc = self.infer("acc_short", body(1, sid))
            self.assertEqual(status, 400, doc)
            self.assertIn("timed out idle", doc["error"])
            self.assertIn(str(sid), doc["error"])
        # START begins it again from zero.
        status, doc = self.infer("acc_short", body(4, 555, start=True, end=True))
        self.assertEqual((status, self.out(doc)), (200, 4), doc)

    def test_one_at_a_time_and_backlog_full(self):
        # acc_slow: one instance, 300 ms per execution, two candidate
        # sequences, --max-queue-size 16. Requests of one sequence sent at
        # once still run one at a time, in arrival order.
        results = {}

        def send(key, doc):
            results[key] = self.infer("acc_slow", doc)
        status, doc = self.infer("acc_slow", body(1, 900, start=True, batched=False))
        self.assertEqual(status, 200, doc)
        threads = []
        for i in range(3):
            threads.append(threading.Thread(target=send, args=(i, body(1, 900, batched=False))))
            threads[-1].start()
            time.sleep(0.05)
        for t in threads:
            t.join()
        for i in range(3):
            self.assertEqual(results[i][0], 200, results)
            self.assertEqual(self.out(results[i][1]), i + 2, results)
        # Both candidate slots held by live sequences: new sequences wait in
        # the backlog (16 requests at most), beyond that 503 "queue full".
        self.assertEqual(self.infer("acc_slow", body(1, 901, start=True, batched=False))[0], 200)
        statuses = []
        lock = threading.Lock()

        def one_shot(i):
            reply = self.infer("acc_slow", body(i, None, batched=False))
            with lock:
                statuses.append((i, reply))
        threads = [threading.Thread(target=one_shot, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        # A full backlog does not stop live sequences from ending, which
        # frees their slots for the backlog.
        status, doc = self.infer("acc_slow", body(1, 900, end=True, batched=False))
        self.assertEqual((status, self.out(doc)), (200, 5), doc)
        status, doc = self.infer("acc_slow", body(1, 901, end=True, batched=False))
        self.assertEqual((status, self.out(doc)), (200, 2), doc)
        for t in threads:
            t.join()
        refused = [r for _, r in statuses if r[0] == 503]
        served = [(i, r) for i, r in statuses if r[0] == 200]
        self.assertEqual(len(refused) + len(served), 20, statuses)
        self.assertEqual(len(served), 16, statuses)
        self.assertIn("queue full", refused[0][1]["error"])
        for i, (_, doc) in served:
            self.assertEqual(self.out(doc), i)  # one-shot: fresh state each

    def test_metrics_count_sequence_requests(self):
        self.assertEqual(self.infer("accumulate", body(2, "m-1", start=True, end=True))[0], 200)
        text = self.server.metrics()
        ok = metric_value(text, "nv_inference_request_success", model="accumulate")
        self.assertIsNotNone(ok)
        self.assertGreaterEqual(ok, 1)
        self.assertIsNotNone(metric_value(text, "nv_inference_queue_duration_us",
                                          model="accumulate"))
        self.assertGreaterEqual(metric_value(text, "nv_inference_exec_count",
                                             model="accumulate"), 1)
        status, doc = self.server.json("GET", "/v2/models/accumulate/stats")
        self.assertEqual(status, 200, doc)
        st = doc["model_stats"][0]["inference_stats"]
        self.assertGreaterEqual(int(st["success"]["count"]), 1)
        self.assertGreaterEqual(int(st["queue"]["count"]), 1)


def implicit_config(name, idle_us):
    """accumulate with its sum kept by the engine as implicit state (one
    INT32, 4 bytes a sequence), batched, and room for thousands of live
    sequences at once so none waits in the backlog."""
    return f"""
name: "{name}"
backend: "accumulate"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: 2 kind: KIND_CPU }} ]
sequence_batching {{
  max_sequence_idle_microseconds: {idle_us}
  oldest {{ max_candidate_sequences: 4096 }}
  state [
    {{
      input_name: "SUM_IN"
      output_name: "SUM_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state {{ data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }}
    }}
  ]
}}
"""


STATE_BYTES = 4  # one INT32 per sequence
IDLE_US = 2000000


class ImplicitStateMemory(unittest.TestCase):
    """Issue 12: implicit sequence state is freed when sequences end and
    when they idle out, seen in hark_sequence_state_bytes and
    hark_sequence_states and in harkd's resident memory."""

    CLIENTS = 8

    @classmethod
    def setUpClass(cls):
        cls.repo = make_repo({"acc_mem": implicit_config("acc_mem", 60000000),
                              "acc_mem_idle": implicit_config("acc_mem_idle", IDLE_US)})
        cls.server = Harkd(cls.repo)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop()  # an ASan build fails here on a leak
        finally:
            import shutil
            shutil.rmtree(cls.repo, ignore_errors=True)

    def state(self, model):
        """(bytes, sequences) of implicit state harkd holds for `model`."""
        text = self.server.metrics()
        held = metric_value(text, "hark_sequence_state_bytes", model=model, version="1")
        seqs = metric_value(text, "hark_sequence_states", model=model, version="1")
        self.assertIsNotNone(held, "no hark_sequence_state_bytes for " + model)
        self.assertIsNotNone(seqs, "no hark_sequence_states for " + model)
        return int(held), int(seqs)

    def wait_state(self, model, want, timeout=10):
        """Polls until the gauges read `want`; returns the last reading. The
        END's reply leaves before its state is freed (a moment later, on
        the worker), and idle expiry runs on the pool's timer."""
        deadline = time.time() + timeout
        while True:
            got = self.state(model)
            if got == want or time.time() > deadline:
                return got
            time.sleep(0.02)

    def run_clients(self, model, ids, steps, errors, before=0):
        """Runs one sequence per id, CLIENTS at a time, each client on its
        own keep-alive connection. `steps` are (value, start, end) sent in
        turn; the running sum (from `before`) is checked at each."""
        def connect():
            return http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=60)

        def client(mine):
            conn = connect()
            try:
                for sid in mine:
                    total = before
                    for value, start, end in steps:
                        total += value
                        doc = json.dumps(body(value, sid, start=start, end=end)).encode()
                        conn.request("POST", f"/v2/models/{model}/infer", doc,
                                     {"Content-Type": "application/json"})
                        resp = conn.getresponse()
                        reply = json.loads(resp.read())
                        if resp.status != 200 or reply["outputs"][0]["data"][0] != total:
                            errors.append((sid, value, resp.status, reply))
                            return
            except (OSError, http.client.HTTPException) as e:
                errors.append((mine[0], repr(e)))
            finally:
                conn.close()
        threads = [threading.Thread(target=client, args=(ids[i::self.CLIENTS],))
                   for i in range(self.CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def test_ten_thousand_ended_sequences_free_their_state(self):
        model = "acc_mem"
        self.assertEqual(self.state(model), (0, 0))
        errors = []
        # Open sequences hold state: 200 started (and stepped), not ended.
        opened = list(range(1, 201))
        self.run_clients(model, opened, [(1, True, False), (2, False, False)], errors)
        self.assertEqual(errors, [])
        self.assertEqual(self.state(model), (200 * STATE_BYTES, 200))
        self.run_clients(model, opened, [(3, False, True)], errors, before=3)
        self.assertEqual(errors, [])
        self.assertEqual(self.wait_state(model, (0, 0)), (0, 0))

        # Warm up (allocator arenas, connections, the pool), then the
        # baseline: resident memory with no sequence live.
        full = [(1, True, False), (2, False, False), (3, False, True)]
        self.run_clients(model, list(range(1000, 2000)), full, errors)
        self.assertEqual(errors, [])
        self.assertEqual(self.wait_state(model, (0, 0)), (0, 0))
        rss0 = self.server.settled_rss_kib()

        # 10,000 sequences (START, a step, END), CLIENTS at a time, while a
        # scraper watches the gauges: up while sequences are open, never
        # more than the open ones hold.
        seen = []
        done = threading.Event()

        def scrape():
            while not done.is_set():
                seen.append(self.state(model))
                time.sleep(0.01)
        scraper = threading.Thread(target=scrape)
        began = time.time()
        scraper.start()
        try:
            self.run_clients(model, list(range(100000, 110000)), full, errors)
        finally:
            done.set()
            scraper.join()
        took = time.time() - began
        self.assertEqual(errors, [])
        self.assertTrue(seen)
        # (The two gauges are read a moment apart, so one scrape's pair
        # need not agree. Each is bounded by the sequences open: one per
        # client, plus the one it just ended, whose END reply leaves before
        # the worker frees its state: at most two per client.)
        self.assertGreater(max(b for b, _ in seen), 0, seen[:20])
        self.assertLessEqual(max(b for b, _ in seen), 2 * self.CLIENTS * STATE_BYTES, seen[:20])
        self.assertLessEqual(max(n for _, n in seen), 2 * self.CLIENTS, seen[:20])
        self.assertEqual(self.wait_state(model, (0, 0)), (0, 0))
        ok = metric_value(self.server.metrics(), "nv_inference_request_success", model=model)
        self.assertGreaterEqual(ok, 3 * 11000 + 3 * 200)

        rss1 = self.server.settled_rss_kib()
        print(f"\n10,000 sequences in {took:.1f} s ({len(seen)} scrapes); "
              f"harkd RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB")
        # ASan's quarantine holds freed memory, so resident memory says
        # nothing there; LeakSanitizer does, when tearDownClass stops harkd.
        # Unchanged in practice; 16 MiB is about 550 bytes a request.
        if not self.server.sanitized():
            self.assertLess(rss1 - rss0, 16 * 1024, (rss0, rss1))

    def test_idle_sequences_free_their_state(self):
        model = "acc_mem_idle"
        self.assertEqual(self.state(model), (0, 0))
        errors = []
        ids = list(range(1, 301))
        began = time.time()
        self.run_clients(model, ids, [(1, True, False), (2, False, False)], errors)
        self.assertEqual(errors, [])
        held = self.state(model)
        # Each went idle after `began`: read before began + idle, all hold.
        if time.time() - began < IDLE_US / 1e6:
            self.assertEqual(held, (300 * STATE_BYTES, 300))
        # No END: max_sequence_idle_microseconds ends them, state and all.
        self.assertEqual(self.wait_state(model, (0, 0), timeout=IDLE_US / 1e6 + 10), (0, 0))
        status, doc = self.server.json("POST", f"/v2/models/{model}/infer", body(1, ids[0]))
        self.assertEqual(status, 400, doc)
        self.assertIn("timed out idle", doc["error"])


class UnloadWithLiveSequences(unittest.TestCase):
    def test_unload_frees_live_sequence_state(self):
        repo = make_repo({"accumulate": acc_config("accumulate"),
                          "acc_probe": acc_config("acc_probe")})
        server = Harkd(repo, ["--model-control-mode", "explicit", "--load-model", "*"])
        try:
            for sid in (1, 2, "three"):
                status, doc = server.json("POST", "/v2/models/accumulate/infer",
                                          body(1, sid, start=True))
                self.assertEqual(status, 200, doc)
            # The probe is a one-shot on another model: it sees the 3 states.
            status, doc = server.json("POST", "/v2/models/acc_probe/infer", body(0))
            self.assertEqual(doc["parameters"]["live_states"], "3", doc)
            status, doc = server.json("POST", "/v2/repository/models/accumulate/unload")
            self.assertEqual(status, 200, doc)
            deadline = time.time() + 10
            while True:
                status, doc = server.json("POST", "/v2/models/acc_probe/infer", body(0))
                if doc["parameters"]["live_states"] == "0" or time.time() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual(doc["parameters"]["live_states"], "0", doc)
            status, doc = server.json("POST", "/v2/models/accumulate/infer", body(1, 1))
            self.assertIn(status, (400, 404, 503), doc)
            # Reloaded, the sequences are gone: START is needed again.
            self.assertEqual(server.json("POST", "/v2/repository/models/accumulate/load")[0], 200)
            status, doc = server.json("POST", "/v2/models/accumulate/infer", body(1, 1))
            self.assertEqual(status, 400, doc)
            # Live at shutdown: the server still exits cleanly (and leak-free).
            status, doc = server.json("POST", "/v2/models/accumulate/infer",
                                      body(1, 5, start=True))
            self.assertEqual(status, 200, doc)
        finally:
            server.stop()
            import shutil
            shutil.rmtree(repo, ignore_errors=True)

    def test_idle_expiry_frees_state(self):
        repo = make_repo({"acc_short": acc_config("acc_short", idle_us=300000)})
        server = Harkd(repo)
        try:
            for sid in (1, 2):
                status, doc = server.json("POST", "/v2/models/acc_short/infer",
                                          body(1, sid, start=True))
                self.assertEqual(status, 200, doc)
            status, doc = server.json("POST", "/v2/models/acc_short/infer", body(0))
            self.assertEqual(doc["parameters"]["live_states"], "2", doc)
            time.sleep(0.8)
            status, doc = server.json("POST", "/v2/models/acc_short/infer", body(0))
            self.assertEqual(doc["parameters"]["live_states"], "0", doc)
        finally:
            server.stop()
            import shutil
            shutil.rmtree(repo, ignore_errors=True)


if __name__ == "__main__":
    main()
