"""Issue 24, item 4: replies are charged, and a client that does not read
them is stopped, then closed.

Before, replies were charged to no budget: 20 MiB of binary BYTES became a
120 MiB JSON reply held for every HTTP client that did not read it; one
ModelStreamInfer pushing large requests without reading had every reply
made and kept (1 GB in 15 s); and a client that set its HTTP/2 receive
window to 0 held its replies with no timeout ever firing.

Now an HTTP reply takes its bytes from --max-inflight-bytes while it is
written (one that does not fit is a 503 saying so); a gRPC connection's
unwritten replies are charged and past its share
(--grpc-max-declared-bytes-per-connection) no more of its requests are
read; and a connection whose replies wait behind a shut window for
--send-timeout-secs is closed.

Each attack runs beside victims: a KServe `simple` infer over HTTP and over
gRPC that must answer. The attackers are raw sockets (hand-made HTTP/1.1
and HTTP/2, test_grpc_declared's framing), so that not reading is exact.
"""
import json
import socket
import struct
import threading
import time
import unittest

import grpc

import test_grpc_declared as d
from harness import MODELS, Harkd, metric_value, simple_request

pb, pb_grpc = d.pb, d.pb_grpc
MIB = 1 << 20
# Long enough for a stream's sending to stop (and be seen stopped)
# before its connection is closed.
SEND_TIMEOUT_S = 15
STREAM_PATH = "/inference.GRPCInferenceService/ModelStreamInfer"
UNARY_PATH = "/inference.GRPCInferenceService/ModelInfer"
SETTINGS_INITIAL_WINDOW_SIZE = 4


def inflight(server):
    return metric_value(server.metrics(), "hark_inflight_bytes")


class Victims:
    """A KServe `simple` infer over HTTP and over gRPC: each must answer."""

    def __init__(self, server):
        self.server = server
        self.channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        self.stub = pb_grpc.GRPCInferenceServiceStub(self.channel)

    def check(self, test):
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request([1] * 16, [2] * 16))
        test.assertEqual(status, 200, doc)
        req = pb.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            req.inputs.add(name=name, datatype="INT32", shape=[1, 16]) \
                .contents.int_contents.extend([3] * 16)
        r = self.stub.ModelInfer(req, timeout=30)
        test.assertEqual(struct.unpack("<16i", r.raw_output_contents[0]), (6,) * 16)

    def close(self):
        self.channel.close()


