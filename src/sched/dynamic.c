/*
 * dynamic.c — the default scheduler and the dynamic batcher: one machinery,
 * the default scheduler being the case of one request per execution.
 *
 * The scheduler is the skeleton (skeleton.c: lock, pump, timer, stop,
 * instances) with this file's rules. Requests enter a hark_queue (priority
 * levels, bounds, timeouts) under the lock. A pass of the pump expires
 * timeouts, then while an instance is free and the batcher (batcher.h)
 * says "dispatch k", moves k requests into that instance's batch and
 * claims it; the timer is armed for the earliest of the batcher's wait and
 * the next request deadline. REJECT timeouts leave the lock in chunks of
 * HARK_SKEL_OUT, completed outside it (another pass takes the rest). This
 * scheduler's batches may run inline (skeleton.c) once enough executions
 * have been timed to know they are cheap.
 *
 * With adaptive_queue_delay, the batcher's max_queue_delay is not fixed:
 * before each decision it is the controller's (adaptive.h), and each
 * batch formed tells the controller how deep the queue was.
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
#include "sched/adaptive.h"
#include "sched/batcher.h"
#include "sched/queue.h"
#include "sched/skeleton.h"
#include "util/alloc.h"

typedef struct dyn_sched dyn_sched;

typedef struct dyn_instance {
  hark_skel_inst base;  /* first */
  hark_request **batch; /* max(1, max_batch_size) slots */
  uint32_t n;
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
  hark_skel sk; /* first */
  hark_queue *queue;
  hark_batch_policy policy; /* its max_queue_delay_ns is adapt's, when adaptive */
  hark_adaptive adapt;
  uint32_t priority_levels; /* 0: priorities off, request priorities ignored */
  hark_batch_item *items;   /* scratch for the batcher, items_cap long */
  uint32_t items_cap;
  dyn_instance *insts;
  uint32_t n_insts, next_inst;

  bool ordered;          /* preserve_ordering */
  pthread_mutex_t olock; /* after sk.lock when both are held */
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
  order_msg *m = (flags & HARK_RESPONSE_FINAL) ? &slot->final_msg : hark_xmalloc(sizeof *m);
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

/* Wraps req's callback. Called with the lock held, once req is accepted. */
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
    if (!di->base.busy) {
      s->next_inst = (s->next_inst + i + 1) % s->n_insts;
      return di;
    }
  }
  return NULL;
}

/* Forms batches for free instances, claiming each. Returns when the
 * batcher next wants to look (UINT64_MAX: only when something changes).
 * Called with the lock held. */
static uint64_t form_batches(dyn_sched *s, uint64_t now, hark_skel_pass *p) {
  while (hark_queue_size(s->queue) > 0) {
    bool any_free = false;
    for (uint32_t i = 0; i < s->n_insts && !any_free; i++) any_free = !s->insts[i].base.busy;
    if (!any_free) return UINT64_MAX; /* a finishing execution pumps again */

    uint32_t n = 0;
    uint64_t first = UINT64_MAX;
    for (const hark_queue_node *node = hark_queue_first(s->queue); node && n < s->items_cap;
         node = hark_queue_next(s->queue, node)) {
      s->items[n] =
          (hark_batch_item){hark_queue_node_batch_size(node), hark_queue_node_enqueued_ns(node)};
      if (s->items[n].enqueued_ns < first) first = s->items[n].enqueued_ns;
      n++;
    }
    if (s->adapt.enabled) s->policy.max_queue_delay_ns = hark_adaptive_delay_for(&s->adapt, first);
    hark_batch_decision d;
    hark_batch_decide(&s->policy, s->items, n, s->sk.stopping, now, &d);
    if (d.n_requests == 0) return d.wait_until_ns;

    hark_adaptive_formed(&s->adapt, hark_queue_size(s->queue));
    dyn_instance *di = free_instance(s);
    di->n = hark_queue_pop(s->queue, (void **)di->batch, d.n_requests);
    hark_skel_claim(&s->sk, &di->base, p);
  }
  return UINT64_MAX;
}

/* The pass: timeouts first (REJECTed requests leave in p->out), then
 * batches; wake for the earlier of the batcher's wait and the next
 * request deadline. */
static void dyn_pass(hark_skel *sk, uint64_t now, hark_skel_pass *p) {
  dyn_sched *s = (dyn_sched *)sk;
  p->n_out = hark_queue_expire(s->queue, now, p->out, HARK_SKEL_OUT);
  p->again = p->n_out == HARK_SKEL_OUT; /* there may be more */
  uint64_t wake = form_batches(s, now, p);
  uint64_t deadline = hark_queue_next_deadline(s->queue);
  p->wake_ns = deadline < wake ? deadline : wake;
  p->queued = hark_queue_size(s->queue);
}

static void dyn_finish(hark_skel *sk, hark_skel_pass *p) {
  (void)sk;
  for (uint32_t i = 0; i < p->n_out; i++)
    hark_request_complete(p->out[i], hark_error_new(HARK_ERR_DEADLINE, "Request timeout expired"));
}

