/*
 * http.h — the HTTP/1.1 and WebSocket transport (hark's own, on
 * libwebsockets' raw sockets), knowing
 * nothing of inference: it owns sockets, event loops, request heads and
 * bodies, replies and WebSocket framing, and calls the handlers a service
 * gives it (kserve/kserve_http.c for the KServe v2 REST API,
 * speech/vosk.c for WebSocket speech streams), as nginx's core calls a
 * module's handler.
 *
 * The HTTP port is served by `threads` event loops, each on its own thread
 * (one of them the thread that calls hark_http_run()), each with a listen
 * socket of its own on the shared port; the metrics port by loop 0. A
 * connection belongs to the loop that accepted it: every handler call for
 * it runs on that loop's thread, and so must every call below that takes a
 * connection or a WebSocket, unless it says "any thread".
 *
 * Work that finishes elsewhere (an engine worker) comes back through a
 * hark_http_call: its `done` handler runs on the owning loop's thread.
 */
#ifndef HARK_FRONTEND_HTTP_H
#define HARK_FRONTEND_HTTP_H

/* How long a drain waits for live streams and requests by default. */
#define HARK_DEFAULT_EXIT_TIMEOUT_SECS 30

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/security/restrict.h"
#include "hark/request.h"
#include "hark/types.h"
#include "util/buf.h"

typedef struct hark_http hark_http;
typedef struct hark_http_loop hark_http_loop;
typedef struct hark_http_conn hark_http_conn;
typedef struct hark_ws hark_ws;
typedef struct hark_raw hark_raw;

#define HARK_HTTP_MAX_THREADS 16

/* ---- what the transport calls --------------------------------------------- */

typedef enum hark_http_method {
  HARK_HTTP_OTHER = 0,
  HARK_HTTP_GET,
  HARK_HTTP_POST,
  HARK_HTTP_HEAD,
} hark_http_method;

/* A request's head. `path` is the URL path without the query. */
typedef struct hark_http_request {
  hark_http_method method;
  const char *path;
  bool metrics; /* arrived on the metrics port */
} hark_http_request;

/*
 * A WebSocket service: the handlers of one kind of stream. Loop thread.
 *   accept  an upgrade to `path`: NULL accepts it (*ticket is anything the
 *           accepted upgrade holds until open or release); an error refuses
 *           it with the error's HTTP status and {"error": message}. Once
 *           accepted, the 101 goes out and open gets the ticket (release
 *           does, when the connection failed first).
 *   open    the WebSocket is up: the stream's state (NULL closes it, 1011).
 *   release gives back a ticket that no stream took.
 *   message one whole message (fragments joined, at most ws_max_message
 *           bytes): `data` is the transport's until the call returns.
 *   busy    true while the stream waits on something other than its client
 *           (the idle timeout then does not count). Optional.
 *   closed  the connection is gone: `ws` is invalid from now on.
 */
typedef struct hark_ws_handler {
  hark_error *(*accept)(void *userp, const char *path, void **ticket);
  void *(*open)(void *userp, hark_ws *ws, void *ticket);
  void (*release)(void *userp, void *ticket);
  void (*message)(void *stream, const char *data, size_t len, bool binary);
  bool (*busy)(void *stream);
  void (*closed)(void *stream);
} hark_ws_handler;

/*
 * A service of raw byte streams on their own port (gRPC's HTTP/2, in
 * grpc/), served by the same loops. Loop thread.
 *   open      a connection was accepted: its state (NULL closes it).
 *   rx        bytes arrived (-1 closes the connection).
 *   writable  the socket can take more (asked for with hark_raw_want_write).
 *   closed    the connection is gone: `raw` is invalid from now on.
 */
typedef struct hark_raw_handler {
  void *(*open)(void *userp, hark_raw *raw);
  int (*rx)(void *conn, const uint8_t *data, size_t len);
  int (*writable)(void *conn);
  void (*closed)(void *conn);
} hark_raw_handler;

