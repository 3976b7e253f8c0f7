/*
 * config.c — config.pbtxt → hark_model_config: the model's schema tables,
 * the checks that span several fields, and the public parse and free.
 *
 * The tables are walked by config_walk.c (the machinery, shared with
 * config_seq.c, which holds sequence_batching's tables). The config goes
 * back out as JSON in config_json.c.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_adaptive.h"
#include "core/config_impl.h"
#include "core/config_seq.h"
#include "core/config_walk.h"

/* Bounds that keep a hostile config from sizing threads or queues. */
#define MAX_INSTANCE_COUNT 1024
#define MAX_PRIORITY_LEVELS 1024

/* ---- dynamic_batching ------------------------------------------------------------- */

static const char *const timeout_actions[] = {"REJECT", "DELAY"};

const char *hark_cfg_timeout_action_name(hark_timeout_action a) {
  return (unsigned)a < ARRAY_LEN(timeout_actions) ? timeout_actions[a] : "";
}

static const field_spec queue_policy_fields[] = {
    ENUM("timeout_action", hark_queue_policy, timeout_action, timeout_actions),
    SCALAR("default_timeout_microseconds", V_U64, hark_queue_policy, default_timeout_us),
    SCALAR("allow_timeout_override", V_BOOL, hark_queue_policy, allow_timeout_override),
    SCALAR("max_queue_size", V_U32, hark_queue_policy, max_queue_size),
};
static const msg_spec queue_policy_spec = SPEC(queue_policy_fields);

/* priority_queue_policy is map<uint64, ModelQueuePolicy>: entries of key, value. */
static const field_spec priority_policy_fields[] = {
    RANGED("key", V_U32, hark_priority_policy, level, 1, MAX_PRIORITY_LEVELS),
    EMBEDDED("value", queue_policy_spec, hark_priority_policy, policy),
};
static const msg_spec priority_policy_spec = SPEC(priority_policy_fields);

DEFINE_APPEND(open_priority_policy, hark_dynamic_batching, priority_queue_policy,
              n_priority_queue_policy)

static hark_error *done_priority_policy(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_dynamic_batching *db = obj;
  uint32_t last = db->n_priority_queue_policy - 1;
  uint32_t level = db->priority_queue_policy[last].level;
  if (level == 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "priority_queue_policy entry without a key");
  for (uint32_t i = 0; i < last; i++)
    if (db->priority_queue_policy[i].level == level)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                           "duplicate priority_queue_policy key %u", level);
  return NULL;
}

static hark_error *add_preferred(cfg_ctx *c, const field_spec *fs, void *obj,
                                 const hark_pb_field *v) {
  hark_dynamic_batching *db = obj;
  uint64_t u = 0;
  hark_error *err = hark_cfg_get_uint(c, fs, v, UINT32_MAX, &u);
  if (err) return err;
  if (db->n_preferred_batch_size == HARK_MAX_PREFERRED_BATCH_SIZES)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "more than %d preferred_batch_size values",
                         HARK_MAX_PREFERRED_BATCH_SIZES);
  db->preferred_batch_size[db->n_preferred_batch_size++] = (uint32_t)u;
  return NULL;
}

static const field_spec dynamic_batching_fields[] = {
    CUSTOM("preferred_batch_size", V_U32, add_preferred, F_REPEATED, 1, INT32_MAX),
    SCALAR("max_queue_delay_microseconds", V_U64, hark_dynamic_batching, max_queue_delay_us),
    SCALAR("preserve_ordering", V_BOOL, hark_dynamic_batching, preserve_ordering),
    RANGED("priority_levels", V_U32, hark_dynamic_batching, priority_levels, 0,
           MAX_PRIORITY_LEVELS),
    SCALAR("default_priority_level", V_U32, hark_dynamic_batching, default_priority_level),
    EMBEDDED("default_queue_policy", queue_policy_spec, hark_dynamic_batching,
             default_queue_policy),
    MESSAGE("priority_queue_policy", priority_policy_spec, open_priority_policy,
            done_priority_policy, F_REPEATED),
    MESSAGE("adaptive_queue_delay", hark_cfg_adaptive_spec, hark_cfg_open_dynamic_adaptive,
            hark_cfg_done_dynamic_adaptive, 0),
};
static const msg_spec dynamic_batching_spec = SPEC(dynamic_batching_fields);

