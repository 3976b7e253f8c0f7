"""`hark perf` against the real harkd, over HTTP and gRPC: the JSON report,
binary tensors, batching, variable shapes, and the errors a user gets for an
unknown model, an unreachable server or an unsupported protocol. The
server's own statistics check that the requests reported were really
served."""
import json
import os
import subprocess

from harness import BIN_DIR, ServerTest, free_port, main

HARK = os.path.join(BIN_DIR, "hark")
IDENTITY_TYPES = ["BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32",
                  "INT64", "FP16", "FP32", "FP64", "BF16", "BYTES"]


class PerfCli(ServerTest):
    GRPC = True

    def perf(self, *args, url=None):
        cmd = [HARK, "perf", "-u", url or f"127.0.0.1:{self.server.http_port}",
               "--measurement-interval", "500", "--warmup", "100", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    def grpc(self, *args, url=None):
        return self.perf("--protocol", "grpc", *args,
                         url=url or f"127.0.0.1:{self.server.grpc_port}")

    def perf_json(self, *args, grpc=False):
        p = (self.grpc if grpc else self.perf)("--json", *args)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout)

    def inference_count(self, model):
        status, doc = self.server.json("GET", f"/v2/models/{model}/stats")
        self.assertEqual(status, 200, doc)
        return doc["model_stats"][0]["inference_count"]

    def check_result(self, r, concurrency):
        self.assertEqual(r["concurrency"], concurrency)
        self.assertGreater(r["requests"], 0)
        self.assertEqual(r["errors"], 0)
        self.assertGreater(r["throughput_infer_per_sec"], 0)
        lat = r["latency_us"]
        self.assertGreater(lat["p50"], 0)
        self.assertLessEqual(lat["p50"], lat["p90"])
        self.assertLessEqual(lat["p90"], lat["p95"])
        self.assertLessEqual(lat["p95"], lat["p99"])
        self.assertLessEqual(lat["p99"], lat["max"])

    def test_json_report(self):
        before = self.inference_count("simple")
        doc = self.perf_json("-m", "simple")
        self.assertEqual(doc["model"], "simple")
        self.assertEqual(doc["protocol"], "http")
        self.assertEqual(doc["batch_size"], 1)
        self.assertEqual(len(doc["results"]), 1)
        r = doc["results"][0]
        self.check_result(r, 1)
        # Warmup and the probe are served too, so the server saw at least as many.
        self.assertGreaterEqual(self.inference_count("simple") - before, r["requests"])

    def check_batched_range(self, *args, grpc=False):
        """Batch 4 at concurrency 1 and 3: both levels reported, every
        request's 4 items served."""
        before = self.inference_count("simple")
        doc = self.perf_json("-m", "simple", *args, "-b", "4", "--input-data", "random",
                             "--concurrency-range", "1:3:2", grpc=grpc)
        self.assertEqual(doc["batch_size"], 4)
        self.assertEqual([r["concurrency"] for r in doc["results"]], [1, 3])
        for r, c in zip(doc["results"], [1, 3]):
            self.check_result(r, c)
        served = self.inference_count("simple") - before
        self.assertGreaterEqual(served, 4 * sum(r["requests"] for r in doc["results"]))

    def test_binary_batched_range(self):
        self.check_batched_range("--binary")

    def test_every_datatype_with_shapes(self):
        shapes = [a for t in IDENTITY_TYPES for a in ("--shape", f"INPUT_{t}:3")]
        for fmt in ([], ["--binary"]):
            doc = self.perf_json("-m", "identity", "-b", "2", *shapes, *fmt)
            self.check_result(doc["results"][0], 1)

    def test_text_report(self):
        p = self.perf("-m", "simple", "--concurrency-range", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"Concurrency: 2, throughput: [0-9.]+ infer/sec, latency p50 \d+ usec")
        self.assertIn("errors 0", p.stdout)
        self.assertIn("Inferences/Second vs. Client Latency", p.stdout)

    def test_variable_shape_needs_flag(self):
        p = self.perf("-m", "identity")
        self.assertEqual(p.returncode, 1)
        self.assertIn("--shape", p.stderr)

    def test_batch_above_max(self):
        p = self.perf("-m", "simple", "-b", "9")
        self.assertEqual(p.returncode, 1)
        self.assertIn("max_batch_size 8", p.stderr)

    def test_unknown_model(self):
        p = self.perf("-m", "no_such_model")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no_such_model", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_unreachable_server(self):
        p = self.perf("-m", "simple", url=f"127.0.0.1:{free_port()}")
        self.assertEqual(p.returncode, 1)
        self.assertIn("unreachable", p.stderr)

    def test_grpc_json_report(self):
        before = self.inference_count("simple")
        doc = self.perf_json("-m", "simple", grpc=True)
        self.assertEqual((doc["model"], doc["protocol"], doc["batch_size"]), ("simple", "grpc", 1))
        self.assertEqual(len(doc["results"]), 1)
        r = doc["results"][0]
        self.check_result(r, 1)
        self.assertGreaterEqual(self.inference_count("simple") - before, r["requests"])

    def test_grpc_batched_range(self):
        self.check_batched_range(grpc=True)

    def test_grpc_every_datatype_with_shapes(self):
        shapes = [a for t in IDENTITY_TYPES for a in ("--shape", f"INPUT_{t}:3")]
        before = self.inference_count("identity")
        doc = self.perf_json("-m", "identity", "-b", "2", *shapes, grpc=True)
        self.check_result(doc["results"][0], 1)
        self.assertGreaterEqual(self.inference_count("identity") - before,
                                2 * doc["results"][0]["requests"])

    def test_grpc_text_report(self):
        p = self.grpc("-m", "simple", "--concurrency-range", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("over grpc", p.stdout)
        self.assertRegex(p.stdout, r"Concurrency: 2, throughput: [0-9.]+ infer/sec, latency p50 \d+ usec")
        self.assertIn("errors 0", p.stdout)

    def test_grpc_errors(self):
        p = self.grpc("-m", "no_such_model")
        self.assertEqual(p.returncode, 1)
        self.assertIn("no_such_model", p.stderr)
        self.assertIn("INVALID_ARGUMENT", p.stderr)
        self.assertEqual(p.stdout, "")
        p = self.grpc("-m", "simple", "-b", "9")
        self.assertEqual(p.returncode, 1)
        self.assertIn("max_batch_size 8", p.stderr)  # read from ModelConfig over gRPC
        p = self.grpc("-m", "identity")
        self.assertEqual(p.returncode, 1)
        self.assertIn("--shape", p.stderr)
        p = self.grpc("-m", "simple", url=f"127.0.0.1:{free_port()}")
        self.assertEqual(p.returncode, 1)
        self.assertIn("unreachable", p.stderr)

    def test_grpc_rejected_request(self):
        # The HTTP port speaks no gRPC: the probe fails before any load.
        p = self.grpc("-m", "simple", url=f"127.0.0.1:{self.server.http_port}")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stdout, "")

    def test_bad_protocol(self):
        p = self.perf("-m", "simple", "--protocol", "carrier-pigeon")
        self.assertEqual(p.returncode, 2)
        self.assertIn("http or grpc", p.stderr)

    def test_help(self):
        p = subprocess.run([HARK, "--help"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0)
        self.assertIn("perf", p.stdout)
        p = subprocess.run([HARK, "help", "perf"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0)
        self.assertIn("--concurrency-range", p.stdout)
        p = subprocess.run([HARK, "frobnicate"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    main()
