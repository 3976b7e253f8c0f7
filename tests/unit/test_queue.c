/*
 * test_queue.c — the scheduler queue (src/sched/queue.c) on its own: fake
 * items (addresses in an array) and a fake clock (plain numbers).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sched/queue.h"

static int items[64];
#define IT(i) ((void *)&items[i])
#define US 1000u /* ns per microsecond */

static hark_queue *queue_make(const hark_dynamic_batching *db, uint32_t default_max) {
  hark_queue *q = NULL;
  hark_error *err = hark_queue_new(db, default_max, &q);
  assert_null(err);
  assert_non_null(q);
  return q;
}

static void push_ok(hark_queue *q, int i, uint32_t prio, uint64_t timeout_us, uint64_t now) {
  hark_error *err = hark_queue_push(q, IT(i), prio, timeout_us, 1, now);
  if (err) fail_msg("push %d: %s", i, hark_error_message(err));
}

/* The queue's dequeue order, as item numbers, without removing. */
static int order(const hark_queue *q, int *out, int cap) {
  int n = 0;
  for (const hark_queue_node *node = hark_queue_first(q); node && n < cap;
       node = hark_queue_next(q, node))
    out[n++] = (int)((int *)hark_queue_node_item(node) - items);
  return n;
}

static void assert_order(const hark_queue *q, const int *want, int n) {
  int got[64];
  int m = order(q, got, 64);
  assert_int_equal(m, n);
  for (int i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
}

static void test_fifo_single_level(void **state) {
  (void)state;
  hark_dynamic_batching db = {0};
  hark_queue *q = queue_make(&db, 0);
  assert_int_equal(hark_queue_levels(q), 1);
  for (int i = 0; i < 5; i++) push_ok(q, i, (uint32_t)(5 - i), 0, 100 + (uint64_t)i);
  /* Priorities are off: everything is one FIFO. */
  assert_order(q, (int[]){0, 1, 2, 3, 4}, 5);
  assert_int_equal(hark_queue_size(q), 5);
  assert_int_equal(hark_queue_node_enqueued_ns(hark_queue_first(q)), 100);
  void *out[3];
  assert_int_equal(hark_queue_pop(q, out, 3), 3);
  assert_ptr_equal(out[0], IT(0));
  assert_ptr_equal(out[2], IT(2));
  assert_int_equal(hark_queue_size(q), 2);
  assert_int_equal(hark_queue_pop(q, out, 3), 2);
  assert_ptr_equal(out[1], IT(4));
  assert_null(hark_queue_first(q));
  assert_int_equal(hark_queue_pop(q, out, 3), 0);
  hark_queue_free(q);
}

static void test_priority_levels(void **state) {
  (void)state;
  hark_dynamic_batching db = {.enabled = true, .priority_levels = 3, .default_priority_level = 2};
  hark_queue *q = queue_make(&db, 0);
  assert_int_equal(hark_queue_levels(q), 3);
  assert_int_equal(hark_queue_level(q, 1), 1);
  assert_int_equal(hark_queue_level(q, 3), 3);
  assert_int_equal(hark_queue_level(q, 0), 2); /* unset: the default */
  assert_int_equal(hark_queue_level(q, 9), 2); /* out of range: the default, as Triton */
  push_ok(q, 0, 3, 0, 0);
  push_ok(q, 1, 0, 0, 1);
  push_ok(q, 2, 1, 0, 2);
  push_ok(q, 3, 3, 0, 3);
  push_ok(q, 4, 1, 0, 4);
  push_ok(q, 5, 7, 0, 5);
  /* Level 1 first, FIFO within each level. */
  assert_order(q, (int[]){2, 4, 1, 5, 0, 3}, 6);
  assert_int_equal(hark_queue_level_size(q, 1), 2);
  assert_int_equal(hark_queue_level_size(q, 2), 2);
  assert_int_equal(hark_queue_level_size(q, 3), 2);
  void *out[6];
  assert_int_equal(hark_queue_pop(q, out, 6), 6);
  assert_ptr_equal(out[0], IT(2));
  assert_ptr_equal(out[5], IT(3));
  hark_queue_free(q);
}

static void test_default_level_middle(void **state) {
  (void)state;
  hark_dynamic_batching db = {.enabled = true, .priority_levels = 5};
  hark_queue *q = queue_make(&db, 0);
  assert_int_equal(hark_queue_level(q, 0), 3);
  hark_queue_free(q);
}

static void test_bad_levels(void **state) {
  (void)state;
  hark_queue *q = NULL;
  hark_dynamic_batching db = {.enabled = true, .priority_levels = 2, .default_priority_level = 3};
  hark_error *err = hark_queue_new(&db, 0, &q);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  assert_null(q);
  hark_error_free(err);

  hark_priority_policy pp = {.level = 4};
  hark_dynamic_batching db2 = {.enabled = true,
                               .priority_levels = 2,
                               .priority_queue_policy = &pp,
                               .n_priority_queue_policy = 1};
  err = hark_queue_new(&db2, 0, &q);
  assert_non_null(err);
  assert_non_null(strstr(hark_error_message(err), "priority_queue_policy"));
  hark_error_free(err);
}

static void assert_full(hark_queue *q, int i, uint32_t prio) {
  hark_error *err = hark_queue_push(q, IT(i), prio, 0, 1, 0);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_UNAVAILABLE);
  assert_string_equal(hark_error_message(err), "Exceeds maximum queue size");
  hark_error_free(err);
}

