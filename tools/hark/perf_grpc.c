/*
 * perf_grpc.c — `hark perf --protocol grpc`: KServe v2 ModelInfer over
 * gRPC, with the same closed loop as HTTP (perf.c drives both).
 *
 * Setup reads ModelMetadata and ModelConfig over gRPC into the same
 * perf_model the HTTP path fills, and packs one ModelInferRequest (inputs
 * in raw_input_contents, the values the HTTP body would carry) into a byte
 * buffer. Each client thread owns a connection: a channel with its own
 * TCP connection (like HTTP's one keep-alive connection per thread) and a
 * completion queue; a call is one batch of the six client operations on a
 * registered method, and the thread waits for it on its queue. The packed
 * request is shared: each call sends a copy, which only takes a reference
 * to the same slice, so the hot loop neither serializes nor parses.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/time.h>

#include "grpc_service.pb-c.h"
#include "grpcc.h"
#include "perf.h"

#define KSERVE "/inference.GRPCInferenceService/"
#define ABORT_POLL_MS 100 /* how often a waiting thread looks for an abort */

struct perf_grpc_conn {
  grpc_channel *ch;
  grpc_completion_queue *cq;
  void *infer; /* the registered ModelInfer method */
  int timeout_ms;
  atomic_bool abort;
};

/* ---- the model -------------------------------------------------------------- */

static int copy_tensor(const Inference__ModelMetadataResponse__TensorMetadata *src, perf_tensor *t, char *err,
                       size_t cap) {
  if (src->n_shape > PERF_MAX_DIMS) {
    snprintf(err, cap, "input '%s': more than %d dimensions", src->name, PERF_MAX_DIMS);
    return -1;
  }
  t->name = strdup(src->name);
  snprintf(t->datatype, sizeof t->datatype, "%s", src->datatype);
  for (size_t d = 0; d < src->n_shape; d++) {
    if (src->shape[d] < -1) {
      snprintf(err, cap, "input '%s': bad shape in model metadata", src->name);
      return -1;
    }
    t->shape[t->ndims++] = src->shape[d];
  }
  return t->name ? 0 : -1;
}

