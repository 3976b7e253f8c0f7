/*
 * perf_request.c — turns a model's metadata into the one request `hark
 * perf` sends: reads the inputs (cJSON; this runs once, so a DOM is fine),
 * fixes their shapes from -b and --shape, and writes the KServe v2 body —
 * JSON, or with --binary the binary tensor extension (a JSON header whose
 * length goes in Inference-Header-Content-Length, then the raw tensors,
 * little-endian, in input order).
 *
 * Values are zeros or small random numbers (0..99, floats in [0,1)) so
 * arithmetic models such as `simple` never overflow; BYTES elements are
 * short strings. The random stream has a fixed seed: runs are repeatable.
 * perf_tensor_raw() gives the same values as raw bytes, for gRPC's
 * raw_input_contents (perf_grpc.c).
 */
#include "perf.h"

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PERF_MAX_ELEMENTS ((int64_t)1 << 26)

typedef enum { K_BOOL, K_UINT, K_INT, K_FP16, K_BF16, K_FP32, K_FP64, K_BYTES } kind;

typedef struct dtype {
  const char *name;
  kind k;
  int size; /* bytes per element; 0 for BYTES */
} dtype;

static const dtype dtypes[] = {
    {"BOOL", K_BOOL, 1},   {"UINT8", K_UINT, 1},  {"UINT16", K_UINT, 2}, {"UINT32", K_UINT, 4},
    {"UINT64", K_UINT, 8}, {"INT8", K_INT, 1},    {"INT16", K_INT, 2},   {"INT32", K_INT, 4},
    {"INT64", K_INT, 8},   {"FP16", K_FP16, 2},   {"BF16", K_BF16, 2},   {"FP32", K_FP32, 4},
    {"FP64", K_FP64, 8},   {"BYTES", K_BYTES, 0},
};

static const dtype *find_dtype(const char *name) {
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++)
    if (strcmp(dtypes[i].name, name) == 0) return &dtypes[i];
  return NULL;
}

static int fail(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t cap, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, cap, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- a growable byte buffer (setup only; exits when memory runs out) ---- */

typedef struct dbuf {
  char *p;
  size_t len, cap;
} dbuf;

static void dbuf_reserve(dbuf *b, size_t more) {
  if (b->len + more <= b->cap) return;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + more) cap *= 2;
  char *p = realloc(b->p, cap);
  if (!p) {
    fprintf(stderr, "hark perf: out of memory building the request\n");
    exit(1);
  }
  b->p = p;
  b->cap = cap;
}

static void dbuf_put(dbuf *b, const void *data, size_t n) {
  dbuf_reserve(b, n);
  memcpy(b->p + b->len, data, n);
  b->len += n;
}

static void dbuf_printf(dbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dbuf_printf(dbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  dbuf_reserve(b, (size_t)n + 1);
  va_start(ap, fmt);
  vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
  va_end(ap);
  b->len += (size_t)n;
}

static void dbuf_json_string(dbuf *b, const char *s) {
  dbuf_put(b, "\"", 1);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\')
      dbuf_printf(b, "\\%c", ch);
    else if (ch < 0x20)
      dbuf_printf(b, "\\u%04x", ch);
    else
      dbuf_put(b, s, 1);
  }
  dbuf_put(b, "\"", 1);
}

static void dbuf_le(dbuf *b, uint64_t v, int size) {
  unsigned char bytes[8];
  for (int i = 0; i < size; i++) bytes[i] = (unsigned char)(v >> (8 * i));
  dbuf_put(b, bytes, (size_t)size);
}

/* ---- metadata ------------------------------------------------------------ */

int perf_shape_parse(const char *arg, perf_shape *out) {
  const char *colon = strrchr(arg, ':');
  if (!colon || colon == arg || !colon[1]) return -1;
  memset(out, 0, sizeof *out);
  out->name = arg;
  const char *p = colon + 1;
  while (*p) {
    char *end;
    long long d = strtoll(p, &end, 10);
    if (end == p || d < 1 || out->ndims == PERF_MAX_DIMS || (*end && *end != ',')) return -1;
    out->dims[out->ndims++] = d;
    p = *end ? end + 1 : end;
  }
  return 0;
}

