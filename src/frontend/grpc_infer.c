/*
 * grpc_infer.c — ModelInfer: a protobuf ModelInferRequest in, a
 * hark_request to the engine, and the response back as a
 * ModelInferResponse with raw_output_contents (as Triton answers).
 *
 * Zero-copy on the way in: the unpacked message is attached to the
 * request, so raw_input_contents are handed to the engine where they lie;
 * typed InferTensorContents are converted once into a buffer attached to
 * the request. The reply is sent from the engine's worker thread; if the
 * client cancelled meanwhile, the result is dropped.
 *
 * ModelStreamInfer reuses all of it: each message of the stream becomes a
 * job whose replies are packed as ModelStreamInferResponse and queued on
 * the call (grpc_stream.c writes them in request order). A request the
 * engine refuses gets its error in error_message and the stream goes on,
 * as Triton does.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/grpc_impl.h"
#include "grpc_service.pb-c.h"
#include "hark/backend.h"

typedef Inference__ModelInferRequest infer_request;
typedef Inference__ModelInferRequest__InferInputTensor input_tensor;
typedef Inference__InferTensorContents contents;

static void free_message(void *msg) { protobuf_c_message_free_unpacked(msg, NULL); }

static hark_error *bad(const char *name, const char *what) {
  return hark_error_new(HARK_ERR_INVALID_ARG, "input '%s': %s", name, what);
}

/* The element count a contents field holds for data type `dt`, or -1 when
 * the type has no contents field (FP16, BF16: raw only). */
static int64_t contents_count(const contents *ct, hark_datatype dt) {
  switch (dt) {
  case HARK_TYPE_BOOL: return (int64_t)ct->n_bool_contents;
  case HARK_TYPE_INT8:
  case HARK_TYPE_INT16:
  case HARK_TYPE_INT32: return (int64_t)ct->n_int_contents;
  case HARK_TYPE_INT64: return (int64_t)ct->n_int64_contents;
  case HARK_TYPE_UINT8:
  case HARK_TYPE_UINT16:
  case HARK_TYPE_UINT32: return (int64_t)ct->n_uint_contents;
  case HARK_TYPE_UINT64: return (int64_t)ct->n_uint64_contents;
  case HARK_TYPE_FP32: return (int64_t)ct->n_fp32_contents;
  case HARK_TYPE_FP64: return (int64_t)ct->n_fp64_contents;
  case HARK_TYPE_BYTES: return (int64_t)ct->n_bytes_contents;
  default: return -1;
  }
}

/* Typed contents as hark's flat layout, in a malloc'd buffer. */
static hark_error *contents_to_raw(const input_tensor *in, hark_datatype dt, int64_t count,
                                   void **out, size_t *size) {
  const contents *ct = in->contents;
  int64_t have = contents_count(ct, dt);
  if (have < 0) return bad(in->name, "FP16 and BF16 data must be sent in raw_input_contents");
  if (have != count) {
    char msg[128];
    snprintf(msg, sizeof msg, "%" PRId64 " elements in contents, the shape expects %" PRId64,
             have, count);
    return bad(in->name, msg);
  }
  size_t n = (size_t)count, bytes;
  if (dt == HARK_TYPE_BYTES) {
    bytes = 0;
    for (size_t i = 0; i < n; i++) {
      if (ct->bytes_contents[i].len > UINT32_MAX) return bad(in->name, "element too large");
      bytes += 4 + ct->bytes_contents[i].len;
    }
  } else {
    bytes = n * hark_datatype_size(dt);
  }
  unsigned char *buf = malloc(bytes ? bytes : 1);
  if (!buf) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  for (size_t i = 0; i < n; i++) {
    switch (dt) {
    case HARK_TYPE_BOOL: buf[i] = ct->bool_contents[i] ? 1 : 0; break;
    case HARK_TYPE_INT8: ((int8_t *)buf)[i] = (int8_t)ct->int_contents[i]; break;
    case HARK_TYPE_INT16: ((int16_t *)buf)[i] = (int16_t)ct->int_contents[i]; break;
    case HARK_TYPE_INT32: ((int32_t *)buf)[i] = ct->int_contents[i]; break;
    case HARK_TYPE_INT64: ((int64_t *)buf)[i] = ct->int64_contents[i]; break;
    case HARK_TYPE_UINT8: buf[i] = (uint8_t)ct->uint_contents[i]; break;
    case HARK_TYPE_UINT16: ((uint16_t *)buf)[i] = (uint16_t)ct->uint_contents[i]; break;
    case HARK_TYPE_UINT32: ((uint32_t *)buf)[i] = ct->uint_contents[i]; break;
    case HARK_TYPE_UINT64: ((uint64_t *)buf)[i] = ct->uint64_contents[i]; break;
    case HARK_TYPE_FP32: ((float *)buf)[i] = ct->fp32_contents[i]; break;
    case HARK_TYPE_FP64: ((double *)buf)[i] = ct->fp64_contents[i]; break;
    default: break;
    }
  }
  if (dt == HARK_TYPE_BYTES) {
    unsigned char *p = buf;
    for (size_t i = 0; i < n; i++) {
      uint32_t len = (uint32_t)ct->bytes_contents[i].len;
      p[0] = (unsigned char)len;
      p[1] = (unsigned char)(len >> 8);
      p[2] = (unsigned char)(len >> 16);
      p[3] = (unsigned char)(len >> 24);
      if (len) memcpy(p + 4, ct->bytes_contents[i].data, len);
      p += 4 + len;
    }
  }
  *out = buf;
  *size = bytes;
  return NULL;
}

