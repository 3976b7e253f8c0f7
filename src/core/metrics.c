/*
 * metrics.c — per-model statistics and their Prometheus exposition.
 *
 * The hot path only adds to atomic counters (hark_stats_record_final and
 * model.c's execute); nothing is formatted until a scrape, which walks the
 * loaded models and prints Triton's metric families plus latency
 * histograms, which, unlike Triton's summaries, aggregate across replicas,
 * then the host's CPU and memory gauges and the backends' own metrics.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/metrics_custom.h"

const double hark_hist_bounds_us[HARK_HIST_BUCKETS - 1] = {
    100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1e6, 2.5e6, 5e6};

void hark_ahist_observe(hark_ahist *h, uint64_t us) {
  int b = 0;
  while (b < HARK_HIST_BUCKETS - 1 && (double)us > hark_hist_bounds_us[b]) b++;
  atomic_fetch_add(&h->bucket[b], 1);
  atomic_fetch_add(&h->count, 1);
  atomic_fetch_add(&h->sum_us, us);
}

static void astat_add(hark_astat *s, uint64_t ns) {
  atomic_fetch_add(&s->count, 1);
  atomic_fetch_add(&s->ns, ns);
}

static uint64_t span(uint64_t from, uint64_t to) { return from && to > from ? to - from : 0; }

/* Wall-clock milliseconds (last_inference): the coarse clock, a few ms of
 * resolution, read for every request at a fraction of the precise one's
 * cost. */
static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void hark_stats_record_final(hark_model *m, const hark_request *req, const hark_error *err,
                             uint64_t now) {
  hark_amodel_stats *st = &m->stats;
  uint64_t total = span(req->received_ns, now);
  atomic_fetch_sub(&st->pending, 1);
  if (req->oneshot) atomic_fetch_sub(&st->pending_oneshot, 1);
  atomic_store(&st->last_inference_ms, wall_ms());
  hark_ahist_observe(&st->request_duration, total / 1000);
  uint64_t queued =
      req->exec_start_ns ? span(req->queued_ns, req->exec_start_ns) : span(req->queued_ns, now);
  if (req->queued_ns) hark_ahist_observe(&st->queue_duration, queued / 1000);
  if (err) {
    astat_add(&st->fail, total);
    hark_code code = hark_error_code(err);
    if (code == HARK_ERR_CANCELLED)
      atomic_fetch_add(&st->fail_canceled, 1);
    else if (req->exec_start_ns)
      atomic_fetch_add(&st->fail_backend, 1);
    else if (code == HARK_ERR_DEADLINE || code == HARK_ERR_UNAVAILABLE)
      atomic_fetch_add(&st->fail_rejected, 1);
    else
      atomic_fetch_add(&st->fail_other, 1);
    return;
  }
  astat_add(&st->success, total);
  atomic_fetch_add(&st->inference_count, req->batch_size);
  if (req->queued_ns) astat_add(&st->queue, queued);
  if (!req->exec_start_ns) return;
  uint64_t in_end = req->input_end_ns ? req->input_end_ns : req->exec_start_ns;
  uint64_t inf_end = req->infer_end_ns ? req->infer_end_ns : now;
  astat_add(&st->compute_input, span(req->exec_start_ns, in_end));
  astat_add(&st->compute_infer, span(in_end, inf_end));
  astat_add(&st->compute_output, span(inf_end, now));
}

static hark_stat stat_read(const hark_astat *s) {
  return (hark_stat){atomic_load(&s->count), atomic_load(&s->ns)};
}

static void hist_read(const hark_ahist *h, hark_hist *out) {
  for (int i = 0; i < HARK_HIST_BUCKETS; i++) out->bucket[i] = atomic_load(&h->bucket[i]);
  out->count = atomic_load(&h->count);
  out->sum_us = atomic_load(&h->sum_us);
}

