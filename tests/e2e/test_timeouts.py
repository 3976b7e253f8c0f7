"""Issue 13, finding 5: time limits like nginx's, and gRPC's connection
policing like gRPC core's (Triton's --grpc-keepalive-* flags).

Real sockets against the real harkd, started with short limits so each
test takes a few seconds: a request head or body trickled byte by byte is
cut off (408) after its total bound, however steadily it trickles; a
client that stops reading is dropped while everyone else is served; a
WebSocket stream paused because its client reads nothing is closed; gRPC
connections without calls are sent GOAWAY and closed; one connection may
hold only so many calls and streams; a client that pings too often gets
GOAWAY ENHANCE_YOUR_CALM "too_many_pings"; one that does not answer our
keepalive ping is closed. gRPC frames are written by hand here (HTTP/2
framing and literal HPACK), so the client obeys no limit by itself.
"""
import json
import os
import queue
import shutil
import socket
import struct
import tempfile
import time
import unittest

import grpc

from harness import MODELS, Harkd, metric_value, simple_request, grpc_stubs

grpc_stubs("grpc_service", "model_config")
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402


def repo(*names):
    """A repository of links to a few of the test repository's models: the
    server starts in a moment (no speech model to load)."""
    root = tempfile.mkdtemp(prefix="hark-timeouts-")
    for name in names:
        os.symlink(os.path.realpath(os.path.join(MODELS, name)), os.path.join(root, name))
    return root


def limit_hits(server, name):
    return metric_value(server.metrics(), "hark_limit_hits_total", limit=name) or 0


def read_until_closed(sock, deadline):
    """Everything the server sends until it closes (or resets); None when it
    is still open at the deadline."""
    data = b""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return None
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk
    return None


# ---- HTTP/1.1 and WebSocket ------------------------------------------------------------------

