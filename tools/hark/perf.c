/*
 * perf.c — `hark perf`: a closed-loop load generator for KServe v2 over
 * HTTP or gRPC, modelled on Triton's perf_analyzer.
 *
 * It asks the server for the model's metadata (and config, for
 * max_batch_size), builds one request (perf_request.c; perf_grpc.c for
 * gRPC), checks the server accepts it, then for each concurrency level
 * runs that many threads, each on its own connection (an HTTP keep-alive
 * connection, or an h2c connection for gRPC), sending the same bytes back
 * to back.
 * A shared phase (warmup → measure → stop) decides what counts: a request
 * is measured when it completes inside the measurement window, so
 * throughput = measured successes × batch / window. The hot loop does no
 * allocation and no I/O besides the socket: each thread appends latencies
 * to its own array (grown by doubling), merged and sorted after the level.
 * The main thread only sleeps and flips the phase.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "grpcc.h"
#include "hostport.h"
#include "httpc.h"
#include "perf.h"
#include "stats.h"

#define PERF_MAX_SHAPES 64
#define PERF_MAX_CONCURRENCY 1024
#define PERF_LAT_INITIAL 16384
#define PERF_STOP_GRACE_MS 1000 /* how long in-flight requests may finish after the window */
#define PERF_ERROR_BACKOFF_MS 10

enum { EXIT_USAGE = 2, EXIT_ERRORS = 3 };
enum { PH_WARMUP, PH_MEASURE, PH_STOP };

typedef struct perf_opts {
  const char *model, *version, *url, *protocol;
  int c_start, c_end, c_step;
  int interval_ms, warmup_ms, timeout_ms, batch;
  bool random, binary, json;
  perf_shape shapes[PERF_MAX_SHAPES];
  int n_shapes;
  char host[256], port[16], hostport[300];
} perf_opts;

/* The first failed request's message, kept for the user. */
typedef struct first_error {
  atomic_flag taken;
  atomic_bool ready;
  bool printed;
  char msg[1024];
} first_error;

/* What one concurrency level's threads share. */
typedef struct level_shared {
  const perf_opts *o;
  const perf_request *req;       /* http */
  const perf_grpc_request *greq; /* grpc */
  first_error *err;
  atomic_int phase;
  atomic_int running;
} level_shared;

typedef struct worker {
  pthread_t tid;
  level_shared *sh;
  httpc conn;         /* http */
  perf_grpc_conn *gc; /* grpc */
  stats_series lat;   /* ns of each measured success */
  uint64_t errors;    /* measured failures */
} worker;

typedef struct level_result {
  int concurrency;
  uint64_t requests, errors;
  double seconds, throughput;
  double avg, p50, p90, p95, p99, max; /* microseconds */
} level_result;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

