/*
 * settings.h — Triton's log settings and trace settings, as both KServe
 * services (HTTP /v2/logging and /v2/[models/{m}/]trace/setting, gRPC
 * LogSettings and TraceSetting) read and change them: named values checked
 * here once, whatever the transport, then applied to hark's log
 * (util/log.h) all together or not at all.
 *
 * hark does not trace requests: the trace settings read as tracing off,
 * and an update is accepted only where it changes nothing.
 */
#ifndef HARK_FRONTEND_KSERVE_SETTINGS_H
#define HARK_FRONTEND_KSERVE_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/types.h"
#include "util/buf.h"
#include "util/log.h"

/* A setting's value as a client sent it. */
typedef enum hark_setting_type {
  HARK_SETTING_BOOL,
  HARK_SETTING_UINT,   /* a whole number from 0 to UINT32_MAX */
  HARK_SETTING_STRING, /* s: borrowed from the request */
  HARK_SETTING_OTHER,  /* anything else (a negative or fractional number, null, ...) */
} hark_setting_type;

typedef struct hark_setting_value {
  hark_setting_type type;
  bool b;
  uint32_t u;
  const char *s;
} hark_setting_value;

typedef struct hark_log_settings {
  bool info, warning, error;
  uint32_t verbose;
  hark_log_format format;
} hark_log_settings;

/* The log's settings now. */
void hark_log_settings_read(hark_log_settings *out);
/* Sets one named value in `s` (not yet in the log): INVALID_ARG for an
 * unknown name or a value of the wrong type, UNSUPPORTED for a log_file
 * other than "" (hark logs to stderr). */
hark_error *hark_log_settings_set(hark_log_settings *s, const char *name,
                                  const hark_setting_value *v);
/* Makes `s` the log's settings. */
void hark_log_settings_apply(const hark_log_settings *s);
/* Triton's JSON document for `s`, appended to b. */
void hark_log_settings_write_json(hark_buf *b, const hark_log_settings *s);

/* The trace settings, each one string (trace_level: a list of one). */
typedef struct hark_trace_setting {
  const char *name;
  const char *value;
} hark_trace_setting;
extern const hark_trace_setting hark_trace_settings[];
extern const size_t hark_n_trace_settings;
#define HARK_TRACE_LEVEL_NAME "trace_level"

/* Checks an update of one trace setting to `values` (n of them; none:
 * back to its default): INVALID_ARG for an unknown name, UNSUPPORTED for
 * a value that would change what hark does (tracing cannot be turned on). */
hark_error *hark_trace_setting_check(const char *name, const char *const *values, size_t n);
/* Triton's JSON document for the trace settings, appended to b. */
void hark_trace_settings_write_json(hark_buf *b);

#endif