class HttpTimeouts(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = repo("simple", "identity", "echo_asr")
        cls.server = Harkd(cls.repo, ["--http-header-timeout-secs", "1",
                                      "--http-body-deadline-secs", "2",
                                      "--send-timeout-secs", "1",
                                      "--speech-model", "echo_asr"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, ignore_errors=True)

    def connect(self, rcvbuf=None):
        s = socket.socket()
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.connect(("127.0.0.1", self.server.http_port))
        return s

    def assert_serving(self):
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request([1] * 16, [2] * 16))
        self.assertEqual(status, 200, doc)

    def trickle(self, sock, data, every=0.2, limit=10):
        """Sends `data` a byte at a time until the server answers or closes:
        (what it sent, seconds taken)."""
        t0 = time.monotonic()
        got = b""
        for i in range(len(data)):
            if time.monotonic() - t0 > limit:
                break
            try:
                sock.sendall(data[i:i + 1])
            except OSError:
                break
            sock.settimeout(every)
            try:
                chunk = sock.recv(4096)
                got += chunk
                if not chunk or got.endswith(b"}"):
                    break
            except socket.timeout:
                continue
            except OSError:
                break
        return got, time.monotonic() - t0

    def test_slowloris_head_is_cut_off(self):
        before = limit_hits(self.server, "http_header_timeout")
        s = self.connect()
        head = b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"z" * 400
        got, took = self.trickle(s, head)
        s.close()
        # One byte every 0.2 s never stalls, but the head as a whole is
        # late: 408 after the 1 s bound, not the 10 s lws held it before.
        self.assertTrue(got.startswith(b"HTTP/1.1 408"), got)
        self.assertIn(b"--http-header-timeout-secs", got)
        self.assertLess(took, 4)
        self.assertGreater(limit_hits(self.server, "http_header_timeout"), before)
        self.assert_serving()

    def test_silent_connection_is_cut_off(self):
        s = self.connect()
        got = read_until_closed(s, time.monotonic() + 5)
        s.close()
        self.assertIsNotNone(got, "a connection that sends nothing is still open after 5 s")
        self.assertTrue(got.startswith(b"HTTP/1.1 408"), got)

    def test_slow_body_is_cut_off(self):
        before = limit_hits(self.server, "http_body_timeout")
        s = self.connect()
        s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 2000\r\n\r\n")
        got, took = self.trickle(s, b"{" + b" " * 1999, every=0.25)
        s.close()
        # The stall timeout (30 s between pieces) never fires for a body
        # that trickles; the body's own deadline (2 s) does.
        self.assertTrue(got.startswith(b"HTTP/1.1 408"), got)
        self.assertIn(b"--http-body-deadline-secs", got)
        self.assertLess(took, 6)
        self.assertGreater(limit_hits(self.server, "http_body_timeout"), before)
        self.assert_serving()

    def test_client_that_stops_reading_is_dropped(self):
        before = limit_hits(self.server, "send_timeout")
        n = 16 << 20  # a reply far larger than both sockets' buffers
        header = json.dumps({
            "inputs": [{"name": "INPUT_UINT8", "shape": [1, n], "datatype": "UINT8",
                        "parameters": {"binary_data_size": n}}],
            "parameters": {"binary_data_output": True}}).encode()
        s = self.connect(rcvbuf=4096)
        s.sendall(b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                  % (len(header), len(header) + n) + header)
        s.sendall(b"\x07" * n)
        # It reads nothing; meanwhile everyone else is served.
        deadline = time.monotonic() + 10
        while limit_hits(self.server, "send_timeout") == before and time.monotonic() < deadline:
            self.assert_serving()
            time.sleep(0.3)
        self.assertGreater(limit_hits(self.server, "send_timeout"), before)
        # What it reads now ends before the reply does: it was dropped.
        got = read_until_closed(s, time.monotonic() + 10)
        s.close()
        self.assertIsNotNone(got)
        self.assertLess(len(got), n)
        self.assert_serving()

    def test_paused_websocket_is_closed(self):
        """A Vosk client that sends audio and reads none of the replies:
        its replies wait, its stream pauses, and, before, it stayed so for
        ever; now it is dropped after the send timeout."""
        before = limit_hits(self.server, "send_timeout")
        s = self.connect(rcvbuf=4096)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  b"Sec-WebSocket-Version: 13\r\n\r\n")
        s.settimeout(10)
        self.assertIn(b" 101 ", s.recv(4096))
        # 200,000 masked binary frames of one sample each, sent in bulk:
        # each gets a reply, megabytes in all, which nobody reads.
        frames = (b"\x82\x82" + b"\x00" * 4 + b"\x01\x00") * 200000
        s.setblocking(False)
        sent, deadline = 0, time.monotonic() + 40  # an ASan build replies slowly
        while sent < len(frames) and time.monotonic() < deadline:
            try:
                sent += s.send(frames[sent:sent + 65536])
            except BlockingIOError:
                time.sleep(0.05)  # the server stopped reading: it is paused
            except OSError:
                break
            if limit_hits(self.server, "send_timeout") > before:
                break
        deadline = time.monotonic() + 30
        while limit_hits(self.server, "send_timeout") == before and time.monotonic() < deadline:
            self.assert_serving()
            time.sleep(0.2)
        s.close()
        self.assertGreater(limit_hits(self.server, "send_timeout"), before)
        self.assertIn("ws: a client read nothing", self.server.output())
        self.assert_serving()


# ---- gRPC: hand-made HTTP/2 ----------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY = 0, 1, 3, 4, 6, 7
ACK, END_HEADERS = 1, 4


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def literal(name, value):
    """HPACK: a literal header field without indexing, new name, no Huffman."""
    n, v = name.encode(), value.encode()
    assert len(n) < 127 and len(v) < 127
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def request_headers(path):
    return b"".join(literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"),
        ("content-type", "application/grpc"), ("te", "trailers")))


