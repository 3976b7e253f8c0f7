/*
 * http_impl.h — what the parts of the HTTP front end share: http.c (the
 * libwebsockets event loop, connections, request bodies, replies and the
 * completion list), http_routes.c (the KServe v2 routes and their
 * handlers) and ws.c (WebSocket speech streams). Private to src/frontend.
 *
 * The front end runs several event loops (http_loop), each an lws context
 * of its own on its own thread, each with a listen socket of its own on
 * the HTTP port (SO_REUSEPORT: the kernel spreads new connections over
 * them). A
 * connection, its calls and its WebSocket stream belong to the loop that
 * accepted it; everything here runs on that loop's thread unless it says
 * otherwise. What is global (stop, drain, the stream count) lives in
 * hark_http and is atomic.
 */
#ifndef HARK_HTTP_IMPL_H
#define HARK_HTTP_IMPL_H

#include <libwebsockets.h>
#include <pthread.h>
#include <stdatomic.h>

#include "frontend/http.h"
#include "frontend/kserve.h"

/* Reply buffers keep this much room in front of the body so the headers
 * can be put right before it and go out in the same write. */
#define HARK_HTTP_HEADROOM (LWS_PRE + 512)

extern const char *const HARK_HTTP_JSON; /* "application/json" */

typedef enum route_kind {
  R_NONE = 0,
  R_SERVER_META,
  R_LIVE,
  R_READY,
  R_MODEL_META,
  R_MODEL_READY,
  R_MODEL_CONFIG,
  R_MODEL_STATS,
  R_ALL_STATS,
  R_INFER,
  R_REPO_INDEX,
  R_REPO_LOAD,
  R_REPO_UNLOAD,
  R_METRICS,
  R_STREAM, /* /v2/models/{m}[/versions/{v}]/stream: a WebSocket (ws.c) */
} route_kind;

typedef struct route {
  route_kind kind;
  char *model;     /* owned; NULL when the route names none */
  int64_t version; /* -1 when the URL gives none */
} route;

typedef enum conn_state {
  CONN_IDLE = 0, /* between requests */
  CONN_BODY,     /* receiving a request body */
  CONN_BUSY,     /* the engine has the request */
  CONN_REPLYING, /* writing the reply */
  CONN_LINGER,   /* replied early: discarding the unread body, then close */
} conn_state;

typedef struct http_call http_call;
typedef struct ws_stream ws_stream;
typedef struct http_loop http_loop;

/* Per-connection state: lws allocates it zeroed; only the loop touches it. */
typedef struct http_conn {
  conn_state state;
  route rt;
  char *body_mem; /* allocation; body is inside it, aligned */
  char *body;
  size_t body_len, body_cap;
  size_t header_len;   /* Inference-Header-Content-Length, or none */
  bool close_after;    /* close instead of waiting for the next request */
  bool body_expected;  /* the request declared a body ... */
  bool body_done;      /* ... and lws has delivered all of it */
  bool keep_alive_10;  /* an HTTP/1.0 client asked to keep the connection */
  hark_kserve_buf out; /* the reply: headers + body from out_off */
  size_t out_off;
  http_call *call; /* in the engine, or NULL */
  ws_stream *ws;   /* a WebSocket connection's stream (ws.c), or NULL */
  bool ws_slot;    /* a --max-streams slot taken when its upgrade was
                      accepted, not yet its stream's (ws.c) */
} http_conn;

/* One engine operation (infer, load, unload) and its reply. */
struct http_call {
  http_loop *loop; /* the loop that owns the connection: it gets the reply */
  struct lws *wsi; /* loop thread only; NULL once the client is gone */
  http_call *next; /* completion list */
  /* Read by the worker while the request lives. */
  hark_kserve_request parsed;
  char *model_name;
  int64_t model_version;
  /* The reply, written by the worker before the call is pushed. */
  int status; /* 0 until a reply is ready */
  const char *ctype;
  hark_kserve_buf out;
  size_t infer_header_len; /* 0: no binary data */
  /* A WebSocket stream's request (ws.c) instead: its stream and outcome,
   * written by the worker before the push, read by the loop after. */
  ws_stream *ws;
  uint32_t ws_kind;
  hark_response *ws_resp;
  hark_error *ws_err;
};

/* One event loop: an lws context (info.user points here) with a vhost on
 * the HTTP port (fed by a listen socket of its own when there are several
 * loops) and, on loop 0 only, the metrics vhost. */
struct http_loop {
  hark_http *http;
  unsigned index;
  struct lws_context *ctx;
  struct lws_vhost *vh_http, *vh_metrics;
  int listen_fd;               /* with several loops: ours (lws closes it) */
  pthread_t thread;            /* loops 1..n-1; loop 0 runs on hark_http_run's */
  lws_sorted_usec_list_t tick; /* wakes the loop while shutting down */
  _Atomic uint32_t replying;   /* connections writing a reply (loop 0 reads it) */
  pthread_mutex_t lock;        /* guards the fields below */
  pthread_cond_t idle;
  http_call *done_head, *done_tail; /* completion list */
  uint32_t outstanding; /* this loop's calls the engine has not finished */
  bool ctx_alive;       /* lws_cancel_service may be called */
  bool drain_soon;      /* loop thread only: it pushed a call of its own
                           without waking itself; drain after this callback */
  /* WebSocket streams (ws.c), loop thread only. */
  ws_stream *streams;              /* open connections' streams */
  lws_sorted_usec_list_t ws_sweep; /* idle check, once a second */
  bool ws_closing_all;             /* shutting down: streams told to go */
};

