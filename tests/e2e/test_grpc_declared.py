"""Issue 24, item 3: what a gRPC message declares is not what it holds.

One connection opens 46 unary ModelInfer calls, each a HEADERS frame
without END_STREAM and a DATA frame holding only the 5-byte gRPC prefix,
declaring 20 x 64 MiB, then 32 MiB ... 1 byte; then 13 more every 50 ms.
Before, each declared size was taken from --max-inflight-bytes (and set
aside in memory) up front: the budget sat full for as long as the client
liked, every other client was refused, and harkd's address space grew by
the declared sizes. Now bytes are charged as they arrive, a connection may
have only so much declared and not yet sent
(--grpc-max-declared-bytes-per-connection; past it RESOURCE_EXHAUSTED at
once), and a message that stops coming ends DEADLINE_EXCEEDED
(--grpc-message-timeout-secs).

The attacker is hand-made HTTP/2 on a socket; the server's header blocks
are decoded with libnghttp2's HPACK inflater through ctypes (no h2/hpack
package on the test machines). The victims are grpcio and HTTP clients.
"""
import ctypes
import ctypes.util
import select
import socket
import struct
import threading
import time
import unittest

import grpc

import harness
from harness import MODELS, Harkd, metric_value, simple_request

harness.grpc_stubs("grpc_service", "model_config")
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

MIB = 1 << 20
PATH = "/inference.GRPCInferenceService/ModelInfer"
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = \
    0, 1, 3, 4, 6, 7, 8, 9
END_STREAM, END_HEADERS = 1, 4
MESSAGE_TIMEOUT_S = 3


def frame(ftype, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def literal(name, value):
    """HPACK: a literal header field without indexing, new name, no Huffman."""
    n, v = name.encode(), value.encode()
    return b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v


def request_headers(path):
    return b"".join(literal(k, v) for k, v in (
        (":method", "POST"), (":scheme", "http"), (":path", path), (":authority", "x"),
        ("content-type", "application/grpc"), ("te", "trailers")))


class _NV(ctypes.Structure):
    _fields_ = [("name", ctypes.POINTER(ctypes.c_uint8)),
                ("value", ctypes.POINTER(ctypes.c_uint8)),
                ("namelen", ctypes.c_size_t), ("valuelen", ctypes.c_size_t),
                ("flags", ctypes.c_uint8)]


class Hpack:
    """The server's header blocks, decoded by libnghttp2's inflater (one per
    connection: its dynamic table follows the blocks in order)."""

    def __init__(self):
        self.lib = ctypes.CDLL(ctypes.util.find_library("nghttp2") or "libnghttp2.so.14")
        self.lib.nghttp2_hd_inflate_hd2.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(_NV), ctypes.POINTER(ctypes.c_int),
            ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int]
        self.lib.nghttp2_hd_inflate_hd2.restype = ctypes.c_ssize_t
        self.lib.nghttp2_hd_inflate_end_headers.argtypes = [ctypes.c_void_p]
        self.lib.nghttp2_hd_inflate_del.argtypes = [ctypes.c_void_p]
        self.inflater = ctypes.c_void_p()
        assert self.lib.nghttp2_hd_inflate_new(ctypes.byref(self.inflater)) == 0

    def decode(self, block):
        out, nv, flags = {}, _NV(), ctypes.c_int()
        while True:
            n = self.lib.nghttp2_hd_inflate_hd2(self.inflater, ctypes.byref(nv),
                                                ctypes.byref(flags), block, len(block), 1)
            assert n >= 0, f"HPACK error {n}"
            block = block[n:]
            if flags.value & 2:  # NGHTTP2_HD_INFLATE_EMIT
                name = ctypes.string_at(nv.name, nv.namelen).decode()
                out[name] = ctypes.string_at(nv.value, nv.valuelen).decode()
            if flags.value & 1:  # NGHTTP2_HD_INFLATE_FINAL
                self.lib.nghttp2_hd_inflate_end_headers(self.inflater)
                return out
            if n == 0 and not block and not flags.value & 2:
                return out

    def close(self):
        self.lib.nghttp2_hd_inflate_del(self.inflater)


