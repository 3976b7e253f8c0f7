"""Debian's Prometheus scraping the real harkd, with the autoscaling metric
avg_time_queue_ms as a recording rule: the very query of the
prometheus-adapter rule in deploy/kubernetes/prometheus-adapter-rules.yaml,
read from that file, with its 30 s windows shortened to 5 s (and a 1 s
scrape and evaluation interval) so the test takes seconds, not minutes.

Load that queues (hark perf, 16 clients on fixed_cost_nobatch: 2 ms per
execution, no batching, one instance) must raise avg_time_queue_ms to what
harkd's own counters say a request waited, in ms; idle, it must read 0
before and fall back to 0 after."""
import json
import os
import shutil
import statistics
import sys
import subprocess
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import yaml

from harness import (BIN_DIR, MODELS, SOURCE_DIR, Harkd, die_with_parent, free_port, main, make_repo,
                     metric_value, terminate)

ADAPTER_RULES = os.path.join(SOURCE_DIR, "deploy", "kubernetes", "prometheus-adapter-rules.yaml")
WINDOW = "5s"  # the adapter's is 30s
LOADED = "fixed_cost_nobatch"



def adapter_query(matchers, group_by, window):
    """The adapter rule's metricsQuery, as the adapter would expand it."""
    with open(ADAPTER_RULES) as f:
        cm = yaml.safe_load(f)
    rules = yaml.safe_load(cm["data"]["config.yaml"])["rules"]
    (rule,) = [r for r in rules if r["name"]["as"] == "avg_time_queue_ms"]
    q = rule["metricsQuery"]
    assert q.count("[30s]") == 2, q
    return (q.replace("<<.LabelMatchers>>", matchers).replace("<<.GroupBy>>", group_by)
            .replace("[30s]", f"[{window}]"))


def model_config(name):
    with open(os.path.join(MODELS, name, "config.pbtxt")) as f:
        return f.read()


class QueueTimeMetric(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        prometheus = shutil.which("prometheus")
        if not prometheus:
            raise AssertionError("prometheus not found: run scripts/setup.sh (package prometheus)")
        # An idle model beside the loaded one: the query must not average it in.
        cls.repo = make_repo({LOADED: model_config(LOADED),
                              "fixed_cost": model_config("fixed_cost")})
        cls.addClassCleanup(shutil.rmtree, cls.repo, True)
        cls.server = Harkd(cls.repo)
        cls.addClassCleanup(cls.server.stop)

        cls.dir = tempfile.mkdtemp(prefix="hark-prometheus-")
        cls.addClassCleanup(shutil.rmtree, cls.dir, True)
        cls.query = adapter_query('job="hark"', "instance", WINDOW)
        with open(os.path.join(cls.dir, "rules.yml"), "w") as f:
            yaml.safe_dump({"groups": [{"name": "hark", "interval": "1s", "rules": [
                {"record": "avg_time_queue_ms", "expr": cls.query}]}]}, f)
        with open(os.path.join(cls.dir, "prometheus.yml"), "w") as f:
            yaml.safe_dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": ["rules.yml"],
                "scrape_configs": [{"job_name": "hark", "static_configs": [
                    {"targets": [f"127.0.0.1:{cls.server.metrics_port}"]}]}]}, f)
        cls.port = free_port()
        cls.prom_log = open(os.path.join(cls.dir, "prometheus.log"), "wb")
        cls.addClassCleanup(cls.prom_log.close)
        cls.prom = subprocess.Popen(
            [prometheus, "--config.file", os.path.join(cls.dir, "prometheus.yml"),
             "--storage.tsdb.path", os.path.join(cls.dir, "data"),
             "--web.listen-address", f"127.0.0.1:{cls.port}", "--log.level", "warn"],
            stdout=cls.prom_log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        cls.addClassCleanup(cls.stop_prometheus)
        deadline = time.time() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{cls.port}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if cls.prom.poll() is not None or time.time() > deadline:
                raise AssertionError("prometheus did not start:\n" + cls.prom_output())
            time.sleep(0.2)

    @classmethod
    def stop_prometheus(cls):
        terminate(cls.prom)

    @classmethod
    def prom_output(cls):
        cls.prom_log.flush()
        with open(os.path.join(cls.dir, "prometheus.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def value(self):
        """avg_time_queue_ms for harkd's instance now, or None before it exists."""
        url = (f"http://127.0.0.1:{self.port}/api/v1/query?"
               + urllib.parse.urlencode({"query": "avg_time_queue_ms"}))
        with urllib.request.urlopen(url, timeout=5) as r:
            doc = json.load(r)
        self.assertEqual(doc["status"], "success", doc)
        result = doc["data"]["result"]
        if not result:
            return None
        self.assertEqual(len(result), 1, result)  # one series: summed over models
        self.assertEqual(result[0]["metric"]["instance"], f"127.0.0.1:{self.server.metrics_port}")
        return float(result[0]["value"][1])

    def wait_for(self, what, pred, timeout):
        deadline = time.time() + timeout
        seen = []
        while time.time() < deadline:
            v = self.value()
            seen.append(v)
            if pred(v):
                return v
            time.sleep(0.5)
        self.fail(f"avg_time_queue_ms never {what} within {timeout} s; read {seen}\n"
                  + self.prom_output())

    def queue_counters(self):
        text = self.server.metrics()
        return (metric_value(text, "nv_inference_queue_duration_us", model=LOADED, version="1"),
                metric_value(text, "nv_inference_request_success", model=LOADED, version="1"))

    def test_rises_under_load_and_falls_back(self):
        # Idle: exists (two scrapes in the window) and reads 0.
        idle = self.wait_for("appeared", lambda v: v is not None, 20)
        self.assertLess(idle, 1.0)

        q0, s0 = self.queue_counters()
        perf = subprocess.Popen(
            [os.path.join(BIN_DIR, "hark"), "perf", "-m", LOADED, "-u",
             f"127.0.0.1:{self.server.http_port}", "--concurrency-range", "16",
             "--measurement-interval", "8000", "--warmup", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        samples = []
        try:
            while perf.poll() is None:
                v = self.value()
                if v is not None:
                    samples.append(v)
                time.sleep(0.5)
        finally:
            if perf.poll() is None:
                perf.kill()
            out = perf.communicate()[0].decode(errors="replace")
        self.assertEqual(perf.returncode, 0, out)
        q1, s1 = self.queue_counters()
        self.assertGreater(s1 - s0, 100, "the load barely ran")
        # What harkd itself says a request waited during the load, in ms:
        # 16 clients on one 2 ms execution at a time wait ~15 executions.
        direct_ms = (q1 - q0) / (s1 - s0) / 1000
        self.assertGreater(direct_ms, 5, "the load did not queue")

        loaded = sorted(samples)[len(samples) // 2:]  # the window has filled by then
        self.assertTrue(loaded, samples)
        typical = statistics.median(loaded)
        print(f"\navg_time_queue_ms: idle {idle}, under load {[round(v, 2) for v in samples]}"
              f" (harkd's counters: {direct_ms:.2f} ms per request)", file=sys.stderr)
        self.assertGreater(max(samples), 5, samples)
        # Same figure, in the same unit (a µs/ms slip is 1000×).
        self.assertGreater(typical, direct_ms / 2, (samples, direct_ms))
        self.assertLess(typical, direct_ms * 2, (samples, direct_ms))

        # Back to idle once the window has passed over the load.
        self.wait_for("fell back below 1 ms", lambda v: v is not None and v < 1.0, 20)


if __name__ == "__main__":
    main()
