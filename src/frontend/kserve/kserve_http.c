/*
 * kserve_http.c — the KServe v2 REST API as an HTTP service: the handlers
 * the transport calls (routes are parsed by route.c) (http/http.h). GETs (health,
 * metadata, config, statistics, metrics) answer at once from the engine's
 * public API. An infer request's body is parsed by the KServe codec into a
 * hark_request that owns it, and queued with hark_server_infer(); the
 * response is serialized on the worker thread that delivers it, straight
 * into the reply buffer, and its call is posted back to the connection's
 * loop, which sends the reply. Model load and unload finish on a server
 * thread the same way.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/http/http.h"
#include "frontend/kserve/kserve.h"
#include "frontend/kserve/route.h"
#include "frontend/kserve/settings.h"
#include "hark/config.h"
#include "hark/model.h"
#include "util/alloc.h"

#define JSON "application/json"

/* ---- routes (route.c) ---------------------------------------------------------- */

/* The category of a route (--http-restricted-api); metrics are on their
 * own port, which restrictions do not cover. */
static hark_api route_api(hark_kserve_route_kind k) {
  switch (k) {
  case HARK_ROUTE_LIVE:
  case HARK_ROUTE_READY:
  case HARK_ROUTE_MODEL_READY: return HARK_API_HEALTH;
  case HARK_ROUTE_SERVER_META:
  case HARK_ROUTE_MODEL_META: return HARK_API_METADATA;
  case HARK_ROUTE_MODEL_CONFIG: return HARK_API_MODEL_CONFIG;
  case HARK_ROUTE_MODEL_STATS:
  case HARK_ROUTE_ALL_STATS: return HARK_API_STATISTICS;
  case HARK_ROUTE_INFER:
  case HARK_ROUTE_STREAM: return HARK_API_INFERENCE;
  case HARK_ROUTE_REPO_INDEX:
  case HARK_ROUTE_REPO_LOAD:
  case HARK_ROUTE_REPO_UNLOAD: return HARK_API_MODEL_REPOSITORY;
  case HARK_ROUTE_SHM_STATUS:
  case HARK_ROUTE_SHM_REGISTER:
  case HARK_ROUTE_SHM_UNREGISTER:
  case HARK_ROUTE_CUDA_SHM: return HARK_API_SHARED_MEMORY;
  case HARK_ROUTE_LOGGING: return HARK_API_LOGGING;
  case HARK_ROUTE_TRACE: return HARK_API_TRACE;
  default: return HARK_API_UNSET;
  }
}

/* What an exchange keeps between its head and its body. */
typedef struct exchange {
  hark_kserve_route rt;
  size_t header_len; /* Inference-Header-Content-Length, or none */
} exchange;

static void exchange_free(void *p) {
  exchange *x = p;
  hark_kserve_route_clear(&x->rt);
  free(x);
}

/* ---- replies -------------------------------------------------------------------- */

/* 200 with the JSON document in `b`, or the error (taken) instead. */
static void reply_doc(hark_http_conn *c, hark_buf *b, hark_error *err) {
  if (err) {
    hark_buf_free(b);
    hark_http_reply_error(c, 0, err);
    return;
  }
  hark_http_reply(c, 200, JSON, b, NULL, NULL);
}

/* ---- inference ---------------------------------------------------------------------- */

/* One engine operation (infer, load, unload) and its reply. The reply is
 * made on the thread that finishes the operation and sent from the loop. */
typedef struct call {
  hark_http_call call; /* first: the transport hands it back */
  hark_server *server;
  hark_kserve_request parsed; /* read by the worker while the request lives */
  char *model_name;
  int64_t model_version;
  int status; /* 0 until a reply is ready */
  const char *ctype;
  hark_buf out;
  size_t infer_header_len; /* 0: no binary data */
} call;

static call *call_new(hark_server *server) {
  call *k = hark_xcalloc(1, sizeof *k);
  k->server = server;
  k->model_version = -1;
  return k;
}

static void call_free(call *k) {
  hark_cancel_unref(k->call.cancel);
  hark_buf_free(&k->out);
  free(k->model_name);
  free(k);
}

