/*
 * ensemble.c — the ensemble scheduler: runs an ensemble request as a DAG of
 * steps, each an ordinary request to a composing model through
 * hark_server_infer(), so the steps are queued and batched by their own
 * models' schedulers. The ensemble itself has no queue and no instances.
 *
 * hark_sched_new resolves the config once: every tensor name (the
 * ensemble's inputs, then each step's outputs) gets an index, each step's
 * input_map/output_map becomes index lists, and the mapping is checked
 * against the step models' configs: known names, one producer per tensor,
 * matching data types, required inputs mapped, every output produced, no
 * cycle. Step models must be loaded then, but the scheduler does not keep
 * them: as Triton, each step launch looks its model up again and the step
 * request holds the reference. Holding them for the ensemble's lifetime
 * would make reloading or unloading a step model wait forever.
 *
 * Per request, an ens_run records which tensors exist and where their data
 * is: the ensemble request's own inputs or an output inside a step's
 * response, which the run keeps (unchanged, so step inputs can point into
 * it) until the ensemble request is final. A step is launched as soon as
 * all its inputs exist. `refs` counts in-flight steps plus threads working
 * on the run; whoever drops it to zero sends the one FINAL — the copied
 * ensemble outputs, or the first error. Waiting for in-flight steps before
 * answering an error is what keeps their input pointers valid.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "sched/sched_impl.h"
#include "util/alloc.h"

typedef struct ens_step {
  hark_model *model; /* only while hark_sched_new validates */
  const hark_ensemble_step *cfg;
  uint32_t *in_tensor;  /* per input_map entry */
  uint32_t *out_tensor; /* per output_map entry */
} ens_step;

typedef struct ens_sched {
  hark_sched base;
  const char *name; /* the ensemble's, for messages */
  int64_t version;
  hark_server *server;
  const hark_model_config *cfg;
  const char **names; /* tensor names, pointing into configs */
  hark_datatype *dtypes;
  uint32_t n_tensors;
  ens_step *steps;
  uint32_t n_steps;
  uint32_t *output_tensor; /* per cfg output */
  pthread_mutex_t lock;
  pthread_cond_t idle;
  bool stopping;
  uint32_t in_flight; /* ensemble requests not yet final */
} ens_sched;

typedef struct ens_run ens_run;

typedef struct ens_step_ctx {
  ens_run *run;
  uint32_t step;
} ens_step_ctx;

struct ens_run {
  ens_sched *s;
  hark_request *req;
  pthread_mutex_t lock;
  uint32_t refs;
  const hark_tensor **value; /* per tensor; NULL: absent */
  bool *ready;               /* per tensor: known (an absent optional input counts) */
  bool *launched;            /* per step */
  ens_step_ctx *ctx;         /* per step: the step request's callback data */
  hark_error *error;         /* the first failure */
  hark_response **kept;
  uint32_t n_kept, cap_kept;
};

/* ---- one ensemble request -------------------------------------------------------- */

static void run_free(ens_run *run) {
  for (uint32_t i = 0; i < run->n_kept; i++) hark_response_free(run->kept[i]);
  free(run->kept);
  free(run->value);
  free(run->ready);
  free(run->launched);
  free(run->ctx);
  hark_error_free(run->error);
  pthread_mutex_destroy(&run->lock);
  free(run);
}

static ens_run *run_new(ens_sched *s, hark_request *req) {
  ens_run *run = hark_xcalloc(1, sizeof *run);
  pthread_mutex_init(&run->lock, NULL);
  run->s = s;
  run->req = req;
  run->value = hark_xcalloc(s->n_tensors, sizeof *run->value);
  run->ready = hark_xcalloc(s->n_tensors, sizeof *run->ready);
  run->launched = hark_xcalloc(s->n_steps, sizeof *run->launched);
  run->ctx = hark_xcalloc(s->n_steps, sizeof *run->ctx);
  for (uint32_t i = 0; i < s->n_steps; i++) run->ctx[i] = (ens_step_ctx){run, i};
  /* The ensemble's inputs come first in the tensor table. */
  for (uint32_t i = 0; i < s->cfg->n_inputs; i++) {
    run->value[i] = hark_request_input_by_name(req, s->cfg->inputs[i].name);
    run->ready[i] = true;
  }
  return run;
}

