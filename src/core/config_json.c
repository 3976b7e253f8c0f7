/*
 * config_json.c — a hark_model_config back out as the JSON Triton's
 * /v2/models/{m}/config returns: every field hark supports, defaults
 * filled in, enums by their config spellings (from config.c's and
 * config_seq.c's tables).
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdio.h>

#include "core/config_impl.h"
#include "core/config_seq.h"

/* Integers go out as raw text so 64-bit values keep every digit (a cJSON
 * number is a double); Triton, too, prints them as numbers, not strings. */
static cJSON *json_raw_int(int64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%" PRId64, v);
  return cJSON_CreateRaw(b);
}

static void json_int(cJSON *o, const char *key, int64_t v) {
  cJSON_AddItemToObject(o, key, json_raw_int(v));
}

static void json_uint(cJSON *o, const char *key, uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%" PRIu64, v);
  cJSON_AddRawToObject(o, key, b);
}

static void json_string(cJSON *o, const char *key, const char *s) {
  cJSON_AddStringToObject(o, key, s ? s : "");
}

static void json_version_policy(cJSON *root, const hark_version_policy *vp) {
  cJSON *o = cJSON_AddObjectToObject(root, "version_policy");
  if (vp->kind == HARK_VERSION_ALL) {
    cJSON_AddObjectToObject(o, "all");
  } else if (vp->kind == HARK_VERSION_SPECIFIC) {
    cJSON *a = cJSON_AddArrayToObject(cJSON_AddObjectToObject(o, "specific"), "versions");
    for (uint32_t i = 0; i < vp->n_versions; i++)
      cJSON_AddItemToArray(a, json_raw_int(vp->versions[i]));
  } else {
    json_uint(cJSON_AddObjectToObject(o, "latest"), "num_versions", vp->latest_num_versions);
  }
}

static void json_ios(cJSON *root, const char *key, const hark_model_io *ios, uint32_t n,
                     bool inputs) {
  cJSON *a = cJSON_AddArrayToObject(root, key);
  for (uint32_t i = 0; i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(a, o);
    json_string(o, "name", ios[i].name);
    json_string(o, "data_type", hark_datatype_config_name(ios[i].datatype));
    cJSON *dims = cJSON_AddArrayToObject(o, "dims");
    for (uint32_t d = 0; d < ios[i].ndims; d++)
      cJSON_AddItemToArray(dims, json_raw_int(ios[i].dims[d]));
    if (inputs) cJSON_AddBoolToObject(o, "optional", ios[i].optional);
  }
}

static void json_instance_groups(cJSON *root, const hark_model_config *cfg) {
  cJSON *a = cJSON_AddArrayToObject(root, "instance_group");
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) {
    const hark_instance_group *g = &cfg->instance_groups[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(a, o);
    json_string(o, "name", g->name);
    json_string(o, "kind", hark_cfg_instance_kind_name(g->kind));
    json_uint(o, "count", g->count);
  }
}

static void json_queue_policy(cJSON *o, const hark_queue_policy *p) {
  json_string(o, "timeout_action", hark_cfg_timeout_action_name(p->timeout_action));
  json_uint(o, "default_timeout_microseconds", p->default_timeout_us);
  cJSON_AddBoolToObject(o, "allow_timeout_override", p->allow_timeout_override);
  json_uint(o, "max_queue_size", p->max_queue_size);
}

/* hark's own block, shown only when the file has it. */
static void json_adaptive(cJSON *parent, const hark_adaptive_delay *a) {
  if (!a->enabled) return;
  cJSON *o = cJSON_AddObjectToObject(parent, "adaptive_queue_delay");
  json_uint(o, "min_microseconds", a->min_us);
  json_uint(o, "max_microseconds", a->max_us);
  json_uint(o, "target_queue_depth", a->target_queue_depth);
}

