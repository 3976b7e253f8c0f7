/*
 * fuzz_h1_parse.c — libFuzzer target for the HTTP/1.1 request head parser
 * (src/frontend/http/h1_parse.c). The input is a connection's bytes: the
 * end-of-head search runs on it whole, then in reads whose sizes come
 * from a hash of the input, then a byte at a time, and all three must end
 * the head at the same byte (and the cut ones at the read that completes
 * it, never before). The parse must agree with the search: a head parsed
 * whole ends where the search ended it, no head parses when the search
 * found none, and the input cut at the search's end parses the same way.
 * A parsed head must hold only what the parser promises: pointers and
 * lengths inside the buffer, a token method, a visible target, names
 * that are tokens, trimmed values with no control bytes, at most
 * HARK_H1_MAX_FIELDS fields; and the field readings must run on it. The
 * input is copied to a buffer of its exact size, so that the sanitizers
 * see any read past its end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/http/h1_parse.h"

static bool tchar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Whether p[0..n) lies inside buf[0..len). */
static bool inside(const char *buf, size_t len, const char *p, size_t n) {
  return p >= buf && (size_t)(p - buf) <= len && n <= len - (size_t)(p - buf);
}

/* The search fed in reads of 1 + (LCG % 23) bytes, or a byte at a time
 * when seed is 0: where it ended the head (0 for nowhere), checking that
 * it did so at the read that completed it. */
static size_t search_cut(const char *buf, size_t len, uint32_t seed, size_t whole) {
  size_t scan = 0, have = 0;
  while (have < len) {
    size_t n = 1;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      n = 1 + (seed >> 16) % 23;
    }
    size_t before = have;
    have = n < len - have ? have + n : len;
    size_t end = hark_h1_head_end(buf, have, &scan);
    if (end) {
      if (end != whole || before >= whole || have < whole || scan != 0) abort();
      return end;
    }
  }
  return 0;
}

static void check_head(const char *buf, size_t size, const hark_h1_head *h) {
  if (h->len == 0 || h->len > size) abort();
  if (!h->method_len || !inside(buf, h->len, h->method, h->method_len)) abort();
  for (size_t i = 0; i < h->method_len; i++)
    if (!tchar((unsigned char)h->method[i])) abort();
  if (!h->target_len || !inside(buf, h->len, h->target, h->target_len)) abort();
  for (size_t i = 0; i < h->target_len; i++)
    if ((unsigned char)h->target[i] <= 0x20 || (unsigned char)h->target[i] >= 0x7F) abort();
  if (h->minor != 0 && h->minor != 1) abort();
  if (h->n_fields > HARK_H1_MAX_FIELDS) abort();
  for (size_t i = 0; i < h->n_fields; i++) {
    const hark_h1_field *f = &h->fields[i];
    if (!f->name_len || !inside(buf, h->len, f->name, f->name_len)) abort();
    if (!inside(buf, h->len, f->value, f->value_len)) abort();
    for (size_t k = 0; k < f->name_len; k++)
      if (!tchar((unsigned char)f->name[k])) abort();
    if (f->name + f->name_len >= buf + h->len || f->name[f->name_len] != ':') abort();
    if (f->value_len && (f->value[0] == ' ' || f->value[0] == '\t' ||
                         f->value[f->value_len - 1] == ' ' || f->value[f->value_len - 1] == '\t'))
      abort();
    for (size_t k = 0; k < f->value_len; k++) {
      unsigned char c = (unsigned char)f->value[k];
      if ((c < 0x20 && c != '\t') || c == 0x7F) abort();
    }
    /* Lookups by the field's own name (NUL-terminated, in another case). */
    char name[256];
    if (f->name_len < sizeof name) {
      for (size_t k = 0; k < f->name_len; k++)
        name[k] = (char)(f->name[k] >= 'a' && f->name[k] <= 'z' ? f->name[k] - 32 : f->name[k]);
      name[f->name_len] = '\0';
      size_t count = 0;
      const hark_h1_field *first = hark_h1_find(h, name, &count);
      if (!first || first > f || count < 1 || count > h->n_fields) abort();
      if (first->name_len != f->name_len) abort();
    }
    uint64_t v;
    if (hark_h1_content_length(f->value, f->value_len, &v)) {
      if (!f->value_len) abort();
      for (size_t k = 0; k < f->value_len; k++)
        if (f->value[k] < '0' || f->value[k] > '9') abort();
    }
    bool has = hark_h1_has_token(f->value, f->value_len, "close");
    if (has && f->value_len < 5) abort();
    (void)hark_h1_has_token(f->value, f->value_len, "websocket");
  }
  const char *why;
  hark_h1_body body;
  int status = hark_h1_framing(h, &body, &why);
  if (status != 0 && status != 400 && status != 501) abort();
  if (status ? !why || !*why : why != NULL) abort();
  if (status == 0 && body.chunked && body.length) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size ? size : 1);
  if (!buf) abort();
  if (size) memcpy(buf, data, size);
  uint32_t hash = 2166136261u; /* FNV-1a, for where the reads are cut */
  for (size_t i = 0; i < size; i++) hash = (hash ^ data[i]) * 16777619u;

  size_t scan = 0;
  size_t whole = hark_h1_head_end(buf, size, &scan);
  if (whole > size || (whole && scan != 0)) abort();
  if (search_cut(buf, size, hash | 1u, whole) != whole) abort();
  if (size <= 65536 && search_cut(buf, size, 0, whole) != whole) abort();

  hark_h1_head h;
  const char *why = "unset";
  int status = hark_h1_parse(buf, size, &h, &why);
  if (status != 0 && status != 400 && status != 431 && status != 505) abort();
  if (status ? !why || !*why : why != NULL) abort();
  if (!whole && !status) abort(); /* no end found, yet a head parsed */
  if (!status) {
    if (h.len != whole) abort();
    check_head(buf, size, &h);
  }
  if (whole) {
    /* Cut at the search's end: the same verdict, and the same head. */
    hark_h1_head cut;
    const char *why_cut;
    int status_cut = hark_h1_parse(buf, whole, &cut, &why_cut);
    if (status_cut != status || why_cut != why) abort();
    if (!status && (cut.len != h.len || cut.n_fields != h.n_fields)) abort();
  }

  /* The readings take any bytes. */
  uint64_t v;
  if (hark_h1_content_length(buf, size, &v)) {
    /* Digits only, and the same number with its leading zeros dropped. */
    uint64_t again = 0;
    for (size_t i = 0; i < size; i++) {
      if (buf[i] < '0' || buf[i] > '9') abort();
      again = again * 10 + (uint64_t)(buf[i] - '0');
    }
    if (!size || again != v) abort();
  }
  (void)hark_h1_has_token(buf, size, "keep-alive");
  free(buf);
  return 0;
}
