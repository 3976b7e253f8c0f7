/*
 * accumulate — a stateful test model for the sequence batcher: INT32
 * INPUT [1] gives OUTPUT [1] = the running sum of INPUT over the sequence.
 *
 * Two ways to keep the sum, chosen by the model's config:
 *   - backend state (no `state` in sequence_batching): the sum lives in a
 *     small struct set with hark_request_set_sequence_state, created on the
 *     first request and freed only by sequence_fini — so a test sees the
 *     engine free it on END, idle expiry, restart and unload;
 *   - implicit state (`state` with input_name/output_name): the engine
 *     feeds the previous sum as that input and keeps the output.
 * Every response carries parameter "live_states": how many backend states
 * exist in the process (all accumulate models together) apart from the one
 * this request uses — 0 once every other sequence has ended, been expired
 * or unloaded, which is how tests see sequence_fini run. Parameter "execute_delay_us" makes each
 * execution slow, so tests can queue behind it; "batch_size" reports how many requests the
 * execution carried.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hark/backend.h"

typedef struct acc_model {
  uint64_t delay_us;
  const hark_seq_state *state; /* implicit state, or NULL */
} acc_model;

/* Backend states allocated and not yet finalized, process-wide, so that a
 * count survives the unload of the model that held them. */
static atomic_long live;

typedef struct acc_seq {
  int64_t sum;
} acc_seq;

static hark_error *model_init(hark_model *model) {
  const hark_model_config *cfg = hark_model_get_config(model);
  if (!cfg->sequence_batching.enabled)
    return hark_error_new(HARK_ERR_INVALID_ARG, "accumulate: model '%s' needs sequence_batching",
                          cfg->name);
  if (cfg->n_inputs != 1 || cfg->n_outputs != 1 || cfg->inputs[0].datatype != HARK_TYPE_INT32 ||
      cfg->outputs[0].datatype != HARK_TYPE_INT32)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "accumulate: model '%s' needs one INT32 input and one INT32 output",
                          cfg->name);
  if (cfg->sequence_batching.n_states > 1 ||
      (cfg->sequence_batching.n_states == 1 &&
       cfg->sequence_batching.states[0].datatype != HARK_TYPE_INT32))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "accumulate: model '%s' takes at most one INT32 state", cfg->name);
  acc_model *am = calloc(1, sizeof *am);
  if (!am) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  am->state = cfg->sequence_batching.n_states ? &cfg->sequence_batching.states[0] : NULL;
  const char *delay = hark_model_parameter(model, "execute_delay_us");
  if (delay) am->delay_us = strtoull(delay, NULL, 10);
  hark_model_set_state(model, am);
  return NULL;
}

static void model_fini(hark_model *model) { free(hark_model_state(model)); }
static hark_error *instance_init(hark_instance *inst) {
  (void)inst;
  return NULL;
}
static void instance_fini(hark_instance *inst) { (void)inst; }

static void sequence_fini(hark_model *model, void *state) {
  (void)model;
  free(state);
  atomic_fetch_sub(&live, 1);
}

/* Echoes the control_input tensors the engine added, as response
 * parameters "control_<name>", so tests can see them. */
static void echo_controls(const hark_model_config *cfg, hark_request *req, hark_response *resp) {
  for (uint32_t i = 0; i < cfg->sequence_batching.n_controls; i++) {
    const hark_seq_control *c = &cfg->sequence_batching.controls[i];
    const hark_tensor *t = hark_request_input_by_name(req, c->name);
    if (!t || !t->byte_size) continue;
    char key[128], text[256] = "";
    snprintf(key, sizeof key, "control_%s", c->name);
    if (t->datatype == HARK_TYPE_UINT64 || t->datatype == HARK_TYPE_INT64) {
      uint64_t v;
      memcpy(&v, t->data, sizeof v);
      snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    } else if (t->datatype == HARK_TYPE_BYTES && t->byte_size > 4) {
      snprintf(text, sizeof text, "%.*s", (int)(t->byte_size - 4), (const char *)t->data + 4);
    } else if (t->datatype == HARK_TYPE_FP32) {
      float v;
      memcpy(&v, t->data, sizeof v);
      snprintf(text, sizeof text, "%g", v);
    } else if (t->datatype == HARK_TYPE_BOOL) {
      snprintf(text, sizeof text, "%d", *(const uint8_t *)t->data);
    } else {
      int32_t v;
      memcpy(&v, t->data, sizeof v);
      snprintf(text, sizeof text, "%d", v);
    }
    hark_response_set_parameter(resp, key, text);
  }
}

