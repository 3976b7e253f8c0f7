/*
 * ws.c — WebSocket connections on the HTTP port: the upgrade (the
 * service's ws handler accepts or refuses it), reading the client's
 * frames, messages joined from their fragments up to ws_max_message, text
 * messages queued out and written when the socket is writable, pings
 * answered, flow control, the close handshake with a code and a reason
 * once the queued messages are out, the idle timeout, and closing
 * everything at shutdown. What a stream means is the service's (e.g.
 * speech/vosk.c); this file only moves its messages. Loop thread only;
 * the count of open WebSockets (for the drain) is shared, an atomic.
 *
 * lws does the upgrade and writes our frames, but hark reads the frames
 * itself (ws_frame.c): lws 4.1 accepts unmasked client frames and gives
 * no hook to refuse them, which RFC 6455 requires (1002). Once the
 * WebSocket is open, lws stops reading its socket (rx flow control, for
 * good) and a raw-file wsi on a duplicate of the descriptor, the
 * WebSocket's child, tells us when there is something to read; we read
 * it with recv(), or SSL_read() on lws's TLS session. Frames a client
 * sent before it had the 101 (RFC 6455 4.1 forbids it) stay unread in
 * lws's buffer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "frontend/http/http_impl.h"
#include "frontend/http/ws_frame.h"
#include "util/alloc.h"
#include "util/log.h"

#define DEFAULT_MAX_MESSAGE (1u << 20)
#define DEFAULT_IDLE_SECS 60
#define OUT_HIGH_WATER (256u * 1024u) /* unsent messages: pause receiving */
#define SWEEP_US (1000 * LWS_US_PER_MS)
#define KEEP_BUFFER (64u * 1024u)
#define RX_CHUNK (16u * 1024u) /* one read */
#define RX_READS 4             /* reads per wakeup, so one client cannot hold the loop */
#define CLOSE_ACK_SECS 5       /* our close frame is out: the client's, or we hang up */

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
  bool killed;    /* dropped by the send timeout: closes soon */
  int close_code; /* 0: a close frame with no code (the client's had none) */
  char close_reason[HARK_WS_REASON_MAX + 1];
  uint64_t last_rx_ns;
  uint64_t last_tx_ns; /* output last made progress (or began to wait) */
  /* the message being received */
  char *msg;
  size_t msg_len, msg_cap;
  /* messages waiting for the socket */
  ws_out *out_head, *out_tail;
  size_t out_bytes;
  /* reading the client's frames (see the top of the file) */
  struct lws *rx_wsi; /* the raw-file child on a dup of the socket, or NULL */
  SSL *ssl;           /* lws's TLS session (--http-use-ssl), or NULL */
  hark_ws_parser parser;
  uint8_t *rx_left; /* read, not parsed yet (reading paused mid-read) */
  size_t rx_left_len;
  lws_sorted_usec_list_t rx_kick; /* reads without waiting for the socket */
  bool rx_done;                   /* nothing more is read: a protocol error, or hung up */
  bool peer_closed;               /* the client's close frame came */
  bool close_sent;
  bool pong_due;
  uint8_t pong_len;
  uint8_t pong[HARK_WS_CONTROL_MAX];
  char peer[HARK_PEER_MAX]; /* the client's address */
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
  /* Without a key lws would hang up with no status (RFC 6455 4.2.1: 400). */
  if (lws_hdr_total_length(wsi, WSI_TOKEN_KEY) <= 0)
    return refuse(wsi, 400,
                  "Bad Request: a WebSocket upgrade needs a Sec-WebSocket-Key header "
                  "(RFC 6455 4.1)");
  /* lws would bind the stream to whichever protocol of the vhost the
   * client names here, and the vhost's others are hark's own (a raw
   * connection's, a WebSocket reader's...): a stream bound to one is never
   * served and its state never freed. hark's streams have no subprotocol. */
  if (lws_hdr_total_length(wsi, WSI_TOKEN_PROTOCOL) > 0)
    return refuse(wsi, 400,
                  "Bad Request: no WebSocket subprotocol is served; send no "
                  "Sec-WebSocket-Protocol header");
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

static bool rx_take(hark_ws *ws);

