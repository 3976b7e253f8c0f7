"""Vosk's WebSocket streaming protocol against the real harkd, with the
python3-websockets client: config, one reply per message, reset and eof,
every bad input's close code and reason (while another stream keeps
working), idle timeout, admission, clients that vanish, shutdown, and many
connect/disconnect cycles.

The model is echo_asr (a sample counter with the asr model's inputs and
outputs); HARK_WS_MODEL names another for the protocol-level tests."""
import asyncio
import concurrent.futures
import http.client
import json
import os
import shutil
import socket
import time
import unittest

import websockets

from harness import MODELS, Harkd, RawWebSocket, ServerTest, main, make_repo, simple_request

MODEL = os.environ.get("HARK_WS_MODEL", "echo_asr")
ECHO_CONFIG = open(os.path.join(MODELS, "echo_asr", "config.pbtxt")).read()


def pcm(samples, fill=b"\x01\x00"):
    return fill * samples


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


class WsTest(ServerTest):
    # Its own repository, so other models' state cannot hold readiness back.
    REPO = {"echo_asr": ECHO_CONFIG} if MODEL == "echo_asr" else None
    # No admission by backlog here (class Backlog tests it): 24 streams
    # connecting at once must not be refused for a momentary queue.
    ARGS = ("--speech-model", MODEL, "--ws-max-message-bytes", "65536",
            "--stream-backlog-limit", "100000")

    def url(self, path="/"):
        return f"ws://127.0.0.1:{self.server.http_port}{path}"

    async def expect_close(self, ws, code, reason_part=""):
        """Reads until the server closes; checks the code and reason."""
        try:
            while True:
                await ws.recv()
        except websockets.ConnectionClosed as e:
            self.assertEqual(e.code, code, e.reason)
            self.assertIn(reason_part, e.reason)
            return e.reason


