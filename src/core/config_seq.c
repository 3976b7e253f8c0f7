/*
 * config_seq.c — the sequence_batching block of config.pbtxt: its schema
 * tables (walked by config_walk.c), the checks that need the whole model,
 * and its freeing. Its JSON form is written with the rest in
 * config_json.c.
 *
 * Triton's SequenceBatching, the subset hark runs: max_sequence_idle_
 * microseconds (0 or absent: Triton's 1 s), one of direct { } and oldest
 * { }, control_input (START / READY / END / CORRID tensors the engine adds
 * to each request) and state (implicit state, zero initial values).
 * iterative_sequence, oldest.preserve_ordering, initial_state.data_file and
 * the state memory options are refused as unsupported.
 */
#include <stdlib.h>
#include <string.h>

#include "core/config_adaptive.h"
#include "core/config_seq.h"

#define DEFAULT_IDLE_US 1000000u

/* ---- control_input ---------------------------------------------------------------- */

static const char *const control_kinds[] = {"CONTROL_SEQUENCE_START", "CONTROL_SEQUENCE_READY",
                                            "CONTROL_SEQUENCE_END", "CONTROL_SEQUENCE_CORRID"};

const char *hark_cfg_control_kind_name(hark_seq_control_kind kind) {
  return (unsigned)kind < ARRAY_LEN(control_kinds) ? control_kinds[kind] : "";
}
_Static_assert(sizeof(hark_seq_control_kind) == sizeof(unsigned), "enum size");
_Static_assert(sizeof(hark_seq_strategy) == sizeof(unsigned), "enum size");

/* *_false_true values shift in from the right: after two, [0] is false and
 * [1] true; done_control_input counts them in the tree. */
static hark_error *add_i32(cfg_ctx *c, const field_spec *fs, void *obj, const hark_pb_field *v) {
  hark_seq_control *ctl = obj;
  if (v->kind != HARK_PB_INT) return hark_cfg_kind_error(c, fs, v);
  if (v->u > (v->negative ? (uint64_t)INT32_MAX + 1 : (uint64_t)INT32_MAX))
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "value %.64s for field '%s' does not fit in 32 bits", v->text, fs->name);
  ctl->int32_false_true[0] = ctl->int32_false_true[1];
  ctl->int32_false_true[1] = v->negative ? (int32_t)(0 - v->u) : (int32_t)v->u;
  ctl->datatype = HARK_TYPE_INT32;
  return NULL;
}

static hark_error *add_f32(cfg_ctx *c, const field_spec *fs, void *obj, const hark_pb_field *v) {
  hark_seq_control *ctl = obj;
  double d;
  if (v->kind == HARK_PB_FLOAT)
    d = v->d;
  else if (v->kind == HARK_PB_INT)
    d = v->negative ? -(double)v->u : (double)v->u;
  else
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "field '%s' expects a number, not %s",
                         fs->name, hark_pb_kind_name(v->kind));
  ctl->fp32_false_true[0] = ctl->fp32_false_true[1];
  ctl->fp32_false_true[1] = (float)d;
  ctl->datatype = HARK_TYPE_FP32;
  return NULL;
}

static hark_error *add_bool(cfg_ctx *c, const field_spec *fs, void *obj, const hark_pb_field *v) {
  hark_seq_control *ctl = obj;
  bool b;
  if (v->kind == HARK_PB_INT && !v->negative && v->u <= 1)
    b = v->u == 1;
  else if (v->kind == HARK_PB_IDENT && (!strcmp(v->text, "true") || !strcmp(v->text, "True")))
    b = true;
  else if (v->kind == HARK_PB_IDENT && (!strcmp(v->text, "false") || !strcmp(v->text, "False")))
    b = false;
  else
    return hark_cfg_kind_error(c, fs, v);
  ctl->bool_false_true[0] = ctl->bool_false_true[1];
  ctl->bool_false_true[1] = b;
  ctl->datatype = HARK_TYPE_BOOL;
  return NULL;
}

static hark_error *set_corrid_type(cfg_ctx *c, const field_spec *fs, void *obj,
                                   const hark_pb_field *v) {
  hark_seq_control *ctl = obj;
  if (v->kind != HARK_PB_IDENT) return hark_cfg_kind_error(c, fs, v);
  hark_datatype dt = hark_datatype_from_config_name(v->text);
  if (dt != HARK_TYPE_INT32 && dt != HARK_TYPE_UINT32 && dt != HARK_TYPE_INT64 &&
      dt != HARK_TYPE_UINT64 && dt != HARK_TYPE_BYTES)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "control data_type '%.64s' is not one of TYPE_INT32, TYPE_UINT32, "
                         "TYPE_INT64, TYPE_UINT64, TYPE_STRING",
                         v->text);
  ctl->datatype = dt;
  return NULL;
}

