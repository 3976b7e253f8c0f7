/*
 * model.c — one loaded model version: its backend state, its instances and
 * its scheduler, and the batch execution path.
 *
 * Lifecycle mirrors Triton: model_init → instance_init for each instance →
 * scheduler start; destroy runs it backwards, after the scheduler has
 * drained and every reference (each request holds one) is gone. The
 * scheduler gets the model through a descriptor (sched.h): the config, the
 * instance count, and this file's execute as its run function. The
 * repository (server.c) holds one reference while the version is loaded.
 * A replaced or unloaded version is first "retired": still ready, no longer
 * found by name, it serves what holds it (a live stream keeps its version)
 * until hark_model_wait_unused() says it is unused or its time is up.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "util/alloc.h"
#include "util/log.h"

const char *hark_backend_name(const hark_backend *b) { return b->name; }
void hark_backend_set_state(hark_backend *b, void *state) { b->state = state; }
void *hark_backend_state(const hark_backend *b) { return b->state; }

const char *hark_model_name(const hark_model *m) { return m->name; }
int64_t hark_model_version(const hark_model *m) { return m->version; }
const char *hark_model_path(const hark_model *m) { return m->path; }
const hark_model_config *hark_model_get_config(const hark_model *m) { return m->config; }
const char *hark_model_parameter(const hark_model *m, const char *key) {
  return hark_model_config_parameter(m->config, key);
}
void hark_model_set_state(hark_model *m, void *state) { m->state = state; }
void *hark_model_state(const hark_model *m) { return m->state; }
bool hark_model_is_ready(const hark_model *m) { return atomic_load(&m->ready); }

hark_model *hark_instance_model(const hark_instance *inst) { return inst->model; }
uint32_t hark_instance_index(const hark_instance *inst) { return inst->index; }
const char *hark_instance_name(const hark_instance *inst) { return inst->name; }
void hark_instance_set_state(hark_instance *inst, void *state) { inst->state = state; }
void *hark_instance_state(const hark_instance *inst) { return inst->state; }

void hark_model_acquire(hark_model *m) { atomic_fetch_add(&m->refs, 1); }

void hark_model_release(hark_model *m) {
  if (!m) return;
  /* The lock orders the decrement against destroy's wait: without it the
   * waiter could miss the last signal. */
  pthread_mutex_lock(&m->lock);
  int left = atomic_fetch_sub(&m->refs, 1) - 1;
  if (left <= 1) pthread_cond_broadcast(&m->released);
  pthread_mutex_unlock(&m->lock);
}

int hark_model_users(hark_model *m) { return atomic_load(&m->refs) - 1; }

bool hark_model_wait_unused(hark_model *m, uint64_t deadline_ns, const atomic_bool *cut) {
  pthread_mutex_lock(&m->lock);
  for (;;) {
    if (atomic_load(&m->refs) <= 1) break;
    uint64_t now = hark_now_ns();
    if (now >= deadline_ns || (cut && atomic_load(cut))) break;
    uint64_t slice = deadline_ns - now < 100000000ull ? deadline_ns - now : 100000000ull;
    /* The condition variable uses the realtime clock: wait a slice from now. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + slice;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    int rc = pthread_cond_timedwait(&m->released, &m->lock, &ts);
    if (rc != 0 && rc != ETIMEDOUT) break;
  }
  bool unused = atomic_load(&m->refs) <= 1;
  pthread_mutex_unlock(&m->lock);
  return unused;
}

static hark_error *instances_create(hark_model *m) {
  const hark_model_config *cfg = m->config;
  uint32_t total = 0;
  for (uint32_t g = 0; g < cfg->n_instance_groups; g++) total += cfg->instance_groups[g].count;
  if (!m->backend) return NULL; /* ensembles run no instances of their own */
  m->instances = calloc(total ? total : 1, sizeof *m->instances);
  if (!m->instances) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  m->n_instances = total;
  uint32_t idx = 0;
  for (uint32_t g = 0; g < cfg->n_instance_groups; g++) {
    const hark_instance_group *grp = &cfg->instance_groups[g];
    for (uint32_t i = 0; i < grp->count; i++, idx++) {
      hark_instance *inst = &m->instances[idx];
      inst->model = m;
      inst->index = idx;
      char name[256];
      if (grp->name && *grp->name)
        snprintf(name, sizeof name, "%s_%u", grp->name, i);
      else
        snprintf(name, sizeof name, "%s_%u_%u", m->name, g, i);
      inst->name = hark_xstrdup(name);
    }
  }
  for (idx = 0; idx < total; idx++) {
    hark_error *err = m->backend->api->instance_init(&m->instances[idx]);
    if (err) {
      hark_error *wrapped = hark_error_new(hark_error_code(err), "instance '%s': %s",
                                           m->instances[idx].name, hark_error_message(err));
      hark_error_free(err);
      return wrapped;
    }
    m->n_instances_inited++;
  }
  return NULL;
}

static void model_teardown(hark_model *m) {
  if (m->sched) hark_sched_free(m->sched);
  m->sched = NULL;
  for (uint32_t i = m->n_instances_inited; i-- > 0;)
    m->backend->api->instance_fini(&m->instances[i]);
  for (uint32_t i = 0; i < m->n_instances; i++) free(m->instances[i].name);
  free(m->instances);
  if (m->model_inited) m->backend->api->model_fini(m);
  if (m->stats.batch) free(m->stats.batch);
  hark_model_config_free(m->config);
  pthread_mutex_destroy(&m->lock);
  pthread_cond_destroy(&m->released);
  free(m->name);
  free(m->path);
  free(m);
}

/* A model with its config and statistics; nothing runs yet. */
/* NULL when the per-batch-size statistics, sized by the config's
 * max_batch_size, do not fit. */
static hark_model *model_alloc(hark_model_config *cfg, const char *path, int64_t version) {
  uint32_t n_batch = cfg->max_batch_size ? cfg->max_batch_size : 1;
  hark_abatch *batch = calloc(n_batch, sizeof *batch);
  if (!batch) return NULL;
  hark_model *m = hark_xcalloc(1, sizeof *m);
  atomic_init(&m->refs, 1);
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->released, NULL);
  m->name = hark_xstrdup(cfg->name);
  m->path = hark_xstrdup(path);
  m->version = version;
  m->config = cfg;
  m->stats.n_batch = n_batch;
  m->stats.batch = batch;
  return m;
}