class Protocol(WsTest):
    def test_partials_reset_eof(self):
        async def go():
            async with websockets.connect(self.url()) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": 8000}}))
                for i in range(1, 4):
                    await ws.send(pcm(4000))
                    self.assertEqual(json.loads(await ws.recv()), {"partial": f"{4000 * i} samples"})
                await ws.send('{"reset" : 1}')
                doc = json.loads(await ws.recv())
                self.assertEqual(doc["text"], "12000")
                self.assertEqual(doc["result"], [{"conf": 1.0, "start": 0.0, "end": 1.5,
                                                  "word": "12000"}])
                await ws.send(pcm(800))
                self.assertEqual(json.loads(await ws.recv()), {"partial": "800 samples"})
                await ws.send('{"eof":1}')
                doc = json.loads(await ws.recv())
                self.assertEqual(doc["text"], "800")
                self.assertAlmostEqual(doc["result"][0]["start"], 1.5)
                self.assertAlmostEqual(doc["result"][0]["end"], 1.6)
                await self.expect_close(ws, 1000)
        run(go())

    def test_model_routes(self):
        async def go():
            for path in (f"/v2/models/{MODEL}/stream", f"/v2/models/{MODEL}/versions/1/stream"):
                async with websockets.connect(self.url(path)) as ws:
                    await ws.send(pcm(10))
                    self.assertIn("partial", json.loads(await ws.recv()))
                    await ws.send('{"eof" : 1}')
                    self.assertIn("text", json.loads(await ws.recv()))
                    await self.expect_close(ws, 1000)
        run(go())

    def test_words_off_and_alternatives(self):
        async def go():
            async with websockets.connect(self.url()) as ws:
                await ws.send(json.dumps({"config": {"words": False, "unknown_key": 3}}))
                await ws.send(pcm(100))
                await ws.recv()
                await ws.send('{"eof" : 1}')
                self.assertEqual(json.loads(await ws.recv()), {"text": "100"})
            async with websockets.connect(self.url()) as ws:
                await ws.send(json.dumps({"config": {"max_alternatives": 2, "words": True}}))
                await ws.send(pcm(100))
                await ws.recv()
                await ws.send('{"eof" : 1}')
                doc = json.loads(await ws.recv())
                alts = doc["alternatives"]
                self.assertEqual([a["text"] for a in alts], ["100", "100 alt"])
                self.assertEqual([a["confidence"] for a in alts], [1.0, 0.5])
                self.assertEqual(alts[0]["result"][0]["word"], "100")
        run(go())

    def test_eof_without_audio_and_empty_message(self):
        async def go():
            async with websockets.connect(self.url()) as ws:
                await ws.send(b"")
                self.assertEqual(json.loads(await ws.recv()), {"partial": "0 samples"})
                await ws.send('{"eof" : 1}')
                self.assertEqual(json.loads(await ws.recv())["text"], "0")
                await self.expect_close(ws, 1000)
            async with websockets.connect(self.url()) as ws:
                await ws.send('{"eof" : 1}')
                self.assertEqual(json.loads(await ws.recv())["text"], "0")
                await self.expect_close(ws, 1000)
        run(go())

    def test_wav_header_skipped(self):
        header = (b"RIFF" + (36 + 200).to_bytes(4, "little") + b"WAVEfmt " +
                  (16).to_bytes(4, "little") + bytes(16) + b"data" + (200).to_bytes(4, "little"))

        async def go():
            async with websockets.connect(self.url()) as ws:
                await ws.send(header + pcm(100))
                self.assertEqual(json.loads(await ws.recv()), {"partial": "100 samples"})
        run(go())

    def test_one_reply_per_message_in_order(self):
        n = 60

        async def go():
            async with websockets.connect(self.url()) as ws:
                for i in range(n):  # no waiting: the server queues them
                    await ws.send(b"SLOW" + pcm(48) if i == 5 else pcm(50))
                await ws.send('{"eof" : 1}')
                replies = [json.loads(await ws.recv()) for _ in range(n + 1)]
                self.assertEqual([r["partial"] for r in replies[:n]],
                                 [f"{50 * (i + 1)} samples" for i in range(n)])
                self.assertEqual(replies[n]["text"], str(50 * n))
                await self.expect_close(ws, 1000)
        run(go())

    def test_fragmented_message(self):
        async def go():
            async with websockets.connect(self.url()) as ws:
                await ws.send([pcm(1000), pcm(1000), pcm(500)])  # one message, three frames
                self.assertEqual(json.loads(await ws.recv()), {"partial": "2500 samples"})
                await ws.send(['{"eof"', ' : 1}'])
                self.assertEqual(json.loads(await ws.recv())["text"], "2500")
        run(go())

    def test_concurrent_streams(self):
        async def one(k):
            async with websockets.connect(self.url()) as ws:
                for i in range(10):
                    await ws.send(pcm(10 + k))
                    self.assertEqual(json.loads(await ws.recv())["partial"],
                                     f"{(10 + k) * (i + 1)} samples")
                await ws.send('{"eof" : 1}')
                self.assertEqual(json.loads(await ws.recv())["text"], str((10 + k) * 10))

        async def go():
            await asyncio.gather(*(one(k) for k in range(24)))
        run(go())

    def test_bad_inputs_close_with_reason(self):
        big = 65536 + 2
        cases = [
            ([pcm(1) + b"x"], 1003, "odd"),
            (["hello"], 1003, "JSON"),
            (['{"foo": 1}'], 1003, "unknown message"),
            ([json.dumps({"config": {"sample_rate": "x"}})], 1007, "sample_rate"),
            ([json.dumps({"config": {"sample_rate": 100}})], 1007, "sample_rate"),
            ([json.dumps({"config": {"sample_rate": 96000}})], 1007, "8000"),
            ([json.dumps({"config": {"max_alternatives": "two"}})], 1007, "max_alternatives"),
            ([json.dumps({"config": {"max_alternatives": -1}})], 1007, "max_alternatives"),
            ([json.dumps({"config": {"phrase_list": [1]}})], 1007, "phrase_list"),
            ([json.dumps({"config": 5})], 1007, "config"),
            (['{"eof": 2}'], 1007, "eof"),
            ([pcm(10), json.dumps({"config": {"sample_rate": 8000}})], 1008, "before the first audio"),
            ([b"\0" * big], 1009, "--ws-max-message-bytes"),
            ([b"FAIL" + pcm(10)], 1011, "failing as asked"),
            ([json.dumps({"config": {"profile": "fast"}}), pcm(10)], 1007,
             "no latency profiles"),
            ([json.dumps({"config": {"profile": 3}})], 1007, "profile"),
        ]

        async def go():
            # A healthy stream runs alongside every failing one.
            async with websockets.connect(self.url()) as good:
                total = 0
                for msgs, code, reason in cases:
                    with self.subTest(msgs=str(msgs)[:60]):
                        async with websockets.connect(self.url(), max_size=None) as ws:
                            for m in msgs:
                                await ws.send(m)
                            await self.expect_close(ws, code, reason)
                    await good.send(pcm(7))
                    total += 7
                    self.assertEqual(json.loads(await good.recv()), {"partial": f"{total} samples"})
        run(go())

    def test_unknown_model_refused_with_400(self):
        # 400 as every /v2/models/{model} route answers for an unknown model
        # (Triton's code); an unknown route is 404.
        async def go():
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                async with websockets.connect(self.url("/v2/models/nope/stream")):
                    pass
            self.assertEqual(cm.exception.status_code, 400)
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                async with websockets.connect(self.url("/v2/nothing/here")):
                    pass
            self.assertEqual(cm.exception.status_code, 404)
        run(go())
        # The body is KServe's JSON error.
        head, body = self.refused_upgrade(b"/v2/models/nope/stream")
        self.assertTrue(head.startswith(b"HTTP/1.1 400"), head)
        self.assertIn("nope", json.loads(body)["error"])

    def refused_upgrade(self, path, extra=b""):
        """A WebSocket upgrade of `path` (with `extra` header lines) that
        harkd answers with an HTTP error: (status line and headers, body)."""
        s = socket.create_connection(("127.0.0.1", self.server.http_port), timeout=10)
        s.sendall(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                  b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                  b"Sec-WebSocket-Version: 13\r\n" + extra + b"\r\n")
        data = b""
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        head, _, body = data.partition(b"\r\n\r\n")
        return head, body

    def test_subprotocol_is_refused(self):
        # Was: lws bound the stream to the internal protocol the client
        # named (hark-raw, hark-ws-rx...): a 101, then nothing served, and
        # the connection's state never freed.
        for proto in ("hark-raw", "hark-ws-rx", "hark-wake", "chat"):
            head, body = self.refused_upgrade(
                b"/", b"Sec-WebSocket-Protocol: %s\r\n" % proto.encode())
            self.assertTrue(head.startswith(b"HTTP/1.1 400"), (proto, head))
            self.assertIn("Sec-WebSocket-Protocol", json.loads(body)["error"])

        async def go():  # streams without one are served as before
            async with websockets.connect(self.url()) as ws:
                await ws.send(pcm(100))
                self.assertIn("partial", json.loads(await ws.recv()))
        run(go())

    def test_plain_get_on_stream_route(self):
        status, _, body = self.server.request("GET", f"/v2/models/{MODEL}/stream")
        self.assertEqual(status, 426)
        self.assertIn("WebSocket", json.loads(body)["error"])

    def test_connect_disconnect_cycles(self):
        async def cycle(i):
            async with websockets.connect(self.url()) as ws:
                await ws.send(pcm(100))
                await ws.recv()
                if i % 2:
                    await ws.send('{"eof" : 1}')
                    await ws.recv()
                elif i % 4 == 0:
                    ws.transport.abort()  # vanish mid-utterance

        async def go(n, base):
            for i in range(n):
                await cycle(base + i)

        run(go(100, 0), timeout=120)
        before = self.server.settled_rss_kib()
        run(go(900, 100), timeout=240)
        after = self.server.settled_rss_kib()
        if not self.server.sanitized():
            self.assertLess(after - before, 32 * 1024, (before, after))
        run(go(1, 1))  # still serving


