"""Observability end to end: the host gauges (nv_cpu_*), the streaming
speech metrics (partial/final latency histograms, recognition CPU time for
the real-time factor) after a LibriVox recording streams over Vosk's
WebSocket protocol, the statistics endpoint's breakdown, and the logs:
--log-format json|ISO8601|default, --log-info/--log-warning/--log-error,
and the request, sequence and stream ids on the lines that concern them."""
import asyncio
import json
import os
import re
import shutil
import subprocess
import time
import unittest
import wave

import websockets

from harness import (BIN_DIR, MODELS, SOURCE_DIR, Harkd, ServerTest, main, make_repo,
                     metric_value, simple_request)

RECORDING = "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"
CHUNK = 3200  # bytes: 100 ms of 16 kHz 16-bit mono


def pcm(path):
    with wave.open(path) as w:
        return w.getframerate(), w.readframes(w.getnframes())


async def stream(uri, audio, rate):
    """Streams audio as fast as replies come; returns every reply."""
    replies = []
    async with websockets.connect(uri, max_size=None) as ws:
        await ws.send(json.dumps({"config": {"sample_rate": rate}}))
        for off in range(0, len(audio), CHUNK):
            await ws.send(audio[off:off + CHUNK])
            replies.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        await ws.send('{"eof" : 1}')
        replies.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
        await asyncio.wait_for(ws.wait_closed(), 30)
    return replies


