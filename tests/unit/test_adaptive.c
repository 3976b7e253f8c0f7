/*
 * test_adaptive.c — the adaptive queue delay's law (src/sched/adaptive.c)
 * with made-up depths and a made-up clock: the ladder within its bounds,
 * the dead band, idle spells, the fixed case, and a constant load that
 * must settle without changing direction. The batchers that use it are
 * tested in test_dynamic.c and test_sequence.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "sched/adaptive.h"

#define MS_NS 1000000ull

/* min 1 ms, max 17 ms (a range of 16 ms: rungs of 1, 2, 4, 8, 16 ms over
 * min), target depth 8. */
static hark_adaptive adaptive(uint64_t start_us) {
  hark_adaptive_delay cfg = {.enabled = true,
                             .min_us = 1000,
                             .max_us = 17000,
                             .target_queue_depth = 8,
                             .start_us = start_us};
  hark_adaptive a;
  hark_adaptive_init(&a, &cfg, 0);
  return a;
}

static uint64_t delay_of(hark_adaptive *a) { return atomic_load(&a->delay_ns); }

/* A deep queue climbs the ladder to max and stays there; a shallow one
 * walks it back to min and stays; never past either bound. */
static void test_adaptive_widens_and_narrows_within_bounds(void **state) {
  (void)state;
  hark_adaptive a = adaptive(1000);
  assert_int_equal(delay_of(&a), 1 * MS_NS);
  const uint64_t up[] = {2, 3, 5, 9, 17, 17, 17};
  for (size_t i = 0; i < sizeof up / sizeof up[0]; i++) {
    hark_adaptive_formed(&a, 8);
    assert_int_equal(delay_of(&a), up[i] * MS_NS);
  }
  assert_int_equal(atomic_load(&a.widened), 5); /* only real moves count */
  const uint64_t down[] = {9, 5, 3, 2, 1, 1, 1};
  for (size_t i = 0; i < sizeof down / sizeof down[0]; i++) {
    hark_adaptive_formed(&a, 1);
    assert_int_equal(delay_of(&a), down[i] * MS_NS);
  }
  assert_int_equal(atomic_load(&a.narrowed), 5);
  /* A huge depth is no bigger a step. */
  hark_adaptive_formed(&a, 100000);
  assert_int_equal(delay_of(&a), 2 * MS_NS);
}

/* Between half the target and the target the delay holds: a steady load
 * whose depth sits there does not flap. */
static void test_adaptive_dead_band_holds(void **state) {
  (void)state;
  hark_adaptive a = adaptive(5000);
  for (uint32_t depth = 5; depth <= 7; depth++)
    for (int i = 0; i < 10; i++) hark_adaptive_formed(&a, depth);
  assert_int_equal(delay_of(&a), 5 * MS_NS);
  assert_int_equal(atomic_load(&a.widened) + atomic_load(&a.narrowed), 0);
  hark_adaptive_formed(&a, 4); /* half the target narrows */
  assert_int_equal(delay_of(&a), 3 * MS_NS);
}

/* A start between rungs joins the ladder; min 0 climbs from 0. */
static void test_adaptive_start_and_zero_min(void **state) {
  (void)state;
  hark_adaptive a = adaptive(4000); /* 3 ms over min */
  hark_adaptive_formed(&a, 8);
  assert_int_equal(delay_of(&a), 7 * MS_NS);
  hark_adaptive_formed(&a, 8);
  assert_int_equal(delay_of(&a), 13 * MS_NS);
  hark_adaptive_formed(&a, 8);
  assert_int_equal(delay_of(&a), 17 * MS_NS);

  hark_adaptive_delay cfg = {.enabled = true, .max_us = 1600, .target_queue_depth = 2};
  hark_adaptive_init(&a, &cfg, 0);
  assert_int_equal(delay_of(&a), 0);
  hark_adaptive_formed(&a, 2);
  assert_int_equal(delay_of(&a), 100000); /* 1/16 of the range */
  hark_adaptive_formed(&a, 1);
  assert_int_equal(delay_of(&a), 0);
}

/* An idle spell as long as the delay takes it down a rung; the next
 * request's arrival counts it, and a scrape sees it meanwhile. */
