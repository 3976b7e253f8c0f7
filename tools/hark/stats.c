/*
 * stats.c — see stats.h. Percentiles are nearest-rank (the value at rank
 * ceil(p/100 × n)), the definition perf_analyzer and Riva's client report.
 */
#include "stats.h"

#include <math.h>
#include <stdlib.h>

#define STATS_INITIAL_CAP 4096

int stats_series_reserve(stats_series *s, size_t cap) {
  if (cap <= s->cap) return 0;
  uint64_t *p = realloc(s->v, cap * sizeof *p);
  if (!p) return -1;
  s->v = p;
  s->cap = cap;
  return 0;
}

int stats_series_push(stats_series *s, uint64_t value) {
  if (s->n == s->cap && stats_series_reserve(s, s->cap ? 2 * s->cap : STATS_INITIAL_CAP) < 0)
    return -1;
  s->v[s->n++] = value;
  return 0;
}

void stats_series_free(stats_series *s) {
  free(s->v);
  *s = (stats_series){0};
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void stats_sort_u64(uint64_t *v, size_t n) {
  if (n > 1) qsort(v, n, sizeof *v, cmp_u64);
}

uint64_t stats_percentile(const uint64_t *sorted, size_t n, double p) {
  if (n == 0) return 0;
  size_t rank = (size_t)ceil(p / 100.0 * (double)n);
  if (rank > n) rank = n;
  return sorted[rank ? rank - 1 : 0];
}

void stats_summarize(uint64_t *v, size_t n, double unit, stats_summary *out) {
  double sum = 0;
  stats_sort_u64(v, n);
  for (size_t i = 0; i < n; i++) sum += (double)v[i];
  out->count = n;
  out->avg = n ? sum / (double)n / unit : 0;
  out->p50 = (double)stats_percentile(v, n, 50) / unit;
  out->p90 = (double)stats_percentile(v, n, 90) / unit;
  out->p95 = (double)stats_percentile(v, n, 95) / unit;
  out->p99 = (double)stats_percentile(v, n, 99) / unit;
  out->max = n ? (double)v[n - 1] / unit : 0;
}
