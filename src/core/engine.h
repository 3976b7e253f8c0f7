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
 * Sequence models (src/sched/sequence.c). Points the request's sequence
 * state (hark_request_sequence_state) at `slot`, which the caller keeps
 * valid while the request runs; NULL detaches it.
 */
void hark_request_set_sequence_slot(hark_request *req, void **slot);
/*
 * Removes output `name` from `resp` and hands it over in *out: out->data is
 * the caller's to free() (name in *out is NULL). False when there is no
 * such output. Implicit sequence state leaves responses this way.
 */
bool hark_response_take_output(hark_response *resp, const char *name, hark_tensor *out);
/* Frees per-sequence backend state through the backend's sequence_fini
 * (read only from backends built on API 1.1 or newer); a no-op for NULL
 * state. Never call it while that sequence's request executes. */
void hark_model_sequence_fini(hark_model *model, void *state);

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
