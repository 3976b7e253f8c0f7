/*
 * execute.cc — one execution: the engine's batch of requests becomes one
 * forward call per group of requests whose tensors can be stacked.
 *
 * A model with max_batch_size > 0 takes its inputs with a leading batch
 * dimension: the requests' inputs are concatenated on dim 0 (requests whose
 * other dims differ, possible with -1 dims, go in separate forward calls),
 * forward runs once, and each result is checked against config.pbtxt
 * (type, shape, the batch size on dim 0) and split back into one response
 * per request. With BATCH_PAD_MULTIPLE the stacked rows are followed by
 * zero rows (padded_rows; backend.cc says why); their results are dropped.
 * A model without batching runs one forward per request.
 * Implicit state is just more inputs and outputs: the sequence batcher
 * adds each sequence's state as an input and takes the state output back
 * from the response, so the states of the sequences in a batch are
 * stacked and split like any other tensor.
 *
 * Failures stay with their group: a forward that raises, or a result that
 * does not match config.pbtxt, fails that group's requests with a message
 * naming the model, the tensor, what was expected and what was got. No
 * exception leaves execute().
 */
#include <cstring>
#include <sstream>

#include "pytorch.h"

namespace hark_pt {

namespace {

struct group_ctx {
  instance &inst;
  std::vector<hark_request *> reqs;
  std::vector<int64_t> batch; /* rows each request takes (1 without batching) */
  int64_t total = 0;          /* the requests' rows */
  int64_t padded = 0;         /* the rows forward sees: total, maybe padded */
};

std::string label(const instance &inst) {
  return "pytorch: model '" + inst.m->name + "' (instance " + inst.name + ")";
}

std::string sizes_string(at::IntArrayRef sizes) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < sizes.size(); i++) s << (i ? "," : "") << sizes[i];
  s << "]";
  return s.str();
}

/* Two requests may share a forward when every input has the same dims
 * after the batch dimension (and the same inputs are present). */
bool stackable(const model &m, const hark_request *a, const hark_request *b) {
  for (const binding &in : m.inputs) {
    const hark_tensor *x = hark_request_input_by_name(a, in.name.c_str());
    const hark_tensor *y = hark_request_input_by_name(b, in.name.c_str());
    if (!x || !y) {
      if (x != y) return false;
      continue;
    }
    if (x->ndims != y->ndims || x->ndims == 0) return false;
    for (uint32_t d = 1; d < x->ndims; d++)
      if (x->shape[d] != y->shape[d]) return false;
  }
  return true;
}

/* The message a TorchScript exception carries, without the interpreter's
 * traceback: its last line ("builtins.ValueError: ...", "RuntimeError:
 * ..."), the line a Python user would read. */
std::string exception_message(const char *what) {
  std::string s = what;
  if (s.find("Traceback of TorchScript") == std::string::npos) return s.substr(0, s.find('\n'));
  size_t end = s.find_last_not_of("\n ");
  if (end == std::string::npos) return s;
  size_t start = s.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return s.substr(start, end - start + 1);
}

/* The rows forward sees for `total` requested ones: rounded up to a
 * multiple of BATCH_PAD_MULTIPLE, halved while it is more than an eighth
 * of them, so that padding adds at most an eighth (and a call of fewer
 * than 16 rows goes as it is). */
int64_t padded_rows(const model &m, int64_t total) {
  if (!m.batched) return total;
  int64_t step = m.pad_multiple;
  while (step > 1 && step * 8 > total) step /= 2;
  return (total + step - 1) / step * step;
}

at::Tensor stack_input(group_ctx &g, const binding &in, const hark_tensor *first) {
  const model &m = *g.inst.m;
  std::vector<int64_t> shape(first->shape, first->shape + first->ndims);
  if (m.batched) shape[0] = g.padded;
  at::Tensor x = at::empty(shape, at::TensorOptions().dtype(in.st));
  char *dst = static_cast<char *>(x.data_ptr());
  size_t off = 0, cap = x.nbytes();
  /* the requests' rows; zero rows after them up to the padded size */
  size_t want = g.padded ? cap / (size_t)g.padded * (size_t)g.total : cap;
  for (size_t r = 0; r < g.reqs.size(); r++) {
    const hark_tensor *t = hark_request_input_by_name(g.reqs[r], in.name.c_str());
    if (m.batched && t->shape[0] != g.batch[r])
      throw failure(HARK_ERR_INVALID_ARG, label(g.inst) + ": input '" + in.name +
                                              "' has batch size " + std::to_string(t->shape[0]) +
                                              "; expected the request's batch size " +
                                              std::to_string(g.batch[r]));
    if (t->byte_size > want - off)
      throw failure(HARK_ERR_INVALID_ARG, label(g.inst) + ": input '" + in.name + "' holds " +
                                              std::to_string(t->byte_size) +
                                              " bytes; expected at most " +
                                              std::to_string(want - off));
    if (t->byte_size) memcpy(dst + off, t->data, t->byte_size);
    off += t->byte_size;
  }
  if (off != want) {
    shape[0] = m.batched ? g.total : shape[0]; /* the requests' shape, without padding */
    throw failure(HARK_ERR_INVALID_ARG, label(g.inst) + ": input '" + in.name + "' holds " +
                                            std::to_string(off) + " bytes in all; expected " +
                                            std::to_string(want) + " for shape " +
                                            sizes_string(shape));
  }
  if (cap > want) memset(dst + want, 0, cap - want);
  return x;
}

