/*
 * config_pb.c — a model's parsed config (hark_model_config) as Triton's
 * inference.ModelConfig, for the gRPC ModelConfig method. The message's
 * parts borrow the config's strings (the caller's model reference keeps
 * them alive until the reply is packed) and live in one arena, freed
 * together afterwards.
 */
#include <string.h>

#include "frontend/kserve/kserve_grpc.h"
#include "hark/config.h"
#include "util/alloc.h"

/* ---- configuration ------------------------------------------------------------ */

/* n zeroed bytes in the arena: small, internal (util/alloc.h). */
static void *cfg_new(hark_arena *p, size_t n) {
  void *m = hark_arena_alloc(p, n ? n : 1);
  if (!m) hark_oom("model config", n);
  return m;
}

/* A copy of `init` (a message's INIT value) owned by the pool. */
static void *cfg_copy(hark_arena *p, const void *init, size_t n) {
  return memcpy(cfg_new(p, n), init, n);
}
#define CFG_MSG(p, type, init) ((type *)cfg_copy((p), &(type)init, sizeof(type)))

/* An array of n pointers (at least one slot, so n == 0 stays valid). */
#define CFG_PTRS(p, type, n) ((type **)cfg_new((p), ((n) ? (n) : 1) * sizeof(type *)))

static Inference__DataType cfg_dtype(hark_datatype dt) {
  /* hark's enum follows Triton's DataType numbering. */
  return (unsigned)dt < HARK_TYPE_COUNT_ ? (Inference__DataType)dt
                                         : INFERENCE__DATA_TYPE__TYPE_INVALID;
}

static int64_t *cfg_dims(hark_arena *p, const int64_t *dims, uint32_t n) {
  int64_t *d = cfg_new(p, (n ? n : 1) * sizeof *d);
  if (n) memcpy(d, dims, n * sizeof *d);
  return d;
}

static int32_t *cfg_sizes(hark_arena *p, const uint32_t *v, uint32_t n) {
  int32_t *d = cfg_new(p, (n ? n : 1) * sizeof *d);
  for (uint32_t i = 0; i < n; i++) d[i] = (int32_t)v[i];
  return d;
}

static Inference__ModelVersionPolicy *cfg_version_policy(hark_arena *p,
                                                         const hark_version_policy *vp) {
  Inference__ModelVersionPolicy *m =
      CFG_MSG(p, Inference__ModelVersionPolicy, INFERENCE__MODEL_VERSION_POLICY__INIT);
  if (vp->kind == HARK_VERSION_ALL) {
    m->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_ALL;
    m->all =
        CFG_MSG(p, Inference__ModelVersionPolicy__All, INFERENCE__MODEL_VERSION_POLICY__ALL__INIT);
  } else if (vp->kind == HARK_VERSION_SPECIFIC) {
    m->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_SPECIFIC;
    m->specific = CFG_MSG(p, Inference__ModelVersionPolicy__Specific,
                          INFERENCE__MODEL_VERSION_POLICY__SPECIFIC__INIT);
    m->specific->versions = cfg_dims(p, vp->versions, vp->n_versions);
    m->specific->n_versions = vp->n_versions;
  } else {
    m->policy_choice_case = INFERENCE__MODEL_VERSION_POLICY__POLICY_CHOICE_LATEST;
    m->latest = CFG_MSG(p, Inference__ModelVersionPolicy__Latest,
                        INFERENCE__MODEL_VERSION_POLICY__LATEST__INIT);
    m->latest->num_versions = vp->latest_num_versions;
  }
  return m;
}