static const field_spec control_fields[] = {
    ENUM("kind", hark_seq_control, kind, control_kinds),
    CUSTOM("int32_false_true", V_I64, add_i32, F_REPEATED, 0, 0),
    CUSTOM("fp32_false_true", V_I64, add_f32, F_REPEATED, 0, 0),
    CUSTOM("bool_false_true", V_BOOL, add_bool, F_REPEATED, 0, 0),
    CUSTOM("data_type", V_ENUM, set_corrid_type, 0, 0, 0),
};
static const msg_spec control_spec = SPEC(control_fields);

static const field_spec control_input_fields[] = {
    SCALAR("name", V_STRING, hark_seq_control, name),
    MESSAGE("control", control_spec, hark_cfg_open_self, NULL, F_REPEATED),
};
static const msg_spec control_input_spec = SPEC(control_input_fields);

DEFINE_APPEND(open_control_input, hark_sequence_batching, controls, n_controls)

static uint32_t count_values(const hark_pb_field *msg, const char *name) {
  uint32_t n = 0;
  while (hark_cfg_find_value(msg, name, n)) n++;
  return n;
}

static hark_error *done_control_input(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_sequence_batching *sb = obj;
  const hark_seq_control *ctl = &sb->controls[sb->n_controls - 1];
  if (!ctl->name || !*ctl->name)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "control_input without a name");
  uint32_t n_control = count_values(v, "control");
  if (n_control != 1)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "control_input '%s' must have exactly one control, found %u", ctl->name,
                         n_control);
  const hark_pb_field *cv = hark_cfg_find_value(v, "control", 0);
  uint32_t ni = count_values(cv, "int32_false_true"), nf = count_values(cv, "fp32_false_true"),
           nb = count_values(cv, "bool_false_true");
  bool typed = hark_cfg_find_value(cv, "data_type", 0) != NULL;
  if (ctl->kind == HARK_SEQ_CONTROL_CORRID) {
    if (!typed || ni || nf || nb)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, cv->line,
                           "control_input '%s': CONTROL_SEQUENCE_CORRID takes a data_type and no "
                           "*_false_true values",
                           ctl->name);
  } else {
    uint32_t given = (ni > 0) + (nf > 0) + (nb > 0);
    uint32_t n = ni + nf + nb;
    if (typed || given != 1 || n != 2)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, cv->line,
                           "control_input '%s': %s takes exactly two values in one of "
                           "int32_false_true, fp32_false_true, bool_false_true (and no data_type)",
                           ctl->name, control_kinds[ctl->kind]);
  }
  for (uint32_t i = 0; i + 1 < sb->n_controls; i++) {
    if (strcmp(sb->controls[i].name, ctl->name) == 0)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "duplicate control_input '%s'",
                           ctl->name);
    if (sb->controls[i].kind == ctl->kind)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                           "control_input '%s' repeats %s (already on '%s')", ctl->name,
                           control_kinds[ctl->kind], sb->controls[i].name);
  }
  return NULL;
}

/* ---- state ---------------------------------------------------------------------------- */

static hark_error *state_type(cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                              hark_datatype *out) {
  if (v->kind != HARK_PB_IDENT) return hark_cfg_kind_error(c, fs, v);
  *out = hark_datatype_from_config_name(v->text);
  if (*out == HARK_TYPE_INVALID || *out == HARK_TYPE_BYTES)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "state data_type '%.64s' is not a fixed-size tensor type (TYPE_INT32, "
                         "TYPE_FP32, ...)",
                         v->text);
  return NULL;
}

static hark_error *state_dim(cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                             uint32_t *ndims, int64_t *dims) {
  if (v->kind != HARK_PB_INT) return hark_cfg_kind_error(c, fs, v);
  if ((v->negative && v->u != 1) || (!v->negative && (v->u < 1 || v->u > INT32_MAX)))
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "dims entry %.64s must be >= 1, or -1 for a variable size", v->text);
  if (*ndims == HARK_MAX_DIMS)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "more than %d dims", HARK_MAX_DIMS);
  dims[(*ndims)++] = v->negative ? -1 : (int64_t)v->u;
  return NULL;
}

static hark_error *set_state_type(cfg_ctx *c, const field_spec *fs, void *obj,
                                  const hark_pb_field *v) {
  return state_type(c, fs, v, &((hark_seq_state *)obj)->datatype);
}

