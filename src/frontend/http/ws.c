/*
 * ws.c — WebSocket connections on the HTTP port: the upgrade (the
 * service's ws handler accepts or refuses it), messages joined from their
 * fragments up to ws_max_message, text messages queued out and written
 * when the socket is writable, flow control, closing with a code and a
 * reason once the queued messages are out, the idle timeout, and closing
 * everything at shutdown. What a stream means is the service's (e.g.
 * speech/vosk.c); this file only moves its messages. Loop thread only;
 * the count of open WebSockets (for the drain) is shared, an atomic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "frontend/http/http_impl.h"
#include "util/alloc.h"
#include "util/log.h"

#define DEFAULT_MAX_MESSAGE (1u << 20)
#define DEFAULT_IDLE_SECS 60
#define OUT_HIGH_WATER (256u * 1024u) /* unsent messages: pause receiving */
#define SWEEP_US (1000 * LWS_US_PER_MS)
#define KEEP_BUFFER (64u * 1024u)

/* A message waiting for the socket; the text starts LWS_PRE bytes in. */
typedef struct ws_out {
  struct ws_out *next;
  size_t len;
  unsigned char buf[];
} ws_out;

struct hark_ws {
  hark_http_loop *loop;
  struct lws *wsi;
  hark_ws *prev, *next; /* loop->sockets */
  void *stream;         /* the service's */
  bool closing, paused_by_service, rx_paused;
  bool killed; /* dropped by the send timeout: closes soon */
  int close_code;
  char close_reason[HARK_WS_REASON_MAX + 1];
  uint64_t last_rx_ns;
  uint64_t last_tx_ns; /* output last made progress (or began to wait) */
  /* the message being received */
  char *msg;
  size_t msg_len, msg_cap;
  bool in_msg, msg_binary;
  /* messages waiting for the socket */
  ws_out *out_head, *out_tail;
  size_t out_bytes;
};

void hark_ws_reason_fit(char *s, size_t max) {
  size_t n = strlen(s);
  if (n <= max) return;
  n = max;
  /* Back off continuation bytes so a multi-byte character is not split. */
  while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
  s[n] = '\0';
}

static const hark_ws_handler *handler_of(const hark_http_loop *loop) {
  return loop->http->handler->ws;
}

static size_t max_message(const hark_http *http) {
  return http->opts.ws_max_message ? http->opts.ws_max_message : DEFAULT_MAX_MESSAGE;
}

/* ---- upgrades --------------------------------------------------------------- */

static const char *status_text(int status) {
  switch (status) {
  case 400: return "Bad Request";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 409: return "Conflict";
  case 429: return "Too Many Requests";
  case 499: return "Client Closed Request";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  default: return "Internal Server Error";
  }
}

/* Writes `status` with {"error": msg} and returns 1, which tells lws the
 * upgrade was answered. The status line is written here: lws would say
 * HTTP/1.0 before the request's version is recorded, which WebSocket
 * clients reject. */
static int refuse(struct lws *wsi, int status, const char *msg) {
  hark_buf b = {0};
  char head[256];
  if (!hark_buf_reserve(&b, LWS_PRE + sizeof head)) hark_oom("refusal", LWS_PRE + sizeof head);
  b.len = LWS_PRE + sizeof head;
  size_t body = b.len;
  hark_http_put_error(&b, msg);
  int h =
      snprintf(head, sizeof head,
               "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
               status, status_text(status), b.len - body);
  char *start = b.data + body - (size_t)h;
  memcpy(start, head, (size_t)h);
  size_t total = b.len - (body - (size_t)h);
  int n = lws_write(wsi, (unsigned char *)start, total, LWS_WRITE_HTTP_FINAL);
  hark_buf_free(&b);
  return n < 0 ? -1 : 1;
}

static int refuse_error(struct lws *wsi, hark_error *err) {
  int rc = refuse(wsi, hark_code_http_status(hark_error_code(err)), hark_error_message(err));
  hark_error_free(err);
  return rc;
}

/* The upgrade's path; false when there is none. */
static bool upgrade_path(struct lws *wsi, char *path, size_t cap) {
  return lws_hdr_copy(wsi, path, (int)cap, WSI_TOKEN_GET_URI) > 0;
}

/* lws asks before it has the connection's state (c is NULL here): the
 * service's accept decides now, so a refusal is an HTTP reply; what it
 * took is given back at once and taken again when the WebSocket opens. */
