"""Triton's system_shared_memory extension against the real harkd, over
HTTP and gRPC: register / status / unregister, and inferences whose inputs
and outputs live in POSIX shared memory.

Regions are made the way Triton's Python client makes them, without it
(tritonclient is not in Debian): a POSIX shm object is a file under
/dev/shm, created, sized and mapped with os and mmap. The gRPC stubs are
test_grpc's, generated from hark's proto/ files.
"""
import json
import mmap
import os
import struct
import threading
import time

import grpc

import harness
import test_grpc as tg

pb = tg.pb
pb_grpc = tg.pb_grpc


class Shm:
    """A POSIX shm object /dev/shm/<key>, mapped here."""
    counter = 0

    def __init__(self, size):
        Shm.counter += 1
        self.key = f"/hark_test_{os.getpid()}_{Shm.counter}"
        self.path = "/dev/shm" + self.key
        self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(self.fd, size)
        self.map = mmap.mmap(self.fd, size)
        self.size = size

    def write(self, offset, data):
        self.map[offset:offset + len(data)] = data

    def read(self, offset, n):
        return bytes(self.map[offset:offset + n])

    def ints(self, offset, n=16):
        return list(struct.unpack_from(f"<{n}i", self.map, offset))

    def truncate(self, size):
        """Shrinks the object (unmapping it here: reading past its end
        would be SIGBUS for this process too)."""
        if self.map is not None:
            self.map.close()
            self.map = None
        os.ftruncate(self.fd, size)

    def unlink(self):
        if os.path.exists(self.path):
            os.unlink(self.path)

    def close(self):
        if self.map is not None:
            self.map.close()
            self.map = None
        os.close(self.fd)
        self.unlink()


def i32(values):
    return struct.pack(f"<{len(values)}i", *values)


def bytes_tensor(items):
    return b"".join(struct.pack("<I", len(v)) + v for v in items)


A = list(range(16))
B = [3 * i - 7 for i in range(16)]
SUM = [a + b for a, b in zip(A, B)]
DIFF = [a - b for a, b in zip(A, B)]


def shm_params(region, size, offset=None):
    p = {"shared_memory_region": region, "shared_memory_byte_size": size}
    if offset is not None:
        p["shared_memory_offset"] = offset
    return p


class HttpShmTest(harness.ServerTest):
    ARGS = ("--allow-shared-memory=true",)

    def setUp(self):
        self.regions = []

    def tearDown(self):
        self.server.request("POST", "/v2/systemsharedmemory/unregister")
        for r in self.regions:
            r.close()

    def shm(self, size):
        r = Shm(size)
        self.regions.append(r)
        return r

    def register(self, name, key, offset, size, status=200):
        st, body = self.server.json("POST", f"/v2/systemsharedmemory/region/{name}/register",
                                    {"key": key, "offset": offset, "byte_size": size})
        self.assertEqual(st, status, body)
        return body

    def status(self, name=None):
        path = f"/v2/systemsharedmemory/region/{name}/status" if name else \
            "/v2/systemsharedmemory/status"
        return self.server.json("GET", path)

    def infer(self, doc, model="simple"):
        return self.server.json("POST", f"/v2/models/{model}/infer", doc)

    def assertError(self, result, text):
        status, body = result
        self.assertEqual(status, 400, body)
        self.assertIn(text, body["error"])
        return body["error"]


