/*
 * buf.c — the growable buffer and its JSON writers (see buf.h).
 */
#include "util/buf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

bool hark_buf_reserve(hark_buf *b, size_t extra) {
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

/* Small appends: the room is internal-sized, so exhaustion aborts. */
static void reserve_small(hark_buf *b, size_t extra) {
  if (!hark_buf_reserve(b, extra)) hark_oom("buffer", b->len + extra);
}

bool hark_buf_append(hark_buf *b, const void *p, size_t n) {
  if (!hark_buf_reserve(b, n)) return false;
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
  return true;
}

void hark_buf_free(hark_buf *b) {
  free(b->data);
  *b = (hark_buf){0};
}

char *hark_buf_release(hark_buf *b) {
  char *d = b->data;
  *b = (hark_buf){0};
  return d;
}

void hark_buf_put(hark_buf *b, const void *p, size_t n) {
  reserve_small(b, n);
  if (n) memcpy(b->data + b->len, p, n);
  b->len += n;
}

/* Writes from the last digit back, two at a time. */
size_t hark_fmt_u64(char *p, uint64_t v) {
  if (v < 10) {
    *p = (char)('0' + v);
    return 1;
  }
  static const char pairs[] =
      "00010203040506070809101112131415161718192021222324252627282930313233"
      "34353637383940414243444546474849505152535455565758596061626364656667"
      "6869707172737475767778798081828384858687888990919293949596979899";
  size_t n = 2;
  for (uint64_t x = v / 100; x; x /= 10) n++;
  char *e = p + n;
  for (; v >= 100; v /= 100) {
    e -= 2;
    memcpy(e, pairs + 2 * (v % 100), 2);
  }
  if (v >= 10)
    memcpy(e - 2, pairs + 2 * v, 2);
  else
    e[-1] = (char)('0' + v);
  return n;
}

size_t hark_fmt_i64(char *p, int64_t v) {
  if (v >= 0) return hark_fmt_u64(p, (uint64_t)v);
  p[0] = '-';
  return 1 + hark_fmt_u64(p + 1, (uint64_t)0 - (uint64_t)v);
}

void hark_buf_put_u64(hark_buf *b, uint64_t v) {
  reserve_small(b, 20);
  b->len += hark_fmt_u64(b->data + b->len, v);
}

void hark_buf_put_i64(hark_buf *b, int64_t v) {
  reserve_small(b, 21);
  b->len += hark_fmt_i64(b->data + b->len, v);
}

void hark_buf_put_fixed6(hark_buf *b, double v) {
  char num[48];
  int n = snprintf(num, sizeof num, "%.6f", isfinite(v) ? v : 0.0);
  hark_buf_put(b, num, (size_t)n);
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

size_t hark_fmt_jstr(char *w, const char *s, size_t n) {
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

bool hark_buf_put_jstr(hark_buf *b, const char *s, size_t n) {
  if (n > (SIZE_MAX - 2) / 6 || !hark_buf_reserve(b, HARK_JSTR_ROOM(n))) return false;
  b->len += hark_fmt_jstr(b->data + b->len, s, n);
  return true;
}

void hark_buf_put_str(hark_buf *b, const char *s) {
  size_t n = strlen(s);
  if (!hark_buf_put_jstr(b, s, n)) hark_oom("buffer", HARK_JSTR_ROOM(n));
}