/* ---- options ------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: hark perf -m MODEL [options]\n"
      "Sends the same inference request from N client threads in a closed loop and\n"
      "reports throughput and latency per concurrency level, like perf_analyzer.\n\n"
      "  -m, --model-name MODEL          model to load (required)\n"
      "  -x, --model-version V           model version (default: the server's choice)\n"
      "  -u, --url HOST:PORT             server (default localhost:8000 for http, :8001 for grpc)\n"
      "  -i, --protocol http|grpc        KServe v2 over HTTP/REST or gRPC (default http)\n"
      "      --concurrency-range S:E[:STEP]  concurrency levels S, S+STEP, ... E (default 1:1:1)\n"
      "  -p, --measurement-interval MS   measurement window per level (default 5000)\n"
      "      --warmup MS                 unmeasured load before each window (default interval/5)\n"
      "  -b, --batch-size N              batch size of each request (default 1)\n"
      "      --input-data zero|random    input values (default zero)\n"
      "      --binary                    binary tensor extension for inputs and outputs (http;\n"
      "                                  grpc always sends raw_input_contents)\n"
      "      --shape NAME:D1,D2,...      shape of a variable-size input, batch dim excluded\n"
      "      --request-timeout MS        give up on one request after MS (default 30000)\n"
      "      --json                      print the results as one JSON object on stdout\n"
      "  -h, --help                      this help\n\n"
      "Exit status: 0 ok; 1 server unreachable, model unknown or request rejected;\n"
      "2 bad usage; 3 measured, but some requests failed.\n");
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

static bool parse_range(const char *s, perf_opts *o) {
  char buf[64];
  snprintf(buf, sizeof buf, "%s", s);
  char *parts[3] = {buf, NULL, NULL};
  for (int i = 1; i < 3; i++) {
    char *colon = parts[i - 1] ? strchr(parts[i - 1], ':') : NULL;
    if (colon) *colon = '\0', parts[i] = colon + 1;
  }
  o->c_step = 1;
  if (!parse_int(parts[0], 1, PERF_MAX_CONCURRENCY, &o->c_start)) return false;
  o->c_end = o->c_start;
  if (parts[1] && !parse_int(parts[1], o->c_start, PERF_MAX_CONCURRENCY, &o->c_end)) return false;
  if (parts[2] && !parse_int(parts[2], 1, PERF_MAX_CONCURRENCY, &o->c_step)) return false;
  return true;
}

enum { O_RANGE = 256, O_WARMUP, O_INPUT_DATA, O_BINARY, O_SHAPE, O_JSON, O_TIMEOUT };

static const struct option long_opts[] = {
    {"model-name", required_argument, NULL, 'm'},
    {"model-version", required_argument, NULL, 'x'},
    {"url", required_argument, NULL, 'u'},
    {"protocol", required_argument, NULL, 'i'},
    {"concurrency-range", required_argument, NULL, O_RANGE},
    {"measurement-interval", required_argument, NULL, 'p'},
    {"warmup", required_argument, NULL, O_WARMUP},
    {"batch-size", required_argument, NULL, 'b'},
    {"input-data", required_argument, NULL, O_INPUT_DATA},
    {"binary", no_argument, NULL, O_BINARY},
    {"shape", required_argument, NULL, O_SHAPE},
    {"request-timeout", required_argument, NULL, O_TIMEOUT},
    {"json", no_argument, NULL, O_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int bad(const char *fmt, const char *arg) {
  fprintf(stderr, "hark perf: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see hark perf --help)\n");
  return -1;
}

/* Returns 0, 1 when --help was printed, or -1 after a message. */
static int parse_one(perf_opts *o, int c, const char *arg) {
  switch (c) {
  case 'm': o->model = arg; return 0;
  case 'x': o->version = arg; return 0;
  case 'u': o->url = arg; return 0;
  case 'i': o->protocol = arg; return 0;
  case 'p':
    return parse_int(arg, 1, 3600000, &o->interval_ms)
               ? 0
               : bad("bad --measurement-interval '%s'", arg);
  case 'b': return parse_int(arg, 1, 1 << 20, &o->batch) ? 0 : bad("bad --batch-size '%s'", arg);
  case O_RANGE:
    return parse_range(arg, o) ? 0 : bad("bad --concurrency-range '%s' (START:END[:STEP])", arg);
  case O_WARMUP:
    return parse_int(arg, 0, 3600000, &o->warmup_ms) ? 0 : bad("bad --warmup '%s'", arg);
  case O_TIMEOUT:
    return parse_int(arg, 1, 3600000, &o->timeout_ms) ? 0 : bad("bad --request-timeout '%s'", arg);
  case O_BINARY: o->binary = true; return 0;
  case O_JSON: o->json = true; return 0;
  case O_INPUT_DATA:
    if (strcmp(arg, "zero") != 0 && strcmp(arg, "random") != 0)
      return bad("--input-data must be zero or random, not '%s'", arg);
    o->random = strcmp(arg, "random") == 0;
    return 0;
  case O_SHAPE:
    if (o->n_shapes == PERF_MAX_SHAPES) return bad("too many --shape flags%s", "");
    return perf_shape_parse(arg, &o->shapes[o->n_shapes++]) == 0
               ? 0
               : bad("bad --shape '%s' (NAME:D1,D2,...)", arg);
  case 'h': usage(stdout); return 1;
  default: return bad("%s", "unknown option");
  }
}

