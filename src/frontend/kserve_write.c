/*
 * kserve_write.c — the output side of the KServe v2 codec: a growable byte
 * buffer with JSON writers, and the infer response body (JSON, then the
 * binary outputs when the client asked for them).
 *
 * JSON is written by hand rather than through a DOM: numbers go straight
 * from the tensor into the buffer (64-bit integers exactly; floats in the
 * shortest text that reads back as the same value), with room reserved
 * once per tensor so the per-element loop does no checks.
 */
#include "frontend/kserve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- buffer --------------------------------------------------------------- */

bool hark_kserve_buf_reserve(hark_kserve_buf *b, size_t extra) {
  if (b->cap - b->len >= extra) return true;
  if (extra > SIZE_MAX - b->len) return false;
  size_t cap = b->cap ? b->cap : 256;
  while (cap - b->len < extra) {
    if (cap > SIZE_MAX / 2) {
      cap = b->len + extra;
      break;
    }
    cap *= 2;
  }
  char *d = realloc(b->data, cap);
  if (!d) return false;
  b->data = d;
  b->cap = cap;
  return true;
}

void hark_kserve_buf_free(hark_kserve_buf *b) {
  free(b->data);
  *b = (hark_kserve_buf){0};
}

bool hark_kserve_buf_put(hark_kserve_buf *b, const void *p, size_t n) {
  if (!hark_kserve_buf_reserve(b, n)) return false;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return true;
}

bool hark_kserve_buf_puts(hark_kserve_buf *b, const char *s) {
  return hark_kserve_buf_put(b, s, strlen(s));
}

/* Writes v in decimal at p (room for 20 digits); returns the length. */
static size_t fmt_u64(char *p, uint64_t v) {
  char tmp[20];
  size_t n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  for (size_t i = 0; i < n; i++) p[i] = tmp[n - 1 - i];
  return n;
}

static size_t fmt_i64(char *p, int64_t v) {
  if (v >= 0) return fmt_u64(p, (uint64_t)v);
  p[0] = '-';
  return 1 + fmt_u64(p + 1, (uint64_t)0 - (uint64_t)v);
}

bool hark_kserve_buf_put_u64(hark_kserve_buf *b, uint64_t v) {
  if (!hark_kserve_buf_reserve(b, 20)) return false;
  b->len += fmt_u64(b->data + b->len, v);
  return true;
}

bool hark_kserve_buf_put_i64(hark_kserve_buf *b, int64_t v) {
  if (!hark_kserve_buf_reserve(b, 21)) return false;
  b->len += fmt_i64(b->data + b->len, v);
  return true;
}

/* Length of the valid UTF-8 sequence at s (1..4), or 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t left) {
  unsigned char c = s[0];
  size_t n;
  uint32_t cp;
  if (c >= 0xC2 && c <= 0xDF)
    n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF)
    n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4)
    n = 4, cp = c & 0x07;
  else
    return 0;
  if (left < n) return 0;
  for (size_t i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80) return 0;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return n;
}

/* Writes s escaped into room already reserved (6 bytes per input byte). */
static size_t fmt_jstr(char *w, const char *s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  const unsigned char *p = (const unsigned char *)s, *e = p + n;
  char *start = w;
  *w++ = '"';
  while (p < e) {
    unsigned char c = *p;
    if (c >= 0x20 && c < 0x80 && c != '"' && c != '\\') {
      *w++ = (char)c;
      p++;
      continue;
    }
    if (c >= 0x80) {
      size_t u = utf8_len(p, (size_t)(e - p));
      if (u) {
        memcpy(w, p, u);
        w += u;
        p += u;
        continue;
      }
    }
    *w++ = '\\';
    switch (c) {
      case '"': *w++ = '"'; break;
      case '\\': *w++ = '\\'; break;
      case '\n': *w++ = 'n'; break;
      case '\r': *w++ = 'r'; break;
      case '\t': *w++ = 't'; break;
      default:
        *w++ = 'u';
        *w++ = '0';
        *w++ = '0';
        *w++ = hex[c >> 4];
        *w++ = hex[c & 15];
    }
    p++;
  }
  *w++ = '"';
  return (size_t)(w - start);
}