static void cfg_ios(hark_arena *p, const hark_model_config *cfg, Inference__ModelConfig *m) {
  m->input = CFG_PTRS(p, Inference__ModelInput, cfg->n_inputs);
  m->output = CFG_PTRS(p, Inference__ModelOutput, cfg->n_outputs);
  for (uint32_t i = 0; i < cfg->n_inputs; i++) {
    Inference__ModelInput *t = CFG_MSG(p, Inference__ModelInput, INFERENCE__MODEL_INPUT__INIT);
    t->name = cfg->inputs[i].name;
    t->data_type = cfg_dtype(cfg->inputs[i].datatype);
    t->dims = cfg_dims(p, cfg->inputs[i].dims, cfg->inputs[i].ndims);
    t->n_dims = cfg->inputs[i].ndims;
    t->optional = cfg->inputs[i].optional;
    m->input[m->n_input++] = t;
  }
  for (uint32_t i = 0; i < cfg->n_outputs; i++) {
    Inference__ModelOutput *t = CFG_MSG(p, Inference__ModelOutput, INFERENCE__MODEL_OUTPUT__INIT);
    t->name = cfg->outputs[i].name;
    t->data_type = cfg_dtype(cfg->outputs[i].datatype);
    t->dims = cfg_dims(p, cfg->outputs[i].dims, cfg->outputs[i].ndims);
    t->n_dims = cfg->outputs[i].ndims;
    m->output[m->n_output++] = t;
  }
}

static void cfg_instance_groups(hark_arena *p, const hark_model_config *cfg,
                                Inference__ModelConfig *m) {
  /* Triton numbers the kinds AUTO, GPU, CPU, MODEL; hark AUTO, CPU, GPU, MODEL. */
  static const Inference__ModelInstanceGroup__Kind kinds[] = {
      [HARK_KIND_AUTO] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_AUTO,
      [HARK_KIND_CPU] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_CPU,
      [HARK_KIND_GPU] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_GPU,
      [HARK_KIND_MODEL] = INFERENCE__MODEL_INSTANCE_GROUP__KIND__KIND_MODEL,
  };
  m->instance_group = CFG_PTRS(p, Inference__ModelInstanceGroup, cfg->n_instance_groups);
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) {
    const hark_instance_group *g = &cfg->instance_groups[i];
    Inference__ModelInstanceGroup *t =
        CFG_MSG(p, Inference__ModelInstanceGroup, INFERENCE__MODEL_INSTANCE_GROUP__INIT);
    if (g->name) t->name = g->name;
    t->count = (int32_t)g->count;
    t->kind = (unsigned)g->kind < sizeof kinds / sizeof kinds[0] ? kinds[g->kind] : 0;
    m->instance_group[m->n_instance_group++] = t;
  }
}

static Inference__ModelQueuePolicy *cfg_queue_policy(hark_arena *p, const hark_queue_policy *q) {
  Inference__ModelQueuePolicy *m =
      CFG_MSG(p, Inference__ModelQueuePolicy, INFERENCE__MODEL_QUEUE_POLICY__INIT);
  m->timeout_action = q->timeout_action == HARK_TIMEOUT_DELAY
                          ? INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__DELAY
                          : INFERENCE__MODEL_QUEUE_POLICY__TIMEOUT_ACTION__REJECT;
  m->default_timeout_microseconds = q->default_timeout_us;
  m->allow_timeout_override = q->allow_timeout_override;
  m->max_queue_size = q->max_queue_size;
  return m;
}

static Inference__ModelDynamicBatching *cfg_dynamic(hark_arena *p,
                                                    const hark_dynamic_batching *db) {
  typedef Inference__ModelDynamicBatching__PriorityQueuePolicyEntry entry;
  Inference__ModelDynamicBatching *m =
      CFG_MSG(p, Inference__ModelDynamicBatching, INFERENCE__MODEL_DYNAMIC_BATCHING__INIT);
  m->preferred_batch_size = cfg_sizes(p, db->preferred_batch_size, db->n_preferred_batch_size);
  m->n_preferred_batch_size = db->n_preferred_batch_size;
  m->max_queue_delay_microseconds = db->max_queue_delay_us;
  m->preserve_ordering = db->preserve_ordering;
  m->priority_levels = db->priority_levels;
  m->default_priority_level = db->default_priority_level;
  m->default_queue_policy = cfg_queue_policy(p, &db->default_queue_policy);
  m->priority_queue_policy = CFG_PTRS(p, entry, db->n_priority_queue_policy);
  for (uint32_t i = 0; i < db->n_priority_queue_policy; i++) {
    entry *e =
        CFG_MSG(p, entry, INFERENCE__MODEL_DYNAMIC_BATCHING__PRIORITY_QUEUE_POLICY_ENTRY__INIT);
    e->key = db->priority_queue_policy[i].level;
    e->value = cfg_queue_policy(p, &db->priority_queue_policy[i].policy);
    m->priority_queue_policy[m->n_priority_queue_policy++] = e;
  }
  return m;
}