static int parse_opts(int argc, char **argv, perf_opts *o) {
  *o = (perf_opts){.protocol = "http",
                   .c_start = 1,
                   .c_end = 1,
                   .c_step = 1,
                   .interval_ms = 5000,
                   .warmup_ms = -1,
                   .timeout_ms = 30000,
                   .batch = 1};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":m:x:u:i:p:b:h", long_opts, NULL)) != -1) {
    if (c == '?') return bad("unknown option '%s'", argv[optind - 1]);
    if (c == ':') return bad("option '%s' needs a value", argv[optind - 1]);
    int rc = parse_one(o, c, optarg);
    if (rc) return rc;
  }
  if (optind < argc) return bad("unexpected argument '%s'", argv[optind]);
  if (!o->model) return bad("%s", "-m MODEL is required");
  if (strcmp(o->protocol, "http") != 0 && strcmp(o->protocol, "grpc") != 0)
    return bad("--protocol must be http or grpc, not '%s'", o->protocol);
  bool grpc = strcmp(o->protocol, "grpc") == 0;
  if (!o->url) o->url = grpc ? "localhost:8001" : "localhost:8000";
  if (o->warmup_ms < 0) o->warmup_ms = o->interval_ms / 5;
  if (hark_split_hostport(o->url, grpc ? "8001" : "8000", o->host, sizeof o->host, o->port,
                          sizeof o->port) < 0)
    return bad("bad --url '%s' (HOST:PORT)", o->url);
  bool v6 = strchr(o->host, ':') != NULL;
  snprintf(o->hostport, sizeof o->hostport, "%s%s%s:%s", v6 ? "[" : "", o->host, v6 ? "]" : "",
           o->port);
  return 0;
}

/* ---- the model ----------------------------------------------------------- */

/* /v2/models/NAME[/versions/V]SUFFIX with the name percent-encoded. */
static void model_path(const perf_opts *o, const char *suffix, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "/v2/models/");
  for (const unsigned char *p = (const unsigned char *)o->model; *p && n + 4 < cap; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("-._~", *p))
      out[n++] = (char)*p;
    else
      n += (size_t)snprintf(out + n, cap - n, "%%%02X", *p);
  }
  out[n] = '\0';
  if (o->version)
    snprintf(out + n, cap - n, "/versions/%s%s", o->version, suffix);
  else
    snprintf(out + n, cap - n, "%s", suffix);
}

/* The "error" field of a KServe error body, else the body itself. */
static void error_text(const httpc_response *r, char *out, size_t cap) {
  cJSON *doc = cJSON_ParseWithLength(r->body, r->body_len);
  const cJSON *e = doc ? cJSON_GetObjectItemCaseSensitive(doc, "error") : NULL;
  if (cJSON_IsString(e))
    snprintf(out, cap, "%s", e->valuestring);
  else
    snprintf(out, cap, "%.*s", (int)(r->body_len < cap ? r->body_len : cap - 1), r->body);
  cJSON_Delete(doc);
}

static int config_max_batch(const perf_opts *o, httpc *c) {
  char path[1024];
  httpc_response r;
  model_path(o, "/config", path, sizeof path);
  if (httpc_simple(c, "GET", path, NULL, &r) < 0 || r.status != 200) return -1;
  cJSON *doc = cJSON_ParseWithLength(r.body, r.body_len);
  const cJSON *mbs = doc ? cJSON_GetObjectItemCaseSensitive(doc, "max_batch_size") : NULL;
  int v = cJSON_IsNumber(mbs) && mbs->valuedouble >= 0 ? (int)mbs->valuedouble : -1;
  cJSON_Delete(doc);
  return v;
}

static int load_model(const perf_opts *o, httpc *c, perf_model *m) {
  char path[1024], msg[1024];
  httpc_response r;
  model_path(o, "", path, sizeof path);
  if (httpc_simple(c, "GET", path, NULL, &r) < 0) {
    fprintf(stderr, "hark perf: server unreachable: %s\n", c->err);
    return -1;
  }
  if (r.status != 200) {
    error_text(&r, msg, sizeof msg);
    fprintf(stderr, "hark perf: model '%s' is not available at %s (HTTP %d): %s\n", o->model,
            o->hostport, r.status, msg);
    return -1;
  }
  char *meta = strndup(r.body, r.body_len); /* the config request reuses the buffer */
  int mbs = config_max_batch(o, c);
  int rc = meta ? perf_model_parse(meta, strlen(meta), mbs, m, msg, sizeof msg) : -1;
  free(meta);
  if (rc == 0) rc = perf_model_resolve(m, o->batch, o->shapes, o->n_shapes, msg, sizeof msg);
  if (rc < 0) fprintf(stderr, "hark perf: model '%s': %s\n", o->model, msg);
  return rc;
}

