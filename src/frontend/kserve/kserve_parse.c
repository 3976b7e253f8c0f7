/*
 * kserve_parse.c — parses KServe v2 infer requests (JSON, and JSON + binary
 * tensor data) into tensors the engine can use, and builds hark_requests.
 *
 * A small purpose-built JSON reader rather than a DOM: the body is read
 * once, strings (names, ids) are decoded where they lie, and "data" arrays
 * are converted straight into the packed little-endian layout the engine
 * expects. It also keeps 64-bit integers exact, which a DOM storing numbers
 * as doubles (cJSON) cannot. Because "data" may come before "datatype" in
 * an input object, the reader notes where "data" starts, skips it, and
 * converts it once the object is complete. Everything parsing allocates
 * lives in one arena, handed to the request so it is freed with it.
 * Response writing and the output buffer live in kserve_write.c.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kserve/json_read.h"
#include "frontend/kserve/kserve.h"

/* ---- the parser ----------------------------------------------------------- */

typedef struct parser {
  hark_jr jr;
  hark_arena *arena;
} parser;

/* A member's name against one this parser knows (most differ at once). */
static inline bool key_is(const char *key, const char *name) {
  while (*name && *key == *name) key++, name++;
  return *key == *name;
}

/* ---- request parameters -------------------------------------------------- */

/* Arena memory for the request (client-sized: a failure is its error). */
static void *alloc(parser *ps, size_t n) {
  void *p = hark_arena_alloc(ps->arena, n);
  if (!p) hark_jr_fail(&ps->jr, "out of memory");
  return p;
}

static char *arena_strndup(parser *ps, const char *s, size_t n) {
  char *d = hark_arena_strndup(ps->arena, s, n);
  if (!d) hark_jr_fail(&ps->jr, "out of memory");
  return d;
}

/* Grows an arena array of `size`-byte items, n of them used and *cap
 * allocated, to hold n + 1 (doubling). */
static void *grow(parser *ps, void *arr, uint32_t n, size_t *cap, size_t size) {
  if (n >= UINT32_MAX / 2) {
    hark_jr_fail(&ps->jr, "too many items");
    return NULL;
  }
  void *na = hark_arena_grow(ps->arena, arr, n, cap, size);
  if (!na) hark_jr_fail(&ps->jr, "out of memory");
  return na;
}

/* One parameter value: string, number or boolean. */
static bool read_param(parser *ps, const char *key, hark_kserve_param *out) {
  hark_jr_skip_ws(&ps->jr);
  out->key = key;
  char c = ps->jr.p < ps->jr.end ? *ps->jr.p : '\0';
  if (c == '"') {
    out->type = HARK_KSERVE_PARAM_STRING;
    return hark_jr_string(&ps->jr, &out->value, NULL);
  }
  if (c == 't' || c == 'f') {
    bool b;
    out->type = HARK_KSERVE_PARAM_BOOL;
    out->value = c == 't' ? "true" : "false";
    return hark_jr_bool(&ps->jr, &b, key);
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    hark_jr_num num;
    if (!hark_jr_number(&ps->jr, &num)) return false;
    out->type = num.integer ? HARK_KSERVE_PARAM_INT : HARK_KSERVE_PARAM_NUMBER;
    out->value = arena_strndup(ps, num.text, num.len);
    return out->value != NULL;
  }
  return hark_jr_fail(&ps->jr, "parameter '%s' must be a string, number or boolean", key);
}

static bool too_many_params(parser *ps) {
  return hark_jr_fail(&ps->jr, "request has more than %d parameters; at most %d are allowed",
                      HARK_KSERVE_MAX_PARAMETERS, HARK_KSERVE_MAX_PARAMETERS);
}

static bool read_params(parser *ps, hark_kserve_request *r) {
  bool first = true, done;
  const char *key;
  size_t cap = 0;
  uint32_t seen = 0;
  while (hark_jr_next_member(&ps->jr, &first, &key, &done) && !done) {
    /* Stop at the first one too many: the rest is never read. */
    if (++seen > HARK_KSERVE_MAX_PARAMETERS) return too_many_params(ps);
    if (key_is(key, "binary_data_output")) {
      if (!hark_jr_bool(&ps->jr, &r->binary_data_output, "parameter 'binary_data_output'"))
        return false;
      continue;
    }
    hark_kserve_param *grown = grow(ps, r->params, r->n_params, &cap, sizeof *grown);
    if (!grown) return false;
    r->params = grown;
    if (!read_param(ps, key, &r->params[r->n_params])) return false;
    r->n_params++;
  }
  return !ps->jr.err;
}

/* ---- inputs --------------------------------------------------------------- */

