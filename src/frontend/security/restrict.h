/*
 * restrict.h — Triton's restricted APIs (--http-restricted-api,
 * --grpc-restricted-protocol): every endpoint belongs to one category
 * (health, metadata, inference, ...); a category may be restricted to
 * requests that carry a header (gRPC: metadata) with a given value. One
 * table per protocol, made from the flags at start and read-only after,
 * so the loops read it without locks.
 */
#ifndef HARK_FRONTEND_RESTRICT_H
#define HARK_FRONTEND_RESTRICT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/types.h"

/* The categories, as Triton names them. 0 is no category: a method table
 * entry that forgot to name one (registration refuses it). */
typedef enum hark_api {
  HARK_API_UNSET = 0,
  HARK_API_HEALTH,
  HARK_API_METADATA,
  HARK_API_INFERENCE,
  HARK_API_SHARED_MEMORY,
  HARK_API_MODEL_CONFIG,
  HARK_API_MODEL_REPOSITORY,
  HARK_API_STATISTICS,
  HARK_API_TRACE,
  HARK_API_LOGGING,
  HARK_API_COUNT
} hark_api;

/* The category's flag name ("model-config"). */
const char *hark_api_name(hark_api api);

typedef struct hark_restrict hark_restrict;

hark_restrict *hark_restrict_new(void);
void hark_restrict_free(hark_restrict *r);
/* Adds one flag's value, "<category>[,<category>...]:<header>=<value>";
 * `flag` names the flag in the error. A category restricted twice, an
 * unknown category, an empty or malformed header or value are errors. */
hark_error *hark_restrict_add(hark_restrict *r, const char *flag, const char *spec);
/* True when any category is restricted. NULL: none. */
bool hark_restrict_any(const hark_restrict *r);
/* The header (lower case, without a colon) that `api` requires, or NULL
 * when it is open to everyone. NULL r: open. */
const char *hark_restrict_header(const hark_restrict *r, hark_api api);
/* Whether a request to `api` that carries `value` for its header (NULL:
 * absent) may go on. The comparison takes the same time whatever the
 * value. */
bool hark_restrict_allows(const hark_restrict *r, hark_api api, const char *value, size_t len);
/* The refusal's message: "This API is restricted, expecting header 'k'"
 * (Triton's words), into buf. */
void hark_restrict_message(const hark_restrict *r, hark_api api, char *buf, size_t cap);

/* For a protocol whose headers arrive one by one (HTTP/2): the categories
 * a header name/value pair opens, as a bit mask (1 << api). */
uint32_t hark_restrict_opens(const hark_restrict *r, const uint8_t *name, size_t nlen,
                             const uint8_t *value, size_t vlen);
/* As hark_restrict_opens, folded into a request's `state` (0 before its
 * first header): a restricted header sent more than once opens none of
 * its categories, whatever the values (as if it were absent, but with its
 * own refusal message), so a request cannot pass by adding a guess to a
 * value a proxy set, nor the protocols differ on which value counts. */
void hark_restrict_collect(const hark_restrict *r, uint32_t *state, const uint8_t *name,
                           size_t nlen, const uint8_t *value, size_t vlen);
/* Whether a request that collected `opened` (a mask, or a state) may
 * reach `api`. */
bool hark_restrict_allows_mask(const hark_restrict *r, hark_api api, uint32_t opened);
/* hark_restrict_message for a request that collected `state`: says when
 * the header came more than once. */
void hark_restrict_message_state(const hark_restrict *r, hark_api api, uint32_t state, char *buf,
                                 size_t cap);

/* Config documents (model-config) do not show filesystem paths to a
 * client that may not see model-repository: whether a parameter's value
 * reads as one (it holds a '/' or starts with '~'), and what is shown
 * instead. */
bool hark_restrict_is_path(const char *value);
#define HARK_RESTRICT_PATH_HIDDEN "<path hidden>"

#endif
