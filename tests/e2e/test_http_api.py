"""KServe v2 over HTTP against the real harkd: health, metadata, config,
inference with JSON and binary tensors, and the errors bad requests get."""
import json
import struct

from harness import ServerTest, main, simple_request

A = list(range(16))
B = [1] * 16


def binary_body(header, blobs):
    head = json.dumps(header).encode()
    return head + b"".join(blobs), {"Inference-Header-Content-Length": str(len(head)),
                                    "Content-Type": "application/octet-stream"}


def split_binary(headers, body):
    n = int({k.lower(): v for k, v in headers.items()}["inference-header-content-length"])
    return json.loads(body[:n]), body[n:]


class HttpApi(ServerTest):
    def test_health(self):
        self.assertEqual(self.server.request("GET", "/v2/health/live")[0], 200)
        self.assertEqual(self.server.request("GET", "/v2/health/ready")[0], 200)

    def test_server_metadata(self):
        status, doc = self.server.json("GET", "/v2")
        self.assertEqual(status, 200)
        self.assertEqual(doc["name"], "hark")
        self.assertIn("binary_tensor_data", doc["extensions"])
        self.assertTrue(doc["version"])

    def test_model_metadata(self):
        status, doc = self.server.json("GET", "/v2/models/simple")
        self.assertEqual(status, 200)
        self.assertEqual(doc["name"], "simple")
        self.assertEqual(doc["versions"], ["1"])
        self.assertEqual(doc["inputs"][0], {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]})
        self.assertEqual([o["name"] for o in doc["outputs"]], ["OUTPUT0", "OUTPUT1"])
        status, doc = self.server.json("GET", "/v2/models/simple/versions/1")
        self.assertEqual(status, 200)

    def test_model_ready_and_config(self):
        self.assertEqual(self.server.request("GET", "/v2/models/simple/ready")[0], 200)
        self.assertEqual(self.server.request("GET", "/v2/models/simple/versions/1/ready")[0], 200)
        status, cfg = self.server.json("GET", "/v2/models/simple/config")
        self.assertEqual(status, 200)
        self.assertEqual(cfg["name"], "simple")
        self.assertEqual(cfg["max_batch_size"], 8)
        self.assertEqual(cfg["input"][0]["data_type"], "TYPE_INT32")
        self.assertIn("dynamic_batching", cfg)

    def test_infer_json(self):
        status, doc = self.server.json("POST", "/v2/models/simple/infer",
                                       simple_request(A, B, id="req-1"))
        self.assertEqual(status, 200, doc)
        self.assertEqual(doc["model_name"], "simple")
        self.assertEqual(doc["model_version"], "1")
        self.assertEqual(doc["id"], "req-1")
        out = {o["name"]: o for o in doc["outputs"]}
        self.assertEqual(out["OUTPUT0"]["data"], [a + b for a, b in zip(A, B)])
        self.assertEqual(out["OUTPUT1"]["data"], [a - b for a, b in zip(A, B)])
        self.assertEqual(out["OUTPUT0"]["shape"], [1, 16])
        self.assertEqual(out["OUTPUT0"]["datatype"], "INT32")

    def test_infer_versioned_and_requested_output(self):
        req = simple_request(A, B, outputs=[{"name": "OUTPUT1"}])
        status, doc = self.server.json("POST", "/v2/models/simple/versions/1/infer", req)
        self.assertEqual(status, 200, doc)
        self.assertEqual([o["name"] for o in doc["outputs"]], ["OUTPUT1"])

    def test_infer_batch_of_two(self):
        req = {"inputs": [
            {"name": "INPUT0", "shape": [2, 16], "datatype": "INT32", "data": [A, A]},
            {"name": "INPUT1", "shape": [2, 16], "datatype": "INT32", "data": [B, A]}]}
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assertEqual(status, 200, doc)
        out = {o["name"]: o for o in doc["outputs"]}
        self.assertEqual(out["OUTPUT0"]["shape"], [2, 16])
        self.assertEqual(out["OUTPUT0"]["data"], [a + b for a, b in zip(A, B)] + [2 * a for a in A])

    def test_infer_binary(self):
        header = {"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                        {"name": "OUTPUT1", "parameters": {"binary_data": False}}]}
        body, headers = binary_body(header, [struct.pack("<16i", *A), struct.pack("<16i", *B)])
        status, rh, data = self.server.request("POST", "/v2/models/simple/infer", body, headers)
        self.assertEqual(status, 200, data)
        doc, blob = split_binary(rh, data)
        out = {o["name"]: o for o in doc["outputs"]}
        self.assertEqual(out["OUTPUT0"]["parameters"]["binary_data_size"], 64)
        self.assertNotIn("data", out["OUTPUT0"])
        self.assertEqual(list(struct.unpack("<16i", blob)), [a + b for a, b in zip(A, B)])
        self.assertEqual(out["OUTPUT1"]["data"], [a - b for a, b in zip(A, B)])

    def test_identity_every_type(self):
        cases = {"BOOL": [True, False], "UINT8": [0, 255], "UINT16": [0, 65535],
                 "UINT32": [0, 4294967295], "UINT64": [0, 18446744073709551615],
                 "INT8": [-128, 127], "INT16": [-32768, 32767],
                 "INT32": [-2147483648, 2147483647],
                 "INT64": [-9223372036854775808, 9223372036854775807],
                 "FP32": [1.5, -2.25], "FP64": [1e300, -0.5], "BYTES": ["hello", ""]}
        inputs = [{"name": f"INPUT_{t}", "shape": [1, 2], "datatype": t, "data": d}
                  for t, d in cases.items()]
        status, doc = self.server.json("POST", "/v2/models/identity/infer", {"inputs": inputs})
        self.assertEqual(status, 200, doc)
        out = {o["name"]: o for o in doc["outputs"]}
        for t, d in cases.items():
            self.assertEqual(out[f"OUTPUT_{t}"]["data"], d, t)
            self.assertEqual(out[f"OUTPUT_{t}"]["datatype"], t)

    def test_identity_binary_bytes_and_fp16(self):
        strings = [b"abc", b"", b"\x00\xff"]
        blob = b"".join(struct.pack("<I", len(s)) + s for s in strings)
        half = struct.pack("<3e", 1.0, -2.0, 0.5)
        header = {"inputs": [
            {"name": "INPUT_BYTES", "shape": [1, 3], "datatype": "BYTES",
             "parameters": {"binary_data_size": len(blob)}},
            {"name": "INPUT_FP16", "shape": [1, 3], "datatype": "FP16",
             "parameters": {"binary_data_size": len(half)}}],
            "parameters": {"binary_data_output": True}}
        body, headers = binary_body(header, [blob, half])
        status, rh, data = self.server.request("POST", "/v2/models/identity/infer", body, headers)
        self.assertEqual(status, 200, data)
        doc, rest = split_binary(rh, data)
        got = {}
        for o in doc["outputs"]:
            n = o["parameters"]["binary_data_size"]
            got[o["name"]], rest = rest[:n], rest[n:]
        self.assertEqual(rest, b"")
        self.assertEqual(got["OUTPUT_BYTES"], blob)
        self.assertEqual(got["OUTPUT_FP16"], half)

    def test_keep_alive(self):
        conn = self.server.connect()
        body = json.dumps(simple_request(A, B)).encode()
        for _ in range(50):
            conn.request("POST", "/v2/models/simple/infer", body)
            resp = conn.getresponse()
            self.assertEqual(resp.status, 200)
            resp.read()
        conn.close()

    def test_ensemble(self):
        status, doc = self.server.json("POST", "/v2/models/simple_ensemble/infer",
                                       simple_request(A, B))
        self.assertEqual(status, 200, doc)
        out = {o["name"]: o["data"] for o in doc["outputs"]}
        self.assertEqual(out["OUTPUT0"], [2 * a for a in A])
        self.assertEqual(out["OUTPUT1"], [2 * b for b in B])

    # ---- errors ------------------------------------------------------------

    def assert_error(self, status, doc, want_status, fragment):
        self.assertEqual(status, want_status, doc)
        self.assertIn("error", doc)
        self.assertIn(fragment, doc["error"])

    def post_raw(self, path, body, headers=None):
        status, _, data = self.server.request("POST", path, body, headers or {})
        return status, json.loads(data)

    def test_unknown_model_and_version(self):
        # 400, as Triton answers a request for an unknown model
        status, doc = self.server.json("POST", "/v2/models/nope/infer", simple_request(A, B))
        self.assert_error(status, doc, 400, "nope")
        status, doc = self.server.json("GET", "/v2/models/nope")
        self.assert_error(status, doc, 400, "nope")
        status, doc = self.server.json("POST", "/v2/models/simple/versions/7/infer",
                                       simple_request(A, B))
        self.assert_error(status, doc, 400, "version 7")
        status, doc = self.server.json("GET", "/v2/models/simple/versions/abc")
        self.assertEqual(status, 400, doc)

    def test_malformed_json(self):
        status, doc = self.post_raw("/v2/models/simple/infer", b'{"inputs": [')
        self.assertEqual(status, 400, doc)
        self.assertIn("error", doc)

    def test_wrong_datatype(self):
        req = simple_request(A, B)
        req["inputs"][0]["datatype"] = "FP32"
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assert_error(status, doc, 400, "INPUT0")

    def test_wrong_shape(self):
        req = simple_request(A[:8], B[:8])
        req["inputs"][0]["shape"] = req["inputs"][1]["shape"] = [1, 8]
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assert_error(status, doc, 400, "shape")

    def test_data_count_mismatch(self):
        req = simple_request(A[:15], B)
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assertEqual(status, 400, doc)

    def test_missing_and_extra_inputs(self):
        req = simple_request(A, B)
        del req["inputs"][1]
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assert_error(status, doc, 400, "INPUT1")
        req = simple_request(A, B)
        req["inputs"].append({"name": "INPUT9", "shape": [1, 16], "datatype": "INT32", "data": A})
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assert_error(status, doc, 400, "INPUT9")

    def test_unknown_output(self):
        req = simple_request(A, B, outputs=[{"name": "OUTPUT7"}])
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assert_error(status, doc, 400, "OUTPUT7")

    def test_batch_too_large(self):
        req = {"inputs": [
            {"name": "INPUT0", "shape": [9, 16], "datatype": "INT32", "data": A * 9},
            {"name": "INPUT1", "shape": [9, 16], "datatype": "INT32", "data": B * 9}]}
        status, doc = self.server.json("POST", "/v2/models/simple/infer", req)
        self.assert_error(status, doc, 400, "batch")

    def test_binary_sizes_do_not_add_up(self):
        header = {"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}}]}
        # one byte short, then one byte too many
        for extra in (-1, 1):
            blob = struct.pack("<16i", *A) + struct.pack("<16i", *B)
            blob = blob[:extra] if extra < 0 else blob + b"\0"
            body, headers = binary_body(header, [blob])
            status, doc = self.post_raw("/v2/models/simple/infer", body, headers)
            self.assertEqual(status, 400, doc)
        # declared size disagrees with the shape
        header["inputs"][0]["parameters"]["binary_data_size"] = 60
        body, headers = binary_body(header, [b"\0" * 60, b"\0" * 64])
        status, doc = self.post_raw("/v2/models/simple/infer", body, headers)
        self.assertEqual(status, 400, doc)
        # header length larger than the body
        status, doc = self.post_raw("/v2/models/simple/infer", b"{}",
                                    {"Inference-Header-Content-Length": "100"})
        self.assertEqual(status, 400, doc)

    def test_bad_bytes_element_length(self):
        blob = struct.pack("<I", 100) + b"abc"
        header = {"inputs": [{"name": "INPUT_BYTES", "shape": [1, 1], "datatype": "BYTES",
                              "parameters": {"binary_data_size": len(blob)}}]}
        body, headers = binary_body(header, [blob])
        status, doc = self.post_raw("/v2/models/identity/infer", body, headers)
        self.assertEqual(status, 400, doc)

    def test_unknown_route_and_method(self):
        status, _, _ = self.server.request("GET", "/v2/nothing/here")
        self.assertEqual(status, 404)
        status, _, _ = self.server.request("GET", "/v2/models/simple/infer")
        self.assertIn(status, (400, 405))

    def test_server_survives_errors(self):
        for _ in range(20):
            self.post_raw("/v2/models/simple/infer", b"not json at all")
        status, doc = self.server.json("POST", "/v2/models/simple/infer", simple_request(A, B))
        self.assertEqual(status, 200, doc)


if __name__ == "__main__":
    main()
