/*
 * grpc_kserve.c — the KServe v2 gRPC methods that are not inference
 * (health, metadata, configuration, statistics, repository) and
 * grpc.health.v1 Check,
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

/* The model a request names (name, version string), with a reference;
 * NULL when it already replied with the error. Frees msg either way. */
static hark_model *acquire_or_reply(hark_grpc_call *c, const char *name, const char *version_s,
                                    ProtobufCMessage *msg) {
  int64_t version;
  hark_model *model = NULL;
  hark_error *err = hark_grpc_parse_version(version_s, &version);
  if (!err) err = hark_server_model_acquire(c->g->server, name, version, &model);
  FREE_MSG(msg);
  if (err) hark_grpc_reply_error(c, err);
  return model;
}

static void model_metadata(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelMetadataRequest *q = (Inference__ModelMetadataRequest *)msg;
  hark_model *model = acquire_or_reply(c, q->name, q->version, msg);
  if (!model) return;
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

/* ---- configuration ------------------------------------------------------------ */

/*
 * ModelConfig: the parsed config (hark_model_config) as Triton's
 * inference.ModelConfig. The reply's sub-messages borrow the config's
 * strings (the model reference keeps them alive until the reply is packed)
 * and live in blocks that cfg_new() records, freed together afterwards.
 */
typedef struct cfg_pool {
  void **blocks;
  size_t n, cap;
  bool oom;
} cfg_pool;

/* n zeroed bytes owned by the pool; NULL (and p->oom) when out of memory. */
static void *cfg_new(cfg_pool *p, size_t n) {
  if (p->oom) return NULL;
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 32;
    void **b = realloc(p->blocks, cap * sizeof *b);
    if (!b) {
      p->oom = true;
      return NULL;
    }
    p->blocks = b;
    p->cap = cap;
  }
  void *m = calloc(1, n ? n : 1);
  if (!m) p->oom = true;
  else p->blocks[p->n++] = m;
  return m;
}

static void cfg_pool_free(cfg_pool *p) {
  for (size_t i = 0; i < p->n; i++) free(p->blocks[i]);
  free(p->blocks);
}

/* A copy of `init` (a message's INIT value) owned by the pool. */
static void *cfg_copy(cfg_pool *p, const void *init, size_t n) {
  void *m = cfg_new(p, n);
  if (m) memcpy(m, init, n);
  return m;
}
#define CFG_MSG(p, type, init) ((type *)cfg_copy((p), &(type)init, sizeof(type)))

/* An array of n pointers (at least one slot, so n == 0 stays valid). */
#define CFG_PTRS(p, type, n) ((type **)cfg_new((p), ((n) ? (n) : 1) * sizeof(type *)))

static Inference__DataType cfg_dtype(hark_datatype dt) {
  /* hark's enum follows Triton's DataType numbering. */
  return (unsigned)dt < HARK_TYPE_COUNT_ ? (Inference__DataType)dt : INFERENCE__DATA_TYPE__TYPE_INVALID;
}

static int64_t *cfg_dims(cfg_pool *p, const int64_t *dims, uint32_t n) {
  int64_t *d = cfg_new(p, (n ? n : 1) * sizeof *d);
  if (d && n) memcpy(d, dims, n * sizeof *d);
  return d;
}

static int32_t *cfg_sizes(cfg_pool *p, const uint32_t *v, uint32_t n) {
  int32_t *d = cfg_new(p, (n ? n : 1) * sizeof *d);
  for (uint32_t i = 0; d && i < n; i++) d[i] = (int32_t)v[i];
  return d;
}

static Inference__ModelVersionPolicy *cfg_version_policy(cfg_pool *p, const hark_version_policy *vp) {
  Inference__ModelVersionPolicy *m =
      CFG_MSG(p, Inference__ModelVersionPolicy, INFERENCE__MODEL_VERSION_POLICY__INIT);
  if (!m) return NULL;
  if (vp->kind == HARK_VERSION_ALL) {
    m->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL;
    m->all = CFG_MSG(p, Inference__ModelVersionPolicy__All, INFERENCE__MODEL_VERSION_POLICY__ALL__INIT);
  } else if (vp->kind == HARK_VERSION_SPECIFIC) {
    m->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC;
    m->specific = CFG_MSG(p, Inference__ModelVersionPolicy__Specific,
                          INFERENCE__MODEL_VERSION_POLICY__SPECIFIC__INIT);
    if (m->specific) {
      m->specific->versions = cfg_dims(p, vp->versions, vp->n_versions);
      m->specific->n_versions = vp->n_versions;
    }
  } else {
    m->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST;
    m->latest =
        CFG_MSG(p, Inference__ModelVersionPolicy__Latest, INFERENCE__MODEL_VERSION_POLICY__LATEST__INIT);
    if (m->latest) m->latest->num_versions = vp->latest_num_versions;
  }
  return m;
}

