/*
 * kserve.h — the KServe v2 inference protocol (Triton's), independent of
 * any transport: the REST routes (route.h, which it includes), the infer
 * request codec (JSON, or JSON +
 * binary tensor data, in; a hark_request out; a hark_response in, a
 * response body out), and the other JSON documents. kserve_http.c serves
 * them on the HTTP transport, kserve_grpc*.c serve the same protocol's
 * gRPC form.
 *
 * Parsing needs no server and no model config: it checks only what the
 * request says about itself (data counts against shapes, values against
 * data types, binary sizes against the body). Checking the request against
 * a model (names, shapes, batch size) is the engine's job, done by
 * hark_server_infer(); the fuzz target and the unit tests run the same
 * check on a hand-built model without a server.
 *
 * Zero-copy: binary tensors point into the body buffer, JSON tensors are
 * converted once into the parse arena; hark_kserve_to_request() hands the
 * arena to the request (hark_request_attach), the caller attaches the body.
 */
#ifndef HARK_FRONTEND_KSERVE_H
#define HARK_FRONTEND_KSERVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/kserve/route.h"
#include "frontend/kserve/shm.h"
#include "hark/config.h"
#include "hark/request.h"
#include "hark/server.h"
#include "hark/types.h"
#include "util/arena.h"
#include "util/buf.h"

/* What the KServe services (HTTP and gRPC) of one server share: the engine
 * and the system shared-memory registry (NULL: the extension is turned off
 * unless harkd runs with --allow-shared-memory=true). Both outlive the services. */
typedef struct hark_kserve {
  hark_server *server;
  hark_shm *shm;
} hark_kserve;

/* ---- parsed requests ----------------------------------------------------- */

typedef struct hark_kserve_input {
  const char *name;
  hark_datatype datatype;
  uint32_t ndims;
  int64_t shape[HARK_MAX_DIMS];
  const void *data; /* into the body (binary) or the arena (JSON); NULL
                       for shared memory until hark_kserve_to_request */
  size_t byte_size;
  bool binary; /* came from the binary part of the body */
  /* parameters.shared_memory_region (NULL: none), _offset, _byte_size */
  const char *shm_region;
  uint64_t shm_offset, shm_byte_size;
} hark_kserve_input;

typedef struct hark_kserve_output {
  const char *name;
  int binary; /* parameters.binary_data: -1 unset, 0 false, 1 true */
  /* parameters.shared_memory_*: the output goes into that region */
  const char *shm_region;
  uint64_t shm_offset, shm_byte_size;
  hark_shm_region *shm; /* held by the request; set by hark_kserve_to_request */
} hark_kserve_output;

typedef enum hark_kserve_ptype {
  HARK_KSERVE_PARAM_STRING,
  HARK_KSERVE_PARAM_INT, /* value holds the JSON integer's text */
  HARK_KSERVE_PARAM_NUMBER,
  HARK_KSERVE_PARAM_BOOL, /* "true" / "false" */
} hark_kserve_ptype;

typedef struct hark_kserve_param {
  const char *key;
  const char *value;
  hark_kserve_ptype type;
} hark_kserve_param;

/*
 * A parsed infer request. Strings point into the body (decoded in place) or
 * the arena; so the body must outlive it. Everything it owns is in `arena`.
 */
typedef struct hark_kserve_request {
  const char *id; /* NULL when absent */
  hark_kserve_param *params;
  uint32_t n_params;
  hark_kserve_input *inputs;
  uint32_t n_inputs;
  hark_kserve_output *outputs;
  uint32_t n_outputs;
  bool binary_data_output; /* request parameter: outputs binary by default */
  hark_arena *arena;
} hark_kserve_request;

/* No Inference-Header-Content-Length header: the whole body is JSON. */
#define HARK_KSERVE_NO_HEADER_LEN SIZE_MAX

/*
 * Parses an infer request body of `len` bytes. With the binary tensor data
 * extension, `header_len` is the Inference-Header-Content-Length: the first
 * header_len bytes are JSON and the rest are the inputs' binary data, in
 * input order. The JSON part is modified in place (strings are decoded
 * where they lie). Errors are INVALID_ARG (HTTP 400) with a message naming
 * the offending input. On success the caller owns *out (free it with
 * hark_kserve_request_clear, unless handed to a request); on error *out is
 * left empty.
 */
hark_error *hark_kserve_parse(char *body, size_t len, size_t header_len, hark_kserve_request *out);
/* Frees what `r` owns (its arena) and empties it. */
void hark_kserve_request_clear(hark_kserve_request *r);

/*
 * The most parameters one infer request may carry (JSON "parameters", or
 * ModelInferRequest.parameters; binary_data_output counts). Each one is
 * looked up by name as it is applied, so the bound keeps what a request
 * costs the event loop small; more is an INVALID_ARG (HTTP 400, gRPC
 * INVALID_ARGUMENT) naming the limit.
 */
#define HARK_KSERVE_MAX_PARAMETERS 64