void hark_model_stats_read(const hark_model *m, hark_model_stats *out) {
  const hark_amodel_stats *st = &m->stats;
  memset(out, 0, sizeof *out);
  out->last_inference_ms = atomic_load(&st->last_inference_ms);
  out->inference_count = atomic_load(&st->inference_count);
  out->execution_count = atomic_load(&st->execution_count);
  out->success = stat_read(&st->success);
  out->fail = stat_read(&st->fail);
  out->queue = stat_read(&st->queue);
  out->compute_input = stat_read(&st->compute_input);
  out->compute_infer = stat_read(&st->compute_infer);
  out->compute_output = stat_read(&st->compute_output);
  out->fail_rejected = atomic_load(&st->fail_rejected);
  out->fail_canceled = atomic_load(&st->fail_canceled);
  out->fail_backend = atomic_load(&st->fail_backend);
  out->fail_other = atomic_load(&st->fail_other);
  int64_t pending = atomic_load(&st->pending);
  out->pending = pending > 0 ? (uint64_t)pending : 0;
  hist_read(&st->request_duration, &out->request_duration);
  hist_read(&st->queue_duration, &out->queue_duration);
  for (uint32_t b = 0; b < st->n_batch && out->n_batch < 64; b++) {
    hark_stat infer = stat_read(&st->batch[b].compute_infer);
    if (!infer.count) continue;
    hark_batch_stat *bs = &out->batch[out->n_batch++];
    bs->batch_size = b + 1;
    bs->compute_input = stat_read(&st->batch[b].compute_input);
    bs->compute_infer = infer;
    bs->compute_output = stat_read(&st->batch[b].compute_output);
  }
}

/* ---- exposition -------------------------------------------------------------- */

typedef struct snap {
  char *name;
  int64_t version;
  double load_secs;
  hark_model_stats st;
  bool has_delay; /* a batcher with a queue delay */
  hark_sched_delay delay;
  bool has_state; /* a sequence batcher with implicit state */
  hark_sched_seq_state state;
} snap;

typedef struct snaps {
  snap *v;
  size_t n, cap;
} snaps;

static void collect(hark_model *m, void *userp) {
  snaps *s = userp;
  if (s->n == s->cap) {
    s->cap = s->cap ? s->cap * 2 : 16;
    snap *g = realloc(s->v, s->cap * sizeof *g);
    if (!g) return;
    s->v = g;
  }
  snap *x = &s->v[s->n++];
  x->name = strdup(hark_model_name(m));
  x->version = hark_model_version(m);
  x->load_secs = m->load_secs;
  hark_model_stats_read(m, &x->st);
  x->has_delay = hark_model_queue_delay(m, &x->delay);
  x->has_state = hark_model_sequence_state(m, &x->state);
}

typedef struct out {
  char *buf;
  size_t len, cap;
} out;

static void emit(out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(out *o, const char *fmt, ...) {
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < o->cap - o->len) {
      o->len += (size_t)n;
      return;
    }
    size_t cap = (o->cap + (size_t)n + 1) * 2;
    char *g = realloc(o->buf, cap);
    if (!g) return;
    o->buf = g;
    o->cap = cap;
  }
}

/* Model names come from folder names; escape what the text format needs. */
static void labels(out *o, const snap *s) {
  emit(o, "model=\"");
  for (const char *p = s->name; *p; p++) {
    if (*p == '"' || *p == '\\')
      emit(o, "\\%c", *p);
    else if (*p == '\n')
      emit(o, "\\n");
    else
      emit(o, "%c", *p);
  }
  emit(o, "\",version=\"%lld\"", (long long)s->version);
}

typedef uint64_t (*getter)(const hark_model_stats *st);
#define GETTER(fn, expr) \
  static uint64_t fn(const hark_model_stats *st) { return (expr); }
