/*
 * fake_run.h — a scheduler without a server: a bare model (its config and
 * statistics only), a real worker pool, and a fake run function in the
 * descriptor that records every batch it is handed, can hold batches until
 * the test releases them, and answers each request with an empty FINAL;
 * its sequence_fini records (and frees) the states it is handed.
 * For test_dynamic.c and test_sequence.c. Include after <cmocka.h>.
 *
 * Requests are tagged by their id ("7"), so a batch reads as a list of
 * small integers. Waits are on conditions with generous limits. Helpers
 * are static inline: each test file uses what it needs.
 */
#ifndef HARK_FAKE_RUN_H
#define HARK_FAKE_RUN_H

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "sched/sched.h"

#define FAKE_MAX 256
#define FAKE_INSTANCES 4
#define MS 1000000ull

typedef struct fake_batch {
  uint32_t instance, n;
  int tags[16];
  uint64_t corr[16]; /* the requests' correlation ids */
  int state[16];     /* the value of the sequence state the run saw (0: none) */
  uint64_t at_ns;
  pthread_t thread;
} fake_batch;

typedef struct fake_final {
  int tag;
  hark_code code;
  char msg[200];
  uint64_t at_ns;
} fake_final;

typedef struct fake fake;

/* Called inside the run for each request, before its FINAL is sent. */
typedef void (*fake_hook)(fake *f, hark_request *req, int tag);

struct fake {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  hark_pool *pool;
  hark_model *model;
  hark_sched *sched;
  /* what the run saw */
  fake_batch batches[FAKE_MAX];
  int n_batches;
  int running[FAKE_INSTANCES];  /* batches inside the run, per instance */
  int runs_done;                /* runs that returned */
  int overlaps;                 /* a batch started on an instance already running one */
  int seq_overlaps;             /* a sequence had two requests in flight at once */
  uint64_t in_flight[FAKE_MAX]; /* correlation ids whose request is in a run */
  int n_in_flight;
  /* control */
  int hold_tag;  /* a batch holding this tag waits for fake_release; -1: none */
  bool hold_all; /* every batch waits for fake_release */
  int held;      /* batches waiting now */
  fake_hook hook;
  /* what the front end saw */
  fake_final finals[FAKE_MAX];
  int n_finals;
  /* what sequence_fini got (the states' values), and whether a run was on
   * that thread then */
  int finied[FAKE_MAX];
  uint64_t finied_at[FAKE_MAX];
  int n_finied;
  int fini_inside_run;
};

typedef struct fake_req {
  fake *f;
  int tag;
} fake_req;

static _Thread_local bool fake_in_run;

static inline void fake_add_in_flight(fake *f, uint64_t corr) {
  for (int i = 0; i < f->n_in_flight; i++)
    if (f->in_flight[i] == corr) f->seq_overlaps++;
  if (f->n_in_flight < FAKE_MAX) f->in_flight[f->n_in_flight++] = corr;
}

static inline void fake_drop_in_flight(fake *f, uint64_t corr) {
  for (int i = 0; i < f->n_in_flight; i++)
    if (f->in_flight[i] == corr) {
      f->in_flight[i] = f->in_flight[--f->n_in_flight];
      return;
    }
}

static inline bool fake_holds(const fake *f, const fake_batch *b) {
  if (f->hold_all) return true;
  for (uint32_t i = 0; f->hold_tag >= 0 && i < b->n && i < 16; i++)
    if (b->tags[i] == f->hold_tag) return true;
  return false;
}

