/*
 * degrade.c — degradation instead of collapse: the model's reply latency
 * judged in windows, and the switch of new utterances to the fast profile.
 *
 * Every streaming reply's latency (request accepted to response ready)
 * lands in the current window's histogram (1 ms buckets up to 10 s). When
 * a window ends, its p99 is compared with the bound: degrade_windows
 * consecutive windows over it switch the model to degraded (new
 * utterances decode with the fast profile), as many consecutive windows
 * within it switch it back. A window without replies judges nothing and
 * breaks no run (sparse traffic must not flap the state). Windows end on
 * the wall clock of the replies that arrive, so a model without traffic
 * costs nothing; the time is passed in, so the tests drive it with a fake
 * clock.
 */
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

void ps_degrade_init(ps_degrade *d, const ps_degrade_settings *s, uint64_t now_ns) {
  memset(d, 0, sizeof *d);
  d->set = *s;
  d->window_start_ns = now_ns;
  pthread_mutex_init(&d->mu, NULL);
  atomic_init(&d->degraded, 0);
}

void ps_degrade_fini(ps_degrade *d) { pthread_mutex_destroy(&d->mu); }

/* The window's p99 in ms (of a window with replies). */
static uint32_t window_p99_ms(const ps_degrade *d) {
  uint64_t want = d->n - d->n / 100; /* at least 99% of the replies */
  uint64_t seen = 0;
  for (uint32_t ms = 0; ms < PS_DEGRADE_BUCKETS; ms++) {
    seen += d->counts[ms];
    if (seen >= want) return ms;
  }
  return PS_DEGRADE_BUCKETS - 1;
}

/* Judges one finished window (p99 in ms); returns the switch it made. */
static int judge(ps_degrade *d, uint32_t p99_ms) {
  bool over = p99_ms > d->set.bound_ms;
  d->last_p99_ms = p99_ms;
  d->over_run = over ? d->over_run + 1 : 0;
  d->under_run = over ? 0 : d->under_run + 1;
  bool degraded = atomic_load(&d->degraded);
  if (!degraded && d->over_run >= d->set.windows) {
    atomic_store(&d->degraded, 1);
    d->transitions++;
    return 1;
  }
  if (degraded && d->under_run >= d->set.windows) {
    atomic_store(&d->degraded, 0);
    d->transitions++;
    return -1;
  }
  return 0;
}

int ps_degrade_observe(ps_degrade *d, uint64_t now_ns, double latency_s) {
  if (!d->set.on) return 0;
  uint64_t window_ns = (uint64_t)d->set.window_ms * 1000000u;
  int change = 0;
  pthread_mutex_lock(&d->mu);
  if (now_ns >= d->window_start_ns + window_ns) {
    if (d->n) change = judge(d, window_p99_ms(d));
    memset(d->counts, 0, sizeof d->counts);
    d->n = 0;
    /* the window this reply falls in (windows without replies passed) */
    d->window_start_ns = now_ns - (now_ns - d->window_start_ns) % window_ns;
  }
  double ms = latency_s * 1e3;
  uint32_t b = ms <= 0 ? 0 : ms >= PS_DEGRADE_BUCKETS - 1 ? PS_DEGRADE_BUCKETS - 1 : (uint32_t)ms;
  d->counts[b]++;
  d->n++;
  pthread_mutex_unlock(&d->mu);
  return change;
}

bool ps_degrade_active(ps_degrade *d) { return atomic_load(&d->degraded) != 0; }

void ps_degrade_get(ps_degrade *d, uint64_t *transitions, uint32_t *last_p99_ms) {
  pthread_mutex_lock(&d->mu);
  *transitions = d->transitions;
  *last_p99_ms = d->last_p99_ms;
  pthread_mutex_unlock(&d->mu);
}
