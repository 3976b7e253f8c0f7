/*
 * batcher.c — the dynamic batcher's decision (rules in batcher.h). One pass
 * over the head of the queue accumulates the pending batch, remembers the
 * longest prefix that lands on a preferred size and the oldest arrival, and
 * then applies the rules in order. Nothing here reads a clock or a lock.
 */
#include "sched/batcher.h"

void hark_batch_policy_init(hark_batch_policy *p, const hark_model_config *cfg) {
  const hark_dynamic_batching *db = &cfg->dynamic_batching;
  *p = (hark_batch_policy){0};
  p->max_batch_size = cfg->max_batch_size ? cfg->max_batch_size : 1;
  p->single = !db->enabled;
  p->max_queue_delay_ns = db->max_queue_delay_us * 1000u;
  for (uint32_t i = 0; i < db->n_preferred_batch_size && i < HARK_MAX_PREFERRED_BATCH_SIZES; i++) {
    uint32_t size = db->preferred_batch_size[i];
    if (size >= 1 && size <= p->max_batch_size) p->preferred[p->n_preferred++] = size;
  }
}

static bool is_preferred(const hark_batch_policy *p, uint32_t size) {
  for (uint32_t i = 0; i < p->n_preferred; i++)
    if (p->preferred[i] == size) return true;
  return false;
}

static uint32_t largest_preferred(const hark_batch_policy *p) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < p->n_preferred; i++)
    if (p->preferred[i] > m) m = p->preferred[i];
  return m ? m : p->max_batch_size;
}

void hark_batch_decide(const hark_batch_policy *p, const hark_batch_item *items, uint32_t n_items,
                       bool flush, uint64_t now_ns, hark_batch_decision *out) {
  *out = (hark_batch_decision){.wait_until_ns = UINT64_MAX};
  if (n_items == 0) return;
  if (p->single) {
    out->n_requests = 1;
    out->batch_size = items[0].batch_size ? items[0].batch_size : 1;
    return;
  }

  uint32_t max = p->max_batch_size ? p->max_batch_size : 1;
  uint32_t k = 0, total = 0, best_k = 0, best_total = 0;
  uint64_t oldest = UINT64_MAX;
  bool full = false;
  for (uint32_t i = 0; i < n_items; i++) {
    uint32_t size = items[i].batch_size ? items[i].batch_size : 1;
    if (total + size > max) {
      full = true;
      if (k == 0) { /* too large alone: send it by itself */
        k = 1;
        total = size;
        oldest = items[0].enqueued_ns;
      }
      break;
    }
    total += size;
    k++;
    if (items[i].enqueued_ns < oldest) oldest = items[i].enqueued_ns;
    if (is_preferred(p, total)) {
      best_k = k;
      best_total = total;
    }
  }

  uint64_t delay = p->max_queue_delay_ns;
  uint64_t due = (delay && oldest <= UINT64_MAX - delay) ? oldest + delay : UINT64_MAX;
  bool delay_exceeded = delay && now_ns >= due;

  if (best_k && !delay_exceeded && !flush) {
    out->n_requests = best_k;
    out->batch_size = best_total;
    return;
  }
  if (full || total >= largest_preferred(p) || delay_exceeded || delay == 0 || flush) {
    out->n_requests = k;
    out->batch_size = total;
    return;
  }
  out->wait_until_ns = due;
}
