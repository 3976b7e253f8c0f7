/* Unit tests for src/frontend/http/h1_parse.c: request heads found (whole,
 * a byte at a time, pipelined) and parsed, every refusal with its status,
 * and the field readings (lookup, token lists, Content-Length, framing). */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/http/h1_parse.h"

/* Parses the NUL-terminated s whole: the status, *h filled. */
static int parse(const char *s, hark_h1_head *h, const char **why) {
  return hark_h1_parse(s, strlen(s), h, why);
}

/* Whether a[0..n) is the NUL-terminated b. */
static bool is(const char *a, size_t n, const char *b) {
  return n == strlen(b) && memcmp(a, b, n) == 0;
}

/* The end hark_h1_head_end finds in s, searched whole. */
static size_t end_of(const char *s) {
  size_t scan = 0;
  return hark_h1_head_end(s, strlen(s), &scan);
}

/* The end found feeding s a byte at a time, checking that none is found
 * before it; 0 when none is. */
static size_t end_bytewise(const char *s) {
  size_t scan = 0, len = strlen(s);
  for (size_t n = 1; n <= len; n++) {
    size_t end = hark_h1_head_end(s, n, &scan);
    if (end) {
      assert_int_equal(end, n); /* found at the byte that completes it */
      assert_int_equal(scan, 0);
      return end;
    }
  }
  return 0;
}

static void test_get(void **state) {
  (void)state;
  const char *s =
      "GET /v2/models/simple/ready?verbose=1&x=%20 HTTP/1.1\r\n"
      "Host: localhost:8000\r\n"
      "User-Agent: curl/8.0\r\n"
      "Accept: */*\r\n"
      "\r\n";
  hark_h1_head h;
  const char *why = "unset";
  assert_int_equal(parse(s, &h, &why), 0);
  assert_null(why);
  assert_true(is(h.method, h.method_len, "GET"));
  assert_true(is(h.target, h.target_len, "/v2/models/simple/ready?verbose=1&x=%20"));
  assert_int_equal(h.minor, 1);
  assert_int_equal(h.n_fields, 3);
  assert_true(is(h.fields[0].name, h.fields[0].name_len, "Host"));
  assert_true(is(h.fields[0].value, h.fields[0].value_len, "localhost:8000"));
  assert_true(is(h.fields[2].name, h.fields[2].name_len, "Accept"));
  assert_true(is(h.fields[2].value, h.fields[2].value_len, "*/*"));
  assert_int_equal(h.len, strlen(s));
  assert_int_equal(end_of(s), strlen(s));
  assert_int_equal(end_bytewise(s), strlen(s));
  /* Pointers into the caller's buffer. */
  assert_ptr_equal(h.method, s);
  assert_true(h.fields[2].value > s && h.fields[2].value < s + strlen(s));
}

static void test_post_and_fields(void **state) {
  (void)state;
  const char *s =
      "POST /v2/models/m/infer HTTP/1.0\r\n"
      "content-length:   12 \t\r\n"
      "X-Empty:\r\n"
      "X-Blank: \t \r\n"
      "X-Inner:  a  b\tc \r\n"
      "X-High: caf\xc3\xa9\r\n"
      "x-dup: one\r\n"
      "X-DUP: two\r\n"
      "\r\n"
      "hello world!";
  hark_h1_head h;
  const char *why;
  assert_int_equal(parse(s, &h, &why), 0);
  assert_true(is(h.method, h.method_len, "POST"));
  assert_int_equal(h.minor, 0);
  assert_int_equal(h.n_fields, 7);
  /* The body is not the head's. */
  assert_int_equal(h.len, strlen(s) - strlen("hello world!"));
  assert_int_equal(end_of(s), h.len);
  assert_true(is(h.fields[0].value, h.fields[0].value_len, "12"));
  assert_int_equal(h.fields[1].value_len, 0);
  assert_int_equal(h.fields[2].value_len, 0);
  assert_true(is(h.fields[3].value, h.fields[3].value_len, "a  b\tc"));
  assert_true(is(h.fields[4].value, h.fields[4].value_len, "caf\xc3\xa9"));
  /* Lookup without case; duplicates counted, the first returned. */
  size_t count = 99;
  const hark_h1_field *f = hark_h1_find(&h, "Content-Length", &count);
  assert_non_null(f);
  assert_int_equal(count, 1);
  assert_ptr_equal(f, &h.fields[0]);
  f = hark_h1_find(&h, "X-Dup", &count);
  assert_int_equal(count, 2);
  assert_true(is(f->value, f->value_len, "one"));
  assert_null(hark_h1_find(&h, "Host", &count));
  assert_int_equal(count, 0);
  assert_null(hark_h1_find(&h, "X-Du", NULL)); /* a prefix is another name */
  assert_non_null(hark_h1_find(&h, "x-empty", NULL));
  hark_h1_body body;
  assert_int_equal(hark_h1_framing(&h, &body, &why), 0);
  assert_false(body.chunked);
  assert_int_equal(body.length, 12);
}