static hark_error *add_input(hark_request *req, const infer_request *q, size_t i) {
  const input_tensor *in = q->inputs[i];
  hark_datatype dt = hark_datatype_from_name(in->datatype);
  if (dt == HARK_TYPE_INVALID) {
    char msg[96];
    snprintf(msg, sizeof msg, "unknown datatype '%.40s'", in->datatype);
    return bad(in->name, msg);
  }
  if (in->n_shape > HARK_MAX_DIMS) return bad(in->name, "too many dimensions");
  int64_t count = hark_shape_count(in->shape, (uint32_t)in->n_shape);
  if (count < 0) return bad(in->name, "shape has a negative dimension");
  const void *data;
  size_t size = 0;
  if (q->n_raw_input_contents) {
    if (in->contents) return bad(in->name, "contents given along with raw_input_contents");
    data = q->raw_input_contents[i].data;
    size = q->raw_input_contents[i].len;
  } else if (in->contents) {
    void *buf = NULL;
    hark_error *err = contents_to_raw(in, dt, count, &buf, &size);
    if (err) return err;
    hark_request_attach(req, buf, free);
    data = buf;
  } else {
    return bad(in->name, "no data: set contents or raw_input_contents");
  }
  return hark_request_add_input(req, in->name, dt, in->shape, (uint32_t)in->n_shape, data, size);
}

static hark_error *bad_param(const char *key, const char *want) {
  return hark_error_new(HARK_ERR_INVALID_ARG, "parameter '%s' must be %s", key, want);
}

/* A non-negative integer parameter value. */
static bool param_u64(const Inference__InferParameter *p, uint64_t *v) {
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM) {
    *v = p->uint64_param;
    return true;
  }
  if (p->parameter_choice_case == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM &&
      p->int64_param >= 0) {
    *v = (uint64_t)p->int64_param;
    return true;
  }
  return false;
}

