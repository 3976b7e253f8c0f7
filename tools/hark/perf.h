/*
 * perf.h — what `hark perf` shares between its files: the model's inputs as
 * the server describes them, and the one request body every client thread
 * sends (perf_request.c builds it; perf.c drives the load).
 */
#ifndef HARK_TOOLS_PERF_H
#define HARK_TOOLS_PERF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PERF_MAX_DIMS 16

typedef struct perf_tensor {
  char *name;                   /* owned */
  char datatype[16];            /* KServe name: INT32, FP16, BYTES ... */
  int64_t shape[PERF_MAX_DIMS]; /* from metadata; -1 = variable */
  int ndims;
} perf_tensor;

typedef struct perf_model {
  perf_tensor *inputs; /* owned, n_inputs of them */
  int n_inputs;
  char **outputs; /* owned output names */
  int n_outputs;
  int max_batch_size; /* from the config; -1 when the server did not say */
} perf_model;

/* One --shape NAME:d1,d2 flag (dimensions after the batch dimension). */
typedef struct perf_shape {
  const char *name; /* points into argv */
  int64_t dims[PERF_MAX_DIMS];
  int ndims;
} perf_shape;

/* Parses "NAME:d1,d2,...". Returns 0 or -1 (bad syntax). */
int perf_shape_parse(const char *arg, perf_shape *out);

/* Reads the model metadata JSON (GET /v2/models/{m}) into *m. Returns 0, or
 * -1 with a message in err. Free with perf_model_free. */
int perf_model_parse(const char *json, size_t len, int max_batch_size, perf_model *m, char *err,
                     size_t errcap);
void perf_model_free(perf_model *m);

/* Replaces the batch dimension with `batch` and every other -1 with the
 * --shape given for that input. Returns 0, or -1 with a message in err. */
int perf_model_resolve(perf_model *m, int batch, const perf_shape *shapes, int n_shapes, char *err,
                       size_t errcap);

/* The full HTTP request (head and body), built once and sent many times. */
typedef struct perf_request {
  char *data; /* owned */
  size_t len;
  size_t body_len;
  size_t json_len; /* Inference-Header-Content-Length; 0 for a pure JSON body */
} perf_request;

typedef struct perf_body_opts {
  bool binary; /* all inputs as binary tensors, outputs asked as binary */
  bool random; /* small random values, else zeros */
} perf_body_opts;

/* Seed of the value stream, so both protocols send the same values. */
#define PERF_RNG_SEED 0x9E3779B97F4A7C15ULL

/* A resolved input's values as raw little-endian bytes (BYTES elements:
 * 4-byte length + bytes), as the binary HTTP body carries them; *rng
 * carries the random stream from one input to the next. Exits if memory
 * runs out. Free with free(*data). */
void perf_tensor_raw(const perf_tensor *t, bool random, uint64_t *rng, char **data, size_t *len);

/* Builds POST `path` to host:port with the model's resolved inputs. FP16 and
 * BF16 inputs are always binary: JSON cannot carry them. Exits if memory
 * runs out. Free with free(r->data). */
void perf_request_build(const perf_model *m, const perf_body_opts *o, const char *hostport,
                        const char *path, perf_request *r);

/* ---- KServe over gRPC (perf_grpc.c) ---------------------------------------- */

/* The ModelInferRequest every gRPC client sends, packed and framed once. */
typedef struct perf_grpc_request {
  unsigned char *framed; /* owned: gRPC's 5-byte prefix and the message */
  size_t size;
} perf_grpc_request;

/* One client thread's connection: an h2c connection of its own (h2grpc.h). */
typedef struct perf_grpc_conn perf_grpc_conn;

/* Reads the model's metadata (ModelMetadata) and max_batch_size
 * (ModelConfig) over gRPC into *m, as perf_model_parse does from HTTP.
 * Returns 0; or -1 with a message in err, and *unreachable set when no
 * server answered at `target`. */
int perf_grpc_model_load(const char *target, const char *model, const char *version, int timeout_ms,
                         perf_model *m, bool *unreachable, char *err, size_t errcap);

/* Builds the request for the resolved model: inputs in raw_input_contents
 * with the values perf_request_build would send. */
void perf_grpc_request_build(const perf_model *m, const char *model, const char *version,
                             bool random, perf_grpc_request *r);
void perf_grpc_request_free(perf_grpc_request *r);

/* A connection to HOST:PORT (made at the first call). NULL when out of
 * memory. Free with perf_grpc_conn_free. */
perf_grpc_conn *perf_grpc_conn_new(const char *host, const char *port, int timeout_ms);
void perf_grpc_conn_free(perf_grpc_conn *c);

/* One ModelInfer call. Returns 0 on OK; -1 with a message in err ("STATUS:
 * details"), and *transport set when the call never reached the model
 * (UNAVAILABLE: the connection failed). */
int perf_grpc_infer(perf_grpc_conn *c, const perf_grpc_request *r, bool *transport, char *err,
                    size_t errcap);

/* From another thread: fails the call in progress, if any. Shutdown only. */
void perf_grpc_conn_abort(perf_grpc_conn *c);

#endif