/* One request before the load: a rejected request fails fast and clearly
 * instead of as a run of errors. */
static int probe(const perf_opts *o, httpc *c, const perf_request *req) {
  httpc_response r;
  char msg[1024];
  if (httpc_request(c, req->data, req->len, &r) < 0) {
    fprintf(stderr, "hark perf: server unreachable: %s\n", c->err);
    return -1;
  }
  if (r.status == 200) return 0;
  error_text(&r, msg, sizeof msg);
  fprintf(stderr, "hark perf: the server rejected the inference request (HTTP %d): %s\n", r.status,
          msg);
  return -1;
}

/* ---- the load ------------------------------------------------------------ */

static void note_error(level_shared *sh, const httpc *c, int rc, const httpc_response *r) {
  first_error *e = sh->err;
  if (atomic_flag_test_and_set(&e->taken)) return;
  if (rc < 0)
    snprintf(e->msg, sizeof e->msg, "%s", c->err);
  else
    snprintf(e->msg, sizeof e->msg, "HTTP %d: %.*s", r->status,
             (int)(r->body_len < 900 ? r->body_len : 900), r->body);
  atomic_store(&e->ready, true);
}

static void note_grpc_error(level_shared *sh, const char *msg) {
  first_error *e = sh->err;
  if (atomic_flag_test_and_set(&e->taken)) return;
  snprintf(e->msg, sizeof e->msg, "%s", msg);
  atomic_store(&e->ready, true);
}

/* One request on the worker's connection: true when it succeeded; *dead
 * when the transport failed (the caller backs off). */
static bool one_request(worker *w, bool *dead) {
  level_shared *sh = w->sh;
  if (sh->greq) {
    char msg[1024];
    bool ok = perf_grpc_infer(w->gc, sh->greq, dead, msg, sizeof msg) == 0;
    if (!ok && atomic_load_explicit(&sh->phase, memory_order_relaxed) != PH_STOP)
      note_grpc_error(sh, msg);
    return ok;
  }
  httpc_response r;
  int rc = httpc_request(&w->conn, sh->req->data, sh->req->len, &r);
  bool ok = rc == 0 && r.status == 200;
  if (!ok && atomic_load_explicit(&sh->phase, memory_order_relaxed) != PH_STOP)
    note_error(sh, &w->conn, rc, &r);
  *dead = rc < 0;
  return ok;
}

static void *worker_main(void *arg) {
  worker *w = arg;
  level_shared *sh = w->sh;
  while (atomic_load_explicit(&sh->phase, memory_order_relaxed) != PH_STOP) {
    bool dead = false;
    uint64_t t0 = now_ns();
    bool ok = one_request(w, &dead);
    uint64_t t1 = now_ns();
    int phase = atomic_load_explicit(&sh->phase, memory_order_relaxed);
    if (phase == PH_STOP) break;
    if (phase == PH_MEASURE) {
      if (ok)
        stats_series_push(&w->lat, t1 - t0);
      else
        w->errors++;
    }
    if (dead) sleep_ms(PERF_ERROR_BACKOFF_MS); /* don't spin on a dead server */
  }
  atomic_fetch_sub(&sh->running, 1);
  return NULL;
}

static void summarize(worker *ws, int n, uint64_t window_ns, int batch, level_result *res) {
  size_t total = 0;
  uint64_t errors = 0;
  for (int i = 0; i < n; i++) total += ws[i].lat.n, errors += ws[i].errors;
  uint64_t *all = malloc((total ? total : 1) * sizeof *all);
  size_t k = 0;
  for (int i = 0; i < n && all; i++)
    for (size_t j = 0; j < ws[i].lat.n; j++) all[k++] = ws[i].lat.v[j];
  stats_summary s;
  stats_summarize(all, k, 1000.0, &s); /* ns -> µs */
  res->requests = total + errors;
  res->errors = errors;
  res->seconds = (double)window_ns / 1e9;
  res->throughput = (double)total * batch / res->seconds;
  res->avg = s.avg;
  res->p50 = s.p50;
  res->p90 = s.p90;
  res->p95 = s.p95;
  res->p99 = s.p99;
  res->max = s.max;
  free(all);
}