static void test_no_fields_and_versions(void **state) {
  (void)state;
  hark_h1_head h;
  const char *why;
  assert_int_equal(parse("OPTIONS * HTTP/1.1\r\n\r\n", &h, &why), 0);
  assert_int_equal(h.n_fields, 0);
  assert_true(is(h.target, h.target_len, "*"));
  assert_int_equal(parse("GET / HTTP/1.0\r\n\r\n", &h, &why), 0);
  assert_int_equal(h.minor, 0);
  /* A later 1.x is answered as 1.1 (RFC 9110 2.5). */
  assert_int_equal(parse("GET / HTTP/1.2\r\n\r\n", &h, &why), 0);
  assert_int_equal(h.minor, 1);
  assert_int_equal(parse("GET / HTTP/1.9\r\n\r\n", &h, &why), 0);
  assert_int_equal(h.minor, 1);
  assert_int_equal(parse("GET / HTTP/2.0\r\n\r\n", &h, &why), 505);
  assert_non_null(why);
  assert_int_equal(parse("GET / HTTP/0.9\r\n\r\n", &h, &why), 505);
  assert_int_equal(parse("GET / HTTP/9.9\r\n\r\n", &h, &why), 505);
  /* Methods are tokens, case kept; any token will do. */
  assert_int_equal(parse("M-SEARCH /x HTTP/1.1\r\n\r\n", &h, &why), 0);
  assert_true(is(h.method, h.method_len, "M-SEARCH"));
  assert_int_equal(parse("get /x HTTP/1.1\r\n\r\n", &h, &why), 0);
  assert_true(is(h.method, h.method_len, "get"));
  assert_int_equal(parse("CONNECT example.com:443 HTTP/1.1\r\n\r\n", &h, &why), 0);
  assert_true(is(h.target, h.target_len, "example.com:443"));
}

static void test_line_endings(void **state) {
  (void)state;
  const char *lf = "GET /a HTTP/1.1\nHost: x\nA:  b \n\n";
  const char *mixed = "GET /a HTTP/1.1\r\nHost: x\nA:  b \r\n\n";
  const char *mixed2 = "GET /a HTTP/1.1\nHost: x\r\nA:  b \n\r\n";
  const char *heads[] = {lf, mixed, mixed2};
  for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
    hark_h1_head h;
    const char *why;
    assert_int_equal(parse(heads[i], &h, &why), 0);
    assert_int_equal(h.len, strlen(heads[i]));
    assert_int_equal(h.n_fields, 2);
    assert_true(is(h.fields[0].value, h.fields[0].value_len, "x"));
    assert_true(is(h.fields[1].value, h.fields[1].value_len, "b"));
    assert_true(is(h.target, h.target_len, "/a"));
    assert_int_equal(end_of(heads[i]), strlen(heads[i]));
    assert_int_equal(end_bytewise(heads[i]), strlen(heads[i]));
  }
}