static hark_error *too_big(hark_model_config *cfg) {
  hark_error *err = hark_error_new(HARK_ERR_INVALID_ARG,
                                   "model '%s': max_batch_size %u needs more memory than there is",
                                   cfg->name, cfg->max_batch_size);
  hark_model_config_free(cfg);
  return err;
}

hark_error *hark_model_create_bare(hark_model_config *cfg, int64_t version, hark_model **out) {
  hark_model *m = model_alloc(cfg, "", version);
  if (!m) return too_big(cfg);
  atomic_store(&m->ready, true);
  *out = m;
  return NULL;
}

/* What the scheduler calls back (below). */
static void model_execute(void *ctx, uint32_t index, hark_request **reqs, uint32_t n);
static void model_sequence_fini(void *ctx, void *state);
static const char *model_instance_name(void *ctx, uint32_t index);

hark_error *hark_model_create(hark_server *server, hark_backend *backend, const char *path,
                              hark_model_config *cfg, int64_t version, hark_model **out) {
  hark_model *m = model_alloc(cfg, path, version);
  if (!m) return too_big(cfg);
  m->server = server;
  m->backend = backend;
  hark_error *err = NULL;
  if (backend) {
    err = backend->api->model_init(m);
    if (!err) m->model_inited = true;
  }
  if (!err) err = instances_create(m);
  if (!err) {
    const hark_sched_desc desc = {
        .config = m->config,
        .name = m->name,
        .version = m->version,
        .n_instances = m->n_instances,
        .pool = hark_server_pool(server),
        .default_max_queue = hark_server_default_max_queue(server),
        .ctx = m,
        .run = model_execute,
        .sequence_fini = model_sequence_fini,
        .instance_name = model_instance_name,
        .server = server,
    };
    err = hark_sched_new(&desc, &m->sched);
  }
  if (err) {
    m->sched = NULL;
    model_teardown(m);
    return err;
  }
  atomic_store(&m->ready, true);
  *out = m;
  return NULL;
}

void hark_model_flush(hark_model *m) {
  if (m->sched) hark_sched_flush(m->sched);
}

void hark_model_destroy(hark_model *m) {
  atomic_store(&m->ready, false);
  hark_sched_stop(m->sched);
  /* Wait for requests still held by decoupled backends or front ends. */
  pthread_mutex_lock(&m->lock);
  while (atomic_load(&m->refs) > 1) pthread_cond_wait(&m->released, &m->lock);
  pthread_mutex_unlock(&m->lock);
  model_teardown(m);
}

hark_error *hark_model_enqueue(hark_model *m, hark_request *req) {
  return hark_sched_enqueue(m->sched, req);
}

uint32_t hark_model_queued(const hark_model *m) {
  return m->sched ? hark_sched_queued(m->sched) : 0;
}

