/*
 * exchange.c — HTTP/1.1 connections on the HTTP and metrics ports, read
 * and written by hark itself over raw connections (raw.c): the bytes a
 * connection reads wait in its input buffer; a whole request head
 * (h1_parse.c) goes to the service's head handler; a body it asks for is
 * moved into a buffer of its own (bounded by max_input_size) and then goes
 * to its body handler; the one reply it makes is written at once, headers
 * and body in one write, and the next request is read from what waits.
 * Requests a client pipelines are served one after the other, in order;
 * while the service has one, the connection reads no more than a little
 * ahead. An upgrade to a WebSocket hands the connection to ws.c.
 *
 * A body's buffer grows as its bytes arrive (from 64 KiB, doubling, never
 * past its Content-Length), each growth taken from the in-flight byte
 * budget (--max-inflight-bytes) first: a declared size costs nothing
 * until it is sent, and a body the budget cannot hold now is refused with
 * 503. The bytes go back when the buffer is freed, by the connection or
 * by the request that took it (hark_http_body_free). A connection that
 * closes while a call has its request leaves the call without a client
 * (its done handler gets NULL, and its cancel token is set). A reply
 * holds the budget too, from when it is made until it is written: one
 * that does not fit is answered 503 instead (small ones are counted
 * whatever the bound, so an error can always be told), and the send
 * timeout bounds how long a client that does not read keeps it.
 *
 * Time limits, as nginx's, checked by the loop's sweep once a second (no
 * timer is armed per request): a request's head must be whole within the
 * header timeout of the connection's start, or of its first byte on a
 * kept-alive connection (408, then close); a body within its deadline of
 * its head, and with no pause longer than the body timeout (408); a
 * kept-alive connection idle for KEEPALIVE_SECS is closed; and a reply
 * must make progress (raw.c's send timeout). Loop thread only.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "frontend/http/h1_parse.h"
#include "frontend/http/http_impl.h"
#include "util/alloc.h"
#include "util/log.h"

#define WRITE_CHUNK (256u * 1024u)
/* The longest request head (nginx: 4 × 8 KiB). */
#define HEAD_MAX (32u * 1024u)
/* While the service has a request, input read ahead past this waits in
 * the socket. */
#define IN_AHEAD (64u * 1024u)
/* After an early reply, the rest of the body is read and dropped (as
 * nginx's lingering_timeout and lingering_time): while it comes with no
 * pause longer than LINGER_SECS, for at most LINGER_TOTAL_SECS. Then the
 * connection goes on if at most DISCARD_MAX bytes of body were left and
 * the client was sending them (as nginx discards a body), else it closes. */
#define LINGER_SECS 5
#define LINGER_TOTAL_SECS 30
#define DISCARD_MAX (1024u * 1024u)
/* A kept-alive connection with no request this long is closed (nginx's
 * keepalive_timeout). */
#define KEEPALIVE_SECS 75
#define NS_PER_SEC 1000000000ull

static const char *const JSON = "application/json";

static void pump(hark_http_conn *c);

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

static bool body_unread(const hark_http_conn *c) { return c->body_len < c->body_declared; }

/* Frees what one exchange used. */
static void exchange_reset(hark_http_conn *c) {
  hark_http_set_state(c, NULL, NULL);
  hark_http_body_free(c->body_mem);
  out_free(c);
  c->body_mem = c->body = NULL;
  c->body_len = c->body_cap = c->body_declared = c->out_off = 0;
  c->head_only = c->continue_due = c->keep_alive_10 = false;
  c->path[0] = '\0';
}

/* An exchange began (a head was taken) or ended: the drain's count. */
static void exchange_begin(hark_http_conn *c) {
  c->in_exchange = true;
  atomic_fetch_add_explicit(&c->loop->replying, 1, memory_order_relaxed);
}

static void exchange_end(hark_http_conn *c) {
  if (!c->in_exchange) return;
  c->in_exchange = false;
  atomic_fetch_sub_explicit(&c->loop->replying, 1, memory_order_relaxed);
}

void hark_http_close_after(hark_http_conn *c) { c->close_after = true; }

const char *hark_http_peer(hark_http_conn *c) { return hark_raw_peer(c->raw); }

int hark_http_header(hark_http_conn *c, const char *name, char *buf, size_t cap) {
  char n[128];
  size_t len = strlen(name);
  if (len && name[len - 1] == ':') len--; /* "name:" as lws named them */
  if (!c->head || len >= sizeof n) return -1;
  memcpy(n, name, len);
  n[len] = '\0';
  const hark_h1_field *f = hark_h1_find(c->head, n, NULL);
  if (!f || f->value_len >= cap) return -1;
  memcpy(buf, f->value, f->value_len);
  buf[f->value_len] = '\0';
  return (int)f->value_len;
}

/* Every field folded into what the restricted headers open: a restricted
 * header sent more than once opens nothing (restrict.h), as on gRPC. */