class TestHttpRegistry(HttpShmTest):
    def test_extension_advertised(self):
        _, doc = self.server.json("GET", "/v2")
        self.assertIn("system_shared_memory", doc["extensions"])
        self.assertNotIn("cuda_shared_memory", doc["extensions"])

    def test_register_status_unregister(self):
        a, b = self.shm(4096), self.shm(256)
        self.register("ra", a.key, 0, 4096)
        self.register("rb", b.key, 16, 128)
        status, doc = self.status()
        self.assertEqual(status, 200)
        self.assertEqual(doc, [
            {"name": "ra", "key": a.key, "offset": 0, "byte_size": 4096},
            {"name": "rb", "key": b.key, "offset": 16, "byte_size": 128}])
        status, doc = self.status("rb")
        self.assertEqual((status, [r["name"] for r in doc]), (200, ["rb"]))
        st, _ = self.server.json("POST", "/v2/systemsharedmemory/region/ra/unregister")
        self.assertEqual(st, 200)
        self.assertEqual([r["name"] for r in self.status()[1]], ["rb"])
        # unregistering is idempotent, as in Triton
        st, _ = self.server.json("POST", "/v2/systemsharedmemory/region/ra/unregister")
        self.assertEqual(st, 200)
        st, _ = self.server.json("POST", "/v2/systemsharedmemory/unregister")
        self.assertEqual(st, 200)
        self.assertEqual(self.status(), (200, []))

    def test_register_twice(self):
        a = self.shm(64)
        self.register("twice", a.key, 0, 64)
        body = self.register("twice", a.key, 0, 64, status=400)
        self.assertIn("'twice' already in manager", body["error"])

    def test_unknown_region_status(self):
        self.assertError(self.status("nope"), "Unable to find system shared memory region: 'nope'")

    def test_bad_registrations(self):
        a = self.shm(100)
        err = self.register("r", "/hark_test_no_such_object", 0, 8, status=400)["error"]
        self.assertIn("/hark_test_no_such_object", err)
        err = self.register("r", a.key, 96, 8, status=400)["error"]
        self.assertIn("beyond the end", err)
        err = self.register("r", a.key, 200, 1, status=400)["error"]
        self.assertIn("beyond the end", err)
        self.register("r", a.key, 0, 0, status=400)
        for doc in ({"offset": 0, "byte_size": 8}, {"key": a.key, "offset": 0},
                    {"key": a.key, "byte_size": -1}, {"key": 5, "byte_size": 8}):
            st, body = self.server.json("POST", "/v2/systemsharedmemory/region/r/register", doc)
            self.assertEqual(st, 400, (doc, body))
        st, _, body = self.server.request("POST", "/v2/systemsharedmemory/region/r/register",
                                          b"{")
        self.assertEqual(st, 400)
        self.assertEqual(self.status(), (200, []))

    def test_cuda_not_supported(self):
        st, body = self.server.json("GET", "/v2/cudasharedmemory/status")
        self.assertEqual(st, 400)
        self.assertIn("not supported", body["error"])
        st, body = self.server.json("POST", "/v2/cudasharedmemory/region/x/register",
                                    {"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 8})
        self.assertEqual(st, 400)


class TestHttpInfer(HttpShmTest):
    def simple_doc(self, region, in_off=(0, 64), out_off=(128, 192), outputs=True):
        doc = {"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": shm_params(region, 64, in_off[0])},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
             "parameters": shm_params(region, 64, in_off[1])}]}
        if outputs:
            doc["outputs"] = [
                {"name": "OUTPUT0", "parameters": shm_params(region, 64, out_off[0])},
                {"name": "OUTPUT1", "parameters": shm_params(region, 64, out_off[1])}]
        return doc

    def test_inputs_and_outputs_in_shm(self):
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        self.register("io", r.key, 0, 256)
        status, doc = self.infer(self.simple_doc("io"))
        self.assertEqual(status, 200, doc)
        self.assertEqual(r.ints(128), SUM)
        self.assertEqual(r.ints(192), DIFF)
        outs = {o["name"]: o for o in doc["outputs"]}
        self.assertEqual(set(outs), {"OUTPUT0", "OUTPUT1"})
        for name in outs:
            self.assertNotIn("data", outs[name])
            self.assertEqual(outs[name]["parameters"]["shared_memory_region"], "io")
            self.assertEqual(outs[name]["parameters"]["shared_memory_byte_size"], 64)
            self.assertEqual(outs[name]["shape"], [1, 16])
        # again, with new values in place: the region is read per request
        r.write(0, i32(B))
        status, doc = self.infer(self.simple_doc("io"))
        self.assertEqual(status, 200, doc)
        self.assertEqual(r.ints(128), [2 * b for b in B])

    def test_unaligned_region_offset(self):
        # A region starting mid-page (mmap needs a page-aligned offset) and
        # tensors at odd offsets within it (their data must be copied).
        r = self.shm(3 * 4096)
        base = 4096 + 100
        r.write(base + 1, i32(A))
        r.write(base + 70, i32(B))
        self.register("odd", r.key, base, 400)
        status, doc = self.infer(self.simple_doc("odd", (1, 70), (135, 201)))
        self.assertEqual(status, 200, doc)
        self.assertEqual(list(struct.unpack_from("<16i", r.map, base + 135)), SUM)
        self.assertEqual(list(struct.unpack_from("<16i", r.map, base + 201)), DIFF)

    def test_mixed_shm_and_body(self):
        r = self.shm(128)
        r.write(0, i32(A))
        self.register("mix", r.key, 0, 128)
        doc = {"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": shm_params("mix", 64)},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B}],
            "outputs": [{"name": "OUTPUT0", "parameters": shm_params("mix", 64, 64)},
                        {"name": "OUTPUT1"}]}
        status, body = self.infer(doc)
        self.assertEqual(status, 200, body)
        self.assertEqual(r.ints(64), SUM)
        outs = {o["name"]: o for o in body["outputs"]}
        self.assertEqual(outs["OUTPUT1"]["data"], DIFF)
        self.assertNotIn("data", outs["OUTPUT0"])
        # inputs in shm, outputs in the body (none requested: all, as JSON)
        doc = self.simple_doc("mix", (0, 0), outputs=False)
        status, body = self.infer(doc)
        self.assertEqual(status, 200, body)
        outs = {o["name"]: o["data"] for o in body["outputs"]}
        self.assertEqual(outs, {"OUTPUT0": [2 * a for a in A], "OUTPUT1": [0] * 16})

    def test_mixed_with_binary_body(self):
        r = self.shm(64)
        r.write(0, i32(A))
        self.register("bin", r.key, 0, 64)
        head = json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
             "parameters": shm_params("bin", 64)},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32",
             "parameters": {"binary_data_size": 64}}],
            "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}},
                        # shared memory wins over binary_data (Triton's
                        # client may send both)
                        {"name": "OUTPUT1",
                         "parameters": {"binary_data": True, **shm_params("bin", 64)}}]}
        ).encode()
        status, hdrs, body = self.server.request(
            "POST", "/v2/models/simple/infer", head + i32(B),
            {"Inference-Header-Content-Length": str(len(head))})
        self.assertEqual(status, 200, body)
        n = int(hdrs["Inference-Header-Content-Length"])
        self.assertEqual(list(struct.unpack("<16i", body[n:])), SUM)
        head = json.loads(body[:n])
        out1 = [o for o in head["outputs"] if o["name"] == "OUTPUT1"][0]
        self.assertEqual(out1["parameters"],
                         {"shared_memory_region": "bin", "shared_memory_byte_size": 64})
        self.assertEqual(r.ints(0), DIFF)  # written after INPUT0 was read

    def test_bytes_in_shm(self):
        items = [b"", b"hello", b"\x00\xffbinary"]
        data = bytes_tensor(items)
        r = self.shm(256)
        r.write(0, data)
        self.register("str", r.key, 0, 256)
        doc = {"inputs": [{"name": "INPUT_BYTES", "shape": [1, 3], "datatype": "BYTES",
                           "parameters": shm_params("str", len(data))}],
               "outputs": [{"name": "OUTPUT_BYTES",
                            "parameters": shm_params("str", 128, 128)}]}
        status, body = self.infer(doc, "identity")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["outputs"][0]["parameters"]["shared_memory_byte_size"], len(data))
        self.assertEqual(r.read(128, len(data)), data)
        # a size that does not cover the length-prefixed elements
        doc["inputs"][0]["parameters"] = shm_params("str", len(data) - 1)
        self.assertError(self.infer(doc, "identity"), "length-prefixed")

    def test_bad_inference_inputs(self):
        r = self.shm(256)
        self.register("bad", r.key, 0, 256)
        doc = self.simple_doc("bad")
        doc["inputs"][0]["parameters"]["shared_memory_region"] = "unknown"
        self.assertError(self.infer(doc), "Unable to find system shared memory region: 'unknown'")
        doc = self.simple_doc("bad", (224, 64))
        err = self.assertError(self.infer(doc), "beyond shared memory region 'bad'")
        self.assertIn("INPUT0", err)
        doc = self.simple_doc("bad", (1 << 40, 64))
        self.assertError(self.infer(doc), "beyond shared memory region 'bad'")
        doc = self.simple_doc("bad")
        doc["inputs"][1]["parameters"]["shared_memory_byte_size"] = 60
        self.assertError(self.infer(doc), "does not match 16 INT32 elements")
        doc = self.simple_doc("bad")
        del doc["inputs"][1]["parameters"]["shared_memory_byte_size"]
        self.assertError(self.infer(doc), "no shared_memory_byte_size")
        doc = self.simple_doc("bad")
        doc["inputs"][1]["data"] = B
        self.assertError(self.infer(doc), "as well as in shared memory")
        doc = self.simple_doc("bad")
        doc["inputs"][1]["parameters"] = {"shared_memory_offset": 0}
        self.assertError(self.infer(doc), "no shared_memory_region")
        doc = self.simple_doc("bad")
        doc["inputs"][1]["parameters"]["shared_memory_region"] = 7
        self.assertError(self.infer(doc), "must be a string")

    def test_bad_inference_outputs(self):
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        self.register("out", r.key, 0, 256)
        doc = self.simple_doc("out", out_off=(128, 250))
        self.assertError(self.infer(doc), "beyond shared memory region 'out'")
        doc = self.simple_doc("out")
        doc["outputs"][0]["parameters"]["shared_memory_byte_size"] = 32
        err = self.assertError(self.infer(doc), "does not fit in its shared_memory_byte_size 32")
        self.assertIn("OUTPUT0", err)
        doc = self.simple_doc("out")
        doc["outputs"][1]["parameters"]["shared_memory_region"] = "gone"
        self.assertError(self.infer(doc), "'gone'")
        # the server is still fine
        status, _ = self.infer(self.simple_doc("out"))
        self.assertEqual(status, 200)

    def test_truncated_region(self):
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        self.register("trunc", r.key, 0, 256)
        r.truncate(100)  # INPUT1 (64..128) now lies past the object's end
        err = self.assertError(self.infer(self.simple_doc("trunc")), "truncated")
        self.assertIn("INPUT1", err)
        r.truncate(0)
        self.assertError(self.infer(self.simple_doc("trunc")), "truncated")
        # the server lives on and other regions work
        self.assertEqual(self.server.request("GET", "/v2/health/live")[0], 200)
        ok = self.shm(256)
        ok.write(0, i32(A))
        ok.write(64, i32(B))
        self.register("fine", ok.key, 0, 256)
        status, _ = self.infer(self.simple_doc("fine"))
        self.assertEqual(status, 200)
        self.assertEqual(ok.ints(128), SUM)

    def test_truncated_output_region(self):
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        out = self.shm(128)
        self.register("in", r.key, 0, 256)
        self.register("outr", out.key, 0, 128)
        doc = self.simple_doc("in")
        doc["outputs"] = [{"name": "OUTPUT0", "parameters": shm_params("outr", 64, 64)}]
        out.truncate(64)
        self.assertError(self.infer(doc), "truncated")

    def test_unlinked_region(self):
        # Unlinking the object's name leaves the registered mapping valid
        # (as with Triton); a new registration of that key fails.
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        self.register("ghost", r.key, 0, 256)
        r.unlink()
        status, body = self.infer(self.simple_doc("ghost"))
        self.assertEqual(status, 200, body)
        self.assertEqual(r.ints(128), SUM)
        err = self.register("ghost2", r.key, 0, 256, status=400)["error"]
        self.assertIn(r.key, err)
        # unlinked and truncated: a clear error, no crash
        r.truncate(0)
        self.assertError(self.infer(self.simple_doc("ghost")), "truncated")
        self.assertEqual(self.server.request("GET", "/v2/health/live")[0], 200)

    def test_unregistered_between_requests(self):
        r = self.shm(256)
        self.register("brief", r.key, 0, 256)
        self.server.request("POST", "/v2/systemsharedmemory/region/brief/unregister")
        self.assertError(self.infer(self.simple_doc("brief")), "'brief'")


