/*
 * simple — Triton's classic "simple" test model as a hark backend:
 * INT32 INPUT0 and INPUT1 of 16 elements per batch item give
 * OUTPUT0 = INPUT0 + INPUT1 and OUTPUT1 = INPUT0 - INPUT1.
 * Stateless, so any number of instances may share nothing.
 */
#include <string.h>

#include "hark/backend.h"

static hark_error *model_init(hark_model *model) {
  const hark_model_config *cfg = hark_model_get_config(model);
  if (cfg->n_inputs != 2 || cfg->n_outputs != 2)
    return hark_error_new(HARK_ERR_INVALID_ARG, "simple: model '%s' needs 2 inputs and 2 outputs",
                          cfg->name);
  for (uint32_t i = 0; i < 2; i++)
    if (cfg->inputs[i].datatype != HARK_TYPE_INT32 || cfg->outputs[i].datatype != HARK_TYPE_INT32)
      return hark_error_new(HARK_ERR_INVALID_ARG, "simple: model '%s' tensors must be TYPE_INT32",
                            cfg->name);
  return NULL;
}

static void model_fini(hark_model *model) { (void)model; }
static hark_error *instance_init(hark_instance *inst) {
  (void)inst;
  return NULL;
}
static void instance_fini(hark_instance *inst) { (void)inst; }

static hark_error *run_one(hark_request *req, const hark_model_config *cfg) {
  const hark_tensor *a = hark_request_input_by_name(req, cfg->inputs[0].name);
  const hark_tensor *b = hark_request_input_by_name(req, cfg->inputs[1].name);
  if (!a || !b || a->byte_size != b->byte_size)
    return hark_error_new(HARK_ERR_INVALID_ARG, "simple: INPUT0 and INPUT1 must have equal sizes");
  size_t n = a->byte_size / sizeof(int32_t);
  hark_response *resp = hark_response_new(req);
  int32_t *sum, *diff;
  hark_error *err = hark_response_add_output(resp, cfg->outputs[0].name, HARK_TYPE_INT32, a->shape,
                                             a->ndims, a->byte_size, (void **)&sum);
  if (!err)
    err = hark_response_add_output(resp, cfg->outputs[1].name, HARK_TYPE_INT32, a->shape, a->ndims,
                                   a->byte_size, (void **)&diff);
  if (err) {
    hark_response_free(resp);
    return err;
  }
  const int32_t *x = a->data, *y = b->data;
  for (size_t i = 0; i < n; i++) {
    /* Wrap like the int32 hardware does rather than overflow UB. */
    sum[i] = (int32_t)((uint32_t)x[i] + (uint32_t)y[i]);
    diff[i] = (int32_t)((uint32_t)x[i] - (uint32_t)y[i]);
  }
  hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
  return NULL;
}

static hark_error *instance_execute(hark_instance *inst, hark_request **reqs, uint32_t n) {
  const hark_model_config *cfg = hark_model_get_config(hark_instance_model(inst));
  for (uint32_t i = 0; i < n; i++) {
    hark_error *err = run_one(reqs[i], cfg);
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
};

HARK_BACKEND_EXPORT const hark_backend_api *hark_backend_get_api(void) { return &api; }
