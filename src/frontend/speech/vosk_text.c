/*
 * vosk_text.c — parses the Vosk protocol's text messages (see vosk_text.h).
 * cJSON does the JSON; this file checks the shape and the values and
 * turns every problem into a close code and a reason the client can act on.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/speech/vosk_text.h"

static void invalid(hark_vosk_text *t, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void invalid(hark_vosk_text *t, int code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(t->reason, sizeof t->reason, fmt, ap);
  va_end(ap);
  hark_ws_reason_fit(t->reason, HARK_WS_REASON_MAX);
  t->kind = HARK_VOSK_TEXT_INVALID;
  t->close_code = code;
}

/* A JSON number holding an integer in [lo, hi]. */
static bool int_in(const cJSON *v, double lo, double hi, int *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!isfinite(d) || d != floor(d) || d < lo || d > hi) return false;
  *out = (int)d;
  return true;
}

/* Vosk's server reads its config with Python's float(), int() and bool():
 * these read a JSON value the same way (a number, true/false, or a string
 * holding a number, spaces around it allowed). */
static bool py_number_text(const cJSON *v, char *buf, size_t cap) {
  const char *p = v->valuestring;
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  size_t n = strlen(p);
  while (n && (p[n - 1] == ' ' || p[n - 1] == '\t' || p[n - 1] == '\n' || p[n - 1] == '\r')) n--;
  if (n == 0 || n >= cap) return false;
  memcpy(buf, p, n);
  buf[n] = 0;
  return true;
}

static bool py_float(const cJSON *v, double *out) {
  if (cJSON_IsNumber(v)) {
    *out = v->valuedouble;
    return true;
  }
  if (cJSON_IsBool(v)) {
    *out = cJSON_IsTrue(v) ? 1.0 : 0.0;
    return true;
  }
  char buf[64], *end;
  if (!cJSON_IsString(v) || !py_number_text(v, buf, sizeof buf)) return false;
  *out = strtod(buf, &end);
  return *end == 0 && !strchr(buf, 'x') && !strchr(buf, 'X'); /* no C hex floats */
}

static bool py_int(const cJSON *v, double *out) {
  if (cJSON_IsNumber(v)) {
    if (!isfinite(v->valuedouble)) return false;
    *out = trunc(v->valuedouble);
    return true;
  }
  if (cJSON_IsBool(v)) {
    *out = cJSON_IsTrue(v) ? 1.0 : 0.0;
    return true;
  }
  char buf[64];
  if (!cJSON_IsString(v) || !py_number_text(v, buf, sizeof buf)) return false;
  const char *p = buf + (buf[0] == '-' || buf[0] == '+');
  if (!*p || strspn(p, "0123456789") != strlen(p)) return false;
  *out = strtod(buf, NULL);
  return true;
}

/* Python's truth: false, null, 0, "", [] and {} are false; all else true
 * (so "false", a non-empty string, is true, as it is for Vosk). */
static bool py_truthy(const cJSON *v) {
  if (cJSON_IsBool(v)) return cJSON_IsTrue(v);
  if (cJSON_IsNull(v)) return false;
  if (cJSON_IsNumber(v)) return v->valuedouble != 0;
  if (cJSON_IsString(v)) return v->valuestring[0] != 0;
  return v->child != NULL; /* array, object */
}

/* {"eof": 1} / {"reset": 1}: the value must be the number 1. */
static bool is_one(const cJSON *v) {
  int one;
  return int_in(v, 1, 1, &one);
}

