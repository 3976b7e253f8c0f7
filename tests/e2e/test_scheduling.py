"""Dynamic batching, queue policies and priorities, seen from a client of
the real harkd: batches form under concurrency, full queues answer 503,
queue timeouts reject (or delay), priorities jump the queue, and every
request gets exactly one response."""
import threading
import time
import unittest

from harness import Harkd, MODELS, main, make_repo, metric_value

VEC = [0.5] * 16


def fp_request(**extra):
    doc = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32", "data": VEC}]}
    doc.update(extra)
    return doc


def slow_model(name, delay_us, batching):
    return f"""
name: "{name}"
backend: "identity"
max_batch_size: 8
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] }} ]
{batching}
parameters {{ key: "execute_delay_us" value: {{ string_value: "{delay_us}" }} }}
"""


def fire(server, model, docs, results, start_gap=0.0):
    """Sends each doc on its own connection concurrently; results[i] =
    (status, body, finish time)."""
    def one(i, doc):
        status, body = server.json("POST", f"/v2/models/{model}/infer", doc)
        results[i] = (status, body, time.monotonic())
    threads = []
    for i, doc in enumerate(docs):
        t = threading.Thread(target=one, args=(i, doc))
        t.start()
        threads.append(t)
        if start_gap:
            time.sleep(start_gap)
    return threads