SLOW_REPO = {"slow": """
name: "slow"
backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] } ]
parameters { key: "execute_delay_us" value: { string_value: "1500000" } }
"""}


class TestUnregisterWhileInUse(HttpShmTest):
    """A region unregistered (and its name registered again elsewhere)
    while a request uses it stays mapped for that request."""
    REPO = SLOW_REPO

    def test_unregister_during_inference(self):
        r = self.shm(128)
        r.write(0, i32(A))
        other = self.shm(128)
        self.register("busy", r.key, 0, 128)
        doc = {"inputs": [{"name": "INPUT0", "shape": [16], "datatype": "INT32",
                           "parameters": shm_params("busy", 64)}],
               "outputs": [{"name": "OUTPUT0", "parameters": shm_params("busy", 64, 64)}]}
        result = {}
        t = threading.Thread(target=lambda: result.update(r=self.infer(doc, "slow")))
        t.start()
        time.sleep(0.5)  # the request holds the region from its arrival on
        st, _ = self.server.json("POST", "/v2/systemsharedmemory/region/busy/unregister")
        self.assertEqual(st, 200)
        self.assertTrue(t.is_alive(), "the request ended before the region was unregistered")
        self.register("busy", other.key, 0, 128)
        t.join(30)
        status, body = result["r"]
        self.assertEqual(status, 200, body)
        self.assertEqual(r.ints(64), A)           # the old region got the output
        self.assertEqual(other.ints(64), [0] * 16)  # not the new one


