"""TorchScript models through the pytorch backend of the real harkd.

The models are built here, at test time, with Debian's python3-torch
(torch.jit.script of small modules) and served from a temporary
repository: an adder bound by Triton's NAME__<index> convention, one bound
by forward's argument names, every data type the backend takes, a module
that raises, a batched model hit by many concurrent requests (batches of
more than one must form, and every request must get its own rows back), a
stateful accumulator with implicit state over 64 interleaved sequences, a
sequence model without batching that takes START, CORRID and its state by
argument name, and models that must fail to load (not an archive, no file,
inputs that do not match forward) or fail at execution (a result of the
wrong type, shapes the module rejects) while harkd keeps serving.

The backend is built wherever libtorch is installed, and scripts/setup.sh
installs it: a missing libhark_pytorch.so is a failure, never a skip.
"""
import json
import os
import shutil
import struct
import tempfile
import threading
import time
import unittest

import torch

from harness import BIN_DIR, Harkd, main, metric_value

BACKEND = os.path.join(os.path.dirname(BIN_DIR), "backends", "libhark_pytorch.so")


# ---- the modules -------------------------------------------------------------------------


class Adder(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


class Named(torch.nn.Module):
    def forward(self, y: torch.Tensor, x: torch.Tensor):
        return x + y, x * y


class Types(torch.nn.Module):
    def forward(self, b, u8, i8, i16, i32, i64, f16, f32, f64):
        return (torch.logical_not(b), u8 + 1, i8 - 1, i16 * 2, i32 + 7, i64 * 3, f16 * 2,
                f32 / 2, f64 + 0.5)


class Raiser(torch.nn.Module):
    def forward(self, x):
        if bool((x < 0).any()):
            raise ValueError("negative input is not allowed")
        return x * 2


class Affine(torch.nn.Module):
    """2x + 1 per row, and the size of the batch forward saw."""

    def forward(self, x):
        n = x.shape[0]
        return x * 2.0 + 1.0, torch.full([n, 1], n, dtype=torch.int64)


class Accumulator(torch.nn.Module):
    """A running sum per sequence, the sum kept as implicit state."""

    def forward(self, x, state):
        s = state + x
        return s, torch.full([x.shape[0], 1], x.shape[0], dtype=torch.int64), s


class RowSum(torch.nn.Module):
    """Each row's sum, and the rows forward saw: rows of other lengths
    cannot share a forward call."""

    def forward(self, x):
        return x.sum(dim=1, keepdim=True), torch.full([x.shape[0], 1], x.shape[1],
                                                       dtype=torch.int64)


class TakesInt(torch.nn.Module):
    def forward(self, x, n: int):
        return x * n


class Counter(torch.nn.Module):
    """Bound by argument names: the sequence's START and CORRID controls
    and its implicit state come in beside the input."""

    def forward(self, x, start, corrid, acc):
        t = acc + x
        return t, start, corrid, t


class SlowRowSum(torch.nn.Module):
    """Each row's sum, after a fixed amount of work: one forward call takes
    milliseconds whatever its rows, so a later call's wait is measurable."""

    def forward(self, x):
        y = torch.ones(64, 128)
        w = torch.full([128, 128], 1.0 / 128)
        for _ in range(300):
            y = torch.tanh(y @ w)
        return x.sum(dim=1, keepdim=True) + y[:1, :1] * 0.0


class FloatOut(torch.nn.Module):
    def forward(self, x):
        return x.float()


# ---- the repository ----------------------------------------------------------------------

FP32_VEC = 'data_type: TYPE_FP32 dims: [ -1 ]'

CONFIGS = {
    "adder": f"""
platform: "pytorch_libtorch"
input [ {{ name: "INPUT__0" {FP32_VEC} }}, {{ name: "INPUT__1" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }}, {{ name: "OUTPUT__1" {FP32_VEC} }} ]
""",
    "named": """
backend: "pytorch"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_INT64 dims: [ 3 ] },
        { name: "y" data_type: TYPE_INT64 dims: [ 3 ] } ]
output [ { name: "sum" data_type: TYPE_INT64 dims: [ 3 ] },
         { name: "product" data_type: TYPE_INT64 dims: [ 3 ] } ]
""",
    "types": "backend: \"pytorch\"\n" + "\n".join(
        f'input {{ name: "IN{n}__{i}" data_type: {t} dims: [ 3 ] }}\n'
        f'output {{ name: "OUT{n}__{i}" data_type: {t} dims: [ 3 ] }}'
        for i, (n, t) in enumerate([("B", "TYPE_BOOL"), ("U8", "TYPE_UINT8"), ("I8", "TYPE_INT8"),
                                    ("I16", "TYPE_INT16"), ("I32", "TYPE_INT32"),
                                    ("I64", "TYPE_INT64"), ("F16", "TYPE_FP16"),
                                    ("F32", "TYPE_FP32"), ("F64", "TYPE_FP64")])),
    "raiser": f"""
backend: "pytorch"
input [ {{ name: "INPUT__0" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }} ]
""",
    "affine": """
backend: "pytorch"
max_batch_size: 32
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "BATCH__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { count: 2 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }
""",
    "accumulator": """
backend: "pytorch"
max_batch_size: 64
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] },
         { name: "BATCH__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 10000000
  oldest { max_candidate_sequences: 64 preferred_batch_size: [ 16 ]
           max_queue_delay_microseconds: 20000 }
  state [ { input_name: "STATE__1" output_name: "STATE_OUT__2" data_type: TYPE_FP32
            dims: [ 2 ]
            initial_state { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true name: "z" } } ]
}
""",
    "rowsum": """
backend: "pytorch"
max_batch_size: 16
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "SUM__0" data_type: TYPE_INT64 dims: [ 1 ] },
         { name: "LENGTH__1" data_type: TYPE_INT64 dims: [ 1 ] } ]
instance_group [ { count: 3 kind: KIND_CPU } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
""",
    "int_argument": f"""
backend: "pytorch"
input [ {{ name: "INPUT__0" {FP32_VEC} }}, {{ name: "N__1" data_type: TYPE_INT64 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }} ]
""",
    "extra_output": f"""
backend: "pytorch"
input [ {{ name: "INPUT__0" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }}, {{ name: "OUTPUT__1" {FP32_VEC} }} ]
""",
    "bad_threads": f"""
backend: "pytorch"
input [ {{ name: "INPUT__0" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }} ]
parameters {{ key: "INTRA_OP_THREAD_COUNT" value: {{ string_value: "many" }} }}
""",
    "no_uint32": """
backend: "pytorch"
input [ { name: "INPUT__0" data_type: TYPE_UINT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_UINT32 dims: [ 1 ] } ]
""",
    "counter": """
backend: "pytorch"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "total" data_type: TYPE_FP32 dims: [ 1 ] },
         { name: "started" data_type: TYPE_INT32 dims: [ 1 ] },
         { name: "corr" data_type: TYPE_INT64 dims: [ 1 ] } ]
sequence_batching {
  direct { }
  control_input [
    { name: "start" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "corrid" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_INT64 } ] } ]
  state [ { input_name: "acc" output_name: "acc_out" data_type: TYPE_FP32 dims: [ 1 ]
            initial_state { data_type: TYPE_FP32 dims: [ 1 ] zero_data: true name: "z" } } ]
}
""",
    "wrong_type": """
backend: "pytorch"
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 2 ] } ]
""",
    "not_archive": f"""
backend: "pytorch"
input [ {{ name: "INPUT__0" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }} ]
""",
    "no_file": f"""
backend: "pytorch"
input [ {{ name: "INPUT__0" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }} ]
""",
    "unmatched": f"""
backend: "pytorch"
input [ {{ name: "a" {FP32_VEC} }}, {{ name: "c" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }} ]
""",
    "custom_file": f"""
backend: "pytorch"
default_model_filename: "adder.torchscript"
input [ {{ name: "INPUT__0" {FP32_VEC} }}, {{ name: "INPUT__1" {FP32_VEC} }} ]
output [ {{ name: "OUTPUT__0" {FP32_VEC} }}, {{ name: "OUTPUT__1" {FP32_VEC} }} ]
""",
}

# affine and the accumulator with each forward call's rows padded to a
# multiple of 8, and two models whose padding parameter is refused.
PAD8 = 'parameters { key: "BATCH_PAD_MULTIPLE" value: { string_value: "8" } }\n'
CONFIGS["affine_padded"] = CONFIGS["affine"].replace("max_batch_size: 32",
                                                     "max_batch_size: 128") + PAD8
CONFIGS["accumulator_padded"] = CONFIGS["accumulator"] + PAD8
CONFIGS["bad_pad"] = CONFIGS["affine"] + PAD8.replace('"8"', '"64"')
CONFIGS["pad_unbatched"] = CONFIGS["raiser"] + PAD8

# The accumulator on two instances with a queue delay of 5 s; the second
# also lists a preferred batch size.
CONFIGS["accumulator2"] = CONFIGS["accumulator"].replace(
    "sequence_batching {", 'instance_group [ { count: 2 kind: KIND_CPU } ]\nsequence_batching {').replace(
    "preferred_batch_size: [ 16 ]\n           max_queue_delay_microseconds: 20000",
    "max_queue_delay_microseconds: 5000000")
# One instance of the accumulator with a 5 s delay, padded: a round of 21
# idle sequences goes as one forward call of 22 rows.
CONFIGS["accumulator_round_padded"] = CONFIGS["accumulator"].replace(
    "preferred_batch_size: [ 16 ]\n           max_queue_delay_microseconds: 20000",
    "max_queue_delay_microseconds: 5000000") + PAD8
CONFIGS["accumulator2_pref"] = CONFIGS["accumulator2"].replace(
    "max_queue_delay_microseconds: 5000000", "preferred_batch_size: [ 32 ] max_queue_delay_microseconds: 5000000")

# Rows of two lengths in one execution: two forward calls, one after the
# other (preferred size 2: the execution starts once both are queued).
CONFIGS["slow_groups"] = """
backend: "pytorch"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "SUM__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 10000000 }
"""

MODULES = {"adder": Adder, "named": Named, "types": Types, "raiser": Raiser, "affine": Affine,
           "accumulator": Accumulator, "accumulator2": Accumulator,
           "accumulator2_pref": Accumulator, "wrong_type": FloatOut, "unmatched": Adder,
           "rowsum": RowSum, "counter": Counter, "int_argument": TakesInt, "extra_output": Raiser,
           "bad_threads": Raiser, "no_uint32": Raiser, "affine_padded": Affine,
           "accumulator_padded": Accumulator, "accumulator_round_padded": Accumulator,
           "bad_pad": Affine, "pad_unbatched": Raiser, "slow_groups": SlowRowSum}


def build_repo():
    root = tempfile.mkdtemp(prefix="hark-torch-")
    for name, config in CONFIGS.items():
        os.makedirs(os.path.join(root, name, "1"))
        with open(os.path.join(root, name, "config.pbtxt"), "w") as f:
            f.write(config)
        if name in MODULES:
            torch.jit.script(MODULES[name]()).save(os.path.join(root, name, "1", "model.pt"))
    torch.jit.script(Adder()).save(os.path.join(root, "custom_file", "1", "adder.torchscript"))
    with open(os.path.join(root, "not_archive", "1", "model.pt"), "wb") as f:
        f.write(b"this is not a zip archive of TorchScript\n" * 10)
    return root


def infer_body(inputs, **extra):
    doc = {"inputs": [{"name": n, "shape": list(s), "datatype": t, "data": d}
                      for n, s, t, d in inputs]}
    doc.update(extra)
    return doc


class PyTorchBackend(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.path.exists(BACKEND):
            raise AssertionError(
                f"{BACKEND} is missing: the pytorch backend is built whenever libtorch is found, "
                "and scripts/setup.sh installs libtorch-dev; did CMake find Torch?")
        cls.repo = build_repo()
        cls.server = Harkd(cls.repo, ["--strict-readiness", "false"])

    @classmethod
    def tearDownClass(cls):
        try:
            cls.server.stop()
        finally:
            shutil.rmtree(cls.repo, ignore_errors=True)

    def infer(self, model, doc):
        return self.server.json("POST", f"/v2/models/{model}/infer", doc)

    def outputs(self, model, doc):
        status, res = self.infer(model, doc)
        self.assertEqual(status, 200, res)
        return {o["name"]: o for o in res["outputs"]}

    def index(self):
        status, doc = self.server.json("POST", "/v2/repository/index")
        self.assertEqual(status, 200, doc)
        return {e["name"]: e for e in doc}

    # ---- serving ----

    def test_adder_by_index_convention(self):
        a, b = [1.5, 2.0, -3.25, 8.0, 0.5], [0.5, 4.0, 1.25, -2.0, 10.0]
        out = self.outputs("adder", infer_body([("INPUT__0", [5], "FP32", a),
                                                ("INPUT__1", [5], "FP32", b)]))
        self.assertEqual(out["OUTPUT__0"]["data"], [x + y for x, y in zip(a, b)])
        self.assertEqual(out["OUTPUT__1"]["data"], [x - y for x, y in zip(a, b)])
        self.assertEqual(out["OUTPUT__0"]["shape"], [5])
        self.assertEqual(out["OUTPUT__0"]["datatype"], "FP32")
        # A requested output alone.
        status, res = self.infer("adder", infer_body(
            [("INPUT__0", [2], "FP32", [1, 2]), ("INPUT__1", [2], "FP32", [3, 4])],
            outputs=[{"name": "OUTPUT__1"}]))
        self.assertEqual(status, 200, res)
        self.assertEqual([(o["name"], o["data"]) for o in res["outputs"]],
                         [("OUTPUT__1", [-2, -2])])

    def test_platform_resolves_to_backend(self):
        status, cfg = self.server.json("GET", "/v2/models/adder/config")
        self.assertEqual(status, 200, cfg)
        self.assertEqual(cfg["platform"], "pytorch_libtorch")
        self.assertEqual(cfg["backend"], "pytorch")

    def test_default_model_filename(self):
        out = self.outputs("custom_file", infer_body([("INPUT__0", [1], "FP32", [2]),
                                                      ("INPUT__1", [1], "FP32", [5])]))
        self.assertEqual(out["OUTPUT__0"]["data"], [7])

    def test_bound_by_argument_names(self):
        # forward(self, y, x): names, not config order, decide; outputs in config order.
        x = [[1, 2, 3], [4, 5, 6]]
        y = [[10, 20, 30], [-1, -2, -3]]
        out = self.outputs("named", infer_body([("x", [2, 3], "INT64", x),
                                                ("y", [2, 3], "INT64", y)]))
        flat = lambda rows: [v for r in rows for v in r]
        self.assertEqual(out["sum"]["data"], [a + b for a, b in zip(flat(x), flat(y))])
        self.assertEqual(out["product"]["data"], [a * b for a, b in zip(flat(x), flat(y))])
        self.assertEqual(out["sum"]["shape"], [2, 3])

    def test_every_data_type(self):
        # Binary tensors: FP16 has no JSON form on the way in.
        spec = [("B", "BOOL", "?", [True, False, True]), ("U8", "UINT8", "B", [0, 7, 254]),
                ("I8", "INT8", "b", [-128 + 1, 0, 127]), ("I16", "INT16", "h", [-300, 0, 300]),
                ("I32", "INT32", "i", [-70000, 1, 70000]),
                ("I64", "INT64", "q", [-(1 << 40), 2, 1 << 40]),
                ("F16", "FP16", "e", [0.5, -1.25, 3.0]), ("F32", "FP32", "f", [1.0, -3.0, 0.25]),
                ("F64", "FP64", "d", [1e100, -2.5, 0.125])]
        header = {"inputs": [], "outputs": []}
        blobs = []
        for i, (n, t, fmt, vals) in enumerate(spec):
            blob = struct.pack(f"<3{fmt}", *vals)
            header["inputs"].append({"name": f"IN{n}__{i}", "shape": [3], "datatype": t,
                                     "parameters": {"binary_data_size": len(blob)}})
            header["outputs"].append({"name": f"OUT{n}__{i}"})
            blobs.append(blob)
        head = json.dumps(header).encode()
        status, _, body = self.server.request(
            "POST", "/v2/models/types/infer", head + b"".join(blobs),
            {"Inference-Header-Content-Length": str(len(head)),
             "Content-Type": "application/octet-stream"})
        self.assertEqual(status, 200, body)
        out = {o["name"]: o for o in json.loads(body)["outputs"]}
        want = {"B": [False, True, False], "U8": [1, 8, 255], "I8": [-128, -1, 126],
                "I16": [-600, 0, 600], "I32": [-69993, 8, 70007],
                "I64": [-3 * (1 << 40), 6, 3 * (1 << 40)], "F16": [1.0, -2.5, 6.0],
                "F32": [0.5, -1.5, 0.125], "F64": [1e100 + 0.5, -2.0, 0.625]}
        for i, (n, t, _, _) in enumerate(spec):
            o = out[f"OUT{n}__{i}"]
            self.assertEqual(o["datatype"], t, n)
            self.assertEqual(o["shape"], [3], n)
            self.assertEqual(o["data"], want[n], n)

    def test_batched_concurrent_requests_form_batches(self):
        n = 96
        results = [None] * n

        def one(i):
            row = [float(i), float(-i), i / 4.0, 1.0]
            results[i] = (row, self.infer("affine", infer_body([("INPUT__0", [1, 4], "FP32",
                                                                  [row])])))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        sizes = []
        for row, (status, res) in results:
            self.assertEqual(status, 200, res)
            out = {o["name"]: o for o in res["outputs"]}
            # Each request gets back its own row, computed in a batch.
            self.assertEqual(out["OUTPUT__0"]["data"], [2 * v + 1 for v in row])
            self.assertEqual(out["OUTPUT__0"]["shape"], [1, 4])
            sizes.append(out["BATCH__1"]["data"][0])
        self.assertGreater(max(sizes), 1, f"no batch of more than one formed: {sizes}")
        metrics = self.server.metrics()
        execs = metric_value(metrics, "nv_inference_exec_count", model="affine")
        count = metric_value(metrics, "nv_inference_count", model="affine")
        self.assertGreaterEqual(count, n)
        self.assertLess(execs, count)

    def test_request_with_its_own_batch(self):
        rows = [[1, 2, 3, 4], [5, 6, 7, 8], [-1, -2, -3, -4]]
        out = self.outputs("affine", infer_body([("INPUT__0", [3, 4], "FP32", rows)]))
        self.assertEqual(out["OUTPUT__0"]["data"], [2 * v + 1 for r in rows for v in r])
        self.assertEqual(out["OUTPUT__0"]["shape"], [3, 4])
        self.assertEqual(out["BATCH__1"]["shape"], [3, 1])

    def test_batches_of_rows_of_different_lengths(self):
        # -1 dims: requests whose rows differ in length cannot be stacked;
        # each still gets its own answer from the same execution.
        n = 48
        results = [None] * n

        def one(i):
            row = list(range(i % 5 + 1))
            results[i] = (row, self.infer("rowsum", infer_body([("INPUT__0", [1, len(row)],
                                                                 "INT32", [row])])))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for row, (status, res) in results:
            self.assertEqual(status, 200, res)
            out = {o["name"]: o for o in res["outputs"]}
            self.assertEqual(out["SUM__0"]["data"], [sum(row)])
            self.assertEqual(out["LENGTH__1"]["data"], [len(row)])

    def test_later_group_waits_as_queue_not_compute_input(self):
        # Two requests in one execution whose rows cannot be stacked: the
        # second forward call starts after the first. Its wait is queue
        # time; compute_input is only the stacking of each call's inputs.
        names = ("exec_count", "count", "queue_duration_us", "compute_input_duration_us",
                 "compute_infer_duration_us")

        def stats():
            text = self.server.metrics()
            return {k: metric_value(text, f"nv_inference_{k}", model="slow_groups") or 0
                    for k in names}

        def pair(*rows):
            results = [None] * 2

            def one(i):
                results[i] = self.infer("slow_groups", infer_body([
                    ("INPUT__0", [1, len(rows[i])], "FP32", [rows[i]])]))

            threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertEqual([r[0] for r in results], [200, 200], results)
            return sorted(r[1]["outputs"][0]["data"][0] for r in results)

        pair([1.0], [2.0])  # warm up: one execution, one forward call
        before = stats()
        self.assertEqual(pair([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0, 5.0]), [6.0, 15.0])
        after = stats()
        d = {k: after[k] - before[k] for k in names}
        self.assertEqual((d["exec_count"], d["count"]), (1, 2), d)
        # Each request's compute_infer is one forward call (~equal); the
        # second request waited through the first call: were that counted
        # as its compute_input, compute_input would be ~half of infer.
        self.assertLess(d["compute_input_duration_us"], 0.25 * d["compute_infer_duration_us"], d)
        self.assertGreater(d["queue_duration_us"], 0.25 * d["compute_infer_duration_us"], d)

    def test_default_threads_never_oversubscribe(self):
        cores = len(os.sched_getaffinity(0))
        log = self.server.output()
        # rowsum: 3 instances, no parameter; affine: INTRA_OP_THREAD_COUNT 1.
        self.assertIn(f"pytorch: model 'rowsum' version 1 from {self.repo}/rowsum/1/model.pt: "
                      f"1 input(s), 2 output(s), intra-op threads {max(1, cores // 3)} per "
                      "instance", log)
        self.assertIn("model 'affine' version 1 from", log)
        self.assertIn("intra-op threads 1 per instance", log)

    def test_padded_rows_are_zeros_and_their_results_dropped(self):
        # BATCH_PAD_MULTIPLE 8: a call of 64 rows or more is padded to a
        # multiple of 8; below that the step halves while it is more than
        # an eighth of the rows (4 from 32, 2 from 16), and 15 rows or fewer
        # go as they are. Each request gets its own rows back.
        for n, seen in ((3, 3), (15, 15), (21, 22), (35, 36), (65, 72), (128, 128)):
            rows = [[float(i), -1.0, 0.5, float(n)] for i in range(n)]
            out = self.outputs("affine_padded", infer_body([("INPUT__0", [n, 4], "FP32", rows)]))
            self.assertEqual(out["OUTPUT__0"]["data"], [2 * v + 1 for r in rows for v in r], n)
            self.assertEqual(out["OUTPUT__0"]["shape"], [n, 4])
            self.assertEqual(out["BATCH__1"]["data"], [seen] * n, n)
            self.assertEqual(out["BATCH__1"]["shape"], [n, 1])
        self.assertIn("model 'affine_padded' version 1 from", self.server.output())
        self.assertIn("rows padded to a multiple of 8", self.server.output())

    def test_implicit_state_across_interleaved_sequences(self):
        self.interleaved_sequences("accumulator", 1000)

    def test_implicit_state_with_padded_batches(self):
        # The padded rows' state is zeros in and dropped out: every
        # sequence's running sum stays its own.
        self.interleaved_sequences("accumulator_padded", 3000)
        # A round of 21 sequences is one call of 22 rows (one zero row), and
        # each sequence's sum carries over from its first round to its second.
        sizes, _ = self.idle_round("accumulator_round_padded", 7000, n=21)
        self.assertEqual(sizes, [22] * 21)

    def interleaved_sequences(self, model, base):
        """64 sequences of 5 steps at once: each running sum must be its
        own; returns the forward-call sizes seen."""
        n, steps = 64, 5
        failures = []
        batch_sizes = []
        lock = threading.Lock()

        def sequence(k):
            total = [0.0, 0.0]
            for step in range(steps):
                x = [float(k), float(step + 1)]
                total = [total[0] + x[0], total[1] + x[1]]
                params = {"sequence_id": base + k}
                if step == 0:
                    params["sequence_start"] = True
                if step == steps - 1:
                    params["sequence_end"] = True
                status, res = self.infer(model, infer_body(
                    [("INPUT__0", [1, 2], "FP32", [x])], parameters=params))
                with lock:
                    if status != 200:
                        failures.append((k, step, status, res))
                        return
                    out = {o["name"]: o for o in res["outputs"]}
                    if set(out) != {"OUTPUT__0", "BATCH__1"}:
                        failures.append((k, step, "outputs", sorted(out)))
                    if out["OUTPUT__0"]["data"] != total:
                        failures.append((k, step, out["OUTPUT__0"]["data"], total))
                    batch_sizes.append(out["BATCH__1"]["data"][0])

        threads = [threading.Thread(target=sequence, args=(k,)) for k in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(failures, [])
        self.assertEqual(len(batch_sizes), n * steps)
        self.assertGreater(max(batch_sizes), 1,
                           "the sequences' states never shared a forward call")
        # A restarted sequence starts again from the initial (zero) state.
        status, res = self.infer(model, infer_body(
            [("INPUT__0", [1, 2], "FP32", [[3, 4]])],
            parameters={"sequence_id": base, "sequence_start": True, "sequence_end": True}))
        self.assertEqual(status, 200, res)
        self.assertEqual(res["outputs"][0]["data"], [3, 4])
        return batch_sizes

    def idle_round(self, model, base, n=32):
        """n live sequences (32 by default), all idle, each send their next request: the
        forward-call sizes that answer them, and how long the round took.
        (Their first round may wait out the 5 s delay: a sequence answered
        early is idle, and could send again, while the others arrive.)"""

        def round_of(step, params):
            results = [None] * n

            def one(k):
                p = dict(params, sequence_id=base + k)
                results[k] = self.infer(model, infer_body(
                    [("INPUT__0", [1, 2], "FP32", [[float(k), float(step)]])], parameters=p))
            threads = [threading.Thread(target=one, args=(k,)) for k in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(20)
            self.assertTrue(all(r and r[0] == 200 for r in results), results)
            return [{o["name"]: o["data"] for o in r[1]["outputs"]} for r in results]

        round_of(1, {"sequence_start": True})
        started = time.monotonic()
        second = round_of(2, {})
        took = time.monotonic() - started
        round_of(3, {"sequence_end": True})
        for k, out in enumerate(second):
            self.assertEqual(out["OUTPUT__0"], [2.0 * k, 3.0])
        return sorted(out["BATCH__1"][0] for out in second), took

    def test_round_of_every_live_sequence_goes_at_once_split_over_instances(self):
        """oldest waits for company only while a live sequence could still
        send it, and shares a batch among free instances: the round goes as
        soon as its last request arrives (not after the 5 s queue delay), as
        two forward calls of 16."""
        sizes, took = self.idle_round("accumulator2", 5000)
        self.assertLess(took, 4, "the round waited out the queue delay")
        self.assertEqual(sizes, [16] * 32)

    def test_round_is_not_split_below_the_preferred_size(self):
        sizes, took = self.idle_round("accumulator2_pref", 6000)
        self.assertLess(took, 4, "the round waited out the queue delay")
        self.assertEqual(sizes, [32] * 32)

    def test_controls_and_state_without_batching(self):
        for seq in (7, 8):
            total = 0.0
            for step, v in enumerate([1.0, 2.5, -0.5]):
                total += v * seq
                params = {"sequence_id": seq, "sequence_start": step == 0,
                          "sequence_end": step == 2}
                out = self.outputs("counter", infer_body([("x", [1], "FP32", [v * seq])],
                                                         parameters=params))
                self.assertEqual(out["total"]["data"], [total])
                self.assertEqual(out["started"]["data"], [1 if step == 0 else 0])
                self.assertEqual(out["corr"]["data"], [seq])
                self.assertEqual(out["total"]["shape"], [1])
                self.assertNotIn("acc_out", out)

    # ---- failures at execution: only the batch fails, harkd serves on ----

    def test_module_that_raises(self):
        out = self.outputs("raiser", infer_body([("INPUT__0", [2], "FP32", [1, 2])]))
        self.assertEqual(out["OUTPUT__0"]["data"], [2, 4])
        status, res = self.infer("raiser", infer_body([("INPUT__0", [2], "FP32", [1, -2])]))
        self.assertEqual(status, 500, res)
        self.assertIn("model 'raiser'", res["error"])
        self.assertIn("negative input is not allowed", res["error"])
        out = self.outputs("raiser", infer_body([("INPUT__0", [1], "FP32", [3])]))
        self.assertEqual(out["OUTPUT__0"]["data"], [6])

    def test_shapes_the_module_rejects(self):
        status, res = self.infer("adder", infer_body([("INPUT__0", [3], "FP32", [1, 2, 3]),
                                                      ("INPUT__1", [2], "FP32", [1, 2])]))
        self.assertEqual(status, 500, res)
        self.assertIn("model 'adder'", res["error"])
        self.assertIn("must match the size of tensor b (2)", res["error"])
        out = self.outputs("adder", infer_body([("INPUT__0", [1], "FP32", [1]),
                                                ("INPUT__1", [1], "FP32", [1])]))
        self.assertEqual(out["OUTPUT__0"]["data"], [2])

    def test_result_of_the_wrong_type(self):
        status, res = self.infer("wrong_type", infer_body([("INPUT__0", [2], "INT32", [1, 2])]))
        self.assertEqual(status, 500, res)
        self.assertIn("model 'wrong_type'", res["error"])
        self.assertIn("output 'OUTPUT__0': expected TYPE_INT32 as config.pbtxt declares, "
                      "got TYPE_FP32", res["error"])

    def test_request_not_matching_config(self):
        # Checked by the engine before the backend sees it.
        status, res = self.infer("named", infer_body([("x", [1, 2], "INT64", [[1, 2]]),
                                                      ("y", [1, 2], "INT64", [[1, 2]])]))
        self.assertEqual(status, 400, res)
        self.assertIn("unexpected shape for input 'x'", res["error"])

    # ---- models that must not load ----

    def test_bad_models_fail_to_load_with_reasons(self):
        idx = self.index()
        for name in ("not_archive", "no_file", "unmatched"):
            self.assertEqual(idx[name]["state"], "UNAVAILABLE", idx[name])
        self.assertIn("is not a TorchScript archive", idx["not_archive"]["reason"])
        self.assertIn("model 'not_archive'", idx["not_archive"]["reason"])
        self.assertIn("no TorchScript file", idx["no_file"]["reason"])
        self.assertIn(os.path.join("no_file", "1", "model.pt"), idx["no_file"]["reason"])
        self.assertIn("input 'c' matches no argument of forward(self, a: Tensor, b: Tensor)",
                      idx["unmatched"]["reason"])
        self.assertIn("input 'N__1' binds forward argument 'n' of type int; expected Tensor",
                      idx["int_argument"]["reason"])
        self.assertIn("output 'OUTPUT__1' is result 1 of forward, but forward returns Tensor "
                      "(1 result)", idx["extra_output"]["reason"])
        self.assertIn("parameter INTRA_OP_THREAD_COUNT must be a whole number 0..4096 "
                      "(0 = default), got 'many'", idx["bad_threads"]["reason"])
        self.assertIn("tensor 'INPUT__0' has data type TYPE_UINT32, which TorchScript has no "
                      "type for", idx["no_uint32"]["reason"])
        self.assertIn("parameter BATCH_PAD_MULTIPLE must be a whole number 1..32 (1 = no "
                      "padding, at most max_batch_size), got '64'", idx["bad_pad"]["reason"])
        self.assertIn("parameter BATCH_PAD_MULTIPLE needs batching (max_batch_size > 0)",
                      idx["pad_unbatched"]["reason"])
        for name in ("not_archive", "no_file", "unmatched", "int_argument", "extra_output",
                     "bad_threads", "no_uint32", "bad_pad", "pad_unbatched"):
            self.assertIn(f"model '{name}'", idx[name]["reason"])
            self.assertEqual(idx[name]["state"], "UNAVAILABLE", idx[name])
        for name in ("adder", "named", "types", "raiser", "affine", "accumulator", "accumulator2",
                     "accumulator2_pref", "wrong_type", "affine_padded", "accumulator_padded",
                     "accumulator_round_padded",
                     "rowsum", "custom_file", "counter"):
            self.assertEqual(idx[name]["state"], "READY", idx[name])
        status, res = self.infer("not_archive", infer_body([("INPUT__0", [1], "FP32", [1])]))
        self.assertNotEqual(status, 200, res)


if __name__ == "__main__":
    main()
