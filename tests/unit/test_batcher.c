/*
 * test_batcher.c — the dynamic batcher's decision (src/sched/batcher.c),
 * one rule per test, with made-up queue heads and a made-up clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sched/batcher.h"

#define US 1000u

static hark_batch_policy policy(uint32_t max, uint64_t delay_us, const uint32_t *pref,
                                uint32_t n_pref) {
  hark_batch_policy p = {.max_batch_size = max, .max_queue_delay_ns = delay_us * US};
  for (uint32_t i = 0; i < n_pref; i++) p.preferred[p.n_preferred++] = pref[i];
  return p;
}

/* n items of the given batch sizes, all enqueued at t = 1000 ns. */
static uint32_t items_of(hark_batch_item *it, const uint32_t *sizes, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) it[i] = (hark_batch_item){sizes[i], 1000};
  return n;
}

static hark_batch_decision decide(const hark_batch_policy *p, const hark_batch_item *it, uint32_t n,
                                  bool flush, uint64_t now) {
  hark_batch_decision d;
  memset(&d, 0xab, sizeof d); /* the function must set every field */
  hark_batch_decide(p, it, n, flush, now, &d);
  return d;
}

static void assert_dispatch(hark_batch_decision d, uint32_t n, uint32_t size) {
  assert_int_equal(d.n_requests, n);
  assert_int_equal(d.batch_size, size);
}

static void assert_wait(hark_batch_decision d, uint64_t until) {
  assert_int_equal(d.n_requests, 0);
  assert_int_equal(d.wait_until_ns, until);
}

static void test_empty_queue(void **state) {
  (void)state;
  hark_batch_policy p = policy(8, 100, NULL, 0);
  assert_wait(decide(&p, NULL, 0, false, 5000), UINT64_MAX);
  assert_wait(decide(&p, NULL, 0, true, 5000), UINT64_MAX);
}

static void test_single_request_per_batch(void **state) {
  (void)state;
  /* The default scheduler: one request per execution, whatever its size. */
  hark_batch_policy p = policy(8, 0, NULL, 0);
  p.single = true;
  hark_batch_item it[4];
  uint32_t n = items_of(it, (uint32_t[]){3, 1, 1, 1}, 4);
  assert_dispatch(decide(&p, it, n, false, 1000), 1, 3);
}

static void test_dispatch_at_max_batch_size(void **state) {
  (void)state;
  hark_batch_policy p = policy(4, 1000000, NULL, 0);
  hark_batch_item it[5];
  uint32_t n = items_of(it, (uint32_t[]){1, 1, 1, 1, 1}, 5);
  /* Long delay, but the batch is full: go now, with exactly max. */
  assert_dispatch(decide(&p, it, n, false, 1000), 4, 4);
  /* Exactly max with nothing behind also goes now. */
  assert_dispatch(decide(&p, it, 4, false, 1000), 4, 4);
  /* Below max: wait for the delay. */
  assert_wait(decide(&p, it, 3, false, 1000), 1000 + 1000000ull * US);
}

static void test_next_request_does_not_fit(void **state) {
  (void)state;
  /* 3 then 2 with max 4: the second does not fit, so the first goes alone. */
  hark_batch_policy p = policy(4, 1000000, NULL, 0);
  hark_batch_item it[2];
  uint32_t n = items_of(it, (uint32_t[]){3, 2}, 2);
  assert_dispatch(decide(&p, it, n, false, 1000), 1, 3);
}

static void test_batch_dim_accounting(void **state) {
  (void)state;
  hark_batch_policy p = policy(8, 500, NULL, 0);
  hark_batch_item it[4];
  /* 2+2+3 = 7 of 8: not full, wait. */
  uint32_t n = items_of(it, (uint32_t[]){2, 2, 3, 2}, 4);
  assert_wait(decide(&p, it, 3, false, 1000), 1000 + 500 * US);
  /* Adding 2 would make 9: the batch is full at 7, three requests. */
  assert_dispatch(decide(&p, it, n, false, 1000), 3, 7);
  /* 2+2+3+1 = 8 exactly. */
  it[3].batch_size = 1;
  assert_dispatch(decide(&p, it, n, false, 1000), 4, 8);
  /* A batch size of 0 counts as 1. */
  n = items_of(it, (uint32_t[]){0, 0}, 2);
  hark_batch_policy p2 = policy(2, 500, NULL, 0);
  assert_dispatch(decide(&p2, it, n, false, 1000), 2, 2);
}