static hark_error *apply_param(hark_request *req, const char *key,
                               const Inference__InferParameter *p) {
  uint64_t v;
  if (!p) return NULL;
  int kind = p->parameter_choice_case;
  if (strcmp(key, "priority") == 0) {
    if (!param_u64(p, &v) || v > UINT32_MAX) return bad_param(key, "a non-negative integer");
    hark_request_set_priority(req, (uint32_t)v);
  } else if (strcmp(key, "timeout") == 0) {
    if (!param_u64(p, &v)) return bad_param(key, "a non-negative integer (microseconds)");
    hark_request_set_timeout_us(req, v);
  } else if (strcmp(key, "sequence_id") == 0) {
    if (kind == INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
      hark_request_set_correlation_id_str(req, p->string_param);
    else if (param_u64(p, &v))
      hark_request_set_correlation_id(req, v);
    else
      return bad_param(key, "a non-negative integer or a string");
  } else if (strcmp(key, "sequence_start") == 0 || strcmp(key, "sequence_end") == 0) {
    if (kind != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM)
      return bad_param(key, "a boolean");
    uint32_t flag = key[9] == 's' ? HARK_REQUEST_SEQUENCE_START : HARK_REQUEST_SEQUENCE_END;
    uint32_t flags = hark_request_flags(req);
    hark_request_set_flags(req, p->bool_param ? flags | flag : flags & ~flag);
  } else {
    char buf[32];
    const char *value = buf;
    switch (kind) {
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_BOOL_PARAM:
      value = p->bool_param ? "true" : "false";
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_INT64_PARAM:
      snprintf(buf, sizeof buf, "%" PRId64, p->int64_param);
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM:
      snprintf(buf, sizeof buf, "%" PRIu64, p->uint64_param);
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_DOUBLE_PARAM:
      snprintf(buf, sizeof buf, "%.17g", p->double_param);
      break;
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM:
      value = p->string_param;
      break;
    default: return NULL; /* no value set */
    }
    hark_request_set_parameter(req, key, value);
  }
  return NULL;
}

static hark_error *fill_request(hark_grpc_job *j, hark_request *req, const infer_request *q) {
  if (*q->id) hark_request_set_id(req, q->id);
  for (size_t i = 0; i < q->n_parameters; i++) {
    if (strcmp(q->parameters[i]->key, "sequence_id") == 0) j->sequence_id = q->parameters[i]->value;
    hark_error *err = apply_param(req, q->parameters[i]->key, q->parameters[i]->value);
    if (err) return err;
  }
  if (q->n_raw_input_contents && q->n_raw_input_contents != q->n_inputs)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "raw_input_contents has %zu entries for %zu inputs",
                          q->n_raw_input_contents, q->n_inputs);
  for (size_t i = 0; i < q->n_inputs; i++) {
    hark_error *err = add_input(req, q, i);
    if (err) return err;
  }
  for (size_t i = 0; i < q->n_outputs; i++)
    hark_request_add_requested_output(req, q->outputs[i]->name);
  return NULL;
}

/* ---- the reply ------------------------------------------------------------------ */

typedef Inference__ModelInferResponse__InferOutputTensor output_tensor;
typedef Inference__ModelInferResponse__ParametersEntry param_entry;

/* A ModelInferResponse pointing into a hark_response, with the arrays it
 * needs; reply_free() releases them (never the response). */
typedef struct reply {
  Inference__ModelInferResponse r;
  output_tensor *outs;
  output_tensor **out_ptrs;
  ProtobufCBinaryData *raw;
  param_entry *params;
  param_entry **param_ptrs;
  Inference__InferParameter *values;
  char version[24];
} reply;

static void reply_free(reply *b) {
  free(b->outs);
  free(b->out_ptrs);
  free(b->raw);
  free(b->params);
  free(b->param_ptrs);
  free(b->values);
}

/* True when the request named no outputs, or named this one. Backends may
 * produce more than was asked for; the reply carries only what was. */
static bool output_wanted(const infer_request *q, const char *name) {
  if (!q || !q->n_outputs) return true;
  for (size_t i = 0; i < q->n_outputs; i++)
    if (strcmp(q->outputs[i]->name, name) == 0) return true;
  return false;
}

static bool reply_build(reply *b, const hark_grpc_job *j, const hark_response *resp) {
  memset(b, 0, sizeof *b);
  b->r = (Inference__ModelInferResponse)INFERENCE__MODEL_INFER_RESPONSE__INIT;
  uint32_t n = hark_response_output_count(resp);
  uint32_t np = hark_response_parameter_count(resp);
  const Inference__InferParameter *seq = j->sequence_id;
  uint32_t nalloc = np + 1; /* + the echoed sequence_id */
  b->outs = calloc(n ? n : 1, sizeof *b->outs);
  b->out_ptrs = calloc(n ? n : 1, sizeof *b->out_ptrs);
  b->raw = calloc(n ? n : 1, sizeof *b->raw);
  b->params = calloc(nalloc, sizeof *b->params);
  b->param_ptrs = calloc(nalloc, sizeof *b->param_ptrs);
  b->values = calloc(nalloc, sizeof *b->values);
  if (!b->outs || !b->out_ptrs || !b->raw || !b->params || !b->param_ptrs || !b->values)
    return false;
  uint32_t no = 0;
  for (uint32_t i = 0; i < n; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    if (!output_wanted(j->request, t->name)) continue;
    output_tensor *o = &b->outs[no];
    *o = (output_tensor)INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    o->name = (char *)t->name;
    o->datatype = (char *)hark_datatype_name(t->datatype);
    o->n_shape = t->ndims;
    o->shape = (int64_t *)t->shape;
    b->out_ptrs[no] = o;
    b->raw[no].len = t->byte_size;
    b->raw[no].data = (uint8_t *)t->data;
    no++;
  }
  uint32_t k = 0;
  if (seq) { /* echoed as sent, as Triton does */
    b->params[k] = (param_entry)INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    b->params[k].key = "sequence_id";
    b->params[k].value = (Inference__InferParameter *)seq;
    b->param_ptrs[k] = &b->params[k];
    k++;
  }
  for (uint32_t i = 0; i < np; i++) {
    const char *key;
    const char *value = hark_response_parameter_at(resp, i, &key);
    if (seq && strcmp(key, "sequence_id") == 0) continue;
    b->values[k] = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    b->values[k].parameter_choice_case =
        INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    b->values[k].string_param = (char *)value;
    b->params[k] = (param_entry)INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    b->params[k].key = (char *)key;
    b->params[k].value = &b->values[k];
    b->param_ptrs[k] = &b->params[k];
    k++;
  }
  snprintf(b->version, sizeof b->version, "%" PRId64, j->model_version);
  b->r.model_name = j->model_name;
  b->r.model_version = b->version;
  b->r.id = (char *)hark_response_id(resp);
  b->r.outputs = b->out_ptrs;
  b->r.n_outputs = no;
  b->r.raw_output_contents = b->raw;
  b->r.n_raw_output_contents = no;
  b->r.parameters = b->param_ptrs;
  b->r.n_parameters = k;
  return true;
}

