/*
 * h2grpc.c — see h2grpc.h. The socket is blocking (SO_RCVTIMEO bounds a
 * call) and nghttp2 only frames: a call submits its request, then
 * alternates nghttp2_session_mem_send (everything pending goes out in one
 * send(): HEADERS and DATA together, and any SETTINGS, PING or
 * WINDOW_UPDATE acknowledgements) with recv() into nghttp2_session_mem_recv,
 * until its stream closes. The callbacks note the reply's :status,
 * grpc-status and grpc-message and count its DATA; the reply itself is
 * not kept (hark perf measures, it does not read results).
 */
#include "h2grpc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nghttp2/nghttp2.h>

#define H2GRPC_WINDOW (16 << 20)     /* flow-control window we grant, per stream and connection */
#define H2GRPC_MAX_REPLY (64u << 20) /* as GRPCC_MAX_MESSAGE: gRPC's receive limit here */
#define H2GRPC_READ 16384

enum {
  GS_OK = 0,
  GS_CANCELLED = 1,
  GS_UNKNOWN = 2,
  GS_DEADLINE = 4,
  GS_UNIMPLEMENTED = 12,
  GS_INTERNAL = 13,
  GS_UNAVAILABLE = 14,
  GS_RESOURCE_EXHAUSTED = 8,
  GS_PERMISSION_DENIED = 7,
  GS_UNAUTHENTICATED = 16
};

struct h2grpc {
  char host[256], port[16], authority[300], path[512], timeout[16];
  int timeout_ms;
  nghttp2_nv nv[8]; /* the request's headers, the same for every call */
  size_t n_nv;
  atomic_int fd; /* -1: not connected */
  nghttp2_session *session;
  unsigned calls; /* answered on this connection: may it be stale? */
  /* the call in flight */
  int32_t stream;
  const unsigned char *body;
  size_t body_len, body_off;
  bool closed, got_headers, too_big;
  int http_status, grpc_status; /* -1 until seen */
  uint32_t reset_code;          /* RST_STREAM's error code, when the stream was reset */
  size_t data_len;
  char message[512];
  uint8_t in[H2GRPC_READ];
};

/* ---- nghttp2 callbacks ------------------------------------------------------------- */

static ssize_t read_body(nghttp2_session *s, int32_t stream, uint8_t *buf, size_t len,
                         uint32_t *flags, nghttp2_data_source *src, void *user) {
  h2grpc *c = user;
  size_t n = c->body_len - c->body_off < len ? c->body_len - c->body_off : len;
  memcpy(buf, c->body + c->body_off, n);
  c->body_off += n;
  if (c->body_off == c->body_len) *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)n;
}

static int hex(uint8_t ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  return ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
}

/* grpc-message is percent-encoded (gRPC's HTTP/2 mapping). */
static void decode_message(const uint8_t *v, size_t n, char *out, size_t cap) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 1 < cap; i++) {
    if (v[i] == '%' && i + 2 < n && hex(v[i + 1]) >= 0 && hex(v[i + 2]) >= 0) {
      out[o++] = (char)(hex(v[i + 1]) << 4 | hex(v[i + 2]));
      i += 2;
    } else
      out[o++] = (char)v[i];
  }
  out[o] = '\0';
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name,
                     size_t namelen, const uint8_t *value, size_t valuelen, uint8_t flags,
                     void *user) {
  h2grpc *c = user;
  if (f->hd.stream_id != c->stream) return 0;
  c->got_headers = true;
  if (namelen == 7 && memcmp(name, ":status", 7) == 0)
    c->http_status = atoi((const char *)value);
  else if (namelen == 11 && memcmp(name, "grpc-status", 11) == 0)
    c->grpc_status = atoi((const char *)value);
  else if (namelen == 12 && memcmp(name, "grpc-message", 12) == 0)
    decode_message(value, valuelen, c->message, sizeof c->message);
  return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t stream, const uint8_t *data,
                   size_t len, void *user) {
  h2grpc *c = user;
  if (stream != c->stream) return 0;
  c->data_len += len;
  if (c->data_len <= H2GRPC_MAX_REPLY + 5 || c->too_big) return 0;
  c->too_big = true;
  return nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, stream, NGHTTP2_CANCEL)
             ? NGHTTP2_ERR_CALLBACK_FAILURE
             : 0;
}

