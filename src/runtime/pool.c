/*
 * pool.c — the server's worker pool and its timer.
 *
 * Workers: a fixed set of threads takes tasks from one FIFO. Tasks enter two
 * ways. hark_pool_submit() takes a node from a free list made at creation
 * (max_queue of them), so that path is bounded and answers UNAVAILABLE when
 * the list is empty. Schedulers instead hand over a task struct they embed
 * (one per instance), which needs no node and cannot fail; it is bounded by
 * the instance count. hark_pool_free() refuses new submissions, lets the
 * workers drain the FIFO, then joins them.
 *
 * A worker that hands over a task while the FIFO is empty keeps it in its
 * own next-task slot and runs it itself once its current task returns,
 * without waking anyone: a batch that launches the next batch of the same
 * instance would otherwise wake a sleeping worker for every batch, and on a
 * small machine those wake-ups cost more than the batches. With the FIFO
 * non-empty, tasks queue (and wake a worker) as usual, so nothing waits
 * behind a worker's chain of continuations.
 *
 * Short tasks first: an embedded task may say what it is expected to cost
 * (cost_ns, its model's average execution). Tasks expected to take at most
 * the short bound (hark_pool_set_short_max_ns) queue in a lane of their own
 * that workers serve before the other, so that a model whose batches take
 * microseconds (a gated recogniser on silent streams) does not wait behind
 * one whose batches take milliseconds (the VAD feeding it) whenever every
 * worker is busy with the latter: run in arrival order, each of the cheap
 * model's instances got one turn per expensive batch, and the pipeline's
 * throughput collapsed to that. A long task is passed over only while it
 * has waited less than it will itself run (its cost, or the short bound
 * when that is larger or the cost unknown), so shorter work can at most
 * double a long task's time in the queue and never starve it. Tasks of
 * unknown cost (hark_pool_submit's, a model's first executions) queue as
 * long ones. A bound of 0 keeps one FIFO.
 *
 * Bulk tasks (a batch that carries a whole recording: issue 24) queue in
 * a third lane, behind each other, and at most threads - 1 of them run at
 * once (one, with one thread): whatever the offline clients send, one
 * worker is always left to live streams and cheap models. A bulk task
 * never becomes a worker's next-task continuation, which would bypass the
 * bound.
 *
 * Inline runs: a thread outside the pool that serves requests (an HTTP
 * event loop) may declare itself able to run work in place
 * (hark_pool_thread_may_inline). A scheduler that launches a batch on such
 * a thread asks hark_pool_inline_begin() whether that model is cheap enough
 * (its executions average at most the pool's inline bound): if so the
 * thread runs the batch itself, sparing the two thread hand-offs (to a
 * worker and back to the loop) that cost more than a microsecond-scale
 * model. The permission is off for the length of the run, so whatever the
 * batch starts goes to the workers, and a model that gets slower stops
 * qualifying as its average rises.
 *
 * Timer: one extra thread keeps the armed hark_timers in a list sorted by
 * deadline and sleeps on a CLOCK_MONOTONIC condition variable until the
 * earliest, so no scheduler busy-waits or keeps a thread of its own. Timer
 * callbacks run on that thread without the timer lock, which lets them arm
 * timers again; cancel waits for a running callback so that its owner can
 * be freed. Arming scans from the tail: deadlines mostly grow.
 *
 * This file is the bottom of the engine (pool.h says why it reports errno
 * values): it uses nothing but libc and pthreads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/pool.h"

struct hark_pool {
  pthread_mutex_t lock;
  pthread_cond_t work;           /* a task was queued, or stopping */
  hark_pool_task *head, *tail;   /* the long lane (and every task when short_max_ns is 0) */
  hark_pool_task *shead, *stail; /* the short lane */
  hark_pool_task *bhead, *btail; /* the bulk lane */
  uint32_t n_bulk, max_bulk;     /* bulk tasks running; at most this many */
  hark_pool_task *free_nodes;    /* for hark_pool_submit; max_queue of them */
  hark_pool_task *nodes;
  bool stopping;
  uint32_t n_threads, alive;
  atomic_uint_fast64_t inline_max_ns; /* 0: nothing runs inline */
  uint64_t short_max_ns;              /* under lock; 0: one lane */
  pthread_t *threads;

  pthread_mutex_t tlock;
  pthread_cond_t tcond; /* the earliest deadline changed, or stopping */
  pthread_cond_t tdone; /* a callback finished */
  hark_timer *thead, *ttail;
  hark_timer *running;
  bool tstopping, tstarted;
  pthread_t tthread;
};

