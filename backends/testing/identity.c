/*
 * identity — copies each input to the output at the same position in the
 * config (INPUT0 → OUTPUT0, ...), for every data type, BYTES included.
 *
 * Parameter "execute_delay_us" adds a fixed cost to every execution,
 * whatever the batch size — the shape of a real accelerator call — so the
 * value of dynamic batching can be measured (fixed_cost models).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hark/backend.h"

typedef struct identity_model {
  uint64_t delay_us;
} identity_model;

static hark_error *model_init(hark_model *model) {
  const hark_model_config *cfg = hark_model_get_config(model);
  if (cfg->n_inputs != cfg->n_outputs || cfg->n_inputs == 0)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "identity: model '%s' needs as many outputs as inputs (got %u and %u)",
                          cfg->name, cfg->n_inputs, cfg->n_outputs);
  for (uint32_t i = 0; i < cfg->n_inputs; i++)
    if (cfg->inputs[i].datatype != cfg->outputs[i].datatype)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "identity: input '%s' and output '%s' of model '%s' differ in type",
                            cfg->inputs[i].name, cfg->outputs[i].name, cfg->name);
  identity_model *state = calloc(1, sizeof *state);
  if (!state) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  const char *delay = hark_model_parameter(model, "execute_delay_us");
  if (delay) {
    char *end;
    long long v = strtoll(delay, &end, 10);
    if (!*delay || *end || v < 0 || v > 10000000) {
      free(state);
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "identity: parameter execute_delay_us must be 0..10000000, got '%s'",
                            delay);
    }
    state->delay_us = (uint64_t)v;
  }
  hark_model_set_state(model, state);
  return NULL;
}

static void model_fini(hark_model *model) { free(hark_model_state(model)); }
static hark_error *instance_init(hark_instance *inst) {
  (void)inst;
  return NULL;
}
static void instance_fini(hark_instance *inst) { (void)inst; }

static void respond(hark_request *req, const hark_model_config *cfg) {
  hark_response *resp = hark_response_new(req);
  hark_error *err = NULL;
  for (uint32_t i = 0; i < cfg->n_inputs && !err; i++) {
    const hark_tensor *in = hark_request_input_by_name(req, cfg->inputs[i].name);
    if (!in) continue; /* an optional input that was not given */
    void *out;
    err = hark_response_add_output(resp, cfg->outputs[i].name, in->datatype, in->shape, in->ndims,
                                   in->byte_size, &out);
    if (!err && in->byte_size) memcpy(out, in->data, in->byte_size);
  }
  if (err) {
    hark_response_free(resp);
    hark_request_complete(req, err);
    return;
  }
  hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
}

static hark_error *instance_execute(hark_instance *inst, hark_request **reqs, uint32_t n) {
  hark_model *model = hark_instance_model(inst);
  const identity_model *state = hark_model_state(model);
  if (state->delay_us) {
    struct timespec ts = {(time_t)(state->delay_us / 1000000),
                          (long)(state->delay_us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  const hark_model_config *cfg = hark_model_get_config(model);
  for (uint32_t i = 0; i < n; i++) respond(reqs[i], cfg);
  return NULL;
}

static const hark_backend_api api = {
    .api_version = HARK_BACKEND_API_VERSION,
    .model_init = model_init,
    .model_fini = model_fini,
    .instance_init = instance_init,
    .instance_fini = instance_fini,
    .instance_execute = instance_execute,
};

HARK_BACKEND_EXPORT const hark_backend_api *hark_backend_get_api(void) { return &api; }
