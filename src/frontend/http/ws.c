/*
 * ws.c — WebSocket connections on the HTTP port: the client's frames read
 * (ws_frame.c), messages joined from their fragments up to
 * ws_max_message, text messages queued out and framed here, pings
 * answered, flow control, the close handshake with a code and a reason
 * once the queued messages are out, the idle timeout, and closing
 * everything at shutdown. What a stream means is the service's (e.g.
 * speech/vosk.c); this file only moves its messages. The upgrade is
 * HTTP/1.1's (exchange.c), which opens the WebSocket once its 101 is out
 * and hands it the connection's bytes from then on; ws.c writes to the
 * raw connection itself. Loop thread only; the count of open WebSockets
 * (for the drain) is shared, an atomic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "frontend/http/http_impl.h"
#include "frontend/http/ws_frame.h"
#include "util/alloc.h"
#include "util/log.h"

#define DEFAULT_MAX_MESSAGE (1u << 20)
#define DEFAULT_IDLE_SECS 60
#define OUT_HIGH_WATER (256u * 1024u) /* unsent messages: pause receiving */
#define KEEP_BUFFER (64u * 1024u)
#define CLOSE_ACK_SECS 5           /* our close frame is out: the client's, or we hang up */
#define RX_LEFT_MAX (256u * 1024u) /* input kept while paused, past a message */
#define FRAME_HEAD_MAX 10          /* a server frame's header: 2, 4 or 10 bytes */
#define NS_PER_SEC 1000000000ull

/* A frame waiting for the socket: its payload starts at OUT_PAYLOAD, with
 * room in front for its header and the transport's headroom. */
#define OUT_PAYLOAD (HARK_RAW_HEADROOM + FRAME_HEAD_MAX)
typedef struct ws_out {
  struct ws_out *next;
  size_t len;
  unsigned char buf[];
} ws_out;

