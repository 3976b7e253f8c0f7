/*
 * http_routes.c — the KServe v2 REST routes of the HTTP front end: maps
 * URLs to handlers and serves them. GETs (health, metadata, config,
 * statistics, metrics) answer at once from the engine's public API. An
 * infer request is parsed by the KServe codec into a hark_request that
 * owns the body, and queued with hark_server_infer(); its response is
 * serialized on the worker thread that delivers it, straight into the
 * reply buffer, and handed to the loop (http.c). Model load and unload
 * finish on a server thread the same way, to the loop that owns the
 * connection.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/http_impl.h"

#define MAX_PATH_LEN 2048
#define MAX_SEGMENTS 8

/* ---- inference --------------------------------------------------------------- */

/* Worker thread. Serializes the first response (a decoupled model's later
 * ones are dropped: KServe HTTP has one response per request); an error
 * replaces it. The request, and so `parsed`, lives until this returns. */
static void on_infer_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  http_call *call = userp;
  if (err) {
    hark_http_call_set_error(call, err);
  } else if (resp && !call->status) {
    size_t json_len;
    bool binary;
    hark_error *werr = NULL;
    if (!hark_http_body_begin(&call->out))
      werr = hark_error_new(HARK_ERR_INTERNAL, "out of memory");
    else
      werr = hark_kserve_write_response(&call->out, resp, call->model_name, call->model_version,
                                        &call->parsed, &json_len, &binary);
    if (werr) {
      hark_http_call_set_error(call, werr);
      hark_error_free(werr);
    } else {
      call->status = 200;
      call->ctype = binary ? "application/octet-stream" : HARK_HTTP_JSON;
      call->infer_header_len = binary ? json_len : 0;
    }
  }
  hark_response_free(resp);
  hark_error_free(err);
  if (!(flags & HARK_RESPONSE_FINAL)) return;
  if (!call->status) {
    hark_error *none = hark_error_new(HARK_ERR_INTERNAL, "the model sent no response");
    hark_http_call_set_error(call, none);
    hark_error_free(none);
  }
  hark_http_call_push(call);
}

/* Parses the body and builds the request; on success the request owns the
 * body and the parse arena. */
static hark_error *build_infer(http_conn *c, hark_model *model, http_call *call,
                               hark_request **out) {
  const hark_model_config *cfg = hark_model_get_config(model);
  if (cfg->decoupled)
    return hark_error_new(HARK_ERR_UNSUPPORTED,
                          "HTTP end point doesn't support models with decoupled transaction "
                          "policy");
  hark_error *err =
      hark_kserve_parse(c->body ? c->body : "", c->body_len, c->header_len, &call->parsed);
  if (err) return err;
  hark_request *req = hark_request_new(model);
  err = hark_kserve_to_request(&call->parsed, req);
  if (err) {
    hark_request_free(req);
    hark_kserve_request_clear(&call->parsed);
    return err;
  }
  if (c->body_mem) hark_request_attach(req, c->body_mem, free);
  c->body_mem = c->body = NULL;
  hark_request_set_callback(req, on_infer_response, call);
  *out = req;
  return NULL;
}

static void start_infer(struct lws *wsi, http_conn *c) {
  http_loop *loop = hark_http_loop_of(wsi);
  hark_http *http = loop->http;
  hark_model *model;
  hark_error *err = hark_server_model_acquire(http->server, c->rt.model, c->rt.version, &model);
  if (err) {
    hark_http_reply_error(wsi, c, err);
    return;
  }
  http_call *call = hark_http_call_new(loop, wsi);
  if (!call) {
    hark_model_release(model);
    hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_INTERNAL, "out of memory"));
    return;
  }
  call->model_name = c->rt.model;
  c->rt.model = NULL;
  call->model_version = hark_model_version(model);
  hark_request *req = NULL;
  err = build_infer(c, model, call, &req);
  hark_model_release(model); /* the request holds its own reference */
  if (err) {
    hark_http_call_free(call);
    hark_http_reply_error(wsi, c, err);
    return;
  }
  hark_http_call_started(loop, c, call);
  err = hark_server_infer(http->server, req);
  if (err) {
    hark_request_free(req);
    hark_http_call_refused(loop, c, call);
    hark_http_reply_error(wsi, c, err);
  }
}

/* ---- repository -------------------------------------------------------------- */

/* Server thread: a load or unload finished. */
static void on_repo_done(hark_error *err, void *userp) {
  http_call *call = userp;
  if (err) {
    hark_http_call_set_error(call, err);
    hark_error_free(err);
  } else if (hark_http_body_begin(&call->out) && hark_kserve_buf_puts(&call->out, "{}")) {
    call->status = 200;
    call->ctype = HARK_HTTP_JSON;
  } else {
    call->status = 500;
    call->out.len = call->out.data ? HARK_HTTP_HEADROOM : 0;
  }
  hark_http_call_push(call);
}

