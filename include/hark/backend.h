/*
 * hark/backend.h — the backend C API, version 1.6.
 *
 * A backend is a shared object named libhark_<backend>.so, found in the
 * model's folder, then in --backend-directory. The server dlopen()s it with
 * RTLD_NOW|RTLD_LOCAL and calls its one exported symbol:
 *
 *     const hark_backend_api *hark_backend_get_api(void);
 *
 * The table's api_version must have the server's major version and a minor
 * version no newer than the server's, or the model fails to load with an
 * error naming both versions.
 *
 * Lifecycle, as Triton: backend_init once per loaded backend, model_init
 * once per model version (validate the config, load shared read-only state),
 * instance_init once per instance (per-instance mutable state), then
 * instance_execute(instance, requests, n) many times, then the matching
 * finis in reverse order. The server never runs two executes on one
 * instance at once; different instances do run concurrently.
 *
 * execute contract: if execute returns NULL the backend owns every request
 * and must, for each, eventually send exactly one FINAL (hark_response_send
 * with HARK_RESPONSE_FINAL or hark_request_complete), possibly after execute
 * returns (decoupled models). If execute returns an error, the server keeps
 * ownership and fails every request with that error.
 */
#ifndef HARK_BACKEND_H
#define HARK_BACKEND_H

#include "hark/config.h"
#include "hark/model.h"
#include "hark/request.h"
#include "hark/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HARK_BACKEND_API_MAJOR 1u
/* 1.1: sequence_fini. 1.2: histogram metrics (hark_metric_new_histogram,
 * hark_metric_observe), hark_request_received_ns, hark_backend_log.
 * 1.3: hark_request_correlation_ns (correlation-id namespaces).
 * 1.4: hark_request_mark_compute_start (a request's own compute start),
 * hark_backend_log_request (a backend thread's lines carry a request's ids).
 * 1.5: hark_request_is_cancelled (the client cancelled or went away).
 * 1.6: hark_request_client (the address of the client a request is for). */
#define HARK_BACKEND_API_MINOR 6u
#define HARK_BACKEND_API_VERSION ((HARK_BACKEND_API_MAJOR << 16) | HARK_BACKEND_API_MINOR)

typedef struct hark_backend hark_backend;
typedef struct hark_instance hark_instance;

typedef struct hark_backend_api {
  uint32_t api_version; /* HARK_BACKEND_API_VERSION the backend was built on */
  /* Optional (NULL): process-wide setup / teardown. */
  hark_error *(*backend_init)(hark_backend *backend);
  void (*backend_fini)(hark_backend *backend);
  /* Required. */
  hark_error *(*model_init)(hark_model *model);
  void (*model_fini)(hark_model *model);
  hark_error *(*instance_init)(hark_instance *instance);
  void (*instance_fini)(hark_instance *instance);
  hark_error *(*instance_execute)(hark_instance *instance, hark_request **requests, uint32_t n);
  /* Optional (NULL), since 1.1: frees per-sequence state (see
   * hark_request_set_sequence_state) the engine drops — the sequence ended,
   * sat idle past max_sequence_idle_microseconds, or the model unloads.
   * Never runs at the same time as an execute of that sequence. */
  void (*sequence_fini)(hark_model *model, void *state);
} hark_backend_api;

typedef const hark_backend_api *(*hark_backend_get_api_fn)(void);
/* Put before the backend's definition of hark_backend_get_api. */
#define HARK_BACKEND_EXPORT __attribute__((visibility("default")))
#define HARK_BACKEND_ENTRY "hark_backend_get_api"

/* ---- what the server offers backends ------------------------------------- */

const char *hark_backend_name(const hark_backend *backend);
void hark_backend_set_state(hark_backend *backend, void *state);
void *hark_backend_state(const hark_backend *backend);

/* The model's name, version, folder and config: hark/model.h. */
void hark_model_set_state(hark_model *model, void *state);
void *hark_model_state(const hark_model *model);