typedef struct input_doc {
  const char *name, *datatype;
  bool has_shape, has_size;
  uint32_t ndims;
  int64_t shape[HARK_MAX_DIMS];
  uint64_t binary_size;
  char *data, *data_end; /* where the "data" value starts (or NULL) and ends */
  const char *shm_region;
  bool has_shm, has_shm_size; /* some / the byte size shared_memory_ parameter */
  uint64_t shm_offset, shm_byte_size;
} input_doc;

static bool read_shape(parser *ps, input_doc *d) {
  bool first = true, done;
  d->has_shape = true;
  d->ndims = 0;
  while (hark_jr_next_element(&ps->jr, &first, &done) && !done) {
    hark_jr_num num;
    int64_t v;
    hark_jr_skip_ws(&ps->jr);
    if (ps->jr.p >= ps->jr.end || (*ps->jr.p != '-' && (*ps->jr.p < '0' || *ps->jr.p > '9')))
      return hark_jr_fail(&ps->jr, "input '%s': shape must be an array of integers",
                          d->name ? d->name : "?");
    if (!hark_jr_number(&ps->jr, &num)) return false;
    if (!hark_jr_to_i64(&num, 0, INT64_MAX, &v))
      return hark_jr_fail(&ps->jr, "input '%s': shape dimensions must be non-negative integers",
                          d->name ? d->name : "?");
    if (d->ndims == HARK_MAX_DIMS)
      return hark_jr_fail(&ps->jr, "input '%s': shape has more than %d dimensions",
                          d->name ? d->name : "?", HARK_MAX_DIMS);
    d->shape[d->ndims++] = v;
  }
  return !ps->jr.err;
}

/* A non-negative integer parameter `key` of tensor `what` ('input' or
 * 'output') named `name`. */
static bool read_size_param(parser *ps, const char *what, const char *name, const char *key,
                            uint64_t *out) {
  hark_jr_num num;
  hark_jr_skip_ws(&ps->jr);
  char c = ps->jr.p < ps->jr.end ? *ps->jr.p : '\0';
  if ((c != '-' && (c < '0' || c > '9')) || !hark_jr_number(&ps->jr, &num) ||
      !hark_jr_to_u64(&num, UINT64_MAX, out))
    return hark_jr_fail(&ps->jr, "%s '%s': %s must be a non-negative integer", what,
                        name ? name : "?", key);
  return true;
}

/* The shared_memory_* parameters of an input or a requested output; false
 * (and no error) when `key` is none of them. */
static bool read_shm_param(parser *ps, const char *what, const char *name, const char *key,
                           const char **region, uint64_t *offset, uint64_t *size, bool *has_size,
                           bool *matched) {
  *matched = true;
  if (key_is(key, "shared_memory_region")) {
    if (!hark_jr_peek(&ps->jr, '"'))
      return hark_jr_fail(&ps->jr, "%s '%s': shared_memory_region must be a string", what,
                          name ? name : "?");
    return hark_jr_string(&ps->jr, region, NULL);
  }
  if (key_is(key, "shared_memory_offset")) return read_size_param(ps, what, name, key, offset);
  if (key_is(key, "shared_memory_byte_size")) {
    *has_size = true;
    return read_size_param(ps, what, name, key, size);
  }
  *matched = false;
  return true;
}

static bool read_input_params(parser *ps, input_doc *d) {
  bool first = true, done;
  const char *key;
  while (hark_jr_next_member(&ps->jr, &first, &key, &done) && !done) {
    bool shm = false;
    if (key_is(key, "binary_data_size")) {
      if (!read_size_param(ps, "input", d->name, key, &d->binary_size)) return false;
      d->has_size = true;
    } else if (!read_shm_param(ps, "input", d->name, key, &d->shm_region, &d->shm_offset,
                               &d->shm_byte_size, &d->has_shm_size, &shm)) {
      return false;
    } else if (!shm && !hark_jr_skip(&ps->jr)) {
      return false;
    }
    d->has_shm |= shm;
  }
  return !ps->jr.err;
}

static bool read_input_doc(parser *ps, input_doc *d) {
  bool first = true, done;
  const char *key;
  while (hark_jr_next_member(&ps->jr, &first, &key, &done) && !done) {
    if (key_is(key, "name")) {
      if (!hark_jr_string(&ps->jr, &d->name, NULL)) return false;
    } else if (key_is(key, "datatype")) {
      if (!hark_jr_string(&ps->jr, &d->datatype, NULL)) return false;
    } else if (key_is(key, "shape")) {
      if (!read_shape(ps, d)) return false;
    } else if (key_is(key, "parameters")) {
      if (!read_input_params(ps, d)) return false;
    } else if (key_is(key, "data")) {
      hark_jr_skip_ws(&ps->jr);
      d->data = ps->jr.p;
      if (!hark_jr_skip(&ps->jr)) return false;
      d->data_end = ps->jr.p;
    } else if (!hark_jr_skip(&ps->jr)) {
      return false;
    }
  }
  return !ps->jr.err;
}