c10::IValue result_at(const instance &inst, const c10::IValue &ret, const binding &out) {
  if (ret.isTensor()) {
    if (out.position == 0) return ret;
  } else if (ret.isTuple()) {
    const auto &elems = ret.toTupleRef().elements();
    if (out.position < elems.size()) return elems[out.position];
  } else if (ret.isList()) {
    c10::List<c10::IValue> list = ret.toList();
    if (out.position < list.size()) return list.get(out.position);
  } else {
    throw failure(HARK_ERR_INTERNAL, label(inst) + ": forward returned " +
                                         ret.type()->annotation_str() +
                                         "; expected a Tensor, a tuple or a List of Tensors");
  }
  throw failure(HARK_ERR_INTERNAL, label(inst) + ": output '" + out.name + "' is result " +
                                       std::to_string(out.position) +
                                       " of forward, which returned " +
                                       ret.type()->annotation_str() + " with fewer results");
}

/* Checks a result against config.pbtxt: type, rank, fixed dims, and the
 * batch dimension's size. Returns it contiguous, on the CPU. */
at::Tensor check_output(const group_ctx &g, const binding &out, const c10::IValue &v) {
  const model &m = *g.inst.m;
  if (!v.isTensor())
    throw failure(HARK_ERR_INTERNAL, label(g.inst) + ": output '" + out.name + "': result " +
                                         std::to_string(out.position) + " of forward is " +
                                         v.type()->annotation_str() + "; expected Tensor");
  at::Tensor y = v.toTensor().to(c10::kCPU).contiguous();
  if (y.scalar_type() != out.st)
    throw failure(HARK_ERR_INTERNAL, label(g.inst) + ": output '" + out.name + "': expected " +
                                         scalar_name(out.st) + " as config.pbtxt declares, got " +
                                         scalar_name(y.scalar_type()) + " from forward");
  size_t off = m.batched ? 1 : 0;
  bool ok = (size_t)y.dim() == out.dims.size() + off;
  if (ok && m.batched) ok = y.size(0) == g.padded;
  for (size_t d = 0; ok && d < out.dims.size(); d++)
    ok = out.dims[d] < 0 || out.dims[d] == y.size((int64_t)(d + off));
  if (!ok)
    throw failure(HARK_ERR_INTERNAL,
                  label(g.inst) + ": output '" + out.name + "': expected shape " +
                      shape_string(out.dims, m.batched) +
                      (m.batched ? " with " + std::to_string(g.padded) + " on dim 0 (the batch)"
                                 : std::string()) +
                      ", got " + sizes_string(y.sizes()) + " from forward");
  return y;
}

/* Answers one request from the checked results: its rows of each. */
hark_error *respond(const group_ctx &g, size_t r, int64_t row, const std::vector<at::Tensor> &ys) {
  const model &m = *g.inst.m;
  hark_request *req = g.reqs[r];
  hark_response *resp = hark_response_new(req);
  for (size_t i = 0; i < m.outputs.size(); i++) {
    const binding &out = m.outputs[i];
    if (!out.state && !hark_request_output_requested(req, out.name.c_str())) continue;
    const at::Tensor &y = ys[i];
    int64_t shape[HARK_MAX_DIMS];
    uint32_t nd = (uint32_t)y.dim();
    if (nd > HARK_MAX_DIMS) {
      hark_response_free(resp);
      return hark_error_new(HARK_ERR_INTERNAL, "%s: output '%s' has %u dims; hark takes at most %u",
                            label(g.inst).c_str(), out.name.c_str(), nd, HARK_MAX_DIMS);
    }
    for (uint32_t d = 0; d < nd; d++) shape[d] = y.size(d);
    size_t bytes = y.nbytes();
    const char *src = static_cast<const char *>(y.data_ptr());
    if (m.batched) {
      size_t row_bytes = g.padded ? bytes / (size_t)g.padded : 0;
      shape[0] = g.batch[r];
      src += row_bytes * (size_t)row;
      bytes = row_bytes * (size_t)g.batch[r];
    }
    void *buf;
    hark_error *err =
        hark_response_add_output(resp, out.name.c_str(), out.dt, shape, nd, bytes, &buf);
    if (err) {
      hark_response_free(resp);
      return err;
    }
    if (bytes) memcpy(buf, src, bytes);
  }
  hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
  return NULL;
}

