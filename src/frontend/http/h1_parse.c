/*
 * h1_parse.c — HTTP/1.1 request heads (h1_parse.h): the end-of-head
 * search, a line at a time parse of the head in the caller's buffer, and
 * the few field readings a transport needs (lookup, token lists,
 * Content-Length, the body's framing). It owns no memory and keeps no
 * state between calls but what the caller holds (*scan, the head).
 */
#include "frontend/http/h1_parse.h"

#include <string.h>

/* The search's states (h1_parse.h: hark_h1_head_end), kept in the low
 * bits of *scan with the offset it reached above them. */
enum {
  SCAN_LEAD,          /* before the request line, at a line's start */
  SCAN_LEAD_CR,       /* ... on a line that is a CR so far */
  SCAN_LINE,          /* after it, at a line's start */
  SCAN_LINE_CR,       /* ... on a line that is a CR so far */
  SCAN_TEXT,          /* on a line with something else in it */
  SCAN_STATE_BITS = 3 /* bits of *scan the state takes */
};

/* RFC 9110 5.6.2: tchar. */
static bool is_tchar(unsigned char c) {
  /* ALPHA, DIGIT and !#$%&'*+-.^_`|~ as bits: characters 0-63, then 64-127. */
  static const uint64_t low = 0x03ff6cfa00000000ull, high = 0x57ffffffc7fffffeull;
  return c < 64 ? (low >> c) & 1 : c < 128 && (high >> (c - 64)) & 1;
}

static bool is_ows(char c) { return c == ' ' || c == '\t'; }

static unsigned char lower(unsigned char c) {
  return c >= 'A' && c <= 'Z' ? (unsigned char)(c | 0x20) : c;
}

/* Whether a[0..n) and the NUL-terminated b are equal without ASCII case. */
static bool ieq(const char *a, size_t n, const char *b) {
  for (size_t i = 0; i < n; i++) {
    if (!b[i] || lower((unsigned char)a[i]) != lower((unsigned char)b[i])) return false;
  }
  return b[n] == '\0';
}

size_t hark_h1_head_end(const char *buf, size_t len, size_t *scan) {
  size_t i = *scan >> SCAN_STATE_BITS;
  unsigned state = (unsigned)(*scan & ((1u << SCAN_STATE_BITS) - 1));
  if (i > len || state > SCAN_TEXT) i = 0, state = SCAN_LEAD;
  while (i < len) {
    if (state == SCAN_TEXT) {
      /* Nothing but a LF changes a line that has text in it. */
      const char *lf = memchr(buf + i, '\n', len - i);
      if (!lf) {
        i = len;
        break;
      }
      i = (size_t)(lf - buf) + 1;
      state = SCAN_LINE;
      continue;
    }
    char c = buf[i++];
    if (c == '\n') {
      if (state == SCAN_LINE || state == SCAN_LINE_CR) {
        *scan = 0;
        return i; /* the empty line that ends the head */
      }
      state = SCAN_LEAD; /* an empty line before the request line */
    } else if (c == '\r' && (state == SCAN_LEAD || state == SCAN_LINE)) {
      state = state == SCAN_LEAD ? SCAN_LEAD_CR : SCAN_LINE_CR;
    } else {
      state = SCAN_TEXT; /* a CR after a CR is text too: no line is empty with it */
    }
  }
  /* An offset too large for the bits left (beyond any real buffer) is
   * given up: the next call starts again, which is slower, not wrong. */
  *scan = i <= (SIZE_MAX >> SCAN_STATE_BITS) ? (i << SCAN_STATE_BITS) | state : 0;
  return 0;
}

static int refuse(const char **why, int status, const char *reason) {
  *why = reason;
  return status;
}

/* The line at buf[*at..len): sets *line and *n to its content (without
 * its CRLF or LF) and *at past its end. NULL, or why it is refused. */
static const char *next_line(const char *buf, size_t len, size_t *at, const char **line,
                             size_t *n) {
  size_t i = *at;
  const char *lf = i < len ? memchr(buf + i, '\n', len - i) : NULL;
  if (!lf) return "no whole request head (no empty line ends it)";
  size_t end = (size_t)(lf - buf);
  *at = end + 1;
  if (end > i && buf[end - 1] == '\r') end--;
  if (memchr(buf + i, '\r', end - i)) return "a CR not followed by LF";
  *line = buf + i;
  *n = end - i;
  return NULL;
}

