/*
 * http.c — the HTTP/1.1 front end: KServe v2 REST on the HTTP port and the
 * Prometheus exposition on the metrics port. Debian's libwebsockets serves
 * one context from one thread, so the front end runs N loops (http_loop,
 * --http-thread-count), each a context with its own listen socket on the
 * shared HTTP port (SO_REUSEPORT, accepted by the loop itself) and its own
 * thread; loop 0 runs on the thread in hark_http_run() and also serves the
 * metrics port. With one loop, lws listens as it always did. No loop ever
 * blocks.
 *
 * A request body accumulates in its connection's buffer (bounded by
 * max_input_size, with a stall timeout). An infer request is parsed on the
 * loop thread, its tensors pointing into that buffer, which is then handed
 * to the hark_request, and hark_server_infer() queues it. The response
 * comes back on a worker thread: the callback serializes it into the call's
 * reply buffer, pushes the call onto its loop's mutex-guarded completion
 * list and wakes that loop (lws_cancel_service); the loop drains the list
 * and writes each reply when its socket is writable. A cheap model's batch
 * may instead run on the loop thread itself, inside hark_server_infer()
 * (server.h, inline_max_us): the callback then pushes without a wake-up
 * and the loop drains as soon as the lws callback it was in returns.
 * Model load/unload, which finish on a server thread, take the same path. A call is shared by the
 * connection and the engine: a connection that closes first only marks it
 * orphaned (a loop-thread field), and the loop frees it when it is drained.
 * Every request gets exactly one reply; keep-alive connections then wait
 * for the next one. Shutdown drains: new infer requests and streams get
 * 503 while what is live on every loop finishes, up to the exit timeout
 * (loop 0 watches the others' counts); then every loop closes its own
 * streams and lets its last replies out. The routes and their handlers
 * live in http_routes.c;
 * WebSocket upgrades (Vosk's streaming protocol) are handed to ws.c, whose
 * engine requests complete through the same list.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frontend/http_impl.h"
#include "util/log.h"

#define WRITE_CHUNK (256u * 1024u)
#define SHUTDOWN_GRACE_NS (5ull * 1000000000ull)
#define STOP_GRACE_NS (1ull * 1000000000ull)
#define DEFAULT_EXIT_TIMEOUT_SECS 30

const char *const HARK_HTTP_JSON = "application/json";

/* ---- buffers and replies ------------------------------------------------- */

bool hark_http_body_begin(hark_kserve_buf *b) {
  b->len = 0;
  if (!hark_kserve_buf_reserve(b, HARK_HTTP_HEADROOM + 256)) return false;
  b->len = HARK_HTTP_HEADROOM;
  return true;
}

/* Frees what one exchange used; the call and close_after outlive it. */
static void conn_reset(http_conn *c) {
  free(c->rt.model);
  free(c->body_mem);
  hark_kserve_buf_free(&c->out);
  c->rt = (route){.kind = R_NONE, .version = -1};
  c->body_mem = c->body = NULL;
  c->body_len = c->body_cap = c->out_off = 0;
  c->state = CONN_IDLE;
}

/* The headers go right before the body, in the headroom `b` begins with,
 * so the reply leaves in one write. */
void hark_http_reply(struct lws *wsi, http_conn *c, int status, const char *ctype,
                     hark_kserve_buf *b, size_t infer_header_len) {
  http_loop *loop = hark_http_loop_of(wsi);
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
  if (!bad && infer_header_len) {
    n = snprintf(num, sizeof num, "%zu", infer_header_len);
    bad = lws_add_http_header_by_name(
        wsi, (const unsigned char *)"Inference-Header-Content-Length:", (const unsigned char *)num,
        n, &p, end);
  }
  if (!bad && (c->close_after || c->keep_alive_10))
    bad = lws_add_http_header_by_token(
        wsi, WSI_TOKEN_CONNECTION, (const unsigned char *)(c->close_after ? "close" : "keep-alive"),
        c->close_after ? 5 : 10, &p, end);
  if (bad || lws_finalize_http_header(wsi, &p, end)) {
    HARK_ERROR("http: cannot build reply headers; closing the connection");
    hark_kserve_buf_free(b);
    lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
    return;
  }
  size_t hlen = (size_t)(p - start);
  hark_kserve_buf_free(&c->out);
  c->out = *b;
  *b = (hark_kserve_buf){0};
  c->out_off = HARK_HTTP_HEADROOM - hlen;
  memcpy(c->out.data + c->out_off, start, hlen);
  c->state = CONN_REPLYING;
  atomic_fetch_add_explicit(&loop->replying, 1, memory_order_relaxed);
  lws_callback_on_writable(wsi);
}