static void cfg_ios(cfg_pool *p, const hark_model_config *cfg, Inference__ModelConfig *m) {
  m->input = CFG_PTRS(p, Inference__ModelInput, cfg->n_inputs);
  m->output = CFG_PTRS(p, Inference__ModelOutput, cfg->n_outputs);
  if (!m->input || !m->output) return;
  for (uint32_t i = 0; i < cfg->n_inputs; i++) {
    Inference__ModelInput *t = CFG_MSG(p, Inference__ModelInput, INFERENCE__MODEL_INPUT__INIT);
    if (!t) return;
    t->name = cfg->inputs[i].name;
    t->data_type = cfg_dtype(cfg->inputs[i].datatype);
    t->dims = cfg_dims(p, cfg->inputs[i].dims, cfg->inputs[i].ndims);
    t->n_dims = cfg->inputs[i].ndims;
    t->optional = cfg->inputs[i].optional;
    m->input[m->n_input++] = t;
  }
  for (uint32_t i = 0; i < cfg->n_outputs; i++) {
    Inference__ModelOutput *t = CFG_MSG(p, Inference__ModelOutput, INFERENCE__MODEL_OUTPUT__INIT);
    if (!t) return;
    t->name = cfg->outputs[i].name;
    t->data_type = cfg_dtype(cfg->outputs[i].datatype);
    t->dims = cfg_dims(p, cfg->outputs[i].dims, cfg->outputs[i].ndims);
    t->n_dims = cfg->outputs[i].ndims;
    m->output[m->n_output++] = t;
  }
}

static void cfg_instance_groups(cfg_pool *p, const hark_model_config *cfg, Inference__ModelConfig *m) {
  /* Triton numbers the kinds AUTO, GPU, CPU, MODEL; hark AUTO, CPU, GPU, MODEL. */
  static const Inference__ModelInstanceGroup__Kind kinds[] = {
      [HARK_KIND_AUTO] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_AUTO,
      [HARK_KIND_CPU] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU,
      [HARK_KIND_GPU] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU,
      [HARK_KIND_MODEL] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_MODEL,
  };
  m->instance_group = CFG_PTRS(p, Inference__ModelInstanceGroup, cfg->n_instance_groups);
  for (uint32_t i = 0; m->instance_group && i < cfg->n_instance_groups; i++) {
    const hark_instance_group *g = &cfg->instance_groups[i];
    Inference__ModelInstanceGroup *t =
        CFG_MSG(p, Inference__ModelInstanceGroup, INFERENCE__MODEL_INSTANCE_GROUP__INIT);
    if (!t) return;
    if (g->name) t->name = g->name;
    t->count = (int32_t)g->count;
    t->kind = (unsigned)g->kind < sizeof kinds / sizeof kinds[0] ? kinds[g->kind] : 0;
    m->instance_group[m->n_instance_group++] = t;
  }
}

static Inference__ModelQueuePolicy *cfg_queue_policy(cfg_pool *p, const hark_queue_policy *q) {
  Inference__ModelQueuePolicy *m =
      CFG_MSG(p, Inference__ModelQueuePolicy, INFERENCE__MODEL_QUEUE_POLICY__INIT);
  if (!m) return NULL;
  m->timeout_action = q->timeout_action == HARK_TIMEOUT_DELAY
                          ? INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__DELAY
                          : INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__REJECT;
  m->default_timeout_microseconds = q->default_timeout_us;
  m->allow_timeout_override = q->allow_timeout_override;
  m->max_queue_size = q->max_queue_size;
  return m;
}

static Inference__ModelDynamicBatching *cfg_dynamic(cfg_pool *p, const hark_dynamic_batching *db) {
  typedef Inference__ModelDynamicBatching__PriorityQueuePolicyEntry entry;
  Inference__ModelDynamicBatching *m =
      CFG_MSG(p, Inference__ModelDynamicBatching, INFERENCE__MODEL_DYNAMIC_BATCHING__INIT);
  if (!m) return NULL;
  m->preferred_batch_size = cfg_sizes(p, db->preferred_batch_size, db->n_preferred_batch_size);
  m->n_preferred_batch_size = db->n_preferred_batch_size;
  m->max_queue_delay_microseconds = db->max_queue_delay_us;
  m->preserve_ordering = db->preserve_ordering;
  m->priority_levels = db->priority_levels;
  m->default_priority_level = db->default_priority_level;
  m->default_queue_policy = cfg_queue_policy(p, &db->default_queue_policy);
  m->priority_queue_policy = CFG_PTRS(p, entry, db->n_priority_queue_policy);
  for (uint32_t i = 0; m->priority_queue_policy && i < db->n_priority_queue_policy; i++) {
    entry *e = CFG_MSG(p, entry, INFERENCE__MODEL_DYNAMIC_BATCHING__PRIORITY_QUEUE_POLICY_ENTRY__INIT);
    if (!e) break;
    e->key = db->priority_queue_policy[i].level;
    e->value = cfg_queue_policy(p, &db->priority_queue_policy[i].policy);
    m->priority_queue_policy[m->n_priority_queue_policy++] = e;
  }
  return m;
}