/* Lets in-flight requests finish, then wakes any thread still blocked. */
static void stop_workers(worker *ws, int n, level_shared *sh) {
  uint64_t deadline = now_ns() + (uint64_t)PERF_STOP_GRACE_MS * 1000000u;
  while (atomic_load(&sh->running) > 0 && now_ns() < deadline) sleep_ms(1);
  if (atomic_load(&sh->running) > 0)
    for (int i = 0; i < n; i++) {
      if (ws[i].gc)
        perf_grpc_conn_abort(ws[i].gc);
      else
        httpc_abort(&ws[i].conn);
    }
  for (int i = 0; i < n; i++) pthread_join(ws[i].tid, NULL);
}

static void worker_conn_free(worker *w) {
  if (w->gc)
    perf_grpc_conn_free(w->gc);
  else
    httpc_free(&w->conn);
  w->gc = NULL;
}

static int start_workers(worker *ws, int n, level_shared *sh, int *started) {
  for (*started = 0; *started < n; (*started)++) {
    worker *w = &ws[*started];
    w->sh = sh;
    bool mem = stats_series_reserve(&w->lat, PERF_LAT_INITIAL) == 0;
    if (mem && sh->greq) {
      w->gc = perf_grpc_conn_new(sh->o->host, sh->o->port, sh->o->timeout_ms);
      mem = w->gc != NULL;
    } else if (mem && httpc_init(&w->conn, sh->o->host, sh->o->port, sh->o->timeout_ms) < 0) {
      fprintf(stderr, "hark perf: %s\n", w->conn.err);
      return -1;
    }
    if (!mem) {
      fprintf(stderr, "hark perf: out of memory\n");
      return -1;
    }
    if (pthread_create(&w->tid, NULL, worker_main, w) != 0) {
      worker_conn_free(w);
      fprintf(stderr, "hark perf: cannot start client thread %d\n", *started + 1);
      return -1;
    }
  }
  return 0;
}

static int run_level(const perf_opts *o, const perf_request *req, const perf_grpc_request *greq,
                     first_error *err, int concurrency, level_result *res) {
  level_shared sh = {.o = o, .req = req, .greq = greq, .err = err};
  atomic_init(&sh.phase, PH_WARMUP);
  atomic_init(&sh.running, concurrency);
  worker *ws = calloc((size_t)concurrency, sizeof *ws);
  if (!ws) return -1;
  int started, rc = start_workers(ws, concurrency, &sh, &started);
  uint64_t t0 = 0, t1 = 0;
  if (rc == 0) {
    sleep_ms(o->warmup_ms);
    atomic_store(&sh.phase, PH_MEASURE);
    t0 = now_ns();
    sleep_ms(o->interval_ms);
    atomic_store(&sh.phase, PH_STOP);
    t1 = now_ns();
  } else {
    atomic_store(&sh.phase, PH_STOP);
    atomic_fetch_sub(&sh.running, concurrency - started);
  }
  stop_workers(ws, started, &sh);
  res->concurrency = concurrency;
  if (rc == 0) summarize(ws, concurrency, t1 - t0, o->batch, res);
  for (int i = 0; i < concurrency; i++) {
    if (i < started) worker_conn_free(&ws[i]);
    stats_series_free(&ws[i].lat);
  }
  free(ws);
  return rc;
}

/* ---- reporting ----------------------------------------------------------- */