void hark_http_reply_error_status(struct lws *wsi, http_conn *c, int status, hark_error *err) {
  hark_kserve_buf b = {0};
  if (!status) status = hark_code_http_status(hark_error_code(err));
  if (!hark_http_body_begin(&b) || !hark_kserve_buf_put_error(&b, hark_error_message(err))) {
    hark_kserve_buf_free(&b);
    hark_error_free(err);
    lws_set_timeout(wsi, PENDING_TIMEOUT_CLOSE_SEND, LWS_TO_KILL_ASYNC);
    return;
  }
  hark_error_free(err);
  hark_http_reply(wsi, c, status, HARK_HTTP_JSON, &b, 0);
}

void hark_http_reply_error(struct lws *wsi, http_conn *c, hark_error *err) {
  hark_http_reply_error_status(wsi, c, 0, err);
}

void hark_http_reply_text(struct lws *wsi, http_conn *c, int status, const char *ctype,
                          const char *text, size_t len) {
  hark_kserve_buf b = {0};
  if (!hark_http_body_begin(&b) || (text && !hark_kserve_buf_put(&b, text, len))) {
    hark_kserve_buf_free(&b);
    hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_INTERNAL, "out of memory"));
    return;
  }
  hark_http_reply(wsi, c, status, text ? ctype : NULL, &b, 0);
}

void hark_http_reply_doc(struct lws *wsi, http_conn *c, hark_kserve_buf *b, hark_error *err) {
  if (err) {
    hark_kserve_buf_free(b);
    hark_http_reply_error(wsi, c, err);
    return;
  }
  hark_http_reply(wsi, c, 200, HARK_HTTP_JSON, b, 0);
}

/* Writes the next piece of the reply; on the last, finishes the exchange.
 * Returns -1 to close the connection. */
static int on_writable(struct lws *wsi, http_conn *c) {
  http_loop *loop = hark_http_loop_of(wsi);
  hark_http *http = loop->http;
  if (c->state != CONN_REPLYING) return 0;
  size_t left = c->out.len - c->out_off;
  if (left) {
    size_t n = left < WRITE_CHUNK ? left : WRITE_CHUNK;
    if (lws_write(wsi, (unsigned char *)c->out.data + c->out_off, n, LWS_WRITE_HTTP) < (int)n)
      return -1;
    c->out_off += n;
  }
  /* lws keeps what the socket would not take and sends it before the next
   * writable callback: finish only once everything is out. */
  if (c->out_off < c->out.len || lws_partial_buffered(wsi)) {
    lws_callback_on_writable(wsi);
    return 0;
  }
  atomic_fetch_sub_explicit(&loop->replying, 1, memory_order_relaxed);
  conn_reset(c);
  if (!c->close_after) return lws_http_transaction_completed(wsi) ? -1 : 0;
  if (!c->body_expected || c->body_done) return -1;
  /* Closing with unread input makes the kernel send a reset, which can
   * destroy the reply before the client reads it. Instead end our side and
   * read (and drop) the rest of the body for a while, then close. */
  shutdown(lws_get_socket_fd(wsi), SHUT_WR);
  c->state = CONN_LINGER;
  lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, http->opts.body_timeout_secs);
  return 0;
}

/* ---- calls and the completion list ---------------------------------------- */

http_call *hark_http_call_new(http_loop *loop, struct lws *wsi) {
  http_call *call = calloc(1, sizeof *call);
  if (!call) return NULL;
  call->loop = loop;
  call->wsi = wsi;
  call->model_version = -1;
  return call;
}

void hark_http_call_free(http_call *call) {
  hark_kserve_buf_free(&call->out);
  free(call->model_name);
  free(call);
}

void hark_http_call_started(http_loop *loop, http_conn *c, http_call *call) {
  hark_http_outstanding_add(loop, 1);
  c->call = call;
  c->state = CONN_BUSY;
}

void hark_http_call_refused(http_loop *loop, http_conn *c, http_call *call) {
  hark_http_outstanding_add(loop, -1);
  c->call = NULL;
  hark_http_call_free(call);
}

/* The loop this thread runs, if it is a loop thread. */
static _Thread_local http_loop *tl_loop;

void hark_http_call_push(http_call *call) {
  http_loop *loop = call->loop;
  pthread_mutex_lock(&loop->lock);
  /* Else a wake-up is already on its way; and a loop that completed one of
   * its own calls (a batch run inline) drains when its callback returns. */
  bool wake = !loop->done_head && tl_loop != loop;
  if (tl_loop == loop) loop->drain_soon = true;
  if (loop->done_tail)
    loop->done_tail->next = call;
  else
    loop->done_head = call;
  loop->done_tail = call;
  loop->outstanding--;
  /* Under the lock, so hark_http_free cannot destroy the context between
   * the check and the call. */
  if (wake && loop->ctx_alive) lws_cancel_service(loop->ctx);
  if (!loop->outstanding) pthread_cond_broadcast(&loop->idle);
  pthread_mutex_unlock(&loop->lock);
}

