"""Starts the real harkd on free loopback ports and talks to it over HTTP.

Used by every end-to-end test. Only the Python standard library: the client
side must be independent of hark's own code.
"""
import atexit
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

SOURCE_DIR = os.environ.get("HARK_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BIN_DIR = os.environ.get("HARK_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
SHIPPED_MODELS = os.path.join(SOURCE_DIR, "models")
TEST_MODELS = os.path.join(SOURCE_DIR, "tests", "models")


# Shipped models the default test repository leaves out: silero_vad loads
# libtorch, which costs each harkd start about 1 s of CPU (2-5 s under ASan,
# and as much again at exit) and 125 MB of memory, in every test that has
# no use for it; on a loaded host it pushed harkd past wait_live's limit.
# The tests that serve it (test_silero_vad) link the shipped folder.
NOT_BY_DEFAULT = ("silero_vad", "asr_silero")


def _test_repository():
    """The shipped repository (but NOT_BY_DEFAULT) plus the test-only models
    (tests/models, e.g. echo_asr), as one folder of links: what the tests
    serve by default."""
    root = tempfile.mkdtemp(prefix="hark-models-")
    atexit.register(shutil.rmtree, root, True)
    for top in (SHIPPED_MODELS, TEST_MODELS):
        for name in os.listdir(top):
            if top == SHIPPED_MODELS and name in NOT_BY_DEFAULT:
                continue
            if os.path.isfile(os.path.join(top, name, "config.pbtxt")):
                os.symlink(os.path.join(top, name), os.path.join(root, name))
    return root


MODELS = _test_repository()


def die_with_parent():
    """preexec_fn: the child gets SIGKILL if the test process dies, however
    it dies (a ctest timeout kills it with SIGKILL, skipping every cleanup)."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


# harkd starts through setpriv (util-linux, essential in Debian), which sets
# the same parent-death signal and execs it, rather than with a preexec_fn:
# a preexec_fn makes subprocess fork() instead of vfork(), which runs
# grpcio's fork handlers, and Debian's grpcio 1.51 aborts in them at random
# while a closed channel's threads wind down ("thread_pool.cc: assertion
# failed: state_ == State::kRunning", grpc/grpc#31885): test_grpc and
# test_riva crashed that way under load, between their server classes.
DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Harkd:
    """A harkd process on free ports; stop() checks it exits cleanly."""

    def __init__(self, repo=MODELS, args=(), wait_ready=True, grpc=False):
        self.http_port = free_port()
        self.metrics_port = free_port()
        # gRPC is opt-in: a free port when asked for, else off.
        self.grpc_port = free_port() if grpc else -1
        self.log_path = tempfile.mktemp(prefix="harkd-", suffix=".log")
        self.log = open(self.log_path, "wb")
        cmd = [os.path.join(BIN_DIR, "harkd"), "--model-repository", repo,
               "--http-port", str(self.http_port), "--metrics-port", str(self.metrics_port),
               "--grpc-port", str(self.grpc_port), "--http-address", "127.0.0.1", *args]
        self.proc = subprocess.Popen(DIE_WITH_PARENT + cmd, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.wait_live()
        if wait_ready:
            self.wait_ready()

    def wait_live(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("harkd exited early:\n" + self.output())
            try:
                status, _, _ = self.request("GET", "/v2/health/live")
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("harkd not live in time:\n" + self.output())

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            status, _, _ = self.request("GET", "/v2/health/ready")
            if status == 200:
                return
            time.sleep(0.05)
        raise RuntimeError("harkd not ready in time:\n" + self.output())

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def connect(self, port=None, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", port or self.http_port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, port=None):
        """One request on a fresh connection: (status, headers, body bytes)."""
        conn = self.connect(port)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, dict(resp.getheaders()), resp.read()
        finally:
            conn.close()

    def json(self, method, path, doc=None, port=None):
        body = None if doc is None else json.dumps(doc).encode()
        headers = {"Content-Type": "application/json"} if body is not None else {}
        status, hdrs, data = self.request(method, path, body, headers, port)
        return status, (json.loads(data) if data else None)

    def rss_kib(self):
        """harkd's resident memory now."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def sanitized(self):
        """True under ASan, whose quarantine holds freed memory: resident
        memory then says nothing about leaks (LeakSanitizer does, at exit)."""
        with open(f"/proc/{self.proc.pid}/maps") as f:
            return "libasan" in f.read()

    def metrics(self):
        status, _, body = self.request("GET", "/metrics", port=self.metrics_port)
        assert status == 200, status
        return body.decode()

    def stop(self, timeout=30, expect_rc=0):
        """Stops harkd (SIGTERM) unless it has exited; checks its exit status
        and that no sanitizer reported; returns its output. Once only."""
        if self.log.closed:
            return ""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("harkd did not stop on SIGTERM:\n" + self.output())
        self.log.close()
        out = self.output()
        rc = self.proc.returncode
        os.unlink(self.log_path)
        if rc != expect_rc or "ERROR: AddressSanitizer" in out or "runtime error:" in out \
                or "LeakSanitizer" in out:
            raise AssertionError(f"harkd exited with {rc}:\n{out}")
        return out


def terminate(proc, timeout=10):
    """Stops a helper process (prometheus, haproxy): SIGTERM, then SIGKILL."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def metric_value(text, name, **labels):
    """The value of one sample of the Prometheus exposition, or None."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        if head.split("{")[0] != name:
            continue
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            return float(value)
    return None


def make_repo(models):
    """A temporary model repository: {name: config text}. Returns its path."""
    root = tempfile.mkdtemp(prefix="hark-repo-")
    for name, config in models.items():
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
            f.write(config)
    return root


class ServerTest(unittest.TestCase):
    """One harkd for the whole class, on the default repository unless the
    class sets REPO (a dict of configs) or ARGS."""
    REPO = None
    ARGS = ()
    GRPC = False

    @classmethod
    def setUpClass(cls):
        cls.repo_dir = make_repo(cls.REPO) if cls.REPO else None
        cls.server = Harkd(cls.repo_dir or MODELS, cls.ARGS, grpc=cls.GRPC)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop()
        finally:
            if cls.repo_dir:
                shutil.rmtree(cls.repo_dir, ignore_errors=True)


def simple_request(a, b, binary=False, **extra):
    doc = {"inputs": [
        {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": a},
        {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": b}]}
    doc.update(extra)
    return doc


def main():
    unittest.main(verbosity=2)
