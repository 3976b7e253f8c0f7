/*
 * grpc.h — the gRPC front end (gRPC C core + protobuf-c): KServe v2
 * `inference.GRPCInferenceService`, Riva's
 * `nvidia.riva.asr.RivaSpeechRecognition` and `grpc.health.v1.Health` on
 * one h2c port, served by its own completion-queue thread.
 */
#ifndef HARK_GRPC_H
#define HARK_GRPC_H

#include <stdbool.h>
#include <stddef.h>

#include "hark/server.h"

typedef struct hark_grpc hark_grpc;

typedef struct hark_grpc_options {
  const char *address;      /* bind address; NULL = all interfaces */
  int port;                 /* 8001; 0 picks a free port */
  size_t max_message_bytes; /* largest message either way; 0 = 64 MiB.
                               Bigger gets RESOURCE_EXHAUSTED. */
  /* Riva speech streams: the model when the client names none ("asr"),
   * the most open at once (0 = 1024), and the backlog of waiting requests
   * on the model past which new streams are refused (0 = 4 per instance),
   * as the WebSocket front end's --speech-model, --max-streams and
   * --stream-backlog-limit. */
  const char *speech_model;
  uint32_t max_streams, stream_backlog_limit;
} hark_grpc_options;

/* Binds the port and starts serving on a new thread. Does not take
 * ownership of `server`, which must outlive the front end. Caller owns
 * *out (hark_grpc_free). */
hark_error *hark_grpc_new(hark_server *server, const hark_grpc_options *opts,
                          hark_grpc **out);
/* The port actually bound. */
int hark_grpc_port(const hark_grpc *g);
/* No stream open (ModelStreamInfer, StreamingRecognize): what a drain
 * waits for, beside the engine's requests in flight. True for NULL. */
bool hark_grpc_is_idle(const hark_grpc *g);
/* Graceful stop: refuses new calls, cancels the ones open, waits until the
 * engine has given every accepted request its final, then frees. */
void hark_grpc_free(hark_grpc *g);

#endif