/* Any thread: the reply is {"error": ...} for `err` (not taken). */
static void call_set_error(call *k, const hark_error *err) {
  k->status = hark_code_http_status(hark_error_code(err));
  k->ctype = JSON;
  k->infer_header_len = 0;
  hark_http_body_begin(&k->out);
  hark_http_put_error(&k->out, hark_error_message(err));
}

/* Loop thread: the reply is ready; send it if the client is still there. */
static void on_call_done(hark_http_call *hc, hark_http_conn *c) {
  call *k = (call *)hc;
  if (c) {
    char num[32];
    const char *hname = NULL;
    if (k->infer_header_len) {
      snprintf(num, sizeof num, "%zu", k->infer_header_len);
      hname = "Inference-Header-Content-Length:";
    }
    hark_http_reply(c, k->status, k->ctype, &k->out, hname, num);
  }
  call_free(k);
}

/* Worker thread. Serializes the first response (a decoupled model's later
 * ones are dropped: KServe HTTP has one response per request); an error
 * replaces it. The request, and so `parsed`, lives until this returns. */
static void on_infer_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  call *k = userp;
  if (err) {
    call_set_error(k, err);
  } else if (resp && !k->status) {
    size_t json_len;
    bool binary;
    hark_http_body_begin(&k->out);
    hark_error *werr = hark_kserve_write_response(&k->out, resp, k->model_name, k->model_version,
                                                  &k->parsed, &json_len, &binary);
    if (werr) {
      call_set_error(k, werr);
      hark_error_free(werr);
    } else {
      k->status = 200;
      k->ctype = binary ? "application/octet-stream" : JSON;
      k->infer_header_len = binary ? json_len : 0;
    }
  }
  hark_response_free(resp);
  hark_error_free(err);
  if (!(flags & HARK_RESPONSE_FINAL)) return;
  if (!k->status) {
    hark_error *none = hark_error_new(HARK_ERR_INTERNAL, "the model sent no response");
    call_set_error(k, none);
    hark_error_free(none);
  }
  hark_http_call_post(&k->call);
}

/* Parses the body and builds the request; on success the request owns the
 * body and the parse arena. */
static hark_error *build_infer(hark_http_conn *c, const exchange *x, hark_shm *shm,
                               hark_model *model, call *k, hark_request **out) {
  const hark_model_config *cfg = hark_model_get_config(model);
  if (cfg->decoupled)
    return hark_error_new(HARK_ERR_UNSUPPORTED,
                          "HTTP end point doesn't support models with decoupled transaction "
                          "policy");
  size_t len;
  char *body = hark_http_body(c, &len);
  hark_error *err = hark_kserve_parse(body, len, x->header_len, &k->parsed);
  if (err) return err;
  hark_request *req = hark_request_new(model);
  err = hark_kserve_to_request(&k->parsed, shm, req);
  if (err) {
    hark_request_free(req);
    hark_kserve_request_clear(&k->parsed);
    return err;
  }
  void *mem = hark_http_take_body(c);
  if (mem) hark_request_attach(req, mem, hark_http_body_free);
  hark_request_set_client(req, hark_http_peer(c));
  hark_request_set_callback(req, on_infer_response, k);
  *out = req;
  return NULL;
}

static void start_infer(hark_kserve *ks, hark_http_conn *c, exchange *x) {
  hark_server *server = ks->server;
  hark_model *model;
  hark_error *err = hark_server_model_acquire(server, x->rt.model, x->rt.version, &model);
  if (err) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  call *k = call_new(server);
  k->model_name = x->rt.model;
  x->rt.model = NULL;
  k->model_version = hark_model_version(model);
  hark_request *req = NULL;
  err = build_infer(c, x, ks->shm, model, k, &req);
  hark_model_release(model); /* the request holds its own reference */
  if (err) {
    call_free(k);
    hark_http_reply_error(c, 0, err);
    return;
  }
  hark_http_call_start(c, &k->call, on_call_done);
  k->call.cancel = hark_cancel_new(); /* set if the client closes first */
  hark_request_set_cancel(req, k->call.cancel);
  err = hark_server_infer(server, req);
  if (err) {
    hark_request_free(req);
    hark_http_call_abort(&k->call);
    call_free(k);
    hark_http_reply_error(c, 0, err);
  }
}