static Inference__ModelSequenceBatching__ControlInput *cfg_control(cfg_pool *p,
                                                                   const hark_seq_control *ctl) {
  typedef Inference__ModelSequenceBatching__Control control;
  Inference__ModelSequenceBatching__ControlInput *ci =
      CFG_MSG(p, Inference__ModelSequenceBatching__ControlInput,
              INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL_INPUT__INIT);
  control *k = CFG_MSG(p, control, INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__INIT);
  control **list = CFG_PTRS(p, control, 1);
  if (!ci || !k || !list) return NULL;
  ci->name = ctl->name;
  ci->control = list;
  ci->n_control = 1;
  list[0] = k;
  k->kind = (Inference__ModelSequenceBatching__Control__Kind)ctl->kind; /* same order */
  if (ctl->kind == HARK_SEQ_CONTROL_CORRID) {
    k->data_type = cfg_dtype(ctl->datatype);
  } else if (ctl->datatype == HARK_TYPE_FP32) {
    k->fp32_false_true = cfg_new(p, 2 * sizeof(float));
    if (k->fp32_false_true) memcpy(k->fp32_false_true, ctl->fp32_false_true, 2 * sizeof(float));
    k->n_fp32_false_true = k->fp32_false_true ? 2 : 0;
  } else if (ctl->datatype == HARK_TYPE_BOOL) {
    k->bool_false_true = cfg_new(p, 2 * sizeof(protobuf_c_boolean));
    for (int i = 0; k->bool_false_true && i < 2; i++) k->bool_false_true[i] = ctl->bool_false_true[i];
    k->n_bool_false_true = k->bool_false_true ? 2 : 0;
  } else {
    k->int32_false_true = cfg_new(p, 2 * sizeof(int32_t));
    if (k->int32_false_true) memcpy(k->int32_false_true, ctl->int32_false_true, 2 * sizeof(int32_t));
    k->n_int32_false_true = k->int32_false_true ? 2 : 0;
  }
  return ci;
}

static Inference__ModelSequenceBatching__State *cfg_state(cfg_pool *p, const hark_seq_state *st) {
  typedef Inference__ModelSequenceBatching__InitialState initial;
  Inference__ModelSequenceBatching__State *m = CFG_MSG(p, Inference__ModelSequenceBatching__State,
                                                       INFERENCE__MODEL_SEQUENCE_BATCHING__STATE__INIT);
  if (!m) return NULL;
  m->input_name = st->input_name;
  m->output_name = st->output_name;
  m->data_type = cfg_dtype(st->datatype);
  m->dims = cfg_dims(p, st->dims, st->ndims);
  m->n_dims = st->ndims;
  m->initial_state = CFG_PTRS(p, initial, 1);
  if (st->has_initial && m->initial_state) {
    initial *i = CFG_MSG(p, initial, INFERENCE__MODEL_SEQUENCE_BATCHING__INITIAL_STATE__INIT);
    if (!i) return m;
    i->data_type = m->data_type;
    i->dims = cfg_dims(p, st->initial_dims, st->initial_ndims);
    i->n_dims = st->initial_ndims;
    i->state_data_case = INFERENCE__MODEL_SEQUENCE_BATCHING__INITIAL_STATE__STATE_DATA_ZERO_DATA;
    i->zero_data = true;
    m->initial_state[m->n_initial_state++] = i;
  }
  return m;
}