bool hark_kserve_buf_put_jstr(hark_kserve_buf *b, const char *s, size_t n) {
  if (n > (SIZE_MAX - 2) / 6 || !hark_kserve_buf_reserve(b, n * 6 + 2)) return false;
  b->len += fmt_jstr(b->data + b->len, s, n);
  return true;
}

bool hark_kserve_buf_put_error(hark_kserve_buf *b, const char *message) {
  return hark_kserve_buf_puts(b, "{\"error\":") &&
         hark_kserve_buf_put_jstr(b, message, strlen(message)) && hark_kserve_buf_puts(b, "}");
}

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
    case HARK_TYPE_UINT8: return fmt_u64(w, d[i]);
    case HARK_TYPE_INT8: return fmt_i64(w, (int8_t)d[i]);
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
    case HARK_TYPE_UINT16: return fmt_u64(w, v.u16);
    case HARK_TYPE_INT16: return fmt_i64(w, v.i16);
    case HARK_TYPE_UINT32: return fmt_u64(w, v.u32);
    case HARK_TYPE_INT32: return fmt_i64(w, v.i32);
    case HARK_TYPE_UINT64: return fmt_u64(w, v.u64);
    case HARK_TYPE_INT64: return fmt_i64(w, v.i64);
    case HARK_TYPE_FP16: return fmt_float(w, half_to_float(v.u16));
    case HARK_TYPE_BF16: return fmt_float(w, bf16_to_float(v.u16));
    case HARK_TYPE_FP32: return fmt_float(w, v.f);
    case HARK_TYPE_FP64: return fmt_double(w, v.g);
    default: return 0;
  }
}

static hark_error *oom(void) { return hark_error_new(HARK_ERR_INTERNAL, "out of memory"); }

static hark_error *write_bytes_data(hark_kserve_buf *out, const hark_tensor *t) {
  const unsigned char *p = t->data;
  size_t left = t->byte_size;
  /* Escaping at most sextuples a byte; the length prefixes become commas. */
  if (left > (SIZE_MAX - 2) / 6 || !hark_kserve_buf_reserve(out, left * 6 + 2)) return oom();
  char *w = out->data + out->len;
  *w++ = '[';
  for (bool first = true; left; first = false) {
    uint32_t len;
    if (left < 4) goto bad;
    memcpy(&len, p, 4);
    if (len > left - 4) goto bad;
    if (!first) *w++ = ',';
    w += fmt_jstr(w, (const char *)p + 4, len);
    p += 4 + (size_t)len;
    left -= 4 + (size_t)len;
  }
  *w++ = ']';
  out->len = (size_t)(w - out->data);
  return NULL;
bad:
  return hark_error_new(HARK_ERR_INTERNAL, "output '%s' holds malformed BYTES data", t->name);
}