static int on_stream_close(nghttp2_session *s, int32_t stream, uint32_t error_code, void *user) {
  h2grpc *c = user;
  if (stream != c->stream) return 0;
  c->closed = true;
  c->reset_code = error_code;
  return 0;
}

/* ---- the connection ----------------------------------------------------------------- */

static void disconnect(h2grpc *c) {
  int fd = atomic_exchange(&c->fd, -1);
  if (fd >= 0) close(fd);
  if (c->session) nghttp2_session_del(c->session);
  c->session = NULL;
  c->calls = 0;
}

static int new_session(h2grpc *c) {
  nghttp2_session_callbacks *cb;
  if (nghttp2_session_callbacks_new(&cb) != 0) return -1;
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  int rc = nghttp2_session_client_new(&c->session, cb, c);
  nghttp2_session_callbacks_del(cb);
  if (rc != 0) return -1;
  nghttp2_settings_entry iv[] = {
      {NGHTTP2_SETTINGS_ENABLE_PUSH, 0},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, H2GRPC_WINDOW},
  };
  if (nghttp2_submit_settings(c->session, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]) != 0 ||
      nghttp2_session_set_local_window_size(c->session, NGHTTP2_FLAG_NONE, 0, H2GRPC_WINDOW) != 0)
    return -1;
  return 0;
}

/* Connects to the first address that takes it. Returns 0, or -1 with
 * st->message set. */
static int connect_now(h2grpc *c, h2grpc_status *st) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai;
  int rc = getaddrinfo(c->host, c->port, &hints, &ai);
  if (rc) {
    snprintf(st->message, sizeof st->message, "cannot resolve %s: %s", c->host, gai_strerror(rc));
    return -1;
  }
  int fd = -1, err = 0;
  for (const struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    if (c->timeout_ms > 0) { /* on Linux SO_SNDTIMEO also bounds connect() */
      struct timeval tv = {.tv_sec = c->timeout_ms / 1000,
                           .tv_usec = (c->timeout_ms % 1000) * 1000};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd < 0) {
    snprintf(st->message, sizeof st->message, "cannot connect to %s: %s", c->authority,
             strerror(err));
    return -1;
  }
  atomic_store(&c->fd, fd);
  if (new_session(c) < 0) {
    disconnect(c);
    snprintf(st->message, sizeof st->message, "out of memory");
    return -1;
  }
  return 0;
}

/* Sends everything nghttp2 has queued, in one send() when it fits. */
static int flush(h2grpc *c, h2grpc_status *st) {
  for (;;) {
    const uint8_t *data;
    ssize_t n = nghttp2_session_mem_send(c->session, &data);
    if (n < 0) {
      snprintf(st->message, sizeof st->message, "HTTP/2: %s", nghttp2_strerror((int)n));
      return -1;
    }
    if (n == 0) return 0;
    int fd = atomic_load(&c->fd);
    while (n > 0) {
      ssize_t w = send(fd, data, (size_t)n, MSG_NOSIGNAL);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        snprintf(st->message, sizeof st->message, "send to %s: %s", c->authority,
                 errno == EAGAIN ? "timed out" : strerror(errno));
        return -1;
      }
      data += w;
      n -= w;
    }
  }
}