void run_group(group_ctx &g, std::vector<char> &answered, const std::vector<size_t> &index) {
  const model &m = *g.inst.m;
  /* An execution's groups run one after another: a later group's requests
   * waited through the earlier forward calls, which is queue time for them,
   * not their input's preparation. */
  uint64_t start = hark_now_ns();
  for (hark_request *req : g.reqs) hark_request_mark_compute_start(req, start);
  g.padded = padded_rows(m, g.total);
  std::vector<c10::IValue> args(m.args.size());
  for (size_t i = 0; i < m.args.size(); i++)
    if (m.args[i].default_value()) args[i] = *m.args[i].default_value();
  for (const binding &in : m.inputs) {
    const hark_tensor *first = hark_request_input_by_name(g.reqs[0], in.name.c_str());
    args[in.position] = first ? c10::IValue(stack_input(g, in, first)) : c10::IValue();
  }
  uint64_t input_end = hark_now_ns();
  c10::IValue ret;
  try {
    ret = g.inst.module.forward(args);
  } catch (const c10::Error &e) {
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_VERBOSE, "%s: forward raised: %s", label(g.inst).c_str(),
                     e.what());
    throw failure(HARK_ERR_INTERNAL, label(g.inst) + ": forward raised: " +
                                         exception_message(e.what_without_backtrace()));
  } catch (const std::exception &e) {
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_VERBOSE, "%s: forward raised: %s", label(g.inst).c_str(),
                     e.what());
    throw failure(HARK_ERR_INTERNAL,
                  label(g.inst) + ": forward raised: " + exception_message(e.what()));
  }
  uint64_t infer_end = hark_now_ns();
  std::vector<at::Tensor> ys;
  for (const binding &out : m.outputs)
    ys.push_back(check_output(g, out, result_at(g.inst, ret, out)));
  int64_t row = 0;
  for (size_t r = 0; r < g.reqs.size(); r++) {
    hark_request_mark_compute(g.reqs[r], input_end, infer_end);
    answered[index[r]] = 1;
    hark_error *err = respond(g, r, row, ys);
    if (err) hark_request_complete(g.reqs[r], err);
    row += g.batch[r];
  }
}

void fail_group(const std::vector<size_t> &index, hark_request **reqs, std::vector<char> &answered,
                hark_code code, const std::string &msg) {
  HARK_BACKEND_LOG(HARK_BACKEND_LOG_ERROR, "%s (%zu request%s failed)", msg.c_str(), index.size(),
                   index.size() == 1 ? "" : "s");
  for (size_t i : index) {
    if (answered[i]) continue;
    answered[i] = 1;
    hark_request_complete(reqs[i], hark_error_new(code, "%s", msg.c_str()));
  }
}

} // namespace

void execute(instance &inst, hark_request **reqs, uint32_t n) {
  std::vector<char> answered(n, 0);
  try {
    const model &m = *inst.m;
    /* Intra-op threads are per calling thread in libtorch's OpenMP build:
     * set them on whichever worker runs this execution. */
    if (at::get_num_threads() != m.intra_threads) at::set_num_threads(m.intra_threads);
    c10::InferenceMode no_autograd;
    std::vector<char> grouped(n, 0);
    for (uint32_t i = 0; i < n; i++) {
      if (grouped[i]) continue;
      group_ctx g{inst, {}, {}, 0, 0};
      std::vector<size_t> index;
      for (uint32_t j = i; j < n; j++) {
        if (grouped[j] || (j != i && (!m.batched || !stackable(m, reqs[i], reqs[j])))) continue;
        grouped[j] = 1;
        index.push_back(j);
        g.reqs.push_back(reqs[j]);
        int64_t rows = m.batched ? (int64_t)hark_request_batch_size(reqs[j]) : 1;
        g.batch.push_back(rows);
        g.total += rows;
        if (!m.batched) break;
      }
      try {
        run_group(g, answered, index);
      } catch (const failure &f) {
        fail_group(index, reqs, answered, f.code, f.what());
      } catch (const c10::Error &e) {
        fail_group(index, reqs, answered, HARK_ERR_INTERNAL,
                   label(inst) + ": " + exception_message(e.what_without_backtrace()));
      } catch (const std::exception &e) {
        fail_group(index, reqs, answered, HARK_ERR_INTERNAL,
                   label(inst) + ": " + exception_message(e.what()));
      }
    }
  } catch (...) {
    /* Out of memory while grouping, or worse: whoever is not answered yet
     * gets an error, built without allocating in C++; nothing escapes into
     * the server's C. */
    for (uint32_t i = 0; i < n; i++)
      if (!answered[i])
        hark_request_complete(reqs[i], hark_error_new(HARK_ERR_INTERNAL,
                                                      "pytorch: model '%s': execution failed (out "
                                                      "of memory or an unknown exception)",
                                                      inst.m->name.c_str()));
  }
}

} // namespace hark_pt
