/*
 * model.cc — a TorchScript file and the binding of config.pbtxt's tensors
 * to it, as Triton's PyTorch backend binds them.
 *
 * Inputs (config inputs, then the sequence batcher's control inputs and
 * implicit state inputs) bind to forward's arguments: by Triton's
 * NAME__<index> convention when every input name follows it (index = the
 * argument's position after self), else by the arguments' names. Outputs
 * (config outputs, then implicit state outputs) bind to forward's results
 * (one Tensor, a tuple or a List of Tensors): by NAME__<index> when every
 * output name follows it, else in that order. Everything that can be
 * checked before a request arrives is checked here, so a model that does
 * not fit its config fails to load with a message that names the model,
 * the tensor, what was expected and what was found.
 */
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>

#include "pytorch.h"

namespace hark_pt {

namespace {

std::string model_label(const model &m) {
  return "pytorch: model '" + m.name + "' version " + std::to_string(m.version);
}

/* Triton's NAME__<index>: *index is the number after the last "__". */
bool convention_index(const std::string &name, size_t *index) {
  size_t at = name.rfind("__");
  if (at == std::string::npos || at == 0 || at + 2 == name.size()) return false;
  size_t v = 0;
  for (size_t i = at + 2; i < name.size(); i++) {
    if (name[i] < '0' || name[i] > '9' || v > 100000) return false;
    v = v * 10 + (size_t)(name[i] - '0');
  }
  *index = v;
  return true;
}

bool all_follow_convention(const std::vector<binding> &list) {
  size_t ignored;
  for (const binding &b : list)
    if (!convention_index(b.name, &ignored)) return false;
  return !list.empty();
}

std::string signature(const std::vector<c10::Argument> &args) {
  std::string s = "forward(self";
  for (const c10::Argument &a : args) s += ", " + a.name() + ": " + a.type()->annotation_str();
  return s + ")";
}

bool is_tensor_type(const c10::TypePtr &t) {
  c10::TypePtr elem = t;
  if (t->kind() == c10::TypeKind::OptionalType)
    elem = t->castRaw<c10::OptionalType>()->getElementType();
  return elem->kind() == c10::TypeKind::TensorType;
}

binding make_binding(const model &m, const char *name, hark_datatype dt, const int64_t *dims,
                     uint32_t ndims, bool known_dims, bool state) {
  binding b;
  b.name = name;
  b.dt = dt;
  b.st = scalar_type(m, b.name, dt);
  b.dims.assign(dims, dims + ndims);
  b.known_dims = known_dims;
  b.state = state;
  return b;
}

void bind_inputs(model &m, const std::vector<c10::Argument> &args) {
  bool conv = all_follow_convention(m.inputs);
  std::vector<const binding *> taken(args.size(), nullptr);
  for (binding &b : m.inputs) {
    size_t pos = args.size();
    if (conv) {
      convention_index(b.name, &pos);
      if (pos >= args.size())
        throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": input '" + b.name +
                                                "' names forward argument " + std::to_string(pos) +
                                                ", but " + signature(args) + " takes " +
                                                std::to_string(args.size()));
    } else {
      for (size_t i = 0; i < args.size() && pos == args.size(); i++)
        if (args[i].name() == b.name) pos = i;
      if (pos == args.size()) {
        std::string names;
        for (const c10::Argument &a : args) names += (names.empty() ? "'" : ", '") + a.name() + "'";
        throw failure(HARK_ERR_INVALID_ARG,
                      model_label(m) + ": input '" + b.name + "' matches no argument of " +
                          signature(args) + ": expected one of " +
                          (names.empty() ? std::string("(none)") : names) +
                          ", or every input named by Triton's NAME__<index> convention");
      }
    }
    if (taken[pos])
      throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": inputs '" + taken[pos]->name +
                                              "' and '" + b.name + "' both bind forward argument " +
                                              std::to_string(pos) + " ('" + args[pos].name() +
                                              "')");
    if (!is_tensor_type(args[pos].type()))
      throw failure(HARK_ERR_INVALID_ARG,
                    model_label(m) + ": input '" + b.name + "' binds forward argument '" +
                        args[pos].name() + "' of type " + args[pos].type()->annotation_str() +
                        "; expected Tensor (hark passes every input as a Tensor)");
    taken[pos] = &b;
    b.position = pos;
  }
  for (size_t i = 0; i < args.size(); i++)
    if (!taken[i] && !args[i].default_value())
      throw failure(HARK_ERR_INVALID_ARG,
                    model_label(m) + ": forward argument " + std::to_string(i) + " ('" +
                        args[i].name() + "') of " + signature(args) +
                        " gets no input: expected an input named '" + args[i].name() +
                        "' or NAME__" + std::to_string(i) + " in config.pbtxt");
  std::sort(m.inputs.begin(), m.inputs.end(),
            [](const binding &a, const binding &b) { return a.position < b.position; });
}