static void *open_dynamic_batching(void *obj) {
  hark_model_config *cfg = obj;
  cfg->dynamic_batching.enabled = true;
  return &cfg->dynamic_batching;
}

/* Priority levels are 1-based, 1 the highest; as Triton, a model with
 * levels must name its default level, and policies only name real levels. */
static hark_error *done_dynamic_batching(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_dynamic_batching *db = &((hark_model_config *)obj)->dynamic_batching;
  uint32_t levels = db->priority_levels, def = db->default_priority_level;
  uint32_t line = hark_cfg_line_of(v, "default_priority_level", 0, v->line);
  if (levels > 0 && (def < 1 || def > levels))
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, line,
                         "default_priority_level %u must be in [1, %u] when priority_levels is %u",
                         def, levels, levels);
  if (levels == 0 && def != 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, line,
                         "default_priority_level %u needs priority_levels", def);
  for (uint32_t i = 0; i < db->n_priority_queue_policy; i++) {
    uint32_t level = db->priority_queue_policy[i].level;
    if (level > levels)
      return hark_cfg_fail(
          c, HARK_ERR_INVALID_ARG, hark_cfg_line_of(v, "priority_queue_policy", i, v->line),
          "priority_queue_policy key %u is above priority_levels %u", level, levels);
  }
  return NULL;
}

/* ---- version_policy ---------------------------------------------------------------- */

static hark_error *add_version(cfg_ctx *c, const field_spec *fs, void *obj,
                               const hark_pb_field *v) {
  hark_version_policy *vp = obj;
  int64_t x = 0;
  hark_error *err = hark_cfg_get_int(c, fs, v, &x);
  if (err) return err;
  int64_t *a = hark_cfg_grow(vp->versions, vp->n_versions, sizeof *a);
  if (!a) return hark_cfg_out_of_memory();
  vp->versions = a;
  a[vp->n_versions++] = x;
  return NULL;
}

static const field_spec latest_fields[] = {
    RANGED("num_versions", V_U32, hark_version_policy, latest_num_versions, 1, UINT32_MAX),
};
static const field_spec specific_fields[] = {
    CUSTOM("versions", V_I64, add_version, F_REPEATED, 0, INT64_MAX),
};
static const msg_spec latest_spec = SPEC(latest_fields);
static const msg_spec all_spec = {NULL, 0};
static const msg_spec specific_spec = SPEC(specific_fields);

/* `latest {}` has num_versions 0, not the default 1: Triton refuses it. */
static void *open_latest(void *obj) {
  hark_version_policy *vp = obj;
  vp->latest_num_versions = 0;
  return vp;
}

/* version_policy is a oneof: a second member is an error, not a switch. */
static hark_error *choose(cfg_ctx *c, hark_version_policy *vp, hark_version_policy_kind kind,
                          const hark_pb_field *v) {
  if (c->version_chosen)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "version_policy takes only one of 'latest', 'all' and 'specific'");
  c->version_chosen = true;
  vp->kind = kind;
  return NULL;
}

static hark_error *done_latest(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  hark_version_policy *vp = obj;
  if (vp->latest_num_versions == 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "version_policy.latest needs num_versions >= 1");
  return choose(c, vp, HARK_VERSION_LATEST, v);
}

static hark_error *done_all(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  return choose(c, obj, HARK_VERSION_ALL, v);
}

static hark_error *done_specific(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  hark_version_policy *vp = obj;
  if (vp->n_versions == 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "version_policy.specific needs at least one version");
  return choose(c, vp, HARK_VERSION_SPECIFIC, v);
}

static const field_spec version_policy_fields[] = {
    MESSAGE("latest", latest_spec, open_latest, done_latest, 0),
    MESSAGE("all", all_spec, hark_cfg_open_self, done_all, 0),
    MESSAGE("specific", specific_spec, hark_cfg_open_self, done_specific, 0),
};
static const msg_spec version_policy_spec = SPEC(version_policy_fields);

/* ---- input and output ---------------------------------------------------------------- */

