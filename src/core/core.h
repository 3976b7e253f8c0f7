/*
 * core.h — private structures of the engine core (src/core): requests,
 * responses, models, instances, backends and their statistics. Only files
 * in src/core include this; everything else goes through the accessors in
 * include/hark/ and src/core/engine.h.
 */
#ifndef HARK_CORE_H
#define HARK_CORE_H

#include <pthread.h>
#include <stdatomic.h>

#include "core/engine.h"
#include "hark/backend.h"
#include "hark/config.h"
#include "hark/server.h"
#include "sched/sched.h"

typedef struct hark_attachment {
  void *ptr;
  void (*free_fn)(void *);
} hark_attachment;

/* Room beside a request or a response for its tensors' names: those that
 * fit are kept here, a longer one on the heap (request.c). */
typedef struct hark_names {
  uint32_t used;
  char buf[64];
} hark_names;

struct hark_request {
  hark_model *model;
  char *id;
  uint32_t priority;
  uint64_t timeout_us;
  uint32_t flags;
  uint64_t correlation_id;
  char *correlation_id_str;
  hark_corr_ns correlation_ns;
  hark_kv *params;
  uint32_t n_params;
  hark_tensor *inputs;
  uint32_t n_inputs;
  hark_names input_names;
  char **requested;
  uint32_t n_requested;
  hark_attachment *attached;
  uint32_t n_attached;
  hark_response_fn callback;
  void *userp;
  uint32_t batch_size; /* set by validation */
  void **seq_state;    /* the sequence's backend state slot, or NULL */
  uint64_t received_ns, queued_ns, exec_start_ns, input_end_ns, infer_end_ns;
  atomic_bool finished;
  hark_cancel *cancel;                  /* the front end's token (a reference), or NULL */
  bool oneshot;                         /* no correlation id: counted in stats.pending_oneshot */
  char client[HARK_REQUEST_CLIENT_MAX]; /* the peer's address, "" when none */
};

struct hark_cancel {
  atomic_uint refs;
  atomic_bool set;
};

struct hark_response {
  char *id;
  hark_request *req; /* until sent */
  hark_tensor *outputs;
  void **buffers;
  uint32_t n_outputs;
  hark_names output_names;
  hark_kv *params;
  uint32_t n_params;
};

/* Latency histogram with atomic buckets (see hark_hist for the snapshot). */
typedef struct hark_ahist {
  atomic_uint_fast64_t bucket[HARK_HIST_BUCKETS];
  atomic_uint_fast64_t count, sum_us;
} hark_ahist;

typedef struct hark_astat {
  atomic_uint_fast64_t count, ns;
} hark_astat;

typedef struct hark_abatch {
  hark_astat compute_input, compute_infer, compute_output;
} hark_abatch;

typedef struct hark_amodel_stats {
  atomic_uint_fast64_t last_inference_ms, inference_count, execution_count;
  hark_astat success, fail, queue, compute_input, compute_infer, compute_output;
  atomic_uint_fast64_t fail_rejected, fail_canceled, fail_backend, fail_other;
  atomic_int_fast64_t pending;
  atomic_int_fast64_t pending_oneshot; /* of them, requests without a correlation id */
  hark_ahist request_duration, queue_duration;
  hark_abatch *batch; /* index batch_size - 1, max(1, max_batch_size) long */
  uint32_t n_batch;
} hark_amodel_stats;

struct hark_backend {
  char *name;
  char *path;
  void *dl;
  const hark_backend_api *api;
  /* api->sequence_fini when the backend's API is 1.1 or newer (an older
   * table is shorter and has no such entry), else NULL. */
  void (*sequence_fini)(hark_model *model, void *state);
  void *state;
};

struct hark_instance {
  hark_model *model;
  uint32_t index;
  char *name;
  void *state;
};

struct hark_model {
  atomic_int refs;
  pthread_mutex_t lock; /* guards refs reaching the unload waiter */
  pthread_cond_t released;
  hark_server *server;
  char *name;
  int64_t version;
  char *path; /* <repo>/<name> */
  hark_model_config *config;
  hark_backend *backend; /* NULL for ensembles */
  bool model_inited;
  hark_instance *instances;
  uint32_t n_instances, n_instances_inited;
  hark_sched *sched;
  void *state;
  atomic_bool ready;
  atomic_bool retired; /* replaced or unloaded: finishing what holds it */
  double load_secs;    /* how long loading took (nv_model_load_duration_secs) */
  hark_amodel_stats stats;
};

/* model.c. Takes ownership of `cfg` whatever the outcome. */
hark_error *hark_model_create(hark_server *server, hark_backend *backend, const char *path,
                              hark_model_config *cfg, int64_t version, hark_model **out);
/* A model with only its config and statistics: no server, backend,
 * instances or scheduler, ready. For tests that build requests or drive
 * a scheduler by hand. Takes ownership of `cfg`; free with
 * hark_model_destroy() once its requests are done. */
hark_error *hark_model_create_bare(hark_model_config *cfg, int64_t version, hark_model **out);
hark_error *hark_model_enqueue(hark_model *model, hark_request *req);
uint32_t hark_model_queued(const hark_model *model);
/* Its batcher's queue delay now (sched.h); false when it has none. */
bool hark_model_queue_delay(const hark_model *model, hark_sched_delay *out);
/* The implicit sequence state its sequence batcher holds now (sched.h);
 * false when it keeps none. */
bool hark_model_sequence_state(const hark_model *model, hark_sched_seq_state *out);
/* Stops accepting, waits for every request and reference to finish,
 * finalizes the backend state and frees. Blocks: never call it from a
 * worker or the event loop. */
void hark_model_destroy(hark_model *model);
/* Shutting down: the scheduler stops waiting (hark_sched_flush). */
void hark_model_flush(hark_model *model);
void hark_model_acquire(hark_model *model);
/* References held beyond the repository's own: requests in flight, live
 * streams, ensembles using it as a step, passing readers. */
int hark_model_users(hark_model *model);
/* Waits until nothing but the repository holds the model, or until
 * `deadline_ns`, or until *cut turns true (checked every 100 ms). True
 * when it is unused. Blocks: never on a worker or the event loop. */
bool hark_model_wait_unused(hark_model *model, uint64_t deadline_ns, const atomic_bool *cut);
hark_pool *hark_server_pool(hark_server *server);
/* Whether hark_server_cut_queued was called: a batch that has not started
 * ends UNAVAILABLE (model.c). */
bool hark_server_is_cut(const hark_server *server);
uint32_t hark_server_default_max_queue(hark_server *server);

/* request.c: statistics when a request completes. */
void hark_stats_record_final(hark_model *model, const hark_request *req, const hark_error *err,
                             uint64_t now_ns);
void hark_ahist_observe(hark_ahist *h, uint64_t us);

/* validate.c */
hark_error *hark_request_validate(hark_request *req);

#endif