hark_model *hark_instance_model(const hark_instance *instance);
/* 0-based across all of the model's instance groups. */
uint32_t hark_instance_index(const hark_instance *instance);
const char *hark_instance_name(const hark_instance *instance);
void hark_instance_set_state(hark_instance *instance, void *state);
void *hark_instance_state(const hark_instance *instance);

/*
 * Backend metrics, served on /metrics beside the engine's with the model's
 * `model` and `version` labels (e.g. a decoder pool's size and use). Create
 * them in model_init, free them in model_fini; set, add and observe are
 * lock-free and safe from any thread. Several models may share a name (one
 * series each); a name must keep one kind (and a histogram its buckets).
 * *out is owned by the caller.
 */
typedef struct hark_metric hark_metric;
typedef enum hark_metric_kind {
  HARK_METRIC_GAUGE = 0,
  HARK_METRIC_COUNTER,
  HARK_METRIC_HISTOGRAM, /* since 1.2; from hark_metric_new: HARK_METRIC_DEFAULT_BOUNDS */
} hark_metric_kind;
hark_error *hark_metric_new(hark_model *model, hark_metric_kind kind, const char *name,
                            const char *help, hark_metric **out);
void hark_metric_free(hark_metric *metric); /* NULL is fine */
/* Gauges and counters; ignored on a histogram. */
void hark_metric_set(hark_metric *metric, double value);
void hark_metric_add(hark_metric *metric, double delta);
/* A gauge's or counter's value; a histogram's count of observations. */
double hark_metric_value(const hark_metric *metric);

/*
 * Since 1.2. A Prometheus histogram: `bounds` are the buckets' upper
 * bounds, finite and strictly increasing (copied; +Inf is implied), at
 * most HARK_METRIC_MAX_BOUNDS of them; NULL with n_bounds 0 takes
 * HARK_METRIC_DEFAULT_BOUNDS. Observations are lock-free.
 */
#define HARK_METRIC_MAX_BOUNDS 64u
/* Seconds, for latencies from 1 ms to 10 s. */
#define HARK_METRIC_DEFAULT_BOUNDS \
  { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10 }
hark_error *hark_metric_new_histogram(hark_model *model, const char *name, const char *help,
                                      const double *bounds, uint32_t n_bounds, hark_metric **out);
/* Counts `value` in its bucket and adds it to the sum; ignored on gauges
 * and counters. */
void hark_metric_observe(hark_metric *metric, double value);

/*
 * Since 1.2. When the server accepted the request (hark_now_ns() clock):
 * the start of its latency as the engine's own duration metrics count it.
 */
uint64_t hark_request_received_ns(const hark_request *req);

/*
 * Since 1.2. A line in the server's log (stderr, in its --log-format). A
 * line written during execute carries the ids of the requests being
 * executed (request id, sequence id), as the server's own lines do. Pass
 * __FILE__ and __LINE__; HARK_BACKEND_LOG does.
 */
typedef enum hark_backend_log_level {
  HARK_BACKEND_LOG_ERROR = 0,
  HARK_BACKEND_LOG_WARN,
  HARK_BACKEND_LOG_INFO,
  HARK_BACKEND_LOG_VERBOSE,
} hark_backend_log_level;
bool hark_backend_log_enabled(hark_backend_log_level level);
void hark_backend_log(hark_backend_log_level level, const char *file, int line, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
#define HARK_BACKEND_LOG(level, ...)                                                               \
  do {                                                                                             \
    if (hark_backend_log_enabled(level)) hark_backend_log(level, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
/*
 * Since 1.4. A backend that answers a request on a thread of its own (a
 * decoupled model) names it here first: the thread's lines then carry that
 * request's ids until the next call; NULL clears them. The ids are copied,
 * so the request may be freed after.
 */
void hark_backend_log_request(const hark_request *req);

#ifdef __cplusplus
}
#endif
#endif