frame = RawWebSocket.frame


class Framing(WsTest):
    """RFC 6455's framing, with frames no client library sends: what a
    server must refuse (1002, then it hangs up), pings, both sides of the
    close handshake, and frames cut anywhere."""

    def raw(self):
        return RawWebSocket(self.server.http_port)

    def partial(self, ws):
        op, payload = ws.recv_frame()
        self.assertEqual(op, 1)
        return json.loads(payload)["partial"]

    def test_protocol_errors_close_1002_or_1007(self):
        # (name, bytes, close code, reason, whether hark hangs up at once:
        # a frame it cannot parse ends the reading; a whole text message
        # that is not UTF-8 does not, and hark waits for the client's close)
        P, I = 1002, 1007
        cases = [
            ("unmasked", frame(2, pcm(4), mask=None), "unmasked", P, True),
            ("unmasked after a good one", frame(2, pcm(4)) + frame(2, pcm(4), mask=None),
             "unmasked", P, True),
            ("64-bit length, top bit", frame(2, b"", length=1 << 63), "top bit", P, True),
            ("reserved bits", frame(2, pcm(4), rsv=4), "reserved bits", P, True),
            ("opcode 3", frame(3, b"x"), "unknown opcode", P, True),
            ("opcode 11", frame(11, b"x"), "unknown opcode", P, True),
            ("fragmented ping", frame(9, b"x", fin=False), "fragmented", P, True),
            ("ping of 126 bytes", frame(9, b"x" * 126), "125", P, True),
            ("continuation first", frame(0, pcm(2)), "continuation", P, True),
            ("a message inside a message", frame(2, pcm(2), fin=False) + frame(2, pcm(2)),
             "new message", P, True),
            ("close of 1 byte", frame(8, b"\x03"), "1-byte", P, True),
            ("close code 1005", frame(8, (1005).to_bytes(2, "big")), "close code", P, True),
            ("close code 999", frame(8, (999).to_bytes(2, "big")), "close code", P, True),
            ("text not UTF-8", frame(1, b'{"eof": "\xff"}'), "text message", I, False),
            ("text cut mid-character", frame(1, b"\xe2\x82"), "text message", I, False),
            ("close reason not UTF-8", frame(8, (1000).to_bytes(2, "big") + b"\xc0\xaf"),
             "close reason", I, True),  # RFC 6455 8.1 and 7.1.6
        ]
        for name, data, reason, want, hangs_up in cases:
            with self.subTest(name):
                ws = self.raw()
                ws.sock.sendall(data)
                code, why = ws.recv_close()
                self.assertEqual(code, want, why)
                self.assertIn(reason, why)
                if hangs_up:  # nothing more is read from it
                    self.assertTrue(ws.at_eof())
                    self.assertEqual(ws.buf, b"")
                ws.close()
        ws = self.raw()  # a character cut across fragments is whole in its message
        ws.send(1, b'{"eof": 1, "x": "\xc3', fin=False)
        ws.send(0, b'\xa9"}')
        code, why = ws.recv_close()
        self.assertNotIn("UTF-8", why)
        ws.close()
        ws = self.raw()  # still serving
        ws.send(2, pcm(6))
        self.assertEqual(self.partial(ws), "6 samples")
        ws.close()

    def test_frames_cut_anywhere_and_pings_answered(self):
        # A message in two fragments with a ping between them, a 16-bit and
        # a (legal, non-minimal) 64-bit length, sent a byte at a time.
        data = (frame(2, pcm(3), fin=False) + frame(9, b"hi") + frame(0, pcm(4)) +
                frame(2, pcm(100)) + frame(2, pcm(2), length=4))
        ws = self.raw()
        for i in range(len(data)):
            ws.sock.sendall(data[i:i + 1])
        self.assertEqual(ws.recv_frame(), (10, b"hi"))
        self.assertEqual(self.partial(ws), "7 samples")
        self.assertEqual(self.partial(ws), "107 samples")
        self.assertEqual(self.partial(ws), "109 samples")
        ws.send(9, b"")  # an empty ping; an empty message
        self.assertEqual(ws.recv_frame(), (10, b""))
        ws.send(2)
        self.assertEqual(self.partial(ws), "109 samples")
        ws.close()

    def test_client_close_answered_with_its_code(self):
        for payload, want in [((4001).to_bytes(2, "big") + b"bye", 4001),
                              ((1000).to_bytes(2, "big"), 1000), (b"", None)]:
            with self.subTest(want=want):
                ws = self.raw()
                ws.send(2, pcm(5))
                self.assertEqual(self.partial(ws), "5 samples")
                ws.send(8, payload)
                self.assertEqual(ws.recv_close()[0], want)
                self.assertTrue(ws.at_eof())
                ws.close()

    def test_server_close_waits_for_the_clients(self):
        ws = self.raw()
        ws.send(1, b"hello")
        code, why = ws.recv_close()
        self.assertEqual(code, 1003)
        self.assertIn("JSON", why)
        ws.sock.settimeout(0.5)
        self.assertFalse(ws.at_eof())  # it waits for our close (up to 5 s)
        ws.send(2, pcm(5))  # data after the server's close is not answered
        ws.send(8, (1000).to_bytes(2, "big"))
        ws.sock.settimeout(10)
        self.assertTrue(ws.at_eof())
        self.assertEqual(ws.buf, b"")
        ws.close()


