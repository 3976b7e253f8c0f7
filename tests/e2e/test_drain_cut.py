"""SIGTERM with work still queued or parked (issue 24, item 4): once the
exit timeout passes, what waits in a model's queue, or for a sequence slot,
is answered 503 "Server is shutting down" instead of holding the exit until
the shutdown watchdog kills harkd (exit 1). The batch executing at that
moment still finishes; every client gets exactly one answer; harkd exits 0.
"""
import json
import threading
import time
import unittest

import harness

EXIT_SECS = 3

SLOW = '''name: "slow"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
parameters { key: "execute_delay_us" value: { string_value: "500000" } }
'''

# One sequence slot, held by a sequence that never ends (idle for 10 min).
ONE_SLOT = '''name: "one_slot"
backend: "accumulate"
max_batch_size: 4
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 600000000
  oldest { max_candidate_sequences: 1 }
}
'''


class DrainCut(unittest.TestCase):
    def setUp(self):
        self.repo = harness.make_repo({"slow": SLOW, "one_slot": ONE_SLOT})
        self.server = harness.Harkd(self.repo, ["--exit-timeout-secs", str(EXIT_SECS)])
        self.results = []
        self.lock = threading.Lock()

    def call(self, path, doc):
        try:
            status, _, body = self.server.request("POST", path, json.dumps(doc).encode())
            got = (status, json.loads(body) if body else None)
        except Exception as e:  # the bug: a connection closed with no answer
            got = ("no answer", repr(e))
        with self.lock:
            self.results.append(got)

    def start(self, n, path, doc_of):
        threads = [threading.Thread(target=self.call, args=(path, doc_of(i))) for i in range(n)]
        for t in threads:
            t.start()
        return threads

    def stop_and_check(self, threads, n):
        time.sleep(1.0)  # the requests are in: one executes or holds the slot, the rest wait
        self.server.stop(timeout=60, expect_rc=0)  # SIGTERM; exit 1 was the watchdog
        for t in threads:
            t.join(30)
        self.assertEqual(len(self.results), n, self.results)
        cut = 0
        for status, doc in self.results:
            self.assertIn(status, (200, 503), (status, doc))
            if status == 503:
                self.assertIn("Server is shutting down", doc["error"])
                cut += "exit timeout" in doc["error"]
        self.assertGreater(cut, 0, self.results)

    def test_queued_requests_are_answered(self):
        doc = {"inputs": [{"name": "INPUT0", "shape": [4], "datatype": "FP32",
                           "data": [1, 2, 3, 4]}]}
        n = 8 * EXIT_SECS  # 12 s of work: past the watchdog (exit timeout + 5 s)
        self.stop_and_check(self.start(n, "/v2/models/slow/infer", lambda i: doc), n)

    def test_parked_sequences_are_answered(self):
        def doc(seq):
            return {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32",
                                "data": [1]}],
                    "parameters": {"sequence_id": seq, "sequence_start": True}}
        status, _, body = self.server.request("POST", "/v2/models/one_slot/infer",
                                              json.dumps(doc(1000)).encode())
        self.assertEqual(status, 200, body)  # sequence 1000 holds the only slot
        self.stop_and_check(self.start(3, "/v2/models/one_slot/infer", lambda i: doc(i + 1)), 3)


if __name__ == "__main__":
    harness.main()