int hark_ws_on_confirm(struct lws *wsi, const char *upgrade) {
  hark_http_loop *loop = hark_http_loop_of(wsi);
  const hark_ws_handler *h = handler_of(loop);
  if (strcasecmp(upgrade, "websocket") != 0) return 0;
  if (!h || lws_get_vhost(wsi) == loop->vh_metrics) return refuse(wsi, 404, "Not Found");
  if (atomic_load(&loop->http->stop))
    return refuse(wsi, 503, "Server is shutting down: not accepting new streams");
  char path[2048], msg[256];
  if (!upgrade_path(wsi, path, sizeof path)) return refuse(wsi, 400, "Bad Request: no path");
  if (!hark_http_wsi_allowed(wsi, HARK_API_INFERENCE, msg, sizeof msg))
    return refuse(wsi, 403, msg);
  void *ticket = NULL;
  hark_error *err = h->accept(loop->http->handler->ws_userp, path, &ticket);
  if (err) return refuse_error(wsi, err);
  if (h->release) h->release(loop->http->handler->ws_userp, ticket);
  return 0;
}

/* A close code for a service's refusal after the upgrade. */
static int close_code(const hark_error *err) {
  switch (hark_error_code(err)) {
  case HARK_ERR_UNAVAILABLE:
  case HARK_ERR_RESOURCE_EXHAUSTED: return HARK_WS_CLOSE_TRY_LATER;
  case HARK_ERR_INTERNAL: return HARK_WS_CLOSE_INTERNAL;
  default: return HARK_WS_CLOSE_POLICY;
  }
}

/* ---- lifetime ------------------------------------------------------------------ */

static void outs_free(hark_ws *ws) {
  for (ws_out *o = ws->out_head, *next; o; o = next) {
    next = o->next;
    free(o);
  }
  ws->out_head = ws->out_tail = NULL;
  ws->out_bytes = 0;
}

int hark_ws_on_established(hark_http_conn *c, struct lws *wsi) {
  hark_http_loop *loop = hark_http_loop_of(wsi);
  const hark_ws_handler *h = handler_of(loop);
  if (!c || !h) return -1;
  hark_http_timer_stop(c); /* the upgrade's head is in; ws.c times the rest */
  hark_ws *ws = hark_xcalloc(1, sizeof *ws);
  ws->loop = loop;
  ws->wsi = wsi;
  ws->last_rx_ns = ws->last_tx_ns = hark_now_ns();
  ws->next = loop->sockets;
  if (ws->next) ws->next->prev = ws;
  loop->sockets = ws;
  atomic_fetch_add(&loop->http->n_sockets, 1);
  c->ws = ws;
  /* Accepted a moment ago; again now, for real (the streams open on every
   * loop meanwhile count). */
  char path[2048];
  void *ticket = NULL;
  hark_error *err = upgrade_path(wsi, path, sizeof path)
                        ? h->accept(loop->http->handler->ws_userp, path, &ticket)
                        : hark_error_new(HARK_ERR_INVALID_ARG, "no path");
  if (err) {
    hark_ws_close(ws, close_code(err), hark_error_message(err));
    hark_error_free(err);
    return 0;
  }
  ws->stream = h->open(loop->http->handler->ws_userp, ws, ticket);
  if (!ws->stream) hark_ws_close(ws, HARK_WS_CLOSE_INTERNAL, "cannot open the stream");
  return 0;
}

void hark_ws_on_closed(hark_http_conn *c) {
  hark_ws *ws = c->ws;
  if (!ws) return;
  c->ws = NULL;
  hark_http_loop *loop = ws->loop;
  if (ws->prev)
    ws->prev->next = ws->next;
  else if (loop->sockets == ws)
    loop->sockets = ws->next;
  if (ws->next) ws->next->prev = ws->prev;
  atomic_fetch_sub(&loop->http->n_sockets, 1);
  if (ws->stream) handler_of(loop)->closed(ws->stream);
  outs_free(ws);
  free(ws->msg);
  free(ws);
}

/* ---- output and flow -------------------------------------------------------------- */

/* lws's, for a WebSocket with a socket under it (a detached one has none). */
static void rx_flow(hark_ws *ws, int on) {
  if (ws->wsi) lws_rx_flow_control(ws->wsi, on);
}

static void want_write(hark_ws *ws) {
  if (ws->wsi) lws_callback_on_writable(ws->wsi);
}

static void update_flow(hark_ws *ws) {
  if (ws->closing) return;
  bool pause = ws->paused_by_service || ws->out_bytes >= OUT_HIGH_WATER;
  bool resume = !ws->paused_by_service && ws->out_bytes < OUT_HIGH_WATER / 2;
  if (!ws->rx_paused && pause) {
    rx_flow(ws, 0);
    ws->rx_paused = true;
  } else if (ws->rx_paused && resume) {
    rx_flow(ws, 1);
    ws->rx_paused = false;
  }
}

void hark_ws_pause(hark_ws *ws, bool pause) {
  ws->paused_by_service = pause;
  update_flow(ws);
}

