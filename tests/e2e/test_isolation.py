"""Stream isolation against the real harkd (issue 13, finding 1): no client
can name, read, feed or end a sequence it did not start.

- A live Vosk (WebSocket) or Riva stream cannot be reached from KServe
  HTTP or gRPC: continuing or ending it under the ids the server used to
  hand out (2^63 + n, 3 * 2^62 + n) answers exactly as an id nobody uses,
  and the stream goes on untouched (its sample count continues, its final
  is its own).
- Ids KServe clients choose live in one space per protocol: HTTP's 5 is
  not gRPC's 5, and a continuation of an id live over the other protocol
  reads exactly as one of an unknown id.

The model is echo_asr, which counts the samples of each sequence."""
import asyncio
import json
import os
import queue
import struct

import grpc
import websockets

from harness import MODELS, ServerTest, main
from test_grpc import pb, pb_grpc
from test_riva import config as riva_config, rasr, rasr_grpc

# echo_asr as a streaming model, like the asr model: its streams are
# sequences of the engine's sequence batcher.
ECHO_CONFIG = open(os.path.join(MODELS, "echo_asr", "config.pbtxt")).read() + """
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 64 max_queue_delay_microseconds: 0 }
}
"""

# The correlation ids speech streams had before they were random: the
# first streams of a fresh server, WebSocket and Riva alike.
OLD_IDS = [(1 << 63) + n for n in range(1, 9)] + [3 * (1 << 62) + n for n in range(1, 9)]
UNKNOWN = 987654321


def samples(n):
    return b"\x01\x00" * n


def normalized(message, seq):
    return message.replace(str(seq), "<id>")