/* Why a request line's part ended at s[j] rather than at one SP: a tab,
 * a second space, or a character its part may not hold. */
static const char *bad_separator(const char *s, size_t j, size_t n, const char *part) {
  if (j < n && s[j] == '\t') return "a tab in the request line";
  if (j < n && s[j] == ' ') return "more than one space between the request line's parts";
  return part;
}

/* RFC 9112 3: method SP request-target SP HTTP-version, one SP each. */
static int request_line(const char *s, size_t n, hark_h1_head *out, const char **why) {
  size_t j = 0;
  while (j < n && is_tchar((unsigned char)s[j])) j++;
  if (j == 0) return refuse(why, 400, "a request line with no method");
  if (j == n) return refuse(why, 400, "a request line with no target");
  if (s[j] != ' ') return refuse(why, 400, bad_separator(s, j, n, "a method that is not a token"));
  out->method = s;
  out->method_len = j++;
  size_t t = j;
  while (j < n && s[j] > 0x20 && s[j] < 0x7F) j++;
  if (j == t) {
    const char *bad =
        j == n ? "a request line with no target" : "a target with a byte it may not hold";
    return refuse(why, 400, bad_separator(s, j, n, bad));
  }
  if (j == n) return refuse(why, 400, "a request line with no HTTP version");
  if (s[j] != ' ')
    return refuse(why, 400, bad_separator(s, j, n, "a target with a byte it may not hold"));
  out->target = s + t;
  out->target_len = j++ - t;
  const char *v = s + j;
  size_t vn = n - j;
  if (vn == 0) return refuse(why, 400, "a request line with no HTTP version");
  if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' ||
      v[7] < '0' || v[7] > '9')
    return refuse(why, 400, bad_separator(v, 0, vn, "a malformed HTTP version"));
  if (v[5] != '1') return refuse(why, 505, "an HTTP version other than 1.x");
  out->minor = v[7] == '0' ? 0 : 1; /* 1.2 to 1.9: answered as 1.1 (RFC 9110 2.5) */
  return 0;
}

/* RFC 9112 5: field-name ":" OWS field-value OWS. */
static int field_line(const char *s, size_t n, hark_h1_head *out, const char **why) {
  if (is_ows(s[0])) return refuse(why, 400, "a field line that starts with whitespace (obs-fold)");
  size_t j = 0;
  while (j < n && is_tchar((unsigned char)s[j])) j++;
  if (j == n || s[j] != ':') {
    const char *colon = memchr(s + j, ':', n - j);
    if (!colon) return refuse(why, 400, "a field line with no colon");
    size_t k = j;
    while (s + k < colon && is_ows(s[k])) k++;
    if (j > 0 && s + k == colon)
      return refuse(why, 400, "whitespace between a field name and its colon");
    return refuse(why, 400, "a field name that is not a token");
  }
  if (j == 0) return refuse(why, 400, "a field line with an empty name");
  size_t v = j + 1, end = n;
  while (v < end && is_ows(s[v])) v++;
  while (end > v && is_ows(s[end - 1])) end--;
  for (size_t k = v; k < end; k++) {
    unsigned char c = (unsigned char)s[k];
    if ((c < 0x20 && c != '\t') || c == 0x7F)
      return refuse(why, 400, "a control character in a field value");
  }
  if (out->n_fields == HARK_H1_MAX_FIELDS) return refuse(why, 431, "too many header fields");
  hark_h1_field *f = &out->fields[out->n_fields++];
  f->name = s;
  f->name_len = j;
  f->value = s + v;
  f->value_len = end - v;
  return 0;
}