/* `data_type` and `dims` of an input or output. */
static hark_error *set_data_type(cfg_ctx *c, const field_spec *fs, void *obj,
                                 const hark_pb_field *v) {
  hark_model_io *io = obj;
  if (v->kind != HARK_PB_IDENT) return hark_cfg_kind_error(c, fs, v);
  io->datatype = hark_datatype_from_config_name(v->text);
  if (io->datatype == HARK_TYPE_INVALID)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "unknown data_type '%.64s' (expected TYPE_BOOL, TYPE_INT32, TYPE_FP32, "
                         "TYPE_STRING, ...)",
                         v->text);
  return NULL;
}

static hark_error *add_dim(cfg_ctx *c, const field_spec *fs, void *obj, const hark_pb_field *v) {
  hark_model_io *io = obj;
  int64_t d = 0;
  hark_error *err = hark_cfg_get_int(c, fs, v, &d);
  if (err) return err;
  if (d < 1 && d != -1)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "dims entry %" PRId64 " must be >= 1, or -1 for a variable size", d);
  if (io->ndims == HARK_MAX_DIMS)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "more than %d dims", HARK_MAX_DIMS);
  io->dims[io->ndims++] = d;
  return NULL;
}

static const field_spec input_fields[] = {
    SCALAR("name", V_STRING, hark_model_io, name),
    CUSTOM("data_type", V_ENUM, set_data_type, 0, 0, 0),
    CUSTOM("dims", V_I64, add_dim, F_REPEATED, 0, 0),
    SCALAR("optional", V_BOOL, hark_model_io, optional),
    UNSUPPORTED("format"),
    UNSUPPORTED("reshape"),
    UNSUPPORTED("is_shape_tensor"),
    UNSUPPORTED("allow_ragged_batch"),
    UNSUPPORTED("is_non_linear_format_io"),
};
static const field_spec output_fields[] = {
    SCALAR("name", V_STRING, hark_model_io, name),
    CUSTOM("data_type", V_ENUM, set_data_type, 0, 0, 0),
    CUSTOM("dims", V_I64, add_dim, F_REPEATED, 0, 0),
    UNSUPPORTED("reshape"),
    UNSUPPORTED("label_filename"),
    UNSUPPORTED("is_shape_tensor"),
    UNSUPPORTED("is_non_linear_format_io"),
};
static const msg_spec input_spec = SPEC(input_fields);
static const msg_spec output_spec = SPEC(output_fields);

DEFINE_APPEND(open_input, hark_model_config, inputs, n_inputs)
DEFINE_APPEND(open_output, hark_model_config, outputs, n_outputs)

/* The newest of ios[0..n): named, typed, and named unlike the others. */
static hark_error *check_io(const cfg_ctx *c, const hark_model_io *ios, uint32_t n,
                            const char *what, const hark_pb_field *v) {
  const hark_model_io *io = &ios[n - 1];
  if (!io->name || !*io->name)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "%s without a name", what);
  if (io->datatype == HARK_TYPE_INVALID)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "%s '%s' has no data_type", what,
                         io->name);
  for (uint32_t i = 0; i + 1 < n; i++)
    if (strcmp(ios[i].name, io->name) == 0)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "duplicate %s '%s'", what, io->name);
  return NULL;
}

static hark_error *done_input(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_model_config *cfg = obj;
  return check_io(c, cfg->inputs, cfg->n_inputs, "input", v);
}

static hark_error *done_output(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_model_config *cfg = obj;
  return check_io(c, cfg->outputs, cfg->n_outputs, "output", v);
}

/* ---- instance_group -------------------------------------------------------------------- */

static const char *const instance_kinds[] = {"KIND_AUTO", "KIND_CPU", "KIND_GPU", "KIND_MODEL"};

const char *hark_cfg_instance_kind_name(hark_instance_kind k) {
  return (unsigned)k < ARRAY_LEN(instance_kinds) ? instance_kinds[k] : "";
}

/* `gpus: []` says nothing and is accepted; any GPU id is refused. */
static hark_error *reject_gpus(cfg_ctx *c, const field_spec *fs, void *obj,
                               const hark_pb_field *v) {
  (void)fs;
  (void)obj;
  return hark_cfg_fail(
      c, HARK_ERR_UNSUPPORTED, v->line,
      "unsupported field 'gpus' in 'instance_group': hark does not place instances on "
      "GPUs (leave gpus out or empty)");
}

