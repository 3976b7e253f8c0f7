/*
 * test_pool.c — the worker pool and its timer (src/runtime/pool.c). Waits are
 * on conditions with generous limits, never on a sleep that a slow machine
 * could outlast; only "must not happen" checks use short sleeps.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "hark/types.h"
#include "runtime/pool.h"

#define MS 1000000ull

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Polls `flag` until it reaches `want` or 20 s pass. */
static bool wait_for(atomic_int *flag, int want) {
  for (int i = 0; i < 20000; i++) {
    if (atomic_load(flag) >= want) return true;
    sleep_ms(1);
  }
  return false;
}

static void count_task(void *arg) { atomic_fetch_add((atomic_int *)arg, 1); }

static void test_bad_args(void **state) {
  (void)state;
  hark_pool *pool = (hark_pool *)1;
  assert_int_equal(hark_pool_new(0, 8, &pool), EINVAL);
  assert_null(pool);
  hark_pool_free(NULL);
}

static void test_all_tasks_run(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(4, 2000, &pool));
  assert_int_equal(hark_pool_threads(pool), 4);
  atomic_int count = 0;
  int accepted = 0;
  for (int i = 0; i < 1000; i++) {
    if (hark_pool_submit(pool, count_task, &count) == 0) accepted++;
  }
  assert_int_equal(accepted, 1000); /* the queue holds 2000 */
  assert_true(wait_for(&count, 1000));
  hark_pool_free(pool);
  assert_int_equal(atomic_load(&count), 1000);
}

/* A task that blocks until the test opens its gate. */
typedef struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool open;
  atomic_int entered, left;
} gate;

static void gate_task(void *arg) {
  gate *g = arg;
  atomic_fetch_add(&g->entered, 1);
  pthread_mutex_lock(&g->lock);
  while (!g->open) pthread_cond_wait(&g->cond, &g->lock);
  pthread_mutex_unlock(&g->lock);
  atomic_fetch_add(&g->left, 1);
}

static void gate_open(gate *g) {
  pthread_mutex_lock(&g->lock);
  g->open = true;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

static void test_bounded_queue(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(1, 2, &pool));
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0};
  assert_int_equal(0, hark_pool_submit(pool, gate_task, &g));
  assert_true(wait_for(&g.entered, 1)); /* the worker is busy; the queue is empty */
  assert_int_equal(0, hark_pool_submit(pool, gate_task, &g));
  assert_int_equal(0, hark_pool_submit(pool, gate_task, &g));
  atomic_int never = 0;
  assert_int_equal(hark_pool_submit(pool, count_task, &never), EAGAIN);

  /* Embedded tasks do not count against the bound. */
  atomic_int embedded = 0;
  hark_pool_task task = {.fn = count_task, .arg = &embedded};
  hark_pool_submit_task(pool, &task);

  gate_open(&g);
  hark_pool_free(pool);
  assert_int_equal(atomic_load(&g.left), 3);
  assert_int_equal(atomic_load(&embedded), 1);
  assert_int_equal(atomic_load(&never), 0);
}

static void slow_task(void *arg) {
  sleep_ms(2);
  atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_free_drains(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(2, 64, &pool));
  atomic_int count = 0;
  for (int i = 0; i < 40; i++) assert_int_equal(0, hark_pool_submit(pool, slow_task, &count));
  hark_pool_free(pool); /* at once: most tasks are still queued */
  assert_int_equal(atomic_load(&count), 40);
}

/* A task that, while the pool drains, tries to submit more. */
typedef struct resubmit {
  hark_pool *pool;
  gate *g;
  atomic_int refused, ran;
  hark_pool_task task;
} resubmit;

static void resubmit_task(void *arg) {
  resubmit *r = arg;
  gate_task(r->g);
  if (hark_pool_submit(r->pool, count_task, &r->ran) != 0) atomic_fetch_add(&r->refused, 1);
  /* The scheduler's path: an embedded task is still accepted and run. */
  hark_pool_submit_task(r->pool, &r->task);
}

static void *free_thread(void *arg) {
  hark_pool_free(arg);
  return NULL;
}

