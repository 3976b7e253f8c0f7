/*
 * hark/request.h — inference requests and responses, as seen by the front
 * ends that build them and the backends that execute them.
 *
 * Life of a request:
 *   1. a front end creates it for a model (hark_request_new), adds inputs,
 *      parameters and a response callback, then calls hark_server_infer();
 *   2. on success the server owns it: it validates, queues, batches, and
 *      hands it to a backend's execute(), whose success passes ownership on
 *      to the backend;
 *   3. the backend (or the server, on error) sends zero or more responses
 *      and exactly one FINAL, then never touches the request again. The
 *      server frees the request after delivering the FINAL.
 * The response callback may run on any thread; it owns what it is given.
 */
#ifndef HARK_REQUEST_H
#define HARK_REQUEST_H

#include "hark/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct hark_model hark_model;
typedef struct hark_request hark_request;
typedef struct hark_response hark_response;

/* Request flags (sequence control, Triton's START/END). */
#define HARK_REQUEST_SEQUENCE_START 1u
#define HARK_REQUEST_SEQUENCE_END 2u

/* Response flags. */
#define HARK_RESPONSE_FINAL 1u

/*
 * Called once per response and once with HARK_RESPONSE_FINAL (which may
 * carry a response, or NULL when the final only closes the stream or
 * reports an error). The callee owns `resp` (hark_response_free) and `err`
 * (hark_error_free); both may be NULL. Runs on a worker thread: it must not
 * block.
 */
typedef void (*hark_response_fn)(hark_response *resp, uint32_t flags, hark_error *err, void *userp);

/* ---- building a request (front ends, ensembles) -------------------------- */

/* Takes its own reference on `model`. Never NULL. */
hark_request *hark_request_new(hark_model *model);
/* Frees a request the server never accepted (hark_server_infer failed). */
void hark_request_free(hark_request *req);

/* Copies `id`. */
void hark_request_set_id(hark_request *req, const char *id);
void hark_request_set_priority(hark_request *req, uint32_t priority);
/* Queue timeout override, microseconds; 0 = the model's default. */
void hark_request_set_timeout_us(hark_request *req, uint64_t timeout_us);
void hark_request_set_flags(hark_request *req, uint32_t flags);
void hark_request_set_correlation_id(hark_request *req, uint64_t id);
/* String correlation id (copied); replaces a numeric one. */
void hark_request_set_correlation_id_str(hark_request *req, const char *id);

/*
 * Correlation-id namespaces. A sequence is named by its id and the
 * namespace of the requests that carry it: the same id in two namespaces
 * names two unrelated sequences, and a request can neither reach nor learn
 * of a sequence in another namespace. The front end that builds a request
 * sets its namespace from who chose the id; a client never picks it.
 */
typedef enum hark_corr_ns {
  HARK_CORR_NS_LOCAL = 0,   /* in-process callers (the default): tests, tools */
  HARK_CORR_NS_KSERVE_HTTP, /* ids KServe HTTP clients choose */
  HARK_CORR_NS_KSERVE_GRPC, /* ids KServe gRPC clients choose */
  HARK_CORR_NS_SESSION,     /* ids the server allocates to speech streams */
} hark_corr_ns;
void hark_request_set_correlation_ns(hark_request *req, hark_corr_ns ns);
/*
 * The client the request is for: the peer's IP address as the front end
 * that received it saw it ("192.0.2.7", "2001:db8::1"; never the port, as
 * one client opens many connections), copied, at most
 * HARK_REQUEST_CLIENT_MAX - 1 bytes (longer is cut). NULL or "" clears it.
 * Requests with no transport (in-process callers) have none; an
 * ensemble's step requests carry their parent's. A backend that shares
 * something among clients (a pool of decoders) keys its shares by it.
 * Behind a proxy every client is the proxy's address.
 */
#define HARK_REQUEST_CLIENT_MAX 64
void hark_request_set_client(hark_request *req, const char *client);
/* Custom parameter, both copied; later sets of a key replace earlier. */
void hark_request_set_parameter(hark_request *req, const char *key, const char *value);

/*
 * Adds an input whose data stays owned by the caller and must outlive the
 * request: attach the owning buffer with hark_request_attach() to tie their
 * lifetimes. Copies name and shape. Fails on a duplicate name.
 */
hark_error *hark_request_add_input(hark_request *req, const char *name, hark_datatype dt,
                                   const int64_t *shape, uint32_t ndims, const void *data,
                                   size_t byte_size);
/* Ties `ptr` to the request: free_fn(ptr) runs when the request is freed. */
void hark_request_attach(hark_request *req, void *ptr, void (*free_fn)(void *));
/* Asks for an output by name (copied); none asked means all outputs. */
void hark_request_add_requested_output(hark_request *req, const char *name);
/* Where responses go. Must be set before hark_server_infer. */
void hark_request_set_callback(hark_request *req, hark_response_fn fn, void *userp);

/*
 * Cancellation. A front end cannot touch a request once the server owns
 * it, so it cancels through a token: a refcounted flag it creates per
 * client call (or connection), hands to each request it builds, and sets
 * when the client cancels or goes away. The server completes a request
 * still queued with CANCELLED without running it; a backend polls
 * hark_request_is_cancelled between units of work (Triton's
 * TRITONBACKEND_RequestIsCancelled) and fails the request with CANCELLED.
 * Setting is one-way and any thread may do it.
 */