/*
 * An HTTP service.
 *   head    a request's head arrived: reply now (hark_http_reply*), or ask
 *           for its body with hark_http_read_body, or start work whose
 *           reply comes later (hark_http_call_start).
 *   body    the body asked for is in (hark_http_body): reply or start work.
 *   ws      WebSocket streams, or NULL (upgrades are refused with 404).
 */
typedef struct hark_http_handler {
  void (*head)(void *userp, hark_http_conn *c, const hark_http_request *req);
  void (*body)(void *userp, hark_http_conn *c);
  void *userp;
  const hark_ws_handler *ws;
  void *ws_userp;
  /* Raw connections on opts.raw_port, or NULL. */
  const hark_raw_handler *raw;
  void *raw_userp;
  /* Each loop thread calls this with true when it starts serving and with
   * false when it stops (e.g. hark_server_thread_may_inline). Optional. */
  void (*thread_hook)(bool start);
} hark_http_handler;

typedef struct hark_http_options {
  const char *address;      /* bind address; NULL = all interfaces */
  int http_port;            /* 8000; -1 disables */
  int metrics_port;         /* 8002; -1 disables */
  size_t max_input_size;    /* largest request body (--http-max-input-size);
                               0: 64 MiB */
  int body_timeout_secs;    /* a client that stalls mid-request longer than
                               this is dropped; 0: 30 */
  int header_timeout_secs;  /* a request's head must be in within this
                               (--http-header-timeout-secs); 0: 10 */
  int body_deadline_secs;   /* ... and its body within this of the head
                               (--http-body-deadline-secs); 0: 60 */
  int send_timeout_secs;    /* a client that reads nothing of what is sent
                               to it this long is dropped, on every port
                               (--send-timeout-secs); 0: 60 */
  unsigned threads;         /* event loops on the HTTP port
                               (--http-thread-count); 0: one per core */
  size_t ws_max_message;    /* largest WebSocket message; 0: 1 MiB */
  int ws_idle_timeout_secs; /* close a WebSocket silent this long; 0: 60 */
  int raw_port;             /* raw connections (handler->raw); -1 off, 0 any */
  const char *raw_address;  /* their bind address; NULL: `address` */
  /* Graceful shutdown (hark_http_drain): how long what is live gets to
   * finish (0: 30 s; negative: no wait), and what else must be idle before
   * the drain may end early (NULL: nothing). */
  int exit_timeout_secs;
  bool (*drain_idle)(void *userp);
  void *drain_idle_userp;
  /* Called once when the exit timeout passes with work still live, before
   * the loops close their connections (NULL: nothing): what is queued can
   * still be answered. Same userp as drain_idle. */
  void (*drain_timeout)(void *userp);
  /* --http-restricted-api (NULL: nothing restricted): WebSocket upgrades
   * are `inference`; the service checks its own routes with
   * hark_http_allowed. Must outlive the transport. */
  const hark_restrict *restricted;
  /* --http-use-ssl: the certificate chain and key (PEM files; NULL: plain
   * HTTP), which frontends.c makes http_tls from; and that context, hark's
   * own (security/tls.h), which the HTTP port's connections speak. */
  const char *tls_cert, *tls_key;
  struct hark_tls *http_tls;
  /* --grpc-use-ssl: raw connections speak TLS with this context, hark's
   * own (security/tls.h), before the raw handler sees a byte (NULL: plain). */
  struct hark_tls *raw_tls;
  /* --metrics-address: the metrics port's bind address (NULL: `address`). */
  const char *metrics_address;
} hark_http_options;

/* ---- lifecycle ------------------------------------------------------------- */

/* Binds the ports (a clear error if one is taken, by another process too,
 * although the loops share the HTTP port). `handler` must outlive the
 * transport. Caller owns *out. */
hark_error *hark_http_new(const hark_http_options *opts, const hark_http_handler *handler,
                          hark_http **out);
