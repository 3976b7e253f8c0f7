/*
 * frontends.h — every front end of harkd, assembled: the HTTP transport's
 * event loops serving the KServe v2 REST API and Vosk's WebSocket streams
 * on the HTTP port, and the gRPC transport (on the same loops, the gRPC
 * port) serving KServe v2, grpc.health.v1 and Riva's speech recognition.
 * The one place that knows all the services; harkd only reads flags
 * (harkd_flags.c) and handles signals.
 */
#ifndef HARK_FRONTEND_FRONTENDS_H
#define HARK_FRONTEND_FRONTENDS_H

#include "frontend/grpc/grpc.h"
#include "frontend/http/http.h"
#include "frontend/security/tls.h"
#include "frontend/speech/speech.h"
#include "hark/server.h"

typedef struct hark_frontends hark_frontends;

typedef struct hark_frontend_options {
  hark_http_options http; /* drain_idle, raw_port and raw_address are set here */
  hark_grpc_options grpc;
  int grpc_port;              /* 8001; -1: no gRPC; 0: any */
  const char *grpc_address;   /* NULL: http.address's */
  hark_speech_options speech; /* both speech protocols */
  bool shared_memory;         /* --allow-shared-memory=true */
  size_t shm_max_regions;     /* --shared-memory-max-regions; 0: 1024 */
  /* --grpc-use-ssl (and -mutual): the gRPC port's TLS (its alpn is set
   * here: h2). http.tls_cert/tls_key: the HTTP port's (checked here,
   * served by libwebsockets). */
  bool grpc_use_ssl;
  hark_tls_options grpc_tls;
} hark_frontend_options;

/* Binds every port. `server` must outlive the front ends. Caller owns
 * *out. */
hark_error *hark_frontends_new(hark_server *server, const hark_frontend_options *opts,
                               hark_frontends **out);
/* The gRPC port bound, or -1. */
int hark_frontends_grpc_port(const hark_frontends *f);
/* Serves on the calling thread (and the HTTP loops' own) until stopped,
 * or drained (what is live finished, or the exit timeout passed). */
void hark_frontends_run(hark_frontends *f);
/* Async-signal-safe: readiness off, new work refused, live work finishes. */
void hark_frontends_drain(hark_frontends *f);
/* Async-signal-safe: stop waiting for the drain. */
void hark_frontends_stop(hark_frontends *f);
/* Cancels the gRPC calls still open, waits for every request in flight,
 * and frees. */
void hark_frontends_free(hark_frontends *f);

#endif
