/*
 * repository.c — the model repository's lifecycle.
 *
 * The repository is a folder of model folders, each with a config.pbtxt and
 * numbered version folders. It keeps one entry per model name with the
 * versions currently loaded. Loading builds every new version beside the
 * old ones and swaps them in under the lock, so a reload never leaves a
 * gap: new requests and new streams get the new versions at once. The old
 * versions are "retired" on a thread of their own: still ready, they serve
 * what holds them (requests in flight, streams that began on them) until
 * nothing does or unload_timeout passes, then they are destroyed, which
 * refuses their later requests and waits for the running ones. Reloading a
 * model reloads the ensembles that use it, so they let go of the old one.
 * Load and unload run on short-lived threads of their own (rare, slow,
 * may block), never on the event loop or the worker pool. In POLL control
 * mode a thread rescans the repository: new folders load, removed ones
 * unload, and a folder whose signature (names, sizes and mtimes of its
 * files, config.pbtxt's content) changed reloads. Draining stops polling
 * and refuses load and unload requests. The folders themselves are read by
 * repo_fs.c, the backends come from backends.c, and the server (server.c)
 * owns the repository.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/repo_fs.h"
#include "core/repository.h"
#include "util/alloc.h"
#include "util/log.h"

/* Load / unload requests running at once (each on a thread of its own);
 * more are refused, so a client cannot make the server start threads
 * without bound. */
#define HARK_MAX_REPO_OPS 16u
/* Versions of one model retiring at once (old versions serving streams
 * that pinned them); a reload past that is refused. */
#define HARK_MAX_RETIRING 2u

typedef struct model_entry {
  char *name;
  hark_model **versions; /* loaded, ascending version */
  uint32_t n_versions;
  const char *state; /* "READY", "UNAVAILABLE", "LOADING", "UNLOADING", "" */
  char *reason;
  bool busy;     /* a load or unload is running */
  bool failed;   /* the last load failed */
  bool have_sig; /* sig is the folder as last loaded (or tried) */
  uint64_t sig;
} model_entry;

struct hark_repository {
  char *path;
  hark_model_control control;
  hark_server *server;
  hark_backends *backends;
  pthread_mutex_t lock;
  pthread_cond_t changed;
  model_entry *entries;
  uint32_t n_entries;
  uint32_t ops_running;    /* load/unload threads */
  uint32_t retire_running; /* retire threads */
  hark_model **retired;    /* retired versions not yet destroyed */
  uint32_t n_retired;
  uint64_t unload_timeout_ns;
  uint64_t poll_ns;
  pthread_t poll_thread;
  bool poll_started, poll_stop;
  pthread_cond_t poll_cv;
  atomic_bool draining;
  atomic_bool cut; /* shutting down: retirements stop waiting */
};

/* ---- entries ---------------------------------------------------------------- */

static model_entry *entry_find(hark_repository *r, const char *name) {
  for (uint32_t i = 0; i < r->n_entries; i++)
    if (strcmp(r->entries[i].name, name) == 0) return &r->entries[i];
  return NULL;
}

static int cmp_entry(const void *a, const void *b) {
  return strcmp(((const model_entry *)a)->name, ((const model_entry *)b)->name);
}

/* Entries are kept sorted by name; pointers into the array are only held
 * under the lock. */
static model_entry *entry_get(hark_repository *r, const char *name) {
  model_entry *e = entry_find(r, name);
  if (e) return e;
  model_entry *g = hark_xrealloc(r->entries, (r->n_entries + 1) * sizeof *g);
  r->entries = g;
  g[r->n_entries] =
      (model_entry){.name = hark_xstrdup(name), .state = "", .reason = hark_xstrdup("")};
  r->n_entries++;
  qsort(r->entries, r->n_entries, sizeof *r->entries, cmp_entry);
  return entry_find(r, name);
}

static void entry_set_reason(model_entry *e, const char *reason) {
  free(e->reason);
  e->reason = hark_xstrdup(reason ? reason : "");
}

