/*
 * route.c — KServe v2 REST paths to routes (route.h). A path is copied
 * into a stack buffer and split at '/' into at most MAX_SEGMENTS segments;
 * the first decides the family (health, models, repository, shared
 * memory), the rest its action. Only a route's names are allocated.
 */
#include "frontend/kserve/route.h"

#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

#define MAX_PATH_LEN 2048
#define MAX_SEGMENTS 8

/* ---- model versions ---------------------------------------------------------- */

hark_error *hark_kserve_parse_version(const char *s, bool empty_ok, int64_t *out) {
  *out = -1;
  if (!s || !*s)
    return empty_ok
               ? NULL
               : hark_error_new(HARK_ERR_INVALID_ARG, "invalid model version '%s'", s ? s : "");
  int64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
      return hark_error_new(HARK_ERR_INVALID_ARG, "invalid model version '%s'", s);
    v = v * 10 + (*p - '0');
  }
  *out = v;
  return NULL;
}

/* ---- routes ------------------------------------------------------------------- */

/* The /v2/models/{m}[/versions/{v}][/action] family. */
static hark_error *route_model(char **seg, int n, hark_kserve_route *rt) {
  int i = 2;
  if (i < n && strcmp(seg[i], "versions") == 0) {
    if (i + 1 >= n) return NULL;
    hark_error *err = hark_kserve_parse_version(seg[i + 1], false, &rt->version);
    if (err) return err;
    i += 2;
  }
  static const struct {
    const char *name;
    hark_kserve_route_kind kind;
  } actions[] = {{"ready", HARK_ROUTE_MODEL_READY},
                 {"config", HARK_ROUTE_MODEL_CONFIG},
                 {"stats", HARK_ROUTE_MODEL_STATS},
                 {"infer", HARK_ROUTE_INFER},
                 {"stream", HARK_ROUTE_STREAM}};
  if (i == n) rt->kind = HARK_ROUTE_MODEL_META;
  if (i + 2 == n && strcmp(seg[i], "trace") == 0 && strcmp(seg[i + 1], "setting") == 0)
    rt->kind = HARK_ROUTE_TRACE;
  for (size_t a = 0; i + 1 == n && a < sizeof actions / sizeof *actions; a++)
    if (strcmp(seg[i], actions[a].name) == 0) rt->kind = actions[a].kind;
  if (rt->kind != HARK_ROUTE_NONE) rt->model = hark_xstrdup(seg[1]);
  return NULL;
}

/* The /v2/systemsharedmemory[/region/{r}]/{action} family, and any
 * /v2/cudasharedmemory path (not supported). */
static void route_shm(char **seg, int n, hark_kserve_route *rt) {
  if (strcmp(seg[0], "cudasharedmemory") == 0) {
    rt->kind = HARK_ROUTE_CUDA_SHM;
    return;
  }
  const char *action = seg[n - 1];
  if (n == 2 && strcmp(action, "status") == 0) rt->kind = HARK_ROUTE_SHM_STATUS;
  if (n == 2 && strcmp(action, "unregister") == 0) rt->kind = HARK_ROUTE_SHM_UNREGISTER;
  if (n != 4 || strcmp(seg[1], "region") != 0) return;
  if (strcmp(action, "status") == 0) rt->kind = HARK_ROUTE_SHM_STATUS;
  if (strcmp(action, "register") == 0) rt->kind = HARK_ROUTE_SHM_REGISTER;
  if (strcmp(action, "unregister") == 0) rt->kind = HARK_ROUTE_SHM_UNREGISTER;
  if (rt->kind != HARK_ROUTE_NONE) rt->region = hark_xstrdup(seg[2]);
}

hark_error *hark_kserve_route_parse(const char *path, bool metrics, hark_kserve_route *rt) {
  *rt = (hark_kserve_route){.kind = HARK_ROUTE_NONE, .version = -1};
  char buf[MAX_PATH_LEN], *seg[MAX_SEGMENTS + 1];
  size_t len = strlen(path);
  if (len >= sizeof buf || path[0] != '/') return NULL;
  memcpy(buf, path + 1, len);
  int n = 0;
  for (char *s = buf, *slash; n <= MAX_SEGMENTS; s = slash + 1) {
    seg[n++] = s;
    if (!(slash = strchr(s, '/'))) break;
    *slash = '\0';
  }
  if (n > MAX_SEGMENTS) return NULL;
  for (int i = 0; i < n; i++)
    if (!*seg[i]) return NULL; /* empty segment: "//" or a trailing "/" */
  if (metrics) {
    if (n == 1 && strcmp(seg[0], "metrics") == 0) rt->kind = HARK_ROUTE_METRICS;
    return NULL;
  }
  if (strcmp(seg[0], "v2") != 0) return NULL;
  if (n == 1)
    rt->kind = HARK_ROUTE_SERVER_META;
  else if (n == 3 && strcmp(seg[1], "health") == 0 && strcmp(seg[2], "live") == 0)
    rt->kind = HARK_ROUTE_LIVE;
  else if (n == 3 && strcmp(seg[1], "health") == 0 && strcmp(seg[2], "ready") == 0)
    rt->kind = HARK_ROUTE_READY;
  else if (n == 3 && strcmp(seg[1], "models") == 0 && strcmp(seg[2], "stats") == 0)
    rt->kind = HARK_ROUTE_ALL_STATS;
  else if (n >= 3 && strcmp(seg[1], "models") == 0)
    return route_model(seg + 1, n - 1, rt);
  else if (n == 3 && strcmp(seg[1], "repository") == 0 && strcmp(seg[2], "index") == 0)
    rt->kind = HARK_ROUTE_REPO_INDEX;
  else if (n == 2 && strcmp(seg[1], "logging") == 0)
    rt->kind = HARK_ROUTE_LOGGING;
  else if (n == 3 && strcmp(seg[1], "trace") == 0 && strcmp(seg[2], "setting") == 0)
    rt->kind = HARK_ROUTE_TRACE;
  else if (n >= 2 &&
           (strcmp(seg[1], "systemsharedmemory") == 0 || strcmp(seg[1], "cudasharedmemory") == 0))
    route_shm(seg + 1, n - 1, rt);
  else if (n == 5 && strcmp(seg[1], "repository") == 0 && strcmp(seg[2], "models") == 0 &&
           (strcmp(seg[4], "load") == 0 || strcmp(seg[4], "unload") == 0)) {
    rt->kind = seg[4][0] == 'l' ? HARK_ROUTE_REPO_LOAD : HARK_ROUTE_REPO_UNLOAD;
    rt->model = hark_xstrdup(seg[3]);
  }
  return NULL;
}

void hark_kserve_route_clear(hark_kserve_route *rt) {
  free(rt->model);
  free(rt->region);
  rt->model = NULL;
  rt->region = NULL;
}

bool hark_kserve_route_is_post(hark_kserve_route_kind k) {
  return k == HARK_ROUTE_INFER || k == HARK_ROUTE_REPO_INDEX || k == HARK_ROUTE_REPO_LOAD ||
         k == HARK_ROUTE_REPO_UNLOAD || k == HARK_ROUTE_SHM_REGISTER ||
         k == HARK_ROUTE_SHM_UNREGISTER;
}

bool hark_kserve_route_is_settings(hark_kserve_route_kind k) {
  return k == HARK_ROUTE_LOGGING || k == HARK_ROUTE_TRACE;
}