/* ---- jobs ------------------------------------------------------------------------ */

void hark_grpc_job_free(hark_grpc_job *j) {
  if (!j) return;
  for (size_t i = 0; i < j->n_out; i++) grpc_byte_buffer_destroy(j->out[i]);
  free(j->out);
  if (j->first) hark_response_free(j->first);
  free(j->model_name);
  free(j);
}

static hark_grpc_job *job_new(hark_grpc_call *c) {
  hark_grpc_job *j = calloc(1, sizeof *j);
  if (j) {
    j->c = c;
    j->model_version = -1;
  }
  return j;
}

/* Packs a stream reply (a response, or an error text) onto the job (c->mu
 * held). Dropped when the call is over. */
static void job_push_locked(hark_grpc_job *j, const hark_response *resp, const char *error) {
  hark_grpc_call *c = j->c;
  if (c->closed) return;
  Inference__ModelStreamInferResponse sr = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
  reply b;
  bool ok = true;
  char text[200];
  if (resp) {
    ok = reply_build(&b, j, resp);
    sr.infer_response = &b.r;
  } else {
    sr.error_message = (char *)error;
  }
  size_t size = 0;
  grpc_byte_buffer *bb = ok ? hark_grpc_pack(&sr.base, c->g->max_message_bytes, &size) : NULL;
  if (resp) reply_free(&b);
  if (!bb) { /* too big, or out of memory: say so in the stream */
    snprintf(text, sizeof text, ok ? "response of %zu bytes is larger than the limit"
                                   : "out of memory", size);
    Inference__ModelStreamInferResponse er = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
    er.error_message = text;
    bb = hark_grpc_pack(&er.base, c->g->max_message_bytes, &size);
    if (!bb) return;
  }
  hark_grpc_job_add_out(j, bb);
}

bool hark_grpc_job_add_out(hark_grpc_job *j, grpc_byte_buffer *bb) {
  if (j->n_out == j->cap_out) {
    size_t cap = j->cap_out ? j->cap_out * 2 : 2;
    grpc_byte_buffer **p = realloc(j->out, cap * sizeof *p);
    if (!p) {
      grpc_byte_buffer_destroy(bb);
      return false;
    }
    j->out = p;
    j->cap_out = cap;
  }
  j->out[j->n_out++] = bb;
  return true;
}