static hark_error *add_state_dim(cfg_ctx *c, const field_spec *fs, void *obj,
                                 const hark_pb_field *v) {
  hark_seq_state *st = obj;
  return state_dim(c, fs, v, &st->ndims, st->dims);
}

/* initial_state's own data_type must agree with the state's: checked in
 * done_state, so the value is only validated here. */
static hark_error *check_initial_type(cfg_ctx *c, const field_spec *fs, void *obj,
                                      const hark_pb_field *v) {
  (void)obj;
  hark_datatype dt;
  return state_type(c, fs, v, &dt);
}

static hark_error *add_initial_dim(cfg_ctx *c, const field_spec *fs, void *obj,
                                   const hark_pb_field *v) {
  hark_seq_state *st = obj;
  return state_dim(c, fs, v, &st->initial_ndims, st->initial_dims);
}

static hark_error *set_zero_data(cfg_ctx *c, const field_spec *fs, void *obj,
                                 const hark_pb_field *v) {
  (void)obj;
  bool zero =
      (v->kind == HARK_PB_IDENT && (!strcmp(v->text, "true") || !strcmp(v->text, "True"))) ||
      (v->kind == HARK_PB_INT && !v->negative && v->u == 1);
  if (!zero)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "field '%s' must be true (hark's initial states are zeros)", fs->name);
  return NULL;
}

static hark_error *ignore_name(cfg_ctx *c, const field_spec *fs, void *obj,
                               const hark_pb_field *v) {
  (void)obj;
  return v->kind == HARK_PB_STRING ? NULL : hark_cfg_kind_error(c, fs, v);
}

static const field_spec initial_state_fields[] = {
    CUSTOM("data_type", V_ENUM, check_initial_type, 0, 0, 0),
    CUSTOM("dims", V_I64, add_initial_dim, F_REPEATED, 0, 0),
    CUSTOM("zero_data", V_BOOL, set_zero_data, 0, 0, 0),
    /* `name` only labels the initial state in Triton's logs; no effect. */
    CUSTOM("name", V_STRING, ignore_name, 0, 0, 0),
    UNSUPPORTED("data_file"),
};
static const msg_spec initial_state_spec = SPEC(initial_state_fields);

static void *open_initial_state(void *obj) {
  hark_seq_state *st = obj;
  st->initial_ndims = 0;
  return st;
}

static hark_error *done_initial_state(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  hark_seq_state *st = obj;
  if (st->has_initial)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "state takes at most one initial_state");
  if (!hark_cfg_find_value(v, "zero_data", 0))
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "initial_state needs zero_data: true (data_file is not supported)");
  for (uint32_t i = 0; i < st->initial_ndims; i++)
    if (st->initial_dims[i] < 0)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                           "initial_state dims must be fixed (no -1)");
  st->has_initial = true;
  return NULL;
}

static const field_spec state_fields[] = {
    SCALAR("input_name", V_STRING, hark_seq_state, input_name),
    SCALAR("output_name", V_STRING, hark_seq_state, output_name),
    CUSTOM("data_type", V_ENUM, set_state_type, 0, 0, 0),
    CUSTOM("dims", V_I64, add_state_dim, F_REPEATED, 0, 0),
    MESSAGE("initial_state", initial_state_spec, open_initial_state, done_initial_state,
            F_REPEATED),
    UNSUPPORTED("use_same_buffer_for_input_output"),
    UNSUPPORTED("use_growable_memory"),
};
static const msg_spec state_spec = SPEC(state_fields);

DEFINE_APPEND(open_state, hark_sequence_batching, states, n_states)

static hark_error *done_state(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  const hark_sequence_batching *sb = obj;
  const hark_seq_state *st = &sb->states[sb->n_states - 1];
  if (!st->input_name || !*st->input_name || !st->output_name || !*st->output_name)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "state needs both input_name and output_name");
  if (st->datatype == HARK_TYPE_INVALID)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "state '%s' has no data_type",
                         st->input_name);
  if (st->ndims == 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "state '%s' has no dims",
                         st->input_name);
  const hark_pb_field *init = hark_cfg_find_value(v, "initial_state", 0);
  const hark_pb_field *init_type = hark_cfg_find_value(init, "data_type", 0);
  if (init_type && hark_datatype_from_config_name(init_type->text) != st->datatype)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, init_type->line,
                         "initial_state data_type %s differs from state '%s' data_type %s",
                         init_type->text, st->input_name, hark_datatype_config_name(st->datatype));
  if (st->has_initial) {
    bool fits = st->initial_ndims == st->ndims;
    for (uint32_t i = 0; fits && i < st->ndims; i++)
      fits = st->dims[i] == -1 || st->dims[i] == st->initial_dims[i];
    if (!fits)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, init->line,
                           "initial_state dims do not match state '%s' dims", st->input_name);
  } else {
    for (uint32_t i = 0; i < st->ndims; i++)
      if (st->dims[i] < 0)
        return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                             "state '%s' has variable dims: give an initial_state with fixed "
                             "dims",
                             st->input_name);
  }
  for (uint32_t i = 0; i + 1 < sb->n_states; i++)
    if (!strcmp(sb->states[i].input_name, st->input_name) ||
        !strcmp(sb->states[i].output_name, st->output_name))
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                           "duplicate state input_name or output_name ('%s' / '%s')",
                           st->input_name, st->output_name);
  return NULL;
}

