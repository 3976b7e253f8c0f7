/*
 * skeleton.c — the machinery the dynamic batcher and the sequence batcher
 * share: the pump, the timer, stop and the instances' tasks.
 *
 * Pumping: whichever thread caused an event — the enqueuer, the worker
 * whose execution just finished, or the pool's timer thread — pumps. Under
 * the lock the scheduler's pass applies its rules (expire, then form a
 * batch for each free instance it can, claiming it) and says when it wants
 * to look again; the pump arms the timer for then. After unlocking it
 * hands each claimed instance's embedded task to the worker pool and lets
 * the scheduler finish what the pass took out of the lock (completing
 * rejected requests, freeing dropped state), so no callback and no execute
 * ever runs under the lock. A pass that took out all it could carry asks
 * for another. An instance is busy from the moment its batch is formed
 * until its execution returns, so it never runs two batches at once; the
 * number of queued pool tasks is bounded by the instance count.
 *
 * Costs: every execution is timed, and its model's moving average goes
 * with each batch handed to the pool (the task's cost_ns), so the pool
 * runs short batches before long ones (runtime/pool.c). Inline runs: on a
 * front-end thread that allows it (runtime/pool.h), a scheduler whose
 * executions average a few microseconds has the first batch a pump formed
 * run by the pump's own thread, after the rest went to the workers and the
 * pass was finished; then the pump passes again, so a batch that queued
 * behind it for the instance (another event loop's) runs there too, up to
 * INLINE_CHAIN in a row, rather than on a worker woken for a few
 * microseconds of work.
 *
 * Timers: rather than a thread per model sleeping on its own condition
 * variable, every scheduler embeds one hark_timer on the pool's single
 * timer thread, re-armed at the end of each pass. A fire only runs a pump;
 * a stale or early fire is harmless because the pass recomputes everything
 * from the queue and the clock.
 *
 * Lifetime: `users` counts threads inside the scheduler (enqueue, pump,
 * execution wrap-up); stop waits until no thread is inside, no instance is
 * busy and the scheduler says it is drained, so that freeing can follow.
 */
#include "sched/skeleton.h"

#include "core/engine.h"

/* Executions timed before a model's average counts (inline runs, the
 * pool's lanes): the first, with their cold caches and lazy set-ups, do
 * not decide. */
#define COST_WARMUP 16u

static void pump_locked(hark_skel *sk, uint64_t now, hark_skel_inst *done);

static void skel_fire(void *arg) {
  hark_skel *sk = arg;
  pthread_mutex_lock(&sk->lock);
  sk->users++;
  pump_locked(sk, 0, NULL);
}

/* Runs an instance's batch and times it, outside the lock; the caller
 * frees the instance under the lock (wrap_up). Returns when it ended (the
 * next pass's clock). */
static uint64_t skel_exec(hark_skel_inst *inst) {
  hark_skel *sk = inst->sk;
  uint64_t start = hark_now_ns();
  sk->ops->execute(sk, inst);
  uint64_t end = hark_now_ns(), took = end - start;
  /* The warm-up's executions are not averaged: the average starts from
   * the last of them. */
  uint64_t avg = atomic_load_explicit(&sk->exec_avg_ns, memory_order_relaxed);
  bool warm = atomic_load_explicit(&sk->exec_timed, memory_order_relaxed) >= COST_WARMUP;
  atomic_store_explicit(&sk->exec_avg_ns, warm ? avg - avg / 8 + took / 8 : took,
                        memory_order_relaxed);
  atomic_fetch_add_explicit(&sk->exec_timed, 1, memory_order_relaxed);
  return end;
}

/* Under the lock: `inst`'s execution returned; it is free again. */
static void wrap_up(hark_skel *sk, hark_skel_inst *inst) {
  if (sk->ops->executed) sk->ops->executed(sk, inst);
  inst->busy = false;
  sk->n_busy--;
}

/* An instance's pool task: runs its batch, then (one lock hold) frees the
 * instance and passes. */
static void skel_run(void *arg) {
  hark_skel_inst *inst = arg;
  hark_skel *sk = inst->sk;
  uint64_t end = skel_exec(inst);
  pthread_mutex_lock(&sk->lock);
  sk->users++;
  pump_locked(sk, end, inst);
}

void hark_skel_init(hark_skel *sk, const hark_skel_ops *ops, const hark_sched_desc *desc) {
  sk->d = *desc;
  sk->ops = ops;
  pthread_mutex_init(&sk->lock, NULL);
  pthread_cond_init(&sk->idle, NULL);
  hark_timer_init(&sk->timer, skel_fire, sk);
  atomic_init(&sk->queued, 0);
  atomic_init(&sk->exec_avg_ns, 0);
  atomic_init(&sk->exec_timed, 0);
}

void hark_skel_inst_init(hark_skel *sk, hark_skel_inst *inst, uint32_t index) {
  inst->sk = sk;
  inst->index = index;
  inst->task.fn = skel_run;
  inst->task.arg = inst;
}

void hark_skel_fini(hark_skel *sk) {
  /* A late timer fire may still be pumping: wait it out. */
  hark_pool_timer_cancel(sk->d.pool, &sk->timer);
  pthread_mutex_destroy(&sk->lock);
  pthread_cond_destroy(&sk->idle);
}