/* Reads and feeds nghttp2 once. Returns bytes read, 0 at end of stream, or -1. */
static ssize_t pump(h2grpc *c, h2grpc_status *st) {
  ssize_t r;
  do r = recv(atomic_load(&c->fd), c->in, sizeof c->in, 0);
  while (r < 0 && errno == EINTR);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      st->code = GS_DEADLINE;
      snprintf(st->message, sizeof st->message, "no reply within %d ms", c->timeout_ms);
    } else
      snprintf(st->message, sizeof st->message, "receive from %s: %s", c->authority,
               strerror(errno));
    return -1;
  }
  if (r == 0) {
    snprintf(st->message, sizeof st->message, "%s closed the connection", c->authority);
    return 0;
  }
  ssize_t n = nghttp2_session_mem_recv(c->session, c->in, (size_t)r);
  if (n < 0) {
    snprintf(st->message, sizeof st->message, "HTTP/2 from %s: %s", c->authority,
             nghttp2_strerror((int)n));
    return -1;
  }
  return r;
}

/* The status of the finished stream (gRPC's HTTP/2 mapping when no
 * grpc-status came). */
static void settle(h2grpc *c, h2grpc_status *st) {
  st->reply_len = c->data_len >= 5 ? c->data_len - 5 : 0;
  if (c->too_big) {
    st->code = GS_RESOURCE_EXHAUSTED;
    snprintf(st->message, sizeof st->message, "reply larger than %u bytes", H2GRPC_MAX_REPLY);
    return;
  }
  if (c->grpc_status >= 0) {
    st->code = c->grpc_status;
    snprintf(st->message, sizeof st->message, "%s", c->message);
    if (st->code == GS_OK && c->data_len < 5) {
      st->code = GS_INTERNAL;
      snprintf(st->message, sizeof st->message, "OK without a reply message");
    }
    st->transport = st->code == GS_UNAVAILABLE;
    return;
  }
  if (c->reset_code != NGHTTP2_NO_ERROR) {
    st->code = c->reset_code == NGHTTP2_REFUSED_STREAM ? GS_UNAVAILABLE
               : c->reset_code == NGHTTP2_CANCEL       ? GS_CANCELLED
                                                       : GS_INTERNAL;
    st->transport = st->code == GS_UNAVAILABLE;
    snprintf(st->message, sizeof st->message, "stream reset by %s: %s", c->authority,
             nghttp2_http2_strerror(c->reset_code));
    return;
  }
  int h = c->http_status;
  st->code = h == 400                                       ? GS_INTERNAL
             : h == 401                                     ? GS_UNAUTHENTICATED
             : h == 403                                     ? GS_PERMISSION_DENIED
             : h == 404                                     ? GS_UNIMPLEMENTED
             : h == 429 || h == 502 || h == 503 || h == 504 ? GS_UNAVAILABLE
                                                            : GS_UNKNOWN;
  st->transport = st->code == GS_UNAVAILABLE;
  snprintf(st->message, sizeof st->message, "HTTP %d from %s, without grpc-status", h,
           c->authority);
}

/* One attempt on the current (or a new) connection. Returns 0 when the
 * stream finished, 1 when the connection died before anything of the
 * reply came, -1 on any other failure (st says why). */
static int attempt(h2grpc *c, const unsigned char *framed, size_t len, h2grpc_status *st) {
  if (!c->session || !nghttp2_session_want_read(c->session)) disconnect(c);
  if (atomic_load(&c->fd) < 0 && connect_now(c, st) < 0) return -1;
  nghttp2_data_provider body = {.read_callback = read_body};
  c->body = framed;
  c->body_len = len;
  c->body_off = 0;
  c->closed = c->got_headers = c->too_big = false;
  c->http_status = c->grpc_status = -1;
  c->reset_code = NGHTTP2_NO_ERROR;
  c->data_len = 0;
  c->message[0] = '\0';
  bool stale = c->calls > 0;
  c->stream = nghttp2_submit_request(c->session, NULL, c->nv, c->n_nv, &body, NULL);
  if (c->stream < 0) { /* e.g. after the server's GOAWAY */
    snprintf(st->message, sizeof st->message, "HTTP/2: %s", nghttp2_strerror(c->stream));
    return stale && c->stream == NGHTTP2_ERR_START_STREAM_NOT_ALLOWED ? 1 : -1;
  }
  while (!c->closed) {
    if (flush(c, st) < 0) return stale && !c->got_headers ? 1 : -1;
    ssize_t r = pump(c, st);
    if (r <= 0) return r == 0 && stale && !c->got_headers ? 1 : -1;
  }
  if (flush(c, st) < 0) disconnect(c); /* acknowledgements: the next call reconnects */
  c->calls++;
  settle(c, st);
  return 0;
}