GETTER(g_success, st->success.count)
GETTER(g_count, st->inference_count)
GETTER(g_exec, st->execution_count)
GETTER(g_req_us, (st->success.ns + st->fail.ns) / 1000)
GETTER(g_queue_us, st->queue.ns / 1000)
GETTER(g_in_us, st->compute_input.ns / 1000)
GETTER(g_infer_us, st->compute_infer.ns / 1000)
GETTER(g_out_us, st->compute_output.ns / 1000)
GETTER(g_pending, st->pending)

static void family(out *o, const snaps *s, const char *name, const char *type, const char *help,
                   getter get) {
  emit(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  for (size_t i = 0; i < s->n; i++) {
    emit(o, "%s{", name);
    labels(o, &s->v[i]);
    emit(o, "} %llu\n", (unsigned long long)get(&s->v[i].st));
  }
}

static void failures(out *o, const snaps *s) {
  const char *name = "nv_inference_request_failure";
  emit(o, "# HELP %s Number of failed inference requests, all batch sizes\n# TYPE %s counter\n",
       name, name);
  for (size_t i = 0; i < s->n; i++) {
    const hark_model_stats *st = &s->v[i].st;
    const struct {
      const char *reason;
      uint64_t n;
    } r[] = {{"REJECTED", st->fail_rejected},
             {"CANCELED", st->fail_canceled},
             {"BACKEND", st->fail_backend},
             {"OTHER", st->fail_other}};
    for (size_t k = 0; k < sizeof r / sizeof r[0]; k++) {
      emit(o, "%s{", name);
      labels(o, &s->v[i]);
      emit(o, ",reason=\"%s\"} %llu\n", r[k].reason, (unsigned long long)r[k].n);
    }
  }
}

static void histogram(out *o, const snaps *s, const char *name, const char *help, size_t offset) {
  emit(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
  for (size_t i = 0; i < s->n; i++) {
    const hark_hist *h = (const hark_hist *)((const char *)&s->v[i].st + offset);
    uint64_t cum = 0;
    for (int b = 0; b < HARK_HIST_BUCKETS; b++) {
      cum += h->bucket[b];
      emit(o, "%s_bucket{", name);
      labels(o, &s->v[i]);
      if (b < HARK_HIST_BUCKETS - 1)
        emit(o, ",le=\"%g\"} %llu\n", hark_hist_bounds_us[b], (unsigned long long)cum);
      else
        emit(o, ",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    emit(o, "%s_sum{", name);
    labels(o, &s->v[i]);
    emit(o, "} %llu\n%s_count{", (unsigned long long)h->sum_us, name);
    labels(o, &s->v[i]);
    emit(o, "} %llu\n", (unsigned long long)h->count);
  }
}

/* ---- the batchers' queue delay ------------------------------------------------ */

/* hark's own families: the delay a batcher holds a pending batch for (the
 * fixed max_queue_delay, or where adaptive_queue_delay has moved it), for
 * every model with one, and the adaptive ones' moves. */
static void queue_delay(out *o, const snaps *s) {
  bool any = false, adaptive = false;
  for (size_t i = 0; i < s->n; i++) {
    any |= s->v[i].has_delay;
    adaptive |= s->v[i].has_delay && s->v[i].delay.adaptive;
  }
  if (!any) return;
  emit(o,
       "# HELP hark_queue_delay_us The queue delay the batcher holds a pending batch for now, "
       "in microseconds (moves with adaptive_queue_delay)\n"
       "# TYPE hark_queue_delay_us gauge\n");
  for (size_t i = 0; i < s->n; i++) {
    if (!s->v[i].has_delay) continue;
    emit(o, "hark_queue_delay_us{");
    labels(o, &s->v[i]);
    emit(o, "} %llu\n", (unsigned long long)s->v[i].delay.delay_us);
  }
  if (!adaptive) return;
  emit(o,
       "# HELP hark_queue_delay_adjustments_total Steps the adaptive queue delay moved: "
       "widen (the queue was deep) or narrow (it drained)\n"
       "# TYPE hark_queue_delay_adjustments_total counter\n");
  for (size_t i = 0; i < s->n; i++) {
    const snap *x = &s->v[i];
    if (!x->has_delay || !x->delay.adaptive) continue;
    emit(o, "hark_queue_delay_adjustments_total{");
    labels(o, x);
    emit(o, ",direction=\"widen\"} %llu\nhark_queue_delay_adjustments_total{",
         (unsigned long long)x->delay.widened);
    labels(o, x);
    emit(o, ",direction=\"narrow\"} %llu\n", (unsigned long long)x->delay.narrowed);
  }
}

/* ---- the sequence batcher's implicit state -------------------------------------- */

/* hark's own gauges, for every model with sequence_batching.state: what
 * the engine holds for its live sequences, which goes back to 0 when they
 * have all ended or idled out. */
static void sequence_state(out *o, const snaps *s) {
  bool any = false;
  for (size_t i = 0; i < s->n; i++) any |= s->v[i].has_state;
  if (!any) return;
  emit(o,
       "# HELP hark_sequence_state_bytes Bytes of implicit sequence state (sequence_batching "
       "state tensors) the engine holds now for live sequences\n"
       "# TYPE hark_sequence_state_bytes gauge\n");
  for (size_t i = 0; i < s->n; i++) {
    if (!s->v[i].has_state) continue;
    emit(o, "hark_sequence_state_bytes{");
    labels(o, &s->v[i]);
    emit(o, "} %llu\n", (unsigned long long)s->v[i].state.bytes);
  }
  emit(o,
       "# HELP hark_sequence_states Live sequences holding implicit sequence state\n"
       "# TYPE hark_sequence_states gauge\n");
  for (size_t i = 0; i < s->n; i++) {
    if (!s->v[i].has_state) continue;
    emit(o, "hark_sequence_states{");
    labels(o, &s->v[i]);
    emit(o, "} %llu\n", (unsigned long long)s->v[i].state.sequences);
  }
}

/* ---- the host: Triton's CPU gauges ------------------------------------------- */

/* Whole-machine figures, as Triton reports them: utilization from
 * /proc/stat's tick counters over the window since an earlier scrape (at
 * least CPU_WINDOW_NS back; the first scrape averages since boot), memory
 * from /proc/meminfo (used = MemTotal - MemAvailable). */
#define CPU_WINDOW_NS 1000000000ull

typedef struct cpu_ticks {
  unsigned long long idle, total;
} cpu_ticks;

static pthread_mutex_t cpu_lock = PTHREAD_MUTEX_INITIALIZER;
static cpu_ticks cpu_base;
static uint64_t cpu_base_ns;

static bool read_cpu_ticks(cpu_ticks *ticks) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return false;
  unsigned long long v[8] = {0};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                 &v[4], &v[5], &v[6], &v[7]);
  fclose(f);
  if (n < 4) return false;
  /* user nice system idle iowait irq softirq steal; guest time is in user */
  ticks->idle = v[3] + v[4];
  ticks->total = 0;
  for (int i = 0; i < 8; i++) ticks->total += v[i];
  return true;
}

static bool cpu_utilization(double *value) {
  cpu_ticks now;
  if (!read_cpu_ticks(&now)) return false;
  uint64_t t = hark_now_ns();
  pthread_mutex_lock(&cpu_lock);
  unsigned long long dt = now.total - cpu_base.total, di = now.idle - cpu_base.idle;
  double u = now.total > cpu_base.total && di <= dt ? 1.0 - (double)di / (double)dt : 0.0;
  if (!cpu_base_ns || t - cpu_base_ns >= CPU_WINDOW_NS) {
    cpu_base = now;
    cpu_base_ns = t;
  }
  pthread_mutex_unlock(&cpu_lock);
  *value = u < 0 ? 0 : u > 1 ? 1 : u;
  return true;
}

static bool read_meminfo(unsigned long long *total, unsigned long long *used) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return false;
  char line[256];
  unsigned long long kb, mem_total = 0, mem_avail = 0;
  bool have_total = false, have_avail = false;
  while (fgets(line, sizeof line, f) && !(have_total && have_avail)) {
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) {
      mem_total = kb;
      have_total = true;
    } else if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
      mem_avail = kb;
      have_avail = true;
    }
  }
  fclose(f);
  if (!have_total || !have_avail) return false;
  *total = mem_total * 1024;
  *used = (mem_total > mem_avail ? mem_total - mem_avail : 0) * 1024;
  return true;
}

