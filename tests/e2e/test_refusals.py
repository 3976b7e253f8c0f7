"""Small refusals from issue 24, item 4, each playing its attack against
the real harkd: a restricted key header sent twice (gRPC and HTTP), a WebSocket
frame whose header alone declares too much, an upgrade with no
Sec-WebSocket-Key.
"""
import json
import socket
import unittest

import grpc

import harness

harness.grpc_stubs("grpc_service", "model_config")
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

KEY, SECRET = "admin-key", "s3cret"
LIMIT = 4096


class RepeatedKey(harness.ServerTest):
    """A key header sent twice opens nothing on gRPC, in either order."""
    GRPC = True
    ARGS = (f"--grpc-restricted-protocol=model-repository:{KEY}={SECRET}",
            f"--http-restricted-api=model-repository:{KEY}={SECRET}")

    def test_grpc_refuses_a_repeated_key(self):
        stub = pb_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}"))
        req = pb.RepositoryIndexRequest()
        stub.RepositoryIndex(req, timeout=10, metadata=((KEY, SECRET),))  # the victim: passes
        for md in (((KEY, SECRET), (KEY, "guess")), ((KEY, "guess"), (KEY, SECRET)),
                   ((KEY, SECRET), (KEY, SECRET))):
            with self.subTest(metadata=md):
                with self.assertRaises(grpc.RpcError) as cm:
                    stub.RepositoryIndex(req, timeout=10, metadata=md)
                self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
                self.assertIn("more than once", cm.exception.details())
        stub.RepositoryIndex(req, timeout=10, metadata=((KEY, SECRET),))

    def http_status(self, headers):
        with socket.create_connection(("127.0.0.1", self.server.http_port), timeout=10) as sock:
            sock.sendall(("POST /v2/repository/index HTTP/1.1\r\nHost: x\r\n" + "".join(
                f"{k}: {v}\r\n" for k, v in headers) + "Content-Length: 0\r\n\r\n").encode())
            status, _, body, _ = harness.read_http_reply(sock)
            return status, body

    def test_http_refuses_a_repeated_key(self):
        # As gRPC: a key header sent twice opens nothing, whichever value
        # is right (once libwebsockets read the heads, HTTP saw the first
        # value only).
        self.assertEqual(self.http_status([(KEY, SECRET)])[0], 200)  # the victim: passes
        for hs in (((KEY, SECRET), (KEY, "guess")), ((KEY, "guess"), (KEY, SECRET)),
                   ((KEY, SECRET), ("Admin-Key", SECRET))):
            with self.subTest(headers=hs):
                status, body = self.http_status(hs)
                self.assertEqual(status, 403)
                self.assertIn(b"more than once", body)
        self.assertEqual(self.http_status([(KEY, SECRET)])[0], 200)


class WebSocketRefusals(harness.ServerTest):
    ARGS = ("--ws-max-message-bytes", str(LIMIT))

    def test_oversized_frame_closed_at_its_header(self):
        ws = harness.RawWebSocket(self.server.http_port, timeout=5)
        # The header (and mask) of a frame of LIMIT + 1 bytes, and nothing of its payload.
        ws.sock.sendall(harness.RawWebSocket.frame(2, b"", length=LIMIT + 1))
        code, reason = ws.recv_close()
        self.assertEqual(code, 1009)
        self.assertIn("--ws-max-message-bytes", reason)
        ws.close()

    def test_oversized_continuation_closed_at_its_header(self):
        ws = harness.RawWebSocket(self.server.http_port, timeout=5)
        ws.send(2, b"\0" * (LIMIT - 10), fin=False)
        ws.sock.sendall(harness.RawWebSocket.frame(0, b"", length=11))
        code, reason = ws.recv_close()
        self.assertEqual(code, 1009)
        ws.close()

    def test_frames_within_the_limit_still_pass(self):
        # The victim: a message of exactly LIMIT bytes in two frames is
        # taken (Vosk answers a config message or closes for another reason,
        # never 1009).
        ws = harness.RawWebSocket(self.server.http_port, timeout=5)
        ws.send(2, b"\0" * (LIMIT - 100), fin=False)
        ws.send(0, b"\0" * 100)
        ws.send(8, b"\x03\xe8")
        code, _ = ws.recv_close()
        self.assertNotEqual(code, 1009)
        ws.close()

    def test_upgrade_without_key_gets_400(self):
        sock = socket.create_connection(("127.0.0.1", self.server.http_port), timeout=10)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                     b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n")
        status, _, body, _ = harness.read_http_reply(sock)
        self.assertEqual(status, 400)
        self.assertIn("Sec-WebSocket-Key", json.loads(body)["error"])
        sock.close()
        # The server still takes a proper upgrade.
        harness.RawWebSocket(self.server.http_port).close()


if __name__ == "__main__":
    harness.main()
