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
  if (v) {
    if (!cJSON_IsNumber(v)) {
      invalid(t, HARK_WS_CLOSE_INVALID, "config: 'sample_rate' must be a number");
      return;
    }
    if (!int_in(v, HARK_VOSK_MIN_SAMPLE_RATE, HARK_VOSK_MAX_SAMPLE_RATE, &c->sample_rate)) {
      invalid(t, HARK_WS_CLOSE_INVALID,
              "config: 'sample_rate' must be a whole number of Hz in [%d, %d]",
              HARK_VOSK_MIN_SAMPLE_RATE, HARK_VOSK_MAX_SAMPLE_RATE);
      return;
    }
    c->has_sample_rate = true;
  }
  v = cJSON_GetObjectItemCaseSensitive(cfg, "words");
  if (v) {
    int b;
    if (cJSON_IsBool(v))
      c->words = cJSON_IsTrue(v);
    else if (int_in(v, 0, 1, &b)) /* Vosk reads it as truthy: accept 0/1 */
      c->words = b;
    else {
      invalid(t, HARK_WS_CLOSE_INVALID, "config: 'words' must be true or false");
      return;
    }
    c->has_words = true;
  }
  v = cJSON_GetObjectItemCaseSensitive(cfg, "max_alternatives");
  if (v) {
    if (!int_in(v, 0, HARK_VOSK_MAX_ALTERNATIVES, &c->max_alternatives)) {
      invalid(t, HARK_WS_CLOSE_INVALID, "config: 'max_alternatives' must be an integer in [0, %d]",
              HARK_VOSK_MAX_ALTERNATIVES);
      return;
    }
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
