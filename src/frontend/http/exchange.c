/*
 * exchange.c — one HTTP/1.1 exchange on a connection: the request head
 * goes to the service's head handler; a body it asks for accumulates in
 * the connection's buffer (bounded by max_input_size, with a stall
 * timeout) and then goes to its body handler; the one reply it makes is
 * written when the socket is writable, headers and body in one write.
 * Keep-alive connections then wait for the next request. A body's buffer
 * grows as its bytes arrive (from 64 KiB, doubling, never past its
 * Content-Length), each growth taken from the in-flight byte budget
 * (--max-inflight-bytes) first: a declared size costs nothing until it is
 * sent, and a body the budget cannot hold now is refused with 503. The
 * bytes go back when the buffer is freed, by the connection or by the
 * request that took it (hark_http_body_free). A connection
 * that closes while a call has its request leaves the call without a
 * client (its done handler gets NULL). A reply holds the budget too, from
 * when it is made until it is written: one that does not fit is answered
 * 503 instead (small ones are counted whatever the bound, so an error can
 * always be told), and the send timeout bounds how long a client that
 * does not read keeps it. Loop thread only.
 *
 * Time limits, as nginx's: the first request's head must be whole within
 * the header timeout of the connection's start (408, then close; later
 * heads on a kept-alive connection are bounded by lws's header-table
 * timeout from their first byte), a body within its deadline of its head
 * (408), and a reply must make progress: a client that reads nothing of
 * it for the send timeout is dropped. One lws timer per connection counts
 * down whichever bound applies now. lws's own request timeout, which it
 * arms for every head, is stopped once the head is in: a request that is
 * whole is not cut while it is worked on (a model load, a long inference).
 */
#include <errno.h>
#include <linux/sockios.h>
#include <linux/tcp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "frontend/http/http_impl.h"
#include "util/alloc.h"
#include "util/log.h"

#define WRITE_CHUNK (256u * 1024u)
/* After an early reply, the rest of the body is read and dropped for at
 * most this long, then the connection closes. */
#define LINGER_SECS 5

static const char *const JSON = "application/json";

/* ---- exchange state --------------------------------------------------------- */

void hark_http_set_state(hark_http_conn *c, void *state, void (*free_fn)(void *)) {
  if (c->state_free) c->state_free(c->state_ptr);
  c->state_ptr = state;
  c->state_free = free_fn;
}

void *hark_http_state(hark_http_conn *c) { return c->state_ptr; }

/* The reply is written or dropped: its bytes go back to the budget. */
static void out_free(hark_http_conn *c) {
  hark_inflight_give(c->out_charge);
  c->out_charge = 0;
  hark_buf_free(&c->out);
}

/* Frees what one exchange used; close_after outlives it. */
static void exchange_reset(hark_http_conn *c) {
  hark_http_set_state(c, NULL, NULL);
  hark_http_body_free(c->body_mem);
  out_free(c);
  c->body_mem = c->body = NULL;
  c->body_len = c->body_cap = c->body_declared = c->out_off = 0;
  c->state = CONN_IDLE;
}

void hark_http_close_after(hark_http_conn *c) { c->close_after = true; }

/* The connection's lasting state (hark_http_on_accept made it). */
static hark_http_sock *sock_of(struct lws *wsi) { return lws_get_opaque_user_data(wsi); }

const char *hark_http_peer(hark_http_conn *c) {
  hark_http_sock *s = sock_of(c->wsi);
  if (!s) return "";
  if (!s->peer[0]) hark_http_wsi_peer(c->wsi, s->peer);
  return s->peer;
}

int hark_http_header(hark_http_conn *c, const char *name, char *buf, size_t cap) {
  int len = (int)strlen(name);
  if (lws_hdr_custom_length(c->wsi, name, len) < 0) return -1;
  int n = lws_hdr_custom_copy(c->wsi, buf, (int)cap, name, len);
  return n < 0 ? -1 : n;
}

/* ---- time limits ---------------------------------------------------------------- */

static void timer_arm(hark_http_conn *c, conn_timer t, int secs) {
  c->timer = t;
  lws_set_timer_usecs(c->wsi, (lws_usec_t)secs * LWS_US_PER_SEC);
}

/* Always stops it: the head timer runs before the connection has its
 * state (c->timer cannot say it runs). lws 4.1 has no cancel for this
 * timer (LWS_SET_TIMER_USEC_CANCEL fires it at once), so it is put off
 * past any connection's life; lws drops it when the connection closes. */
