/*
 * pbtxt.h — a schema-free parser for protobuf's text format (the language
 * of Triton's config.pbtxt).
 *
 * The parser knows nothing about any message type: it turns text into a
 * tree of named fields, each with the line it starts on, and leaves the
 * meaning of names and the checking of types to its caller (config.c). A
 * list `f: [a, b]` stays one HARK_PB_LIST node so the caller can see an
 * empty list's name and refuse lists on fields that are not repeated.
 *
 * The whole tree lives in one arena owned by the hark_pbtxt document:
 * hark_pbtxt_free() releases every node and string at once.
 */
#ifndef HARK_PBTXT_H
#define HARK_PBTXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/types.h"

/* Messages nested deeper than this are refused (hostile input guard). */
#define HARK_PBTXT_MAX_DEPTH 64

typedef enum hark_pb_kind {
  HARK_PB_MESSAGE, /* `f { ... }`, `f: { ... }` or `f < ... >` */
  HARK_PB_LIST,    /* `f: [ ... ]`: its elements are the children */
  HARK_PB_STRING,  /* one or more adjacent quoted strings, escapes decoded */
  HARK_PB_INT,     /* decimal, 0x hex or 0 octal, optionally negative */
  HARK_PB_FLOAT,   /* 1.5, 1e3, .5, 2f, -inf, nan */
  HARK_PB_IDENT,   /* enum names and true/false */
} hark_pb_kind;

typedef struct hark_pb_field hark_pb_field;
struct hark_pb_field {
  const char *name; /* list elements carry their list's name */
  uint32_t line;    /* 1-based line of the name (of the element in a list) */
  hark_pb_kind kind;
  const char *text;     /* STRING: decoded bytes; INT, FLOAT, IDENT: as written */
  size_t len;           /* bytes in text: a STRING may hold NULs from "\0" */
  uint64_t u;           /* INT: magnitude */
  bool negative;        /* INT: a leading '-' */
  double d;             /* FLOAT: its value */
  hark_pb_field *child; /* MESSAGE: first field; LIST: first element */
  hark_pb_field *next;  /* next sibling, in file order */
};

typedef struct hark_pbtxt hark_pbtxt;

/*
 * Parses `len` bytes of text (NUL termination not needed; a NUL byte in
 * the text is an error). Errors read "FILE:LINE: ..." with `file` as given.
 * On success *out belongs to the caller, who frees it with hark_pbtxt_free.
 */
hark_error *hark_pbtxt_parse(const char *text, size_t len, const char *file, hark_pbtxt **out);
void hark_pbtxt_free(hark_pbtxt *doc);

/* The top-level message (kind HARK_PB_MESSAGE, line 1); lives as long as doc. */
const hark_pb_field *hark_pbtxt_root(const hark_pbtxt *doc);

/* "a message", "a list", "a string", "an integer", "a number", "an identifier". */
const char *hark_pb_kind_name(hark_pb_kind kind);

#endif
