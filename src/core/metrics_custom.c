/*
 * Metrics that backends define (hark/backend.h: hark_metric_*): a decoder
 * pool's size and use, audio processed, and the like.
 *
 * One process-wide registry, because the exposition walks every model's
 * series by name: each metric is a node in a list under a mutex, created in
 * model_init and freed in model_fini. Values are doubles kept as bits in an
 * atomic, so setting and adding on the hot path take no lock; a histogram
 * (API 1.2) is an array of atomic bucket counts plus its sum, its bounds
 * fixed at creation. Scrapes render them after the engine's own families.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/metrics_custom.h"
#include "util/alloc.h"

struct hark_metric {
  hark_metric *next;
  hark_metric_kind kind;
  char *name, *help, *model;
  int64_t version;
  _Atomic uint64_t bits; /* the value; a histogram's sum */
  /* histograms: counts per bucket (not cumulative), n_bounds + 1 of them */
  double *bounds;
  uint32_t n_bounds;
  _Atomic uint64_t *buckets;
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

/* Text as the text format wants it: \\ and \n escaped, and \" too in a
 * label value (not in HELP text). */
static char *escape(const char *s, bool label) {
  char *e = hark_xmalloc(2 * strlen(s) + 1), *w = e;
  for (; *s; s++) {
    if (*s == '\\' || *s == '\n' || (label && *s == '"')) *w++ = '\\';
    *w++ = *s == '\n' ? 'n' : *s;
  }
  *w = '\0';
  return e;
}

static bool same_bounds(const hark_metric *m, const double *bounds, uint32_t n) {
  return m->n_bounds == n && (n == 0 || memcmp(m->bounds, bounds, n * sizeof *bounds) == 0);
}

static hark_error *metric_new(hark_model *model, hark_metric_kind kind, const char *name,
                              const char *help, const double *bounds, uint32_t n_bounds,
                              hark_metric **out) {
  *out = NULL;
  if (!valid_name(name))
    return hark_error_new(HARK_ERR_INVALID_ARG, "invalid metric name '%s'", name ? name : "");
  if (kind != HARK_METRIC_GAUGE && kind != HARK_METRIC_COUNTER && kind != HARK_METRIC_HISTOGRAM)
    return hark_error_new(HARK_ERR_INVALID_ARG, "metric '%s': unknown kind %d", name, (int)kind);
  pthread_mutex_lock(&registry_lock);
  for (hark_metric *m = registry; m; m = m->next) {
    if (strcmp(m->name, name) != 0) continue;
    const char *clash = m->kind != kind                     ? "as another type"
                        : kind != HARK_METRIC_HISTOGRAM     ? NULL
                        : !same_bounds(m, bounds, n_bounds) ? "with other buckets"
                                                            : NULL;
    if (clash) {
      pthread_mutex_unlock(&registry_lock);
      return hark_error_new(HARK_ERR_INVALID_ARG, "metric '%s' already exists %s", name, clash);
    }
  }
  pthread_mutex_unlock(&registry_lock);
  hark_metric *m = hark_xcalloc(1, sizeof *m);
  m->kind = kind;
  m->name = hark_xstrdup(name);
  m->help = escape(help ? help : "", false);
  m->model = escape(hark_model_name(model), true);
  m->version = hark_model_version(model);
  if (kind == HARK_METRIC_HISTOGRAM) {
    m->n_bounds = n_bounds;
    m->bounds = hark_xcalloc(n_bounds, sizeof *bounds);
    m->buckets = hark_xcalloc(n_bounds + 1, sizeof *m->buckets);
    if (n_bounds) memcpy(m->bounds, bounds, n_bounds * sizeof *bounds);
  }
  pthread_mutex_lock(&registry_lock);
  m->next = registry;
  registry = m;
  pthread_mutex_unlock(&registry_lock);
  *out = m;
  return NULL;
}

hark_error *hark_metric_new(hark_model *model, hark_metric_kind kind, const char *name,
                            const char *help, hark_metric **out) {
  static const double dflt[] = HARK_METRIC_DEFAULT_BOUNDS;
  if (kind == HARK_METRIC_HISTOGRAM)
    return metric_new(model, kind, name, help, dflt, sizeof dflt / sizeof *dflt, out);
  return metric_new(model, kind, name, help, NULL, 0, out);
}