/* A body, if any, must be a JSON object; returns it parsed (or NULL). */
static hark_error *parse_json_object(http_conn *c, cJSON **out) {
  *out = NULL;
  if (!c->body_len) return NULL;
  cJSON *doc = cJSON_ParseWithLength(c->body, c->body_len);
  if (!doc || !cJSON_IsObject(doc)) {
    cJSON_Delete(doc);
    return hark_error_new(HARK_ERR_INVALID_ARG, "request body is not a JSON object");
  }
  *out = doc;
  return NULL;
}

static void repo_index(struct lws *wsi, http_conn *c) {
  hark_http *http = hark_http_loop_of(wsi)->http;
  cJSON *doc;
  hark_error *err = parse_json_object(c, &doc);
  if (err) {
    hark_http_reply_error(wsi, c, err);
    return;
  }
  const cJSON *ready = cJSON_GetObjectItemCaseSensitive(doc, "ready");
  bool ready_only = cJSON_IsTrue(ready);
  bool bad = ready && !cJSON_IsBool(ready);
  cJSON_Delete(doc);
  if (bad) {
    hark_http_reply_error(wsi, c,
                          hark_error_new(HARK_ERR_INVALID_ARG, "'ready' must be a boolean"));
    return;
  }
  hark_kserve_buf b = {0};
  err = hark_http_body_begin(&b) ? hark_kserve_write_index(&b, http->server, ready_only)
                                 : hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  hark_http_reply_doc(wsi, c, &b, err);
}

static void repo_load_unload(struct lws *wsi, http_conn *c, bool load) {
  http_loop *loop = hark_http_loop_of(wsi);
  hark_http *http = loop->http;
  cJSON *doc;
  hark_error *err = parse_json_object(c, &doc);
  if (err) {
    hark_http_reply_error(wsi, c, err);
    return;
  }
  /* Triton's config and file overrides would silently do nothing here. */
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(doc, "parameters");
  bool overrides = params && cJSON_GetArraySize(params) > 0;
  cJSON_Delete(doc);
  if (overrides) {
    hark_http_reply_error(wsi, c,
                          hark_error_new(HARK_ERR_UNSUPPORTED,
                                         "load parameters (config or file overrides) are not "
                                         "supported"));
    return;
  }
  http_call *call = hark_http_call_new(loop, wsi);
  if (!call) {
    hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_INTERNAL, "out of memory"));
    return;
  }
  hark_http_call_started(loop, c, call);
  err = load ? hark_server_model_load(http->server, c->rt.model, on_repo_done, call)
             : hark_server_model_unload(http->server, c->rt.model, on_repo_done, call);
  if (err) {
    hark_http_call_refused(loop, c, call);
    hark_http_reply_error(wsi, c, err);
  }
}

/* ---- routes ------------------------------------------------------------------- */

static bool parse_version(const char *s, int64_t *out) {
  if (!*s) return false;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9' || v > (INT64_MAX - 9) / 10) return false;
    v = v * 10 + (*s - '0');
  }
  *out = v;
  return true;
}

/* The /v2/models/{m}[/versions/{v}][/action] family. */
static hark_error *route_model(char **seg, int n, route *rt) {
  int i = 2;
  if (i < n && strcmp(seg[i], "versions") == 0) {
    if (i + 1 >= n) return NULL;
    if (!parse_version(seg[i + 1], &rt->version))
      return hark_error_new(HARK_ERR_INVALID_ARG, "invalid model version '%s'", seg[i + 1]);
    i += 2;
  }
  static const struct {
    const char *name;
    route_kind kind;
  } actions[] = {{"ready", R_MODEL_READY},
                 {"config", R_MODEL_CONFIG},
                 {"stats", R_MODEL_STATS},
                 {"infer", R_INFER},
                 {"stream", R_STREAM}};
  if (i == n) rt->kind = R_MODEL_META;
  for (size_t a = 0; i + 1 == n && a < sizeof actions / sizeof *actions; a++)
    if (strcmp(seg[i], actions[a].name) == 0) rt->kind = actions[a].kind;
  if (rt->kind != R_NONE) rt->model = strdup(seg[1]);
  return NULL;
}

