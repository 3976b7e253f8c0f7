/*
 * types.c — errors, data type names and sizes, shapes and the clock: the
 * small vocabulary of hark/types.h.
 */
#include "hark/types.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct hark_error {
  hark_code code;
  char *message;
};

/* Returned when allocating an error fails; freeing it is a no-op. */
static hark_error oom_error = {HARK_ERR_INTERNAL, "out of memory"};

hark_error *hark_error_new(hark_code code, const char *fmt, ...) {
  hark_error *err = malloc(sizeof *err);
  if (!err) return &oom_error;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  err->message = malloc((size_t)(n < 0 ? 0 : n) + 1);
  if (!err->message) {
    free(err);
    return &oom_error;
  }
  va_start(ap, fmt);
  vsnprintf(err->message, (size_t)n + 1, fmt, ap);
  va_end(ap);
  err->code = code;
  return err;
}

hark_code hark_error_code(const hark_error *err) { return err ? err->code : HARK_OK; }

const char *hark_error_message(const hark_error *err) { return err ? err->message : ""; }

void hark_error_free(hark_error *err) {
  if (!err || err == &oom_error) return;
  free(err->message);
  free(err);
}

const char *hark_code_name(hark_code code) {
  switch (code) {
  case HARK_OK: return "OK";
  case HARK_ERR_INTERNAL: return "INTERNAL";
  case HARK_ERR_NOT_FOUND: return "NOT_FOUND";
  case HARK_ERR_INVALID_ARG: return "INVALID_ARGUMENT";
  case HARK_ERR_UNAVAILABLE: return "UNAVAILABLE";
  case HARK_ERR_UNSUPPORTED: return "UNSUPPORTED";
  case HARK_ERR_ALREADY_EXISTS: return "ALREADY_EXISTS";
  case HARK_ERR_CANCELLED: return "CANCELLED";
  case HARK_ERR_DEADLINE: return "DEADLINE_EXCEEDED";
  case HARK_ERR_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
  }
  return "UNKNOWN";
}

int hark_code_http_status(hark_code code) {
  switch (code) {
  case HARK_OK: return 200;
  case HARK_ERR_NOT_FOUND: return 404;
  case HARK_ERR_INVALID_ARG:
  case HARK_ERR_UNSUPPORTED: return 400;
  case HARK_ERR_ALREADY_EXISTS: return 409;
  case HARK_ERR_UNAVAILABLE:
  case HARK_ERR_RESOURCE_EXHAUSTED: return 503;
  case HARK_ERR_CANCELLED: return 499;
  case HARK_ERR_DEADLINE: return 504;
  case HARK_ERR_INTERNAL: return 500;
  }
  return 500;
}

static const struct {
  const char *name, *config_name;
  size_t size;
} types[HARK_TYPE_COUNT_] = {
    [HARK_TYPE_INVALID] = {"INVALID", "TYPE_INVALID", 0},
    [HARK_TYPE_BOOL] = {"BOOL", "TYPE_BOOL", 1},
    [HARK_TYPE_UINT8] = {"UINT8", "TYPE_UINT8", 1},
    [HARK_TYPE_UINT16] = {"UINT16", "TYPE_UINT16", 2},
    [HARK_TYPE_UINT32] = {"UINT32", "TYPE_UINT32", 4},
    [HARK_TYPE_UINT64] = {"UINT64", "TYPE_UINT64", 8},
    [HARK_TYPE_INT8] = {"INT8", "TYPE_INT8", 1},
    [HARK_TYPE_INT16] = {"INT16", "TYPE_INT16", 2},
    [HARK_TYPE_INT32] = {"INT32", "TYPE_INT32", 4},
    [HARK_TYPE_INT64] = {"INT64", "TYPE_INT64", 8},
    [HARK_TYPE_FP16] = {"FP16", "TYPE_FP16", 2},
    [HARK_TYPE_FP32] = {"FP32", "TYPE_FP32", 4},
    [HARK_TYPE_FP64] = {"FP64", "TYPE_FP64", 8},
    [HARK_TYPE_BYTES] = {"BYTES", "TYPE_STRING", 0},
    [HARK_TYPE_BF16] = {"BF16", "TYPE_BF16", 2},
};

hark_datatype hark_datatype_from_name(const char *name) {
  for (int i = 1; name && i < HARK_TYPE_COUNT_; i++)
    if (types[i].name[0] == name[0] && strcmp(types[i].name, name) == 0) return (hark_datatype)i;
  return HARK_TYPE_INVALID;
}

const char *hark_datatype_name(hark_datatype dt) {
  return (unsigned)dt < HARK_TYPE_COUNT_ ? types[dt].name : "INVALID";
}

hark_datatype hark_datatype_from_config_name(const char *name) {
  for (int i = 1; name && i < HARK_TYPE_COUNT_; i++)
    if (strcmp(types[i].config_name, name) == 0) return (hark_datatype)i;
  return HARK_TYPE_INVALID;
}

const char *hark_datatype_config_name(hark_datatype dt) {
  return (unsigned)dt < HARK_TYPE_COUNT_ ? types[dt].config_name : "TYPE_INVALID";
}

size_t hark_datatype_size(hark_datatype dt) {
  return (unsigned)dt < HARK_TYPE_COUNT_ ? types[dt].size : 0;
}

int64_t hark_shape_count(const int64_t *shape, uint32_t ndims) {
  int64_t n = 1;
  for (uint32_t i = 0; i < ndims; i++) {
    if (shape[i] < 0) return -1;
    if (shape[i] != 0 && n > INT64_MAX / shape[i]) return -1;
    n *= shape[i];
  }
  return n;
}

bool hark_bytes_check(const void *data, size_t size, int64_t count) {
  const unsigned char *p = data;
  size_t left = size;
  for (int64_t i = 0; i < count; i++) {
    if (left < HARK_BYTES_PREFIX) return false;
    uint32_t len = hark_bytes_get_len(p);
    p += HARK_BYTES_PREFIX;
    left -= HARK_BYTES_PREFIX;
    if (len > left) return false;
    p += len;
    left -= len;
  }
  return count >= 0 && left == 0;
}

bool hark_bytes_at(const void *data, size_t size, uint64_t i, const char **out, uint32_t *out_len) {
  const char *p = data, *end = p + size;
  for (uint64_t k = 0;; k++) {
    if ((size_t)(end - p) < HARK_BYTES_PREFIX) return false;
    uint32_t len = hark_bytes_get_len(p);
    p += HARK_BYTES_PREFIX;
    if ((size_t)(end - p) < len) return false;
    if (k == i) {
      *out = p;
      *out_len = len;
      return true;
    }
    p += len;
  }
}

uint64_t hark_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