static void test_leading_empty_lines(void **state) {
  (void)state;
  const char *s = "\r\n\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n";
  hark_h1_head h;
  const char *why;
  assert_int_equal(parse(s, &h, &why), 0);
  assert_int_equal(h.len, strlen(s));
  assert_ptr_equal(h.method, s + 5);
  assert_int_equal(h.n_fields, 1);
  assert_int_equal(end_of(s), strlen(s));
  assert_int_equal(end_bytewise(s), strlen(s));
  /* Empty lines alone are no head, however many. */
  assert_int_equal(end_of("\r\n\r\n\r\n\n\n"), 0);
  assert_int_equal(end_bytewise("\r\n\r\n\r\n\n\n"), 0);
  assert_int_equal(parse("\r\n\r\n", &h, &why), 400);
  /* A head with no fields ends at the empty line after its request line. */
  assert_int_equal(end_of("\r\nGET / HTTP/1.1\r\n\r\n"), 20);
  assert_int_equal(end_bytewise("\nGET / HTTP/1.1\n\n"), 17);
}

static void test_pipelined(void **state) {
  (void)state;
  const char *one = "GET /one HTTP/1.1\r\nHost: x\r\n\r\n";
  const char *two = "POST /two HTTP/1.1\nContent-Length: 0\n\n";
  char buf[256];
  snprintf(buf, sizeof buf, "%s%s", one, two);
  size_t len = strlen(buf), scan = 0;
  size_t end = hark_h1_head_end(buf, len, &scan);
  assert_int_equal(end, strlen(one));
  assert_int_equal(scan, 0);
  hark_h1_head h;
  const char *why;
  assert_int_equal(hark_h1_parse(buf, len, &h, &why), 0);
  assert_int_equal(h.len, strlen(one));
  assert_true(is(h.target, h.target_len, "/one"));
  /* The second head, from where the first ended. */
  end = hark_h1_head_end(buf + h.len, len - h.len, &scan);
  assert_int_equal(end, strlen(two));
  assert_int_equal(hark_h1_parse(buf + h.len, end, &h, &why), 0);
  assert_true(is(h.target, h.target_len, "/two"));
  assert_int_equal(h.len, strlen(two));
}

static void test_bytewise_search(void **state) {
  (void)state;
  /* Fed a byte at a time the search ends exactly where the head does, and
   * not at the CRLF that ends a line, nor at a CR, nor at a leading CRLF. */
  const char *heads[] = {
      "GET / HTTP/1.1\r\n\r\n",
      "\r\n\r\nGET / HTTP/1.1\r\nA: b\r\n\r\n",
      "GET / HTTP/1.1\r\nA: \r\r\n\r\n", /* a bare CR (refused by the parse) is not an end */
      "GET / HTTP/1.1\r\nA: b\r\nC: d\n\r\n",
  };
  for (size_t i = 0; i < sizeof heads / sizeof *heads; i++) {
    assert_int_equal(end_bytewise(heads[i]), strlen(heads[i]));
    assert_int_equal(end_of(heads[i]), strlen(heads[i]));
  }
  /* Unfinished heads: no end, however fed. */
  const char *partial[] = {"GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nA: b\r\n\r", "GET",
                           "GET / HTTP/1.1\r\n\r\r\n"};
  for (size_t i = 0; i < sizeof partial / sizeof *partial; i++) {
    assert_int_equal(end_bytewise(partial[i]), 0);
    assert_int_equal(end_of(partial[i]), 0);
  }
  /* In chunks, and with a *scan that does not fit the buffer (reset). */
  const char *s = "GET /chunks HTTP/1.1\r\nHost: x\r\nA: b\r\n\r\nrest";
  size_t scan = 0;
  assert_int_equal(hark_h1_head_end(s, 10, &scan), 0);
  assert_int_equal(hark_h1_head_end(s, 23, &scan), 0);
  assert_int_equal(hark_h1_head_end(s, 38, &scan), 0);
  assert_int_equal(hark_h1_head_end(s, strlen(s), &scan), 39);
  scan = (size_t)1000 << 3;
  assert_int_equal(hark_h1_head_end(s, strlen(s), &scan), 39);
  scan = 7; /* no such state */
  assert_int_equal(hark_h1_head_end(s, strlen(s), &scan), 39);
  scan = 0;
  assert_int_equal(hark_h1_head_end(s, 0, &scan), 0);
}

