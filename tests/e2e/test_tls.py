"""TLS on the HTTP/WebSocket and gRPC ports, client certificates, restricted
APIs and --metrics-address (issue 13, finding 2), with real clients:
Python's http.client over ssl, the websockets library over wss://, and
Debian's grpcio with grpc.ssl_channel_credentials for KServe and Riva.

Certificates are made at test time with the openssl command into a
temporary folder: a CA, a server certificate for localhost/127.0.0.1 that
it signs, a client certificate it signs, and a client certificate from a
CA nobody trusts.
"""
import asyncio
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import unittest

import grpc
import websockets

import harness

harness.grpc_stubs("grpc_service", "model_config", "health", "riva_asr", "riva_audio", "riva_common")
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402
import riva_asr_pb2 as rasr  # noqa: E402
import riva_asr_pb2_grpc as rasr_grpc  # noqa: E402
import riva_audio_pb2 as raudio  # noqa: E402

KEY = "admin-key"
SECRET = "s3cret-value"


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_certs():
    """A CA, a server and a client certificate it signs, and a client
    certificate of a second CA: {name: path}."""
    d = tempfile.mkdtemp(prefix="hark-certs-")
    with open(os.path.join(d, "san.ext"), "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for ca in ("ca", "other-ca"):
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{ca}.key",
                 "-out", f"{ca}.crt", "-days", "2", "-subj", f"/CN=hark test {ca}", cwd=d)
    for name, ca, ext in (("server", "ca", ["-extfile", "san.ext"]), ("client", "ca", []),
                          ("stranger", "other-ca", [])):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *ext, cwd=d)
    with open(os.path.join(d, "garbage.pem"), "w") as f:
        f.write("not a certificate\n")
    paths = {n: os.path.join(d, n) for n in os.listdir(d)}
    paths["dir"] = d
    return paths


CERTS = make_certs()


def read(name):
    with open(CERTS[name], "rb") as f:
        return f.read()


def client_context():
    ctx = ssl.create_default_context(cafile=CERTS["ca.crt"])
    return ctx


class TlsHarkd(harness.Harkd):
    """A harkd whose HTTP port speaks TLS (when tls) and whose own probes
    carry the restricted header."""

    def __init__(self, *args, tls=False, headers=None, **kw):
        self.tls = tls
        self.headers = headers or {}
        super().__init__(*args, **kw)

    def connect(self, port=None, timeout=30):
        if self.tls and (port is None or port == self.http_port):
            return http.client.HTTPSConnection("localhost", self.http_port, timeout=timeout,
                                               context=client_context())
        return super().connect(port, timeout)

    def request(self, method, path, body=None, headers=None, port=None):
        return super().request(method, path, body, {**self.headers, **(headers or {})}, port)


def riva_recognize(channel, metadata=None):
    stub = rasr_grpc.RivaSpeechRecognitionStub(channel)
    rc = rasr.RecognitionConfig(encoding=raudio.LINEAR_PCM, sample_rate_hertz=16000,
                                language_code="en-US")
    return stub.Recognize(rasr.RecognizeRequest(config=rc, audio=b"\0\0" * 8000),
                          timeout=60, metadata=metadata)


def model_infer(channel, metadata=None):
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    req = pb.ModelInferRequest(model_name="simple")
    for name in ("INPUT0", "INPUT1"):
        t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        t.contents.int_contents.extend(range(16))
    return stub.ModelInfer(req, timeout=30, metadata=metadata)