/* ---- repository -------------------------------------------------------------- */

/* Server thread: a load or unload finished. */
static void on_repo_done(hark_error *err, void *userp) {
  call *k = userp;
  if (err) {
    call_set_error(k, err);
    hark_error_free(err);
  } else {
    hark_http_body_begin(&k->out);
    hark_buf_puts(&k->out, "{}");
    k->status = 200;
    k->ctype = JSON;
  }
  hark_http_call_post(&k->call);
}

/* A body, if any, must be a JSON object; returns it parsed (or NULL). */
static hark_error *parse_json_object(hark_http_conn *c, cJSON **out) {
  size_t len;
  char *body = hark_http_body(c, &len);
  *out = NULL;
  if (!len) return NULL;
  cJSON *doc = cJSON_ParseWithLength(body, len);
  if (!doc || !cJSON_IsObject(doc)) {
    cJSON_Delete(doc);
    return hark_error_new(HARK_ERR_INVALID_ARG, "request body is not a JSON object");
  }
  *out = doc;
  return NULL;
}

static void repo_index(hark_server *server, hark_http_conn *c) {
  cJSON *doc;
  hark_error *err = parse_json_object(c, &doc);
  if (err) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  const cJSON *ready = cJSON_GetObjectItemCaseSensitive(doc, "ready");
  bool ready_only = cJSON_IsTrue(ready);
  bool bad = ready && !cJSON_IsBool(ready);
  cJSON_Delete(doc);
  if (bad) {
    hark_http_reply_error(c, 0, hark_error_new(HARK_ERR_INVALID_ARG, "'ready' must be a boolean"));
    return;
  }
  hark_buf b = {0};
  hark_http_body_begin(&b);
  reply_doc(c, &b, hark_kserve_write_index(&b, server, ready_only));
}

static void repo_load_unload(hark_server *server, hark_http_conn *c, exchange *x, bool load) {
  cJSON *doc;
  hark_error *err = parse_json_object(c, &doc);
  if (err) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  /* Triton's config and file overrides would silently do nothing here. */
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(doc, "parameters");
  bool overrides = params && cJSON_GetArraySize(params) > 0;
  cJSON_Delete(doc);
  if (overrides) {
    hark_http_reply_error(c, 0,
                          hark_error_new(HARK_ERR_UNSUPPORTED,
                                         "load parameters (config or file overrides) are not "
                                         "supported"));
    return;
  }
  call *k = call_new(server);
  hark_http_call_start(c, &k->call, on_call_done);
  err = load ? hark_server_model_load(server, x->rt.model, on_repo_done, k)
             : hark_server_model_unload(server, x->rt.model, on_repo_done, k);
  if (err) {
    hark_http_call_abort(&k->call);
    call_free(k);
    hark_http_reply_error(c, 0, err);
  }
}

/* ---- GETs ------------------------------------------------------------------------ */

static void get_model_doc(hark_server *server, hark_http_conn *c, const hark_kserve_route *rt) {
  hark_model *model;
  hark_error *err = hark_server_model_acquire(server, rt->model, rt->version, &model);
  if (rt->kind == HARK_ROUTE_MODEL_READY) {
    bool ready = !err && hark_model_is_ready(model) && !hark_server_is_draining(server);
    hark_error_free(err);
    if (!err) hark_model_release(model);
    hark_http_reply_text(c, ready ? 200 : 400, NULL, NULL, 0);
    return;
  }
  if (err) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  hark_buf b = {0};
  hark_http_body_begin(&b);
  if (rt->kind == HARK_ROUTE_MODEL_META) {
    hark_kserve_write_model_metadata(&b, server, model);
  } else {
    /* Paths in it are for those who may see the repository. */
    const hark_model_config *cfg = hark_model_get_config(model);
    hark_model_config view;
    char msg[8];
    bool hide = !hark_http_allowed(c, HARK_API_MODEL_REPOSITORY, msg, sizeof msg);
    if (hide) hark_kserve_config_hide_paths(cfg, &view);
    char *json = hark_model_config_to_json(hide ? &view : cfg);
    if (hide) free(view.parameters);
    if (!json)
      err = hark_error_new(HARK_ERR_INTERNAL, "cannot write the model config");
    else
      hark_buf_puts(&b, json);
    free(json);
  }
  hark_model_release(model);
  reply_doc(c, &b, err);
}