static void json_dynamic_batching(cJSON *root, const hark_dynamic_batching *db,
                                  const hark_adaptive_delay *adaptive) {
  cJSON *o = cJSON_AddObjectToObject(root, "dynamic_batching");
  cJSON *pref = cJSON_AddArrayToObject(o, "preferred_batch_size");
  for (uint32_t i = 0; i < db->n_preferred_batch_size; i++)
    cJSON_AddItemToArray(pref, json_raw_int(db->preferred_batch_size[i]));
  json_uint(o, "max_queue_delay_microseconds", db->max_queue_delay_us);
  cJSON_AddBoolToObject(o, "preserve_ordering", db->preserve_ordering);
  json_uint(o, "priority_levels", db->priority_levels);
  json_uint(o, "default_priority_level", db->default_priority_level);
  json_queue_policy(cJSON_AddObjectToObject(o, "default_queue_policy"), &db->default_queue_policy);
  cJSON *map = cJSON_AddObjectToObject(o, "priority_queue_policy");
  for (uint32_t i = 0; i < db->n_priority_queue_policy; i++) {
    char key[16];
    snprintf(key, sizeof key, "%u", db->priority_queue_policy[i].level);
    json_queue_policy(cJSON_AddObjectToObject(map, key), &db->priority_queue_policy[i].policy);
  }
  json_adaptive(o, adaptive);
}

static void json_string_map(cJSON *o, const char *key, const hark_kv *kvs, uint32_t n) {
  cJSON *map = cJSON_AddObjectToObject(o, key);
  for (uint32_t i = 0; i < n; i++) json_string(map, kvs[i].key, kvs[i].value);
}

static void json_ensemble(cJSON *root, const hark_model_config *cfg) {
  cJSON *steps =
      cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, "ensemble_scheduling"), "step");
  for (uint32_t i = 0; i < cfg->n_ensemble_steps; i++) {
    const hark_ensemble_step *s = &cfg->ensemble_steps[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(steps, o);
    json_string(o, "model_name", s->model_name);
    json_int(o, "model_version", s->model_version);
    json_string_map(o, "input_map", s->input_map, s->n_input_map);
    json_string_map(o, "output_map", s->output_map, s->n_output_map);
  }
}

static void json_parameters(cJSON *root, const hark_model_config *cfg) {
  cJSON *map = cJSON_AddObjectToObject(root, "parameters");
  for (uint32_t i = 0; i < cfg->n_parameters; i++)
    json_string(cJSON_AddObjectToObject(map, cfg->parameters[i].key), "string_value",
                cfg->parameters[i].value);
}

/* ---- sequence_batching ------------------------------------------------------------- */

static void json_dims(cJSON *o, const char *key, const int64_t *dims, uint32_t n) {
  cJSON *a = cJSON_AddArrayToObject(o, key);
  for (uint32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, json_raw_int(dims[i]));
}

static void json_control(cJSON *arr, const hark_seq_control *ctl) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddItemToArray(arr, o);
  json_string(o, "name", ctl->name);
  cJSON *c = cJSON_CreateObject();
  cJSON_AddItemToArray(cJSON_AddArrayToObject(o, "control"), c);
  json_string(c, "kind", hark_cfg_control_kind_name(ctl->kind));
  if (ctl->kind == HARK_SEQ_CONTROL_CORRID) {
    json_string(c, "data_type", hark_datatype_config_name(ctl->datatype));
    return;
  }
  cJSON *ft;
  switch (ctl->datatype) {
  case HARK_TYPE_FP32:
    ft = cJSON_AddArrayToObject(c, "fp32_false_true");
    for (int i = 0; i < 2; i++)
      cJSON_AddItemToArray(ft, cJSON_CreateNumber(ctl->fp32_false_true[i]));
    break;
  case HARK_TYPE_BOOL:
    ft = cJSON_AddArrayToObject(c, "bool_false_true");
    for (int i = 0; i < 2; i++) cJSON_AddItemToArray(ft, cJSON_CreateBool(ctl->bool_false_true[i]));
    break;
  default:
    ft = cJSON_AddArrayToObject(c, "int32_false_true");
    for (int i = 0; i < 2; i++) cJSON_AddItemToArray(ft, json_raw_int(ctl->int32_false_true[i]));
  }
}