/* ---- JSON tensor data ----------------------------------------------------- */

typedef struct conv {
  parser *ps;
  const hark_kserve_input *in;
  bool keep;          /* store elements (false once the count is known to be wrong) */
  bool oom;           /* a buffer could not be had */
  unsigned char *buf; /* grows with the elements seen, never past what the shape needs */
  size_t cap, used;
  int64_t want, seen;
} conv;

/* Room for n more bytes: the buffer doubles as elements arrive, so what a
 * request costs follows the data it sent, not the shape it declared. */
static bool reserve(conv *cv, size_t n) {
  if (cv->used + n <= cv->cap) return true;
  size_t cap = cv->cap ? cv->cap : 256;
  while (cap < cv->used + n) cap *= 2;
  unsigned char *nb = hark_arena_alloc(cv->ps->arena, cap);
  if (!nb) {
    cv->oom = true;
    cv->keep = false;
    return false;
  }
  if (cv->used) memcpy(nb, cv->buf, cv->used);
  cv->buf = nb;
  cv->cap = cap;
  return true;
}

static bool bad_element(conv *cv, const char *expected) {
  return hark_jr_fail(&cv->ps->jr, "input '%s': data element %lld is not %s", cv->in->name,
                      (long long)cv->seen, expected);
}

static void store(conv *cv, const void *v, size_t n) {
  if (!cv->keep || cv->seen >= cv->want || !reserve(cv, n)) return;
  memcpy(cv->buf + cv->used, v, n);
  cv->used += n;
}

static bool bad_integer(conv *cv) {
  char what[48];
  snprintf(what, sizeof what, "an integer in range for %s", hark_datatype_name(cv->in->datatype));
  return bad_element(cv, what);
}

static bool convert_int(conv *cv, const hark_jr_num *num) {
  hark_datatype dt = cv->in->datatype;
  static const int64_t lo[] = {[HARK_TYPE_INT8] = INT8_MIN,
                               [HARK_TYPE_INT16] = INT16_MIN,
                               [HARK_TYPE_INT32] = INT32_MIN,
                               [HARK_TYPE_INT64] = INT64_MIN};
  static const int64_t hi[] = {[HARK_TYPE_INT8] = INT8_MAX,
                               [HARK_TYPE_INT16] = INT16_MAX,
                               [HARK_TYPE_INT32] = INT32_MAX,
                               [HARK_TYPE_INT64] = INT64_MAX};
  static const uint64_t uhi[] = {[HARK_TYPE_UINT8] = UINT8_MAX,
                                 [HARK_TYPE_UINT16] = UINT16_MAX,
                                 [HARK_TYPE_UINT32] = UINT32_MAX,
                                 [HARK_TYPE_UINT64] = UINT64_MAX};
  if (dt >= HARK_TYPE_INT8 && dt <= HARK_TYPE_INT64) {
    int64_t v;
    if (!hark_jr_to_i64(num, lo[dt], hi[dt], &v)) return bad_integer(cv);
    int8_t i8 = (int8_t)v;
    int16_t i16 = (int16_t)v;
    int32_t i32 = (int32_t)v;
    if (dt == HARK_TYPE_INT8)
      store(cv, &i8, 1);
    else if (dt == HARK_TYPE_INT16)
      store(cv, &i16, 2);
    else if (dt == HARK_TYPE_INT32)
      store(cv, &i32, 4);
    else
      store(cv, &v, 8);
    return true;
  }
  uint64_t v;
  if (!hark_jr_to_u64(num, uhi[dt], &v)) return bad_integer(cv);
  uint8_t u8 = (uint8_t)v;
  uint16_t u16 = (uint16_t)v;
  uint32_t u32 = (uint32_t)v;
  if (dt == HARK_TYPE_UINT8)
    store(cv, &u8, 1);
  else if (dt == HARK_TYPE_UINT16)
    store(cv, &u16, 2);
  else if (dt == HARK_TYPE_UINT32)
    store(cv, &u32, 4);
  else
    store(cv, &v, 8);
  return true;
}