/* Starts the other loops' threads and serves on this one until
 * hark_http_stop(), or, after hark_http_drain(), until nothing is left to
 * finish on any loop (no WebSocket open, no call outstanding, and
 * opts.drain_idle agrees) or exit_timeout_secs have passed. Then closes
 * the WebSockets still open (1001 "server is shutting down"), lets their
 * last messages and the replies in flight out (a few seconds at most),
 * joins the other loops and returns. */
void hark_http_run(hark_http *http);
/* Any thread, async-signal-safe: begin the drain (above) and wake the
 * loops. The service decides what to refuse meanwhile. */
void hark_http_drain(hark_http *http);
/* Any thread, async-signal-safe: make hark_http_run() return soon. */
void hark_http_stop(hark_http *http);
/* Waits for the calls still outstanding (their done handlers run with the
 * connection gone), then frees. */
void hark_http_free(hark_http *http);
/* The raw port bound (it may have been 0), or -1. */
int hark_http_raw_port(const hark_http *http);
/* True once hark_http_stop() was called or the run is winding down: new
 * requests are answered 503 by the transport itself. */
bool hark_http_stopping(const hark_http *http);

/* ---- an exchange: request in, one reply out ------------------------------ */

/* Copies a request header (name in lower case with its colon, e.g.
 * "inference-header-content-length:") into buf, NUL-terminated; its
 * length, or -1 when absent or too long. */
int hark_http_header(hark_http_conn *c, const char *name, char *buf, size_t cap);

/*
 * Who the client is: the peer's IP address ("192.0.2.7", "2001:db8::1";
 * an IPv4 client of an IPv6 socket as IPv4), without the port, since one
 * client opens many connections; "" when the socket has none (a Unix
 * socket). What the services put on their requests (hark_request_set_client).
 * Behind a proxy it is the proxy's address.
 */
#define HARK_PEER_MAX 48
const char *hark_http_peer(hark_http_conn *c);
/* The same for a WebSocket (loop thread) and a raw connection (any thread:
 * read once when the connection is accepted). */
const char *hark_ws_peer(const hark_ws *ws);
const char *hark_raw_peer(const hark_raw *raw);

/* Whether the request may reach an endpoint of category `api` under
 * opts.restricted: true, or false with the refusal's message in msg. */
bool hark_http_allowed(hark_http_conn *c, hark_api api, char *msg, size_t cap);

/* Asks for the request's body: 1 means body() comes once it is read; 0
 * means there is none (go on now); -1 means it was refused (too large, bad
 * Content-Length, chunked) and the transport replied. `align_at`: the body
 * is placed so that its byte at this offset is 64-byte aligned (0: the
 * start). */
int hark_http_read_body(hark_http_conn *c, size_t align_at);
/* The body read for this request (empty when none): data and length. */
char *hark_http_body(hark_http_conn *c, size_t *len);
/* Hands the body's allocation over: the taker frees it with
 * hark_http_body_free, which gives its bytes back to the in-flight
 * budget; the body stays readable through the returned pointer's region.
 * NULL when there is none. */
void *hark_http_take_body(hark_http_conn *c);
/* Frees a body's allocation and gives back what it held of the in-flight
 * budget. NULL is fine. */
void hark_http_body_free(void *mem);

/* State the service keeps for this exchange; free_fn(state) runs when the
 * exchange ends (replied, or the connection closed). */
void hark_http_set_state(hark_http_conn *c, void *state, void (*free_fn)(void *));
void *hark_http_state(hark_http_conn *c);

/* Replies are built in a buffer that begins with room for the headers, so
 * headers and body leave in one write: start it with hark_http_body_begin. */
void hark_http_body_begin(hark_buf *b);
/* Queues the reply (status, Content-Type or NULL, the body in `b`, taken;
 * and one extra header when `hname` is not NULL, e.g.
 * "Inference-Header-Content-Length:"). A reply before the request's body
 * was read closes the connection afterwards. */
void hark_http_reply(hark_http_conn *c, int status, const char *ctype, hark_buf *b,
                     const char *hname, const char *hvalue);
/* {"error": message} with the status for the error's code, or `status`
 * when not 0. Takes `err`. */
