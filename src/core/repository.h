/*
 * repository.h — the model repository's lifecycle (repository.c): the
 * loaded versions of every model, loading, unloading and reloading them,
 * retiring replaced versions, and polling the folder. The server
 * (server.c) owns one and answers the public repository API through it.
 */
#ifndef HARK_REPOSITORY_H
#define HARK_REPOSITORY_H

#include <stdbool.h>
#include <stdint.h>

#include "core/backends.h"
#include "hark/server.h"

typedef struct hark_repository hark_repository;

typedef struct hark_repository_config {
  const char *path; /* the repository folder (copied) */
  hark_model_control control;
  uint64_t unload_timeout_ns; /* how long a retired version may serve what holds it */
  uint64_t poll_ns;           /* POLL mode: the rescan period */
  hark_server *server;        /* handed to every model it builds */
  hark_backends *backends;    /* where their backends come from; outlives it */
} hark_repository_config;

/* An empty repository; INVALID_ARG when the folder is not one. */
hark_error *hark_repository_new(const hark_repository_config *cfg, hark_repository **out);
/*
 * Loads what the control mode asks for at start: every model folder, or in
 * EXPLICIT mode the `load_models` ("*": every one); then, in POLL mode,
 * starts polling. A model that fails to load is logged and kept as
 * UNAVAILABLE with its reason, not an error; only a thread that cannot
 * start is.
 */
hark_error *hark_repository_start(hark_repository *r, const char *const *load_models,
                                  uint32_t n_load_models);
/* Stops polling and any load or unload in progress, destroys every
 * version (ensembles first, since they send requests to their steps) and
 * waits for retired ones, then frees. Blocks. */
void hark_repository_free(hark_repository *r);
/* Draining: polling stops loading, load and unload requests are refused. */
void hark_repository_drain(hark_repository *r);

/* hark_server_model_acquire: `version` < 0 is the latest. */
hark_error *hark_repository_acquire(hark_repository *r, const char *name, int64_t version,
                                    hark_model **out);
/* hark_server_model_foreach: each loaded version, held during fn. */
void hark_repository_foreach(hark_repository *r, void (*fn)(hark_model *, void *), void *userp);
/* Requests pending on loaded and retired versions. */
int64_t hark_repository_pending(hark_repository *r);
/* No model's last load failed (strict readiness). */
bool hark_repository_all_loaded(hark_repository *r);
uint64_t hark_repository_unload_timeout_ns(const hark_repository *r);

/* hark_server_repository_index. */
hark_error *hark_repository_index(hark_repository *r, bool ready_only, hark_index_entry **out,
                                  size_t *n_out);
/* hark_server_model_load / _unload: on a thread of their own, `done` when
 * finished; refused at once by control mode, name, or draining. */
hark_error *hark_repository_load(hark_repository *r, const char *name, hark_server_done_fn done,
                                 void *userp);
hark_error *hark_repository_unload(hark_repository *r, const char *name, hark_server_done_fn done,
                                   void *userp);

#endif
