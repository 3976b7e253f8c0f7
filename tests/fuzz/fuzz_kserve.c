/*
 * fuzz_kserve.c — libFuzzer target for the KServe v2 infer request codec
 * (src/frontend/kserve/kserve_parse.c, kserve_write.c): JSON, and JSON + binary tensor data.
 *
 * Input: a 2-byte little-endian Inference-Header-Content-Length (0xFFFF:
 * none, the whole rest is JSON), then the body. A request that parses is
 * built into a hark_request for a hand-made model (no server), checked
 * against the model's config as hark_server_infer would, echoed back as an
 * identity model's response and written out, as JSON and as binary.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "frontend/kserve/kserve.h"
#include "fuzz_model.h"

static const char CONFIG[] =
    "name: \"fuzz\"\nbackend: \"identity\"\nmax_batch_size: 8\n"
    "input [\n"
    "  { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 16 ] },\n"
    "  { name: \"B\" data_type: TYPE_BOOL dims: [ -1 ] optional: true },\n"
    "  { name: \"F\" data_type: TYPE_FP32 dims: [ -1, 2 ] optional: true },\n"
    "  { name: \"H\" data_type: TYPE_FP16 dims: [ -1 ] optional: true },\n"
    "  { name: \"S\" data_type: TYPE_STRING dims: [ -1 ] optional: true },\n"
    "  { name: \"U\" data_type: TYPE_UINT64 dims: [ -1 ] optional: true }\n"
    "]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n";

static hark_model *fuzz_model(void) { return fuzz_model_from(CONFIG, sizeof CONFIG - 1); }

/* Echoes every input as an output, then writes the response. */
static void echo(hark_request *req, const hark_kserve_request *parsed) {
  hark_response *resp = hark_response_new(req);
  for (uint32_t i = 0; i < hark_request_input_count(req); i++) {
    const hark_tensor *t = hark_request_input(req, i);
    void *buf;
    hark_error *err = hark_response_add_output(resp, t->name, t->datatype, t->shape, t->ndims,
                                               t->byte_size, &buf);
    if (err) {
      hark_error_free(err);
      continue;
    }
    if (t->byte_size) memcpy(buf, t->data, t->byte_size); /* an empty tensor's data may be NULL */
  }
  hark_buf out = {0};
  size_t json_len;
  bool binary;
  hark_error_free(hark_kserve_write_response(&out, resp, "fuzz", 1, parsed, &json_len, &binary));
  out.len = 0;
  hark_error_free(hark_kserve_write_response(&out, resp, "fuzz", 1, NULL, &json_len, &binary));
  hark_buf_free(&out);
  hark_response_free(resp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 2) return 0;
  size_t header_len = (size_t)data[0] | (size_t)data[1] << 8;
  if (header_len == 0xFFFF) header_len = HARK_KSERVE_NO_HEADER_LEN;
  size_t len = size - 2;
  /* A private, writable copy: the parser decodes strings in place. */
  char *body = malloc(len ? len : 1);
  if (!body) return 0;
  memcpy(body, data + 2, len);
  hark_kserve_request parsed;
  hark_error *err = hark_kserve_parse(body, len, header_len, &parsed);
  if (err) {
    hark_error_free(err);
    free(body);
    return 0;
  }
  hark_request *req = hark_request_new(fuzz_model());
  err = hark_kserve_to_request(&parsed, NULL, req);
  if (err) {
    hark_kserve_request_clear(&parsed);
  } else {
    hark_error *verr = hark_request_validate(req);
    echo(req, &parsed);
    hark_error_free(verr);
  }
  hark_error_free(err);
  hark_request_free(req);
  free(body);
  return 0;
}