/* Sends the FINAL and retires the run. Runs once, when refs reached 0. */
static void run_finish(ens_run *run) {
  ens_sched *s = run->s;
  hark_request *req = run->req;
  if (run->error) {
    hark_request_complete(req, run->error);
    run->error = NULL;
  } else {
    hark_response *resp = hark_response_new(req);
    hark_error *err = NULL;
    for (uint32_t i = 0; i < s->cfg->n_outputs && !err; i++) {
      const char *name = s->cfg->outputs[i].name;
      if (!hark_request_output_requested(req, name)) continue;
      const hark_tensor *t = run->value[s->output_tensor[i]];
      if (!t) {
        err = hark_error_new(HARK_ERR_INTERNAL, "ensemble '%s': output '%s' was not produced",
                             s->name, name);
        break;
      }
      void *buf;
      err =
          hark_response_add_output(resp, name, t->datatype, t->shape, t->ndims, t->byte_size, &buf);
      if (!err && t->byte_size) memcpy(buf, t->data, t->byte_size);
    }
    if (err) {
      hark_response_free(resp);
      hark_request_complete(req, err);
    } else {
      hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
    }
  }
  /* The step requests are all final, so nothing points into `kept` now. */
  run_free(run);
  pthread_mutex_lock(&s->lock);
  s->in_flight--;
  if (s->in_flight == 0) pthread_cond_broadcast(&s->idle);
  pthread_mutex_unlock(&s->lock);
}

static void step_done(hark_response *resp, uint32_t flags, hark_error *err, void *userp);

/* A request for step `i` on `model`, inputs pointing at the run's tensors.
 * Called with run->lock held (the tensor table is read). */
static hark_error *step_request(ens_run *run, uint32_t i, hark_model *model, hark_request **out) {
  const ens_step *st = &run->s->steps[i];
  const hark_request *req = run->req;
  hark_request *sr = hark_request_new(model);
  hark_request_set_id(sr, hark_request_id(req));
  hark_request_set_priority(sr, hark_request_priority(req));
  hark_request_set_timeout_us(sr, hark_request_timeout_us(req));
  hark_request_set_flags(sr, hark_request_flags(req));
  hark_request_set_correlation_ns(sr, hark_request_correlation_ns(req));
  hark_request_set_client(sr, hark_request_client(req)); /* shares are the client's */
  if (hark_request_correlation_id_str(req))
    hark_request_set_correlation_id_str(sr, hark_request_correlation_id_str(req));
  else
    hark_request_set_correlation_id(sr, hark_request_correlation_id(req));
  for (uint32_t j = 0; j < st->cfg->n_input_map; j++) {
    const hark_tensor *t = run->value[st->in_tensor[j]];
    if (!t) continue; /* an optional ensemble input that was not sent */
    hark_error *err = hark_request_add_input(sr, st->cfg->input_map[j].key, t->datatype, t->shape,
                                             t->ndims, t->data, t->byte_size);
    if (err) {
      hark_request_free(sr);
      return err;
    }
  }
  for (uint32_t j = 0; j < st->cfg->n_output_map; j++)
    hark_request_add_requested_output(sr, st->cfg->output_map[j].key);
  hark_request_set_callback(sr, step_done, &run->ctx[i]);
  *out = sr;
  return NULL;
}

static bool step_runnable(const ens_run *run, uint32_t i) {
  const ens_step *st = &run->s->steps[i];
  if (run->launched[i]) return false;
  for (uint32_t j = 0; j < st->cfg->n_input_map; j++)
    if (!run->ready[st->in_tensor[j]]) return false;
  return true;
}

/* Launches every step that can run, then drops the caller's reference. */
static void run_advance(ens_run *run) {
  for (;;) {
    pthread_mutex_lock(&run->lock);
    uint32_t step = run->s->n_steps;
    if (!run->error)
      for (uint32_t i = 0; i < run->s->n_steps && step == run->s->n_steps; i++)
        if (step_runnable(run, i)) step = i;
    if (step == run->s->n_steps) {
      bool last = --run->refs == 0;
      pthread_mutex_unlock(&run->lock);
      if (last) run_finish(run);
      return; /* the run may be gone: touch nothing */
    }
    run->launched[step] = true;
    run->refs++; /* the step's, until its FINAL */
    pthread_mutex_unlock(&run->lock);

    /* Looked up per launch (outside our lock: it takes the server's). */
    const ens_step *st = &run->s->steps[step];
    hark_model *model = NULL;
    hark_request *sr = NULL;
    hark_error *err = hark_server_model_acquire(run->s->server, st->cfg->model_name,
                                                st->cfg->model_version, &model);
    if (!err) {
      pthread_mutex_lock(&run->lock);
      err = step_request(run, step, model, &sr);
      pthread_mutex_unlock(&run->lock);
      hark_model_release(model); /* the step request holds its own */
    }
    if (!err) {
      err = hark_server_infer(run->s->server, sr);
      if (err) hark_request_free(sr); /* refused: still ours, callback never runs */
    }
    if (err) {
      pthread_mutex_lock(&run->lock);
      if (!run->error)
        run->error = err;
      else
        hark_error_free(err);
      run->refs--; /* never the last: the caller's is still held */
      pthread_mutex_unlock(&run->lock);
    }
  }
}