static void test_max_queue_size(void **state) {
  (void)state;
  /* Level 1 bounded by its own policy, level 2 by the server default. */
  hark_priority_policy pp = {.level = 1, .policy = {.max_queue_size = 2}};
  hark_dynamic_batching db = {.enabled = true,
                              .priority_levels = 2,
                              .default_priority_level = 2,
                              .priority_queue_policy = &pp,
                              .n_priority_queue_policy = 1};
  hark_queue *q = queue_make(&db, 3);
  push_ok(q, 0, 1, 0, 0);
  push_ok(q, 1, 1, 0, 0);
  assert_full(q, 2, 1);
  push_ok(q, 3, 2, 0, 0);
  push_ok(q, 4, 2, 0, 0);
  push_ok(q, 5, 0, 0, 0);
  assert_full(q, 6, 2);
  assert_int_equal(hark_queue_size(q), 5);
  /* Room again once something leaves. */
  void *out[1];
  assert_int_equal(hark_queue_pop(q, out, 1), 1);
  push_ok(q, 7, 1, 0, 0);
  hark_queue_free(q);
}

static void test_max_queue_fallback(void **state) {
  (void)state;
  hark_dynamic_batching db = {0};
  hark_queue *q = queue_make(&db, 0);
  static int many[HARK_QUEUE_FALLBACK_MAX + 1];
  for (uint32_t i = 0; i < HARK_QUEUE_FALLBACK_MAX; i++)
    assert_null(hark_queue_push(q, &many[i], 0, 0, 1, 0));
  hark_error *err = hark_queue_push(q, &many[HARK_QUEUE_FALLBACK_MAX], 0, 0, 1, 0);
  assert_non_null(err);
  hark_error_free(err);
  hark_queue_free(q); /* frees its nodes with items still inside */
}

static void test_reject_timeout(void **state) {
  (void)state;
  hark_dynamic_batching db = {
      .enabled = true,
      .default_queue_policy = {.timeout_action = HARK_TIMEOUT_REJECT, .default_timeout_us = 100}};
  hark_queue *q = queue_make(&db, 0);
  assert_int_equal(hark_queue_next_deadline(q), UINT64_MAX);
  push_ok(q, 0, 0, 0, 1000);
  push_ok(q, 1, 0, 0, 1000 + 50 * US);
  assert_int_equal(hark_queue_next_deadline(q), 1000 + 100 * US);
  void *out[4];
  /* One nanosecond early: nothing. */
  assert_int_equal(hark_queue_expire(q, 1000 + 100 * US - 1, out, 4), 0);
  assert_int_equal(hark_queue_size(q), 2);
  /* Exactly at the deadline: expired. */
  assert_int_equal(hark_queue_expire(q, 1000 + 100 * US, out, 4), 1);
  assert_ptr_equal(out[0], IT(0));
  assert_int_equal(hark_queue_size(q), 1);
  assert_order(q, (int[]){1}, 1);
  assert_int_equal(hark_queue_next_deadline(q), 1000 + 150 * US);
  assert_int_equal(hark_queue_expire(q, 10000000, out, 4), 1);
  assert_ptr_equal(out[0], IT(1));
  assert_int_equal(hark_queue_size(q), 0);
  assert_int_equal(hark_queue_next_deadline(q), UINT64_MAX);
  hark_queue_free(q);
}

