/*
 * fuzz_model.h — a model the fuzz targets build requests for, without a
 * server or a backend: its config parsed from `config`, made once.
 */
#ifndef HARK_FUZZ_MODEL_H
#define HARK_FUZZ_MODEL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static inline hark_model *fuzz_model_from(const char *config, size_t len) {
  static hark_model *model;
  if (model) return model;
  model = calloc(1, sizeof *model);
  atomic_init(&model->refs, 1);
  pthread_mutex_init(&model->lock, NULL);
  pthread_cond_init(&model->released, NULL);
  model->name = strdup("fuzz");
  model->version = 1;
  if (hark_model_config_parse(config, len, "config.pbtxt", "fuzz", &model->config)) abort();
  model->stats.n_batch = 8;
  model->stats.batch = calloc(8, sizeof *model->stats.batch);
  return model;
}

#endif
