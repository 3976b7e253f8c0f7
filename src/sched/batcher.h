/*
 * batcher.h — the dynamic batcher's decision, as a pure function: given the
 * head of the queue and the time, either "dispatch the first k requests
 * now" or "nothing is due before T". It owns no state, so each rule is a
 * unit test with made-up items and a made-up clock.
 *
 * Rules (Triton's dynamic batcher), over the pending batch — the longest
 * prefix of the queue whose batch sizes sum to at most max_batch_size:
 *   1. one request per execution for the default scheduler (`single`);
 *   2. if a prefix sums to a preferred batch size, dispatch the longest such
 *      prefix at once, unless the oldest pending request has waited
 *      max_queue_delay, in which case rule 3 sends everything pending;
 *   3. dispatch the whole pending batch when it is full (the next request
 *      does not fit), when it reaches the largest preferred size (or
 *      max_batch_size without preferred sizes), when its oldest request has
 *      waited max_queue_delay (boundary included), when max_queue_delay is
 *      0, or when flushing (the scheduler is stopping);
 *   4. otherwise wait until the oldest request's delay runs out.
 */
#ifndef HARK_SCHED_BATCHER_H
#define HARK_SCHED_BATCHER_H

#include <stdbool.h>
#include <stdint.h>

#include "hark/config.h"

typedef struct hark_batch_policy {
  uint32_t max_batch_size; /* >= 1: batch elements per execution */
  uint32_t preferred[HARK_MAX_PREFERRED_BATCH_SIZES];
  uint32_t n_preferred;
  uint64_t max_queue_delay_ns;
  bool single; /* default scheduler: one request per batch */
} hark_batch_policy;

/* From a model's config: `max_batch_size` 0 (no batch dimension) batches
 * nothing; preferred sizes above max_batch_size are dropped. */
void hark_batch_policy_init(hark_batch_policy *p, const hark_model_config *cfg);

typedef struct hark_batch_item {
  uint32_t batch_size; /* 0 counts as 1 */
  uint64_t enqueued_ns;
} hark_batch_item;

typedef struct hark_batch_decision {
  uint32_t n_requests;    /* dispatch the first n now; 0: nothing to send now */
  uint32_t batch_size;    /* their batch sizes summed */
  uint64_t wait_until_ns; /* when n_requests is 0: when to decide again
                             (UINT64_MAX: only when something changes) */
} hark_batch_decision;

/*
 * `items` are the queue's first `n_items` requests in dequeue order: the
 * whole queue, or at least max_batch_size + 1 of them (enough to see that
 * the batch is full). A lone request larger than max_batch_size (which
 * validation prevents) is dispatched alone rather than blocking the queue.
 */
void hark_batch_decide(const hark_batch_policy *p, const hark_batch_item *items, uint32_t n_items,
                       bool flush, uint64_t now_ns, hark_batch_decision *out);

#endif
