/*
 * dynamic.c — the default scheduler and the dynamic batcher: one machinery,
 * the default scheduler being the case of one request per execution.
 *
 * Requests enter a hark_queue (priority levels, bounds, timeouts) under the
 * scheduler lock. Everything else happens in dyn_pump(), which runs on
 * whichever thread caused an event — the enqueuer, the worker whose
 * execution just finished, or the pool's timer thread — and does, under the
 * lock: expire timeouts, then while an instance is free and the batcher
 * (batcher.h) says "dispatch k", move k requests into that instance's batch
 * and mark it busy; finally arm the pool's shared timer for the earliest of
 * the batcher's wait and the next request deadline. After unlocking it hands
 * each claimed instance's embedded task to the worker pool and completes the
 * rejected requests, so no callback and no execute ever runs under the lock.
 * One exception to "the worker pool": on a front-end thread that allows it,
 * a model whose executions average a few microseconds has its first batch
 * run by the pump's own thread (runtime/pool.c, "inline runs").
 * An instance is busy from the moment its batch is formed until its
 * execution returns, so it never runs two batches at once; the number of
 * queued pool tasks is bounded by the instance count.
 *
 * Timers: rather than a thread per model sleeping on its own condition
 * variable, every scheduler embeds one hark_timer on the pool's single
 * timer thread (runtime/pool.c), re-armed at the end of each pump. A fire only runs
 * a pump; a stale or early fire is harmless because the pump recomputes
 * everything from the queue and the clock.
 *
 * Lifetime: `users` counts threads inside the scheduler (enqueue, pump,
 * execution wrap-up); stop waits for an empty queue, no busy instance and
 * no users, so that hark_sched_free can follow safely.
 *
 * preserve_ordering wraps each accepted request's callback. Responses are
 * buffered per request in acceptance order; whoever adds a deliverable
 * response becomes the single "drainer" and delivers, outside the lock,
 * everything from the head until it meets a request that is not final.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/engine.h"
#include "sched/batcher.h"
#include "sched/queue.h"
#include "sched/sched_impl.h"

#define REJECT_CHUNK 32u
/* Executions timed before a model may run inline (runtime/pool.c): the first
 * requests, with their cold caches and lazy set-ups, do not decide. */
#define INLINE_WARMUP 16u

typedef struct dyn_sched dyn_sched;

typedef struct dyn_instance {
  dyn_sched *s;
  uint32_t index;
  bool busy;             /* a batch is formed and its execution not done */
  hark_pool_task task;
  hark_request **batch;  /* max(1, max_batch_size) slots */
  uint32_t n;
  struct dyn_instance *launch_next; /* the claiming pump's launch list */
} dyn_instance;

typedef struct order_slot order_slot;

typedef struct order_msg {
  order_slot *slot;
  hark_response *resp;
  uint32_t flags;
  hark_error *err;
  struct order_msg *next;
} order_msg;

struct order_slot {
  order_slot *next;
  dyn_sched *s;
  hark_response_fn fn; /* the front end's callback */
  void *userp;
  order_msg *head, *tail; /* buffered, not yet delivered */
  order_msg final_msg;    /* the FINAL needs no allocation */
  bool final;
};

struct dyn_sched {
  hark_sched base;
  hark_sched_desc d;
  pthread_mutex_t lock;
  pthread_cond_t idle; /* stop waits for it */
  hark_queue *queue;
  hark_batch_policy policy;
  uint32_t priority_levels; /* 0: priorities off, request priorities ignored */
  hark_batch_item *items; /* scratch for the batcher, items_cap long */
  uint32_t items_cap;
  dyn_instance *insts;
  uint32_t n_insts, n_busy, next_inst;
  uint32_t users;
  bool stopping;
  hark_timer timer;
  atomic_uint queued; /* a copy of the queue size for the lock-free getter */
  /* Wall time of an execution, a moving average over about the last 8
   * (written by whichever worker finished last: an estimate), and how many
   * have been timed: what decides whether a batch may run inline. */
  atomic_uint_fast64_t exec_avg_ns;
  atomic_uint exec_timed;

  bool ordered; /* preserve_ordering */
  pthread_mutex_t olock; /* after `lock` when both are held */
  order_slot *ohead, *otail;
  bool draining;
};

/* ---- preserve_ordering -------------------------------------------------------- */

static void order_deliver(order_msg *m) {
  order_slot *slot = m->slot;
  if (slot->fn) {
    slot->fn(m->resp, m->flags, m->err, slot->userp);
  } else {
    hark_response_free(m->resp);
    hark_error_free(m->err);
  }
  if (m != &slot->final_msg) free(m);
}

