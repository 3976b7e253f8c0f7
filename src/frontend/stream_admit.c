/*
 * stream_admit.c — admission of new streams on a model's backlog.
 */
#include "frontend/stream_admit.h"

#include <stdio.h>
#include <stdlib.h>

#include "hark/backend.h"
#include "hark/config.h"

bool hark_stream_model_overloaded(const hark_model *model, uint32_t limit, char *msg, size_t len) {
  if (!limit) {
    const hark_model_config *cfg = hark_model_get_config(model);
    uint32_t instances = 0;
    for (uint32_t i = 0; i < cfg->n_instance_groups; i++) instances += cfg->instance_groups[i].count;
    limit = 4 * (instances ? instances : 1);
  }
  hark_model_stats *st = malloc(sizeof *st);
  if (!st) return false;
  hark_model_stats_read(model, st);
  uint64_t pending = st->pending;
  free(st);
  if (pending <= limit) return false;
  snprintf(msg, len,
           "model '%s' is overloaded: %llu requests waiting (limit %u, "
           "--stream-backlog-limit); try again later",
           hark_model_name(model), (unsigned long long)pending, limit);
  return true;
}