/* On a worker (or inline): runs one formed batch (the skeleton times it). */
static void dyn_execute(hark_skel *sk, hark_skel_inst *inst) {
  dyn_instance *di = (dyn_instance *)inst;
  hark_log_context saved;
  hark_sched_log_batch(&sk->d, inst->index, di->batch, di->n, &saved);
  sk->d.run(sk->d.ctx, inst->index, di->batch, di->n);
  hark_sched_log_restore(&saved);
}

static void dyn_executed(hark_skel *sk, hark_skel_inst *inst) {
  dyn_sched *s = (dyn_sched *)sk;
  ((dyn_instance *)inst)->n = 0;
  if (s->adapt.enabled && sk->n_busy == 1 && hark_queue_size(s->queue) == 0)
    hark_adaptive_idle(&s->adapt, hark_now_ns()); /* the last execution, nothing waiting */
}

static bool dyn_drained(const hark_skel *sk) {
  return hark_queue_size(((const dyn_sched *)sk)->queue) == 0;
}

/* ---- the hark_sched interface ------------------------------------------------------ */

/* Under the lock: a priority the model has, and room in that level's
 * queue; then, with preserve_ordering, the callback is wrapped. */
static hark_error *dyn_admit(hark_skel *sk, hark_request *req, void *slot, uint64_t now) {
  dyn_sched *s = (dyn_sched *)sk;
  uint32_t priority = hark_request_priority(req);
  if (s->priority_levels && priority > s->priority_levels)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "priority %u is outside [1, %u] for model '%s' (0 means the default)",
                          priority, s->priority_levels, sk->d.name);
  hark_error *err = hark_queue_push(s->queue, req, priority, hark_request_timeout_us(req),
                                    hark_request_batch_size(req), now);
  if (!err && slot) order_track(s, req, slot);
  return err;
}

static hark_error *dyn_enqueue(hark_sched *base, hark_request *req) {
  dyn_sched *s = (dyn_sched *)base;
  order_slot *slot = s->ordered ? hark_xcalloc(1, sizeof *slot) : NULL;
  hark_error *err = hark_skel_enqueue(&s->sk, req, slot);
  if (err) free(slot);
  return err;
}

static void dyn_stop(hark_sched *base) { hark_skel_stop((hark_skel *)base); }

/* The default scheduler has no queue delay to report. */
static const hark_adaptive *dyn_delay(const hark_sched *base) {
  const dyn_sched *s = (const dyn_sched *)base;
  return s->policy.single ? NULL : &s->adapt;
}

static void dyn_destroy(dyn_sched *s) {
  hark_skel_fini(&s->sk);
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
  pthread_mutex_destroy(&s->olock);
  free(s);
}

static void dyn_free(hark_sched *base) { dyn_destroy((dyn_sched *)base); }

static const hark_sched_ops dyn_ops = {
    .enqueue = dyn_enqueue,
    .stop = dyn_stop,
    .free = dyn_free,
    .queued = hark_skel_queued,
    .busy = hark_skel_busy,
    .delay = dyn_delay,
};

static const hark_skel_ops dyn_skel_ops = {
    .pass = dyn_pass,
    .finish = dyn_finish,
    .execute = dyn_execute,
    .executed = dyn_executed,
    .admit = dyn_admit,
    .drained = dyn_drained,
    .may_inline = true,
};

hark_error *hark_sched_dynamic_new(const hark_sched_desc *desc, hark_sched **out) {
  *out = NULL;
  const hark_model_config *cfg = desc->config;
  uint32_t n_insts = desc->n_instances;
  if (n_insts == 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "model '%s' has no instances to run on",
                          desc->name);
  dyn_sched *s = hark_xcalloc(1, sizeof *s);
  hark_skel_init(&s->sk, &dyn_skel_ops, desc);
  s->sk.base.ops = &dyn_ops;
  pthread_mutex_init(&s->olock, NULL);

  /* The default scheduler has no priorities or queue policies (Triton's
   * config has nowhere to put them without dynamic_batching). */
  const hark_dynamic_batching none = {0};
  const hark_dynamic_batching *db = cfg->dynamic_batching.enabled ? &cfg->dynamic_batching : &none;
  s->ordered = db->enabled && db->preserve_ordering;
  s->priority_levels = db->priority_levels;
  hark_batch_policy_init(&s->policy, cfg);
  hark_adaptive_init(&s->adapt, s->policy.single ? NULL : &cfg->dynamic_adaptive_delay,
                     s->policy.max_queue_delay_ns);
  s->policy.max_queue_delay_ns = atomic_load(&s->adapt.delay_ns);
  hark_error *err = hark_queue_new(db, desc->default_max_queue, &s->queue);
  if (err) {
    hark_error *wrapped =
        hark_error_new(hark_error_code(err), "model '%s': %s", desc->name, hark_error_message(err));
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
    hark_skel_inst_init(&s->sk, &di->base, i);
    di->batch = calloc(per_batch, sizeof *di->batch);
    if (!di->batch) {
      dyn_destroy(s);
      return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
    }
  }
  *out = &s->sk.base;
  return NULL;
}