static Inference__ModelSequenceBatching__ControlInput *cfg_control(hark_arena *p,
                                                                   const hark_seq_control *ctl) {
  typedef Inference__ModelSequenceBatching__Control control;
  Inference__ModelSequenceBatching__ControlInput *ci =
      CFG_MSG(p, Inference__ModelSequenceBatching__ControlInput,
              INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL_INPUT__INIT);
  control *k = CFG_MSG(p, control, INFERENCE__MODEL_SEQUENCE_BATCHING__CONTROL__INIT);
  control **list = CFG_PTRS(p, control, 1);
  ci->name = ctl->name;
  ci->control = list;
  ci->n_control = 1;
  list[0] = k;
  k->kind = (Inference__ModelSequenceBatching__Control__Kind)ctl->kind; /* same order */
  if (ctl->kind == HARK_SEQ_CONTROL_CORRID) {
    k->data_type = cfg_dtype(ctl->datatype);
  } else if (ctl->datatype == HARK_TYPE_FP32) {
    k->fp32_false_true = cfg_new(p, 2 * sizeof(float));
    memcpy(k->fp32_false_true, ctl->fp32_false_true, 2 * sizeof(float));
    k->n_fp32_false_true = 2;
  } else if (ctl->datatype == HARK_TYPE_BOOL) {
    k->bool_false_true = cfg_new(p, 2 * sizeof(protobuf_c_boolean));
    for (int i = 0; i < 2; i++) k->bool_false_true[i] = ctl->bool_false_true[i];
    k->n_bool_false_true = 2;
  } else {
    k->int32_false_true = cfg_new(p, 2 * sizeof(int32_t));
    memcpy(k->int32_false_true, ctl->int32_false_true, 2 * sizeof(int32_t));
    k->n_int32_false_true = 2;
  }
  return ci;
}

static Inference__ModelSequenceBatching__State *cfg_state(hark_arena *p, const hark_seq_state *st) {
  typedef Inference__ModelSequenceBatching__InitialState initial;
  Inference__ModelSequenceBatching__State *m = CFG_MSG(
      p, Inference__ModelSequenceBatching__State, INFERENCE__MODEL_SEQUENCE_BATCHING__STATE__INIT);
  m->input_name = st->input_name;
  m->output_name = st->output_name;
  m->data_type = cfg_dtype(st->datatype);
  m->dims = cfg_dims(p, st->dims, st->ndims);
  m->n_dims = st->ndims;
  m->initial_state = CFG_PTRS(p, initial, 1);
  if (st->has_initial) {
    initial *i = CFG_MSG(p, initial, INFERENCE__MODEL_SEQUENCE_BATCHING__INITIAL_STATE__INIT);
    i->data_type = m->data_type;
    i->dims = cfg_dims(p, st->initial_dims, st->initial_ndims);
    i->n_dims = st->initial_ndims;
    i->state_data_case = INFERENCE__MODEL_SEQUENCE_BATCHING__INITIAL_STATE__STATE_DATA_ZERO_DATA;
    i->zero_data = true;
    m->initial_state[m->n_initial_state++] = i;
  }
  return m;
}