void hark_skel_claim(hark_skel *sk, hark_skel_inst *inst, hark_skel_pass *p) {
  inst->busy = true;
  sk->n_busy++;
  inst->launch_next = p->launch;
  p->launch = inst;
}

/* Inline batches one pump may run in a row: what queued behind an inline
 * run (another loop's request, waiting for the instance this thread held)
 * runs here too rather than waking a worker, which then wakes that loop,
 * but one thread serves others' batches only so long. */
#define INLINE_CHAIN 4

/* Under the lock: the caller leaves the scheduler (stop may go on). */
static void leave_locked(hark_skel *sk) {
  sk->users--;
  if (sk->users == 0 && sk->n_busy == 0 && sk->ops->drained(sk)) pthread_cond_broadcast(&sk->idle);
}

/*
 * The pump. Called with the lock held and the caller counted in users;
 * returns with it released and the caller gone. `now`: the clock its
 * caller just read, else 0; `done`: an instance whose execution just
 * returned, freed under the same hold as the first pass. A pass with
 * nothing to launch or finish leaves under its own hold too: a request
 * that runs inline takes the lock twice, admission with its pass and the
 * wrap-up with the next.
 */
static void pump_locked(hark_skel *sk, uint64_t now, hark_skel_inst *done) {
  hark_pool *pool = sk->d.pool;
  unsigned inlined = 0;
  for (;;) {
    if (done) wrap_up(sk, done);
    done = NULL;
    hark_skel_pass p = {.wake_ns = UINT64_MAX};
    sk->ops->pass(sk, now ? now : hark_now_ns(), &p);
    now = 0;
    if (p.wake_ns == UINT64_MAX)
      hark_pool_timer_disarm(pool, &sk->timer);
    else
      hark_pool_timer_arm(pool, &sk->timer, p.wake_ns);
    atomic_store(&sk->queued, p.queued);
    if (!p.launch && !p.n_out && !p.again) break;
    pthread_mutex_unlock(&sk->lock);

    hark_skel_inst *here = NULL;
    uint64_t cost = p.launch ? hark_skel_cost(sk) : 0;
    if (cost && sk->ops->may_inline && inlined < INLINE_CHAIN &&
        hark_pool_inline_begin(pool, cost)) {
      here = p.launch;
      p.launch = here->launch_next;
    }
    for (hark_skel_inst *inst = p.launch, *next; inst; inst = next) {
      next = inst->launch_next; /* the task may run and finish at once */
      inst->task.cost_ns = cost;
      inst->task.bulk = sk->ops->bulk && sk->ops->bulk(sk, inst);
      hark_pool_submit_task(pool, &inst->task);
    }
    if (p.n_out && sk->ops->finish) sk->ops->finish(sk, &p);
    if (here) {
      now = skel_exec(here); /* this pump's own reference covers it */
      hark_pool_inline_end();
      inlined++;
      done = here; /* the instance is free again: look at what queued meanwhile */
    }
    pthread_mutex_lock(&sk->lock);
    if (!here && !p.again) break;
  }
  leave_locked(sk);
  pthread_mutex_unlock(&sk->lock);
}

void hark_skel_pump(hark_skel *sk) {
  pthread_mutex_lock(&sk->lock);
  pump_locked(sk, 0, NULL);
}

hark_error *hark_skel_enqueue(hark_skel *sk, hark_request *req, void *arg) {
  pthread_mutex_lock(&sk->lock);
  uint64_t now = hark_now_ns();
  hark_error *err =
      sk->stopping ? hark_error_new(HARK_ERR_UNAVAILABLE, "model '%s' version %lld is unloading",
                                    sk->d.name, (long long)sk->d.version)
                   : sk->ops->admit(sk, req, arg, now);
  if (err) {
    pthread_mutex_unlock(&sk->lock);
    return err;
  }
  hark_request_set_queued_ns(req, now); /* nothing dequeues it before the pass */
  sk->users++;
  pump_locked(sk, now, NULL);
  return NULL;
}

void hark_skel_stop(hark_skel *sk) {
  pthread_mutex_lock(&sk->lock);
  sk->stopping = true; /* the passes flush instead of waiting */
  sk->users++;
  pump_locked(sk, 0, NULL);
  pthread_mutex_lock(&sk->lock);
  while (sk->users || sk->n_busy || !sk->ops->drained(sk)) pthread_cond_wait(&sk->idle, &sk->lock);
  pthread_mutex_unlock(&sk->lock);
}

void hark_skel_flush(hark_sched *base) {
  hark_skel *sk = (hark_skel *)base;
  pthread_mutex_lock(&sk->lock);
  sk->flushing = true;
  sk->users++;
  pump_locked(sk, 0, NULL);
}

uint32_t hark_skel_queued(const hark_sched *base) {
  return atomic_load(&((hark_skel *)base)->queued);
}

uint32_t hark_skel_busy(const hark_sched *base) {
  hark_skel *sk = (hark_skel *)base;
  pthread_mutex_lock(&sk->lock);
  uint32_t n = sk->n_busy;
  pthread_mutex_unlock(&sk->lock);
  return n;
}

uint64_t hark_skel_cost(const hark_skel *sk) {
  if (atomic_load_explicit(&sk->exec_timed, memory_order_relaxed) < COST_WARMUP) return 0;
  uint64_t avg = atomic_load_explicit(&sk->exec_avg_ns, memory_order_relaxed);
  return avg ? avg : 1;
}
