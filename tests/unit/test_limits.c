/* Unit tests for src/frontend/http/limits.c: every hit is counted, the
 * log is rate-limited per kind, and /metrics gets one series per limit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/http/http.h"
#include "util/log.h"

/* The value of hark_limit_hits_total{limit="name"} in the rendered text. */
static long long hits(const char *name) {
  hark_buf b = {0};
  hark_limit_render(&b);
  hark_buf_put(&b, "", 1);
  char key[128];
  snprintf(key, sizeof key, "hark_limit_hits_total{limit=\"%s\"} ", name);
  const char *p = strstr(b.data, key);
  long long v = p ? strtoll(p + strlen(key), NULL, 10) : -1;
  hark_buf_free(&b);
  return v;
}

static void test_hits_are_counted_per_kind(void **state) {
  (void)state;
  hark_log_set_enabled(HARK_LOG_WARN, false); /* a thousand lines would be noise */
  hark_log_set_enabled(HARK_LOG_INFO, false);
  long long head = hits("http_header_timeout"), pings = hits("grpc_ping_strikes");
  assert_true(head >= 0 && pings >= 0);
  for (int i = 0; i < 1000; i++) hark_limit_hit(HARK_LIMIT_HTTP_HEADER_TIMEOUT, "hit %d", i);
  hark_limit_hit(HARK_LIMIT_GRPC_PING_STRIKES, "strike");
  assert_int_equal(hits("http_header_timeout"), head + 1000);
  assert_int_equal(hits("grpc_ping_strikes"), pings + 1);
  hark_limit_hit(HARK_LIMIT_COUNT, "out of range: ignored");
}

static void test_every_limit_has_a_series(void **state) {
  (void)state;
  hark_buf b = {0};
  hark_limit_render(&b);
  hark_buf_put(&b, "", 1);
  assert_non_null(strstr(b.data, "# TYPE hark_limit_hits_total counter\n"));
  size_t n = 0;
  for (const char *p = b.data; (p = strstr(p, "hark_limit_hits_total{limit=\"")); p++) n++;
  assert_int_equal(n, HARK_LIMIT_COUNT);
  hark_buf_free(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hits_are_counted_per_kind),
      cmocka_unit_test(test_every_limit_has_a_series),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
