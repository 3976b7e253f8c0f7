/*
 * http_impl.h — what the transport's files share: http.c (event loops,
 * listen sockets, lifecycle, the lws callback and the completion list),
 * exchange.c (request heads and bodies, replies) and ws.c (WebSocket
 * connections). Private to src/frontend/http.
 */
#ifndef HARK_FRONTEND_HTTP_IMPL_H
#define HARK_FRONTEND_HTTP_IMPL_H

#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>

#include "frontend/http/http.h"

/* Reply buffers keep this much room in front of the body so the headers
 * can be put right before it and go out in the same write. */
#define HARK_HTTP_HEADROOM (LWS_PRE + 512)

typedef enum conn_state {
  CONN_IDLE = 0, /* between requests */
  CONN_BODY,     /* receiving a request body */
  CONN_BUSY,     /* a call has the request */
  CONN_REPLYING, /* writing the reply */
  CONN_LINGER,   /* replied early: discarding the unread body, then close */
} conn_state;

/* What a connection's timer (lws_set_timer_usecs) is counting down: one
 * bound at a time, by what the connection waits for. */
typedef enum conn_timer {
  TIMER_NONE = 0, /* or the first request's head, armed at accept
                     (--http-header-timeout-secs) */
  TIMER_BODY,     /* the whole body (--http-body-deadline-secs) */
  TIMER_SEND,     /* progress writing the reply (--send-timeout-secs) */
  TIMER_LINGER,   /* dropping an unread body after an early reply */
} conn_timer;

/* Per-connection state: lws allocates it zeroed; only the loop touches it. */
struct hark_http_conn {
  struct lws *wsi;
  hark_http_loop *loop;
  conn_state state;
  void *state_ptr; /* the service's, for this exchange */
  void (*state_free)(void *);
  char *body_mem; /* allocation (exchange.c's body_alloc); body is inside it, aligned */
  char *body;
  size_t body_len, body_cap, body_align;
  size_t body_declared; /* Content-Length: body_cap grows towards it as bytes arrive */
  bool close_after;     /* close instead of waiting for the next request */
  bool body_expected;   /* the request declared a body ... */
  bool body_done;       /* ... and lws has delivered all of it */
  bool keep_alive_10;   /* an HTTP/1.0 client asked to keep the connection */
  bool kept;            /* the whole reply is with lws, which completes the exchange */
  hark_buf out;         /* the reply: headers + body from out_off */
  size_t out_off;
  size_t out_charge;    /* what `out` took from the in-flight budget */
  hark_http_call *call; /* the exchange's call, or NULL */
  hark_ws *ws;          /* a WebSocket connection's state (ws.c) */
  conn_timer timer;
};

/* What outlives a connection's exchanges (lws remakes its user data, a
 * hark_http_conn, for each): lws's opaque user data of the connection,
 * from its accept to its WSI_DESTROY (exchange.c). Loop thread only. */
typedef struct hark_http_sock {
  struct lws *wsi;
  hark_http_loop *loop;
  struct hark_http_sock *flush_prev, *flush_next; /* loop->flush_head's list */
  bool flush_queued;
  bool completed;           /* an exchange completed while its reply was flushed */
  uint64_t note;            /* what the socket had given when an exchange completed, + 1; 0: none */
  char peer[HARK_PEER_MAX]; /* hark_http_peer's answer, once asked ("" before) */
} hark_http_sock;

/* A raw connection's state: lws allocates it zeroed (raw.c). */
struct hark_raw {
  struct lws *wsi;
  hark_http_loop *loop;
  hark_raw *prev, *next; /* loop->raws */
  void *conn;            /* the service's (with TLS: once the handshake is done) */
  bool paused, killed;
  uint64_t choked_ns;        /* since when the socket takes nothing; 0: it does */
  struct hark_tls_conn *tls; /* opts.raw_tls's session, or NULL */
  hark_buf tls_out;          /* ciphertext on its way to lws_write, after LWS_PRE */
  char peer[HARK_PEER_MAX];  /* the client's address (hark_raw_peer) */
};

/* One event loop: an lws context (info.user points here) with a vhost on
 * the HTTP port (fed by a listen socket of its own when there are several
 * loops) and, on loop 0 only, the metrics vhost. */