static void test_oversized_request_goes_alone(void **state) {
  (void)state;
  hark_batch_policy p = policy(4, 1000, NULL, 0);
  hark_batch_item it[2];
  uint32_t n = items_of(it, (uint32_t[]){6, 1}, 2);
  assert_dispatch(decide(&p, it, n, false, 1000), 1, 6);
}

static void test_preferred_size_dispatches_at_once(void **state) {
  (void)state;
  const uint32_t pref[] = {2, 4};
  hark_batch_policy p = policy(8, 1000000, pref, 2);
  hark_batch_item it[6];
  uint32_t n = items_of(it, (uint32_t[]){1, 1, 1, 1, 1, 1}, 6);
  /* One request: no preferred size yet, wait. */
  assert_wait(decide(&p, it, 1, false, 1000), 1000 + 1000000ull * US);
  /* Two: preferred 2 reached, go. */
  assert_dispatch(decide(&p, it, 2, false, 1000), 2, 2);
  /* Three: the longest preferred prefix is 2. */
  assert_dispatch(decide(&p, it, 3, false, 1000), 2, 2);
  /* Five or six: the largest preferred size that fits, 4. */
  assert_dispatch(decide(&p, it, 5, false, 1000), 4, 4);
  assert_dispatch(decide(&p, it, n, false, 1000), 4, 4);
}

static void test_preferred_with_batch_dims(void **state) {
  (void)state;
  const uint32_t pref[] = {4};
  hark_batch_policy p = policy(8, 1000000, pref, 1);
  hark_batch_item it[3];
  /* 3, then 3+3 = 6: never lands on 4, but passes the largest preferred
   * size, so everything pending goes. */
  uint32_t n = items_of(it, (uint32_t[]){3, 3}, 2);
  assert_dispatch(decide(&p, it, n, false, 1000), 2, 6);
  /* 3 alone: below 4, wait. */
  assert_wait(decide(&p, it, 1, false, 1000), 1000 + 1000000ull * US);
  /* 1 + 3 lands on 4 even with more behind. */
  n = items_of(it, (uint32_t[]){1, 3, 2}, 3);
  assert_dispatch(decide(&p, it, n, false, 1000), 2, 4);
}

static void test_preferred_unsorted(void **state) {
  (void)state;
  /* Preferred sizes in any order: the longest prefix on one wins. */
  const uint32_t pref[] = {6, 4};
  hark_batch_policy p = policy(8, 1000000, pref, 2);
  hark_batch_item it[3];
  uint32_t n = items_of(it, (uint32_t[]){2, 2, 2}, 3);
  assert_dispatch(decide(&p, it, n, false, 1000), 3, 6);
  assert_dispatch(decide(&p, it, 2, false, 1000), 2, 4);
}

static void test_queue_delay(void **state) {
  (void)state;
  hark_batch_policy p = policy(8, 100, NULL, 0);
  hark_batch_item it[2];
  uint32_t n = items_of(it, (uint32_t[]){1, 1}, 2);
  uint64_t due = 1000 + 100 * US;
  assert_wait(decide(&p, it, n, false, 1000), due);
  assert_wait(decide(&p, it, n, false, due - 1), due);
  /* Exactly at the deadline: dispatch what is there. */
  assert_dispatch(decide(&p, it, n, false, due), 2, 2);
  assert_dispatch(decide(&p, it, n, false, due + 12345), 2, 2);
}

static void test_queue_delay_uses_oldest(void **state) {
  (void)state;
  /* A newer high-priority request may sit first: the oldest arrival counts. */
  hark_batch_policy p = policy(8, 100, NULL, 0);
  hark_batch_item it[3] = {{1, 5000}, {1, 200}, {1, 7000}};
  assert_wait(decide(&p, it, 3, false, 5000), 200 + 100 * US);
  assert_dispatch(decide(&p, it, 3, false, 200 + 100 * US), 3, 3);
}

