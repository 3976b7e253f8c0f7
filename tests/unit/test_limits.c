/* Unit tests for src/frontend/http/limits.c: every hit is counted, the
 * log is rate-limited per kind, and /metrics gets one series per limit;
 * the in-flight byte budget takes up to its bound, from many threads,
 * and is shown as a gauge. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
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

/* The value of a series without labels, as rendered. */
static unsigned long long gauge(const char *name) {
  hark_buf b = {0};
  hark_limit_render(&b);
  hark_buf_put(&b, "", 1);
  char key[64];
  snprintf(key, sizeof key, "\n%s ", name);
  const char *p = strstr(b.data, key);
  assert_non_null(p);
  unsigned long long v = strtoull(p + strlen(key), NULL, 10);
  hark_buf_free(&b);
  return v;
}

static void test_inflight_takes_up_to_its_bound(void **state) {
  (void)state;
  hark_inflight_set_max(1000);
  assert_true(hark_inflight_take(600));
  assert_false(hark_inflight_take(401)); /* would pass it: nothing taken */
  assert_int_equal(hark_inflight_bytes(), 600);
  assert_true(hark_inflight_take(400)); /* exactly to it */
  assert_false(hark_inflight_take(1));
  assert_int_equal(gauge("hark_inflight_bytes"), 1000);
  assert_int_equal(gauge("hark_inflight_bytes_max"), 1000);
  hark_inflight_give(1000);
  assert_int_equal(hark_inflight_bytes(), 0);
  assert_false(hark_inflight_take(1001)); /* larger than the bound: never */
  assert_false(hark_inflight_take(SIZE_MAX));
  hark_inflight_set_max(0); /* no bound: only counted */
  assert_true(hark_inflight_take(1u << 30));
  assert_int_equal(gauge("hark_inflight_bytes"), 1u << 30);
  hark_inflight_give(1u << 30);
  assert_int_equal(hark_inflight_bytes(), 0);
}

enum { THREADS = 4, ROUNDS = 20000 };
static _Atomic unsigned taken_max_seen;

/* Takes and gives back in a loop; what is held never passes the bound. */
static void *churn(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    if (!hark_inflight_take(300)) continue;
    unsigned now = (unsigned)hark_inflight_bytes();
    unsigned seen = atomic_load(&taken_max_seen);
    while (now > seen && !atomic_compare_exchange_weak(&taken_max_seen, &seen, now)) {
    }
    hark_inflight_give(300);
  }
  return NULL;
}

static void test_inflight_bound_holds_across_threads(void **state) {
  (void)state;
  hark_inflight_set_max(1000); /* three takers at most */
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&t[i], NULL, churn, NULL), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  assert_true(atomic_load(&taken_max_seen) <= 900);
  assert_int_equal(hark_inflight_bytes(), 0);
  hark_inflight_set_max(0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hits_are_counted_per_kind),
      cmocka_unit_test(test_every_limit_has_a_series),
      cmocka_unit_test(test_inflight_takes_up_to_its_bound),
      cmocka_unit_test(test_inflight_bound_holds_across_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