static inline void fake_run(void *ctx, uint32_t instance, hark_request **reqs, uint32_t n) {
  fake *f = ctx;
  pthread_mutex_lock(&f->lock);
  if (f->n_batches >= FAKE_MAX) abort(); /* a worker thread: no cmocka asserts */
  fake_batch *b = &f->batches[f->n_batches++];
  *b = (fake_batch){.instance = instance, .n = n, .at_ns = hark_now_ns(), .thread = pthread_self()};
  for (uint32_t i = 0; i < n && i < 16; i++) {
    b->tags[i] = atoi(hark_request_id(reqs[i]));
    b->corr[i] = hark_request_correlation_id(reqs[i]);
    const int *st = hark_request_sequence_state(reqs[i]);
    b->state[i] = st ? *st : 0;
    if (b->corr[i]) fake_add_in_flight(f, b->corr[i]);
  }
  if (f->running[instance % FAKE_INSTANCES]++) f->overlaps++;
  pthread_cond_broadcast(&f->cond);
  if (fake_holds(f, b)) {
    f->held++;
    pthread_cond_broadcast(&f->cond);
    while (fake_holds(f, b)) pthread_cond_wait(&f->cond, &f->lock);
    f->held--;
  }
  pthread_mutex_unlock(&f->lock);

  fake_in_run = true;
  for (uint32_t i = 0; i < n; i++) {
    int tag = atoi(hark_request_id(reqs[i]));
    if (f->hook) f->hook(f, reqs[i], tag);
  }
  /* In flight until the run returns: the sequence batcher sends a
   * sequence's next request only after both its FINAL and the return. */
  for (uint32_t i = 0; i < n; i++)
    hark_response_send(hark_response_new(reqs[i]), HARK_RESPONSE_FINAL, NULL);
  fake_in_run = false;

  pthread_mutex_lock(&f->lock);
  for (uint32_t i = 0; i < n && i < 16; i++)
    if (b->corr[i]) fake_drop_in_flight(f, b->corr[i]);
  f->running[instance % FAKE_INSTANCES]--;
  f->runs_done++;
  pthread_cond_broadcast(&f->cond);
  pthread_mutex_unlock(&f->lock);
}

static inline void fake_sequence_fini(void *ctx, void *state) {
  fake *f = ctx;
  pthread_mutex_lock(&f->lock);
  if (fake_in_run) f->fini_inside_run++;
  if (f->n_finied < FAKE_MAX) {
    f->finied_at[f->n_finied] = hark_now_ns();
    f->finied[f->n_finied++] = *(int *)state;
  }
  pthread_cond_broadcast(&f->cond);
  pthread_mutex_unlock(&f->lock);
  free(state);
}

/* A scheduler for `config` (a config.pbtxt body, model name "fake") with
 * `instances` instances and `threads` workers. On the heap, so that a
 * failed test, which leaves it behind with batches held, does not share
 * its memory with the next test. */
static inline fake *fake_start(const char *config, uint32_t instances, uint32_t threads) {
  fake *f = calloc(1, sizeof *f);
  assert_non_null(f);
  pthread_mutex_init(&f->lock, NULL);
  pthread_cond_init(&f->cond, NULL);
  f->hold_tag = -1;
  char text[2048];
  snprintf(text, sizeof text, "name: \"fake\"\nbackend: \"fake\"\n%s", config);
  hark_model_config *cfg = NULL;
  hark_error *err = hark_model_config_parse(text, strlen(text), "config.pbtxt", "fake", &cfg);
  if (err) fail_msg("config: %s", hark_error_message(err));
  assert_null(hark_model_create_bare(cfg, 1, &f->model));
  assert_int_equal(hark_pool_new(threads, 64, &f->pool), 0);
  const hark_sched_desc desc = {
      .config = hark_model_get_config(f->model),
      .name = "fake",
      .version = 1,
      .n_instances = instances,
      .pool = f->pool,
      .default_max_queue = 64,
      .ctx = f,
      .run = fake_run,
      .sequence_fini = fake_sequence_fini,
  };
  err = hark_sched_new(&desc, &f->sched);
  if (err) fail_msg("scheduler: %s", hark_error_message(err));
  return f;
}

/* Frees the scheduler (which stops it first), the model, the pool and f. */
static inline void fake_stop(fake *f) {
  hark_sched_free(f->sched);
  hark_model_destroy(f->model); /* waits for every request to be freed */
  hark_pool_free(f->pool);
  pthread_mutex_destroy(&f->lock);
  pthread_cond_destroy(&f->cond);
  free(f);
}