void hark_http_reply_error(hark_http_conn *c, int status, hark_error *err);
/* A fixed body (none when text is NULL). */
void hark_http_reply_text(hark_http_conn *c, int status, const char *ctype, const char *text,
                          size_t len);
/* Close the connection after this exchange's reply. */
void hark_http_close_after(hark_http_conn *c);
/* {"error":"<message>"}: the error body of every JSON reply. */
void hark_http_put_error(hark_buf *b, const char *message);

/* ---- work that completes elsewhere ----------------------------------------- */

/*
 * A service embeds a hark_http_call in whatever it hands to other threads.
 * `done` runs on the loop's thread once the call is posted; for an
 * exchange's call, `c` is its connection, or NULL when the client went
 * away meanwhile. Every started call must be posted exactly once (or
 * aborted before anything else could post it): the loop counts them, and
 * shutdown waits for them.
 */
typedef struct hark_http_call hark_http_call;
typedef void (*hark_http_done_fn)(hark_http_call *call, hark_http_conn *c);
struct hark_http_call {
  hark_http_done_fn done;
  /* the transport's */
  hark_http_loop *loop;
  hark_http_conn *conn;
  hark_http_call *next;
  bool held; /* started: holds its loop until done has run */
  /* Optional, the service's (it holds the reference): an exchange's
   * call's token is set when the connection closes before the call is
   * posted, so the engine stops the work the client no longer waits for. */
  hark_cancel *cancel;
};

/* The reply to c's request comes from `call` later; c reads nothing more
 * until then. */
void hark_http_call_start(hark_http_conn *c, hark_http_call *call, hark_http_done_fn done);
/* A call for a WebSocket stream, not tied to an exchange (done gets NULL). */
void hark_http_call_start_ws(hark_ws *ws, hark_http_call *call, hark_http_done_fn done);
/* The work was refused before anything could post the call: done never
 * runs. */
void hark_http_call_abort(hark_http_call *call);
/* A call of `loop` that holds nothing: its owner keeps the loop alive
 * (hark_http_loop_hold) while it may post; it may be posted again once
 * its done handler has begun. */
void hark_http_call_init(hark_http_call *call, hark_http_loop *loop, hark_http_done_fn done);
/* Any thread: done runs soon on the call's loop. The caller must not touch
 * the call afterwards. */
void hark_http_call_post(hark_http_call *call);
/* Any thread: the loop is not freed, and shutdown waits, until the
 * matching release. */
void hark_http_loop_hold(hark_http_loop *loop);
void hark_http_loop_release(hark_http_loop *loop);
/* The loop the calling thread runs, or NULL. */
hark_http_loop *hark_http_current_loop(void);

/* ---- raw connections (raw.c) -------------------------------------------- */

/* Writes `len` bytes at `data`, which must have HARK_RAW_HEADROOM bytes
 * of room in front for the transport's use (what the socket does not take
 * now is kept and goes first); -1 when the connection failed. */
#define HARK_RAW_HEADROOM 32
int hark_raw_write(hark_raw *raw, uint8_t *data, size_t len);
/* True while the socket's send buffer is full: wait for writable. */
bool hark_raw_choked(hark_raw *raw);
void hark_raw_want_write(hark_raw *raw);
/* Stops or resumes reading. */
void hark_raw_pause(hark_raw *raw, bool pause);
/* Closes the connection (its closed handler runs soon). */
void hark_raw_close(hark_raw *raw);
hark_http_loop *hark_raw_loop(const hark_raw *raw);

/* A timer on a loop (loop thread): fn(arg) runs once, `us` from now,
 * unless cancelled first. */
typedef struct hark_http_timer hark_http_timer;
hark_http_timer *hark_http_timer_new(hark_http_loop *loop, void (*fn)(void *arg), void *arg);
void hark_http_timer_arm(hark_http_timer *t, uint64_t us);
/* Cancels and frees. NULL is fine. */
void hark_http_timer_free(hark_http_timer *t);