static void handle_get(hark_server *server, bool shm_on, hark_http_conn *c,
                       const hark_kserve_route *rt) {
  hark_buf b = {0};
  switch (rt->kind) {
  case HARK_ROUTE_LIVE:
    hark_http_reply_text(c, hark_server_is_live(server) ? 200 : 400, NULL, NULL, 0);
    return;
  case HARK_ROUTE_READY:
    hark_http_reply_text(c, hark_server_is_ready(server) ? 200 : 400, NULL, NULL, 0);
    return;
  case HARK_ROUTE_METRICS: {
    char *text = hark_server_metrics_render(server);
    if (!text) {
      hark_http_reply_error(c, 0, hark_error_new(HARK_ERR_INTERNAL, "cannot render metrics"));
      return;
    }
    hark_http_body_begin(&b);
    hark_buf_puts(&b, text);
    free(text);
    hark_limit_render(&b); /* the transports' own counters */
    hark_http_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", &b, NULL, NULL);
    return;
  }
  case HARK_ROUTE_MODEL_META:
  case HARK_ROUTE_MODEL_READY:
  case HARK_ROUTE_MODEL_CONFIG: get_model_doc(server, c, rt); return;
  case HARK_ROUTE_SERVER_META:
    hark_http_body_begin(&b);
    hark_kserve_write_server_metadata(&b, shm_on);
    reply_doc(c, &b, NULL);
    return;
  default:
    hark_http_body_begin(&b);
    reply_doc(c, &b, hark_kserve_write_stats(&b, server, rt->model, rt->version));
    return;
  }
}

/* ---- system shared memory ------------------------------------------------------- */

/* Triton's extension: every error is a 400 with {"error": ...} (a region
 * registered twice too, which hark's codes would make a 409). */

static hark_error *shm_off(void) {
  return hark_error_new(HARK_ERR_UNSUPPORTED,
                        "system shared memory is turned off on this server "
                        "(start harkd with --allow-shared-memory=true)");
}

/* GET /v2/systemsharedmemory[/region/{r}]/status: Triton's array of
 * {"name","key","offset","byte_size"}. */
static void shm_status(hark_kserve *ks, hark_http_conn *c, const hark_kserve_route *rt) {
  hark_shm_status *st;
  size_t n;
  hark_error *err = ks->shm ? hark_shm_status_get(ks->shm, rt->region, &st, &n) : shm_off();
  if (err) {
    hark_http_reply_error(c, 400, err);
    return;
  }
  hark_buf b = {0};
  hark_http_body_begin(&b);
  hark_buf_puts(&b, "[");
  for (size_t i = 0; i < n; i++) {
    hark_buf_puts(&b, i ? ",{\"name\":" : "{\"name\":");
    hark_buf_put_str(&b, st[i].name);
    hark_buf_puts(&b, ",\"key\":");
    hark_buf_put_str(&b, st[i].key);
    hark_buf_puts(&b, ",\"offset\":");
    hark_buf_put_u64(&b, st[i].offset);
    hark_buf_puts(&b, ",\"byte_size\":");
    hark_buf_put_u64(&b, st[i].byte_size);
    hark_buf_puts(&b, "}");
  }
  hark_buf_puts(&b, "]");
  hark_shm_status_free(st, n);
  reply_doc(c, &b, NULL);
}

