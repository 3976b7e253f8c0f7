/*
 * grpc.h — the gRPC front end (gRPC C core + protobuf-c): KServe v2
 * `inference.GRPCInferenceService` and `grpc.health.v1.Health` on one
 * h2c port, served by its own completion-queue thread.
 */
#ifndef HARK_GRPC_H
#define HARK_GRPC_H

#include <stddef.h>

#include "hark/server.h"

typedef struct hark_grpc hark_grpc;

typedef struct hark_grpc_options {
  const char *address;      /* bind address; NULL = all interfaces */
  int port;                 /* 8001; 0 picks a free port */
  size_t max_message_bytes; /* largest message either way; 0 = 64 MiB.
                               Bigger gets RESOURCE_EXHAUSTED. */
} hark_grpc_options;

/* Binds the port and starts serving on a new thread. Does not take
 * ownership of `server`, which must outlive the front end. Caller owns
 * *out (hark_grpc_free). */
hark_error *hark_grpc_new(hark_server *server, const hark_grpc_options *opts,
                          hark_grpc **out);
/* The port actually bound. */
int hark_grpc_port(const hark_grpc *g);
/* Graceful stop: refuses new calls, cancels the ones open, waits until the
 * engine has given every accepted request its final, then frees. */
void hark_grpc_free(hark_grpc *g);

#endif