/* Moves what can be delivered now to *out (in order) and the slots that are
 * done to *done. Called with olock held. */
static void order_collect(dyn_sched *s, order_msg **out, order_slot **done) {
  order_msg *tail = NULL;
  *out = NULL;
  *done = NULL;
  while (s->ohead) {
    order_slot *h = s->ohead;
    if (h->head) {
      if (tail)
        tail->next = h->head;
      else
        *out = h->head;
      tail = h->tail;
      h->head = h->tail = NULL;
    }
    if (!h->final) break;
    s->ohead = h->next;
    if (!s->ohead) s->otail = NULL;
    h->next = *done;
    *done = h;
  }
}

static void order_callback(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  order_slot *slot = userp;
  dyn_sched *s = slot->s;
  order_msg *m = (flags & HARK_RESPONSE_FINAL) ? &slot->final_msg : malloc(sizeof *m);
  if (!m) abort(); /* small fixed allocation, as the core treats them */
  *m = (order_msg){.slot = slot, .resp = resp, .flags = flags, .err = err};

  pthread_mutex_lock(&s->olock);
  if (slot->tail)
    slot->tail->next = m;
  else
    slot->head = m;
  slot->tail = m;
  if (flags & HARK_RESPONSE_FINAL) slot->final = true;
  if (s->draining) { /* the drainer will find it */
    pthread_mutex_unlock(&s->olock);
    return;
  }
  s->draining = true;
  for (;;) {
    order_msg *out;
    order_slot *done;
    order_collect(s, &out, &done);
    if (!out && !done) break;
    pthread_mutex_unlock(&s->olock);
    for (order_msg *next; out; out = next) {
      next = out->next;
      order_deliver(out);
    }
    for (order_slot *next; done; done = next) {
      next = done->next;
      free(done);
    }
    pthread_mutex_lock(&s->olock);
  }
  s->draining = false;
  pthread_mutex_unlock(&s->olock);
}

/* Wraps req's callback. Called with s->lock held, once req is accepted. */
static void order_track(dyn_sched *s, hark_request *req, order_slot *slot) {
  slot->s = s;
  hark_request_get_callback(req, &slot->fn, &slot->userp);
  hark_request_set_callback(req, order_callback, slot);
  pthread_mutex_lock(&s->olock);
  if (s->otail)
    s->otail->next = slot;
  else
    s->ohead = slot;
  s->otail = slot;
  pthread_mutex_unlock(&s->olock);
}

/* ---- batching and dispatch ------------------------------------------------------ */

static dyn_instance *free_instance(dyn_sched *s) {
  /* Round robin, so that work spreads over the instances. */
  for (uint32_t i = 0; i < s->n_insts; i++) {
    dyn_instance *di = &s->insts[(s->next_inst + i) % s->n_insts];
    if (!di->busy) {
      s->next_inst = (s->next_inst + i + 1) % s->n_insts;
      return di;
    }
  }
  return NULL;
}

/* Forms batches for free instances, pushing each claimed instance on
 * *launch. Returns when the batcher next wants to look (UINT64_MAX: only
 * when something changes). Called with s->lock held. */
static uint64_t form_batches(dyn_sched *s, uint64_t now, dyn_instance **launch) {
  while (hark_queue_size(s->queue) > 0) {
    bool any_free = false;
    for (uint32_t i = 0; i < s->n_insts && !any_free; i++) any_free = !s->insts[i].busy;
    if (!any_free) return UINT64_MAX; /* a finishing execution pumps again */

    uint32_t n = 0;
    for (const hark_queue_node *node = hark_queue_first(s->queue); node && n < s->items_cap;
         node = hark_queue_next(s->queue, node))
      s->items[n++] = (hark_batch_item){hark_queue_node_batch_size(node),
                                        hark_queue_node_enqueued_ns(node)};
    hark_batch_decision d;
    hark_batch_decide(&s->policy, s->items, n, s->stopping, now, &d);
    if (d.n_requests == 0) return d.wait_until_ns;

    dyn_instance *di = free_instance(s);
    di->n = hark_queue_pop(s->queue, (void **)di->batch, d.n_requests);
    di->busy = true;
    s->n_busy++;
    di->launch_next = *launch;
    *launch = di;
  }
  return UINT64_MAX;
}

static void dyn_execute(void *arg);

/*
 * The one place batches are formed and timeouts applied. The caller has
 * counted itself in s->users under s->lock; the pump uncounts it last.
 */
