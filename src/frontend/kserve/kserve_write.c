/*
 * kserve_write.c — the infer response body (JSON, then the binary outputs
 * when the client asked for them).
 *
 * JSON is written by hand rather than through a DOM: numbers go straight
 * from the tensor into the buffer (64-bit integers exactly; floats in the
 * shortest text that reads back as the same value), with room reserved
 * once per tensor so the per-element loop does no checks. The tensors'
 * text is client-sized, so its room is asked for and a failure is the
 * client's error; the small parts around it never fail (util/alloc.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kserve/kserve.h"

/* ---- numbers -------------------------------------------------------------- */

/* JSON has no NaN or infinity: they are written as null. */
static size_t fmt_float(char *p, float f) {
  if (!isfinite(f)) return (size_t)(memcpy(p, "null", 4), 4);
  int n = snprintf(p, 32, "%.7g", (double)f);
  if (strtof(p, NULL) != f) n = snprintf(p, 32, "%.9g", (double)f);
  return (size_t)n;
}

static size_t fmt_double(char *p, double d) {
  if (!isfinite(d)) return (size_t)(memcpy(p, "null", 4), 4);
  int n = snprintf(p, 32, "%.15g", d);
  if (strtod(p, NULL) != d) n = snprintf(p, 32, "%.17g", d);
  return (size_t)n;
}

static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = h >> 10 & 0x1F, man = h & 0x3FF;
  float f;
  if (exp == 0) {
    f = ldexpf((float)man, -24); /* zero or subnormal */
    return sign ? -f : f;
  }
  uint32_t bits =
      exp == 0x1F ? sign | 0x7F800000u | man << 13 : sign | (exp + 112) << 23 | man << 13;
  memcpy(&f, &bits, 4);
  return f;
}

static float bf16_to_float(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* Widest text of one element plus its comma. */
static size_t element_width(hark_datatype dt) {
  switch (dt) {
  case HARK_TYPE_BOOL: return 6;
  case HARK_TYPE_FP16:
  case HARK_TYPE_BF16:
  case HARK_TYPE_FP32: return 33;
  case HARK_TYPE_FP64: return 33;
  default: return 22;
  }
}

/* Writes element i of a fixed-size tensor; returns its length. */
static size_t fmt_element(char *w, const unsigned char *d, hark_datatype dt, size_t i) {
  switch (dt) {
  case HARK_TYPE_BOOL: return d[i] ? (memcpy(w, "true", 4), 4) : (memcpy(w, "false", 5), 5);
  case HARK_TYPE_UINT8: return hark_fmt_u64(w, d[i]);
  case HARK_TYPE_INT8: return hark_fmt_i64(w, (int8_t)d[i]);
  default: break;
  }
  union {
    uint16_t u16;
    int16_t i16;
    uint32_t u32;
    int32_t i32;
    uint64_t u64;
    int64_t i64;
    float f;
    double g;
  } v;
  size_t es = hark_datatype_size(dt);
  memcpy(&v, d + i * es, es);
  switch (dt) {
  case HARK_TYPE_UINT16: return hark_fmt_u64(w, v.u16);
  case HARK_TYPE_INT16: return hark_fmt_i64(w, v.i16);
  case HARK_TYPE_UINT32: return hark_fmt_u64(w, v.u32);
  case HARK_TYPE_INT32: return hark_fmt_i64(w, v.i32);
  case HARK_TYPE_UINT64: return hark_fmt_u64(w, v.u64);
  case HARK_TYPE_INT64: return hark_fmt_i64(w, v.i64);
  case HARK_TYPE_FP16: return fmt_float(w, half_to_float(v.u16));
  case HARK_TYPE_BF16: return fmt_float(w, bf16_to_float(v.u16));
  case HARK_TYPE_FP32: return fmt_float(w, v.f);
  case HARK_TYPE_FP64: return fmt_double(w, v.g);
  default: return 0;
  }
}

static hark_error *too_big(const hark_tensor *t) {
  return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED,
                        "out of memory for the response: output '%s' of %zu bytes", t->name,
                        t->byte_size);
}

