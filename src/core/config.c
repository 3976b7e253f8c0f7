/*
 * config.c — config.pbtxt → hark_model_config, and the config back out as
 * the JSON Triton's /v2/models/{m}/config returns.
 *
 * pbtxt.c gives a schema-free tree; the schema lives here as tables. Each
 * message type is an array of field_spec rows (name, value type, repeated
 * or not, where the value is stored, hooks), and one walker applies any
 * table to any tree node: unknown and unsupported names, wrong value kinds,
 * lists on singular fields and repeated singular fields are refused there,
 * once, with the file and line. Adding a message (sequence_batching, say)
 * means a struct to fill, a table, and a row pointing at it (config_seq.c
 * holds sequence_batching's; config_impl.h shares the machinery). Checks that
 * span several fields (preferred sizes vs max_batch_size, ensemble vs
 * backend) run after the walk, and find their line in the tree again.
 */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_impl.h"

/* ---- errors ------------------------------------------------------------------ */

/* "FILE:LINE: message", or "FILE: message" when no line applies (line 0). */
hark_error *hark_cfg_fail(const cfg_ctx *c, hark_code code, uint32_t line, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (line == 0) return hark_error_new(code, "%s: %s", c->file, msg);
  return hark_error_new(code, "%s:%u: %s", c->file, line, msg);
}

hark_error *hark_cfg_out_of_memory(void) {
  return hark_error_new(HARK_ERR_INTERNAL, "out of memory parsing a model config");
}

/* The index-th value of field `name` in message `msg` (list elements count
 * one by one), or NULL. Checks made after the walk use it to find lines. */
const hark_pb_field *hark_cfg_find_value(const hark_pb_field *msg, const char *name,
                                         uint32_t index) {
  for (const hark_pb_field *f = msg ? msg->child : NULL; f; f = f->next) {
    if (strcmp(f->name, name) != 0) continue;
    if (f->kind != HARK_PB_LIST) {
      if (index-- == 0) return f;
      continue;
    }
    for (const hark_pb_field *e = f->child; e; e = e->next)
      if (index-- == 0) return e;
  }
  return NULL;
}

/* The line of a value, or `fallback` (0: none) when the field is absent. */
uint32_t hark_cfg_line_of(const hark_pb_field *msg, const char *name, uint32_t index,
                          uint32_t fallback) {
  const hark_pb_field *v = hark_cfg_find_value(msg, name, index);
  return v ? v->line : fallback;
}

/* ---- scalar conversion ----------------------------------------------------------- */

static const char *expected_kind(const field_spec *fs) {
  switch (fs->type) {
  case V_MESSAGE: return "a message";
  case V_STRING: return "a string";
  case V_BOOL: return "true or false";
  case V_U32:
  case V_U64: return "an unsigned integer";
  case V_I64: return "an integer";
  case V_ENUM: return "an enum name";
  }
  return "a value";
}

hark_error *hark_cfg_kind_error(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v) {
  bool show = v->kind != HARK_PB_MESSAGE && v->kind != HARK_PB_STRING && v->kind != HARK_PB_LIST;
  return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "field '%s' expects %s, not %s%s%.64s%s",
                       fs->name, expected_kind(fs), hark_pb_kind_name(v->kind), show ? " '" : "",
                       show ? v->text : "", show ? "'" : "");
}

static hark_error *range_error(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                               int64_t lo, uint64_t hi) {
  return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                       "value %.64s for field '%s' is out of range [%" PRId64 ", %" PRIu64 "]",
                       v->text, fs->name, lo, hi);
}

/* An integer in [0, type_max], narrowed further by the spec's range. */
hark_error *hark_cfg_get_uint(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                              uint64_t type_max, uint64_t *out) {
  if (v->kind != HARK_PB_INT) return hark_cfg_kind_error(c, fs, v);
  uint64_t lo = fs->max ? (uint64_t)fs->min : 0, hi = fs->max ? (uint64_t)fs->max : type_max;
  if ((v->negative && v->u != 0) || v->u < lo || v->u > hi)
    return range_error(c, fs, v, (int64_t)lo, hi);
  *out = v->u;
  return NULL;
}

