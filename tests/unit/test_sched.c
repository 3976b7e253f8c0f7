/*
 * test_sched.c — the schedulers end to end inside one process: a real
 * server on a temporary model repository, the real test backends
 * (identity, simple), requests through hark_server_infer. Each test writes
 * the models it needs, starts a server, and frees it (which stops every
 * scheduler, so queued requests must still get their finals).
 *
 * Waits are on conditions with generous limits. Where a test needs an
 * instance to stay busy while it queues more requests, the execution costs
 * 300 ms, far longer than queueing a few requests takes.
 */
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/core.h"
#include "hark/server.h"
#include "sched/sched.h"
#include "test_repo.h"

/* ---- the repository's models -------------------------------------------------- */

static hark_model *model_get(hark_server *s, const char *name) {
  hark_model *m = NULL;
  hark_error *err = hark_server_model_acquire(s, name, -1, &m);
  if (err) fail_msg("model '%s': %s", name, hark_error_message(err));
  return m;
}

/* ---- collecting finals ----------------------------------------------------------- */

typedef struct final {
  int tag;
  pthread_t thread; /* that ran the callback */
  hark_code code;
  char msg[160];
  int32_t out[2][16]; /* OUTPUT0/OUTPUT1 (or the first two outputs) */
  uint32_t n_out;
} final;

typedef struct collector {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  final got[256];
  int n;
} collector;

typedef struct ctx {
  collector *c;
  int tag;
} ctx;

static void collector_init(collector *c) {
  memset(c, 0, sizeof *c);
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->cond, NULL);
}

static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  ctx *x = userp;
  collector *c = x->c;
  if (!(flags & HARK_RESPONSE_FINAL)) fail_msg("only final responses expected");
  pthread_mutex_lock(&c->lock);
  final *f = &c->got[c->n];
  f->tag = x->tag;
  f->thread = pthread_self();
  f->code = err ? hark_error_code(err) : HARK_OK;
  snprintf(f->msg, sizeof f->msg, "%s", err ? hark_error_message(err) : "");
  for (uint32_t i = 0; resp && i < hark_response_output_count(resp) && i < 2; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    size_t n = t->byte_size < sizeof f->out[i] ? t->byte_size : sizeof f->out[i];
    if (t->data && n) memcpy(f->out[i], t->data, n);
    f->n_out = i + 1;
  }
  c->n++;
  pthread_cond_broadcast(&c->cond);
  pthread_mutex_unlock(&c->lock);
  hark_response_free(resp);
  hark_error_free(err);
}

/* Waits (up to 30 s) until `n` finals arrived. */
static void collector_wait(collector *c, int n) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&c->lock);
  while (c->n < n)
    if (pthread_cond_timedwait(&c->cond, &c->lock, &until) == ETIMEDOUT) break;
  int got = c->n;
  pthread_mutex_unlock(&c->lock);
  assert_int_equal(got, n);
}

static const final *final_of(collector *c, int tag) {
  for (int i = 0; i < c->n; i++)
    if (c->got[i].tag == tag) return &c->got[i];
  fail_msg("no final for request %d", tag);
  return NULL;
}

/* ---- building requests ------------------------------------------------------------- */

typedef struct req_opts {
  uint32_t batch; /* batch dimension; 0: 1 */
  uint32_t priority;
  uint64_t timeout_us;
  uint32_t elems; /* elements per batch item; 0: 16 */
} req_opts;

/* An INT32 or FP32 request on `inputs` (1 or 2 names); data i*100+k. */
static hark_request *request_make(hark_model *m, const char *const *inputs, int n_inputs,
                                  hark_datatype dt, int tag, req_opts o, ctx *x) {
  uint32_t batch = o.batch ? o.batch : 1, elems = o.elems ? o.elems : 16;
  hark_request *req = hark_request_new(m);
  char id[32];
  snprintf(id, sizeof id, "r%d", tag);
  hark_request_set_id(req, id);
  if (o.priority) hark_request_set_priority(req, o.priority);
  if (o.timeout_us) hark_request_set_timeout_us(req, o.timeout_us);
  for (int i = 0; i < n_inputs; i++) {
    size_t n = (size_t)batch * elems;
    int32_t *data = malloc(n * 4);
    assert_non_null(data);
    for (size_t k = 0; k < n; k++) {
      int32_t v = tag * 100 + (int32_t)k + i * 1000;
      if (dt == HARK_TYPE_FP32) {
        float fv = (float)v;
        memcpy(&data[k], &fv, 4);
      } else {
        data[k] = v;
      }
    }
    int64_t shape[2] = {batch, elems};
    assert_null(hark_request_add_input(req, inputs[i], dt, shape, 2, data, n * 4));
    hark_request_attach(req, data, free);
  }
  hark_request_set_callback(req, on_response, x);
  return req;
}