static hark_error *write_bytes_data(hark_buf *out, const hark_tensor *t) {
  const unsigned char *p = t->data;
  size_t left = t->byte_size;
  /* Escaping at most sextuples a byte; the length prefixes become commas. */
  if (left > (SIZE_MAX - 2) / 6 || !hark_buf_reserve(out, HARK_JSTR_ROOM(left))) return too_big(t);
  char *w = out->data + out->len;
  *w++ = '[';
  for (bool first = true; left; first = false) {
    uint32_t len;
    if (left < 4) goto bad;
    len = hark_bytes_get_len(p);
    if (len > left - 4) goto bad;
    if (!first) *w++ = ',';
    w += hark_fmt_jstr(w, (const char *)p + 4, len);
    p += 4 + (size_t)len;
    left -= 4 + (size_t)len;
  }
  *w++ = ']';
  out->len = (size_t)(w - out->data);
  return NULL;
bad:
  return hark_error_new(HARK_ERR_INTERNAL, "output '%s' holds malformed BYTES data", t->name);
}

static hark_error *write_data(hark_buf *out, const hark_tensor *t) {
  if (t->datatype == HARK_TYPE_BYTES) return write_bytes_data(out, t);
  size_t es = hark_datatype_size(t->datatype);
  if (!es) return hark_error_new(HARK_ERR_INTERNAL, "output '%s' has no data type", t->name);
  size_t n = t->byte_size / es, width = element_width(t->datatype);
  if (n > (SIZE_MAX - 2) / width || !hark_buf_reserve(out, n * width + 2)) return too_big(t);
  char *w = out->data + out->len;
  const unsigned char *d = t->data;
  *w++ = '[';
  /* The integer types, the common case, without a switch per element. */
#define WRITE_INTS(T, FMT)                  \
  for (size_t i = 0; i < n; i++) {          \
    T x;                                    \
    memcpy(&x, d + i * sizeof x, sizeof x); \
    if (i) *w++ = ',';                      \
    w += FMT(w, x);                         \
  }
  switch (t->datatype) {
  case HARK_TYPE_INT16: WRITE_INTS(int16_t, hark_fmt_i64); break;
  case HARK_TYPE_UINT16: WRITE_INTS(uint16_t, hark_fmt_u64); break;
  case HARK_TYPE_INT32: WRITE_INTS(int32_t, hark_fmt_i64); break;
  case HARK_TYPE_UINT32: WRITE_INTS(uint32_t, hark_fmt_u64); break;
  case HARK_TYPE_INT64: WRITE_INTS(int64_t, hark_fmt_i64); break;
  case HARK_TYPE_UINT64: WRITE_INTS(uint64_t, hark_fmt_u64); break;
  default:
    for (size_t i = 0; i < n; i++) {
      if (i) *w++ = ',';
      w += fmt_element(w, d, t->datatype, i);
    }
  }
#undef WRITE_INTS
  *w++ = ']';
  out->len = (size_t)(w - out->data);
  return NULL;
}

/* ---- the response ------------------------------------------------------------ */

static const hark_kserve_output *find_output(const hark_kserve_request *r, const char *name) {
  for (uint32_t i = 0; r && i < r->n_outputs; i++)
    if (strcmp(r->outputs[i].name, name) == 0) return &r->outputs[i];
  return NULL;
}

/* Whether output `t` goes out in the response at all, and as binary (never
 * when it goes to shared memory: *shm is then its request). */
static bool output_wanted(const hark_kserve_request *r, const hark_tensor *t, bool *binary,
                          const hark_kserve_output **shm) {
  const hark_kserve_output *o = find_output(r, t->name);
  if (r && r->n_outputs && !o) return false;
  *shm = o && o->shm ? o : NULL;
  *binary = !*shm && (o && o->binary >= 0 ? o->binary == 1 : r && r->binary_data_output);
  return true;
}

static void write_shape(hark_buf *out, const hark_tensor *t) {
  hark_buf_puts(out, "\"shape\":[");
  for (uint32_t d = 0; d < t->ndims; d++) {
    if (d) hark_buf_puts(out, ",");
    hark_buf_put_i64(out, t->shape[d]);
  }
  hark_buf_puts(out, "]");
}