static inline void fake_on_final(hark_response *resp, uint32_t flags, hark_error *err,
                                 void *userp) {
  fake_req *r = userp;
  fake *f = r->f;
  if (!(flags & HARK_RESPONSE_FINAL)) fail_msg("only finals expected");
  pthread_mutex_lock(&f->lock);
  fake_final *x = &f->finals[f->n_finals++ % FAKE_MAX];
  x->tag = r->tag;
  x->code = err ? hark_error_code(err) : HARK_OK;
  snprintf(x->msg, sizeof x->msg, "%s", err ? hark_error_message(err) : "");
  x->at_ns = hark_now_ns();
  pthread_cond_broadcast(&f->cond);
  pthread_mutex_unlock(&f->lock);
  hark_response_free(resp);
  hark_error_free(err);
  free(r);
}

/* A request tagged `tag`; correlation id `corr` (0: none) with `flags`. */
static inline hark_request *fake_request(fake *f, int tag, uint64_t corr, uint32_t flags) {
  hark_request *req = hark_request_new(f->model);
  char id[16];
  snprintf(id, sizeof id, "%d", tag);
  hark_request_set_id(req, id);
  if (corr) hark_request_set_correlation_id(req, corr);
  hark_request_set_flags(req, flags);
  fake_req *r = malloc(sizeof *r);
  assert_non_null(r);
  *r = (fake_req){f, tag};
  hark_request_set_callback(req, fake_on_final, r);
  return req;
}

/* Enqueues; returns the refusal (the request is freed then) or NULL. */
static inline hark_error *fake_try(fake *f, int tag, uint64_t corr, uint32_t flags) {
  hark_request *req = fake_request(f, tag, corr, flags);
  hark_error *err = hark_sched_enqueue(f->sched, req);
  if (err) {
    fake_req *r = NULL;
    hark_response_fn fn;
    hark_request_get_callback(req, &fn, (void **)&r);
    free(r);
    hark_request_free(req);
  }
  return err;
}

static inline void fake_send(fake *f, int tag, uint64_t corr, uint32_t flags) {
  hark_error *err = fake_try(f, tag, corr, flags);
  if (err) fail_msg("request %d refused: %s", tag, hark_error_message(err));
}

static inline bool fake_wait_locked(fake *f, const int *what, int want) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 30;
  while (*what < want)
    if (pthread_cond_timedwait(&f->cond, &f->lock, &until) == ETIMEDOUT) break;
  return *what >= want;
}

/* Waits (up to 30 s) until *what (a counter in f) reaches `want`. */
static inline void fake_wait(fake *f, const int *what, int want) {
  pthread_mutex_lock(&f->lock);
  bool ok = fake_wait_locked(f, what, want);
  int got = *what;
  pthread_mutex_unlock(&f->lock);
  if (!ok) fail_msg("waited 30 s for %d, have %d", want, got);
}

static inline int fake_count(fake *f, const int *what) {
  pthread_mutex_lock(&f->lock);
  int n = *what;
  pthread_mutex_unlock(&f->lock);
  return n;
}

/* Waits (up to 30 s) until no instance is executing: a worker that sent a
 * FINAL may still be returning from its execution. */
static inline void fake_wait_quiet(fake *f) {
  for (int i = 0; i < 30000 && hark_sched_busy(f->sched); i++) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  if (hark_sched_busy(f->sched)) fail_msg("an instance stayed busy for 30 s");
}

/* Lets held batches go (and stops holding new ones). */
static inline void fake_release(fake *f) {
  pthread_mutex_lock(&f->lock);
  f->hold_all = false;
  f->hold_tag = -1;
  pthread_cond_broadcast(&f->cond);
  pthread_mutex_unlock(&f->lock);
}

static inline const fake_final *fake_final_of(fake *f, int tag) {
  for (int i = 0; i < f->n_finals; i++)
    if (f->finals[i].tag == tag) return &f->finals[i];
  fail_msg("no final for request %d", tag);
  return NULL;
}

/* A sequence state for the run to set: a heap int (ASan reports it if no
 * sequence_fini frees it). */
static inline void fake_set_state(hark_request *req, int value) {
  int *st = malloc(sizeof *st);
  assert_non_null(st);
  *st = value;
  hark_request_set_sequence_state(req, st);
}

static inline void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

#endif