static void test_delay_exceeded_overrides_preferred(void **state) {
  (void)state;
  /* Preferred 2, three pending: before the delay send 2; after it, all 3. */
  const uint32_t pref[] = {2};
  hark_batch_policy p = policy(8, 100, pref, 1);
  hark_batch_item it[3];
  uint32_t n = items_of(it, (uint32_t[]){1, 1, 1}, 3);
  assert_dispatch(decide(&p, it, n, false, 1000), 2, 2);
  assert_dispatch(decide(&p, it, n, false, 1000 + 100 * US), 3, 3);
}

static void test_zero_delay_dispatches_at_once(void **state) {
  (void)state;
  hark_batch_policy p = policy(8, 0, NULL, 0);
  hark_batch_item it[3];
  uint32_t n = items_of(it, (uint32_t[]){1, 2, 1}, 3);
  assert_dispatch(decide(&p, it, 1, false, 1000), 1, 1);
  assert_dispatch(decide(&p, it, n, false, 1000), 3, 4);
  /* With preferred sizes, the preferred prefix still wins. */
  const uint32_t pref[] = {3};
  hark_batch_policy pp = policy(8, 0, pref, 1);
  assert_dispatch(decide(&pp, it, n, false, 1000), 2, 3);
}

static void test_flush(void **state) {
  (void)state;
  const uint32_t pref[] = {2};
  hark_batch_policy p = policy(4, 1000000, pref, 1);
  hark_batch_item it[6];
  uint32_t n = items_of(it, (uint32_t[]){1, 1, 1, 1, 1, 1}, 6);
  /* Stopping: no waiting, as much as fits. */
  assert_dispatch(decide(&p, it, 1, true, 1000), 1, 1);
  assert_dispatch(decide(&p, it, 3, true, 1000), 3, 3);
  assert_dispatch(decide(&p, it, n, true, 1000), 4, 4);
}

static void test_policy_from_config(void **state) {
  (void)state;
  hark_model_config cfg = {0};
  hark_batch_policy p;

  /* No dynamic_batching: the default scheduler. */
  cfg.max_batch_size = 8;
  hark_batch_policy_init(&p, &cfg);
  assert_true(p.single);
  assert_int_equal(p.max_batch_size, 8);

  /* No batch dimension: batches of one. */
  cfg.max_batch_size = 0;
  cfg.dynamic_batching.enabled = true;
  cfg.dynamic_batching.max_queue_delay_us = 250;
  hark_batch_policy_init(&p, &cfg);
  assert_false(p.single);
  assert_int_equal(p.max_batch_size, 1);
  assert_int_equal(p.max_queue_delay_ns, 250 * US);

  /* Preferred sizes above max_batch_size are dropped. */
  cfg.max_batch_size = 4;
  cfg.dynamic_batching.preferred_batch_size[0] = 2;
  cfg.dynamic_batching.preferred_batch_size[1] = 16;
  cfg.dynamic_batching.preferred_batch_size[2] = 4;
  cfg.dynamic_batching.n_preferred_batch_size = 3;
  hark_batch_policy_init(&p, &cfg);
  assert_int_equal(p.n_preferred, 2);
  assert_int_equal(p.preferred[0], 2);
  assert_int_equal(p.preferred[1], 4);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_empty_queue),
      cmocka_unit_test(test_single_request_per_batch),
      cmocka_unit_test(test_dispatch_at_max_batch_size),
      cmocka_unit_test(test_next_request_does_not_fit),
      cmocka_unit_test(test_batch_dim_accounting),
      cmocka_unit_test(test_oversized_request_goes_alone),
      cmocka_unit_test(test_preferred_size_dispatches_at_once),
      cmocka_unit_test(test_preferred_with_batch_dims),
      cmocka_unit_test(test_preferred_unsorted),
      cmocka_unit_test(test_queue_delay),
      cmocka_unit_test(test_queue_delay_uses_oldest),
      cmocka_unit_test(test_delay_exceeded_overrides_preferred),
      cmocka_unit_test(test_zero_delay_dispatches_at_once),
      cmocka_unit_test(test_flush),
      cmocka_unit_test(test_policy_from_config),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