static const field_spec instance_group_fields[] = {
    SCALAR("name", V_STRING, hark_instance_group, name),
    RANGED("count", V_U32, hark_instance_group, count, 1, MAX_INSTANCE_COUNT),
    ENUM("kind", hark_instance_group, kind, instance_kinds),
    CUSTOM("gpus", V_I64, reject_gpus, F_REPEATED, 0, 0),
    UNSUPPORTED("profile"),
    UNSUPPORTED("passive"),
    UNSUPPORTED("host_policy"),
    UNSUPPORTED("secondary_devices"),
    UNSUPPORTED("rate_limiter"),
};
static const msg_spec instance_group_spec = SPEC(instance_group_fields);

DEFINE_APPEND(append_instance_group, hark_model_config, instance_groups, n_instance_groups)

static void *open_instance_group(void *obj) {
  hark_instance_group *g = append_instance_group(obj);
  if (g) g->count = 1;
  return g;
}

/* ---- ensemble_scheduling and parameters --------------------------------------------------- */

/* The newest of kvs[0..n) has a key no other entry has. */
static hark_error *check_key(const cfg_ctx *c, const hark_kv *kvs, uint32_t n, const char *what,
                             const hark_pb_field *v) {
  const hark_kv *kv = &kvs[n - 1];
  if (!kv->key || !*kv->key)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "%s entry without a key", what);
  for (uint32_t i = 0; i + 1 < n; i++)
    if (strcmp(kvs[i].key, kv->key) == 0)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "duplicate %s key '%s'", what,
                           kv->key);
  return NULL;
}

/* input_map / output_map entries name a tensor on both sides. */
static hark_error *check_tensor_map(const cfg_ctx *c, const hark_kv *kvs, uint32_t n,
                                    const char *what, const hark_pb_field *v) {
  hark_error *err = check_key(c, kvs, n, what, v);
  if (!err && (!kvs[n - 1].value || !*kvs[n - 1].value))
    err = hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "%s entry '%s' without a value", what,
                        kvs[n - 1].key);
  return err;
}

static const field_spec map_entry_fields[] = {
    SCALAR("key", V_STRING, hark_kv, key),
    SCALAR("value", V_STRING, hark_kv, value),
};
static const msg_spec map_entry_spec = SPEC(map_entry_fields);

DEFINE_APPEND(open_input_map, hark_ensemble_step, input_map, n_input_map)
DEFINE_APPEND(open_output_map, hark_ensemble_step, output_map, n_output_map)

static hark_error *done_input_map(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_ensemble_step *s = obj;
  return check_tensor_map(c, s->input_map, s->n_input_map, "input_map", v);
}

static hark_error *done_output_map(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_ensemble_step *s = obj;
  return check_tensor_map(c, s->output_map, s->n_output_map, "output_map", v);
}

static const field_spec step_fields[] = {
    SCALAR("model_name", V_STRING, hark_ensemble_step, model_name),
    RANGED("model_version", V_I64, hark_ensemble_step, model_version, -1, INT64_MAX),
    MESSAGE("input_map", map_entry_spec, open_input_map, done_input_map, F_REPEATED),
    MESSAGE("output_map", map_entry_spec, open_output_map, done_output_map, F_REPEATED),
};
static const msg_spec step_spec = SPEC(step_fields);

DEFINE_APPEND(append_step, hark_model_config, ensemble_steps, n_ensemble_steps)

static void *open_step(void *obj) {
  hark_ensemble_step *s = append_step(obj);
  if (s) s->model_version = -1; /* latest, as Triton's examples always spell out */
  return s;
}

static hark_error *done_step(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_model_config *cfg = obj;
  const hark_ensemble_step *s = &cfg->ensemble_steps[cfg->n_ensemble_steps - 1];
  if (!s->model_name || !*s->model_name)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "ensemble step without a model_name");
  return NULL;
}

static const field_spec ensemble_fields[] = {
    MESSAGE("step", step_spec, open_step, done_step, F_REPEATED),
};
static const msg_spec ensemble_spec = SPEC(ensemble_fields);

static const field_spec transaction_fields[] = {
    SCALAR("decoupled", V_BOOL, hark_model_config, decoupled),
};
static const msg_spec transaction_spec = SPEC(transaction_fields);

