/*
 * h1_parse.h — HTTP/1.1 request heads as a server reads them (RFC 9112),
 * with no socket under it: the transport reads a connection's bytes into
 * a buffer of its own, asks hark_h1_head_end() whether a whole head is in
 * it, and hands that head to hark_h1_parse(); fuzz_h1_parse.c feeds both
 * anything. The parser owns nothing and allocates nothing: a parsed head
 * (hark_h1_head) is the caller's struct, and every pointer in it points
 * into the caller's buffer, valid while that buffer is neither freed,
 * moved nor overwritten. There is no state but the caller's: *scan for the
 * search, the head for the parse.
 *
 * It refuses what a server must refuse (RFC 9112 2.2, 3, 5; RFC 9110 5.5,
 * 5.6.2): a CR not followed by LF, a malformed request line (one space
 * between its three parts, no more, no tab), a version other than
 * HTTP/1.x (505), an obs-fold, whitespace between a field name and its
 * colon, control characters in a field value, more than
 * HARK_H1_MAX_FIELDS fields (431). A bare LF ends a line as CRLF does.
 * What a head means for the body (Content-Length, Transfer-Encoding) is
 * hark_h1_framing()'s; whether a head is too long is the caller's (it
 * bounds its buffer and refuses with 431 when the search finds no end
 * within it).
 */
#ifndef HARK_FRONTEND_HTTP_H1_PARSE_H
#define HARK_FRONTEND_HTTP_H1_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HARK_H1_MAX_FIELDS 64

typedef struct hark_h1_field {
  const char *name; /* as sent (case kept), 1+ tchar; points into the buffer */
  size_t name_len;
  const char *value; /* leading and trailing SP/HTAB trimmed; may be empty */
  size_t value_len;
} hark_h1_field;

typedef struct hark_h1_head {
  const char *method; /* 1+ tchar, case kept */
  size_t method_len;
  const char *target; /* the request-target as sent, query included */
  size_t target_len;
  int minor; /* 0: HTTP/1.0; 1: HTTP/1.1 (and HTTP/1.2-1.9, RFC 9110 2.5) */
  size_t n_fields;
  hark_h1_field fields[HARK_H1_MAX_FIELDS]; /* in the order sent */
  size_t len; /* bytes of the head, leading empty lines and its empty line included */
} hark_h1_head;

/*
 * Whether buf[0..len) holds a whole request head, searched incrementally
 * so that a client sending a byte at a time costs O(n) in all, not
 * O(n^2): *scan is the caller's state, 0 for a new head. Returns the
 * head's length, through its empty line, once one is whole, and sets
 * *scan back to 0 (for the next head, with buf then starting at it);
 * else returns 0 and notes in *scan how far it looked, and the next call,
 * with the same bytes and perhaps more after them, goes on from there (a
 * *scan that does not fit len starts again from 0). Lines end in CRLF or
 * a bare LF; empty lines before the request line (RFC 9112 2.2) are part
 * of the head, not its end. Where it ends a head, hark_h1_parse() does.
 */
size_t hark_h1_head_end(const char *buf, size_t len, size_t *scan);

/*
 * Parses the request head at the start of buf[0..len) (len as
 * hark_h1_head_end() returned; more bytes after the head are not read)
 * into *out. Returns 0, with out->len the head's length; or the status to
 * refuse it with — 400 (malformed, or no whole head within len), 431
 * (more than HARK_H1_MAX_FIELDS fields), 505 (a version other than 1.x)
 * — and a static reason in *why, with *out then partly filled. *why is
 * NULL on success.
 */
int hark_h1_parse(const char *buf, size_t len, hark_h1_head *out, const char **why);

/*
 * The first field named `name` (a NUL-terminated string, compared
 * without case), NULL when none; *count, if count is not NULL, is how
 * many fields have that name. The field is h's.
 */
const hark_h1_field *hark_h1_find_n(const hark_h1_head *h, const char *name, size_t n,
                                    size_t *count);
/* Inline, so that a literal name's length is known where it is asked. */
static inline const hark_h1_field *hark_h1_find(const hark_h1_head *h, const char *name,
                                                size_t *count) {
  return hark_h1_find_n(h, name, strlen(name), count);
}

/*
 * Whether a comma-separated field value (Connection: keep-alive, Upgrade;
 * Upgrade: websocket) holds `token` (NUL-terminated) as one of its
 * elements, compared without case; whitespace around elements and empty
 * elements are ignored. "closed" does not hold "close".
 */
bool hark_h1_has_token(const char *value, size_t len, const char *token);

/*
 * Reads a Content-Length value: true, with *out, for 1*DIGIT that fits in
 * a uint64_t; false for anything else (empty, a sign, spaces or a comma
 * inside, an overflow). The value is a field's, already trimmed.
 */
bool hark_h1_content_length(const char *value, size_t len, uint64_t *out);

/* How a request's body is delimited (RFC 9112 6.3). */
typedef struct hark_h1_body {
  bool chunked;    /* Transfer-Encoding: chunked; length is then 0 */
  uint64_t length; /* Content-Length, or 0 when the request has neither */
} hark_h1_body;

/*
 * Reads a parsed head's body framing, refusing what would let a request
 * be read two ways (request smuggling): returns 0 and fills *out, or 400
 * — a Content-Length that is not one 1*DIGIT value in one field line,
 * Content-Length and Transfer-Encoding both, Transfer-Encoding in an
 * HTTP/1.0 request, or a transfer coding list that does not end in
 * chunked (RFC 9112 6.1, 6.3) — or 501, a list that ends in chunked but
 * holds another coding (none is implemented), with a static reason in
 * *why.
 */
int hark_h1_framing(const hark_h1_head *h, hark_h1_body *out, const char **why);

#endif
