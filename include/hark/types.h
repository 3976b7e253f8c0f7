/*
 * hark/types.h — the vocabulary shared by every hark API: errors, data
 * types, tensors and the monotonic clock.
 *
 * Errors follow Triton's convention: a function that can fail returns a
 * hark_error *; NULL means success. The caller owns a returned error and
 * frees it with hark_error_free(). A function that *takes* a hark_error *
 * argument takes ownership of it unless its comment says otherwise.
 */
#ifndef HARK_TYPES_H
#define HARK_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ------------------------------------------------------------ */

typedef enum hark_code {
  HARK_OK = 0,
  HARK_ERR_INTERNAL,           /* HTTP 500, gRPC INTERNAL */
  HARK_ERR_NOT_FOUND,          /* 404, NOT_FOUND */
  HARK_ERR_INVALID_ARG,        /* 400, INVALID_ARGUMENT */
  HARK_ERR_UNAVAILABLE,        /* 503, UNAVAILABLE (not ready, queue full) */
  HARK_ERR_UNSUPPORTED,        /* 400, UNIMPLEMENTED */
  HARK_ERR_ALREADY_EXISTS,     /* 409, ALREADY_EXISTS */
  HARK_ERR_CANCELLED,          /* 499, CANCELLED */
  HARK_ERR_DEADLINE,           /* 504, DEADLINE_EXCEEDED (timed out in queue) */
  HARK_ERR_RESOURCE_EXHAUSTED, /* 429/503, RESOURCE_EXHAUSTED (limits) */
} hark_code;

typedef struct hark_error hark_error;

/* printf-style; never returns NULL (falls back to a static OOM error). */
hark_error *hark_error_new(hark_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
hark_code hark_error_code(const hark_error *err);
const char *hark_error_message(const hark_error *err);
void hark_error_free(hark_error *err);
/* "INTERNAL", "NOT_FOUND", ... */
const char *hark_code_name(hark_code code);
/* The HTTP status a front end sends for an error with this code. */
int hark_code_http_status(hark_code code);

/* ---- data types ---------------------------------------------------------- */

typedef enum hark_datatype {
  HARK_TYPE_INVALID = 0,
  HARK_TYPE_BOOL,
  HARK_TYPE_UINT8,
  HARK_TYPE_UINT16,
  HARK_TYPE_UINT32,
  HARK_TYPE_UINT64,
  HARK_TYPE_INT8,
  HARK_TYPE_INT16,
  HARK_TYPE_INT32,
  HARK_TYPE_INT64,
  HARK_TYPE_FP16,
  HARK_TYPE_FP32,
  HARK_TYPE_FP64,
  HARK_TYPE_BYTES, /* elements are a 4-byte little-endian length + bytes */
  HARK_TYPE_BF16,
  HARK_TYPE_COUNT_
} hark_datatype;

/* KServe v2 names: "INT32", "BYTES", ... INVALID when unknown. */
hark_datatype hark_datatype_from_name(const char *name);
const char *hark_datatype_name(hark_datatype dt);
/* Model config names: "TYPE_INT32", "TYPE_STRING", ... */
hark_datatype hark_datatype_from_config_name(const char *name);
const char *hark_datatype_config_name(hark_datatype dt);
/* Bytes per element; 0 for BYTES (variable) and INVALID. */
size_t hark_datatype_size(hark_datatype dt);

/* ---- tensors ------------------------------------------------------------- */

#define HARK_MAX_DIMS 8

/*
 * A read-only view of a tensor. The memory it points at belongs to the
 * request or response it came from and lives exactly as long as that object.
 * For BYTES tensors, data holds the elements back to back, each a 4-byte
 * little-endian length followed by that many bytes.
 */
typedef struct hark_tensor {
  const char *name;
  hark_datatype datatype;
  uint32_t ndims;
  int64_t shape[HARK_MAX_DIMS];
  const void *data;
  size_t byte_size;
} hark_tensor;

/* Product of the shape; 1 for a scalar (ndims 0); -1 if any dim is < 0. */
int64_t hark_shape_count(const int64_t *shape, uint32_t ndims);

/* ---- BYTES elements ------------------------------------------------------ */

/*
 * A BYTES tensor's data is its elements back to back, each a 4-byte
 * little-endian length followed by that many bytes (Triton's layout),
 * whatever the host's byte order.
 */
#define HARK_BYTES_PREFIX 4u

static inline void hark_bytes_put_len(void *dst, uint32_t len) {
  unsigned char *p = (unsigned char *)dst;
  p[0] = (unsigned char)len;
  p[1] = (unsigned char)(len >> 8);
  p[2] = (unsigned char)(len >> 16);
  p[3] = (unsigned char)(len >> 24);
}

static inline uint32_t hark_bytes_get_len(const void *src) {
  const unsigned char *p = (const unsigned char *)src;
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* True when data[0..size) holds exactly `count` well-formed elements. */
bool hark_bytes_check(const void *data, size_t size, int64_t count);
/* Element i: *p and *len point at its bytes (not NUL-terminated); false
 * when there is no such element or the layout breaks before it. */
bool hark_bytes_at(const void *data, size_t size, uint64_t i, const char **p, uint32_t *len);

/* ---- clock --------------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t hark_now_ns(void);

#ifdef __cplusplus
}
#endif
#endif