hark_error *hark_metric_new_histogram(hark_model *model, const char *name, const char *help,
                                      const double *bounds, uint32_t n_bounds, hark_metric **out) {
  *out = NULL;
  if (!bounds || n_bounds == 0)
    return hark_metric_new(model, HARK_METRIC_HISTOGRAM, name, help, out);
  if (n_bounds > HARK_METRIC_MAX_BOUNDS)
    return hark_error_new(HARK_ERR_INVALID_ARG, "histogram '%s': %u buckets (at most %u)",
                          name ? name : "", n_bounds, HARK_METRIC_MAX_BOUNDS);
  for (uint32_t i = 0; i < n_bounds; i++)
    if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "histogram '%s': bucket bounds must be finite and increasing",
                            name ? name : "");
  return metric_new(model, HARK_METRIC_HISTOGRAM, name, help, bounds, n_bounds, out);
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
  free(metric->bounds);
  free(metric->buckets);
  free(metric);
}

void hark_metric_set(hark_metric *metric, double value) {
  if (metric && metric->kind != HARK_METRIC_HISTOGRAM) atomic_store(&metric->bits, to_bits(value));
}

static void add_bits(_Atomic uint64_t *bits, double delta) {
  uint64_t old = atomic_load(bits);
  while (!atomic_compare_exchange_weak(bits, &old, to_bits(from_bits(old) + delta))) {
  }
}

void hark_metric_add(hark_metric *metric, double delta) {
  if (metric && metric->kind != HARK_METRIC_HISTOGRAM) add_bits(&metric->bits, delta);
}

void hark_metric_observe(hark_metric *metric, double value) {
  if (!metric || metric->kind != HARK_METRIC_HISTOGRAM || isnan(value)) return;
  uint32_t lo = 0, hi = metric->n_bounds; /* the first bound >= value, or +Inf */
  while (lo < hi) {
    uint32_t mid = (lo + hi) / 2;
    if (value <= metric->bounds[mid])
      hi = mid;
    else
      lo = mid + 1;
  }
  atomic_fetch_add(&metric->buckets[lo], 1);
  add_bits(&metric->bits, value);
}

static uint64_t hist_count(const hark_metric *m) {
  uint64_t n = 0;
  for (uint32_t b = 0; b <= m->n_bounds; b++) n += atomic_load(&m->buckets[b]);
  return n;
}

double hark_metric_value(const hark_metric *metric) {
  if (!metric) return NAN;
  if (metric->kind == HARK_METRIC_HISTOGRAM) return (double)hist_count(metric);
  return from_bits(atomic_load(&((hark_metric *)metric)->bits));
}

/* Cumulative buckets; _count is their total, so it always equals the +Inf
 * bucket even while observations land during the scrape. */
static void render_histogram(FILE *f, const hark_metric *s) {
  uint64_t cum = 0;
  for (uint32_t b = 0; b <= s->n_bounds; b++) {
    cum += atomic_load(&s->buckets[b]);
    fprintf(f, "%s_bucket{model=\"%s\",version=\"%lld\",le=\"", s->name, s->model,
            (long long)s->version);
    if (b < s->n_bounds)
      fprintf(f, "%.15g", s->bounds[b]);
    else
      fputs("+Inf", f);
    fprintf(f, "\"} %llu\n", (unsigned long long)cum);
  }
  fprintf(f, "%s_sum{model=\"%s\",version=\"%lld\"} %.15g\n", s->name, s->model,
          (long long)s->version, from_bits(atomic_load(&((hark_metric *)s)->bits)));
  fprintf(f, "%s_count{model=\"%s\",version=\"%lld\"} %llu\n", s->name, s->model,
          (long long)s->version, (unsigned long long)cum);
}

/* A version that is retiring (reloaded while streams hold it) still has
 * its series, with the same labels as its successor's: only the newest
 * (first in the registry) is shown, so a scrape never carries a series
 * twice. */
static bool shadowed(const hark_metric *from, const hark_metric *s) {
  for (const hark_metric *p = from; p != s; p = p->next)
    if (p->version == s->version && strcmp(p->name, s->name) == 0 &&
        strcmp(p->model, s->model) == 0)
      return true;
  return false;
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
            m->kind == HARK_METRIC_COUNTER     ? "counter"
            : m->kind == HARK_METRIC_HISTOGRAM ? "histogram"
                                               : "gauge");
    for (hark_metric *s = m; s; s = s->next) {
      if (strcmp(s->name, m->name) != 0 || shadowed(m, s)) continue;
      if (s->kind == HARK_METRIC_HISTOGRAM)
        render_histogram(f, s);
      else
        fprintf(f, "%s{model=\"%s\",version=\"%lld\"} %.15g\n", s->name, s->model,
                (long long)s->version, from_bits(atomic_load(&s->bits)));
    }
  }
  pthread_mutex_unlock(&registry_lock);
  fclose(f);
  return text;
}
