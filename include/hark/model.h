/*
 * hark/model.h — a loaded model version, as anything that holds one reads
 * it: its name, version, folder and config. The one header both readers
 * share: a front end gets a model from hark/server.h and reads it here; a
 * backend gets everything, this included, from hark/backend.h. So a file's
 * includes say which it is: a front end never includes hark/backend.h (as
 * Triton splits tritonserver.h from tritonbackend.h).
 *
 * Everything here is part of the backend API (hark/backend.h's version
 * rules): a model is read-only once loaded, so these are safe from any
 * thread while the caller holds the model.
 */
#ifndef HARK_MODEL_H
#define HARK_MODEL_H

#include <stdint.h>

#include "hark/config.h"
#include "hark/request.h"

#ifdef __cplusplus
extern "C" {
#endif

const char *hark_model_name(const hark_model *model);
int64_t hark_model_version(const hark_model *model);
/* The model's folder in the repository, e.g. "models/simple". */
const char *hark_model_path(const hark_model *model);
/* Owned by the model; valid while the caller holds it. */
const hark_model_config *hark_model_get_config(const hark_model *model);
/* parameters[key] from config.pbtxt, or NULL. */
const char *hark_model_parameter(const hark_model *model, const char *key);

#ifdef __cplusplus
}
#endif

#endif