void hark_http_outstanding_add(http_loop *loop, int delta) {
  pthread_mutex_lock(&loop->lock);
  loop->outstanding = (uint32_t)((int64_t)loop->outstanding + delta);
  if (!loop->outstanding) pthread_cond_broadcast(&loop->idle);
  pthread_mutex_unlock(&loop->lock);
}

void hark_http_call_set_error(http_call *call, hark_error *err) {
  call->status = hark_code_http_status(hark_error_code(err));
  call->ctype = HARK_HTTP_JSON;
  call->infer_header_len = 0;
  if (!hark_http_body_begin(&call->out) ||
      !hark_kserve_buf_put_error(&call->out, hark_error_message(err))) {
    call->status = 500;
    call->out.len = HARK_HTTP_HEADROOM;
  }
}

/* Loop thread: sends every finished call's reply. */
static void drain_completions(http_loop *loop) {
  pthread_mutex_lock(&loop->lock);
  http_call *call = loop->done_head;
  loop->done_head = loop->done_tail = NULL;
  pthread_mutex_unlock(&loop->lock);
  while (call) {
    http_call *next = call->next;
    if (call->ws) {
      hark_ws_complete(loop, call);
      call = next;
      continue;
    }
    if (call->wsi) {
      http_conn *c = lws_wsi_user(call->wsi);
      c->call = NULL;
      hark_http_reply(call->wsi, c, call->status, call->ctype, &call->out, call->infer_header_len);
    }
    hark_http_call_free(call);
    call = next;
  }
}

/* ---- request bodies --------------------------------------------------------------- */

static hark_error *too_large(hark_http *http, unsigned long long size) {
  return hark_error_new(HARK_ERR_INVALID_ARG,
                        "request body of %llu bytes exceeds the maximum allowed of %zu bytes; "
                        "use --http-max-input-size to raise the limit",
                        size, http->opts.max_input_size);
}

/* Sizes the body buffer so the binary part (after the JSON header) starts
 * 64-byte aligned and typed tensors can be used in place. */
static bool body_alloc(http_conn *c, size_t cap) {
  size_t pad = c->header_len == HARK_KSERVE_NO_HEADER_LEN ? 0 : (64 - c->header_len % 64) % 64;
  c->body_mem = malloc(cap + pad + 1);
  if (!c->body_mem) return false;
  c->body = c->body_mem + pad;
  c->body_cap = cap;
  return true;
}

/* Content-Length is known and within bounds, so the buffer is big enough;
 * the check still guards against a peer sending more than it declared. */
static bool body_append(struct lws *wsi, http_conn *c, const char *in, size_t len) {
  hark_http *http = hark_http_loop_of(wsi)->http;
  if (len > c->body_cap - c->body_len) {
    hark_http_reply_error_status(wsi, c, 413,
                                 too_large(http, (unsigned long long)c->body_len + len));
    return false;
  }
  memcpy(c->body + c->body_len, in, len);
  c->body_len += len;
  return true;
}

/* Reads a numeric header; false when absent or not a number. */
static bool header_number(struct lws *wsi, enum lws_token_indexes tok, const char *custom,
                          unsigned long long *out) {
  char v[32], *end;
  int n = custom ? lws_hdr_custom_copy(wsi, v, sizeof v, custom, (int)strlen(custom))
                 : lws_hdr_copy(wsi, v, sizeof v, tok);
  if (n <= 0) return false;
  errno = 0;
  *out = strtoull(v, &end, 10);
  return v[0] >= '0' && v[0] <= '9' && !*end && !errno;
}

