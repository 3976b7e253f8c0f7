/*
 * sched_impl.h — private to src/sched: the pieces the schedulers share
 * beyond the public contract in sched.h.
 *
 *  - embedded pool tasks: a scheduler owns one task struct per instance and
 *    hands it to the pool without allocating; the count is bounded by the
 *    number of instances, so these never fail and never count against the
 *    pool's max_queue;
 *  - the pool's timer: one thread per pool that fires embedded timers at
 *    their deadlines, so every scheduler of the server shares one clock
 *    instead of each keeping a thread asleep;
 *  - the scheduler vtable that sched.c dispatches through.
 */
#ifndef HARK_SCHED_IMPL_H
#define HARK_SCHED_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "sched/sched.h"
#include "util/log.h"

/* ---- embedded pool tasks (pool.c) ------------------------------------------ */

typedef struct hark_pool_task {
  void (*fn)(void *arg);
  void *arg;
  struct hark_pool_task *next; /* pool-private */
  bool pooled;                 /* pool-private: from the bounded free list */
} hark_pool_task;

/*
 * Queues an embedded task, FIFO with hark_pool_submit's tasks. Never fails:
 * the caller bounds how many of its tasks can be queued at once. The task
 * struct must stay valid until task->fn starts; it may be resubmitted from
 * then on. If the pool's workers are gone (the pool is being freed and
 * already drained), fn runs on the calling thread.
 */
void hark_pool_submit_task(hark_pool *pool, hark_pool_task *task);
/* True when the calling thread allowed inline runs and a model whose
 * executions average avg_exec_ns qualifies: the caller then runs its batch
 * itself and calls hark_pool_inline_end() after. The thread's permission is
 * off in between, so work the batch starts goes to the workers. */
bool hark_pool_inline_begin(hark_pool *pool, uint64_t avg_exec_ns);
void hark_pool_inline_end(void);

/* ---- the pool's timer (pool.c) --------------------------------------------- */

typedef struct hark_timer {
  void (*fn)(void *arg); /* runs on the timer thread; must not block long */
  void *arg;
  uint64_t deadline_ns;           /* pool-private */
  struct hark_timer *prev, *next; /* pool-private */
  bool armed;                     /* pool-private */
} hark_timer;

void hark_timer_init(hark_timer *timer, void (*fn)(void *), void *arg);
/* Fires timer->fn once at `deadline_ns` (hark_now_ns clock). Re-arming moves
 * the deadline; arming with the deadline it already has costs a lock. */
void hark_pool_timer_arm(hark_pool *pool, hark_timer *timer, uint64_t deadline_ns);
/* Unarms without waiting: fn may be running, or about to run, right now.
 * Safe to call with locks held that fn takes. */
void hark_pool_timer_disarm(hark_pool *pool, hark_timer *timer);
/* Unarms and waits until fn is not running. Never call it from fn, nor
 * holding a lock fn takes. After it returns fn will not run unless the
 * timer is armed again. */
void hark_pool_timer_cancel(hark_pool *pool, hark_timer *timer);

/* ---- log context (sched.c) -------------------------------------------------- */

/*
 * Around one batch's execute on a worker: saves the thread's log context in
 * *saved and names the batch's requests in it (their ids, else nothing;
 * their sequences' correlation ids), so every line the engine and the
 * backend log meanwhile carries them; logs the batch at verbose level. Call
 * before the execute (the requests may be gone after it), restore after.
 */
void hark_sched_log_batch(hark_model *model, hark_instance *instance,
                          hark_request **requests, uint32_t n, hark_log_context *saved);
static inline void hark_sched_log_restore(const hark_log_context *saved) {
  hark_log_context_restore(saved);
}

/* ---- schedulers (sched.c, dynamic.c, sequence.c, ensemble.c) ----------------- */

typedef struct hark_sched_ops {
  hark_error *(*enqueue)(hark_sched *sched, hark_request *req);
  void (*stop)(hark_sched *sched); /* idempotent */
  void (*free)(hark_sched *sched); /* called after stop */
  uint32_t (*queued)(const hark_sched *sched);
} hark_sched_ops;

/* Every scheduler struct starts with this. */
struct hark_sched {
  const hark_sched_ops *ops;
};

/* The default scheduler and the dynamic batcher (dynamic.c). */
hark_error *hark_sched_dynamic_new(hark_model *model, hark_pool *pool,
                                   uint32_t default_max_queue, hark_sched **out);
/* The sequence batcher (sequence.c). */
hark_error *hark_sched_sequence_new(hark_model *model, hark_pool *pool,
                                    uint32_t default_max_queue, hark_sched **out);
/* The ensemble scheduler (ensemble.c). */
hark_error *hark_sched_ensemble_new(hark_model *model, hark_server *server,
                                    hark_sched **out);

#endif
