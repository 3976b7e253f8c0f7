"""Pipelined HTTP/1.1 requests and slow requests under short time limits,
over raw sockets against the real harkd (found by the soak, bench/RESULTS.md
2026-11-24):

- requests with bodies sent in one write: under libwebsockets 4.1 the
  second was parsed from lws's own buffer, which lws fed again as the body
  and freed under its parser (heap-use-after-free, ~70 KB bodies), or
  looped on for ever (small bodies: no reply, and a drain that never
  ended); hark then refused such a request with 503. Since hark reads
  HTTP/1.1 itself (src/frontend/http/exchange.c), every pipelined request
  is answered, once, in order, bodies or not.
- keep-alive clients that wait for each reply are all served.
- a client that pipelines without reading its replies holds no more than
  a little of the server's memory: reading stops while a request is
  served and its replies wait in the socket.
- a request whose head and body are in is not cut by a time limit while
  the server works on it: a repository load without a body, longer than
  --http-body-timeout-secs, was cut by libwebsockets' own request timeout
  with no reply.
"""
import json
import os
import shutil
import socket
import tempfile
import threading
import time
import unittest

from harness import MODELS, Harkd, make_repo, metric_value

IDENTITY = open(os.path.join(MODELS, "identity", "config.pbtxt")).read()