class H2:
    """A bare HTTP/2 client connection: frames in, frames out."""

    def __init__(self, port, preface=True):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = b""
        if preface:
            self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))

    def send(self, data):
        self.sock.sendall(data)

    def next_frame(self, deadline):
        """(type, flags, stream, payload), or None once the server closed."""
        while len(self.buf) < 9 or len(self.buf) < 9 + int.from_bytes(self.buf[:3], "big"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame from the server in time")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError("no frame from the server in time")
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            self.buf += chunk
        n = int.from_bytes(self.buf[:3], "big")
        f = (self.buf[3], self.buf[4], struct.unpack(">I", self.buf[5:9])[0] & 0x7fffffff,
             self.buf[9:9 + n])
        self.buf = self.buf[9 + n:]
        return f

    def frames_until_closed(self, timeout):
        """Every frame until the server closes; fails if it does not in time."""
        out, deadline = [], time.monotonic() + timeout
        while True:
            f = self.next_frame(deadline)
            if f is None:
                return out
            out.append(f)

    def close(self):
        self.sock.close()


def goaways(frames):
    """(error code, debug data) of each GOAWAY among `frames`."""
    return [(struct.unpack(">I", p[4:8])[0], p[8:]) for t, _, _, p in frames if t == GOAWAY]


class GrpcLimits(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = repo("simple")
        cls.server = Harkd(cls.repo, ["--grpc-max-connection-idle", "1000",
                                      "--grpc-max-concurrent-streams", "4",
                                      "--grpc-max-streams-per-connection", "2",
                                      "--grpc-stream-idle-timeout-secs", "6"], grpc=True)
        cls.target = f"127.0.0.1:{cls.server.grpc_port}"

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, ignore_errors=True)

    def channel(self):
        # Its own connection, not one shared with the other channels.
        return grpc.insecure_channel(self.target, options=[("grpc.use_local_subchannel_pool", 1)])

    def test_idle_connection_gets_goaway_and_closes(self):
        before = limit_hits(self.server, "grpc_connection_idle")
        h = H2(self.server.grpc_port)
        t0 = time.monotonic()
        frames = h.frames_until_closed(10)
        h.close()
        self.assertIn((0, b"max_idle"), goaways(frames))
        self.assertGreater(time.monotonic() - t0, 0.5)
        # A socket that never says a word is closed as well.
        s = socket.create_connection(("127.0.0.1", self.server.grpc_port))
        self.assertIsNotNone(read_until_closed(s, time.monotonic() + 10))
        s.close()
        self.assertGreater(limit_hits(self.server, "grpc_connection_idle"), before)

    def test_many_silent_connections_do_not_live_on(self):
        socks = [socket.create_connection(("127.0.0.1", self.server.grpc_port))
                 for _ in range(200)]
        deadline = time.monotonic() + 15
        for s in socks:
            self.assertIsNotNone(read_until_closed(s, deadline))
            s.close()

    def test_max_concurrent_streams_is_advertised_and_enforced(self):
        h = H2(self.server.grpc_port)
        deadline = time.monotonic() + 5
        t, flags, _, payload = h.next_frame(deadline)
        self.assertEqual((t, flags), (SETTINGS, 0))
        settings = {struct.unpack(">H", payload[i:i + 2])[0]:
                    struct.unpack(">I", payload[i + 2:i + 6])[0]
                    for i in range(0, len(payload), 6)}
        self.assertEqual(settings.get(3), 4)  # SETTINGS_MAX_CONCURRENT_STREAMS
        # Five unary calls that never send their message: the fifth is
        # refused; the four stay open. (Once the client has acknowledged
        # the limit, nghttp2 takes going past it for a connection error:
        # GOAWAY PROTOCOL_ERROR. gRPC clients keep to it by themselves.)
        path = "/inference.GRPCInferenceService/ModelInfer"
        for sid in (1, 3, 5, 7, 9):
            h.send(frame(HEADERS, END_HEADERS, sid, request_headers(path)))
        while True:
            t, _, sid, payload = h.next_frame(deadline)
            if t == RST_STREAM:
                break
        self.assertEqual((sid, struct.unpack(">I", payload)[0]), (9, 7))  # REFUSED_STREAM
        h.close()

    def stream(self, channel):
        """A ModelStreamInfer call whose requests come from a queue."""
        q = queue.Queue()
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        it = stub.ModelStreamInfer(iter(q.get, None), timeout=30)
        return q, it

    def infer_request(self):
        r = pb.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            t = r.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            t.contents.int_contents.extend([1] * 16)
        return r

    def test_streams_per_connection_are_capped(self):
        before = limit_hits(self.server, "grpc_streams_per_connection")
        a = self.channel()
        open_streams = []
        try:
            for _ in range(2):
                q, it = self.stream(a)
                q.put(self.infer_request())
                self.assertFalse(next(it).error_message)
                open_streams.append((q, it))
            q3, it3 = self.stream(a)
            with self.assertRaises(grpc.RpcError) as ctx:
                next(it3)
            self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("--grpc-max-streams-per-connection", ctx.exception.details())
            q3.put(None)
            # Another connection is not held back by this one.
            b = self.channel()
            q, it = self.stream(b)
            q.put(self.infer_request())
            self.assertFalse(next(it).error_message)
            q.put(None)
            self.assertEqual(list(it), [])
            b.close()
        finally:
            for q, it in open_streams:
                q.put(None)
            a.close()
        self.assertGreater(limit_hits(self.server, "grpc_streams_per_connection"), before)

    def test_idle_stream_ends(self):
        ch = self.channel()
        q, it = self.stream(ch)
        q.put(self.infer_request())
        self.assertFalse(next(it).error_message)
        t0 = time.monotonic()
        with self.assertRaises(grpc.RpcError) as ctx:
            next(it)  # the client sends nothing more
        q.put(None)
        ch.close()
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertIn("stream idle timeout", ctx.exception.details())
        self.assertGreater(time.monotonic() - t0, 4)
        self.assertLess(time.monotonic() - t0, 20)

    def test_ping_flood_gets_enhance_your_calm(self):
        before = limit_hits(self.server, "grpc_ping_strikes")
        h = H2(self.server.grpc_port)
        h.send(frame(SETTINGS, ACK, 0))
        for i in range(5):
            h.send(frame(PING, 0, 0, struct.pack(">Q", i)))
        frames = h.frames_until_closed(10)
        h.close()
        self.assertIn((11, b"too_many_pings"), goaways(frames))  # ENHANCE_YOUR_CALM
        self.assertGreater(limit_hits(self.server, "grpc_ping_strikes"), before)


class GrpcKeepalive(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.repo = repo("simple")
        cls.server = Harkd(cls.repo, ["--grpc-keepalive-time", "300",
                                      "--grpc-keepalive-timeout", "1500",
                                      "--grpc-keepalive-permit-without-calls", "true",
                                      "--grpc-http2-max-pings-without-data", "0"], grpc=True)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.repo, ignore_errors=True)

    def test_unanswered_keepalive_closes_the_connection(self):
        before = limit_hits(self.server, "grpc_keepalive_timeout")
        h = H2(self.server.grpc_port)
        h.send(frame(SETTINGS, ACK, 0))
        frames = h.frames_until_closed(10)  # we answer no PING
        h.close()
        pings = [f for f in frames if f[0] == PING and not f[1] & ACK]
        self.assertTrue(pings, frames)
        self.assertGreater(limit_hits(self.server, "grpc_keepalive_timeout"), before)

    def test_client_that_answers_stays(self):
        before = limit_hits(self.server, "grpc_keepalive_timeout")
        h = H2(self.server.grpc_port)
        h.send(frame(SETTINGS, ACK, 0))
        pings, end = 0, time.monotonic() + 2.5
        while time.monotonic() < end:
            try:
                f = h.next_frame(end)
            except TimeoutError:
                break
            self.assertIsNotNone(f, "closed although it answered every ping")
            if f[0] == PING and not f[1] & ACK:
                pings += 1
                h.send(frame(PING, ACK, 0, f[3]))
        h.close()
        self.assertGreaterEqual(pings, 2)
        self.assertEqual(limit_hits(self.server, "grpc_keepalive_timeout"), before)


if __name__ == "__main__":
    unittest.main(verbosity=2)