/* A POST arrived: size up its body, or handle it now if it has none. */
static void begin_post(struct lws *wsi, http_conn *c) {
  hark_http *http = hark_http_loop_of(wsi)->http;
  unsigned long long clen = 0, hlen;
  bool has_len = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0;
  if (has_len && !header_number(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH, NULL, &clen)) {
    hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_INVALID_ARG, "invalid Content-Length"));
    return;
  }
  /* libwebsockets 4.1 cannot decode chunked request bodies: say so, as
   * servers without chunked uploads do, rather than misread them. */
  if (!has_len && lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0) {
    hark_http_reply_error_status(
        wsi, c, 411,
        hark_error_new(HARK_ERR_INVALID_ARG,
                       "chunked request bodies are not supported; send Content-Length"));
    return;
  }
  c->header_len = HARK_KSERVE_NO_HEADER_LEN;
  if (lws_hdr_custom_length(wsi, "inference-header-content-length:", 32) >= 0) {
    if (!header_number(wsi, 0, "inference-header-content-length:", &hlen)) {
      hark_http_reply_error(
          wsi, c,
          hark_error_new(HARK_ERR_INVALID_ARG, "Inference-Header-Content-Length is not a number"));
      return;
    }
    c->header_len = (size_t)hlen;
  }
  if (clen > http->opts.max_input_size) {
    hark_http_reply_error_status(wsi, c, 413, too_large(http, clen));
    return;
  }
  if (clen == 0) {
    hark_http_handle_post(wsi, c);
    return;
  }
  if (!body_alloc(c, (size_t)clen)) {
    hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_INTERNAL, "out of memory"));
    return;
  }
  c->state = CONN_BODY;
  lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, http->opts.body_timeout_secs);
}

/* ---- the lws callback ---------------------------------------------------------------- */

static int on_http_request(struct lws *wsi, http_conn *c, const char *path) {
  http_loop *loop = hark_http_loop_of(wsi);
  hark_http *http = loop->http;
  conn_reset(c);
  c->close_after = false;
  c->body_expected = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_TRANSFER_ENCODING) > 0;
  if (lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0) {
    char v[32];
    c->body_expected |=
        lws_hdr_copy(wsi, v, sizeof v, WSI_TOKEN_HTTP_CONTENT_LENGTH) > 0 && strcmp(v, "0") != 0;
  }
  c->body_done = false;
  /* HTTP/1.1 keeps connections by default; an HTTP/1.0 client that asks
   * to must be told it was granted (lws keeps it either way). */
  char conn_hdr[32];
  c->keep_alive_10 = lws_hdr_copy(wsi, conn_hdr, sizeof conn_hdr, WSI_TOKEN_CONNECTION) > 0 &&
                     strcasecmp(conn_hdr, "keep-alive") == 0;
  if (atomic_load(&http->stop)) {
    c->close_after = true;
    hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down"));
    return 0;
  }
  char *uri;
  int ulen, method = lws_http_get_uri_and_method(wsi, &uri, &ulen);
  hark_error *err = hark_http_route_parse(path, lws_get_vhost(wsi) == loop->vh_metrics, &c->rt);
  if (err) {
    hark_http_reply_error(wsi, c, err);
    return 0;
  }
  if (c->rt.kind == R_NONE) {
    hark_http_reply_error(wsi, c, hark_error_new(HARK_ERR_NOT_FOUND, "Not Found"));
    return 0;
  }
  /* Draining: no new work (answered before the body is read, so the
   * connection closes after it); probes, metadata and metrics still answer. */
  if (c->rt.kind == R_INFER && hark_server_is_draining(http->server)) {
    c->close_after = true;
    hark_http_reply_error(wsi, c,
                          hark_error_new(HARK_ERR_UNAVAILABLE,
                                         "Server is shutting down: not accepting new requests"));
    return 0;
  }
  if (c->rt.kind == R_STREAM) {
    hark_http_reply_error_status(
        wsi, c, 426,
        hark_error_new(HARK_ERR_INVALID_ARG,
                       "this is a WebSocket endpoint (Vosk's streaming protocol): connect "
                       "with a WebSocket client"));
    return 0;
  }
  bool post = hark_http_route_is_post(c->rt.kind);
  if (method == LWSHUMETH_HEAD) { /* a HEAD reply must not carry a body */
    hark_http_reply_text(wsi, c, 405, NULL, NULL, 0);
    return 0;
  }
  if (method != (post ? LWSHUMETH_POST : LWSHUMETH_GET)) {
    hark_http_reply_error_status(wsi, c, 405,
                                 hark_error_new(HARK_ERR_INVALID_ARG, "Method Not Allowed"));
    return 0;
  }
  if (post)
    begin_post(wsi, c);
  else
    hark_http_handle_get(wsi, c);
  return 0;
}

static void on_closed(http_loop *loop, http_conn *c) {
  hark_ws_release_slot(loop->http, c); /* an upgrade that never became a stream */
  if (c->call) c->call->wsi = NULL; /* orphaned: freed when it completes */
  c->call = NULL;
  if (c->state == CONN_REPLYING)
    atomic_fetch_sub_explicit(&loop->replying, 1, memory_order_relaxed);
  conn_reset(c);
  c->close_after = false;
}