def infer_request(size):
    """POST /v2/models/identity/infer whose body is about `size` bytes."""
    doc = {"inputs": [{"name": "INPUT_BYTES", "shape": [1, 1], "datatype": "BYTES",
                       "data": ["x" * max(1, size - 80)]}]}
    body = json.dumps(doc).encode()
    return (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: hark\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body


WAITING_CLIENTS = 8
WAITING_POSTS = 15000  # each


def head_and_body_of_one_length():
    """(head, body) of POST /v2/models/identity/infer, the body exactly as
    long as the head."""
    for n in range(1, 200):
        body = json.dumps({"inputs": [{"name": "INPUT_BYTES", "shape": [1, 1],
                                       "datatype": "BYTES", "data": ["x" * n]}]}).encode()
        head = (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: hark\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
        if len(body) == len(head):
            return head, body
    raise AssertionError("no body as long as its head")


def read_replies(sock, want, timeout=10):
    """Reads replies until `want` came or the server closed or `timeout`
    passed: ([(status, headers, body)], closed)."""
    sock.settimeout(0.2)
    data, replies, closed = b"", [], False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(replies) < want:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
        while b"\r\n\r\n" in data:
            head, rest = data.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip()
                       for k, v in (line.split(":", 1) for line in lines[1:])}
            n = int(headers.get("content-length", "0"))
            if len(rest) < n:
                break
            replies.append((int(lines[0].split()[1]), headers, rest[:n]))
            data = rest[n:]
    return replies, closed


def wait_closed(sock, timeout=10):
    """True once the server ends the connection (EOF or reset)."""
    sock.settimeout(timeout)
    try:
        while sock.recv(65536):
            pass
    except socket.timeout:
        return False
    except ConnectionResetError:
        pass
    return True


class Pipelining(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = make_repo({"identity": IDENTITY})
        cls.server = Harkd(cls.repo)

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop()  # no sanitizer report, exit status 0
        finally:
            shutil.rmtree(cls.repo, ignore_errors=True)

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.server.http_port))

    def assert_serving(self):
        with self.connect() as s:
            s.sendall(infer_request(100))
            replies, _ = read_replies(s, 1)
        self.assertEqual([r[0] for r in replies], [200])

    def assert_all_answered_in_order(self, requests, sizes):
        """Sends `requests` in one write: each is answered 200, in order
        (an identity infer echoes its body's size), and the connection
        stays open for the next."""
        with self.connect() as s:
            s.sendall(b"".join(requests))
            replies, closed = read_replies(s, len(requests))
            self.assertEqual([r[0] for r in replies], [200] * len(requests), replies)
            self.assertFalse(closed)
            for (_, _, body), size in zip(replies, sizes):
                if size is not None:
                    got = json.loads(body)["outputs"][0]["data"][0]
                    self.assertEqual(len(got), max(1, size - 80))
            s.sendall(infer_request(100))
            replies, _ = read_replies(s, 1)
            self.assertEqual([r[0] for r in replies], [200])
        self.assert_serving()

    def test_large_posts_in_one_write(self):
        # Was: heap-use-after-free in lws's body callback (ASan abort).
        self.assert_all_answered_in_order([infer_request(70000), infer_request(60000)],
                                          [70000, 60000])

    def test_small_posts_in_one_write(self):
        # Was: the first answered, the others never, and a drain that hung.
        for size in (10, 1000):
            self.assert_all_answered_in_order([infer_request(size), infer_request(size + 1),
                                               infer_request(size + 2)],
                                              [size, size + 1, size + 2])

    def test_get_then_post_in_one_write(self):
        get = b"GET /v2/models/identity HTTP/1.1\r\nHost: hark\r\n\r\n"
        self.assert_all_answered_in_order([get, infer_request(1000), get], [None, 1000, None])

    def test_many_pipelined_posts_without_reading_hold_little(self):
        # 400 POSTs of 64 KiB (25 MiB) in one go, no reply read for a while:
        # the server reads a little ahead of the request it serves, and no
        # further while its replies wait in the socket.
        req = infer_request(65536)
        before = self.server.rss_kib()
        with self.connect() as s:
            s.setblocking(False)
            sent = 0
            deadline = time.monotonic() + 5
            data = req * 400
            while sent < len(data) and time.monotonic() < deadline:
                try:
                    sent += s.send(data[sent:sent + 1 << 20])
                except BlockingIOError:
                    time.sleep(0.05)
            self.assertLess(sent, len(data), "the server read all of it without replying")
            self.assertLess(self.server.rss_kib() - before, 64 * 1024)
        self.assert_serving()

    def test_pipelined_gets_are_served_in_order(self):
        paths = ["/v2/health/ready", "/v2/models/identity", "/v2/health/live",
                 "/v2/models/identity/ready", "/v2"]
        with self.connect() as s:
            s.sendall(b"".join(b"GET %s HTTP/1.1\r\nHost: hark\r\n\r\n" % p.encode()
                               for p in paths))
            replies, _ = read_replies(s, len(paths))
        self.assertEqual([r[0] for r in replies], [200] * len(paths))
        self.assertEqual(json.loads(replies[1][2])["name"], "identity")

    def test_clients_that_wait_for_each_reply_are_all_served(self):
        # Was: a false 503 "a pipelined request with a body must wait" for
        # about one in 10,000 such POSTs (lws's pipelining guard). As
        # http.client does, each head and body go in two writes.
        head, body = head_and_body_of_one_length()
        statuses, failures = [], []
        deadline = time.monotonic() + 20  # a slow (sanitized) build does fewer

        def client():
            try:
                with self.connect() as s:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client
                    for _ in range(WAITING_POSTS):
                        if time.monotonic() > deadline:
                            break
                        s.sendall(head)
                        s.sendall(body)
                        replies, closed = read_replies(s, 1)
                        statuses.extend(r[0] for r in replies)
                        if len(replies) != 1 or replies[0][0] != 200:
                            failures.append((replies, closed))
                            return
            except OSError as e:
                failures.append(repr(e))

        threads = [threading.Thread(target=client) for _ in range(WAITING_CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [], f"after {len(statuses)} replies")
        self.assertGreater(len(statuses), 1000)

    def test_keep_alive_posts_one_at_a_time_are_all_served(self):
        # A request sent once the whole (large) reply came must not be
        # taken for pipelined input: lws used to read it while the last
        # of the reply was still its to send.
        with self.connect() as s:
            for size in (10, 70000, 1000, 70000) * 5:
                s.sendall(infer_request(size))
                replies, closed = read_replies(s, 1)
                self.assertEqual([r[0] for r in replies], [200])
                self.assertFalse(closed)


class DrainAfterPipelining(unittest.TestCase):
    def test_sigterm_drains_at_once(self):
        # Was: exit 1 after the 35 s shutdown watchdog.
        repo = make_repo({"identity": IDENTITY})
        try:
            server = Harkd(repo)
            with socket.create_connection(("127.0.0.1", server.http_port)) as s:
                s.sendall(infer_request(1000) * 3)
                read_replies(s, 3, timeout=3)
                t0 = time.monotonic()
                server.stop(timeout=20)
            self.assertLess(time.monotonic() - t0, 10)
        finally:
            shutil.rmtree(repo, ignore_errors=True)


class SlowRequestsUnderShortLimits(unittest.TestCase):
    """Every HTTP time limit at 1 s; a model load takes longer (asr:
    pocketsphinx reads its model, seconds)."""

    @classmethod
    def setUpClass(cls):
        cls.repo = tempfile.mkdtemp(prefix="hark-pipelining-")
        os.symlink(os.path.realpath(os.path.join(MODELS, "asr")), os.path.join(cls.repo, "asr"))
        cls.server = Harkd(cls.repo, ["--model-control-mode", "explicit", "--load-model", "asr",
                                      "--http-header-timeout-secs", "1",
                                      "--http-body-timeout-secs", "1",
                                      "--http-body-deadline-secs", "1",
                                      "--send-timeout-secs", "1"])

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop()
        finally:
            shutil.rmtree(cls.repo, ignore_errors=True)

    def load(self, extra):
        with socket.create_connection(("127.0.0.1", self.server.http_port)) as s:
            t0 = time.monotonic()
            s.sendall(b"POST /v2/repository/models/asr/load HTTP/1.1\r\nHost: hark\r\n" + extra)
            replies, _ = read_replies(s, 1, timeout=120)
            return replies, time.monotonic() - t0

    def test_load_without_body_is_answered(self):
        # Was: cut at --http-body-timeout-secs (lws's own request timeout)
        # with no reply (curl: 000).
        for extra in (b"\r\n", b"Content-Length: 0\r\n\r\n", b"Content-Length: 2\r\n\r\n{}"):
            replies, took = self.load(extra)
            self.assertEqual([r[0] for r in replies], [200], (extra, took))


if __name__ == "__main__":
    unittest.main(verbosity=2)