struct hark_http_loop {
  hark_http *http;
  unsigned index;
  struct lws_context *ctx;
  struct ev_loop *ev;    /* the libev loop ctx runs on (http.c), or NULL: lws's poll() */
  struct ev_timer *kick; /* on ev: has lws look at its timers while busy (http.c) */
  unsigned kicks;        /* loop thread: kicks since events_seen was last looked at */
  bool events_seen;      /* loop thread: an lws event since then */
  int wake_fd;           /* eventfd lws polls: hark_http_loop_wake (-1: lws_cancel_service) */
  struct lws_vhost *vh_http, *vh_metrics, *vh_raw;
  int listen_fd;     /* ours unless lws listens (lws closes it) */
  int raw_listen_fd; /* the raw port's listen socket (lws closes it) */
  /* Accepting under fd exhaustion (http.c), loop thread only: the listen
   * sockets' wsis, paused together for a moment after EMFILE/ENFILE. */
  struct lws *listen_wsi, *raw_listen_wsi;
  lws_sorted_usec_list_t accept_resume;
  bool accept_paused;
  uint64_t accept_logged_ns;   /* the last warning; at most one a second */
  uint32_t accept_unlogged;    /* failures since that warning */
  pthread_t thread;            /* loops 1..n-1; loop 0 runs on hark_http_run's */
  lws_sorted_usec_list_t tick; /* wakes the loop while shutting down */
  _Atomic uint32_t replying;   /* connections writing a reply (loop 0 reads it) */
  pthread_mutex_t lock;        /* guards the fields below */
  pthread_cond_t idle;
  hark_http_call *done_head, *done_tail; /* completion list */
  uint32_t holds;                        /* work that will post to this loop, or that needs it */
  bool ctx_alive;                        /* lws_cancel_service may be called */
  bool drain_soon;                       /* loop thread only: it posted a call itself without
                           waking itself; drain after this callback */
  /* WebSockets (ws.c), loop thread only. */
  hark_ws *sockets;                /* open ones */
  lws_sorted_usec_list_t ws_sweep; /* idle check, once a second */
  bool ws_closing_all;             /* shutting down: told to go */
  /* Raw connections (raw.c), loop thread only. */
  hark_raw *raws;
  bool raw_closing_all;
  /* Replies to write before the loop next waits (exchange.c), loop
   * thread only; `flushing`: the one being written (NULL once its
   * connection is gone). */
  hark_http_sock *flush_head, *flush_tail, *flushing;
};

/* Any thread, or a signal handler (call.c): the loop wakes and drains its
 * completion list (lws_cancel_service does not reach a libev loop in lws
 * 4.1). The caller makes sure the loop's context is alive. */
void hark_http_loop_wake(hark_http_loop *loop);

struct hark_http {
  hark_http_options opts;
  const hark_http_handler *handler;
  atomic_bool stop;           /* every loop winds down (new requests get 503) */
  atomic_bool stop_now;       /* hark_http_stop: without the drain's grace */
  atomic_bool draining;       /* hark_http_drain was called */
  _Atomic uint32_t n_sockets; /* open WebSockets, all loops */
  unsigned n_loops;
  hark_http_loop **loops;  /* each its own allocation: no false sharing */
  int raw_port;            /* bound, or -1 */
  SSL_CTX *tls_client_ctx; /* --http-use-ssl: what lws's vhosts take as theirs */
};

/* lws's TLS callbacks (--http-use-ssl) come to the HTTP protocol with
 * OpenSSL's objects as `user`: nothing for hark to do (and no connection
 * state to touch). */
static inline bool hark_http_tls_event(enum lws_callback_reasons reason) {
  switch (reason) {
  case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_CLIENT_VERIFY_CERTS:
  case LWS_CALLBACK_OPENSSL_LOAD_EXTRA_SERVER_VERIFY_CERTS:
  case LWS_CALLBACK_OPENSSL_PERFORM_CLIENT_CERT_VERIFICATION:
  case LWS_CALLBACK_OPENSSL_PERFORM_SERVER_CERT_VERIFICATION:
  case LWS_CALLBACK_OPENSSL_CONTEXT_REQUIRES_PRIVATE_KEY:
  case LWS_CALLBACK_SSL_INFO: return true;
  default: return false;
  }
}

/* peer.c: the address of the peer of wsi's socket into buf (HARK_PEER_MAX
 * bytes; "" when it has none). */
void hark_http_wsi_peer(struct lws *wsi, char *buf);

/* reads.c: how many reads that took bytes descriptor `fd` has had; false
 * when that cannot be told (then ask the kernel). Plain sockets only. */
bool hark_http_reads(int fd, uint64_t *out);
/* Whether reads.c counts at all (libraries reach its recv()). */
bool hark_http_reads_live(void);

/* The loop a connection belongs to. */
static inline hark_http_loop *hark_http_loop_of(struct lws *wsi) {
  return lws_context_user(lws_get_context(wsi));
}