def histogram(text, name, **labels):
    """(buckets [(le, cumulative count)], sum, count) of one histogram series."""
    buckets = []
    for line in text.splitlines():
        if not line.startswith(name + "_bucket{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            le = re.search(r'le="([^"]+)"', head).group(1)
            buckets.append((float(le), float(value)))
    return (buckets, metric_value(text, name + "_sum", **labels),
            metric_value(text, name + "_count", **labels))


def promtool_errors(text):
    res = subprocess.run(["promtool", "check", "metrics"], input=text.encode(),
                         capture_output=True)
    out = (res.stdout + res.stderr).decode()
    return [line for line in out.splitlines()
            if "error while linting" in line or "parsing error" in line]


def wait_for(predicate, timeout=10):
    """Polls predicate() until it returns something true; returns it (or the last value)."""
    deadline = time.time() + timeout
    while True:
        value = predicate()
        if value or time.time() > deadline:
            return value
        time.sleep(0.05)


class Observability(ServerTest):
    """The default repository with verbose JSON logs."""
    ARGS = ("--log-format", "json", "--log-verbose", "1")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.uri = f"ws://127.0.0.1:{cls.server.http_port}/"

    def json_lines(self):
        return [json.loads(line) for line in self.server.output().splitlines() if line.strip()]

    # ---- metrics ----------------------------------------------------------------------

    def test_host_gauges(self):
        for _ in range(2):  # the first scrape averages since boot, the next over the window
            text = self.server.metrics()
            util = metric_value(text, "nv_cpu_utilization")
            total = metric_value(text, "nv_cpu_memory_total_bytes")
            used = metric_value(text, "nv_cpu_memory_used_bytes")
            self.assertIsNotNone(util)
            self.assertTrue(0.0 <= util <= 1.0, util)
            with open("/proc/meminfo") as f:
                kb = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
            self.assertEqual(total, kb * 1024)
            self.assertTrue(0 < used <= total, (used, total))
            self.assertIn("# TYPE nv_cpu_utilization gauge", text)
            time.sleep(0.2)

    def test_streaming_metrics(self):
        labels = {"model": "asr", "version": "1"}
        before = self.server.metrics()
        _, _, p0 = histogram(before, "hark_asr_partial_latency_seconds", **labels)
        _, _, f0 = histogram(before, "hark_asr_final_latency_seconds", **labels)
        c0 = metric_value(before, "hark_asr_compute_seconds_total", **labels)
        a0 = metric_value(before, "hark_audio_seconds_total", **labels)
        self.assertIsNotNone(p0, "no partial latency histogram")
        self.assertIsNotNone(f0, "no final latency histogram")
        self.assertIsNotNone(c0, "no compute counter")

        rate, audio = pcm(RECORDING)
        replies = asyncio.run(stream(self.uri, audio, rate))
        finals = [r for r in replies if "text" in r]
        self.assertTrue(finals and "text" in replies[-1], replies[-1])

        text = self.server.metrics()
        for name, n_before, n_expected in (
                ("hark_asr_partial_latency_seconds", p0, len(replies) - len(finals)),
                ("hark_asr_final_latency_seconds", f0, len(finals))):
            buckets, total, count = histogram(text, name, **labels)
            # one observation per reply: the chunk's partial or final
            self.assertEqual(count - n_before, n_expected, name)
            les = [le for le, _ in buckets]
            self.assertEqual(les, sorted(les), name)
            self.assertEqual(les[-1], float("inf"), name)
            self.assertTrue(min(les) <= 0.01 and max(x for x in les if x != float("inf")) >= 5,
                            les)
            counts = [c for _, c in buckets]
            self.assertEqual(counts, sorted(counts), f"{name}: buckets not cumulative")
            self.assertEqual(counts[-1], count, name)
            self.assertGreater(total, 0, name)
            self.assertLess(total / count, 30, f"{name}: mean latency {total / count} s")
        compute = metric_value(text, "hark_asr_compute_seconds_total", **labels) - c0
        seconds = metric_value(text, "hark_audio_seconds_total", **labels) - a0
        self.assertAlmostEqual(seconds, len(audio) / 2 / rate, delta=0.2)
        self.assertGreater(compute, 0)
        rtf = compute / seconds
        self.assertLess(rtf, 50, f"real-time factor {rtf}")
        self.assertIn("# TYPE hark_asr_compute_seconds_total counter", text)
        self.assertIn("# TYPE hark_asr_partial_latency_seconds histogram", text)
        if shutil.which("promtool"):
            self.assertEqual(promtool_errors(text), [])

        # The stream's lines: its id on the front end's lines, the same id
        # as the request id on the lines of the workers that ran its chunks.
        def opened():
            return [l for l in self.json_lines()
                    if "stream opened" in l["message"] and l.get("stream_id")]
        lines = wait_for(opened)
        self.assertTrue(lines, "no 'stream opened' line with a stream_id")
        sid = lines[-1]["stream_id"]
        self.assertRegex(sid, r"^ws-\d+$")

        def closed():
            return [l for l in self.json_lines()
                    if l.get("stream_id") == sid and "closed" in l["message"]]
        self.assertTrue(wait_for(closed), f"no close line for {sid}")
        worker = [l for l in self.json_lines() if l.get("request_id") == sid]
        self.assertTrue(any("bytes of audio" in l["message"] for l in worker), worker[:3])
        self.assertTrue(any("executing" in l["message"] and l.get("sequence_id") for l in worker))
        # Chunks that decode are answered on the backend's decode threads
        # (decode_threads); their lines carry the stream's ids too.
        decoded = [l for l in worker if re.search(r"bytes of audio: \w+ '\w", l["message"])]
        self.assertTrue(decoded, "no line of a decoded chunk carries the stream's id")
        self.assertTrue(all(l.get("sequence_id") for l in decoded), decoded[:3])
        unnamed = [l for l in self.json_lines()
                   if "bytes of audio" in l["message"] and not l.get("request_id")]
        self.assertEqual(unnamed, [])

    def test_statistics_breakdown(self):
        def stats(model):
            status, doc = self.server.json("GET", f"/v2/models/{model}/stats")
            self.assertEqual(status, 200, doc)
            return doc["model_stats"][0]
        before = stats("simple")
        for i in range(3):
            status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                           simple_request([i] * 16, [1] * 16))
            self.assertEqual(status, 200, doc)
        st = stats("simple")
        inf = st["inference_stats"]
        for key in ("success", "fail", "queue", "compute_input", "compute_infer",
                    "compute_output"):
            self.assertEqual(set(inf[key]), {"count", "ns"}, key)
        self.assertEqual(inf["success"]["count"] - before["inference_stats"]["success"]["count"], 3)
        # queue and compute are counted once per successful request
        for key in ("queue", "compute_input", "compute_infer", "compute_output"):
            self.assertEqual(inf[key]["count"], inf["success"]["count"], key)
        self.assertGreater(inf["compute_infer"]["ns"], 0)
        self.assertGreaterEqual(st["inference_count"], inf["success"]["count"])
        self.assertGreater(st["last_inference"], 0)
        # batch_stats: one entry per batch size seen, counting executions
        self.assertTrue(st["batch_stats"], st)
        for b in st["batch_stats"]:
            self.assertTrue(1 <= b["batch_size"] <= 8, b)
            for key in ("compute_input", "compute_infer", "compute_output"):
                self.assertEqual(set(b[key]), {"count", "ns"}, key)
        self.assertEqual(sum(b["compute_infer"]["count"] for b in st["batch_stats"]),
                         st["execution_count"])
        self.assertEqual(sum(b["batch_size"] * b["compute_infer"]["count"]
                             for b in st["batch_stats"]), st["inference_count"])

        # A request the backend fails counts in fail, not in success or queue.
        asr0 = stats("asr")["inference_stats"]
        doc = {"inputs": [{"name": "AUDIO", "shape": [1], "datatype": "BYTES", "data": ["x"]}],
               "parameters": {"sample_rate": "abc"}}
        status, _ = self.server.json("POST", "/v2/models/asr/infer", doc)
        self.assertEqual(status, 400)
        asr = stats("asr")["inference_stats"]
        self.assertEqual(asr["fail"]["count"] - asr0["fail"]["count"], 1)
        self.assertEqual(asr["success"]["count"], asr0["success"]["count"])
        self.assertEqual(asr["queue"]["count"], asr0["queue"]["count"])

    # ---- logs ---------------------------------------------------------------------------

    def test_json_lines(self):
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request([1] * 16, [2] * 16, id="abc123"))
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["id"], "abc123")
        raw = [line for line in self.server.output().splitlines() if line.strip()]
        self.assertGreater(len(raw), 3)
        for line in raw:
            obj = json.loads(line)  # every line is one JSON object
            self.assertIsInstance(obj, dict, line)
            for key in ("time", "level", "thread", "message"):
                self.assertIn(key, obj, line)
            self.assertIn(obj["level"], ("ERROR", "WARNING", "INFO", "VERBOSE"), line)
            self.assertRegex(obj["time"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
            if "file" in obj:
                self.assertRegex(f'{obj["file"]}:{obj["line"]}', r"^[\w/]+\.c:\d+$")
        started = [json.loads(l) for l in raw if "Started HTTPService" in l]
        self.assertEqual(len(started), 1)
        self.assertEqual(started[0]["level"], "INFO")
        self.assertEqual(started[0]["file"], "src/harkd.c")

        def mine():
            return [l for l in self.json_lines() if l.get("request_id") == "abc123"]
        lines = wait_for(mine)
        self.assertTrue(lines, "no line carries the request's id")
        self.assertTrue(any("executing 1 request" in l["message"] and "simple" in l["message"]
                            for l in lines), lines)

    def test_sequence_id_on_lines(self):
        doc = {"inputs": [{"name": "INPUT", "shape": [1, 1], "datatype": "INT32", "data": [5]}],
               "parameters": {"sequence_id": 4242, "sequence_start": True, "sequence_end": True}}
        status, out = self.server.json("POST", "/v2/models/accumulate/infer", doc)
        self.assertEqual(status, 200, out)
        lines = wait_for(lambda: [l for l in self.json_lines() if l.get("sequence_id") == "4242"])
        self.assertTrue(lines, "no line carries the sequence id")
        self.assertNotIn("request_id", lines[0])  # the request itself had no id


class TextLogs(unittest.TestCase):
    """The two text formats, and switching levels off."""

    def run_server(self, *args):
        server = Harkd(MODELS, ("--load-model", "simple", "--model-control-mode", "explicit",
                                *args))
        try:
            status, doc = server.json("POST", "/v2/models/simple/infer",
                                      simple_request([1] * 16, [2] * 16, id="req-7"))
            self.assertEqual(status, 200, doc)
            if "--log-verbose" in args:
                wait_for(lambda: "req-7" in server.output(), 5)
        finally:
            out = server.stop()
        return [line for line in out.splitlines() if line.strip()]

    def test_iso8601(self):
        lines = self.run_server("--log-format", "ISO8601", "--log-verbose", "1")
        pattern = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ([EWIV]) \d+ (\S+:\d+)?\] ")
        for line in lines:
            self.assertRegex(line, pattern)
        self.assertTrue(any(re.search(r" I \d+ src/harkd\.c:\d+\] Started HTTPService", l)
                            for l in lines), lines)
        self.assertTrue(any("[request_id=req-7] " in l and "executing 1 request" in l
                            for l in lines), lines)

    def test_default_format(self):
        lines = self.run_server("--log-verbose", "1")
        pattern = re.compile(r"^([EWIV])\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ (\S+:\d+)?\] ")
        for line in lines:
            self.assertRegex(line, pattern)
        self.assertTrue(any(l.startswith("V") and "[request_id=req-7] " in l for l in lines),
                        lines)

    def test_levels_switch_off(self):
        lines = self.run_server("--log-info", "false")
        self.assertFalse([l for l in lines if l.startswith("I")], lines)
        self.assertFalse([l for l in lines if "req-7" in l], lines)  # verbose is off too
        lines = self.run_server("--log-verbose", "1", "--log-info", "true")
        self.assertTrue([l for l in lines if l.startswith("I")], lines)

    def test_bad_format_is_refused(self):
        res = subprocess.run([os.path.join(BIN_DIR, "harkd"), "--model-repository", MODELS,
                              "--log-format", "xml"], capture_output=True, timeout=30)
        self.assertEqual(res.returncode, 2)
        self.assertIn(b"--log-format", res.stderr)


# A backend as one built on an older API minor would be: its table says
# 1.<minor>, it knows only gauges and counters. Built here, at test time,
# against today's header, which is what an old binary's calls still match.
OLD_BACKEND = r"""
#include <string.h>
#include "hark/backend.h"
static hark_metric *served;
static hark_error *model_init(hark_model *m) {
  return hark_metric_new(m, HARK_METRIC_COUNTER, "old_backend_requests_total", "Requests", &served);
}
static void model_fini(hark_model *m) { (void)m; hark_metric_free(served); }
static hark_error *instance_init(hark_instance *i) { (void)i; return NULL; }
static void instance_fini(hark_instance *i) { (void)i; }
static hark_error *execute(hark_instance *inst, hark_request **reqs, uint32_t n) {
  (void)inst;
  for (uint32_t i = 0; i < n; i++) {
    const hark_tensor *in = hark_request_input_by_name(reqs[i], "INPUT");
    hark_response *resp = hark_response_new(reqs[i]);
    void *buf;
    hark_error *err = hark_response_add_output(resp, "OUTPUT", HARK_TYPE_INT32, in->shape,
                                               in->ndims, in->byte_size, &buf);
    if (err) { hark_response_free(resp); hark_request_complete(reqs[i], err); continue; }
    memcpy(buf, in->data, in->byte_size);
    hark_metric_add(served, 1);
    hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
  }
  return NULL;
}
static const hark_backend_api api = {
  .api_version = (HARK_BACKEND_API_MAJOR << 16) | MINOR,
  .model_init = model_init, .model_fini = model_fini, .instance_init = instance_init,
  .instance_fini = instance_fini, .instance_execute = execute,
};
HARK_BACKEND_EXPORT const hark_backend_api *hark_backend_get_api(void) { return &api; }
"""

OLD_CONFIG = """name: "{name}"
backend: "{name}"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
"""


@unittest.skipUnless(shutil.which("cc"), "no C compiler to build the old-API backend")
class ThreadNames(unittest.TestCase):
    """Each of harkd's threads says what it is (top -H, perf, /proc/PID/task),
    and the main thread keeps the program's name, so pgrep/pkill harkd still
    find it."""

    def test_threads_are_named(self):
        server = Harkd(MODELS, ("--model-control-mode", "explicit", "--load-model", "asr",
                                "--worker-threads", "3", "--http-thread-count", "2"))
        def thread_names():
            out = []
            for task in os.listdir(f"/proc/{server.proc.pid}/task"):
                with open(f"/proc/{server.proc.pid}/task/{task}/comm") as f:
                    out.append(f.read().strip())
            return out

        try:
            # A thread names itself when it first runs, which on a loaded
            # host can come after harkd answers on the other loop.
            deadline = time.monotonic() + 10
            while "hark-loop" not in thread_names() and time.monotonic() < deadline:
                time.sleep(0.05)
            names = thread_names()
            main_tid = str(server.proc.pid)
            with open(f"/proc/{server.proc.pid}/task/{main_tid}/comm") as f:
                self.assertEqual(f.read().strip(), "harkd")
            self.assertEqual(names.count("hark-worker"), 3, names)
            self.assertEqual(names.count("hark-loop"), 1, names)  # the other is the main thread
            self.assertEqual(names.count("hark-timer"), 1, names)
            self.assertIn("ps-final", names)  # asr's utterance-end threads
            self.assertIn("hark-watchdog", names)
        finally:
            server.stop()


class OlderBackends(unittest.TestCase):
    """Backends built on API 1.0 to 1.3 still load, serve and export
    metrics; one claiming a newer minor than the server's is refused."""

    @classmethod
    def setUpClass(cls):
        names = {"old0": 0, "old1": 1, "old2": 2, "old3": 3, "future": 999}
        cls.repo = make_repo({n: OLD_CONFIG.format(name=n) for n in names})
        for name, minor in names.items():
            src = os.path.join(cls.repo, name, "backend.c")
            with open(src, "w") as f:
                f.write(OLD_BACKEND)
            subprocess.run(["cc", "-shared", "-fPIC", f"-DMINOR={minor}u", "-o",
                            os.path.join(cls.repo, name, f"libhark_{name}.so"), src,
                            "-I", os.path.join(SOURCE_DIR, "include")], check=True)
        cls.server = Harkd(cls.repo, ("--strict-readiness", "false"))

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop()
        finally:
            shutil.rmtree(cls.repo, ignore_errors=True)

    def test_old_minors_serve(self):
        for name in ("old0", "old1", "old2", "old3"):
            doc = {"inputs": [{"name": "INPUT", "shape": [1], "datatype": "INT32", "data": [7]}]}
            status, out = self.server.json("POST", f"/v2/models/{name}/infer", doc)
            self.assertEqual(status, 200, out)
            self.assertEqual(out["outputs"][0]["data"], [7])
            self.assertEqual(metric_value(self.server.metrics(), "old_backend_requests_total",
                                          model=name), 1)
        if shutil.which("promtool"):
            self.assertEqual(promtool_errors(self.server.metrics()), [])

    def test_newer_minor_refused(self):
        status, _ = self.server.json("GET", "/v2/models/future/ready")
        self.assertNotEqual(status, 200)
        out = self.server.output()
        with open(os.path.join(SOURCE_DIR, "include", "hark", "backend.h")) as f:
            minor = re.search(r"#define HARK_BACKEND_API_MINOR (\d+)u", f.read()).group(1)
        self.assertRegex(out, rf"1\.999.*1\.{minor}\b|1\.{minor}\b.*1\.999", out)


if __name__ == "__main__":
    main()