#define TIMER_NEVER_US (1000000ll * 3600 * 24 * 365 * 30)
static void timer_stop(hark_http_conn *c) {
  c->timer = TIMER_NONE;
  lws_set_timer_usecs(c->wsi, TIMER_NEVER_US);
}

void hark_http_timer_stop(hark_http_conn *c) { timer_stop(c); }

int hark_http_on_accept(struct lws *wsi) {
  hark_http_sock *s = calloc(1, sizeof *s);
  if (!s) {
    HARK_WARN("http: out of memory for a new connection; closing it");
    return -1;
  }
  s->wsi = wsi;
  s->loop = hark_http_loop_of(wsi);
  lws_set_opaque_user_data(wsi, s);
  lws_set_timer_usecs(wsi, (lws_usec_t)s->loop->http->opts.header_timeout_secs * LWS_US_PER_SEC);
  return 0;
}

static void flush_unlink(hark_http_sock *s) {
  hark_http_loop *loop = s->loop;
  if (!s->flush_queued) return;
  if (s->flush_prev)
    s->flush_prev->flush_next = s->flush_next;
  else
    loop->flush_head = s->flush_next;
  if (s->flush_next)
    s->flush_next->flush_prev = s->flush_prev;
  else
    loop->flush_tail = s->flush_prev;
  s->flush_prev = s->flush_next = NULL;
  s->flush_queued = false;
}

void hark_http_on_destroy(struct lws *wsi) {
  hark_http_sock *s = sock_of(wsi);
  if (!s) return; /* not an HTTP connection */
  lws_set_opaque_user_data(wsi, NULL);
  flush_unlink(s);
  if (s->loop->flushing == s) s->loop->flushing = NULL;
  free(s);
}

static void kill_conn(struct lws *wsi) {
  lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
}

/* An error reply written straight to the socket, as much of it as the
 * socket takes now (not under TLS, whose records only lws writes), with
 * Connection: close; then our side ends. For a connection whose request
 * lws will not let us answer the usual way; nothing of another reply may
 * be pending on it. */
