/*
 * adaptive.h — the adaptive queue delay (`adaptive_queue_delay { }` of
 * dynamic_batching and sequence_batching.oldest), as a small controller
 * with no clock and no lock of its own: the batcher that owns it calls it
 * under its lock with the time and the queue depth, so each rule is a unit
 * test with made-up numbers (tests/unit/test_adaptive.c).
 *
 * The law. The delay stands on one of six rungs: min, and min plus 1/16,
 * 1/8, 1/4, 1/2 or all of (max - min). Each time a batch is formed the
 * queue depth then (requests waiting, the batch included) moves it:
 *   - depth >= target_queue_depth: one rung up (the queue is deep: waiting
 *     longer lets batches fill, which is throughput);
 *   - 2 * depth <= target_queue_depth: one rung down (the queue drains:
 *     nobody gains from the wait, which is latency);
 *   - in between: it stays (the dead band keeps a steady load from
 *     flapping between two rungs).
 * And while the batcher is idle — its queue empty and nothing executing,
 * so no response is about to bring a client back — each stretch as long
 * as the current delay takes it one rung down, counted when the next
 * request arrives: a lone request after a quiet spell is not held for a
 * delay set by the last burst. (Time spent executing is not idle: a
 * closed-loop client waiting for its response is still load.)
 *
 * Under a constant load the depth grows with the delay, so the delay only
 * ever moves one way until it rests on a rung: it does not oscillate. Min
 * to max takes five deep batches, and back five shallow ones.
 *
 * The fields a scrape reads (the delay, when the idle spell began, the
 * counts) are atomics written only under the owner's lock; a reader on any
 * thread gets a consistent-enough view from hark_adaptive_current().
 */
#ifndef HARK_SCHED_ADAPTIVE_H
#define HARK_SCHED_ADAPTIVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "hark/config.h"

typedef struct hark_adaptive {
  bool enabled;            /* false: a fixed delay (min_ns == max_ns) */
  uint64_t min_ns, max_ns; /* immutable after init */
  uint32_t target;         /* queue depth that widens; half of it narrows */
  atomic_uint_fast64_t delay_ns;
  atomic_uint_fast64_t idle_ns; /* idle since then; 0: not idle */
  atomic_uint_fast64_t widened, narrowed;
} hark_adaptive;

/* From the block (NULL or not enabled: the fixed `fixed_ns`, which
 * never moves). */
void hark_adaptive_init(hark_adaptive *a, const hark_adaptive_delay *cfg, uint64_t fixed_ns);

/* Before deciding on a queue that holds requests, the earliest of which
 * arrived at `first_ns`: ends an idle spell (narrowing for it) and returns
 * the delay to decide with. */
uint64_t hark_adaptive_delay_for(hark_adaptive *a, uint64_t first_ns);

/* A batch was formed with `depth` requests waiting (the batch included):
 * moves the delay by the law above. */
void hark_adaptive_formed(hark_adaptive *a, uint32_t depth);

/* From `now_ns` the queue is empty and nothing executes. */
void hark_adaptive_idle(hark_adaptive *a, uint64_t now_ns);

/* The delay in force at `now_ns`, the current idle spell counted. Any
 * thread, no lock. */
uint64_t hark_adaptive_current(const hark_adaptive *a, uint64_t now_ns);

#endif
