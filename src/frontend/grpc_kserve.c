/*
 * grpc_kserve.c — the KServe v2 gRPC methods that are not inference
 * (health, metadata, statistics, repository) and grpc.health.v1 Check,
 * plus the table that maps a method path to its handler.
 *
 * Each handler reads the engine through its public API (hark/server.h),
 * builds the protobuf-c reply on the stack or heap, and replies at once;
 * load and unload reply from the engine's thread when they finish.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/grpc_impl.h"
#include "grpc_service.pb-c.h"
#include "health.pb-c.h"
#include "hark/backend.h"
#include "hark/config.h"

#define FREE_MSG(m) protobuf_c_message_free_unpacked((ProtobufCMessage *)(m), NULL)

hark_error *hark_grpc_parse_version(const char *s, int64_t *out) {
  *out = -1;
  if (!s || !*s) return NULL;
  int64_t v = 0;
  for (const char *p = s; *p; p++) {
    if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
      return hark_error_new(HARK_ERR_INVALID_ARG, "invalid model version '%s'", s);
    v = v * 10 + (*p - '0');
  }
  *out = v;
  return NULL;
}

static hark_error *oom(void) { return hark_error_new(HARK_ERR_INTERNAL, "out of memory"); }

/* ---- health ---------------------------------------------------------------- */

static void server_live(hark_grpc_call *c, ProtobufCMessage *msg) {
  FREE_MSG(msg);
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = hark_server_is_live(c->g->server);
  hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
}

static void server_ready(hark_grpc_call *c, ProtobufCMessage *msg) {
  FREE_MSG(msg);
  Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
  r.ready = hark_server_is_ready(c->g->server);
  hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
}

/* Triton answers ready=false, not an error, for a model it cannot serve. */
static void model_ready(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelReadyRequest *q = (Inference__ModelReadyRequest *)msg;
  Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
  int64_t version;
  hark_error *err = hark_grpc_parse_version(q->version, &version);
  hark_model *model = NULL;
  if (!err) err = hark_server_model_acquire(c->g->server, q->name, version, &model);
  FREE_MSG(msg);
  if (err && hark_error_code(err) == HARK_ERR_INVALID_ARG) {
    hark_grpc_reply_error(c, err);
    return;
  }
  hark_error_free(err);
  if (model) {
    r.ready = hark_model_is_ready(model);
    hark_model_release(model);
  }
  hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
}

static void health_check(hark_grpc_call *c, ProtobufCMessage *msg) {
  Grpc__Health__V1__HealthCheckRequest *q = (Grpc__Health__V1__HealthCheckRequest *)msg;
  bool known = !*q->service || strcmp(q->service, "inference.GRPCInferenceService") == 0;
  char text[200];
  snprintf(text, sizeof text, "unknown service '%.150s'", q->service);
  FREE_MSG(msg);
  if (!known) {
    hark_grpc_reply(c, NULL, GRPC_STATUS_NOT_FOUND, text);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = hark_server_is_ready(c->g->server)
                 ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                 : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
  hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
}

/* ---- metadata --------------------------------------------------------------- */

static void server_metadata(hark_grpc_call *c, ProtobufCMessage *msg) {
  FREE_MSG(msg);
  Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
  r.name = HARK_SERVER_NAME;
  r.version = HARK_SERVER_VERSION;
  const char *const *ext = hark_server_extensions();
  while (ext && ext[r.n_extensions]) r.n_extensions++;
  r.extensions = (char **)ext;
  hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
}

typedef struct version_walk {
  const char *name;
  char **versions; /* decimal strings, malloc'd */
  size_t n, cap;
  bool ok;
} version_walk;

static char *version_str(int64_t v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRId64, v);
  return strdup(buf);
}

static void add_version(hark_model *model, void *userp) {
  version_walk *w = userp;
  if (!w->ok || strcmp(hark_model_name(model), w->name) != 0) return;
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 4;
    char **p = realloc(w->versions, cap * sizeof *p);
    if (!p) {
      w->ok = false;
      return;
    }
    w->versions = p;
    w->cap = cap;
  }
  char *s = version_str(hark_model_version(model));
  if (!s) w->ok = false;
  else w->versions[w->n++] = s;
}

typedef Inference__ModelMetadataResponse__TensorMetadata tensor_md;

/* Tensor metadata for `n` inputs or outputs; shapes get a leading -1 when
 * the model batches. One allocation each; NULL when out of memory. */