static void reply_raw(struct lws *wsi, const char *status, const char *message) {
  if (lws_is_ssl(wsi)) return;
  char out[768];
  int n = snprintf(out, sizeof out,
                   "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n{\"error\":\"%s\"}",
                   status, strlen(message) + 12, message);
  int fd = lws_get_socket_fd(wsi);
  if (n <= 0 || (size_t)n >= sizeof out || fd < 0 ||
      send(fd, out, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
    return;
  shutdown(fd, SHUT_WR);
}

/* No request was read, so nothing was written: a 408, and close. */
static void reply_head_timeout(struct lws *wsi, int secs) {
  char msg[160];
  snprintf(msg, sizeof msg, "request head not received within %d s (--http-header-timeout-secs)",
           secs);
  reply_raw(wsi, "408 Request Timeout", msg);
}

int hark_http_on_timer(struct lws *wsi, hark_http_conn *c) {
  const hark_http_options *o = &hark_http_loop_of(wsi)->http->opts;
  conn_timer t = c ? c->timer : TIMER_NONE;
  if (c) c->timer = TIMER_NONE;
  if (c && c->ws) return 0; /* a WebSocket now: ws.c times it */
  switch (t) {
  case TIMER_NONE:
    /* The timer armed at accept: a head would have stopped it. */
    if (c && c->state != CONN_IDLE) return 0;
    hark_limit_hit(HARK_LIMIT_HTTP_HEADER_TIMEOUT,
                   "http: a client sent no whole request head within %d s of connecting "
                   "(--http-header-timeout-secs): 408, closing",
                   o->header_timeout_secs);
    reply_head_timeout(wsi, o->header_timeout_secs);
    kill_conn(wsi);
    return 0;
  case TIMER_BODY:
    if (c->state != CONN_BODY) return 0;
    hark_limit_hit(HARK_LIMIT_HTTP_BODY_TIMEOUT,
                   "http: a request body was not in within %d s of its head, %zu of %zu bytes "
                   "(--http-body-deadline-secs): 408, closing",
                   o->body_deadline_secs, c->body_len, c->body_declared);
    hark_http_reply_error(c, 408,
                          hark_error_new(HARK_ERR_DEADLINE,
                                         "request body not received within %d s: %zu of %zu "
                                         "bytes arrived (--http-body-deadline-secs)",
                                         o->body_deadline_secs, c->body_len, c->body_declared));
    return 0;
  case TIMER_SEND:
    if (c->state != CONN_REPLYING) return 0;
    hark_limit_hit(HARK_LIMIT_SEND_TIMEOUT,
                   "http: a client read nothing of its reply for %d s (--send-timeout-secs): "
                   "closing",
                   o->send_timeout_secs);
    kill_conn(wsi);
    return 0;
  case TIMER_LINGER:
    if (c->state == CONN_LINGER) kill_conn(wsi);
    return 0;
  default: return 0;
  }
}

/* The restricted header's value, from a request head (lws keeps the
 * headers it does not know as custom ones, named "<name>:"). */
static bool wsi_allowed(struct lws *wsi, const hark_restrict *r, hark_api api, char *msg,
                        size_t cap) {
  const char *h = hark_restrict_header(r, api);
  if (!h) return true;
  char name[160], value[1100];
  int nlen = snprintf(name, sizeof name, "%s:", h);
  int n = -1;
  if (nlen > 0 && (size_t)nlen < sizeof name && lws_hdr_custom_length(wsi, name, nlen) >= 0)
    n = lws_hdr_custom_copy(wsi, value, (int)sizeof value, name, nlen);
  if (hark_restrict_allows(r, api, n < 0 ? NULL : value, n < 0 ? 0 : (size_t)n)) return true;
  hark_restrict_message(r, api, msg, cap);
  return false;
}

bool hark_http_allowed(hark_http_conn *c, hark_api api, char *msg, size_t cap) {
  return wsi_allowed(c->wsi, c->loop->http->opts.restricted, api, msg, cap);
}

bool hark_http_wsi_allowed(struct lws *wsi, hark_api api, char *msg, size_t cap) {
  return wsi_allowed(wsi, hark_http_loop_of(wsi)->http->opts.restricted, api, msg, cap);
}

/* ---- pipelined input ------------------------------------------------------------ */

/*
 * libwebsockets 4.1 reads up to 64 KiB at a time and keeps what follows
 * the request it is on (pipelined requests) in a buffer of its own. While
 * a request is served it goes on reading into that buffer, and once the
 * exchange is done it parses the next head from it. For a head with a
 * body it then feeds that same buffer again as the body, head bytes
 * first, and frees it under the parser that still reads it
 * (lws_http_action's buflist loop): the body callback reads freed memory,
 * or, once the body is complete, lws loops on it for ever. Heads without a
 * body are parsed from it safely, and are served in order. (lws reads
 * nothing from the socket while that buffer holds anything, and cannot be
 * paused while it writes a reply: a paused HTTP connection is never told
 * it is writable.)
 *
 * So: input after a request with a body that comes before the whole
 * reply is with lws (lws calls its body completion again for it) ends the
 * connection after the reply, unparsed. A kept-alive exchange is handed to
 * lws with the last of its reply, and lws completes it once the socket has
 * taken all of it, in the same step (lws_issue_raw, as the last of its
 * buffered output goes), so a client that waited for the reply cannot
 * have its next request read before; at that point we note
 * how many bytes lws has taken from the socket. A later head with a body
 * that came with no byte taken since was parsed from lws's buffer: it is
 * answered 503 with Connection: close before lws reads its body, and the
 * connection ends. The connection's lasting state (hark_http_sock) holds
 * the note; 0: no note.
 *
 * On a plain socket the count is of lws's reads (reads.c), with no system
 * call. Under TLS (OpenSSL reads the socket), or where reads.c cannot
 * count, it is what TCP received (TCP_INFO) less what waits in the
 * socket (SIOCINQ), read in two calls: input that lands between them is
 * in the second and not the first, so the count comes out short by its
 * size. A head read alone, whose body landed there, then looked like no
 * byte taken when the two were the same size (http.client writes them
 * apart): a 503 for a client that had waited. So what was received is
 * read on both sides of the queue until it holds still, and if input
 * keeps coming, the note takes the count before (never more than were
 * taken) and a head the count after (never fewer): a head is only taken
 * for buffered input when no byte can have been taken since.
 */

/* The TCP states in which the peer's FIN has come (the kernel's
 * include/net/tcp_states.h; <linux/tcp.h> does not have them). */
enum {
  TCP_STATE_TIME_WAIT = 6,
  TCP_STATE_CLOSE_WAIT = 8,
  TCP_STATE_LAST_ACK = 9,
  TCP_STATE_CLOSING = 11
};

/* How many bytes TCP has received on the socket. Its count has the
 * peer's FIN as one byte more, which is never in SIOCINQ's: a FIN landing
 * after the note would have hidden a head parsed from lws's buffer. */
static bool tcp_received(int fd, uint64_t *out) {
  struct tcp_info ti;
  socklen_t len = sizeof ti;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
      len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof ti.tcpi_bytes_received)
    return false;
  bool fin = ti.tcpi_state == TCP_STATE_CLOSE_WAIT || ti.tcpi_state == TCP_STATE_LAST_ACK ||
             ti.tcpi_state == TCP_STATE_CLOSING || ti.tcpi_state == TCP_STATE_TIME_WAIT;
  *out = ti.tcpi_bytes_received - (uint64_t)fin;
  return true;
}

#define TAKEN_TRIES 4

/* How many bytes have been taken from the connection's socket: exactly,
 * or while input keeps arriving, at least that many (`high`) or at most.
 * An empty queue needs no second count: only this thread reads the
 * socket, so input that landed after the first count would still be
 * queued (a FIN is no byte of either). That is the usual case, a client
 * waiting for its reply, and it halves the system calls of every
 * kept-alive request, which cost a third of a loop's time. */
static bool socket_taken(struct lws *wsi, bool high, uint64_t *out) {
  int fd = lws_get_socket_fd(wsi);
  uint64_t before, after;
  int queued;
  if (fd < 0 || !tcp_received(fd, &before)) return false;
  for (int tries = 1;; tries++) {
    if (ioctl(fd, SIOCINQ, &queued) != 0 || queued < 0) return false;
    if (queued == 0 && tries == 1) {
      after = before;
      break;
    }
    if (!tcp_received(fd, &after)) return false;
    if (after == before || tries == TAKEN_TRIES) break;
    before = after;
  }
  uint64_t got = high ? after : before;
  *out = got > (uint64_t)queued ? got - (uint64_t)queued : 0;
  return true;
}

/* What the connection's socket has given lws: reads on a plain socket
 * (reads.c), else bytes (socket_taken; `high` as there). The same kind
 * for all of a connection's life. */
static bool taken_count(struct lws *wsi, bool high, uint64_t *out) {
  if (!lws_is_ssl(wsi) && hark_http_reads(lws_get_socket_fd(wsi), out)) return true;
  return socket_taken(wsi, high, out);
}

/* The whole reply is with lws: keep the connection for the next request
 * (hark_http_on_unbound notes what the socket has given, or closes the
 * connection when that cannot be told). */
static int keep_alive(struct lws *wsi) { return lws_http_transaction_completed(wsi) ? -1 : 0; }

void hark_http_on_unbound(hark_http_conn *c) {
  if (!c || !c->kept) return; /* not an exchange lws completed */
  c->kept = false;
  atomic_fetch_sub_explicit(&c->loop->replying, 1, memory_order_relaxed);
  exchange_reset(c);
  timer_stop(c);
  hark_http_sock *s = sock_of(c->wsi);
  uint64_t taken;
  if (!s || !taken_count(c->wsi, false, &taken)) { /* what lws holds cannot be told */
    kill_conn(c->wsi);
    taken = 0; /* a head before the close: its count fails too, so it is refused */
  }
  if (!s) return;
  s->completed = true;
  s->note = taken + 1;
}

/* The head just parsed came out of lws's buffer of pipelined input. */
static bool head_was_buffered(struct lws *wsi) {
  hark_http_sock *s = sock_of(wsi);
  if (!s) return true; /* cannot be told: kill_conn is on its way */
  uint64_t note = s->note, taken;
  s->note = 0;
  if (!note) return false; /* the connection's first request: lws read it */
  return !taken_count(wsi, true, &taken) || taken + 1 == note;
}

/* ---- replies ------------------------------------------------------------------ */

void hark_http_body_begin(hark_buf *b) {
  b->len = 0;
  if (!hark_buf_reserve(b, HARK_HTTP_HEADROOM + 256)) hark_oom("reply", HARK_HTTP_HEADROOM);
  b->len = HARK_HTTP_HEADROOM;
}

void hark_http_put_error(hark_buf *b, const char *message) {
  hark_buf_puts(b, "{\"error\":");
  if (!hark_buf_put_jstr(b, message, strlen(message))) hark_oom("error reply", strlen(message));
  hark_buf_puts(b, "}");
}

/* A reply up to this size is counted in the in-flight budget whatever its
 * bound: an error reply always goes out, and a connection holds one reply
 * at a time. */
#define REPLY_ALWAYS (64u * 1024u)

/* Takes what reply `b` holds from the in-flight budget, or when it does
 * not fit, makes it a 503 saying so. */
static bool reply_charge(int *status, const char **ctype, hark_buf *b, size_t *charge) {
  *charge = b->cap;
  if (b->cap <= REPLY_ALWAYS) {
    hark_inflight_add(b->cap);
    return true;
  }
  if (hark_inflight_take(b->cap)) return true;
  unsigned long long now = hark_inflight_bytes(), max = hark_inflight_max();
  size_t len = b->len - HARK_HTTP_HEADROOM;
  hark_limit_hit(HARK_LIMIT_INFLIGHT_BYTES,
                 "http: a reply of %zu bytes dropped: %llu of %llu bytes in flight "
                 "(--max-inflight-bytes): 503",
                 len, now, max);
  char msg[300];
  snprintf(msg, sizeof msg,
           "the reply of %zu bytes does not fit in the server's in-flight memory budget now "
           "(%llu of %llu bytes held; --max-inflight-bytes); try again later",
           len, now, max);
  hark_buf_free(b);
  hark_http_body_begin(b);
  hark_http_put_error(b, msg);
  *ctype = JSON;
  *status = 503;
  *charge = b->cap;
  hark_inflight_add(b->cap);
  return false;
}

/*
 * A reply is written before the loop next waits, not when epoll next says
 * the socket is writable: a reply is made in a callback of lws (or of a
 * call's completion), where lws has not asked for it, and waiting for the
 * socket to be writable cost two epoll_ctl a request (libev adds EPOLLOUT
 * for lws's request and drops it after), as much as a reply's send on a
 * VM where every system call traps. So the connection is queued, and
 * before the loop waits (hark_http_flush, from http.c's pass) lws is told
 * the socket is writable, as its libev watcher would: it writes what it
 * buffered, or calls hark_http_on_writable. A socket that does not take
 * the whole reply is left to lws, which waits for it to be writable. lws
 * asks to be told of the socket's next writable moment once it completes
 * a kept-alive exchange; a second call tells it, so that its request and
 * its end fall in one pass and libev changes nothing in the kernel. lws
 * still asks for POLLOUT here too: on lws's own poll() (no libev) that is
 * how the reply goes, and otherwise the flush comes first.
 */
static void want_write(hark_http_conn *c) {
  lws_callback_on_writable(c->wsi);
  hark_http_loop *loop = c->loop;
  hark_http_sock *s = sock_of(c->wsi);
  if (!loop->ev || !s || s->flush_queued) return;
  s->flush_queued = true;
  s->flush_prev = loop->flush_tail;
  s->flush_next = NULL;
  if (loop->flush_tail)
    loop->flush_tail->flush_next = s;
  else
    loop->flush_head = s;
  loop->flush_tail = s;
}

void hark_http_flush(hark_http_loop *loop) {
  bool completed = false;
  hark_http_sock *s;
  while ((s = loop->flush_head)) {
    flush_unlink(s);
    struct lws_pollfd pfd = {
        .fd = lws_get_socket_fd(s->wsi), .events = LWS_POLLOUT, .revents = LWS_POLLOUT};
    if (pfd.fd < 0) continue;
    s->completed = false;
    loop->flushing = s; /* NULL again if the connection goes meanwhile */
    lws_service_fd(loop->ctx, &pfd);
    if (loop->flushing == s && s->completed) {
      completed = true;
      pfd.revents = LWS_POLLOUT; /* what lws asked for as it completed the exchange */
      lws_service_fd(loop->ctx, &pfd);
    }
    loop->flushing = NULL;
  }
  /* lws serves input it read ahead (a pipelined request) from its idle
   * watcher, which only its own events start: wake the loop for it. */
  if (completed && lws_service_adjust_timeout(loop->ctx, 1, 0) == 0) hark_http_loop_wake(loop);
}

/* The headers go right before the body, in the headroom `b` begins with,
 * so the reply leaves in one write. */
void hark_http_reply(hark_http_conn *c, int status, const char *ctype, hark_buf *b,
                     const char *hname, const char *hvalue) {
  struct lws *wsi = c->wsi;
  size_t charge;
  if (!reply_charge(&status, &ctype, b, &charge)) hname = NULL; /* it named the reply gone */
  unsigned char hdr[HARK_HTTP_HEADROOM], *start = hdr + LWS_PRE, *p = start,
                                         *end = hdr + sizeof hdr;
  char num[32];
  size_t body_len = b->len - HARK_HTTP_HEADROOM;
  /* Replying before the body is read: its bytes would be taken for the
   * next request, so this connection ends with this reply. */
  if (c->body_expected && !c->body_done) c->close_after = true;
  int n = snprintf(num, sizeof num, "%zu", body_len);
  bool bad =
      lws_add_http_header_status(wsi, (unsigned)status | LWSAHH_FLAG_NO_SERVER_NAME, &p, end) ||
      (ctype &&
       lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_TYPE, (const unsigned char *)ctype,
                                    (int)strlen(ctype), &p, end)) ||
      lws_add_http_header_by_token(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, (const unsigned char *)num,
                                   n, &p, end);
  if (!bad && hname)
    bad = lws_add_http_header_by_name(wsi, (const unsigned char *)hname,
                                      (const unsigned char *)hvalue, (int)strlen(hvalue), &p, end);
  if (!bad && (c->close_after || c->keep_alive_10))
    bad = lws_add_http_header_by_token(
        wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)(c->close_after ? "close" : "keep-alive"),
        c->close_after ? 5 : 10, &p, end);
  if (bad || lws_finalize_http_header(wsi, &p, end)) {
    HARK_ERROR("http: cannot build reply headers; closing the connection");
    hark_inflight_give(charge);
    hark_buf_free(b);
    lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
    return;
  }
  size_t hlen = (size_t)(p - start);
  out_free(c);
  c->out = *b;
  c->out_charge = charge;
  *b = (hark_buf){0};
  c->out_off = HARK_HTTP_HEADROOM - hlen;
  memcpy(c->out.data + c->out_off, start, hlen);
  c->state = CONN_REPLYING;
  atomic_fetch_add_explicit(&c->loop->replying, 1, memory_order_relaxed);
  timer_arm(c, TIMER_SEND, c->loop->http->opts.send_timeout_secs);
  want_write(c);
}

