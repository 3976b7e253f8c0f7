"""The Prometheus endpoint: Triton's metric names and labels, counters that
move with traffic, histograms, and an exposition promtool can parse."""
import shutil
import subprocess
import unittest

from harness import ServerTest, main, metric_value, simple_request


class Metrics(ServerTest):
    def test_counters_follow_traffic(self):
        before = self.server.metrics()
        base = metric_value(before, "nv_inference_request_success", model="simple", version="1") or 0
        for _ in range(5):
            status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                           simple_request([1] * 16, [2] * 16))
            self.assertEqual(status, 200, doc)
        self.server.json("POST", "/v2/models/simple/infer", simple_request([1] * 15, [2] * 16))
        text = self.server.metrics()
        self.assertEqual(metric_value(text, "nv_inference_request_success", model="simple",
                                      version="1"), base + 5)
        self.assertGreaterEqual(metric_value(text, "nv_inference_count", model="simple",
                                             version="1"), base + 5)
        self.assertGreaterEqual(metric_value(text, "nv_inference_exec_count", model="simple",
                                             version="1"), 1)
        for name in ("nv_inference_request_duration_us", "nv_inference_queue_duration_us",
                     "nv_inference_compute_input_duration_us",
                     "nv_inference_compute_infer_duration_us",
                     "nv_inference_compute_output_duration_us",
                     "nv_inference_pending_request_count"):
            self.assertIsNotNone(metric_value(text, name, model="simple", version="1"), name)
        self.assertEqual(metric_value(text, "nv_inference_pending_request_count",
                                      model="simple", version="1"), 0)
        self.assertIsNotNone(metric_value(text, "nv_inference_request_failure", model="simple",
                                          reason="REJECTED"))
        count = metric_value(text, "hark_inference_request_duration_us_count", model="simple")
        inf = metric_value(text, "hark_inference_request_duration_us_bucket", model="simple",
                           le="+Inf")
        self.assertEqual(count, inf)
        self.assertGreaterEqual(count, base + 5)

    @unittest.skipUnless(shutil.which("promtool"), "promtool (Debian prometheus) not installed")
    def test_promtool_parses(self):
        self.server.json("POST", "/v2/models/simple/infer", simple_request([1] * 16, [2] * 16))
        text = self.server.metrics()
        res = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                             capture_output=True)
        out = (res.stdout + res.stderr).decode()
        # Lint warnings about Triton's historical names are acceptable;
        # parse errors are not.
        self.assertNotIn("error while linting", out)
        self.assertNotIn("text format parsing error", out)

    def test_content_type(self):
        status, headers, _ = self.server.request("GET", "/metrics", port=self.server.metrics_port)
        self.assertEqual(status, 200)
        ctype = {k.lower(): v for k, v in headers.items()}["content-type"]
        self.assertTrue(ctype.startswith("text/plain"), ctype)

    def test_statistics_endpoint(self):
        self.server.json("POST", "/v2/models/simple/infer", simple_request([1] * 16, [2] * 16))
        status, doc = self.server.json("GET", "/v2/models/simple/stats")
        self.assertEqual(status, 200, doc)
        st = doc["model_stats"][0]
        self.assertEqual(st["name"], "simple")
        self.assertEqual(st["version"], "1")
        for k in ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output"):
            self.assertIn("count", st["inference_stats"][k])
            self.assertIn("ns", st["inference_stats"][k])
        self.assertGreaterEqual(st["inference_stats"]["success"]["count"], 1)
        status, doc = self.server.json("GET", "/v2/models/stats")
        self.assertEqual(status, 200)
        self.assertIn("simple", [m["name"] for m in doc["model_stats"]])


if __name__ == "__main__":
    main()