/* Marks the entry busy, waiting for an earlier load/unload of it. */
static model_entry *entry_claim(hark_repository *r, const char *name) {
  pthread_mutex_lock(&r->lock);
  model_entry *e = entry_get(r, name);
  while (e->busy) {
    pthread_cond_wait(&r->changed, &r->lock);
    e = entry_find(r, name);
  }
  e->busy = true;
  pthread_mutex_unlock(&r->lock);
  return e;
}

/* ---- building versions ------------------------------------------------------ */

static hark_error *versions_create(hark_repository *r, const char *path, const char *name,
                                   const char *text, size_t len, hark_model ***out,
                                   uint32_t *n_out) {
  char file[4096];
  snprintf(file, sizeof file, "%s/config.pbtxt", path);
  hark_model_config *cfg;
  hark_error *err = hark_model_config_parse(text, len, file, name, &cfg);
  if (err) return err;
  uint32_t n;
  int64_t *versions = hark_repo_list_versions(path, &n);
  n = hark_repo_apply_policy(&cfg->version_policy, versions, n);
  if (n == 0) {
    free(versions);
    hark_model_config_free(cfg);
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "at least one version must be available under the version policy of "
                          "model '%s'",
                          name);
  }
  hark_backend *backend = NULL;
  if (cfg->backend && *cfg->backend) {
    pthread_mutex_lock(&r->lock);
    err = hark_backends_get(r->backends, path, cfg->backend, &backend);
    pthread_mutex_unlock(&r->lock);
  }
  hark_model **models = calloc(n, sizeof *models);
  uint32_t made = 0;
  for (uint32_t i = 0; !err && i < n; i++) {
    hark_model_config *vcfg = cfg;
    if (i > 0) err = hark_model_config_parse(text, len, file, name, &vcfg);
    if (!err) err = hark_model_create(r->server, backend, path, vcfg, versions[i], &models[made]);
    if (!err) made++;
    if (i == 0) cfg = NULL; /* taken by the first version */
  }
  hark_model_config_free(cfg);
  free(versions);
  if (err) {
    for (uint32_t i = 0; i < made; i++) hark_model_destroy(models[i]);
    free(models);
    return err;
  }
  *out = models;
  *n_out = made;
  return NULL;
}

/* ---- retiring old versions -------------------------------------------------- */

static void retired_remove(hark_repository *r, hark_model *m) {
  pthread_mutex_lock(&r->lock);
  for (uint32_t i = 0; i < r->n_retired; i++)
    if (r->retired[i] == m) {
      r->retired[i] = r->retired[--r->n_retired];
      break;
    }
  pthread_mutex_unlock(&r->lock);
}

/* Lets each version finish what holds it (up to the unload timeout, cut
 * short at shutdown), then destroys it. */
static void retire_finish(hark_repository *r, hark_model **old, uint32_t n, uint64_t deadline) {
  for (uint32_t i = 0; i < n; i++) {
    int users = hark_model_users(old[i]);
    if (!hark_model_wait_unused(old[i], deadline, &r->cut))
      HARK_WARN(
          "model '%s' version %lld: %d request(s) or stream(s) still used it after %.0f s "
          "(--model-unload-timeout-secs); their next requests are refused",
          old[i]->name, (long long)old[i]->version, hark_model_users(old[i]),
          (double)r->unload_timeout_ns / 1e9);
    else if (users > 0)
      HARK_INFO("model '%s' version %lld: its live requests and streams finished; unloading",
                old[i]->name, (long long)old[i]->version);
    retired_remove(r, old[i]);
    hark_model_destroy(old[i]);
  }
}

typedef struct retire_job {
  hark_repository *repo;
  hark_model **old;
  uint32_t n;
  uint64_t deadline;
} retire_job;

