"""hark's own HTTP/1.1 (src/frontend/http/exchange.c over h1_parse.c),
over raw sockets against the real harkd: what a server must refuse (RFC
9112: requests that could be read two ways, malformed heads, heads too
long), what clients count on (Expect: 100-continue, HEAD, HTTP/1.0
keep-alive, a percent-encoded path, absolute-form targets), the time
limits a kept-alive connection meets, and the WebSocket handshake's
rules. A well-behaved request beside each refusal is still served.
"""
import base64
import hashlib
import json
import socket
import time

import harness


read_reply = harness.read_http_reply


def at_eof(sock, timeout=5):
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


class Http1(harness.ServerTest):
    ARGS = ("--http-header-timeout-secs", "2", "--http-body-timeout-secs", "2")

    def connect(self):
        return socket.create_connection(("127.0.0.1", self.server.http_port), timeout=10)

    def exchange(self, raw):
        with self.connect() as s:
            s.sendall(raw)
            return read_reply(s)

    def assert_served(self):
        status, _, body, _ = self.exchange(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual(status, 200)

    def assert_refused(self, raw, status, words=None):
        with self.connect() as s:
            s.sendall(raw)
            reply = read_reply(s)
            self.assertIsNotNone(reply, "no reply")
            self.assertEqual(reply[0], status, reply)
            if words:
                self.assertIn(words, json.loads(reply[2])["error"])
            self.assertEqual(reply[1].get("connection"), "close")
            self.assertTrue(at_eof(s))
        self.assert_served()

    def test_smuggling_shapes_are_refused(self):
        post = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
        for extra in (b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n",
                      b"Content-Length: 4\r\nContent-Length: 5\r\n",
                      b"Content-Length: 4, 5\r\n",
                      b"Content-Length: +4\r\n",
                      b"Content-Length : 4\r\n",
                      b"X-A: 1\r\n folded\r\n",
                      b"X-A: 1\rX-B: 2\r\n"):
            with self.subTest(extra=extra):
                self.assert_refused(post + extra + b"\r\nabcd", 400)

    def test_transfer_codings(self):
        post = b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
        self.assert_refused(post + b"Transfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n",
                            411, "chunked")
        self.assert_refused(post + b"Transfer-Encoding: gzip, chunked\r\n\r\n", 501)

    def test_malformed_heads_are_refused(self):
        for raw, status in ((b"GET  / HTTP/1.1\r\n\r\n", 400),
                            (b"GET / HTTP/2.0\r\n\r\n", 505),
                            (b"GET / FOO\r\n\r\n", 400),
                            (b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", 400),
                            (b"GET /v2/%zz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
                            (b"GET /v2/a%00b HTTP/1.1\r\nHost: x\r\n\r\n", 400),
                            (b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i
                                                              for i in range(65)) + b"\r\n", 431)):
            with self.subTest(raw=raw[:40]):
                self.assert_refused(raw, status)

    def test_host_once_on_http11(self):
        # RFC 9112 3.2: 400 for an HTTP/1.1 request without Host, with two,
        # or with one that is not a host and port; HTTP/1.0 may leave it out.
        ready = b"GET /v2/health/ready HTTP/1.1\r\n"
        self.assert_refused(ready + b"\r\n", 400, "without a Host field")
        self.assert_refused(ready + b"Host: a\r\nX: 1\r\nhost: a\r\n\r\n", 400,
                            "more than one Host")
        for bad in (b"a/b", b"a b", b"x@y", b"a\\b", b"a\xc3\xa9"):
            with self.subTest(host=bad):
                self.assert_refused(ready + b"Host: " + bad + b"\r\n\r\n", 400, "not a host")
        self.assert_refused(b"GET /v2/models/echo_asr/stream HTTP/1.1\r\nUpgrade: websocket\r\n"
                            b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", 400,
                            "without a Host field")
        for good in (b"localhost:8000", b"127.0.0.1", b"[::1]:8000", b"my_host.example", b""):
            with self.subTest(host=good):
                self.assertEqual(self.exchange(ready + b"Host: " + good + b"\r\n\r\n")[0], 200)
        self.assertEqual(self.exchange(b"GET /v2/health/ready HTTP/1.0\r\n\r\n")[0], 200)

    def test_a_head_too_long_is_refused_at_its_bound(self):
        for end in (b"", b"\r\n\r\n"):  # coming still, or whole in one read
            with self.subTest(whole=bool(end)), self.connect() as s:
                s.sendall(b"GET / HTTP/1.1\r\nX-Long: " + b"a" * 40000 + end)
                reply = read_reply(s)
                self.assertEqual(reply[0], 431)
                self.assertTrue(at_eof(s))

    def test_connection_close_on_any_line(self):
        # A list may come in several lines (RFC 9110 5.3): "close" on the
        # second still closes.
        with self.connect() as s:
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n"
                      b"Connection: close\r\n\r\n")
            reply = read_reply(s)
            self.assertEqual((reply[0], reply[1].get("connection")), (200, "close"))
            self.assertTrue(at_eof(s))

    def test_expect_100_continue(self):
        body = json.dumps(harness.simple_request([1] * 16, [2] * 16)).encode()
        with self.connect() as s:
            s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            status, _, _, rest = read_reply(s)
            self.assertEqual(status, 100)
            self.assertEqual(rest, b"")
            s.sendall(body)
            status, _, reply, _ = read_reply(s)
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(reply)["outputs"][0]["data"], [3] * 16)

    def test_an_early_reply_drops_the_body_and_keeps_the_connection(self):
        """A reply made before the body is read (404: no such route) drops
        the rest of the body, however it comes, and the connection goes on
        (as nginx discards a body). A client waiting for a 100 (Continue),
        or more than 1 MiB of body left, end the connection instead."""
        body = b"x" * 20000
        head = b"POST /v2/nothing HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n"
        with self.connect() as s:
            s.sendall(head % len(body) + b"\r\n" + body[:100])
            status, headers, _, rest = read_reply(s)
            self.assertEqual((status, rest), (404, b""))
            self.assertNotEqual(headers.get("connection"), "close")
            s.sendall(body[100:7000])
            time.sleep(0.2)
            s.sendall(body[7000:] + b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            status, _, _, _ = read_reply(s)
            self.assertEqual(status, 200)
        for extra, size in ((b"Expect: 100-continue\r\n", 10), (b"", 2 << 20)):
            with self.subTest(extra=extra, size=size), self.connect() as s:
                s.sendall(head % size + extra + b"\r\n")
                status, headers, _, _ = read_reply(s)
                self.assertEqual((status, headers.get("connection")), (404, "close"))
                self.assertTrue(at_eof(s, timeout=15))
        self.assert_served()

    def test_head_has_no_body_and_http10_keep_alive(self):
        with self.connect() as s:
            s.sendall(b"HEAD /v2/models/simple HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /v2/models/simple HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
                      b"GET /v2/models/simple HTTP/1.0\r\n\r\n")
            s.settimeout(10)
            data = b""
            while not data.endswith(b"}") or data.count(b"HTTP/1.1 ") < 3:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            replies = data.split(b"HTTP/1.1 ")[1:]
            self.assertEqual(len(replies), 3, data)
            self.assertTrue(replies[0].startswith(b"405 "), replies[0])
            self.assertTrue(replies[0].endswith(b"\r\n\r\n"), "a HEAD reply with a body")
            self.assertIn(b"Connection: keep-alive", replies[1])
            self.assertIn(b"Connection: close", replies[2])
            self.assertTrue(at_eof(s))

    def test_percent_encoded_and_absolute_form_targets(self):
        status, _, body, _ = self.exchange(b"GET /v2/models/%73imple HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual((status, json.loads(body)["name"]), (200, "simple"))
        status, _, body, _ = self.exchange(
            b"GET http://hark:8000/v2/models/simple?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        self.assertEqual((status, json.loads(body)["name"]), (200, "simple"))

    def test_a_later_head_that_stalls_gets_408(self):
        with self.connect() as s:
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_reply(s)[0], 200)
            time.sleep(3)  # idle: kept, not a head timeout
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\n")  # half a head
            t0 = time.monotonic()
            reply = read_reply(s, timeout=10)
            self.assertEqual(reply[0], 408)
            self.assertIn("--http-header-timeout-secs", json.loads(reply[2])["error"])
            self.assertLess(time.monotonic() - t0, 6)
            self.assertTrue(at_eof(s))

    def test_a_stalled_body_gets_408(self):
        with self.connect() as s:
            s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 100\r\n\r\n{\"inputs\":")
            reply = read_reply(s, timeout=10)
            self.assertEqual(reply[0], 408)
            self.assertIn("--http-body-timeout-secs", json.loads(reply[2])["error"])
            self.assertTrue(at_eof(s))


class WebSocketHandshake(harness.ServerTest):
    def upgrade(self, extra=b"", key=b"dGhlIHNhbXBsZSBub25jZQ==", version=b"13", after=b""):
        s = socket.create_connection(("127.0.0.1", self.server.http_port), timeout=10)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  + (b"Sec-WebSocket-Key: " + key + b"\r\n" if key else b"")
                  + b"Sec-WebSocket-Version: " + version + b"\r\n" + extra + b"\r\n" + after)
        return s, read_reply(s)

    def test_accept_value(self):
        s, (status, headers, _, _) = self.upgrade()
        with s:
            self.assertEqual(status, 101)
            want = base64.b64encode(hashlib.sha1(
                b"dGhlIHNhbXBsZSBub25jZQ==258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()).decode()
            self.assertEqual(headers["sec-websocket-accept"], want)
            self.assertEqual(headers["upgrade"].lower(), "websocket")

    def test_bad_handshakes_are_refused(self):
        for kw, status in (({"version": b"12"}, 426), ({"key": b"short"}, 400),
                           ({"key": None}, 400),
                           ({"extra": b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"}, 400),
                           ({"extra": b"Content-Length: 3\r\n", "after": b"abc"}, 400)):
            with self.subTest(**{k: str(v) for k, v in kw.items()}):
                s, reply = self.upgrade(**kw)
                with s:
                    self.assertEqual(reply[0], status, reply)
                    if status == 426:
                        self.assertEqual(reply[1]["sec-websocket-version"], "13")
        s, reply = self.upgrade()
        s.close()
        self.assertEqual(reply[0], 101)

    def test_a_frame_sent_with_the_upgrade_is_read(self):
        # RFC 6455 asks clients to wait for the 101; one that did not used
        # to lose its first frames in libwebsockets' buffer.
        ping = harness.RawWebSocket.frame(9, b"early")
        s, (status, _, _, rest) = self.upgrade(after=ping)
        with s:
            self.assertEqual(status, 101)
            s.settimeout(5)
            while len(rest) < 7:
                rest += s.recv(4096)
            self.assertEqual(rest[:7], b"\x8a\x05early")


class InterfaceName(harness.ServerTest):
    # An interface's name binds its address (libwebsockets' own listener
    # did that once; hark's listeners now do).
    ARGS = ("--http-address", "lo")

    def test_served_on_the_interfaces_address(self):
        self.assertEqual(self.server.request("GET", "/v2/health/ready")[0], 200)


if __name__ == "__main__":
    harness.main()
