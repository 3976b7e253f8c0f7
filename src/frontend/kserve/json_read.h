/*
 * json_read.h — a small pull reader for JSON text, for parsers that want to
 * walk a document once without building a tree: strings are decoded where
 * they lie (or into a caller's buffer), numbers are handed back as their
 * text so 64-bit integers stay exact, and anything not wanted is skipped
 * after being checked. Private to src/frontend/kserve.
 *
 * Every reading function returns false on error, after recording the first
 * error (INVALID_ARG, with a message saying what and where) in r->err;
 * once set, r->err stays and later calls keep failing.
 */
#ifndef HARK_KSERVE_JSON_READ_H
#define HARK_KSERVE_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/types.h"

#define HARK_JR_MAX_DEPTH 64

typedef struct hark_jr {
  char *p, *end;   /* the unread text */
  hark_error *err; /* the first error, owned by the caller once set */
  int depth;       /* containers open; bounded by HARK_JR_MAX_DEPTH */
} hark_jr;

/* A number token, as text. */
typedef struct hark_jr_num {
  const char *text;
  size_t len;
  bool integer; /* no fraction, no exponent */
} hark_jr_num;

/* Records an error (printf-style) unless one is already recorded. */
bool hark_jr_fail(hark_jr *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "malformed JSON in request body: <what> at '<next bytes>'". */
bool hark_jr_syntax(hark_jr *r, const char *what);

void hark_jr_skip_ws(hark_jr *r);
static inline bool hark_jr_is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
/* Consumes `c` (after whitespace) if it is next. */
bool hark_jr_eat(hark_jr *r, char c);
/* Whether `c` is next (after whitespace). */
bool hark_jr_peek(hark_jr *r, char c);

/* A string value, decoded in place and NUL-terminated; *len (if given)
 * gets its length, which may include NULs from \u0000. */
bool hark_jr_string(hark_jr *r, const char **out, size_t *len);
/* Decodes the string whose opening quote is at `s` into `dst` (which may
 * be s + 1: decoding never lengthens). Returns the position after the
 * closing quote, or NULL if malformed; *n gets the decoded length. */
const char *hark_jr_decode_string(const char *s, const char *end, char *dst, size_t *n);
/* The same without writing: checks it and measures its decoded length. */
const char *hark_jr_scan_string(const char *s, const char *end, size_t *n);

bool hark_jr_number(hark_jr *r, hark_jr_num *num);
/* Consumes exactly `word` (true, false, null). */
bool hark_jr_literal(hark_jr *r, const char *word);
/* true / false; anything else fails with "<what> must be a boolean". */
bool hark_jr_bool(hark_jr *r, bool *out, const char *what);
/* Checks and skips any value. */
bool hark_jr_skip(hark_jr *r);

/*
 * Walks an object: start with *first = true; each successful call either
 * sets *done (the object ended) or leaves the reader at the value of the
 * member named *key (decoded in place), which the caller must consume.
 */
bool hark_jr_next_member(hark_jr *r, bool *first, const char **key, bool *done);
/* The same for an array's elements. */
bool hark_jr_next_element(hark_jr *r, bool *first, bool *done);

/* Integer tokens within [lo, hi] / [0, hi], exactly; false otherwise
 * (including for fractions and exponents). */
bool hark_jr_to_i64(const hark_jr_num *n, int64_t lo, int64_t hi, int64_t *out);
bool hark_jr_to_u64(const hark_jr_num *n, uint64_t hi, uint64_t *out);
/* Any number token; false when it overflows a double. */
bool hark_jr_to_double(const hark_jr_num *n, double *out);

#endif
