/*
 * request.c — inference requests and responses: building them, reading
 * them, and the one path every request leaves by. A response that carries
 * HARK_RESPONSE_FINAL (or hark_request_complete) records the request's
 * statistics, calls the front end's callback, and frees the request, which
 * drops its model reference. A request can only finish once: a second
 * final is a backend bug, logged and dropped rather than delivered twice.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "util/alloc.h"
#include "util/log.h"

static char *dup_or_empty(const char *s) { return hark_xstrdup(s ? s : ""); }

/* A tensor's name, kept in `ns` when it fits. */
static const char *names_keep(hark_names *ns, const char *name) {
  size_t len = strlen(name) + 1;
  if (len > sizeof ns->buf - ns->used) return hark_xstrdup(name);
  char *kept = memcpy(ns->buf + ns->used, name, len);
  ns->used += (uint32_t)len;
  return kept;
}

static void names_drop(const hark_names *ns, const char *name) {
  uintptr_t p = (uintptr_t)name, buf = (uintptr_t)ns->buf;
  if (p < buf || p >= buf + sizeof ns->buf) free((char *)name);
}

/* `arr` (of `n` elements of `size`) with room for one more: it grows to 4,
 * then doubles, so that a request's few inputs and a response's few
 * outputs cost one allocation each rather than one per element. */
static void *room_for_one(void *arr, uint32_t n, size_t size) {
  if (n == 0 || (n >= 4 && !(n & (n - 1))))
    return hark_xrealloc(arr, (n ? 2 * (size_t)n : 4) * size);
  return arr;
}

hark_request *hark_request_new(hark_model *model) {
  hark_request *req = hark_xcalloc(1, sizeof *req);
  req->model = model;
  hark_model_acquire(model);
  req->batch_size = 1;
  atomic_init(&req->finished, false);
  return req;
}

void hark_request_free(hark_request *req) {
  if (!req) return;
  for (uint32_t i = 0; i < req->n_inputs; i++) names_drop(&req->input_names, req->inputs[i].name);
  free(req->inputs);
  for (uint32_t i = 0; i < req->n_params; i++) {
    free(req->params[i].key);
    free(req->params[i].value);
  }
  free(req->params);
  for (uint32_t i = 0; i < req->n_requested; i++) free(req->requested[i]);
  free(req->requested);
  /* Attachments own input memory: free them last, newest first. */
  for (uint32_t i = req->n_attached; i-- > 0;)
    if (req->attached[i].free_fn) req->attached[i].free_fn(req->attached[i].ptr);
  free(req->attached);
  free(req->id);
  free(req->correlation_id_str);
  hark_cancel_unref(req->cancel);
  hark_model_release(req->model);
  free(req);
}

hark_cancel *hark_cancel_new(void) {
  hark_cancel *c = hark_xcalloc(1, sizeof *c);
  atomic_init(&c->refs, 1);
  atomic_init(&c->set, false);
  return c;
}

void hark_cancel_ref(hark_cancel *c) { atomic_fetch_add(&c->refs, 1); }

void hark_cancel_unref(hark_cancel *c) {
  if (c && atomic_fetch_sub(&c->refs, 1) == 1) free(c);
}

void hark_cancel_set(hark_cancel *c) { atomic_store(&c->set, true); }
bool hark_cancel_is_set(const hark_cancel *c) { return atomic_load(&((hark_cancel *)c)->set); }

void hark_request_set_cancel(hark_request *req, hark_cancel *c) {
  if (c) hark_cancel_ref(c);
  hark_cancel_unref(req->cancel);
  req->cancel = c;
}

bool hark_request_is_cancelled(const hark_request *req) {
  return req->cancel && hark_cancel_is_set(req->cancel);
}

void hark_request_set_client(hark_request *req, const char *client) {
  size_t n = client ? strnlen(client, sizeof req->client - 1) : 0;
  memcpy(req->client, client ? client : "", n);
  req->client[n] = '\0';
}

const char *hark_request_client(const hark_request *req) { return req->client; }

