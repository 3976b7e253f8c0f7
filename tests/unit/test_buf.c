/* Unit tests for src/util/buf.c and src/util/arena.c: the growable buffer
 * and its JSON writers, and arenas. */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/arena.h"
#include "util/buf.h"

static void test_buf_writers(void **state) {
  (void)state;
  hark_buf b = {0};
  hark_buf_puts(&b, "{\"error\":");
  assert_true(hark_buf_put_jstr(&b, "bad \"x\"\t\x01 \xc3\xa9 \xe2\x82", 15));
  hark_buf_puts(&b, "}");
  hark_buf_put_u64(&b, 0);
  hark_buf_put_i64(&b, -1);
  hark_buf_put_i64(&b, INT64_MIN);
  hark_buf_put_u64(&b, UINT64_MAX);
  hark_buf_put_fixed6(&b, 0.5);
  hark_buf_put(&b, "", 1);
  assert_string_equal(b.data,
                      "{\"error\":\"bad \\\"x\\\"\\t\\u0001 \xc3\xa9 \\u00e2\\u0082\"}0-1"
                      "-922337203685477580818446744073709551615"
                      "0.500000");
  hark_buf_free(&b);
  assert_null(b.data);
  /* growth across many reservations */
  for (int i = 0; i < 10000; i++) hark_buf_puts(&b, "0123456789");
  assert_int_equal(b.len, 100000);
  char *data = hark_buf_release(&b);
  assert_null(b.data);
  assert_int_equal(b.len, 0);
  assert_memory_equal(data + 99990, "0123456789", 10);
  free(data);
}

/* The integer writers against printf: every length, each side of every
 * power of ten, and a spread of values between. */
static void check_number(uint64_t v) {
  char want[32], got[32];
  snprintf(want, sizeof want, "%" PRIu64, v);
  size_t n = hark_fmt_u64(got, v);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(got, want, n);
  int64_t s = (int64_t)v;
  snprintf(want, sizeof want, "%" PRId64, s);
  n = hark_fmt_i64(got, s);
  assert_int_equal(n, strlen(want));
  assert_memory_equal(got, want, n);
}

static void test_fmt_numbers(void **state) {
  (void)state;
  for (uint64_t v = 0; v < 100000; v++) check_number(v);
  for (uint64_t p = 10; p; p = p <= UINT64_MAX / 10 ? p * 10 : 0) {
    check_number(p - 1);
    check_number(p);
    check_number(p + 1);
  }
  uint64_t x = 88172645463325252ull; /* xorshift64 */
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    check_number(x);
    check_number(x >> (i % 64));
  }
  check_number(UINT64_MAX);
  check_number((uint64_t)INT64_MIN);
}

static void test_buf_client_sized(void **state) {
  (void)state;
  hark_buf b = {0};
  /* A client-sized reservation that cannot be had fails, leaving b as it was. */
  hark_buf_puts(&b, "abc");
  assert_false(hark_buf_reserve(&b, SIZE_MAX - 1));
  assert_false(hark_buf_append(&b, "x", SIZE_MAX));
  assert_int_equal(b.len, 3);
  assert_true(hark_buf_append(&b, "def", 3));
  assert_memory_equal(b.data, "abcdef", 6);
  assert_false(hark_buf_put_jstr(&b, "x", SIZE_MAX / 4));
  assert_int_equal(b.len, 6);
  hark_buf_free(&b);
}

static void test_arena(void **state) {
  (void)state;
  hark_arena *a = hark_arena_new();
  char *small[100];
  for (int i = 0; i < 100; i++) {
    small[i] = hark_arena_alloc(a, 40);
    assert_non_null(small[i]);
    assert_int_equal((uintptr_t)small[i] % 16, 0);
    for (int k = 0; k < 40; k++) assert_int_equal(small[i][k], 0); /* zeroed */
    memset(small[i], i, 40);
  }
  char *big = hark_arena_alloc(a, 100000); /* a block of its own */
  assert_non_null(big);
  memset(big, 0xff, 100000);
  for (int i = 0; i < 100; i++) assert_int_equal((unsigned char)small[i][39], (unsigned char)i);
  assert_null(hark_arena_alloc(a, SIZE_MAX - 8));
  char *s = hark_arena_strndup(a, "hello world", 5);
  assert_string_equal(s, "hello");
  /* grow: doubling, keeping what was there */
  int *arr = NULL;
  size_t cap = 0;
  for (size_t n = 0; n < 1000; n++) {
    arr = hark_arena_grow(a, arr, n, &cap, sizeof *arr);
    assert_non_null(arr);
    assert_true(cap > n);
    arr[n] = (int)n;
  }
  for (int i = 0; i < 1000; i++) assert_int_equal(arr[i], i);
  hark_arena_free(a);
  hark_arena_free(NULL);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_buf_writers),
      cmocka_unit_test(test_fmt_numbers),
      cmocka_unit_test(test_buf_client_sized),
      cmocka_unit_test(test_arena),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
