/*
 * backends.c — loading backend shared objects, once per server.
 *
 * A backend is found by the name in a model's config (backend:
 * "pocketsphinx" → libhark_pocketsphinx.so), opened with
 * dlopen(RTLD_NOW | RTLD_LOCAL), and accepted only if it exports the entry
 * point, was built for this server's backend API major version (and no
 * newer minor), and fills every required entry. backend_init runs once
 * when it is loaded, backend_fini when the server frees the registry,
 * after every model using it is gone. The repository (repository.c) asks
 * for a backend while it builds a model's versions, under its lock.
 * The backend API's log calls live here too: the core's side of that API,
 * so that util (the ground floor) knows nothing of backends.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/backends.h"
#include "core/core.h"
#include "core/repo_fs.h"
#include "util/alloc.h"
#include "util/log.h"

struct hark_backends {
  char *dir;
  hark_backend **list;
  uint32_t n;
};

hark_backends *hark_backends_new(const char *dir) {
  hark_backends *b = hark_xcalloc(1, sizeof *b);
  b->dir = hark_xstrdup(dir);
  return b;
}

static hark_error *backend_open(const char *name, const char *path, hark_backend **out) {
  void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!dl)
    return hark_error_new(HARK_ERR_INVALID_ARG, "cannot load backend '%s': %s", name, dlerror());
  hark_backend_get_api_fn get = (hark_backend_get_api_fn)dlsym(dl, HARK_BACKEND_ENTRY);
  const hark_backend_api *api = get ? get() : NULL;
  hark_error *err = NULL;
  if (!api) {
    err = hark_error_new(HARK_ERR_INVALID_ARG, "backend '%s' (%s) does not export %s", name, path,
                         HARK_BACKEND_ENTRY);
  } else if ((api->api_version >> 16) != HARK_BACKEND_API_MAJOR ||
             (api->api_version & 0xffff) > HARK_BACKEND_API_MINOR) {
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "backend '%s' was built for backend API %u.%u; this server has %u.%u",
                         name, api->api_version >> 16, api->api_version & 0xffff,
                         HARK_BACKEND_API_MAJOR, HARK_BACKEND_API_MINOR);
  } else if (!api->model_init || !api->model_fini || !api->instance_init || !api->instance_fini ||
             !api->instance_execute) {
    err = hark_error_new(HARK_ERR_INVALID_ARG, "backend '%s' leaves a required entry point NULL",
                         name);
  }
  if (err) {
    dlclose(dl);
    return err;
  }
  hark_backend *b = calloc(1, sizeof *b);
  b->name = hark_xstrdup(name);
  b->path = hark_xstrdup(path);
  b->dl = dl;
  b->api = api;
  if ((api->api_version & 0xffff) >= 1) b->sequence_fini = api->sequence_fini;
  if (api->backend_init && (err = api->backend_init(b))) {
    free(b->name);
    free(b->path);
    free(b);
    dlclose(dl);
    return err;
  }
  HARK_INFO("loaded backend '%s' from %s", name, path);
  *out = b;
  return NULL;
}

hark_error *hark_backends_get(hark_backends *reg, const char *model_path, const char *name,
                              hark_backend **out) {
  for (uint32_t i = 0; i < reg->n; i++)
    if (strcmp(reg->list[i]->name, name) == 0) {
      *out = reg->list[i];
      return NULL;
    }
  if (!hark_repo_name_is_safe(name))
    return hark_error_new(HARK_ERR_INVALID_ARG, "invalid backend name '%s'", name);
  char cand[3][4096];
  snprintf(cand[0], sizeof cand[0], "%s/libhark_%s.so", model_path, name);
  snprintf(cand[1], sizeof cand[1], "%s/libhark_%s.so", reg->dir, name);
  snprintf(cand[2], sizeof cand[2], "%s/%s/libhark_%s.so", reg->dir, name, name);
  for (int i = 0; i < 3; i++) {
    if (access(cand[i], R_OK) != 0) continue;
    hark_backend *b = NULL;
    hark_error *err = backend_open(name, cand[i], &b);
    if (err) return err;
    hark_backend **g = hark_xrealloc(reg->list, (reg->n + 1) * sizeof *g);
    reg->list = g;
    g[reg->n++] = b;
    *out = b;
    return NULL;
  }
  return hark_error_new(HARK_ERR_NOT_FOUND,
                        "unable to find backend '%s': no libhark_%s.so in %s or %s", name, name,
                        model_path, reg->dir);
}

static void backend_close(hark_backend *b) {
  if (b->api->backend_fini) b->api->backend_fini(b);
    /* Sanitizer builds keep the object mapped, so a leak report can still
   * name the function that allocated (an unloaded module has no symbols). */
#if !defined(__SANITIZE_ADDRESS__)
  dlclose(b->dl);
#endif
  free(b->name);
  free(b->path);
  free(b);
}

void hark_backends_free(hark_backends *b) {
  if (!b) return;
  for (uint32_t i = 0; i < b->n; i++) backend_close(b->list[i]);
  free(b->list);
  free(b->dir);
  free(b);
}

/* ---- the backend API's logging (hark/backend.h, since 1.2) ------------------ */

/* The backend API's levels are the server's, by value. */
_Static_assert((int)HARK_BACKEND_LOG_ERROR == (int)HARK_LOG_ERROR &&
                   (int)HARK_BACKEND_LOG_WARN == (int)HARK_LOG_WARN &&
                   (int)HARK_BACKEND_LOG_INFO == (int)HARK_LOG_INFO &&
                   (int)HARK_BACKEND_LOG_VERBOSE == (int)HARK_LOG_VERBOSE,
               "hark_backend_log_level mirrors hark_log_level");

bool hark_backend_log_enabled(hark_backend_log_level level) {
  return hark_log_enabled((hark_log_level)level) != 0;
}

void hark_backend_log(hark_backend_log_level level, const char *file, int lineno, const char *fmt,
                      ...) {
  va_list ap;
  va_start(ap, fmt);
  hark_log_atv((hark_log_level)level, file, lineno, fmt, ap);
  va_end(ap);
}
