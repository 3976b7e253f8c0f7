/*
 * hark/server.h — the serving engine, as front ends (HTTP, gRPC, the
 * metrics endpoint) and embedders see it. A model acquired here is read
 * through hark/model.h; hark/backend.h is for backends only.
 *
 * The server owns the model repository: it loads models, one hark_model per
 * loaded version, each with its backend instances and scheduler. A front end
 * acquires a model by name, builds a hark_request (hark/request.h) and hands
 * it to hark_server_infer(); responses come back through the request's
 * callback on a worker thread.
 *
 * Models are reference counted: a request holds its model, so unloading a
 * model with requests in flight lets each of them finish (with its final
 * response) before the backend is finalized. A front end that keeps a
 * stream (a sequence) open across requests holds a reference to the
 * version it began on for the stream's whole life: a reload then routes new
 * work to the new version while that stream finishes on the old one, and a
 * drain (shutdown) waits for it.
 */
#ifndef HARK_SERVER_H
#define HARK_SERVER_H

#include "hark/model.h"
#include "hark/request.h"
#include "hark/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HARK_SERVER_NAME "hark"
#define HARK_SERVER_VERSION "0.1.0"

typedef struct hark_server hark_server;

typedef enum hark_model_control {
  HARK_MODEL_CONTROL_NONE = 0, /* load everything at start; no load/unload */
  HARK_MODEL_CONTROL_EXPLICIT, /* load what --load-model names; API loads */
  HARK_MODEL_CONTROL_POLL,     /* load everything, then rescan the repository
                                  every repository_poll_secs: load new
                                  models, reload changed ones, unload removed
                                  ones; the load/unload API is refused */
} hark_model_control;

typedef struct hark_server_options {
  const char *model_repository;  /* required */
  const char *backend_directory; /* NULL: the build's default */
  hark_model_control model_control;
  const char *const *load_models; /* EXPLICIT: names to load at start ("*" all) */
  uint32_t n_load_models;
  uint32_t worker_threads;     /* 0: one per core */
  uint32_t max_queue_size;     /* cap per model queue when config sets none;
                                0: 4096 */
  bool strict_readiness;       /* ready only if every model loaded (Triton's
                                default) */
  double repository_poll_secs; /* POLL: seconds between scans; 0: 15 */
  /* How long a version replaced by a reload, or unloaded, keeps serving the
   * requests and streams that hold it before it stops taking their next
   * requests (UNAVAILABLE "... is unloading") and is finalized. 0: 30 s. */
  uint32_t unload_timeout_secs;
  /* A front-end thread marked with hark_server_thread_may_inline() runs a
   * dynamic-batching or default-scheduled model's batch itself, instead of
   * handing it to a worker and back, when that model's executions average
   * at most this many microseconds. 0: never (every batch on a worker). */
  uint32_t inline_max_us;
  /* On the worker pool, batches of a model whose executions average at most
   * this many microseconds run before longer ones (a longer one waits for
   * them at most as long as it runs itself). 0: arrival order. */
  uint32_t short_batch_us;
  /* Bytes of input one whole recording may carry: a request to a
   * sequence-batched (streaming) model with no correlation id, or one that
   * both starts and ends its sequence (Riva Recognize, a one-shot KServe
   * infer). It runs to its end on a worker, so its size is its cost; more
   * is refused, INVALID_ARG. 0: HARK_DEFAULT_MAX_RECORDING_BYTES. */
  uint64_t max_recording_bytes;
  /* Bytes a string correlation id may have (a sequence's id is kept for
   * its life and echoed in every reply); longer ones are refused,
   * INVALID_ARG. 0: HARK_DEFAULT_MAX_CORRELATION_ID_BYTES. */
  uint32_t max_correlation_id_bytes;
} hark_server_options;

#define HARK_DEFAULT_MAX_RECORDING_BYTES (32ull << 20) /* ~17 min of 16 kHz 16-bit PCM */
#define HARK_DEFAULT_MAX_CORRELATION_ID_BYTES 256u

/* Starts the worker pool and loads the repository per the control mode.
 * A model that fails to load is logged and reported by the index; it does
 * not fail startup. Caller owns *out (hark_server_free). */
hark_error *hark_server_new(const hark_server_options *opts, hark_server **out);
/* Unloads every model, waiting for requests in flight, and frees. */
void hark_server_free(hark_server *server);

/* Marks the calling thread (a front end's event loop) as one that may run
 * cheap batches in place (hark_server_options.inline_max_us): a request
 * queued from it with hark_server_infer() may then execute, and its
 * callback run, on this thread before hark_server_infer() returns. */
void hark_server_thread_may_inline(bool on);

bool hark_server_is_live(const hark_server *server);
/* False while draining, and (strict readiness) while a model failed. */
bool hark_server_is_ready(const hark_server *server);

/*
 * Graceful shutdown. hark_server_begin_drain() is async-signal-safe (one
 * atomic store) and idempotent: from then on readiness (server and model)
 * is false, polling stops and repository load/unload are refused, but
 * hark_server_infer() and hark_server_model_acquire() go on working, so
 * the requests of streams and sequences already live finish. Front ends
 * check hark_server_is_draining() and refuse NEW calls and streams
 * (HTTP 503, gRPC UNAVAILABLE) with "Server is shutting down".
 * hark_server_is_idle() is true when no request is in flight and no
 * stream holds a model reference (see above): what the drain waits for.
 */