/* A step's response: record its outputs, and on FINAL let the run go on. */
static void step_done(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  ens_step_ctx *ctx = userp;
  ens_run *run = ctx->run;
  const ens_step *st = &run->s->steps[ctx->step];
  bool final = flags & HARK_RESPONSE_FINAL;
  bool kept = false;

  pthread_mutex_lock(&run->lock);
  if (err) {
    if (!run->error)
      run->error = err;
    else
      hark_error_free(err);
  }
  if (resp && !run->error) {
    bool used = false;
    for (uint32_t j = 0; j < st->cfg->n_output_map; j++) {
      uint32_t idx = st->out_tensor[j];
      const hark_tensor *t = hark_response_output_by_name(resp, st->cfg->output_map[j].key);
      /* A decoupled step may answer more than once: the first value wins. */
      if (t && !run->ready[idx]) {
        run->value[idx] = t;
        run->ready[idx] = true;
        used = true;
      }
    }
    if (used && run->n_kept == run->cap_kept) {
      run->cap_kept = run->cap_kept ? 2 * run->cap_kept : 4;
      run->kept = hark_xrealloc(run->kept, run->cap_kept * sizeof *run->kept);
    }
    if (used) {
      run->kept[run->n_kept++] = resp;
      kept = true;
    }
  }
  /* A FINAL hands the step's reference to run_advance; new outputs from a
   * streaming step take a fresh one so dependents can start early. */
  bool advance = final || kept;
  if (!final && kept) run->refs++;
  pthread_mutex_unlock(&run->lock);
  if (!kept) hark_response_free(resp);
  if (advance) run_advance(run);
}

/* ---- the hark_sched interface ------------------------------------------------------- */

static hark_error *ens_enqueue(hark_sched *base, hark_request *req) {
  ens_sched *s = (ens_sched *)base;
  ens_run *run = run_new(s, req);
  pthread_mutex_lock(&s->lock);
  if (s->stopping) {
    pthread_mutex_unlock(&s->lock);
    run_free(run);
    return hark_error_new(HARK_ERR_UNAVAILABLE, "model '%s' version %lld is unloading", s->name,
                          (long long)s->version);
  }
  s->in_flight++;
  pthread_mutex_unlock(&s->lock);
  hark_request_set_queued_ns(req, hark_now_ns());
  run->refs = 1; /* ours, dropped by run_advance */
  run_advance(run);
  return NULL;
}

static void ens_stop(hark_sched *base) {
  ens_sched *s = (ens_sched *)base;
  pthread_mutex_lock(&s->lock);
  s->stopping = true;
  while (s->in_flight) pthread_cond_wait(&s->idle, &s->lock);
  pthread_mutex_unlock(&s->lock);
}

static uint32_t ens_queued(const hark_sched *base) {
  (void)base;
  return 0; /* the steps wait in their own models' queues */
}

static uint32_t ens_busy(const hark_sched *base) {
  (void)base;
  return 0; /* the steps run on their own models' instances */
}

static void steps_release(ens_sched *s) {
  for (uint32_t i = 0; s->steps && i < s->n_steps; i++)
    if (s->steps[i].model) {
      hark_model_release(s->steps[i].model);
      s->steps[i].model = NULL;
    }
}

static void ens_destroy(ens_sched *s) {
  steps_release(s);
  for (uint32_t i = 0; s->steps && i < s->n_steps; i++) {
    free(s->steps[i].in_tensor);
    free(s->steps[i].out_tensor);
  }
  free(s->steps);
  free(s->names);
  free(s->dtypes);
  free(s->output_tensor);
  pthread_mutex_destroy(&s->lock);
  pthread_cond_destroy(&s->idle);
  free(s);
}

static void ens_free(hark_sched *base) { ens_destroy((ens_sched *)base); }

static const hark_sched_ops ens_ops = {
    .enqueue = ens_enqueue,
    .stop = ens_stop,
    .free = ens_free,
    .queued = ens_queued,
    .busy = ens_busy,
};

