/*
 * config_walk.h — private to src/core/config*.c: the table-driven schema
 * machinery (config_walk.c) that the model's tables (config.c) and
 * sequence_batching's (config_seq.c) are written in. See config_walk.c's
 * header for how tables, the walker and the post-walk checks fit
 * together.
 */
#ifndef HARK_CONFIG_WALK_H
#define HARK_CONFIG_WALK_H

#include <stddef.h>

#include "core/pbtxt.h"
#include "hark/config.h"

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

typedef struct cfg_ctx {
  const char *file;
  const hark_pb_field *root;
  hark_model_config *cfg;
  bool version_chosen;  /* version_policy's oneof already has a member */
  bool strategy_chosen; /* sequence_batching's direct/oldest oneof, likewise */
} cfg_ctx;

/* ---- the schema --------------------------------------------------------------- */

typedef enum vtype { V_MESSAGE, V_STRING, V_BOOL, V_U32, V_U64, V_I64, V_ENUM } vtype;

enum { F_REPEATED = 1, F_UNSUPPORTED = 2 };

typedef struct field_spec field_spec;
typedef struct msg_spec {
  const field_spec *fields;
  size_t n;
} msg_spec;

/* Stores one scalar value into obj, for fields that need more than a copy. */
typedef hark_error *(*set_fn)(cfg_ctx *c, const field_spec *fs, void *obj, const hark_pb_field *v);
/* The object a message value fills (often a fresh array element); NULL: out of memory. */
typedef void *(*open_fn)(void *obj);
/* Checks a message value once it is filled; obj is the parent, as for open. */
typedef hark_error *(*done_fn)(cfg_ctx *c, void *obj, const hark_pb_field *v);

struct field_spec {
  const char *name;
  vtype type;
  unsigned flags;
  size_t offset;            /* scalar: where in obj; message without open: its object */
  int64_t min, max;         /* V_U32, V_I64: accepted range when max != 0 */
  set_fn set;               /* scalar: custom store instead of the generic one */
  const msg_spec *sub;      /* V_MESSAGE: the value's schema */
  open_fn open;             /* V_MESSAGE: the object to fill, instead of obj + offset */
  done_fn done;             /* V_MESSAGE: checks after filling */
  const char *const *enums; /* V_ENUM: names, value = index */
  uint32_t n_enums;
};

#define SCALAR(n, t, st, m) \
  { .name = n, .type = t, .offset = offsetof(st, m) }
#define RANGED(n, t, st, m, lo, hi) \
  { .name = n, .type = t, .offset = offsetof(st, m), .min = lo, .max = hi }
#define ENUM(n, st, m, names)                                             \
  {                                                                       \
    .name = n, .type = V_ENUM, .offset = offsetof(st, m), .enums = names, \
    .n_enums = ARRAY_LEN(names)                                           \
  }
#define CUSTOM(n, t, fn, fl, lo, hi) \
  { .name = n, .type = t, .set = fn, .flags = fl, .min = lo, .max = hi }
/* A message whose fields live in the parent's struct, at member m. */
#define EMBEDDED(n, spec, st, m) \
  { .name = n, .type = V_MESSAGE, .sub = &spec, .offset = offsetof(st, m) }
/* A message that fills the object open() returns, checked by done(). */
#define MESSAGE(n, spec, op, dn, fl) \
  { .name = n, .type = V_MESSAGE, .sub = &spec, .open = op, .done = dn, .flags = fl }
#define UNSUPPORTED(n) \
  { .name = n, .flags = F_UNSUPPORTED }
#define SPEC(fields) \
  { fields, ARRAY_LEN(fields) }

/* Defines `static void *fname(void *obj)`: appends a zeroed element to
 * ((st *)obj)->arr, counted by ->n, and returns it (NULL: out of memory). */
#define DEFINE_APPEND(fname, st, arr, n)                   \
  static void *fname(void *obj) {                          \
    st *o = obj;                                           \
    void *a = hark_cfg_grow(o->arr, o->n, sizeof *o->arr); \
    if (!a) return NULL;                                   \
    o->arr = a;                                            \
    return &o->arr[o->n++];                                \
  }

/* ---- the walker and its helpers ------------------------------------------------ */

/* Applies table `ms` to the fields of `msg`, storing into obj; `where`
 * names the enclosing message in errors (NULL at the top). Unknown and
 * unsupported names, wrong value kinds, lists on singular fields and
 * repeated singular fields are refused here, with the file and line. */
hark_error *hark_cfg_walk(cfg_ctx *c, const msg_spec *ms, void *obj, const hark_pb_field *msg,
                          const char *where);
/* "FILE:LINE: message", or "FILE: message" when no line applies (line 0). */
hark_error *hark_cfg_fail(const cfg_ctx *c, hark_code code, uint32_t line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
hark_error *hark_cfg_out_of_memory(void);
/* The index-th value of field `name` in message `msg` (list elements count
 * one by one), or NULL. */
const hark_pb_field *hark_cfg_find_value(const hark_pb_field *msg, const char *name,
                                         uint32_t index);
/* The line of a value, or `fallback` (0: none) when the field is absent. */
uint32_t hark_cfg_line_of(const hark_pb_field *msg, const char *name, uint32_t index,
                          uint32_t fallback);
hark_error *hark_cfg_kind_error(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v);
/* An integer in [0, type_max], narrowed further by the spec's range. */
hark_error *hark_cfg_get_uint(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                              uint64_t type_max, uint64_t *out);
/* An integer, in the spec's range when it has one. */
hark_error *hark_cfg_get_int(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                             int64_t *out);
/* A string without NULs, malloc'ed. */
hark_error *hark_cfg_get_string(const cfg_ctx *c, const field_spec *fs, const hark_pb_field *v,
                                char **out);
/* Room for element n of an array holding n (doubling at powers of two); zeroed. */
void *hark_cfg_grow(void *arr, uint32_t n, size_t size);
/* For messages whose fields live in the parent's struct. */
void *hark_cfg_open_self(void *obj);

#endif