void hark_http_reply_error(hark_http_conn *c, int status, hark_error *err) {
  hark_buf b = {0};
  if (!status) status = hark_code_http_status(hark_error_code(err));
  hark_http_body_begin(&b);
  hark_http_put_error(&b, hark_error_message(err));
  hark_error_free(err);
  hark_http_reply(c, status, JSON, &b, NULL, NULL);
}

void hark_http_reply_text(hark_http_conn *c, int status, const char *ctype, const char *text,
                          size_t len) {
  hark_buf b = {0};
  hark_http_body_begin(&b);
  if (text && !hark_buf_append(&b, text, len)) {
    hark_buf_free(&b);
    hark_http_reply_error(c, 0, hark_error_new(HARK_ERR_INTERNAL, "out of memory"));
    return;
  }
  hark_http_reply(c, status, text ? ctype : NULL, &b, NULL, NULL);
}

/* Writes the next piece of the reply; on the last, finishes the exchange.
 * Returns -1 to close the connection. */
int hark_http_on_writable(hark_http_conn *c) {
  struct lws *wsi = c->wsi;
  if (c->state != CONN_REPLYING || c->kept) return 0;
  /* The socket took what went before: the client reads. */
  timer_arm(c, TIMER_SEND, c->loop->http->opts.send_timeout_secs);
  size_t left = c->out.len - c->out_off;
  if (left) {
    size_t n = left < WRITE_CHUNK ? left : WRITE_CHUNK;
    if (lws_write(wsi, (unsigned char *)c->out.data + c->out_off, n, LWS_WRITE_HTTP) < (int)n)
      return -1;
    c->out_off += n;
  }
  if (c->out_off < c->out.len) {
    lws_callback_on_writable(wsi);
    return 0;
  }
  /* Kept alive: lws sends what the socket would not take yet and then
   * completes the exchange in the same step (hark_http_on_unbound), so no
   * request the client sends once it has the whole reply can come in
   * before (it would be taken for pipelined input). */
  if (!c->close_after) {
    c->kept = true;
    return keep_alive(wsi);
  }
  /* Closing: once everything is out. */
  if (lws_partial_buffered(wsi)) {
    lws_callback_on_writable(wsi);
    return 0;
  }
  atomic_fetch_sub_explicit(&c->loop->replying, 1, memory_order_relaxed);
  exchange_reset(c);
  timer_stop(c);
  if (!c->body_expected || c->body_done) return -1;
  /* Closing with unread input makes the kernel send a reset, which can
   * destroy the reply before the client reads it. Instead end our side and
   * read (and drop) the rest of the body for a while, then close. */
  shutdown(lws_get_socket_fd(wsi), SHUT_WR);
  c->state = CONN_LINGER;
  lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, c->loop->http->opts.body_timeout_secs);
  timer_arm(c, TIMER_LINGER, LINGER_SECS); /* a trickling body does not hold it longer */
  return 0;
}

