/*
 * kserve_grpc_infer.c — ModelInfer and ModelStreamInfer: a protobuf
 * ModelInferRequest in, a hark_request to the engine, and the response back
 * as a ModelInferResponse with raw_output_contents (as Triton answers).
 *
 * Zero-copy on the way in: the unpacked message is attached to the
 * request, so raw_input_contents are handed to the engine where they lie;
 * typed InferTensorContents are converted once into a buffer attached to
 * the request. A unary reply is sent from whichever thread delivers the
 * final — a worker, or the queue thread itself when a cheap model's batch
 * ran there (the transport marks its threads for that).
 *
 * ModelStreamInfer reuses all of it: each message of the stream becomes a
 * job whose replies are packed as ModelStreamInferResponse into its slot
 * (the transport writes slots in request order). A request the engine
 * refuses gets its error in error_message, with the request's id, and the
 * stream goes on, as Triton does.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kserve/kserve.h"
#include "frontend/kserve/kserve_grpc.h"
#include "hark/model.h"
#include "util/alloc.h"

typedef Inference__ModelInferRequest infer_request;
typedef Inference__ModelInferRequest__InferInputTensor input_tensor;
typedef Inference__InferTensorContents contents;

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
    snprintf(msg, sizeof msg, "%" PRId64 " elements in contents, the shape expects %" PRId64, have,
             count);
    return bad(in->name, msg);
  }
  size_t n = (size_t)count, bytes;
  if (dt == HARK_TYPE_BYTES) {
    bytes = 0;
    for (size_t i = 0; i < n; i++) {
      if (ct->bytes_contents[i].len > UINT32_MAX) return bad(in->name, "element too large");
      bytes += HARK_BYTES_PREFIX + ct->bytes_contents[i].len;
    }
  } else {
    bytes = n * hark_datatype_size(dt);
  }
  unsigned char *buf = malloc(bytes ? bytes : 1); /* client-sized */
  if (!buf)
    return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED, "out of memory for input '%s' (%zu bytes)",
                          in->name, bytes);
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
      hark_bytes_put_len(p, len);
      if (len) memcpy(p + HARK_BYTES_PREFIX, ct->bytes_contents[i].data, len);
      p += HARK_BYTES_PREFIX + len;
    }
  }
  *out = buf;
  *size = bytes;
  return NULL;
}

/* ---- shared memory ------------------------------------------------------------- */

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

/* A tensor's shared_memory_* parameters (as Triton's clients set them). */
typedef struct shm_params {
  const char *region; /* NULL: the tensor is not in shared memory */
  uint64_t offset, byte_size;
} shm_params;

/* Takes one parameter (key, v) of input or output `name` into `out`;
 * *any / *has_size note that some shared_memory_ parameter / the byte size
 * was seen. */
static hark_error *shm_param(const char *what, const char *name, const char *key,
                             const Inference__InferParameter *v, shm_params *out, bool *any,
                             bool *has_size) {
  if (strncmp(key, "shared_memory_", 14) != 0 || !v) return NULL;
  *any = true;
  if (strcmp(key, "shared_memory_region") == 0) {
    if (v->parameter_choice_case != INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s '%s': shared_memory_region must be a string",
                            what, name);
    out->region = v->string_param;
  } else if (strcmp(key, "shared_memory_offset") == 0 ||
             strcmp(key, "shared_memory_byte_size") == 0) {
    bool size = key[14] == 'b';
    if (!param_u64(v, size ? &out->byte_size : &out->offset))
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s '%s': %s must be a non-negative integer",
                            what, name, key);
    *has_size |= size;
  }
  return NULL;
}

/* After every parameter: a region, and its byte size, or none at all. */
static hark_error *shm_params_check(const char *what, const char *name, const shm_params *sp,
                                    bool any, bool has_size) {
  if (any && !sp->region)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s '%s' has shared_memory parameters but no shared_memory_region", what,
                          name);
  if (sp->region && !has_size)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s '%s' names shared_memory_region '%s' but no shared_memory_byte_size",
                          what, name, sp->region);
  return NULL;
}