void hark_request_set_id(hark_request *req, const char *id) {
  free(req->id);
  req->id = dup_or_empty(id);
}
void hark_request_set_priority(hark_request *req, uint32_t p) { req->priority = p; }
void hark_request_set_timeout_us(hark_request *req, uint64_t t) { req->timeout_us = t; }
void hark_request_set_flags(hark_request *req, uint32_t flags) { req->flags = flags; }

void hark_request_set_correlation_id(hark_request *req, uint64_t id) {
  free(req->correlation_id_str);
  req->correlation_id_str = NULL;
  req->correlation_id = id;
}

void hark_request_set_correlation_id_str(hark_request *req, const char *id) {
  free(req->correlation_id_str);
  req->correlation_id_str = dup_or_empty(id);
  req->correlation_id = 0;
}

void hark_request_set_correlation_ns(hark_request *req, hark_corr_ns ns) {
  req->correlation_ns = ns;
}

/* Appends or replaces key=value in a growable kv array. */
static void kv_set(hark_kv **kv, uint32_t *n, const char *key, const char *value) {
  for (uint32_t i = 0; i < *n; i++)
    if (strcmp((*kv)[i].key, key) == 0) {
      free((*kv)[i].value);
      (*kv)[i].value = dup_or_empty(value);
      return;
    }
  hark_kv *grown = room_for_one(*kv, *n, sizeof **kv);
  *kv = grown;
  grown[*n].key = hark_xstrdup(key);
  grown[*n].value = dup_or_empty(value);
  (*n)++;
}

static const char *kv_get(const hark_kv *kv, uint32_t n, const char *key) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(kv[i].key, key) == 0) return kv[i].value;
  return NULL;
}

void hark_request_set_parameter(hark_request *req, const char *key, const char *value) {
  kv_set(&req->params, &req->n_params, key, value);
}

hark_error *hark_request_add_input(hark_request *req, const char *name, hark_datatype dt,
                                   const int64_t *shape, uint32_t ndims, const void *data,
                                   size_t byte_size) {
  if (!name || !*name) return hark_error_new(HARK_ERR_INVALID_ARG, "input name is empty");
  if (ndims > HARK_MAX_DIMS)
    return hark_error_new(HARK_ERR_INVALID_ARG, "input '%s' has %u dims; at most %d supported",
                          name, ndims, HARK_MAX_DIMS);
  if (hark_request_input_by_name(req, name))
    return hark_error_new(HARK_ERR_INVALID_ARG, "input '%s' is given more than once", name);
  hark_tensor *grown = room_for_one(req->inputs, req->n_inputs, sizeof *grown);
  req->inputs = grown;
  hark_tensor *t = &grown[req->n_inputs++];
  memset(t, 0, sizeof *t);
  t->name = names_keep(&req->input_names, name);
  t->datatype = dt;
  t->ndims = ndims;
  if (ndims) memcpy(t->shape, shape, ndims * sizeof *shape);
  t->data = data;
  t->byte_size = byte_size;
  return NULL;
}

void hark_request_attach(hark_request *req, void *ptr, void (*free_fn)(void *)) {
  hark_attachment *grown = room_for_one(req->attached, req->n_attached, sizeof *grown);
  req->attached = grown;
  grown[req->n_attached++] = (hark_attachment){ptr, free_fn};
}

void hark_request_add_requested_output(hark_request *req, const char *name) {
  for (uint32_t i = 0; i < req->n_requested; i++)
    if (strcmp(req->requested[i], name) == 0) return;
  char **grown = room_for_one(req->requested, req->n_requested, sizeof *grown);
  req->requested = grown;
  grown[req->n_requested++] = hark_xstrdup(name);
}

void hark_request_set_callback(hark_request *req, hark_response_fn fn, void *userp) {
  req->callback = fn;
  req->userp = userp;
}

void hark_request_get_callback(const hark_request *req, hark_response_fn *fn, void **userp) {
  *fn = req->callback;
  *userp = req->userp;
}