void bind_outputs(model &m, const c10::FunctionSchema &schema) {
  bool conv = all_follow_convention(m.outputs);
  c10::TypePtr ret = schema.returns().empty() ? c10::NoneType::get() : schema.returns()[0].type();
  /* How many results forward gives, when its type says (SIZE_MAX: a List). */
  size_t n_results = SIZE_MAX;
  const c10::TupleType *tuple = nullptr;
  if (ret->kind() == c10::TypeKind::TensorType) {
    n_results = 1;
  } else if (ret->kind() == c10::TypeKind::TupleType) {
    tuple = ret->castRaw<c10::TupleType>();
    n_results = tuple->elements().size();
  } else if (ret->kind() != c10::TypeKind::ListType ||
             ret->castRaw<c10::ListType>()->getElementType()->kind() != c10::TypeKind::TensorType) {
    throw failure(HARK_ERR_INVALID_ARG,
                  model_label(m) + ": forward returns " + ret->annotation_str() +
                      "; expected a Tensor, a tuple of Tensors or a List[Tensor]");
  }
  std::vector<const binding *> taken;
  for (size_t i = 0; i < m.outputs.size(); i++) {
    binding &b = m.outputs[i];
    size_t pos = i;
    if (conv) convention_index(b.name, &pos);
    if (n_results != SIZE_MAX && pos >= n_results)
      throw failure(HARK_ERR_INVALID_ARG,
                    model_label(m) + ": output '" + b.name + "' is result " + std::to_string(pos) +
                        " of forward, but forward returns " + ret->annotation_str() + " (" +
                        std::to_string(n_results) + " result" + (n_results == 1 ? "" : "s") + ")");
    if (tuple && tuple->elements()[pos]->kind() != c10::TypeKind::TensorType)
      throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": output '" + b.name + "' is result " +
                                              std::to_string(pos) + " of forward, of type " +
                                              tuple->elements()[pos]->annotation_str() +
                                              "; expected Tensor");
    if (taken.size() <= pos) taken.resize(pos + 1, nullptr);
    if (taken[pos])
      throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": outputs '" + taken[pos]->name +
                                              "' and '" + b.name + "' both bind result " +
                                              std::to_string(pos) + " of forward");
    taken[pos] = &b;
    b.position = pos;
  }
}

} // namespace

at::ScalarType scalar_type(const model &m, const std::string &tensor, hark_datatype dt) {
  switch (dt) {
  case HARK_TYPE_BOOL: return at::kBool;
  case HARK_TYPE_UINT8: return at::kByte;
  case HARK_TYPE_INT8: return at::kChar;
  case HARK_TYPE_INT16: return at::kShort;
  case HARK_TYPE_INT32: return at::kInt;
  case HARK_TYPE_INT64: return at::kLong;
  case HARK_TYPE_FP16: return at::kHalf;
  case HARK_TYPE_FP32: return at::kFloat;
  case HARK_TYPE_FP64: return at::kDouble;
  case HARK_TYPE_BF16: return at::kBFloat16;
  default:
    throw failure(HARK_ERR_INVALID_ARG,
                  model_label(m) + ": tensor '" + tensor + "' has data type " +
                      hark_datatype_config_name(dt) +
                      ", which TorchScript has no type for; expected TYPE_BOOL, TYPE_UINT8, "
                      "TYPE_INT8, TYPE_INT16, TYPE_INT32, TYPE_INT64, TYPE_FP16, TYPE_FP32, "
                      "TYPE_FP64 or TYPE_BF16");
  }
}

const char *scalar_name(at::ScalarType st) {
  switch (st) {
  case at::kBool: return "TYPE_BOOL";
  case at::kByte: return "TYPE_UINT8";
  case at::kChar: return "TYPE_INT8";
  case at::kShort: return "TYPE_INT16";
  case at::kInt: return "TYPE_INT32";
  case at::kLong: return "TYPE_INT64";
  case at::kHalf: return "TYPE_FP16";
  case at::kFloat: return "TYPE_FP32";
  case at::kDouble: return "TYPE_FP64";
  case at::kBFloat16: return "TYPE_BF16";
  default: return c10::toString(st);
  }
}

