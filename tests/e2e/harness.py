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


RELEASE_SECS = 1  # harkd's --memory-release-secs unless a test gives its own


class Harkd:
    """A harkd process on free ports; stop() checks it exits cleanly."""

    def __init__(self, repo=MODELS, args=(), wait_ready=True, grpc=False):
        # A port free_port() found is free only until harkd binds it: in
        # between, another test's client may get it as its own local port
        # (the suite runs in parallel). harkd then exits at once saying so,
        # and starts again on other ports.
        for attempt in range(3):
            self._launch(repo, args, grpc)
            try:
                self.wait_live()
                break
            except RuntimeError:
                if attempt == 2 or self.proc.poll() is None or "(in use?)" not in self.output():
                    raise
                self.log.close()
                os.unlink(self.log_path)
        if wait_ready:
            self.wait_ready()

    def _launch(self, repo, args, grpc):
        self.http_port = free_port()
        self.metrics_port = free_port()
        # gRPC is opt-in: a free port when asked for, else off.
        self.grpc_port = free_port() if grpc else -1
        self.log_path = tempfile.mktemp(prefix="harkd-", suffix=".log")
        self.log = open(self.log_path, "wb")
        # Freed pages go back to the kernel every second, not every 30:
        # settled_rss_kib() then reads the memory harkd holds, not the
        # pages its allocator happened to keep since the last release.
        args = list(args)
        given = [i for i, a in enumerate(args) if a.split("=")[0] == "--memory-release-secs"]
        if given:
            i = given[-1]
            self.release_secs = int(args[i].split("=", 1)[1] if "=" in args[i] else args[i + 1])
            release = ()
        else:
            self.release_secs = RELEASE_SECS
            release = ("--memory-release-secs", str(RELEASE_SECS))
        cmd = [os.path.join(BIN_DIR, "harkd"), "--model-repository", repo,
               "--http-port", str(self.http_port), "--metrics-port", str(self.metrics_port),
               "--grpc-port", str(self.grpc_port), "--http-address", "127.0.0.1", *release,
               *args]
        self.proc = subprocess.Popen(DIE_WITH_PARENT + cmd, stdout=self.log,
                                     stderr=subprocess.STDOUT)

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

    def settled_rss_kib(self):
        """harkd's resident memory with its allocator's kept pages given
        back: the lowest reading over two and a half release periods. A
        plain reading counts, by chance, anything from none to a whole
        period's freed pages (20-45 MiB after 10,000 neural streams)."""
        if self.release_secs <= 0:
            raise AssertionError("settled_rss_kib: harkd runs with --memory-release-secs "
                                 f"{self.release_secs}: its kept pages are never given back")
        low, end = self.rss_kib(), time.monotonic() + 2.5 * self.release_secs
        while time.monotonic() < end:
            time.sleep(0.1)
            low = min(low, self.rss_kib())
        return low

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


def read_http_reply(sock, timeout=10):
    """One HTTP/1.1 reply from a raw socket: (status, headers with lower-case
    names, body, the bytes read past it), or None when the connection ends
    before a whole head."""
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    n = int(headers.get("content-length", "0"))
    while len(rest) < n:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, headers, rest[:n], rest[n:]


class RawWebSocket:
    """A WebSocket client that sends whatever frames a test asks for (masked
    or not, any bits, any length field) and reads the server's frames: for
    the framing rules no well-behaved client library will break."""

    def __init__(self, port, path="/", sock=None, timeout=10, headers=None):
        self.sock = sock or socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                          "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          f"Sec-WebSocket-Version: 13\r\n{extra}\r\n".encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError(f"no upgrade: {self.buf!r}")
            self.buf += chunk
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError(f"no upgrade: {head!r}")

    @staticmethod
    def frame(opcode, payload=b"", fin=True, mask=b"\x11\x22\x33\x44", rsv=0, length=None):
        """One frame; mask=None sends it unmasked; length forces the 64-bit
        length field to that value."""
        b0 = (0x80 if fin else 0) | rsv << 4 | opcode
        mbit = 0x80 if mask is not None else 0
        n = len(payload)
        if length is not None:
            head = bytes([b0, mbit | 127]) + length.to_bytes(8, "big")
        elif n < 126:
            head = bytes([b0, mbit | n])
        elif n < 65536:
            head = bytes([b0, mbit | 126]) + n.to_bytes(2, "big")
        else:
            head = bytes([b0, mbit | 127]) + n.to_bytes(8, "big")
        if mask is None:
            return head + payload
        return head + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(payload))

    def send(self, opcode, payload=b"", **kw):
        self.sock.sendall(self.frame(opcode, payload, **kw))

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk

    def recv_frame(self):
        """(opcode, payload) of the server's next frame."""
        self._need(2)
        b0, b1 = self.buf[0], self.buf[1]
        if b1 & 0x80:
            raise AssertionError("the server masked a frame")
        n, at = b1 & 0x7F, 2
        if n == 126:
            self._need(4)
            n, at = int.from_bytes(self.buf[2:4], "big"), 4
        elif n == 127:
            self._need(10)
            n, at = int.from_bytes(self.buf[2:10], "big"), 10
        self._need(at + n)
        payload, self.buf = self.buf[at:at + n], self.buf[at + n:]
        return b0 & 0x0F, payload

    def recv_close(self):
        """Reads up to the server's close frame: (code, reason), code None
        when the frame has no payload."""
        while True:
            op, payload = self.recv_frame()
            if op == 8:
                if not payload:
                    return None, ""
                return int.from_bytes(payload[:2], "big"), payload[2:].decode()

    def at_eof(self):
        """Whether the server hangs up (within the socket's timeout); what
        it sent meanwhile is kept in self.buf."""
        try:
            while True:
                chunk = self.sock.recv(4096)
                if not chunk:
                    return True
                self.buf += chunk
        except socket.timeout:
            return False
        except OSError:
            return True

    def close(self):
        self.sock.close()


def main():
    unittest.main(verbosity=2)