static tensor_md **io_metadata(const hark_model_io *io, uint32_t n, bool batch) {
  tensor_md **list = calloc(n ? n : 1, sizeof *list);
  if (!list) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    size_t nd = io[i].ndims + (batch ? 1 : 0);
    tensor_md *t = calloc(1, sizeof *t + nd * sizeof(int64_t));
    if (!t) {
      for (uint32_t j = 0; j < i; j++) free(list[j]);
      free(list);
      return NULL;
    }
    *t = (tensor_md)INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
    t->name = io[i].name;
    t->datatype = (char *)hark_datatype_name(io[i].datatype);
    t->shape = (int64_t *)(t + 1);
    t->n_shape = nd;
    size_t d = 0;
    if (batch) t->shape[d++] = -1;
    for (uint32_t k = 0; k < io[i].ndims; k++) t->shape[d++] = io[i].dims[k];
    list[i] = t;
  }
  return list;
}

static void free_io_metadata(tensor_md **list, uint32_t n) {
  if (!list) return;
  for (uint32_t i = 0; i < n; i++) free(list[i]);
  free(list);
}

static void model_metadata(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelMetadataRequest *q = (Inference__ModelMetadataRequest *)msg;
  int64_t version;
  hark_model *model = NULL;
  hark_error *err = hark_grpc_parse_version(q->version, &version);
  if (!err) err = hark_server_model_acquire(c->g->server, q->name, version, &model);
  FREE_MSG(msg);
  if (err) {
    hark_grpc_reply_error(c, err);
    return;
  }
  const hark_model_config *cfg = hark_model_get_config(model);
  bool batch = cfg->max_batch_size > 0;
  Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
  version_walk w = {hark_model_name(model), NULL, 0, 0, true};
  hark_server_model_foreach(c->g->server, add_version, &w);
  if (w.ok && !w.n) add_version(model, &w);
  r.name = (char *)hark_model_name(model);
  r.versions = w.versions;
  r.n_versions = w.n;
  r.platform = cfg->platform && *cfg->platform ? cfg->platform
               : cfg->backend                  ? cfg->backend
                                               : "";
  r.inputs = io_metadata(cfg->inputs, cfg->n_inputs, batch);
  r.n_inputs = cfg->n_inputs;
  r.outputs = io_metadata(cfg->outputs, cfg->n_outputs, batch);
  r.n_outputs = cfg->n_outputs;
  if (w.ok && r.inputs && r.outputs) hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
  else hark_grpc_reply_error(c, oom());
  free_io_metadata(r.inputs, cfg->n_inputs);
  free_io_metadata(r.outputs, cfg->n_outputs);
  for (size_t i = 0; i < w.n; i++) free(w.versions[i]);
  free(w.versions);
  hark_model_release(model);
}

static void model_config(hark_grpc_call *c, ProtobufCMessage *msg) {
  FREE_MSG(msg);
  hark_grpc_reply(c, NULL, GRPC_STATUS_UNIMPLEMENTED,
                  "ModelConfig is not served over gRPC yet; use GET /v2/models/{name}/config");
}

/* ---- statistics -------------------------------------------------------------- */

/* One model version's statistics, in one allocation. */
typedef struct stats_block {
  Inference__ModelStatistics ms;
  Inference__InferStatistics is;
  Inference__StatisticDuration d[8];
  char version[24];
  Inference__InferBatchStatistics *bptr[64];
  Inference__InferBatchStatistics b[64];
  Inference__StatisticDuration bd[64][3];
} stats_block;

static void put_duration(Inference__StatisticDuration *d, hark_stat s) {
  *d = (Inference__StatisticDuration)INFERENCE__STATISTIC_DURATION__INIT;
  d->count = s.count;
  d->ns = s.ns;
}