def bytes_infer(n):
    """An HTTP `identity` infer of one BYTES element of n bytes 0x01, sent
    binary; its JSON reply writes each byte as \\u0001 (6n bytes)."""
    elem = struct.pack("<I", n) + b"\x01" * n
    head = json.dumps({
        "inputs": [{"name": "INPUT_BYTES", "shape": [1, 1], "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(elem)}}],
        "outputs": [{"name": "OUTPUT_BYTES", "parameters": {"binary_data": False}}]}).encode()
    return (b"POST /v2/models/identity/infer HTTP/1.1\r\nHost: x\r\n"
            b"Content-Type: application/octet-stream\r\n"
            b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
            % (len(head), len(head) + len(elem))) + head + elem


def status_line(sock, timeout=30):
    sock.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf.split(b"\r\n", 1)[0].decode(errors="replace"), buf


class HttpReplies(unittest.TestCase):
    # A 48 MiB JSON reply (its buffer at most 64 MiB) and its 8 MiB request
    # fit in the budget; a second beside it does not.
    BUDGET = 80 * MIB
    N = 8 * MIB

    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS, ("--max-inflight-bytes", str(cls.BUDGET),
                                    "--send-timeout-secs", "60"), grpc=True)
        cls.victims = Victims(cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.victims.close()
        cls.server.stop()

    def test_replies_of_clients_that_do_not_read_are_charged(self):
        """Five clients ask for a 48 MiB JSON reply each and do not read
        it: the first is held, charged to the budget; the other four do not
        fit beside it and are answered 503, saying so."""
        body = bytes_infer(self.N)
        attackers = []

        def attack():
            s = socket.create_connection(("127.0.0.1", self.server.http_port))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(body)  # and reads nothing (until the end)
            attackers.append(s)

        def wait(cond, what):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not cond():
                time.sleep(0.05)
            self.assertTrue(cond(), what)

        try:
            attack()
            wait(lambda: inflight(self.server) >= 6 * self.N, "the held reply is charged")
            self.assertLessEqual(inflight(self.server), self.BUDGET)
            for i in range(4):  # one at a time: each meets the first's reply
                hits = d.limit_hits(self.server, "inflight_bytes")
                attack()
                wait(lambda: d.limit_hits(self.server, "inflight_bytes") > hits,
                     f"attacker {i + 2} was refused")
                self.victims.check(self)
            held = inflight(self.server)
            self.assertGreaterEqual(held, 6 * self.N)
            self.assertLessEqual(held, self.BUDGET)
            statuses = []
            for s in attackers:
                line, buf = status_line(s)
                statuses.append(line)
                if "503" in line:
                    self.assertIn(b"does not fit in the server's in-flight memory budget", buf)
            self.assertEqual(statuses[0].split()[1:2], ["200"], statuses)
            self.assertEqual([x.split()[1:2] for x in statuses[1:]], [["503"]] * 4, statuses)
        finally:
            for s in attackers:
                s.close()
        wait(lambda: inflight(self.server) < MIB, "every reply gave its bytes back")
        self.victims.check(self)


class H2Client:
    """A hand-made HTTP/2 connection that answers SETTINGS and PINGs and
    keeps to the server's flow-control windows when it sends, but never
    gives the server any window back: what the server has to send waits
    on the client's initial window (65535, or what `settings` say), as
    for a client that does not read its replies."""

    def __init__(self, port, settings=b""):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(d.PREFACE + d.frame(d.SETTINGS, 0, 0, settings))
        self.lock = threading.Lock()  # one writer at a time
        self.cv = threading.Condition()
        self.conn_win, self.init_win, self.stream_win = 65535, 65535, {}
        self.next_id = 1
        self.eof_at = None
        self.buf = b""
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _send(self, data):
        with self.lock:
            self.sock.sendall(data)

    def _read(self):
        while True:
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                with self.cv:
                    self.eof_at = time.monotonic()
                    self.cv.notify_all()
                return
            self.buf += chunk
            while len(self.buf) >= 9 and len(self.buf) >= 9 + int.from_bytes(self.buf[:3], "big"):
                n = int.from_bytes(self.buf[:3], "big")
                t, flags = self.buf[3], self.buf[4]
                sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7fffffff
                payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
                try:
                    self._frame(t, flags, sid, payload)
                except OSError:
                    pass

    def _frame(self, t, flags, sid, payload):
        if t == d.SETTINGS and not flags & 1:
            with self.cv:
                for off in range(0, len(payload) - 5, 6):
                    ident, value = struct.unpack(">HI", payload[off:off + 6])
                    if ident == SETTINGS_INITIAL_WINDOW_SIZE:
                        for k in self.stream_win:
                            self.stream_win[k] += value - self.init_win
                        self.init_win = value
                self.cv.notify_all()
            self._send(d.frame(d.SETTINGS, 1, 0))
        elif t == d.PING and not flags & 1:
            self._send(d.frame(d.PING, 1, 0, payload))
        elif t == d.WINDOW_UPDATE:
            inc = struct.unpack(">I", payload)[0] & 0x7fffffff
            with self.cv:
                if sid == 0:
                    self.conn_win += inc
                elif sid in self.stream_win:
                    self.stream_win[sid] += inc
                self.cv.notify_all()

    def open(self, path):
        with self.cv:
            sid, self.next_id = self.next_id, self.next_id + 2
            self.stream_win[sid] = self.init_win
        self._send(d.frame(d.HEADERS, d.END_HEADERS, sid, d.request_headers(path)))
        return sid

    def send(self, sid, message, end, timeout):
        """One message, as the windows allow; OSError when the connection
        is gone, TimeoutError when the server reads none of it for
        `timeout` seconds."""
        data = b"\0" + struct.pack(">I", len(message)) + message
        off = 0
        while off < len(data):
            with self.cv:
                ok = self.cv.wait_for(lambda: self.eof_at is not None or
                                      min(self.conn_win, self.stream_win[sid]) > 0, timeout)
                if self.eof_at is not None:
                    raise OSError("closed")
                if not ok:
                    raise TimeoutError("the server reads nothing")
                n = min(16384, self.conn_win, self.stream_win[sid], len(data) - off)
                self.conn_win -= n
                self.stream_win[sid] -= n
            last = end and off + n == len(data)
            self._send(d.frame(d.DATA, d.END_STREAM if last else 0, sid, data[off:off + n]))
            off += n

    def close(self):
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def identity_message(n):
    req = pb.ModelInferRequest(model_name="identity")
    req.inputs.add(name="INPUT_UINT8", datatype="UINT8", shape=[1, n])
    req.raw_input_contents.append(b"\x07" * n)
    return req.SerializeToString()


class GrpcReplies(unittest.TestCase):
    SHARE = 16 * MIB

    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS, ("--send-timeout-secs", str(SEND_TIMEOUT_S),
                                    "--grpc-max-message-bytes", str(8 * MIB),
                                    "--grpc-max-declared-bytes-per-connection", str(cls.SHARE)),
                           grpc=True)
        cls.victims = Victims(cls.server)

    @classmethod
    def tearDownClass(cls):
        cls.victims.close()
        cls.server.stop()

    def wait_eof(self, client, within):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and client.eof_at is None:
            time.sleep(0.1)
        return client.eof_at

    def test_a_stream_that_does_not_read_stops_being_read(self):
        """One ModelStreamInfer sends 100 x 4 MiB and reads none of the
        replies: they stop at the connection's share, its requests stop
        being read, and the connection is closed after the send timeout."""
        sent, why = [], []
        attacker = H2Client(self.server.grpc_port)
        msg = identity_message(4 * MIB)

        def push_stream():
            try:
                sid = attacker.open(STREAM_PATH)
                for _ in range(100):
                    attacker.send(sid, msg, False, SEND_TIMEOUT_S + 30)
                    sent.append(1)
            except (OSError, TimeoutError) as e:
                why.append(e)

        rss0 = self.server.rss_kib()
        pusher = threading.Thread(target=push_stream, daemon=True)
        pusher.start()
        try:
            # Until its sending stops (the server reads no more of it).
            deadline, last, since = time.monotonic() + 30, -1, time.monotonic()
            while time.monotonic() < deadline and (not sent or time.monotonic() - since < 3):
                if len(sent) != last:
                    last, since = len(sent), time.monotonic()
                time.sleep(0.1)
            self.victims.check(self)
            self.assertIsNone(attacker.eof_at, "closed before its sending stopped")
            # Its replies, made and unread, are charged: at least its share
            # (four of 4 MiB), and at most that, one more, and the replies
            # of the requests its stream had in flight (up to 64 MiB, still
            # held) when its reading stopped. Before, none was charged and
            # each of its 64 pending slots held a reply. Then, unread for
            # the send timeout, it is closed (before: never).
            held = inflight(self.server)
            self.assertGreaterEqual(held, self.SHARE, "its replies are charged")
            self.assertLessEqual(held, 64 * MIB + self.SHARE + 4 * MIB + 64 * MIB + 8 * MIB)
            if not self.server.sanitized():
                grown = (self.server.rss_kib() - rss0) / 1024
                self.assertLess(grown, 200, f"harkd grew {grown:.0f} MiB")
            self.assertIsNotNone(self.wait_eof(attacker, SEND_TIMEOUT_S + 20),
                                 "the connection was closed")
            pusher.join(10)
            self.assertFalse(pusher.is_alive())
        finally:
            attacker.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and inflight(self.server) > MIB:
            time.sleep(0.1)
        self.assertLess(inflight(self.server), MIB)
        self.victims.check(self)

    def test_a_shut_window_is_closed_after_the_send_timeout(self):
        """A client that sets its receive window to 0 and keeps reading
        (so its socket never chokes) is closed once its replies waited the
        send timeout; meanwhile at most its share of replies is made."""
        before = d.limit_hits(self.server, "send_timeout") or 0
        client = H2Client(self.server.grpc_port,
                          settings=struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, 0))
        try:
            time.sleep(0.5)
            msg = identity_message(1 * MIB)
            for _ in range(4):
                client.send(client.open(UNARY_PATH), msg, True, 30)
            t0 = time.monotonic()
            self.victims.check(self)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and inflight(self.server) < 4 * MIB:
                time.sleep(0.05)
            self.assertGreaterEqual(inflight(self.server), 4 * MIB, "its replies are charged")
            eof = self.wait_eof(client, SEND_TIMEOUT_S + 20)
            self.assertIsNotNone(eof, "the connection was closed")
            self.assertGreaterEqual(eof - t0, SEND_TIMEOUT_S - 1.5)
        finally:
            client.close()
        self.assertGreater(d.limit_hits(self.server, "send_timeout") or 0, before)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and inflight(self.server) > MIB:
            time.sleep(0.1)
        self.assertLess(inflight(self.server), MIB)
        self.victims.check(self)


if __name__ == "__main__":
    unittest.main()