static int lws_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                     size_t len) {
  http_conn *c = user;
  http_loop *loop = wsi ? hark_http_loop_of(wsi) : NULL;
  switch (reason) {
    case LWS_CALLBACK_HTTP: return on_http_request(wsi, c, in ? (const char *)in : "");
    case LWS_CALLBACK_HTTP_BODY:
      if (c->state != CONN_BODY) return 0; /* replied early: drop the rest */
      if (body_append(wsi, c, in, len))
        lws_set_timeout(wsi, PENDING_TIMEOUT_HTTP_CONTENT, loop->http->opts.body_timeout_secs);
      return 0;
    case LWS_CALLBACK_HTTP_BODY_COMPLETION:
      c->body_done = true;
      if (c->state == CONN_LINGER) return -1;
      if (c->state != CONN_BODY) return 0;
      lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
      c->state = CONN_IDLE;
      hark_http_handle_post(wsi, c);
      return 0;
    case LWS_CALLBACK_HTTP_WRITEABLE: return on_writable(wsi, c);
    case LWS_CALLBACK_CLOSED_HTTP:
      if (c) on_closed(loop, c);
      return 0;
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
      if (loop) drain_completions(loop);
      return 0;
    case LWS_CALLBACK_HTTP_CONFIRM_UPGRADE:
      return hark_ws_confirm_upgrade(wsi, c, in ? (const char *)in : "");
    case LWS_CALLBACK_ESTABLISHED: return hark_ws_established(wsi, c);
    case LWS_CALLBACK_RECEIVE: return hark_ws_receive(wsi, c, in, len);
    case LWS_CALLBACK_SERVER_WRITEABLE: return hark_ws_writable(wsi, c);
    case LWS_CALLBACK_CLOSED:
      if (c) hark_ws_closed(loop, c);
      return 0;
    default: return lws_callback_http_dummy(wsi, reason, user, in, len);
  }
}

/* Every event of the HTTP protocol, then the replies of calls that
 * finished on this thread while it was handled (hark_http_call_push). */
static int on_lws_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                        size_t len) {
  int rc = lws_event(wsi, reason, user, in, len);
  if (tl_loop && tl_loop->drain_soon) {
    tl_loop->drain_soon = false;
    drain_completions(tl_loop);
  }
  return rc;
}

/* ---- our own listen sockets ------------------------------------------------ */

/* With several loops each has a listening socket of its own on the HTTP
 * port (SO_REUSEPORT: the kernel spreads connections over them), which the
 * loop polls as a raw descriptor: when it is readable the loop accepts and
 * hands each connection to its HTTP vhost, all on its own thread. (Debian's
 * lws sets SO_REUSEPORT only in its multi-threaded builds.) */
#define ACCEPT_BATCH 64

static int on_listen_event(struct lws *wsi, enum lws_callback_reasons reason, void *user,
                           void *in, size_t len) {
  (void)user, (void)in, (void)len;
  if (reason != LWS_CALLBACK_RAW_RX_FILE) return 0;
  http_loop *loop = hark_http_loop_of(wsi);
  for (int i = 0; i < ACCEPT_BATCH; i++) {
    int fd = accept4(loop->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        HARK_WARN("http: cannot accept a connection: %s", strerror(errno));
      break;
    }
    int one = 1; /* as lws sets on the connections it accepts */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (!lws_adopt_socket_vhost(loop->vh_http, fd)) /* closes fd */
      HARK_WARN("http: cannot take a new connection (out of memory?)");
  }
  return 0;
}

static const struct lws_protocols protocols[] = {
    {"hark-http", on_lws_event, sizeof(http_conn), 0, 0, NULL, 0},
    {"hark-listen", on_listen_event, 0, 0, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* A non-blocking listening socket on address:port (NULL: every interface,
 * IPv6 and IPv4 where the machine has IPv6, as lws binds), shared with the
 * other loops; -1 with errno set. */
static int listen_socket(const char *address, int port) {
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = address ? AF_UNSPEC : AF_INET6;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);
  int fd = -1, rc = getaddrinfo(address, serv, &hints, &res);
  if (rc != 0 && !address) { /* no IPv6 */
    hints.ai_family = AF_INET;
    rc = getaddrinfo(NULL, serv, &hints, &res);
  }
  if (rc != 0) {
    errno = EINVAL;
    return -1;
  }
  fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 && !address && res->ai_family == AF_INET6) { /* IPv6 compiled, not configured */
    freeaddrinfo(res);
    hints.ai_family = AF_INET;
    if (getaddrinfo(NULL, serv, &hints, &res) != 0) return -1;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  }
  int one = 1, zero = 0;
  if (fd >= 0 &&
      (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
       setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one) ||
       (!address && res->ai_family == AF_INET6 &&
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero)) ||
       bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, SOMAXCONN))) {
    int e = errno;
    close(fd);
    errno = e;
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

/* ---- lifecycle ------------------------------------------------------------------------ */


/* How many loops serve the HTTP port. Port 0 (the kernel picks one) and an
 * interface name instead of an address (only lws's own listener knows
 * those) get one, which lws's listener serves as it always did. */
static unsigned loop_count(const hark_http_options *opts) {
  if (opts->http_port <= 0) return 1;
  if (opts->address) {
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, opts->address, buf) != 1 && inet_pton(AF_INET6, opts->address, buf) != 1)
      return 1;
  }
  unsigned n = opts->threads;
  if (!n) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = cores < 1 ? 1 : (unsigned)cores;
  }
  return n > HARK_HTTP_MAX_THREADS ? HARK_HTTP_MAX_THREADS : n;
}