static bool convert_scalar(conv *cv) {
  parser *ps = cv->ps;
  hark_datatype dt = cv->in->datatype;
  char c = ps->jr.p < ps->jr.end ? *ps->jr.p : '\0';
  if (dt == HARK_TYPE_BYTES) {
    if (c != '"') return bad_element(cv, "a string (BYTES)");
    size_t n;
    const char *after = hark_jr_scan_string(ps->jr.p, ps->jr.end, &n);
    if (!after) return hark_jr_syntax(&ps->jr, "bad string");
    if (cv->keep && cv->seen < cv->want && n <= UINT32_MAX && reserve(cv, 4 + n)) {
      unsigned char *w = cv->buf + cv->used;
      hark_jr_decode_string(ps->jr.p, ps->jr.end, (char *)w + 4, &n);
      hark_bytes_put_len(w, (uint32_t)n);
      cv->used += 4 + n;
    }
    ps->jr.p = (char *)after;
    return true;
  }
  if (dt == HARK_TYPE_BOOL) {
    if (c != 't' && c != 'f') return bad_element(cv, "a boolean (BOOL)");
    if (!hark_jr_literal(&ps->jr, c == 't' ? "true" : "false")) return false;
    uint8_t b = c == 't';
    store(cv, &b, 1);
    return true;
  }
  if (c != '-' && (c < '0' || c > '9')) {
    char what[32];
    snprintf(what, sizeof what, "a number (%s)", hark_datatype_name(dt));
    return bad_element(cv, what);
  }
  hark_jr_num num;
  if (!hark_jr_number(&ps->jr, &num)) return false;
  if (dt == HARK_TYPE_FP32 || dt == HARK_TYPE_FP64) {
    double d;
    if (!hark_jr_to_double(&num, &d) || (dt == HARK_TYPE_FP32 && fabs(d) > FLT_MAX))
      return bad_element(
          cv, dt == HARK_TYPE_FP32 ? "a number in range for FP32" : "a number in range for FP64");
    float f = (float)d;
    if (dt == HARK_TYPE_FP32)
      store(cv, &f, 4);
    else
      store(cv, &d, 8);
    return true;
  }
  return convert_int(cv, &num);
}

/*
 * The usual integer tensor: a flat array of as many integers as the shape
 * needs, each in range, read in one loop without a call an element into a
 * buffer sized once (the text holds at least two bytes an element, so the
 * size follows what was sent). False, with nothing kept or consumed, at
 * anything else (nesting, a fraction or exponent, more than 18 digits, a
 * value out of range, a count that differs), which convert_value then reads
 * and reports.
 */
static bool convert_flat_ints(conv *cv, size_t text) {
  hark_datatype dt = cv->in->datatype;
  if (dt < HARK_TYPE_UINT8 || dt > HARK_TYPE_INT64 || !cv->keep || cv->want <= 0 ||
      (uint64_t)cv->want > text / 2)
    return false;
  static const int64_t lo[] = {[HARK_TYPE_INT8] = INT8_MIN,
                               [HARK_TYPE_INT16] = INT16_MIN,
                               [HARK_TYPE_INT32] = INT32_MIN,
                               [HARK_TYPE_INT64] = INT64_MIN};
  static const int64_t hi[] = {[HARK_TYPE_UINT8] = UINT8_MAX,   [HARK_TYPE_UINT16] = UINT16_MAX,
                               [HARK_TYPE_UINT32] = UINT32_MAX, [HARK_TYPE_UINT64] = INT64_MAX,
                               [HARK_TYPE_INT8] = INT8_MAX,     [HARK_TYPE_INT16] = INT16_MAX,
                               [HARK_TYPE_INT32] = INT32_MAX,   [HARK_TYPE_INT64] = INT64_MAX};
  size_t size = hark_datatype_size(dt), n = (size_t)cv->want;
  if (!reserve(cv, n * size)) return false;
  const char *p = cv->ps->jr.p + 1, *e = cv->ps->jr.end; /* after '[' */
  unsigned char *w = cv->buf;
  for (size_t i = 0;; i++) {
    while (p < e && hark_jr_is_ws(*p)) p++;
    bool neg = p < e && *p == '-';
    p += neg;
    const char *d = p;
    uint64_t mag = 0;
    while (p < e && (unsigned)(*p - '0') < 10u) mag = mag * 10 + (unsigned)(*p++ - '0');
    size_t digits = (size_t)(p - d);
    if (!digits || digits > 18 || (digits > 1 && *d == '0') || i >= n) return false;
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E')) return false;
    int64_t v = neg ? -(int64_t)mag : (int64_t)mag;
    if (v < lo[dt] || v > hi[dt]) return false;
    switch (size) {
    case 1: *(uint8_t *)w = (uint8_t)v; break;
    case 2: {
      uint16_t x = (uint16_t)v;
      memcpy(w, &x, 2);
      break;
    }
    case 4: {
      uint32_t x = (uint32_t)v;
      memcpy(w, &x, 4);
      break;
    }
    default: memcpy(w, &v, 8); break;
    }
    w += size;
    while (p < e && hark_jr_is_ws(*p)) p++;
    if (p >= e) return false;
    if (*p == ']') {
      if (i + 1 != n) return false;
      break;
    }
    if (*p++ != ',') return false;
  }
  cv->used = n * size;
  cv->seen = (int64_t)n;
  cv->ps->jr.p = (char *)p + 1;
  return true;
}