bool hark_ws_closing(const hark_ws *ws) { return ws->closing; }

bool hark_ws_send_text(hark_ws *ws, const char *text, size_t len) {
  if (ws->closing) return true; /* nothing more goes out but the close */
  ws_out *o = malloc(sizeof *o + LWS_PRE + len);
  if (!o) {
    hark_ws_close(ws, HARK_WS_CLOSE_INTERNAL, "out of memory");
    return false;
  }
  o->next = NULL;
  o->len = len;
  memcpy(o->buf + LWS_PRE, text, len);
  if (!ws->out_head) ws->last_tx_ns = hark_now_ns(); /* the wait for the client begins */
  if (ws->out_tail)
    ws->out_tail->next = o;
  else
    ws->out_head = o;
  ws->out_tail = o;
  ws->out_bytes += len;
  update_flow(ws);
  want_write(ws);
  return true;
}

void hark_ws_close(hark_ws *ws, int code, const char *reason) {
  if (ws->closing) return;
  ws->closing = true;
  ws->last_tx_ns = hark_now_ns(); /* the close frame waits for the socket too */
  ws->close_code = code;
  snprintf(ws->close_reason, sizeof ws->close_reason, "%s", reason ? reason : "");
  hark_ws_reason_fit(ws->close_reason, HARK_WS_REASON_MAX);
  if (ws->rx_paused) { /* let the close handshake be read */
    rx_flow(ws, 1);
    ws->rx_paused = false;
  }
  want_write(ws);
}

int hark_ws_on_writable(hark_http_conn *c) {
  hark_ws *ws = c ? c->ws : NULL;
  if (!ws) return 0;
  struct lws *wsi = ws->wsi;
  ws->last_tx_ns = hark_now_ns();  /* the socket takes what we send */
  if (lws_partial_buffered(wsi)) { /* lws sends its leftovers first */
    lws_callback_on_writable(wsi);
    return 0;
  }
  ws_out *o = ws->out_head;
  if (o) {
    if (lws_write(wsi, o->buf + LWS_PRE, o->len, LWS_WRITE_TEXT) < (int)o->len) return -1;
    if (!(ws->out_head = o->next)) ws->out_tail = NULL;
    ws->out_bytes -= o->len;
    free(o);
    if (ws->out_head || ws->closing) lws_callback_on_writable(wsi);
    update_flow(ws);
    return 0;
  }
  if (!ws->closing) return 0;
  lws_close_reason(wsi, (enum lws_close_status)ws->close_code, (unsigned char *)ws->close_reason,
                   strlen(ws->close_reason));
  return -1;
}

/* ---- input ---------------------------------------------------------------------- */

/* Appends a piece of the current message, within the size limit. */
static bool msg_append(hark_ws *ws, const void *in, size_t len) {
  const hark_http *http = ws->loop->http;
  size_t limit = max_message(http);
  if (len > limit - ws->msg_len) {
    char reason[HARK_WS_REASON_MAX + 1];
    snprintf(reason, sizeof reason,
             "message too big: the limit is %zu bytes (--ws-max-message-bytes)", limit);
    hark_ws_close(ws, HARK_WS_CLOSE_TOO_BIG, reason);
    return false;
  }
  size_t need = ws->msg_len + len;
  if (need > ws->msg_cap) {
    size_t cap = ws->msg_cap ? ws->msg_cap : 8192;
    while (cap < need) cap *= 2;
    if (cap > limit) cap = limit;
    char *m = realloc(ws->msg, cap); /* client-sized */
    if (!m) {
      hark_ws_close(ws, HARK_WS_CLOSE_INTERNAL, "out of memory");
      return false;
    }
    ws->msg = m;
    ws->msg_cap = cap;
  }
  if (len) memcpy(ws->msg + ws->msg_len, in, len);
  ws->msg_len += len;
  return true;
}

int hark_ws_on_receive(hark_http_conn *c, const void *in, size_t len) {
  hark_ws *ws = c ? c->ws : NULL;
  if (!ws) return -1;
  struct lws *wsi = ws->wsi;
  ws->last_rx_ns = hark_now_ns();
  if (ws->closing) return 0;
  if (!ws->in_msg) {
    ws->in_msg = true;
    ws->msg_binary = lws_frame_is_binary(wsi) != 0;
    ws->msg_len = 0;
  }
  if (!msg_append(ws, in, len)) return 0;
  if (!lws_is_final_fragment(wsi) || lws_remaining_packet_payload(wsi) != 0) return 0;
  ws->in_msg = false;
  size_t n = ws->msg_len;
  ws->msg_len = 0;
  handler_of(ws->loop)->message(ws->stream, ws->msg ? ws->msg : "", n, ws->msg_binary);
  if (ws->msg_cap > KEEP_BUFFER) { /* keep a small buffer for the next one only */
    free(ws->msg);
    ws->msg = NULL;
    ws->msg_cap = 0;
  }
  return 0;
}