class TlsAndRestrictedApis(unittest.TestCase):
    """HTTPS + wss:// on the HTTP port, TLS on the gRPC port (no client
    certificates), and inference and model-repository restricted on both."""

    @classmethod
    def setUpClass(cls):
        c = CERTS
        cls.server = TlsHarkd(args=[
            "--http-use-ssl", "true", "--http-server-cert", c["server.crt"],
            "--http-server-key", c["server.key"],
            "--grpc-use-ssl", "true", "--grpc-server-cert", c["server.crt"],
            "--grpc-server-key", c["server.key"],
            f"--http-restricted-api=inference,model-repository:{KEY}={SECRET}",
            f"--grpc-restricted-protocol=inference,model-repository:{KEY}={SECRET}",
            "--grpc-restricted-protocol=statistics:other-key=x"], grpc=True, tls=True)
        creds = grpc.ssl_channel_credentials(root_certificates=read("ca.crt"))
        cls.channel = grpc.secure_channel(f"localhost:{cls.server.grpc_port}", creds,
                                          options=[("grpc.max_receive_message_length", 64 << 20),
                                                   ("grpc.max_send_message_length", 64 << 20)])

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.stop()

    # ---- HTTP over TLS ----

    def test_https_serves_and_health_is_open(self):
        status, _, _ = self.server.request("GET", "/v2/health/ready")
        self.assertEqual(status, 200)
        status, doc = self.server.json("GET", "/v2")
        self.assertEqual((status, doc["name"]), (200, "hark"))

    def test_plain_http_to_the_tls_port_fails_cleanly(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.server.http_port, timeout=10)
        try:
            with self.assertRaises((http.client.HTTPException, OSError)):
                conn.request("GET", "/v2/health/ready")
                conn.getresponse()
        finally:
            conn.close()
        self.assertEqual(self.server.request("GET", "/v2/health/live")[0], 200)

    def test_https_offers_http11_only(self):
        ctx = client_context()
        ctx.set_alpn_protocols(["h2", "http/1.1"])
        with socket.create_connection(("127.0.0.1", self.server.http_port), 10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                self.assertIn(s.selected_alpn_protocol(), (None, "http/1.1"))

    def test_restricted_http_routes_answer_403_without_the_header(self):
        body = json.dumps(harness.simple_request(list(range(16)), list(range(16))))
        for method, path, data in (("POST", "/v2/models/simple/infer", body),
                                   ("POST", "/v2/repository/index", "{}"),
                                   ("POST", "/v2/repository/models/simple/load", "{}")):
            status, _, got = self.server.request(method, path, data.encode(),
                                                 {"Content-Type": "application/json"})
            self.assertEqual(status, 403, path)
            self.assertEqual(json.loads(got),
                             {"error": f"This API is restricted, expecting header '{KEY}'"})
            status, _, _ = self.server.request(method, path, data.encode(), {KEY: "wrong"})
            self.assertEqual(status, 403, path)
        status, _, got = self.server.request("POST", "/v2/models/simple/infer", body.encode(),
                                             {KEY: SECRET})
        self.assertEqual(status, 200, got)
        status, _, got = self.server.request("POST", "/v2/repository/index", b"{}",
                                             {KEY.upper(): SECRET})
        self.assertEqual(status, 200, got)

    def test_open_categories_stay_open(self):
        for path in ("/v2/health/live", "/v2/models/simple", "/v2/models/simple/ready",
                     "/v2/models/stats", "/v2/models/simple/config"):
            self.assertEqual(self.server.request("GET", path)[0], 200, path)

    def test_config_hides_paths_from_clients_without_model_repository(self):
        status, doc = self.server.json("GET", "/v2/models/asr/config")
        self.assertEqual(status, 200)
        self.assertEqual(doc["parameters"]["hmm"]["string_value"], "<path hidden>")
        self.assertEqual(doc["parameters"]["silence_ms"]["string_value"], "500")
        self.assertNotIn("/usr/share", json.dumps(doc))
        status, _, got = self.server.request("GET", "/v2/models/asr/config", None,
                                             {KEY: SECRET})
        self.assertEqual(status, 200)
        self.assertIn("/usr/share/pocketsphinx", json.loads(got)["parameters"]["hmm"]
                      ["string_value"])

    def test_metrics_port_stays_plain_and_open(self):
        self.assertIn("nv_inference_request_success", self.server.metrics())

    # ---- wss:// ----

    def wss(self, headers=None):
        async def go():
            url = f"wss://localhost:{self.server.http_port}/"
            async with websockets.connect(url, ssl=client_context(),
                                          extra_headers=headers or {}) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": 16000}}))
                await ws.send(b"\0\0" * 1600)
                await ws.send('{"eof" : 1}')
                msgs = [json.loads(m) async for m in ws]
                return msgs
        return asyncio.run(asyncio.wait_for(go(), 60))

    def test_websocket_over_tls(self):
        msgs = self.wss({KEY: SECRET})
        self.assertIn("text", msgs[-1])

    def test_websocket_framing_over_tls(self):
        # hark reads wss:// frames through lws's TLS session itself: a
        # stream of messages, a ping, then an unmasked frame (1002).
        raw = socket.create_connection(("127.0.0.1", self.server.http_port), timeout=10)
        sock = client_context().wrap_socket(raw, server_hostname="localhost")
        ws = harness.RawWebSocket(self.server.http_port, sock=sock, headers={KEY: SECRET})
        ws.send(1, json.dumps({"config": {"sample_rate": 16000}}).encode())
        for _ in range(5):
            ws.send(2, b"\0\0" * 1600)
        ws.send(9, b"tls")
        texts, pongs = 0, []
        while texts < 5 or not pongs:
            op, payload = ws.recv_frame()
            if op == 10:
                pongs.append(payload)
            else:
                self.assertEqual(op, 1)
                self.assertIn("partial", json.loads(payload))
                texts += 1
        self.assertEqual(pongs, [b"tls"])
        ws.sock.sendall(harness.RawWebSocket.frame(2, b"\0\0", mask=None))
        code, why = ws.recv_close()
        self.assertEqual(code, 1002)
        self.assertIn("unmasked", why)
        ws.close()

    def test_websocket_upgrade_is_inference(self):
        with self.assertRaises(websockets.exceptions.InvalidStatusCode) as cm:
            self.wss()
        self.assertEqual(cm.exception.status_code, 403)

    # ---- gRPC over TLS ----

    def test_grpc_health_over_tls(self):
        stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        self.assertTrue(stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live)

    def test_grpc_restricted_inference(self):
        with self.assertRaises(grpc.RpcError) as cm:
            model_infer(self.channel)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn(f"expecting header '{KEY}'", cm.exception.details())
        resp = model_infer(self.channel, ((KEY, SECRET),))
        self.assertEqual(resp.model_name, "simple")

    def test_grpc_large_messages_both_ways(self):
        """Megabytes each way: TLS records across many socket writes, while
        the socket is full, in order."""
        stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        data = os.urandom(8 << 20)
        req = pb.ModelInferRequest(model_name="identity")
        req.inputs.add(name="INPUT_UINT8", datatype="UINT8", shape=[1, len(data)])
        req.raw_input_contents.append(data)
        for _ in range(3):
            resp = stub.ModelInfer(req, timeout=60, metadata=((KEY, SECRET),))
            self.assertEqual(resp.raw_output_contents[0], data)

    def test_grpc_restricted_statistics_takes_its_own_header(self):
        stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        req = pb.ModelStatisticsRequest(name="simple")
        with self.assertRaises(grpc.RpcError) as cm:
            stub.ModelStatistics(req, timeout=30, metadata=((KEY, SECRET),))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        stub.ModelStatistics(req, timeout=30, metadata=(("other-key", "x"),))

    def test_grpc_config_hides_paths(self):
        stub = pb_grpc.GRPCInferenceServiceStub(self.channel)
        req = pb.ModelConfigRequest(name="asr")
        cfg = stub.ModelConfig(req, timeout=30).config
        self.assertEqual(cfg.parameters["hmm"].string_value, "<path hidden>")
        cfg = stub.ModelConfig(req, timeout=30, metadata=((KEY, SECRET),)).config
        self.assertTrue(cfg.parameters["hmm"].string_value.startswith("/"))

    def test_riva_over_tls_is_inference(self):
        with self.assertRaises(grpc.RpcError) as cm:
            riva_recognize(self.channel)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        riva_recognize(self.channel, ((KEY, SECRET),))
        stub = rasr_grpc.RivaSpeechRecognitionStub(self.channel)
        stub.GetRivaSpeechRecognitionConfig(rasr.RivaSpeechRecognitionConfigRequest(), timeout=30)

    def test_grpc_alpn_is_h2_and_plaintext_fails(self):
        ctx = client_context()
        ctx.set_alpn_protocols(["h2"])
        with socket.create_connection(("127.0.0.1", self.server.grpc_port), 10) as raw:
            with ctx.wrap_socket(raw, server_hostname="localhost") as s:
                self.assertEqual(s.selected_alpn_protocol(), "h2")
        plain = grpc.insecure_channel(f"localhost:{self.server.grpc_port}")
        try:
            with self.assertRaises(grpc.RpcError) as cm:
                pb_grpc.GRPCInferenceServiceStub(plain).ServerLive(pb.ServerLiveRequest(),
                                                                   timeout=5)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        finally:
            plain.close()


    def test_a_silent_client_is_dropped_after_the_handshake_timeout(self):
        with socket.create_connection(("127.0.0.1", self.server.grpc_port), 10) as s:
            s.settimeout(20)
            t0 = time.monotonic()
            self.assertEqual(s.recv(100), b"")  # closed, without a byte of TLS
            self.assertLess(time.monotonic() - t0, 18)


class MutualTls(unittest.TestCase):
    """--grpc-use-ssl-mutual: a client certificate signed by the root is
    required; --metrics-address binds the metrics port apart."""

    @classmethod
    def setUpClass(cls):
        c = CERTS
        cls.server = TlsHarkd(args=[
            "--grpc-use-ssl-mutual", "true", "--grpc-server-cert", c["server.crt"],
            "--grpc-server-key", c["server.key"], "--grpc-root-cert", c["ca.crt"],
            "--metrics-address", "127.0.0.2"], grpc=True)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def live(self, key=None, chain=None):
        creds = grpc.ssl_channel_credentials(read("ca.crt"), key and read(key),
                                             chain and read(chain))
        with grpc.secure_channel(f"localhost:{self.server.grpc_port}", creds) as ch:
            return pb_grpc.GRPCInferenceServiceStub(ch).ServerLive(pb.ServerLiveRequest(),
                                                                   timeout=10).live

    def test_client_with_a_certificate_of_the_root(self):
        self.assertTrue(self.live("client.key", "client.crt"))
        with grpc.secure_channel(f"localhost:{self.server.grpc_port}",
                                 grpc.ssl_channel_credentials(read("ca.crt"), read("client.key"),
                                                              read("client.crt"))) as ch:
            riva_recognize(ch)

    def test_client_without_a_certificate_is_refused(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.live()
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)

    def test_client_with_a_certificate_of_another_ca_is_refused(self):
        with self.assertRaises(grpc.RpcError) as cm:
            self.live("stranger.key", "stranger.crt")
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertTrue(self.live("client.key", "client.crt"))

    def test_metrics_address(self):
        conn = http.client.HTTPConnection("127.0.0.2", self.server.metrics_port, timeout=10)
        conn.request("GET", "/metrics")
        self.assertEqual(conn.getresponse().status, 200)
        conn.close()
        with self.assertRaises(OSError):  # --http-address 127.0.0.1 is not where it listens
            socket.create_connection(("127.0.0.1", self.server.metrics_port), 5).close()


class RefusesToStart(unittest.TestCase):
    """Bad flags stop harkd at start with a message that says what is wrong."""

    def start(self, *args):
        repo = tempfile.mkdtemp(prefix="hark-empty-repo-")
        try:
            p = subprocess.run(harness.DIE_WITH_PARENT + [
                os.path.join(harness.BIN_DIR, "harkd"), "--model-repository", repo,
                "--http-address", "127.0.0.1", "--http-port", str(harness.free_port()),
                "--grpc-port", str(harness.free_port()), "--metrics-port", "-1", *args],
                capture_output=True, text=True, timeout=60)
        finally:
            shutil.rmtree(repo, True)
        self.assertNotEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertNotIn("AddressSanitizer", p.stderr)
        return p.stdout + p.stderr

    def test_bad_restrictions(self):
        for flag in ("--http-restricted-api", "--grpc-restricted-protocol"):
            self.assertIn("unknown category 'bogus'", self.start(f"{flag}=bogus:k=v"))
            self.assertIn("expects <category>", self.start(f"{flag}=health:k"))
            self.assertIn("not a valid header name", self.start(f"{flag}=health:a b=v"))
            self.assertIn("restricted more than once",
                          self.start(f"{flag}=health:k=v", f"{flag}=metadata,health:j=w"))

    def test_bad_http_tls(self):
        c = CERTS
        self.assertIn("needs --http-server-cert", self.start("--http-use-ssl", "true"))
        self.assertIn("expects true or false", self.start("--http-use-ssl", "yes"))
        out = self.start("--http-use-ssl", "true", "--http-server-cert", "/nonexistent.pem",
                         "--http-server-key", c["server.key"])
        self.assertIn("--http-server-cert: cannot read /nonexistent.pem", out)
        out = self.start("--http-use-ssl", "true", "--http-server-cert", c["garbage.pem"],
                         "--http-server-key", c["server.key"])
        self.assertIn(c["garbage.pem"] + " holds no PEM certificate", out)
        out = self.start("--http-use-ssl", "true", "--http-server-cert", c["server.crt"],
                         "--http-server-key", c["client.key"])
        self.assertIn(f"the key in {c['client.key']} does not belong to", out)

    def test_bad_grpc_tls(self):
        c = CERTS
        self.assertIn("needs --grpc-server-cert", self.start("--grpc-use-ssl", "true"))
        self.assertIn("needs --grpc-root-cert",
                      self.start("--grpc-use-ssl-mutual", "true", "--grpc-server-cert",
                                 c["server.crt"], "--grpc-server-key", c["server.key"]))
        out = self.start("--grpc-use-ssl", "true", "--grpc-server-cert", c["server.crt"],
                         "--grpc-server-key", c["garbage.pem"])
        self.assertIn(c["garbage.pem"] + " holds no unencrypted PEM private key", out)
        out = self.start("--grpc-use-ssl-mutual", "true", "--grpc-server-cert", c["server.crt"],
                         "--grpc-server-key", c["server.key"], "--grpc-root-cert",
                         c["garbage.pem"])
        self.assertIn("--grpc-root-cert: " + c["garbage.pem"] + " holds no PEM CA", out)


if __name__ == "__main__":
    try:
        harness.main()
    finally:
        shutil.rmtree(CERTS["dir"], True)