static hark_error *get_int(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                           int64_t *out) {
  if (v->kind != HARK_PB_INT) return hark_cfg_kind_error(c, fs, v);
  int64_t lo = fs->max ? fs->min : INT64_MIN, hi = fs->max ? fs->max : INT64_MAX;
  bool fits = v->negative ? v->u <= (uint64_t)INT64_MAX + 1 : v->u <= (uint64_t)INT64_MAX;
  /* -(2^63) has no positive twin: negate in unsigned arithmetic. */
  int64_t x = !fits ? 0 : v->negative ? (int64_t)(0 - v->u) : (int64_t)v->u;
  if (!fits || x < lo || x > hi) return range_error(c, fs, v, lo, (uint64_t)hi);
  *out = x;
  return NULL;
}

/* protobuf's spellings: true/True/t/1 and false/False/f/0. */
static hark_error *get_bool(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                            bool *out) {
  static const char *const yes[] = {"true", "True", "t"}, *const no[] = {"false", "False", "f"};
  if (v->kind == HARK_PB_INT && !v->negative && v->u <= 1) {
    *out = v->u == 1;
    return NULL;
  }
  for (size_t i = 0; v->kind == HARK_PB_IDENT && i < ARRAY_LEN(yes); i++) {
    if (strcmp(v->text, yes[i]) == 0) return *out = true, NULL;
    if (strcmp(v->text, no[i]) == 0) return *out = false, NULL;
  }
  return hark_cfg_kind_error(c, fs, v);
}

/* A string without NULs (they would cut a C string short), malloc'ed. */
hark_error *hark_cfg_get_string(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                                char **out) {
  if (v->kind != HARK_PB_STRING) return hark_cfg_kind_error(c, fs, v);
  if (strlen(v->text) != v->len)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line, "field '%s' holds a NUL byte", fs->name);
  char *s = malloc(v->len + 1);
  if (!s) return hark_cfg_out_of_memory();
  memcpy(s, v->text, v->len + 1);
  *out = s;
  return NULL;
}

static hark_error *get_enum(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                            unsigned *out) {
  if (v->kind != HARK_PB_IDENT) return hark_cfg_kind_error(c, fs, v);
  char names[256] = "";
  for (uint32_t i = 0; i < fs->n_enums; i++) {
    if (strcmp(v->text, fs->enums[i]) == 0) return *out = i, NULL;
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "", fs->enums[i]);
  }
  return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                       "field '%s' has no value '%.64s' (expected one of %s)", fs->name, v->text,
                       names);
}

/* The enums this file stores through `unsigned *` must be unsigned-sized. */
_Static_assert(sizeof(hark_instance_kind) == sizeof(unsigned), "enum size");
_Static_assert(sizeof(hark_timeout_action) == sizeof(unsigned), "enum size");

static hark_error *store_scalar(cfg_ctx *c, const field_spec *fs, void *obj,
                                const hark_pb_field *v) {
  void *dst = (char *)obj + fs->offset;
  hark_error *err = NULL;
  uint64_t u = 0;
  char *s = NULL;
  switch (fs->type) {
  case V_STRING:
    if (!(err = hark_cfg_get_string(c, fs, v, &s))) {
      free(*(char **)dst);
      *(char **)dst = s;
    }
    return err;
  case V_BOOL: return get_bool(c, fs, v, dst);
  case V_U32:
    if (!(err = hark_cfg_get_uint(c, fs, v, UINT32_MAX, &u))) *(uint32_t *)dst = (uint32_t)u;
    return err;
  case V_U64: return hark_cfg_get_uint(c, fs, v, UINT64_MAX, dst);
  case V_I64: return get_int(c, fs, v, dst);
  case V_ENUM: return get_enum(c, fs, v, dst);
  case V_MESSAGE: break;
  }
  return hark_cfg_kind_error(c, fs, v);
}

/* ---- the walker -------------------------------------------------------------------- */

static hark_error *walk(cfg_ctx *c, const msg_spec *ms, void *obj, const hark_pb_field *msg,
                        const char *where);

static const field_spec *find_spec(const msg_spec *ms, const char *name) {
  for (size_t i = 0; i < ms->n; i++)
    if (strcmp(ms->fields[i].name, name) == 0) return &ms->fields[i];
  return NULL;
}

static hark_error *apply(cfg_ctx *c, const field_spec *fs, void *obj, const hark_pb_field *v,
                         const char *where) {
  if (fs->type != V_MESSAGE) {
    if (v->kind == HARK_PB_MESSAGE) return hark_cfg_kind_error(c, fs, v);
    return fs->set ? fs->set(c, fs, obj, v) : store_scalar(c, fs, obj, v);
  }
  if (v->kind != HARK_PB_MESSAGE) return hark_cfg_kind_error(c, fs, v);
  void *sub = fs->open ? fs->open(obj) : (char *)obj + fs->offset;
  if (!sub) return hark_cfg_out_of_memory();
  char path[256];
  snprintf(path, sizeof path, "%s%s%s", where ? where : "", where ? "." : "", fs->name);
  hark_error *err = walk(c, fs->sub, sub, v, path);
  if (!err && fs->done) err = fs->done(c, obj, v);
  return err;
}