static void *retire_run(void *arg) {
  pthread_setname_np(pthread_self(), "hark-retire");
  retire_job *job = arg;
  hark_repository *r = job->repo;
  retire_finish(r, job->old, job->n, job->deadline);
  free(job->old);
  free(job);
  pthread_mutex_lock(&r->lock);
  r->retire_running--;
  pthread_cond_broadcast(&r->changed);
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

/* Marks versions taken out of their entry as retired and lists them (for
 * hark_server_is_idle) until they are destroyed. */
static void retire_add(hark_repository *r, hark_model **old, uint32_t n) {
  pthread_mutex_lock(&r->lock);
  hark_model **g = hark_xrealloc(r->retired, (r->n_retired + n + 1) * sizeof *g);
  r->retired = g;
  for (uint32_t i = 0; i < n; i++) {
    atomic_store(&old[i]->retired, true);
    g[r->n_retired++] = old[i];
  }
  pthread_mutex_unlock(&r->lock);
}

/* Takes `old` (an array of n retired versions): they stay ready for what
 * holds them until `deadline` and are destroyed on a thread of their own
 * (here, if no thread can be started). */
static void retire_async(hark_repository *r, hark_model **old, uint32_t n, uint64_t deadline) {
  if (!n) {
    free(old);
    return;
  }
  pthread_mutex_lock(&r->lock);
  r->retire_running++;
  pthread_mutex_unlock(&r->lock);
  retire_job *job = malloc(sizeof *job);
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  if (job) *job = (retire_job){r, old, n, deadline};
  int rc = job ? pthread_create(&t, &attr, retire_run, job) : ENOMEM;
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    free(job);
    HARK_WARN("cannot start a thread to retire model versions (%s): retiring inline", strerror(rc));
    retire_finish(r, old, n, deadline);
    free(old);
    pthread_mutex_lock(&r->lock);
    r->retire_running--;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
  }
}

/* ---- load / unload ---------------------------------------------------------- */

/* Names of the loaded ensembles with a step on `name` (they hold its old
 * version for validation): reloading them makes them let go of it. */
static char **dependents(hark_repository *r, const char *name, uint32_t *n) {
  *n = 0;
  char **out = NULL;
  pthread_mutex_lock(&r->lock);
  for (uint32_t i = 0; i < r->n_entries; i++) {
    model_entry *e = &r->entries[i];
    if (!e->n_versions || strcmp(e->name, name) == 0) continue;
    const hark_model_config *cfg = e->versions[e->n_versions - 1]->config;
    bool uses = false;
    for (uint32_t k = 0; k < cfg->n_ensemble_steps && !uses; k++)
      uses = strcmp(cfg->ensemble_steps[k].model_name, name) == 0;
    if (!uses) continue;
    char **g = realloc(out, (*n + 1) * sizeof *g);
    if (!g) break;
    out = g;
    out[(*n)++] = hark_xstrdup(e->name);
  }
  pthread_mutex_unlock(&r->lock);
  return out;
}