/* ---- exchange.c ------------------------------------------------------------- */

/* call.c: the loop's completion list. The loop thread marks itself
 * current, runs every posted call's done handler, and, after an lws
 * callback, drains what it posted to itself meanwhile. */
void hark_http_set_current_loop(hark_http_loop *loop);
void hark_http_drain_calls(hark_http_loop *loop);
void hark_http_drain_soon(void);

/* hark_http_allowed for a request head lws has no connection state for
 * yet (a WebSocket upgrade). */
bool hark_http_wsi_allowed(struct lws *wsi, hark_api api, char *msg, size_t cap);
/* LWS_CALLBACK_HTTP: a request head on `path`; -1 closes the connection. */
int hark_http_on_request(hark_http_conn *c, const char *path);
/* LWS_CALLBACK_HTTP_BODY / _COMPLETION. */
void hark_http_on_body(hark_http_conn *c, const char *in, size_t len);
int hark_http_on_body_done(hark_http_conn *c);
/* LWS_CALLBACK_HTTP_WRITEABLE: the next piece of the reply; -1 closes. */
int hark_http_on_writable(hark_http_conn *c);
/* LWS_CALLBACK_HTTP_DROP_PROTOCOL: lws is done with the exchange's state
 * (it completed a kept-alive exchange, or starts the next request). */
void hark_http_on_unbound(hark_http_conn *c);
/* LWS_CALLBACK_CLOSED_HTTP. */
void hark_http_on_closed(hark_http_conn *c);
/* LWS_CALLBACK_SERVER_NEW_CLIENT_INSTANTIATED: a new connection, whose
 * first request's head is due (its state may not exist yet); -1 closes
 * it. */
int hark_http_on_accept(struct lws *wsi);
/* LWS_CALLBACK_WSI_DESTROY, of any of the loop's wsis: frees what
 * hark_http_on_accept made for it. */
void hark_http_on_destroy(struct lws *wsi);
/* Loop thread, on libev, outside lws's callbacks: writes the replies made
 * since the loop last waited (see exchange.c, "replies"). */
void hark_http_flush(hark_http_loop *loop);
/* LWS_CALLBACK_TIMER: the bound the connection's timer counted passed
 * (`c` may be NULL: the head's, armed at accept); -1 closes it. */
int hark_http_on_timer(struct lws *wsi, hark_http_conn *c);
/* Stops the connection's timer (it became a WebSocket). */
void hark_http_timer_stop(hark_http_conn *c);

/* ---- raw.c --------------------------------------------------------------------- */

/* The raw protocol's lws callback. */
int hark_raw_on_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len);
/* Shutting down: closes every raw connection of the loop (once); true
 * while any is open. */
bool hark_raw_close_all(hark_http_loop *loop);
/* The loop's once-a-second check: drops the raw connections whose client
 * read nothing for the send timeout. */
void hark_raw_sweep(hark_http_loop *loop);

/* ---- ws.c --------------------------------------------------------------------- */

/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: refuses an upgrade it cannot serve
 * with an HTTP error (returns 1), allows it (0), or hangs up (-1). */
int hark_ws_on_confirm(struct lws *wsi, const char *upgrade);
/* The WebSocket callbacks; -1 closes the connection. */
int hark_ws_on_established(hark_http_conn *c, struct lws *wsi);
/* The events of a WebSocket's reader (a raw-file wsi on its socket). */
int hark_ws_on_rx_event(struct lws *wsi, enum lws_callback_reasons reason);
int hark_ws_on_writable(hark_http_conn *c);
void hark_ws_on_closed(hark_http_conn *c);
/* The loop's idle sweep: start, stop. */
void hark_ws_sweep_start(hark_http_loop *loop);
void hark_ws_sweep_stop(hark_http_loop *loop);
/* Shutting down: tells every WebSocket of the loop to go (1001, once);
 * true while any is open. */
bool hark_ws_close_all(hark_http_loop *loop);
/*
 * A WebSocket with no connection under it, on `loop` (which need not run:
 * its calls wait for hark_http_drain_calls), so a service's ws handler can
 * be driven without a socket (tests/fuzz/fuzz_vosk_ws.c). What the service
 * sends waits until taken, oldest first (the caller frees it; NULL when
 * none); closing only marks it: the close code (0 while open) and reason
 * say how. Free it after the service's closed handler ran.
 */
hark_ws *hark_ws_detached_new(hark_http_loop *loop);
char *hark_ws_detached_take(hark_ws *ws, size_t *len);
int hark_ws_detached_close_code(const hark_ws *ws, const char **reason);
void hark_ws_detached_free(hark_ws *ws);

#endif
