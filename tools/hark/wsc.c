/*
 * wsc.c — see wsc.h. The connection is a small state machine fed by epoll
 * events: CONNECTING (non-blocking connect) → HANDSHAKE (our upgrade
 * request is queued at connect time; we parse the server's response head
 * and check Sec-WebSocket-Accept = base64(SHA-1(key + GUID))) → OPEN →
 * CLOSING → CLOSED. Input is one buffer parsed in place: complete frames
 * are consumed from its front, a partial frame waits for more bytes.
 * Output is one buffer of whole, already masked frames; a frame is never
 * split between messages, so pongs and closes can be queued at any time.
 */
#include "wsc.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#define WSC_DEFAULT_MAX_MESSAGE (1u << 20)
#define WSC_MAX_HEAD 16384    /* the server's HTTP response head */
#define WSC_MAX_ERROR_BODY 4096 /* what we keep of a refused upgrade's body */
#define WSC_READ_CHUNK 65536
#define WSC_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

/* ---- SHA-1 (FIPS 180-4) and base64, only for the handshake -------------- */

static uint32_t rol(uint32_t x, int n) { return x << n | x >> (32 - n); }

static void sha1_block(uint32_t h[5], const unsigned char *p) {
  uint32_t w[80];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 | p[4 * t + 3];
  for (int t = 16; t < 80; t++) w[t] = rol(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
  for (int t = 0; t < 80; t++) {
    uint32_t f, k;
    if (t < 20) f = (b & c) | (~b & d), k = 0x5A827999;
    else if (t < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
    else if (t < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
    else f = b ^ c ^ d, k = 0xCA62C1D6;
    uint32_t tmp = rol(a, 5) + f + e + k + w[t];
    e = d, d = c, c = rol(b, 30), b = a, a = tmp;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
}

static void sha1(const unsigned char *data, size_t len, unsigned char out[20]) {
  uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  size_t full = len / 64 * 64;
  for (size_t i = 0; i < full; i += 64) sha1_block(h, data + i);
  unsigned char tail[128] = {0};
  size_t rest = len - full, tail_len = rest < 56 ? 64 : 128;
  memcpy(tail, data + full, rest);
  tail[rest] = 0x80;
  uint64_t bits = (uint64_t)len * 8;
  for (int i = 0; i < 8; i++) tail[tail_len - 1 - i] = (unsigned char)(bits >> (8 * i));
  for (size_t i = 0; i < tail_len; i += 64) sha1_block(h, tail + i);
  for (int i = 0; i < 20; i++) out[i] = (unsigned char)(h[i / 4] >> (24 - 8 * (i % 4)));
}

static void base64(const unsigned char *in, size_t n, char *out) {
  static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  size_t o = 0;
  for (size_t i = 0; i < n; i += 3) {
    uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
    out[o++] = tab[v >> 18 & 63];
    out[o++] = tab[v >> 12 & 63];
    out[o++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
    out[o++] = i + 2 < n ? tab[v & 63] : '=';
  }
  out[o] = '\0';
}

/* ---- small helpers ---------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) { /* xorshift64*: mask keys need not be secret here */
  *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
  return *s * 0x2545F4914F6CDD1DULL;
}

static void rng_seed(wsc *c) {
  if (getrandom(&c->rng, sizeof c->rng, GRND_NONBLOCK) != (ssize_t)sizeof c->rng) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    c->rng = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 32 ^ (uint64_t)(uintptr_t)c;
  }
  if (!c->rng) c->rng = 0x9E3779B97F4A7C15ULL;
}

static int reserve(char **buf, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t n = *cap ? *cap : 4096;
  while (n < need) n *= 2;
  char *p = realloc(*buf, n);
  if (!p) return -1;
  *buf = p;
  *cap = n;
  return 0;
}

static void rearm(wsc *c) {
  if (c->fd < 0) return;
  uint32_t want = EPOLLIN | (c->state == WSC_CONNECTING || wsc_pending(c) ? EPOLLOUT : 0);
  if (want == c->armed) return;
  struct epoll_event ev = {.events = want, .data.ptr = c};
  if (epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &ev) == 0) c->armed = want;
}

/* Closes the socket and reports how it ended, once. */
__attribute__((format(printf, 4, 5))) static void finish(wsc *c, int code, bool by_server, const char *fmt, ...) {
  if (c->state == WSC_CLOSED || c->state == WSC_IDLE) return;
  if (c->fd >= 0) close(c->fd); /* also leaves the epoll set */
  c->fd = -1;
  c->close.code = code;
  c->close.by_server = by_server;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->close.reason, sizeof c->close.reason, fmt, ap);
  va_end(ap);
  c->state = WSC_CLOSED;
  if (c->cb->on_closed) c->cb->on_closed(c, &c->close);
}

/* Writes what the socket takes. A failed write does not end the
 * connection yet: the server may have sent a close frame (with its reason)
 * before it went away, so we stop writing and let the reads find either
 * that frame or the end of the stream. */
static void flush(wsc *c) {
  while (wsc_pending(c) && c->state != WSC_CONNECTING && !c->write_err) {
    ssize_t n = send(c->fd, c->out + c->out_off, wsc_pending(c), MSG_NOSIGNAL);
    if (n > 0) {
      c->out_off += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    c->write_err = n < 0 ? errno : EPIPE;
    c->out_off = c->out_len = 0; /* it will never be delivered */
  }
  if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
  else if (c->out_off > c->out_cap / 2) { /* keep the buffer from creeping */
    memmove(c->out, c->out + c->out_off, wsc_pending(c));
    c->out_len -= c->out_off;
    c->out_off = 0;
  }
  rearm(c);
}

/* Appends one masked frame to the output buffer. */
static int queue_frame(wsc *c, int opcode, const void *data, size_t len) {
  if (c->write_err) return 0; /* the socket takes nothing more */
  unsigned char head[14];
  size_t h = 0;
  head[h++] = (unsigned char)(0x80 | opcode);
  if (len < 126) head[h++] = (unsigned char)(0x80 | len);
  else if (len <= 0xFFFF) {
    head[h++] = 0x80 | 126;
    head[h++] = (unsigned char)(len >> 8), head[h++] = (unsigned char)len;
  } else {
    head[h++] = 0x80 | 127;
    for (int i = 7; i >= 0; i--) head[h++] = (unsigned char)((uint64_t)len >> (8 * i));
  }
  uint32_t key = (uint32_t)rng_next(&c->rng);
  unsigned char mask[4] = {(unsigned char)(key >> 24), (unsigned char)(key >> 16), (unsigned char)(key >> 8),
                           (unsigned char)key};
  memcpy(head + h, mask, 4);
  h += 4;
  if (reserve(&c->out, &c->out_cap, c->out_len + h + len) < 0) return -1;
  unsigned char *o = (unsigned char *)c->out + c->out_len;
  const unsigned char *in = data;
  memcpy(o, head, h);
  for (size_t i = 0; i < len; i++) o[h + i] = in[i] ^ mask[i & 3];
  c->out_len += h + len;
  return 0;
}

/* ---- the handshake ---------------------------------------------------------- */

/* The value of header `name` in the head [p, end), trimmed, or NULL. */
static const char *header(const char *p, const char *end, const char *name, size_t *len) {
  size_t nl = strlen(name);
  for (const char *line = memchr(p, '\n', (size_t)(end - p)); line && line + 1 < end;) {
    line++;
    const char *eol = memchr(line, '\n', (size_t)(end - line));
    if (!eol) eol = end;
    if ((size_t)(eol - line) > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
      const char *v = line + nl + 1, *ve = eol;
      while (v < ve && (*v == ' ' || *v == '\t')) v++;
      while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t')) ve--;
      *len = (size_t)(ve - v);
      return v;
    }
    line = eol < end ? eol : NULL;
  }
  return NULL;
}

static bool has_token(const char *v, size_t len, const char *token) {
  size_t tl = strlen(token);
  for (size_t i = 0; i + tl <= len; i++)
    if (strncasecmp(v + i, token, tl) == 0 && (i == 0 || v[i - 1] == ',' || v[i - 1] == ' ') &&
        (i + tl == len || v[i + tl] == ',' || v[i + tl] == ' '))
      return true;
  return false;
}

/* A refused upgrade: reports the status and (once it has arrived, or the
 * server closed) the start of the body. Returns true when finished. */
static bool refused(wsc *c, int status, const char *head, size_t head_len, bool eof) {
  size_t cl_len, body_len = c->in_len - head_len, want = 0;
  const char *cl = header(head, head + head_len, "Content-Length", &cl_len);
  if (cl) want = (size_t)strtoul(cl, NULL, 10);
  if (want > WSC_MAX_ERROR_BODY) want = WSC_MAX_ERROR_BODY;
  if (body_len < want && !eof) return false;
  const char *body = head + head_len;
  size_t n = body_len < want ? body_len : want;
  while (n && (body[n - 1] == '\n' || body[n - 1] == '\r')) n--;
  const char *eol = memchr(head, '\r', head_len);
  int line_len = eol ? (int)(eol - head) : 0;
  c->close.http_status = status;
  finish(c, WSC_CLOSE_ABNORMAL, false, "upgrade refused: %.*s%s%.*s", line_len, head, n ? ": " : "",
         (int)(n > 300 ? 300 : n), body);
  return true;
}

/* Parses the response head once it is complete. Returns 1 (open), 0 (need
 * more bytes) or -1 (finished). */
static int handshake_response(wsc *c, bool eof) {
  const char *end = NULL;
  for (size_t i = 3; i < c->in_len && !end; i++)
    if (memcmp(c->in + i - 3, "\r\n\r\n", 4) == 0) end = c->in + i + 1;
  if (!end) {
    if (eof || c->in_len > WSC_MAX_HEAD) {
      finish(c, WSC_CLOSE_ABNORMAL, false, eof ? "connection closed during the handshake" : "response head too long");
      return -1;
    }
    return 0;
  }
  size_t head_len = (size_t)(end - c->in);
  int status = 0;
  if (sscanf(c->in, "HTTP/1.%*d %d", &status) != 1) {
    finish(c, WSC_CLOSE_PROTOCOL, false, "not an HTTP response");
    return -1;
  }
  if (status != 101) return refused(c, status, c->in, head_len, eof) ? -1 : 0;
  size_t ul, cl, al;
  const char *up = header(c->in, end, "Upgrade", &ul), *conn = header(c->in, end, "Connection", &cl),
             *acc = header(c->in, end, "Sec-WebSocket-Accept", &al);
  const char *why = !up || !has_token(up, ul, "websocket")        ? "no 'Upgrade: websocket'"
                    : !conn || !has_token(conn, cl, "upgrade")    ? "no 'Connection: Upgrade'"
                    : !acc                                        ? "no Sec-WebSocket-Accept"
                    : al != strlen(c->accept) || memcmp(acc, c->accept, al) ? "wrong Sec-WebSocket-Accept"
                                                                  : NULL;
  if (why) {
    finish(c, WSC_CLOSE_PROTOCOL, false, "bad handshake response: %s", why);
    return -1;
  }
  memmove(c->in, end, c->in_len - head_len); /* frames may follow at once */
  c->in_len -= head_len;
  c->state = WSC_OPEN;
  if (c->cb->on_open) c->cb->on_open(c);
  return c->state == WSC_CLOSED ? -1 : 1;
}

/* ---- frames ------------------------------------------------------------------ */

static void on_close_frame(wsc *c, const unsigned char *p, size_t len) {
  c->close_received = true;
  if (len == 1) {
    finish(c, WSC_CLOSE_PROTOCOL, false, "close frame with a 1-byte payload");
    return;
  }
  int code = len >= 2 ? p[0] << 8 | p[1] : WSC_CLOSE_NO_CODE;
  if (!c->close_sent) { /* echo it, then we are done: the server closes TCP */
    unsigned char echo[2] = {(unsigned char)(code >> 8), (unsigned char)code};
    if (queue_frame(c, WSC_OP_CLOSE, echo, len >= 2 ? 2 : 0) == 0) {
      c->close_sent = true;
      flush(c);
      if (c->state == WSC_CLOSED) return;
    }
  }
  finish(c, code, true, "%.*s", (int)(len > 2 ? len - 2 : 0), (const char *)p + 2);
}

static void deliver(wsc *c, int opcode, const char *p, size_t len) {
  if (c->cb->on_message) c->cb->on_message(c, opcode == WSC_OP_BINARY, p, len);
}

/* One complete frame. Returns -1 once the connection is finished. */
static int on_frame(wsc *c, bool fin, int op, const char *p, size_t len) {
  switch (op) {
  case WSC_OP_PING:
    if (c->close_sent) return 0;
    if (queue_frame(c, WSC_OP_PONG, p, len) < 0) {
      finish(c, WSC_CLOSE_ABNORMAL, false, "out of memory");
      return -1;
    }
    flush(c);
    return 0;
  case WSC_OP_PONG: return 0;
  case WSC_OP_CLOSE: on_close_frame(c, (const unsigned char *)p, len); return -1;
  case WSC_OP_TEXT:
  case WSC_OP_BINARY:
    if (c->msg_opcode) {
      finish(c, WSC_CLOSE_PROTOCOL, false, "new message inside a fragmented one");
      return -1;
    }
    if (fin) {
      deliver(c, op, p, len);
      return c->state == WSC_CLOSED ? -1 : 0;
    }
    c->msg_opcode = op;
    c->msg_len = 0;
    break;
  case WSC_OP_CONT:
    if (!c->msg_opcode) {
      finish(c, WSC_CLOSE_PROTOCOL, false, "continuation frame without a message");
      return -1;
    }
    break;
  default: finish(c, WSC_CLOSE_PROTOCOL, false, "unknown opcode %d", op); return -1;
  }
  if (c->msg_len + len > c->max_message) {
    finish(c, WSC_CLOSE_TOO_BIG, false, "message larger than %zu bytes", c->max_message);
    return -1;
  }
  if (reserve(&c->msg, &c->msg_cap, c->msg_len + len + 1) < 0) {
    finish(c, WSC_CLOSE_ABNORMAL, false, "out of memory");
    return -1;
  }
  memcpy(c->msg + c->msg_len, p, len);
  c->msg_len += len;
  if (!fin) return 0;
  op = c->msg_opcode;
  c->msg_opcode = 0;
  deliver(c, op, c->msg, c->msg_len);
  return c->state == WSC_CLOSED ? -1 : 0;
}

/* Parses the frame at c->in + off. Returns its size, 0 when it is
 * incomplete, or -1 once finished. */
static long parse_frame(wsc *c, size_t off) {
  const unsigned char *b = (const unsigned char *)c->in + off;
  size_t avail = c->in_len - off;
  if (avail < 2) return 0;
  bool fin = b[0] & 0x80;
  int op = b[0] & 0x0F;
  uint64_t len = b[1] & 0x7F;
  size_t h = 2;
  if (b[0] & 0x70 || b[1] & 0x80) {
    finish(c, WSC_CLOSE_PROTOCOL, false, "%s", b[1] & 0x80 ? "masked frame from the server" : "reserved bits set");
    return -1;
  }
  if (len == 126) {
    if (avail < 4) return 0;
    len = (uint64_t)b[2] << 8 | b[3], h = 4;
  } else if (len == 127) {
    if (avail < 10) return 0;
    len = 0;
    for (int i = 0; i < 8; i++) len = len << 8 | b[2 + i];
    h = 10;
  }
  if (op & 0x8 && (!fin || len > 125)) {
    finish(c, WSC_CLOSE_PROTOCOL, false, "fragmented or oversized control frame");
    return -1;
  }
  if (len > c->max_message) {
    finish(c, WSC_CLOSE_TOO_BIG, false, "frame of %llu bytes, more than %zu", (unsigned long long)len,
           c->max_message);
    return -1;
  }
  if (avail - h < len) return 0;
  return on_frame(c, fin, op, (const char *)b + h, (size_t)len) < 0 ? -1 : (long)(h + len);
}

static void parse_frames(wsc *c) {
  size_t off = 0;
  while (c->state == WSC_OPEN || c->state == WSC_CLOSING) {
    long n = parse_frame(c, off);
    if (n <= 0) break;
    off += (size_t)n;
  }
  if (c->state == WSC_CLOSED || off == 0) return;
  memmove(c->in, c->in + off, c->in_len - off);
  c->in_len -= off;
}

/* ---- events ------------------------------------------------------------------ */

static void on_connected(wsc *c) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  if (err) {
    finish(c, WSC_CLOSE_ABNORMAL, false, "connect: %s", strerror(err));
    return;
  }
  c->state = WSC_HANDSHAKE;
  flush(c);
}

static void on_readable(wsc *c) {
  size_t room = c->max_message + WSC_MAX_HEAD + 14;
  if (reserve(&c->in, &c->in_cap, c->in_len + WSC_READ_CHUNK) < 0) {
    finish(c, WSC_CLOSE_ABNORMAL, false, "out of memory");
    return;
  }
  ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n < 0) {
    finish(c, WSC_CLOSE_ABNORMAL, false, "%s: %s", c->write_err ? "send" : "recv",
           strerror(c->write_err ? c->write_err : errno));
    return;
  }
  c->in_len += (size_t)n;
  if (c->state == WSC_HANDSHAKE && handshake_response(c, n == 0) <= 0) return;
  parse_frames(c);
  if (c->state == WSC_CLOSED) return;
  if (n == 0 && c->write_err) finish(c, WSC_CLOSE_ABNORMAL, false, "send: %s", strerror(c->write_err));
  else if (n == 0) finish(c, WSC_CLOSE_ABNORMAL, false, "connection closed without a close frame");
  else if (c->in_len > room) finish(c, WSC_CLOSE_TOO_BIG, false, "input buffer overflow");
}