static const char *const INPUT0[] = {"INPUT0"};
static const char *const INPUT01[] = {"INPUT0", "INPUT1"};

/* Sends an identity (FP32 INPUT0) request; asserts it was accepted. */
static void send_identity(hark_server *s, hark_model *m, collector *c, ctx *x, int tag,
                          req_opts o) {
  x->c = c;
  x->tag = tag;
  hark_request *req = request_make(m, INPUT0, 1, HARK_TYPE_FP32, tag, o, x);
  hark_error *err = hark_server_infer(s, req);
  if (err) fail_msg("request %d refused: %s", tag, hark_error_message(err));
}

#define IDENTITY(extra)                                                \
  "backend: \"identity\"\n"                                            \
  "input [ { name: \"INPUT0\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n" \
  "output [ { name: \"OUTPUT0\" data_type: TYPE_FP32 dims: [ 16 ] } ]\n" extra

/* ---- dynamic batching -------------------------------------------------------------- */

static void test_preferred_batch(void **state) {
  (void)state;
  repo_make("sched");
  /* A 10 s queue delay: only reaching the preferred size can dispatch. */
  model_write("batch4", IDENTITY("max_batch_size: 8\n"
                                 "dynamic_batching { preferred_batch_size: [ 4 ] "
                                 "max_queue_delay_microseconds: 10000000 }\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "batch4");
  collector c;
  collector_init(&c);
  ctx x[8];
  for (int i = 0; i < 4; i++) send_identity(s, m, &c, &x[i], i, (req_opts){0});
  collector_wait(&c, 4);
  /* Batch dimensions count: 3 + 1 is 4 as well. */
  send_identity(s, m, &c, &x[4], 4, (req_opts){.batch = 3});
  send_identity(s, m, &c, &x[5], 5, (req_opts){.batch = 1});
  collector_wait(&c, 6);
  for (int i = 0; i < 6; i++) assert_int_equal(c.got[i].code, HARK_OK);
  hark_model_stats st;
  hark_model_stats_read(m, &st);
  assert_int_equal(st.execution_count, 2);
  assert_int_equal(st.inference_count, 8);
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

static void test_default_scheduler_one_per_execution(void **state) {
  (void)state;
  repo_make("sched");
  model_write("nobatch", IDENTITY("max_batch_size: 8\n"
                                  "instance_group [ { count: 2 kind: KIND_CPU } ]\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "nobatch");
  collector c;
  collector_init(&c);
  ctx x[10];
  for (int i = 0; i < 10; i++) send_identity(s, m, &c, &x[i], i, (req_opts){.batch = 2});
  collector_wait(&c, 10);
  for (int i = 0; i < 10; i++) {
    const final *f = final_of(&c, i);
    assert_int_equal(f->code, HARK_OK);
    float v;
    memcpy(&v, &f->out[0][5], 4);
    assert_true(v == (float)(i * 100 + 5)); /* its own data came back */
  }
  hark_model_stats st;
  hark_model_stats_read(m, &st);
  assert_int_equal(st.execution_count, 10);
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

/* Inline runs: a thread that allows them runs a cheap model's batch itself
 * (its callback has run, on that thread, when hark_server_infer returns);
 * a model slower than the bound always goes to a worker, and so does
 * everything on a thread that did not allow it. */
/* Waits (up to 30 s) until none of the model's instances is executing. */
static void wait_quiet(hark_model *m) {
  for (int i = 0; i < 30000 && hark_sched_busy(m->sched); i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  assert_int_equal(hark_sched_busy(m->sched), 0);
}

static void test_inline_runs(void **state) {
  (void)state;
  repo_make("sched");
  /* Two instances. A worker that sent a FINAL may still be returning from
   * its execution: each inline send first waits until no instance is busy. */
  model_write("cheap", IDENTITY("max_batch_size: 8\n"
                                "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
                                "dynamic_batching { }\n"));
  model_write("slow", IDENTITY("max_batch_size: 8\n"
                               "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
                               "dynamic_batching { }\n"
                               "parameters [ { key: \"execute_delay_us\" "
                               "value: { string_value: \"20000\" } } ]\n"));
  hark_server *s = server_start_with((hark_server_options){
      .model_control = HARK_MODEL_CONTROL_NONE, .worker_threads = 2, .inline_max_us = 5000});
  const char *names[] = {"cheap", "slow"};
  for (int mi = 0; mi < 2; mi++) {
    hark_model *m = model_get(s, names[mi]);
    collector c;
    collector_init(&c);
    ctx x[64];
    /* Warm-up, timed on the workers, one at a time (no batching). */
    for (int i = 0; i < 20; i++) {
      send_identity(s, m, &c, &x[i], i, (req_opts){0});
      collector_wait(&c, i + 1);
    }
    for (int i = 0; i < 20; i++)
      assert_false(pthread_equal(final_of(&c, i)->thread, pthread_self()));
    hark_server_thread_may_inline(true);
    for (int i = 20; i < 30; i++) {
      wait_quiet(m);
      send_identity(s, m, &c, &x[i], i, (req_opts){0});
      pthread_mutex_lock(&c.lock);
      int had = c.n;
      pthread_mutex_unlock(&c.lock);
      if (mi == 0) assert_int_equal(had, i + 1); /* done before infer returned */
      collector_wait(&c, i + 1);
      const final *f = final_of(&c, i);
      assert_int_equal(f->code, HARK_OK);
      float v;
      memcpy(&v, &f->out[0][3], 4);
      assert_true(v == (float)(i * 100 + 3));
      assert_int_equal(pthread_equal(f->thread, pthread_self()) != 0, mi == 0);
    }
    hark_server_thread_may_inline(false);
    send_identity(s, m, &c, &x[30], 30, (req_opts){0});
    collector_wait(&c, 31);
    assert_false(pthread_equal(final_of(&c, 30)->thread, pthread_self()));
    hark_model_release(m);
  }
  hark_server_free(s);
  repo_remove();
}

/* A request sent from another thread while a thread runs a batch inline
 * on the model's only instance (another event loop's request, in harkd)
 * queues; when the instance is free, the thread that ran inline runs it
 * too, rather than handing it to a worker. */
typedef struct behind {
  hark_server *s;
  hark_model *m;
  collector *c;
  ctx *x;
  int tag;
  bool queued; /* it waited for the instance */
} behind;

static void *send_behind(void *arg) {
  behind *b = arg;
  while (!hark_sched_busy(b->m->sched)) sched_yield(); /* the inline run began */
  send_identity(b->s, b->m, b->c, b->x, b->tag, (req_opts){0});
  b->queued = hark_sched_queued(b->m->sched) == 1;
  return NULL;
}

static void test_inline_chain(void **state) {
  (void)state;
  repo_make("sched");
  model_write("one", IDENTITY("max_batch_size: 8\n"
                              "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
                              "dynamic_batching { }\n"
                              "parameters [ { key: \"execute_delay_us\" "
                              "value: { string_value: \"20000\" } } ]\n"));
  hark_server *s = server_start_with((hark_server_options){
      .model_control = HARK_MODEL_CONTROL_NONE, .worker_threads = 2, .inline_max_us = 200000});
  hark_model *m = model_get(s, "one");
  collector c;
  collector_init(&c);
  ctx x[64];
  for (int i = 0; i < 20; i++) { /* warm-up, timed on the workers */
    send_identity(s, m, &c, &x[i], i, (req_opts){0});
    collector_wait(&c, i + 1);
  }
  /* The check holds only when the second request did wait for the
   * instance (its sender can be slower than the 20 ms run on a loaded
   * host): tried until it did, a few times at most. */
  int n = 20, checked = 0;
  for (int attempt = 0; attempt < 8 && !checked; attempt++) {
    wait_quiet(m);
    behind b = {.s = s, .m = m, .c = &c, .x = &x[n + 1], .tag = n + 1};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, send_behind, &b), 0);
    hark_server_thread_may_inline(true);
    send_identity(s, m, &c, &x[n], n, (req_opts){0});
    hark_server_thread_may_inline(false);
    pthread_join(t, NULL);
    collector_wait(&c, n + 2);
    assert_true(pthread_equal(final_of(&c, n)->thread, pthread_self()));
    if (b.queued) {
      assert_true(pthread_equal(final_of(&c, n + 1)->thread, pthread_self()));
      checked++;
    }
    n += 2;
  }
  assert_int_equal(checked, 1);
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

static void test_max_queue_size_and_stop_flush(void **state) {
  (void)state;
  repo_make("sched");
  model_write("bounded", IDENTITY("max_batch_size: 8\n"
                                  "dynamic_batching { max_queue_delay_microseconds: 10000000 "
                                  "default_queue_policy { max_queue_size: 3 } }\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "bounded");
  collector c;
  collector_init(&c);
  ctx x[4] = {{&c, 0}, {&c, 1}, {&c, 2}, {&c, 3}};
  for (int i = 0; i < 3; i++) send_identity(s, m, &c, &x[i], i, (req_opts){0});
  hark_request *req = request_make(m, INPUT0, 1, HARK_TYPE_FP32, 3, (req_opts){0}, &x[3]);
  hark_error *err = hark_server_infer(s, req);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_UNAVAILABLE);
  assert_string_equal(hark_error_message(err), "Exceeds maximum queue size");
  hark_error_free(err);
  hark_request_free(req);
  assert_int_equal(c.n, 0); /* still waiting for the 10 s delay */
  hark_model_release(m);
  /* Unloading lets the queued requests run instead of waiting the delay. */
  hark_server_free(s);
  assert_int_equal(c.n, 3);
  for (int i = 0; i < 3; i++) assert_int_equal(c.got[i].code, HARK_OK);
  repo_remove();
}

static void test_reject_timeout(void **state) {
  (void)state;
  repo_make("sched");
  model_write("timeout", IDENTITY("max_batch_size: 8\n"
                                  "dynamic_batching { max_queue_delay_microseconds: 10000000 "
                                  "default_queue_policy { timeout_action: REJECT "
                                  "default_timeout_microseconds: 50000 "
                                  "allow_timeout_override: true } }\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "timeout");
  collector c;
  collector_init(&c);
  ctx x[2];
  uint64_t t0 = hark_now_ns();
  send_identity(s, m, &c, &x[0], 0, (req_opts){0});
  send_identity(s, m, &c, &x[1], 1, (req_opts){.timeout_us = 10000});
  collector_wait(&c, 2);
  assert_true(hark_now_ns() - t0 >= 50000000ull);
  /* The request's own, shorter timeout fires first. */
  assert_int_equal(c.got[0].tag, 1);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(c.got[i].code, HARK_ERR_DEADLINE);
    assert_string_equal(c.got[i].msg, "Request timeout expired");
  }
  hark_model_stats st;
  hark_model_stats_read(m, &st);
  assert_int_equal(st.execution_count, 0);
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

#define SLOW "parameters { key: \"execute_delay_us\" value: { string_value: \"300000\" } }\n"

static void test_delay_timeout(void **state) {
  (void)state;
  repo_make("sched");
  model_write("delay", IDENTITY("max_batch_size: 1\n" SLOW
                                "dynamic_batching { default_queue_policy { timeout_action: DELAY "
                                "allow_timeout_override: true } }\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "delay");
  collector c;
  collector_init(&c);
  ctx x[3];
  send_identity(s, m, &c, &x[0], 0, (req_opts){0});                  /* runs at once */
  send_identity(s, m, &c, &x[1], 1, (req_opts){.timeout_us = 1000}); /* expires: delayed */
  send_identity(s, m, &c, &x[2], 2, (req_opts){0});
  collector_wait(&c, 3);
  /* Delayed requests still run (no error), after the others. */
  int want[3] = {0, 2, 1};
  for (int i = 0; i < 3; i++) {
    assert_int_equal(c.got[i].tag, want[i]);
    assert_int_equal(c.got[i].code, HARK_OK);
  }
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

static void test_priority_levels(void **state) {
  (void)state;
  repo_make("sched");
  model_write("prio", IDENTITY("max_batch_size: 1\n" SLOW "dynamic_batching { priority_levels: 2 "
                               "default_priority_level: 2 }\n"));
  model_write("noprio", IDENTITY("max_batch_size: 1\ndynamic_batching { }\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "prio");
  collector c;
  collector_init(&c);
  ctx x[4];
  send_identity(s, m, &c, &x[0], 0, (req_opts){0}); /* occupies the instance */
  send_identity(s, m, &c, &x[1], 1, (req_opts){0}); /* default: level 2 */
  send_identity(s, m, &c, &x[2], 2, (req_opts){.priority = 2});
  send_identity(s, m, &c, &x[3], 3, (req_opts){.priority = 1});
  collector_wait(&c, 4);
  int want[4] = {0, 3, 1, 2};
  for (int i = 0; i < 4; i++) assert_int_equal(c.got[i].tag, want[i]);

  /* A priority above the levels is refused, and the caller keeps the
   * request. */
  ctx bad_ctx = {&c, 9};
  hark_request *bad =
      request_make(m, INPUT0, 1, HARK_TYPE_FP32, 9, (req_opts){.priority = 3}, &bad_ctx);
  hark_error *err = hark_server_infer(s, bad);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  hark_error_free(err);
  hark_request_free(bad);
  hark_model_release(m);

  /* Without priority levels, priorities are ignored. */
  m = model_get(s, "noprio");
  ctx any = {&c, 10};
  send_identity(s, m, &c, &any, 10, (req_opts){.priority = 7});
  collector_wait(&c, 5);
  assert_int_equal(final_of(&c, 10)->code, HARK_OK);
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

static void test_preserve_ordering(void **state) {
  (void)state;
  repo_make("sched");
  model_write("ordered", IDENTITY("max_batch_size: 2\n"
                                  "instance_group [ { count: 4 kind: KIND_CPU } ]\n"
                                  "parameters { key: \"execute_delay_us\" value: "
                                  "{ string_value: \"3000\" } }\n"
                                  "dynamic_batching { preserve_ordering: true }\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "ordered");
  collector c;
  collector_init(&c);
  static ctx x[128];
  for (int i = 0; i < 128; i++) send_identity(s, m, &c, &x[i], i, (req_opts){0});
  collector_wait(&c, 128);
  for (int i = 0; i < 128; i++) {
    assert_int_equal(c.got[i].tag, i);
    assert_int_equal(c.got[i].code, HARK_OK);
  }
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

/* ---- ensembles ---------------------------------------------------------------------- */

#define SIMPLE                                                            \
  "backend: \"simple\"\nmax_batch_size: 8\n"                              \
  "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 16 ] },\n"    \
  "        { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n"   \
  "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] },\n"  \
  "         { name: \"OUTPUT1\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n" \
  "dynamic_batching { }\n"

#define ENSEMBLE_IO                                                      \
  "platform: \"ensemble\"\nmax_batch_size: 8\n"                          \
  "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 16 ] },\n"   \
  "        { name: \"INPUT1\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n"  \
  "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] },\n" \
  "         { name: \"OUTPUT1\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n"

static void test_ensemble(void **state) {
  (void)state;
  repo_make("sched");
  model_write("simple", SIMPLE);
  /* (a+b, a-b) → added and subtracted again: 2a and 2b. */
  model_write("twice", ENSEMBLE_IO
              "ensemble_scheduling { step [\n"
              " { model_name: \"simple\" model_version: -1\n"
              "   input_map { key: \"INPUT0\" value: \"SUM\" }\n"
              "   input_map { key: \"INPUT1\" value: \"DIFF\" }\n"
              "   output_map { key: \"OUTPUT0\" value: \"OUTPUT0\" }\n"
              "   output_map { key: \"OUTPUT1\" value: \"OUTPUT1\" } },\n"
              " { model_name: \"simple\" model_version: -1\n"
              "   input_map { key: \"INPUT0\" value: \"INPUT0\" }\n"
              "   input_map { key: \"INPUT1\" value: \"INPUT1\" }\n"
              "   output_map { key: \"OUTPUT0\" value: \"SUM\" }\n"
              "   output_map { key: \"OUTPUT1\" value: \"DIFF\" } } ] }\n");
  hark_server *s = server_start();
  hark_model *m = model_get(s, "twice");
  collector c;
  collector_init(&c);
  static ctx x[40];
  for (int i = 0; i < 40; i++) {
    x[i] = (ctx){&c, i};
    hark_request *req = request_make(m, INPUT01, 2, HARK_TYPE_INT32, i, (req_opts){0}, &x[i]);
    hark_error *err = hark_server_infer(s, req);
    if (err) fail_msg("ensemble request refused: %s", hark_error_message(err));
  }
  collector_wait(&c, 40);
  for (int i = 0; i < 40; i++) {
    const final *f = final_of(&c, i);
    if (f->code != HARK_OK) fail_msg("request %d: %s", i, f->msg);
    assert_int_equal(f->n_out, 2);
    for (int k = 0; k < 16; k++) {
      assert_int_equal(f->out[0][k], 2 * (i * 100 + k));
      assert_int_equal(f->out[1][k], 2 * (i * 100 + k + 1000));
    }
  }
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

static void test_ensemble_step_failure(void **state) {
  (void)state;
  repo_make("sched");
  model_write("simple", SIMPLE);
  model_write("any",
              "backend: \"identity\"\nmax_batch_size: 8\n"
              "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
              "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n");
  /* any(IN) → T; simple(T, T): only 16-element tensors get through step 2. */
  model_write("picky",
              "platform: \"ensemble\"\nmax_batch_size: 8\n"
              "input [ { name: \"IN\" data_type: TYPE_INT32 dims: [ -1 ] } ]\n"
              "output [ { name: \"OUT0\" data_type: TYPE_INT32 dims: [ 16 ] },\n"
              "         { name: \"OUT1\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n"
              "ensemble_scheduling { step [\n"
              " { model_name: \"any\" model_version: -1\n"
              "   input_map { key: \"INPUT0\" value: \"IN\" }\n"
              "   output_map { key: \"OUTPUT0\" value: \"T\" } },\n"
              " { model_name: \"simple\" model_version: -1\n"
              "   input_map { key: \"INPUT0\" value: \"T\" }\n"
              "   input_map { key: \"INPUT1\" value: \"T\" }\n"
              "   output_map { key: \"OUTPUT0\" value: \"OUT0\" }\n"
              "   output_map { key: \"OUTPUT1\" value: \"OUT1\" } } ] }\n");
  hark_server *s = server_start();
  hark_model *m = model_get(s, "picky");
  collector c;
  collector_init(&c);
  static const char *const IN[] = {"IN"};
  ctx x[2] = {{&c, 0}, {&c, 1}};
  hark_request *ok = request_make(m, IN, 1, HARK_TYPE_INT32, 0, (req_opts){.elems = 16}, &x[0]);
  hark_request *bad = request_make(m, IN, 1, HARK_TYPE_INT32, 1, (req_opts){.elems = 8}, &x[1]);
  assert_null(hark_server_infer(s, ok));
  assert_null(hark_server_infer(s, bad));
  collector_wait(&c, 2);
  const final *f = final_of(&c, 0);
  assert_int_equal(f->code, HARK_OK);
  for (int k = 0; k < 16; k++) {
    assert_int_equal(f->out[0][k], 2 * k);
    assert_int_equal(f->out[1][k], 0);
  }
  f = final_of(&c, 1);
  assert_int_equal(f->code, HARK_ERR_INVALID_ARG); /* step 2 refused the shape */
  assert_non_null(strstr(f->msg, "simple"));
  hark_model_release(m);
  hark_server_free(s);
  assert_int_equal(c.n, 2); /* exactly one final each */
  repo_remove();
}

static const char *reason_of(hark_server *s, const char *name, char *buf, size_t cap) {
  hark_index_entry *e;
  size_t n;
  assert_null(hark_server_repository_index(s, false, &e, &n));
  buf[0] = 0;
  for (size_t i = 0; i < n; i++)
    if (strcmp(e[i].name, name) == 0) snprintf(buf, cap, "%s", e[i].reason);
  hark_index_free(e, n);
  return buf;
}

static void test_ensemble_bad_configs(void **state) {
  (void)state;
  repo_make("sched");
  model_write("simple", SIMPLE);
  model_write("missing_step", ENSEMBLE_IO
              "ensemble_scheduling { step [ { model_name: \"nope\" model_version: -1\n"
              " input_map { key: \"INPUT0\" value: \"INPUT0\" }\n"
              " output_map { key: \"OUTPUT0\" value: \"OUTPUT0\" } } ] }\n");
  model_write("unknown_tensor", ENSEMBLE_IO
              "ensemble_scheduling { step [ { model_name: \"simple\" model_version: -1\n"
              " input_map { key: \"INPUT0\" value: \"INPUT0\" }\n"
              " input_map { key: \"INPUT1\" value: \"NOWHERE\" }\n"
              " output_map { key: \"OUTPUT0\" value: \"OUTPUT0\" }\n"
              " output_map { key: \"OUTPUT1\" value: \"OUTPUT1\" } } ] }\n");
  model_write("cycle", ENSEMBLE_IO
              "ensemble_scheduling { step [\n"
              " { model_name: \"simple\" model_version: -1\n"
              "   input_map { key: \"INPUT0\" value: \"INPUT0\" }\n"
              "   input_map { key: \"INPUT1\" value: \"B\" }\n"
              "   output_map { key: \"OUTPUT0\" value: \"A\" }\n"
              "   output_map { key: \"OUTPUT1\" value: \"OUTPUT1\" } },\n"
              " { model_name: \"simple\" model_version: -1\n"
              "   input_map { key: \"INPUT0\" value: \"A\" }\n"
              "   input_map { key: \"INPUT1\" value: \"INPUT1\" }\n"
              "   output_map { key: \"OUTPUT0\" value: \"OUTPUT0\" }\n"
              "   output_map { key: \"OUTPUT1\" value: \"B\" } } ] }\n");
  hark_server *s = server_start();
  char buf[512];
  const char *names[] = {"missing_step", "unknown_tensor", "cycle"};
  const char *expect[] = {"nope", "NOWHERE", "cycle"};
  for (int i = 0; i < 3; i++) {
    hark_model *m = NULL;
    hark_error *err = hark_server_model_acquire(s, names[i], -1, &m);
    assert_non_null(err);
    hark_error_free(err);
    reason_of(s, names[i], buf, sizeof buf);
    if (!strstr(buf, expect[i])) fail_msg("%s: reason '%s' lacks '%s'", names[i], buf, expect[i]);
  }
  hark_server_free(s);
  repo_remove();
}

/* Loading and unloading in EXPLICIT mode; `done` signals a collector. */
typedef struct op_wait {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  hark_code code;
} op_wait;

static void op_done(hark_error *err, void *userp) {
  op_wait *w = userp;
  pthread_mutex_lock(&w->lock);
  w->done = true;
  w->code = err ? hark_error_code(err) : HARK_OK;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
  hark_error_free(err);
}

static void repo_op(hark_server *s, const char *name, bool load) {
  op_wait w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, HARK_OK};
  hark_error *err = load ? hark_server_model_load(s, name, op_done, &w)
                         : hark_server_model_unload(s, name, op_done, &w);
  if (err) fail_msg("%s '%s': %s", load ? "load" : "unload", name, hark_error_message(err));
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  pthread_mutex_lock(&w.lock);
  while (!w.done)
    if (pthread_cond_timedwait(&w.cond, &w.lock, &until) == ETIMEDOUT) break;
  bool done = w.done;
  pthread_mutex_unlock(&w.lock);
  if (!done) fail_msg("%s '%s' did not finish", load ? "load" : "unload", name);
  assert_int_equal(w.code, HARK_OK);
}

static void infer_twice(hark_server *s, hark_model *m, collector *c, ctx *x, int tag) {
  *x = (ctx){c, tag};
  hark_request *req = request_make(m, INPUT01, 2, HARK_TYPE_INT32, tag, (req_opts){0}, x);
  hark_error *err = hark_server_infer(s, req);
  if (err) fail_msg("ensemble request refused: %s", hark_error_message(err));
}

static void test_ensemble_step_reload(void **state) {
  (void)state;
  repo_make("sched");
  model_write("simple", SIMPLE);
  model_write("pair", ENSEMBLE_IO
              "ensemble_scheduling { step [ { model_name: \"simple\" model_version: -1\n"
              " input_map { key: \"INPUT0\" value: \"INPUT0\" }\n"
              " input_map { key: \"INPUT1\" value: \"INPUT1\" }\n"
              " output_map { key: \"OUTPUT0\" value: \"OUTPUT0\" }\n"
              " output_map { key: \"OUTPUT1\" value: \"OUTPUT1\" } } ] }\n");
  const char *loads[] = {"simple", "pair"};
  hark_server *s =
      server_start_with((hark_server_options){.model_control = HARK_MODEL_CONTROL_EXPLICIT,
                                              .load_models = loads,
                                              .n_load_models = 2,
                                              .worker_threads = 2});
  hark_model *m = model_get(s, "pair");
  collector c;
  collector_init(&c);
  ctx x[3];
  infer_twice(s, m, &c, &x[0], 0);
  collector_wait(&c, 1);
  assert_int_equal(c.got[0].code, HARK_OK);

  /* The ensemble holds no reference on its steps: a step model can be
   * reloaded and unloaded under it. */
  repo_op(s, "simple", true);
  infer_twice(s, m, &c, &x[1], 1);
  collector_wait(&c, 2);
  assert_int_equal(final_of(&c, 1)->code, HARK_OK);
  repo_op(s, "simple", false);
  /* Accepted, then failed at the step: one final, an error. */
  infer_twice(s, m, &c, &x[2], 2);
  collector_wait(&c, 3);
  assert_int_not_equal(final_of(&c, 2)->code, HARK_OK);
  assert_non_null(strstr(final_of(&c, 2)->msg, "simple"));
  hark_model_release(m);
  hark_server_free(s);
  repo_remove();
}

/* ---- many producers --------------------------------------------------------------- */

typedef struct producer {
  hark_server *s;
  hark_model *m;
  collector *c;
  ctx x[50];
  int base, accepted;
} producer;

static void *produce(void *arg) {
  producer *p = arg;
  for (int i = 0; i < 50; i++) {
    p->x[i] = (ctx){p->c, p->base + i};
    req_opts o = {.batch = 1 + (uint32_t)(i % 3)};
    hark_request *req = request_make(p->m, INPUT0, 1, HARK_TYPE_FP32, p->base + i, o, &p->x[i]);
    hark_error *err = hark_server_infer(p->s, req);
    if (err) {
      hark_error_free(err);
      hark_request_free(req);
    } else {
      p->accepted++;
    }
  }
  return NULL;
}

static void test_many_threads_no_loss(void **state) {
  (void)state;
  repo_make("sched");
  model_write("busy", IDENTITY("max_batch_size: 8\n"
                               "instance_group [ { count: 3 kind: KIND_CPU } ]\n"
                               "parameters { key: \"execute_delay_us\" value: "
                               "{ string_value: \"200\" } }\n"
                               "dynamic_batching { preferred_batch_size: [ 4, 8 ] "
                               "max_queue_delay_microseconds: 500 }\n"));
  hark_server *s = server_start();
  hark_model *m = model_get(s, "busy");
  static collector c;
  collector_init(&c);
  static producer p[4];
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    p[i] = (producer){.s = s, .m = m, .c = &c, .base = i * 50};
    assert_int_equal(pthread_create(&t[i], NULL, produce, &p[i]), 0);
  }
  int accepted = 0;
  for (int i = 0; i < 4; i++) {
    pthread_join(t[i], NULL);
    accepted += p[i].accepted;
  }
  assert_int_equal(accepted, 200); /* the default queue bound is far away */
  collector_wait(&c, 200);
  for (int i = 0; i < 200; i++) assert_int_equal(c.got[i].code, HARK_OK);
  hark_model_stats st;
  hark_model_stats_read(m, &st);
  assert_int_equal(st.inference_count, 4 * (17 * 1 + 17 * 2 + 16 * 3));
  hark_model_release(m);
  hark_server_free(s);
  assert_int_equal(c.n, 200);
  repo_remove();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_preferred_batch),
      cmocka_unit_test(test_default_scheduler_one_per_execution),
      cmocka_unit_test(test_inline_runs),
      cmocka_unit_test(test_inline_chain),
      cmocka_unit_test(test_max_queue_size_and_stop_flush),
      cmocka_unit_test(test_reject_timeout),
      cmocka_unit_test(test_delay_timeout),
      cmocka_unit_test(test_priority_levels),
      cmocka_unit_test(test_preserve_ordering),
      cmocka_unit_test(test_many_threads_no_loss),
      cmocka_unit_test(test_ensemble),
      cmocka_unit_test(test_ensemble_step_failure),
      cmocka_unit_test(test_ensemble_bad_configs),
      cmocka_unit_test(test_ensemble_step_reload),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