static stats_block *stats_block_new(const hark_model *model) {
  stats_block *sb = calloc(1, sizeof *sb);
  if (!sb) return NULL;
  hark_model_stats st;
  hark_model_stats_read(model, &st);
  const hark_stat none = {0, 0};
  sb->ms = (Inference__ModelStatistics)INFERENCE__MODEL_STATISTICS__INIT;
  sb->is = (Inference__InferStatistics)INFERENCE__INFER_STATISTICS__INIT;
  snprintf(sb->version, sizeof sb->version, "%" PRId64, hark_model_version(model));
  sb->ms.name = (char *)hark_model_name(model);
  sb->ms.version = sb->version;
  sb->ms.last_inference = st.last_inference_ms;
  sb->ms.inference_count = st.inference_count;
  sb->ms.execution_count = st.execution_count;
  hark_stat all[8] = {st.success, st.fail, st.queue, st.compute_input,
                      st.compute_infer, st.compute_output, none, none};
  for (int i = 0; i < 8; i++) put_duration(&sb->d[i], all[i]);
  sb->is.success = &sb->d[0];
  sb->is.fail = &sb->d[1];
  sb->is.queue = &sb->d[2];
  sb->is.compute_input = &sb->d[3];
  sb->is.compute_infer = &sb->d[4];
  sb->is.compute_output = &sb->d[5];
  sb->is.cache_hit = &sb->d[6];
  sb->is.cache_miss = &sb->d[7];
  sb->ms.inference_stats = &sb->is;
  uint32_t nb = st.n_batch < 64 ? st.n_batch : 64;
  for (uint32_t i = 0; i < nb; i++) {
    Inference__InferBatchStatistics *b = &sb->b[i];
    *b = (Inference__InferBatchStatistics)INFERENCE__INFER_BATCH_STATISTICS__INIT;
    b->batch_size = st.batch[i].batch_size;
    put_duration(&sb->bd[i][0], st.batch[i].compute_input);
    put_duration(&sb->bd[i][1], st.batch[i].compute_infer);
    put_duration(&sb->bd[i][2], st.batch[i].compute_output);
    b->compute_input = &sb->bd[i][0];
    b->compute_infer = &sb->bd[i][1];
    b->compute_output = &sb->bd[i][2];
    sb->bptr[i] = b;
  }
  sb->ms.batch_stats = sb->bptr;
  sb->ms.n_batch_stats = nb;
  return sb;
}

typedef struct stats_walk {
  const char *name; /* NULL: every model */
  int64_t version;  /* -1: every version */
  Inference__ModelStatistics **list;
  size_t n, cap;
  bool ok;
} stats_walk;

static void add_stats(hark_model *model, void *userp) {
  stats_walk *w = userp;
  if (!w->ok || (w->name && strcmp(hark_model_name(model), w->name) != 0) ||
      (w->version >= 0 && hark_model_version(model) != w->version))
    return;
  if (w->n == w->cap) {
    size_t cap = w->cap ? w->cap * 2 : 8;
    Inference__ModelStatistics **p = realloc(w->list, cap * sizeof *p);
    if (!p) {
      w->ok = false;
      return;
    }
    w->list = p;
    w->cap = cap;
  }
  /* The model name must outlive the walk's reference: copy it. */
  stats_block *sb = stats_block_new(model);
  char *name = sb ? strdup(hark_model_name(model)) : NULL;
  if (!name) {
    free(sb);
    w->ok = false;
    return;
  }
  sb->ms.name = name;
  w->list[w->n++] = &sb->ms; /* ms is the block's first member */
}

static void model_statistics(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelStatisticsRequest *q = (Inference__ModelStatisticsRequest *)msg;
  stats_walk w = {*q->name ? q->name : NULL, -1, NULL, 0, 0, true};
  hark_error *err = hark_grpc_parse_version(q->version, &w.version);
  if (!err) {
    hark_server_model_foreach(c->g->server, add_stats, &w);
    if (!w.ok) err = oom();
    else if (w.name && !w.n)
      err = w.version >= 0 ? hark_error_new(HARK_ERR_NOT_FOUND,
                                            "requested model '%s' version %" PRId64
                                            " is not found",
                                            w.name, w.version)
                           : hark_error_new(HARK_ERR_NOT_FOUND,
                                            "requested model '%s' is not found", w.name);
  }
  if (err) {
    hark_grpc_reply_error(c, err);
  } else {
    Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    r.model_stats = w.list;
    r.n_model_stats = w.n;
    hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
  }
  for (size_t i = 0; i < w.n; i++) {
    free(w.list[i]->name);
    free(w.list[i]);
  }
  free(w.list);
  FREE_MSG(msg);
}

/* ---- repository ----------------------------------------------------------------- */