bool hark_http_allowed(hark_http_conn *c, hark_api api, char *msg, size_t cap) {
  const hark_restrict *r = c->loop->http->opts.restricted;
  if (!hark_restrict_header(r, api)) return true;
  uint32_t state = 0;
  for (size_t i = 0; c->head && i < c->head->n_fields; i++) {
    const hark_h1_field *f = &c->head->fields[i];
    char name[128];
    if (f->name_len >= sizeof name) continue;
    for (size_t k = 0; k < f->name_len; k++)
      name[k] = (char)(f->name[k] >= 'A' && f->name[k] <= 'Z' ? f->name[k] + 32 : f->name[k]);
    hark_restrict_collect(r, &state, (const uint8_t *)name, f->name_len, (const uint8_t *)f->value,
                          f->value_len);
  }
  if (hark_restrict_allows_mask(r, api, state)) return true;
  hark_restrict_message_state(r, api, state, msg, cap);
  return false;
}

/* ---- writing ------------------------------------------------------------------ */

static const char *status_text(int status) {
  switch (status) {
  case 100: return "Continue";
  case 101: return "Switching Protocols";
  case 200: return "OK";
  case 204: return "No Content";
  case 400: return "Bad Request";
  case 401: return "Unauthorized";
  case 403: return "Forbidden";
  case 404: return "Not Found";
  case 405: return "Method Not Allowed";
  case 408: return "Request Timeout";
  case 409: return "Conflict";
  case 411: return "Length Required";
  case 413: return "Content Too Large";
  case 414: return "URI Too Long";
  case 415: return "Unsupported Media Type";
  case 426: return "Upgrade Required";
  case 429: return "Too Many Requests";
  case 431: return "Request Header Fields Too Large";
  case 499: return "Client Closed Request";
  case 500: return "Internal Server Error";
  case 501: return "Not Implemented";
  case 503: return "Service Unavailable";
  case 504: return "Gateway Timeout";
  case 505: return "HTTP Version Not Supported";
  default: return status < 500 ? "Bad Request" : "Internal Server Error";
  }
}

static int conn_write(hark_http_conn *c, uint8_t *data, size_t len) {
  if (hark_raw_write(c->raw, data, len) < 0) return -1;
  hark_raw_choked(c->raw); /* starts the send timeout when it did not all go */
  return 0;
}

static void conn_close(hark_http_conn *c) {
  c->state = CONN_CLOSING;
  hark_raw_close(c->raw);
}

/* Closes once what lws holds is out (at once when nothing is). */
static void close_when_sent(hark_http_conn *c) {
  c->state = CONN_CLOSING;
  if (hark_raw_buffered(c->raw))
    hark_raw_want_write(c->raw);
  else
    hark_raw_close(c->raw);
}

/* A reply outside an exchange (no head was taken: a 408 for a head that
 * did not come, a 400 for one that cannot be read), then close. */