/* A non-negative integer member of the register document. */
static hark_error *shm_size_member(const cJSON *doc, const char *key, bool required,
                                   uint64_t *out) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
  *out = 0;
  if (!v && !required) return NULL;
  if (!v) return hark_error_new(HARK_ERR_INVALID_ARG, "register needs '%s'", key);
  /* cJSON keeps numbers as doubles: exact up to 2^53, plenty for sizes. */
  if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
      v->valuedouble != (double)(uint64_t)v->valuedouble)
    return hark_error_new(HARK_ERR_INVALID_ARG, "'%s' must be a non-negative integer", key);
  *out = (uint64_t)v->valuedouble;
  return NULL;
}

hark_error *hark_kserve_shm_register_parse(const char *body, size_t len, char **key,
                                           uint64_t *offset, uint64_t *byte_size) {
  *key = NULL;
  *offset = *byte_size = 0;
  if (!len) return hark_error_new(HARK_ERR_INVALID_ARG, "register needs a JSON body");
  cJSON *doc = cJSON_ParseWithLength(body, len);
  hark_error *err = NULL;
  if (!doc || !cJSON_IsObject(doc))
    err = hark_error_new(HARK_ERR_INVALID_ARG, "request body is not a JSON object");
  const cJSON *k = err ? NULL : cJSON_GetObjectItemCaseSensitive(doc, "key");
  if (!err && !cJSON_IsString(k))
    err = hark_error_new(HARK_ERR_INVALID_ARG, "register needs 'key', a string");
  if (!err) err = shm_size_member(doc, "offset", false, offset);
  if (!err) err = shm_size_member(doc, "byte_size", true, byte_size);
  if (!err) *key = hark_xstrdup(k->valuestring);
  cJSON_Delete(doc);
  return err;
}

/* POST /v2/systemsharedmemory/region/{r}/register {"key","offset","byte_size"}. */
static void shm_register(hark_kserve *ks, hark_http_conn *c, const hark_kserve_route *rt) {
  char *key = NULL;
  uint64_t offset = 0, size = 0;
  size_t len = 0;
  char *body = ks->shm ? hark_http_body(c, &len) : NULL;
  hark_error *err =
      ks->shm ? hark_kserve_shm_register_parse(body, len, &key, &offset, &size) : shm_off();
  if (!err) err = hark_shm_register(ks->shm, rt->region, key, offset, size);
  free(key);
  if (err) {
    hark_http_reply_error(c, 400, err);
    return;
  }
  hark_http_reply_text(c, 200, NULL, NULL, 0);
}

/* POST /v2/systemsharedmemory[/region/{r}]/unregister: one region or all. */
static void shm_unregister(hark_kserve *ks, hark_http_conn *c, const hark_kserve_route *rt) {
  if (!ks->shm) {
    hark_http_reply_error(c, 400, shm_off());
    return;
  }
  hark_shm_unregister(ks->shm, rt->region);
  hark_http_reply_text(c, 200, NULL, NULL, 0);
}

/* ---- log and trace settings (settings.h) ------------------------------------------ */

static hark_setting_value json_setting(const cJSON *v) {
  hark_setting_value r = {.type = HARK_SETTING_OTHER};
  if (cJSON_IsBool(v)) {
    r.type = HARK_SETTING_BOOL;
    r.b = cJSON_IsTrue(v);
  } else if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 4294967295.0 &&
             v->valuedouble == (double)(uint32_t)v->valuedouble) {
    r.type = HARK_SETTING_UINT;
    r.u = (uint32_t)v->valuedouble;
  } else if (cJSON_IsString(v)) {
    r.type = HARK_SETTING_STRING;
    r.s = v->valuestring;
  }
  return r;
}

/* GET or POST /v2/logging: a POST's members change (all or none); the
 * reply is every setting as it now is. */
static void logging(hark_http_conn *c, bool post) {
  hark_log_settings st;
  hark_log_settings_read(&st);
  cJSON *doc = NULL;
  hark_error *err = post ? parse_json_object(c, &doc) : NULL;
  const cJSON *item;
  size_t changed = 0;
  if (doc) cJSON_ArrayForEach(item, doc) {
      if (err) break;
      hark_setting_value v = json_setting(item);
      err = hark_log_settings_set(&st, item->string, &v);
      changed++;
    }
  cJSON_Delete(doc);
  if (err) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  if (changed) {
    hark_log_settings_apply(&st);
    HARK_INFO(
        "log settings changed over HTTP: info %d, warning %d, error %d, verbose %u, "
        "format %s",
        st.info, st.warning, st.error, st.verbose, hark_log_format_name(st.format));
  }
  hark_buf b = {0};
  hark_http_body_begin(&b);
  hark_log_settings_write_json(&b, &st);
  reply_doc(c, &b, NULL);
}