static int metadata_to_model(const Inference__ModelMetadataResponse *md, int max_batch, perf_model *m, char *err,
                             size_t cap) {
  memset(m, 0, sizeof *m);
  m->max_batch_size = max_batch;
  if (md->n_inputs == 0) {
    snprintf(err, cap, "model metadata lists no inputs");
    return -1;
  }
  m->inputs = calloc(md->n_inputs, sizeof *m->inputs);
  m->outputs = calloc(md->n_outputs + 1, sizeof *m->outputs);
  if (!m->inputs || !m->outputs) {
    snprintf(err, cap, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < md->n_inputs; i++)
    if (copy_tensor(md->inputs[i], &m->inputs[m->n_inputs++], err, cap) < 0) return -1;
  for (size_t i = 0; i < md->n_outputs; i++) m->outputs[m->n_outputs++] = strdup(md->outputs[i]->name);
  return 0;
}

static void status_text(const char *what, const grpcc_status *st, char *err, size_t cap) {
  snprintf(err, cap, "%s: %s: %s", what, grpcc_status_name(st->code), st->details);
}

int perf_grpc_model_load(const char *target, const char *model, const char *version, int timeout_ms,
                         perf_model *m, bool *unreachable, char *err, size_t errcap) {
  grpcc_init();
  grpc_channel *ch = grpcc_channel(target, false);
  Inference__ModelMetadataRequest mq = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  Inference__ModelConfigRequest cq = INFERENCE__MODEL_CONFIG_REQUEST__INIT;
  mq.name = cq.name = (char *)model;
  mq.version = cq.version = (char *)(version ? version : "");
  ProtobufCMessage *md = NULL, *cfg = NULL;
  grpcc_status st;
  int rc = -1;
  *unreachable = false;
  if (grpcc_unary(ch, KSERVE "ModelMetadata", &mq.base, &inference__model_metadata_response__descriptor,
                  timeout_ms, &md, &st) < 0) {
    *unreachable = st.code == GRPC_STATUS_UNAVAILABLE;
    status_text("ModelMetadata", &st, err, errcap);
  } else if (grpcc_unary(ch, KSERVE "ModelConfig", &cq.base, &inference__model_config_response__descriptor,
                         timeout_ms, &cfg, &st) < 0) {
    status_text("ModelConfig", &st, err, errcap);
  } else {
    const Inference__ModelConfig *c = ((Inference__ModelConfigResponse *)cfg)->config;
    rc = metadata_to_model((Inference__ModelMetadataResponse *)md, c ? c->max_batch_size : -1, m, err, errcap);
  }
  if (md) protobuf_c_message_free_unpacked(md, NULL);
  if (cfg) protobuf_c_message_free_unpacked(cfg, NULL);
  grpc_channel_destroy(ch);
  grpcc_shutdown();
  return rc;
}

/* ---- the request -------------------------------------------------------------- */

void perf_grpc_request_build(const perf_model *m, const char *model, const char *version, bool random,
                             perf_grpc_request *r) {
  typedef Inference__ModelInferRequest__InferInputTensor input;
  Inference__ModelInferRequest q = INFERENCE__MODEL_INFER_REQUEST__INIT;
  input *ins = calloc((size_t)m->n_inputs, sizeof *ins);
  input **ptrs = calloc((size_t)m->n_inputs, sizeof *ptrs);
  ProtobufCBinaryData *raw = calloc((size_t)m->n_inputs, sizeof *raw);
  int64_t *shapes = calloc((size_t)m->n_inputs * PERF_MAX_DIMS, sizeof *shapes);
  if (!ins || !ptrs || !raw || !shapes) {
    fprintf(stderr, "hark perf: out of memory building the request\n");
    exit(1);
  }
  uint64_t rng = PERF_RNG_SEED;
  for (int i = 0; i < m->n_inputs; i++) {
    const perf_tensor *t = &m->inputs[i];
    ins[i] = (input)INFERENCE__MODEL_INFER_REQUEST__INFER_INPUT_TENSOR__INIT;
    ins[i].name = t->name;
    ins[i].datatype = (char *)t->datatype;
    ins[i].shape = shapes + (size_t)i * PERF_MAX_DIMS;
    ins[i].n_shape = (size_t)t->ndims;
    memcpy(ins[i].shape, t->shape, (size_t)t->ndims * sizeof *shapes);
    ptrs[i] = &ins[i];
    perf_tensor_raw(t, random, &rng, (char **)&raw[i].data, &raw[i].len);
  }
  q.model_name = (char *)model;
  q.model_version = (char *)(version ? version : "");
  q.inputs = ptrs;
  q.n_inputs = (size_t)m->n_inputs;
  q.raw_input_contents = raw;
  q.n_raw_input_contents = (size_t)m->n_inputs;
  r->packed = grpcc_pack(&q.base);
  r->size = protobuf_c_message_get_packed_size(&q.base);
  for (int i = 0; i < m->n_inputs; i++) free(raw[i].data);
  free(raw);
  free(ins);
  free(ptrs);
  free(shapes);
}

void perf_grpc_request_free(perf_grpc_request *r) {
  if (r->packed) grpc_byte_buffer_destroy(r->packed);
  r->packed = NULL;
}

/* ---- connections and calls ------------------------------------------------------- */

perf_grpc_conn *perf_grpc_conn_new(const char *target, int timeout_ms) {
  perf_grpc_conn *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  grpcc_init();
  c->ch = grpcc_channel(target, true);
  c->cq = grpc_completion_queue_create_for_next(NULL);
  c->infer = grpc_channel_register_call(c->ch, KSERVE "ModelInfer", NULL, NULL);
  c->timeout_ms = timeout_ms;
  atomic_init(&c->abort, false);
  return c;
}

void perf_grpc_conn_free(perf_grpc_conn *c) {
  if (!c) return;
  grpc_channel_destroy(c->ch);
  grpc_completion_queue_shutdown(c->cq);
  while (grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(c->cq);
  free(c);
  grpcc_shutdown();
}

void perf_grpc_conn_abort(perf_grpc_conn *c) { atomic_store(&c->abort, true); }

/* Waits for the call's one batch; cancels it when the conn is aborted. */
static void wait_batch(perf_grpc_conn *c, grpc_call *call) {
  bool cancelled = false;
  for (;;) {
    grpc_event ev = grpc_completion_queue_next(c->cq, grpcc_deadline(ABORT_POLL_MS), NULL);
    if (ev.type == GRPC_OP_COMPLETE) return;
    if (ev.type == GRPC_QUEUE_SHUTDOWN) return;
    if (!cancelled && atomic_load_explicit(&c->abort, memory_order_relaxed)) {
      grpc_call_cancel(call, NULL);
      cancelled = true; /* the batch still completes, with CANCELLED */
    }
  }
}

int perf_grpc_infer(perf_grpc_conn *c, const perf_grpc_request *r, bool *transport, char *err, size_t errcap) {
  grpc_call *call = grpc_channel_create_registered_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, c->infer,
                                                        grpcc_deadline(c->timeout_ms), NULL);
  grpc_byte_buffer *out = grpc_byte_buffer_copy(r->packed);
  grpcc_unary_batch b;
  grpcc_unary_batch_init(&b, out);
  grpc_call_error e = grpc_call_start_batch(call, b.ops, 6, c, NULL);
  if (e == GRPC_CALL_OK) wait_batch(c, call);
  *transport = e != GRPC_CALL_OK || b.code == GRPC_STATUS_UNAVAILABLE;
  int rc = 0;
  if (e != GRPC_CALL_OK) {
    snprintf(err, errcap, "cannot start the call (error %d)", (int)e);
    rc = -1;
  } else if (b.code != GRPC_STATUS_OK || !b.in) {
    snprintf(err, errcap, "%s: %.*s", grpcc_status_name(b.code), (int)GRPC_SLICE_LENGTH(b.details),
             (const char *)GRPC_SLICE_START_PTR(b.details));
    rc = -1;
  }
  grpcc_unary_batch_fini(&b);
  grpc_byte_buffer_destroy(out);
  grpc_call_unref(call);
  return rc;
}
