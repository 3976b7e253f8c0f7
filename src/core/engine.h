/*
 * engine.h — what the engine core (src/core) offers the schedulers beyond
 * the public API: the request timestamps they set, callback wrapping, and
 * the sequence batcher's hooks on requests and responses. Running a batch
 * is not here: a scheduler gets it from its descriptor (sched/sched.h).
 * Internal to harkd; backends and front ends use include/hark/ only.
 */
#ifndef HARK_ENGINE_H
#define HARK_ENGINE_H

#include "hark/server.h"

/* The request's current callback; schedulers may wrap it (e.g. to keep
 * responses in order) with hark_request_set_callback(). */
void hark_request_get_callback(const hark_request *req, hark_response_fn *fn, void **userp);
/* When hark_server_infer accepted it. */
uint64_t hark_request_received_ns(const hark_request *req);
/* Set by the scheduler when it queues the request. */
void hark_request_set_queued_ns(hark_request *req, uint64_t ns);
uint64_t hark_request_queued_ns(const hark_request *req);

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

#endif