static void test_reject_popped_never_expires(void **state) {
  (void)state;
  hark_dynamic_batching db = {.enabled = true, .default_queue_policy = {.default_timeout_us = 10}};
  hark_queue *q = queue_make(&db, 0);
  push_ok(q, 0, 0, 0, 0);
  push_ok(q, 1, 0, 0, 0);
  void *out[2];
  assert_int_equal(hark_queue_pop(q, out, 1), 1);
  assert_int_equal(hark_queue_expire(q, 1000 * US, out, 2), 1);
  assert_ptr_equal(out[0], IT(1));
  hark_queue_free(q);
}

static void test_timeout_override(void **state) {
  (void)state;
  hark_dynamic_batching allow = {
      .enabled = true,
      .default_queue_policy = {.default_timeout_us = 100, .allow_timeout_override = true}};
  hark_queue *q = queue_make(&allow, 0);
  push_ok(q, 0, 0, 0, 0);   /* default: 100 us */
  push_ok(q, 1, 0, 30, 0);  /* override: 30 us */
  push_ok(q, 2, 0, 500, 0); /* override: 500 us */
  void *out[4];
  assert_int_equal(hark_queue_next_deadline(q), 30 * US);
  assert_int_equal(hark_queue_expire(q, 30 * US, out, 4), 1);
  assert_ptr_equal(out[0], IT(1));
  assert_int_equal(hark_queue_expire(q, 100 * US, out, 4), 1);
  assert_ptr_equal(out[0], IT(0));
  assert_int_equal(hark_queue_next_deadline(q), 500 * US);
  hark_queue_free(q);

  /* Without allow_timeout_override the request's own timeout is ignored. */
  hark_dynamic_batching deny = {.enabled = true,
                                .default_queue_policy = {.default_timeout_us = 100}};
  q = queue_make(&deny, 0);
  push_ok(q, 0, 0, 30, 0);
  assert_int_equal(hark_queue_next_deadline(q), 100 * US);
  hark_queue_free(q);

  /* No default timeout and no override: never expires. */
  hark_dynamic_batching none = {.enabled = true};
  q = queue_make(&none, 0);
  push_ok(q, 0, 0, 30, 0);
  assert_int_equal(hark_queue_next_deadline(q), UINT64_MAX);
  assert_int_equal(hark_queue_expire(q, UINT64_MAX, out, 4), 0);
  assert_int_equal(hark_queue_size(q), 1);
  hark_queue_free(q);
}

static void test_delay_timeout(void **state) {
  (void)state;
  hark_dynamic_batching db = {.enabled = true,
                              .default_queue_policy = {.timeout_action = HARK_TIMEOUT_DELAY,
                                                       .allow_timeout_override = true}};
  hark_queue *q = queue_make(&db, 0);
  push_ok(q, 0, 0, 10, 0); /* expires at 10 us */
  push_ok(q, 1, 0, 0, 1);  /* never */
  push_ok(q, 2, 0, 5, 2);  /* expires at 5 us + 2 ns */
  push_ok(q, 3, 0, 0, 3);
  void *out[4];
  assert_int_equal(hark_queue_expire(q, 9 * US, out, 4), 0); /* DELAY never hands out */
  /* Item 2 expired: it goes behind every request that has not. */
  assert_order(q, (int[]){0, 1, 3, 2}, 4);
  assert_int_equal(hark_queue_next_deadline(q), 10 * US);
  assert_int_equal(hark_queue_expire(q, 10 * US, out, 4), 0);
  /* Delayed requests keep the order they expired in. */
  assert_order(q, (int[]){1, 3, 2, 0}, 4);
  assert_int_equal(hark_queue_next_deadline(q), UINT64_MAX);
  /* A newcomer still goes ahead of the delayed ones. */
  push_ok(q, 4, 0, 0, 20 * US);
  assert_order(q, (int[]){1, 3, 4, 2, 0}, 5);
  assert_int_equal(hark_queue_size(q), 5);
  assert_int_equal(hark_queue_pop(q, out, 4), 4);
  assert_ptr_equal(out[3], IT(2));
  hark_queue_free(q);
}