/* Refuses a field the schema does not take, a list or a repeat where one
 * value belongs; `seen` has a bit per table row. */
static hark_error *admit(const cfg_ctx *c, const field_spec *fs, size_t row, const hark_pb_field *f,
                         const char *where, uint64_t *seen) {
  char in[300] = "";
  if (where) snprintf(in, sizeof in, " in '%s'", where);
  if (!fs)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, f->line, "unknown field '%.64s'%s", f->name, in);
  if (fs->flags & F_UNSUPPORTED)
    return hark_cfg_fail(c, HARK_ERR_UNSUPPORTED, f->line, "unsupported field '%s'%s", f->name, in);
  if (fs->flags & F_REPEATED) return NULL;
  if (f->kind == HARK_PB_LIST)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, f->line,
                         "field '%s'%s is not repeated: it takes no list", f->name, in);
  uint64_t bit = row < 64 ? (uint64_t)1 << row : 0;
  if (*seen & bit)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, f->line, "field '%s'%s is set more than once",
                         f->name, in);
  *seen |= bit;
  return NULL;
}

/* Applies table `ms` to the fields of `msg`, storing into obj. Recursion
 * follows the schema, not the input, so its depth is the schema's. */
static hark_error *walk(cfg_ctx *c, const msg_spec *ms, void *obj, const hark_pb_field *msg,
                        const char *where) {
  uint64_t seen = 0;
  for (const hark_pb_field *f = msg->child; f; f = f->next) {
    const field_spec *fs = find_spec(ms, f->name);
    hark_error *err = admit(c, fs, fs ? (size_t)(fs - ms->fields) : 0, f, where, &seen);
    if (!err && f->kind != HARK_PB_LIST) err = apply(c, fs, obj, f, where);
    for (const hark_pb_field *e = f->kind == HARK_PB_LIST ? f->child : NULL; !err && e; e = e->next)
      err = apply(c, fs, obj, e, where);
    if (err) return err;
  }
  return NULL;
}

/* ---- arrays ------------------------------------------------------------------------ */

/* Room for element n of an array holding n, which doubles whenever n is a
 * power of two (so no capacity is stored); the new element is zeroed. */
void *hark_cfg_grow(void *arr, uint32_t n, size_t size) {
  if (n >= UINT32_MAX / 2) return NULL;
  if ((n & (n - 1)) == 0) {
    arr = realloc(arr, (n ? (size_t)n * 2 : 1) * size);
    if (!arr) return NULL;
  }
  memset((char *)arr + (size_t)n * size, 0, size);
  return arr;
}

/* For messages whose fields live in the parent's struct. */
void *hark_cfg_open_self(void *obj) { return obj; }

/* ---- dynamic_batching ------------------------------------------------------------- */

static const char *const timeout_actions[] = {"REJECT", "DELAY"};

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
  hark_error *err = get_int(c, fs, v, &x);
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