static hark_error *model_load(hark_repository *r, const char *name) {
  if (!hark_repo_name_is_safe(name))
    return hark_error_new(HARK_ERR_INVALID_ARG, "invalid model name '%s'", name ? name : "");
  char path[4096], file[4096];
  snprintf(path, sizeof path, "%s/%s", r->path, name);
  snprintf(file, sizeof file, "%s/config.pbtxt", path);
  model_entry *e = entry_claim(r, name);
  /* Each reload leaves the old version serving the streams that pinned it
   * until they end (or the unload timeout): reloads faster than streams
   * end would pile up versions, each with its own resources (a speech
   * model's decoder pool). Past HARK_MAX_RETIRING of them, refuse. */
  pthread_mutex_lock(&r->lock);
  uint32_t retiring = 0;
  for (uint32_t i = 0; i < r->n_retired; i++)
    retiring += strcmp(r->retired[i]->name, name) == 0 && hark_model_users(r->retired[i]) > 0;
  if (retiring >= HARK_MAX_RETIRING) {
    e = entry_find(r, name);
    e->busy = false;
    pthread_cond_broadcast(&r->changed);
    pthread_mutex_unlock(&r->lock);
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "failed to load '%s': %u earlier versions of it still serve streams "
                          "that pinned them; load it again once they have ended (at most %u "
                          "retiring versions per model)",
                          name, retiring, HARK_MAX_RETIRING);
  }
  pthread_mutex_unlock(&r->lock);
  uint64_t t0 = hark_now_ns();
  /* Taken before reading: a change made while loading shows at the next scan. */
  uint64_t sig = hark_repo_signature(path);
  hark_error *err = NULL;
  size_t len = 0;
  char *text = hark_repo_is_dir(path) ? hark_repo_read_file(file, &len) : NULL;
  if (!hark_repo_is_dir(path))
    err = hark_error_new(HARK_ERR_NOT_FOUND, "failed to load '%s': no model folder %s", name, path);
  else if (!text)
    err = hark_error_new(HARK_ERR_INVALID_ARG, "failed to load '%s': cannot read %s: %s", name,
                         file, strerror(errno));
  hark_model **fresh = NULL;
  uint32_t n_fresh = 0;
  if (!err) {
    pthread_mutex_lock(&r->lock);
    e = entry_find(r, name);
    if (!e->n_versions) e->state = "LOADING";
    pthread_mutex_unlock(&r->lock);
    err = versions_create(r, path, name, text, len, &fresh, &n_fresh);
  }
  free(text);
  double secs = (double)(hark_now_ns() - t0) / 1e9;
  for (uint32_t i = 0; i < n_fresh; i++) fresh[i]->load_secs = secs;
  pthread_mutex_lock(&r->lock);
  e = entry_find(r, name);
  hark_model **old = NULL;
  uint32_t n_old = 0;
  e->sig = sig;
  e->have_sig = true;
  if (err) {
    /* The old versions, if any, go on serving. */
    entry_set_reason(e, hark_error_message(err));
    e->state = e->n_versions ? "READY" : "UNAVAILABLE";
    e->failed = true;
  } else {
    old = e->versions;
    n_old = e->n_versions;
    e->versions = fresh;
    e->n_versions = n_fresh;
    e->state = "READY";
    e->failed = false;
    entry_set_reason(e, "");
  }
  e->busy = false;
  pthread_cond_broadcast(&r->changed);
  pthread_mutex_unlock(&r->lock);
  if (err) {
    HARK_ERROR("failed to load model '%s': %s", name, hark_error_message(err));
    return err;
  }
  for (uint32_t i = 0; i < n_fresh; i++)
    HARK_INFO("%s model '%s' version %lld (%.1f ms)", n_old ? "reloaded" : "loaded", name,
              (long long)fresh[i]->version, secs * 1e3);
  retire_add(r, old, n_old);
  retire_async(r, old, n_old, hark_now_ns() + r->unload_timeout_ns);
  if (n_old) {
    uint32_t n_dep;
    char **deps = dependents(r, name, &n_dep);
    for (uint32_t i = 0; i < n_dep; i++) {
      hark_error *derr = model_load(r, deps[i]);
      hark_error_free(derr); /* logged; the ensemble's old version serves on */
      free(deps[i]);
    }
    free(deps);
  }
  return NULL;
}

/* Takes the model out of service. With `wait`, returns once its versions
 * are destroyed (or, if something still holds them after the unload
 * timeout, once they refuse new work and are left to finish on their own);
 * without, retires them in the background. */