/*
 * Checks a request's counts before any of it is applied to an engine
 * request: at most HARK_KSERVE_MAX_PARAMETERS parameters, no more inputs
 * than `model` has (input_name(inputs, i) names the i-th; over the count,
 * the error names an input the model lacks or one given twice, looking at
 * no more than the model's count + 1), and no more requested outputs than
 * it has. INVALID_ARG naming what is wrong, or NULL.
 */
hark_error *hark_kserve_check_counts(const hark_model *model, size_t n_params, size_t n_inputs,
                                     const char *(*input_name)(const void *inputs, size_t i),
                                     const void *inputs, size_t n_outputs);

/*
 * Fills `req` (fresh from hark_request_new) from `r`: id, parameters
 * (priority, timeout, sequence_id/start/end are interpreted; the rest are
 * passed on as strings), inputs and requested outputs, after
 * hark_kserve_check_counts against the request's model. Inputs and outputs
 * in shared memory are looked up in `shm` (NULL: shared memory is off, an
 * error): each region used is held by the request until it is freed, and
 * an input's data points into its region. On success the request owns r's
 * arena (r stays readable until the request is freed). On error `req` may
 * hold some of it: free the request, then clear r. The caller still
 * attaches the body.
 */
hark_error *hark_kserve_to_request(hark_kserve_request *r, hark_shm *shm, hark_request *req);

/*
 * The body of POST /v2/systemsharedmemory/region/{r}/register, Triton's
 * {"key": string, "offset": integer (optional), "byte_size": integer}:
 * *key (the caller frees it) and the window, or INVALID_ARG saying what is
 * wrong. The window itself is checked by hark_shm_register.
 */
hark_error *hark_kserve_shm_register_parse(const char *body, size_t len, char **key,
                                           uint64_t *offset, uint64_t *byte_size);

/* ---- responses ----------------------------------------------------------- */

/*
 * Appends the JSON response for `resp` (model name/version, id, parameters,
 * outputs) to `out`, then the binary outputs: those asked for with
 * "binary_data": true, or all by default when the request set
 * "binary_data_output" (`r` may be NULL: everything as JSON). *json_len
 * receives the length of the JSON part, and *any_binary whether binary
 * data follows it (then the reply needs Inference-Header-Content-Length).
 * An output the request put in shared memory is copied into its region and
 * written with its shared_memory_region and shared_memory_byte_size
 * parameters and no data (its binary_data parameter, which Triton's client
 * may send along, is then ignored).
 * Errors: INTERNAL for a malformed output (bad BYTES layout);
 * RESOURCE_EXHAUSTED when the outputs' text does not fit in memory;
 * INVALID_ARG when an output's shared-memory region is too small.
 */
hark_error *hark_kserve_write_response(hark_buf *out, const hark_response *resp,
                                       const char *model_name, int64_t model_version,
                                       const hark_kserve_request *r, size_t *json_len,
                                       bool *any_binary);

/* ---- other documents (kserve_docs.c) -------------------------------------- */

/* Each appends one document to `out` in Triton's JSON shape. */

/* GET /v2: {"name","version","extensions"}. */
/* shared_memory: whether system_shared_memory is served (and listed). */
void hark_kserve_write_server_metadata(hark_buf *out, bool shared_memory);
/* GET /v2/models/{m}: name, every loaded version, platform (or backend),
 * inputs and outputs, with a -1 batch dimension when the model batches. */
void hark_kserve_write_model_metadata(hark_buf *out, hark_server *server, const hark_model *model);
/* GET /v2/models[/{m}[/versions/{v}]]/stats: {"model_stats":[...]} for
 * every loaded model version matching `name` (NULL: all) and `version`
 * (-1: all). NOT_FOUND (and `out` as it was) when a name was given and
 * nothing matched. */
hark_error *hark_kserve_write_stats(hark_buf *out, hark_server *server, const char *name,
                                    int64_t version);
/* POST /v2/repository/index: [{"name","version","state","reason"}], each
 * field left out when empty, as Triton does. */
/* A model config as a client that may not see model-repository sees it:
 * `view` is *cfg with every parameter value (and default_model_filename)
 * that reads as a filesystem path shown as HARK_RESTRICT_PATH_HIDDEN.
 * `view` shares cfg's memory but its parameters array, which the caller
 * frees (free(view->parameters)) before cfg goes. */
void hark_kserve_config_hide_paths(const hark_model_config *cfg, hark_model_config *view);

hark_error *hark_kserve_write_index(hark_buf *out, hark_server *server, bool ready_only);

/* ---- the HTTP service (kserve_http.c) ---------------------------------------- */

typedef struct hark_http_handler hark_http_handler;
/* Fills `h` with the KServe v2 REST API of `server` (and /metrics on the
 * metrics port); the WebSocket part of the handler is left to the caller. */
void hark_kserve_http_handler(hark_kserve *ks, hark_http_handler *h);

#endif