static void dyn_pump(dyn_sched *s) {
  hark_pool *pool = s->d.pool;
  for (;;) {
    void *rejected[REJECT_CHUNK];
    dyn_instance *launch = NULL;

    pthread_mutex_lock(&s->lock);
    uint64_t now = hark_now_ns();
    uint32_t n_rej = hark_queue_expire(s->queue, now, rejected, REJECT_CHUNK);
    uint64_t wake = form_batches(s, now, &launch);
    uint64_t deadline = hark_queue_next_deadline(s->queue);
    if (deadline < wake) wake = deadline;
    if (wake == UINT64_MAX)
      hark_pool_timer_disarm(pool, &s->timer);
    else
      hark_pool_timer_arm(pool, &s->timer, wake);
    atomic_store(&s->queued, hark_queue_size(s->queue));
    pthread_mutex_unlock(&s->lock);

    /* A cheap model's first batch may run right here, on a front end's
     * thread that allowed it (runtime/pool.c), instead of on a worker. */
    dyn_instance *here = NULL;
    if (launch && atomic_load_explicit(&s->exec_timed, memory_order_relaxed) >= INLINE_WARMUP &&
        hark_pool_inline_begin(pool, atomic_load_explicit(&s->exec_avg_ns, memory_order_relaxed))) {
      here = launch;
      launch = launch->launch_next;
    }
    for (dyn_instance *di = launch, *next; di; di = next) {
      next = di->launch_next; /* the task may finish and be reused at once */
      hark_pool_submit_task(pool, &di->task);
    }
    for (uint32_t i = 0; i < n_rej; i++)
      hark_request_complete(rejected[i],
                            hark_error_new(HARK_ERR_DEADLINE, "Request timeout expired"));
    if (here) {
      dyn_execute(here);
      hark_pool_inline_end();
    }
    if (n_rej < REJECT_CHUNK) break;
  }

  pthread_mutex_lock(&s->lock);
  s->users--;
  if (s->users == 0 && s->n_busy == 0 && hark_queue_size(s->queue) == 0)
    pthread_cond_broadcast(&s->idle);
  pthread_mutex_unlock(&s->lock);
}

/* A worker runs one formed batch, then frees the instance and looks again. */
static void dyn_execute(void *arg) {
  dyn_instance *di = arg;
  dyn_sched *s = di->s;
  hark_log_context saved;
  hark_sched_log_batch(&s->d, di->index, di->batch, di->n, &saved);
  uint64_t start = hark_now_ns();
  s->d.run(s->d.ctx, di->index, di->batch, di->n);
  uint64_t took = hark_now_ns() - start;
  uint64_t avg = atomic_load_explicit(&s->exec_avg_ns, memory_order_relaxed);
  /* The warm-up's executions (cold caches, lazy set-ups) are not averaged:
   * the average starts from the last of them. */
  bool warm = atomic_load_explicit(&s->exec_timed, memory_order_relaxed) >= INLINE_WARMUP;
  atomic_store_explicit(&s->exec_avg_ns, warm ? avg - avg / 8 + took / 8 : took,
                        memory_order_relaxed);
  atomic_fetch_add_explicit(&s->exec_timed, 1, memory_order_relaxed);
  hark_sched_log_restore(&saved);
  pthread_mutex_lock(&s->lock);
  di->busy = false;
  di->n = 0;
  s->n_busy--;
  s->users++;
  pthread_mutex_unlock(&s->lock);
  dyn_pump(s);
}

static void dyn_timer_fire(void *arg) {
  dyn_sched *s = arg;
  pthread_mutex_lock(&s->lock);
  s->users++;
  pthread_mutex_unlock(&s->lock);
  dyn_pump(s);
}

/* ---- the hark_sched interface ------------------------------------------------------ */

static hark_error *dyn_enqueue(hark_sched *base, hark_request *req) {
  dyn_sched *s = (dyn_sched *)base;
  order_slot *slot = NULL;
  if (s->ordered && !(slot = calloc(1, sizeof *slot)))
    return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  uint64_t now = hark_now_ns();
  hark_error *err = NULL;
  pthread_mutex_lock(&s->lock);
  uint32_t priority = hark_request_priority(req);
  if (s->stopping)
    err = hark_error_new(HARK_ERR_UNAVAILABLE, "model '%s' version %lld is unloading", s->d.name,
                         (long long)s->d.version);
  else if (s->priority_levels && priority > s->priority_levels)
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "priority %u is outside [1, %u] for model '%s' (0 means the default)",
                         priority, s->priority_levels, s->d.name);
  else
    err = hark_queue_push(s->queue, req, priority, hark_request_timeout_us(req),
                          hark_request_batch_size(req), now);
  if (err) {
    pthread_mutex_unlock(&s->lock);
    free(slot);
    return err;
  }
  /* Nothing can dequeue the request before we unlock. */
  hark_request_set_queued_ns(req, now);
  if (slot) order_track(s, req, slot);
  s->users++;
  pthread_mutex_unlock(&s->lock);
  dyn_pump(s);
  return NULL;
}