/* One refusal: the head, the status and a word of its reason. */
typedef struct refusal {
  const char *head;
  int status;
  const char *reason;
} refusal;

static void test_refusals(void **state) {
  (void)state;
  const refusal cases[] = {
      {"GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400, "CR"},
      {"GET / HTTP/1.1\rHost: x\r\n\r\n", 400, "CR"},
      {"GET /\r HTTP/1.1\r\n\r\n", 400, "CR"},
      {"\rGET / HTTP/1.1\r\n\r\n", 400, "CR"},
      {"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400, "colon"},
      {"GET / HTTP/1.1\r\nHost\t: x\r\n\r\n", 400, "colon"},
      {"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400, "obs-fold"},
      {"GET / HTTP/1.1\r\nA: b\r\n\tc\r\n\r\n", 400, "obs-fold"},
      {"GET / HTTP/1.1\r\n Host: x\r\n\r\n", 400, "obs-fold"},
      {"GET / HTTP/1.1\r\nHost x\r\n\r\n", 400, "no colon"},
      {"GET / HTTP/1.1\r\nA: b\x01\r\n\r\n", 400, "control"},
      {"GET / HTTP/1.1\r\nA: b\x7f\r\n\r\n", 400, "control"},
      {"GET / HTTP/1.1\r\nA: \x1b[0m\r\n\r\n", 400, "control"},
      {"GET / HTTP/1.1\r\n: b\r\n\r\n", 400, "empty name"},
      {"GET / HTTP/1.1\r\nA(b): c\r\n\r\n", 400, "token"},
      {"GET / HTTP/1.1\r\nA\xc3\xa9: c\r\n\r\n", 400, "token"},
      {" / HTTP/1.1\r\n\r\n", 400, "method"},
      {"G(T / HTTP/1.1\r\n\r\n", 400, "method"},
      {"GET  / HTTP/1.1\r\n\r\n", 400, "more than one space"},
      {"GET /  HTTP/1.1\r\n\r\n", 400, "more than one space"},
      {"GET\t/ HTTP/1.1\r\n\r\n", 400, "tab"},
      {"GET /\tHTTP/1.1\r\n\r\n", 400, "tab"},
      {"GET / HTTP/1.1 \r\n\r\n", 400, "version"},
      {"GET /\r\n\r\n", 400, "version"},
      {"GET / \r\n\r\n", 400, "version"},
      {"GET\r\n\r\n", 400, "target"},
      {"GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n", 400, "target"},
      {"GET / http/1.1\r\n\r\n", 400, "version"},
      {"GET / HTTP/1.10\r\n\r\n", 400, "version"},
      {"GET / HTTP/11\r\n\r\n", 400, "version"},
      {"GET / HTTP/2\r\n\r\n", 400, "version"},
      {"GET / HTTP/2.0\r\n\r\n", 505, "version"},
      {"GET / HTTP/1.1\r\nA: b\r\n", 400, "no whole"},
      {"", 400, "no whole"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    hark_h1_head h;
    const char *why = NULL;
    int status = parse(cases[i].head, &h, &why);
    if (status != cases[i].status || !why || !strstr(why, cases[i].reason))
      fail_msg("case %zu: status %d, reason \"%s\"; wanted %d, \"%s\"", i, status,
               why ? why : "(none)", cases[i].status, cases[i].reason);
  }
  /* A NUL in a value: the buffer is not a C string. */
  const char nul[] = "GET / HTTP/1.1\r\nA: b\0c\r\n\r\n";
  hark_h1_head h;
  const char *why;
  assert_int_equal(hark_h1_parse(nul, sizeof nul - 1, &h, &why), 400);
  assert_non_null(strstr(why, "control"));
  /* And in a name, and in the request line. */
  const char nul2[] = "GET / HTTP/1.1\r\nA\0: b\r\n\r\n";
  assert_int_equal(hark_h1_parse(nul2, sizeof nul2 - 1, &h, &why), 400);
  const char nul3[] = "GET /\0 HTTP/1.1\r\n\r\n";
  assert_int_equal(hark_h1_parse(nul3, sizeof nul3 - 1, &h, &why), 400);
  assert_int_equal(hark_h1_parse(NULL, 0, &h, &why), 400);
}

/* Every byte in a field name and in a method: exactly RFC 9110's tchar
 * (ALPHA, DIGIT, !#$%&'*+-.^_`|~) is taken. */
static void test_token_bytes(void **state) {
  (void)state;
  const char *specials = "!#$%&'*+-.^_`|~";
  for (int c = 0; c < 256; c++) {
    bool tchar = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 (c && strchr(specials, c));
    char buf[64];
    int len = snprintf(buf, sizeof buf, "GET / HTTP/1.1\r\nA%cB: v\r\n\r\n", c ? c : '?');
    if (!c) buf[17] = '\0';
    hark_h1_head h;
    const char *why = NULL;
    int status = hark_h1_parse(buf, (size_t)len, &h, &why);
    if (c != ':' && tchar != (status == 0)) /* "A:B: v" is A, valued "B: v" */
      fail_msg("byte %d in a name: status %d (%s)", c, status, why);
    len = snprintf(buf, sizeof buf, "G%cT / HTTP/1.1\r\n\r\n", c ? c : '?');
    if (!c) buf[1] = '\0';
    status = hark_h1_parse(buf, (size_t)len, &h, &why);
    if (tchar != (status == 0)) fail_msg("byte %d in a method: status %d (%s)", c, status, why);
  }
}

static void test_field_limit(void **state) {
  (void)state;
  for (int n = HARK_H1_MAX_FIELDS; n <= HARK_H1_MAX_FIELDS + 1; n++) {
    char buf[4096];
    int at = snprintf(buf, sizeof buf, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < n; i++) at += snprintf(buf + at, sizeof buf - at, "X-%d: %d\r\n", i, i);
    at += snprintf(buf + at, sizeof buf - at, "\r\n");
    hark_h1_head h;
    const char *why;
    int status = hark_h1_parse(buf, (size_t)at, &h, &why);
    if (n == HARK_H1_MAX_FIELDS) {
      assert_int_equal(status, 0);
      assert_int_equal(h.n_fields, HARK_H1_MAX_FIELDS);
      const hark_h1_field *last = &h.fields[HARK_H1_MAX_FIELDS - 1];
      assert_true(is(last->name, last->name_len, "X-63"));
      assert_true(is(last->value, last->value_len, "63"));
    } else {
      assert_int_equal(status, 431);
      assert_non_null(why);
    }
  }
}

static void test_has_token(void **state) {
  (void)state;
  const char *v = "keep-alive, Upgrade";
  assert_true(hark_h1_has_token(v, strlen(v), "upgrade"));
  assert_true(hark_h1_has_token(v, strlen(v), "Keep-Alive"));
  assert_false(hark_h1_has_token(v, strlen(v), "close"));
  assert_true(hark_h1_has_token("close", 5, "close"));
  assert_false(hark_h1_has_token("closed", 6, "close"));
  assert_false(hark_h1_has_token("close", 5, "closed"));
  assert_false(hark_h1_has_token("clos", 4, "close"));
  assert_false(hark_h1_has_token("xclose", 6, "close"));
  assert_false(hark_h1_has_token("close-ish, keep", 15, "close"));
  v = " ,, \t Upgrade \t ,  ,";
  assert_true(hark_h1_has_token(v, strlen(v), "upgrade"));
  v = "foo,websocket";
  assert_true(hark_h1_has_token(v, strlen(v), "WebSocket"));
  assert_false(hark_h1_has_token("", 0, "close"));
  assert_false(hark_h1_has_token(" , ", 3, "close"));
  assert_false(hark_h1_has_token("a, b", 4, ""));
  /* Only the first len bytes count. */
  assert_false(hark_h1_has_token("upgrade", 6, "upgrade"));
}

static void test_content_length(void **state) {
  (void)state;
  uint64_t v = 7;
  assert_true(hark_h1_content_length("0", 1, &v));
  assert_int_equal(v, 0);
  assert_true(hark_h1_content_length("12345", 5, &v));
  assert_int_equal(v, 12345);
  assert_true(hark_h1_content_length("007", 3, &v));
  assert_int_equal(v, 7);
  assert_true(hark_h1_content_length("18446744073709551615", 20, &v));
  assert_true(v == UINT64_MAX);
  const char *bad[] = {"",
                       "+1",
                       "-1",
                       "1 2",
                       " 5",
                       "5 ",
                       "0x10",
                       "1,1",
                       "1.0",
                       "1e3",
                       "\t1",
                       "a",
                       "18446744073709551616",
                       "99999999999999999999"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    v = 42;
    assert_false(hark_h1_content_length(bad[i], strlen(bad[i]), &v));
    assert_int_equal(v, 42);
  }
  /* A value " 5" is trimmed by the parse, so it reads. */
  hark_h1_head h;
  const char *why;
  assert_int_equal(parse("PUT / HTTP/1.1\r\nContent-Length:  5 \r\n\r\n", &h, &why), 0);
  assert_true(hark_h1_content_length(h.fields[0].value, h.fields[0].value_len, &v));
  assert_int_equal(v, 5);
}

/* The framing of a head built from `fields`: the status, *body. */
static int framing(const char *version, const char *fields, hark_h1_body *body) {
  char buf[1024];
  snprintf(buf, sizeof buf, "POST / %s\r\n%s\r\n", version, fields);
  hark_h1_head h;
  const char *why;
  assert_int_equal(parse(buf, &h, &why), 0);
  int status = hark_h1_framing(&h, body, &why);
  if (status)
    assert_non_null(why);
  else
    assert_null(why);
  return status;
}

static void test_framing(void **state) {
  (void)state;
  hark_h1_body b;
  assert_int_equal(framing("HTTP/1.1", "", &b), 0);
  assert_false(b.chunked);
  assert_int_equal(b.length, 0);
  assert_int_equal(framing("HTTP/1.1", "Content-Length: 42\r\n", &b), 0);
  assert_int_equal(b.length, 42);
  assert_int_equal(framing("HTTP/1.1", "transfer-encoding: Chunked\r\n", &b), 0);
  assert_true(b.chunked);
  assert_int_equal(framing("HTTP/1.1", "Transfer-Encoding: , chunked ,\r\n", &b), 0);
  assert_true(b.chunked);
  assert_int_equal(framing("HTTP/1.1", "Content-Length: -5\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Content-Length: 5, 5\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Content-Length: 5\r\ncontent-length: 5\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Content-Length:\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", &b),
                   400);
  assert_int_equal(framing("HTTP/1.0", "Transfer-Encoding: chunked\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Transfer-Encoding: gzip\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Transfer-Encoding: chunked, gzip\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Transfer-Encoding: chunked, chunked\r\n", &b), 400);
  assert_int_equal(
      framing("HTTP/1.1", "Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Transfer-Encoding:\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Transfer-Encoding: chunkedx\r\n", &b), 400);
  assert_int_equal(framing("HTTP/1.1", "Transfer-Encoding: gzip, chunked\r\n", &b), 501);
  assert_int_equal(
      framing("HTTP/1.1", "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", &b), 501);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_get),
      cmocka_unit_test(test_post_and_fields),
      cmocka_unit_test(test_no_fields_and_versions),
      cmocka_unit_test(test_line_endings),
      cmocka_unit_test(test_leading_empty_lines),
      cmocka_unit_test(test_pipelined),
      cmocka_unit_test(test_bytewise_search),
      cmocka_unit_test(test_refusals),
      cmocka_unit_test(test_token_bytes),
      cmocka_unit_test(test_field_limit),
      cmocka_unit_test(test_has_token),
      cmocka_unit_test(test_content_length),
      cmocka_unit_test(test_framing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
