/*
 * http_impl.h — what the transport's files share: http.c (event loops,
 * listen sockets, lifecycle), call.c (the completion list), raw.c (every
 * connection's bytes, and TLS), exchange.c (HTTP/1.1: request heads and
 * bodies, replies), ws.c (WebSocket connections). Private to
 * src/frontend/http.
 */
#ifndef HARK_FRONTEND_HTTP_IMPL_H
#define HARK_FRONTEND_HTTP_IMPL_H

#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "frontend/http/http.h"

/* The transport's clock for its time limits (header, body, idle, send,
 * linger), which a once-a-second sweep checks: the coarse monotonic clock,
 * a few milliseconds of resolution and cheaper to read than the precise
 * one, which a request would read several times. */
static inline uint64_t hark_http_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Reply buffers keep this much room in front of the body so the headers
 * can be put right before it and go out in the same write. */
#define HARK_HTTP_HEADROOM (HARK_RAW_HEADROOM + 512)

/* Where an HTTP/1.1 connection is (exchange.c). */
typedef enum conn_state {
  CONN_HEAD = 0, /* waiting for a request's head, or reading it */
  CONN_BODY,     /* receiving a request body */
  CONN_BUSY,     /* the service has the request (a call, or its handler) */
  CONN_REPLYING, /* writing the reply */
  CONN_LINGER,   /* replied early: dropping the unread body; then the next head, or close */
  CONN_WS,       /* a WebSocket now (ws.c has it) */
  CONN_CLOSING,  /* closes once its last reply is out */
} conn_state;

/* An HTTP/1.1 connection on the HTTP or metrics port (exchange.c), from
 * its accept to its close: a raw connection's state, whose bytes it
 * parses itself. The fields below `exchange` are one request's and are
 * reset for the next. Loop thread only. */
struct hark_http_conn {
  hark_raw *raw;
  hark_http_loop *loop;
  hark_http_conn *prev, *next; /* loop->conns */
  bool metrics;                /* on the metrics port */
  conn_state state;
  bool pumping;      /* exchange.c's pump is on the stack */
  bool read_paused;  /* input waits while the service has a request */
  bool lingering_wr; /* our side is shut (LINGER) */
  bool discard_keep; /* LINGER: the connection goes on once the body is dropped */
  bool in_exchange;  /* a head was taken and its reply is not all written */
  hark_buf in;       /* bytes read, not consumed yet, from in_off */
  size_t in_off;
  size_t scan;       /* how far the head's end was looked for */
  uint64_t since_ns; /* when what the connection waits for began (a head's first byte...) */
  uint64_t moved_ns; /* a body's last progress */
  /* exchange */
  char *head_mem; /* a copy of the request's head, which `head` points into */
  size_t head_cap;
  size_t in_held; /* what the in-flight budget counts of in and head_mem (exchange.c) */
  struct hark_h1_head *head;
  hark_http_method method;
  char path[2048]; /* decoded, without the query */
  void *state_ptr; /* the service's, for this exchange */
  void (*state_free)(void *);
  char *body_mem; /* allocation (exchange.c's body_grow); body is inside it, aligned */
  char *body;
  size_t body_len, body_cap, body_align;
  size_t body_declared; /* Content-Length: body_cap grows towards it as bytes arrive */
  size_t body_skip;     /* LINGER: body bytes still to drop */
  bool close_after;     /* close instead of waiting for the next request */
  bool keep_alive_10;   /* an HTTP/1.0 client asked to keep the connection */
  bool head_only;       /* a HEAD request: the reply's body is not sent */
  bool continue_due;    /* Expect: 100-continue, not answered yet */
  hark_buf out;         /* the reply: headers + body from out_off */
  size_t out_off;
  size_t out_charge;    /* what `out` took from the in-flight budget */
  hark_http_call *call; /* the exchange's call, or NULL */
  hark_ws *ws;          /* a WebSocket connection's state (ws.c) */
};

/* What a listen socket's connections are. */
typedef enum hark_listener_kind {
  LISTEN_HTTP = 0,
  LISTEN_METRICS,
  LISTEN_RAW,
  LISTEN_KINDS
} hark_listener_kind;

/* A listen socket of a loop: the handler its connections get, and their
 * TLS (NULL: plain). */
typedef struct hark_listener {
  hark_http_loop *loop;
  hark_listener_kind kind;
  int fd;
  struct lws *wsi;
  const hark_raw_handler *handler;
  void *userp;
  struct hark_tls *tls;
} hark_listener;

/* A raw connection's state: lws allocates it zeroed (raw.c). */
struct hark_raw {
  struct lws *wsi;
  hark_http_loop *loop;
  const hark_listener *listener;
  hark_raw *prev, *next; /* loop->raws */
  void *conn;            /* the handler's (with TLS: once the handshake is done) */
  bool paused, killed;
  uint64_t choked_ns;        /* since when the socket takes nothing; 0: it does */
  struct hark_tls_conn *tls; /* the listener's TLS session, or NULL */
  hark_buf tls_out;          /* ciphertext on its way to lws_write, after LWS_PRE */
  char peer[HARK_PEER_MAX];  /* the client's address (hark_raw_peer) */
};

