"""Issue 13, finding 4: memory per client and in total is bounded.

Real sockets against the real harkd. A request head may declare a body of
64 MiB; the server must not set that memory aside before the bytes come
(20 such connections cost far less than 20 x 64 MiB). Everything clients
make the server hold counts against one budget, --max-inflight-bytes: a
body that would pass it is refused with 503 and a JSON error naming the
flag while others are served; a gRPC message past it gets
RESOURCE_EXHAUSTED; one ModelStreamInfer call may hold only so many bytes
of requests at once, the rest answered in the stream with their ids; audio
a speech stream has queued counts too, and a stream whose audio would pass
the budget is closed (WebSocket 1013) naming the flag.
hark_inflight_bytes shows what is held, and goes back to 0 when clients
vanish mid-body.
"""
import asyncio
import json
import os
import select
import shutil
import socket
import tempfile
import time
import unittest

import grpc
import websockets

from harness import MODELS, Harkd, ServerTest, metric_value, simple_request, grpc_stubs

grpc_stubs("grpc_service", "model_config")
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

MIB = 1 << 20


def inflight(server):
    return metric_value(server.metrics(), "hark_inflight_bytes")


def limit_hits(server):
    return metric_value(server.metrics(), "hark_limit_hits_total", limit="inflight_bytes") or 0


def vm_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def post_head(port, path, length):
    """A connection that has sent a request head declaring `length` bytes."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               f"Content-Length: {length}\r\n\r\n").encode())
    return s


def read_reply(sock):
    """(status, body) of the one reply on `sock`, read until it is whole."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return status, body


def padded_infer(size):
    """A valid JSON infer request for `simple`, padded with spaces to `size` bytes."""
    doc = json.dumps(simple_request(list(range(16)), [1] * 16)).encode()
    return doc + b" " * (size - len(doc))


def wait_for(cond, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


class DeclaredBodies(unittest.TestCase):
    """A declared Content-Length costs nothing until its bytes arrive."""

    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS, ("--http-body-deadline-secs", "60"))

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_idle_64mib_heads_hold_little(self):
        pid = self.server.proc.pid
        # Warm the loops (their first request allocates their buffers).
        for _ in range(4):
            self.assertEqual(self.server.json("POST", "/v2/models/simple/infer",
                                              simple_request([1] * 16, [2] * 16))[0], 200)
        rss0, vm0 = vm_kib(pid, "VmRSS"), vm_kib(pid, "VmSize")
        socks = [post_head(self.server.http_port, "/v2/models/simple/infer", 64 * MIB)
                 for _ in range(20)]
        try:
            # Every head is in: the server holds each connection's first buffer.
            self.assertTrue(wait_for(lambda: inflight(self.server) >= 20 * 64 * 1024),
                            inflight(self.server))
            rss1, vm1 = vm_kib(pid, "VmRSS"), vm_kib(pid, "VmSize")
            held = inflight(self.server)
            # Far below 20 x 64 MiB, resident or merely set aside.
            self.assertLess(held, 20 * MIB)
            self.assertLess(rss1 - rss0, 64 * 1024, (rss0, rss1))
            if not self.server.sanitized():  # ASan reserves its own way
                self.assertLess(vm1 - vm0, 256 * 1024, (vm0, vm1))
            # Others are served meanwhile.
            self.assertEqual(self.server.json("POST", "/v2/models/simple/infer",
                                              simple_request([1] * 16, [2] * 16))[0], 200)
        finally:
            for s in socks:
                s.close()
        self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))

    def test_growing_body_is_served(self):
        """A body far past the first buffer grows to its size and is read whole."""
        body = padded_infer(3 * MIB + 12345)
        status, _, data = self.server.request("POST", "/v2/models/simple/infer", body,
                                              {"Content-Type": "application/json"})
        self.assertEqual(status, 200, data)
        out = json.loads(data)["outputs"]
        self.assertEqual(out[0]["data"], [i + 1 for i in range(16)])
        self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))