/* The engine's callback for a stream job, on a worker thread. */
static void on_stream_response(hark_response *resp, uint32_t flags, hark_error *err,
                               void *userp) {
  hark_grpc_job *j = userp;
  hark_grpc_call *c = j->c;
  bool final = flags & HARK_RESPONSE_FINAL;
  pthread_mutex_lock(&c->mu);
  if (resp) job_push_locked(j, resp, NULL);
  if (err) job_push_locked(j, NULL, hark_error_message(err));
  if (final) {
    j->done = true;
    j->request = NULL; /* freed with the engine request after this call */
    j->sequence_id = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  if (resp) hark_response_free(resp);
  hark_error_free(err);
  hark_grpc_stream_pump(c);
  if (final) hark_grpc_call_unref(c); /* the engine's reference */
}

/* The engine's callback for ModelInfer, on a worker thread. A unary call
 * answers with one response: the first a (decoupled) model sends, or the
 * final's. */
static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  hark_grpc_job *j = userp;
  hark_grpc_call *c = j->c;
  pthread_mutex_lock(&c->mu);
  if (resp && (j->first || c->closed)) {
    hark_response_free(resp);
    resp = NULL;
  }
  if (resp) j->first = resp;
  bool final = flags & HARK_RESPONSE_FINAL;
  bool closed = c->closed;
  hark_response *first = NULL;
  if (final) {
    first = j->first;
    j->first = NULL;
    c->unary = NULL;
  }
  pthread_mutex_unlock(&c->mu);
  if (!final) {
    hark_error_free(err);
    return;
  }
  reply b;
  memset(&b, 0, sizeof b);
  if (closed) hark_error_free(err);
  else if (err) hark_grpc_reply_error(c, err);
  else if (!first) hark_grpc_reply(c, NULL, GRPC_STATUS_INTERNAL, "the model sent no response");
  else if (!reply_build(&b, j, first)) hark_grpc_reply(c, NULL, GRPC_STATUS_INTERNAL, "out of memory");
  else hark_grpc_reply(c, &b.r.base, GRPC_STATUS_OK, NULL);
  reply_free(&b);
  if (first) hark_response_free(first);
  hark_grpc_job_free(j);
  hark_grpc_call_unref(c); /* the engine's reference */
}

/* Hands `msg` to the engine as job `j`. On error the message is freed and
 * nothing reaches the engine. */
static hark_error *submit(hark_grpc_call *c, hark_grpc_job *j, ProtobufCMessage *msg,
                          hark_response_fn fn) {
  infer_request *q = (infer_request *)msg;
  int64_t version;
  hark_model *model = NULL;
  hark_error *err = hark_grpc_parse_version(q->model_version, &version);
  if (!err) err = hark_server_model_acquire(c->g->server, q->model_name, version, &model);
  if (err) {
    free_message(msg);
    return err;
  }
  j->model_name = strdup(hark_model_name(model));
  j->model_version = hark_model_version(model);
  hark_request *req = hark_request_new(model);
  hark_model_release(model);
  hark_request_attach(req, msg, free_message); /* inputs point into it */
  j->request = q;
  err = j->model_name ? fill_request(j, req, q)
                      : hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  if (!err) {
    hark_request_set_callback(req, fn, j);
    hark_grpc_call_ref(c);
    err = hark_server_infer(c->g->server, req);
    if (err) hark_grpc_call_unref(c);
  }
  if (err) {
    j->request = NULL;
    j->sequence_id = NULL;
    hark_request_free(req);
  }
  return err;
}

void hark_grpc_model_infer(hark_grpc_call *c, ProtobufCMessage *msg) {
  if (hark_server_is_draining(c->g->server)) {
    free_message(msg);
    hark_grpc_reply(c, NULL, GRPC_STATUS_UNAVAILABLE, "Server is shutting down");
    return;
  }
  hark_grpc_job *j = job_new(c);
  if (!j) {
    free_message(msg);
    hark_grpc_reply(c, NULL, GRPC_STATUS_INTERNAL, "out of memory");
    return;
  }
  pthread_mutex_lock(&c->mu);
  c->unary = j;
  pthread_mutex_unlock(&c->mu);
  hark_error *err = submit(c, j, msg, on_response);
  if (err) {
    pthread_mutex_lock(&c->mu);
    c->unary = NULL;
    pthread_mutex_unlock(&c->mu);
    hark_grpc_job_free(j);
    hark_grpc_reply_error(c, err);
  }
}

void hark_grpc_stream_infer(hark_grpc_call *c, ProtobufCMessage *msg) {
  hark_grpc_job *j = job_new(c);
  if (!j) {
    free_message(msg);
    return; /* the stream goes on; this request is lost to memory */
  }
  /* Queued before the engine sees it, so its replies find their place. */
  pthread_mutex_lock(&c->mu);
  hark_grpc_stream_append_locked(c, j);
  pthread_mutex_unlock(&c->mu);
  hark_error *err = submit(c, j, msg, on_stream_response);
  if (err) {
    pthread_mutex_lock(&c->mu);
    job_push_locked(j, NULL, hark_error_message(err));
    j->done = true;
    pthread_mutex_unlock(&c->mu);
    hark_error_free(err);
    hark_grpc_stream_pump(c);
  }
}