/* ---- WebSocket streams ---------------------------------------------------- */

/* Queues a text message (copied); false when out of memory (the stream is
 * then closed 1011). */
bool hark_ws_send_text(hark_ws *ws, const char *text, size_t len);
/* Stops reading and closes with `code` and `reason` (cut to what a close
 * frame holds) once the messages already queued are out. */
void hark_ws_close(hark_ws *ws, int code, const char *reason);
/* The service's own reason to stop reading (its backlog is long); the
 * transport also pauses while too many of its messages wait unsent. */
void hark_ws_pause(hark_ws *ws, bool pause);
bool hark_ws_closing(const hark_ws *ws);

/* ---- limits (limits.c) ------------------------------------------------------ */

/* What a client ran into: each is counted (hark_limit_hits_total on
 * /metrics) and logged, at most once a second per kind. */
typedef enum hark_limit {
  HARK_LIMIT_HTTP_HEADER_TIMEOUT = 0,
  HARK_LIMIT_HTTP_BODY_TIMEOUT,
  HARK_LIMIT_SEND_TIMEOUT,
  HARK_LIMIT_WS_IDLE_TIMEOUT,
  HARK_LIMIT_GRPC_IDLE,
  HARK_LIMIT_GRPC_MAX_AGE,
  HARK_LIMIT_GRPC_KEEPALIVE_TIMEOUT,
  HARK_LIMIT_GRPC_PING_STRIKES,
  HARK_LIMIT_GRPC_STREAMS_PER_CONNECTION,
  HARK_LIMIT_GRPC_STREAM_IDLE,
  HARK_LIMIT_INFLIGHT_BYTES,
  HARK_LIMIT_GRPC_MESSAGE_TIMEOUT,
  HARK_LIMIT_GRPC_DECLARED_BYTES,
  HARK_LIMIT_COUNT
} hark_limit;

/* Any thread: counts one hit of `limit` and logs the line (printf-style),
 * unless that kind logged less than a second ago (the next line says how
 * many were not logged). */
void hark_limit_hit(hark_limit limit, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Every limit's count in Prometheus text, and the in-flight gauge,
 * appended to `b`. */
void hark_limit_render(hark_buf *b);

/* The in-flight byte budget (--max-inflight-bytes), any thread: the
 * bytes that request bodies, gRPC messages and the like hold while they
 * are received and served. Set the bound once, before serving (0: no
 * bound, only counted). A taker asks before allocating; take is false,
 * and takes nothing, when `n` more would pass the bound. Every byte taken
 * is given back exactly once, when what holds it is freed. */
void hark_inflight_set_max(uint64_t max);
uint64_t hark_inflight_max(void);
bool hark_inflight_take(uint64_t n);
/* Counts `n` bytes already held whatever the bound (a stream's reply,
 * made before it could be refused): the next takers see them. */
void hark_inflight_add(uint64_t n);
void hark_inflight_give(uint64_t n);
uint64_t hark_inflight_bytes(void);

/* WebSocket close codes (RFC 6455 section 7.4.1); a close reason holds at
 * most 123 bytes. */
enum {
  HARK_WS_CLOSE_NORMAL = 1000,
  HARK_WS_CLOSE_GOING_AWAY = 1001,
  HARK_WS_CLOSE_PROTOCOL = 1002,
  HARK_WS_CLOSE_UNSUPPORTED = 1003,
  HARK_WS_CLOSE_INVALID = 1007,
  HARK_WS_CLOSE_POLICY = 1008,
  HARK_WS_CLOSE_TOO_BIG = 1009,
  HARK_WS_CLOSE_INTERNAL = 1011,
  HARK_WS_CLOSE_TRY_LATER = 1013,
};
#define HARK_WS_REASON_MAX 123
/* Cuts `s` (NUL-terminated, in place) to at most `max` bytes without
 * splitting a UTF-8 sequence: what fits in a close frame's reason. */
void hark_ws_reason_fit(char *s, size_t max);

#endif