class Attacker:
    """One hand-made HTTP/2 connection whose calls declare messages they do
    not send; reads what the server answers each of them."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0))
        # The server's SETTINGS (its 1 MiB stream window) apply once acked.
        self.sock.settimeout(10)
        buf = b""
        while True:
            buf += self.sock.recv(65536)
            while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                n = int.from_bytes(buf[:3], "big")
                t, flags = buf[3], buf[4]
                buf = buf[9 + n:]
                if t == SETTINGS and not flags & 1:
                    self.sock.sendall(frame(SETTINGS, 1, 0))
                    break
            else:
                continue
            break
        self.lock = threading.Lock()
        self.next_id = 1
        self.sent_at = {}  # stream id -> (declared size, time sent)
        self.buf = b""
        self.hpack = Hpack()
        self.block = {}  # stream id -> header block being assembled
        self.final = {}  # stream id -> (headers, time)
        self.resets = {}

    def declare(self, size):
        """A unary call: HEADERS, then a DATA frame of only the prefix
        declaring `size` bytes (None: no DATA at all)."""
        with self.lock:
            sid, self.next_id = self.next_id, self.next_id + 2
            data = frame(HEADERS, END_HEADERS, sid, request_headers(PATH))
            if size is not None:
                data += frame(DATA, 0, sid, b"\0" + struct.pack(">I", size))
            self.sent_at[sid] = (size, time.monotonic())
            self.sock.sendall(data)
        return sid

    def start_reading(self, until):
        """Reads on a thread of its own (so each answer's time is when it
        came) until every call declared got its final headers, once
        done_sending is set, or until `until`."""
        self.done_sending = False
        self.reader = threading.Thread(target=self.read, args=(until,))
        self.reader.start()

    def wait(self):
        self.done_sending = True
        self.reader.join()

    def read(self, until):
        while time.monotonic() < until and \
                not (self.done_sending and len(self.final) >= len(self.sent_at)):
            ready, _, _ = select.select([self.sock], [], [], 0.1)
            if not ready:
                continue
            try:
                chunk = self.sock.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            self.buf += chunk
            while len(self.buf) >= 9 and len(self.buf) >= 9 + int.from_bytes(self.buf[:3], "big"):
                n = int.from_bytes(self.buf[:3], "big")
                t, flags = self.buf[3], self.buf[4]
                sid = struct.unpack(">I", self.buf[5:9])[0] & 0x7fffffff
                payload, self.buf = self.buf[9:9 + n], self.buf[9 + n:]
                self.on_frame(t, flags, sid, payload)

    def on_frame(self, t, flags, sid, payload):
        if t == SETTINGS and not flags & 1:
            with self.lock:
                self.sock.sendall(frame(SETTINGS, 1, 0))
        elif t == PING and not flags & 1:
            with self.lock:
                self.sock.sendall(frame(PING, 1, 0, payload))
        elif t == RST_STREAM:
            self.resets[sid] = struct.unpack(">I", payload)[0]
        elif t in (HEADERS, CONTINUATION):
            if t == HEADERS:
                if flags & 0x20:  # PRIORITY
                    payload = payload[5:]
                self.block[sid] = (payload, flags & END_STREAM)
            else:
                self.block[sid] = (self.block[sid][0] + payload, self.block[sid][1])
            if flags & END_HEADERS:
                block, end = self.block.pop(sid)
                headers = self.hpack.decode(block)
                if end:
                    self.final[sid] = (headers, time.monotonic())

    def close(self):
        self.sock.close()
        self.hpack.close()


def limit_hits(server, kind):
    return metric_value(server.metrics(), "hark_limit_hits_total", limit=kind) or 0


def inflight(server):
    return metric_value(server.metrics(), "hark_inflight_bytes")


def vm_size_kib(server):
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1])
    return 0


class DeclaredFlood(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS, ("--max-inflight-bytes", str(1 << 30),
                                    "--grpc-message-timeout-secs", str(MESSAGE_TIMEOUT_S)),
                           grpc=True)
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def victim_grpc(self):
        req = pb.ModelInferRequest(model_name="simple")
        for name in ("INPUT0", "INPUT1"):
            req.inputs.add(name=name, datatype="INT32", shape=[1, 16]) \
                .contents.int_contents.extend([3] * 16)
        r = self.stub.ModelInfer(req, timeout=30)
        self.assertEqual(struct.unpack("<16i", r.raw_output_contents[0]), (6,) * 16)

    def victim_http(self):
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request([1] * 16, [2] * 16))
        self.assertEqual(status, 200, doc)

    def test_declared_sizes_hold_nothing_and_end_with_a_status(self):
        self.victim_grpc()  # the channel is up before the baseline
        vm0 = vm_size_kib(self.server)
        declared_before = limit_hits(self.server, "grpc_declared_bytes")
        timeouts_before = limit_hits(self.server, "grpc_message_timeout")
        sizes = [64 * MIB] * 20 + [1 << k for k in range(25, -1, -1)]
        self.assertEqual(len(sizes), 46)
        a = Attacker(self.server.grpc_port)
        a.start_reading(time.monotonic() + MESSAGE_TIMEOUT_S + 60)
        try:
            for size in sizes:
                a.declare(size)
            silent = a.declare(None)  # HEADERS and nothing more

            def more():
                for _ in range(13):
                    time.sleep(0.05)
                    a.declare(64 * MIB)
            t = threading.Thread(target=more)
            t.start()
            # While it holds its calls open, others are served, and the
            # budget holds at most what was sent (5 bytes a call).
            for _ in range(3):
                self.victim_grpc()
                self.victim_http()
            t.join()
            self.victim_grpc()
            self.victim_http()
            self.assertLess(inflight(self.server), MIB)
            self.assertLess(vm_size_kib(self.server) - vm0, 256 * 1024,
                            "the declared sizes were set aside")
            a.wait()
        finally:
            a.done_sending = True
            a.reader.join()
            a.close()
        # Every call got exactly one final status, each a clear one.
        self.assertEqual(sorted(a.final), sorted(a.sent_at), "calls left unanswered")
        codes = {}
        for sid, (headers, when) in a.final.items():
            code, msg = headers.get("grpc-status"), headers.get("grpc-message", "")
            codes.setdefault(code, []).append(sid)
            size, sent = a.sent_at[sid]
            if code == "8":  # RESOURCE_EXHAUSTED, at once
                self.assertIn("--grpc-max-declared-bytes-per-connection", msg)
                self.assertLess(when - sent, MESSAGE_TIMEOUT_S, (sid, size, msg))
            else:
                self.assertEqual(code, "4", (sid, size, headers))  # DEADLINE_EXCEEDED
                self.assertIn("--grpc-message-timeout-secs", msg)
                self.assertGreaterEqual(when - sent, MESSAGE_TIMEOUT_S - 0.5, (sid, size))
        # 4 x 64 MiB fill the connection's 256 MiB; the rest is refused.
        self.assertEqual(len(codes.get("4", [])), 5, codes)  # those four and the silent one
        self.assertIn(silent, codes["4"])
        self.assertEqual(len(codes.get("8", [])), len(sizes) + 13 - 4, codes)
        self.assertGreater(limit_hits(self.server, "grpc_declared_bytes"), declared_before)
        self.assertGreater(limit_hits(self.server, "grpc_message_timeout"), timeouts_before)
        self.assertEqual(inflight(self.server), 0)
        self.victim_grpc()
        self.victim_http()

    def test_bytes_are_charged_as_they_arrive(self):
        # A message half sent holds what was sent, and gives it back when
        # the call ends; the budget never sees what was only declared.
        a = Attacker(self.server.grpc_port)
        a.start_reading(time.monotonic() + MESSAGE_TIMEOUT_S + 60)
        try:
            sid = a.next_id
            a.declare(32 * MIB)
            chunk = b"\0" * 16384
            for _ in range(48):  # 768 KiB of the 32 MiB (the stream's window is 1 MiB)
                a.sock.sendall(frame(DATA, 0, sid, chunk))
            deadline = time.monotonic() + 10
            while inflight(self.server) < 48 * 16384 and time.monotonic() < deadline:
                time.sleep(0.05)
            held = inflight(self.server)
            self.assertGreaterEqual(held, 48 * 16384)
            self.assertLess(held, 4 * MIB)
            a.wait()
            headers, _ = a.final[sid]
            self.assertEqual(headers.get("grpc-status"), "4", headers)
        finally:
            a.done_sending = True
            a.reader.join()
            a.close()
        deadline = time.monotonic() + 10
        while inflight(self.server) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(inflight(self.server), 0)
        self.victim_grpc()


class IdleReset(unittest.TestCase):
    """Issue 24, item 1: grpcio sometimes sends RST_STREAM for a call it
    cancelled before its HEADERS went out. RFC 9113 makes that a
    connection error, and nghttp2 closed the connection, taking the live
    calls on it ("Socket closed"); harkd drops such a reset instead, as
    gRPC core's own server does."""

    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS, (), grpc=True)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_reset_of_a_stream_never_opened_is_ignored(self):
        a = Attacker(self.server.grpc_port)
        a.start_reading(time.monotonic() + 30)
        try:
            req = pb.ModelInferRequest(model_name="simple")
            for name in ("INPUT0", "INPUT1"):
                req.inputs.add(name=name, datatype="INT32", shape=[1, 16]) \
                    .contents.int_contents.extend([4] * 16)
            body = req.SerializeToString()
            live = a.declare(None)  # HEADERS: a call in flight
            with a.lock:
                # resets of streams above any the client opened, one split
                # across two writes
                rst = frame(RST_STREAM, 0, live + 100, struct.pack(">I", 8))
                a.sock.sendall(rst + frame(RST_STREAM, 0, live + 102, struct.pack(">I", 8))[:5])
                time.sleep(0.1)
                a.sock.sendall(frame(RST_STREAM, 0, live + 102, struct.pack(">I", 8))[5:])
                a.sock.sendall(frame(DATA, END_STREAM, live,
                                     b"\0" + struct.pack(">I", len(body)) + body))
            a.wait()
        finally:
            a.done_sending = True
            a.reader.join()
            a.close()
        headers, _ = a.final[live]
        self.assertEqual(headers.get("grpc-status"), "0", headers)


if __name__ == "__main__":
    unittest.main(verbosity=2)