static hark_error *model_unload(hark_repository *r, const char *name, bool wait) {
  pthread_mutex_lock(&r->lock);
  bool known = entry_find(r, name) != NULL;
  pthread_mutex_unlock(&r->lock);
  if (!known)
    return hark_error_new(HARK_ERR_NOT_FOUND, "failed to unload '%s': unknown model", name);
  model_entry *e = entry_claim(r, name);
  pthread_mutex_lock(&r->lock);
  e = entry_find(r, name);
  hark_model **old = e->versions;
  uint32_t n_old = e->n_versions;
  e->versions = NULL;
  e->n_versions = 0;
  e->have_sig = false; /* the same folder added back loads again */
  e->state = "UNLOADING";
  pthread_mutex_unlock(&r->lock);
  retire_add(r, old, n_old);
  uint64_t deadline = hark_now_ns() + r->unload_timeout_ns;
  bool unused = true;
  for (uint32_t i = 0; wait && i < n_old; i++)
    unused &= hark_model_wait_unused(old[i], deadline, &r->cut);
  if (wait && unused) {
    for (uint32_t i = 0; i < n_old; i++) {
      retired_remove(r, old[i]);
      hark_model_destroy(old[i]);
    }
    free(old);
  } else {
    /* In the background; after a wait its deadline has passed, so what
     * still holds the versions is refused from now on. */
    retire_async(r, old, n_old, deadline);
  }
  pthread_mutex_lock(&r->lock);
  e = entry_find(r, name);
  e->state = "UNAVAILABLE";
  e->failed = false;
  entry_set_reason(e, "unloaded");
  e->busy = false;
  pthread_cond_broadcast(&r->changed);
  pthread_mutex_unlock(&r->lock);
  if (n_old) HARK_INFO("unloaded model '%s'", name);
  return NULL;
}

/* Ensembles need their steps loaded first: load in passes until a pass
 * makes no progress; what still fails keeps its last reason. */
static void load_names(hark_repository *r, char **names, uint32_t n) {
  bool *done = calloc(n ? n : 1, sizeof *done);
  for (bool progress = true; progress;) {
    progress = false;
    for (uint32_t i = 0; i < n; i++) {
      if (done[i]) continue;
      hark_error *err = model_load(r, names[i]);
      if (!err) {
        done[i] = progress = true;
      } else if (hark_error_code(err) != HARK_ERR_NOT_FOUND &&
                 hark_error_code(err) != HARK_ERR_UNAVAILABLE) {
        done[i] = true; /* a real failure: retrying will not help */
      }
      hark_error_free(err);
    }
  }
  free(done);
}

/* ---- polling ---------------------------------------------------------------- */

static bool name_in(char **names, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(names[i], name) == 0) return true;
  return false;
}

/* One scan: loads new and changed model folders, unloads removed ones. A
 * folder whose last load failed is tried again only once it changes. */
static void poll_once(hark_repository *r) {
  uint32_t n;
  char **names = hark_repo_scan(r->path, &n);
  char **load = calloc(n ? n : 1, sizeof *load);
  uint32_t n_load = 0;
  for (uint32_t i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", r->path, names[i]);
    uint64_t sig = hark_repo_signature(path);
    pthread_mutex_lock(&r->lock);
    model_entry *e = entry_find(r, names[i]);
    bool changed = !e || !e->have_sig || e->sig != sig;
    pthread_mutex_unlock(&r->lock);
    if (changed && load) load[n_load++] = names[i];
  }
  char **gone = NULL;
  uint32_t n_gone = 0;
  pthread_mutex_lock(&r->lock);
  for (uint32_t i = 0; i < r->n_entries; i++) {
    model_entry *e = &r->entries[i];
    if ((!e->n_versions && !e->have_sig) || name_in(names, n, e->name)) continue;
    char **g = realloc(gone, (n_gone + 1) * sizeof *g);
    if (!g) break;
    gone = g;
    gone[n_gone++] = hark_xstrdup(e->name);
  }
  pthread_mutex_unlock(&r->lock);
  for (uint32_t i = 0; i < n_gone; i++) {
    HARK_INFO("model '%s' was removed from the repository: unloading", gone[i]);
    hark_error_free(model_unload(r, gone[i], false));
    free(gone[i]);
  }
  free(gone);
  for (uint32_t i = 0; i < n_load; i++)
    HARK_INFO("model '%s' is new or changed in the repository: loading", load[i]);
  if (n_load) load_names(r, load, n_load);
  free(load);
  for (uint32_t i = 0; i < n; i++) free(names[i]);
  free(names);
}

