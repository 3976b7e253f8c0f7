/*
 * settings.c — Triton's log and trace settings (settings.h): the names
 * and types Triton's clients send, checked the same way for HTTP and
 * gRPC. A log update is built on a copy of the current settings and
 * applied only when every value in it was good, so a request with one bad
 * value changes nothing.
 */
#include "frontend/kserve/settings.h"

#include <string.h>
#include <strings.h>

#define LOG_NAMES "log_file, log_info, log_warning, log_error, log_verbose_level, log_format"

void hark_log_settings_read(hark_log_settings *out) {
  out->info = hark_log_enabled(HARK_LOG_INFO);
  out->warning = hark_log_enabled(HARK_LOG_WARN);
  out->error = hark_log_enabled(HARK_LOG_ERROR);
  out->verbose = (uint32_t)hark_log_verbose_level();
  out->format = hark_log_get_format();
}

static hark_error *want(const char *name, const char *type) {
  return hark_error_new(HARK_ERR_INVALID_ARG, "log setting '%s' must be %s", name, type);
}

hark_error *hark_log_settings_set(hark_log_settings *s, const char *name,
                                  const hark_setting_value *v) {
  bool *flag = NULL;
  /* Triton's documentation spells two of them in the plural. */
  if (!strcmp(name, "log_info")) flag = &s->info;
  if (!strcmp(name, "log_warning") || !strcmp(name, "log_warnings")) flag = &s->warning;
  if (!strcmp(name, "log_error") || !strcmp(name, "log_errors")) flag = &s->error;
  if (flag) {
    if (v->type != HARK_SETTING_BOOL) return want(name, "a boolean");
    *flag = v->b;
    return NULL;
  }
  if (!strcmp(name, "log_verbose_level")) {
    if (v->type != HARK_SETTING_UINT) return want(name, "a whole number from 0 to 4294967295");
    s->verbose = v->u;
    return NULL;
  }
  if (!strcmp(name, "log_format")) {
    if (v->type != HARK_SETTING_STRING) return want(name, "a string");
    if (!hark_log_parse_format(v->s, &s->format))
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "log_format '%.100s' is not one of: default, ISO8601, json", v->s);
    return NULL;
  }
  if (!strcmp(name, "log_file")) {
    if (v->type != HARK_SETTING_STRING) return want(name, "a string");
    if (*v->s)
      return hark_error_new(HARK_ERR_UNSUPPORTED,
                            "hark writes its log to stderr only: log_file can only be \"\" "
                            "(redirect harkd's stderr instead)");
    return NULL;
  }
  return hark_error_new(HARK_ERR_INVALID_ARG, "unknown log setting '%.100s' (known: %s)", name,
                        LOG_NAMES);
}

void hark_log_settings_apply(const hark_log_settings *s) {
  hark_log_set_enabled(HARK_LOG_INFO, s->info);
  hark_log_set_enabled(HARK_LOG_WARN, s->warning);
  hark_log_set_enabled(HARK_LOG_ERROR, s->error);
  hark_log_set_verbose(s->verbose > INT32_MAX ? INT32_MAX : (int)s->verbose);
  hark_log_set_format(s->format);
}

void hark_log_settings_write_json(hark_buf *b, const hark_log_settings *s) {
  hark_buf_puts(b, "{\"log_file\":\"\",\"log_info\":");
  hark_buf_puts(b, s->info ? "true" : "false");
  hark_buf_puts(b, ",\"log_warning\":");
  hark_buf_puts(b, s->warning ? "true" : "false");
  hark_buf_puts(b, ",\"log_error\":");
  hark_buf_puts(b, s->error ? "true" : "false");
  hark_buf_puts(b, ",\"log_verbose_level\":");
  hark_buf_put_u64(b, s->verbose);
  hark_buf_puts(b, ",\"log_format\":");
  hark_buf_put_str(b, hark_log_format_name(s->format));
  hark_buf_puts(b, "}");
}

/* ---- trace ------------------------------------------------------------------- */

/* Triton's defaults with tracing off, which is all hark does. */
const hark_trace_setting hark_trace_settings[] = {
    {HARK_TRACE_LEVEL_NAME, "OFF"}, {"trace_rate", "1000"}, {"trace_count", "-1"},
    {"log_frequency", "0"},         {"trace_file", ""},     {"trace_mode", "triton"},
};
const size_t hark_n_trace_settings = sizeof hark_trace_settings / sizeof hark_trace_settings[0];

hark_error *hark_trace_setting_check(const char *name, const char *const *values, size_t n) {
  const hark_trace_setting *t = NULL;
  for (size_t i = 0; i < hark_n_trace_settings; i++)
    if (!strcmp(name, hark_trace_settings[i].name)) t = &hark_trace_settings[i];
  if (!t)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "unknown trace setting '%.100s' (known: trace_level, trace_rate, "
                          "trace_count, log_frequency, trace_file, trace_mode)",
                          name);
  bool level = !strcmp(name, HARK_TRACE_LEVEL_NAME);
  if (!level && n > 1)
    return hark_error_new(HARK_ERR_INVALID_ARG, "trace setting '%s' takes one value", name);
  for (size_t i = 0; i < n; i++) {
    bool same = level ? !strcasecmp(values[i], "OFF") : !strcmp(values[i], t->value);
    if (same) continue;
    if (level)
      return hark_error_new(HARK_ERR_UNSUPPORTED,
                            "hark does not trace requests: trace_level can only be OFF "
                            "(got '%.100s')",
                            values[i]);
    return hark_error_new(HARK_ERR_UNSUPPORTED,
                          "hark does not trace requests: %s stays '%s' (got '%.100s')", name,
                          t->value, values[i]);
  }
  return NULL;
}

void hark_trace_settings_write_json(hark_buf *b) {
  for (size_t i = 0; i < hark_n_trace_settings; i++) {
    const hark_trace_setting *t = &hark_trace_settings[i];
    hark_buf_puts(b, i ? "," : "{");
    hark_buf_put_str(b, t->name);
    bool level = !strcmp(t->name, HARK_TRACE_LEVEL_NAME);
    hark_buf_puts(b, level ? ":[" : ":");
    hark_buf_put_str(b, t->value);
    if (level) hark_buf_puts(b, "]");
  }
  hark_buf_puts(b, "}");
}
