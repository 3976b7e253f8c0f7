/*
 * httpc.c — the blocking HTTP/1.1 client behind `hark perf` (see httpc.h).
 *
 * Why not libcurl: `hark perf` measures the server, and on a small machine
 * the client's CPU per request is taken from it. The same closed loop on
 * libcurl's easy interface (one handle per thread, settings kept, no proxy
 * look-up) costs three poll()s per request besides send and recv, plus its
 * URL and header handling; at concurrency 16, 4 s windows, alternated in
 * one run (2 cores, load average 6-14), it reached 0.56-0.63 of this
 * client's rate against nginx replaying hark's reply (47.6k-53.9k against
 * 80.7k-95.6k req/s over 4 rounds) and 0.76-0.94 against harkd (31.2k-32.8k
 * against 35.0k-41.9k). So this client stays. (libwebsockets' HTTP
 * client, a new client wsi per request on an lws loop, was not measured.)
 *
 * Data path: the caller's request bytes go out with send() in a loop; the
 * response is read into c->buf (grown by doubling, never shrunk) until the
 * head is complete, then until the body is: exactly Content-Length bytes, a
 * chunked body decoded in place, or everything up to the server's close.
 * The buffer is emptied at the start of each request: we never pipeline,
 * so nothing that follows a response belongs to the next one.
 *
 * Reconnecting: a keep-alive connection the server closed while idle shows
 * up as EPIPE / ECONNRESET on send or as end-of-file before the first
 * response byte. Only then, and only on a connection that already carried
 * a response, is the request sent once more on a fresh connection — the
 * same rule browsers and curl use, so a request the server saw is never
 * silently sent twice.
 */
#include "httpc.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#define HTTPC_MIN_BUF 16384
#define HTTPC_MAX_HEAD 65536
#define HTTPC_MAX_BODY ((size_t)1 << 30)
#define HTTPC_CLOSED_EARLY 1 /* read_response: EOF before any byte */