static int32_t first_int(const hark_tensor *t) {
  int32_t v = 0;
  if (t && t->byte_size >= sizeof v) memcpy(&v, t->data, sizeof v);
  return v;
}

static hark_error *run_one(acc_model *am, const hark_model_config *cfg, hark_request *req,
                           uint32_t batch) {
  int32_t in = first_int(hark_request_input_by_name(req, cfg->inputs[0].name));
  int64_t sum;
  long others;
  if (am->state) {
    sum = first_int(hark_request_input_by_name(req, am->state->input_name)) + (int64_t)in;
    others = atomic_load(&live);
  } else {
    acc_seq *seq = hark_request_sequence_state(req);
    others = atomic_load(&live) - (seq ? 1 : 0);
    if (!seq) {
      if (!(seq = calloc(1, sizeof *seq)))
        return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
      atomic_fetch_add(&live, 1);
      hark_request_set_sequence_state(req, seq);
    }
    seq->sum += in;
    sum = seq->sum;
  }
  hark_response *resp = hark_response_new(req);
  int64_t shape[2] = {1, 1};
  uint32_t ndims = cfg->max_batch_size ? 2 : 1;
  int32_t *out;
  hark_error *err = hark_response_add_output(resp, cfg->outputs[0].name, HARK_TYPE_INT32, shape,
                                             ndims, sizeof *out, (void **)&out);
  if (!err && am->state) {
    int32_t *next;
    int64_t sshape[HARK_MAX_DIMS + 1] = {1};
    uint32_t sn = cfg->max_batch_size ? 1 : 0;
    for (uint32_t i = 0; i < am->state->ndims; i++) sshape[sn++] = 1;
    err = hark_response_add_output(resp, am->state->output_name, HARK_TYPE_INT32, sshape, sn,
                                   sizeof *next, (void **)&next);
    if (!err) *next = (int32_t)sum;
  }
  if (err) {
    hark_response_free(resp);
    return err;
  }
  *out = (int32_t)sum;
  char text[32];
  snprintf(text, sizeof text, "%ld", others);
  hark_response_set_parameter(resp, "live_states", text);
  snprintf(text, sizeof text, "%u", batch);
  hark_response_set_parameter(resp, "batch_size", text);
  echo_controls(cfg, req, resp);
  hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
  return NULL;
}

static hark_error *instance_execute(hark_instance *inst, hark_request **reqs, uint32_t n) {
  hark_model *model = hark_instance_model(inst);
  acc_model *am = hark_model_state(model);
  if (am->delay_us) {
    struct timespec ts = {(time_t)(am->delay_us / 1000000), (long)(am->delay_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  const hark_model_config *cfg = hark_model_get_config(model);
  for (uint32_t i = 0; i < n; i++) {
    hark_error *err = run_one(am, cfg, reqs[i], n);
    if (err) hark_request_complete(reqs[i], err);
  }
  return NULL;
}

static const hark_backend_api api = {
    .api_version = HARK_BACKEND_API_VERSION,
    .model_init = model_init,
    .model_fini = model_fini,
    .instance_init = instance_init,
    .instance_fini = instance_fini,
    .instance_execute = instance_execute,
    .sequence_fini = sequence_fini,
};

HARK_BACKEND_EXPORT const hark_backend_api *hark_backend_get_api(void) { return &api; }
