/*
 * http.h — the HTTP/1.1 front end (libwebsockets): KServe v2 REST and
 * Vosk-compatible WebSocket speech streams on the HTTP port, and the
 * Prometheus exposition on the metrics port. The HTTP port is served by
 * `threads` event loops, each on its own thread (one of them the thread
 * that calls hark_http_run()), sharing the port; the metrics port by one.
 */
#ifndef HARK_HTTP_H
#define HARK_HTTP_H

#include "hark/server.h"

typedef struct hark_http hark_http;

#define HARK_HTTP_MAX_THREADS 16

typedef struct hark_http_options {
  const char *address;      /* bind address; NULL = all interfaces */
  int http_port;            /* 8000; -1 disables */
  int metrics_port;         /* 8002; -1 disables */
  size_t max_input_size;    /* largest request body, bytes (Triton's
                               --http-max-input-size, default 64 MiB) */
  int body_timeout_secs;    /* a client that stalls mid-request longer than
                               this is dropped; default 30 */
  unsigned threads;         /* event loops serving the HTTP port (Triton's
                               --http-thread-count); 0: one per core, at
                               most HARK_HTTP_MAX_THREADS */
  /* WebSocket streams (ws.c); 0/NULL means the default. */
  const char *speech_model;    /* the model a WebSocket on "/" streams to;
                                  "asr" */
  size_t ws_max_message_bytes; /* largest WebSocket message; 1 MiB */
  int ws_idle_timeout_secs;    /* close a stream silent this long; 60 */
  uint32_t max_streams;        /* concurrent streams; more get 503; 1024 */
  /* Admission under load: a new stream is refused (503) while its model
   * has more than this many requests accepted and not finished — a queue
   * that long means the streams already admitted would fall behind. 0
   * means the default, 4 per instance of the model. */
  uint32_t stream_backlog_limit;
  /* Graceful shutdown (hark_http_drain): how long live streams and
   * requests get to finish (Triton's --exit-timeout-secs; 0: 30; negative:
   * none), and what
   * else must be idle before the drain ends early (NULL: nothing). */
  int exit_timeout_secs;
  bool (*drain_idle)(void *userp);
  void *drain_idle_userp;
} hark_http_options;

/* Binds the ports (failing with a clear error if one is taken, by another
 * process too, although the loops share the HTTP port). Does not
 * take ownership of `server`, which must outlive the front end. */
hark_error *hark_http_new(hark_server *server, const hark_http_options *opts,
                          hark_http **out);
/* Starts the other loops' threads and serves on this one until
 * hark_http_stop(), or, after hark_http_drain(), until nothing is left to
 * finish on any loop (no stream open, no request in flight, and
 * opts.drain_idle agrees) or exit_timeout_secs have passed. Then it closes
 * the streams still open (1001 "server shutting down"), lets their last
 * replies and close handshakes out (a few seconds at most), joins the
 * other loops' threads and returns. */
void hark_http_run(hark_http *http);
/* Thread- and async-signal-safe: begins the server's drain
 * (hark_server_begin_drain: readiness off) and wakes the loops. New infer
 * requests get 503 and new WebSocket streams are refused with 503, both
 * with "Server is shutting down"; health, metadata and metrics answer as
 * usual; live streams go on sending audio and getting their results. */
void hark_http_drain(hark_http *http);
/* Thread- and async-signal-safe: makes hark_http_run() return soon,
 * draining or not. */
void hark_http_stop(hark_http *http);
void hark_http_free(hark_http *http);

#endif
