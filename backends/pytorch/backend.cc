/*
 * pytorch — TorchScript models on libtorch, as Triton's PyTorch backend
 * serves them (backend: "pytorch" or platform: "pytorch_libtorch").
 *
 * This file is the C boundary: the entry points of hark_backend_api. Each
 * runs its C++ inside guard(), which turns every exception into a hark
 * error, so none reaches the server's C. model_init loads the file once
 * to bind config.pbtxt's tensors to it (model.cc) and settles the thread
 * counts; each instance loads its own module (instances run
 * concurrently, a module is not shared between them); execute is
 * execute.cc.
 *
 * Threads, as Triton's parameters: INTRA_OP_THREAD_COUNT is the threads one
 * forward may use, by default the cores this process may run on divided
 * by the model's instances (at least 1), so that instances × threads never
 * exceeds the cores. INTER_OP_THREAD_COUNT sizes libtorch's inter-op pool,
 * which is process-wide and fixed once set: the first model loaded sets
 * it (1 unless it asks otherwise); a later model asking another size gets
 * a warning in the log.
 *
 * BATCH_PAD_MULTIPLE (hark's own, see settle_padding) rounds the rows of
 * each forward call up, so that a model compiled per shape sees few shapes.
 */
#include <sched.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "pytorch.h"

namespace hark_pt {

namespace {

template <class F>
hark_error *guard(const char *model_name, F &&body) {
  try {
    body();
    return NULL;
  } catch (const failure &f) {
    return hark_error_new(f.code, "%s", f.what());
  } catch (const c10::Error &e) {
    return hark_error_new(HARK_ERR_INTERNAL, "pytorch: model '%s': %s", model_name,
                          e.what_without_backtrace());
  } catch (const std::exception &e) {
    return hark_error_new(HARK_ERR_INTERNAL, "pytorch: model '%s': %s", model_name, e.what());
  } catch (...) {
    return hark_error_new(HARK_ERR_INTERNAL, "pytorch: model '%s': unknown C++ exception",
                          model_name);
  }
}

int cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

/* A whole-number parameter in lo..hi: -1 when absent. `note` follows the
 * range in the error ("0 = default", ...). */
long whole_parameter(const model &m, hark_model *hm, const char *key, long lo, long hi,
                     const char *note) {
  const char *v = hark_model_parameter(hm, key);
  if (!v) return -1;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (!*v || *end || errno || n < lo || n > hi)
    throw failure(HARK_ERR_INVALID_ARG, "pytorch: model '" + m.name + "': parameter " + key +
                                            " must be a whole number " + std::to_string(lo) + ".." +
                                            std::to_string(hi) + " (" + note + "), got '" + v +
                                            "'");
  return n;
}

/* A thread count parameter: -1 when absent, 0 for "the default". */
int thread_parameter(const model &m, hark_model *hm, const char *key) {
  return (int)whole_parameter(m, hm, key, 0, 4096, "0 = default");
}

/* BATCH_PAD_MULTIPLE: a batched model's forward calls take their rows
 * padded with zero rows up to a multiple of it, or of a smaller step for a
 * call of fewer than 8 times it rows (execute.cc, padded_rows); 1, the
 * default: none.
 * libtorch's oneDNN compiles its convolution kernels for each input shape
 * and keeps the last 1024 it compiled; a server's batches change size at
 * nearly every call, so without padding a model with convolutions may
 * compile anew on most calls. The padded rows' results are dropped; the
 * model must treat its rows independently, as batching assumes anyway. */
void settle_padding(model &m, hark_model *hm, const hark_model_config *cfg) {
  if (!m.batched && hark_model_parameter(hm, "BATCH_PAD_MULTIPLE"))
    throw failure(HARK_ERR_INVALID_ARG, "pytorch: model '" + m.name +
                                            "': parameter BATCH_PAD_MULTIPLE needs batching "
                                            "(max_batch_size > 0)");
  long pad = whole_parameter(m, hm, "BATCH_PAD_MULTIPLE", 1, cfg->max_batch_size,
                             "1 = no padding, at most max_batch_size");
  m.pad_multiple = pad > 1 ? pad : 1;
}

std::mutex interop_lock;
int interop_threads = 0; /* what the process-wide pool was set to; 0 = not yet */

void settle_threads(model &m, hark_model *hm, const hark_model_config *cfg) {
  uint32_t instances = 0;
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) instances += cfg->instance_groups[i].count;
  if (instances == 0) instances = 1;
  int ncores = cores();
  int intra = thread_parameter(m, hm, "INTRA_OP_THREAD_COUNT");
  int inter = thread_parameter(m, hm, "INTER_OP_THREAD_COUNT");
  m.intra_threads = intra > 0 ? intra : std::max(1, ncores / (int)instances);
  if ((long)m.intra_threads * instances > ncores && intra > 0)
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_WARN,
                     "pytorch: model '%s': %u instances x INTRA_OP_THREAD_COUNT %d exceeds the %d "
                     "cores",
                     m.name.c_str(), instances, m.intra_threads, ncores);
  std::lock_guard<std::mutex> hold(interop_lock);
  if (!interop_threads) {
    int want = inter > 0 ? inter : 1;
    try {
      at::set_num_interop_threads(want);
    } catch (const c10::Error &e) {
      HARK_BACKEND_LOG(HARK_BACKEND_LOG_WARN, "pytorch: cannot set inter-op threads to %d: %s",
                       want, e.what_without_backtrace());
    }
    interop_threads = at::get_num_interop_threads();
  } else if (inter > 0 && inter != interop_threads) {
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_WARN,
                     "pytorch: model '%s' asks INTER_OP_THREAD_COUNT %d, but libtorch's inter-op "
                     "pool is process-wide and already has %d threads",
                     m.name.c_str(), inter, interop_threads);
  }
}