/* One member of a trace update: a string, a list of strings, or null (back
 * to the default). */
static hark_error *trace_member(const cJSON *item) {
  enum { MAX_VALUES = 16 };
  const char *values[MAX_VALUES];
  size_t n = 0;
  if (cJSON_IsString(item)) {
    values[n++] = item->valuestring;
  } else if (cJSON_IsArray(item)) {
    const cJSON *e;
    cJSON_ArrayForEach(e, item) {
      if (!cJSON_IsString(e) || n == MAX_VALUES)
        return hark_error_new(HARK_ERR_INVALID_ARG,
                              "trace setting '%.100s' must be a string or a list of at most %d "
                              "strings",
                              item->string, MAX_VALUES);
      values[n++] = e->valuestring;
    }
  } else if (!cJSON_IsNull(item)) {
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "trace setting '%.100s' must be a string, a list of strings or null",
                          item->string);
  }
  return hark_trace_setting_check(item->string, values, n);
}

/* GET or POST /v2[/models/{m}]/trace/setting. */
static void trace_setting(hark_server *server, hark_http_conn *c, const hark_kserve_route *rt,
                          bool post) {
  hark_error *err = NULL;
  if (rt->model) {
    hark_model *model = NULL;
    err = hark_server_model_acquire(server, rt->model, rt->version, &model);
    if (model) hark_model_release(model);
  }
  cJSON *doc = NULL;
  if (!err && post) err = parse_json_object(c, &doc);
  const cJSON *item;
  if (doc) cJSON_ArrayForEach(item, doc) {
      if (err) break;
      err = trace_member(item);
    }
  cJSON_Delete(doc);
  if (err) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  hark_buf b = {0};
  hark_http_body_begin(&b);
  hark_trace_settings_write_json(&b);
  reply_doc(c, &b, NULL);
}

/* ---- the handlers ------------------------------------------------------------------ */

static void handle_post(hark_kserve *ks, hark_http_conn *c, exchange *x) {
  hark_server *server = ks->server;
  switch (x->rt.kind) {
  case HARK_ROUTE_INFER: start_infer(ks, c, x); return;
  case HARK_ROUTE_SHM_REGISTER: shm_register(ks, c, &x->rt); return;
  case HARK_ROUTE_SHM_UNREGISTER: shm_unregister(ks, c, &x->rt); return;
  case HARK_ROUTE_REPO_INDEX: repo_index(server, c); return;
  case HARK_ROUTE_REPO_LOAD: repo_load_unload(server, c, x, true); return;
  case HARK_ROUTE_REPO_UNLOAD: repo_load_unload(server, c, x, false); return;
  case HARK_ROUTE_LOGGING: logging(c, true); return;
  case HARK_ROUTE_TRACE: trace_setting(server, c, &x->rt, true); return;
  default: return;
  }
}

/* Inference-Header-Content-Length: the JSON part of a binary infer body. */
static hark_error *header_len(hark_http_conn *c, size_t *out) {
  char v[32], *end;
  *out = HARK_KSERVE_NO_HEADER_LEN;
  if (hark_http_header(c, "inference-header-content-length:", v, sizeof v) < 0) return NULL;
  unsigned long long n = strtoull(v, &end, 10);
  if (v[0] < '0' || v[0] > '9' || *end)
    return hark_error_new(HARK_ERR_INVALID_ARG, "Inference-Header-Content-Length is not a number");
  *out = (size_t)n;
  return NULL;
}

