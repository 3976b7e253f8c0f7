/*
 * pool.h — the engine's runtime (src/runtime): one bounded worker pool for
 * the whole server, the timer thread that comes with it, and "inline runs".
 *
 * This layer knows nothing of models, requests or schedulers: it runs
 * fn(arg) on a worker and fires callbacks at deadlines. The schedulers
 * (src/sched) sit on it, the server (src/core) creates it. It includes no
 * header of theirs and calls nothing of theirs, so it reports failures as
 * errno values (0: success) and leaves the wording to its callers.
 *
 * CPU work runs on this pool, sized to the machine; there is never a thread
 * per connection or per request.
 */
#ifndef HARK_RUNTIME_POOL_H
#define HARK_RUNTIME_POOL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct hark_pool hark_pool;

/* ---- workers ----------------------------------------------------------------- */

/* `threads` workers, at most `max_queue` tasks waiting. Returns 0, or
 * EINVAL (no threads), ENOMEM, or pthread_create's error (*out NULL then). */
int hark_pool_new(uint32_t threads, uint32_t max_queue, hark_pool **out);
/* Runs every task already submitted, then joins the workers and frees. */
void hark_pool_free(hark_pool *pool);
/* Queues fn(arg) to run on a worker. Returns 0, or EAGAIN when the queue
 * is full, or ESHUTDOWN when the pool is stopping (fn never runs then). */
int hark_pool_submit(hark_pool *pool, void (*fn)(void *), void *arg);
uint32_t hark_pool_threads(const hark_pool *pool);

/* ---- embedded tasks ------------------------------------------------------------ */

/* A scheduler owns one task struct per instance and hands it to the pool
 * without allocating; the count is bounded by the number of instances, so
 * these never fail and never count against the pool's max_queue. */
typedef struct hark_pool_task {
  void (*fn)(void *arg);
  void *arg;
  /* What fn is expected to take (ns), set by the owner before each submit;
   * 0: not known. Decides the task's lane (hark_pool_set_short_max_ns). */
  uint64_t cost_ns;
  /* Set by the owner before each submit: the task carries a whole
   * recording (an offline job). At most threads - 1 bulk tasks run at
   * once; the rest wait in a lane of their own (pool.c). */
  bool bulk;
  struct hark_pool_task *next; /* pool-private */
  uint64_t queued_ns;          /* pool-private: when it entered the long lane */
  bool pooled;                 /* pool-private: from the bounded free list */
} hark_pool_task;

/*
 * Queues an embedded task, FIFO with hark_pool_submit's tasks within its
 * lane (the short one when 0 < cost_ns <= the short bound). Never fails:
 * the caller bounds how many of its tasks can be queued at once. The task
 * struct must stay valid until task->fn starts; it may be resubmitted from
 * then on. If the pool's workers are gone (the pool is being freed and
 * already drained), fn runs on the calling thread.
 */
void hark_pool_submit_task(hark_pool *pool, hark_pool_task *task);

/* Tasks expected to take at most `ns` (cost_ns) run before longer ones,
 * and a longer one is passed over only while it has waited less than
 * max(its cost, ns) (pool.c says why); 0 (the default): one FIFO. */
void hark_pool_set_short_max_ns(hark_pool *pool, uint64_t ns);

/* ---- inline runs ----------------------------------------------------------------- */

/* Batches of a model whose executions average at most `ns` may run on a
 * thread that allowed it; 0 (the default): never. */
void hark_pool_set_inline_max_ns(hark_pool *pool, uint64_t ns);
/* The calling thread (not a worker) may run cheap batches in place. */
void hark_pool_thread_may_inline(bool on);
/* True when the calling thread allowed inline runs and a model whose
 * executions average avg_exec_ns qualifies: the caller then runs its batch
 * itself and calls hark_pool_inline_end() after. The thread's permission is
 * off in between, so work the batch starts goes to the workers. */
bool hark_pool_inline_begin(hark_pool *pool, uint64_t avg_exec_ns);
void hark_pool_inline_end(void);

/* ---- the pool's timer ------------------------------------------------------------- */

/* One thread per pool fires embedded timers at their deadlines, so every
 * scheduler of the server shares one clock instead of each keeping a
 * thread asleep. */
typedef struct hark_timer {
  void (*fn)(void *arg); /* runs on the timer thread; must not block long */
  void *arg;
  uint64_t deadline_ns;           /* pool-private */
  struct hark_timer *prev, *next; /* pool-private */
  bool armed;                     /* pool-private */
} hark_timer;

void hark_timer_init(hark_timer *timer, void (*fn)(void *), void *arg);
/* Fires timer->fn once at `deadline_ns` (hark_now_ns's clock,
 * CLOCK_MONOTONIC). Re-arming moves the deadline; arming with the deadline
 * it already has costs a lock. */
void hark_pool_timer_arm(hark_pool *pool, hark_timer *timer, uint64_t deadline_ns);
/* Unarms without waiting: fn may be running, or about to run, right now.
 * Safe to call with locks held that fn takes. */
void hark_pool_timer_disarm(hark_pool *pool, hark_timer *timer);
/* Unarms and waits until fn is not running. Never call it from fn, nor
 * holding a lock fn takes. After it returns fn will not run unless the
 * timer is armed again. */
void hark_pool_timer_cancel(hark_pool *pool, hark_timer *timer);

#endif