static Inference__ModelSequenceBatching *cfg_sequence(cfg_pool *p, const hark_sequence_batching *sb) {
  Inference__ModelSequenceBatching *m =
      CFG_MSG(p, Inference__ModelSequenceBatching, INFERENCE__MODEL_SEQUENCE_BATCHING__INIT);
  if (!m) return NULL;
  m->max_sequence_idle_microseconds = sb->max_sequence_idle_us;
  if (sb->strategy == HARK_SEQ_OLDEST) {
    Inference__ModelSequenceBatching__StrategyOldest *s =
        CFG_MSG(p, Inference__ModelSequenceBatching__StrategyOldest,
                INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_OLDEST__INIT);
    if (!s) return m;
    s->max_candidate_sequences = (int32_t)sb->max_candidate_sequences;
    s->preferred_batch_size = cfg_sizes(p, sb->preferred_batch_size, sb->n_preferred_batch_size);
    s->n_preferred_batch_size = sb->n_preferred_batch_size;
    s->max_queue_delay_microseconds = sb->oldest_max_queue_delay_us;
    m->strategy_choice_case = INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_OLDEST;
    m->oldest = s;
  } else {
    Inference__ModelSequenceBatching__StrategyDirect *s =
        CFG_MSG(p, Inference__ModelSequenceBatching__StrategyDirect,
                INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_DIRECT__INIT);
    if (!s) return m;
    s->max_queue_delay_microseconds = sb->direct_max_queue_delay_us;
    s->minimum_slot_utilization = sb->minimum_slot_utilization;
    m->strategy_choice_case = INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_DIRECT;
    m->direct = s;
  }
  m->control_input = CFG_PTRS(p, Inference__ModelSequenceBatching__ControlInput, sb->n_controls);
  for (uint32_t i = 0; m->control_input && i < sb->n_controls; i++) {
    Inference__ModelSequenceBatching__ControlInput *ci = cfg_control(p, &sb->controls[i]);
    if (ci) m->control_input[m->n_control_input++] = ci;
  }
  m->state = CFG_PTRS(p, Inference__ModelSequenceBatching__State, sb->n_states);
  for (uint32_t i = 0; m->state && i < sb->n_states; i++) {
    Inference__ModelSequenceBatching__State *st = cfg_state(p, &sb->states[i]);
    if (st) m->state[m->n_state++] = st;
  }
  return m;
}

/* A step's input_map or output_map (protobuf-c gives both entry types the
 * same layout: base, key, value). */
static void cfg_string_map(cfg_pool *p, const ProtobufCMessageDescriptor *d, const hark_kv *kv,
                           uint32_t n, size_t *n_out, void ***out) {
  typedef Inference__ModelEnsembling__Step__InputMapEntry entry;
  *out = (void **)CFG_PTRS(p, entry, n);
  for (uint32_t i = 0; *out && i < n; i++) {
    entry *e = cfg_new(p, sizeof *e);
    if (!e) return;
    protobuf_c_message_init(d, e);
    e->key = kv[i].key;
    e->value = kv[i].value;
    (*out)[(*n_out)++] = e;
  }
}

static Inference__ModelEnsembling *cfg_ensemble(cfg_pool *p, const hark_model_config *cfg) {
  typedef Inference__ModelEnsembling__Step step;
  Inference__ModelEnsembling *m = CFG_MSG(p, Inference__ModelEnsembling, INFERENCE__MODEL_ENSEMBLING__INIT);
  if (!m) return NULL;
  m->step = CFG_PTRS(p, step, cfg->n_ensemble_steps);
  for (uint32_t i = 0; m->step && i < cfg->n_ensemble_steps; i++) {
    const hark_ensemble_step *s = &cfg->ensemble_steps[i];
    step *t = CFG_MSG(p, step, INFERENCE__MODEL_ENSEMBLING__STEP__INIT);
    if (!t) break;
    t->model_name = s->model_name;
    t->model_version = s->model_version;
    cfg_string_map(p, &inference__model_ensembling__step__input_map_entry__descriptor, s->input_map,
                   s->n_input_map, &t->n_input_map, (void ***)&t->input_map);
    cfg_string_map(p, &inference__model_ensembling__step__output_map_entry__descriptor, s->output_map,
                   s->n_output_map, &t->n_output_map, (void ***)&t->output_map);
    m->step[m->n_step++] = t;
  }
  return m;
}

static void cfg_parameters(cfg_pool *p, const hark_model_config *cfg, Inference__ModelConfig *m) {
  typedef Inference__ModelConfig__ParametersEntry entry;
  m->parameters = CFG_PTRS(p, entry, cfg->n_parameters);
  for (uint32_t i = 0; m->parameters && i < cfg->n_parameters; i++) {
    entry *e = CFG_MSG(p, entry, INFERENCE__MODEL_CONFIG__PARAMETERS_ENTRY__INIT);
    Inference__ModelParameter *v = CFG_MSG(p, Inference__ModelParameter, INFERENCE__MODEL_PARAMETER__INIT);
    if (!e || !v) return;
    e->key = cfg->parameters[i].key;
    v->string_value = cfg->parameters[i].value;
    e->value = v;
    m->parameters[m->n_parameters++] = e;
  }
}