static void *poll_run(void *arg) {
  pthread_setname_np(pthread_self(), "hark-repo-poll");
  hark_repository *r = arg;
  pthread_mutex_lock(&r->lock);
  while (!r->poll_stop) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t ns = (uint64_t)ts.tv_nsec + r->poll_ns;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    int rc = 0;
    while (!r->poll_stop && rc != ETIMEDOUT)
      rc = pthread_cond_timedwait(&r->poll_cv, &r->lock, &ts);
    if (r->poll_stop) break;
    pthread_mutex_unlock(&r->lock);
    if (!atomic_load(&r->draining)) poll_once(r);
    pthread_mutex_lock(&r->lock);
  }
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

static void poll_stop(hark_repository *r) {
  if (!r->poll_started) return;
  pthread_mutex_lock(&r->lock);
  r->poll_stop = true;
  pthread_cond_broadcast(&r->poll_cv);
  pthread_mutex_unlock(&r->lock);
  pthread_join(r->poll_thread, NULL);
  r->poll_started = false;
}

/* ---- the repository ---------------------------------------------------------- */

hark_error *hark_repository_new(const hark_repository_config *cfg, hark_repository **out) {
  *out = NULL;
  if (!cfg->path || !hark_repo_is_dir(cfg->path))
    return hark_error_new(HARK_ERR_INVALID_ARG, "model repository '%s' is not a folder",
                          cfg->path ? cfg->path : "(none)");
  hark_repository *r = hark_xcalloc(1, sizeof *r);
  r->path = hark_xstrdup(cfg->path);
  r->control = cfg->control;
  r->server = cfg->server;
  r->backends = cfg->backends;
  r->unload_timeout_ns = cfg->unload_timeout_ns;
  r->poll_ns = cfg->poll_ns;
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->changed, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->poll_cv, &ca);
  pthread_condattr_destroy(&ca);
  *out = r;
  return NULL;
}

hark_error *hark_repository_start(hark_repository *r, const char *const *load_models,
                                  uint32_t n_load_models) {
  uint32_t n;
  char **names = hark_repo_scan(r->path, &n);
  if (r->control != HARK_MODEL_CONTROL_EXPLICIT) {
    load_names(r, names, n);
  } else {
    bool all = false;
    for (uint32_t i = 0; i < n_load_models; i++) all |= strcmp(load_models[i], "*") == 0;
    if (all) {
      load_names(r, names, n);
    } else {
      load_names(r, (char **)load_models, n_load_models);
    }
  }
  for (uint32_t i = 0; i < n; i++) free(names[i]);
  free(names);
  if (r->control == HARK_MODEL_CONTROL_POLL) {
    int rc = pthread_create(&r->poll_thread, NULL, poll_run, r);
    if (rc != 0)
      return hark_error_new(HARK_ERR_INTERNAL, "cannot start the repository poll thread: %s",
                            strerror(rc));
    r->poll_started = true;
    HARK_INFO("polling the model repository every %.3g s", (double)r->poll_ns / 1e9);
  }
  return NULL;
}

void hark_repository_free(hark_repository *r) {
  if (!r) return;
  poll_stop(r);
  atomic_store(&r->cut, true); /* retired versions stop waiting for their users */
  pthread_mutex_lock(&r->lock);
  while (r->ops_running) pthread_cond_wait(&r->changed, &r->lock);
  pthread_mutex_unlock(&r->lock);
  /* Ensembles first: they send requests to their steps. */
  for (int pass = 0; pass < 2; pass++)
    for (uint32_t i = 0; i < r->n_entries; i++) {
      model_entry *e = &r->entries[i];
      for (uint32_t v = e->n_versions; v-- > 0;) {
        bool ensemble = e->versions[v]->config->n_ensemble_steps > 0;
        if (ensemble == (pass == 0)) {
          hark_model_destroy(e->versions[v]);
          e->versions[v] = e->versions[--e->n_versions];
        }
      }
    }
  /* Retired versions may have waited on the ensembles just destroyed. */
  pthread_mutex_lock(&r->lock);
  while (r->retire_running) pthread_cond_wait(&r->changed, &r->lock);
  pthread_mutex_unlock(&r->lock);
  free(r->retired);
  for (uint32_t i = 0; i < r->n_entries; i++) {
    free(r->entries[i].name);
    free(r->entries[i].reason);
    free(r->entries[i].versions);
  }
  free(r->entries);
  pthread_mutex_destroy(&r->lock);
  pthread_cond_destroy(&r->changed);
  pthread_cond_destroy(&r->poll_cv);
  free(r->path);
  free(r);
}