/* Splits the path and finds its route; rt->kind stays R_NONE if none. */
hark_error *hark_http_route_parse(const char *path, bool metrics, route *rt) {
  *rt = (route){.kind = R_NONE, .version = -1};
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
    if (n == 1 && strcmp(seg[0], "metrics") == 0) rt->kind = R_METRICS;
    return NULL;
  }
  if (strcmp(seg[0], "v2") != 0) return NULL;
  if (n == 1)
    rt->kind = R_SERVER_META;
  else if (n == 3 && strcmp(seg[1], "health") == 0 && strcmp(seg[2], "live") == 0)
    rt->kind = R_LIVE;
  else if (n == 3 && strcmp(seg[1], "health") == 0 && strcmp(seg[2], "ready") == 0)
    rt->kind = R_READY;
  else if (n == 3 && strcmp(seg[1], "models") == 0 && strcmp(seg[2], "stats") == 0)
    rt->kind = R_ALL_STATS;
  else if (n >= 3 && strcmp(seg[1], "models") == 0)
    return route_model(seg + 1, n - 1, rt);
  else if (n == 3 && strcmp(seg[1], "repository") == 0 && strcmp(seg[2], "index") == 0)
    rt->kind = R_REPO_INDEX;
  else if (n == 5 && strcmp(seg[1], "repository") == 0 && strcmp(seg[2], "models") == 0 &&
           (strcmp(seg[4], "load") == 0 || strcmp(seg[4], "unload") == 0)) {
    rt->kind = seg[4][0] == 'l' ? R_REPO_LOAD : R_REPO_UNLOAD;
    rt->model = strdup(seg[3]);
  }
  return NULL;
}

bool hark_http_route_is_post(route_kind k) {
  return k == R_INFER || k == R_REPO_INDEX || k == R_REPO_LOAD || k == R_REPO_UNLOAD;
}

/* ---- GET handlers ---------------------------------------------------------------- */

static void get_model_doc(struct lws *wsi, http_conn *c) {
  hark_http *http = hark_http_loop_of(wsi)->http;
  hark_model *model;
  hark_error *err = hark_server_model_acquire(http->server, c->rt.model, c->rt.version, &model);
  if (c->rt.kind == R_MODEL_READY) {
    bool ready = !err && hark_model_is_ready(model) && !hark_server_is_draining(http->server);
    hark_error_free(err);
    if (!err) hark_model_release(model);
    hark_http_reply_text(wsi, c, ready ? 200 : 400, NULL, NULL, 0);
    return;
  }
  if (err) {
    hark_http_reply_error(wsi, c, err);
    return;
  }
  hark_kserve_buf b = {0};
  if (!hark_http_body_begin(&b)) {
    err = hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  } else if (c->rt.kind == R_MODEL_META) {
    err = hark_kserve_write_model_metadata(&b, http->server, model);
  } else {
    char *json = hark_model_config_to_json(hark_model_get_config(model));
    if (!json || !hark_kserve_buf_puts(&b, json))
      err = hark_error_new(HARK_ERR_INTERNAL, "cannot write the model config");
    free(json);
  }
  hark_model_release(model);
  hark_http_reply_doc(wsi, c, &b, err);
}

void hark_http_handle_get(struct lws *wsi, http_conn *c) {
  hark_http *http = hark_http_loop_of(wsi)->http;
  hark_kserve_buf b = {0};
  hark_error *err = NULL;
  switch (c->rt.kind) {
    case R_LIVE:
      hark_http_reply_text(wsi, c, hark_server_is_live(http->server) ? 200 : 400, NULL, NULL, 0);
      return;
    case R_READY:
      hark_http_reply_text(wsi, c, hark_server_is_ready(http->server) ? 200 : 400, NULL, NULL, 0);
      return;
    case R_METRICS: {
      char *text = hark_server_metrics_render(http->server);
      if (!text) {
        hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_INTERNAL, "cannot render metrics"));
        return;
      }
      hark_http_reply_text(wsi, c, 200, "text/plain; version=0.0.4; charset=utf-8", text,
                           strlen(text));
      free(text);
      return;
    }
    case R_MODEL_META:
    case R_MODEL_READY:
    case R_MODEL_CONFIG: get_model_doc(wsi, c); return;
    default: break;
  }
  if (!hark_http_body_begin(&b))
    err = hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  else if (c->rt.kind == R_SERVER_META)
    err = hark_kserve_write_server_metadata(&b);
  else
    err = hark_kserve_write_stats(&b, http->server, c->rt.model, c->rt.version);
  hark_http_reply_doc(wsi, c, &b, err);
}

void hark_http_handle_post(struct lws *wsi, http_conn *c) {
  switch (c->rt.kind) {
    case R_INFER: start_infer(wsi, c); return;
    case R_REPO_INDEX: repo_index(wsi, c); return;
    case R_REPO_LOAD: repo_load_unload(wsi, c, true); return;
    case R_REPO_UNLOAD: repo_load_unload(wsi, c, false); return;
    default: return;
  }
}
