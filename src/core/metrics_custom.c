/*
 * Metrics that backends define (hark/backend.h: hark_metric_*): a decoder
 * pool's size and use, audio processed, and the like.
 *
 * One process-wide registry, because the exposition walks every model's
 * series by name: each metric is a node in a list under a mutex, created in
 * model_init and freed in model_fini. Values are doubles kept as bits in an
 * atomic, so setting and adding on the hot path take no lock. Scrapes
 * render them after the engine's own families.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/metrics_custom.h"

struct hark_metric {
  hark_metric *next;
  hark_metric_kind kind;
  char *name, *help, *model;
  int64_t version;
  _Atomic uint64_t bits;
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static hark_metric *registry;

static uint64_t to_bits(double v) {
  uint64_t b;
  memcpy(&b, &v, sizeof b);
  return b;
}

static double from_bits(uint64_t b) {
  double v;
  memcpy(&v, &b, sizeof v);
  return v;
}

static bool valid_name(const char *s) {
  if (!s || !*s || (*s >= '0' && *s <= '9')) return false;
  for (; *s; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
          *s == '_' || *s == ':'))
      return false;
  return true;
}

/* The label value as the text format wants it: \\, \" and \n escaped. */
static char *escape_label(const char *s) {
  char *e = malloc(2 * strlen(s) + 1), *w = e;
  if (!e) return NULL;
  for (; *s; s++) {
    if (*s == '"' || *s == '\\' || *s == '\n') *w++ = '\\';
    *w++ = *s == '\n' ? 'n' : *s;
  }
  *w = '\0';
  return e;
}

hark_error *hark_metric_new(hark_model *model, hark_metric_kind kind, const char *name,
                            const char *help, hark_metric **out) {
  *out = NULL;
  if (!valid_name(name))
    return hark_error_new(HARK_ERR_INVALID_ARG, "invalid metric name '%s'", name ? name : "");
  pthread_mutex_lock(&registry_lock);
  for (hark_metric *m = registry; m; m = m->next) {
    if (strcmp(m->name, name) != 0) continue;
    if (m->kind != kind) {
      pthread_mutex_unlock(&registry_lock);
      return hark_error_new(HARK_ERR_INVALID_ARG, "metric '%s' already exists as another type",
                            name);
    }
  }
  pthread_mutex_unlock(&registry_lock);
  hark_metric *m = calloc(1, sizeof *m);
  if (!m) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  m->kind = kind;
  m->name = strdup(name);
  m->help = strdup(help ? help : "");
  m->model = escape_label(hark_model_name(model));
  m->version = hark_model_version(model);
  if (!m->name || !m->help || !m->model) {
    hark_metric_free(m);
    return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  }
  pthread_mutex_lock(&registry_lock);
  m->next = registry;
  registry = m;
  pthread_mutex_unlock(&registry_lock);
  *out = m;
  return NULL;
}

void hark_metric_free(hark_metric *metric) {
  if (!metric) return;
  pthread_mutex_lock(&registry_lock);
  for (hark_metric **p = &registry; *p; p = &(*p)->next) {
    if (*p == metric) {
      *p = metric->next;
      break;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  free(metric->name);
  free(metric->help);
  free(metric->model);
  free(metric);
}

void hark_metric_set(hark_metric *metric, double value) {
  if (metric) atomic_store(&metric->bits, to_bits(value));
}

void hark_metric_add(hark_metric *metric, double delta) {
  if (!metric) return;
  uint64_t old = atomic_load(&metric->bits);
  while (!atomic_compare_exchange_weak(&metric->bits, &old, to_bits(from_bits(old) + delta))) {
  }
}

double hark_metric_value(const hark_metric *metric) {
  return metric ? from_bits(atomic_load(&((hark_metric *)metric)->bits)) : NAN;
}

char *hark_metrics_custom_render(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) return NULL;
  pthread_mutex_lock(&registry_lock);
  for (hark_metric *m = registry; m; m = m->next) {
    bool first = true;
    for (hark_metric *p = registry; p != m; p = p->next)
      if (strcmp(p->name, m->name) == 0) first = false;
    if (!first) continue; /* its family went out with the first of its name */
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
            m->kind == HARK_METRIC_COUNTER ? "counter" : "gauge");
    for (hark_metric *s = m; s; s = s->next)
      if (strcmp(s->name, m->name) == 0)
        fprintf(f, "%s{model=\"%s\",version=\"%lld\"} %.15g\n", s->name, s->model,
                (long long)s->version, from_bits(atomic_load(&s->bits)));
  }
  pthread_mutex_unlock(&registry_lock);
  fclose(f);
  return text;
}
