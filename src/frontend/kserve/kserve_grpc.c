/*
 * kserve_grpc.c — KServe v2 over gRPC (inference.GRPCInferenceService, as
 * Triton's clients expect) and grpc.health.v1.Health: the method tables
 * registered with the gRPC transport, and the methods that are not
 * inference (health, metadata, configuration, statistics, repository;
 * inference is kserve_grpc_infer.c).
 *
 * Each handler reads the engine through its public API (hark/server.h),
 * builds the protobuf-c reply on the stack or heap, and replies at once;
 * load and unload reply from the engine's thread when they finish.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kserve/kserve.h"
#include "frontend/kserve/kserve_grpc.h"
#include "frontend/kserve/settings.h"
#include "hark/config.h"
#include "hark/model.h"
#include "health.pb-c.h"
#include "util/alloc.h"

static hark_kserve *kserve_of(hark_grpc_call *c) { return hark_grpc_call_service(c); }
static hark_server *server_of(hark_grpc_call *c) { return kserve_of(c)->server; }

/* ---- health ---------------------------------------------------------------- */

static void server_live(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ServerLiveResponse r = INFERENCE__SERVER_LIVE_RESPONSE__INIT;
  r.live = hark_server_is_live(server_of(c));
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

static void server_ready(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ServerReadyResponse r = INFERENCE__SERVER_READY_RESPONSE__INIT;
  r.ready = hark_server_is_ready(server_of(c));
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

/* Triton answers ready=false, not an error, for a model it cannot serve. */
static void model_ready(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelReadyRequest *q = (Inference__ModelReadyRequest *)msg;
  Inference__ModelReadyResponse r = INFERENCE__MODEL_READY_RESPONSE__INIT;
  int64_t version;
  hark_error *err = hark_kserve_parse_version(q->version, true, &version);
  if (err) {
    hark_grpc_reply_error(c, err);
    return;
  }
  /* An unknown model or version is not ready (as Triton: no error). */
  hark_model *model = NULL;
  hark_error_free(hark_server_model_acquire(server_of(c), q->name, version, &model));
  if (model) {
    r.ready = hark_model_is_ready(model);
    hark_model_release(model);
  }
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

static void health_check(hark_grpc_call *c, ProtobufCMessage *msg) {
  Grpc__Health__V1__HealthCheckRequest *q = (Grpc__Health__V1__HealthCheckRequest *)msg;
  bool known = !*q->service || strcmp(q->service, "inference.GRPCInferenceService") == 0;
  char text[200];
  snprintf(text, sizeof text, "unknown service '%.150s'", q->service);
  if (!known) {
    hark_grpc_reply(c, NULL, HARK_GRPC_NOT_FOUND, text);
    return;
  }
  Grpc__Health__V1__HealthCheckResponse r = GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__INIT;
  r.status = hark_server_is_ready(server_of(c))
                 ? GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING
                 : GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

/* ---- metadata --------------------------------------------------------------- */

static void server_metadata(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ServerMetadataResponse r = INFERENCE__SERVER_METADATA_RESPONSE__INIT;
  r.name = HARK_SERVER_NAME;
  r.version = HARK_SERVER_VERSION;
  const char *const *ext = hark_server_extensions();
  char *list[32];
  for (size_t i = 0; ext && ext[i] && r.n_extensions < 32; i++)
    if (kserve_of(c)->shm || strcmp(ext[i], "system_shared_memory") != 0)
      list[r.n_extensions++] = (char *)ext[i];
  r.extensions = list;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

/* The reply's parts live in one arena, freed together after it is sent;
 * all of internal size (util/alloc.h). */
static void *take(hark_arena *a, size_t n) {
  void *p = hark_arena_alloc(a, n ? n : 1);
  if (!p) hark_oom("reply", n);
  return p;
}

typedef struct version_walk {
  const char *name;
  hark_arena *a;
  char **versions; /* decimal strings */
  size_t n, cap;
} version_walk;

static void add_version(hark_model *model, void *userp) {
  version_walk *w = userp;
  if (strcmp(hark_model_name(model), w->name) != 0) return;
  w->versions = hark_arena_grow(w->a, w->versions, w->n, &w->cap, sizeof *w->versions);
  if (!w->versions) hark_oom("reply", w->cap);
  char *v = take(w->a, 24);
  snprintf(v, 24, "%" PRId64, hark_model_version(model));
  w->versions[w->n++] = v;
}

typedef Inference__ModelMetadataResponse__TensorMetadata tensor_md;

/* Tensor metadata for `n` inputs or outputs; shapes get a leading -1 when
 * the model batches. */
static tensor_md **io_metadata(hark_arena *a, const hark_model_io *io, uint32_t n, bool batch) {
  tensor_md **list = take(a, n * sizeof *list);
  for (uint32_t i = 0; i < n; i++) {
    size_t nd = io[i].ndims + (batch ? 1 : 0);
    tensor_md *t = take(a, sizeof *t);
    *t = (tensor_md)INFERENCE__MODEL_METADATA_RESPONSE__TENSOR_METADATA__INIT;
    t->name = io[i].name;
    t->datatype = (char *)hark_datatype_name(io[i].datatype);
    t->shape = take(a, nd * sizeof *t->shape);
    t->n_shape = nd;
    size_t d = 0;
    if (batch) t->shape[d++] = -1;
    for (uint32_t k = 0; k < io[i].ndims; k++) t->shape[d++] = io[i].dims[k];
    list[i] = t;
  }
  return list;
}

/* The model a request names (name, version string), with a reference;
 * NULL when it already replied with the error. */
static hark_model *acquire_or_reply(hark_grpc_call *c, const char *name, const char *version_s) {
  int64_t version;
  hark_model *model = NULL;
  hark_error *err = hark_kserve_parse_version(version_s, true, &version);
  if (!err) err = hark_server_model_acquire(server_of(c), name, version, &model);
  if (err) hark_grpc_reply_error(c, err);
  return model;
}

static void model_metadata(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelMetadataRequest *q = (Inference__ModelMetadataRequest *)msg;
  hark_model *model = acquire_or_reply(c, q->name, q->version);
  if (!model) return;
  const hark_model_config *cfg = hark_model_get_config(model);
  bool batch = cfg->max_batch_size > 0;
  hark_arena *a = hark_arena_new();
  Inference__ModelMetadataResponse r = INFERENCE__MODEL_METADATA_RESPONSE__INIT;
  version_walk w = {.name = hark_model_name(model), .a = a};
  hark_server_model_foreach(server_of(c), add_version, &w);
  if (!w.n) add_version(model, &w);
  r.name = (char *)hark_model_name(model);
  r.versions = w.versions;
  r.n_versions = w.n;
  r.platform = cfg->platform && *cfg->platform ? cfg->platform : cfg->backend ? cfg->backend : "";
  r.inputs = io_metadata(a, cfg->inputs, cfg->n_inputs, batch);
  r.n_inputs = cfg->n_inputs;
  r.outputs = io_metadata(a, cfg->outputs, cfg->n_outputs, batch);
  r.n_outputs = cfg->n_outputs;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
  hark_arena_free(a);
  hark_model_release(model);
}

static void model_config(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelConfigRequest *q = (Inference__ModelConfigRequest *)msg;
  hark_model *model = acquire_or_reply(c, q->name, q->version);
  if (!model) return;
  hark_arena *a = hark_arena_new();
  Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
  /* Paths in it are for those who may see the repository. */
  const hark_model_config *cfg = hark_model_get_config(model);
  hark_model_config view;
  bool hide = !hark_grpc_call_allowed(c, HARK_API_MODEL_REPOSITORY);
  if (hide) hark_kserve_config_hide_paths(cfg, &view);
  r.config = hark_kserve_config_pb(a, hide ? &view : cfg);
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
  hark_arena_free(a);
  if (hide) free(view.parameters);
  hark_model_release(model);
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

static stats_block *stats_block_new(hark_arena *a, const hark_model *model) {
  stats_block *sb = take(a, sizeof *sb);
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
  hark_stat all[8] = {st.success,       st.fail,           st.queue, st.compute_input,
                      st.compute_infer, st.compute_output, none,     none};
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
  hark_arena *a;
  Inference__ModelStatistics **list;
  size_t n, cap;
} stats_walk;

static void add_stats(hark_model *model, void *userp) {
  stats_walk *w = userp;
  if ((w->name && strcmp(hark_model_name(model), w->name) != 0) ||
      (w->version >= 0 && hark_model_version(model) != w->version))
    return;
  w->list = hark_arena_grow(w->a, w->list, w->n, &w->cap, sizeof *w->list);
  if (!w->list) hark_oom("reply", w->cap);
  stats_block *sb = stats_block_new(w->a, model);
  /* The model name must outlive the walk's reference: copy it. */
  const char *name = hark_model_name(model);
  sb->ms.name = hark_arena_strndup(w->a, name, strlen(name));
  if (!sb->ms.name) hark_oom("reply", strlen(name));
  w->list[w->n++] = &sb->ms; /* ms is the block's first member */
}

static void model_statistics(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelStatisticsRequest *q = (Inference__ModelStatisticsRequest *)msg;
  stats_walk w = {.name = *q->name ? q->name : NULL, .version = -1, .a = hark_arena_new()};
  hark_error *err = hark_kserve_parse_version(q->version, true, &w.version);
  if (!err) {
    hark_server_model_foreach(server_of(c), add_stats, &w);
    if (w.name && !w.n)
      err = w.version >= 0
                ? hark_error_new(HARK_ERR_INVALID_ARG,
                                 "requested model '%s' version %" PRId64 " is not found", w.name,
                                 w.version)
                : hark_error_new(HARK_ERR_INVALID_ARG, "requested model '%s' is not found", w.name);
  }
  if (err) {
    hark_grpc_reply_error(c, err);
  } else {
    Inference__ModelStatisticsResponse r = INFERENCE__MODEL_STATISTICS_RESPONSE__INIT;
    r.model_stats = w.list;
    r.n_model_stats = w.n;
    hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
  }
  hark_arena_free(w.a);
}

/* ---- repository ----------------------------------------------------------------- */

static void repository_index(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__RepositoryIndexRequest *q = (Inference__RepositoryIndexRequest *)msg;
  bool ready = q->ready;
  hark_index_entry *entries;
  size_t n;
  hark_error *err = hark_server_repository_index(server_of(c), ready, &entries, &n);
  if (err) {
    hark_grpc_reply_error(c, err);
    return;
  }
  typedef Inference__RepositoryIndexResponse__ModelIndex model_index;
  hark_arena *a = hark_arena_new();
  model_index *items = take(a, n * sizeof *items);
  model_index **ptrs = take(a, n * sizeof *ptrs);
  for (size_t i = 0; i < n; i++) {
    items[i] = (model_index)INFERENCE__REPOSITORY_INDEX_RESPONSE__MODEL_INDEX__INIT;
    items[i].name = entries[i].name;
    if (entries[i].version >= 0) {
      items[i].version = take(a, 24);
      snprintf(items[i].version, 24, "%" PRId64, entries[i].version);
    }
    if (entries[i].state) items[i].state = (char *)entries[i].state;
    if (entries[i].reason) items[i].reason = entries[i].reason;
    ptrs[i] = &items[i];
  }
  Inference__RepositoryIndexResponse r = INFERENCE__REPOSITORY_INDEX_RESPONSE__INIT;
  r.models = ptrs;
  r.n_models = n;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
  hark_arena_free(a);
  hark_index_free(entries, n);
}

/* Run on the engine's thread when a load or unload finishes. */
static void load_done(hark_error *err, void *userp) {
  hark_grpc_call *c = userp;
  Inference__RepositoryModelLoadResponse r = INFERENCE__REPOSITORY_MODEL_LOAD_RESPONSE__INIT;
  if (err)
    hark_grpc_reply_error(c, err);
  else
    hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
  hark_grpc_call_unref(c);
}

static void unload_done(hark_error *err, void *userp) {
  hark_grpc_call *c = userp;
  Inference__RepositoryModelUnloadResponse r = INFERENCE__REPOSITORY_MODEL_UNLOAD_RESPONSE__INIT;
  if (err)
    hark_grpc_reply_error(c, err);
  else
    hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
  hark_grpc_call_unref(c);
}

static void repository_load(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__RepositoryModelLoadRequest *q = (Inference__RepositoryModelLoadRequest *)msg;
  hark_error *err = NULL;
  if (q->n_parameters)
    err = hark_error_new(HARK_ERR_UNSUPPORTED, "load parameters (such as '%s') are not supported",
                         q->parameters[0]->key);
  if (!err) {
    hark_grpc_call_ref(c);
    err = hark_server_model_load(server_of(c), q->model_name, load_done, c);
    if (err) hark_grpc_call_unref(c);
  }
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
    err = hark_server_model_unload(server_of(c), q->model_name, unload_done, c);
    if (err) hark_grpc_call_unref(c);
  }
  if (err) hark_grpc_reply_error(c, err);
}

/* ---- shared memory ---------------------------------------------------------------- */

static bool shm_on_or_reply(hark_grpc_call *c) {
  if (kserve_of(c)->shm) return true;
  hark_grpc_reply(c, NULL, HARK_GRPC_UNIMPLEMENTED,
                  "system shared memory is turned off on this server "
                  "(start harkd with --allow-shared-memory=true)");
  return false;
}

typedef Inference__SystemSharedMemoryStatusResponse__RegionStatus region_status;
typedef Inference__SystemSharedMemoryStatusResponse__RegionsEntry regions_entry;

static void shm_status(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__SystemSharedMemoryStatusRequest *q = (Inference__SystemSharedMemoryStatusRequest *)msg;
  if (!shm_on_or_reply(c)) return;
  hark_shm_status *st;
  size_t n;
  hark_error *err = hark_shm_status_get(kserve_of(c)->shm, *q->name ? q->name : NULL, &st, &n);
  if (err) {
    hark_grpc_reply_error(c, err);
    return;
  }
  hark_arena *a = hark_arena_new();
  region_status *rs = take(a, n * sizeof *rs);
  regions_entry *entries = take(a, n * sizeof *entries);
  regions_entry **ptrs = take(a, n * sizeof *ptrs);
  for (size_t i = 0; i < n; i++) {
    rs[i] = (region_status)INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__REGION_STATUS__INIT;
    rs[i].name = st[i].name;
    rs[i].key = st[i].key;
    rs[i].offset = st[i].offset;
    rs[i].byte_size = st[i].byte_size;
    entries[i] =
        (regions_entry)INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__REGIONS_ENTRY__INIT;
    entries[i].key = st[i].name;
    entries[i].value = &rs[i];
    ptrs[i] = &entries[i];
  }
  Inference__SystemSharedMemoryStatusResponse r =
      INFERENCE__SYSTEM_SHARED_MEMORY_STATUS_RESPONSE__INIT;
  r.regions = ptrs;
  r.n_regions = n;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
  hark_arena_free(a);
  hark_shm_status_free(st, n);
}

static void shm_register(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__SystemSharedMemoryRegisterRequest *q =
      (Inference__SystemSharedMemoryRegisterRequest *)msg;
  if (!shm_on_or_reply(c)) return;
  hark_error *err = hark_shm_register(kserve_of(c)->shm, q->name, q->key, q->offset, q->byte_size);
  if (err) {
    hark_grpc_reply_error(c, err); /* ALREADY_EXISTS for a name in use, as Triton */
    return;
  }
  Inference__SystemSharedMemoryRegisterResponse r =
      INFERENCE__SYSTEM_SHARED_MEMORY_REGISTER_RESPONSE__INIT;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

static void shm_unregister(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__SystemSharedMemoryUnregisterRequest *q =
      (Inference__SystemSharedMemoryUnregisterRequest *)msg;
  if (!shm_on_or_reply(c)) return;
  hark_shm_unregister(kserve_of(c)->shm, *q->name ? q->name : NULL);
  Inference__SystemSharedMemoryUnregisterResponse r =
      INFERENCE__SYSTEM_SHARED_MEMORY_UNREGISTER_RESPONSE__INIT;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

static void cuda_shm(hark_grpc_call *c, ProtobufCMessage *msg) {
  hark_grpc_reply(c, NULL, HARK_GRPC_UNIMPLEMENTED,
                  "CUDA shared memory is not supported by this server (no GPU support); use "
                  "system shared memory");
}

/* ---- log and trace settings ------------------------------------------------------ */

typedef Inference__LogSettingsRequest__SettingValue log_in;
typedef Inference__LogSettingsResponse__SettingValue log_out;
typedef Inference__LogSettingsResponse__SettingsEntry log_entry;

static hark_setting_value log_value(const log_in *v) {
  hark_setting_value r = {.type = HARK_SETTING_OTHER};
  if (!v) return r;
  switch (v->parameter_choice_case) {
  case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM:
    r.type = HARK_SETTING_BOOL;
    r.b = v->bool_param;
    break;
  case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM:
    r.type = HARK_SETTING_UINT;
    r.u = v->uint32_param;
    break;
  case INFERENCE__LOG_SETTINGS_REQUEST__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM:
    r.type = HARK_SETTING_STRING;
    r.s = v->string_param;
    break;
  default: break;
  }
  return r;
}

/* Triton's LogSettings: the named settings change (all or none), and the
 * reply holds every setting as it now is. */
static void log_settings(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__LogSettingsRequest *q = (Inference__LogSettingsRequest *)msg;
  hark_log_settings st;
  hark_log_settings_read(&st);
  for (size_t i = 0; i < q->n_settings; i++) {
    hark_setting_value v = log_value(q->settings[i]->value);
    hark_error *err = hark_log_settings_set(&st, q->settings[i]->key, &v);
    if (err) {
      hark_grpc_reply_error(c, err);
      return;
    }
  }
  if (q->n_settings) {
    hark_log_settings_apply(&st);
    HARK_INFO(
        "log settings changed over gRPC: info %d, warning %d, error %d, verbose %u, "
        "format %s",
        st.info, st.warning, st.error, st.verbose, hark_log_format_name(st.format));
  }
  enum { N = 6 };
  static const char *const names[N] = {"log_file",  "log_info",          "log_warning",
                                       "log_error", "log_verbose_level", "log_format"};
  log_out vals[N];
  log_entry entries[N], *ptrs[N];
  for (int i = 0; i < N; i++) {
    vals[i] = (log_out)INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__INIT;
    entries[i] = (log_entry)INFERENCE__LOG_SETTINGS_RESPONSE__SETTINGS_ENTRY__INIT;
    entries[i].key = (char *)names[i];
    entries[i].value = &vals[i];
    ptrs[i] = &entries[i];
  }
  bool flags[3] = {st.info, st.warning, st.error};
  for (int i = 1; i <= 3; i++) {
    vals[i].parameter_choice_case =
        INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_BOOL_PARAM;
    vals[i].bool_param = flags[i - 1];
  }
  vals[0].parameter_choice_case =
      INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
  vals[0].string_param = "";
  vals[4].parameter_choice_case =
      INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_UINT32_PARAM;
  vals[4].uint32_param = st.verbose;
  vals[5].parameter_choice_case =
      INFERENCE__LOG_SETTINGS_RESPONSE__SETTING_VALUE__PARAMETER_CHOICE_STRING_PARAM;
  vals[5].string_param = (char *)hark_log_format_name(st.format);
  Inference__LogSettingsResponse r = INFERENCE__LOG_SETTINGS_RESPONSE__INIT;
  r.settings = ptrs;
  r.n_settings = N;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

typedef Inference__TraceSettingResponse__SettingValue trace_out;
typedef Inference__TraceSettingResponse__SettingsEntry trace_entry;

/* Triton's TraceSetting, global or for one model: hark does not trace, so
 * an update is accepted only where it changes nothing. */
static void trace_setting(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__TraceSettingRequest *q = (Inference__TraceSettingRequest *)msg;
  if (*q->model_name) {
    hark_model *model = acquire_or_reply(c, q->model_name, "");
    if (!model) return;
    hark_model_release(model);
  }
  for (size_t i = 0; i < q->n_settings; i++) {
    const Inference__TraceSettingRequest__SettingValue *v = q->settings[i]->value;
    hark_error *err = hark_trace_setting_check(
        q->settings[i]->key, v ? (const char *const *)v->value : NULL, v ? v->n_value : 0);
    if (err) {
      hark_grpc_reply_error(c, err);
      return;
    }
  }
  enum { N = 8 };
  trace_out vals[N];
  trace_entry entries[N], *ptrs[N];
  char *one[N];
  size_t n = hark_n_trace_settings < N ? hark_n_trace_settings : N;
  for (size_t i = 0; i < n; i++) {
    one[i] = (char *)hark_trace_settings[i].value;
    vals[i] = (trace_out)INFERENCE__TRACE_SETTING_RESPONSE__SETTING_VALUE__INIT;
    vals[i].value = &one[i];
    vals[i].n_value = 1;
    entries[i] = (trace_entry)INFERENCE__TRACE_SETTING_RESPONSE__SETTINGS_ENTRY__INIT;
    entries[i].key = (char *)hark_trace_settings[i].name;
    entries[i].value = &vals[i];
    ptrs[i] = &entries[i];
  }
  Inference__TraceSettingResponse r = INFERENCE__TRACE_SETTING_RESPONSE__INIT;
  r.settings = ptrs;
  r.n_settings = n;
  hark_grpc_reply(c, &r.base, HARK_GRPC_OK, NULL);
}

/* ---- the method tables ------------------------------------------------------------- */

#define REFUSE HARK_GRPC_REFUSE_DRAINING
static const hark_grpc_method kserve_methods[] = {
    {"ServerLive", &inference__server_live_request__descriptor, server_live, 0, NULL, NULL,
     HARK_API_HEALTH, NULL},
    {"ServerReady", &inference__server_ready_request__descriptor, server_ready, 0, NULL, NULL,
     HARK_API_HEALTH, NULL},
    {"ModelReady", &inference__model_ready_request__descriptor, model_ready, 0, NULL, NULL,
     HARK_API_HEALTH, NULL},
    {"ServerMetadata", &inference__server_metadata_request__descriptor, server_metadata, 0, NULL,
     NULL, HARK_API_METADATA, NULL},
    {"ModelMetadata", &inference__model_metadata_request__descriptor, model_metadata, 0, NULL, NULL,
     HARK_API_METADATA, NULL},
    {"ModelInfer", &inference__model_infer_request__descriptor, hark_kserve_grpc_infer, REFUSE,
     NULL, NULL, HARK_API_INFERENCE, NULL},
    {"ModelStreamInfer", &inference__model_infer_request__descriptor, hark_kserve_grpc_stream_infer,
     HARK_GRPC_STREAMING | REFUSE, NULL, NULL, HARK_API_INFERENCE,
     hark_kserve_grpc_stream_infer_refused},
    {"ModelConfig", &inference__model_config_request__descriptor, model_config, 0, NULL, NULL,
     HARK_API_MODEL_CONFIG, NULL},
    {"ModelStatistics", &inference__model_statistics_request__descriptor, model_statistics, 0, NULL,
     NULL, HARK_API_STATISTICS, NULL},
    {"RepositoryIndex", &inference__repository_index_request__descriptor, repository_index, 0, NULL,
     NULL, HARK_API_MODEL_REPOSITORY, NULL},
    {"RepositoryModelLoad", &inference__repository_model_load_request__descriptor, repository_load,
     0, NULL, NULL, HARK_API_MODEL_REPOSITORY, NULL},
    {"RepositoryModelUnload", &inference__repository_model_unload_request__descriptor,
     repository_unload, 0, NULL, NULL, HARK_API_MODEL_REPOSITORY, NULL},
    {"SystemSharedMemoryStatus", &inference__system_shared_memory_status_request__descriptor,
     shm_status, 0, NULL, NULL, HARK_API_SHARED_MEMORY, NULL},
    {"SystemSharedMemoryRegister", &inference__system_shared_memory_register_request__descriptor,
     shm_register, 0, NULL, NULL, HARK_API_SHARED_MEMORY, NULL},
    {"SystemSharedMemoryUnregister",
     &inference__system_shared_memory_unregister_request__descriptor, shm_unregister, 0, NULL, NULL,
     HARK_API_SHARED_MEMORY, NULL},
    {"CudaSharedMemoryStatus", &inference__cuda_shared_memory_status_request__descriptor, cuda_shm,
     0, NULL, NULL, HARK_API_SHARED_MEMORY, NULL},
    {"CudaSharedMemoryRegister", &inference__cuda_shared_memory_register_request__descriptor,
     cuda_shm, 0, NULL, NULL, HARK_API_SHARED_MEMORY, NULL},
    {"CudaSharedMemoryUnregister", &inference__cuda_shared_memory_unregister_request__descriptor,
     cuda_shm, 0, NULL, NULL, HARK_API_SHARED_MEMORY, NULL},
    {"TraceSetting", &inference__trace_setting_request__descriptor, trace_setting, 0, NULL, NULL,
     HARK_API_TRACE, NULL},
    {"LogSettings", &inference__log_settings_request__descriptor, log_settings, 0, NULL, NULL,
     HARK_API_LOGGING, NULL},
};

static const hark_grpc_method health_methods[] = {
    {"Check", &grpc__health__v1__health_check_request__descriptor, health_check, 0, NULL, NULL,
     HARK_API_HEALTH, NULL},
};

static const hark_grpc_service kserve_service = {"inference.GRPCInferenceService", kserve_methods,
                                                 sizeof kserve_methods / sizeof kserve_methods[0]};
static const hark_grpc_service health_service = {"grpc.health.v1.Health", health_methods,
                                                 sizeof health_methods / sizeof health_methods[0]};

hark_error *hark_kserve_grpc_register(hark_grpc *g, hark_kserve *ks) {
  hark_error *err = hark_grpc_add_service(g, &kserve_service, ks);
  return err ? err : hark_grpc_add_service(g, &health_service, ks);
}