static void parse_config(const cJSON *cfg, hark_vosk_text *t) {
  hark_vosk_config *c = &t->config;
  if (!cJSON_IsObject(cfg)) {
    invalid(t, HARK_WS_CLOSE_INVALID, "'config' must be an object");
    return;
  }
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, "sample_rate");
  double d;
  if (v) {
    if (!py_float(v, &d) || !isfinite(d)) {
      invalid(t, HARK_WS_CLOSE_INVALID, "config: 'sample_rate' must be a number of Hz");
      return;
    }
    /* Vosk takes a fraction of a Hz too; to the nearest Hz makes no
     * difference a recogniser hears */
    if (!(d >= HARK_VOSK_MIN_SAMPLE_RATE - 0.5 && d < HARK_VOSK_MAX_SAMPLE_RATE + 0.5)) {
      invalid(t, HARK_WS_CLOSE_INVALID, "config: 'sample_rate' must be in [%d, %d] Hz",
              HARK_VOSK_MIN_SAMPLE_RATE, HARK_VOSK_MAX_SAMPLE_RATE);
      return;
    }
    c->sample_rate = (int)lround(d);
    c->has_sample_rate = true;
  }
  v = cJSON_GetObjectItemCaseSensitive(cfg, "words");
  if (v) { /* bool(): anything goes */
    c->words = py_truthy(v);
    c->has_words = true;
  }
  v = cJSON_GetObjectItemCaseSensitive(cfg, "max_alternatives");
  if (v) {
    if (!py_int(v, &d) || d < 0 || d > HARK_VOSK_MAX_ALTERNATIVES) {
      invalid(t, HARK_WS_CLOSE_INVALID, "config: 'max_alternatives' must be an integer in [0, %d]",
              HARK_VOSK_MAX_ALTERNATIVES);
      return;
    }
    c->max_alternatives = (int)d;
    c->has_max_alternatives = true;
  }
  v = cJSON_GetObjectItemCaseSensitive(cfg, "phrase_list");
  if (v) {
    bool ok = cJSON_IsArray(v);
    for (const cJSON *e = ok ? v->child : NULL; e; e = e->next) ok &= cJSON_IsString(e) != 0;
    if (!ok) {
      invalid(t, HARK_WS_CLOSE_INVALID, "config: 'phrase_list' must be an array of strings");
      return;
    }
    if (!(c->phrase_list = cJSON_PrintUnformatted(v))) {
      invalid(t, HARK_WS_CLOSE_INTERNAL, "out of memory");
      return;
    }
  }
  v = cJSON_GetObjectItemCaseSensitive(cfg, "profile"); /* hark's: the model names them */
  if (v) {
    size_t n = cJSON_IsString(v) ? strlen(v->valuestring) : 0;
    if (n == 0 || n > 64) {
      invalid(t, HARK_WS_CLOSE_INVALID,
              "config: 'profile' must be a profile name such as \"accurate\" or \"fast\"");
      return;
    }
    if (!(c->profile = strdup(v->valuestring))) {
      invalid(t, HARK_WS_CLOSE_INTERNAL, "out of memory");
      return;
    }
  }
  t->kind = HARK_VOSK_TEXT_CONFIG;
}

void hark_vosk_text_parse(const char *data, size_t len, hark_vosk_text *out) {
  memset(out, 0, sizeof *out);
  cJSON *doc = cJSON_ParseWithLength(data, len);
  if (!doc || !cJSON_IsObject(doc)) {
    cJSON_Delete(doc);
    invalid(out, HARK_WS_CLOSE_UNSUPPORTED,
            "text messages must be JSON objects: {\"config\": {...}}, {\"eof\": 1} or "
            "{\"reset\": 1}; audio goes in binary messages");
    return;
  }
  const cJSON *v;
  if ((v = cJSON_GetObjectItemCaseSensitive(doc, "eof"))) {
    if (is_one(v))
      out->kind = HARK_VOSK_TEXT_EOF;
    else
      invalid(out, HARK_WS_CLOSE_INVALID, "'eof' must be 1");
  } else if ((v = cJSON_GetObjectItemCaseSensitive(doc, "reset"))) {
    if (is_one(v))
      out->kind = HARK_VOSK_TEXT_RESET;
    else
      invalid(out, HARK_WS_CLOSE_INVALID, "'reset' must be 1");
  } else if ((v = cJSON_GetObjectItemCaseSensitive(doc, "config"))) {
    parse_config(v, out);
  } else {
    invalid(out, HARK_WS_CLOSE_UNSUPPORTED,
            "unknown message: expected {\"config\": {...}}, {\"eof\": 1} or {\"reset\": 1}");
  }
  cJSON_Delete(doc);
  if (out->kind != HARK_VOSK_TEXT_CONFIG) {
    free(out->config.phrase_list);
    out->config = (hark_vosk_config){0};
  }
}

void hark_vosk_text_clear(hark_vosk_text *t) {
  free(t->config.phrase_list);
  free(t->config.profile);
  memset(t, 0, sizeof *t);
}