static hark_error *write_output(hark_buf *out, const hark_tensor *t, bool binary,
                                const hark_kserve_output *shm) {
  hark_error *err = NULL;
  if (shm && (err = hark_kserve_shm_write(shm->shm, shm->shm_offset, shm->shm_byte_size, t)))
    return err;
  hark_buf_puts(out, "{\"name\":");
  hark_buf_put_str(out, t->name);
  hark_buf_puts(out, ",\"datatype\":\"");
  hark_buf_puts(out, hark_datatype_name(t->datatype));
  hark_buf_puts(out, "\",");
  write_shape(out, t);
  if (shm) { /* the data is in the region, as Triton answers */
    hark_buf_puts(out, ",\"parameters\":{\"shared_memory_region\":");
    hark_buf_put_str(out, shm->shm_region);
    hark_buf_puts(out, ",\"shared_memory_byte_size\":");
    hark_buf_put_u64(out, t->byte_size);
    if (shm->shm_offset) {
      hark_buf_puts(out, ",\"shared_memory_offset\":");
      hark_buf_put_u64(out, shm->shm_offset);
    }
    hark_buf_puts(out, "}}");
    return NULL;
  }
  if (binary) {
    hark_buf_puts(out, ",\"parameters\":{\"binary_data_size\":");
    hark_buf_put_u64(out, t->byte_size);
    hark_buf_puts(out, "}}");
    return NULL;
  }
  hark_buf_puts(out, ",\"data\":");
  err = write_data(out, t);
  if (!err) hark_buf_puts(out, "}");
  return err;
}

/* The request's sequence_id parameter, echoed in the response's parameters
 * with its JSON type (integer or string), as Triton does; NULL if none. */
static const hark_kserve_param *sequence_param(const hark_kserve_request *r) {
  for (uint32_t i = 0; r && i < r->n_params; i++)
    if (strcmp(r->params[i].key, "sequence_id") == 0 &&
        (r->params[i].type == HARK_KSERVE_PARAM_INT ||
         r->params[i].type == HARK_KSERVE_PARAM_STRING))
      return &r->params[i];
  return NULL;
}

static void write_head(hark_buf *out, const hark_response *resp, const char *model_name,
                       int64_t model_version, const hark_kserve_request *r) {
  const char *id = hark_response_id(resp);
  hark_buf_puts(out, "{\"model_name\":");
  hark_buf_put_str(out, model_name);
  hark_buf_puts(out, ",\"model_version\":\"");
  hark_buf_put_i64(out, model_version);
  hark_buf_puts(out, "\"");
  if (id && *id) {
    hark_buf_puts(out, ",\"id\":");
    hark_buf_put_str(out, id);
  }
  uint32_t np = hark_response_parameter_count(resp);
  const hark_kserve_param *seq = sequence_param(r);
  if (np || seq) {
    hark_buf_puts(out, ",\"parameters\":{");
    bool first = true;
    if (seq) {
      hark_buf_puts(out, "\"sequence_id\":");
      if (seq->type == HARK_KSERVE_PARAM_INT)
        hark_buf_puts(out, seq->value);
      else
        hark_buf_put_str(out, seq->value);
      first = false;
    }
    for (uint32_t i = 0; i < np; i++) {
      const char *key, *value = hark_response_parameter_at(resp, i, &key);
      if (seq && strcmp(key, "sequence_id") == 0) continue; /* echoed above */
      if (!first) hark_buf_puts(out, ",");
      hark_buf_put_str(out, key);
      hark_buf_puts(out, ":");
      hark_buf_put_str(out, value);
      first = false;
    }
    hark_buf_puts(out, "}");
  }
  hark_buf_puts(out, ",\"outputs\":[");
}

hark_error *hark_kserve_write_response(hark_buf *out, const hark_response *resp,
                                       const char *model_name, int64_t model_version,
                                       const hark_kserve_request *r, size_t *json_len,
                                       bool *any_binary) {
  size_t start = out->len;
  *any_binary = false;
  write_head(out, resp, model_name, model_version, r);
  uint32_t n = hark_response_output_count(resp), written = 0;
  for (uint32_t i = 0; i < n; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    const hark_kserve_output *shm;
    bool binary;
    if (!output_wanted(r, t, &binary, &shm)) continue;
    if (written++) hark_buf_puts(out, ",");
    hark_error *err = write_output(out, t, binary, shm);
    if (err) return err;
    *any_binary |= binary;
  }
  hark_buf_puts(out, "]}");
  *json_len = out->len - start;
  for (uint32_t i = 0; *any_binary && i < n; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    const hark_kserve_output *shm;
    bool binary;
    if (output_wanted(r, t, &binary, &shm) && binary &&
        !hark_buf_append(out, t->data, t->byte_size))
      return too_big(t);
  }
  return NULL;
}