class Isolation(ServerTest):
    GRPC = True
    REPO = {"echo_asr": ECHO_CONFIG}
    ARGS = ("--speech-model", "echo_asr")

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.channel = grpc.insecure_channel(f"127.0.0.1:{cls.server.grpc_port}")
        grpc.channel_ready_future(cls.channel).result(timeout=30)
        cls.kserve = pb_grpc.GRPCInferenceServiceStub(cls.channel)
        cls.riva = rasr_grpc.RivaSpeechRecognitionStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        super().tearDownClass()

    # ---- KServe clients ---------------------------------------------------------------

    def http_infer(self, seq, audio=b"", start=False, end=False):
        """(status, transcript or error message) of one KServe HTTP request."""
        params = {"sequence_id": seq}
        if start:
            params["sequence_start"] = True
        if end:
            params["sequence_end"] = True
        doc = {"parameters": params,
               "inputs": [{"name": "AUDIO", "datatype": "BYTES", "shape": [1],
                           "data": [audio.decode("latin-1")]}],
               "outputs": [{"name": "TRANSCRIPT"}]}
        status, reply = self.server.json("POST", "/v2/models/echo_asr/infer", doc)
        if status != 200:
            return status, reply.get("error", "")
        return status, reply["outputs"][0]["data"][0]

    def grpc_infer(self, seq, audio=b"", start=False, end=False):
        """(status code, transcript or error message) of one KServe gRPC request."""
        req = pb.ModelInferRequest(model_name="echo_asr")
        req.parameters["sequence_id"].uint64_param = seq
        if start:
            req.parameters["sequence_start"].bool_param = True
        if end:
            req.parameters["sequence_end"].bool_param = True
        req.inputs.add(name="AUDIO", datatype="BYTES", shape=[1])
        req.raw_input_contents.append(struct.pack("<I", len(audio)) + audio)
        try:
            resp = self.kserve.ModelInfer(req, timeout=30)
        except grpc.RpcError as e:
            return e.code(), e.details()
        for i, out in enumerate(resp.outputs):
            if out.name == "TRANSCRIPT":
                raw = resp.raw_output_contents[i]
                (n,) = struct.unpack_from("<I", raw)
                return grpc.StatusCode.OK, raw[4:4 + n].decode()
        return grpc.StatusCode.OK, None

    def attack_old_ids(self):
        """Every way KServe could reach a speech stream by its old id reads
        as an unknown id: same status, same message but for the id."""
        want_http = self.http_infer(UNKNOWN, samples(10))
        want_grpc = self.grpc_infer(UNKNOWN, samples(10))
        self.assertEqual(want_http[0], 400, want_http)
        self.assertEqual(want_grpc[0], grpc.StatusCode.INVALID_ARGUMENT, want_grpc)
        for seq in OLD_IDS:
            for end in (False, True):
                status, msg = self.http_infer(seq, samples(10), end=end)
                self.assertEqual((status, normalized(msg, seq)),
                                 (400, normalized(want_http[1], UNKNOWN)), f"HTTP id {seq}")
                code, msg = self.grpc_infer(seq, samples(10), end=end)
                self.assertEqual((code, normalized(msg, seq)),
                                 (want_grpc[0], normalized(want_grpc[1], UNKNOWN)),
                                 f"gRPC id {seq}")

    # ---- speech streams ---------------------------------------------------------------

    def test_websocket_stream_is_unreachable_from_kserve(self):
        async def go():
            uri = f"ws://127.0.0.1:{self.server.http_port}/"
            async with websockets.connect(uri) as ws:
                await ws.send(json.dumps({"config": {"sample_rate": 8000}}))
                await ws.send(samples(4000))
                self.assertEqual(json.loads(await ws.recv()), {"partial": "4000 samples"})
                self.attack_old_ids()
                # Nobody else fed, read or ended it: the count goes on.
                await ws.send(samples(4000))
                self.assertEqual(json.loads(await ws.recv()), {"partial": "8000 samples"})
                await ws.send('{"eof": 1}')
                self.assertEqual(json.loads(await ws.recv())["text"], "8000")
                try:
                    await asyncio.wait_for(ws.recv(), 10)
                    self.fail("the server sent more after the final")
                except websockets.ConnectionClosed as e:
                    self.assertEqual(e.code, 1000, e.reason)
        asyncio.run(asyncio.wait_for(go(), 120))

    def test_riva_stream_is_unreachable_from_kserve(self):
        chunks = queue.Queue()

        def requests():
            yield rasr.StreamingRecognizeRequest(streaming_config=riva_config(rate=16000))
            while (chunk := chunks.get(timeout=60)) is not None:
                yield rasr.StreamingRecognizeRequest(audio_content=chunk)

        replies = self.riva.StreamingRecognize(requests(), timeout=120)

        def transcript():
            r = next(replies)
            return r.results[0].alternatives[0].transcript, r.results[0].is_final

        chunks.put(samples(4000))
        self.assertEqual(transcript(), ("4000 samples", False))
        self.attack_old_ids()
        chunks.put(samples(4000))
        self.assertEqual(transcript(), ("8000 samples", False))
        chunks.put(None)
        self.assertEqual(transcript(), ("8000", True))
        self.assertEqual(list(replies), [])

    # ---- ids KServe clients choose -------------------------------------------------------

    def test_client_ids_are_per_protocol(self):
        seq = 5
        self.assertEqual(self.http_infer(seq, samples(100), start=True), (200, "100 samples"))
        # Live over HTTP, unknown over gRPC: exactly as an id nobody uses.
        unknown = self.grpc_infer(UNKNOWN, samples(1))
        code, msg = self.grpc_infer(seq, samples(1))
        self.assertEqual((code, normalized(msg, seq)), (unknown[0], normalized(unknown[1], UNKNOWN)))
        code, msg = self.grpc_infer(seq, samples(1), end=True)
        self.assertEqual((code, normalized(msg, seq)), (unknown[0], normalized(unknown[1], UNKNOWN)))
        # gRPC's 5 is a sequence of its own; neither sees the other's audio.
        self.assertEqual(self.grpc_infer(seq, samples(7), start=True),
                         (grpc.StatusCode.OK, "7 samples"))
        self.assertEqual(self.http_infer(seq, samples(100)), (200, "200 samples"))
        self.assertEqual(self.grpc_infer(seq, samples(7)), (grpc.StatusCode.OK, "14 samples"))
        self.assertEqual(self.http_infer(seq, end=True), (200, "200"))
        self.assertEqual(self.grpc_infer(seq, end=True), (grpc.StatusCode.OK, "14"))
        # Both ended: each protocol's 5 is unknown again.
        self.assertEqual(self.http_infer(seq, samples(1))[0], 400)
        self.assertEqual(self.grpc_infer(seq, samples(1))[0], grpc.StatusCode.INVALID_ARGUMENT)


if __name__ == "__main__":
    main()
