/*
 * route.h — the KServe v2 REST paths (Triton's), parsed: which document or
 * action a path names, and the model, version or shared-memory region in
 * it. Its own file so that a service that only needs to recognise a path
 * (the Vosk WebSocket on /v2/models/{m}/stream) depends on it alone, not
 * on the REST service (kserve_http.c) or the infer codec.
 */
#ifndef HARK_FRONTEND_KSERVE_ROUTE_H
#define HARK_FRONTEND_KSERVE_ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "hark/types.h"

typedef enum hark_kserve_route_kind {
  HARK_ROUTE_NONE = 0,
  HARK_ROUTE_SERVER_META,
  HARK_ROUTE_LIVE,
  HARK_ROUTE_READY,
  HARK_ROUTE_MODEL_META,
  HARK_ROUTE_MODEL_READY,
  HARK_ROUTE_MODEL_CONFIG,
  HARK_ROUTE_MODEL_STATS,
  HARK_ROUTE_ALL_STATS,
  HARK_ROUTE_INFER,
  HARK_ROUTE_REPO_INDEX,
  HARK_ROUTE_REPO_LOAD,
  HARK_ROUTE_REPO_UNLOAD,
  HARK_ROUTE_METRICS,
  HARK_ROUTE_STREAM,         /* /v2/models/{m}[/versions/{v}]/stream: a WebSocket */
  HARK_ROUTE_SHM_STATUS,     /* /v2/systemsharedmemory[/region/{r}]/status */
  HARK_ROUTE_SHM_REGISTER,   /* /v2/systemsharedmemory/region/{r}/register */
  HARK_ROUTE_SHM_UNREGISTER, /* /v2/systemsharedmemory[/region/{r}]/unregister */
  HARK_ROUTE_CUDA_SHM,       /* /v2/cudasharedmemory/...: not supported */
  HARK_ROUTE_LOGGING,        /* /v2/logging: GET reads, POST changes */
  HARK_ROUTE_TRACE,          /* /v2[/models/{m}]/trace/setting: GET reads, POST changes */
} hark_kserve_route_kind;

typedef struct hark_kserve_route {
  hark_kserve_route_kind kind;
  char *model;     /* owned; NULL when the route names none */
  char *region;    /* owned: the shared-memory region named; or NULL */
  int64_t version; /* -1 when the URL gives none */
} hark_kserve_route;

/* Finds the route for `path` (on the metrics port or the HTTP port);
 * rt->kind stays NONE when there is none. INVALID_ARG for a malformed
 * model version. Free rt->model with hark_kserve_route_clear. */
hark_error *hark_kserve_route_parse(const char *path, bool metrics, hark_kserve_route *rt);
void hark_kserve_route_clear(hark_kserve_route *rt);
/* A model version as the protocol writes it: digits, or "" for the
 * newest (-1) where `empty_ok`. INVALID_ARG "invalid model version"
 * otherwise. */
hark_error *hark_kserve_parse_version(const char *s, bool empty_ok, int64_t *out);
/* The routes that are POSTs (the rest are GETs, bar the settings). */
bool hark_kserve_route_is_post(hark_kserve_route_kind kind);
/* The settings routes, which take both: GET reads, POST changes. */
bool hark_kserve_route_is_settings(hark_kserve_route_kind kind);

#endif