int hark_ws_on_established(hark_http_conn *c, struct lws *wsi) {
  hark_http_loop *loop = hark_http_loop_of(wsi);
  const hark_ws_handler *h = handler_of(loop);
  if (!c || !h) return -1;
  hark_http_timer_stop(c); /* the upgrade's head is in; ws.c times the rest */
  hark_ws *ws = hark_xcalloc(1, sizeof *ws);
  ws->loop = loop;
  ws->wsi = wsi;
  hark_http_wsi_peer(wsi, ws->peer);
  ws->last_rx_ns = ws->last_tx_ns = hark_now_ns();
  ws->next = loop->sockets;
  if (ws->next) ws->next->prev = ws;
  loop->sockets = ws;
  atomic_fetch_add(&loop->http->n_sockets, 1);
  c->ws = ws;
  hark_ws_parser_init(&ws->parser);
  if (!rx_take(ws)) {
    hark_ws_close(ws, HARK_WS_CLOSE_TRY_LATER, "the server cannot read the stream now");
    return 0;
  }
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
  lws_sul_cancel(&ws->rx_kick);
  if (ws->rx_wsi) lws_set_opaque_user_data(ws->rx_wsi, NULL); /* lws closes it with us */
  outs_free(ws);
  free(ws->rx_left);
  free(ws->msg);
  free(ws);
}

/* ---- output and flow -------------------------------------------------------------- */

static void rx_kick_soon(hark_ws *ws);

/* Reading on or off, for a WebSocket with a socket under it (a detached
 * one has none). Back on, what was read and not parsed goes first. */
static void rx_flow(hark_ws *ws, int on) {
  if (!ws->rx_wsi || ws->rx_done) return;
  lws_rx_flow_control(ws->rx_wsi, on);
  if (on) rx_kick_soon(ws);
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

const char *hark_ws_peer(const hark_ws *ws) { return ws->peer; }

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

/* Our close frame: the code (none when the client's close had none) and
 * the reason. Framed here and written raw: lws 4.1 has no public write
 * type for a close frame but lws_close_reason(), whose close handshake
 * reads the client's reply itself, which we do. */
static int write_close(hark_ws *ws) {
  unsigned char b[LWS_PRE + 2 + HARK_WS_CONTROL_MAX];
  unsigned char *f = b + LWS_PRE;
  size_t n = 0;
  if (ws->close_code) {
    f[2] = (unsigned char)(ws->close_code >> 8);
    f[3] = (unsigned char)ws->close_code;
    size_t r = strlen(ws->close_reason); /* HARK_WS_REASON_MAX fits with the code */
    memcpy(f + 4, ws->close_reason, r);
    n = 2 + r;
  }
  f[0] = 0x80 | HARK_WS_OP_CLOSE; /* FIN; a server's frames are not masked */
  f[1] = (unsigned char)n;
  return lws_write(ws->wsi, f, 2 + n, LWS_WRITE_RAW) < (int)(2 + n) ? -1 : 0;
}

/* Whether the client's frames are still read (its close can still come). */
static bool reading(const hark_ws *ws) { return ws->rx_wsi && !ws->rx_done && !ws->peer_closed; }

/*
 * Output in order: a pong owed, the queued messages (not once the client
 * has closed), then, closing, our close frame. Closed by the client, or
 * with nothing more read, we hang up once it is out; otherwise we wait
 * CLOSE_ACK_SECS for the client's close frame.
 */
int hark_ws_on_writable(hark_http_conn *c) {
  hark_ws *ws = c ? c->ws : NULL;
  if (!ws) return 0;
  struct lws *wsi = ws->wsi;
  ws->last_tx_ns = hark_now_ns();  /* the socket takes what we send */
  if (lws_partial_buffered(wsi)) { /* lws sends its leftovers first */
    lws_callback_on_writable(wsi);
    return 0;
  }
  if (ws->close_sent) return reading(ws) ? 0 : -1;
  if (ws->pong_due) {
    ws->pong_due = false;
    unsigned char b[LWS_PRE + HARK_WS_CONTROL_MAX];
    memcpy(b + LWS_PRE, ws->pong, ws->pong_len);
    if (lws_write(wsi, b + LWS_PRE, ws->pong_len, LWS_WRITE_PONG) < (int)ws->pong_len) return -1;
    lws_callback_on_writable(wsi);
    return 0;
  }
  ws_out *o = ws->peer_closed ? NULL : ws->out_head;
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
  if (write_close(ws) < 0) return -1;
  ws->close_sent = true;
  if (reading(ws))
    lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_ACK, CLOSE_ACK_SECS);
  else
    lws_callback_on_writable(wsi); /* hang up once it is out */
  return 0;
}

/* ---- input ---------------------------------------------------------------------- */