/* ---- building and checking the DAG ------------------------------------------------ */

static const hark_model_io *io_find(const hark_model_io *ios, uint32_t n, const char *name) {
  for (uint32_t i = 0; i < n; i++)
    if (strcmp(ios[i].name, name) == 0) return &ios[i];
  return NULL;
}

static uint32_t tensor_find(const ens_sched *s, const char *name) {
  for (uint32_t i = 0; i < s->n_tensors; i++)
    if (strcmp(s->names[i], name) == 0) return i;
  return UINT32_MAX;
}

#define ENS_ERR(s, i, ...) step_error(s, i, hark_error_new(HARK_ERR_INVALID_ARG, __VA_ARGS__))

/* Prefixes an error with the ensemble and step it concerns. */
static hark_error *step_error(const ens_sched *s, uint32_t i, hark_error *err) {
  hark_error *wrapped =
      hark_error_new(hark_error_code(err), "ensemble '%s' step %u (model '%s'): %s", s->name, i + 1,
                     s->cfg->ensemble_steps[i].model_name, hark_error_message(err));
  hark_error_free(err);
  return wrapped;
}

/* Acquires step models (for validation) and names every step output. */
static hark_error *resolve_outputs(ens_sched *s) {
  for (uint32_t i = 0; i < s->n_steps; i++) {
    ens_step *st = &s->steps[i];
    st->cfg = &s->cfg->ensemble_steps[i];
    hark_error *err = hark_server_model_acquire(s->server, st->cfg->model_name,
                                                st->cfg->model_version, &st->model);
    /* A step not loaded (yet) is NOT_FOUND: the repository loads the
     * ensemble again once its steps are (an unknown model is a client's
     * INVALID_ARGUMENT elsewhere). */
    if (err && hark_error_code(err) == HARK_ERR_INVALID_ARG) {
      hark_error *nf = hark_error_new(HARK_ERR_NOT_FOUND, "%s", hark_error_message(err));
      hark_error_free(err);
      err = nf;
    }
    if (err) return step_error(s, i, err);
    const hark_model_config *mc = hark_model_get_config(st->model);
    st->in_tensor = hark_xcalloc(st->cfg->n_input_map, sizeof(uint32_t));
    st->out_tensor = hark_xcalloc(st->cfg->n_output_map, sizeof(uint32_t));
    if (st->cfg->n_output_map == 0) return ENS_ERR(s, i, "output_map is empty");
    for (uint32_t j = 0; j < st->cfg->n_output_map; j++) {
      const hark_kv *kv = &st->cfg->output_map[j];
      const hark_model_io *io = io_find(mc->outputs, mc->n_outputs, kv->key);
      if (!io) return ENS_ERR(s, i, "output_map key '%s' is not an output of the model", kv->key);
      if (tensor_find(s, kv->value) != UINT32_MAX)
        return ENS_ERR(s, i, "output_map writes tensor '%s', which is already %s", kv->value,
                       tensor_find(s, kv->value) < s->cfg->n_inputs ? "an ensemble input"
                                                                    : "written by another step");
      st->out_tensor[j] = s->n_tensors;
      s->names[s->n_tensors] = kv->value;
      s->dtypes[s->n_tensors++] = io->datatype;
    }
  }
  return NULL;
}

static hark_error *resolve_inputs(ens_sched *s) {
  for (uint32_t i = 0; i < s->n_steps; i++) {
    ens_step *st = &s->steps[i];
    const hark_model_config *mc = hark_model_get_config(st->model);
    for (uint32_t j = 0; j < st->cfg->n_input_map; j++) {
      const hark_kv *kv = &st->cfg->input_map[j];
      const hark_model_io *io = io_find(mc->inputs, mc->n_inputs, kv->key);
      if (!io) return ENS_ERR(s, i, "input_map key '%s' is not an input of the model", kv->key);
      uint32_t t = tensor_find(s, kv->value);
      if (t == UINT32_MAX)
        return ENS_ERR(s, i,
                       "input_map reads tensor '%s', which is neither an ensemble input nor "
                       "any step's output",
                       kv->value);
      if (s->dtypes[t] != io->datatype)
        return ENS_ERR(s, i, "input '%s' is %s but tensor '%s' is %s", kv->key,
                       hark_datatype_config_name(io->datatype), kv->value,
                       hark_datatype_config_name(s->dtypes[t]));
      st->in_tensor[j] = t;
    }
    for (uint32_t k = 0; k < mc->n_inputs; k++) {
      bool mapped = false;
      for (uint32_t j = 0; j < st->cfg->n_input_map && !mapped; j++)
        mapped = strcmp(st->cfg->input_map[j].key, mc->inputs[k].name) == 0;
      if (!mapped && !mc->inputs[k].optional)
        return ENS_ERR(s, i, "required input '%s' is not in input_map", mc->inputs[k].name);
    }
  }
  return NULL;
}

