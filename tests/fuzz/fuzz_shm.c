/*
 * fuzz_shm.c — libFuzzer target for the system shared-memory extension:
 * the registry (src/frontend/kserve/shm.c: register, unregister, status,
 * the offset/size checks of a span), the HTTP register body
 * (hark_kserve_shm_register_parse) and routes, and inference requests that
 * name regions for inputs and outputs, over HTTP (JSON) and gRPC
 * (ModelInferRequest), checked and echoed back into the regions.
 *
 * One real POSIX shm object of 3 pages is made at start (unlinked at exit)
 * and cut back to 3 pages before each input. A key the input names is
 * mapped to that object ("fuzz"), to one that does not exist, or to "":
 * the fuzzer never opens anybody else's object.
 *
 * Input: a list of operations, each an opcode byte and its arguments
 * (numbers as a width byte and 1, 2 or 8 little-endian bytes; strings and
 * documents with a length prefix). A span the registry hands out is
 * written over whole and must lie inside the region it came from.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "frontend/kserve/kserve.h"
#include "frontend/kserve/kserve_grpc.h"
#include "frontend/kserve/shm.h"
#include "fuzz_model.h"

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

static char real_key[64], missing_key[64];
static int real_fd = -1;
static size_t page, object_size; /* the object's size now */

static void unlink_object(void) { shm_unlink(real_key); }

static void make_object(void) {
  page = (size_t)sysconf(_SC_PAGESIZE);
  snprintf(real_key, sizeof real_key, "/hark_fuzz_shm_%d", (int)getpid());
  snprintf(missing_key, sizeof missing_key, "/hark_fuzz_shm_%d_missing", (int)getpid());
  real_fd = shm_open(real_key, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (real_fd < 0) abort();
  atexit(unlink_object);
}

/* ---- reading the input ------------------------------------------------------ */

typedef struct input {
  const uint8_t *p;
  size_t n;
} input;

static uint8_t byte(input *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}

static uint64_t bytes_le(input *in, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)byte(in) << (8 * i);
  return v;
}

/* A number: small, page-sized, or any 64-bit value. */
static uint64_t number(input *in) {
  switch (byte(in) % 3) {
  case 0: return byte(in);
  case 1: return bytes_le(in, 2);
  default: return bytes_le(in, 8);
  }
}

/* `len` bytes (fewer at the end of the input), copied and NUL-terminated. */
static char *take(input *in, size_t len) {
  if (len > in->n) len = in->n;
  char *s = malloc(len + 1);
  if (!s) abort();
  memcpy(s, in->p, len);
  s[len] = '\0';
  in->p += len;
  in->n -= len;
  return s;
}

static const char *const NAMES[] = {"r0", "r1", "r2", "r3"};
#define N_NAMES 4

/* A region name, or NULL (every region) for b == N_NAMES. */
static const char *name_of(uint8_t b) {
  b %= N_NAMES + 1;
  return b < N_NAMES ? NAMES[b] : NULL;
}

static const char *key_for(const char *asked) {
  if (!*asked) return "";
  return strcmp(asked, "fuzz") == 0 ? real_key : missing_key;
}

/* ---- operations ---------------------------------------------------------------- */

static void check_status(hark_shm *shm, const char *name) {
  hark_shm_status *st;
  size_t n;
  hark_error *err = hark_shm_status_get(shm, name, &st, &n);
  if (err) {
    hark_error_free(err);
    return;
  }
  if (name && n != 1) abort();
  for (size_t i = 0; i < n; i++) {
    if (!st[i].byte_size || strcmp(st[i].key, real_key) != 0) abort();
    if (i && strcmp(st[i - 1].name, st[i].name) >= 0) abort();
  }
  hark_shm_status_free(st, n);
}

/* A span is inside its region: its first byte is `offset` past the
 * region's, and all of it can be written. */
static void check_span(hark_shm *shm, const char *name, uint64_t offset, uint64_t size,
                       uint8_t fill) {
  hark_shm_region *r;
  hark_error *err = hark_shm_acquire(shm, name, &r);
  if (err) {
    hark_error_free(err);
    return;
  }
  void *base, *p;
  hark_error *e0 = hark_shm_span(r, 0, 0, "fuzz", &base);
  err = hark_shm_span(r, offset, size, "fuzz", &p);
  if (!err) {
    if (e0 || offset + size > hark_shm_region_size(r) || (char *)p != (char *)base + offset)
      abort();
    if (size) memset(p, fill, (size_t)size);
  }
  hark_error_free(e0);
  hark_error_free(err);
  hark_shm_release(r);
}

/* POST or GET on a systemsharedmemory route, as kserve_http.c serves it. */
static void http_op(hark_shm *shm, input *in) {
  char *path = take(in, byte(in));
  char *body = take(in, (size_t)bytes_le(in, 2));
  hark_kserve_route rt;
  hark_error *err = hark_kserve_route_parse(path, false, &rt);
  if (err) {
    hark_error_free(err);
  } else {
    char *key = NULL;
    uint64_t offset, size;
    switch (rt.kind) {
    case HARK_ROUTE_SHM_REGISTER:
      err = hark_kserve_shm_register_parse(body, strlen(body), &key, &offset, &size);
      if (!err) err = hark_shm_register(shm, rt.region, key_for(key), offset, size);
      if (!err && !rt.region) abort();
      free(key);
      break;
    case HARK_ROUTE_SHM_UNREGISTER: hark_shm_unregister(shm, rt.region); break;
    case HARK_ROUTE_SHM_STATUS: check_status(shm, rt.region); break;
    default: break;
    }
    hark_error_free(err);
    hark_kserve_route_clear(&rt);
  }
  free(path);
  free(body);
}