/* One event loop: an lws context (info.user points here) with one vhost
 * that carries raw connections: each loop has listen sockets of its own
 * on the HTTP, metrics (loop 0) and raw ports, and hands each connection
 * the listener's handler (exchange.c's for HTTP, the raw service's). */
struct hark_http_loop {
  hark_http *http;
  unsigned index;
  struct lws_context *ctx;
  struct ev_loop *ev;    /* the libev loop ctx runs on (http.c), or NULL: lws's poll() */
  struct ev_timer *kick; /* on ev: has lws look at its timers while busy (http.c) */
  unsigned kicks;        /* loop thread: kicks since events_seen was last looked at */
  bool events_seen;      /* loop thread: an lws event since then */
  int wake_fd;           /* eventfd lws polls: hark_http_loop_wake (-1: lws_cancel_service) */
  struct lws_vhost *vh;
  hark_listener listeners[LISTEN_KINDS]; /* fd -1: none of that kind */
  const hark_listener *adopting;         /* the listener of the connection being adopted */
  /* Accepting under fd exhaustion (http.c), loop thread only: the listen
   * sockets, paused together for a moment after EMFILE/ENFILE. */
  lws_sorted_usec_list_t accept_resume;
  bool accept_paused;
  uint64_t accept_logged_ns;   /* the last warning; at most one a second */
  uint32_t accept_unlogged;    /* failures since that warning */
  pthread_t thread;            /* loops 1..n-1; loop 0 runs on hark_http_run's */
  lws_sorted_usec_list_t tick; /* wakes the loop while shutting down */
  _Atomic uint32_t replying;   /* exchanges in progress (loop 0 reads it) */
  pthread_mutex_t lock;        /* guards the fields below */
  pthread_cond_t idle;
  hark_http_call *done_head, *done_tail; /* completion list */
  uint32_t holds;                        /* work that will post to this loop, or that needs it */
  bool ctx_alive;                        /* lws_cancel_service may be called */
  bool drain_soon;                       /* loop thread only: it posted a call itself without
                           waking itself; drain after this callback */
  /* WebSockets (ws.c), loop thread only. */
  hark_ws *sockets;             /* open ones */
  lws_sorted_usec_list_t sweep; /* time limits, once a second (http.c) */
  bool ws_closing_all;          /* shutting down: told to go */
  /* HTTP connections (exchange.c), loop thread only. */
  hark_http_conn *conns;
  bool conns_closing_all;
  /* Raw connections (raw.c), loop thread only. */
  hark_raw *raws;
  bool raw_closing_all;
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
  hark_http_loop **loops;                /* each its own allocation: no false sharing */
  int http_port, metrics_port, raw_port; /* bound (the kernel's pick for 0), or -1 */
};

/* peer.c: the address of the peer of socket fd into buf (HARK_PEER_MAX
 * bytes; "" when it has none). */
void hark_http_fd_peer(int fd, char *buf);

/* The loop a connection belongs to. */
static inline hark_http_loop *hark_http_loop_of(struct lws *wsi) {
  return lws_context_user(lws_get_context(wsi));
}

/* call.c: the loop's completion list. The loop thread marks itself
 * current, runs every posted call's done handler, and, after an lws
 * callback, drains what it posted to itself meanwhile. */
void hark_http_set_current_loop(hark_http_loop *loop);
void hark_http_drain_calls(hark_http_loop *loop);
void hark_http_drain_soon(void);

/* ---- exchange.c ------------------------------------------------------------- */

/* The raw handlers of the HTTP and the metrics port's connections. */
extern const hark_raw_handler hark_http_conn_handler;
extern const hark_raw_handler hark_http_metrics_conn_handler;
/* The loop's once-a-second check of its HTTP connections' time limits. */
void hark_http_conns_sweep(hark_http_loop *loop);
/* Shutting down: closes the loop's idle HTTP connections, and the others
 * once their exchange is done (once); true while any is open. */
bool hark_http_conns_close_all(hark_http_loop *loop);

/* ---- raw.c --------------------------------------------------------------------- */

/* The raw protocol's lws callback. */
int hark_raw_on_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len);
/* Shutting down: closes every raw connection of the loop's raw port (once);
 * true while any is open. */
bool hark_raw_close_all(hark_http_loop *loop);
/* The loop's once-a-second check: drops the raw connections whose client
 * read nothing for the send timeout. */
void hark_raw_sweep(hark_http_loop *loop);
/* Whether lws still holds bytes of the connection it could not send. */
bool hark_raw_buffered(hark_raw *raw);
/* The connection's socket (-1: none). */
int hark_raw_fd(hark_raw *raw);

/* ---- ws.c --------------------------------------------------------------------- */

/* A WebSocket on `raw`, whose upgrade exchange.c answered with its 101:
 * the service's stream opens with the ticket its accept gave (a refusal
 * closes it, 1011). */
hark_ws *hark_ws_open(hark_http_loop *loop, hark_raw *raw, void *ticket);
/* Bytes of an open WebSocket's connection (the frame parser unmasks
 * them in place: the caller's until the call returns); the connection is
 * writable; it is gone. */
void hark_ws_on_rx(hark_ws *ws, uint8_t *data, size_t len);
void hark_ws_on_writable(hark_ws *ws);
void hark_ws_on_closed(hark_ws *ws);
/* The loop's once-a-second check of its WebSockets' time limits. */
void hark_ws_sweep(hark_http_loop *loop);
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
