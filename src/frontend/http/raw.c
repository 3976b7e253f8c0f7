/*
 * raw.c — every connection the loops serve is a raw byte stream: each
 * loop accepts on listen sockets of its own (SO_REUSEPORT) and adopts
 * each connection as an lws raw socket, whose bytes go to the handler of
 * the listener it came from — exchange.c's HTTP/1.1 on the HTTP and
 * metrics ports, the raw service's (gRPC's HTTP/2, grpc/) on the raw
 * port — which writes back through hark_raw_write. lws only reads,
 * writes and keeps what the socket would not take yet. Also the loops'
 * timers, for services that want one on a loop. Loop thread only.
 *
 * With a listener's TLS context (--http-use-ssl, --grpc-use-ssl) each
 * connection is a TLS session (frontend/security/tls.c): the bytes read
 * are decrypted before the handler sees them, and its writes are
 * encrypted on their way out; the handler's connection opens only once
 * the handshake is done.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/http/http_impl.h"
#include "frontend/security/tls.h"
#include "util/alloc.h"
#include "util/log.h"

/* lws keeps what a write could not send, and sends it first; it may use
 * LWS_PRE bytes in front of the data. */
_Static_assert(LWS_PRE <= HARK_RAW_HEADROOM, "HARK_RAW_HEADROOM must cover LWS_PRE");

/* Sends what the TLS session has for the socket; -1 when it failed. */
static int tls_flush(hark_raw *raw) {
  size_t n = hark_tls_conn_pending(raw->tls);
  if (!n) return 0;
  if (!hark_buf_reserve(&raw->tls_out, LWS_PRE + n)) return -1;
  n = hark_tls_conn_take(raw->tls, (uint8_t *)raw->tls_out.data + LWS_PRE, n);
  return lws_write(raw->wsi, (uint8_t *)raw->tls_out.data + LWS_PRE, n, LWS_WRITE_RAW) < 0 ? -1 : 0;
}

int hark_raw_write(hark_raw *raw, uint8_t *data, size_t len) {
  if (raw->tls) {
    if (hark_tls_conn_write(raw->tls, data, len) < 0 || tls_flush(raw) < 0) return -1;
    return (int)len;
  }
  int n = lws_write(raw->wsi, data, len, LWS_WRITE_RAW);
  return n < 0 ? -1 : n;
}

/* TLS: the bytes read go through the session; the handler's connection
 * opens when the handshake is done and reads the plaintext. */
#define TLS_READ_CHUNK (16u * 1024u)
/* A client that has not finished its handshake this long after it
 * connected is dropped (nginx gives it its header timeout). */
#define TLS_HANDSHAKE_SECS 10
static int tls_rx(hark_raw *raw, const hark_raw_handler *h, const void *in, size_t len) {
  hark_tls_conn_feed(raw->tls, in, len);
  if (!raw->conn) {
    int rc = hark_tls_conn_handshake(raw->tls);
    if (tls_flush(raw) < 0 || rc < 0) return -1; /* the alert went out first */
    if (rc == 0) return 0;
    lws_set_timeout(raw->wsi, NO_PENDING_TIMEOUT, 0);
    if (!(raw->conn = h->open(raw->listener->userp, raw))) return -1;
  }
  uint8_t buf[TLS_READ_CHUNK];
  for (;;) {
    int n = hark_tls_conn_read(raw->tls, buf, sizeof buf);
    if (n < 0) return -1; /* closed, or broken */
    if (n == 0) break;
    if (h->rx(raw->conn, buf, (size_t)n) < 0) return -1;
    if (!raw->conn) return -1;
  }
  return tls_flush(raw);
}

/* Choked: lws holds what the socket did not take. (Not lws_send_pipe_choked,
 * which asks the kernel with a poll() each time: two system calls a
 * request, when a send that does not all go says the same for free.) */
bool hark_raw_choked(hark_raw *raw) {
  bool choked = lws_partial_buffered(raw->wsi);
  if (!choked)
    raw->choked_ns = 0; /* the client read: a choke long ago is no reason to close */
  else if (!raw->choked_ns)
    raw->choked_ns = hark_http_now_ns(); /* the send timeout runs */
  return choked;
}

void hark_raw_want_write(hark_raw *raw) { lws_callback_on_writable(raw->wsi); }

void hark_raw_pause(hark_raw *raw, bool pause) {
  if (raw->paused == pause) return;
  raw->paused = pause;
  lws_rx_flow_control(raw->wsi, pause ? 0 : 1);
}

bool hark_raw_buffered(hark_raw *raw) { return lws_partial_buffered(raw->wsi); }

int hark_raw_fd(hark_raw *raw) { return lws_get_socket_fd(raw->wsi); }