class TestRegionCap(HttpShmTest):
    """Issue 24: ~20,000 registrations used every descriptor harkd had (a
    registration holds one, and a mapping), and no new connection could be
    accepted. The registry now holds at most --shared-memory-max-regions."""
    ARGS = ("--allow-shared-memory=true", "--shared-memory-max-regions", "8")

    def test_registrations_are_capped(self):
        r = self.shm(4096)
        for i in range(8):
            self.register(f"cap{i}", r.key, 0, 4096)
        err = self.register("cap8", r.key, 0, 4096, status=400)["error"]
        self.assertIn("at most 8 (--shared-memory-max-regions)", err)
        self.assertEqual(len(self.status()[1]), 8)
        # a victim on new connections is served; one region freed makes room
        doc = {"inputs": [{"name": n, "shape": [1, 16], "datatype": "INT32", "data": A}
                          for n in ("INPUT0", "INPUT1")]}
        for _ in range(3):
            status, body = self.infer(doc)
            self.assertEqual(status, 200, body)
        st, _ = self.server.json("POST", "/v2/systemsharedmemory/region/cap3/unregister")
        self.assertEqual(st, 200)
        self.register("cap8", r.key, 0, 4096)


class TestTruncatedWhileRead(HttpShmTest):
    """Issue 24: truncating a registered object while harkd read it killed
    harkd with SIGBUS (the fstat check before the read only narrowed the
    race). Inputs are now copied out with pread and outputs in with
    pwrite: every infer gets its answer (200, or 400 naming the
    truncation) and harkd lives."""
    SIZE = 16 << 20

    def test_truncate_during_reads(self):
        src = self.shm(self.SIZE)
        src.write(0, b"\x05" * self.SIZE)
        src.map.close()  # this process must not touch it while it shrinks
        src.map = None
        dst = self.shm(self.SIZE)
        self.register("src", src.key, 0, self.SIZE)
        self.register("dst", dst.key, 0, self.SIZE)
        doc = {"inputs": [{"name": "INPUT_UINT8", "shape": [1, self.SIZE], "datatype": "UINT8",
                           "parameters": shm_params("src", self.SIZE)}],
               "outputs": [{"name": "OUTPUT_UINT8",
                            "parameters": shm_params("dst", self.SIZE)}]}
        stop = threading.Event()

        def shrink():
            while not stop.is_set():
                os.ftruncate(src.fd, 4096)
                os.ftruncate(src.fd, self.SIZE)

        t = threading.Thread(target=shrink)
        t.start()
        codes = []
        try:
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline and len(codes) < 300:
                status, body = self.infer(doc, "identity")
                codes.append(status)
                if status != 200:
                    self.assertEqual(status, 400, body)
                    self.assertIn("truncated", body["error"])
        finally:
            stop.set()
            t.join()
        self.assertIsNone(self.server.proc.poll(), "harkd died")
        self.assertTrue(codes)
        os.ftruncate(src.fd, 4096)  # and a truncation is told
        status, body = self.infer(doc, "identity")
        self.assertEqual(status, 400, body)
        self.assertIn("truncated", body["error"])
        self.assertEqual(self.server.request("GET", "/v2/health/live")[0], 200)