static int set_err(httpc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int set_err(httpc *c, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return -1;
}

int httpc_init(httpc *c, const char *host, const char *port, int timeout_ms) {
  memset(c, 0, sizeof *c);
  atomic_init(&c->fd, -1);
  c->timeout_ms = timeout_ms;
  if (strlen(host) >= sizeof c->host || strlen(port) >= sizeof c->port)
    return set_err(c, "host or port too long");
  strcpy(c->host, host);
  strcpy(c->port, port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  int rc = getaddrinfo(host, port, &hints, &c->ai);
  if (rc != 0) return set_err(c, "cannot resolve %s: %s", host, gai_strerror(rc));
  c->good = c->ai;
  return 0;
}

void httpc_close(httpc *c) {
  int fd = atomic_exchange(&c->fd, -1);
  if (fd >= 0) close(fd);
}

void httpc_abort(httpc *c) {
  int fd = atomic_load(&c->fd);
  if (fd >= 0) shutdown(fd, SHUT_RDWR);
}

void httpc_free(httpc *c) {
  httpc_close(c);
  if (c->ai) freeaddrinfo(c->ai);
  free(c->buf);
  c->ai = NULL;
  c->good = NULL;
  c->buf = NULL;
  c->cap = c->len = 0;
}

static int open_socket(httpc *c, const struct addrinfo *a) {
  int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
  if (fd < 0) return -1;
  if (c->timeout_ms > 0) {
    /* On Linux SO_SNDTIMEO also bounds connect(). */
    struct timeval tv = {.tv_sec = c->timeout_ms / 1000, .tv_usec = (c->timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  }
  int one = 1; /* requests are written in one piece; don't let Nagle hold them */
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) return fd;
  int e = errno;
  close(fd);
  errno = e;
  return -1;
}

/* Tries the address that worked last, then every other one ("localhost"
 * may resolve to ::1 first while the server listens on IPv4 only). */
static int connect_now(httpc *c) {
  int fd = open_socket(c, c->good);
  for (const struct addrinfo *a = c->ai; fd < 0 && a; a = a->ai_next) {
    if (a == c->good) continue;
    if ((fd = open_socket(c, a)) >= 0) c->good = a;
  }
  if (fd < 0) return set_err(c, "cannot connect to %s:%s: %s", c->host, c->port, strerror(errno));
  atomic_store(&c->fd, fd);
  c->reused = 0;
  return 0;
}

static int send_all(httpc *c, const char *p, size_t n) {
  int fd = atomic_load(&c->fd);
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) {
      int e = errno;
      set_err(c, "send to %s:%s: %s", c->host, c->port,
              e == EAGAIN || e == EWOULDBLOCK ? "timed out" : strerror(e));
      errno = e;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int reserve(httpc *c, size_t need) {
  if (c->cap >= need) return 0;
  size_t cap = c->cap ? c->cap : HTTPC_MIN_BUF;
  while (cap < need) cap *= 2;
  char *b = realloc(c->buf, cap);
  if (!b) return set_err(c, "out of memory for a %zu-byte response", need);
  c->buf = b;
  c->cap = cap;
  return 0;
}

/* Appends what the socket has. Returns bytes read, 0 at end of file, or
 * -1 with c->err set. */
static ssize_t recv_more(httpc *c) {
  if (c->len >= HTTPC_MAX_HEAD + HTTPC_MAX_BODY) return set_err(c, "response too large");
  if (reserve(c, c->len + 4096) < 0) return -1;
  for (;;) {
    ssize_t r = recv(atomic_load(&c->fd), c->buf + c->len, c->cap - c->len, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      set_err(c, "receive from %s:%s: %s", c->host, c->port,
              e == EAGAIN || e == EWOULDBLOCK ? "timed out" : strerror(e));
      errno = e;
      return -1;
    }
    c->len += (size_t)r;
    return r;
  }
}

static const char *find_crlf(const char *p, const char *end) {
  for (; p + 1 < end; p++) {
    p = memchr(p, '\r', (size_t)(end - p - 1));
    if (!p) return NULL;
    if (p[1] == '\n') return p;
  }
  return NULL;
}

/* Reads until the head ("...\r\n\r\n") is in the buffer; returns its size
 * including the blank line, 0 for HTTPC_CLOSED_EARLY, or -1. */
static ssize_t read_head(httpc *c, size_t from) {
  size_t scan = from;
  for (;;) {
    size_t s = scan > from + 3 ? scan - 3 : from;
    const char *end = c->len - s >= 4 ? memmem(c->buf + s, c->len - s, "\r\n\r\n", 4) : NULL;
    if (end) return end + 4 - (c->buf + from);
    if (c->len - from > HTTPC_MAX_HEAD) return set_err(c, "response head too large");
    scan = c->len;
    ssize_t r = recv_more(c);
    if (r < 0) return -1;
    if (r == 0) {
      if (c->len == from && from == 0) return 0;
      return set_err(c, "%s:%s closed the connection mid-response", c->host, c->port);
    }
  }
}

typedef struct head_info {
  int status;
  bool chunked, close_after, has_length;
  uint64_t length;
} head_info;

static bool name_is(const char *line, size_t len, const char *name, const char **value,
                    size_t *vlen) {
  size_t n = strlen(name);
  if (len <= n || line[n] != ':' || strncasecmp(line, name, n) != 0) return false;
  const char *v = line + n + 1, *e = line + len;
  while (v < e && (*v == ' ' || *v == '\t')) v++;
  while (e > v && (e[-1] == ' ' || e[-1] == '\t')) e--;
  *value = v;
  *vlen = (size_t)(e - v);
  return true;
}

static bool has_token(const char *v, size_t n, const char *token) {
  size_t t = strlen(token);
  for (size_t i = 0; i + t <= n; i++)
    if (strncasecmp(v + i, token, t) == 0) return true;
  return false;
}

static int parse_head(httpc *c, const char *h, size_t n, head_info *hi) {
  memset(hi, 0, sizeof *hi);
  if (n < 12 || memcmp(h, "HTTP/1.", 7) != 0 || h[8] != ' ')
    return set_err(c, "not an HTTP/1.x response from %s:%s", c->host, c->port);
  bool http10 = h[7] == '0', keep_alive = false;
  if (h[9] < '1' || h[9] > '5' || h[10] < '0' || h[10] > '9' || h[11] < '0' || h[11] > '9')
    return set_err(c, "bad status line from %s:%s", c->host, c->port);
  hi->status = (h[9] - '0') * 100 + (h[10] - '0') * 10 + (h[11] - '0');
  const char *end = h + n, *line = find_crlf(h, end);
  line = line ? line + 2 : end;
  while (line < end) {
    const char *eol = find_crlf(line, end);
    if (!eol) eol = end;
    const char *v;
    size_t vl;
    size_t ll = (size_t)(eol - line);
    if (name_is(line, ll, "content-length", &v, &vl)) {
      char num[24];
      if (vl == 0 || vl >= sizeof num || strspn(v, "0123456789") < vl)
        return set_err(c, "bad Content-Length from %s:%s", c->host, c->port);
      memcpy(num, v, vl);
      num[vl] = '\0';
      hi->length = strtoull(num, NULL, 10);
      hi->has_length = true;
    } else if (name_is(line, ll, "transfer-encoding", &v, &vl)) {
      hi->chunked = has_token(v, vl, "chunked");
    } else if (name_is(line, ll, "connection", &v, &vl)) {
      if (has_token(v, vl, "close")) hi->close_after = true;
      if (has_token(v, vl, "keep-alive")) keep_alive = true;
    }
    line = eol + 2;
  }
  if (http10 && !keep_alive) hi->close_after = true;
  if (hi->has_length && hi->length > HTTPC_MAX_BODY) return set_err(c, "response body too large");
  return 0;
}

static int read_length_body(httpc *c, size_t body, uint64_t length) {
  size_t total = body + (size_t)length;
  if (reserve(c, total) < 0) return -1;
  while (c->len < total) {
    ssize_t r = recv(atomic_load(&c->fd), c->buf + c->len, total - c->len, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) return set_err(c, "%s:%s closed the connection mid-body", c->host, c->port);
      return set_err(c, "receive from %s:%s: %s", c->host, c->port,
                     errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
    }
    c->len += (size_t)r;
  }
  return 0;
}

static int read_to_close(httpc *c) {
  for (;;) {
    ssize_t r = recv_more(c);
    if (r < 0) return -1;
    if (r == 0) return 0;
  }
}

static int parse_hex(const char *p, const char *end, uint64_t *out) {
  uint64_t v = 0;
  const char *s = p;
  for (; p < end; p++) {
    int d = *p >= '0' && *p <= '9'   ? *p - '0'
            : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
            : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                     : -1;
    if (d < 0) break;
    if (v > (HTTPC_MAX_BODY >> 4)) return -1;
    v = v * 16 + (uint64_t)d;
  }
  if (p == s || (p < end && *p != ';' && *p != ' ' && *p != '\t')) return -1;
  *out = v;
  return 0;
}

enum { CH_SIZE, CH_DATA, CH_DATA_END, CH_TRAILER, CH_DONE };

/* Decodes a chunked body in place: chunk data is moved down to `wr`, so the
 * decoded body ends up contiguous at `body`. Returns its length or -1. */
static ssize_t read_chunked_body(httpc *c, size_t body) {
  size_t rd = body, wr = body;
  uint64_t left = 0;
  int st = CH_SIZE;
  while (st != CH_DONE) {
    if (st == CH_DATA && rd < c->len) {
      size_t n = c->len - rd < left ? c->len - rd : (size_t)left;
      memmove(c->buf + wr, c->buf + rd, n);
      wr += n, rd += n, left -= n;
      if (left == 0) st = CH_DATA_END;
      continue;
    }
    const char *eol = st == CH_DATA ? NULL : find_crlf(c->buf + rd, c->buf + c->len);
    if (!eol) { /* need more bytes: drop what is decoded, then read */
      if (st != CH_DATA && c->len - rd > HTTPC_MAX_HEAD) return set_err(c, "bad chunked body");
      memmove(c->buf + wr, c->buf + rd, c->len - rd);
      c->len -= rd - wr;
      rd = wr;
      ssize_t r = recv_more(c);
      if (r < 0) return -1;
      if (r == 0) return set_err(c, "%s:%s closed the connection mid-body", c->host, c->port);
      continue;
    }
    const char *line = c->buf + rd;
    size_t ll = (size_t)(eol - line);
    rd += ll + 2;
    if (st == CH_SIZE) {
      if (parse_hex(line, eol, &left) < 0 || wr - body + left > HTTPC_MAX_BODY)
        return set_err(c, "bad chunk size from %s:%s", c->host, c->port);
      st = left ? CH_DATA : CH_TRAILER;
    } else if (st == CH_DATA_END) {
      if (ll != 0) return set_err(c, "bad chunk end from %s:%s", c->host, c->port);
      st = CH_SIZE;
    } else if (ll == 0) { /* CH_TRAILER: trailers are ignored until the blank line */
      st = CH_DONE;
    }
  }
  return (ssize_t)(wr - body);
}

/* Reads one final response (skipping 1xx). Returns 0, HTTPC_CLOSED_EARLY,
 * or -1. */
static int read_response(httpc *c, httpc_response *resp) {
  size_t start = 0, head_start = 0, body_len = 0;
  head_info hi;
  c->len = 0;
  do { /* 100 Continue and friends come before the final head: skip them */
    head_start = start;
    ssize_t head = read_head(c, start);
    if (head <= 0) return head == 0 ? HTTPC_CLOSED_EARLY : -1;
    if (parse_head(c, c->buf + start, (size_t)head - 4, &hi) < 0) return -1;
    start += (size_t)head;
  } while (hi.status < 200);
  size_t body = start;
  if (hi.status == 204 || hi.status == 304) {
    body_len = 0;
  } else if (hi.chunked) {
    ssize_t n = read_chunked_body(c, body);
    if (n < 0) return -1;
    body_len = (size_t)n;
  } else if (hi.has_length) {
    if (read_length_body(c, body, hi.length) < 0) return -1;
    body_len = (size_t)hi.length;
  } else {
    if (read_to_close(c) < 0) return -1;
    body_len = c->len - body;
    hi.close_after = true;
  }
  resp->status = hi.status;
  resp->head = c->buf + head_start;
  resp->head_len = body - head_start - 4;
  resp->body = c->buf + body;
  resp->body_len = body_len;
  if (hi.close_after)
    httpc_close(c);
  else
    c->reused++;
  return 0;
}

int httpc_request(httpc *c, const char *req, size_t req_len, httpc_response *resp) {
  for (int attempt = 0; attempt < 2; attempt++) {
    if (atomic_load(&c->fd) < 0 && connect_now(c) < 0) return -1;
    bool reused = c->reused > 0;
    if (send_all(c, req, req_len) < 0) {
      bool stale = reused && (errno == EPIPE || errno == ECONNRESET);
      httpc_close(c);
      if (stale) continue;
      return -1;
    }
    int rc = read_response(c, resp);
    if (rc == 0) return 0;
    bool stale = reused && (rc == HTTPC_CLOSED_EARLY || (errno == ECONNRESET && c->len == 0));
    httpc_close(c);
    if (stale) continue;
    if (rc == HTTPC_CLOSED_EARLY)
      return set_err(c, "%s:%s closed the connection without a response", c->host, c->port);
    return -1;
  }
  return set_err(c, "%s:%s keeps closing the connection", c->host, c->port);
}

int httpc_simple(httpc *c, const char *method, const char *path, const char *json_body,
                 httpc_response *resp) {
  size_t blen = json_body ? strlen(json_body) : 0;
  size_t cap = strlen(method) + strlen(path) + strlen(c->host) + blen + 256;
  char *req = malloc(cap);
  if (!req) return set_err(c, "out of memory");
  bool v6 = strchr(c->host, ':') != NULL;
  int n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: %s%s%s:%s\r\n", method, path, v6 ? "[" : "",
                   c->host, v6 ? "]" : "", c->port);
  if (json_body)
    n += snprintf(req + n, cap - (size_t)n,
                  "Content-Type: application/json\r\nContent-Length: %zu\r\n", blen);
  n += snprintf(req + n, cap - (size_t)n, "\r\n");
  if (json_body) memcpy(req + n, json_body, blen);
  int rc = httpc_request(c, req, (size_t)n + blen, resp);
  free(req);
  return rc;
}

const char *httpc_header(const httpc_response *resp, const char *name, size_t *len) {
  const char *end = resp->head + resp->head_len;
  const char *line = find_crlf(resp->head, end);
  while (line && line < end) {
    line += 2;
    const char *eol = find_crlf(line, end);
    if (!eol) eol = end;
    const char *v;
    if (name_is(line, (size_t)(eol - line), name, &v, len)) return v;
    line = eol;
  }
  return NULL;
}