static void host_gauges(out *o) {
  double u;
  if (cpu_utilization(&u))
    emit(o,
         "# HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]\n"
         "# TYPE nv_cpu_utilization gauge\nnv_cpu_utilization %.6f\n",
         u);
  unsigned long long total, used;
  if (read_meminfo(&total, &used))
    emit(o,
         "# HELP nv_cpu_memory_total_bytes CPU total memory (RAM), in bytes\n"
         "# TYPE nv_cpu_memory_total_bytes gauge\nnv_cpu_memory_total_bytes %llu\n"
         "# HELP nv_cpu_memory_used_bytes CPU used memory (RAM), in bytes\n"
         "# TYPE nv_cpu_memory_used_bytes gauge\nnv_cpu_memory_used_bytes %llu\n",
         total, used);
}

char *hark_server_metrics_render(hark_server *server) {
  snaps s = {0};
  hark_server_model_foreach(server, collect, &s);
  out o = {0};
  emit(&o, "%s", "");
  family(&o, &s, "nv_inference_request_success", "counter",
         "Number of successful inference requests, all batch sizes", g_success);
  failures(&o, &s);
  family(&o, &s, "nv_inference_count", "counter",
         "Number of inferences performed (does not include cached requests)", g_count);
  family(&o, &s, "nv_inference_exec_count", "counter",
         "Number of model executions performed (does not include cached requests)", g_exec);
  family(&o, &s, "nv_inference_request_duration_us", "counter",
         "Cumulative inference request duration in microseconds (includes cached requests)",
         g_req_us);
  family(&o, &s, "nv_inference_queue_duration_us", "counter",
         "Cumulative inference queuing duration in microseconds (includes cached requests)",
         g_queue_us);
  family(&o, &s, "nv_inference_compute_input_duration_us", "counter",
         "Cumulative compute input duration in microseconds (does not include cached requests)",
         g_in_us);
  family(&o, &s, "nv_inference_compute_infer_duration_us", "counter",
         "Cumulative compute inference duration in microseconds (does not include cached "
         "requests)",
         g_infer_us);
  family(&o, &s, "nv_inference_compute_output_duration_us", "counter",
         "Cumulative inference compute output duration in microseconds (does not include "
         "cached requests)",
         g_out_us);
  family(&o, &s, "nv_inference_pending_request_count", "gauge",
         "Instantaneous number of pending requests awaiting execution per-model.", g_pending);
  emit(&o,
       "# HELP nv_model_load_duration_secs Model load time in seconds\n"
       "# TYPE nv_model_load_duration_secs gauge\n");
  for (size_t i = 0; i < s.n; i++) {
    emit(&o, "nv_model_load_duration_secs{");
    labels(&o, &s.v[i]);
    emit(&o, "} %.6f\n", s.v[i].load_secs);
  }
  histogram(&o, &s, "hark_inference_request_duration_us",
            "Inference request duration in microseconds, from acceptance to final response",
            offsetof(hark_model_stats, request_duration));
  histogram(&o, &s, "hark_inference_queue_duration_us",
            "Time requests waited in the scheduler queue, in microseconds",
            offsetof(hark_model_stats, queue_duration));
  queue_delay(&o, &s);
  sequence_state(&o, &s);
  for (size_t i = 0; i < s.n; i++) free(s.v[i].name);
  free(s.v);
  host_gauges(&o);
  char *custom = hark_metrics_custom_render();
  if (custom) emit(&o, "%s", custom);
  free(custom);
  return o.buf;
}