class Budget(unittest.TestCase):
    """--max-inflight-bytes: one bound for all clients together."""

    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS, ("--max-inflight-bytes", str(4 * MIB),
                                    "--http-header-timeout-secs", "60"), grpc=True)
        opts = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}", options=opts)
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    def assert_serving(self):
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request([1] * 16, [2] * 16))
        self.assertEqual(status, 200, doc)

    def test_metrics_show_the_bound(self):
        text = self.server.metrics()
        self.assertEqual(metric_value(text, "hark_inflight_bytes_max"), 4 * MIB)
        self.assertIn("# TYPE hark_inflight_bytes gauge", text)

    def test_body_larger_than_budget_refused_at_once(self):
        before = limit_hits(self.server)
        s = post_head(self.server.http_port, "/v2/models/simple/infer", 8 * MIB)
        try:
            status, body = read_reply(s)  # before a byte of the body was sent
        finally:
            s.close()
        self.assertEqual(status, 503)
        self.assertIn("--max-inflight-bytes", json.loads(body)["error"])
        self.assertGreater(limit_hits(self.server), before)
        self.assert_serving()

    def test_body_past_what_is_left_refused_mid_body(self):
        before = limit_hits(self.server)
        size = 3 * MIB
        body = padded_infer(size)
        first = post_head(self.server.http_port, "/v2/models/simple/infer", size)
        second = post_head(self.server.http_port, "/v2/models/simple/infer", size)
        try:
            first.sendall(body[:size - 10])  # holds 3 MiB of the 4 now
            self.assertTrue(wait_for(lambda: inflight(self.server) >= size),
                            inflight(self.server))
            try:
                second.sendall(body[:2 * MIB])
            except OSError:
                pass  # it may be cut off while sending: the reply is still there
            status, reply = read_reply(second)
            self.assertEqual(status, 503, reply)
            err = json.loads(reply)["error"]
            self.assertIn("--max-inflight-bytes", err)
            self.assertGreater(limit_hits(self.server), before)
            # The first, within the budget, is served whole.
            first.sendall(body[size - 10:])
            status, reply = read_reply(first)
            self.assertEqual(status, 200, reply)
        finally:
            first.close()
            second.close()
        self.assert_serving()
        self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))

    def test_heads_still_coming_count_and_are_refused_past_the_budget(self):
        """200 connections each holding 30 KB of a head they do not finish
        (6 MB in all): what they hold is counted, those past the budget get
        503 naming the flag and are closed, the rest of the server answers,
        and all is given back when they go. Before, the heads were outside
        the budget: 65,536 connections could hold 2 GiB."""
        before = limit_hits(self.server)
        socks = []
        try:
            for _ in range(200):
                s = socket.create_connection(("127.0.0.1", self.server.http_port), timeout=30)
                s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\nX-Pad: " +
                          b"a" * 30000)
                socks.append(s)
            self.assertTrue(wait_for(lambda: inflight(self.server) >= 3 * MIB),
                            inflight(self.server))
            refused = []  # the connections answered (and closed): 6 MB is 1.5 budgets

            def answered():
                refused.extend(select.select([s for s in socks if s not in refused], [], [],
                                             0.2)[0])
                return len(refused) >= 50
            self.assertTrue(wait_for(answered), len(refused))
            for s in refused[:10]:
                status, body = read_reply(s)
                self.assertEqual(status, 503, body)
                err = json.loads(body)["error"]
                self.assertIn("a request head", err)
                self.assertIn("--max-inflight-bytes", err)
            self.assertGreater(limit_hits(self.server), before)
            self.assertLessEqual(inflight(self.server), 4 * MIB)
            status, _, _ = self.server.request("GET", "/v2/health/ready")
            self.assertEqual(status, 200)
        finally:
            for s in socks:
                s.close()
        self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))
        self.assert_serving()

    def test_a_kept_connection_holds_none_of_a_long_head(self):
        """After a long head (8 kB of headers) its connection, kept alive,
        holds none of it: whether its exchange ended with a reply, or with a
        body dropped after an early 404."""
        pad = b"X-Pad: " + b"a" * 8000 + b"\r\n"
        with socket.create_connection(("127.0.0.1", self.server.http_port), timeout=30) as s:
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n" + pad + b"\r\n")
            self.assertEqual(read_reply(s)[0], 200)
            self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))
            s.sendall(b"POST /v2/nothing HTTP/1.1\r\nHost: x\r\n" + pad +
                      b"Content-Length: 1000\r\n\r\n")
            self.assertEqual(read_reply(s)[0], 404)
            s.sendall(b" " * 1000)  # dropped; the connection goes on
            self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))
            s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(read_reply(s)[0], 200)
            self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))

    def test_gauge_returns_to_zero_when_clients_vanish_mid_body(self):
        socks = []
        for _ in range(3):
            s = post_head(self.server.http_port, "/v2/models/simple/infer", MIB)
            s.sendall(b" " * (MIB // 2))
            socks.append(s)
        self.assertTrue(wait_for(lambda: inflight(self.server) >= 3 * (MIB // 2)),
                        inflight(self.server))
        for s in socks:
            s.close()
        self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))
        self.assert_serving()

    def test_grpc_message_past_budget_resource_exhausted(self):
        before = limit_hits(self.server)
        req = pb.ModelInferRequest(model_name="identity", id="big")
        t = req.inputs.add(name="INPUT_UINT8", datatype="UINT8", shape=[1, 6 * MIB])
        del t
        req.raw_input_contents.append(b"\x01" * (6 * MIB))
        with self.assertRaises(grpc.RpcError) as ctx:
            self.stub.ModelInfer(req, timeout=30)
        self.assertEqual(ctx.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("--max-inflight-bytes", ctx.exception.details())
        self.assertGreater(limit_hits(self.server), before)
        # A message within it is served, and nothing stays held.
        small = pb.ModelInferRequest(model_name="identity", id="small")
        small.inputs.add(name="INPUT_UINT8", datatype="UINT8", shape=[1, 1024])
        small.raw_input_contents.append(b"\x02" * 1024)
        resp = self.stub.ModelInfer(small, timeout=30)
        self.assertEqual(resp.raw_output_contents[0], b"\x02" * 1024)
        self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))


def slow_repo():
    """identity, whose every execution takes 10 s: requests stay in flight.
    (3 s was not enough: on a loaded host grpcio took longer than that to
    send the next 60 MiB, the first request finished first, and nothing
    was ever over the stream's bound, so the test failed once.)"""
    root = tempfile.mkdtemp(prefix="hark-memory-")
    os.makedirs(os.path.join(root, "slow_identity", "1"))
    with open(os.path.join(root, "slow_identity", "config.pbtxt"), "w") as f:
        f.write('name: "slow_identity"\nbackend: "identity"\nmax_batch_size: 0\n'
                'input [ { name: "INPUT_UINT8" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n'
                'output [ { name: "OUTPUT_UINT8" data_type: TYPE_UINT8 dims: [ -1 ] } ]\n'
                'instance_group [ { count: 1 kind: KIND_CPU } ]\n'
                'parameters { key: "execute_delay_us" value: { string_value: "10000000" } }\n')
    return root


class SpeechBudget(ServerTest):
    """Audio queued behind a speech stream's request in the engine counts
    in --max-inflight-bytes: a client streaming faster than it is decoded
    cannot make the server hold more than the budget (the per-stream
    queue's own bound, 4 messages, is larger here)."""
    ARGS = ("--max-inflight-bytes", str(256 * 1024), "--speech-model", "echo_asr",
            "--ws-max-message-bytes", str(128 * 1024))

    def test_a_stream_holds_none_of_its_head(self):
        """A stream opened with a long head (12 kB of headers: its copy is
        counted while it is read and served) holds none of it once it is a
        stream, which may live for hours."""
        url = f"ws://127.0.0.1:{self.server.http_port}/"

        async def go():
            async with websockets.connect(url, extra_headers={"X-Pad": "a" * 12000}) as ws:
                await ws.send(b"\x01\x00" * 800)
                self.assertIn("partial", json.loads(await asyncio.wait_for(ws.recv(), 30)))
                held = inflight(self.server)
                await ws.send('{"eof" : 1}')
                self.assertIn("text", json.loads(await asyncio.wait_for(ws.recv(), 30)))
                return held

        self.assertEqual(asyncio.run(go()), 0)

    def test_stream_past_the_budget_is_closed_naming_the_flag(self):
        url = f"ws://127.0.0.1:{self.server.http_port}/"
        chunk = b"\x01\x00" * 50_000  # 100 kB
        hits = limit_hits(self.server)

        async def go():
            async with websockets.connect(url) as ws:
                # The first holds echo_asr's instance 300 ms; the next two
                # wait behind it: 300 kB in all, past the 256 KiB budget.
                await ws.send(b"SLOW" + chunk)
                await ws.send(chunk)
                await ws.send(chunk)
                with self.assertRaises(websockets.ConnectionClosed) as cm:
                    while True:
                        await asyncio.wait_for(ws.recv(), 30)
                return cm.exception

        closed = asyncio.run(go())
        self.assertEqual(closed.code, 1013, closed.reason)
        self.assertIn("--max-inflight-bytes", closed.reason)
        self.assertGreater(limit_hits(self.server), hits)
        # What the stream held is given back; the next stream is served.
        deadline = time.time() + 10
        while inflight(self.server) != 0 and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(inflight(self.server), 0)

        async def again():
            async with websockets.connect(url) as ws:
                await ws.send(chunk)
                self.assertIn("partial", json.loads(await asyncio.wait_for(ws.recv(), 30)))
                await ws.send('{"eof" : 1}')
                self.assertIn("text", json.loads(await asyncio.wait_for(ws.recv(), 30)))

        asyncio.run(again())


class StreamBound(unittest.TestCase):
    """One ModelStreamInfer call holds at most 64 MiB of requests at once."""

    @classmethod
    def setUpClass(cls):
        cls.repo = slow_repo()
        cls.server = Harkd(cls.repo, (), grpc=True)
        opts = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}", options=opts)
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()
        shutil.rmtree(cls.repo, ignore_errors=True)

    def test_excess_messages_answered_in_stream(self):
        size = 20 * MIB
        ids = [f"m{i}" for i in range(5)]

        def gen():
            for i, rid in enumerate(ids):
                req = pb.ModelInferRequest(model_name="slow_identity", id=rid)
                req.inputs.add(name="INPUT_UINT8", datatype="UINT8", shape=[size])
                req.raw_input_contents.append(bytes([i]) * size)
                yield req

        got = list(self.stub.ModelStreamInfer(gen(), timeout=120))
        # Every message gets exactly one answer: a result or its error.
        answers = {}
        for r in got:
            rid = r.infer_response.id
            self.assertNotIn(rid, answers)
            answers[rid] = r
        self.assertEqual(sorted(answers), ids)
        refused = [rid for rid, r in answers.items() if r.error_message]
        self.assertTrue(refused, "5 x 20 MiB in flight on one stream")
        for rid in refused:
            self.assertIn("per stream", answers[rid].error_message)
        for i, rid in enumerate(ids):
            if rid not in refused:
                out = answers[rid].infer_response.raw_output_contents[0]
                self.assertEqual(out, bytes([i]) * size)
        self.assertIn("m0", [rid for rid in ids if rid not in refused])
        self.assertTrue(wait_for(lambda: inflight(self.server) == 0), inflight(self.server))


if __name__ == "__main__":
    unittest.main(verbosity=2)
