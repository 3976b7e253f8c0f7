"""Triton's log settings and trace settings (issue 28, item 9): HTTP
/v2/logging and /v2[/models/{m}]/trace/setting, gRPC LogSettings and
TraceSetting, against the real harkd. An update must really change what
harkd logs (checked in its output), a bad one must change nothing, and the
`logging` and `trace` categories of the restricted-API flags cover them.

The gRPC stubs are made at test time from hark's proto/ by grpc_tools.
"""
import json
import time
import unittest

import grpc

import harness

harness.grpc_stubs("grpc_service", "model_config")
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402

DEFAULTS = {"log_file": "", "log_info": True, "log_warning": True, "log_error": True,
            "log_verbose_level": 0, "log_format": "default"}
TRACE_OFF = {"trace_level": ["OFF"], "trace_rate": "1000", "trace_count": "-1",
             "log_frequency": "0", "trace_file": "", "trace_mode": "triton"}


def wait_for(pred, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def log_value(v):
    which = v.WhichOneof("parameter_choice")
    return getattr(v, which) if which else None


class LogSettings(harness.ServerTest):
    GRPC = True

    def setUp(self):
        self.stub = pb_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}"))

    def tearDown(self):
        status, doc = self.post("/v2/logging", DEFAULTS)
        self.assertEqual(status, 200, doc)

    def post(self, path, doc):
        status, _, body = self.server.request("POST", path, json.dumps(doc).encode(),
                                              {"Content-Type": "application/json"})
        return status, json.loads(body) if body else None

    def grpc_settings(self, **settings):
        req = pb.LogSettingsRequest()
        for name, value in settings.items():
            v = req.settings[name]
            if isinstance(value, bool):
                v.bool_param = value
            elif isinstance(value, int):
                v.uint32_param = value
            else:
                v.string_param = value
        r = self.stub.LogSettings(req, timeout=10)
        return {k: log_value(v) for k, v in r.settings.items()}

    def test_http_get_and_post(self):
        status, doc = self.server.json("GET", "/v2/logging")
        self.assertEqual(status, 200)
        self.assertEqual(doc, DEFAULTS)
        status, doc = self.post("/v2/logging", {"log_verbose_level": 2, "log_warning": False})
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc, dict(DEFAULTS, log_verbose_level=2, log_warning=False))
        status, doc = self.server.json("GET", "/v2/logging")
        self.assertEqual(doc["log_verbose_level"], 2)
        self.assertFalse(doc["log_warning"])
        # The server says it has the extension.
        _, meta = self.server.json("GET", "/v2")
        self.assertIn("logging", meta["extensions"])

    def test_update_changes_what_harkd_logs(self):
        # The format: the line that reports the change is already JSON.
        self.assertNotIn('"message":"log settings changed', self.server.output())
        status, _ = self.post("/v2/logging", {"log_format": "json"})
        self.assertEqual(status, 200)
        self.assertTrue(wait_for(lambda: '"message":"log settings changed over HTTP'
                                 in self.server.output()), self.server.output())
        # Info off: the next change is not reported.
        reports = self.server.output().count("log settings changed")
        status, _ = self.post("/v2/logging", {"log_info": False, "log_format": "default"})
        self.assertEqual(status, 200)
        time.sleep(0.2)
        self.assertEqual(self.server.output().count("log settings changed"), reports)
        # Verbose: a protocol error on a WebSocket is logged only at level >= 1.
        status, _ = self.post("/v2/logging", {"log_verbose_level": 1})
        self.assertEqual(status, 200)
        ws = harness.RawWebSocket(self.server.http_port)
        ws.send(1, b"hi", mask=None)  # unmasked: closed 1002
        self.assertEqual(ws.recv_close()[0], 1002)
        ws.close()
        self.assertTrue(wait_for(lambda: "ws: closing a stream 1002" in self.server.output()))
        status, _ = self.post("/v2/logging", {"log_verbose_level": 0})
        before = self.server.output().count("ws: closing a stream 1002")
        ws = harness.RawWebSocket(self.server.http_port)
        ws.send(1, b"hi", mask=None)
        self.assertEqual(ws.recv_close()[0], 1002)
        ws.close()
        time.sleep(0.3)
        self.assertEqual(self.server.output().count("ws: closing a stream 1002"), before)

    def test_bad_update_changes_nothing(self):
        for doc, words in (({"log_verbose_level": 3, "log_info": "yes"}, "log_info"),
                           ({"log_verbose_level": -1}, "log_verbose_level"),
                           ({"log_verbose_level": 1.5}, "log_verbose_level"),
                           ({"log_format": "xml"}, "log_format"),
                           ({"log_nonsense": True}, "unknown log setting"),
                           ({"log_file": "/tmp/x.log"}, "stderr")):
            with self.subTest(doc=doc):
                status, reply = self.post("/v2/logging", doc)
                self.assertEqual(status, 400, reply)
                self.assertIn(words, reply["error"])
        status, _, body = self.server.request("POST", "/v2/logging", b"[1]")
        self.assertEqual(status, 400, body)
        self.assertEqual(self.server.json("GET", "/v2/logging")[1], DEFAULTS)
        status, _, _ = self.server.request("PUT", "/v2/logging", b"{}")
        self.assertEqual(status, 405)

    def test_grpc(self):
        self.assertEqual(self.grpc_settings(), DEFAULTS)
        got = self.grpc_settings(log_verbose_level=4, log_error=False, log_format="ISO8601")
        self.assertEqual(got, dict(DEFAULTS, log_verbose_level=4, log_error=False,
                                   log_format="ISO8601"))
        # The same settings over HTTP.
        self.assertEqual(self.server.json("GET", "/v2/logging")[1]["log_verbose_level"], 4)
        for settings, code in (({"log_info": 1}, grpc.StatusCode.INVALID_ARGUMENT),
                               ({"log_verbose_level": "2"}, grpc.StatusCode.INVALID_ARGUMENT),
                               ({"log_bogus": True}, grpc.StatusCode.INVALID_ARGUMENT),
                               ({"log_file": "/tmp/x"}, grpc.StatusCode.UNIMPLEMENTED)):
            with self.subTest(settings=settings):
                with self.assertRaises(grpc.RpcError) as cm:
                    self.grpc_settings(**settings)
                self.assertEqual(cm.exception.code(), code, cm.exception.details())
        self.assertEqual(self.grpc_settings()["log_verbose_level"], 4)