/* The message limit refuses a message; false. */
static bool too_big(hark_ws *ws, size_t limit) {
  char reason[HARK_WS_REASON_MAX + 1];
  snprintf(reason, sizeof reason,
           "message too big: the limit is %zu bytes (--ws-max-message-bytes)", limit);
  hark_ws_close(ws, HARK_WS_CLOSE_TOO_BIG, reason);
  return false;
}

/* Appends a piece of the current message, within the size limit. */
static bool msg_append(hark_ws *ws, const void *in, size_t len) {
  const hark_http *http = ws->loop->http;
  size_t limit = max_message(http);
  if (len > limit - ws->msg_len) return too_big(ws, limit);
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

/* The parser's: a piece of a data message. Once closing, data is skipped
 * (the parse goes on, for the client's close frame). Stops the parse when
 * a whole message paused reading. */
static bool on_data(void *userp, const uint8_t *p, size_t n, bool first, bool binary, bool last,
                    uint64_t more) {
  hark_ws *ws = userp;
  if (ws->closing) return true;
  if (first) ws->msg_len = 0;
  size_t limit = max_message(ws->loop->http);
  if (more > limit || n + more > limit - ws->msg_len) return too_big(ws, limit), true;
  if (!msg_append(ws, p, n) || !last) return true;
  size_t len = ws->msg_len;
  ws->msg_len = 0;
  if (!binary && !hark_utf8_valid((const uint8_t *)ws->msg, len)) {
    hark_ws_close(ws, HARK_WS_CLOSE_INVALID, "a text message that is not UTF-8");
    return true;
  }
  handler_of(ws->loop)->message(ws->stream, ws->msg ? ws->msg : "", len, binary);
  if (ws->msg_cap > KEEP_BUFFER) { /* keep a small buffer for the next one only */
    free(ws->msg);
    ws->msg = NULL;
    ws->msg_cap = 0;
  }
  return !ws->rx_paused;
}

/* The parser's: a ping (the latest is answered, RFC 6455 5.5.3), a pong
 * (nothing to do), or the client's close: answered with its code, after
 * nothing more of ours. Stops the parse at a close. */
static bool on_control(void *userp, int opcode, const uint8_t *p, size_t n) {
  hark_ws *ws = userp;
  if (opcode == HARK_WS_OP_PING) {
    if (ws->closing) return true;
    memcpy(ws->pong, p, n);
    ws->pong_len = (uint8_t)n;
    ws->pong_due = true;
    want_write(ws);
    return true;
  }
  if (opcode != HARK_WS_OP_CLOSE) return true;
  ws->peer_closed = true;
  if (!ws->closing) {
    outs_free(ws);
    hark_ws_close(ws, n >= 2 ? (int)((unsigned)p[0] << 8 | p[1]) : 0, "");
  }
  want_write(ws);
  return false;
}

/* The parser's: a data frame's header. One that declares more than the
 * message may still hold is refused now (1009), whether or not its payload
 * ever comes; the parse goes on for the client's close. */
static bool on_frame(void *userp, bool first, uint64_t len) {
  hark_ws *ws = userp;
  if (ws->closing) return true;
  size_t limit = max_message(ws->loop->http);
  size_t have = first ? 0 : ws->msg_len;
  if (len > limit - have) too_big(ws, limit);
  return true;
}

static const hark_ws_sink sink = {on_data, on_control, on_frame};

/* Parses what was read; keeps what a pause left unparsed. */
static void rx_feed(hark_ws *ws, uint8_t *buf, size_t n) {
  int code;
  const char *why;
  size_t took = hark_ws_parse(&ws->parser, buf, n, &sink, ws, &code, &why);
  if (code) {
    HARK_VERBOSE("ws: closing a stream %d: %s", code, why);
    ws->rx_done = true;
    if (ws->rx_wsi) lws_rx_flow_control(ws->rx_wsi, 0);
    if (ws->closing)
      want_write(ws); /* ours is out or on its way: hang up after it */
    else
      hark_ws_close(ws, code, why);
    return;
  }
  if (took == n || ws->peer_closed) return;
  if (!ws->rx_left) ws->rx_left = hark_xmalloc(RX_CHUNK);
  memmove(ws->rx_left + ws->rx_left_len, buf + took, n - took); /* a pause: at most one read */
  ws->rx_left_len += n - took;
}

/* The client hung up (or its socket or TLS session broke). */
static void rx_hangup(hark_ws *ws) {
  ws->rx_done = true;
  ws->peer_closed = true;
  lws_rx_flow_control(ws->rx_wsi, 0);
  lws_set_timeout(ws->wsi, PENDING_TIMEOUT_CLOSE_ACK, LWS_TO_KILL_ASYNC);
}

/* One read: bytes, 0 when there is nothing now, -1 when the client is gone. */
static ssize_t rx_recv(hark_ws *ws, uint8_t *buf, size_t cap) {
  if (ws->ssl) {
    ERR_clear_error();
    int n = SSL_read(ws->ssl, buf, (int)cap);
    if (n > 0) return n;
    int e = SSL_get_error(ws->ssl, n);
    return e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE ? 0 : -1;
  }
  for (;;) {
    ssize_t n = recv(lws_get_socket_fd(ws->rx_wsi), buf, cap, 0);
    if (n > 0) return n;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
  }
}

/* What a pause left unparsed, then up to RX_READS reads, until one comes
 * back short. TLS may hold records the socket no longer shows: those are
 * read at the next turn. */
static void rx_read(hark_ws *ws) {
  if (ws->rx_paused) return; /* lws may report the socket once more */
  if (ws->rx_left_len) {
    size_t n = ws->rx_left_len;
    ws->rx_left_len = 0;
    uint8_t *left = ws->rx_left;
    ws->rx_left = NULL;
    rx_feed(ws, left, n);
    free(left);
  }
  uint8_t buf[RX_CHUNK];
  for (int r = 0; r < RX_READS; r++) {
    if (ws->rx_left_len || ws->rx_paused || !reading(ws)) return;
    ssize_t n = rx_recv(ws, buf, sizeof buf);
    if (n == 0) return;
    if (n < 0) {
      rx_hangup(ws);
      return;
    }
    ws->last_rx_ns = hark_now_ns();
    rx_feed(ws, buf, (size_t)n);
    if ((size_t)n < sizeof buf) break; /* drained, most likely: the poll will say */
  }
  if (ws->ssl && !ws->rx_paused && reading(ws) && SSL_has_pending(ws->ssl)) rx_kick_soon(ws);
}

static void on_rx_kick(lws_sorted_usec_list_t *sul) {
  hark_ws *ws = lws_container_of(sul, hark_ws, rx_kick);
  if (ws->rx_wsi) rx_read(ws);
  hark_http_drain_soon();
}

static void rx_kick_soon(hark_ws *ws) {
  lws_sul_schedule(ws->loop->ctx, 0, &ws->rx_kick, on_rx_kick, 1);
}

/* The WebSocket is open: lws reads its socket no more; a duplicate of the
 * descriptor, adopted as lws's child, says when there is something to
 * read. False when that cannot be had (out of descriptors). */
static bool rx_take(hark_ws *ws) {
  int fd = lws_get_socket_fd(ws->wsi);
  int dup = fd < 0 ? -1 : fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0) {
    HARK_WARN("ws: cannot read a new stream: %s", strerror(errno));
    lws_rx_flow_control(ws->wsi, 0);
    return false;
  }
  lws_adopt_desc_t info;
  memset(&info, 0, sizeof info);
  info.vh = lws_get_vhost(ws->wsi);
  info.type = LWS_ADOPT_RAW_FILE_DESC;
  info.fd.filefd = dup;
  info.vh_prot_name = "hark-ws-rx";
  info.parent = ws->wsi;
  info.opaque = ws;
  lws_rx_flow_control(ws->wsi, 0);                                  /* for good */
  if (!(ws->rx_wsi = lws_adopt_descriptor_vhost_via_info(&info))) { /* lws closed dup */
    HARK_WARN("ws: cannot read a new stream (out of memory?)");
    return false;
  }
  ws->ssl = lws_get_ssl(ws->wsi);
  rx_kick_soon(ws); /* TLS may have read the first records already */
  return true;
}

int hark_ws_on_rx_event(struct lws *wsi, enum lws_callback_reasons reason) {
  hark_ws *ws = lws_get_opaque_user_data(wsi);
  if (!ws) return 0;
  switch (reason) {
  case LWS_CALLBACK_RAW_RX_FILE:
    if (ws->rx_wsi == wsi) rx_read(ws);
    return 0;
  case LWS_CALLBACK_RAW_CLOSE_FILE:
    if (ws->rx_wsi == wsi) {
      ws->rx_wsi = NULL;
    }
    return 0;
  default: return 0;
  }
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
  hark_http_drain_soon(); /* what the closes posted to this loop */
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