static void print_settings(FILE *f, const perf_opts *o) {
  fprintf(f, "*** Measurement Settings ***\n");
  fprintf(f, "  Model: %s%s%s at %s over %s\n", o->model, o->version ? " version " : "",
          o->version ? o->version : "", o->hostport, o->protocol);
  fprintf(f, "  Batch size: %d\n  Input data: %s, %s tensors\n", o->batch,
          o->random ? "random" : "zero",
          strcmp(o->protocol, "grpc") == 0 ? "raw"
          : o->binary                      ? "binary"
                                           : "JSON");
  fprintf(f, "  Measurement window: %d msec after %d msec warmup\n", o->interval_ms, o->warmup_ms);
  fprintf(f, "  Concurrency: %d to %d, step %d\n\n", o->c_start, o->c_end, o->c_step);
}

static void print_level(FILE *f, const level_result *r) {
  fprintf(
      f,
      "Concurrency: %d, throughput: %.1f infer/sec, latency p50 %.0f usec, p90 %.0f usec, "
      "p95 %.0f usec, p99 %.0f usec, avg %.0f usec, max %.0f usec; requests %llu, errors %llu\n",
      r->concurrency, r->throughput, r->p50, r->p90, r->p95, r->p99, r->avg, r->max,
      (unsigned long long)r->requests, (unsigned long long)r->errors);
  fflush(f);
}

static void print_table(const level_result *rs, int n) {
  printf("\nInferences/Second vs. Client Latency (usec)\n");
  printf("%11s %12s %9s %7s %9s %9s %9s %9s %9s %9s\n", "Concurrency", "Infer/sec", "Requests",
         "Errors", "Avg", "p50", "p90", "p95", "p99", "Max");
  for (int i = 0; i < n; i++) {
    const level_result *r = &rs[i];
    printf("%11d %12.1f %9llu %7llu %9.0f %9.0f %9.0f %9.0f %9.0f %9.0f\n", r->concurrency,
           r->throughput, (unsigned long long)r->requests, (unsigned long long)r->errors, r->avg,
           r->p50, r->p90, r->p95, r->p99, r->max);
  }
}

static double round1(double v) { return round(v * 10.0) / 10.0; }

static void print_json(const perf_opts *o, const level_result *rs, int n) {
  cJSON *doc = cJSON_CreateObject(), *results = cJSON_CreateArray();
  cJSON_AddStringToObject(doc, "model", o->model);
  cJSON_AddStringToObject(doc, "protocol", o->protocol);
  cJSON_AddNumberToObject(doc, "batch_size", o->batch);
  for (int i = 0; i < n; i++) {
    const level_result *r = &rs[i];
    cJSON *e = cJSON_CreateObject(), *lat = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "concurrency", r->concurrency);
    cJSON_AddNumberToObject(e, "throughput_infer_per_sec", round1(r->throughput));
    cJSON_AddNumberToObject(e, "requests", (double)r->requests);
    cJSON_AddNumberToObject(e, "errors", (double)r->errors);
    cJSON_AddNumberToObject(lat, "avg", round1(r->avg));
    cJSON_AddNumberToObject(lat, "p50", round1(r->p50));
    cJSON_AddNumberToObject(lat, "p90", round1(r->p90));
    cJSON_AddNumberToObject(lat, "p95", round1(r->p95));
    cJSON_AddNumberToObject(lat, "p99", round1(r->p99));
    cJSON_AddNumberToObject(lat, "max", round1(r->max));
    cJSON_AddItemToObject(e, "latency_us", lat);
    cJSON_AddItemToArray(results, e);
  }
  cJSON_AddItemToObject(doc, "results", results);
  char *s = cJSON_PrintUnformatted(doc);
  if (s) printf("%s\n", s);
  free(s);
  cJSON_Delete(doc);
}

/* ---- main ---------------------------------------------------------------- */

static int run_all(const perf_opts *o, const perf_request *req, const perf_grpc_request *greq,
                   level_result *rs, int *n) {
  FILE *progress = o->json ? stderr : stdout;
  first_error err = {.taken = ATOMIC_FLAG_INIT};
  uint64_t errors = 0;
  print_settings(progress, o);
  *n = 0;
  for (int c = o->c_start; c <= o->c_end; c += o->c_step) {
    if (run_level(o, req, greq, &err, c, &rs[*n]) < 0) return 1;
    print_level(progress, &rs[*n]);
    if (rs[*n].requests == rs[*n].errors) { /* nothing measured: say so, fail the run */
      fprintf(stderr,
              "hark perf: no request succeeded within the %d msec window at concurrency %d%s\n",
              o->interval_ms, c, rs[*n].errors ? "" : "; try a longer --measurement-interval");
      errors++;
    }
    errors += rs[(*n)++].errors;
    if (atomic_load(&err.ready) && !err.printed) {
      fprintf(stderr, "hark perf: first failed request: %s\n", err.msg);
      err.printed = true;
    }
  }
  return errors ? EXIT_ERRORS : 0;
}