/* ---- workers --------------------------------------------------------------- */

/* The pool this thread works for, and its next-task slot. */
static _Thread_local hark_pool *tl_pool;
static _Thread_local hark_pool_task *tl_next;
/* This thread may run cheap batches in place (see the top of the file). */
static _Thread_local bool tl_may_inline;

/* hark_now_ns's clock, read here so that this layer needs nothing above it. */
static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static bool is_short(const hark_pool *pool, const hark_pool_task *task) {
  return pool->short_max_ns && task->cost_ns && task->cost_ns <= pool->short_max_ns;
}

static void fifo_push(hark_pool *pool, hark_pool_task *task) {
  task->next = NULL;
  hark_pool_task **head = &pool->head, **tail = &pool->tail;
  if (task->bulk) {
    head = &pool->bhead;
    tail = &pool->btail;
  } else if (is_short(pool, task)) {
    head = &pool->shead;
    tail = &pool->stail;
  } else {
    task->queued_ns = now_ns();
  }
  if (*tail)
    (*tail)->next = task;
  else
    *head = task;
  *tail = task;
}

static bool fifo_empty(const hark_pool *pool) {
  return !pool->head && !pool->shead && !pool->bhead;
}

/* The next task to run, under the lock: the short lane's head, unless the
 * long lane's head has waited as long as it will run (see the top). */
static hark_pool_task *fifo_pop(hark_pool *pool) {
  hark_pool_task **head = &pool->head, **tail = &pool->tail;
  if (pool->shead) {
    hark_pool_task *l = pool->head;
    uint64_t patience = l && l->cost_ns > pool->short_max_ns ? l->cost_ns : pool->short_max_ns;
    if (!l || now_ns() - l->queued_ns < patience) {
      head = &pool->shead;
      tail = &pool->stail;
    }
  }
  hark_pool_task *task = *head;
  if (task) {
    *head = task->next;
    if (!*head) *tail = NULL;
  }
  return task;
}

/* What a free worker runs next, under the lock: a bulk task while the
 * bulk share has room, else fifo_pop's; NULL: nothing it may run now. */
static hark_pool_task *take(hark_pool *pool) {
  hark_pool_task *task = pool->bhead;
  if (task && pool->n_bulk < pool->max_bulk) {
    pool->bhead = task->next;
    if (!pool->bhead) pool->btail = NULL;
    pool->n_bulk++;
    return task;
  }
  return fifo_pop(pool);
}

static void *worker_main(void *arg) {
  hark_pool *pool = arg;
  pthread_setname_np(pthread_self(), "hark-worker");
  tl_pool = pool;
  pthread_mutex_lock(&pool->lock);
  for (;;) {
    hark_pool_task *task;
    while (!(task = take(pool)) && !(pool->stopping && fifo_empty(pool)))
      pthread_cond_wait(&pool->work, &pool->lock);
    if (!task) break; /* stopping and drained */
    bool bulk = task->bulk;
    /* Copy out before unlocking: an embedded task may be resubmitted (and
     * a pooled node reused) as soon as it leaves the FIFO. */
    void (*fn)(void *) = task->fn;
    void *fn_arg = task->arg;
    if (task->pooled) {
      task->next = pool->free_nodes;
      pool->free_nodes = task;
    }
    pthread_mutex_unlock(&pool->lock);
    fn(fn_arg);
    while (tl_next) { /* continuations handed over by fn, oldest first */
      hark_pool_task *next = tl_next;
      tl_next = NULL;
      next->fn(next->arg);
    }
    pthread_mutex_lock(&pool->lock);
    if (bulk) {
      pool->n_bulk--;
      if (pool->bhead) pthread_cond_signal(&pool->work); /* the next may run */
    }
  }
  pool->alive--;
  pthread_mutex_unlock(&pool->lock);
  return NULL;
}