static hark_error *input_shm(const input_tensor *in, shm_params *out) {
  bool any = false, has_size = false;
  *out = (shm_params){0};
  for (size_t i = 0; i < in->n_parameters; i++) {
    hark_error *err = shm_param("input", in->name, in->parameters[i]->key, in->parameters[i]->value,
                                out, &any, &has_size);
    if (err) return err;
  }
  return shm_params_check("input", in->name, out, any, has_size);
}

static hark_error *output_shm(const Inference__ModelInferRequest__InferRequestedOutputTensor *o,
                              shm_params *out) {
  bool any = false, has_size = false;
  *out = (shm_params){0};
  for (size_t i = 0; i < o->n_parameters; i++) {
    hark_error *err = shm_param("output", o->name, o->parameters[i]->key, o->parameters[i]->value,
                                out, &any, &has_size);
    if (err) return err;
  }
  return shm_params_check("output", o->name, out, any, has_size);
}

/* ---- inputs ----------------------------------------------------------------------- */

/* `raw`: the next raw_input_contents entry for an input not in shared
 * memory (Triton's clients send none for those that are). */
static hark_error *add_input(hark_request *req, const infer_request *q, size_t i, hark_shm *shm,
                             size_t *raw) {
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
  shm_params sp;
  hark_error *err = input_shm(in, &sp);
  if (err) return err;
  if (sp.region) {
    if (in->contents) return bad(in->name, "contents given along with shared memory");
    err = hark_kserve_shm_input(shm, req, in->name, dt, count, sp.region, sp.offset, sp.byte_size,
                                &data);
    if (err) return err;
    size = (size_t)sp.byte_size;
  } else if (q->n_raw_input_contents) {
    if (in->contents) return bad(in->name, "contents given along with raw_input_contents");
    data = q->raw_input_contents[*raw].data;
    size = q->raw_input_contents[*raw].len;
    ++*raw;
  } else if (in->contents) {
    void *buf = NULL;
    err = contents_to_raw(in, dt, count, &buf, &size);
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
    case INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM: value = p->string_param; break;
    default: return NULL; /* no value set */
    }
    hark_request_set_parameter(req, key, value);
  }
  return NULL;
}

static const char *grpc_input_name(const void *inputs, size_t i) {
  return ((input_tensor *const *)inputs)[i]->name;
}

hark_error *hark_kserve_grpc_to_request(const infer_request *q, hark_shm *shm, hark_request *req,
                                        const Inference__InferParameter **sequence_id,
                                        hark_shm_region ***out_shm) {
  *sequence_id = NULL;
  if (out_shm) *out_shm = NULL;
  /* A sequence_id names a sequence of KServe gRPC clients only. */
  hark_request_set_correlation_ns(req, HARK_CORR_NS_KSERVE_GRPC);
  hark_error *bad_counts =
      hark_kserve_check_counts(hark_request_model(req), q->n_parameters, q->n_inputs,
                               grpc_input_name, q->inputs, q->n_outputs);
  if (bad_counts) return bad_counts;
  if (*q->id) hark_request_set_id(req, q->id);
  for (size_t i = 0; i < q->n_parameters; i++) {
    if (strcmp(q->parameters[i]->key, "sequence_id") == 0) *sequence_id = q->parameters[i]->value;
    hark_error *err = apply_param(req, q->parameters[i]->key, q->parameters[i]->value);
    if (err) return err;
  }
  size_t not_shm = 0;
  for (size_t i = 0; i < q->n_inputs; i++) {
    shm_params sp;
    hark_error *err = input_shm(q->inputs[i], &sp);
    if (err) return err;
    not_shm += !sp.region;
  }
  if (q->n_raw_input_contents && q->n_raw_input_contents != not_shm)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "raw_input_contents has %zu entries for %zu inputs not in shared memory",
                          q->n_raw_input_contents, not_shm);
  size_t raw = 0;
  for (size_t i = 0; i < q->n_inputs; i++) {
    hark_error *err = add_input(req, q, i, shm, &raw);
    if (err) return err;
  }
  hark_shm_region **regions = NULL; /* per requested output; NULL: none in shm */
  for (size_t i = 0; i < q->n_outputs; i++) {
    const Inference__ModelInferRequest__InferRequestedOutputTensor *o = q->outputs[i];
    shm_params sp;
    hark_error *err = output_shm(o, &sp);
    if (err) return err;
    if (sp.region) {
      if (!regions) {
        regions = hark_xcalloc(q->n_outputs, sizeof *regions);
        hark_request_attach(req, regions, free);
      }
      err = hark_kserve_shm_output(shm, req, o->name, sp.region, sp.offset, sp.byte_size,
                                   &regions[i]);
      if (err) return err;
    }
    hark_request_add_requested_output(req, o->name);
  }
  if (out_shm) *out_shm = regions;
  return NULL;
}