/* The loops' listen sockets share the port (SO_REUSEPORT), so another
 * process (of the same user) could bind it too, and the two would split
 * the clients. A plain
 * bind (SO_REUSEADDR as lws sets it, so only listening sockets count, not
 * connections in TIME_WAIT) fails while anyone listens there: try one on
 * every address the loops will bind, then close it. */
static bool port_taken(const char *address, int port) {
  struct addrinfo hints, *res, *ai;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST | AI_NUMERICSERV;
  char serv[16];
  snprintf(serv, sizeof serv, "%d", port);
  if (getaddrinfo(address, serv, &hints, &res) != 0) return false; /* lws will say */
  bool taken = false;
  for (ai = res; ai && !taken; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue; /* no IPv6 here: lws will not bind it either */
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    taken = bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(res);
  return taken;
}

static void lws_log_to_hark(int level, const char *line) {
  size_t n = strlen(line);
  while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
  hark_log(level == LLL_ERR ? HARK_LOG_ERROR : HARK_LOG_WARN, "http: %.*s", (int)n, line);
}

/* port: CONTEXT_PORT_NO_LISTEN_SERVER for a vhost fed by our own socket. */
static struct lws_vhost *make_vhost(http_loop *loop, const char *name, int port) {
  hark_http *http = loop->http;
  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.vhost_name = name;
  info.port = port;
  info.iface = http->opts.address;
  info.protocols = protocols;
  info.keepalive_timeout = 75; /* nginx's default idle keep-alive */
  info.timeout_secs = (unsigned)http->opts.body_timeout_secs;
  info.options = LWS_SERVER_OPTION_FAIL_UPON_UNABLE_TO_BIND;
  /* lws binds an IPv4 address only on an IPv4 socket. */
  if (info.iface && strchr(info.iface, '.')) info.options |= LWS_SERVER_OPTION_DISABLE_IPV6;
  return lws_create_vhost(loop->ctx, &info);
}

static void on_tick(lws_sorted_usec_list_t *sul);

/* Makes loop `i`'s context and binds its vhosts. */
static hark_error *loop_new(hark_http *http, unsigned i) {
  http_loop *loop = calloc(1, sizeof *loop);
  if (!loop) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  http->loops[i] = loop;
  loop->http = http;
  loop->index = i;
  loop->listen_fd = -1;
  atomic_init(&loop->replying, 0);
  pthread_mutex_init(&loop->lock, NULL);
  pthread_cond_init(&loop->idle, NULL);

  struct lws_context_creation_info info;
  memset(&info, 0, sizeof info);
  info.options = LWS_SERVER_OPTION_EXPLICIT_VHOSTS;
  info.user = loop;
  info.pt_serv_buf_size = 64 * 1024; /* fewer, larger reads of bodies */
  info.max_http_header_pool2 = 1024; /* header tables for concurrent requests */
  info.count_threads = 1;
  /* lws re-arms its request body timeout from this (the context's, not the
   * vhost's) after each piece of body: make it the operator's. */
  info.timeout_secs = (unsigned)http->opts.body_timeout_secs;
  loop->ctx = lws_create_context(&info);
  if (!loop->ctx) return hark_error_new(HARK_ERR_INTERNAL, "cannot create the HTTP event loop");
  loop->ctx_alive = true;
  hark_ws_start(loop);
  const hark_http_options *opts = &http->opts;
  const char *where = opts->address ? opts->address : "0.0.0.0";
  bool own = http->n_loops > 1;
  if (opts->http_port >= 0 &&
      !(loop->vh_http =
            make_vhost(loop, "http", own ? CONTEXT_PORT_NO_LISTEN_SERVER : opts->http_port)))
    return hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for HTTP on %s:%d (in use?)", where,
                          opts->http_port);
  if (own) {
    int fd = listen_socket(opts->address, opts->http_port);
    if (fd < 0)
      return hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for HTTP on %s:%d (in use?): %s",
                            where, opts->http_port, strerror(errno));
    loop->listen_fd = fd;
    lws_sock_file_fd_type desc = {.filefd = fd};
    if (!lws_adopt_descriptor_vhost(loop->vh_http, LWS_ADOPT_RAW_FILE_DESC, desc, "hark-listen",
                                    NULL)) /* closes fd */
      return hark_error_new(HARK_ERR_INTERNAL, "cannot poll the HTTP listen socket");
  }
  if (i == 0 && opts->metrics_port >= 0 &&
      !(loop->vh_metrics = make_vhost(loop, "metrics", opts->metrics_port)))
    return hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for metrics on %s:%d (in use?)",
                          where, opts->metrics_port);
  return NULL;
}