class TestDisabled(HttpShmTest):
    ARGS = ()  # off unless asked for: it lets a client read and write shm objects

    def test_off(self):
        status, _, body = self.server.request("GET", "/v2")
        self.assertNotIn("system_shared_memory", json.loads(body)["extensions"])
        r = self.shm(128)
        err = self.register("x", r.key, 0, 128, status=400)["error"]
        self.assertIn("--allow-shared-memory=true", err)
        self.assertError(self.status(), "--allow-shared-memory=true")
        doc = {"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
                           "parameters": shm_params("x", 64)},
                          {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": B}]}
        self.assertError(self.infer(doc), "--allow-shared-memory=true")


# ---- gRPC -----------------------------------------------------------------------


def grpc_shm_params(msg, region, size, offset=None):
    msg.parameters["shared_memory_region"].string_param = region
    msg.parameters["shared_memory_byte_size"].int64_param = size
    if offset is not None:
        msg.parameters["shared_memory_offset"].int64_param = offset


class GrpcShmTest(tg.GrpcTest):
    ARGS = ("--allow-shared-memory=true",)

    def setUp(self):
        self.regions = []

    def tearDown(self):
        self.stub.SystemSharedMemoryUnregister(pb.SystemSharedMemoryUnregisterRequest(),
                                               timeout=30)
        for r in self.regions:
            r.close()

    def shm(self, size):
        r = Shm(size)
        self.regions.append(r)
        return r

    def register(self, name, key, offset, size, timeout=30):
        return self.stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
            name=name, key=key, offset=offset, byte_size=size), timeout=timeout)

    def simple_request(self, region, inputs=True, outputs=True, in_off=(0, 64),
                       out_off=(128, 192)):
        req = pb.ModelInferRequest(model_name="simple")
        for i, name in enumerate(("INPUT0", "INPUT1")):
            t = req.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            if inputs:
                grpc_shm_params(t, region, 64, in_off[i])
            else:
                req.raw_input_contents.append(i32(A if i == 0 else B))
        for i, name in enumerate(("OUTPUT0", "OUTPUT1")):
            o = req.outputs.add(name=name)
            if outputs:
                grpc_shm_params(o, region, 64, out_off[i])
        return req