static Inference__ModelSequenceBatching *cfg_sequence(hark_arena *p,
                                                      const hark_sequence_batching *sb) {
  Inference__ModelSequenceBatching *m =
      CFG_MSG(p, Inference__ModelSequenceBatching, INFERENCE__MODEL_SEQUENCE_BATCHING__INIT);
  m->max_sequence_idle_microseconds = sb->max_sequence_idle_us;
  if (sb->strategy == HARK_SEQ_OLDEST) {
    Inference__ModelSequenceBatching__StrategyOldest *s =
        CFG_MSG(p, Inference__ModelSequenceBatching__StrategyOldest,
                INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_OLDEST__INIT);
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
    s->max_queue_delay_microseconds = sb->direct_max_queue_delay_us;
    s->minimum_slot_utilization = sb->minimum_slot_utilization;
    m->strategy_choice_case = INFERENCE__MODEL_SEQUENCE_BATCHING__STRATEGY_CHOICE_DIRECT;
    m->direct = s;
  }
  m->control_input = CFG_PTRS(p, Inference__ModelSequenceBatching__ControlInput, sb->n_controls);
  for (uint32_t i = 0; i < sb->n_controls; i++) {
    Inference__ModelSequenceBatching__ControlInput *ci = cfg_control(p, &sb->controls[i]);
    m->control_input[m->n_control_input++] = ci;
  }
  m->state = CFG_PTRS(p, Inference__ModelSequenceBatching__State, sb->n_states);
  for (uint32_t i = 0; i < sb->n_states; i++) {
    Inference__ModelSequenceBatching__State *st = cfg_state(p, &sb->states[i]);
    m->state[m->n_state++] = st;
  }
  return m;
}

/* A step's input_map or output_map (protobuf-c gives both entry types the
 * same layout: base, key, value). */
static void cfg_string_map(hark_arena *p, const ProtobufCMessageDescriptor *d, const hark_kv *kv,
                           uint32_t n, size_t *n_out, void ***out) {
  typedef Inference__ModelEnsembling__Step__InputMapEntry entry;
  *out = (void **)CFG_PTRS(p, entry, n);
  for (uint32_t i = 0; i < n; i++) {
    entry *e = cfg_new(p, sizeof *e);
    protobuf_c_message_init(d, e);
    e->key = kv[i].key;
    e->value = kv[i].value;
    (*out)[(*n_out)++] = e;
  }
}

static Inference__ModelEnsembling *cfg_ensemble(hark_arena *p, const hark_model_config *cfg) {
  typedef Inference__ModelEnsembling__Step step;
  Inference__ModelEnsembling *m =
      CFG_MSG(p, Inference__ModelEnsembling, INFERENCE__MODEL_ENSEMBLING__INIT);
  m->step = CFG_PTRS(p, step, cfg->n_ensemble_steps);
  for (uint32_t i = 0; i < cfg->n_ensemble_steps; i++) {
    const hark_ensemble_step *s = &cfg->ensemble_steps[i];
    step *t = CFG_MSG(p, step, INFERENCE__MODEL_ENSEMBLING__STEP__INIT);
    t->model_name = s->model_name;
    t->model_version = s->model_version;
    cfg_string_map(p, &inference__model_ensembling__step__input_map_entry__descriptor, s->input_map,
                   s->n_input_map, &t->n_input_map, (void ***)&t->input_map);
    cfg_string_map(p, &inference__model_ensembling__step__output_map_entry__descriptor,
                   s->output_map, s->n_output_map, &t->n_output_map, (void ***)&t->output_map);
    m->step[m->n_step++] = t;
  }
  return m;
}

static void cfg_parameters(hark_arena *p, const hark_model_config *cfg, Inference__ModelConfig *m) {
  typedef Inference__ModelConfig__ParametersEntry entry;
  m->parameters = CFG_PTRS(p, entry, cfg->n_parameters);
  for (uint32_t i = 0; i < cfg->n_parameters; i++) {
    entry *e = CFG_MSG(p, entry, INFERENCE__MODEL_CONFIG__PARAMETERS_ENTRY__INIT);
    Inference__ModelParameter *v =
        CFG_MSG(p, Inference__ModelParameter, INFERENCE__MODEL_PARAMETER__INIT);
    e->key = cfg->parameters[i].key;
    v->string_value = cfg->parameters[i].value;
    e->value = v;
    m->parameters[m->n_parameters++] = e;
  }
}

Inference__ModelConfig *hark_kserve_config_pb(hark_arena *p, const hark_model_config *cfg) {
  Inference__ModelConfig *m = CFG_MSG(p, Inference__ModelConfig, INFERENCE__MODEL_CONFIG__INIT);
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
  m->model_transaction_policy->decoupled = cfg->decoupled;
  return m;
}