static void test_adaptive_idle_narrows(void **state) {
  (void)state;
  hark_adaptive a = adaptive(17000);
  uint64_t t0 = 1000 * MS_NS;
  hark_adaptive_formed(&a, 6); /* the delay holds at 17 ms */
  assert_int_equal(hark_adaptive_current(&a, t0 + 10000 * MS_NS), 17 * MS_NS); /* not idle */
  hark_adaptive_idle(&a, t0);
  assert_int_equal(hark_adaptive_current(&a, t0 + 16 * MS_NS), 17 * MS_NS);
  assert_int_equal(hark_adaptive_current(&a, t0 + 17 * MS_NS), 9 * MS_NS);
  assert_int_equal(hark_adaptive_current(&a, t0 + 26 * MS_NS), 5 * MS_NS);
  assert_int_equal(hark_adaptive_current(&a, t0 + 10000 * MS_NS), 1 * MS_NS);
  assert_int_equal(delay_of(&a), 17 * MS_NS); /* reading moves nothing */

  /* A request 20 ms after the drain is decided with one rung less. */
  assert_int_equal(hark_adaptive_delay_for(&a, t0 + 20 * MS_NS), 9 * MS_NS);
  assert_int_equal(delay_of(&a), 9 * MS_NS);
  assert_int_equal(atomic_load(&a.narrowed), 1);
  /* The spell is over: later decisions do not count it again. */
  assert_int_equal(hark_adaptive_delay_for(&a, t0 + 20 * MS_NS), 9 * MS_NS);
  assert_int_equal(hark_adaptive_current(&a, t0 + 10000 * MS_NS), 9 * MS_NS);

  /* A later idle mark does not restart a spell already running. */
  hark_adaptive_idle(&a, t0 + 30 * MS_NS);
  hark_adaptive_idle(&a, t0 + 35 * MS_NS);
  assert_int_equal(hark_adaptive_current(&a, t0 + 38 * MS_NS), 9 * MS_NS);
  assert_int_equal(hark_adaptive_current(&a, t0 + 39 * MS_NS), 5 * MS_NS);
  /* After a long quiet spell a lone request gets min. */
  assert_int_equal(hark_adaptive_delay_for(&a, t0 + 5000 * MS_NS), 1 * MS_NS);
}

/* Without the block the delay is the fixed one and never moves. */
static void test_adaptive_off_is_fixed(void **state) {
  (void)state;
  hark_adaptive a;
  hark_adaptive_init(&a, NULL, 300000);
  assert_false(a.enabled);
  hark_adaptive_formed(&a, 1000);
  assert_int_equal(hark_adaptive_delay_for(&a, 1000 * MS_NS), 300000);
  hark_adaptive_formed(&a, 1);
  hark_adaptive_idle(&a, 5);
  assert_int_equal(hark_adaptive_current(&a, 1000 * MS_NS), 300000);
  hark_adaptive_delay cfg = {.enabled = false, .max_us = 5};
  hark_adaptive_init(&a, &cfg, 7000);
  assert_false(a.enabled);
  assert_int_equal(delay_of(&a), 7000);
}

/* Under a constant arrival rate the depth grows with the delay, so the
 * delay only moves one way and rests: simulate arrivals every `gap` with
 * a batch formed when the delay expires, and count direction changes. */
static void test_adaptive_constant_load_settles(void **state) {
  (void)state;
  const uint64_t gaps_us[] = {100, 500, 1500, 2500, 4000, 20000};
  for (size_t g = 0; g < sizeof gaps_us / sizeof gaps_us[0]; g++) {
    hark_adaptive a = adaptive(5000);
    uint64_t gap = gaps_us[g] * 1000u, now = MS_NS, prev = delay_of(&a);
    int changes = 0, last_dir = 0;
    for (int batch = 0; batch < 200; batch++) {
      uint64_t first = now + gap;
      uint64_t delay = hark_adaptive_delay_for(&a, first);
      /* Requests arrive every gap while the first one waits; at most 8. */
      uint32_t depth = 1 + (uint32_t)(delay / gap);
      if (depth > 8) depth = 8;
      now = first + (depth == 8 ? 7 * gap : delay);
      hark_adaptive_formed(&a, depth);
      hark_adaptive_idle(&a, now + 200000); /* its execution took 0.2 ms */
      uint64_t d = delay_of(&a);
      int dir = d > prev ? 1 : d < prev ? -1 : 0;
      if (dir && last_dir && dir != last_dir) changes++;
      if (dir) last_dir = dir;
      prev = d;
      assert_true(d >= 1 * MS_NS && d <= 17 * MS_NS);
    }
    if (changes)
      fail_msg("gap %llu us: the delay changed direction %d times", (unsigned long long)gaps_us[g],
               changes);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_adaptive_widens_and_narrows_within_bounds),
      cmocka_unit_test(test_adaptive_dead_band_holds),
      cmocka_unit_test(test_adaptive_start_and_zero_min),
      cmocka_unit_test(test_adaptive_idle_narrows),
      cmocka_unit_test(test_adaptive_off_is_fixed),
      cmocka_unit_test(test_adaptive_constant_load_settles),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