int hark_pool_submit(hark_pool *pool, void (*fn)(void *), void *arg) {
  pthread_mutex_lock(&pool->lock);
  hark_pool_task *node = pool->stopping ? NULL : pool->free_nodes;
  if (!node) {
    bool stopping = pool->stopping;
    pthread_mutex_unlock(&pool->lock);
    return stopping ? ESHUTDOWN : EAGAIN;
  }
  pool->free_nodes = node->next;
  node->fn = fn;
  node->arg = arg;
  node->cost_ns = 0;
  node->bulk = false;
  fifo_push(pool, node);
  pthread_cond_signal(&pool->work);
  pthread_mutex_unlock(&pool->lock);
  return 0;
}

void hark_pool_submit_task(hark_pool *pool, hark_pool_task *task) {
  pthread_mutex_lock(&pool->lock);
  if (pool->alive == 0) {
    /* Only reachable if a scheduler outlives the pool's drain: running the
     * task here is better than losing its requests. */
    pthread_mutex_unlock(&pool->lock);
    task->fn(task->arg);
    return;
  }
  task->pooled = false;
  if (tl_pool == pool && !tl_next && !task->bulk && fifo_empty(pool) && !pool->stopping) {
    tl_next = task; /* this worker runs it next; see the top of the file */
    pthread_mutex_unlock(&pool->lock);
    return;
  }
  fifo_push(pool, task);
  pthread_cond_signal(&pool->work);
  pthread_mutex_unlock(&pool->lock);
}

uint32_t hark_pool_threads(const hark_pool *pool) { return pool->n_threads; }

void hark_pool_set_inline_max_ns(hark_pool *pool, uint64_t ns) {
  atomic_store(&pool->inline_max_ns, ns);
}

void hark_pool_set_short_max_ns(hark_pool *pool, uint64_t ns) {
  pthread_mutex_lock(&pool->lock);
  pool->short_max_ns = ns;
  pthread_mutex_unlock(&pool->lock);
}

void hark_pool_thread_may_inline(bool on) { tl_may_inline = on; }

bool hark_pool_inline_begin(hark_pool *pool, uint64_t avg_exec_ns) {
  uint64_t bound = atomic_load_explicit(&pool->inline_max_ns, memory_order_relaxed);
  if (!tl_may_inline || bound == 0 || avg_exec_ns > bound) return false;
  tl_may_inline = false;
  return true;
}

void hark_pool_inline_end(void) { tl_may_inline = true; }

/* ---- timer ----------------------------------------------------------------- */

void hark_timer_init(hark_timer *timer, void (*fn)(void *), void *arg) {
  timer->fn = fn;
  timer->arg = arg;
  timer->deadline_ns = 0;
  timer->prev = timer->next = NULL;
  timer->armed = false;
}

static void timer_unlink(hark_pool *pool, hark_timer *t) {
  if (t->prev)
    t->prev->next = t->next;
  else
    pool->thead = t->next;
  if (t->next)
    t->next->prev = t->prev;
  else
    pool->ttail = t->prev;
  t->prev = t->next = NULL;
  t->armed = false;
}

void hark_pool_timer_arm(hark_pool *pool, hark_timer *t, uint64_t deadline_ns) {
  pthread_mutex_lock(&pool->tlock);
  if (t->armed && t->deadline_ns == deadline_ns) {
    pthread_mutex_unlock(&pool->tlock);
    return;
  }
  if (t->armed) timer_unlink(pool, t);
  t->deadline_ns = deadline_ns;
  hark_timer *after = pool->ttail;
  while (after && after->deadline_ns > deadline_ns) after = after->prev;
  t->prev = after;
  t->next = after ? after->next : pool->thead;
  if (t->next)
    t->next->prev = t;
  else
    pool->ttail = t;
  if (after)
    after->next = t;
  else
    pool->thead = t;
  t->armed = true;
  /* Only a new earliest deadline shortens the timer thread's sleep. */
  if (pool->thead == t) pthread_cond_signal(&pool->tcond);
  pthread_mutex_unlock(&pool->tlock);
}

void hark_pool_timer_disarm(hark_pool *pool, hark_timer *t) {
  pthread_mutex_lock(&pool->tlock);
  if (t->armed) timer_unlink(pool, t);
  pthread_mutex_unlock(&pool->tlock);
}

