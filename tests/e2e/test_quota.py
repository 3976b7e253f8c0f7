"""Fair admission across protocols against the real harkd (issue 13,
finding 6): KServe clients, who choose their own sequence ids, get only a
share of a speech model's sequence slots and backlog, so a flood of their
sequence_start requests cannot lock the speech streams out.

The model is echo_asr (a sample counter) as a streaming model with two
candidate slots; --max-queue-size 16 bounds the backlog. With the default
share (half), KServe sequences hold one slot and park at most 8 requests;
the rest of 50 STARTs are refused with 503 / RESOURCE_EXHAUSTED naming the
quota, and a new WebSocket stream is still admitted (the parked requests
do not count against --stream-backlog-limit) and transcribed on the slot
the quota kept free."""
import asyncio
import concurrent.futures
import json
import os
import struct
import threading

import grpc
import websockets

from harness import MODELS, ServerTest, main
from test_grpc import pb, pb_grpc

ECHO_CONFIG = open(os.path.join(MODELS, "echo_asr", "config.pbtxt")).read() + """
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 2 max_queue_delay_microseconds: 0 }
}
"""

FLOOD = 50
SLOTS = 1     # half of max_candidate_sequences
PARKED = 8    # half of --max-queue-size


def samples(n):
    return b"\x01\x00" * n


class Quota(ServerTest):
    GRPC = True
    REPO = {"echo_asr": ECHO_CONFIG}
    ARGS = ("--speech-model", "echo_asr", "--max-queue-size", "16")

    def http_infer(self, seq, flag="sequence_start"):
        """(status, transcript or error) of a KServe HTTP sequence_start
        (or sequence_end)."""
        doc = {"parameters": {"sequence_id": seq, flag: True},
               "inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1],
                           "data": [samples(10).decode("latin-1")]}],
               "outputs": [{"name": "TRANSCRIPT"}]}
        status, reply = self.server.json("POST", "/v2/models/echo_asr/infer", doc)
        if status != 200:
            return status, reply.get("error", "")
        return status, reply["outputs"][0]["data"][0]

    def test_kserve_flood_leaves_speech_streams_room(self):
        done = []
        lock = threading.Lock()
        finished = threading.Condition(lock)

        def one(seq):
            result = self.http_infer(seq)
            with lock:
                done.append(result + (seq,))
                finished.notify_all()

        # The parked requests wait (for a slot their quota does not have)
        # until the server stops: daemon threads, not joined.
        for seq in range(1, FLOOD + 1):
            threading.Thread(target=one, args=(seq,), daemon=True).start()
        with lock:
            self.assertTrue(finished.wait_for(lambda: len(done) >= FLOOD - PARKED, 60),
                            f"only {len(done)} of {FLOOD} answered")
        ok = [r for r in done if r[0] == 200]
        refused = [r for r in done if r[0] != 200]
        self.assertEqual(len(ok), SLOTS, done)
        self.assertEqual(len(refused), FLOOD - SLOTS - PARKED, done)
        for status, msg, _ in refused:
            self.assertEqual(status, 503, msg)
            self.assertIn("sequence quota exceeded", msg)
            self.assertIn("sequence_client_share", msg)

        # gRPC clients are in the same group: refused too.
        channel = grpc.insecure_channel(f"127.0.0.1:{self.server.grpc_port}")
        try:
            req = pb.ModelInferRequest(model_name="echo_asr")
            req.parameters["sequence_id"].uint64_param = 1000
            req.parameters["sequence_start"].bool_param = True
            req.inputs.add(name="AUDIO", datatype="BYTES", shape=[1])
            req.raw_input_contents.append(struct.pack("<I", 20) + samples(10))
            with self.assertRaises(grpc.RpcError) as cm:
                pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(req, timeout=30)
            self.assertEqual(cm.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
            self.assertIn("sequence quota exceeded", cm.exception.details())
        finally:
            channel.close()

        # A WebSocket stream is admitted and runs on the slot kept for it.
        async def go():
            uri = f"ws://127.0.0.1:{self.server.http_port}/"
            async with websockets.connect(uri) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": 8000}}))
                await ws.send(samples(4000))
                self.assertEqual(json.loads(await ws.recv()), {"partial": "4000 samples"})
                await ws.send('{"eof": 1}')
                self.assertEqual(json.loads(await ws.recv())["text"], "4000")
        asyncio.run(asyncio.wait_for(go(), 60))

        # The parked sequences run as the client's own end: each END frees
        # its slot for the next parked START (so none is left to stop).
        ended = set()
        with lock:
            while len(done) < FLOOD:
                running = [r[2] for r in done if r[0] == 200 and r[2] not in ended]
                self.assertTrue(running, done)
                lock.release()
                try:
                    for seq in running:
                        self.assertEqual(self.http_infer(seq, "sequence_end")[0], 200)
                        ended.add(seq)
                finally:
                    lock.acquire()
                finished.wait_for(lambda: len(done) == FLOOD or any(
                    r[0] == 200 and r[2] not in ended for r in done), 30)
            self.assertEqual(len([r for r in done if r[0] == 200]), SLOTS + PARKED)


class ShareOutOfRange(ServerTest):
    """A sequence_client_share that is not a percentage from 1 to 100
    fails the model's load with the reason; the server goes on serving."""
    REPO = {"echo_asr": ECHO_CONFIG}
    ARGS = ("--model-control-mode", "explicit", "--load-model", "echo_asr")

    def test_bad_share_fails_the_load(self):
        for i, value in enumerate(("0", "101", "half", "")):
            name = f"share_{i}"
            os.makedirs(os.path.join(self.repo_dir, name, "1"))
            with open(os.path.join(self.repo_dir, name, "config.pbtxt"), "w") as f:
                f.write(ECHO_CONFIG.replace('name: "echo_asr"', f'name: "{name}"') +
                        'parameters { key: "sequence_client_share" value: { string_value: "%s" } }\n'
                        % value)
            status, doc = self.server.json("POST", f"/v2/repository/models/{name}/load")
            self.assertEqual(status, 400, (value, doc))
            self.assertIn("sequence_client_share", doc["error"])
            self.assertIn("1 to 100", doc["error"])
        self.assertEqual(self.server.request("GET", "/v2/models/echo_asr/ready")[0], 200)


if __name__ == "__main__":
    main()