void hark_raw_close(hark_raw *raw) {
  lws_set_timeout(raw->wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

hark_http_loop *hark_raw_loop(const hark_raw *raw) { return raw->loop; }

const char *hark_raw_peer(const hark_raw *raw) { return raw->peer; }

int hark_raw_on_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                      size_t len) {
  hark_raw *raw = user;
  hark_http_loop *loop = wsi ? hark_http_loop_of(wsi) : NULL;
  const hark_raw_handler *h = raw && raw->listener ? raw->listener->handler : NULL;
  switch (reason) {
  case LWS_CALLBACK_RAW_ADOPT: {
    const hark_listener *l = loop ? loop->adopting : NULL; /* http.c's accept, just now */
    if (!raw || !l || !loop) return -1;
    raw->wsi = wsi;
    raw->loop = loop;
    raw->listener = l;
    h = l->handler;
    hark_http_fd_peer(lws_get_socket_fd(wsi), raw->peer);
    raw->next = loop->raws;
    if (raw->next) raw->next->prev = raw;
    loop->raws = raw;
    if (l->tls) { /* the handler's connection opens after the handshake */
      lws_set_timeout(wsi, PENDING_TIMEOUT_SSL_ACCEPT, TLS_HANDSHAKE_SECS);
      return (raw->tls = hark_tls_conn_new(l->tls)) ? 0 : -1;
    }
    raw->conn = h->open(l->userp, raw);
    return raw->conn ? 0 : -1;
  }
  case LWS_CALLBACK_RAW_RX:
    if (raw && raw->tls) return tls_rx(raw, h, in, len);
    if (!raw || !raw->conn) return -1;
    return h->rx(raw->conn, in, len) < 0 ? -1 : 0;
  case LWS_CALLBACK_RAW_WRITEABLE:
    if (!raw || !raw->conn) return 0;
    raw->choked_ns = 0; /* the client reads */
    return h->writable(raw->conn) < 0 ? -1 : 0;
  case LWS_CALLBACK_RAW_CLOSE:
    if (!raw || !raw->loop) return 0;
    if (raw->prev)
      raw->prev->next = raw->next;
    else if (loop->raws == raw)
      loop->raws = raw->next;
    if (raw->next) raw->next->prev = raw->prev;
    raw->prev = raw->next = NULL;
    if (raw->conn) h->closed(raw->conn);
    raw->conn = NULL;
    raw->loop = NULL;
    hark_tls_conn_free(raw->tls);
    raw->tls = NULL;
    hark_buf_free(&raw->tls_out);
    return 0;
  default: return 0;
  }
}

bool hark_raw_close_all(hark_http_loop *loop) {
  bool open = false;
  for (hark_raw *raw = loop->raws; raw; raw = raw->next) {
    if (raw->listener->kind != LISTEN_RAW) continue; /* exchange.c and ws.c close theirs */
    if (!loop->raw_closing_all) hark_raw_close(raw);
    open = true;
  }
  loop->raw_closing_all = true;
  return open;
}

void hark_raw_sweep(hark_http_loop *loop) {
  const hark_http_options *o = &loop->http->opts;
  uint64_t now = hark_http_now_ns(), limit = (uint64_t)o->send_timeout_secs * 1000000000ull;
  for (hark_raw *raw = loop->raws; raw; raw = raw->next) {
    if (!raw->choked_ns || raw->killed || now - raw->choked_ns < limit) continue;
    raw->killed = true;
    hark_limit_hit(HARK_LIMIT_SEND_TIMEOUT,
                   "%s: a client read nothing for %d s (--send-timeout-secs): closing",
                   raw->listener->kind == LISTEN_RAW ? "grpc" : "http", o->send_timeout_secs);
    hark_raw_close(raw);
  }
}

/* ---- timers ----------------------------------------------------------------- */

struct hark_http_timer {
  lws_sorted_usec_list_t sul; /* first: lws hands it back */
  hark_http_loop *loop;
  void (*fn)(void *arg);
  void *arg;
};

static void on_timer(lws_sorted_usec_list_t *sul) {
  hark_http_timer *t = (hark_http_timer *)sul;
  t->fn(t->arg);
  hark_http_drain_soon(); /* what it posted to this loop (an lws event does the same) */
}

hark_http_timer *hark_http_timer_new(hark_http_loop *loop, void (*fn)(void *arg), void *arg) {
  hark_http_timer *t = hark_xcalloc(1, sizeof *t);
  t->loop = loop;
  t->fn = fn;
  t->arg = arg;
  return t;
}

void hark_http_timer_arm(hark_http_timer *t, uint64_t us) {
  if (t->loop->ctx) lws_sul_schedule(t->loop->ctx, 0, &t->sul, on_timer, (lws_usec_t)us);
}

void hark_http_timer_free(hark_http_timer *t) {
  if (!t) return;
  lws_sul_cancel(&t->sul);
  free(t);
}
