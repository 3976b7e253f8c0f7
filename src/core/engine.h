/*
 * engine.h — what the engine core (src/core) offers the schedulers: the
 * request timestamps they set and the one call that runs a batch.
 * Internal to harkd; backends and front ends use include/hark/ only.
 */
#ifndef HARK_ENGINE_H
#define HARK_ENGINE_H

#include "hark/server.h"

/* The request's current callback; schedulers may wrap it (e.g. to keep
 * responses in order) with hark_request_set_callback(). */
void hark_request_get_callback(const hark_request *req, hark_response_fn *fn,
                               void **userp);
/* When hark_server_infer accepted it. */
uint64_t hark_request_received_ns(const hark_request *req);
/* Set by the scheduler when it queues the request. */
void hark_request_set_queued_ns(hark_request *req, uint64_t ns);
uint64_t hark_request_queued_ns(const hark_request *req);

hark_server *hark_model_server(const hark_model *model);
uint32_t hark_model_instance_count(const hark_model *model);
hark_instance *hark_model_instance_at(hark_model *model, uint32_t i);

/*
 * Runs one batch on `instance`, on the calling thread, through the backend's
 * execute. Records execution statistics (queue time ends, compute begins).
 * If the backend refuses the batch, every request gets that error as its
 * FINAL. The caller guarantees the instance runs nothing else meanwhile and
 * that 1 <= n and the batch fits max_batch_size. After it returns the
 * requests belong to the backend (or are already complete): the caller must
 * not touch them.
 */
void hark_model_execute(hark_model *model, hark_instance *instance,
                        hark_request **requests, uint32_t n);

#endif