hark_model *hark_request_model(const hark_request *req) { return req->model; }
const char *hark_request_id(const hark_request *req) { return req->id ? req->id : ""; }
uint32_t hark_request_priority(const hark_request *req) { return req->priority; }
uint64_t hark_request_timeout_us(const hark_request *req) { return req->timeout_us; }
uint32_t hark_request_flags(const hark_request *req) { return req->flags; }
uint64_t hark_request_correlation_id(const hark_request *req) { return req->correlation_id; }
const char *hark_request_correlation_id_str(const hark_request *req) {
  return req->correlation_id_str;
}
hark_corr_ns hark_request_correlation_ns(const hark_request *req) { return req->correlation_ns; }
const char *hark_request_parameter(const hark_request *req, const char *key) {
  return kv_get(req->params, req->n_params, key);
}
uint32_t hark_request_input_count(const hark_request *req) { return req->n_inputs; }
const hark_tensor *hark_request_input(const hark_request *req, uint32_t i) {
  return i < req->n_inputs ? &req->inputs[i] : NULL;
}
const hark_tensor *hark_request_input_by_name(const hark_request *req, const char *name) {
  for (uint32_t i = 0; i < req->n_inputs; i++)
    if (strcmp(req->inputs[i].name, name) == 0) return &req->inputs[i];
  return NULL;
}
uint32_t hark_request_batch_size(const hark_request *req) { return req->batch_size; }

bool hark_request_output_requested(const hark_request *req, const char *name) {
  if (req->n_requested == 0) return true;
  for (uint32_t i = 0; i < req->n_requested; i++)
    if (strcmp(req->requested[i], name) == 0) return true;
  return false;
}
uint32_t hark_request_requested_output_count(const hark_request *req) { return req->n_requested; }
const char *hark_request_requested_output(const hark_request *req, uint32_t i) {
  return i < req->n_requested ? req->requested[i] : NULL;
}

void hark_request_mark_compute(hark_request *req, uint64_t input_end_ns, uint64_t infer_end_ns) {
  req->input_end_ns = input_end_ns;
  req->infer_end_ns = infer_end_ns;
}

void hark_backend_log_request(const hark_request *req) {
  if (!req) {
    hark_log_context_clear();
    return;
  }
  const char *seq = hark_request_correlation_id_str(req);
  uint64_t cid = hark_request_correlation_id(req);
  char num[24];
  if (!seq && cid) {
    snprintf(num, sizeof num, "%" PRIu64, cid);
    seq = num;
  }
  hark_log_context_set(hark_request_id(req), seq);
}

void hark_request_mark_compute_start(hark_request *req, uint64_t start_ns) {
  if (start_ns > req->exec_start_ns) req->exec_start_ns = start_ns;
}

uint64_t hark_request_received_ns(const hark_request *req) { return req->received_ns; }
void hark_request_set_queued_ns(hark_request *req, uint64_t ns) { req->queued_ns = ns; }
uint64_t hark_request_queued_ns(const hark_request *req) { return req->queued_ns; }

/* ---- responses ------------------------------------------------------------ */

hark_response *hark_response_new(hark_request *req) {
  hark_response *resp = hark_xcalloc(1, sizeof *resp);
  resp->req = req;
  resp->id = req->id && *req->id ? hark_xstrdup(req->id) : NULL; /* most have none */
  return resp;
}

hark_error *hark_response_add_output(hark_response *resp, const char *name, hark_datatype dt,
                                     const int64_t *shape, uint32_t ndims, size_t byte_size,
                                     void **buffer) {
  if (ndims > HARK_MAX_DIMS)
    return hark_error_new(HARK_ERR_INTERNAL, "output '%s' has too many dims (%u)", name, ndims);
  if (hark_response_output_by_name(resp, name))
    return hark_error_new(HARK_ERR_INTERNAL, "output '%s' added twice", name);
  uint32_t n = resp->n_outputs + 1;
  hark_tensor *outs = resp->outputs = room_for_one(resp->outputs, n - 1, sizeof *outs);
  resp->buffers = room_for_one(resp->buffers, n - 1, sizeof *resp->buffers);
  void *data = calloc(1, byte_size ? byte_size : 1);
  if (!data)
    return hark_error_new(HARK_ERR_INTERNAL, "cannot allocate %zu bytes for output '%s'", byte_size,
                          name);
  hark_tensor *t = &outs[resp->n_outputs];
  memset(t, 0, sizeof *t);
  t->name = names_keep(&resp->output_names, name);
  t->datatype = dt;
  t->ndims = ndims;
  if (ndims) memcpy(t->shape, shape, ndims * sizeof *shape);
  t->data = data;
  t->byte_size = byte_size;
  resp->buffers[resp->n_outputs] = data;
  resp->n_outputs = n;
  *buffer = data;
  return NULL;
}

