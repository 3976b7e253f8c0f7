/*
 * buf.h — a growable byte buffer and the JSON text writers every front end
 * shares (replies, Vosk messages, KServe documents).
 *
 * The OOM policy (alloc.h) decides the two kinds of call: hark_buf_reserve
 * and hark_buf_append are for client-sized data (a tensor's bytes, a
 * transcript of any length) and return false when the memory is not
 * there, so the caller can answer that client with an error; the small
 * appenders (constant text, numbers, names) never fail — they abort on
 * exhaustion like every small internal allocation. A buffer never shrinks;
 * hark_buf_free releases it. `len` bytes of `data` are used.
 */
#ifndef HARK_UTIL_BUF_H
#define HARK_UTIL_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct hark_buf {
  char *data;
  size_t len, cap;
} hark_buf;

/* Room for `extra` more bytes past len; false when out of memory or the
 * size overflows (the buffer is then unchanged). */
bool hark_buf_reserve(hark_buf *b, size_t extra);
/* Appends n client-sized bytes; false (buffer unchanged) when out of memory. */
bool hark_buf_append(hark_buf *b, const void *p, size_t n);
void hark_buf_free(hark_buf *b);
/* Hands the bytes over: returns data (the caller frees it) and empties b. */
char *hark_buf_release(hark_buf *b);

/* Small appends: never fail (abort on exhaustion). */
void hark_buf_put(hark_buf *b, const void *p, size_t n);
/* Inline, so that a literal's length is known where it is written. */
static inline void hark_buf_puts(hark_buf *b, const char *s) { hark_buf_put(b, s, strlen(s)); }
void hark_buf_put_u64(hark_buf *b, uint64_t v);
void hark_buf_put_i64(hark_buf *b, int64_t v);
/* `s` (n bytes) as a quoted JSON string. Bytes that are not valid UTF-8
 * are written as \u00XX (their Latin-1 reading) so the output stays JSON.
 * Client-sized: false when out of memory. */
bool hark_buf_put_jstr(hark_buf *b, const char *s, size_t n);
/* A NUL-terminated string of internal size (a name, a message) as a quoted
 * JSON string: never fails. */
void hark_buf_put_str(hark_buf *b, const char *s);
/* A fixed-point number with six decimals (0 for NaN and infinities). */
void hark_buf_put_fixed6(hark_buf *b, double v);

/* Formatting into room the caller reserved: each returns the length
 * written. u64 needs 20 bytes, i64 21, a JSON string HARK_JSTR_ROOM(n). */
size_t hark_fmt_u64(char *p, uint64_t v);
size_t hark_fmt_i64(char *p, int64_t v);
#define HARK_JSTR_ROOM(n) ((n)*6 + 2)
size_t hark_fmt_jstr(char *p, const char *s, size_t n);

#endif