/* parameters is map<string, ModelParameter>; ModelParameter holds string_value. */
static const field_spec parameter_value_fields[] = {
    SCALAR("string_value", V_STRING, hark_kv, value),
};
static const msg_spec parameter_value_spec = SPEC(parameter_value_fields);
static const field_spec parameter_fields[] = {
    SCALAR("key", V_STRING, hark_kv, key),
    MESSAGE("value", parameter_value_spec, hark_cfg_open_self, NULL, 0),
};
static const msg_spec parameter_spec = SPEC(parameter_fields);

DEFINE_APPEND(open_parameter, hark_model_config, parameters, n_parameters)

static hark_error *done_parameter(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  hark_model_config *cfg = obj;
  hark_kv *kv = &cfg->parameters[cfg->n_parameters - 1];
  if (!kv->value && !(kv->value = strdup(""))) return hark_cfg_out_of_memory();
  return check_key(c, cfg->parameters, cfg->n_parameters, "parameters", v);
}

/* ---- the model ------------------------------------------------------------------------- */

static const field_spec model_fields[] = {
    SCALAR("name", V_STRING, hark_model_config, name),
    SCALAR("platform", V_STRING, hark_model_config, platform),
    SCALAR("backend", V_STRING, hark_model_config, backend),
    EMBEDDED("version_policy", version_policy_spec, hark_model_config, version_policy),
    RANGED("max_batch_size", V_U32, hark_model_config, max_batch_size, 0, INT32_MAX),
    MESSAGE("input", input_spec, open_input, done_input, F_REPEATED),
    MESSAGE("output", output_spec, open_output, done_output, F_REPEATED),
    MESSAGE("instance_group", instance_group_spec, open_instance_group, NULL, F_REPEATED),
    MESSAGE("dynamic_batching", dynamic_batching_spec, open_dynamic_batching, done_dynamic_batching,
            0),
    MESSAGE("sequence_batching", hark_cfg_sequence_batching_spec, hark_cfg_open_sequence_batching,
            hark_cfg_done_sequence_batching, 0),
    MESSAGE("model_transaction_policy", transaction_spec, hark_cfg_open_self, NULL, 0),
    MESSAGE("ensemble_scheduling", ensemble_spec, hark_cfg_open_self, NULL, 0),
    MESSAGE("parameters", parameter_spec, open_parameter, done_parameter, F_REPEATED),
    SCALAR("default_model_filename", V_STRING, hark_model_config, default_model_filename),
    /* Triton's fields hark does not implement (yet): named here so the
     * error says "unsupported" rather than "unknown". */
    UNSUPPORTED("optimization"),
    UNSUPPORTED("model_warmup"),
    UNSUPPORTED("model_operations"),
    UNSUPPORTED("model_repository_agents"),
    UNSUPPORTED("response_cache"),
    UNSUPPORTED("batch_input"),
    UNSUPPORTED("batch_output"),
    UNSUPPORTED("cc_model_filenames"),
    UNSUPPORTED("metric_tags"),
    UNSUPPORTED("runtime"),
};
static const msg_spec model_spec = SPEC(model_fields);
_Static_assert(ARRAY_LEN(model_fields) <= 64, "hark_cfg_walk tracks repeats in a 64-bit mask");

/* ---- checks across fields ----------------------------------------------------------------- */

static hark_error *finish_name(cfg_ctx *c, const char *dir_name) {
  hark_model_config *cfg = c->cfg;
  uint32_t line = hark_cfg_line_of(c->root, "name", 0, 0);
  if (!cfg->name) {
    if (!dir_name || !*dir_name)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, 0,
                           "no 'name', and no model folder name to take it from");
    cfg->name = strdup(dir_name);
    return cfg->name ? NULL : hark_cfg_out_of_memory();
  }
  if (!*cfg->name) return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, line, "'name' is empty");
  if (dir_name && strcmp(cfg->name, dir_name) != 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, line,
                         "model name '%s' does not match its folder name '%s'", cfg->name,
                         dir_name);
  return NULL;
}

static hark_error *finish_ensemble(cfg_ctx *c) {
  const hark_model_config *cfg = c->cfg;
  if (*cfg->backend)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, hark_cfg_line_of(c->root, "backend", 0, 0),
                         "an ensemble has no backend, found backend '%s'", cfg->backend);
  if (cfg->n_ensemble_steps == 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG,
                         hark_cfg_line_of(c->root, "ensemble_scheduling", 0,
                                          hark_cfg_line_of(c->root, "platform", 0, 0)),
                         "platform 'ensemble' requires ensemble_scheduling with at least one step");
  if (cfg->dynamic_batching.enabled)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG,
                         hark_cfg_line_of(c->root, "dynamic_batching", 0, 0),
                         "an ensemble cannot use dynamic_batching: its steps' models batch");
  return NULL;
}