static size_t shape_name_len(const perf_shape *s) {
  return (size_t)(strrchr(s->name, ':') - s->name);
}

static int parse_tensor(const cJSON *j, perf_tensor *t, char *err, size_t cap) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
  const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "datatype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
  if (!cJSON_IsString(name) || !cJSON_IsString(dt) || !cJSON_IsArray(shape))
    return fail(err, cap, "model metadata: an input lacks name, datatype or shape");
  if (!find_dtype(dt->valuestring))
    return fail(err, cap, "input '%s': unsupported datatype %s", name->valuestring,
                dt->valuestring);
  if (cJSON_GetArraySize(shape) > PERF_MAX_DIMS)
    return fail(err, cap, "input '%s': more than %d dimensions", name->valuestring, PERF_MAX_DIMS);
  t->name = strdup(name->valuestring);
  snprintf(t->datatype, sizeof t->datatype, "%s", dt->valuestring);
  const cJSON *d;
  cJSON_ArrayForEach(d, shape) {
    if (!cJSON_IsNumber(d) || d->valuedouble < -1)
      return fail(err, cap, "input '%s': bad shape in model metadata", t->name);
    t->shape[t->ndims++] = (int64_t)d->valuedouble;
  }
  return 0;
}

static int parse_outputs(const cJSON *outs, perf_model *m) {
  int n = cJSON_IsArray(outs) ? cJSON_GetArraySize(outs) : 0;
  m->outputs = calloc((size_t)n + 1, sizeof *m->outputs);
  if (!m->outputs) return -1;
  const cJSON *o;
  cJSON_ArrayForEach(o, outs) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    if (cJSON_IsString(name)) m->outputs[m->n_outputs++] = strdup(name->valuestring);
  }
  return 0;
}

int perf_model_parse(const char *json, size_t len, int max_batch_size, perf_model *m, char *err,
                     size_t errcap) {
  memset(m, 0, sizeof *m);
  m->max_batch_size = max_batch_size;
  cJSON *doc = cJSON_ParseWithLength(json, len);
  if (!doc) return fail(err, errcap, "model metadata is not JSON");
  const cJSON *ins = cJSON_GetObjectItemCaseSensitive(doc, "inputs");
  int rc = -1;
  if (!cJSON_IsArray(ins) || cJSON_GetArraySize(ins) == 0) {
    fail(err, errcap, "model metadata lists no inputs");
    goto out;
  }
  m->inputs = calloc((size_t)cJSON_GetArraySize(ins), sizeof *m->inputs);
  if (!m->inputs || parse_outputs(cJSON_GetObjectItemCaseSensitive(doc, "outputs"), m) < 0) {
    fail(err, errcap, "out of memory");
    goto out;
  }
  const cJSON *in;
  cJSON_ArrayForEach(in, ins) {
    if (parse_tensor(in, &m->inputs[m->n_inputs++], err, errcap) < 0) goto out;
  }
  rc = 0;
out:
  cJSON_Delete(doc);
  return rc;
}

void perf_model_free(perf_model *m) {
  for (int i = 0; i < m->n_inputs; i++) free(m->inputs[i].name);
  for (int i = 0; i < m->n_outputs; i++) free(m->outputs[i]);
  free(m->inputs);
  free(m->outputs);
  memset(m, 0, sizeof *m);
}

/* Without the config, a model batches when every input starts with -1. */
static bool model_batches(const perf_model *m) {
  if (m->max_batch_size >= 0) return m->max_batch_size > 0;
  for (int i = 0; i < m->n_inputs; i++)
    if (m->inputs[i].ndims == 0 || m->inputs[i].shape[0] != -1) return false;
  return true;
}

static const perf_shape *find_shape(const perf_shape *shapes, int n, const char *name) {
  for (int i = 0; i < n; i++)
    if (shape_name_len(&shapes[i]) == strlen(name) &&
        strncmp(shapes[i].name, name, strlen(name)) == 0)
      return &shapes[i];
  return NULL;
}