/* ---- direct / oldest ------------------------------------------------------------------------- */

static hark_error *set_utilization(cfg_ctx *c, const field_spec *fs, void *obj,
                                   const hark_pb_field *v) {
  hark_sequence_batching *sb = obj;
  double d;
  if (v->kind == HARK_PB_FLOAT)
    d = v->d;
  else if (v->kind == HARK_PB_INT && !v->negative)
    d = (double)v->u;
  else
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "field '%s' expects a number in [0, 1]",
                         fs->name);
  if (!(d >= 0.0 && d <= 1.0))
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "value %.64s for field '%s' is out of range [0, 1]", v->text, fs->name);
  sb->minimum_slot_utilization = (float)d;
  return NULL;
}

static hark_error *add_oldest_preferred(cfg_ctx *c, const field_spec *fs, void *obj,
                                        const hark_pb_field *v) {
  hark_sequence_batching *sb = obj;
  uint64_t u = 0;
  hark_error *err = hark_cfg_get_uint(c, fs, v, UINT32_MAX, &u);
  if (err) return err;
  if (sb->n_preferred_batch_size == HARK_MAX_PREFERRED_BATCH_SIZES)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "more than %d preferred_batch_size values",
                         HARK_MAX_PREFERRED_BATCH_SIZES);
  sb->preferred_batch_size[sb->n_preferred_batch_size++] = (uint32_t)u;
  return NULL;
}

static const field_spec direct_fields[] = {
    SCALAR("max_queue_delay_microseconds", V_U64, hark_sequence_batching,
           direct_max_queue_delay_us),
    CUSTOM("minimum_slot_utilization", V_U64, set_utilization, 0, 0, 0),
    MESSAGE("adaptive_queue_delay", hark_cfg_adaptive_spec, hark_cfg_open_misplaced_adaptive,
            hark_cfg_done_misplaced_adaptive, 0),
};
static const msg_spec direct_spec = SPEC(direct_fields);

static const field_spec oldest_fields[] = {
    RANGED("max_candidate_sequences", V_U32, hark_sequence_batching, max_candidate_sequences, 1,
           1 << 20),
    CUSTOM("preferred_batch_size", V_U32, add_oldest_preferred, F_REPEATED, 1, INT32_MAX),
    SCALAR("max_queue_delay_microseconds", V_U64, hark_sequence_batching,
           oldest_max_queue_delay_us),
    UNSUPPORTED("preserve_ordering"),
    MESSAGE("adaptive_queue_delay", hark_cfg_adaptive_spec, hark_cfg_open_oldest_adaptive,
            hark_cfg_done_oldest_adaptive, 0),
};
static const msg_spec oldest_spec = SPEC(oldest_fields);

/* strategy_choice is a oneof: one of direct and oldest, at most once. */
static hark_error *choose(cfg_ctx *c, hark_sequence_batching *sb, const hark_pb_field *v,
                          hark_seq_strategy which) {
  bool twice = c->strategy_chosen;
  c->strategy_chosen = true;
  if (twice)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "sequence_batching takes only one of 'direct' and 'oldest'");
  sb->strategy = which;
  return NULL;
}

static hark_error *done_direct(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  return choose(c, obj, v, HARK_SEQ_DIRECT);
}

static hark_error *done_oldest(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  hark_sequence_batching *sb = obj;
  if (sb->max_candidate_sequences == 0)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "oldest needs max_candidate_sequences >= 1");
  return choose(c, sb, v, HARK_SEQ_OLDEST);
}

/* ---- the block --------------------------------------------------------------------------------
 */

