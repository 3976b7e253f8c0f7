/*
 * stats.h — latency statistics shared by the hark subcommands (perf,
 * transcribe): a growable series of nanosecond samples and its summary
 * with nearest-rank percentiles.
 *
 * A series is filled on the hot path (amortised doubling, no other
 * allocation) and summarised once at the end, which sorts it in place.
 */
#ifndef HARK_TOOLS_STATS_H
#define HARK_TOOLS_STATS_H

#include <stddef.h>
#include <stdint.h>

typedef struct stats_series {
  uint64_t *v; /* owned; n samples of cap */
  size_t n, cap;
} stats_series;

/* Makes room for at least `cap` samples, so a hot loop rarely grows it.
 * Returns 0, or -1 when memory ran out. */
int stats_series_reserve(stats_series *s, size_t cap);

/* Appends one sample. Returns 0, or -1 when memory ran out (the sample is
 * dropped, the series stays valid). */
int stats_series_push(stats_series *s, uint64_t value);
void stats_series_free(stats_series *s);

typedef struct stats_summary {
  size_t count;
  double avg, p50, p90, p95, p99, max; /* in the samples' unit */
} stats_summary;

/* Sorts v[0..n) ascending. */
void stats_sort_u64(uint64_t *v, size_t n);

/* Nearest-rank percentile p (0..100] of sorted v[0..n); 0 when n is 0. */
uint64_t stats_percentile(const uint64_t *sorted, size_t n, double p);

/* Sorts v in place and summarises it; every figure is divided by `unit`
 * (1000 turns ns into µs, 1e6 into ms). */
void stats_summarize(uint64_t *v, size_t n, double unit, stats_summary *out);

#endif