/* Walks (possibly nested) arrays, converting every scalar in order. */
static bool convert_value(conv *cv) {
  parser *ps = cv->ps;
  hark_jr_skip_ws(&ps->jr);
  if (ps->jr.p < ps->jr.end && *ps->jr.p == '[') {
    bool first = true, done;
    while (hark_jr_next_element(&ps->jr, &first, &done) && !done)
      if (!convert_value(cv)) return false;
    return !ps->jr.err;
  }
  if (!convert_scalar(cv)) return false;
  cv->seen++;
  return true;
}

static bool convert_json_data(parser *ps, hark_kserve_input *in, char *data, char *data_end) {
  int64_t count = hark_shape_count(in->shape, in->ndims);
  if (in->datatype == HARK_TYPE_FP16 || in->datatype == HARK_TYPE_BF16)
    return hark_jr_fail(&ps->jr,
                        "input '%s': %s data cannot be sent as JSON; send it as binary data "
                        "(binary_data_size)",
                        in->name, hark_datatype_name(in->datatype));
  char *resume = ps->jr.p;
  ps->jr.p = data;
  hark_jr_skip_ws(&ps->jr);
  if (ps->jr.p >= ps->jr.end || *ps->jr.p != '[')
    return hark_jr_fail(&ps->jr, "input '%s': 'data' must be an array", in->name);
  /* Every element takes at least one byte of the array's text: a count
   * beyond it is wrong, and is found without storing anything. */
  size_t text = (size_t)(data_end - data);
  conv cv = {.ps = ps, .in = in, .want = count, .keep = count >= 0 && (uint64_t)count <= text};
  if (!convert_flat_ints(&cv, text) && !convert_value(&cv)) return false;
  if (cv.oom) return hark_jr_fail(&ps->jr, "out of memory");
  if (!cv.buf && !(cv.buf = alloc(ps, 1))) return false;
  if (cv.seen != count)
    return hark_jr_fail(&ps->jr, "input '%s': shape needs %lld elements but 'data' holds %lld",
                        in->name, (long long)count, (long long)cv.seen);
  in->data = cv.buf;
  in->byte_size = cv.used;
  ps->jr.p = resume;
  return true;
}

/* ---- binary tensor data --------------------------------------------------- */

typedef struct binary_cursor {
  const char *p, *end;
} binary_cursor;

static bool take_binary(parser *ps, binary_cursor *bc, hark_kserve_input *in, uint64_t size) {
  size_t left = (size_t)(bc->end - bc->p);
  if (size > left)
    return hark_jr_fail(&ps->jr,
                        "input '%s': binary_data_size %llu is more than the %zu bytes of binary "
                        "data left in the request body",
                        in->name, (unsigned long long)size, left);
  int64_t count = hark_shape_count(in->shape, in->ndims);
  size_t esize = hark_datatype_size(in->datatype);
  if (in->datatype == HARK_TYPE_BYTES) {
    if (!hark_bytes_check(bc->p, (size_t)size, count))
      return hark_jr_fail(&ps->jr,
                          "input '%s': binary BYTES data is not %lld length-prefixed elements "
                          "filling %llu bytes",
                          in->name, (long long)count, (unsigned long long)size);
  } else if (count < 0 || (uint64_t)count > SIZE_MAX / esize || (uint64_t)count * esize != size) {
    return hark_jr_fail(&ps->jr,
                        "input '%s': binary_data_size %llu does not match %lld %s elements "
                        "(%llu bytes)",
                        in->name, (unsigned long long)size, (long long)count,
                        hark_datatype_name(in->datatype), (unsigned long long)count * esize);
  }
  in->data = bc->p;
  in->byte_size = (size_t)size;
  in->binary = true;
  bc->p += size;
  /* Backends read typed elements in place; keep them aligned. */
  if (esize > 1 && (uintptr_t)in->data % esize) {
    void *copy = alloc(ps, in->byte_size);
    if (!copy) return false;
    memcpy(copy, in->data, in->byte_size);
    in->data = copy;
  }
  return true;
}

/* An input in shared memory: its data is found by hark_kserve_to_request. */
static bool finish_shm_input(parser *ps, const input_doc *d, hark_kserve_input *in) {
  if (!d->shm_region)
    return hark_jr_fail(&ps->jr,
                        "input '%s' has shared_memory parameters but no "
                        "shared_memory_region",
                        d->name);
  if (!d->has_shm_size)
    return hark_jr_fail(&ps->jr,
                        "input '%s' names shared_memory_region '%s' but no "
                        "shared_memory_byte_size",
                        d->name, d->shm_region);
  if (d->data || d->has_size)
    return hark_jr_fail(&ps->jr,
                        "input '%s' has data in the request as well as in shared "
                        "memory region '%s'",
                        d->name, d->shm_region);
  in->shm_region = d->shm_region;
  in->shm_offset = d->shm_offset;
  in->shm_byte_size = d->shm_byte_size;
  return true;
}