void wsc_handle(wsc *c, uint32_t events) {
  if (c->state == WSC_CLOSED || c->state == WSC_IDLE) return; /* a stale event from the same batch */
  if (c->state == WSC_CONNECTING) {
    if (events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) on_connected(c);
    return;
  }
  if (events & EPOLLOUT) flush(c);
  if (events & (EPOLLIN | EPOLLERR | EPOLLHUP) && c->state != WSC_CLOSED) on_readable(c);
}

/* ---- the API ------------------------------------------------------------------ */

int wsc_connect(wsc *c, int epfd, const struct sockaddr *addr, socklen_t addrlen, const char *host_header,
                const char *path, size_t max_message, const wsc_callbacks *cb, void *user) {
  *c = (wsc){.user = user, .fd = -1, .epfd = epfd, .cb = cb,
             .max_message = max_message ? max_message : WSC_DEFAULT_MAX_MESSAGE};
  rng_seed(c);
  unsigned char nonce[16], digest[20];
  char key[32], cat[96];
  for (int i = 0; i < 16; i += 8) {
    uint64_t r = rng_next(&c->rng);
    memcpy(nonce + i, &r, 8);
  }
  base64(nonce, sizeof nonce, key);
  int n = snprintf(cat, sizeof cat, "%s%s", key, WSC_GUID);
  sha1((const unsigned char *)cat, (size_t)n, digest);
  base64(digest, sizeof digest, c->accept);
  char req[2048];
  n = snprintf(req, sizeof req,
               "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: hark\r\n\r\n",
               path, host_header, key);
  if (n < 0 || (size_t)n >= sizeof req || reserve(&c->out, &c->out_cap, (size_t)n) < 0) {
    snprintf(c->close.reason, sizeof c->close.reason, "request path too long or out of memory");
    return -1;
  }
  memcpy(c->out, req, (size_t)n);
  c->out_len = (size_t)n;
  c->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  if (c->fd >= 0) setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* small frames, now */
  if (c->fd < 0 || (connect(c->fd, addr, addrlen) < 0 && errno != EINPROGRESS)) {
    snprintf(c->close.reason, sizeof c->close.reason, "%s: %s", c->fd < 0 ? "socket" : "connect", strerror(errno));
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    return -1;
  }
  c->armed = EPOLLIN | EPOLLOUT;
  struct epoll_event ev = {.events = c->armed, .data.ptr = c};
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0) {
    snprintf(c->close.reason, sizeof c->close.reason, "epoll_ctl: %s", strerror(errno));
    close(c->fd);
    c->fd = -1;
    return -1;
  }
  c->state = WSC_CONNECTING;
  return 0;
}