class TraceSettings(harness.ServerTest):
    GRPC = True

    def setUp(self):
        self.stub = pb_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}"))

    def trace(self, model="", **settings):
        req = pb.TraceSettingRequest(model_name=model)
        for name, values in settings.items():
            req.settings[name].value.extend(values)
        r = self.stub.TraceSetting(req, timeout=10)
        return {k: list(v.value) for k, v in r.settings.items()}

    def test_http(self):
        want = dict(TRACE_OFF)
        for path in ("/v2/trace/setting", "/v2/models/simple/trace/setting"):
            with self.subTest(path=path):
                status, doc = self.server.json("GET", path)
                self.assertEqual((status, doc), (200, want))
                status, doc = self.server.json("POST", path, {"trace_level": ["OFF"],
                                                              "trace_rate": None})
                self.assertEqual((status, doc), (200, want))
                status, doc = self.server.json("POST", path, {"trace_level": ["TIMESTAMPS"]})
                self.assertEqual(status, 400, doc)
                self.assertIn("does not trace", doc["error"])
                status, doc = self.server.json("POST", path, {"trace_rate": "5"})
                self.assertEqual(status, 400, doc)
                status, doc = self.server.json("POST", path, {"trace_bogus": "5"})
                self.assertEqual(status, 400, doc)
                self.assertIn("unknown trace setting", doc["error"])
        status, doc = self.server.json("GET", "/v2/models/no_such_model/trace/setting")
        self.assertIn(status, (400, 404), doc)
        self.assertIn("no_such_model", doc["error"])

    def test_grpc(self):
        want = {k: v if isinstance(v, list) else [v] for k, v in TRACE_OFF.items()}
        self.assertEqual(self.trace(), want)
        self.assertEqual(self.trace(model="simple", trace_level=["OFF"]), want)
        with self.assertRaises(grpc.RpcError) as cm:
            self.trace(trace_level=["TIMESTAMPS", "TENSORS"])
        self.assertEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
        self.assertIn("does not trace", cm.exception.details())
        with self.assertRaises(grpc.RpcError) as cm:
            self.trace(model="no_such_model")
        self.assertNotEqual(cm.exception.code(), grpc.StatusCode.UNIMPLEMENTED)


KEY, SECRET = "admin-key", "s3cret"


class Restricted(harness.ServerTest):
    """`logging` and `trace` restricted as Triton's flags say."""
    GRPC = True
    ARGS = (f"--http-restricted-api=logging,trace:{KEY}={SECRET}",
            f"--grpc-restricted-protocol=logging,trace:{KEY}={SECRET}")

    def test_http(self):
        for method, path, body in (("GET", "/v2/logging", None),
                                   ("POST", "/v2/logging", b'{"log_verbose_level":1}'),
                                   ("GET", "/v2/trace/setting", None),
                                   ("GET", "/v2/models/simple/trace/setting", None)):
            with self.subTest(method=method, path=path):
                status, _, reply = self.server.request(method, path, body)
                self.assertEqual(status, 403, reply)
                self.assertIn(KEY, json.loads(reply)["error"])
                status, _, reply = self.server.request(method, path, body, {KEY: SECRET})
                self.assertEqual(status, 200, reply)
        status, _, reply = self.server.request("POST", "/v2/logging", b'{"log_verbose_level":0}',
                                               {KEY: SECRET})
        self.assertEqual(json.loads(reply)["log_verbose_level"], 0)

    def test_grpc(self):
        stub = pb_grpc.GRPCInferenceServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}"))
        for call, req in ((stub.LogSettings, pb.LogSettingsRequest()),
                          (stub.TraceSetting, pb.TraceSettingRequest())):
            with self.assertRaises(grpc.RpcError) as cm:
                call(req, timeout=10)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
            call(req, timeout=10, metadata=((KEY, SECRET),))


if __name__ == "__main__":
    harness.main()
