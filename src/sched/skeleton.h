/*
 * skeleton.h — private to src/sched: what the dynamic batcher (dynamic.c)
 * and the sequence batcher (sequence.c) share, written once in skeleton.c.
 * Each of them is this skeleton plus hooks for its own rules.
 *
 * The skeleton owns the scheduler lock, the embedded timer on the pool's
 * timer thread, the busy instances, the `users` count and the idle
 * condition that stop waits on, the stopping flag and the lock-free copy
 * of the queue size; and the pump, the one place batches are formed. The
 * scheduler struct starts with a hark_skel, its instance struct with a
 * hark_skel_inst.
 */
#ifndef HARK_SCHED_SKELETON_H
#define HARK_SCHED_SKELETON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "sched/sched_impl.h"

/* At most this many items a pass of the pump carries out of the lock. */
#define HARK_SKEL_OUT 32u

typedef struct hark_skel hark_skel;

/* One execution context. */
typedef struct hark_skel_inst {
  hark_skel *sk;
  uint32_t index; /* the descriptor's instance index */
  bool busy;      /* a batch is formed and its execution not done */
  hark_pool_task task;
  struct hark_skel_inst *launch_next; /* the claiming pump's launch list */
} hark_skel_inst;

/* What one pass of the pump takes out of the lock. */
typedef struct hark_skel_pass {
  hark_skel_inst *launch;   /* instances claimed with hark_skel_claim, for the pool */
  uint64_t wake_ns;         /* when to pass again; UINT64_MAX (the start): only on an event */
  uint32_t queued;          /* requests waiting now, for hark_sched_queued */
  void *out[HARK_SKEL_OUT]; /* the scheduler's, for its finish hook */
  uint32_t n_out;
  bool again; /* there may be more out: pass once more */
} hark_skel_pass;

typedef struct hark_skel_ops {
  /* Under the lock: one pass at `now` (expire, form batches for free
   * instances, claiming each; say when to look again). */
  void (*pass)(hark_skel *sk, uint64_t now, hark_skel_pass *p);
  /* Outside the lock, once the claimed instances went to the pool: what
   * the pass took out (callbacks, frees); called only when it took some
   * (n_out). NULL: nothing to finish. */
  void (*finish)(hark_skel *sk, hark_skel_pass *p);
  /* Outside the lock, on a worker: runs the batch formed for `inst`. */
  void (*execute)(hark_skel *sk, hark_skel_inst *inst);
  /* Under the lock, once execute returned, before `inst` is free again.
   * NULL: nothing to do. */
  void (*executed)(hark_skel *sk, hark_skel_inst *inst);
  /* Under the lock: accepts the request (enqueue). `arg` is the caller's. */
  hark_error *(*admit)(hark_skel *sk, hark_request *req, void *arg, uint64_t now);
  /* Under the lock: nothing is left that stop must wait for, beside users
   * and busy instances. */
  bool (*drained)(const hark_skel *sk);
  /* Outside the lock, before `inst`'s task goes to the pool: whether its
   * batch is bulk work (pool.h: at most threads - 1 bulk tasks run at
   * once). NULL: never. */
  bool (*bulk)(hark_skel *sk, hark_skel_inst *inst);
  /* Batches may run inline on a front end's thread that allows it, when
   * the model's executions are cheap (runtime/pool.h). */
  bool may_inline;
} hark_skel_ops;

struct hark_skel {
  hark_sched base; /* first: a scheduler is a hark_sched */
  hark_sched_desc d;
  const hark_skel_ops *ops;
  pthread_mutex_t lock;
  pthread_cond_t idle; /* stop waits for it */
  uint32_t users;      /* threads inside: enqueue, pump, execution wrap-up */
  uint32_t n_busy;     /* instances busy */
  bool stopping;       /* set by stop: refuse new requests, flush */
  bool flushing;       /* set by flush: flush (shutting down), still taking requests */
  hark_timer timer;
  atomic_uint queued; /* the last pass's count, for the lock-free getter */
  /* Wall time of an execution, a moving average over about the last 8
   * (written by whichever thread finished last: an estimate), and how many
   * have been timed: the expected cost of the next batch, which decides
   * whether it may run inline and which lane of the pool it queues in. */
  atomic_uint_fast64_t exec_avg_ns;
  atomic_uint exec_timed;
};

/* `base.ops` is the caller's to set. */
void hark_skel_init(hark_skel *sk, const hark_skel_ops *ops, const hark_sched_desc *desc);
void hark_skel_inst_init(hark_skel *sk, hark_skel_inst *inst, uint32_t index);
/* Cancels the timer (waiting out a late fire) and destroys the lock. */
void hark_skel_fini(hark_skel *sk);

/* Under the lock, in a pass: `inst` (free) has a batch: mark it busy and
 * put it on the pass's launch list. */
void hark_skel_claim(hark_skel *sk, hark_skel_inst *inst, hark_skel_pass *p);

/* The caller has counted itself in sk->users under sk->lock; the pump
 * uncounts it last. */
void hark_skel_pump(hark_skel *sk);

/* Admits `req` under the lock (UNAVAILABLE "... is unloading" once
 * stopping), then pumps. On error the caller keeps the request. */
hark_error *hark_skel_enqueue(hark_skel *sk, hark_request *req, void *arg);
/* Refuses new requests, pumps (the passes flush), and waits until no
 * thread is inside, no instance busy and the scheduler is drained. */
void hark_skel_stop(hark_skel *sk);
/* hark_sched_flush for any skeleton scheduler: the passes flush from now
 * on (as when stopping) but new requests are still taken; pumps. */
void hark_skel_flush(hark_sched *base);
/* hark_sched_queued for any skeleton scheduler. */
uint32_t hark_skel_queued(const hark_sched *base);
uint32_t hark_skel_busy(const hark_sched *base);
/* What the model's next execution is expected to take (ns); 0 while its
 * first executions (cold caches, lazy set-ups) are still being timed. */
uint64_t hark_skel_cost(const hark_skel *sk);

#endif