/* ---- idle sweep and shutdown ---------------------------------------------------------- */

/*
 * Once a second: a stream whose output has waited on its client for the
 * send timeout (it reads nothing; a paused stream included, and a close
 * frame that cannot go out) is dropped; one that sent nothing for the idle
 * timeout, while nothing of ours waits and the service is not working for
 * it, is closed 1001 "idle timeout". Whether reading is paused does not
 * matter: a paused stream is either waiting on the service (busy) or on
 * its client.
 */
static void on_sweep(lws_sorted_usec_list_t *sul) {
  hark_http_loop *loop = lws_container_of(sul, hark_http_loop, ws_sweep);
  const hark_http *http = loop->http;
  const hark_ws_handler *h = handler_of(loop);
  int secs =
      http->opts.ws_idle_timeout_secs > 0 ? http->opts.ws_idle_timeout_secs : DEFAULT_IDLE_SECS;
  uint64_t now = hark_now_ns(), limit = (uint64_t)secs * 1000000000ull;
  uint64_t send_limit = (uint64_t)http->opts.send_timeout_secs * 1000000000ull;
  for (hark_ws *ws = loop->sockets; ws; ws = ws->next) {
    bool waiting = ws->out_head || ws->closing || lws_partial_buffered(ws->wsi);
    if (waiting) {
      if (now - ws->last_tx_ns >= send_limit && !ws->killed) {
        ws->killed = true;
        hark_limit_hit(HARK_LIMIT_SEND_TIMEOUT,
                       "ws: a client read nothing for %d s with %zu bytes waiting for it "
                       "(--send-timeout-secs): closing",
                       http->opts.send_timeout_secs, ws->out_bytes);
        lws_set_timeout(ws->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
      }
      continue;
    }
    /* Waiting on the service is not the client's idling. */
    if (ws->stream && h->busy && h->busy(ws->stream)) continue;
    if (now - ws->last_rx_ns >= limit) {
      hark_limit_hit(HARK_LIMIT_WS_IDLE_TIMEOUT,
                     "ws: a stream sent nothing for %d s (--ws-idle-timeout-secs): closing 1001",
                     secs);
      hark_ws_close(ws, HARK_WS_CLOSE_GOING_AWAY, "idle timeout");
    }
  }
  hark_raw_sweep(loop);
  lws_sul_schedule(loop->ctx, 0, &loop->ws_sweep, on_sweep, SWEEP_US);
}

void hark_ws_sweep_start(hark_http_loop *loop) {
  lws_sul_schedule(loop->ctx, 0, &loop->ws_sweep, on_sweep, SWEEP_US);
}

void hark_ws_sweep_stop(hark_http_loop *loop) { lws_sul_cancel(&loop->ws_sweep); }

bool hark_ws_close_all(hark_http_loop *loop) {
  if (!loop->ws_closing_all) {
    loop->ws_closing_all = true;
    for (hark_ws *ws = loop->sockets; ws; ws = ws->next)
      hark_ws_close(ws, HARK_WS_CLOSE_GOING_AWAY, "server is shutting down");
  }
  return loop->sockets != NULL;
}

void hark_http_call_start_ws(hark_ws *ws, hark_http_call *call, hark_http_done_fn done) {
  hark_http_call_init(call, ws->loop, done);
  call->held = true;
  hark_http_loop_hold(ws->loop);
}

/* ---- without a socket ------------------------------------------------------------- */

hark_ws *hark_ws_detached_new(hark_http_loop *loop) {
  hark_ws *ws = hark_xcalloc(1, sizeof *ws);
  ws->loop = loop;
  ws->last_rx_ns = ws->last_tx_ns = hark_now_ns();
  return ws;
}

char *hark_ws_detached_take(hark_ws *ws, size_t *len) {
  ws_out *o = ws->out_head;
  if (!o) return NULL;
  if (!(ws->out_head = o->next)) ws->out_tail = NULL;
  ws->out_bytes -= o->len;
  char *text = hark_xmalloc(o->len + 1);
  memcpy(text, o->buf + LWS_PRE, o->len);
  text[o->len] = '\0';
  *len = o->len;
  free(o);
  update_flow(ws);
  return text;
}

int hark_ws_detached_close_code(const hark_ws *ws, const char **reason) {
  *reason = ws->close_reason;
  return ws->closing ? ws->close_code : 0;
}

void hark_ws_detached_free(hark_ws *ws) {
  outs_free(ws);
  free(ws->msg);
  free(ws);
}