static void json_sequence_batching(cJSON *root, const hark_sequence_batching *sb,
                                   const hark_adaptive_delay *adaptive) {
  cJSON *o = cJSON_AddObjectToObject(root, "sequence_batching");
  json_uint(o, "max_sequence_idle_microseconds", sb->max_sequence_idle_us);
  cJSON *controls = cJSON_AddArrayToObject(o, "control_input");
  for (uint32_t i = 0; i < sb->n_controls; i++) json_control(controls, &sb->controls[i]);
  if (sb->strategy == HARK_SEQ_OLDEST) {
    cJSON *s = cJSON_AddObjectToObject(o, "oldest");
    json_uint(s, "max_candidate_sequences", sb->max_candidate_sequences);
    cJSON *pref = cJSON_AddArrayToObject(s, "preferred_batch_size");
    for (uint32_t i = 0; i < sb->n_preferred_batch_size; i++)
      cJSON_AddItemToArray(pref, json_raw_int(sb->preferred_batch_size[i]));
    json_uint(s, "max_queue_delay_microseconds", sb->oldest_max_queue_delay_us);
    json_adaptive(s, adaptive);
  } else {
    cJSON *s = cJSON_AddObjectToObject(o, "direct");
    json_uint(s, "max_queue_delay_microseconds", sb->direct_max_queue_delay_us);
    cJSON_AddNumberToObject(s, "minimum_slot_utilization", sb->minimum_slot_utilization);
  }
  cJSON *states = cJSON_AddArrayToObject(o, "state");
  for (uint32_t i = 0; i < sb->n_states; i++) {
    const hark_seq_state *st = &sb->states[i];
    cJSON *so = cJSON_CreateObject();
    cJSON_AddItemToArray(states, so);
    json_string(so, "input_name", st->input_name);
    json_string(so, "output_name", st->output_name);
    json_string(so, "data_type", hark_datatype_config_name(st->datatype));
    json_dims(so, "dims", st->dims, st->ndims);
    cJSON *inits = cJSON_AddArrayToObject(so, "initial_state");
    if (st->has_initial) {
      cJSON *io = cJSON_CreateObject();
      cJSON_AddItemToArray(inits, io);
      json_string(io, "data_type", hark_datatype_config_name(st->datatype));
      json_dims(io, "dims", st->initial_dims, st->initial_ndims);
      cJSON_AddBoolToObject(io, "zero_data", true);
    }
  }
}

char *hark_model_config_to_json(const hark_model_config *cfg) {
  if (!cfg) return NULL;
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  json_string(root, "name", cfg->name);
  json_string(root, "platform", cfg->platform);
  json_string(root, "backend", cfg->backend);
  json_version_policy(root, &cfg->version_policy);
  json_uint(root, "max_batch_size", cfg->max_batch_size);
  json_ios(root, "input", cfg->inputs, cfg->n_inputs, true);
  json_ios(root, "output", cfg->outputs, cfg->n_outputs, false);
  json_instance_groups(root, cfg);
  if (cfg->dynamic_batching.enabled)
    json_dynamic_batching(root, &cfg->dynamic_batching, &cfg->dynamic_adaptive_delay);
  if (cfg->sequence_batching.enabled)
    json_sequence_batching(root, &cfg->sequence_batching, &cfg->oldest_adaptive_delay);
  if (cfg->n_ensemble_steps) json_ensemble(root, cfg);
  json_parameters(root, cfg);
  cJSON_AddBoolToObject(cJSON_AddObjectToObject(root, "model_transaction_policy"), "decoupled",
                        cfg->decoupled);
  json_string(root, "default_model_filename", cfg->default_model_filename);
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}