/* One ModelInfer before the load, as probe() for HTTP. */
static int probe_grpc(const perf_opts *o, const perf_grpc_request *req) {
  perf_grpc_conn *c = perf_grpc_conn_new(o->host, o->port, o->timeout_ms);
  char msg[1024];
  bool dead = false;
  int rc = c ? perf_grpc_infer(c, req, &dead, msg, sizeof msg) : -1;
  if (!c)
    fprintf(stderr, "hark perf: out of memory\n");
  else if (rc < 0 && dead)
    fprintf(stderr, "hark perf: server unreachable: %s\n", msg);
  else if (rc < 0)
    fprintf(stderr, "hark perf: the server rejected the inference request (%s)\n", msg);
  perf_grpc_conn_free(c);
  return rc;
}

static int main_grpc(const perf_opts *o, perf_model *model, perf_grpc_request *req,
                     level_result **rs, int *n) {
  char msg[1024];
  bool unreachable;
  if (perf_grpc_model_load(o->hostport, o->model, o->version, o->timeout_ms, model, &unreachable,
                           msg, sizeof msg) < 0) {
    if (unreachable)
      fprintf(stderr, "hark perf: server unreachable at %s: %s\n", o->hostport, msg);
    else
      fprintf(stderr, "hark perf: model '%s' is not available at %s: %s\n", o->model, o->hostport,
              msg);
    return 1;
  }
  if (perf_model_resolve(model, o->batch, o->shapes, o->n_shapes, msg, sizeof msg) < 0) {
    fprintf(stderr, "hark perf: model '%s': %s\n", o->model, msg);
    return 1;
  }
  perf_grpc_request_build(model, o->model, o->version, o->random, req);
  *rs = calloc((size_t)((o->c_end - o->c_start) / o->c_step + 1), sizeof **rs);
  if (!*rs || probe_grpc(o, req) < 0) return 1;
  return run_all(o, NULL, req, *rs, n);
}

static int main_http(const perf_opts *o, perf_model *model, perf_request *req, level_result **rs,
                     int *n) {
  httpc ctl;
  if (httpc_init(&ctl, o->host, o->port, o->timeout_ms) < 0) {
    fprintf(stderr, "hark perf: %s\n", ctl.err);
    return 1;
  }
  int rc = 1;
  if (load_model(o, &ctl, model) == 0) {
    char path[1024];
    model_path(o, "/infer", path, sizeof path);
    perf_request_build(model, &(perf_body_opts){.binary = o->binary, .random = o->random},
                       o->hostport, path, req);
    *rs = calloc((size_t)((o->c_end - o->c_start) / o->c_step + 1), sizeof **rs);
    if (*rs && probe(o, &ctl, req) == 0) rc = run_all(o, req, NULL, *rs, n);
  }
  httpc_free(&ctl);
  return rc;
}

int hark_perf_main(int argc, char **argv) {
  perf_opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : EXIT_USAGE;
  perf_model model = {0};
  perf_request req = {0};
  perf_grpc_request greq = {0};
  level_result *rs = NULL;
  int n = 0;
  bool grpc = strcmp(o.protocol, "grpc") == 0;
  if (grpc) grpcc_init();
  rc = grpc ? main_grpc(&o, &model, &greq, &rs, &n) : main_http(&o, &model, &req, &rs, &n);
  if (n > 0 && (rc == 0 || rc == EXIT_ERRORS)) {
    if (o.json)
      print_json(&o, rs, n);
    else
      print_table(rs, n);
  }
  free(rs);
  free(req.data);
  perf_grpc_request_free(&greq);
  perf_model_free(&model);
  if (grpc) grpcc_shutdown();
  return rc;
}