/* ---- request bodies ------------------------------------------------------------- */

static hark_error *too_large(const hark_http *http, unsigned long long size) {
  return hark_error_new(HARK_ERR_INVALID_ARG,
                        "request body of %llu bytes exceeds the maximum allowed of %zu bytes; "
                        "use --http-max-input-size to raise the limit",
                        size, http->opts.max_input_size);
}

/* A body buffer's first BODY_HEADER bytes record what it took from the
 * in-flight budget, so whoever frees it gives that back. */
#define BODY_HEADER 64u
#define BODY_FIRST (64u * 1024u) /* what a body's buffer starts with */

void hark_http_body_free(void *mem) {
  if (!mem) return;
  hark_inflight_give(*(size_t *)mem);
  free(mem);
}

/* The 503 for a body the in-flight budget cannot hold now. */
static hark_error *over_budget(const char *what, size_t want) {
  unsigned long long max = hark_inflight_max(), now = hark_inflight_bytes();
  hark_limit_hit(HARK_LIMIT_INFLIGHT_BYTES,
                 "http: %s of %zu bytes refused: %llu of %llu bytes in flight "
                 "(--max-inflight-bytes): 503",
                 what, want, now, max);
  return hark_error_new(HARK_ERR_UNAVAILABLE,
                        "%s of %zu bytes does not fit in the server's in-flight memory budget "
                        "now (%llu of %llu bytes held; --max-inflight-bytes); try again later",
                        what, want, now, max);
}