class TestGrpcShm(GrpcShmTest):
    def test_register_status_unregister(self):
        a, b = self.shm(4096), self.shm(128)
        self.register("ga", a.key, 0, 4096)
        self.register("gb", b.key, 64, 64)
        st = self.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=30)
        self.assertEqual(set(st.regions), {"ga", "gb"})
        self.assertEqual((st.regions["gb"].name, st.regions["gb"].key, st.regions["gb"].offset,
                          st.regions["gb"].byte_size), ("gb", b.key, 64, 64))
        one = self.stub.SystemSharedMemoryStatus(
            pb.SystemSharedMemoryStatusRequest(name="ga"), timeout=30)
        self.assertEqual(list(one.regions), ["ga"])
        self.stub.SystemSharedMemoryUnregister(
            pb.SystemSharedMemoryUnregisterRequest(name="ga"), timeout=30)
        st = self.stub.SystemSharedMemoryStatus(pb.SystemSharedMemoryStatusRequest(), timeout=30)
        self.assertEqual(list(st.regions), ["gb"])

    def test_errors(self):
        a = self.shm(128)
        self.register("dup", a.key, 0, 128)
        details = self.assertCode(grpc.StatusCode.ALREADY_EXISTS, self.register, "dup", a.key, 0,
                                  128)
        self.assertIn("already in manager", details)
        details = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT,
                                  self.stub.SystemSharedMemoryStatus,
                                  pb.SystemSharedMemoryStatusRequest(name="nope"))
        self.assertIn("'nope'", details)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.register, "far", a.key, 100, 64)
        self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.register, "nokey",
                        "/hark_test_no_such_object", 0, 8)
        self.assertCode(grpc.StatusCode.UNIMPLEMENTED, self.stub.CudaSharedMemoryStatus,
                        pb.CudaSharedMemoryStatusRequest())
        self.assertCode(grpc.StatusCode.UNIMPLEMENTED, self.stub.CudaSharedMemoryRegister,
                        pb.CudaSharedMemoryRegisterRequest(name="c", byte_size=8))

    def test_infer_in_shm(self):
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        self.register("gio", r.key, 0, 256)
        resp = self.stub.ModelInfer(self.simple_request("gio"), timeout=30)
        self.assertEqual(r.ints(128), SUM)
        self.assertEqual(r.ints(192), DIFF)
        self.assertEqual([o.name for o in resp.outputs], ["OUTPUT0", "OUTPUT1"])
        for o in resp.outputs:
            self.assertEqual(o.parameters["shared_memory_region"].string_param, "gio")
            self.assertEqual(o.parameters["shared_memory_byte_size"].uint64_param, 64)
        self.assertTrue(all(len(raw) == 0 for raw in resp.raw_output_contents))

    def test_infer_mixed(self):
        r = self.shm(256)
        r.write(64, i32(B))
        self.register("gmix", r.key, 0, 256)
        # INPUT0 raw, INPUT1 in shm: raw_input_contents holds INPUT0 only
        req = pb.ModelInferRequest(model_name="simple")
        req.inputs.add(name="INPUT0", datatype="INT32", shape=[1, 16])
        grpc_shm_params(req.inputs.add(name="INPUT1", datatype="INT32", shape=[1, 16]),
                        "gmix", 64, 64)
        req.raw_input_contents.append(i32(A))
        grpc_shm_params(req.outputs.add(name="OUTPUT0"), "gmix", 64, 128)
        req.outputs.add(name="OUTPUT1")
        resp = self.stub.ModelInfer(req, timeout=30)
        self.assertEqual(r.ints(128), SUM)
        raw = dict(zip([o.name for o in resp.outputs], resp.raw_output_contents))
        self.assertEqual(list(struct.unpack("<16i", raw["OUTPUT1"])), DIFF)
        self.assertEqual(raw["OUTPUT0"], b"")
        # outputs in shm, inputs raw
        resp = self.stub.ModelInfer(self.simple_request("gmix", inputs=False), timeout=30)
        self.assertEqual(r.ints(192), DIFF)
        # too many raw entries for the inputs not in shm
        req.raw_input_contents.append(i32(B))
        details = self.assertCode(grpc.StatusCode.INVALID_ARGUMENT, self.stub.ModelInfer, req)
        self.assertIn("not in shared memory", details)

    def test_infer_errors(self):
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        self.register("gbad", r.key, 0, 256)
        codes = grpc.StatusCode
        details = self.assertCode(codes.INVALID_ARGUMENT, self.stub.ModelInfer,
                                  self.simple_request("unknown"))
        self.assertIn("'unknown'", details)
        details = self.assertCode(codes.INVALID_ARGUMENT, self.stub.ModelInfer,
                                  self.simple_request("gbad", in_off=(0, 224)))
        self.assertIn("beyond shared memory region 'gbad'", details)
        details = self.assertCode(codes.INVALID_ARGUMENT, self.stub.ModelInfer,
                                  self.simple_request("gbad", out_off=(128, 240)))
        self.assertIn("OUTPUT1", details)
        req = self.simple_request("gbad")
        req.outputs[0].parameters["shared_memory_byte_size"].int64_param = 8
        details = self.assertCode(codes.INVALID_ARGUMENT, self.stub.ModelInfer, req)
        self.assertIn("does not fit", details)
        req = self.simple_request("gbad")
        req.inputs[0].parameters["shared_memory_byte_size"].int64_param = 68
        details = self.assertCode(codes.INVALID_ARGUMENT, self.stub.ModelInfer, req)
        self.assertIn("does not match", details)
        req = self.simple_request("gbad")
        del req.inputs[0].parameters["shared_memory_byte_size"]
        self.assertCode(codes.INVALID_ARGUMENT, self.stub.ModelInfer, req)
        # truncated after registration: an error, and the server lives on
        r.truncate(64)
        details = self.assertCode(codes.INVALID_ARGUMENT, self.stub.ModelInfer,
                                  self.simple_request("gbad"))
        self.assertIn("truncated", details)
        self.assertTrue(self.stub.ServerLive(pb.ServerLiveRequest(), timeout=30).live)

    def test_stream_infer_in_shm(self):
        r = self.shm(256)
        r.write(0, i32(A))
        r.write(64, i32(B))
        self.register("gs", r.key, 0, 256)
        good = self.simple_request("gs")
        good.id = "good"
        bad = self.simple_request("gs", out_off=(128, 250))
        bad.id = "bad"
        replies = list(self.stub.ModelStreamInfer(iter([good, bad]), timeout=30))
        self.assertEqual(len(replies), 2)
        self.assertEqual(replies[0].error_message, "")
        self.assertEqual(replies[0].infer_response.id, "good")
        self.assertIn("beyond shared memory region", replies[1].error_message)
        self.assertEqual(replies[1].infer_response.id, "bad")
        self.assertEqual(r.ints(128), SUM)


class TestGrpcDisabled(GrpcShmTest):
    ARGS = ()

    def tearDown(self):
        for r in self.regions:
            r.close()

    def test_off(self):
        status, _, body = self.server.request("GET", "/v2")
        self.assertNotIn("system_shared_memory", json.loads(body)["extensions"])
        r = self.shm(128)
        details = self.assertCode(grpc.StatusCode.UNIMPLEMENTED, self.register, "x", r.key, 0,
                                  128)
        self.assertIn("--allow-shared-memory=true", details)
        details = self.assertCode(grpc.StatusCode.UNIMPLEMENTED, self.stub.ModelInfer,
                                  self.simple_request("x"))
        self.assertIn("--allow-shared-memory=true", details)


if __name__ == "__main__":
    harness.main()
