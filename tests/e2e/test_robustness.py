"""Clients that misbehave: stall mid-body, vanish mid-request, send bodies
over the limit or garbage. Each gets a clear error (or is dropped), and the
server keeps serving everyone else."""
import json
import socket
import time
import unittest

from harness import Harkd, MODELS, main, simple_request

A, B = [3] * 16, [1] * 16


class Robustness(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Harkd(MODELS, ["--http-max-input-size", "4096",
                                    "--http-body-timeout-secs", "1"])

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def assert_serving(self):
        status, doc = self.server.json("POST", "/v2/models/simple/infer", simple_request(A, B))
        self.assertEqual(status, 200, doc)

    def raw(self):
        return socket.create_connection(("127.0.0.1", self.server.http_port), timeout=10)

    def test_body_over_limit(self):
        body = b"x" * 10000
        status, _, data = self.server.request("POST", "/v2/models/simple/infer", body)
        self.assertEqual(status, 413)
        self.assertIn("error", json.loads(data))
        self.assert_serving()

    def test_stalled_client_is_dropped(self):
        s = self.raw()
        s.sendall(b"POST /v2/models/simple/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Length: 500\r\n\r\n{\"inputs\":")
        self.assert_serving()  # others are served meanwhile
        start = time.time()
        s.settimeout(10)
        try:
            data = s.recv(4096)
        except ConnectionResetError:
            data = b""
        # dropped after the body timeout (or told 408), well before 10 s
        self.assertLess(time.time() - start, 8)
        self.assertTrue(data == b"" or b"408" in data.split(b"\r\n")[0], data)
        s.close()
        self.assert_serving()

    def test_vanishing_clients(self):
        body = json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "FP32",
                                       "data": [1.0] * 16}]}).encode()
        for _ in range(50):
            s = self.raw()
            s.sendall(b"POST /v2/models/fixed_cost/infer HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            s.close()  # gone before the 2 ms execution ends
        time.sleep(0.5)
        self.assert_serving()
        status, doc = self.server.json("GET", "/v2/models/fixed_cost/stats")
        st = doc["model_stats"][0]["inference_stats"]
        # every accepted request still reached its final
        self.assertEqual(st["success"]["count"] + st["fail"]["count"], 50)

    def test_garbage_and_half_requests(self):
        for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"GET /v2 HTTP/9.9\r\n\r\n",
                     b"POST /v2/models/simple/infer HTTP/1.1\r\nContent-Length: -5\r\n\r\n"):
            s = self.raw()
            s.sendall(junk)
            s.settimeout(5)
            try:
                s.recv(4096)
            except OSError:
                pass
            s.close()
        self.assert_serving()


if __name__ == "__main__":
    main()