void hark_pool_timer_cancel(hark_pool *pool, hark_timer *t) {
  pthread_mutex_lock(&pool->tlock);
  if (t->armed) timer_unlink(pool, t);
  while (pool->running == t) pthread_cond_wait(&pool->tdone, &pool->tlock);
  pthread_mutex_unlock(&pool->tlock);
}

static void *timer_main(void *arg) {
  hark_pool *pool = arg;
  pthread_setname_np(pthread_self(), "hark-timer");
  pthread_mutex_lock(&pool->tlock);
  while (!pool->tstopping) {
    hark_timer *t = pool->thead;
    if (!t) {
      pthread_cond_wait(&pool->tcond, &pool->tlock);
      continue;
    }
    uint64_t now = now_ns();
    if (t->deadline_ns > now) {
      struct timespec ts = {.tv_sec = (time_t)(t->deadline_ns / 1000000000u),
                            .tv_nsec = (long)(t->deadline_ns % 1000000000u)};
      pthread_cond_timedwait(&pool->tcond, &pool->tlock, &ts);
      continue;
    }
    timer_unlink(pool, t);
    pool->running = t;
    pthread_mutex_unlock(&pool->tlock);
    t->fn(t->arg);
    pthread_mutex_lock(&pool->tlock);
    pool->running = NULL;
    pthread_cond_broadcast(&pool->tdone);
  }
  pthread_mutex_unlock(&pool->tlock);
  return NULL;
}

/* ---- lifecycle --------------------------------------------------------------- */

int hark_pool_new(uint32_t threads, uint32_t max_queue, hark_pool **out) {
  *out = NULL;
  if (threads == 0) return EINVAL;
  hark_pool *pool = calloc(1, sizeof *pool);
  if (!pool) return ENOMEM;
  pool->threads = calloc(threads, sizeof *pool->threads);
  pool->nodes = calloc(max_queue ? max_queue : 1, sizeof *pool->nodes);
  if (!pool->threads || !pool->nodes) {
    free(pool->threads);
    free(pool->nodes);
    free(pool);
    return ENOMEM;
  }
  for (uint32_t i = 0; i < max_queue; i++) {
    pool->nodes[i].pooled = true;
    pool->nodes[i].next = pool->free_nodes;
    pool->free_nodes = &pool->nodes[i];
  }
  pool->max_bulk = threads > 1 ? threads - 1 : 1;
  pthread_mutex_init(&pool->lock, NULL);
  pthread_cond_init(&pool->work, NULL);
  pthread_mutex_init(&pool->tlock, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC); /* now_ns's clock */
  pthread_cond_init(&pool->tcond, &attr);
  pthread_condattr_destroy(&attr);
  pthread_cond_init(&pool->tdone, NULL);

  int rc = pthread_create(&pool->tthread, NULL, timer_main, pool);
  if (rc == 0) pool->tstarted = true;
  for (uint32_t i = 0; rc == 0 && i < threads; i++) {
    rc = pthread_create(&pool->threads[i], NULL, worker_main, pool);
    if (rc != 0) break;
    pthread_mutex_lock(&pool->lock);
    pool->alive++;
    pool->n_threads++;
    pthread_mutex_unlock(&pool->lock);
  }
  if (rc != 0) {
    hark_pool_free(pool);
    return rc;
  }
  *out = pool;
  return 0;
}

void hark_pool_free(hark_pool *pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->lock);
  pool->stopping = true;
  pthread_cond_broadcast(&pool->work);
  pthread_mutex_unlock(&pool->lock);
  for (uint32_t i = 0; i < pool->n_threads; i++) pthread_join(pool->threads[i], NULL);

  if (pool->tstarted) {
    pthread_mutex_lock(&pool->tlock);
    pool->tstopping = true;
    pthread_cond_signal(&pool->tcond);
    pthread_mutex_unlock(&pool->tlock);
    pthread_join(pool->tthread, NULL);
  }
  pthread_mutex_destroy(&pool->lock);
  pthread_cond_destroy(&pool->work);
  pthread_mutex_destroy(&pool->tlock);
  pthread_cond_destroy(&pool->tcond);
  pthread_cond_destroy(&pool->tdone);
  free(pool->threads);
  free(pool->nodes);
  free(pool);
}