static hark_error *write_data(hark_kserve_buf *out, const hark_tensor *t) {
  if (t->datatype == HARK_TYPE_BYTES) return write_bytes_data(out, t);
  size_t es = hark_datatype_size(t->datatype);
  if (!es) return hark_error_new(HARK_ERR_INTERNAL, "output '%s' has no data type", t->name);
  size_t n = t->byte_size / es, width = element_width(t->datatype);
  if (n > (SIZE_MAX - 2) / width || !hark_kserve_buf_reserve(out, n * width + 2)) return oom();
  char *w = out->data + out->len;
  *w++ = '[';
  for (size_t i = 0; i < n; i++) {
    if (i) *w++ = ',';
    w += fmt_element(w, t->data, t->datatype, i);
  }
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

/* Whether output `t` goes out in the response at all, and as binary. */
static bool output_wanted(const hark_kserve_request *r, const hark_tensor *t, bool *binary) {
  const hark_kserve_output *o = find_output(r, t->name);
  if (r && r->n_outputs && !o) return false;
  *binary = o && o->binary >= 0 ? o->binary == 1 : r && r->binary_data_output;
  return true;
}

static bool write_shape(hark_kserve_buf *out, const hark_tensor *t) {
  if (!hark_kserve_buf_puts(out, "\"shape\":[")) return false;
  for (uint32_t d = 0; d < t->ndims; d++)
    if ((d && !hark_kserve_buf_puts(out, ",")) || !hark_kserve_buf_put_i64(out, t->shape[d]))
      return false;
  return hark_kserve_buf_puts(out, "]");
}

static hark_error *write_output(hark_kserve_buf *out, const hark_tensor *t, bool binary) {
  const char *dt = hark_datatype_name(t->datatype);
  bool ok = hark_kserve_buf_puts(out, "{\"name\":") &&
            hark_kserve_buf_put_jstr(out, t->name, strlen(t->name)) &&
            hark_kserve_buf_puts(out, ",\"datatype\":\"") && hark_kserve_buf_puts(out, dt) &&
            hark_kserve_buf_puts(out, "\",") && write_shape(out, t);
  if (!ok) return oom();
  if (binary) {
    ok = hark_kserve_buf_puts(out, ",\"parameters\":{\"binary_data_size\":") &&
         hark_kserve_buf_put_u64(out, t->byte_size) && hark_kserve_buf_puts(out, "}}");
    return ok ? NULL : oom();
  }
  if (!hark_kserve_buf_puts(out, ",\"data\":")) return oom();
  hark_error *err = write_data(out, t);
  if (err) return err;
  return hark_kserve_buf_puts(out, "}") ? NULL : oom();
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

static bool write_head(hark_kserve_buf *out, const hark_response *resp, const char *model_name,
                       int64_t model_version, const hark_kserve_request *r) {
  const char *id = hark_response_id(resp);
  bool ok = hark_kserve_buf_puts(out, "{\"model_name\":") &&
            hark_kserve_buf_put_jstr(out, model_name, strlen(model_name)) &&
            hark_kserve_buf_puts(out, ",\"model_version\":\"") &&
            hark_kserve_buf_put_i64(out, model_version) && hark_kserve_buf_puts(out, "\"");
  if (ok && id && *id)
    ok = hark_kserve_buf_puts(out, ",\"id\":") && hark_kserve_buf_put_jstr(out, id, strlen(id));
  uint32_t np = hark_response_parameter_count(resp);
  const hark_kserve_param *seq = sequence_param(r);
  if (ok && (np || seq)) {
    ok = hark_kserve_buf_puts(out, ",\"parameters\":{");
    bool first = true;
    if (ok && seq) {
      ok = hark_kserve_buf_puts(out, "\"sequence_id\":") &&
           (seq->type == HARK_KSERVE_PARAM_INT
                ? hark_kserve_buf_puts(out, seq->value)
                : hark_kserve_buf_put_jstr(out, seq->value, strlen(seq->value)));
      first = false;
    }
    for (uint32_t i = 0; ok && i < np; i++) {
      const char *key, *value = hark_response_parameter_at(resp, i, &key);
      if (seq && strcmp(key, "sequence_id") == 0) continue; /* echoed above */
      ok = (first || hark_kserve_buf_puts(out, ",")) &&
           hark_kserve_buf_put_jstr(out, key, strlen(key)) && hark_kserve_buf_puts(out, ":") &&
           hark_kserve_buf_put_jstr(out, value, strlen(value));
      first = false;
    }
    ok = ok && hark_kserve_buf_puts(out, "}");
  }
  return ok && hark_kserve_buf_puts(out, ",\"outputs\":[");
}

hark_error *hark_kserve_write_response(hark_kserve_buf *out, const hark_response *resp,
                                       const char *model_name, int64_t model_version,
                                       const hark_kserve_request *r, size_t *json_len,
                                       bool *any_binary) {
  size_t start = out->len;
  *any_binary = false;
  if (!write_head(out, resp, model_name, model_version, r)) return oom();
  uint32_t n = hark_response_output_count(resp), written = 0;
  for (uint32_t i = 0; i < n; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    bool binary;
    if (!output_wanted(r, t, &binary)) continue;
    if (written++ && !hark_kserve_buf_puts(out, ",")) return oom();
    hark_error *err = write_output(out, t, binary);
    if (err) return err;
    *any_binary |= binary;
  }
  if (!hark_kserve_buf_puts(out, "]}")) return oom();
  *json_len = out->len - start;
  for (uint32_t i = 0; *any_binary && i < n; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    bool binary;
    if (output_wanted(r, t, &binary) && binary && !hark_kserve_buf_put(out, t->data, t->byte_size))
      return oom();
  }
  return NULL;
}