/* Grows the body buffer to hold `need` bytes: doubling, at most the
 * declared size, taken from the budget before it is allocated. The byte
 * at body_align lands 64-byte aligned (typed binary tensors are then used
 * in place). Client-sized: NULL, or an error for the client. */
static hark_error *body_grow(hark_http_conn *c, size_t need) {
  size_t cap = c->body_cap ? c->body_cap : BODY_FIRST;
  while (cap < need) cap = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
  if (cap > c->body_declared) cap = c->body_declared;
  size_t more = cap - c->body_cap;
  if (!hark_inflight_take(more)) return over_budget("a request body", c->body_declared);
  size_t pad = (64 - c->body_align % 64) % 64;
  void *mem = NULL;
  if (posix_memalign(&mem, 64, BODY_HEADER + pad + cap + 1) != 0) {
    hark_inflight_give(more);
    return hark_error_new(HARK_ERR_INTERNAL, "out of memory for a request body of %zu bytes",
                          c->body_declared);
  }
  *(size_t *)mem = cap;
  char *body = (char *)mem + BODY_HEADER + pad;
  if (c->body_len) memcpy(body, c->body, c->body_len);
  free(c->body_mem); /* what it took is part of the new one's */
  c->body_mem = mem;
  c->body = body;
  c->body_cap = cap;
  return NULL;
}

