/*
 * json_read.c — the pull reader of json_read.h: validates JSON as it goes,
 * decodes strings (escapes, \u with surrogate pairs, to UTF-8) in place or
 * into a caller's buffer, and converts number tokens exactly. Recursion is
 * bounded by HARK_JR_MAX_DEPTH so hostile nesting cannot exhaust the stack.
 */
#include "frontend/kserve/json_read.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool hark_jr_fail(hark_jr *r, const char *fmt, ...) {
  if (r->err) return false;
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  r->err = hark_error_new(HARK_ERR_INVALID_ARG, "%s", msg);
  return false;
}

bool hark_jr_syntax(hark_jr *r, const char *what) {
  size_t left = (size_t)(r->end - r->p);
  if (!left) return hark_jr_fail(r, "malformed JSON in request body: %s, got end of input", what);
  return hark_jr_fail(r, "malformed JSON in request body: %s at '%.*s'", what,
                      (int)(left < 16 ? left : 16), r->p);
}

void hark_jr_skip_ws(hark_jr *r) {
  while (r->p < r->end && hark_jr_is_ws(*r->p)) r->p++;
}

bool hark_jr_eat(hark_jr *r, char c) {
  hark_jr_skip_ws(r);
  if (r->p < r->end && *r->p == c) {
    r->p++;
    return true;
  }
  return false;
}

bool hark_jr_peek(hark_jr *r, char c) {
  hark_jr_skip_ws(r);
  return r->p < r->end && *r->p == c;
}

static int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool hex4(const char *s, const char *end, uint32_t *out) {
  if (end - s < 4) return false;
  uint32_t v = 0;
  for (int i = 0; i < 4; i++) {
    int h = hexval(s[i]);
    if (h < 0) return false;
    v = v << 4 | (uint32_t)h;
  }
  *out = v;
  return true;
}

