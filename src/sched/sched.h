/*
 * sched.h — the schedulers (src/sched).
 *
 * Every loaded model version has one scheduler, chosen by its config as in
 * Triton: ensemble_scheduling → ensemble; sequence_batching → sequence
 * batcher; dynamic_batching → dynamic batcher; otherwise default (one
 * request per execution, FIFO, by priority). A scheduler owns its queue:
 * requests enter with hark_sched_enqueue(), leave as batches handed to the
 * descriptor's run function on a worker of the shared pool
 * (src/runtime/pool.h), one batch per instance at a time.
 *
 * A scheduler never sees the model object or the server that holds it: it
 * is built from a descriptor (Triton's scheduler gets a StandardRunFunc
 * the same way), which core/model.c fills from the loaded model, and a test
 * from a fake. The ensemble is the one exception: it is a client of the
 * server, like a front end, and reaches its steps through the server's
 * public API.
 */
#ifndef HARK_SCHED_H
#define HARK_SCHED_H

#include "hark/server.h"
#include "runtime/pool.h"

typedef struct hark_sched hark_sched;

/*
 * What a scheduler is built from. The scheduler copies the struct; what it
 * points at (the config, the name, the pool, ctx) must outlive the
 * scheduler. The callbacks run on whatever thread the scheduler is on (a
 * worker, the pool's timer thread, an enqueuer), never under its lock.
 */
typedef struct hark_sched_desc {
  const hark_model_config *config; /* picks the scheduler and its policy */
  const char *name;                /* the model's name, for messages and logs */
  int64_t version;                 /* the model's version, likewise */
  uint32_t n_instances;            /* execution contexts, 0..n-1 (ensembles: 0) */
  hark_pool *pool;                 /* where batches run; its timer */
  uint32_t default_max_queue;      /* the queue bound where the config sets none */
  void *ctx;                       /* the first argument of every callback */
  /*
   * Runs one batch on instance `instance`, on the calling thread. The
   * scheduler guarantees the instance runs nothing else meanwhile, and
   * 1 <= n <= the model's max batch. Every request gets its FINAL from
   * run (or later, from a decoupled backend): after run returns the
   * requests are not the scheduler's to touch. Required, except for
   * ensembles.
   */
  void (*run)(void *ctx, uint32_t instance, hark_request **requests, uint32_t n);
  /* Frees the backend state of a sequence that was dropped (ended,
   * expired idle, restarted, or the scheduler stopped); `state` is never
   * NULL and that sequence runs nothing meanwhile. Sequence batching
   * only; NULL when the backend keeps no per-sequence state. */
  void (*sequence_fini)(void *ctx, void *state);
  /* The instance's name for log lines; NULL: its index. */
  const char *(*instance_name)(void *ctx, uint32_t instance);
  /* Ensembles only: the server whose models run the steps, used through
   * its public API (hark_server_model_acquire, hark_server_infer). */
  hark_server *server;
} hark_sched_desc;

/* Builds the scheduler the config asks for. The instances are ready to
 * run. */
hark_error *hark_sched_new(const hark_sched_desc *desc, hark_sched **out);
/*
 * Queues a validated request. On success the scheduler owns it and it will
 * get exactly one FINAL: its response(s), or an error — REJECT timeouts
 * ("Request timeout expired", HARK_ERR_DEADLINE), or UNAVAILABLE if the
 * scheduler is stopped while it waits. Fails with UNAVAILABLE ("Exceeds
 * maximum queue size") when its priority level's queue is full, or when the
 * scheduler is stopping; the caller then keeps the request.
 */
hark_error *hark_sched_enqueue(hark_sched *sched, hark_request *req);
/* Refuses new requests, lets every queued request run, and returns once no
 * execution is in progress. Idempotent. */
void hark_sched_stop(hark_sched *sched);
/* Shutting down: stops waiting (idle sequences end at once, what waits
 * for a slot or a fuller batch goes on now) without refusing requests or
 * blocking. Idempotent. */
void hark_sched_flush(hark_sched *sched);
/* Stops (if not yet) and frees. */
void hark_sched_free(hark_sched *sched);
/* Requests waiting in the queue (not yet executing). */
uint32_t hark_sched_queued(const hark_sched *sched);
/* Requests waiting within another quota group's own share (the sequence
 * batcher's backlog of the group `ns` is not in), which a new sequence in
 * namespace `ns` does not wait behind; any thread, no lock, a recent
 * snapshot. 0 for schedulers without quotas. */
uint32_t hark_sched_parked(const hark_sched *sched, uint32_t ns);
/* Instances executing a batch now (an ensemble's steps count in their own
 * models). */
uint32_t hark_sched_busy(const hark_sched *sched);

/* The queue delay a batcher decides with: fixed max_queue_delay, or where
 * the config's adaptive_queue_delay has moved it. */
typedef struct hark_sched_delay {
  bool adaptive;
  uint64_t delay_us;          /* in force now */
  uint64_t min_us, max_us;    /* its bounds (both the fixed delay when not adaptive) */
  uint64_t widened, narrowed; /* rungs moved since load (adaptive only) */
} hark_sched_delay;

/* Any thread, no lock. False for schedulers without a queue delay: the
 * default scheduler, the sequence batcher's direct strategy, ensembles. */
bool hark_sched_queue_delay(const hark_sched *sched, hark_sched_delay *out);

/* The implicit sequence state (sequence_batching.state) a sequence
 * batcher holds now: the bytes of its state tensors, and the sequences
 * holding them. Each goes back to 0 once every sequence has ended (END,
 * idle expiry, unload). */
typedef struct hark_sched_seq_state {
  uint64_t bytes;
  uint64_t sequences;
} hark_sched_seq_state;

/* Any thread, no lock; a recent snapshot. False for schedulers that keep
 * no implicit state: all but the sequence batcher of a model with
 * sequence_batching.state. */
bool hark_sched_sequence_state(const hark_sched *sched, hark_sched_seq_state *out);

#endif
