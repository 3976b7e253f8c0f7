/*
 * pbtxt.c — protobuf text format → a tree of hark_pb_field (see pbtxt.h).
 *
 * A recursive-descent parser reads straight from the caller's bytes: no
 * separate token stream, one pass, the line counted as whitespace is
 * skipped. Recursion happens only at message boundaries and is capped at
 * HARK_PBTXT_MAX_DEPTH, so hostile nesting gets an error, not a stack
 * overflow. Every node and string goes into the document's arena, which is
 * why error paths need no cleanup beyond freeing the document.
 *
 * Accepted: `#` comments; `f: v`, `f { }`, `f: { }`, `f < >`; lists
 * `f: [v, v]` and `f [ {..}, {..} ]`; optional `,` or `;` after a field;
 * adjacent strings concatenated; C escapes (\n \t \\ \" \' \ooo \xHH \uHHHH
 * \UHHHHHHHH); integers in decimal, hex and octal; floats with an optional
 * f suffix, -inf, nan. Not accepted: extension names `[pkg.ext]` and `Any`
 * expansions, and \u surrogate pairs.
 */
#include "core/pbtxt.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/arena.h"

/* ---- the document ------------------------------------------------------------- */

struct hark_pbtxt {
  hark_arena *arena; /* every node and string of the tree */
  hark_pb_field root;
};

/* Zeroed memory that lives until hark_pbtxt_free; NULL when out of memory. */
static void *arena_alloc(hark_pbtxt *doc, size_t n) { return hark_arena_alloc(doc->arena, n); }

static char *arena_strndup(hark_pbtxt *doc, const char *s, size_t n) {
  return hark_arena_strndup(doc->arena, s, n);
}

void hark_pbtxt_free(hark_pbtxt *doc) {
  if (!doc) return;
  hark_arena_free(doc->arena);
  free(doc);
}

const hark_pb_field *hark_pbtxt_root(const hark_pbtxt *doc) { return doc ? &doc->root : NULL; }

const char *hark_pb_kind_name(hark_pb_kind kind) {
  switch (kind) {
  case HARK_PB_MESSAGE: return "a message";
  case HARK_PB_LIST: return "a list";
  case HARK_PB_STRING: return "a string";
  case HARK_PB_INT: return "an integer";
  case HARK_PB_FLOAT: return "a number";
  case HARK_PB_IDENT: return "an identifier";
  }
  return "a value";
}

/* ---- reading ----------------------------------------------------------------- */

typedef struct parser {
  hark_pbtxt *doc;
  const char *p, *end;
  const char *file;
  uint32_t line;
  unsigned depth;
} parser;

static hark_error *syntax_error(const parser *ps, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static hark_error *syntax_error(const parser *ps, uint32_t line, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return hark_error_new(HARK_ERR_INVALID_ARG, "%s:%u: %s", ps->file, line, msg);
}

static hark_error *out_of_memory(void) {
  return hark_error_new(HARK_ERR_INTERNAL, "out of memory parsing a config");
}

/* The next byte, or -1 at the end of the input. */
static int peek(const parser *ps) { return ps->p < ps->end ? (unsigned char)*ps->p : -1; }

static bool is_ident_start(int c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_digit(int c) { return c >= '0' && c <= '9'; }

static bool is_ident_char(int c) { return is_ident_start(c) || is_digit(c); }

static void skip_space(parser *ps) {
  while (ps->p < ps->end) {
    char c = *ps->p;
    if (c == '\n') {
      ps->line++;
      ps->p++;
    } else if (c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f') {
      ps->p++;
    } else if (c == '#') {
      while (ps->p < ps->end && *ps->p != '\n') ps->p++;
    } else {
      return;
    }
  }
}

/* "end of input", "'x'" or "byte 0x01": what the parser found instead. */
static const char *describe_here(const parser *ps, char *buf, size_t n) {
  int c = peek(ps);
  if (c < 0)
    snprintf(buf, n, "end of input");
  else if (c > ' ' && c < 0x7f)
    snprintf(buf, n, "'%c'", c);
  else
    snprintf(buf, n, "byte 0x%02x", (unsigned)c);
  return buf;
}

static hark_error *unexpected(const parser *ps, const char *expected) {
  char found[32];
  return syntax_error(ps, ps->line, "expected %s, found %s", expected,
                      describe_here(ps, found, sizeof found));
}

static hark_pb_field *new_field(parser *ps, const char *name, uint32_t line) {
  hark_pb_field *f = arena_alloc(ps->doc, sizeof *f);
  if (f) {
    f->name = name;
    f->line = line;
  }
  return f;
}

/* ---- strings ----------------------------------------------------------------- */

typedef struct strbuf {
  char *data;
  size_t len, cap;
} strbuf;

static bool strbuf_put(strbuf *b, const char *s, size_t n) {
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap - b->len < n) {
      if (cap > SIZE_MAX / 2) return false;
      cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d) return false;
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, s, n);
  b->len += n;
  return true;
}