class Batching(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def stats(self, model):
        status, doc = self.server.json("GET", f"/v2/models/{model}/stats")
        self.assertEqual(status, 200, doc)
        return doc["model_stats"][0]

    def run_concurrent(self, model, n=64, conc=16):
        results = [None] * n
        sem = threading.Semaphore(conc)

        def one(i):
            with sem:
                results[i] = self.server.json("POST", f"/v2/models/{model}/infer", fp_request())
        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    def test_dynamic_batching_forms_batches(self):
        results = self.run_concurrent("fixed_cost")
        self.assertTrue(all(s == 200 for s, _ in results), results)
        st = self.stats("fixed_cost")
        self.assertEqual(st["inference_count"], 64)
        self.assertLess(st["execution_count"], 64)
        sizes = [b["batch_size"] for b in st["batch_stats"]]
        self.assertTrue(any(s > 1 for s in sizes), sizes)
        self.assertTrue(all(s <= 8 for s in sizes), sizes)
        for s, doc in results:
            self.assertEqual(doc["outputs"][0]["data"], VEC)

    def test_no_batching_runs_one_at_a_time(self):
        results = self.run_concurrent("fixed_cost_nobatch", n=32)
        self.assertTrue(all(s == 200 for s, _ in results), results)
        st = self.stats("fixed_cost_nobatch")
        self.assertEqual(st["inference_count"], 32)
        self.assertEqual(st["execution_count"], 32)
        self.assertEqual([b["batch_size"] for b in st["batch_stats"]], [1])


class QueuePolicy(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = make_repo({
            # One 300 ms execution at a time, batch of 1, small queue.
            "small_queue": slow_model("small_queue", 300000, """
dynamic_batching { preferred_batch_size: [ 1 ]
  default_queue_policy { max_queue_size: 2 } }""").replace("max_batch_size: 8", "max_batch_size: 1"),
            "reject": slow_model("reject", 300000, """
dynamic_batching { preferred_batch_size: [ 1 ]
  default_queue_policy { timeout_action: REJECT default_timeout_microseconds: 50000
                         allow_timeout_override: true } }""").replace("max_batch_size: 8", "max_batch_size: 1"),
            "delay": slow_model("delay", 200000, """
dynamic_batching { preferred_batch_size: [ 1 ]
  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 20000 } }""").replace("max_batch_size: 8", "max_batch_size: 1"),
            "prio": slow_model("prio", 150000, """
dynamic_batching { preferred_batch_size: [ 1 ] priority_levels: 2 default_priority_level: 2 }""").replace("max_batch_size: 8", "max_batch_size: 1"),
        })
        cls.server = Harkd(cls.repo)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_full_queue_answers_503(self):
        n = 6
        results = [None] * n
        for t in fire(self.server, "small_queue", [fp_request()] * n, results, start_gap=0.02):
            t.join()
        statuses = sorted(r[0] for r in results)
        self.assertIn(200, statuses)
        self.assertIn(503, statuses, results)
        for status, body, _ in results:
            self.assertIn(status, (200, 503))
            if status == 503:
                self.assertIn("queue", body["error"])

    def test_timeout_rejects(self):
        results = [None] * 3
        for t in fire(self.server, "reject", [fp_request()] * 3, results, start_gap=0.02):
            t.join()
        statuses = [r[0] for r in results]
        self.assertEqual(statuses.count(200), 1, results)
        for status, body, _ in results:
            if status != 200:
                self.assertIn("timeout", body["error"].lower())

    def test_timeout_override(self):
        # The first request holds the instance; the second asks for a long
        # timeout and so must survive the default 50 ms one.
        results = [None] * 2
        docs = [fp_request(), fp_request(parameters={"timeout": 5000000})]
        for t in fire(self.server, "reject", docs, results, start_gap=0.02):
            t.join()
        self.assertEqual([r[0] for r in results], [200, 200], results)

    def test_timeout_delay_still_serves(self):
        results = [None] * 3
        for t in fire(self.server, "delay", [fp_request()] * 3, results, start_gap=0.02):
            t.join()
        self.assertEqual([r[0] for r in results], [200, 200, 200], results)

    def test_priority_jumps_queue(self):
        # One blocker, then three low-priority requests, then one high.
        docs = [fp_request()] + [fp_request(parameters={"priority": 2})] * 3 \
            + [fp_request(parameters={"priority": 1})]
        results = [None] * len(docs)
        for t in fire(self.server, "prio", docs, results, start_gap=0.03):
            t.join()
        self.assertTrue(all(r[0] == 200 for r in results), results)
        high_done = results[4][2]
        low_done = sorted(r[2] for r in results[1:4])
        # The high-priority request overtook at least two queued ones.
        self.assertLess(high_done, low_done[1])

    def test_bad_priority(self):
        status, doc = self.server.json("POST", "/v2/models/prio/infer",
                                       fp_request(parameters={"priority": 9}))
        self.assertEqual(status, 400, doc)


ADAPTIVE = """
dynamic_batching {
  adaptive_queue_delay { min_microseconds: 100 max_microseconds: 50000 target_queue_depth: 4 }
}"""


class AdaptiveQueueDelay(unittest.TestCase):
    """dynamic_batching { adaptive_queue_delay { } } on a 20 ms model:
    /metrics shows the delay at min, widening under a deep queue, back at
    min once idle; the config shows the block; bad blocks fail to load
    with the field named."""

    BAD = {
        "bad_bounds": "min_microseconds: 5000 max_microseconds: 1000",
        "bad_max": "max_microseconds: 20000000",
        "bad_negative": "min_microseconds: -1 max_microseconds: 1000",
    }

    @classmethod
    def setUpClass(cls):
        models = {"adaptive": slow_model("adaptive", 20000, ADAPTIVE),
                  "fixed": slow_model("fixed", 1000,
                                      "dynamic_batching { max_queue_delay_microseconds: 300 }"),
                  "bad_direct": slow_model("bad_direct", 1000, """
sequence_batching { direct { adaptive_queue_delay { max_microseconds: 1000 } } }""")}
        for name, block in cls.BAD.items():
            models[name] = slow_model(name, 1000,
                                      f"dynamic_batching {{ adaptive_queue_delay {{ {block} }} }}")
        cls.server = Harkd(make_repo(models), wait_ready=False)
        deadline = time.time() + 30
        while cls.server.request("GET", "/v2/models/adaptive/ready")[0] != 200:
            if time.time() > deadline:
                raise AssertionError("model 'adaptive' not ready:\n" + cls.server.output())
            time.sleep(0.05)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def gauge(self, model="adaptive"):
        return metric_value(self.server.metrics(), "hark_queue_delay_us", model=model, version="1")

    def moves(self, direction):
        return metric_value(self.server.metrics(), "hark_queue_delay_adjustments_total",
                            model="adaptive", version="1", direction=direction)

    def test_gauge_widens_under_load_and_returns_to_min(self):
        self.assertEqual(self.gauge(), 100)
        self.assertEqual(self.gauge("fixed"), 300)  # a fixed delay is shown as it is
        stop = threading.Event()
        statuses = []

        def client():
            while not stop.is_set():
                statuses.append(self.server.json("POST", "/v2/models/adaptive/infer",
                                                 fp_request())[0])
        threads = [threading.Thread(target=client) for _ in range(24)]
        for t in threads:
            t.start()
        seen = []
        deadline = time.time() + 2.0
        while time.time() < deadline:
            seen.append(self.gauge())
            time.sleep(0.02)
        stop.set()
        for t in threads:
            t.join()
        self.assertTrue(statuses and all(s == 200 for s in statuses), set(statuses))
        self.assertGreater(max(seen), 100, seen)
        self.assertLessEqual(max(seen), 50000, seen)
        self.assertGreater(self.moves("widen"), 0)
        # Idle: each stretch as long as the delay takes it a rung down.
        deadline = time.time() + 10
        while self.gauge() != 100 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(self.gauge(), 100)
        # A lone request now goes with the narrowest delay, and says so.
        self.assertEqual(self.server.json("POST", "/v2/models/adaptive/infer",
                                          fp_request())[0], 200)
        self.assertEqual(self.gauge(), 100)
        self.assertGreater(self.moves("narrow"), 0)

    def test_config_shows_the_block(self):
        status, doc = self.server.json("GET", "/v2/models/adaptive/config")
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["dynamic_batching"]["adaptive_queue_delay"],
                         {"min_microseconds": 100, "max_microseconds": 50000,
                          "target_queue_depth": 4})
        status, doc = self.server.json("GET", "/v2/models/fixed/config")
        self.assertNotIn("adaptive_queue_delay", doc["dynamic_batching"])

    def test_bad_blocks_fail_to_load_naming_the_field(self):
        status, doc = self.server.json("POST", "/v2/repository/index", {})
        self.assertEqual(status, 200, doc)
        reasons = {e["name"]: e.get("reason", "") for e in doc}
        self.assertIn("min_microseconds 5000 is larger than max_microseconds 1000",
                      reasons["bad_bounds"])
        self.assertIn("value 20000000 for field 'max_microseconds' is out of range",
                      reasons["bad_max"])
        self.assertIn("value -1 for field 'min_microseconds' is out of range",
                      reasons["bad_negative"])
        self.assertIn("adaptive_queue_delay adapts a batcher's max_queue_delay_microseconds",
                      reasons["bad_direct"])
        for name in list(self.BAD) + ["bad_direct"]:
            self.assertEqual(self.server.request("GET", f"/v2/models/{name}/ready")[0], 400)

class ShortBatchesFirst(unittest.TestCase):
    """The worker pool runs a fast model's batch before a slow model's batch
    queued earlier (--short-batch-us), but not past a slow batch that has
    waited as long as it runs; with --short-batch-us 0 it keeps arrival
    order. One worker, no inline runs, so every batch queues in the pool."""

    SLOW_US = 300000
    # A bound far from both models' costs: the fast model's executions cost
    # well under 1 ms on a quiet release build, but an ASan build under the
    # suite's load averaged more, made it a "long" batch, and kept arrival
    # order (one failure in a suite run).
    BOUND = "50000"

    @classmethod
    def setUpClass(cls):
        slow = slow_model("slow", cls.SLOW_US, "").replace(
            "max_batch_size: 8", "max_batch_size: 8\ninstance_group [ { count: 2 kind: KIND_CPU } ]")
        cls.repo = make_repo({"slow": slow, "fast": slow_model("fast", 0, "")})
        cls.servers = {}
        for bound in (cls.BOUND, "0"):
            server = Harkd(cls.repo, args=["--worker-threads", "1", "--inline-max-us", "0",
                                           "--short-batch-us", bound])
            # Both models' averages count after 16 executions.
            results = [None] * 16
            for model in ("fast", "slow"):
                for t in fire(server, model, [fp_request()] * 16, results):
                    t.join()
                assert all(r[0] == 200 for r in results), results
            cls.servers[bound] = server

    @classmethod
    def tearDownClass(cls):
        for server in cls.servers.values():
            server.stop()

    def race(self, bound):
        """A slow batch takes the worker; 100 ms later a second slow one
        queues, then a fast one: the times each of the last two finished."""
        server = self.servers[bound]
        first, second, fast = [None], [None], [None]
        threads = fire(server, "slow", [fp_request()], first)
        time.sleep(0.1)
        threads += fire(server, "slow", [fp_request()], second)
        time.sleep(0.02)
        threads += fire(server, "fast", [fp_request()], fast)
        for t in threads:
            t.join()
        self.assertEqual([r[0][0] for r in (first, second, fast)], [200] * 3, (first, second, fast))
        return second[0][2], fast[0][2]

    def test_fast_batch_overtakes_a_queued_slow_one(self):
        slow_done, fast_done = self.race(self.BOUND)
        # The fast one ran as soon as the first slow batch let go of the
        # worker, a whole slow execution before the second.
        self.assertLess(fast_done, slow_done - self.SLOW_US / 2e6)

    def test_arrival_order_without_the_bound(self):
        slow_done, fast_done = self.race("0")
        # The fast one ran right after the second slow one (the two replies
        # may reach the client in either order).
        self.assertGreater(fast_done, slow_done - self.SLOW_US / 4e6)


if __name__ == "__main__":
    main()