void hark_repository_drain(hark_repository *r) { atomic_store(&r->draining, true); }

uint64_t hark_repository_unload_timeout_ns(const hark_repository *r) {
  return r->unload_timeout_ns;
}

int64_t hark_repository_pending(hark_repository *r) {
  pthread_mutex_lock(&r->lock);
  int64_t pending = 0;
  for (uint32_t i = 0; i < r->n_entries; i++)
    for (uint32_t v = 0; v < r->entries[i].n_versions; v++)
      pending += atomic_load(&r->entries[i].versions[v]->stats.pending);
  for (uint32_t i = 0; i < r->n_retired; i++) pending += atomic_load(&r->retired[i]->stats.pending);
  pthread_mutex_unlock(&r->lock);
  return pending;
}

bool hark_repository_all_loaded(hark_repository *r) {
  pthread_mutex_lock(&r->lock);
  bool ok = true;
  for (uint32_t i = 0; i < r->n_entries && ok; i++) ok = !r->entries[i].failed;
  pthread_mutex_unlock(&r->lock);
  return ok;
}

hark_error *hark_repository_acquire(hark_repository *r, const char *name, int64_t version,
                                    hark_model **out) {
  pthread_mutex_lock(&r->lock);
  model_entry *e = name ? entry_find(r, name) : NULL;
  hark_error *err = NULL;
  hark_model *found = NULL;
  if (!e || (!e->n_versions && strcmp(e->state, "UNAVAILABLE") != 0 && !e->busy)) {
    err = hark_error_new(HARK_ERR_INVALID_ARG, "Request for unknown model: '%s' is not found",
                         name ? name : "");
  } else if (!e->n_versions) {
    err = hark_error_new(HARK_ERR_UNAVAILABLE,
                         "Request for unknown model: '%s' has no available "
                         "versions%s%s",
                         name, *e->reason ? ": " : "", e->reason);
  } else if (version < 0) {
    found = e->versions[e->n_versions - 1];
  } else {
    for (uint32_t i = 0; i < e->n_versions && !found; i++)
      if (e->versions[i]->version == version) found = e->versions[i];
    if (!found)
      err = hark_error_new(HARK_ERR_INVALID_ARG,
                           "Request for unknown model: '%s' version %lld is not found", name,
                           (long long)version);
  }
  if (found) hark_model_acquire(found);
  pthread_mutex_unlock(&r->lock);
  *out = found;
  return err;
}

void hark_repository_foreach(hark_repository *r, void (*fn)(hark_model *, void *), void *userp) {
  pthread_mutex_lock(&r->lock);
  uint32_t n = 0;
  for (uint32_t i = 0; i < r->n_entries; i++) n += r->entries[i].n_versions;
  hark_model **all = calloc(n ? n : 1, sizeof *all);
  n = 0;
  for (uint32_t i = 0; i < r->n_entries; i++)
    for (uint32_t v = 0; v < r->entries[i].n_versions; v++) {
      all[n] = r->entries[i].versions[v];
      hark_model_acquire(all[n++]);
    }
  pthread_mutex_unlock(&r->lock);
  for (uint32_t i = 0; i < n; i++) {
    fn(all[i], userp);
    hark_model_release(all[i]);
  }
  free(all);
}

/* ---- the repository API ---------------------------------------------------- */