/* ---- jobs ------------------------------------------------------------------------ */

/*
 * One ModelInferRequest on its way through the engine. A unary call has
 * one; a stream one per message, each in its slot. The request pointers
 * are the engine request's (the message is attached to it): valid until
 * its final has been handled.
 */
typedef struct job {
  hark_grpc_slot slot; /* streams: first, the transport hands it back */
  hark_grpc_call *c;
  const infer_request *request;
  const Inference__InferParameter *sequence_id; /* echoed back; or NULL */
  hark_shm_region **shm; /* per requested output, owned by the request; or NULL */
  char *model_name;
  int64_t model_version;
  char id[64];         /* the request's id, for a stream's error replies */
  hark_response *kept; /* unary: the response kept for the reply */
} job;

static job *job_new(hark_grpc_call *c) {
  job *j = hark_xcalloc(1, sizeof *j);
  j->c = c;
  j->model_version = -1;
  return j;
}

static void job_free(job *j) {
  hark_response_free(j->kept);
  free(j->model_name);
  free(j);
}

static void slot_free(hark_grpc_slot *slot) { job_free((job *)slot); }

/* ---- the reply ------------------------------------------------------------------ */

typedef Inference__ModelInferResponse__InferOutputTensor output_tensor;
typedef Inference__ModelInferResponse__ParametersEntry param_entry;
typedef Inference__ModelInferResponse__InferOutputTensor__ParametersEntry output_param_entry;

/* A ModelInferResponse pointing into a hark_response, its arrays in one
 * arena (internal-sized: one entry per output and parameter). */
typedef struct reply {
  Inference__ModelInferResponse r;
  hark_arena *a;
  char version[24];
} reply;

static void *take(hark_arena *a, size_t n) {
  void *p = hark_arena_alloc(a, n ? n : 1);
  if (!p) hark_oom("reply", n);
  return p;
}

/* True when the request named no outputs, or named this one. Backends may
 * produce more than was asked for; the reply carries only what was. *at:
 * the index of the requested output, or -1. */
static bool output_wanted(const infer_request *q, const char *name, long *at) {
  *at = -1;
  if (!q || !q->n_outputs) return true;
  for (size_t i = 0; i < q->n_outputs; i++)
    if (strcmp(q->outputs[i]->name, name) == 0) {
      *at = (long)i;
      return true;
    }
  return false;
}

/* The region requested output `at` goes to, or NULL. */
static hark_shm_region *output_region(const job *j, long at) {
  return at >= 0 && j->shm ? j->shm[at] : NULL;
}

/* Writes the outputs that go to shared memory into their regions (held by
 * the request, which lives while its callback runs). */
static hark_error *shm_write_outputs(const job *j, const hark_response *resp) {
  uint32_t n = hark_response_output_count(resp);
  for (uint32_t i = 0; j->shm && i < n; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    long at;
    hark_shm_region *r = output_wanted(j->request, t->name, &at) ? output_region(j, at) : NULL;
    if (!r) continue;
    shm_params sp;
    hark_error *err = output_shm(j->request->outputs[at], &sp);
    if (!err) err = hark_kserve_shm_write(r, sp.offset, sp.byte_size, t);
    if (err) return err;
  }
  return NULL;
}