static void reply_and_close(hark_http_conn *c, int status, const char *message) {
  hark_buf b = {0};
  hark_http_body_begin(&b);
  hark_http_put_error(&b, message);
  char head[256];
  size_t body = b.len - HARK_HTTP_HEADROOM;
  int n = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                   "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                   status, status_text(status), body);
  size_t off = HARK_HTTP_HEADROOM - (size_t)n;
  memcpy(b.data + off, head, (size_t)n);
  if (conn_write(c, (uint8_t *)b.data + off, b.len - off) < 0) {
    hark_buf_free(&b);
    conn_close(c);
    return;
  }
  hark_buf_free(&b);
  close_when_sent(c);
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

/* What every connection may hold of its input uncounted: a read buffer
 * and a head copy this large each (a usual head, in pieces or whole). A
 * head copy past it is dropped when its exchange ends, so a connection
 * idling after one long head does not hold it. */
#define HEAD_KEEP 4096u

/* What a connection holds of its input past that: a read buffer, a head
 * copy, larger than HEAD_KEEP (counted whole). */
static size_t in_size(const hark_http_conn *c) {
  return (c->in.cap > HEAD_KEEP ? c->in.cap : 0) + (c->head_cap > HEAD_KEEP ? c->head_cap : 0);
}

/*
 * That is counted in the in-flight budget as it changes: tens of
 * thousands of connections, each holding a head of up to 32 KiB, were
 * outside it. `refuse`: a growth that would pass the bound is not counted
 * and false is returned (a head still coming is refused); otherwise it is
 * counted past the bound (bytes read ahead of a request being served: at
 * most IN_AHEAD and one read).
 */
static bool in_hold(hark_http_conn *c, bool refuse) {
  size_t now = in_size(c);
  if (now <= c->in_held)
    hark_inflight_give(c->in_held - now);
  else if (!refuse)
    hark_inflight_add(now - c->in_held);
  else if (!hark_inflight_take(now - c->in_held))
    return false;
  c->in_held = now;
  return true;
}

/* The exchange is over: a head copy past HEAD_KEEP goes (and what it was
 * parsed into: nothing reads it until the next head); `all`: the head copy
 * and its parse go whatever their size (a WebSocket never reads another). */
static void head_drop(hark_http_conn *c, bool all) {
  if (!all && c->head_cap <= HEAD_KEEP) return;
  free(c->head_mem);
  c->head_mem = NULL;
  c->head_cap = 0;
  if (all) {
    free(c->head);
    c->head = NULL;
  } else if (c->head) {
    memset(c->head, 0, sizeof *c->head);
  }
  in_hold(c, false);
}

/* A reply up to this size is counted in the in-flight budget whatever its
 * bound: an error reply always goes out, and a connection holds one reply
 * at a time. */
#define REPLY_ALWAYS (64u * 1024u)

/* Takes what reply `b` holds from the in-flight budget, or when it does
 * not fit, makes it a 503 saying so. `always`: counted past the bound
 * (the metrics port's: a scrape must answer most when memory is short). */
static bool reply_charge(int *status, const char **ctype, hark_buf *b, size_t *charge,
                         bool always) {
  *charge = b->cap;
  if (b->cap <= REPLY_ALWAYS || always) {
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

/* The headers go right before the body, in the headroom `b` begins with,
 * so the reply leaves in one write. */
void hark_http_reply(hark_http_conn *c, int status, const char *ctype, hark_buf *b,
                     const char *hname, const char *hvalue) {
  size_t charge;
  if (!reply_charge(&status, &ctype, b, &charge, c->metrics))
    hname = NULL; /* it named the reply gone */
  size_t body_len = b->len - HARK_HTTP_HEADROOM;
  /* Replying before the body is read: what is left of it is read and
   * dropped after this reply. Then the connection goes on, unless the
   * client waits for a 100 (Continue) to send it, or it is large, or the
   * reply says the request was bad or too large (nginx's rule): those end
   * with this reply. */
  if (body_unread(c) && (c->continue_due || c->body_declared - c->body_len > DISCARD_MAX ||
                         status == 400 || status == 413 || status >= 500))
    c->close_after = true;
  if (atomic_load_explicit(&c->loop->http->stop, memory_order_relaxed)) c->close_after = true;
  /* Built by hand: snprintf's cost showed in a request's profile. */
  char head[HARK_HTTP_HEADROOM - HARK_RAW_HEADROOM], *p = head;
  const char *reason = status_text(status);
  size_t rlen = strlen(reason), clen = ctype ? strlen(ctype) : 0;
  size_t xlen = hname ? strlen(hname) + 1 + strlen(hvalue) + 2 : 0;
  if (9 + 20 + 1 + rlen + 16 + clen + 18 + 20 + 2 + xlen + 24 + 2 > sizeof head) {
    HARK_ERROR("http: cannot build reply headers; closing the connection");
    hark_inflight_give(charge);
    hark_buf_free(b);
    exchange_reset(c);
    exchange_end(c);
    conn_close(c);
    return;
  }
  memcpy(p, "HTTP/1.1 ", 9);
  p += 9;
  p += hark_fmt_u64(p, (uint64_t)status);
  *p++ = ' ';
  memcpy(p, reason, rlen);
  p += rlen;
  if (ctype) {
    memcpy(p, "\r\nContent-Type: ", 16);
    p += 16;
    memcpy(p, ctype, clen);
    p += clen;
  }
  memcpy(p, "\r\nContent-Length: ", 18);
  p += 18;
  p += hark_fmt_u64(p, body_len);
  memcpy(p, "\r\n", 2);
  p += 2;
  if (hname) p += snprintf(p, xlen + 1, "%s %s\r\n", hname, hvalue);
  if (c->close_after || c->keep_alive_10) {
    const char *v = c->close_after ? "Connection: close\r\n" : "Connection: keep-alive\r\n";
    size_t vl = strlen(v);
    memcpy(p, v, vl);
    p += vl;
  }
  memcpy(p, "\r\n", 2);
  p += 2;
  size_t n = (size_t)(p - head);
  out_free(c);
  c->out = *b;
  c->out_charge = charge;
  *b = (hark_buf){0};
  c->out_off = HARK_HTTP_HEADROOM - n;
  memcpy(c->out.data + c->out_off, head, n);
  if (c->head_only) c->out.len = HARK_HTTP_HEADROOM; /* a HEAD reply has no body */
  c->state = CONN_REPLYING;
  pump(c);
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

/* Writes the reply while the socket takes it; true once all of it is
 * with lws and the exchange is over (the next head may be read). */
static bool write_reply(hark_http_conn *c) {
  while (c->out_off < c->out.len) {
    if (hark_raw_choked(c->raw)) {
      hark_raw_want_write(c->raw);
      return false;
    }
    size_t left = c->out.len - c->out_off, n = left < WRITE_CHUNK ? left : WRITE_CHUNK;
    if (hark_raw_write(c->raw, (uint8_t *)c->out.data + c->out_off, n) < 0) {
      conn_close(c);
      return false;
    }
    c->out_off += n;
  }
  hark_raw_choked(c->raw); /* the send timeout runs while lws holds some */
  bool unread = body_unread(c);
  size_t skip = c->body_declared - c->body_len;
  exchange_reset(c);
  exchange_end(c);
  c->since_ns = hark_http_now_ns();
  if (!c->close_after && !unread) {
    c->state = CONN_HEAD;
    head_drop(c, false);
    return true;
  }
  if (!unread) {
    close_when_sent(c);
    return false;
  }
  /* The rest of the body is read and dropped; then the connection goes on
   * (discard_keep), or closes. Closing with unread input would make the
   * kernel send a reset, which can destroy the reply before the client
   * reads it: a connection that closes ends our side once the reply is
   * out, and reads (and drops) for a while first. */
  c->state = CONN_LINGER;
  c->discard_keep = !c->close_after;
  c->body_skip = skip;
  c->moved_ns = c->since_ns;
  return true;
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

/* A head that does not fit in the in-flight budget: 503 naming it, and
 * the connection ends (what it sent of the head is dropped). */
static void head_over_budget(hark_http_conn *c) {
  hark_error *err = over_budget("a request head", in_size(c));
  c->state = CONN_CLOSING;
  reply_and_close(c, 503, hark_error_message(err));
  hark_error_free(err);
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

/* The interim 100 Continue a client that sent Expect waits for. */
static void send_continue(hark_http_conn *c) {
  static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
  uint8_t b[HARK_RAW_HEADROOM + sizeof line];
  memcpy(b + HARK_RAW_HEADROOM, line, sizeof line - 1);
  c->continue_due = false;
  if (conn_write(c, b + HARK_RAW_HEADROOM, sizeof line - 1) < 0) conn_close(c);
}

int hark_http_read_body(hark_http_conn *c, size_t align_at) {
  const hark_http *http = c->loop->http;
  hark_h1_body framing;
  const char *why;
  if (hark_h1_framing(c->head, &framing, &why) != 0) { /* taken at the head: cannot be */
    hark_http_reply_error(c, 400, hark_error_new(HARK_ERR_INVALID_ARG, "%s", why));
    return -1;
  }
  /* Chunked uploads are not read: say so, as servers without them do,
   * rather than misread them. */
  if (framing.chunked) {
    hark_http_reply_error(
        c, 411,
        hark_error_new(HARK_ERR_INVALID_ARG,
                       "chunked request bodies are not supported; send Content-Length"));
    return -1;
  }
  unsigned long long clen = framing.length;
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
  c->since_ns = c->moved_ns = hark_http_now_ns();
  if (c->continue_due && c->in.len == c->in_off) send_continue(c);
  c->continue_due = false;
  if (!c->pumping) pump(c); /* outside a head handler: what waits is read now */
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

/* Moves body bytes in; at the last one, the body handler has it. The
 * buffer grows as the body arrives, never past its Content-Length. */
static void body_feed(hark_http_conn *c, const char *in, size_t len) {
  if (len > c->body_cap - c->body_len) {
    hark_error *err = body_grow(c, c->body_len + len);
    if (err) {
      c->body_len += len; /* dropped, but received: what lingering still drops is the rest */
      hark_http_reply_error(c, 0, err);
      return;
    }
  }
  memcpy(c->body + c->body_len, in, len);
  c->body_len += len;
  c->moved_ns = hark_http_now_ns();
  if (c->body_len < c->body_declared) return;
  c->state = CONN_BUSY;
  const hark_http_handler *h = c->loop->http->handler;
  h->body(h->userp, c);
}

/* ---- request heads ---------------------------------------------------------------- */

static hark_http_method method_of(const hark_h1_head *h) {
  if (h->method_len == 3 && memcmp(h->method, "GET", 3) == 0) return HARK_HTTP_GET;
  if (h->method_len == 4 && memcmp(h->method, "POST", 4) == 0) return HARK_HTTP_POST;
  if (h->method_len == 4 && memcmp(h->method, "HEAD", 4) == 0) return HARK_HTTP_HEAD;
  return HARK_HTTP_OTHER;
}

static int hex(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

/* RFC 9112 3.2: an HTTP/1.1 request names its host once (HTTP/1.0 may
 * leave it out), and the name is a host and an optional port: letters,
 * digits, -._~!$&'()*+,;=, '%' escapes, ':' and IPv6's brackets. */
static int check_host(const hark_h1_head *h, const char **why) {
  size_t n;
  const hark_h1_field *f = hark_h1_find(h, "host", &n);
  if (n > 1) {
    *why = "Bad Request: more than one Host field";
    return 400;
  }
  if (!f) {
    *why = "Bad Request: an HTTP/1.1 request without a Host field";
    return h->minor == 0 ? 0 : 400;
  }
  static const uint64_t low = 0x2fff7ff200000000ull, high = 0x47fffffeaffffffeull;
  for (size_t i = 0; i < f->value_len; i++) {
    unsigned char ch = (unsigned char)f->value[i];
    if (ch < 64 ? !((low >> ch) & 1) : ch >= 128 || !((high >> (ch - 64)) & 1)) {
      *why = "Bad Request: a Host field that is not a host and port";
      return 400;
    }
  }
  return 0;
}

/* The target's path, percent-decoded, without its query, into c->path:
 * 0, or the status to refuse it with. An absolute-form target
 * (http://host/path, RFC 9112 3.2.2) gives its path. */
static int take_path(hark_http_conn *c, const char **why) {
  const char *t = c->head->target, *end = t + c->head->target_len;
  if (end - t > 7 && strncasecmp(t, "http://", 7) == 0) {
    t += 7;
    while (t < end && *t != '/' && *t != '?') t++;
  } else if (end - t > 8 && strncasecmp(t, "https://", 8) == 0) {
    t += 8;
    while (t < end && *t != '/' && *t != '?') t++;
  }
  if (t == end || *t != '/') {
    *why = "Bad Request: the request target is not a path";
    return 400;
  }
  size_t n = 0;
  for (; t < end && *t != '?' && *t != '#'; t++) {
    char ch = *t;
    if (ch == '%') {
      int hi = t + 2 < end ? hex(t[1]) : -1, lo = t + 2 < end ? hex(t[2]) : -1;
      if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
        *why = "Bad Request: a bad percent escape in the path";
        return 400;
      }
      ch = (char)(hi << 4 | lo);
      t += 2;
    }
    if (n + 1 >= sizeof c->path) {
      *why = "URI Too Long";
      return 414;
    }
    c->path[n++] = ch;
  }
  c->path[n] = '\0';
  return 0;
}

/* A head refused before it reached the service: the reply, then close. */
static void refuse_head(hark_http_conn *c, int status, const char *why) {
  c->close_after = true;
  hark_http_reply_error(c, status, hark_error_new(HARK_ERR_INVALID_ARG, "%s", why));
}

/* ---- the WebSocket upgrade (RFC 6455 4) ----------------------------------------- */

/* A refusal of the upgrade: the status with {"error": msg}; the
 * connection ends after it. */
static void refuse_upgrade(hark_http_conn *c, int status, const char *msg) {
  c->close_after = true;
  hark_http_reply_error(c, status, hark_error_new(HARK_ERR_INVALID_ARG, "%s", msg));
}

/* Sec-WebSocket-Accept for a key (RFC 6455 4.2.2): base64 of the SHA-1 of
 * the key and the protocol's GUID. */
static void accept_value(const char *key, size_t len, char out[29]) {
  static const char GUID[] = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
  unsigned char in[64 + sizeof GUID], sha[SHA_DIGEST_LENGTH];
  memcpy(in, key, len);
  memcpy(in + len, GUID, sizeof GUID - 1);
  SHA1(in, len + sizeof GUID - 1, sha);
  EVP_EncodeBlock((unsigned char *)out, sha, SHA_DIGEST_LENGTH);
}

/* Whether a Sec-WebSocket-Key is base64 of 16 bytes (RFC 6455 4.1). */
static bool key_ok(const hark_h1_field *k) {
  if (!k || k->value_len != 24 || k->value[22] != '=' || k->value[23] != '=') return false;
  for (size_t i = 0; i < 22; i++) {
    char ch = k->value[i];
    if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
          ch == '+' || ch == '/'))
      return false;
  }
  return true;
}

/* An upgrade request: refused with an HTTP status, or accepted by the
 * service's ws handler, answered 101, and the connection is ws.c's. */
static void upgrade(hark_http_conn *c) {
  hark_http_loop *loop = c->loop;
  const hark_http_handler *hh = loop->http->handler;
  const hark_h1_head *head = c->head;
  if (!hh->ws || c->metrics) return refuse_upgrade(c, 404, "Not Found");
  if (atomic_load(&loop->http->stop))
    return refuse_upgrade(c, 503, "Server is shutting down: not accepting new streams");
  if (head->minor != 1)
    return refuse_upgrade(c, 400, "Bad Request: a WebSocket upgrade needs HTTP/1.1 (RFC 6455 4.1)");
  if (hark_h1_find(head, "content-length", NULL) || hark_h1_find(head, "transfer-encoding", NULL))
    return refuse_upgrade(c, 400, "Bad Request: a WebSocket upgrade has no body");
  size_t keys = 0;
  const hark_h1_field *key = hark_h1_find(head, "sec-websocket-key", &keys);
  if (!key)
    return refuse_upgrade(c, 400,
                          "Bad Request: a WebSocket upgrade needs a Sec-WebSocket-Key header "
                          "(RFC 6455 4.1)");
  if (keys != 1 || !key_ok(key))
    return refuse_upgrade(c, 400,
                          "Bad Request: Sec-WebSocket-Key must be one base64 value of 16 bytes "
                          "(RFC 6455 4.1)");
  const hark_h1_field *version = hark_h1_find(head, "sec-websocket-version", NULL);
  if (!version || version->value_len != 2 || memcmp(version->value, "13", 2) != 0) {
    hark_buf b = {0};
    hark_http_body_begin(&b);
    hark_http_put_error(&b, "Upgrade Required: only WebSocket version 13 is served (RFC 6455)");
    c->close_after = true;
    hark_http_reply(c, 426, JSON, &b, "Sec-WebSocket-Version:", "13");
    return;
  }
  /* hark's streams have no subprotocol: a client that needs one would be
   * served something it did not ask for. */
  if (hark_h1_find(head, "sec-websocket-protocol", NULL))
    return refuse_upgrade(c, 400,
                          "Bad Request: no WebSocket subprotocol is served; send no "
                          "Sec-WebSocket-Protocol header");
  char msg[256];
  if (!hark_http_allowed(c, HARK_API_INFERENCE, msg, sizeof msg))
    return refuse_upgrade(c, 403, msg);
  void *ticket = NULL;
  hark_error *err = hh->ws->accept(hh->ws_userp, c->path, &ticket);
  if (err) {
    c->close_after = true;
    hark_http_reply_error(c, 0, err);
    return;
  }
  char acc[29];
  accept_value(key->value, key->value_len, acc);
  char line[HARK_RAW_HEADROOM + 160];
  int n = snprintf(line + HARK_RAW_HEADROOM, sizeof line - HARK_RAW_HEADROOM,
                   "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n",
                   acc);
  exchange_reset(c);
  exchange_end(c);
  if (conn_write(c, (uint8_t *)line + HARK_RAW_HEADROOM, (size_t)n) < 0) {
    if (hh->ws->release) hh->ws->release(hh->ws_userp, ticket);
    conn_close(c);
    return;
  }
  c->state = CONN_WS;
  if (c->read_paused) { /* ws.c decides when to read from now on */
    c->read_paused = false;
    hark_raw_pause(c->raw, false);
  }
  c->ws = hark_ws_open(loop, c->raw, ticket);
  head_drop(c, true);
}

/* Whether any field named `name` holds `token` (a list may come in
 * several lines, RFC 9110 5.3). */
static bool has_token(const hark_h1_head *h, const char *name, const char *token) {
  size_t nlen = strlen(name);
  for (size_t i = 0; i < h->n_fields; i++) {
    const hark_h1_field *f = &h->fields[i];
    if (f->name_len == nlen && strncasecmp(f->name, name, nlen) == 0 &&
        hark_h1_has_token(f->value, f->value_len, token))
      return true;
  }
  return false;
}

/* Whether the request asks for a WebSocket (RFC 6455 4.2.1). */
static bool is_upgrade(const hark_h1_head *h) {
  return has_token(h, "upgrade", "websocket") && has_token(h, "connection", "upgrade");
}

/* A whole head, `len` bytes at `src`: copied out (the input moves on),
 * parsed, and handed to the service. */
static void take_head(hark_http_conn *c, const char *src, size_t len) {
  if (len > c->head_cap) {
    free(c->head_mem);
    c->head_cap = len < 1024 ? 1024 : len;
    c->head_mem = hark_xmalloc(c->head_cap);
  }
  memcpy(c->head_mem, src, len);
  if (!c->head) c->head = hark_xmalloc(sizeof *c->head);
  if (!in_hold(c, true)) {
    head_over_budget(c);
    return;
  }
  exchange_begin(c);
  c->state = CONN_BUSY;
  c->close_after = c->loop->conns_closing_all;
  c->body_declared = c->body_len = 0;
  const char *why = NULL;
  int status = hark_h1_parse(c->head_mem, len, c->head, &why);
  if (status) {
    refuse_head(c, status, why);
    return;
  }
  hark_h1_head *h = c->head;
  hark_h1_body framing;
  if ((status = hark_h1_framing(h, &framing, &why)) || (status = check_host(h, &why)) ||
      (status = take_path(c, &why))) {
    refuse_head(c, status, why);
    return;
  }
  c->body_declared = 0;
  c->body_len = 0;
  /* What the body would be: read or dropped, it is this long (chunked:
   * never read, so the connection ends after the reply). */
  if (framing.chunked) c->close_after = true;
  c->method = method_of(h);
  c->head_only = c->method == HARK_HTTP_HEAD;
  if (has_token(h, "connection", "close")) {
    c->close_after = true;
  } else if (h->minor == 0) {
    c->keep_alive_10 = has_token(h, "connection", "keep-alive");
    if (!c->keep_alive_10) c->close_after = true;
  }
  c->continue_due = h->minor == 1 && has_token(h, "expect", "100-continue");
  if (c->method == HARK_HTTP_GET && is_upgrade(h)) {
    upgrade(c);
    return;
  }
  /* Until the service reads it, the body is what follows the head: a
   * reply before it was read drops it and ends the connection. */
  if (framing.length) {
    c->body_declared = (size_t)framing.length;
    c->body_len = 0;
  }
  if (atomic_load(&c->loop->http->stop)) {
    c->close_after = true;
    hark_http_reply_error(c, 0, hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down"));
    return;
  }
  hark_http_request req = {.method = c->method, .path = c->path, .metrics = c->metrics};
  const hark_http_handler *hh = c->loop->http->handler;
  hh->head(hh->userp, c, &req);
}

/* ---- the pump -------------------------------------------------------------------- */

/* A head longer than HEAD_MAX, whole or not: 431, and close. */
static void head_too_long(hark_http_conn *c) {
  c->state = CONN_CLOSING;
  reply_and_close(c, 431,
                  "Request Header Fields Too Large: the request head is longer than 32 KiB");
}

static size_t in_left(const hark_http_conn *c) { return c->in.len - c->in_off; }

/* Input consumed: the buffer starts again from its front (and is freed
 * between requests, so an idle connection holds none). */
static void in_compact(hark_http_conn *c) {
  if (c->in_off == c->in.len) {
    c->in.len = c->in_off = 0;
    if (c->state == CONN_HEAD || c->state == CONN_WS || c->in.cap > 2 * IN_AHEAD) {
      hark_buf_free(&c->in);
      in_hold(c, false);
    }
    return;
  }
  if (c->in_off > c->in.cap / 2) {
    memmove(c->in.data, c->in.data + c->in_off, in_left(c));
    c->in.len -= c->in_off;
    c->in_off = 0;
  }
}

/* Reading stays on while a request is being read; while the service has
 * one, at most IN_AHEAD bytes are read ahead. */
static void update_reading(hark_http_conn *c) {
  if (c->state == CONN_WS) return; /* ws.c's to decide */
  bool hold = (c->state == CONN_BUSY || c->state == CONN_REPLYING || c->state == CONN_CLOSING) &&
              in_left(c) >= IN_AHEAD;
  if (hold != c->read_paused) {
    c->read_paused = hold;
    hark_raw_pause(c->raw, hold);
  }
}

/* Moves the connection on as far as its input and the service let it: a
 * head, a body, a reply, the next head. Re-entered from the service's
 * calls (a reply made in a handler), it returns and the outer run goes
 * on. */
static void pump(hark_http_conn *c) {
  if (c->pumping) return;
  c->pumping = true;
  for (bool more = true; more;) {
    more = false;
    switch (c->state) {
    case CONN_HEAD: {
      size_t avail = in_left(c);
      if (!avail) break;
      size_t end = hark_h1_head_end(c->in.data + c->in_off, avail, &c->scan);
      if (!end) {
        if (avail >= HEAD_MAX) head_too_long(c);
        break;
      }
      c->scan = 0;
      if (end > HEAD_MAX) {
        head_too_long(c);
        break;
      }
      c->in_off += end;
      take_head(c, c->in.data + c->in_off - end, end);
      more = true;
      break;
    }
    case CONN_BODY: {
      size_t avail = in_left(c), need = c->body_declared - c->body_len;
      size_t n = avail < need ? avail : need;
      if (!n) break;
      c->in_off += n;
      body_feed(c, c->in.data + c->in_off - n, n);
      more = true;
      break;
    }
    case CONN_REPLYING: more = write_reply(c); break;
    case CONN_LINGER: {
      size_t avail = in_left(c), n = avail < c->body_skip ? avail : c->body_skip;
      c->in_off += n;
      c->body_skip -= n;
      if (n) c->moved_ns = hark_http_now_ns();
      if (c->discard_keep) {
        if (c->body_skip) break;
        c->discard_keep = false;
        c->since_ns = c->moved_ns;
        if (c->loop->conns_closing_all) {
          close_when_sent(c);
          break;
        }
        c->state = CONN_HEAD; /* dropped: the next request */
        head_drop(c, false);
        more = true;
        break;
      }
      if (!c->lingering_wr && !hark_raw_buffered(c->raw)) {
        c->lingering_wr = true;
        int fd = hark_raw_fd(c->raw);
        if (fd >= 0) shutdown(fd, SHUT_WR);
      }
      if (!c->body_skip || in_left(c)) close_when_sent(c); /* all dropped, or more sent */
      break;
    }
    case CONN_WS:
      if (in_left(c)) { /* sent after the upgrade, before the 101 reached the client */
        size_t n = in_left(c);
        c->in_off = c->in.len;
        hark_ws_on_rx(c->ws, (uint8_t *)c->in.data + c->in.len - n, n);
      }
      break;
    default: break;
    }
  }
  in_compact(c);
  update_reading(c);
  c->pumping = false;
}

/* ---- the connection ------------------------------------------------------------- */

static void *conn_open(hark_http *http, hark_raw *raw, bool metrics) {
  (void)http;
  hark_http_conn *c = calloc(1, sizeof *c);
  if (!c) {
    HARK_WARN("http: out of memory for a new connection; closing it");
    return NULL;
  }
  c->raw = raw;
  c->loop = hark_raw_loop(raw);
  c->metrics = metrics;
  c->state = CONN_HEAD;
  c->since_ns = hark_http_now_ns(); /* the first head is due within the header timeout */
  c->next = c->loop->conns;
  if (c->next) c->next->prev = c;
  c->loop->conns = c;
  return c;
}

static void *on_open(void *userp, hark_raw *raw) { return conn_open(userp, raw, false); }
static void *on_open_metrics(void *userp, hark_raw *raw) { return conn_open(userp, raw, true); }

static int on_rx(void *conn, const uint8_t *data, size_t len) {
  hark_http_conn *c = conn;
  if (c->state == CONN_WS) { /* lws's read buffer, which the frame parser unmasks in place */
    hark_ws_on_rx(c->ws, (uint8_t *)(uintptr_t)data, len);
    return 0;
  }
  if (c->state == CONN_CLOSING) return 0; /* dropped */
  /* Nothing waits before these bytes: a whole head among them, and the
   * body after it, are taken from lws's buffer straight, not through the
   * input buffer (the usual request is one read). */
  if (!in_left(c)) {
    c->pumping = true;
    if (c->state == CONN_HEAD) {
      if (c->head) c->since_ns = hark_http_now_ns(); /* a later head's first byte */
      size_t scan = 0, end = hark_h1_head_end((const char *)data, len, &scan);
      if (end > HEAD_MAX) {
        c->pumping = false;
        head_too_long(c);
        return 0;
      }
      if (end) {
        take_head(c, (const char *)data, end);
        data += end;
        len -= end;
      }
    }
    if (c->state == CONN_BODY && len) {
      size_t need = c->body_declared - c->body_len, n = len < need ? len : need;
      body_feed(c, (const char *)data, n);
      data += n;
      len -= n;
    }
    c->pumping = false;
    if (c->state == CONN_CLOSING) return 0; /* refused: the rest is dropped */
  }
  if (len && !hark_buf_append(&c->in, data, len)) {
    HARK_WARN("http: out of memory for a connection's input; closing it");
    return -1;
  }
  if (!in_hold(c, c->state == CONN_HEAD)) {
    head_over_budget(c);
    return 0;
  }
  pump(c);
  return 0;
}

static int on_writable(void *conn) {
  hark_http_conn *c = conn;
  if (c->state == CONN_WS) {
    hark_ws_on_writable(c->ws);
    return 0;
  }
  if (c->state == CONN_CLOSING) {
    if (!hark_raw_buffered(c->raw)) hark_raw_close(c->raw);
    return 0;
  }
  pump(c);
  return 0;
}

static void on_closed(void *conn) {
  hark_http_conn *c = conn;
  hark_http_loop *loop = c->loop;
  if (c->ws) hark_ws_on_closed(c->ws);
  c->ws = NULL;
  if (c->call) {
    c->call->conn = NULL;                                  /* its done handler finds no client */
    if (c->call->cancel) hark_cancel_set(c->call->cancel); /* nor does the work */
  }
  c->call = NULL;
  exchange_end(c);
  exchange_reset(c);
  if (c->prev)
    c->prev->next = c->next;
  else if (loop->conns == c)
    loop->conns = c->next;
  if (c->next) c->next->prev = c->prev;
  hark_buf_free(&c->in);
  free(c->head_mem);
  free(c->head);
  c->head_mem = NULL;
  c->head = NULL;
  c->head_cap = 0;
  in_hold(c, false); /* all given back */
  free(c);
}

const hark_raw_handler hark_http_conn_handler = {on_open, on_rx, on_writable, on_closed};
const hark_raw_handler hark_http_metrics_conn_handler = {on_open_metrics, on_rx, on_writable,
                                                         on_closed};

/* ---- time limits and shutdown -------------------------------------------------------- */

void hark_http_conns_sweep(hark_http_loop *loop) {
  const hark_http_options *o = &loop->http->opts;
  uint64_t now = hark_http_now_ns();
  for (hark_http_conn *c = loop->conns, *next; c; c = next) {
    next = c->next;
    uint64_t waited = now - c->since_ns;
    switch (c->state) {
    case CONN_HEAD:
      if (in_left(c) || c->head == NULL) {
        if (waited < (uint64_t)o->header_timeout_secs * NS_PER_SEC) break;
        hark_limit_hit(HARK_LIMIT_HTTP_HEADER_TIMEOUT,
                       "http: a client sent no whole request head within %d s "
                       "(--http-header-timeout-secs): 408, closing",
                       o->header_timeout_secs);
        char msg[160];
        snprintf(msg, sizeof msg,
                 "request head not received within %d s (--http-header-timeout-secs)",
                 o->header_timeout_secs);
        c->state = CONN_CLOSING;
        reply_and_close(c, 408, msg);
      } else if (waited >= (uint64_t)KEEPALIVE_SECS * NS_PER_SEC) {
        conn_close(c);
      }
      break;
    case CONN_BODY: {
      bool deadline = waited >= (uint64_t)o->body_deadline_secs * NS_PER_SEC;
      bool stalled = now - c->moved_ns >= (uint64_t)o->body_timeout_secs * NS_PER_SEC;
      if (!deadline && !stalled) break;
      hark_limit_hit(HARK_LIMIT_HTTP_BODY_TIMEOUT,
                     "http: a request body was not in within %d s of its head or stalled for "
                     "%d s, %zu of %zu bytes (--http-body-deadline-secs, "
                     "--http-body-timeout-secs): 408, closing",
                     o->body_deadline_secs, o->body_timeout_secs, c->body_len, c->body_declared);
      size_t got = c->body_len, want = c->body_declared;
      c->body_declared = c->body_len; /* no lingering for it */
      c->close_after = true;
      hark_http_reply_error(
          c, 408,
          deadline
              ? hark_error_new(HARK_ERR_DEADLINE,
                               "request body not received within %d s: %zu of %zu bytes arrived "
                               "(--http-body-deadline-secs)",
                               o->body_deadline_secs, got, want)
              : hark_error_new(HARK_ERR_DEADLINE,
                               "request body stalled for %d s: %zu of %zu bytes arrived "
                               "(--http-body-timeout-secs)",
                               o->body_timeout_secs, got, want));
      break;
    }
    case CONN_LINGER:
      if (waited >= (uint64_t)LINGER_TOTAL_SECS * NS_PER_SEC ||
          now - c->moved_ns >= (uint64_t)LINGER_SECS * NS_PER_SEC)
        close_when_sent(c);
      break;
    default: break;
    }
  }
}

bool hark_http_conns_close_all(hark_http_loop *loop) {
  bool first = !loop->conns_closing_all, open = false;
  loop->conns_closing_all = true;
  for (hark_http_conn *c = loop->conns; c; c = c->next) {
    if (c->state == CONN_WS) continue; /* ws.c closes it with its handshake (and counts it) */
    if (first) {
      c->close_after = true;
      c->discard_keep = false; /* dropping a body: then close */
      /* No request accepted (a head not whole is none): nothing is lost.
       * What lws still holds of a reply goes out first. */
      if (c->state == CONN_HEAD) close_when_sent(c);
    }
    /* Connections accepted since, with no request yet, are not waited
     * for: a request they send is answered 503. */
    if (c->state != CONN_HEAD) open = true;
  }
  return open;
}