std::string shape_string(const std::vector<int64_t> &dims, bool batch) {
  std::ostringstream s;
  s << "[";
  if (batch) s << "-1" << (dims.empty() ? "" : ",");
  for (size_t i = 0; i < dims.size(); i++) s << (i ? "," : "") << dims[i];
  s << "]";
  return s.str();
}

torch::jit::Module load_module(const model &m) {
  struct stat st;
  if (stat(m.file.c_str(), &st) != 0) {
    int why = errno;
    struct stat link;
    if (lstat(m.file.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
      /* A link to a file made outside the repository (models/silero_vad's,
         to the cache scripts/setup.sh fills): say where it points. */
      char target[4096];
      ssize_t n = readlink(m.file.c_str(), target, sizeof target - 1);
      target[n < 0 ? 0 : n] = '\0';
      throw failure(HARK_ERR_NOT_FOUND,
                    model_label(m) + ": no TorchScript file '" + m.file + "': it links to '" +
                        target + "': " + std::strerror(why) +
                        " (expected that file to exist; the model's config.pbtxt says what "
                        "makes it)");
    }
    throw failure(HARK_ERR_NOT_FOUND, model_label(m) + ": no TorchScript file '" + m.file +
                                          "': " + std::strerror(why) +
                                          " (expected the version folder to hold the "
                                          "default_model_filename, model.pt unless set)");
  }
  if (!S_ISREG(st.st_mode))
    throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": '" + m.file +
                                            "' is not a file; expected a TorchScript archive");
  try {
    torch::jit::Module module = torch::jit::load(m.file, c10::Device(c10::kCPU));
    module.eval();
    return module;
  } catch (const c10::Error &e) {
    std::string why = e.what_without_backtrace();
    throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": '" + m.file +
                                            "' is not a TorchScript archive "
                                            "(expected a file saved by torch.jit.save): " +
                                            why.substr(0, why.find('\n')));
  } catch (const std::exception &e) {
    std::string why = e.what();
    throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": cannot load '" + m.file +
                                            "' as TorchScript: " + why.substr(0, why.find('\n')));
  }
}

void bind(model &m, const hark_model_config *cfg, const torch::jit::Module &module) {
  for (uint32_t i = 0; i < cfg->n_inputs; i++) {
    const hark_model_io *io = &cfg->inputs[i];
    m.inputs.push_back(make_binding(m, io->name, io->datatype, io->dims, io->ndims, true, false));
  }
  const hark_sequence_batching *sb = &cfg->sequence_batching;
  for (uint32_t i = 0; i < sb->n_controls; i++)
    m.inputs.push_back(
        make_binding(m, sb->controls[i].name, sb->controls[i].datatype, nullptr, 0, false, false));
  for (uint32_t i = 0; i < sb->n_states; i++) {
    const hark_seq_state *s = &sb->states[i];
    m.inputs.push_back(make_binding(m, s->input_name, s->datatype, s->dims, s->ndims, true, true));
  }
  for (uint32_t i = 0; i < cfg->n_outputs; i++) {
    const hark_model_io *io = &cfg->outputs[i];
    m.outputs.push_back(make_binding(m, io->name, io->datatype, io->dims, io->ndims, true, false));
  }
  for (uint32_t i = 0; i < sb->n_states; i++) {
    const hark_seq_state *s = &sb->states[i];
    m.outputs.push_back(
        make_binding(m, s->output_name, s->datatype, s->dims, s->ndims, true, true));
  }
  if (m.outputs.empty())
    throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": config.pbtxt declares no output");

  c10::optional<torch::jit::Method> forward = module.find_method("forward");
  if (!forward)
    throw failure(HARK_ERR_INVALID_ARG, model_label(m) + ": '" + m.file +
                                            "' has no forward method; expected a scripted or "
                                            "traced nn.Module");
  const c10::FunctionSchema &schema = forward->function().getSchema();
  std::vector<c10::Argument> args = schema.arguments();
  if (!args.empty() && args[0].name() == "self") args.erase(args.begin());
  m.args = args;
  bind_inputs(m, args);
  bind_outputs(m, schema);
}

} // namespace hark_pt