static void reply_build(reply *b, const job *j, const hark_response *resp) {
  b->r = (Inference__ModelInferResponse)INFERENCE__MODEL_INFER_RESPONSE__INIT;
  b->a = hark_arena_new();
  uint32_t n = hark_response_output_count(resp);
  uint32_t np = hark_response_parameter_count(resp);
  const Inference__InferParameter *seq = j->sequence_id;
  uint32_t nalloc = np + 1; /* + the echoed sequence_id */
  output_tensor *outs = take(b->a, n * sizeof *outs);
  output_tensor **out_ptrs = take(b->a, n * sizeof *out_ptrs);
  ProtobufCBinaryData *raw = take(b->a, n * sizeof *raw);
  /* An output in shared memory: its region and size as parameters. */
  output_param_entry *shm_entries = take(b->a, 2 * n * sizeof *shm_entries);
  output_param_entry **shm_ptrs = take(b->a, 2 * n * sizeof *shm_ptrs);
  Inference__InferParameter *shm_values = take(b->a, 2 * n * sizeof *shm_values);
  param_entry *params = take(b->a, nalloc * sizeof *params);
  param_entry **param_ptrs = take(b->a, nalloc * sizeof *param_ptrs);
  Inference__InferParameter *values = take(b->a, nalloc * sizeof *values);
  uint32_t no = 0;
  for (uint32_t i = 0; i < n; i++) {
    const hark_tensor *t = hark_response_output(resp, i);
    long at;
    if (!output_wanted(j->request, t->name, &at)) continue;
    output_tensor *o = &outs[no];
    *o = (output_tensor)INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__INIT;
    o->name = (char *)t->name;
    o->datatype = (char *)hark_datatype_name(t->datatype);
    o->n_shape = t->ndims;
    o->shape = (int64_t *)t->shape;
    out_ptrs[no] = o;
    raw[no].len = t->byte_size;
    raw[no].data = (uint8_t *)t->data;
    hark_shm_region *r = output_region(j, at);
    if (r) { /* the data went to the region: an empty raw entry keeps the
              * indexes of outputs and raw_output_contents the same */
      raw[no].len = 0;
      raw[no].data = NULL;
      output_param_entry *pe = &shm_entries[2 * i];
      Inference__InferParameter *pv = &shm_values[2 * i];
      for (int k = 0; k < 2; k++) {
        pv[k] = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
        pe[k] = (output_param_entry)
            INFERENCE__MODEL_INFER_RESPONSE__INFER_OUTPUT_TENSOR__PARAMETERS_ENTRY__INIT;
        pe[k].value = &pv[k];
        shm_ptrs[2 * i + k] = &pe[k];
      }
      pe[0].key = "shared_memory_region";
      pv[0].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
      pv[0].string_param = (char *)hark_shm_region_name(r);
      pe[1].key = "shared_memory_byte_size";
      pv[1].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_UINT64_PARAM;
      pv[1].uint64_param = t->byte_size;
      o->parameters = &shm_ptrs[2 * i];
      o->n_parameters = 2;
    }
    no++;
  }
  uint32_t k = 0;
  if (seq) { /* echoed as sent, as Triton does */
    params[k] = (param_entry)INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    params[k].key = "sequence_id";
    params[k].value = (Inference__InferParameter *)seq;
    param_ptrs[k] = &params[k];
    k++;
  }
  for (uint32_t i = 0; i < np; i++) {
    const char *key;
    const char *value = hark_response_parameter_at(resp, i, &key);
    if (seq && strcmp(key, "sequence_id") == 0) continue;
    values[k] = (Inference__InferParameter)INFERENCE__INFER_PARAMETER__INIT;
    values[k].parameter_choice_case = INFERENCE__INFER_PARAMETER__PARAMETER_CHOICE_STRING_PARAM;
    values[k].string_param = (char *)value;
    params[k] = (param_entry)INFERENCE__MODEL_INFER_RESPONSE__PARAMETERS_ENTRY__INIT;
    params[k].key = (char *)key;
    params[k].value = &values[k];
    param_ptrs[k] = &params[k];
    k++;
  }
  snprintf(b->version, sizeof b->version, "%" PRId64, j->model_version);
  b->r.model_name = j->model_name;
  b->r.model_version = b->version;
  b->r.id = (char *)hark_response_id(resp);
  b->r.outputs = out_ptrs;
  b->r.n_outputs = no;
  b->r.raw_output_contents = raw;
  b->r.n_raw_output_contents = no;
  b->r.parameters = param_ptrs;
  b->r.n_parameters = k;
}