static void test_submit_while_stopping(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(1, 8, &pool));
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0};
  resubmit r = {.pool = pool, .g = &g};
  atomic_int embedded = 0;
  r.task = (hark_pool_task){.fn = count_task, .arg = &embedded};
  assert_int_equal(0, hark_pool_submit(pool, resubmit_task, &r));
  assert_true(wait_for(&g.entered, 1));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, free_thread, pool), 0);
  /* hark_pool_free refuses new tasks before it joins: wait until it does. */
  bool stopping = false;
  for (int i = 0; i < 20000 && !stopping; i++) {
    /* EAGAIN ("full") until free starts, then ESHUTDOWN ("stopping"). */
    stopping = hark_pool_submit(pool, count_task, &r.ran) == ESHUTDOWN;
    if (!stopping) sleep_ms(1);
  }
  assert_true(stopping);
  gate_open(&g);
  pthread_join(t, NULL);
  assert_int_equal(atomic_load(&r.refused), 1);
  assert_int_equal(atomic_load(&embedded), 1);
}

/* ---- timer ------------------------------------------------------------------ */

typedef struct fired {
  atomic_int count;
  atomic_uint_fast64_t at_ns;
  atomic_int order; /* set from a shared sequence */
  atomic_int *seq;
} fired;

static void fire(void *arg) {
  fired *f = arg;
  f->at_ns = hark_now_ns();
  if (f->seq) f->order = atomic_fetch_add(f->seq, 1);
  atomic_fetch_add(&f->count, 1);
}

static void test_timer_fires_after_deadline(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(1, 1, &pool));
  fired f = {0};
  hark_timer t;
  hark_timer_init(&t, fire, &f);
  uint64_t deadline = hark_now_ns() + 20 * MS;
  hark_pool_timer_arm(pool, &t, deadline);
  assert_true(wait_for(&f.count, 1));
  assert_true(f.at_ns >= deadline);
  sleep_ms(30);
  assert_int_equal(atomic_load(&f.count), 1); /* once */
  hark_pool_free(pool);
}

static void test_timer_order_and_rearm(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(1, 1, &pool));
  atomic_int seq = 0;
  fired a = {.seq = &seq}, b = {.seq = &seq}, c = {.seq = &seq};
  hark_timer ta, tb, tc;
  hark_timer_init(&ta, fire, &a);
  hark_timer_init(&tb, fire, &b);
  hark_timer_init(&tc, fire, &c);
  uint64_t now = hark_now_ns();
  hark_pool_timer_arm(pool, &ta, now + 40 * MS);
  hark_pool_timer_arm(pool, &tb, now + 20 * MS);
  /* c first far away, then moved earliest: re-arming moves it. */
  hark_pool_timer_arm(pool, &tc, now + 3600000 * MS);
  hark_pool_timer_arm(pool, &tc, now + 10 * MS);
  hark_pool_timer_arm(pool, &tc, now + 10 * MS); /* same deadline: no-op */
  assert_true(wait_for(&a.count, 1));
  assert_true(wait_for(&b.count, 1));
  assert_true(wait_for(&c.count, 1));
  assert_int_equal(c.order, 0);
  assert_int_equal(b.order, 1);
  assert_int_equal(a.order, 2);
  hark_pool_free(pool);
}

static void test_timer_disarm(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(1, 1, &pool));
  fired f = {0};
  hark_timer t;
  hark_timer_init(&t, fire, &f);
  hark_pool_timer_arm(pool, &t, hark_now_ns() + 10 * MS);
  hark_pool_timer_disarm(pool, &t);
  hark_pool_timer_disarm(pool, &t); /* twice is fine */
  sleep_ms(40);
  assert_int_equal(atomic_load(&f.count), 0);
  /* A timer in the past fires at once. */
  hark_pool_timer_arm(pool, &t, 1);
  assert_true(wait_for(&f.count, 1));
  hark_pool_free(pool); /* leaving one armed at free is harmless */
}

typedef struct slow_timer {
  atomic_int started, finished;
} slow_timer;

static void slow_fire(void *arg) {
  slow_timer *st = arg;
  atomic_store(&st->started, 1);
  sleep_ms(50);
  atomic_store(&st->finished, 1);
}

static void test_timer_cancel_waits(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(1, 1, &pool));
  slow_timer st = {0};
  hark_timer t;
  hark_timer_init(&t, slow_fire, &st);
  hark_pool_timer_arm(pool, &t, hark_now_ns());
  assert_true(wait_for(&st.started, 1));
  hark_pool_timer_cancel(pool, &t);
  assert_int_equal(atomic_load(&st.finished), 1);
  hark_pool_timer_cancel(pool, &t); /* idle: returns at once */
  hark_pool_free(pool);
}

typedef struct periodic {
  hark_pool *pool;
  hark_timer timer;
  atomic_int count;
} periodic;

static void periodic_fire(void *arg) {
  periodic *p = arg;
  /* Callbacks may arm timers: the timer lock is not held here. */
  if (atomic_fetch_add(&p->count, 1) + 1 < 3)
    hark_pool_timer_arm(p->pool, &p->timer, hark_now_ns() + 1 * MS);
}