int wsc_send(wsc *c, int opcode, const void *data, size_t len) {
  if (c->state != WSC_OPEN || c->close_sent) return -1;
  if (queue_frame(c, opcode, data, len) < 0) return -1;
  flush(c);
  return 0;
}

void wsc_close(wsc *c, int code, const char *reason) {
  if (c->state == WSC_CONNECTING || c->state == WSC_HANDSHAKE) {
    wsc_abort(c, code, reason);
    return;
  }
  if (c->state != WSC_OPEN || c->close_sent) return;
  unsigned char p[125];
  size_t rl = strlen(reason ? reason : "");
  if (rl > sizeof p - 2) rl = sizeof p - 2;
  p[0] = (unsigned char)(code >> 8), p[1] = (unsigned char)code;
  memcpy(p + 2, reason ? reason : "", rl);
  c->state = WSC_CLOSING;
  c->close_sent = true;
  if (queue_frame(c, WSC_OP_CLOSE, p, rl + 2) < 0) wsc_abort(c, code, reason);
  else flush(c);
}

void wsc_abort(wsc *c, int code, const char *reason) {
  finish(c, code, false, "%s", reason ? reason : "");
}

void wsc_free(wsc *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  free(c->out);
  free(c->in);
  free(c->msg);
  c->out = c->in = c->msg = NULL;
  c->out_cap = c->in_cap = c->msg_cap = 0;
}