static void dyn_stop(hark_sched *base) {
  dyn_sched *s = (dyn_sched *)base;
  pthread_mutex_lock(&s->lock);
  s->stopping = true; /* also makes the batcher flush instead of waiting */
  s->users++;
  pthread_mutex_unlock(&s->lock);
  dyn_pump(s);
  pthread_mutex_lock(&s->lock);
  while (s->users || s->n_busy || hark_queue_size(s->queue))
    pthread_cond_wait(&s->idle, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

static uint32_t dyn_queued(const hark_sched *base) {
  const dyn_sched *s = (const dyn_sched *)base;
  return atomic_load(&((dyn_sched *)s)->queued);
}

static void dyn_destroy(dyn_sched *s) {
  if (s->insts)
    for (uint32_t i = 0; i < s->n_insts; i++) free(s->insts[i].batch);
  free(s->insts);
  free(s->items);
  hark_queue_free(s->queue);
  /* After stop every request was final, so every slot was delivered; this
   * only matters for a scheduler that never ran. */
  for (order_slot *slot = s->ohead, *next; slot; slot = next) {
    next = slot->next;
    for (order_msg *m = slot->head, *mn; m; m = mn) {
      mn = m->next;
      hark_response_free(m->resp);
      hark_error_free(m->err);
      if (m != &slot->final_msg) free(m);
    }
    free(slot);
  }
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->idle);
  pthread_mutex_destroy(&s->olock);
  free(s);
}

static void dyn_free(hark_sched *base) {
  dyn_sched *s = (dyn_sched *)base;
  /* A late timer fire may still be pumping: wait it out. */
  hark_pool_timer_cancel(s->d.pool, &s->timer);
  dyn_destroy(s);
}

static const hark_sched_ops dyn_ops = {
    .enqueue = dyn_enqueue,
    .stop = dyn_stop,
    .free = dyn_free,
    .queued = dyn_queued,
};

hark_error *hark_sched_dynamic_new(const hark_sched_desc *desc, hark_sched **out) {
  *out = NULL;
  const hark_model_config *cfg = desc->config;
  uint32_t n_insts = desc->n_instances;
  if (n_insts == 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "model '%s' has no instances to run on",
                          desc->name);
  dyn_sched *s = calloc(1, sizeof *s);
  if (!s) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  s->base.ops = &dyn_ops;
  s->d = *desc;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->idle, NULL);
  pthread_mutex_init(&s->olock, NULL);
  hark_timer_init(&s->timer, dyn_timer_fire, s);
  atomic_init(&s->queued, 0);
  atomic_init(&s->exec_avg_ns, 0);
  atomic_init(&s->exec_timed, 0);

  /* The default scheduler has no priorities or queue policies (Triton's
   * config has nowhere to put them without dynamic_batching). */
  const hark_dynamic_batching none = {0};
  const hark_dynamic_batching *db = cfg->dynamic_batching.enabled ? &cfg->dynamic_batching : &none;
  s->ordered = db->enabled && db->preserve_ordering;
  s->priority_levels = db->priority_levels;
  hark_batch_policy_init(&s->policy, cfg);
  hark_error *err = hark_queue_new(db, desc->default_max_queue, &s->queue);
  if (err) {
    hark_error *wrapped = hark_error_new(hark_error_code(err), "model '%s': %s", desc->name,
                                         hark_error_message(err));
    hark_error_free(err);
    dyn_destroy(s);
    return wrapped;
  }

  uint32_t per_batch = s->policy.single ? 1 : s->policy.max_batch_size;
  s->items_cap = s->policy.single ? 1 : s->policy.max_batch_size + 1;
  s->items = calloc(s->items_cap, sizeof *s->items);
  s->insts = calloc(n_insts, sizeof *s->insts);
  if (!s->items || !s->insts) {
    dyn_destroy(s);
    return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  }
  s->n_insts = n_insts;
  for (uint32_t i = 0; i < n_insts; i++) {
    dyn_instance *di = &s->insts[i];
    di->s = s;
    di->index = i;
    di->task.fn = dyn_execute;
    di->task.arg = di;
    di->batch = calloc(per_batch, sizeof *di->batch);
    if (!di->batch) {
      dyn_destroy(s);
      return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
    }
  }
  *out = &s->base;
  return NULL;
}
