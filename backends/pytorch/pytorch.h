/*
 * pytorch.h — the TorchScript backend's private structures, shared by its
 * three files: backend.cc (the C entry points, where every C++ exception
 * stops), model.cc (loading a module and binding config.pbtxt's tensors to
 * its forward arguments and results) and execute.cc (one batch: stack the
 * requests' inputs on dim 0, one forward, split the results back).
 *
 * C++ lives only here, behind include/hark/backend.h. Nothing in this
 * folder lets an exception leave a function the server calls.
 */
#ifndef HARK_PYTORCH_H
#define HARK_PYTORCH_H

#include <ATen/Parallel.h>
#include <torch/script.h>

#include <string>
#include <vector>

#include "hark/backend.h"

namespace hark_pt {

/* One tensor of the model as the backend sees it: a config input or
 * output, a sequence control input or an implicit state tensor. */
struct binding {
  std::string name;
  hark_datatype dt = HARK_TYPE_INVALID;
  at::ScalarType st = at::kFloat;
  std::vector<int64_t> dims; /* without the batch dimension; -1 = any */
  bool known_dims = true;    /* false for control inputs (the engine's shape) */
  bool state = false;        /* an implicit state tensor: always produced */
  size_t position = 0;       /* forward argument (self excluded) or result index */
};

/* Shared, read-only after model_init. */
struct model {
  std::string name;
  int64_t version = 0;
  std::string file; /* <repository>/<model>/<version>/<default_model_filename> */
  bool batched = false;
  std::vector<binding> inputs; /* sorted by position */
  std::vector<binding> outputs;
  /* forward's arguments after self: defaults for the ones no input binds */
  std::vector<c10::Argument> args;
  int intra_threads = 1;
  int64_t pad_multiple = 1; /* BATCH_PAD_MULTIPLE: rows of a forward call, rounded up */
};

struct instance {
  model *m = nullptr;
  std::string name;
  torch::jit::Module module;
};

/* model.cc. Throw hark_pt::failure with the message a client sees. */
struct failure : std::runtime_error {
  hark_code code;
  failure(hark_code c, const std::string &msg) : std::runtime_error(msg), code(c) {}
};

/* Loads `file` as TorchScript; a failure names model and file. */
torch::jit::Module load_module(const model &m);
/* Fills m.inputs/outputs/args from the config and the module's forward. */
void bind(model &m, const hark_model_config *cfg, const torch::jit::Module &module);
/* The torch type of a hark data type; throws for types torch lacks. */
at::ScalarType scalar_type(const model &m, const std::string &tensor, hark_datatype dt);
const char *scalar_name(at::ScalarType st);
std::string shape_string(const std::vector<int64_t> &dims, bool batch);

/* execute.cc: runs the batch and answers every request (never throws). */
void execute(instance &inst, hark_request **reqs, uint32_t n);

} // namespace hark_pt

#endif
