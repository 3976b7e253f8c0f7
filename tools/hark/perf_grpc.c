/*
 * perf_grpc.c — `hark perf --protocol grpc`: KServe v2 ModelInfer over
 * gRPC, with the same closed loop as HTTP (perf.c drives both).
 *
 * Setup reads ModelMetadata and ModelConfig through gRPC C core (grpcc.h)
 * into the same perf_model the HTTP path fills, and packs one
 * ModelInferRequest (inputs in raw_input_contents, the values the HTTP
 * body would carry), framed once as gRPC sends it. The calls themselves go
 * over h2grpc.h, nghttp2 on one h2c connection per client thread (like
 * HTTP's one keep-alive connection per thread), not over C core: at
 * concurrency 16 against one harkd on the 2-core bench machine, C core's
 * client spent 45-57 us of CPU per call and its rate's median over a run's
 * rounds was 0.59-0.83 of h2load's on the same server (bench/
 * grpc_vs_http_h2load.sh's request, h2load -t1 -c16 -m1, alternated), so
 * bench/grpc_vs_http.sh measured the client; h2grpc spends 18-23 us per
 * call (h2load 14-17 us) and its median ratio was 0.93, 1.02 and 1.32 in
 * three runs (0.93 against h2load -t2; the machine was shared and noisy).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grpc_service.pb-c.h"
#include "grpcc.h"
#include "h2grpc.h"
#include "perf.h"

#define KSERVE "/inference.GRPCInferenceService/"

/* ---- the model -------------------------------------------------------------- */

static int copy_tensor(const Inference__ModelMetadataResponse__TensorMetadata *src, perf_tensor *t,
                       char *err, size_t cap) {
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

static int metadata_to_model(const Inference__ModelMetadataResponse *md, int max_batch,
                             perf_model *m, char *err, size_t cap) {
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
  for (size_t i = 0; i < md->n_outputs; i++)
    m->outputs[m->n_outputs++] = strdup(md->outputs[i]->name);
  return 0;
}

static void status_text(const char *what, const grpcc_status *st, char *err, size_t cap) {
  snprintf(err, cap, "%s: %s: %s", what, grpcc_status_name(st->code), st->details);
}

int perf_grpc_model_load(const char *target, const char *model, const char *version, int timeout_ms,
                         perf_model *m, bool *unreachable, char *err, size_t errcap) {
  grpcc_init();
  grpc_channel *ch = grpcc_channel(target);
  Inference__ModelMetadataRequest mq = INFERENCE__MODEL_METADATA_REQUEST__INIT;
  Inference__ModelConfigRequest cq = INFERENCE__MODEL_CONFIG_REQUEST__INIT;
  mq.name = cq.name = (char *)model;
  mq.version = cq.version = (char *)(version ? version : "");
  ProtobufCMessage *md = NULL, *cfg = NULL;
  grpcc_status st;
  int rc = -1;
  *unreachable = false;
  if (grpcc_unary(ch, KSERVE "ModelMetadata", &mq.base,
                  &inference__model_metadata_response__descriptor, timeout_ms, &md, &st) < 0) {
    *unreachable = st.code == GRPC_STATUS_UNAVAILABLE;
    status_text("ModelMetadata", &st, err, errcap);
  } else if (grpcc_unary(ch, KSERVE "ModelConfig", &cq.base,
                         &inference__model_config_response__descriptor, timeout_ms, &cfg,
                         &st) < 0) {
    status_text("ModelConfig", &st, err, errcap);
  } else {
    const Inference__ModelConfig *c = ((Inference__ModelConfigResponse *)cfg)->config;
    rc = metadata_to_model((Inference__ModelMetadataResponse *)md, c ? c->max_batch_size : -1, m,
                           err, errcap);
  }
  if (md) protobuf_c_message_free_unpacked(md, NULL);
  if (cfg) protobuf_c_message_free_unpacked(cfg, NULL);
  grpc_channel_destroy(ch);
  grpcc_shutdown();
  return rc;
}

/* ---- the request -------------------------------------------------------------- */

void perf_grpc_request_build(const perf_model *m, const char *model, const char *version,
                             bool random, perf_grpc_request *r) {
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
  size_t size = protobuf_c_message_get_packed_size(&q.base);
  uint8_t *packed = malloc(size ? size : 1);
  r->framed =
      packed ? h2grpc_frame(packed, protobuf_c_message_pack(&q.base, packed), &r->size) : NULL;
  if (!r->framed) {
    fprintf(stderr, "hark perf: out of memory building the request\n");
    exit(1);
  }
  free(packed);
  for (int i = 0; i < m->n_inputs; i++) free(raw[i].data);
  free(raw);
  free(ins);
  free(ptrs);
  free(shapes);
}

void perf_grpc_request_free(perf_grpc_request *r) {
  free(r->framed);
  r->framed = NULL;
}

/* ---- connections and calls ------------------------------------------------------- */

perf_grpc_conn *perf_grpc_conn_new(const char *host, const char *port, int timeout_ms) {
  return (perf_grpc_conn *)h2grpc_new(host, port, KSERVE "ModelInfer", timeout_ms);
}

void perf_grpc_conn_free(perf_grpc_conn *c) { h2grpc_free((h2grpc *)c); }

void perf_grpc_conn_abort(perf_grpc_conn *c) { h2grpc_abort((h2grpc *)c); }

int perf_grpc_infer(perf_grpc_conn *c, const perf_grpc_request *r, bool *transport, char *err,
                    size_t errcap) {
  h2grpc_status st;
  if (h2grpc_call((h2grpc *)c, r->framed, r->size, &st) == 0) return 0;
  *transport = st.transport;
  snprintf(err, errcap, "%s: %s", grpcc_status_name((grpc_status_code)st.code), st.message);
  return -1;
}