hark_error *model_init(hark_model *hm) {
  const hark_model_config *cfg = hark_model_get_config(hm);
  return guard(cfg->name, [&] {
    auto m = std::make_unique<model>();
    m->name = cfg->name;
    m->version = hark_model_version(hm);
    const char *file = *cfg->default_model_filename ? cfg->default_model_filename : "model.pt";
    m->file = std::string(hark_model_path(hm)) + "/" + std::to_string(m->version) + "/" + file;
    m->batched = cfg->max_batch_size > 0;
    settle_threads(*m, hm, cfg);
    settle_padding(*m, hm, cfg);
    bind(*m, cfg, load_module(*m));
    std::string padding;
    if (m->pad_multiple > 1)
      padding = ", rows padded to a multiple of " + std::to_string(m->pad_multiple);
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_INFO,
                     "pytorch: model '%s' version %lld from %s: %zu input(s), %zu output(s), "
                     "intra-op threads %d per instance%s",
                     m->name.c_str(), (long long)m->version, m->file.c_str(), m->inputs.size(),
                     m->outputs.size(), m->intra_threads, padding.c_str());
    hark_model_set_state(hm, m.release());
  });
}

void model_fini(hark_model *hm) {
  delete static_cast<model *>(hark_model_state(hm));
  hark_model_set_state(hm, nullptr);
}

hark_error *instance_init(hark_instance *hi) {
  model *m = static_cast<model *>(hark_model_state(hark_instance_model(hi)));
  return guard(m->name.c_str(), [&] {
    auto inst = std::make_unique<instance>();
    inst->m = m;
    inst->name = hark_instance_name(hi);
    inst->module = load_module(*m);
    hark_instance_set_state(hi, inst.release());
  });
}

void instance_fini(hark_instance *hi) {
  delete static_cast<instance *>(hark_instance_state(hi));
  hark_instance_set_state(hi, nullptr);
}

/* execute() answers every request itself; an error returned here (only
 * when it could not even start) leaves them to the server. */
hark_error *instance_execute(hark_instance *hi, hark_request **reqs, uint32_t n) {
  instance *inst = static_cast<instance *>(hark_instance_state(hi));
  return guard(inst->m->name.c_str(), [&] { execute(*inst, reqs, n); });
}

const hark_backend_api api = {
    HARK_BACKEND_API_VERSION,
    nullptr,
    nullptr,
    model_init,
    model_fini,
    instance_init,
    instance_fini,
    instance_execute,
    nullptr,
};

} // namespace

} // namespace hark_pt

extern "C" HARK_BACKEND_EXPORT const hark_backend_api *hark_backend_get_api(void) {
  return &hark_pt::api;
}