hark_error *hark_http_new(hark_server *server, const hark_http_options *opts, hark_http **out) {
  hark_http *http = calloc(1, sizeof *http);
  if (!http) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  http->server = server;
  http->opts = *opts;
  if (!http->opts.max_input_size) http->opts.max_input_size = 64u << 20;
  if (http->opts.body_timeout_secs <= 0) http->opts.body_timeout_secs = 30;
  atomic_init(&http->stop, false);
  atomic_init(&http->stop_now, false);
  atomic_init(&http->draining, false);
  atomic_init(&http->n_streams, 0);
  lws_set_log_level(LLL_ERR | LLL_WARN, lws_log_to_hark);
  http->n_loops = loop_count(opts);
  const char *where = opts->address ? opts->address : "0.0.0.0";
  if (http->n_loops > 1 && port_taken(opts->address, opts->http_port)) {
    http->n_loops = 0;
    hark_http_free(http);
    return hark_error_new(HARK_ERR_UNAVAILABLE, "cannot listen for HTTP on %s:%d (in use?)", where,
                          opts->http_port);
  }
  http->loops = calloc(http->n_loops, sizeof *http->loops);
  if (!http->loops) {
    http->n_loops = 0;
    hark_http_free(http);
    return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  }
  for (unsigned i = 0; i < http->n_loops; i++) {
    hark_error *err = loop_new(http, i);
    if (err) {
      hark_http_free(http);
      return err;
    }
  }
  *out = http;
  return NULL;
}

/* While shutting down: wake the loop now and then so the grace period ends
 * even when nothing happens. */
static void on_tick(lws_sorted_usec_list_t *sul) {
  http_loop *loop = lws_container_of(sul, http_loop, tick);
  lws_sul_schedule(loop->ctx, 0, &loop->tick, on_tick, 100 * LWS_US_PER_MS);
}

/* Any thread: requests of this loop in the engine or with replies not yet
 * written. */
static bool loop_has_work(http_loop *loop) {
  pthread_mutex_lock(&loop->lock);
  bool b = loop->outstanding > 0 || loop->done_head;
  pthread_mutex_unlock(&loop->lock);
  return b || atomic_load_explicit(&loop->replying, memory_order_relaxed) > 0;
}

/* The same for every loop, and any stream open on any. */
static bool has_work(hark_http *http) {
  if (atomic_load(&http->n_streams) > 0) return true;
  for (unsigned i = 0; i < http->n_loops; i++)
    if (loop_has_work(http->loops[i])) return true;
  return false;
}

/* Shutting down, loop thread: tells the loop's streams to go (once); true
 * while it has anything left to finish. */
static bool busy(http_loop *loop) {
  bool streams = hark_ws_close_all(loop);
  return loop_has_work(loop) || streams;
}

/* Loop 0, draining: true once everything live on every loop has finished
 * or the exit timeout passed. */
static bool drained(http_loop *loop, uint64_t *deadline) {
  hark_http *http = loop->http;
  uint64_t now = hark_now_ns();
  if (!*deadline) {
    int secs = http->opts.exit_timeout_secs < 0   ? 0
               : http->opts.exit_timeout_secs > 0 ? http->opts.exit_timeout_secs
                                                  : DEFAULT_EXIT_TIMEOUT_SECS;
    *deadline = now + (uint64_t)secs * 1000000000ull;
    lws_sul_schedule(loop->ctx, 0, &loop->tick, on_tick, 100 * LWS_US_PER_MS);
    HARK_INFO("draining: not ready, refusing new requests and streams; waiting up to %d s for "
              "%u stream(s) and the requests in flight",
              secs, (unsigned)atomic_load(&http->n_streams));
  }
  if (!has_work(http) &&
      (!http->opts.drain_idle || http->opts.drain_idle(http->opts.drain_idle_userp))) {
    HARK_INFO("drained: every stream and request finished");
    return true;
  }
  if (now < *deadline) return false;
  HARK_WARN("exit timeout: closing %u stream(s) still open",
            (unsigned)atomic_load(&http->n_streams));
  return true;
}