uint64_t hark_model_pending_for(const hark_model *m, hark_corr_ns ns) {
  /* One-shots (whole recordings) wait in the pool's bulk lane, not in
   * front of a stream's chunks: a new stream does not wait behind them
   * (issue 24: 24 one-shot infers made every new stream 503 for 57 s). */
  int64_t pending = atomic_load(&m->stats.pending) - atomic_load(&m->stats.pending_oneshot);
  uint32_t parked = m->sched ? hark_sched_parked(m->sched, ns) : 0;
  /* Two snapshots a moment apart: never below zero. */
  return pending > (int64_t)parked ? (uint64_t)(pending - parked) : 0;
}

bool hark_model_queue_delay(const hark_model *m, hark_sched_delay *out) {
  return m->sched && hark_sched_queue_delay(m->sched, out);
}

bool hark_model_sequence_state(const hark_model *m, hark_sched_seq_state *out) {
  return m->sched && hark_sched_sequence_state(m->sched, out);
}

/* Frees per-sequence backend state through the backend's sequence_fini
 * (read only from backends built on API 1.1 or newer). */
static void model_sequence_fini(void *ctx, void *state) {
  hark_model *m = ctx;
  if (!state) return;
  if (m->backend && m->backend->sequence_fini) {
    m->backend->sequence_fini(m, state);
    return;
  }
  HARK_ERROR(
      "model '%s': a sequence ended holding backend state, but backend '%s' has no "
      "sequence_fini to free it (leaked)",
      m->name, m->backend ? m->backend->name : "");
}

static void model_run(hark_model *m, hark_instance *inst, hark_request **reqs, uint32_t n);

/*
 * One batch on instance `index` through the backend's execute, with the
 * scheduler's run contract (sched.h). Records execution statistics (queue
 * time ends, compute begins). If the backend refuses the batch, every
 * request gets that error as its FINAL.
 */
static void model_execute(void *ctx, uint32_t index, hark_request **all, uint32_t n_all) {
  hark_model *m = ctx;
  hark_instance *inst = &m->instances[index];
  /* Requests whose client cancelled or went away while they waited end
   * CANCELLED here, never reaching the backend; past the shutdown's exit
   * timeout, queued ones end UNAVAILABLE (hark_server_cut_queued). */
  hark_request *kept[64], **reqs = n_all <= 64 ? kept : hark_xcalloc(n_all, sizeof *reqs);
  uint32_t n = 0;
  bool cut = m->server && hark_server_is_cut(m->server);
  for (uint32_t i = 0; i < n_all; i++)
    if (cut)
      hark_request_complete(all[i], hark_error_new(HARK_ERR_UNAVAILABLE,
                                                   "Server is shutting down: the exit timeout "
                                                   "(--exit-timeout-secs) passed while this "
                                                   "request was queued"));
    else if (hark_request_is_cancelled(all[i]))
      hark_request_complete(
          all[i],
          hark_error_new(HARK_ERR_CANCELLED, "request cancelled by its client before it ran"));
    else
      reqs[n++] = all[i];
  if (n) model_run(m, inst, reqs, n);
  if (reqs != kept) free(reqs);
}

static void model_run(hark_model *m, hark_instance *inst, hark_request **reqs, uint32_t n) {
  uint64_t start = hark_now_ns();
  uint32_t batch = 0;
  for (uint32_t i = 0; i < n; i++) {
    reqs[i]->exec_start_ns = start;
    batch += reqs[i]->batch_size;
  }
  /* Per batch size: the whole execution as compute_infer (a backend's own
   * marks refine the per-request figures, not these). The counts go up
   * before the backend runs, since its responses can reach a client before
   * it returns: a client that reads the statistics after its response sees
   * its execution counted (the time follows once the backend returns). */
  hark_abatch *b = batch >= 1 && batch <= m->stats.n_batch ? &m->stats.batch[batch - 1] : NULL;
  atomic_fetch_add(&m->stats.execution_count, 1);
  if (b) {
    atomic_fetch_add(&b->compute_input.count, 1);
    atomic_fetch_add(&b->compute_infer.count, 1);
    atomic_fetch_add(&b->compute_output.count, 1);
  }
  hark_error *err = m->backend->api->instance_execute(inst, reqs, n);
  if (b) atomic_fetch_add(&b->compute_infer.ns, hark_now_ns() - start);
  if (err) {
    /* The backend refused the batch: the requests are still ours. */
    for (uint32_t i = 0; i < n; i++)
      hark_request_complete(reqs[i],
                            hark_error_new(hark_error_code(err), "%s", hark_error_message(err)));
    hark_error_free(err);
  }
}

static const char *model_instance_name(void *ctx, uint32_t index) {
  const hark_model *m = ctx;
  return index < m->n_instances ? m->instances[index].name : NULL;
}