static void reply_free(reply *b) { hark_arena_free(b->a); }

/* ---- ModelInfer ------------------------------------------------------------------ */

/* The engine's callback for ModelInfer: a worker, or the queue thread
 * after an inline run. A unary call answers with one response: the first a
 * (decoupled) model sends, or the final's. */
static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  job *j = userp;
  if (resp && !j->kept) {
    j->kept = resp;
    resp = NULL;
  }
  hark_response_free(resp);
  if (!(flags & HARK_RESPONSE_FINAL)) {
    hark_error_free(err);
    return;
  }
  hark_grpc_call *c = j->c;
  if (err) {
    hark_grpc_reply_error(c, err);
  } else if (!j->kept) {
    hark_grpc_reply(c, NULL, HARK_GRPC_INTERNAL, "the model sent no response");
  } else if ((err = shm_write_outputs(j, j->kept))) {
    hark_grpc_reply_error(c, err);
  } else {
    reply b;
    reply_build(&b, j, j->kept);
    hark_grpc_reply(c, &b.r.base, HARK_GRPC_OK, NULL);
    reply_free(&b);
  }
  job_free(j);
  hark_grpc_call_unref(c); /* the engine's reference */
}

/* Hands `msg` to the engine as job `j`. On error nothing reached the
 * engine. */
static hark_error *submit(job *j, ProtobufCMessage *msg, hark_response_fn fn) {
  hark_grpc_call *c = j->c;
  hark_kserve *ks = hark_grpc_call_service(c);
  infer_request *q = (infer_request *)msg;
  snprintf(j->id, sizeof j->id, "%s", q->id);
  int64_t version;
  hark_model *model = NULL;
  hark_error *err = hark_kserve_parse_version(q->model_version, true, &version);
  if (!err) err = hark_server_model_acquire(ks->server, q->model_name, version, &model);
  if (err) return err;
  j->model_name = hark_xstrdup(hark_model_name(model));
  j->model_version = hark_model_version(model);
  hark_request *req = hark_request_new(model);
  hark_model_release(model);
  /* The inputs point into the message: it lives as long as the request. */
  hark_request_attach(req, hark_grpc_take_message(c), hark_grpc_message_free);
  j->request = q;
  err = hark_kserve_grpc_to_request(q, ks->shm, req, &j->sequence_id, &j->shm);
  if (!err) {
    hark_request_set_callback(req, fn, j);
    hark_request_set_cancel(req, hark_grpc_call_cancel_token(c)); /* the client may go */
    hark_request_set_client(req, hark_grpc_call_peer(c));
    hark_grpc_call_ref(c);
    err = hark_server_infer(ks->server, req);
    if (err) hark_grpc_call_unref(c);
  }
  if (err) {
    j->request = NULL;
    j->sequence_id = NULL;
    j->shm = NULL;
    hark_request_free(req);
  }
  return err;
}

void hark_kserve_grpc_infer(hark_grpc_call *c, ProtobufCMessage *msg) {
  job *j = job_new(c);
  hark_error *err = submit(j, msg, on_response);
  if (err) {
    job_free(j);
    hark_grpc_reply_error(c, err);
  }
}

/* ---- ModelStreamInfer -------------------------------------------------------------- */

