/*
 * config_walk.c — the schema machinery config.pbtxt is read with.
 *
 * pbtxt.c gives a schema-free tree; the schema lives in tables. Each
 * message type is an array of field_spec rows (name, value type, repeated
 * or not, where the value is stored, hooks), and one walker applies any
 * table to any tree node: unknown and unsupported names, wrong value kinds,
 * lists on singular fields and repeated singular fields are refused here,
 * once, with the file and line. Adding a message (sequence_batching, say)
 * means a struct to fill, a table, and a row pointing at it: config.c
 * holds the model's tables, config_seq.c sequence_batching's, and both
 * are written with config_walk.h's macros. Checks that span several fields
 * (preferred sizes vs max_batch_size, ensemble vs backend) run after the
 * walk, in those files, and find their line in the tree again with the
 * helpers here.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config_walk.h"

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

hark_error *hark_cfg_get_int(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
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
  case V_I64: return hark_cfg_get_int(c, fs, v, dst);
  case V_ENUM: return get_enum(c, fs, v, dst);
  case V_MESSAGE: break;
  }
  return hark_cfg_kind_error(c, fs, v);
}

/* ---- the walker -------------------------------------------------------------------- */

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
  hark_error *err = hark_cfg_walk(c, fs->sub, sub, v, path);
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

/* Recursion follows the schema, not the input, so its depth is the
 * schema's. */
hark_error *hark_cfg_walk(cfg_ctx *c, const msg_spec *ms, void *obj, const hark_pb_field *msg,
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