class IdleAndAdmission(WsTest):
    REPO = {"echo_asr": ECHO_CONFIG.replace('key: "max_sequences" value: { string_value: "0" }',
                                            'key: "max_sequences" value: { string_value: "2" }')}
    ARGS = ("--speech-model", "echo_asr", "--ws-idle-timeout-secs", "1", "--max-streams", "4")

    def test_idle_timeout(self):
        async def go():
            async with websockets.connect(self.url()) as ws:
                await ws.send(pcm(10))
                await ws.recv()
                t0 = time.monotonic()
                await self.expect_close(ws, 1001, "idle timeout")
                self.assertLess(time.monotonic() - t0, 10)
            # Its sequence was ended: both decoders are free again.
            await self.two_streams()
        run(go())

    async def two_streams(self):
        a = await websockets.connect(self.url())
        b = await websockets.connect(self.url())
        for ws in (a, b):
            await ws.send(pcm(10))
            self.assertIn("partial", json.loads(await ws.recv()))
        return a, b

    def test_no_decoder_free_and_vanished_client(self):
        async def go():
            a, b = await self.two_streams()
            async with websockets.connect(self.url()) as c:
                await c.send(pcm(10))
                await self.expect_close(c, 1013, "no decoder free")
            a.transport.abort()  # vanishes mid-utterance: its decoder goes back
            for _ in range(50):
                async with websockets.connect(self.url()) as c:
                    await c.send(pcm(10))
                    try:
                        self.assertIn("partial", json.loads(await c.recv()))
                        break
                    except websockets.ConnectionClosed:
                        await asyncio.sleep(0.05)
            else:
                self.fail("the vanished client's decoder was never freed")
            await b.close()
        run(go())

    def test_max_streams(self):
        async def go():
            conns = [await websockets.connect(self.url()) for _ in range(4)]
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                await websockets.connect(self.url())
            self.assertEqual(cm.exception.status_code, 503)
            await conns[0].close()
            await asyncio.sleep(0.2)
            extra = await websockets.connect(self.url())
            for ws in conns[1:] + [extra]:
                await ws.close()
        run(go())


