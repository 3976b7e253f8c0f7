/*
 * adaptive.c — the adaptive queue delay's law (adaptive.h). The rungs are
 * kept as the excess over min: 0, then unit = (max - min) / 16, doubled
 * up to (max - min) and halved back down, so the delay never drifts off
 * the ladder by rounding, and its start (any value in [min, max]) joins it
 * after one step.
 */
#include "sched/adaptive.h"

#define RUNG_DIVISOR 16u

static uint64_t unit_of(const hark_adaptive *a) {
  uint64_t u = (a->max_ns - a->min_ns) / RUNG_DIVISOR;
  return u ? u : 1;
}

static uint64_t step_up(const hark_adaptive *a, uint64_t delay) {
  uint64_t range = a->max_ns - a->min_ns, excess = delay - a->min_ns;
  excess = excess == 0 ? unit_of(a) : excess > range / 2 ? range : excess * 2;
  return a->min_ns + (excess < range ? excess : range);
}

static uint64_t step_down(const hark_adaptive *a, uint64_t delay) {
  uint64_t excess = (delay - a->min_ns) / 2;
  return a->min_ns + (excess < unit_of(a) ? 0 : excess);
}

/* The delay after an idle spell of `idle` ns that started at `delay`. */
static uint64_t decay(const hark_adaptive *a, uint64_t delay, uint64_t idle, uint32_t *steps) {
  *steps = 0;
  while (delay > a->min_ns && idle >= delay) {
    idle -= delay;
    delay = step_down(a, delay);
    ++*steps;
  }
  return delay;
}

void hark_adaptive_init(hark_adaptive *a, const hark_adaptive_delay *cfg, uint64_t fixed_ns) {
  bool on = cfg && cfg->enabled;
  a->enabled = on;
  a->min_ns = on ? cfg->min_us * 1000u : fixed_ns;
  a->max_ns = on ? cfg->max_us * 1000u : fixed_ns;
  a->target = on && cfg->target_queue_depth >= 2 ? cfg->target_queue_depth : 2;
  uint64_t start = on ? cfg->start_us * 1000u : fixed_ns;
  if (start < a->min_ns) start = a->min_ns;
  if (start > a->max_ns) start = a->max_ns;
  atomic_init(&a->delay_ns, start);
  atomic_init(&a->idle_ns, 0);
  atomic_init(&a->widened, 0);
  atomic_init(&a->narrowed, 0);
}

uint64_t hark_adaptive_delay_for(hark_adaptive *a, uint64_t first_ns) {
  uint64_t delay = atomic_load_explicit(&a->delay_ns, memory_order_relaxed);
  if (!a->enabled) return delay;
  uint64_t since = atomic_load_explicit(&a->idle_ns, memory_order_relaxed);
  if (!since) return delay;
  uint32_t steps;
  delay = decay(a, delay, first_ns > since ? first_ns - since : 0, &steps);
  atomic_store_explicit(&a->delay_ns, delay, memory_order_relaxed);
  atomic_store_explicit(&a->idle_ns, 0, memory_order_relaxed);
  if (steps) atomic_fetch_add_explicit(&a->narrowed, steps, memory_order_relaxed);
  return delay;
}

void hark_adaptive_formed(hark_adaptive *a, uint32_t depth) {
  if (!a->enabled) return;
  uint64_t delay = atomic_load_explicit(&a->delay_ns, memory_order_relaxed);
  uint64_t next = delay;
  if (depth >= a->target)
    next = step_up(a, delay);
  else if ((uint64_t)depth * 2 <= a->target)
    next = step_down(a, delay);
  if (next != delay) {
    atomic_store_explicit(&a->delay_ns, next, memory_order_relaxed);
    atomic_fetch_add_explicit(next > delay ? &a->widened : &a->narrowed, 1, memory_order_relaxed);
  }
}

void hark_adaptive_idle(hark_adaptive *a, uint64_t now_ns) {
  if (!a->enabled || atomic_load_explicit(&a->idle_ns, memory_order_relaxed)) return;
  /* 0 means "not idle": a clock that reads 0 is a test's, one ns on. */
  atomic_store_explicit(&a->idle_ns, now_ns ? now_ns : 1, memory_order_relaxed);
}

uint64_t hark_adaptive_current(const hark_adaptive *a, uint64_t now_ns) {
  uint64_t delay = atomic_load_explicit(&a->delay_ns, memory_order_relaxed);
  uint64_t since = atomic_load_explicit(&a->idle_ns, memory_order_relaxed);
  if (!a->enabled || !since || now_ns <= since) return delay;
  uint32_t steps;
  return decay(a, delay, now_ns - since, &steps);
}
