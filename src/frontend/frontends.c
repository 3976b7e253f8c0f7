/*
 * frontends.c — the front ends, assembled (see frontends.h): the services
 * are made and handed to the transports that serve them, and the drain
 * spans both transports and the engine.
 */
#include "frontend/frontends.h"

#include <stdlib.h>

#include "frontend/kserve/kserve.h"
#include "frontend/kserve/kserve_grpc.h"
#include "util/alloc.h"

struct hark_frontends {
  hark_server *server;
  hark_kserve kserve; /* the KServe services' engine and shared memory */
  hark_http_handler handler;
  hark_http *http;
  hark_grpc *grpc;
  hark_vosk *vosk;
  hark_riva *riva;
  hark_tls *grpc_tls; /* --grpc-use-ssl */
  hark_tls *http_tls; /* --http-use-ssl */
};

/* The drain may end early once nothing is in flight in the engine and no
 * gRPC stream is open (the HTTP transport checks its own WebSockets and
 * calls); the gRPC transport refuses new calls and streams while
 * draining, so its live streams get the same --exit-timeout-secs. */
static bool engine_idle(void *userp) {
  hark_frontends *f = userp;
  return hark_server_is_idle(f->server) && hark_grpc_is_idle(f->grpc);
}

/* The exit timeout passed: what is still queued is answered, not run. */
static void engine_cut(void *userp) {
  hark_frontends *f = userp;
  hark_server_cut_queued(f->server);
}

/* The loops run cheap batches in place (hark/server.h). */
static void may_inline(bool start) { hark_server_thread_may_inline(start); }

static hark_error *grpc_new(hark_frontends *f, const hark_frontend_options *opts) {
  hark_grpc_options go = opts->grpc;
  if (!go.send_timeout_ms) go.send_timeout_ms = (uint64_t)opts->http.send_timeout_secs * 1000;
  hark_error *err = hark_grpc_new(&go, &f->grpc);
  if (!err) err = hark_kserve_grpc_register(f->grpc, &f->kserve);
  if (!err) err = hark_riva_register(f->grpc, f->riva);
  if (err) return err;
  f->handler.raw = hark_grpc_raw_handler();
  f->handler.raw_userp = f->grpc;
  return NULL;
}

/* The ports' TLS: the gRPC port's context (ALPN: h2, as gRPC asks);
 * the HTTP port's files, checked here so a bad one is named before
 * libwebsockets reads them. */
static hark_error *tls_new(hark_frontends *f, const hark_frontend_options *opts,
                           hark_http_options *ho) {
  if (opts->grpc_use_ssl && opts->grpc_port >= 0) {
    hark_tls_options to = opts->grpc_tls;
    to.alpn = "h2";
    hark_error *err = hark_tls_new(&to, &f->grpc_tls);
    if (err) return err;
    ho->raw_tls = f->grpc_tls;
  }
  if (ho->tls_cert && ho->http_port >= 0) {
    hark_tls_options to = {.cert = ho->tls_cert,
                           .key = ho->tls_key,
                           .alpn = "http/1.1",
                           .cert_flag = "--http-server-cert",
                           .key_flag = "--http-server-key"};
    hark_error *err = hark_tls_new(&to, &f->http_tls);
    if (err) return err;
    ho->http_tls = f->http_tls;
  }
  return NULL;
}

hark_error *hark_frontends_new(hark_server *server, const hark_frontend_options *opts,
                               hark_frontends **out) {
  hark_frontends *f = hark_xcalloc(1, sizeof *f);
  f->server = server;
  hark_speech_options so = opts->speech;
  so.ws_max_message = opts->http.ws_max_message;
  f->vosk = hark_vosk_new(server, &so);
  f->riva = hark_riva_new(server, &so);
  f->kserve.server = server;
  f->kserve.shm = opts->shared_memory ? hark_shm_new(opts->shm_max_regions) : NULL;
  hark_kserve_http_handler(&f->kserve, &f->handler);
  f->handler.ws = hark_vosk_ws_handler();
  f->handler.ws_userp = f->vosk;
  f->handler.thread_hook = may_inline;
  hark_http_options ho = opts->http;
  ho.drain_idle = engine_idle;
  ho.drain_idle_userp = f;
  ho.drain_timeout = engine_cut;
  ho.raw_port = opts->grpc_port;
  ho.raw_address = opts->grpc_address;
  hark_error *err = tls_new(f, opts, &ho);
  if (!err && opts->grpc_port >= 0) err = grpc_new(f, opts);
  if (!err) err = hark_http_new(&ho, &f->handler, &f->http);
  if (err) {
    hark_frontends_free(f);
    return err;
  }
  *out = f;
  return NULL;
}

int hark_frontends_grpc_port(const hark_frontends *f) {
  return f->grpc ? hark_http_raw_port(f->http) : -1;
}

void hark_frontends_run(hark_frontends *f) { hark_http_run(f->http); }

void hark_frontends_drain(hark_frontends *f) {
  hark_server_begin_drain(f->server);
  if (f->grpc) hark_grpc_drain(f->grpc);
  hark_http_drain(f->http);
}

void hark_frontends_stop(hark_frontends *f) { hark_http_stop(f->http); }

void hark_frontends_free(hark_frontends *f) {
  if (!f) return;
  /* The loops first: closing them cancels the gRPC calls still open (the
   * drain gave them --exit-timeout-secs) and waits for every request in
   * flight; then nothing of the gRPC transport is in use. */
  hark_http_free(f->http);
  hark_grpc_free(f->grpc);
  hark_tls_free(f->http_tls);
  hark_tls_free(f->grpc_tls);   /* no connection uses it now */
  hark_shm_free(f->kserve.shm); /* no request holds a region now */
  hark_riva_free(f->riva);
  hark_vosk_free(f->vosk);
  free(f);
}