static int resolve_input(perf_tensor *t, int first, const perf_shape *s, char *err, size_t cap) {
  int rest = t->ndims - first;
  if (s && s->ndims != rest)
    return fail(
        err, cap,
        "--shape for '%s' gives %d dimension(s); the input has %d (batch dimension excluded)",
        t->name, s->ndims, rest);
  int64_t count = 1;
  for (int d = first; d < t->ndims; d++) {
    int64_t want = s ? s->dims[d - first] : t->shape[d];
    if (want < 0)
      return fail(err, cap,
                  "input '%s' has a variable dimension; give its shape with --shape %s:d1,d2,...",
                  t->name, t->name);
    if (t->shape[d] >= 0 && t->shape[d] != want)
      return fail(err, cap, "--shape for '%s': dimension %d is fixed at %lld by the model", t->name,
                  d - first, (long long)t->shape[d]);
    t->shape[d] = want;
    count *= want;
    if (count > PERF_MAX_ELEMENTS) return fail(err, cap, "input '%s' is too large", t->name);
  }
  return 0;
}

int perf_model_resolve(perf_model *m, int batch, const perf_shape *shapes, int n_shapes, char *err,
                       size_t errcap) {
  bool batched = model_batches(m);
  if (!batched && batch != 1)
    return fail(err, errcap, "the model does not batch (max_batch_size 0): -b must be 1");
  if (batched && m->max_batch_size > 0 && batch > m->max_batch_size)
    return fail(err, errcap, "-b %d is more than the model's max_batch_size %d", batch,
                m->max_batch_size);
  for (int i = 0; i < n_shapes; i++) {
    bool known = false;
    for (int j = 0; j < m->n_inputs; j++)
      known |= shape_name_len(&shapes[i]) == strlen(m->inputs[j].name) &&
               strncmp(shapes[i].name, m->inputs[j].name, strlen(m->inputs[j].name)) == 0;
    if (!known) return fail(err, errcap, "--shape %s: the model has no such input", shapes[i].name);
  }
  for (int i = 0; i < m->n_inputs; i++) {
    perf_tensor *t = &m->inputs[i];
    if (batched && t->ndims == 0)
      return fail(err, errcap, "input '%s' has no batch dimension", t->name);
    if (batched) t->shape[0] = batch;
    if (resolve_input(t, batched ? 1 : 0, find_shape(shapes, n_shapes, t->name), err, errcap) < 0)
      return -1;
  }
  return 0;
}

/* ---- values -------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* xorshift64*: cheap, fixed seed */
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

static uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static uint64_t f64_bits(double f) {
  uint64_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static void short_string(char out[9], bool random, uint64_t *rng) {
  if (!random) {
    strcpy(out, "hark");
    return;
  }
  for (int i = 0; i < 8; i++) out[i] = (char)('a' + rng_next(rng) % 26);
  out[8] = '\0';
}

static void put_json_value(dbuf *b, const dtype *t, bool random, uint64_t *rng) {
  uint64_t r = random ? rng_next(rng) : 0;
  char s[9];
  switch (t->k) {
  case K_BOOL: dbuf_printf(b, "%s", r & 1 ? "true" : "false"); break;
  case K_UINT:
  case K_INT: dbuf_printf(b, "%d", (int)(r % 100)); break;
  case K_FP32:
  case K_FP64: dbuf_printf(b, "%g", (double)(r % 1000) / 1000.0); break;
  case K_BYTES:
    short_string(s, random, rng);
    dbuf_json_string(b, s);
    break;
  default: break; /* FP16 / BF16 always go as binary */
  }
}

static void put_binary_value(dbuf *b, const dtype *t, bool random, uint64_t *rng) {
  uint64_t r = random ? rng_next(rng) : 0;
  float f = (float)(r % 1000) / 1000.0f;
  char s[9];
  switch (t->k) {
  case K_BOOL: dbuf_le(b, r & 1, 1); break;
  case K_UINT:
  case K_INT: dbuf_le(b, r % 100, t->size); break;
  case K_FP16: dbuf_le(b, random ? ((r % 15) << 10) | ((r >> 8) & 0x3ff) : 0, 2); break; /* [0,1) */
  case K_BF16: dbuf_le(b, f32_bits(f) >> 16, 2); break;
  case K_FP32: dbuf_le(b, f32_bits(f), 4); break;
  case K_FP64: dbuf_le(b, f64_bits((double)f), 8); break;
  case K_BYTES:
    short_string(s, random, rng);
    dbuf_le(b, strlen(s), 4);
    dbuf_put(b, s, strlen(s));
    break;
  }
}

static int64_t element_count(const perf_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndims; d++) n *= t->shape[d];
  return n;
}