/* Async-signal-safe: lws_cancel_service only writes to a loop's wake-up
 * pipe. */
static void wake_all(hark_http *http) {
  for (unsigned i = 0; i < http->n_loops; i++) {
    http_loop *loop = http->loops[i];
    if (loop && loop->ctx) lws_cancel_service(loop->ctx);
  }
}

/* One loop's life: serve until told to stop (loop 0 also ends the drain
 * for all), then close its streams (1001) and let the requests in flight
 * finish and their replies go out (new requests get 503), for a while;
 * briefly when told to stop at once. */
static void loop_run(http_loop *loop) {
  hark_http *http = loop->http;
  uint64_t drain_deadline = 0;
  tl_loop = loop;
  hark_server_thread_may_inline(true); /* cheap batches run here (server.h) */
  while (!atomic_load(&http->stop)) {
    if (lws_service(loop->ctx, 0) < 0) break;
    if (loop->index == 0 && atomic_load(&http->draining) && drained(loop, &drain_deadline))
      break;
  }
  uint64_t deadline =
      hark_now_ns() + (atomic_load(&http->stop_now) ? STOP_GRACE_NS : SHUTDOWN_GRACE_NS);
  if (!atomic_exchange(&http->stop, true)) wake_all(http); /* the first to stop tells the rest */
  lws_sul_schedule(loop->ctx, 0, &loop->tick, on_tick, 100 * LWS_US_PER_MS);
  while (busy(loop) && hark_now_ns() < deadline)
    if (lws_service(loop->ctx, 0) < 0) break;
  lws_sul_cancel(&loop->tick);
  hark_server_thread_may_inline(false);
  tl_loop = NULL;
}

static void *loop_thread(void *arg) {
  loop_run(arg);
  return NULL;
}

void hark_http_run(hark_http *http) {
  unsigned started = 1;
  for (; started < http->n_loops; started++) {
    http_loop *loop = http->loops[started];
    int rc = pthread_create(&loop->thread, NULL, loop_thread, loop);
    if (rc) {
      /* Its socket would take connections nobody serves: close them all. */
      HARK_ERROR("http: cannot start event loop thread %u (%s); serving with %u", started,
                 strerror(rc), started);
      for (unsigned i = started; i < http->n_loops; i++) {
        http_loop *l = http->loops[i];
        hark_ws_stop(l);
        pthread_mutex_lock(&l->lock);
        l->ctx_alive = false;
        pthread_mutex_unlock(&l->lock);
        struct lws_context *ctx = l->ctx;
        l->ctx = NULL;
        lws_context_destroy(ctx);
      }
      break;
    }
  }
  loop_run(http->loops[0]);
  for (unsigned i = 1; i < started; i++) pthread_join(http->loops[i]->thread, NULL);
}

void hark_http_drain(hark_http *http) {
  hark_server_begin_drain(http->server);
  atomic_store(&http->draining, true);
  wake_all(http);
}

void hark_http_stop(hark_http *http) {
  atomic_store(&http->stop_now, true);
  atomic_store(&http->stop, true);
  wake_all(http);
}

/* Closes the loop's context (its connections' calls are orphaned). */
static void loop_close(http_loop *loop) {
  if (!loop->ctx) return;
  hark_ws_stop(loop);
  pthread_mutex_lock(&loop->lock);
  loop->ctx_alive = false;
  pthread_mutex_unlock(&loop->lock);
  struct lws_context *ctx = loop->ctx;
  loop->ctx = NULL;
  lws_context_destroy(ctx);
}

/* Calls still in the engine will complete (every request gets a final);
 * their callbacks need the loop, so wait for them, then free it. */
static void loop_free(http_loop *loop) {
  pthread_mutex_lock(&loop->lock);
  while (loop->outstanding) pthread_cond_wait(&loop->idle, &loop->lock);
  http_call *call = loop->done_head;
  loop->done_head = loop->done_tail = NULL;
  pthread_mutex_unlock(&loop->lock);
  while (call) {
    http_call *next = call->next;
    if (call->ws)
      hark_ws_discard(call);
    else
      hark_http_call_free(call);
    call = next;
  }
  hark_ws_free_all(loop);
  pthread_cond_destroy(&loop->idle);
  pthread_mutex_destroy(&loop->lock);
  free(loop);
}

void hark_http_free(hark_http *http) {
  if (!http) return;
  /* Every context first: a stream closing on one loop may still send its
   * sequence's END through the engine. */
  for (unsigned i = 0; i < http->n_loops; i++)
    if (http->loops[i]) loop_close(http->loops[i]);
  for (unsigned i = 0; i < http->n_loops; i++)
    if (http->loops[i]) loop_free(http->loops[i]);
  free(http->loops);
  free(http);
}