/* A stream reply: a response, or an error text with the request's id.
 * Dropped when the call is over. */
static void stream_push(job *j, const hark_response *resp, const char *error) {
  Inference__ModelStreamInferResponse sr = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
  reply b = {0};
  Inference__ModelInferResponse er = INFERENCE__MODEL_INFER_RESPONSE__INIT;
  if (resp) {
    reply_build(&b, j, resp);
    sr.infer_response = &b.r;
  } else {
    sr.error_message = (char *)error;
    er.id = j->id;
    sr.infer_response = &er;
  }
  size_t size = 0;
  hark_grpc_write w = hark_grpc_slot_write(j->c, &j->slot, &sr.base, &size);
  if (resp) reply_free(&b);
  if (w != HARK_GRPC_WRITE_TOO_BIG) return;
  char text[200]; /* too big: say so in the stream */
  snprintf(text, sizeof text, "response of %zu bytes is larger than the limit", size);
  Inference__ModelStreamInferResponse tb = INFERENCE__MODEL_STREAM_INFER_RESPONSE__INIT;
  tb.error_message = text;
  er.id = j->id;
  tb.infer_response = &er;
  hark_grpc_slot_write(j->c, &j->slot, &tb.base, &size);
}

/* The engine's callback for a stream job, on a worker thread. */
static void on_stream_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  job *j = userp;
  hark_grpc_call *c = j->c;
  hark_error *werr = resp ? shm_write_outputs(j, resp) : NULL;
  if (werr) {
    stream_push(j, NULL, hark_error_message(werr));
    hark_error_free(werr);
  } else if (resp) {
    stream_push(j, resp, NULL);
  }
  if (err) stream_push(j, NULL, hark_error_message(err));
  hark_response_free(resp);
  hark_error_free(err);
  if (!(flags & HARK_RESPONSE_FINAL)) return;
  j->request = NULL; /* freed with the engine request after this call */
  j->sequence_id = NULL;
  j->shm = NULL;
  hark_grpc_slot_done(c, &j->slot);
  hark_grpc_call_unref(c); /* the engine's reference */
}

/* The id (field 3) of a ModelInferRequest from its first bytes on the
 * wire, without unpacking it: it comes after the model's name and
 * version. Empty when it is not among them. */
static void wire_id(const uint8_t *p, size_t n, char *id, size_t cap) {
  const uint8_t *end = p + n;
  id[0] = 0;
  while (p < end) {
    uint64_t tag = 0, len = 0;
    unsigned shift = 0;
    do tag |= (uint64_t)(*p & 0x7f) << shift, shift += 7;
    while (*p++ & 0x80 && p < end && shift < 64);
    if ((tag & 7) != 2 || p >= end) return; /* the first fields are all strings */
    shift = 0;
    do len |= (uint64_t)(*p & 0x7f) << shift, shift += 7;
    while (*p++ & 0x80 && p < end && shift < 64);
    if (len > (uint64_t)(end - p)) return;
    if (tag >> 3 == 3) {
      snprintf(id, cap, "%.*s", (int)(len < cap ? len : cap - 1), (const char *)p);
      return;
    }
    p += len;
  }
}

void hark_kserve_grpc_stream_infer_refused(hark_grpc_call *c, const uint8_t *p, size_t n,
                                           const char *why) {
  job *j = job_new(c);
  wire_id(p, n, j->id, sizeof j->id);
  hark_grpc_slot_append(c, &j->slot, slot_free);
  stream_push(j, NULL, why);
  hark_grpc_slot_done(c, &j->slot);
}

void hark_kserve_grpc_stream_infer(hark_grpc_call *c, ProtobufCMessage *msg) {
  job *j = job_new(c);
  /* Its slot first, so its replies find their place. */
  hark_grpc_slot_append(c, &j->slot, slot_free);
  hark_error *err = submit(j, msg, on_stream_response);
  if (err) {
    stream_push(j, NULL, hark_error_message(err));
    hark_error_free(err);
    hark_grpc_slot_done(c, &j->slot);
  }
}