/* Reads a numeric header; false when absent or not a number. */
static bool header_number(struct lws *wsi, enum lws_token_indexes tok, unsigned long long *out) {
  char v[32], *end;
  int n = lws_hdr_copy(wsi, v, sizeof v, tok);
  if (n <= 0) return false;
  errno = 0;
  *out = strtoull(v, &end, 10);
  return v[0] >= '0' && v[0] <= '9' && !*end && !errno;
}

int hark_http_read_body(hark_http_conn *c, size_t align_at) {
  struct lws *wsi = c->wsi;
  const hark_http *http = c->loop->http;
  unsigned long long clen = 0;
  bool has_len = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
  if (has_len && !header_number(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, &clen)) {
    hark_http_reply_error(c, 0, hark_error_new(HARK_ERR_INVALID_ARG, "invalid Content-Length"));
    return -1;
  }
  /* libwebsockets 4.1 cannot decode chunked request bodies: say so, as
   * servers without chunked uploads do, rather than misread them. */
  if (!has_len && lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
    hark_http_reply_error(
        c, 411,
        hark_error_new(HARK_ERR_INVALID_ARG,
                       "chunked request bodies are not supported; send Content-Length"));
    return -1;
  }
  if (clen > http->opts.max_input_size) {
    hark_http_reply_error(c, 413, too_large(http, clen));
    return -1;
  }
  if (clen == 0) return 0;
  uint64_t budget = hark_inflight_max();
  if (budget && clen > budget) { /* could never fit: say so before any byte is sent */
    hark_http_reply_error(c, 0, over_budget("a request body", (size_t)clen));
    return -1;
  }
  c->body_align = align_at;
  c->body_declared = (size_t)clen;
  hark_error *err = body_grow(c, 1);
  if (err) {
    hark_http_reply_error(c, 0, err);
    return -1;
  }
  c->state = CONN_BODY;
  lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, http->opts.body_timeout_secs);
  timer_arm(c, TIMER_BODY, http->opts.body_deadline_secs);
  return 1;
}

char *hark_http_body(hark_http_conn *c, size_t *len) {
  *len = c->body_len;
  return c->body ? c->body : (char *)"";
}