void hark_response_set_parameter(hark_response *resp, const char *key, const char *value) {
  kv_set(&resp->params, &resp->n_params, key, value);
}

const char *hark_response_id(const hark_response *resp) { return resp->id ? resp->id : ""; }
uint32_t hark_response_output_count(const hark_response *resp) { return resp->n_outputs; }
const hark_tensor *hark_response_output(const hark_response *resp, uint32_t i) {
  return i < resp->n_outputs ? &resp->outputs[i] : NULL;
}
const hark_tensor *hark_response_output_by_name(const hark_response *resp, const char *name) {
  for (uint32_t i = 0; i < resp->n_outputs; i++)
    if (strcmp(resp->outputs[i].name, name) == 0) return &resp->outputs[i];
  return NULL;
}
uint32_t hark_response_parameter_count(const hark_response *resp) { return resp->n_params; }
const char *hark_response_parameter_at(const hark_response *resp, uint32_t i, const char **key) {
  if (i >= resp->n_params) return NULL;
  if (key) *key = resp->params[i].key;
  return resp->params[i].value;
}
const char *hark_response_parameter(const hark_response *resp, const char *key) {
  return kv_get(resp->params, resp->n_params, key);
}

void hark_response_free(hark_response *resp) {
  if (!resp) return;
  for (uint32_t i = 0; i < resp->n_outputs; i++) {
    names_drop(&resp->output_names, resp->outputs[i].name);
    free(resp->buffers[i]);
  }
  free(resp->outputs);
  free(resp->buffers);
  for (uint32_t i = 0; i < resp->n_params; i++) {
    free(resp->params[i].key);
    free(resp->params[i].value);
  }
  free(resp->params);
  free(resp->id);
  free(resp);
}

/* Delivers a response (or none) to the request's callback; on FINAL,
 * records statistics and frees the request. */
static void request_deliver(hark_request *req, hark_response *resp, uint32_t flags,
                            hark_error *err) {
  if (resp) resp->req = NULL;
  if (flags & HARK_RESPONSE_FINAL) {
    if (atomic_exchange(&req->finished, true)) {
      HARK_ERROR("request '%s' for model '%s' got a second final response; dropped",
                 hark_request_id(req), hark_model_name(req->model));
      hark_response_free(resp);
      hark_error_free(err);
      return;
    }
    hark_stats_record_final(req->model, req, err, hark_now_ns());
  }
  if (req->callback) {
    req->callback(resp, flags, err, req->userp);
  } else {
    hark_response_free(resp);
    hark_error_free(err);
  }
  if (flags & HARK_RESPONSE_FINAL) hark_request_free(req);
}

void hark_response_send(hark_response *resp, uint32_t flags, hark_error *err) {
  request_deliver(resp->req, resp, flags, err);
}

void hark_request_complete(hark_request *req, hark_error *err) {
  request_deliver(req, NULL, HARK_RESPONSE_FINAL, err);
}

void hark_request_set_sequence_slot(hark_request *req, void **slot) { req->seq_state = slot; }

bool hark_response_take_output(hark_response *resp, const char *name, hark_tensor *out) {
  for (uint32_t i = 0; i < resp->n_outputs; i++) {
    if (strcmp(resp->outputs[i].name, name) != 0) continue;
    *out = resp->outputs[i];
    out->name = NULL;
    out->data = resp->buffers[i];
    names_drop(&resp->output_names, resp->outputs[i].name);
    resp->n_outputs--;
    memmove(&resp->outputs[i], &resp->outputs[i + 1],
            (resp->n_outputs - i) * sizeof *resp->outputs);
    memmove(&resp->buffers[i], &resp->buffers[i + 1],
            (resp->n_outputs - i) * sizeof *resp->buffers);
    return true;
  }
  return false;
}

void *hark_request_sequence_state(const hark_request *req) {
  return req->seq_state ? *req->seq_state : NULL;
}

void hark_request_set_sequence_state(hark_request *req, void *state) {
  if (req->seq_state) *req->seq_state = state;
}