class Backlog(WsTest):
    ARGS = ("--speech-model", "echo_asr", "--stream-backlog-limit", "1")

    def test_overload_refuses_new_streams_not_admitted_ones(self):
        async def go():
            a = await websockets.connect(self.url())
            b = await websockets.connect(self.url())
            # Two 300 ms chunks on echo_asr's one instance: two requests wait.
            await a.send(b"SLOW" + pcm(48))
            await b.send(b"SLOW" + pcm(48))
            await asyncio.sleep(0.1)
            with self.assertRaises(websockets.InvalidStatusCode) as cm:
                await websockets.connect(self.url())
            self.assertEqual(cm.exception.status_code, 503)
            for ws in (a, b):  # the admitted streams are served as usual
                self.assertIn("partial", json.loads(await ws.recv()))
            c = await websockets.connect(self.url())  # the backlog drained
            await c.send(pcm(10))
            self.assertIn("partial", json.loads(await c.recv()))
            for ws in (a, b, c):
                await ws.close()
        run(go())


class Shutdown(unittest.TestCase):
    def test_open_streams_closed_on_shutdown(self):
        # A stream that sends nothing after SIGTERM is closed with a reason
        # once the drain's --exit-timeout-secs is over.
        repo = make_repo({"echo_asr": ECHO_CONFIG})
        server = Harkd(repo, ("--speech-model", "echo_asr", "--exit-timeout-secs", "1"))
        try:
            async def go():
                ws = await websockets.connect(f"ws://127.0.0.1:{server.http_port}/")
                await ws.send(pcm(10))
                await ws.recv()
                server.proc.terminate()
                try:
                    await ws.recv()
                    self.fail("still open")
                except websockets.ConnectionClosed as e:
                    self.assertEqual(e.code, 1001)
                    self.assertIn("shutting down", e.reason)
            run(go())
        finally:
            server.stop()