/* ---- the API ------------------------------------------------------------------------------ */

h2grpc *h2grpc_new(const char *host, const char *port, const char *path, int timeout_ms) {
  h2grpc *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  atomic_init(&c->fd, -1);
  bool v6 = strchr(host, ':') != NULL;
  snprintf(c->host, sizeof c->host, "%s", host);
  snprintf(c->port, sizeof c->port, "%s", port);
  snprintf(c->authority, sizeof c->authority, "%s%s%s:%s", v6 ? "[" : "", host, v6 ? "]" : "",
           port);
  snprintf(c->path, sizeof c->path, "%s", path);
  c->timeout_ms = timeout_ms;
  /* gRPC's timeout: at most 8 digits, here in milliseconds */
  snprintf(c->timeout, sizeof c->timeout, "%dm", timeout_ms < 100000000 ? timeout_ms : 99999999);
  const char *hdr[][2] = {
      {":method", "POST"},
      {":scheme", "http"},
      {":path", c->path},
      {":authority", c->authority},
      {"content-type", "application/grpc"},
      {"te", "trailers"},
      {"user-agent", "hark-perf"},
      {"grpc-timeout", c->timeout}, /* last: left out without a timeout */
  };
  c->n_nv = sizeof hdr / sizeof hdr[0] - (timeout_ms > 0 ? 0 : 1);
  for (size_t i = 0; i < c->n_nv;
       i++) /* the strings outlive the session: nghttp2 need not copy them */
    c->nv[i] = (nghttp2_nv){(uint8_t *)hdr[i][0], (uint8_t *)hdr[i][1], strlen(hdr[i][0]),
                            strlen(hdr[i][1]),
                            NGHTTP2_NV_FLAG_NO_COPY_NAME | NGHTTP2_NV_FLAG_NO_COPY_VALUE};
  return c;
}

void h2grpc_free(h2grpc *c) {
  if (!c) return;
  disconnect(c);
  free(c);
}

void h2grpc_abort(h2grpc *c) {
  int fd = atomic_load(&c->fd);
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

unsigned char *h2grpc_frame(const void *msg, size_t msg_len, size_t *len) {
  unsigned char *b = malloc(msg_len + 5);
  if (!b) return NULL;
  b[0] = 0;
  for (int i = 0; i < 4; i++) b[1 + i] = (unsigned char)(msg_len >> (8 * (3 - i)));
  memcpy(b + 5, msg, msg_len);
  *len = msg_len + 5;
  return b;
}

int h2grpc_call(h2grpc *c, const unsigned char *framed, size_t len, h2grpc_status *st) {
  *st = (h2grpc_status){.code = GS_UNAVAILABLE, .transport = true};
  int rc = attempt(c, framed, len, st);
  if (rc == 1) { /* a kept-alive connection the server had closed: once more on a new one */
    disconnect(c);
    *st = (h2grpc_status){.code = GS_UNAVAILABLE, .transport = true};
    rc = attempt(c, framed, len, st);
  }
  if (rc != 0) {
    disconnect(c); /* a failed call leaves the connection in no known state */
    if (rc == 1) st->code = GS_UNAVAILABLE;
    st->transport = st->code == GS_UNAVAILABLE;
    return -1;
  }
  return st->code == GS_OK ? 0 : -1;
}