static hark_error *resolve_ensemble_outputs(ens_sched *s) {
  for (uint32_t i = 0; i < s->cfg->n_outputs; i++) {
    const hark_model_io *io = &s->cfg->outputs[i];
    uint32_t t = tensor_find(s, io->name);
    if (t == UINT32_MAX || t < s->cfg->n_inputs)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "ensemble '%s': output '%s' is not written by any step's output_map",
                            s->name, io->name);
    if (s->dtypes[t] != io->datatype)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "ensemble '%s': output '%s' is %s but the step writing it gives %s",
                            s->name, io->name, hark_datatype_config_name(io->datatype),
                            hark_datatype_config_name(s->dtypes[t]));
    s->output_tensor[i] = t;
  }
  return NULL;
}

/* Every step must become runnable from the ensemble inputs alone. */
static hark_error *check_acyclic(ens_sched *s) {
  bool *ready = hark_xcalloc(s->n_tensors, sizeof *ready);
  bool *ran = hark_xcalloc(s->n_steps, sizeof *ran);
  hark_error *err = NULL;
  for (uint32_t i = 0; i < s->cfg->n_inputs; i++) ready[i] = true;
  for (bool progress = true; progress;) {
    progress = false;
    for (uint32_t i = 0; i < s->n_steps; i++) {
      bool can = !ran[i];
      for (uint32_t j = 0; can && j < s->steps[i].cfg->n_input_map; j++)
        can = ready[s->steps[i].in_tensor[j]];
      if (!can) continue;
      ran[i] = progress = true;
      for (uint32_t j = 0; j < s->steps[i].cfg->n_output_map; j++)
        ready[s->steps[i].out_tensor[j]] = true;
    }
  }
  for (uint32_t i = 0; !err && i < s->n_steps; i++)
    if (!ran[i]) err = ENS_ERR(s, i, "its inputs depend on its own outputs (a cycle)");
  free(ready);
  free(ran);
  return err;
}

hark_error *hark_sched_ensemble_new(const hark_sched_desc *desc, hark_sched **out) {
  *out = NULL;
  const hark_model_config *cfg = desc->config;
  if (cfg->n_ensemble_steps == 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "ensemble '%s' has no ensemble_scheduling steps",
                          desc->name);
  ens_sched *s = hark_xcalloc(1, sizeof *s);
  s->base.ops = &ens_ops;
  s->name = desc->name;
  s->version = desc->version;
  s->server = desc->server;
  s->cfg = cfg;
  pthread_mutex_init(&s->lock, NULL);
  pthread_cond_init(&s->idle, NULL);
  uint32_t max_tensors = cfg->n_inputs;
  for (uint32_t i = 0; i < cfg->n_ensemble_steps; i++)
    max_tensors += cfg->ensemble_steps[i].n_output_map;
  s->names = hark_xcalloc(max_tensors, sizeof *s->names);
  s->dtypes = hark_xcalloc(max_tensors, sizeof *s->dtypes);
  s->output_tensor = hark_xcalloc(cfg->n_outputs, sizeof *s->output_tensor);
  s->steps = hark_xcalloc(cfg->n_ensemble_steps, sizeof *s->steps);
  hark_error *err = NULL;
  s->n_steps = cfg->n_ensemble_steps;
  for (uint32_t i = 0; i < cfg->n_inputs; i++) {
    if (tensor_find(s, cfg->inputs[i].name) != UINT32_MAX) {
      err = hark_error_new(HARK_ERR_INVALID_ARG, "ensemble '%s': input '%s' is listed twice",
                           s->name, cfg->inputs[i].name);
      break;
    }
    s->names[s->n_tensors] = cfg->inputs[i].name;
    s->dtypes[s->n_tensors++] = cfg->inputs[i].datatype;
  }
  if (!err) err = resolve_outputs(s);
  if (!err) err = resolve_inputs(s);
  if (!err) err = resolve_ensemble_outputs(s);
  if (!err) err = check_acyclic(s);
  steps_release(s);
  if (err) {
    ens_destroy(s);
    return err;
  }
  *out = &s->base;
  return NULL;
}
