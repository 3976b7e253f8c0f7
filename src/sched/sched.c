/*
 * sched.c — picks a model's scheduler from its config, as Triton does:
 * ensemble_scheduling (or platform "ensemble") → ensemble.c;
 * sequence_batching → sequence.c; anything else → dynamic.c, which is the dynamic batcher when dynamic_batching is
 * present and the default scheduler (one request per execution) when not.
 * The public calls dispatch through the scheduler's ops table.
 */
#include <string.h>

#include "sched/sched_impl.h"

hark_error *hark_sched_new(hark_model *model, hark_server *server, hark_pool *pool,
                           uint32_t default_max_queue, hark_sched **out) {
  const hark_model_config *cfg = hark_model_get_config(model);
  bool ensemble = cfg->n_ensemble_steps > 0 || (cfg->platform && strcmp(cfg->platform, "ensemble") == 0);
  if (ensemble) return hark_sched_ensemble_new(model, server, out);
  if (cfg->sequence_batching.enabled)
    return hark_sched_sequence_new(model, pool, default_max_queue, out);
  return hark_sched_dynamic_new(model, pool, default_max_queue, out);
}

hark_error *hark_sched_enqueue(hark_sched *sched, hark_request *req) {
  return sched->ops->enqueue(sched, req);
}

void hark_sched_stop(hark_sched *sched) {
  if (sched) sched->ops->stop(sched);
}

void hark_sched_free(hark_sched *sched) {
  if (!sched) return;
  sched->ops->stop(sched);
  sched->ops->free(sched);
}

uint32_t hark_sched_queued(const hark_sched *sched) { return sched->ops->queued(sched); }
