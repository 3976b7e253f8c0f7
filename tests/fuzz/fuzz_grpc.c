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
 * model (no server) — its tensors from raw_input_contents or typed
 * contents, its parameters — and checked by the engine's own validation
 * (hark_request_validate), as hark_server_infer would.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "fuzz_model.h"
#include "grpc_service.pb-c.h"
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

typedef Inference__ModelInferRequest infer_request;
typedef Inference__ModelInferRequest__InferInputTensor input_tensor;

/* A typed contents field as raw bytes (owned by the request), for the
 * element types the fuzz model uses; NULL when there is none. */
static const void *contents_bytes(hark_request *req, const input_tensor *in, hark_datatype dt, size_t *len) {
  const Inference__InferTensorContents *c = in->contents;
  if (!c) return NULL;
  switch (dt) {
  case HARK_TYPE_INT32: *len = c->n_int_contents * 4; return c->int_contents;
  case HARK_TYPE_FP32: *len = c->n_fp32_contents * 4; return c->fp32_contents;
  case HARK_TYPE_UINT64: *len = c->n_uint64_contents * 8; return c->uint64_contents;
  case HARK_TYPE_BOOL: {
    uint8_t *b = malloc(c->n_bool_contents ? c->n_bool_contents : 1);
    if (!b) return NULL;
    for (size_t i = 0; i < c->n_bool_contents; i++) b[i] = c->bool_contents[i] ? 1 : 0;
    hark_request_attach(req, b, free);
    *len = c->n_bool_contents;
    return b;
  }
  case HARK_TYPE_BYTES: { /* 4-byte little-endian length + bytes each */
    size_t total = 0;
    for (size_t i = 0; i < c->n_bytes_contents; i++) total += 4 + c->bytes_contents[i].len;
    uint8_t *b = malloc(total ? total : 1), *p = b;
    if (!b) return NULL;
    for (size_t i = 0; i < c->n_bytes_contents; i++) {
      uint32_t n = (uint32_t)c->bytes_contents[i].len;
      for (int k = 0; k < 4; k++) *p++ = (uint8_t)(n >> (8 * k));
      if (n) memcpy(p, c->bytes_contents[i].data, n);
      p += n;
    }
    hark_request_attach(req, b, free);
    *len = total;
    return b;
  }
  default: return NULL;
  }
}

static void apply_parameter(hark_request *req, const Inference__ModelInferRequest__ParametersEntry *e) {
  const Inference__InferParameter *p = e->value;
  if (!e->key || !p) return;
  if (!strcmp(e->key, "priority") && p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM)
    hark_request_set_priority(req, (uint32_t)p->int64_param);
  else if (!strcmp(e->key, "timeout") &&
           p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM)
    hark_request_set_timeout_us(req, (uint64_t)p->int64_param);
  else if (!strcmp(e->key, "sequence_id") &&
           p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
    hark_request_set_correlation_id_str(req, p->string_param);
  else if (!strcmp(e->key, "sequence_id"))
    hark_request_set_correlation_id(req, (uint64_t)p->int64_param);
  else if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
    hark_request_set_parameter(req, e->key, p->string_param);
}

static void check_infer(const infer_request *q) {
  hark_request *req = hark_request_new(fuzz_model());
  bool raw = q->n_raw_input_contents > 0;
  hark_error *err = NULL;
  if (raw && q->n_raw_input_contents != q->n_inputs) goto out; /* the server refuses this */
  for (size_t i = 0; !err && i < q->n_inputs; i++) {
    const input_tensor *in = q->inputs[i];
    hark_datatype dt = hark_datatype_from_name(in->datatype);
    if (dt == HARK_TYPE_INVALID || in->n_shape > HARK_MAX_DIMS) goto out;
    size_t len = 0;
    const void *data = raw ? q->raw_input_contents[i].data : contents_bytes(req, in, dt, &len);
    if (raw) len = q->raw_input_contents[i].len;
    err = hark_request_add_input(req, in->name, dt, in->shape, (uint32_t)in->n_shape, data ? data : "",
                                 len);
  }
  for (size_t i = 0; !err && i < q->n_outputs; i++) hark_request_add_requested_output(req, q->outputs[i]->name);
  for (size_t i = 0; !err && i < q->n_parameters; i++) apply_parameter(req, q->parameters[i]);
  if (!err) {
    if (q->id && *q->id) hark_request_set_id(req, q->id);
    err = hark_request_validate(req);
  }
out:
  hark_error_free(err);
  hark_request_free(req);
}

/* What the Riva handlers read first: the oneof and the audio settings. */
static void check_streaming(const Nvidia__Riva__Asr__StreamingRecognizeRequest *q) {
  if (q->streaming_request_case == NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_STREAMING_CONFIG &&
      q->streaming_config && q->streaming_config->config) {
    const Nvidia__Riva__Asr__RecognitionConfig *c = q->streaming_config->config;
    (void)protobuf_c_enum_descriptor_get_value(&nvidia__riva__audio_encoding__descriptor, c->encoding);
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
  if (d == &inference__model_infer_request__descriptor) check_infer((infer_request *)m);
  else if (d == &nvidia__riva__asr__streaming_recognize_request__descriptor)
    check_streaming((Nvidia__Riva__Asr__StreamingRecognizeRequest *)m);
  protobuf_c_message_free_unpacked(m, NULL);
  return 0;
}