static bool finish_input(parser *ps, input_doc *d, binary_cursor *bc, hark_kserve_input *in) {
  if (!d->name) return hark_jr_fail(&ps->jr, "an input has no 'name'");
  in->name = d->name;
  if (!d->datatype) return hark_jr_fail(&ps->jr, "input '%s' has no 'datatype'", d->name);
  in->datatype = hark_datatype_from_name(d->datatype);
  if (in->datatype == HARK_TYPE_INVALID)
    return hark_jr_fail(&ps->jr, "input '%s' has unknown datatype '%s'", d->name, d->datatype);
  if (!d->has_shape) return hark_jr_fail(&ps->jr, "input '%s' has no 'shape'", d->name);
  in->ndims = d->ndims;
  memcpy(in->shape, d->shape, sizeof in->shape);
  if (hark_shape_count(in->shape, in->ndims) < 0)
    return hark_jr_fail(&ps->jr, "input '%s': shape holds too many elements", d->name);
  if (d->has_size && d->data)
    return hark_jr_fail(&ps->jr, "input '%s' has both 'data' and a binary_data_size", d->name);
  if (d->has_shm) return finish_shm_input(ps, d, in);
  if (d->has_size) return take_binary(ps, bc, in, d->binary_size);
  if (!d->data)
    return hark_jr_fail(&ps->jr, "input '%s' has no 'data' and no binary_data_size", d->name);
  return convert_json_data(ps, in, d->data, d->data_end);
}

static bool read_inputs(parser *ps, hark_kserve_request *r, binary_cursor *bc) {
  bool first = true, done;
  size_t cap = 0;
  while (hark_jr_next_element(&ps->jr, &first, &done) && !done) {
    input_doc d = {0};
    if (!read_input_doc(ps, &d)) return false;
    hark_kserve_input *grown = grow(ps, r->inputs, r->n_inputs, &cap, sizeof *grown);
    if (!grown) return false;
    r->inputs = grown;
    if (!finish_input(ps, &d, bc, &r->inputs[r->n_inputs])) return false;
    r->n_inputs++;
  }
  return !ps->jr.err;
}

/* ---- requested outputs ---------------------------------------------------- */

static bool read_output(parser *ps, hark_kserve_output *out) {
  bool first = true, done, has_shm = false, has_shm_size = false;
  const char *key;
  *out = (hark_kserve_output){.binary = -1};
  while (hark_jr_next_member(&ps->jr, &first, &key, &done) && !done) {
    if (key_is(key, "name")) {
      if (!hark_jr_string(&ps->jr, &out->name, NULL)) return false;
    } else if (key_is(key, "parameters")) {
      bool pfirst = true, pdone;
      const char *pkey;
      while (hark_jr_next_member(&ps->jr, &pfirst, &pkey, &pdone) && !pdone) {
        bool shm = false;
        if (key_is(pkey, "binary_data")) {
          bool b;
          if (!hark_jr_bool(&ps->jr, &b, "output parameter 'binary_data'")) return false;
          out->binary = b;
        } else if (key_is(pkey, "classification")) {
          return hark_jr_fail(&ps->jr, "output parameter '%s' is not supported", pkey);
        } else if (!read_shm_param(ps, "output", out->name, pkey, &out->shm_region,
                                   &out->shm_offset, &out->shm_byte_size, &has_shm_size, &shm)) {
          return false;
        } else if (!shm && !hark_jr_skip(&ps->jr)) {
          return false;
        }
        has_shm |= shm;
      }
      if (ps->jr.err) return false;
    } else if (!hark_jr_skip(&ps->jr)) {
      return false;
    }
  }
  if (ps->jr.err) return false;
  if (!out->name) return hark_jr_fail(&ps->jr, "a requested output has no 'name'");
  if (has_shm && !out->shm_region)
    return hark_jr_fail(
        &ps->jr, "output '%s' has shared_memory parameters but no shared_memory_region", out->name);
  if (out->shm_region && !has_shm_size)
    return hark_jr_fail(&ps->jr,
                        "output '%s' names shared_memory_region '%s' but no "
                        "shared_memory_byte_size",
                        out->name, out->shm_region);
  return true;
}