SIMPLE_CONFIG = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                  "models", "simple", "config.pbtxt")).read()


def keepalive_infers(port, k, n):
    """n infers on one keep-alive connection, each with inputs of its own;
    returns the mismatches (empty when every reply was its own)."""
    bad = []
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        for i in range(n):
            a = [k * 1000 + i + j for j in range(16)]
            b = [j - k for j in range(16)]
            conn.request("POST", "/v2/models/simple/infer", json.dumps(simple_request(a, b)),
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            doc = json.loads(resp.read())
            out = {o["name"]: o["data"] for o in doc.get("outputs", [])}
            want = ([x + y for x, y in zip(a, b)], [x - y for x, y in zip(a, b)])
            if resp.status != 200 or (out.get("OUTPUT0"), out.get("OUTPUT1")) != want:
                bad.append((k, i, resp.status, doc))
    finally:
        conn.close()
    return bad


class ManyLoops(WsTest):
    """Four event loops share the HTTP port: connections land on all of them
    and each must get exactly its own replies."""
    REPO = {"echo_asr": ECHO_CONFIG, "simple": SIMPLE_CONFIG}
    ARGS = WsTest.ARGS + ("--http-thread-count", "4")

    def test_infers_and_streams_at_once(self):
        async def one(k):
            async with websockets.connect(self.url()) as ws:
                for i in range(20):
                    await ws.send(pcm(10 + k))
                    self.assertEqual(json.loads(await ws.recv())["partial"],
                                     f"{(10 + k) * (i + 1)} samples")
                await ws.send('{"eof" : 1}')
                self.assertEqual(json.loads(await ws.recv())["text"], str((10 + k) * 20))
                await self.expect_close(ws, 1000)

        async def streams():
            await asyncio.gather(*(one(k) for k in range(32)))

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            infers = [pool.submit(keepalive_infers, self.server.http_port, k, 50)
                      for k in range(16)]
            run(streams())
            bad = [b for f in infers for b in f.result()]
        self.assertEqual(bad, [])

    def test_max_streams_across_loops(self):
        # One --max-streams count for all loops; closed streams give it back.
        repo = make_repo({"echo_asr": ECHO_CONFIG})
        server = Harkd(repo, ("--speech-model", "echo_asr", "--http-thread-count", "4",
                              "--max-streams", "6", "--stream-backlog-limit", "100000"))
        try:
            async def go():
                url = f"ws://127.0.0.1:{server.http_port}/"
                conns = [await websockets.connect(url) for _ in range(6)]
                for ws in conns:  # every admitted stream is served
                    await ws.send(pcm(10))
                    self.assertEqual(json.loads(await ws.recv())["partial"], "10 samples")
                for _ in range(8):  # a new connection lands on any loop
                    with self.assertRaises(websockets.InvalidStatusCode) as cm:
                        await websockets.connect(url)
                    self.assertEqual(cm.exception.status_code, 503)
                for ws in conns:
                    await ws.close()
                await asyncio.sleep(0.3)
                again = [await websockets.connect(url) for _ in range(6)]
                for ws in again:
                    await ws.send(pcm(20))
                    self.assertEqual(json.loads(await ws.recv())["partial"], "20 samples")
                    await ws.close()
            run(go())
        finally:
            server.stop()
            shutil.rmtree(repo, ignore_errors=True)


class ManyLoopsDrain(unittest.TestCase):
    def test_sigterm_lets_streams_on_every_loop_finish(self):
        repo = make_repo({"echo_asr": ECHO_CONFIG})
        server = Harkd(repo, ("--speech-model", "echo_asr", "--http-thread-count", "4",
                              "--exit-timeout-secs", "20", "--stream-backlog-limit", "100000"))
        try:
            url = f"ws://127.0.0.1:{server.http_port}/"

            async def go():
                conns = [await websockets.connect(url) for _ in range(16)]
                for k, ws in enumerate(conns):
                    await ws.send(pcm(10 + k))
                    self.assertIn("partial", json.loads(await ws.recv()))
                server.proc.terminate()
                await asyncio.sleep(0.3)
                # Draining: not ready, no new streams, live ones go on.
                status, _, _ = server.request("GET", "/v2/health/ready")
                self.assertEqual(status, 400)
                with self.assertRaises(websockets.InvalidStatusCode) as cm:
                    await websockets.connect(url)
                self.assertEqual(cm.exception.status_code, 503)

                async def finish(k, ws):
                    for i in range(5):
                        await ws.send(pcm(10 + k))
                        self.assertEqual(json.loads(await ws.recv())["partial"],
                                         f"{(10 + k) * (i + 2)} samples")
                    await ws.send('{"eof" : 1}')
                    self.assertEqual(json.loads(await ws.recv())["text"], str((10 + k) * 6))
                    await self.expect_close(ws, 1000)

                await asyncio.gather(*(finish(k, ws) for k, ws in enumerate(conns)))
                t0 = time.time()
                while server.proc.poll() is None and time.time() - t0 < 10:
                    await asyncio.sleep(0.05)
                # The drain ended when the last stream did, not at the timeout.
                self.assertIsNotNone(server.proc.poll(), "still running after every stream ended")
            run(go())
            out = server.stop()
            self.assertIn("drained: every stream and request finished", out)
        finally:
            if server.proc.poll() is None:
                server.proc.kill()
            shutil.rmtree(repo, ignore_errors=True)

    async def expect_close(self, ws, code):
        try:
            while True:
                await ws.recv()
        except websockets.ConnectionClosed as e:
            self.assertEqual(e.code, code, e.reason)


if __name__ == "__main__":
    main()