int hark_h1_parse(const char *buf, size_t len, hark_h1_head *out, const char **why) {
  *why = NULL;
  out->method = out->target = NULL;
  out->method_len = out->target_len = 0;
  out->minor = 0;
  out->n_fields = 0;
  out->len = 0;
  if (!buf || !len) return refuse(why, 400, "no whole request head (no empty line ends it)");
  size_t at = 0;
  /* RFC 9112 2.2: empty lines before the request line are skipped. */
  while (at < len) {
    if (buf[at] == '\n')
      at++;
    else if (buf[at] == '\r' && at + 1 < len && buf[at + 1] == '\n')
      at += 2;
    else
      break;
  }
  const char *line;
  size_t n;
  const char *bad = next_line(buf, len, &at, &line, &n);
  if (bad) return refuse(why, 400, bad);
  int status = request_line(line, n, out, why);
  if (status) return status;
  for (;;) {
    bad = next_line(buf, len, &at, &line, &n);
    if (bad) return refuse(why, 400, bad);
    if (n == 0) break;
    status = field_line(line, n, out, why);
    if (status) return status;
  }
  out->len = at;
  return 0;
}

const hark_h1_field *hark_h1_find_n(const hark_h1_head *h, const char *name, size_t n,
                                    size_t *count) {
  const hark_h1_field *first = NULL;
  size_t seen = 0;
  for (size_t i = 0; i < h->n_fields; i++) {
    const hark_h1_field *f = &h->fields[i];
    if (f->name_len != n || !ieq(f->name, n, name)) continue;
    if (!first) first = f;
    seen++;
  }
  if (count) *count = seen;
  return first;
}

/* The next non-empty element of a comma-separated list from value[*at],
 * whitespace around it trimmed: true with *el and *n, else false. */
static bool next_element(const char *value, size_t len, size_t *at, const char **el, size_t *n) {
  while (*at < len) {
    size_t i = *at;
    const char *comma = memchr(value + i, ',', len - i);
    size_t end = comma ? (size_t)(comma - value) : len;
    *at = comma ? end + 1 : len;
    while (i < end && is_ows(value[i])) i++;
    while (end > i && is_ows(value[end - 1])) end--;
    if (end == i) continue;
    *el = value + i;
    *n = end - i;
    return true;
  }
  return false;
}

bool hark_h1_has_token(const char *value, size_t len, const char *token) {
  size_t at = 0, n;
  const char *el;
  while (next_element(value, len, &at, &el, &n)) {
    if (ieq(el, n, token)) return true;
  }
  return false;
}

bool hark_h1_content_length(const char *value, size_t len, uint64_t *out) {
  if (!len) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)value[i];
    if (c < '0' || c > '9') return false;
    unsigned d = c - '0';
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return true;
}

int hark_h1_framing(const hark_h1_head *h, hark_h1_body *out, const char **why) {
  *why = NULL;
  out->chunked = false;
  out->length = 0;
  size_t n_cl, n_te;
  const hark_h1_field *cl = hark_h1_find(h, "Content-Length", &n_cl);
  hark_h1_find(h, "Transfer-Encoding", &n_te);
  if (n_te) {
    if (h->minor == 0) return refuse(why, 400, "Transfer-Encoding in an HTTP/1.0 request");
    if (n_cl) return refuse(why, 400, "both Content-Length and Transfer-Encoding");
    /* The codings of every Transfer-Encoding line, in order, are one list. */
    size_t codings = 0, chunked = 0;
    bool last_chunked = false;
    for (size_t i = 0; i < h->n_fields; i++) {
      const hark_h1_field *f = &h->fields[i];
      if (!ieq(f->name, f->name_len, "Transfer-Encoding")) continue;
      size_t at = 0, n;
      const char *el;
      while (next_element(f->value, f->value_len, &at, &el, &n)) {
        codings++;
        last_chunked = ieq(el, n, "chunked");
        chunked += last_chunked;
      }
    }
    if (!codings) return refuse(why, 400, "an empty Transfer-Encoding");
    if (!last_chunked) return refuse(why, 400, "a Transfer-Encoding that does not end in chunked");
    if (chunked > 1) return refuse(why, 400, "chunked applied more than once");
    if (codings > 1) return refuse(why, 501, "a transfer coding other than chunked");
    out->chunked = true;
    return 0;
  }
  if (n_cl > 1) return refuse(why, 400, "more than one Content-Length");
  if (cl && !hark_h1_content_length(cl->value, cl->value_len, &out->length))
    return refuse(why, 400, "a Content-Length that is not a number");
  return 0;
}