/* Triton's platforms that name a backend hark has: the platform stands
 * for that backend, as in Triton's own config autocompletion. */
static const struct {
  const char *platform, *backend;
} platform_backends[] = {
    {"pytorch_libtorch", "pytorch"},
};

/* A platform other than "ensemble": the backend it stands for, which an
 * explicit 'backend' must agree with. */
static hark_error *finish_backend_platform(cfg_ctx *c) {
  hark_model_config *cfg = c->cfg;
  uint32_t line = hark_cfg_line_of(c->root, "platform", 0, 0);
  for (size_t i = 0; i < ARRAY_LEN(platform_backends); i++) {
    if (strcmp(cfg->platform, platform_backends[i].platform) != 0) continue;
    const char *want = platform_backends[i].backend;
    if (*cfg->backend && strcmp(cfg->backend, want) != 0)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, hark_cfg_line_of(c->root, "backend", 0, line),
                           "platform '%s' runs on backend '%s', but 'backend' names '%s'",
                           cfg->platform, want, cfg->backend);
    free(cfg->backend);
    cfg->backend = strdup(want);
    return cfg->backend ? NULL : hark_cfg_out_of_memory();
  }
  return hark_cfg_fail(c, HARK_ERR_UNSUPPORTED, line,
                       "unsupported platform '%s': hark runs a model through its 'backend', as "
                       "platform \"ensemble\" or as platform \"pytorch_libtorch\"",
                       cfg->platform);
}

/* A model runs either through a backend or as an ensemble of models. */
static hark_error *finish_platform(cfg_ctx *c) {
  hark_model_config *cfg = c->cfg;
  if (!cfg->platform) cfg->platform = strdup("");
  if (!cfg->backend) cfg->backend = strdup("");
  if (!cfg->default_model_filename) cfg->default_model_filename = strdup("");
  if (!cfg->platform || !cfg->backend || !cfg->default_model_filename)
    return hark_cfg_out_of_memory();
  if (strcmp(cfg->platform, "ensemble") == 0) return finish_ensemble(c);
  hark_error *err = *cfg->platform ? finish_backend_platform(c) : NULL;
  if (err) return err;
  const hark_pb_field *ens = hark_cfg_find_value(c->root, "ensemble_scheduling", 0);
  if (ens)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, ens->line,
                         "ensemble_scheduling needs platform \"ensemble\"");
  if (!*cfg->backend)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, hark_cfg_line_of(c->root, "backend", 0, 0),
                         "model '%s' names no backend (set 'backend', or platform \"ensemble\")",
                         cfg->name);
  return NULL;
}

static hark_error *finish_batching(cfg_ctx *c) {
  const hark_model_config *cfg = c->cfg;
  const hark_dynamic_batching *db = &cfg->dynamic_batching;
  const hark_pb_field *node = hark_cfg_find_value(c->root, "dynamic_batching", 0);
  if (!db->enabled) return NULL;
  if (cfg->max_batch_size == 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, node->line,
                         "dynamic_batching needs max_batch_size > 0 (the model must batch)");
  for (uint32_t i = 0; i < db->n_preferred_batch_size; i++)
    if (db->preferred_batch_size[i] > cfg->max_batch_size)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG,
                           hark_cfg_line_of(node, "preferred_batch_size", i, node->line),
                           "preferred_batch_size %u is larger than max_batch_size %u",
                           db->preferred_batch_size[i], cfg->max_batch_size);
  uint32_t depth = cfg->max_batch_size;
  for (uint32_t i = 0; i < db->n_preferred_batch_size; i++)
    depth = i == 0 || db->preferred_batch_size[i] > depth ? db->preferred_batch_size[i] : depth;
  return hark_cfg_finish_adaptive(c, &c->cfg->dynamic_adaptive_delay, node, "dynamic_batching",
                                  db->max_queue_delay_us, depth);
}