typedef struct hark_cancel hark_cancel;
/* One reference, the caller's. Never NULL. */
hark_cancel *hark_cancel_new(void);
void hark_cancel_ref(hark_cancel *c);
/* Drops a reference; the last frees it. NULL is fine. */
void hark_cancel_unref(hark_cancel *c);
/* Any thread: every request holding the token is cancelled. */
void hark_cancel_set(hark_cancel *c);
bool hark_cancel_is_set(const hark_cancel *c);
/* The request takes its own reference on `c` (NULL clears it). */
void hark_request_set_cancel(hark_request *req, hark_cancel *c);

/* ---- reading a request (backends, schedulers) ---------------------------- */

hark_model *hark_request_model(const hark_request *req);
const char *hark_request_id(const hark_request *req); /* "" when unset */
uint32_t hark_request_priority(const hark_request *req);
uint64_t hark_request_timeout_us(const hark_request *req);
uint32_t hark_request_flags(const hark_request *req);
uint64_t hark_request_correlation_id(const hark_request *req);
const char *hark_request_correlation_id_str(const hark_request *req); /* or NULL */
/* Since backend API 1.3. A backend that keeps its own per-sequence tables
 * must key them by the namespace too (or use hark_request_sequence_state). */
hark_corr_ns hark_request_correlation_ns(const hark_request *req);
const char *hark_request_parameter(const hark_request *req, const char *key);
/* Since backend API 1.5. True once the request's client cancelled or went
 * away (its token, above, is set): stop working on it and complete it
 * with HARK_ERR_CANCELLED. Any thread, cheap (one atomic load). */
bool hark_request_is_cancelled(const hark_request *req);
/* Since backend API 1.6. The client's address (hark_request_set_client), or
 * "" when the request has none; valid as long as the request. */
const char *hark_request_client(const hark_request *req);
uint32_t hark_request_input_count(const hark_request *req);
const hark_tensor *hark_request_input(const hark_request *req, uint32_t i);
const hark_tensor *hark_request_input_by_name(const hark_request *req, const char *name);
/* Size of the batch dimension (shape[0] of the first input) when the model
 * batches, else 1. */
uint32_t hark_request_batch_size(const hark_request *req);
/* True when `name` was asked for (or when no output was named). */
bool hark_request_output_requested(const hark_request *req, const char *name);
uint32_t hark_request_requested_output_count(const hark_request *req);
const char *hark_request_requested_output(const hark_request *req, uint32_t i);

/*
 * Backends may mark when input preparation ended and inference ended, for
 * the compute_input / compute_infer / compute_output statistics. Unmarked,
 * the whole execution counts as compute_infer.
 */
void hark_request_mark_compute(hark_request *req, uint64_t input_end_ns, uint64_t infer_end_ns);
/*
 * (1.4) A backend that computes a batch's requests in turns (groups of
 * different shapes, one after another) marks when this request's own turn
 * began: the time before it counts as queue time, as Triton's compute_start,
 * and compute_input starts there. Ignored if earlier than the execution's
 * start.
 */
void hark_request_mark_compute_start(hark_request *req, uint64_t start_ns);

/*
 * Sequence models (sequence_batching): the backend's own state for the
 * request's sequence, NULL until the backend sets it. The sequence batcher
 * runs a sequence's requests one at a time, in order, so the backend may use
 * the state without locking. A backend that frees the state itself (on the
 * END request, say) sets it back to NULL; state still set when the engine
 * drops the sequence (after END, on idle timeout, at unload) goes to the
 * backend's sequence_fini. Outside a sequence the getter returns NULL and
 * the setter is ignored.
 */
void *hark_request_sequence_state(const hark_request *req);
void hark_request_set_sequence_state(hark_request *req, void *state);

/* ---- responding (backends, schedulers) ----------------------------------- */

/* A response for `req`; owned by the caller until sent. Never NULL. */
hark_response *hark_response_new(hark_request *req);
/*
 * Adds an output and returns its zeroed buffer of `byte_size` bytes in
 * *buffer, owned by the response. Copies name and shape.
 */
hark_error *hark_response_add_output(hark_response *resp, const char *name, hark_datatype dt,
                                     const int64_t *shape, uint32_t ndims, size_t byte_size,
                                     void **buffer);
/* Response parameters (copied), e.g. sequence_id, text results. */
void hark_response_set_parameter(hark_response *resp, const char *key, const char *value);
/*
 * Sends the response. Takes ownership of `resp` and `err` (NULL = success).
 * With HARK_RESPONSE_FINAL the request is complete: the caller must not
 * touch the request afterwards.
 */
void hark_response_send(hark_response *resp, uint32_t flags, hark_error *err);
/*
 * Completes the request with a FINAL that carries no response: an error
 * (owned by the call), or NULL for the end of a decoupled stream.
 */
void hark_request_complete(hark_request *req, hark_error *err);

/* ---- reading a response (front ends) ------------------------------------- */

const char *hark_response_id(const hark_response *resp); /* the request's id */
uint32_t hark_response_output_count(const hark_response *resp);
const hark_tensor *hark_response_output(const hark_response *resp, uint32_t i);
const hark_tensor *hark_response_output_by_name(const hark_response *resp, const char *name);
uint32_t hark_response_parameter_count(const hark_response *resp);
/* The i-th parameter; returns its value and sets *key. */
const char *hark_response_parameter_at(const hark_response *resp, uint32_t i, const char **key);
const char *hark_response_parameter(const hark_response *resp, const char *key);
void hark_response_free(hark_response *resp);

#ifdef __cplusplus
}
#endif
#endif