/* Every input echoed as an output (into its region, when it has one). */
static hark_response *echo_response(hark_request *req);

static void echo(hark_request *req, const hark_kserve_request *parsed) {
  hark_response *resp = echo_response(req);
  hark_buf out = {0};
  size_t json_len;
  bool binary;
  hark_error_free(hark_kserve_write_response(&out, resp, "fuzz", 1, parsed, &json_len, &binary));
  hark_buf_free(&out);
  hark_response_free(resp);
}

/* A KServe JSON infer request, its tensors in regions of `shm`. */
static void json_infer(hark_shm *shm, input *in) {
  size_t len = (size_t)bytes_le(in, 2);
  char *body = take(in, len);
  hark_kserve_request parsed;
  hark_error *err = hark_kserve_parse(body, strlen(body), HARK_KSERVE_NO_HEADER_LEN, &parsed);
  if (!err) {
    hark_request *req = hark_request_new(fuzz_model());
    err = hark_kserve_to_request(&parsed, shm, req);
    if (err) {
      hark_kserve_request_clear(&parsed);
    } else {
      hark_error_free(hark_request_validate(req));
      echo(req, &parsed);
    }
    hark_request_free(req);
  }
  hark_error_free(err);
  free(body);
}

/* A response echoing every input, its outputs in the response's own
 * memory (as every backend's are). */
static hark_response *echo_response(hark_request *req) {
  hark_response *resp = hark_response_new(req);
  for (uint32_t i = 0; i < hark_request_input_count(req); i++) {
    const hark_tensor *t = hark_request_input(req, i);
    void *buf;
    hark_error *err = hark_response_add_output(resp, t->name, t->datatype, t->shape, t->ndims,
                                               t->byte_size, &buf);
    if (err)
      hark_error_free(err);
    else if (t->byte_size) /* an empty tensor's data may be NULL */
      memcpy(buf, t->data, t->byte_size);
  }
  return resp;
}

/* A gRPC ModelInferRequest with shared_memory_* parameters; each echoed
 * output is then written into each output region at an offset from the
 * input, as kserve_grpc_infer.c writes a response's outputs. */
static void grpc_infer(hark_shm *shm, input *in) {
  size_t len = (size_t)bytes_le(in, 2);
  if (len > in->n) len = in->n;
  Inference__ModelInferRequest *q = inference__model_infer_request__unpack(NULL, len, in->p);
  in->p += len;
  in->n -= len;
  if (!q) return;
  uint64_t offset = number(in), size = number(in);
  hark_request *req = hark_request_new(fuzz_model());
  const Inference__InferParameter *seq;
  hark_shm_region **regions = NULL;
  hark_error *err = hark_kserve_grpc_to_request(q, shm, req, &seq, &regions);
  if (!err) {
    hark_error_free(hark_request_validate(req));
    hark_response *resp = echo_response(req);
    for (size_t o = 0; regions && o < q->n_outputs; o++) {
      for (uint32_t i = 0; regions[o] && i < hark_response_output_count(resp); i++)
        hark_error_free(
            hark_kserve_shm_write(regions[o], offset, size, hark_response_output(resp, i)));
    }
    hark_response_free(resp);
  }
  hark_error_free(err);
  hark_request_free(req);
  inference__model_infer_request__free_unpacked(q, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (real_fd < 0) make_object();
  object_size = 3 * page;
  if (ftruncate(real_fd, (off_t)object_size) != 0) abort();
  hark_shm *shm = hark_shm_new(1024);
  input in = {data, size};
  for (int ops = 0; in.n && ops < 64; ops++) {
    uint8_t op = byte(&in);
    switch (op % 8) {
    case 0: { /* register */
      uint8_t b = byte(&in);
      static const char *const keys[] = {"fuzz", "missing", ""};
      uint64_t offset = number(&in), len = number(&in);
      const char *name = name_of(b);
      hark_error *err =
          hark_shm_register(shm, name ? name : "", key_for(keys[(b >> 4) % 3]), offset, len);
      if (!err && offset + len > object_size) abort(); /* past the object's end */
      hark_error_free(err);
      break;
    }
    case 1: hark_shm_unregister(shm, name_of(byte(&in))); break;
    case 2: check_status(shm, name_of(byte(&in))); break;
    case 3: {
      const char *name = name_of(byte(&in));
      uint64_t offset = number(&in), len = number(&in);
      check_span(shm, name ? name : "r0", offset, len, byte(&in));
      break;
    }
    case 4: /* the client cuts (or grows) the object under its regions */
      object_size = (size_t)bytes_le(&in, 2) % (4 * page + 1);
      if (ftruncate(real_fd, (off_t)object_size) != 0) abort();
      break;
    case 5: http_op(shm, &in); break;
    case 6: json_infer(shm, &in); break;
    default: grpc_infer(shm, &in); break;
    }
  }
  hark_shm_free(shm);
  return 0;
}
