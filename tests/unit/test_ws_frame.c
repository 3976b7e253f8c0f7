/* Unit tests for src/frontend/http/ws_frame.c: the UTF-8 check, and the
 * parser on frames built here (masked or not), whole and a byte at a time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/http/ws_frame.h"

static void test_utf8(void **state) {
  (void)state;
  const char *good[] = {"",
                        "abc",
                        "\xc3\xa9",
                        "\xe2\x82\xac",
                        "\xf0\x9d\x84\x9e",
                        "\xef\xbf\xbf",
                        "\xf4\x8f\xbf\xbf"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++)
    assert_true(hark_utf8_valid((const uint8_t *)good[i], strlen(good[i])));
  const char *bad[] = {
      "\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",    "\xe2\x82",
      "\x80",     "\xff",         "a\xc3",        "\xf8\x88\x80\x80\x80"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
    assert_false(hark_utf8_valid((const uint8_t *)bad[i], strlen(bad[i])));
}

/* A client frame: FIN (or not), opcode, masked with 11 22 33 44 unless
 * unmasked; returns its length. */
static size_t frame(uint8_t *out, bool fin, int opcode, const void *payload, size_t n,
                    bool masked) {
  static const uint8_t mask[4] = {0x11, 0x22, 0x33, 0x44};
  size_t at = 0;
  out[at++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
  out[at++] = (uint8_t)((masked ? 0x80 : 0) | n); /* n < 126 here */
  if (masked) {
    memcpy(out + at, mask, 4);
    at += 4;
  }
  for (size_t i = 0; i < n; i++)
    out[at + i] = ((const uint8_t *)payload)[i] ^ (masked ? mask[i & 3] : 0);
  return at + n;
}

typedef struct seen {
  char data[256];
  size_t len;
  int messages, pings, closes;
} seen;

static bool on_data(void *userp, const uint8_t *p, size_t n, bool first, bool binary, bool last,
                    uint64_t more) {
  (void)first, (void)binary, (void)more;
  seen *s = userp;
  memcpy(s->data + s->len, p, n);
  s->len += n;
  if (last) s->messages++;
  return true;
}

static bool on_control(void *userp, int opcode, const uint8_t *p, size_t n) {
  (void)p, (void)n;
  seen *s = userp;
  if (opcode == HARK_WS_OP_PING) s->pings++;
  if (opcode == HARK_WS_OP_CLOSE) s->closes++;
  return true;
}

static const hark_ws_sink sink = {on_data, on_control, NULL};

/* Parses buf whole, or a byte at a time; the error code (0 for none). */
static int parse(uint8_t *buf, size_t len, bool bytewise, seen *s, const char **why) {
  hark_ws_parser p;
  hark_ws_parser_init(&p);
  memset(s, 0, sizeof *s);
  int code = 0;
  size_t step = bytewise ? 1 : len;
  for (size_t at = 0; at < len && !code; at += step) {
    size_t n = len - at < step ? len - at : step;
    size_t took = hark_ws_parse(&p, buf + at, n, &sink, s, &code, why);
    if (!code) assert_int_equal(took, n);
  }
  return code;
}

static void test_parse(void **state) {
  (void)state;
  for (int bytewise = 0; bytewise < 2; bytewise++) {
    uint8_t buf[512];
    seen s;
    const char *why;
    /* "héllo" in two fragments, a ping between them, the é cut in two. */
    size_t n = frame(buf, false, HARK_WS_OP_TEXT, "h\xc3", 2, true);
    n += frame(buf + n, true, HARK_WS_OP_PING, "p", 1, true);
    n += frame(buf + n, true, HARK_WS_OP_CONTINUATION, "\xa9llo", 4, true);
    n += frame(buf + n, true, HARK_WS_OP_CLOSE, "\x03\xe8ok", 4, true);
    uint8_t copy[512];
    memcpy(copy, buf, n);
    assert_int_equal(parse(copy, n, bytewise, &s, &why), 0);
    assert_int_equal(s.messages, 1);
    assert_int_equal(s.pings, 1);
    assert_int_equal(s.closes, 1);
    assert_int_equal(s.len, 6);
    assert_memory_equal(s.data, "h\xc3\xa9llo", 6);
    /* Unmasked: 1002 before any payload is handed on. */
    n = frame(buf, true, HARK_WS_OP_BINARY, "ab", 2, false);
    assert_int_equal(parse(buf, n, bytewise, &s, &why), 1002);
    assert_non_null(strstr(why, "unmasked"));
    assert_int_equal(s.len, 0);
    /* A close reason that is not UTF-8: 1007. */
    n = frame(buf, true, HARK_WS_OP_CLOSE, "\x03\xe8\xff", 3, true);
    assert_int_equal(parse(buf, n, bytewise, &s, &why), 1007);
    assert_int_equal(s.closes, 0);
    /* A 64-bit length with its top bit set: 1002 at its first byte. */
    uint8_t big[] = {0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4};
    assert_int_equal(parse(big, sizeof big, bytewise, &s, &why), 1002);
    assert_non_null(strstr(why, "top bit"));
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_utf8),
      cmocka_unit_test(test_parse),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