static void test_timer_rearm_from_callback(void **state) {
  (void)state;
  periodic p = {0};
  assert_int_equal(0, hark_pool_new(1, 1, &p.pool));
  hark_timer_init(&p.timer, periodic_fire, &p);
  hark_pool_timer_arm(p.pool, &p.timer, hark_now_ns());
  assert_true(wait_for(&p.count, 3));
  hark_pool_timer_cancel(p.pool, &p.timer);
  sleep_ms(10);
  assert_int_equal(atomic_load(&p.count), 3);
  hark_pool_free(p.pool);
}

/* A chain of tasks, each handing over the next from inside a worker. */
typedef struct chain {
  hark_pool *pool;
  hark_pool_task tasks[4];
  pthread_t ran_on[4];
  atomic_int done;
  atomic_int step;
} chain;

static void chain_task(void *arg) {
  chain *c = arg;
  int i = atomic_fetch_add(&c->step, 1);
  c->ran_on[i] = pthread_self();
  if (i + 1 < 4) hark_pool_submit_task(c->pool, &c->tasks[i + 1]);
  atomic_fetch_add(&c->done, 1);
}

static void test_continuation_runs_on_the_same_worker(void **state) {
  (void)state;
  chain c = {0};
  assert_int_equal(0, hark_pool_new(3, 8, &c.pool));
  for (int i = 0; i < 4; i++) c.tasks[i] = (hark_pool_task){.fn = chain_task, .arg = &c};
  hark_pool_submit_task(c.pool, &c.tasks[0]); /* from outside: the FIFO */
  assert_true(wait_for(&c.done, 4));
  /* With the FIFO empty, each continuation stayed on the worker that
   * handed it over: no other worker was woken for it. */
  for (int i = 1; i < 4; i++) assert_true(pthread_equal(c.ran_on[i], c.ran_on[0]));
  hark_pool_free(c.pool);
}

typedef struct blocker {
  atomic_int release, started;
} blocker;

static void block_task(void *arg) {
  blocker *b = arg;
  atomic_fetch_add(&b->started, 1);
  while (!atomic_load(&b->release)) sleep_ms(1);
}

typedef struct handover {
  hark_pool *pool;
  hark_pool_task next, first;
  blocker *b;
  atomic_int queued, next_ran, next_ran_while_first_ran, first_done;
} handover;

static void next_task(void *arg) { atomic_fetch_add(&((handover *)arg)->next_ran, 1); }

static void first_task(void *arg) {
  handover *h = arg;
  wait_for(&h->queued, 1); /* the test queued `pending` behind both workers */
  hark_pool_submit_task(h->pool, &h->next);
  atomic_store(&h->b->release, 1); /* frees the other worker */
  /* Had `next` been kept for this worker, it could not run before this
   * task returns; queued, the other worker runs it now. */
  if (wait_for(&h->next_ran, 1)) atomic_store(&h->next_ran_while_first_ran, 1);
  atomic_store(&h->first_done, 1);
}

static void test_continuation_queues_when_work_waits(void **state) {
  (void)state;
  blocker b = {0};
  handover h = {.b = &b};
  atomic_int pending_ran = 0;
  assert_int_equal(0, hark_pool_new(2, 8, &h.pool));
  hark_pool_task blk = {.fn = block_task, .arg = &b};
  hark_pool_task pending = {.fn = count_task, .arg = &pending_ran};
  h.first = (hark_pool_task){.fn = first_task, .arg = &h};
  h.next = (hark_pool_task){.fn = next_task, .arg = &h};
  hark_pool_submit_task(h.pool, &blk);
  assert_true(wait_for(&b.started, 1));
  hark_pool_submit_task(h.pool, &h.first);
  hark_pool_submit_task(h.pool, &pending); /* both workers busy: FIFO */
  atomic_store(&h.queued, 1);
  assert_true(wait_for(&pending_ran, 1));
  assert_true(wait_for(&h.first_done, 1));
  assert_int_equal(atomic_load(&h.next_ran_while_first_ran), 1);
  hark_pool_free(h.pool);
}

/* Records the order tasks ran in. */
typedef struct order_log {
  atomic_int n;
  int ran[8];
} order_log;

typedef struct ordered_task {
  hark_pool_task task;
  order_log *log;
  int id;
} ordered_task;

static void ordered_run(void *arg) {
  ordered_task *t = arg;
  t->log->ran[atomic_fetch_add(&t->log->n, 1)] = t->id;
}