void *hark_http_take_body(hark_http_conn *c) {
  void *mem = c->body_mem;
  c->body_mem = NULL; /* c->body stays readable: the taker frees it later */
  return mem;
}

/* The buffer grows as the body arrives, never past its Content-Length: a
 * peer sending more than it declared is refused. */
void hark_http_on_body(hark_http_conn *c, const char *in, size_t len) {
  if (c->state != CONN_BODY) return; /* replied early: drop the rest */
  if (len > c->body_declared - c->body_len) {
    hark_http_reply_error(c, 413, too_large(c->loop->http, (unsigned long long)c->body_len + len));
    return;
  }
  if (len > c->body_cap - c->body_len) {
    hark_error *err = body_grow(c, c->body_len + len);
    if (err) {
      hark_http_reply_error(c, 0, err);
      return;
    }
  }
  memcpy(c->body + c->body_len, in, len);
  c->body_len += len;
  lws_set_timeout(c->wsi, PENDING_TIMEOUT_HTTP_CONTENT, c->loop->http->opts.body_timeout_secs);
}

int hark_http_on_body_done(hark_http_conn *c) {
  /* Again: lws has input after this body, a pipelined request it must not
   * parse ("pipelined input"); the connection ends after this reply. */
  if (c->body_done && c->state != CONN_LINGER) {
    c->close_after = true;
    return 0;
  }
  c->body_done = true;
  if (c->state == CONN_LINGER) return -1;
  if (c->state != CONN_BODY) return 0;
  lws_set_timeout(c->wsi, NO_PENDING_TIMEOUT, 0);
  timer_stop(c);
  c->state = CONN_IDLE;
  const hark_http_handler *h = c->loop->http->handler;
  h->body(h->userp, c);
  return 0;
}

/* ---- request heads ---------------------------------------------------------------- */

static hark_http_method method_of(int m) {
  switch (m) {
  case LWSHUMETH_GET: return HARK_HTTP_GET;
  case LWSHUMETH_POST: return HARK_HTTP_POST;
  case LWSHUMETH_HEAD: return HARK_HTTP_HEAD;
  default: return HARK_HTTP_OTHER;
  }
}

int hark_http_on_request(hark_http_conn *c, const char *path) {
  struct lws *wsi = c->wsi;
  hark_http_loop *loop = c->loop;
  timer_stop(c); /* the head is in */
  /* lws armed its request timeout (--http-body-timeout-secs) for every
   * head; a body re-arms it for as long as it arrives, and nothing should
   * cut a request that is whole while it is worked on. */
  lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
  exchange_reset(c);
  c->close_after = false;
  c->body_expected = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;
  if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0) {
    char v[32];
    c->body_expected |=
        lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0 && strcmp(v, "0") != 0;
  }
  c->body_done = false;
  if (head_was_buffered(wsi) && c->body_expected) {
    hark_limit_hit(HARK_LIMIT_HTTP_PIPELINED,
                   "http: a pipelined request with a body came in the same read as the one "
                   "before it: 503, closing");
    reply_raw(wsi, "503 Service Unavailable",
              "a pipelined request with a body must wait for the reply before it; "
              "send it again on this or a new connection");
    return -1; /* lws closes the connection before it reads the body */
  }
  /* HTTP/1.1 keeps connections by default; an HTTP/1.0 client that asks
   * to must be told it was granted (lws keeps it either way). */
  char conn_hdr[32];
  c->keep_alive_10 = lws_hdr_copy(wsi, conn_hdr, sizeof conn_hdr, WSI_TOKEN_CONNECTION) > 0 &&
                     strcasecmp(conn_hdr, "keep-alive") == 0;
  if (atomic_load(&loop->http->stop)) {
    c->close_after = true;
    hark_http_reply_error(c, 0, hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down"));
    return 0;
  }
  char *uri;
  int ulen;
  hark_http_request req = {
      .method = method_of(lws_http_get_uri_and_method(wsi, &uri, &ulen)),
      .path = path,
      .metrics = lws_get_vhost(wsi) == loop->vh_metrics,
  };
  const hark_http_handler *h = loop->http->handler;
  h->head(h->userp, c, &req);
  return 0;
}

void hark_http_on_closed(hark_http_conn *c) {
  c->kept = false;
  if (c->call) {
    c->call->conn = NULL;                                  /* its done handler finds no client */
    if (c->call->cancel) hark_cancel_set(c->call->cancel); /* nor does the work */
  }
  c->call = NULL;
  if (c->state == CONN_REPLYING)
    atomic_fetch_sub_explicit(&c->loop->replying, 1, memory_order_relaxed);
  exchange_reset(c);
  c->close_after = false;
}