static void repository_index(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__RepositoryIndexRequest *q = (Inference__RepositoryIndexRequest *)msg;
  bool ready = q->ready;
  FREE_MSG(msg);
  hark_index_entry *entries;
  size_t n;
  hark_error *err = hark_server_repository_index(c->g->server, ready, &entries, &n);
  if (err) {
    hark_grpc_reply_error(c, err);
    return;
  }
  typedef Inference__RepositoryIndexResponse__ModelIndex model_index;
  model_index *items = calloc(n ? n : 1, sizeof *items);
  model_index **ptrs = calloc(n ? n : 1, sizeof *ptrs);
  char (*versions)[24] = calloc(n ? n : 1, sizeof *versions);
  if (!items || !ptrs || !versions) {
    hark_grpc_reply_error(c, oom());
  } else {
    for (size_t i = 0; i < n; i++) {
      items[i] = (model_index)INFERENCE__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
      items[i].name = entries[i].name;
      if (entries[i].version >= 0) {
        snprintf(versions[i], sizeof versions[i], "%" PRId64, entries[i].version);
        items[i].version = versions[i];
      }
      if (entries[i].state) items[i].state = (char *)entries[i].state;
      if (entries[i].reason) items[i].reason = entries[i].reason;
      ptrs[i] = &items[i];
    }
    Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
    r.models = ptrs;
    r.n_models = n;
    hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
  }
  free(items);
  free(ptrs);
  free(versions);
  hark_index_free(entries, n);
}

/* Runs on the engine's thread when a load or unload finishes. */
static void repository_done(hark_error *err, void *userp) {
  hark_grpc_call *c = userp;
  if (err) {
    hark_grpc_reply_error(c, err);
  } else if (c->method->request == &inference__repository_model_load_request__descriptor) {
    Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
    hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
  } else {
    Inference__RepositoryModelUnloadResponse r = INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
    hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
  }
  hark_grpc_call_unref(c);
}

static void repository_load(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__RepositoryModelLoadRequest *q = (Inference__RepositoryModelLoadRequest *)msg;
  hark_error *err = NULL;
  if (q->n_parameters)
    err = hark_error_new(HARK_ERR_UNSUPPORTED,
                         "load parameters (such as '%s') are not supported",
                         q->parameters[0]->key);
  if (!err) {
    hark_grpc_call_ref(c);
    err = hark_server_model_load(c->g->server, q->model_name, repository_done, c);
    if (err) hark_grpc_call_unref(c);
  }
  FREE_MSG(msg);
  if (err) hark_grpc_reply_error(c, err);
}

static void repository_unload(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__RepositoryModelUnloadRequest *q = (Inference__RepositoryModelUnloadRequest *)msg;
  hark_error *err = NULL;
  for (size_t i = 0; !err && i < q->n_parameters; i++)
    if (strcmp(q->parameters[i]->key, "unload_dependents") != 0)
      err = hark_error_new(HARK_ERR_UNSUPPORTED, "unload parameter '%s' is not supported",
                           q->parameters[i]->key);
  if (!err) {
    hark_grpc_call_ref(c);
    err = hark_server_model_unload(c->g->server, q->model_name, repository_done, c);
    if (err) hark_grpc_call_unref(c);
  }
  FREE_MSG(msg);
  if (err) hark_grpc_reply_error(c, err);
}

/* ---- the method table ------------------------------------------------------------- */

#define KSERVE "/inference.GRPCInferenceService/"
static const hark_grpc_method methods[] = {
    {KSERVE "ServerLive", &inference__server_live_request__descriptor, server_live, false},
    {KSERVE "ServerReady", &inference__server_ready_request__descriptor, server_ready, false},
    {KSERVE "ModelReady", &inference__model_ready_request__descriptor, model_ready, false},
    {KSERVE "ServerMetadata", &inference__server_metadata_request__descriptor, server_metadata, false},
    {KSERVE "ModelMetadata", &inference__model_metadata_request__descriptor, model_metadata, false},
    {KSERVE "ModelInfer", &inference__model_infer_request__descriptor, hark_grpc_model_infer, false},
    {KSERVE "ModelStreamInfer", &inference__model_infer_request__descriptor,
     hark_grpc_stream_infer, true},
    {KSERVE "ModelConfig", &inference__model_config_request__descriptor, model_config, false},
    {KSERVE "ModelStatistics", &inference__model_statistics_request__descriptor,
     model_statistics, false},
    {KSERVE "RepositoryIndex", &inference__repository_index_request__descriptor,
     repository_index, false},
    {KSERVE "RepositoryModelLoad", &inference__repository_model_load_request__descriptor,
     repository_load, false},
    {KSERVE "RepositoryModelUnload", &inference__repository_model_unload_request__descriptor,
     repository_unload, false},
    {"/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_request__descriptor,
     health_check, false},
};

const hark_grpc_method *hark_grpc_method_find(const char *path, size_t len) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strlen(methods[i].path) == len && memcmp(methods[i].path, path, len) == 0)
      return &methods[i];
  return NULL;
}
