/*
 * fuzz_grpc.c — libFuzzer target for the protobuf messages harkd's gRPC
 * server parses: every KServe request (inference.GRPCInferenceService),
 * grpc.health.v1 HealthCheckRequest and Riva's RecognizeRequest,
 * StreamingRecognizeRequest and RivaSpeechRecognitionConfigRequest.
 *
 * Input: one byte choosing the message type (modulo the table), then the
 * message bytes as they would arrive in a gRPC frame. What unpacks is
 * packed again and must survive a second round trip unchanged in size. A
 * ModelInferRequest is then turned into a hark_request for a hand-made
 * model (no server) by the server's own code (hark_kserve_grpc_to_request:
 * tensors from raw_input_contents or typed contents, parameters) and
 * checked by the engine's validation (hark_request_validate), as
 * ModelInfer does before hark_server_infer.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "frontend/kserve/kserve_grpc.h"
#include "fuzz_model.h"
#include "health.pb-c.h"
#include "riva_asr.pb-c.h"

static const ProtobufCMessageDescriptor *const TYPES[] = {
    &inference__model_infer_request__descriptor,
    &inference__server_live_request__descriptor,
    &inference__server_ready_request__descriptor,
    &inference__model_ready_request__descriptor,
    &inference__server_metadata_request__descriptor,
    &inference__model_metadata_request__descriptor,
    &inference__model_config_request__descriptor,
    &inference__model_statistics_request__descriptor,
    &inference__repository_index_request__descriptor,
    &inference__repository_model_load_request__descriptor,
    &inference__repository_model_unload_request__descriptor,
    &grpc__health__v1__health_check_request__descriptor,
    &nvidia__riva__asr__recognize_request__descriptor,
    &nvidia__riva__asr__streaming_recognize_request__descriptor,
    &nvidia__riva__asr__riva_speech_recognition_config_request__descriptor,
};
#define N_TYPES (sizeof TYPES / sizeof TYPES[0])

static const char CONFIG[] =
    "name: \"fuzz\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
    "input [\n"
    "  { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 16 ] },\n"
    "  { name: \"B\" data_type: TYPE_BOOL dims: [ -1 ] optional: true },\n"
    "  { name: \"F\" data_type: TYPE_FP32 dims: [ -1, 2 ] optional: true },\n"
    "  { name: \"S\" data_type: TYPE_STRING dims: [ -1 ] optional: true },\n"
    "  { name: \"U\" data_type: TYPE_UINT64 dims: [ -1 ] optional: true }\n"
    "]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n";

static hark_model *fuzz_model(void) { return fuzz_model_from(CONFIG, sizeof CONFIG - 1); }

/* Packs m, unpacks and packs again: the two encodings must be the same
 * size (the first may differ from the input: packed repeated fields).
 * What was packed need not read back: protobuf-c keeps an unknown field
 * whose tag came as an overlong varint of field 0 (80 00 ...) and writes
 * it back as a plain 0 tag, which it then refuses (seed field0_tag). */
static void round_trip(const ProtobufCMessageDescriptor *d, const ProtobufCMessage *m) {
  size_t n = protobuf_c_message_get_packed_size(m);
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) return;
  if (protobuf_c_message_pack(m, buf) != n) abort();
  ProtobufCMessage *again = protobuf_c_message_unpack(d, NULL, n, buf);
  if (again && protobuf_c_message_get_packed_size(again) != n) abort();
  if (again) protobuf_c_message_free_unpacked(again, NULL);
  free(buf);
}

static void check_infer(const Inference__ModelInferRequest *q) {
  hark_request *req = hark_request_new(fuzz_model());
  const Inference__InferParameter *seq;
  hark_error *err = hark_kserve_grpc_to_request(q, NULL, req, &seq, NULL);
  if (!err) err = hark_request_validate(req);
  hark_error_free(err);
  hark_request_free(req);
}

/* What the Riva handlers read first: the oneof and the audio settings. */
static void check_streaming(const Nvidia__Riva__Asr__StreamingRecognizeRequest *q) {
  if (q->streaming_request_case ==
          NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_STREAMING_CONFIG &&
      q->streaming_config && q->streaming_config->config) {
    const Nvidia__Riva__Asr__RecognitionConfig *c = q->streaming_config->config;
    (void)protobuf_c_enum_descriptor_get_value(&nvidia__riva__audio_encoding__descriptor,
                                               c->encoding);
    for (size_t i = 0; i < c->n_custom_configuration; i++)
      if (!c->custom_configuration[i]->key || !c->custom_configuration[i]->value) abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const ProtobufCMessageDescriptor *d = TYPES[data[0] % N_TYPES];
  ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, size - 1, data + 1);
  if (!m) return 0;
  round_trip(d, m);
  if (d == &inference__model_infer_request__descriptor)
    check_infer((Inference__ModelInferRequest *)m);
  else if (d == &nvidia__riva__asr__streaming_recognize_request__descriptor)
    check_streaming((Nvidia__Riva__Asr__StreamingRecognizeRequest *)m);
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