static void test_delay_stays_in_level(void **state) {
  (void)state;
  /* Level 1 delays, level 2 rejects: a delayed level-1 request still goes
   * before every level-2 request (Triton's per-level delayed queue). */
  hark_priority_policy pp[2] = {
      {.level = 1, .policy = {.timeout_action = HARK_TIMEOUT_DELAY, .default_timeout_us = 10}},
      {.level = 2, .policy = {.timeout_action = HARK_TIMEOUT_REJECT, .default_timeout_us = 50}},
  };
  hark_dynamic_batching db = {.enabled = true,
                              .priority_levels = 2,
                              .default_priority_level = 2,
                              .priority_queue_policy = pp,
                              .n_priority_queue_policy = 2};
  hark_queue *q = queue_make(&db, 0);
  push_ok(q, 0, 1, 0, 0);
  push_ok(q, 1, 2, 0, 0);
  push_ok(q, 2, 1, 0, 5 * US);
  void *out[4];
  assert_int_equal(hark_queue_expire(q, 10 * US, out, 4), 0);
  assert_order(q, (int[]){2, 0, 1}, 3);
  assert_int_equal(hark_queue_expire(q, 50 * US, out, 4), 1);
  assert_ptr_equal(out[0], IT(1));
  /* Item 2 expired too by now (at 15 us), so it is delayed behind 0. */
  assert_order(q, (int[]){0, 2}, 2);
  assert_int_equal(hark_queue_level_size(q, 1), 2);
  assert_int_equal(hark_queue_level_size(q, 2), 0);
  hark_queue_free(q);
}

static void test_expire_in_chunks(void **state) {
  (void)state;
  hark_dynamic_batching db = {.enabled = true, .default_queue_policy = {.default_timeout_us = 1}};
  hark_queue *q = queue_make(&db, 0);
  for (int i = 0; i < 10; i++) push_ok(q, i, 0, 0, (uint64_t)i);
  void *out[4];
  int seen = 0;
  uint32_t n;
  while ((n = hark_queue_expire(q, 1000 * US, out, 4)) > 0) {
    for (uint32_t i = 0; i < n; i++) assert_ptr_equal(out[i], IT(seen + (int)i));
    seen += (int)n;
  }
  assert_int_equal(seen, 10);
  assert_int_equal(hark_queue_size(q), 0);
  hark_queue_free(q);
}

static void test_batch_size_carried(void **state) {
  (void)state;
  hark_dynamic_batching db = {.enabled = true};
  hark_queue *q = queue_make(&db, 0);
  assert_null(hark_queue_push(q, IT(0), 0, 0, 4, 7));
  assert_null(hark_queue_push(q, IT(1), 0, 0, 0, 8));
  const hark_queue_node *n = hark_queue_first(q);
  assert_int_equal(hark_queue_node_batch_size(n), 4);
  assert_int_equal(hark_queue_node_batch_size(hark_queue_next(q, n)), 1); /* 0 counts as 1 */
  hark_queue_free(q);
}

static void test_huge_timeout_never_expires(void **state) {
  (void)state;
  hark_dynamic_batching db = {.enabled = true,
                              .default_queue_policy = {.default_timeout_us = UINT64_MAX / 10,
                                                       .allow_timeout_override = true}};
  hark_queue *q = queue_make(&db, 0);
  push_ok(q, 0, 0, 0, UINT64_MAX / 2);
  assert_int_equal(hark_queue_next_deadline(q), UINT64_MAX);
  hark_queue_free(q);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fifo_single_level),
      cmocka_unit_test(test_priority_levels),
      cmocka_unit_test(test_default_level_middle),
      cmocka_unit_test(test_bad_levels),
      cmocka_unit_test(test_max_queue_size),
      cmocka_unit_test(test_max_queue_fallback),
      cmocka_unit_test(test_reject_timeout),
      cmocka_unit_test(test_reject_popped_never_expires),
      cmocka_unit_test(test_timeout_override),
      cmocka_unit_test(test_delay_timeout),
      cmocka_unit_test(test_delay_stays_in_level),
      cmocka_unit_test(test_expire_in_chunks),
      cmocka_unit_test(test_batch_size_carried),
      cmocka_unit_test(test_huge_timeout_never_expires),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