static void ordered_init(ordered_task *t, order_log *log, int id, uint64_t cost_ns) {
  *t = (ordered_task){.task = {.fn = ordered_run, .cost_ns = cost_ns}, .log = log, .id = id};
  t->task.arg = t;
}

/* One worker held at a gate; `ids` (with their costs) queue behind it in
 * that order, with `gap_ms` between the first and the rest; then the gate
 * opens and the order they ran in lands in `log`. */
static void run_behind_gate(uint64_t short_max_ns, const int *ids, const uint64_t *costs, int n,
                            unsigned gap_ms, order_log *log) {
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(1, 8, &pool));
  hark_pool_set_short_max_ns(pool, short_max_ns);
  gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0, 0};
  assert_int_equal(0, hark_pool_submit(pool, gate_task, &g));
  assert_true(wait_for(&g.entered, 1));
  ordered_task tasks[8];
  for (int i = 0; i < n; i++) {
    ordered_init(&tasks[i], log, ids[i], costs[i]);
    hark_pool_submit_task(pool, &tasks[i].task);
    if (i == 0 && gap_ms) sleep_ms(gap_ms);
  }
  gate_open(&g);
  assert_true(wait_for(&log->n, n));
  hark_pool_free(pool);
}

/* Batches expected to be short pass longer ones queued before them; tasks
 * of unknown cost (0) queue as long ones; each lane keeps its order. */
static void test_short_tasks_run_first(void **state) {
  (void)state;
  const int ids[] = {1, 2, 3, 4, 5};
  const uint64_t costs[] = {10000 * MS, 20000, 0, 30000, 2 * MS}; /* 1: 10 s, never aged here */
  order_log log = {0};
  run_behind_gate(1 * MS, ids, costs, 5, 0, &log);
  const int want[] = {2, 4, 1, 3, 5};
  for (int i = 0; i < 5; i++) assert_int_equal(log.ran[i], want[i]);

  /* A bound of 0: arrival order. */
  order_log fifo = {0};
  run_behind_gate(0, ids, costs, 5, 0, &fifo);
  for (int i = 0; i < 5; i++) assert_int_equal(fifo.ran[i], ids[i]);
}

/* A long task that has waited as long as it will run goes before the short
 * ones, so shorter work cannot starve it. */
static void test_long_task_waits_at_most_its_cost(void **state) {
  (void)state;
  const int ids[] = {1, 2, 3};
  const uint64_t costs[] = {2 * MS, 20000, 20000};
  order_log log = {0};
  run_behind_gate(1 * MS, ids, costs, 3, 20, &log); /* 1 waited 20 ms > its 2 ms */
  const int want[] = {1, 2, 3};
  for (int i = 0; i < 3; i++) assert_int_equal(log.ran[i], want[i]);
}

/* Bulk tasks (whole recordings) run at most threads - 1 at once, queued
 * behind each other, so other work always finds a worker; the next bulk
 * task starts when one ends. */
static void test_bulk_tasks_leave_a_worker(void **state) {
  (void)state;
  hark_pool *pool;
  assert_int_equal(0, hark_pool_new(3, 8, &pool));
  gate g = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};
  hark_pool_task bulk[3];
  for (int i = 0; i < 3; i++) {
    bulk[i] = (hark_pool_task){.fn = gate_task, .arg = &g, .bulk = true};
    hark_pool_submit_task(pool, &bulk[i]);
  }
  assert_true(wait_for(&g.entered, 2));
  sleep_ms(50);
  assert_int_equal(atomic_load(&g.entered), 2); /* the third waits its turn */
  atomic_int count = 0;
  assert_int_equal(0, hark_pool_submit(pool, count_task, &count));
  assert_true(wait_for(&count, 1)); /* the worker left to the rest */
  gate_open(&g);
  assert_true(wait_for(&g.left, 3));
  hark_pool_free(pool);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_args),
      cmocka_unit_test(test_bulk_tasks_leave_a_worker),
      cmocka_unit_test(test_all_tasks_run),
      cmocka_unit_test(test_bounded_queue),
      cmocka_unit_test(test_free_drains),
      cmocka_unit_test(test_submit_while_stopping),
      cmocka_unit_test(test_timer_fires_after_deadline),
      cmocka_unit_test(test_timer_order_and_rearm),
      cmocka_unit_test(test_timer_disarm),
      cmocka_unit_test(test_timer_cancel_waits),
      cmocka_unit_test(test_timer_rearm_from_callback),
      cmocka_unit_test(test_continuation_runs_on_the_same_worker),
      cmocka_unit_test(test_continuation_queues_when_work_waits),
      cmocka_unit_test(test_short_tasks_run_first),
      cmocka_unit_test(test_long_task_waits_at_most_its_cost),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