/* ---- the body ------------------------------------------------------------ */

static void put_input(dbuf *json, dbuf *bin, const perf_tensor *t, const perf_body_opts *o,
                      uint64_t *rng) {
  const dtype *dt = find_dtype(t->datatype);
  bool binary = o->binary || dt->k == K_FP16 || dt->k == K_BF16;
  int64_t n = element_count(t);
  dbuf_printf(json, "{\"name\":");
  dbuf_json_string(json, t->name);
  dbuf_printf(json, ",\"shape\":[");
  for (int d = 0; d < t->ndims; d++)
    dbuf_printf(json, "%s%lld", d ? "," : "", (long long)t->shape[d]);
  dbuf_printf(json, "],\"datatype\":\"%s\",", t->datatype);
  if (binary) {
    size_t before = bin->len;
    for (int64_t i = 0; i < n; i++) put_binary_value(bin, dt, o->random, rng);
    dbuf_printf(json, "\"parameters\":{\"binary_data_size\":%zu}}", bin->len - before);
    return;
  }
  dbuf_printf(json, "\"data\":[");
  for (int64_t i = 0; i < n; i++) {
    if (i) dbuf_put(json, ",", 1);
    put_json_value(json, dt, o->random, rng);
  }
  dbuf_printf(json, "]}");
}

void perf_tensor_raw(const perf_tensor *t, bool random, uint64_t *rng, char **data, size_t *len) {
  dbuf b = {0};
  const dtype *dt = find_dtype(t->datatype);
  int64_t n = element_count(t);
  dbuf_reserve(&b, 1);
  for (int64_t i = 0; i < n; i++) put_binary_value(&b, dt, random, rng);
  *data = b.p;
  *len = b.len;
}

void perf_request_build(const perf_model *m, const perf_body_opts *o, const char *hostport,
                        const char *path, perf_request *r) {
  dbuf json = {0}, bin = {0}, req = {0};
  uint64_t rng = PERF_RNG_SEED;
  dbuf_printf(&json, "{\"inputs\":[");
  for (int i = 0; i < m->n_inputs; i++) {
    if (i) dbuf_put(&json, ",", 1);
    put_input(&json, &bin, &m->inputs[i], o, &rng);
  }
  dbuf_printf(&json, "]");
  if (o->binary && m->n_outputs > 0) {
    dbuf_printf(&json, ",\"outputs\":[");
    for (int i = 0; i < m->n_outputs; i++) {
      dbuf_printf(&json, "%s{\"name\":", i ? "," : "");
      dbuf_json_string(&json, m->outputs[i]);
      dbuf_printf(&json, ",\"parameters\":{\"binary_data\":true}}");
    }
    dbuf_printf(&json, "]");
  }
  dbuf_printf(&json, "}");
  r->json_len = bin.len ? json.len : 0;
  r->body_len = json.len + bin.len;
  dbuf_printf(&req, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n",
              path, hostport, r->json_len ? "application/octet-stream" : "application/json",
              r->body_len);
  if (r->json_len) dbuf_printf(&req, "Inference-Header-Content-Length: %zu\r\n", r->json_len);
  dbuf_printf(&req, "\r\n");
  dbuf_put(&req, json.p, json.len);
  if (bin.len) dbuf_put(&req, bin.p, bin.len);
  free(json.p);
  free(bin.p);
  r->data = req.p;
  r->len = req.len;
}
