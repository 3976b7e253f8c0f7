/*
 * validate.c — checks a request against its model's config before it is
 * queued, so backends only ever see inputs that match: names, data types,
 * shapes (with the batch dimension when the model batches), byte sizes, and
 * requested output names. Messages follow Triton's wording where it has one.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

static void shape_str(char *buf, size_t cap, const int64_t *dims, uint32_t n, bool batch) {
  size_t used = (size_t)snprintf(buf, cap, "[");
  if (batch)
    used += (size_t)snprintf(buf + used, used < cap ? cap - used : 0, "-1%s", n ? "," : "");
  for (uint32_t i = 0; i < n && used < cap; i++)
    used += (size_t)snprintf(buf + used, cap - used, "%lld%s", (long long)dims[i],
                             i + 1 < n ? "," : "");
  if (used < cap) snprintf(buf + used, cap - used, "]");
}

/* BYTES tensors: every element is a 4-byte little-endian length and its
 * bytes, and the elements must fill byte_size exactly. */
static hark_error *check_input(const hark_request *req, const hark_model_io *io,
                               const hark_tensor *t, uint32_t *batch) {
  const hark_model_config *cfg = req->model->config;
  const char *model = cfg->name;
  bool batching = cfg->max_batch_size > 0;
  if (t->datatype != io->datatype)
    return hark_error_new(
        HARK_ERR_INVALID_ARG, "inference input '%s' data-type is '%s', but model '%s' expects '%s'",
        t->name, hark_datatype_name(t->datatype), model, hark_datatype_name(io->datatype));
  uint32_t off = batching ? 1 : 0;
  bool ok = t->ndims == io->ndims + off;
  for (uint32_t i = 0; ok && i < io->ndims; i++)
    ok = t->shape[i + off] >= 0 && (io->dims[i] == -1 || io->dims[i] == t->shape[i + off]);
  if (ok && batching) {
    if (t->shape[0] < 1 || t->shape[0] > (int64_t)cfg->max_batch_size)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "inference request batch-size must be <= %u for '%s', got %lld",
                            cfg->max_batch_size, model, (long long)t->shape[0]);
    if (*batch && *batch != (uint32_t)t->shape[0])
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "input '%s' has batch size %lld but an earlier input has %u", t->name,
                            (long long)t->shape[0], *batch);
    *batch = (uint32_t)t->shape[0];
  }
  if (!ok) {
    char want[256], got[256];
    shape_str(want, sizeof want, io->dims, io->ndims, batching);
    shape_str(got, sizeof got, t->shape, t->ndims, false);
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "unexpected shape for input '%s' for model '%s'. Expected %s, got %s",
                          t->name, model, want, got);
  }
  int64_t count = hark_shape_count(t->shape, t->ndims);
  if (t->datatype == HARK_TYPE_BYTES) {
    if (count < 0 || !hark_bytes_check(t->data, t->byte_size, count))
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "input '%s' for model '%s': BYTES data does not hold %lld "
                            "length-prefixed elements in %zu bytes",
                            t->name, model, (long long)count, t->byte_size);
    return NULL;
  }
  size_t want = (size_t)count * hark_datatype_size(t->datatype);
  if (count < 0 || want != t->byte_size)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "input byte size mismatch for input '%s' for model '%s'. "
                          "Expected %zu, got %zu",
                          t->name, model, want, t->byte_size);
  return NULL;
}

hark_error *hark_request_validate(hark_request *req) {
  const hark_model_config *cfg = req->model->config;
  uint32_t batch = 0;
  for (uint32_t i = 0; i < req->n_inputs; i++) {
    const hark_tensor *t = &req->inputs[i];
    const hark_model_io *io = NULL;
    for (uint32_t j = 0; j < cfg->n_inputs && !io; j++)
      if (strcmp(cfg->inputs[j].name, t->name) == 0) io = &cfg->inputs[j];
    if (!io)
      return hark_error_new(HARK_ERR_INVALID_ARG, "unexpected inference input '%s' for model '%s'",
                            t->name, cfg->name);
    hark_error *err = check_input(req, io, t, &batch);
    if (err) return err;
  }
  for (uint32_t j = 0; j < cfg->n_inputs; j++) {
    const hark_model_io *io = &cfg->inputs[j];
    if (!io->optional && !hark_request_input_by_name(req, io->name))
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "expected %u inputs but got %u inputs for model '%s': "
                            "missing required input '%s'",
                            cfg->n_inputs, req->n_inputs, cfg->name, io->name);
  }
  for (uint32_t i = 0; i < req->n_requested; i++) {
    bool found = false;
    for (uint32_t j = 0; j < cfg->n_outputs && !found; j++)
      found = strcmp(cfg->outputs[j].name, req->requested[i]) == 0;
    if (!found)
      return hark_error_new(HARK_ERR_INVALID_ARG, "unexpected inference output '%s' for model '%s'",
                            req->requested[i], cfg->name);
  }
  req->batch_size = batch ? batch : 1;
  return NULL;
}