static int hex_value(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/* Reads up to `max` digits of `base` (8 or 16); returns how many were read. */
static int read_digits(parser *ps, int base, int max, uint32_t *value) {
  int n = 0;
  *value = 0;
  while (n < max && ps->p < ps->end) {
    int d = hex_value((unsigned char)*ps->p);
    if (d < 0 || d >= base) break;
    *value = *value * (uint32_t)base + (uint32_t)d;
    ps->p++;
    n++;
  }
  return n;
}

static size_t utf8_encode(uint32_t cp, char out[4]) {
  if (cp < 0x80) {
    out[0] = (char)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (char)(0xE0 | (cp >> 12));
    out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (char)(0xF0 | (cp >> 18));
  out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (char)(0x80 | (cp & 0x3F));
  return 4;
}

/* \u and \U: exactly 4 or 8 hex digits naming a Unicode scalar value. */
static hark_error *read_unicode_escape(parser *ps, int digits, strbuf *b) {
  uint32_t cp;
  if (read_digits(ps, 16, digits, &cp) != digits)
    return syntax_error(ps, ps->line, "\\%c escape needs %d hex digits", digits == 4 ? 'u' : 'U',
                        digits);
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
    return syntax_error(ps, ps->line, "\\%c escape names no Unicode character",
                        digits == 4 ? 'u' : 'U');
  char utf8[4];
  size_t n = utf8_encode(cp, utf8);
  return strbuf_put(b, utf8, n) ? NULL : out_of_memory();
}

static char simple_escape(int e) {
  switch (e) {
  case 'a': return '\a';
  case 'b': return '\b';
  case 'f': return '\f';
  case 'n': return '\n';
  case 'r': return '\r';
  case 't': return '\t';
  case 'v': return '\v';
  case '\\': return '\\';
  case '\'': return '\'';
  case '"': return '"';
  case '?': return '?';
  }
  return 0;
}

/* After a backslash: decodes one escape sequence into b. */
static hark_error *read_escape(parser *ps, strbuf *b) {
  char found[32];
  int e = peek(ps);
  if (e < 0) return NULL; /* the caller reports the unterminated string */
  char c = simple_escape(e);
  uint32_t v;
  if (c) {
    ps->p++;
  } else if (e >= '0' && e <= '7') {
    read_digits(ps, 8, 3, &v);
    if (v > 0xFF) return syntax_error(ps, ps->line, "octal escape \\%o is over \\377", v);
    c = (char)v;
  } else if (e == 'x' || e == 'X') {
    ps->p++;
    if (read_digits(ps, 16, 2, &v) == 0)
      return syntax_error(ps, ps->line, "\\x escape needs hex digits");
    c = (char)v;
  } else if (e == 'u' || e == 'U') {
    ps->p++;
    return read_unicode_escape(ps, e == 'u' ? 4 : 8, b);
  } else {
    return syntax_error(ps, ps->line, "invalid escape \\ before %s",
                        describe_here(ps, found, sizeof found));
  }
  return strbuf_put(b, &c, 1) ? NULL : out_of_memory();
}

/* One quoted string (either quote); a raw newline or the end is an error. */
static hark_error *read_one_string(parser *ps, strbuf *b) {
  char quote = *ps->p++;
  uint32_t line = ps->line;
  for (;;) {
    if (ps->p >= ps->end || *ps->p == '\n')
      return syntax_error(ps, line, "unterminated string (a string ends on the line it starts)");
    char c = *ps->p;
    if (c == quote) {
      ps->p++;
      return NULL;
    }
    if (c == '\\') {
      ps->p++;
      hark_error *err = read_escape(ps, b);
      if (err) return err;
      continue;
    }
    /* Copy the run of plain bytes at once. */
    const char *start = ps->p;
    while (ps->p < ps->end && *ps->p != quote && *ps->p != '\\' && *ps->p != '\n') ps->p++;
    if (!strbuf_put(b, start, (size_t)(ps->p - start))) return out_of_memory();
  }
}

static bool at_quote(const parser *ps) { return peek(ps) == '"' || peek(ps) == '\''; }

/* "a" 'b' "c" → one STRING node holding "abc", as protobuf concatenates. */
static hark_error *read_strings(parser *ps, hark_pb_field *f) {
  strbuf b = {0};
  hark_error *err = NULL;
  do {
    err = read_one_string(ps, &b);
    skip_space(ps);
  } while (!err && at_quote(ps));
  if (!err) {
    f->kind = HARK_PB_STRING;
    f->len = b.len;
    f->text = arena_strndup(ps->doc, b.data ? b.data : "", b.len);
    if (!f->text) err = out_of_memory();
  }
  free(b.data);
  return err;
}

/* ---- numbers ----------------------------------------------------------------- */

/* Digits of `base` into *u; -1: a non-digit or none, -2: over 64 bits. */
static int parse_uint(const char *s, size_t n, unsigned base, uint64_t *u) {
  if (n == 0) return -1;
  *u = 0;
  for (size_t i = 0; i < n; i++) {
    int d = hex_value((unsigned char)s[i]);
    if (d < 0 || (unsigned)d >= base) return -1;
    if (*u > (UINT64_MAX - (unsigned)d) / base) return -2;
    *u = *u * base + (unsigned)d;
  }
  return 0;
}

static bool looks_like_float(const char *s, size_t n) {
  if (memchr(s, '.', n) || memchr(s, 'e', n) || memchr(s, 'E', n)) return true;
  return s[n - 1] == 'f' || s[n - 1] == 'F';
}

static hark_error *read_float(parser *ps, hark_pb_field *f, const char *s, size_t n) {
  char buf[128];
  if (n >= sizeof buf) return syntax_error(ps, f->line, "number '%.40s...' is too long", s);
  memcpy(buf, s, n);
  if (buf[n - 1] == 'f' || buf[n - 1] == 'F') n--;
  buf[n] = '\0';
  char *endp;
  errno = 0;
  double d = n ? strtod(buf, &endp) : 0;
  if (n == 0 || *endp) return syntax_error(ps, f->line, "invalid number '%s'", f->text);
  if (errno == ERANGE && isinf(d))
    return syntax_error(ps, f->line, "number '%s' is out of range", f->text);
  f->kind = HARK_PB_FLOAT;
  f->d = f->negative ? -d : d;
  return NULL;
}

/* The token at ps->p: letters, digits, '_', '.', and a sign after an exponent. */
static size_t number_token_length(const parser *ps) {
  const char *s = ps->p, *q = s;
  bool hex = ps->end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
  while (q < ps->end) {
    char c = *q;
    if (is_ident_char((unsigned char)c) || c == '.')
      q++;
    else if ((c == '+' || c == '-') && !hex && q > s && (q[-1] == 'e' || q[-1] == 'E'))
      q++;
    else
      break;
  }
  return (size_t)(q - s);
}

static hark_error *read_number(parser *ps, hark_pb_field *f, bool negative) {
  const char *s = ps->p;
  size_t n = number_token_length(ps);
  ps->p += n;
  f->negative = negative;
  /* Keep the spelling for messages; a leading '-' is part of it. */
  char *text = arena_alloc(ps->doc, n + 2);
  if (!text) return out_of_memory();
  text[0] = '-';
  memcpy(text + 1, s, n);
  f->text = negative ? text : text + 1;
  f->len = n + (negative ? 1 : 0);
  int rc;
  if (n >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    rc = parse_uint(s + 2, n - 2, 16, &f->u);
  else if (looks_like_float(s, n))
    return read_float(ps, f, s, n);
  else if (s[0] == '0' && n > 1)
    rc = parse_uint(s + 1, n - 1, 8, &f->u);
  else
    rc = parse_uint(s, n, 10, &f->u);
  if (rc == -2) return syntax_error(ps, f->line, "integer '%s' does not fit in 64 bits", f->text);
  if (rc < 0) return syntax_error(ps, f->line, "invalid number '%s'", f->text);
  f->kind = HARK_PB_INT;
  f->d = negative ? -(double)f->u : (double)f->u;
  return NULL;
}

/* ---- values ------------------------------------------------------------------ */

static hark_error *read_identifier_value(parser *ps, hark_pb_field *f) {
  const char *s = ps->p;
  while (ps->p < ps->end && is_ident_char((unsigned char)*ps->p)) ps->p++;
  f->kind = HARK_PB_IDENT;
  f->len = (size_t)(ps->p - s);
  f->text = arena_strndup(ps->doc, s, f->len);
  return f->text ? NULL : out_of_memory();
}

/* After '-': a number, or inf / infinity / nan spelled in any case. */
static hark_error *read_negative(parser *ps, hark_pb_field *f) {
  ps->p++;
  skip_space(ps);
  int c = peek(ps);
  if (is_digit(c) || (c == '.' && ps->end - ps->p > 1 && is_digit((unsigned char)ps->p[1])))
    return read_number(ps, f, true);
  if (!is_ident_start(c)) return unexpected(ps, "a number after '-'");
  hark_error *err = read_identifier_value(ps, f);
  if (err) return err;
  bool inf = strcasecmp(f->text, "inf") == 0 || strcasecmp(f->text, "infinity") == 0;
  if (!inf && strcasecmp(f->text, "nan") != 0)
    return syntax_error(ps, f->line, "expected a number after '-', found '%s'", f->text);
  f->kind = HARK_PB_FLOAT;
  f->negative = true;
  f->d = inf ? -INFINITY : NAN;
  char *text = arena_alloc(ps->doc, f->len + 2);
  if (!text) return out_of_memory();
  text[0] = '-';
  memcpy(text + 1, f->text, f->len);
  f->text = text;
  f->len++;
  return NULL;
}

static hark_error *read_scalar(parser *ps, hark_pb_field *f) {
  int c = peek(ps);
  if (c == '"' || c == '\'') return read_strings(ps, f);
  if (c == '-') return read_negative(ps, f);
  if (is_digit(c) || (c == '.' && ps->end - ps->p > 1 && is_digit((unsigned char)ps->p[1])))
    return read_number(ps, f, false);
  if (is_ident_start(c)) return read_identifier_value(ps, f);
  char what[128];
  snprintf(what, sizeof what, "a value for field '%.64s'", f->name);
  return unexpected(ps, what);
}

/* ---- messages and lists --------------------------------------------------------- */

static hark_error *read_field(parser *ps, hark_pb_field **out);

/* Fields up to `closer` ('}' or '>'), or to the end of input when closer is 0. */
static hark_error *read_fields(parser *ps, hark_pb_field *msg, char closer, uint32_t open_line) {
  hark_pb_field **tail = &msg->child;
  for (;;) {
    skip_space(ps);
    if (ps->p >= ps->end) {
      if (!closer) return NULL;
      return syntax_error(ps, ps->line,
                          "unexpected end of input: '%c' opened at line %u is not closed",
                          closer == '}' ? '{' : '<', open_line);
    }
    if (closer && *ps->p == closer) {
      ps->p++;
      return NULL;
    }
    if (!is_ident_start(peek(ps)))
      return unexpected(ps, closer ? "a field name or the message's end" : "a field name");
    hark_pb_field *f = NULL;
    hark_error *err = read_field(ps, &f);
    if (err) return err;
    *tail = f;
    tail = &f->next;
    skip_space(ps);
    if (peek(ps) == ',' || peek(ps) == ';') ps->p++;
  }
}

static hark_error *read_message(parser *ps, hark_pb_field *f) {
  if (ps->depth >= HARK_PBTXT_MAX_DEPTH)
    return syntax_error(ps, ps->line, "messages nested deeper than %d levels",
                        HARK_PBTXT_MAX_DEPTH);
  char closer = *ps->p == '{' ? '}' : '>';
  uint32_t open_line = ps->line;
  ps->p++;
  ps->depth++;
  f->kind = HARK_PB_MESSAGE;
  hark_error *err = read_fields(ps, f, closer, open_line);
  ps->depth--;
  return err;
}

static bool at_message(const parser *ps) { return peek(ps) == '{' || peek(ps) == '<'; }

/* One list element: a message, or (only after ':') a scalar. */
static hark_error *read_element(parser *ps, hark_pb_field *list, bool colon, hark_pb_field **out) {
  hark_pb_field *e = new_field(ps, list->name, ps->line);
  if (!e) return out_of_memory();
  *out = e;
  if (at_message(ps)) return read_message(ps, e);
  if (!colon)
    return syntax_error(ps, ps->line, "field '%.64s' needs ':' before a list of values",
                        list->name);
  return read_scalar(ps, e);
}

static hark_error *read_list(parser *ps, hark_pb_field *f, bool colon) {
  uint32_t open_line = ps->line;
  ps->p++;
  f->kind = HARK_PB_LIST;
  skip_space(ps);
  if (peek(ps) == ']') {
    ps->p++;
    return NULL;
  }
  hark_pb_field **tail = &f->child;
  for (;;) {
    hark_error *err = read_element(ps, f, colon, tail);
    if (err) return err;
    tail = &(*tail)->next;
    skip_space(ps);
    if (ps->p >= ps->end)
      return syntax_error(
          ps, ps->line, "unexpected end of input: '[' opened at line %u is not closed", open_line);
    char c = *ps->p++;
    if (c == ']') return NULL;
    if (c != ',') {
      ps->p--;
      return unexpected(ps, "',' or ']' in a list");
    }
    skip_space(ps);
  }
}

static hark_error *read_field(parser *ps, hark_pb_field **out) {
  uint32_t line = ps->line;
  const char *s = ps->p;
  while (ps->p < ps->end && is_ident_char((unsigned char)*ps->p)) ps->p++;
  const char *name = arena_strndup(ps->doc, s, (size_t)(ps->p - s));
  hark_pb_field *f = name ? new_field(ps, name, line) : NULL;
  if (!f) return out_of_memory();
  *out = f;
  skip_space(ps);
  bool colon = peek(ps) == ':';
  if (colon) {
    ps->p++;
    skip_space(ps);
  }
  if (at_message(ps)) return read_message(ps, f);
  if (peek(ps) == '[') return read_list(ps, f, colon);
  if (!colon) {
    char what[128];
    snprintf(what, sizeof what, "':' or '{' after field '%.64s'", name);
    return unexpected(ps, what);
  }
  return read_scalar(ps, f);
}

/* ---- entry point ---------------------------------------------------------------- */

hark_error *hark_pbtxt_parse(const char *text, size_t len, const char *file, hark_pbtxt **out) {
  *out = NULL;
  parser ps = {.p = text, .end = text + len, .file = file ? file : "<input>", .line = 1};
  if (!text && len) return hark_error_new(HARK_ERR_INVALID_ARG, "%s: no text", ps.file);
  if (!text) ps.p = ps.end = "";
  /* A NUL is never valid text; refusing it up front keeps C strings honest. */
  const char *nul = len ? memchr(text, '\0', len) : NULL;
  if (nul) {
    for (const char *q = text; q < nul; q++) ps.line += *q == '\n';
    return syntax_error(&ps, ps.line, "NUL byte in the text");
  }
  ps.doc = calloc(1, sizeof *ps.doc);
  if (!ps.doc) return out_of_memory();
  ps.doc->arena = hark_arena_new();
  ps.doc->root.name = "";
  ps.doc->root.line = 1;
  ps.doc->root.kind = HARK_PB_MESSAGE;
  hark_error *err = read_fields(&ps, &ps.doc->root, 0, 1);
  if (err) {
    hark_pbtxt_free(ps.doc);
    return err;
  }
  *out = ps.doc;
  return NULL;
}