void hark_server_begin_drain(hark_server *server);
bool hark_server_is_draining(const hark_server *server);
bool hark_server_is_idle(hark_server *server);
/* The drain's end (its exit timeout passed, or harkd is about to exit):
 * from now on a request still queued, or parked waiting for a sequence
 * slot, is answered UNAVAILABLE "Server is shutting down" instead of
 * running (idle sequences end at once), so that exiting waits only for
 * the batches executing now. Never blocks; not for a signal handler;
 * idempotent. */
void hark_server_cut_queued(hark_server *server);
/* Extensions for /v2 metadata, NULL-terminated. */
const char *const *hark_server_extensions(void);

/* ---- models -------------------------------------------------------------- */

/* A ready model by name and version (-1: the newest ready version).
 * NOT_FOUND for unknown names/versions, UNAVAILABLE when not ready.
 * The caller owns a reference, dropped with hark_model_release(). */
hark_error *hark_server_model_acquire(hark_server *server, const char *name, int64_t version,
                                      hark_model **out);
void hark_model_release(hark_model *model);
bool hark_model_is_ready(const hark_model *model);

/* Calls fn for every loaded model version, holding a reference during the
 * call. Ordered by name, then version. */
void hark_server_model_foreach(hark_server *server, void (*fn)(hark_model *model, void *userp),
                               void *userp);

/* ---- inference ----------------------------------------------------------- */

/*
 * Validates the request against its model's config (input names, data
 * types, shapes, byte sizes, batch size) and queues it. On success the
 * server owns `req` and its callback will get exactly one FINAL. On error
 * the caller keeps `req` and the callback is never called: INVALID_ARG for
 * bad inputs, UNAVAILABLE when the model is unloading or its queue is full.
 */
hark_error *hark_server_infer(hark_server *server, hark_request *req);

/* ---- repository ---------------------------------------------------------- */

typedef struct hark_index_entry {
  char *name;
  int64_t version;   /* -1 when the model never got as far as a version */
  const char *state; /* "READY", "LOADING", "UNLOADING", "UNAVAILABLE" */
  char *reason;      /* "" when none */
} hark_index_entry;

/* Every model folder in the repository (and each version known), or only
 * the ready ones. Caller frees with hark_index_free(). */
hark_error *hark_server_repository_index(hark_server *server, bool ready_only,
                                         hark_index_entry **out, size_t *n);
void hark_index_free(hark_index_entry *entries, size_t n);

/*
 * Loads (or reloads) / unloads a model, on a server thread; `done` is called
 * once, on that thread, with the outcome (owned by the callee; NULL = ok).
 * A reload answers once the new versions serve; the old ones finish their
 * requests and live streams (up to unload_timeout_secs) in the background.
 * Unload completes after the in-flight requests have their finals, the
 * live streams ended (same bound) and the backend is finalized. An error
 * returned here means `done` never runs (NONE and POLL control modes
 * refuse both, as does a draining server).
 */
typedef void (*hark_server_done_fn)(hark_error *err, void *userp);
hark_error *hark_server_model_load(hark_server *server, const char *name, hark_server_done_fn done,
                                   void *userp);
hark_error *hark_server_model_unload(hark_server *server, const char *name,
                                     hark_server_done_fn done, void *userp);

/* ---- statistics and metrics ---------------------------------------------- */

typedef struct hark_stat {
  uint64_t count;
  uint64_t ns;
} hark_stat;

typedef struct hark_batch_stat {
  uint32_t batch_size;
  hark_stat compute_input, compute_infer, compute_output;
} hark_batch_stat;

#define HARK_HIST_BUCKETS 16
/* Upper bounds in microseconds of the latency histogram buckets (the last
 * is +Inf and not listed here). */
extern const double hark_hist_bounds_us[HARK_HIST_BUCKETS - 1];

typedef struct hark_hist {
  uint64_t bucket[HARK_HIST_BUCKETS]; /* non-cumulative counts */
  uint64_t count;
  uint64_t sum_us;
} hark_hist;

typedef struct hark_model_stats {
  uint64_t last_inference_ms; /* wall clock, ms since epoch; 0 = never */
  uint64_t inference_count;   /* batch elements inferred (success) */
  uint64_t execution_count;   /* backend executions */
  hark_stat success, fail, queue, compute_input, compute_infer, compute_output;
  uint64_t fail_rejected, fail_canceled, fail_backend, fail_other;
  uint64_t pending; /* accepted, not yet final */
  hark_hist request_duration, queue_duration;
  uint32_t n_batch;
  hark_batch_stat batch[64]; /* one per executed batch size, ascending */
} hark_model_stats;

/* A consistent-enough snapshot (counters are read one by one). */
void hark_model_stats_read(const hark_model *model, hark_model_stats *out);
/* Of the model's pending requests, those a new sequence in namespace `ns`
 * may wait behind: pending, less one-shots (requests without a correlation
 * id: whole recordings, which wait in the worker pool's bulk lane) and the
 * requests another namespace group parks in the sequence batcher's backlog
 * within its own quota (KServe clients' sequences for a speech session,
 * and the other way round).
 * What speech admission compares with --stream-backlog-limit. */
uint64_t hark_model_pending_for(const hark_model *model, hark_corr_ns ns);

/* The Prometheus text exposition of every metric. Caller frees. */
char *hark_server_metrics_render(hark_server *server);

#ifdef __cplusplus
}
#endif
#endif