/* The whole config; NULL when out of memory (the pool then holds the parts). */
static Inference__ModelConfig *cfg_message(cfg_pool *p, const hark_model_config *cfg) {
  Inference__ModelConfig *m = CFG_MSG(p, Inference__ModelConfig, INFERENCE__MODEL_CONFIG__INIT);
  if (!m) return NULL;
  if (cfg->name) m->name = cfg->name;
  if (cfg->platform) m->platform = cfg->platform;
  if (cfg->backend) m->backend = cfg->backend;
  if (cfg->default_model_filename) m->default_model_filename = cfg->default_model_filename;
  m->version_policy = cfg_version_policy(p, &cfg->version_policy);
  m->max_batch_size = (int32_t)cfg->max_batch_size;
  cfg_ios(p, cfg, m);
  cfg_instance_groups(p, cfg, m);
  /* One scheduling choice, as in Triton's oneof. */
  if (cfg->n_ensemble_steps) {
    m->scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_ENSEMBLE_SCHEDULING;
    m->ensemble_scheduling = cfg_ensemble(p, cfg);
  } else if (cfg->sequence_batching.enabled) {
    m->scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_SEQUENCE_BATCHING;
    m->sequence_batching = cfg_sequence(p, &cfg->sequence_batching);
  } else if (cfg->dynamic_batching.enabled) {
    m->scheduling_choice_case = INFERENCE__MODEL_CONFIG__SCHEDULING_CHOICE_DYNAMIC_BATCHING;
    m->dynamic_batching = cfg_dynamic(p, &cfg->dynamic_batching);
  }
  cfg_parameters(p, cfg, m);
  m->model_transaction_policy =
      CFG_MSG(p, Inference__ModelTransactionPolicy, INFERENCE__MODEL_TRANSACTION_POLICY__INIT);
  if (m->model_transaction_policy) m->model_transaction_policy->decoupled = cfg->decoupled;
  return p->oom ? NULL : m;
}

static void model_config(hark_grpc_call *c, ProtobufCMessage *msg) {
  Inference__ModelConfigRequest *q = (Inference__ModelConfigRequest *)msg;
  hark_model *model = acquire_or_reply(c, q->name, q->version, msg);
  if (!model) return;
  cfg_pool pool = {0};
  Inference__ModelConfigResponse r = INFERENCE__MODEL_CONFIG_RESPONSE__INIT;
  r.config = cfg_message(&pool, hark_model_get_config(model));
  if (r.config) hark_grpc_reply(c, &r.base, GRPC_STATUS_OK, NULL);
  else hark_grpc_reply_error(c, oom());
  cfg_pool_free(&pool);
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
    {KSERVE "ServerLive", &inference__server_live_request__descriptor, server_live, false, NULL, NULL},
    {KSERVE "ServerReady", &inference__server_ready_request__descriptor, server_ready, false, NULL, NULL},
    {KSERVE "ModelReady", &inference__model_ready_request__descriptor, model_ready, false, NULL, NULL},
    {KSERVE "ServerMetadata", &inference__server_metadata_request__descriptor, server_metadata, false, NULL, NULL},
    {KSERVE "ModelMetadata", &inference__model_metadata_request__descriptor, model_metadata, false, NULL, NULL},
    {KSERVE "ModelInfer", &inference__model_infer_request__descriptor, hark_grpc_model_infer, false, NULL, NULL},
    {KSERVE "ModelStreamInfer", &inference__model_infer_request__descriptor,
     hark_grpc_stream_infer, true, NULL, NULL},
    {KSERVE "ModelConfig", &inference__model_config_request__descriptor, model_config, false, NULL, NULL},
    {KSERVE "ModelStatistics", &inference__model_statistics_request__descriptor,
     model_statistics, false, NULL, NULL},
    {KSERVE "RepositoryIndex", &inference__repository_index_request__descriptor,
     repository_index, false, NULL, NULL},
    {KSERVE "RepositoryModelLoad", &inference__repository_model_load_request__descriptor,
     repository_load, false, NULL, NULL},
    {KSERVE "RepositoryModelUnload", &inference__repository_model_unload_request__descriptor,
     repository_unload, false, NULL, NULL},
    {"/grpc.health.v1.Health/Check", &grpc__health__v1__health_check_request__descriptor,
     health_check, false, NULL, NULL},
};

const hark_grpc_method *hark_grpc_method_find(const char *path, size_t len) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strlen(methods[i].path) == len && memcmp(methods[i].path, path, len) == 0)
      return &methods[i];
  return hark_grpc_riva_method_find(path, len);
}