static void on_head(void *userp, hark_http_conn *c, const hark_http_request *req) {
  hark_kserve *ks = userp;
  hark_server *server = ks->server;
  hark_kserve_route rt;
  hark_error *err = hark_kserve_route_parse(req->path, req->metrics, &rt);
  if (err) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  if (rt.kind == HARK_ROUTE_NONE) {
    hark_http_reply_error(c, 0, hark_error_new(HARK_ERR_NOT_FOUND, "Not Found"));
    return;
  }
  char msg[256];
  if (!hark_http_allowed(c, route_api(rt.kind), msg, sizeof msg)) {
    hark_kserve_route_clear(&rt);
    if (req->method == HARK_HTTP_HEAD) /* a HEAD reply must not carry a body */
      hark_http_reply_text(c, 403, NULL, NULL, 0);
    else
      hark_http_reply_error(c, 403, hark_error_new(HARK_ERR_INVALID_ARG, "%s", msg));
    return;
  }
  /* Draining: no new work (answered before the body is read, so the
   * connection closes after it); probes, metadata and metrics still answer. */
  if (rt.kind == HARK_ROUTE_INFER && hark_server_is_draining(server)) {
    hark_kserve_route_clear(&rt);
    hark_http_close_after(c);
    hark_http_reply_error(c, 0,
                          hark_error_new(HARK_ERR_UNAVAILABLE,
                                         "Server is shutting down: not accepting new requests"));
    return;
  }
  if (rt.kind == HARK_ROUTE_STREAM) {
    hark_kserve_route_clear(&rt);
    hark_http_reply_error(
        c, 426,
        hark_error_new(HARK_ERR_INVALID_ARG,
                       "this is a WebSocket endpoint (Vosk's streaming protocol): connect "
                       "with a WebSocket client"));
    return;
  }
  if (rt.kind == HARK_ROUTE_CUDA_SHM) {
    hark_kserve_route_clear(&rt);
    hark_http_reply_error(c, 0,
                          hark_error_new(HARK_ERR_UNSUPPORTED,
                                         "CUDA shared memory is not supported by this server "
                                         "(no GPU support); use system shared memory"));
    return;
  }
  bool post = hark_kserve_route_is_post(rt.kind);
  if (hark_kserve_route_is_settings(rt.kind)) post = req->method == HARK_HTTP_POST;
  if (req->method == HARK_HTTP_HEAD || req->method != (post ? HARK_HTTP_POST : HARK_HTTP_GET)) {
    hark_kserve_route_clear(&rt);
    if (req->method == HARK_HTTP_HEAD) /* a HEAD reply must not carry a body */
      hark_http_reply_text(c, 405, NULL, NULL, 0);
    else
      hark_http_reply_error(c, 405, hark_error_new(HARK_ERR_INVALID_ARG, "Method Not Allowed"));
    return;
  }
  if (rt.kind == HARK_ROUTE_SHM_STATUS) {
    shm_status(ks, c, &rt);
    hark_kserve_route_clear(&rt);
    return;
  }
  if (!post && hark_kserve_route_is_settings(rt.kind)) {
    if (rt.kind == HARK_ROUTE_LOGGING)
      logging(c, false);
    else
      trace_setting(server, c, &rt, false);
    hark_kserve_route_clear(&rt);
    return;
  }
  if (!post) {
    handle_get(server, ks->shm != NULL, c, &rt);
    hark_kserve_route_clear(&rt);
    return;
  }
  exchange *x = hark_xcalloc(1, sizeof *x);
  x->rt = rt;
  hark_http_set_state(c, x, exchange_free);
  if ((err = header_len(c, &x->header_len))) {
    hark_http_reply_error(c, 0, err);
    return;
  }
  size_t align = x->header_len == HARK_KSERVE_NO_HEADER_LEN ? 0 : x->header_len;
  int rc = hark_http_read_body(c, align);
  if (rc == 0) handle_post(ks, c, x);
}

static void on_body(void *userp, hark_http_conn *c) { handle_post(userp, c, hark_http_state(c)); }

void hark_kserve_http_handler(hark_kserve *ks, hark_http_handler *h) {
  h->head = on_head;
  h->body = on_body;
  h->userp = ks;
}