/* Triton's defaults: one CPU instance; groups named <model>_<index>; and
 * KIND_AUTO resolves to KIND_CPU, as Triton's does on a host without GPUs. */
static hark_error *finish_instance_groups(cfg_ctx *c) {
  hark_model_config *cfg = c->cfg;
  if (cfg->n_instance_groups == 0 && !open_instance_group(cfg)) return hark_cfg_out_of_memory();
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) {
    hark_instance_group *g = &cfg->instance_groups[i];
    if (g->kind == HARK_KIND_AUTO) g->kind = HARK_KIND_CPU;
    if (g->name && *g->name) continue;
    free(g->name);
    if (asprintf(&g->name, "%s_%u", cfg->name, i) < 0) {
      g->name = NULL;
      return hark_cfg_out_of_memory();
    }
  }
  return NULL;
}

static hark_error *finish(cfg_ctx *c, const char *dir_name) {
  hark_error *err = finish_name(c, dir_name);
  if (!err) err = finish_platform(c);
  if (!err) err = finish_batching(c);
  if (!err) err = hark_cfg_finish_sequence_batching(c);
  if (!err) err = finish_instance_groups(c);
  return err;
}

/* ---- the public calls ---------------------------------------------------------------------- */

hark_error *hark_model_config_parse(const char *text, size_t len, const char *file,
                                    const char *dir_name, hark_model_config **out) {
  *out = NULL;
  cfg_ctx c = {.file = file ? file : "config.pbtxt"};
  hark_pbtxt *doc;
  hark_error *err = hark_pbtxt_parse(text, len, c.file, &doc);
  if (err) return err;
  c.root = hark_pbtxt_root(doc);
  c.cfg = calloc(1, sizeof *c.cfg);
  if (!c.cfg) {
    hark_pbtxt_free(doc);
    return hark_cfg_out_of_memory();
  }
  c.cfg->version_policy.kind = HARK_VERSION_LATEST;
  c.cfg->version_policy.latest_num_versions = 1;
  err = hark_cfg_walk(&c, &model_spec, c.cfg, c.root, NULL);
  if (!err) err = finish(&c, dir_name);
  hark_pbtxt_free(doc);
  if (err) {
    hark_model_config_free(c.cfg);
    return err;
  }
  *out = c.cfg;
  return NULL;
}

static void free_kvs(hark_kv *kvs, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    free(kvs[i].key);
    free(kvs[i].value);
  }
  free(kvs);
}

static void free_ios(hark_model_io *ios, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) free(ios[i].name);
  free(ios);
}

void hark_model_config_free(hark_model_config *cfg) {
  if (!cfg) return;
  free(cfg->name);
  free(cfg->platform);
  free(cfg->backend);
  free(cfg->default_model_filename);
  free(cfg->version_policy.versions);
  free_ios(cfg->inputs, cfg->n_inputs);
  free_ios(cfg->outputs, cfg->n_outputs);
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) free(cfg->instance_groups[i].name);
  free(cfg->instance_groups);
  free(cfg->dynamic_batching.priority_queue_policy);
  hark_cfg_free_sequence_batching(&cfg->sequence_batching);
  for (uint32_t i = 0; i < cfg->n_ensemble_steps; i++) {
    hark_ensemble_step *s = &cfg->ensemble_steps[i];
    free(s->model_name);
    free_kvs(s->input_map, s->n_input_map);
    free_kvs(s->output_map, s->n_output_map);
  }
  free(cfg->ensemble_steps);
  free_kvs(cfg->parameters, cfg->n_parameters);
  free(cfg);
}

static bool has_io(const hark_model_io *io, uint32_t n, const char *name, hark_datatype type) {
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(io[i].name, name) && io[i].datatype == type) return true;
  return false;
}

bool hark_model_config_is_speech(const hark_model_config *cfg) {
  return has_io(cfg->inputs, cfg->n_inputs, "AUDIO", HARK_TYPE_BYTES) &&
         has_io(cfg->outputs, cfg->n_outputs, "TRANSCRIPT", HARK_TYPE_BYTES);
}

const char *hark_model_config_parameter(const hark_model_config *cfg, const char *key) {
  for (uint32_t i = 0; cfg && key && i < cfg->n_parameters; i++)
    if (strcmp(cfg->parameters[i].key, key) == 0) return cfg->parameters[i].value;
  return NULL;
}