struct hark_http {
  hark_server *server;
  hark_http_options opts;
  atomic_bool stop;        /* every loop winds down (new requests get 503) */
  atomic_bool stop_now;    /* hark_http_stop: without the drain's grace */
  atomic_bool draining;    /* hark_http_drain was called */
  _Atomic uint32_t n_streams; /* open WebSocket streams, all loops */
  unsigned n_loops;
  http_loop **loops; /* each its own allocation: no false sharing */
};

/* The loop a connection belongs to. */
static inline http_loop *hark_http_loop_of(struct lws *wsi) {
  return lws_context_user(lws_get_context(wsi));
}

/* ---- replies (http.c) ----------------------------------------------------- */

/* Empties `b` and reserves the headroom: the body is appended after it. */
bool hark_http_body_begin(hark_kserve_buf *b);
/* Queues the reply: status, Content-Type (none when NULL), the body in `b`
 * (taken over; `b` is left empty) and, for binary tensor data, the length
 * of its JSON part. Replying before the request body has been read closes
 * the connection afterwards. */
void hark_http_reply(struct lws *wsi, http_conn *c, int status, const char *ctype,
                     hark_kserve_buf *b, size_t infer_header_len);
/* {"error": message}, with the status for its code (or `status` if not
 * 0). Takes `err`. */
void hark_http_reply_error_status(struct lws *wsi, http_conn *c, int status, hark_error *err);
void hark_http_reply_error(struct lws *wsi, http_conn *c, hark_error *err);
/* A fixed body of `len` bytes, or none when text is NULL. */
void hark_http_reply_text(struct lws *wsi, http_conn *c, int status, const char *ctype,
                          const char *text, size_t len);
/* 200 with the JSON document in `b`, or the error (taken) instead. */
void hark_http_reply_doc(struct lws *wsi, http_conn *c, hark_kserve_buf *b, hark_error *err);

/* ---- calls (http.c) ------------------------------------------------------- */

/* A call whose reply goes to `loop` (the connection's). */
http_call *hark_http_call_new(http_loop *loop, struct lws *wsi);
void hark_http_call_free(http_call *call);
/* The engine has the call: exactly one hark_http_call_push will follow. */
void hark_http_call_started(http_loop *loop, http_conn *c, http_call *call);
/* The engine refused it synchronously: no push will come; frees it. */
void hark_http_call_refused(http_loop *loop, http_conn *c, http_call *call);
/* Any thread: the call's reply (status, ctype, out) is ready; hands it to
 * its loop, waking only that one. The caller must not touch the call
 * afterwards. */
void hark_http_call_push(http_call *call);
/* Any thread: makes the call's reply {"error": ...} for `err` (not taken). */
void hark_http_call_set_error(http_call *call, hark_error *err);
/* Counts a request the engine has (+1) or gave back synchronously (-1);
 * hark_http_call_push() counts its completion. */
void hark_http_outstanding_add(http_loop *loop, int delta);

/* ---- routes (http_routes.c) ------------------------------------------------ */

/* Finds the route for `path` (on the metrics port or the HTTP port);
 * rt->kind stays R_NONE when there is none. INVALID_ARG for a malformed
 * model version. */
hark_error *hark_http_route_parse(const char *path, bool metrics, route *rt);
bool hark_http_route_is_post(route_kind kind);
/* Serve c->rt: a GET at once; a POST once its body (c->body) is in. */
void hark_http_handle_get(struct lws *wsi, http_conn *c);
void hark_http_handle_post(struct lws *wsi, http_conn *c);

/* ---- WebSocket streams (ws.c) --------------------------------------------- */

/* LWS_CALLBACK_HTTP_CONFIRM_UPGRADE: refuses an upgrade it cannot serve
 * with an HTTP error (returns 1), allows it (0), or hangs up (-1). */
int hark_ws_confirm_upgrade(struct lws *wsi, http_conn *c, const char *upgrade);
/* Gives back a slot an accepted upgrade took, if no stream has it. */
void hark_ws_release_slot(hark_http *http, http_conn *c);
/* The connection's WebSocket callbacks; -1 closes it. */
int hark_ws_established(struct lws *wsi, http_conn *c);
int hark_ws_receive(struct lws *wsi, http_conn *c, const void *in, size_t len);
int hark_ws_writable(struct lws *wsi, http_conn *c);
void hark_ws_closed(http_loop *loop, http_conn *c);
/* A stream's request completed (drained from the completion list); takes
 * the call. hark_ws_discard is the same once the loop is gone. */
void hark_ws_complete(http_loop *loop, http_call *call);
void hark_ws_discard(http_call *call);
/* Starts the loop's idle sweep; stops it. */
void hark_ws_start(http_loop *loop);
void hark_ws_stop(http_loop *loop);
/* Shutting down: closes every stream of the loop (1001); true while any
 * is open. */
bool hark_ws_close_all(http_loop *loop);
/* After the loop's context is gone: frees what streams are left. */
void hark_ws_free_all(http_loop *loop);

#endif