static bool read_outputs(parser *ps, hark_kserve_request *r) {
  bool first = true, done;
  size_t cap = 0;
  while (hark_jr_next_element(&ps->jr, &first, &done) && !done) {
    hark_kserve_output *grown = grow(ps, r->outputs, r->n_outputs, &cap, sizeof *grown);
    if (!grown) return false;
    r->outputs = grown;
    if (!read_output(ps, &r->outputs[r->n_outputs])) return false;
    r->n_outputs++;
  }
  return !ps->jr.err;
}

/* ---- the request ------------------------------------------------------- */

/* Marks `key` seen; a repeated one is ambiguous, so an error. */
static bool once(parser *ps, unsigned *seen, unsigned bit, const char *key) {
  if (*seen & bit) return hark_jr_fail(&ps->jr, "'%s' appears more than once", key);
  *seen |= bit;
  return true;
}

static bool read_request(parser *ps, hark_kserve_request *r, binary_cursor *bc) {
  bool first = true, done;
  unsigned seen = 0;
  const char *key;
  hark_jr_skip_ws(&ps->jr);
  if (ps->jr.p >= ps->jr.end)
    return hark_jr_fail(&ps->jr, "request body is empty; expected a JSON object");
  while (hark_jr_next_member(&ps->jr, &first, &key, &done) && !done) {
    bool ok;
    if (key_is(key, "id")) {
      if (!hark_jr_peek(&ps->jr, '"')) return hark_jr_fail(&ps->jr, "'id' must be a string");
      ok = once(ps, &seen, 1, key) && hark_jr_string(&ps->jr, &r->id, NULL);
    } else if (key_is(key, "parameters")) {
      ok = once(ps, &seen, 2, key) && read_params(ps, r);
    } else if (key_is(key, "inputs")) {
      ok = once(ps, &seen, 4, key) && read_inputs(ps, r, bc);
    } else if (key_is(key, "outputs")) {
      ok = once(ps, &seen, 8, key) && read_outputs(ps, r);
    } else {
      ok = hark_jr_skip(&ps->jr);
    }
    if (!ok) return false;
  }
  if (ps->jr.err) return false;
  hark_jr_skip_ws(&ps->jr);
  if (ps->jr.p != ps->jr.end)
    return hark_jr_syntax(&ps->jr, "unexpected data after the JSON object");
  if (!(seen & 4)) return hark_jr_fail(&ps->jr, "request has no 'inputs'");
  return true;
}

hark_error *hark_kserve_parse(char *body, size_t len, size_t header_len, hark_kserve_request *out) {
  memset(out, 0, sizeof *out);
  size_t json_len = header_len == HARK_KSERVE_NO_HEADER_LEN ? len : header_len;
  if (json_len > len)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "Inference-Header-Content-Length %zu is larger than the request "
                          "body (%zu bytes)",
                          header_len, len);
  parser ps = {.jr = {.p = body, .end = body + json_len}};
  ps.arena = hark_arena_new();
  binary_cursor bc = {body + json_len, body + len};
  if (read_request(&ps, out, &bc) && bc.p != bc.end)
    hark_jr_fail(&ps.jr, "the request body has %zu bytes of binary data that no input claims",
                 (size_t)(bc.end - bc.p));
  out->arena = ps.arena;
  if (ps.jr.err) hark_kserve_request_clear(out);
  return ps.jr.err;
}

void hark_kserve_request_clear(hark_kserve_request *r) {
  hark_arena_free(r->arena);
  memset(r, 0, sizeof *r);
}

/* ---- building the engine's request ---------------------------------------- */

static hark_error *bad_param(const char *key, const char *want) {
  return hark_error_new(HARK_ERR_INVALID_ARG, "parameter '%s' must be %s", key, want);
}

static hark_error *apply_param(const hark_kserve_param *p, hark_request *req) {
  hark_jr_num num = {p->value, strlen(p->value), p->type == HARK_KSERVE_PARAM_INT};
  uint64_t v;
  if (strcmp(p->key, "priority") == 0) {
    if (p->type != HARK_KSERVE_PARAM_INT || !hark_jr_to_u64(&num, UINT32_MAX, &v))
      return bad_param(p->key, "a non-negative integer");
    hark_request_set_priority(req, (uint32_t)v);
  } else if (strcmp(p->key, "timeout") == 0) {
    if (p->type != HARK_KSERVE_PARAM_INT || !hark_jr_to_u64(&num, UINT64_MAX, &v))
      return bad_param(p->key, "a non-negative integer (microseconds)");
    hark_request_set_timeout_us(req, v);
  } else if (strcmp(p->key, "sequence_id") == 0) {
    if (p->type == HARK_KSERVE_PARAM_STRING)
      hark_request_set_correlation_id_str(req, p->value);
    else if (p->type == HARK_KSERVE_PARAM_INT && hark_jr_to_u64(&num, UINT64_MAX, &v))
      hark_request_set_correlation_id(req, v);
    else
      return bad_param(p->key, "a non-negative integer or a string");
  } else if (strcmp(p->key, "sequence_start") == 0 || strcmp(p->key, "sequence_end") == 0) {
    if (p->type != HARK_KSERVE_PARAM_BOOL) return bad_param(p->key, "a boolean");
    uint32_t flag = p->key[9] == 's' ? HARK_REQUEST_SEQUENCE_START : HARK_REQUEST_SEQUENCE_END;
    uint32_t flags = hark_request_flags(req);
    flags = strcmp(p->value, "true") == 0 ? flags | flag : flags & ~flag;
    hark_request_set_flags(req, flags);
  } else {
    hark_request_set_parameter(req, p->key, p->value);
  }
  return NULL;
}