struct hark_ws {
  hark_http_loop *loop;
  hark_raw *raw;        /* the connection under it; NULL: detached */
  hark_ws *prev, *next; /* loop->sockets */
  void *stream;         /* the service's */
  bool closing, paused_by_service, rx_paused;
  bool killed;    /* dropped by the send timeout: closes soon */
  int close_code; /* 0: a close frame with no code (the client's had none) */
  char close_reason[HARK_WS_REASON_MAX + 1];
  uint64_t last_rx_ns;
  uint64_t last_tx_ns;    /* output last made progress (or began to wait) */
  uint64_t close_sent_ns; /* our close frame went out: the client's is due */
  /* the message being received */
  char *msg;
  size_t msg_len, msg_cap;
  /* messages waiting for the socket */
  ws_out *out_head, *out_tail;
  size_t out_bytes;
  /* reading the client's frames */
  hark_ws_parser parser;
  hark_buf rx_left;               /* read, not parsed yet (reading paused mid-read) */
  lws_sorted_usec_list_t rx_kick; /* parses rx_left once reading is back on */
  bool rx_done;                   /* nothing more is read: a protocol error */
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

/* ---- lifetime ------------------------------------------------------------------ */

static void outs_free(hark_ws *ws) {
  for (ws_out *o = ws->out_head, *next; o; o = next) {
    next = o->next;
    free(o);
  }
  ws->out_head = ws->out_tail = NULL;
  ws->out_bytes = 0;
}

hark_ws *hark_ws_open(hark_http_loop *loop, hark_raw *raw, void *ticket) {
  const hark_ws_handler *h = handler_of(loop);
  hark_ws *ws = hark_xcalloc(1, sizeof *ws);
  ws->loop = loop;
  ws->raw = raw;
  snprintf(ws->peer, sizeof ws->peer, "%s", hark_raw_peer(raw));
  ws->last_rx_ns = ws->last_tx_ns = hark_http_now_ns();
  ws->next = loop->sockets;
  if (ws->next) ws->next->prev = ws;
  loop->sockets = ws;
  atomic_fetch_add(&loop->http->n_sockets, 1);
  hark_ws_parser_init(&ws->parser);
  ws->stream = h->open(loop->http->handler->ws_userp, ws, ticket);
  if (!ws->stream) hark_ws_close(ws, HARK_WS_CLOSE_INTERNAL, "cannot open the stream");
  return ws;
}

void hark_ws_on_closed(hark_ws *ws) {
  hark_http_loop *loop = ws->loop;
  if (ws->prev)
    ws->prev->next = ws->next;
  else if (loop->sockets == ws)
    loop->sockets = ws->next;
  if (ws->next) ws->next->prev = ws->prev;
  atomic_fetch_sub(&loop->http->n_sockets, 1);
  if (ws->stream) handler_of(loop)->closed(ws->stream);
  lws_sul_cancel(&ws->rx_kick);
  outs_free(ws);
  hark_buf_free(&ws->rx_left);
  free(ws->msg);
  free(ws);
}

/* ---- output and flow -------------------------------------------------------------- */

static void rx_kick_soon(hark_ws *ws);

/* Reading on or off, for a WebSocket with a connection under it (a
 * detached one has none). Back on, what was read and not parsed goes
 * first: the socket is read again only once that is all parsed (lws
 * hands over what it reads, so reading it on top of that would pile up). */
static void rx_flow(hark_ws *ws, bool on) {
  if (!ws->raw || ws->rx_done) return;
  if (on && ws->rx_left.len) {
    rx_kick_soon(ws);
    return;
  }
  hark_raw_pause(ws->raw, !on);
}

static void want_write(hark_ws *ws) {
  if (ws->raw) hark_raw_want_write(ws->raw);
}

static void update_flow(hark_ws *ws) {
  if (ws->closing) return;
  bool pause = ws->paused_by_service || ws->out_bytes >= OUT_HIGH_WATER;
  bool resume = !ws->paused_by_service && ws->out_bytes < OUT_HIGH_WATER / 2;
  if (!ws->rx_paused && pause) {
    ws->rx_paused = true;
    rx_flow(ws, false);
  } else if (ws->rx_paused && resume) {
    ws->rx_paused = false;
    rx_flow(ws, true);
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
  ws_out *o = malloc(sizeof *o + OUT_PAYLOAD + len);
  if (!o) {
    hark_ws_close(ws, HARK_WS_CLOSE_INTERNAL, "out of memory");
    return false;
  }
  o->next = NULL;
  o->len = len;
  memcpy(o->buf + OUT_PAYLOAD, text, len);
  if (!ws->out_head) ws->last_tx_ns = hark_http_now_ns(); /* the wait for the client begins */
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
  ws->last_tx_ns = hark_http_now_ns(); /* the close frame waits for the socket too */
  ws->close_code = code;
  snprintf(ws->close_reason, sizeof ws->close_reason, "%s", reason ? reason : "");
  hark_ws_reason_fit(ws->close_reason, HARK_WS_REASON_MAX);
  if (ws->rx_paused) { /* let the close handshake be read */
    ws->rx_paused = false;
    rx_flow(ws, true);
  }
  want_write(ws);
}

/* Frames `len` payload bytes at `payload` (a server's frames are not
 * masked; FIN set) and writes the frame; -1 when the connection failed. */
static int write_frame(hark_ws *ws, int opcode, uint8_t *payload, size_t len) {
  uint8_t *f;
  if (len < 126) {
    f = payload - 2;
    f[1] = (uint8_t)len;
  } else if (len <= 0xFFFF) {
    f = payload - 4;
    f[1] = 126;
    f[2] = (uint8_t)(len >> 8);
    f[3] = (uint8_t)len;
  } else {
    f = payload - 10;
    f[1] = 127;
    for (int i = 0; i < 8; i++) f[2 + i] = (uint8_t)((uint64_t)len >> (56 - 8 * i));
  }
  f[0] = (uint8_t)(0x80 | opcode);
  if (hark_raw_write(ws->raw, f, (size_t)(payload + len - f)) < 0) return -1;
  hark_raw_choked(ws->raw); /* starts the send timeout when it did not all go */
  return 0;
}

/* A control frame (pong, close) of at most HARK_WS_CONTROL_MAX bytes. */
static int write_control(hark_ws *ws, int opcode, const uint8_t *p, size_t n) {
  uint8_t b[OUT_PAYLOAD + HARK_WS_CONTROL_MAX];
  memcpy(b + OUT_PAYLOAD, p, n);
  return write_frame(ws, opcode, b + OUT_PAYLOAD, n);
}

/* Our close frame: the code (none when the client's close had none) and
 * the reason. */
static int write_close(hark_ws *ws) {
  uint8_t p[2 + HARK_WS_REASON_MAX];
  size_t n = 0;
  if (ws->close_code) {
    p[0] = (uint8_t)(ws->close_code >> 8);
    p[1] = (uint8_t)ws->close_code;
    size_t r = strlen(ws->close_reason); /* HARK_WS_REASON_MAX fits with the code */
    memcpy(p + 2, ws->close_reason, r);
    n = 2 + r;
  }
  return write_control(ws, HARK_WS_OP_CLOSE, p, n);
}

/* Whether the client's frames are still read (its close can still come). */
static bool reading(const hark_ws *ws) { return !ws->rx_done && !ws->peer_closed; }

static void hang_up(hark_ws *ws) { hark_raw_close(ws->raw); }

/*
 * Output in order, while the socket takes it: a pong owed, the queued
 * messages (not once the client has closed), then, closing, our close
 * frame. Closed by the client, or with nothing more read, we hang up once
 * it is out; otherwise we wait CLOSE_ACK_SECS for the client's close
 * frame (the sweep).
 */
void hark_ws_on_writable(hark_ws *ws) {
  hark_raw *raw = ws->raw;
  ws->last_tx_ns = hark_http_now_ns(); /* the socket takes what we send */
  for (;;) {
    if (hark_raw_choked(raw)) { /* lws sends its leftovers first */
      hark_raw_want_write(raw);
      return;
    }
    if (ws->close_sent) {
      if (!reading(ws)) hang_up(ws);
      return;
    }
    if (ws->pong_due) {
      ws->pong_due = false;
      if (write_control(ws, HARK_WS_OP_PONG, ws->pong, ws->pong_len) < 0) return hang_up(ws);
      continue;
    }
    ws_out *o = ws->peer_closed ? NULL : ws->out_head;
    if (o) {
      int rc = write_frame(ws, HARK_WS_OP_TEXT, o->buf + OUT_PAYLOAD, o->len);
      if (!(ws->out_head = o->next)) ws->out_tail = NULL;
      ws->out_bytes -= o->len;
      free(o);
      if (rc < 0) return hang_up(ws);
      update_flow(ws);
      continue;
    }
    if (!ws->closing) return;
    if (write_close(ws) < 0) return hang_up(ws);
    ws->close_sent = true;
    ws->close_sent_ns = hark_http_now_ns();
  }
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

/* Parses bytes read; returns how many it took (less when a whole message
 * paused reading, or nothing more is read). */
static size_t rx_feed(hark_ws *ws, uint8_t *buf, size_t n) {
  int code;
  const char *why;
  size_t took = hark_ws_parse(&ws->parser, buf, n, &sink, ws, &code, &why);
  if (code) {
    HARK_VERBOSE("ws: closing a stream %d: %s", code, why);
    ws->rx_done = true;
    if (ws->closing)
      want_write(ws); /* ours is out or on its way: hang up after it */
    else
      hark_ws_close(ws, code, why);
    return n;
  }
  return ws->peer_closed ? n : took;
}

/* What reading paused left, parsed first once reading is back on. */
static void rx_resume(hark_ws *ws) {
  while (ws->rx_left.len && !ws->rx_paused && reading(ws)) {
    size_t took = rx_feed(ws, (uint8_t *)ws->rx_left.data, ws->rx_left.len);
    memmove(ws->rx_left.data, ws->rx_left.data + took, ws->rx_left.len - took);
    ws->rx_left.len -= took;
    if (!took) break;
  }
  if (!reading(ws) || !ws->rx_left.len) hark_buf_free(&ws->rx_left);
  if (!ws->rx_left.len && !ws->rx_paused && reading(ws)) hark_raw_pause(ws->raw, false);
}

void hark_ws_on_rx(hark_ws *ws, uint8_t *data, size_t len) {
  if (!reading(ws)) return; /* after the client's close, or a protocol error: dropped */
  ws->last_rx_ns = hark_http_now_ns();
  if (!ws->rx_left.len && !ws->rx_paused) {
    size_t took = rx_feed(ws, data, len); /* unmasked in place */
    data += took;
    len -= took;
    if (!len || !reading(ws)) return;
  }
  /* Paused mid-read (or bytes that came after a pause, from a TLS
   * record): kept for when reading is back on. Reading stops with the
   * pause, so this is a read or a few TLS records at most: more is a bug
   * this bound keeps from costing the server its memory. */
  if (ws->rx_left.len + len > max_message(ws->loop->http) + RX_LEFT_MAX) {
    HARK_WARN("ws: a stream's unread input passed %zu bytes while paused; closing it",
              max_message(ws->loop->http) + RX_LEFT_MAX);
    ws->rx_done = true;
    hark_ws_close(ws, HARK_WS_CLOSE_POLICY, "too much input while the stream is paused");
    return;
  }
  if (!hark_buf_append(&ws->rx_left, data, len)) {
    ws->rx_done = true;
    hark_ws_close(ws, HARK_WS_CLOSE_INTERNAL, "out of memory");
  }
}

static void on_rx_kick(lws_sorted_usec_list_t *sul) {
  hark_ws *ws = lws_container_of(sul, hark_ws, rx_kick);
  rx_resume(ws);
  hark_http_drain_soon();
}

static void rx_kick_soon(hark_ws *ws) {
  lws_sul_schedule(ws->loop->ctx, 0, &ws->rx_kick, on_rx_kick, 1);
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
void hark_ws_sweep(hark_http_loop *loop) {
  const hark_http *http = loop->http;
  const hark_ws_handler *h = handler_of(loop);
  int secs =
      http->opts.ws_idle_timeout_secs > 0 ? http->opts.ws_idle_timeout_secs : DEFAULT_IDLE_SECS;
  uint64_t now = hark_http_now_ns(), limit = (uint64_t)secs * 1000000000ull;
  uint64_t send_limit = (uint64_t)http->opts.send_timeout_secs * 1000000000ull;
  for (hark_ws *ws = loop->sockets; ws; ws = ws->next) {
    if (ws->killed) continue;
    if (ws->close_sent && reading(ws) && now - ws->close_sent_ns >= CLOSE_ACK_SECS * NS_PER_SEC) {
      ws->killed = true; /* the client's close did not come */
      hang_up(ws);
      continue;
    }
    bool waiting = ws->out_head || ws->closing || hark_raw_buffered(ws->raw);
    if (waiting) {
      if (now - ws->last_tx_ns >= send_limit) {
        ws->killed = true;
        hark_limit_hit(HARK_LIMIT_SEND_TIMEOUT,
                       "ws: a client read nothing for %d s with %zu bytes waiting for it "
                       "(--send-timeout-secs): closing",
                       http->opts.send_timeout_secs, ws->out_bytes);
        hang_up(ws);
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
}

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
  ws->last_rx_ns = ws->last_tx_ns = hark_http_now_ns();
  return ws;
}

char *hark_ws_detached_take(hark_ws *ws, size_t *len) {
  ws_out *o = ws->out_head;
  if (!o) return NULL;
  if (!(ws->out_head = o->next)) ws->out_tail = NULL;
  ws->out_bytes -= o->len;
  char *text = hark_xmalloc(o->len + 1);
  memcpy(text, o->buf + OUT_PAYLOAD, o->len);
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