hark_error *hark_repository_index(hark_repository *r, bool ready_only, hark_index_entry **out,
                                  size_t *n_out) {
  uint32_t n_names;
  char **names = hark_repo_scan(r->path, &n_names);
  pthread_mutex_lock(&r->lock);
  for (uint32_t i = 0; i < n_names; i++) (void)entry_get(r, names[i]);
  size_t cap = 0, n = 0;
  for (uint32_t i = 0; i < r->n_entries; i++) cap += r->entries[i].n_versions + 1;
  hark_index_entry *list = calloc(cap ? cap : 1, sizeof *list);
  for (uint32_t i = 0; i < r->n_entries; i++) {
    model_entry *e = &r->entries[i];
    /* A failed reload leaves the old versions READY: say why it failed. */
    for (uint32_t v = 0; v < e->n_versions; v++)
      list[n++] = (hark_index_entry){hark_xstrdup(e->name), e->versions[v]->version, "READY",
                                     hark_xstrdup(e->failed ? e->reason : "")};
    if (!e->n_versions && !ready_only)
      list[n++] = (hark_index_entry){hark_xstrdup(e->name), -1, e->state, hark_xstrdup(e->reason)};
  }
  pthread_mutex_unlock(&r->lock);
  for (uint32_t i = 0; i < n_names; i++) free(names[i]);
  free(names);
  *out = list;
  *n_out = n;
  return NULL;
}

void hark_index_free(hark_index_entry *entries, size_t n) {
  for (size_t i = 0; i < n; i++) {
    free(entries[i].name);
    free(entries[i].reason);
  }
  free(entries);
}

typedef struct repo_op {
  hark_repository *repo;
  char *name;
  bool load;
  hark_server_done_fn done;
  void *userp;
} repo_op;

static void *repo_op_run(void *arg) {
  pthread_setname_np(pthread_self(), "hark-repo-op");
  repo_op *op = arg;
  hark_error *err =
      op->load ? model_load(op->repo, op->name) : model_unload(op->repo, op->name, true);
  op->done(err, op->userp);
  hark_repository *r = op->repo;
  free(op->name);
  free(op);
  pthread_mutex_lock(&r->lock);
  r->ops_running--;
  pthread_cond_broadcast(&r->changed);
  pthread_mutex_unlock(&r->lock);
  return NULL;
}

static hark_error *repo_op_start(hark_repository *r, const char *name, bool load,
                                 hark_server_done_fn done, void *userp) {
  if (r->control == HARK_MODEL_CONTROL_NONE)
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "explicit model load / unload is not allowed in model control mode "
                          "'none'; start harkd with --model-control-mode=explicit");
  if (r->control == HARK_MODEL_CONTROL_POLL)
    return hark_error_new(HARK_ERR_UNSUPPORTED,
                          "explicit model load / unload is not allowed if polling is enabled");
  if (!hark_repo_name_is_safe(name))
    return hark_error_new(HARK_ERR_INVALID_ARG, "invalid model name '%s'", name ? name : "");
  if (atomic_load(&r->cut) || atomic_load(&r->draining))
    return hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down");
  pthread_mutex_lock(&r->lock);
  if (r->ops_running >= HARK_MAX_REPO_OPS) {
    uint32_t n = r->ops_running;
    pthread_mutex_unlock(&r->lock);
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "%u model load / unload requests are in progress (at most %u); try "
                          "again when they finish",
                          n, HARK_MAX_REPO_OPS);
  }
  r->ops_running++;
  pthread_mutex_unlock(&r->lock);
  repo_op *op = hark_xmalloc(sizeof *op);
  *op = (repo_op){r, hark_xstrdup(name), load, done, userp};
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &attr, repo_op_run, op);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    pthread_mutex_lock(&r->lock);
    r->ops_running--;
    pthread_mutex_unlock(&r->lock);
    free(op->name);
    free(op);
    return hark_error_new(HARK_ERR_INTERNAL, "cannot start a thread: %s", strerror(rc));
  }
  return NULL;
}

hark_error *hark_repository_load(hark_repository *r, const char *name, hark_server_done_fn done,
                                 void *userp) {
  return repo_op_start(r, name, true, done, userp);
}

hark_error *hark_repository_unload(hark_repository *r, const char *name, hark_server_done_fn done,
                                   void *userp) {
  return repo_op_start(r, name, false, done, userp);
}
