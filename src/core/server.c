/*
 * server.c — the server object: what harkd and the tests hold.
 *
 * It wires the engine together — the worker pool (runtime/pool.c), the
 * backend registry (backends.c) and the model repository (repository.c) —
 * from hark_server_options, and answers the public server API: readiness
 * and liveness, draining, and hark_server_infer(), which checks that the
 * request's model version is ready, validates the request and hands it to
 * the model's scheduler. The repository API (index, load, unload, model
 * lookups) passes through to the repository. Freeing tears down in
 * dependency order: the repository's models (whose schedulers run on the
 * pool), then the pool, then the backends the models ran on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/backends.h"
#include "core/core.h"
#include "core/repository.h"
#include "runtime/pool.h"
#include "util/alloc.h"
#include "util/log.h"

struct hark_server {
  bool strict_readiness;
  uint32_t default_max_queue;
  uint64_t max_recording_bytes;
  uint32_t max_correlation_id_bytes;
  hark_pool *pool;
  hark_backends *backends;
  hark_repository *repo;
  atomic_bool live;
  atomic_bool draining;
  atomic_bool cut; /* hark_server_cut_queued: queued requests no longer run */
};

hark_pool *hark_server_pool(hark_server *s) { return s->pool; }
uint32_t hark_server_default_max_queue(hark_server *s) { return s->default_max_queue; }

static const char *const extensions[] = {"classification",
                                         "model_repository",
                                         "model_repository(unload_dependents)",
                                         "schedule_policy",
                                         "model_configuration",
                                         "system_shared_memory",
                                         "statistics",
                                         "binary_tensor_data",
                                         "parameters",
                                         "logging",
                                         NULL};
const char *const *hark_server_extensions(void) { return extensions; }

/* ---- server ----------------------------------------------------------------- */

hark_error *hark_server_new(const hark_server_options *opts, hark_server **out) {
  hark_server *s = hark_xcalloc(1, sizeof *s);
  s->strict_readiness = opts->strict_readiness;
  s->default_max_queue = opts->max_queue_size ? opts->max_queue_size : 4096;
  s->max_recording_bytes =
      opts->max_recording_bytes ? opts->max_recording_bytes : HARK_DEFAULT_MAX_RECORDING_BYTES;
  s->max_correlation_id_bytes = opts->max_correlation_id_bytes
                                    ? opts->max_correlation_id_bytes
                                    : HARK_DEFAULT_MAX_CORRELATION_ID_BYTES;
  s->backends = hark_backends_new(opts->backend_directory ? opts->backend_directory
                                                          : HARK_DEFAULT_BACKEND_DIR);
  double poll = opts->repository_poll_secs > 0 ? opts->repository_poll_secs : 15.0;
  const hark_repository_config rc = {
      .path = opts->model_repository,
      .control = opts->model_control,
      .unload_timeout_ns =
          (uint64_t)(opts->unload_timeout_secs ? opts->unload_timeout_secs : 30) * 1000000000ull,
      .poll_ns = (uint64_t)(poll * 1e9),
      .server = s,
      .backends = s->backends,
  };
  hark_error *err = hark_repository_new(&rc, &s->repo);
  if (err) {
    hark_server_free(s);
    return err;
  }
  uint32_t threads = opts->worker_threads;
  if (!threads) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    threads = cores > 0 ? (uint32_t)cores : 1;
  }
  int prc = hark_pool_new(threads, 65536, &s->pool);
  if (prc != 0) {
    hark_server_free(s);
    return hark_error_new(HARK_ERR_INTERNAL, "cannot start the worker pool (%u threads): %s",
                          threads, strerror(prc));
  }
  hark_pool_set_inline_max_ns(s->pool, (uint64_t)opts->inline_max_us * 1000u);
  hark_pool_set_short_max_ns(s->pool, (uint64_t)opts->short_batch_us * 1000u);
  atomic_store(&s->live, true);
  err = hark_repository_start(s->repo, opts->load_models, opts->n_load_models);
  if (err) {
    hark_server_free(s);
    return err;
  }
  *out = s;
  return NULL;
}

void hark_server_free(hark_server *s) {
  if (!s) return;
  atomic_store(&s->live, false);
  hark_repository_free(s->repo);
  if (s->pool) hark_pool_free(s->pool);
  hark_backends_free(s->backends);
  free(s);
}

bool hark_server_is_live(const hark_server *s) { return atomic_load(&s->live); }

void hark_server_begin_drain(hark_server *s) {
  atomic_store(&s->draining, true);
  hark_repository_drain(s->repo);
}

bool hark_server_is_draining(const hark_server *s) { return atomic_load(&s->draining); }

static void flush_model(hark_model *m, void *userp) {
  (void)userp;
  hark_model_flush(m);
}

void hark_server_cut_queued(hark_server *s) {
  if (atomic_exchange(&s->cut, true)) return;
  /* What waits for a slot or a batch goes on now, to be answered. */
  hark_repository_foreach(s->repo, flush_model, NULL);
}