static const field_spec sequence_batching_fields[] = {
    SCALAR("max_sequence_idle_microseconds", V_U64, hark_sequence_batching, max_sequence_idle_us),
    MESSAGE("control_input", control_input_spec, open_control_input, done_control_input,
            F_REPEATED),
    MESSAGE("direct", direct_spec, hark_cfg_open_self, done_direct, 0),
    MESSAGE("oldest", oldest_spec, hark_cfg_open_self, done_oldest, 0),
    MESSAGE("state", state_spec, open_state, done_state, F_REPEATED),
    UNSUPPORTED("iterative_sequence"),
    MESSAGE("adaptive_queue_delay", hark_cfg_adaptive_spec, hark_cfg_open_misplaced_adaptive,
            hark_cfg_done_misplaced_adaptive, 0),
};
const msg_spec hark_cfg_sequence_batching_spec = SPEC(sequence_batching_fields);

void *hark_cfg_open_sequence_batching(void *obj) {
  hark_model_config *cfg = obj;
  cfg->sequence_batching.enabled = true;
  return &cfg->sequence_batching;
}

hark_error *hark_cfg_done_sequence_batching(cfg_ctx *c, void *obj, const hark_pb_field *v) {
  (void)c;
  (void)v;
  hark_sequence_batching *sb = &((hark_model_config *)obj)->sequence_batching;
  if (sb->max_sequence_idle_us == 0) sb->max_sequence_idle_us = DEFAULT_IDLE_US;
  return NULL;
}

static bool is_model_input(const hark_model_config *cfg, const char *name) {
  for (uint32_t i = 0; i < cfg->n_inputs; i++)
    if (strcmp(cfg->inputs[i].name, name) == 0) return true;
  return false;
}

hark_error *hark_cfg_finish_sequence_batching(cfg_ctx *c) {
  const hark_model_config *cfg = c->cfg;
  const hark_sequence_batching *sb = &cfg->sequence_batching;
  if (!sb->enabled) return NULL;
  const hark_pb_field *node = hark_cfg_find_value(c->root, "sequence_batching", 0);
  if (cfg->dynamic_batching.enabled)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, node->line,
                         "a model takes one of dynamic_batching and sequence_batching, not both");
  if (cfg->n_ensemble_steps || (cfg->platform && !strcmp(cfg->platform, "ensemble")))
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, node->line,
                         "an ensemble cannot use sequence_batching: its steps' models do");
  uint32_t max = cfg->max_batch_size ? cfg->max_batch_size : 1;
  const hark_pb_field *oldest = hark_cfg_find_value(node, "oldest", 0);
  for (uint32_t i = 0; i < sb->n_preferred_batch_size; i++)
    if (sb->preferred_batch_size[i] > max)
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG,
                           hark_cfg_line_of(oldest, "preferred_batch_size", i, node->line),
                           "oldest.preferred_batch_size %u is larger than max_batch_size %u",
                           sb->preferred_batch_size[i], max);
  uint32_t depth = max;
  for (uint32_t i = 0; i < sb->n_preferred_batch_size; i++)
    depth = i == 0 || sb->preferred_batch_size[i] > depth ? sb->preferred_batch_size[i] : depth;
  hark_error *err =
      hark_cfg_finish_adaptive(c, &c->cfg->oldest_adaptive_delay, oldest,
                               "sequence_batching.oldest", sb->oldest_max_queue_delay_us, depth);
  if (err) return err;
  for (uint32_t i = 0; i < sb->n_controls; i++)
    if (is_model_input(cfg, sb->controls[i].name))
      return hark_cfg_fail(
          c, HARK_ERR_INVALID_ARG, hark_cfg_line_of(node, "control_input", i, node->line),
          "control_input '%s' is also a model input: the engine supplies it", sb->controls[i].name);
  for (uint32_t i = 0; i < sb->n_states; i++) {
    uint32_t line = hark_cfg_line_of(node, "state", i, node->line);
    if (is_model_input(cfg, sb->states[i].input_name))
      return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, line,
                           "state input '%s' is also a model input: the engine supplies it",
                           sb->states[i].input_name);
    for (uint32_t k = 0; k < sb->n_controls; k++)
      if (!strcmp(sb->controls[k].name, sb->states[i].input_name))
        return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, line,
                             "state input '%s' is also a control_input", sb->states[i].input_name);
  }
  return NULL;
}

void hark_cfg_free_sequence_batching(hark_sequence_batching *sb) {
  for (uint32_t i = 0; i < sb->n_controls; i++) free(sb->controls[i].name);
  free(sb->controls);
  for (uint32_t i = 0; i < sb->n_states; i++) {
    free(sb->states[i].input_name);
    free(sb->states[i].output_name);
  }
  free(sb->states);
}