static size_t put_utf8(char *dst, uint32_t cp) {
  if (cp < 0x80) {
    dst[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    dst[0] = (char)(0xC0 | cp >> 6);
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    dst[0] = (char)(0xE0 | cp >> 12);
    dst[1] = (char)(0x80 | (cp >> 6 & 0x3F));
    dst[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  dst[0] = (char)(0xF0 | cp >> 18);
  dst[1] = (char)(0x80 | (cp >> 12 & 0x3F));
  dst[2] = (char)(0x80 | (cp >> 6 & 0x3F));
  dst[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* Reads one \u escape (s points after "\u"), joining surrogate pairs. */
static const char *read_u_escape(const char *s, const char *end, uint32_t *cp) {
  uint32_t hi;
  if (!hex4(s, end, &hi)) return NULL;
  s += 4;
  if (hi >= 0xDC00 && hi <= 0xDFFF) return NULL;
  if (hi >= 0xD800 && hi <= 0xDBFF) {
    uint32_t lo;
    if (end - s < 6 || s[0] != '\\' || s[1] != 'u' || !hex4(s + 2, end, &lo) || lo < 0xDC00 ||
        lo > 0xDFFF)
      return NULL;
    s += 6;
    hi = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
  }
  *cp = hi;
  return s;
}

/*
 * Decodes the JSON string whose opening quote is at `s` into `dst` (which
 * may be s + 1: decoding never lengthens). Returns the position after the
 * closing quote, or NULL if the string is malformed. *n gets the length.
 */
const char *hark_jr_decode_string(const char *s, const char *end, char *dst, size_t *n) {
  char *w = dst;
  for (s++; s < end;) {
    unsigned char c = (unsigned char)*s;
    if (c == '"') {
      *n = (size_t)(w - dst);
      return s + 1;
    }
    if (c < 0x20) return NULL;
    if (c != '\\') {
      *w++ = (char)c;
      s++;
      continue;
    }
    if (end - s < 2) return NULL;
    char e = s[1];
    s += 2;
    switch (e) {
    case '"': *w++ = '"'; break;
    case '\\': *w++ = '\\'; break;
    case '/': *w++ = '/'; break;
    case 'b': *w++ = '\b'; break;
    case 'f': *w++ = '\f'; break;
    case 'n': *w++ = '\n'; break;
    case 'r': *w++ = '\r'; break;
    case 't': *w++ = '\t'; break;
    case 'u': {
      uint32_t cp;
      s = read_u_escape(s, end, &cp);
      if (!s) return NULL;
      w += put_utf8(w, cp);
      break;
    }
    default: return NULL;
    }
  }
  return NULL;
}

/* Validates a string without decoding it; returns its decoded length. */
const char *hark_jr_scan_string(const char *s, const char *end, size_t *n) {
  size_t len = 0;
  for (s++; s < end;) {
    unsigned char c = (unsigned char)*s;
    if (c == '"') {
      *n = len;
      return s + 1;
    }
    if (c < 0x20) return NULL;
    if (c != '\\') {
      len++;
      s++;
      continue;
    }
    if (end - s < 2) return NULL;
    char e = s[1];
    s += 2;
    if (e == 'u') {
      uint32_t cp;
      s = read_u_escape(s, end, &cp);
      if (!s) return NULL;
      len += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    } else if (strchr("\"\\/bfnrt", e) && e) {
      len++;
    } else {
      return NULL;
    }
  }
  return NULL;
}

bool hark_jr_string(hark_jr *r, const char **out, size_t *len) {
  hark_jr_skip_ws(r);
  if (r->p >= r->end || *r->p != '"') return hark_jr_syntax(r, "expected a string");
  char *dst = r->p + 1;
  size_t n;
  const char *after = hark_jr_decode_string(r->p, r->end, dst, &n);
  if (!after) return hark_jr_syntax(r, "bad string");
  dst[n] = '\0'; /* n < the raw length, so this is inside the old string */
  r->p = (char *)after;
  *out = dst;
  if (len) *len = n;
  return true;
}

static bool is_digit(char c) { return (unsigned)(c - '0') < 10u; }

/* The end of the number token at p, or NULL with *what saying what is
 * wrong; *integer: no fraction, no exponent. */
static const char *scan_number(const char *p, const char *e, bool *integer, const char **what) {
  *integer = true;
  *what = "bad number";
  if (p < e && *p == '-') p++;
  if (p < e && *p == '0') {
    p++;
  } else if (p < e && *p >= '1' && *p <= '9') {
    while (p < e && is_digit(*p)) p++;
  } else {
    *what = "expected a value";
    return NULL;
  }
  if (p < e && *p == '.') {
    *integer = false;
    if (++p >= e || !is_digit(*p)) return NULL;
    while (p < e && is_digit(*p)) p++;
  }
  if (p < e && (*p == 'e' || *p == 'E')) {
    *integer = false;
    p++;
    if (p < e && (*p == '+' || *p == '-')) p++;
    if (p >= e || !is_digit(*p)) return NULL;
    while (p < e && is_digit(*p)) p++;
  }
  return p;
}

bool hark_jr_number(hark_jr *r, hark_jr_num *num) {
  hark_jr_skip_ws(r);
  const char *what;
  bool integer;
  const char *p = scan_number(r->p, r->end, &integer, &what);
  if (!p) return hark_jr_syntax(r, what); /* at the token's start */
  *num = (hark_jr_num){r->p, (size_t)(p - r->p), integer};
  r->p = (char *)p;
  return true;
}

bool hark_jr_literal(hark_jr *r, const char *word) {
  size_t n = strlen(word);
  if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n) != 0)
    return hark_jr_syntax(r, "expected a value");
  r->p += n;
  return true;
}

/* true / false; anything else is a type error for `what`. */
bool hark_jr_bool(hark_jr *r, bool *out, const char *what) {
  hark_jr_skip_ws(r);
  if (r->p < r->end && *r->p == 't') {
    *out = true;
    return hark_jr_literal(r, "true");
  }
  if (r->p < r->end && *r->p == 'f') {
    *out = false;
    return hark_jr_literal(r, "false");
  }
  return hark_jr_fail(r, "%s must be a boolean", what);
}

static bool skip_container(hark_jr *r, char close) {
  if (++r->depth > HARK_JR_MAX_DEPTH) return hark_jr_fail(r, "JSON nested too deeply");
  r->p++;
  if (!hark_jr_eat(r, close)) {
    do {
      if (close == '}') {
        const char *key;
        if (!hark_jr_string(r, &key, NULL)) return false;
        if (!hark_jr_eat(r, ':')) return hark_jr_syntax(r, "expected ':'");
      }
      if (!hark_jr_skip(r)) return false;
    } while (hark_jr_eat(r, ','));
    if (!hark_jr_eat(r, close))
      return hark_jr_syntax(r, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
  }
  r->depth--;
  return true;
}

/* A flat, non-empty array of numbers (the usual tensor "data", skipped
 * before its datatype is known): one scan without a call an element. False,
 * the cursor unmoved, at anything else, which the general walk then reads
 * (and reports). */
static bool skip_number_array(hark_jr *r) {
  if (r->depth >= HARK_JR_MAX_DEPTH) return false;
  const char *p = r->p + 1, *e = r->end, *what;
  bool integer;
  for (;;) {
    while (p < e && hark_jr_is_ws(*p)) p++;
    if (!(p = scan_number(p, e, &integer, &what))) return false;
    while (p < e && hark_jr_is_ws(*p)) p++;
    if (p >= e) return false;
    if (*p == ']') break;
    if (*p++ != ',') return false;
  }
  r->p = (char *)p + 1;
  return true;
}

/* Validates and skips any value without changing it. */
bool hark_jr_skip(hark_jr *r) {
  hark_jr_skip_ws(r);
  if (r->p >= r->end) return hark_jr_syntax(r, "expected a value");
  switch (*r->p) {
  case '{': return skip_container(r, '}');
  case '[': return skip_number_array(r) || skip_container(r, ']');
  case '"': {
    size_t n;
    const char *after = hark_jr_scan_string(r->p, r->end, &n);
    if (!after) return hark_jr_syntax(r, "bad string");
    r->p = (char *)after;
    return true;
  }
  case 't': return hark_jr_literal(r, "true");
  case 'f': return hark_jr_literal(r, "false");
  case 'n': return hark_jr_literal(r, "null");
  default: {
    hark_jr_num num;
    return hark_jr_number(r, &num);
  }
  }
}

/*
 * Iterates an object's members: call with *first = true; each true return
 * leaves the cursor at the member's value and sets *key.
 */
bool hark_jr_next_member(hark_jr *r, bool *first, const char **key, bool *done) {
  *done = false;
  if (*first) {
    *first = false;
    if (!hark_jr_eat(r, '{')) return hark_jr_syntax(r, "expected an object");
    if (++r->depth > HARK_JR_MAX_DEPTH) return hark_jr_fail(r, "JSON nested too deeply");
    if (hark_jr_eat(r, '}')) {
      r->depth--;
      *done = true;
      return true;
    }
  } else if (!hark_jr_eat(r, ',')) {
    if (!hark_jr_eat(r, '}')) return hark_jr_syntax(r, "expected ',' or '}'");
    r->depth--;
    *done = true;
    return true;
  }
  if (!hark_jr_string(r, key, NULL)) return false;
  if (!hark_jr_eat(r, ':')) return hark_jr_syntax(r, "expected ':'");
  return true;
}

/* The same for array elements. */
bool hark_jr_next_element(hark_jr *r, bool *first, bool *done) {
  *done = false;
  if (*first) {
    *first = false;
    if (!hark_jr_eat(r, '[')) return hark_jr_syntax(r, "expected an array");
    if (++r->depth > HARK_JR_MAX_DEPTH) return hark_jr_fail(r, "JSON nested too deeply");
    if (hark_jr_eat(r, ']')) {
      r->depth--;
      *done = true;
    }
    return true;
  }
  if (hark_jr_eat(r, ',')) return true;
  if (!hark_jr_eat(r, ']')) return hark_jr_syntax(r, "expected ',' or ']'");
  r->depth--;
  *done = true;
  return true;
}

/* ---- numbers -------------------------------------------------------------- */

/* An integer token to int64 / uint64, exactly. False on overflow. */
static bool number_to_u64(const hark_jr_num *n, bool *negative, uint64_t *mag) {
  const char *s = n->text, *e = s + n->len;
  *negative = *s == '-';
  if (*negative) s++;
  uint64_t v = 0;
  for (; s < e; s++) {
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *mag = v;
  return true;
}

bool hark_jr_to_i64(const hark_jr_num *n, int64_t lo, int64_t hi, int64_t *out) {
  bool neg;
  uint64_t mag;
  if (!n->integer || !number_to_u64(n, &neg, &mag)) return false;
  if (neg) {
    if (mag > (uint64_t)INT64_MAX + 1) return false;
    *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
  } else {
    if (mag > (uint64_t)INT64_MAX) return false;
    *out = (int64_t)mag;
  }
  return *out >= lo && *out <= hi;
}

bool hark_jr_to_u64(const hark_jr_num *n, uint64_t hi, uint64_t *out) {
  bool neg;
  uint64_t mag;
  if (!n->integer || !number_to_u64(n, &neg, &mag)) return false;
  if (neg) {
    *out = 0;
    return mag == 0; /* "-0" */
  }
  *out = mag;
  return mag <= hi;
}

bool hark_jr_to_double(const hark_jr_num *n, double *out) {
  char tmp[64];
  char *heap = NULL, *buf = tmp;
  if (n->len >= sizeof tmp) {
    heap = malloc(n->len + 1);
    if (!heap) return false;
    buf = heap;
  }
  memcpy(buf, n->text, n->len);
  buf[n->len] = '\0';
  *out = strtod(buf, NULL);
  free(heap);
  return isfinite(*out);
}
