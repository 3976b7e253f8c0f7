/*
 * sched.h — the schedulers (src/sched).
 *
 * Every loaded model version has one scheduler, chosen by its config as in
 * Triton: ensemble_scheduling → ensemble; sequence_batching → sequence
 * batcher; dynamic_batching → dynamic batcher; otherwise default (one request per execution, FIFO, by
 * priority). A scheduler owns its queue: requests enter with
 * hark_sched_enqueue(), leave as batches handed to hark_model_execute() on a
 * worker of the shared pool (src/runtime/pool.h), one batch per instance at
 * a time.
 */
#ifndef HARK_SCHED_H
#define HARK_SCHED_H

#include "hark/server.h"
#include "runtime/pool.h"

typedef struct hark_sched hark_sched;

/* Builds the scheduler the model's config asks for. The model's instances
 * are already initialised. */
hark_error *hark_sched_new(hark_model *model, hark_server *server,
                           hark_pool *pool, uint32_t default_max_queue,
                           hark_sched **out);
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
/* Stops (if not yet) and frees. */
void hark_sched_free(hark_sched *sched);
/* Requests waiting in the queue (not yet executing). */
uint32_t hark_sched_queued(const hark_sched *sched);

#endif