static bool has_io(const hark_model_io *io, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(io[i].name, name) == 0) return true;
  return false;
}

/* More inputs than the model has: among the first n_model + 1 one is not
 * the model's, or (pigeonhole) one is given twice. Says which, as the
 * engine's validation would, looking at no more than those. */
static hark_error *extra_input(const hark_model_config *cfg,
                               const char *(*name)(const void *, size_t), const void *inputs) {
  for (size_t i = 0; i <= cfg->n_inputs; i++) {
    const char *n = name(inputs, i);
    if (!has_io(cfg->inputs, cfg->n_inputs, n))
      return hark_error_new(HARK_ERR_INVALID_ARG, "unexpected inference input '%s' for model '%s'",
                            n, cfg->name);
    for (size_t j = 0; j < i; j++)
      if (strcmp(name(inputs, j), n) == 0)
        return hark_error_new(HARK_ERR_INVALID_ARG, "input '%s' is given more than once", n);
  }
  return NULL;
}

hark_error *hark_kserve_check_counts(const hark_model *model, size_t n_params, size_t n_inputs,
                                     const char *(*input_name)(const void *inputs, size_t i),
                                     const void *inputs, size_t n_outputs) {
  const hark_model_config *cfg = hark_model_get_config(model);
  if (n_params > HARK_KSERVE_MAX_PARAMETERS)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "request has %zu parameters; at most %d are allowed", n_params,
                          HARK_KSERVE_MAX_PARAMETERS);
  if (n_inputs > cfg->n_inputs) {
    hark_error *err = extra_input(cfg, input_name, inputs);
    return err ? err
               : hark_error_new(HARK_ERR_INVALID_ARG,
                                "request has %zu inputs but model '%s' has only %u", n_inputs,
                                cfg->name, cfg->n_inputs);
  }
  if (n_outputs > cfg->n_outputs)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "request asks for %zu outputs but model '%s' has only %u", n_outputs,
                          cfg->name, cfg->n_outputs);
  return NULL;
}

static const char *kserve_input_name(const void *inputs, size_t i) {
  return ((const hark_kserve_input *)inputs)[i].name;
}

hark_error *hark_kserve_to_request(hark_kserve_request *r, hark_shm *shm, hark_request *req) {
  /* A sequence_id names a sequence of KServe HTTP clients only. */
  hark_request_set_correlation_ns(req, HARK_CORR_NS_KSERVE_HTTP);
  hark_error *bad_counts =
      hark_kserve_check_counts(hark_request_model(req), r->n_params, r->n_inputs, kserve_input_name,
                               r->inputs, r->n_outputs);
  if (bad_counts) return bad_counts;
  if (r->id) hark_request_set_id(req, r->id);
  for (uint32_t i = 0; i < r->n_params; i++) {
    hark_error *err = apply_param(&r->params[i], req);
    if (err) return err;
  }
  for (uint32_t i = 0; i < r->n_inputs; i++) {
    hark_kserve_input *in = &r->inputs[i];
    if (in->shm_region) {
      hark_error *err = hark_kserve_shm_input(
          shm, req, in->name, in->datatype, hark_shape_count(in->shape, in->ndims), in->shm_region,
          in->shm_offset, in->shm_byte_size, &in->data);
      if (err) return err;
      in->byte_size = (size_t)in->shm_byte_size;
    }
    hark_error *err = hark_request_add_input(req, in->name, in->datatype, in->shape, in->ndims,
                                             in->data, in->byte_size);
    if (err) return err;
  }
  for (uint32_t i = 0; i < r->n_outputs; i++) {
    hark_kserve_output *o = &r->outputs[i];
    if (o->shm_region) {
      hark_error *err = hark_kserve_shm_output(shm, req, o->name, o->shm_region, o->shm_offset,
                                               o->shm_byte_size, &o->shm);
      if (err) return err;
    }
    hark_request_add_requested_output(req, o->name);
  }
  hark_request_attach(req, r->arena, hark_arena_free);
  return NULL;
}