bool hark_server_is_cut(const hark_server *s) { return atomic_load(&s->cut); }

bool hark_server_is_idle(hark_server *s) { return hark_repository_pending(s->repo) <= 0; }

bool hark_server_is_ready(const hark_server *s) {
  if (!atomic_load(&s->live) || atomic_load(&s->draining)) return false;
  if (!s->strict_readiness) return true;
  return hark_repository_all_loaded(s->repo);
}

hark_error *hark_server_model_acquire(hark_server *s, const char *name, int64_t version,
                                      hark_model **out) {
  return hark_repository_acquire(s->repo, name, version, out);
}

void hark_server_model_foreach(hark_server *s, void (*fn)(hark_model *, void *), void *userp) {
  hark_repository_foreach(s->repo, fn, userp);
}

void hark_server_thread_may_inline(bool on) { hark_pool_thread_may_inline(on); }

/* No correlation id: a one-shot (on a sequence model, a whole recording). */
static bool is_oneshot(const hark_request *req) {
  return req->correlation_id_str ? !*req->correlation_id_str : req->correlation_id == 0;
}

/*
 * The bounds on what one request may make the engine keep or do that the
 * transports' byte limits do not see (issue 24): a string correlation id
 * is kept for its sequence's life and echoed in every reply, and a whole
 * recording on a streaming model is decoded to its end on a worker (its
 * size is its CPU time), where a stream's audio comes bounded chunk by
 * chunk. A stream's chunks (a sequence request that does not both start
 * and end it) are not whole recordings.
 */
static hark_error *check_bounds(const hark_server *s, const hark_request *req) {
  const char *sid = req->correlation_id_str;
  size_t sid_len = sid ? strlen(sid) : 0;
  if (sid_len > s->max_correlation_id_bytes)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "sequence id of %zu bytes to model '%s': at most %u bytes "
                          "(--max-correlation-id-bytes)",
                          sid_len, req->model->name, s->max_correlation_id_bytes);
  if (!req->model->config->sequence_batching.enabled) return NULL;
  const uint32_t both = HARK_REQUEST_SEQUENCE_START | HARK_REQUEST_SEQUENCE_END;
  if (!is_oneshot(req) && (req->flags & both) != both) return NULL;
  uint64_t bytes = 0;
  for (uint32_t i = 0; i < req->n_inputs; i++) bytes += req->inputs[i].byte_size;
  if (bytes <= s->max_recording_bytes) return NULL;
  return hark_error_new(HARK_ERR_INVALID_ARG,
                        "a whole recording of %llu bytes to model '%s' (a request without a "
                        "sequence id, or one that starts and ends its sequence) is over the "
                        "bound of %llu bytes (--max-recording-bytes); stream longer audio "
                        "(Vosk WebSocket, Riva StreamingRecognize, a KServe sequence)",
                        (unsigned long long)bytes, req->model->name,
                        (unsigned long long)s->max_recording_bytes);
}

hark_error *hark_server_infer(hark_server *s, hark_request *req) {
  hark_model *m = req->model;
  if (!atomic_load(&s->live))
    return hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down");
  if (!atomic_load(&m->ready) && atomic_load(&m->retired))
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "model '%s' version %lld is unloading: it was reloaded or unloaded "
                          "and the streams that began on it had %.0f s to finish "
                          "(--model-unload-timeout-secs)",
                          m->name, (long long)m->version,
                          (double)hark_repository_unload_timeout_ns(s->repo) / 1e9);
  if (!atomic_load(&m->ready))
    return hark_error_new(HARK_ERR_UNAVAILABLE, "model '%s' version %lld is not ready", m->name,
                          (long long)m->version);
  hark_error *err = hark_request_validate(req);
  if (!err) err = check_bounds(s, req);
  if (err) return err;
  req->received_ns = hark_now_ns();
  req->oneshot = is_oneshot(req);
  atomic_fetch_add(&m->stats.pending, 1);
  if (req->oneshot) atomic_fetch_add(&m->stats.pending_oneshot, 1);
  err = hark_model_enqueue(m, req);
  if (err) {
    atomic_fetch_sub(&m->stats.pending, 1);
    if (req->oneshot) atomic_fetch_sub(&m->stats.pending_oneshot, 1);
  }
  return err;
}

/* ---- repository API ----------------------------------------------------------- */

hark_error *hark_server_repository_index(hark_server *s, bool ready_only, hark_index_entry **out,
                                         size_t *n_out) {
  return hark_repository_index(s->repo, ready_only, out, n_out);
}

hark_error *hark_server_model_load(hark_server *s, const char *name, hark_server_done_fn done,
                                   void *userp) {
  return hark_repository_load(s->repo, name, done, userp);
}

hark_error *hark_server_model_unload(hark_server *s, const char *name, hark_server_done_fn done,
                                     void *userp) {
  return hark_repository_unload(s->repo, name, done, userp);
}