hark_error *hark_cfg_set_data_type(cfg_ctx *c, const field_spec *fs, void *obj,
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

hark_error *hark_cfg_add_dim(cfg_ctx *c, const field_spec *fs, void *obj, const hark_pb_field *v) {
  hark_model_io *io = obj;
  int64_t d = 0;
  hark_error *err = get_int(c, fs, v, &d);
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
    CUSTOM("data_type", V_ENUM, hark_cfg_set_data_type, 0, 0, 0),
    CUSTOM("dims", V_I64, hark_cfg_add_dim, F_REPEATED, 0, 0),
    SCALAR("optional", V_BOOL, hark_model_io, optional),
    UNSUPPORTED("format"),
    UNSUPPORTED("reshape"),
    UNSUPPORTED("is_shape_tensor"),
    UNSUPPORTED("allow_ragged_batch"),
    UNSUPPORTED("is_non_linear_format_io"),
};
static const field_spec output_fields[] = {
    SCALAR("name", V_STRING, hark_model_io, name),
    CUSTOM("data_type", V_ENUM, hark_cfg_set_data_type, 0, 0, 0),
    CUSTOM("dims", V_I64, hark_cfg_add_dim, F_REPEATED, 0, 0),
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
_Static_assert(ARRAY_LEN(model_fields) <= 64, "walk() tracks repeats in a 64-bit mask");

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

/* A model runs either through a backend or as an ensemble of models. */
static hark_error *finish_platform(cfg_ctx *c) {
  hark_model_config *cfg = c->cfg;
  if (!cfg->platform) cfg->platform = strdup("");
  if (!cfg->backend) cfg->backend = strdup("");
  if (!cfg->default_model_filename) cfg->default_model_filename = strdup("");
  if (!cfg->platform || !cfg->backend || !cfg->default_model_filename)
    return hark_cfg_out_of_memory();
  if (strcmp(cfg->platform, "ensemble") == 0) return finish_ensemble(c);
  if (*cfg->platform)
    return hark_cfg_fail(
        c, HARK_ERR_UNSUPPORTED, hark_cfg_line_of(c->root, "platform", 0, 0),
        "unsupported platform '%s': hark runs a model through its 'backend', or as "
        "platform \"ensemble\"",
        cfg->platform);
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
  return NULL;
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
  err = walk(&c, &model_spec, c.cfg, c.root, NULL);
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

const char *hark_model_config_parameter(const hark_model_config *cfg, const char *key) {
  for (uint32_t i = 0; cfg && key && i < cfg->n_parameters; i++)
    if (strcmp(cfg->parameters[i].key, key) == 0) return cfg->parameters[i].value;
  return NULL;
}

/* ---- JSON, as Triton's /v2/models/{m}/config --------------------------------------------- */

/* Integers go out as raw text so 64-bit values keep every digit (a cJSON
 * number is a double); Triton, too, prints them as numbers, not strings. */
cJSON *hark_cfg_json_raw_int(int64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%" PRId64, v);
  return cJSON_CreateRaw(b);
}

static void json_int(cJSON *o, const char *key, int64_t v) {
  cJSON_AddItemToObject(o, key, hark_cfg_json_raw_int(v));
}

void hark_cfg_json_uint(cJSON *o, const char *key, uint64_t v) {
  char b[24];
  snprintf(b, sizeof b, "%" PRIu64, v);
  cJSON_AddRawToObject(o, key, b);
}

void hark_cfg_json_string(cJSON *o, const char *key, const char *s) {
  cJSON_AddStringToObject(o, key, s ? s : "");
}

static void json_version_policy(cJSON *root, const hark_version_policy *vp) {
  cJSON *o = cJSON_AddObjectToObject(root, "version_policy");
  if (vp->kind == HARK_VERSION_ALL) {
    cJSON_AddObjectToObject(o, "all");
  } else if (vp->kind == HARK_VERSION_SPECIFIC) {
    cJSON *a = cJSON_AddArrayToObject(cJSON_AddObjectToObject(o, "specific"), "versions");
    for (uint32_t i = 0; i < vp->n_versions; i++)
      cJSON_AddItemToArray(a, hark_cfg_json_raw_int(vp->versions[i]));
  } else {
    hark_cfg_json_uint(cJSON_AddObjectToObject(o, "latest"), "num_versions",
                       vp->latest_num_versions);
  }
}

static void json_ios(cJSON *root, const char *key, const hark_model_io *ios, uint32_t n,
                     bool inputs) {
  cJSON *a = cJSON_AddArrayToObject(root, key);
  for (uint32_t i = 0; i < n; i++) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(a, o);
    hark_cfg_json_string(o, "name", ios[i].name);
    hark_cfg_json_string(o, "data_type", hark_datatype_config_name(ios[i].datatype));
    cJSON *dims = cJSON_AddArrayToObject(o, "dims");
    for (uint32_t d = 0; d < ios[i].ndims; d++)
      cJSON_AddItemToArray(dims, hark_cfg_json_raw_int(ios[i].dims[d]));
    if (inputs) cJSON_AddBoolToObject(o, "optional", ios[i].optional);
  }
}

static void json_instance_groups(cJSON *root, const hark_model_config *cfg) {
  cJSON *a = cJSON_AddArrayToObject(root, "instance_group");
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) {
    const hark_instance_group *g = &cfg->instance_groups[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(a, o);
    hark_cfg_json_string(o, "name", g->name);
    hark_cfg_json_string(
        o, "kind", (unsigned)g->kind < ARRAY_LEN(instance_kinds) ? instance_kinds[g->kind] : "");
    hark_cfg_json_uint(o, "count", g->count);
  }
}

static void json_queue_policy(cJSON *o, const hark_queue_policy *p) {
  hark_cfg_json_string(o, "timeout_action",
                       (unsigned)p->timeout_action < ARRAY_LEN(timeout_actions)
                           ? timeout_actions[p->timeout_action]
                           : "");
  hark_cfg_json_uint(o, "default_timeout_microseconds", p->default_timeout_us);
  cJSON_AddBoolToObject(o, "allow_timeout_override", p->allow_timeout_override);
  hark_cfg_json_uint(o, "max_queue_size", p->max_queue_size);
}

static void json_dynamic_batching(cJSON *root, const hark_dynamic_batching *db) {
  cJSON *o = cJSON_AddObjectToObject(root, "dynamic_batching");
  cJSON *pref = cJSON_AddArrayToObject(o, "preferred_batch_size");
  for (uint32_t i = 0; i < db->n_preferred_batch_size; i++)
    cJSON_AddItemToArray(pref, hark_cfg_json_raw_int(db->preferred_batch_size[i]));
  hark_cfg_json_uint(o, "max_queue_delay_microseconds", db->max_queue_delay_us);
  cJSON_AddBoolToObject(o, "preserve_ordering", db->preserve_ordering);
  hark_cfg_json_uint(o, "priority_levels", db->priority_levels);
  hark_cfg_json_uint(o, "default_priority_level", db->default_priority_level);
  json_queue_policy(cJSON_AddObjectToObject(o, "default_queue_policy"), &db->default_queue_policy);
  cJSON *map = cJSON_AddObjectToObject(o, "priority_queue_policy");
  for (uint32_t i = 0; i < db->n_priority_queue_policy; i++) {
    char key[16];
    snprintf(key, sizeof key, "%u", db->priority_queue_policy[i].level);
    json_queue_policy(cJSON_AddObjectToObject(map, key), &db->priority_queue_policy[i].policy);
  }
}

static void json_string_map(cJSON *o, const char *key, const hark_kv *kvs, uint32_t n) {
  cJSON *map = cJSON_AddObjectToObject(o, key);
  for (uint32_t i = 0; i < n; i++) hark_cfg_json_string(map, kvs[i].key, kvs[i].value);
}

static void json_ensemble(cJSON *root, const hark_model_config *cfg) {
  cJSON *steps =
      cJSON_AddArrayToObject(cJSON_AddObjectToObject(root, "ensemble_scheduling"), "step");
  for (uint32_t i = 0; i < cfg->n_ensemble_steps; i++) {
    const hark_ensemble_step *s = &cfg->ensemble_steps[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(steps, o);
    hark_cfg_json_string(o, "model_name", s->model_name);
    json_int(o, "model_version", s->model_version);
    json_string_map(o, "input_map", s->input_map, s->n_input_map);
    json_string_map(o, "output_map", s->output_map, s->n_output_map);
  }
}

static void json_parameters(cJSON *root, const hark_model_config *cfg) {
  cJSON *map = cJSON_AddObjectToObject(root, "parameters");
  for (uint32_t i = 0; i < cfg->n_parameters; i++)
    hark_cfg_json_string(cJSON_AddObjectToObject(map, cfg->parameters[i].key), "string_value",
                         cfg->parameters[i].value);
}

char *hark_model_config_to_json(const hark_model_config *cfg) {
  if (!cfg) return NULL;
  cJSON *root = cJSON_CreateObject();
  if (!root) return NULL;
  hark_cfg_json_string(root, "name", cfg->name);
  hark_cfg_json_string(root, "platform", cfg->platform);
  hark_cfg_json_string(root, "backend", cfg->backend);
  json_version_policy(root, &cfg->version_policy);
  hark_cfg_json_uint(root, "max_batch_size", cfg->max_batch_size);
  json_ios(root, "input", cfg->inputs, cfg->n_inputs, true);
  json_ios(root, "output", cfg->outputs, cfg->n_outputs, false);
  json_instance_groups(root, cfg);
  if (cfg->dynamic_batching.enabled) json_dynamic_batching(root, &cfg->dynamic_batching);
  if (cfg->sequence_batching.enabled)
    hark_cfg_json_sequence_batching(root, &cfg->sequence_batching);
  if (cfg->n_ensemble_steps) json_ensemble(root, cfg);
  json_parameters(root, cfg);
  cJSON_AddBoolToObject(cJSON_AddObjectToObject(root, "model_transaction_policy"), "decoupled",
                        cfg->decoupled);
  hark_cfg_json_string(root, "default_model_filename", cfg->default_model_filename);
  char *s = cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  return s;
}
