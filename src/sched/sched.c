/*
 * sched.c — picks a model's scheduler from its config, as Triton does:
 * ensemble_scheduling (or platform "ensemble") → ensemble.c;
 * sequence_batching → sequence.c; anything else → dynamic.c, which is the dynamic batcher when dynamic_batching is
 * present and the default scheduler (one request per execution) when not.
 * The public calls dispatch through the scheduler's ops table.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "sched/adaptive.h"
#include "sched/sched_impl.h"

hark_error *hark_sched_new(const hark_sched_desc *desc, hark_sched **out) {
  const hark_model_config *cfg = desc->config;
  bool ensemble =
      cfg->n_ensemble_steps > 0 || (cfg->platform && strcmp(cfg->platform, "ensemble") == 0);
  if (ensemble) return hark_sched_ensemble_new(desc, out);
  if (cfg->sequence_batching.enabled) return hark_sched_sequence_new(desc, out);
  return hark_sched_dynamic_new(desc, out);
}

hark_error *hark_sched_enqueue(hark_sched *sched, hark_request *req) {
  return sched->ops->enqueue(sched, req);
}

void hark_sched_stop(hark_sched *sched) {
  if (sched) sched->ops->stop(sched);
}

void hark_sched_flush(hark_sched *sched) {
  if (sched && sched->ops->flush) sched->ops->flush(sched);
}

void hark_sched_free(hark_sched *sched) {
  if (!sched) return;
  sched->ops->stop(sched);
  sched->ops->free(sched);
}

uint32_t hark_sched_queued(const hark_sched *sched) { return sched->ops->queued(sched); }

uint32_t hark_sched_parked(const hark_sched *sched, uint32_t ns) {
  return sched->ops->parked ? sched->ops->parked(sched, ns) : 0;
}
uint32_t hark_sched_busy(const hark_sched *sched) { return sched->ops->busy(sched); }

bool hark_sched_queue_delay(const hark_sched *sched, hark_sched_delay *out) {
  const hark_adaptive *a = sched && sched->ops->delay ? sched->ops->delay(sched) : NULL;
  if (!a) return false;
  *out = (hark_sched_delay){
      .adaptive = a->enabled,
      .delay_us = hark_adaptive_current(a, hark_now_ns()) / 1000u,
      .min_us = a->min_ns / 1000u,
      .max_us = a->max_ns / 1000u,
      .widened = atomic_load_explicit(&a->widened, memory_order_relaxed),
      .narrowed = atomic_load_explicit(&a->narrowed, memory_order_relaxed),
  };
  return true;
}

bool hark_sched_sequence_state(const hark_sched *sched, hark_sched_seq_state *out) {
  return sched && sched->ops->seq_state && sched->ops->seq_state(sched, out);
}

/* A comma-separated list of ids in a fixed buffer; "..." once full. */
typedef struct id_list {
  char *buf;
  size_t cap, len;
  bool full;
} id_list;

static void join_id(id_list *l, const char *id) {
  if (!*id || l->full) return;
  size_t n = strlen(id), sep = l->len ? 1 : 0;
  if (l->len + sep + n + 1 > l->cap) {
    const char *more = sep ? ",..." : "...";
    size_t m = strlen(more);
    if (l->len + m + 1 <= l->cap) {
      memcpy(l->buf + l->len, more, m);
      l->len += m;
    }
    l->buf[l->len] = '\0';
    l->full = true;
    return;
  }
  if (sep) l->buf[l->len++] = ',';
  memcpy(l->buf + l->len, id, n);
  l->len += n;
  l->buf[l->len] = '\0';
}

void hark_sched_log_batch(const hark_sched_desc *desc, uint32_t instance, hark_request **reqs,
                          uint32_t n, hark_log_context *saved) {
  hark_log_context_save(saved);
  char ids[HARK_LOG_ID_MAX] = "", seqs[sizeof saved->sequence_id] = "";
  id_list li = {ids, sizeof ids, 0, false}, ls = {seqs, sizeof seqs, 0, false};
  for (uint32_t i = 0; i < n; i++) {
    join_id(&li, hark_request_id(reqs[i]));
    const char *cs = hark_request_correlation_id_str(reqs[i]);
    char num[24];
    uint64_t cid = hark_request_correlation_id(reqs[i]);
    if (!cs && cid) {
      snprintf(num, sizeof num, "%" PRIu64, cid);
      cs = num;
    }
    if (cs) join_id(&ls, cs);
  }
  hark_log_context_set(ids, seqs);
  const char *inst = desc->instance_name ? desc->instance_name(desc->ctx, instance) : NULL;
  char index[16];
  if (!inst) {
    snprintf(index, sizeof index, "%u", instance);
    inst = index;
  }
  HARK_VERBOSE("model '%s' version %lld: executing %u request%s on instance %s", desc->name,
               (long long)desc->version, n, n == 1 ? "" : "s", inst);
}
