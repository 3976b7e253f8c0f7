/*
 * h2.c — gRPC's HTTP/2 over the loops' raw connections, with nghttp2 (the
 * library behind h2load): one nghttp2 session per connection, one call per
 * stream. Loop thread only.
 *
 * In: a stream's request headers name the method (:path), its deadline
 * (grpc-timeout) and content type; DATA carries length-prefixed messages,
 * each unpacked and handed to the method's handler as it completes (a
 * unary method's first; every one of a stream's, in order). The client's
 * END_STREAM is the half-close. Flow control is ours: DATA is given back
 * to the window as it is read, except while a stream has 64 messages
 * waiting for their replies — then the client waits, not our memory.
 *
 * Out: what a call has to send (call.c) is written through an nghttp2 data
 * provider that takes the next message when nghttp2 wants bytes, and
 * sends the trailers (grpc-status, grpc-message) when the status is due;
 * a call that fails before any message answers "trailers-only". Frames
 * are gathered and leave in one write per loop callback. Replies made and
 * not yet written are the connection's share (call.c charges them): past
 * max_reply_bytes no request of the connection is read (its DATA is not
 * given back to flow control) until the client reads; and a connection
 * whose replies wait on a flow-control window the client keeps shut (0
 * included) for the send timeout is closed, as a socket it does not read
 * is (raw.c).
 *
 * A stream that closes before its status went out — the client
 * cancelled, the deadline passed, the connection went — is a cancelled
 * call: the service hears of it (closed) and what it sends later is
 * dropped.
 *
 * Memory: a message's bytes are charged to the in-flight budget as they
 * arrive, never as its prefix declares; what a connection's messages
 * declared and have not sent is bounded (RESOURCE_EXHAUSTED past it).
 *
 * Time and count limits (grpc.h's options), checked by a per-connection
 * tick: calls per connection (SETTINGS_MAX_CONCURRENT_STREAMS, enforced
 * by nghttp2 with REFUSED_STREAM) and bidirectional streams per
 * connection (RESOURCE_EXHAUSTED); a stream idle too long, or a request
 * message that stops coming (DEADLINE_EXCEEDED); a connection idle or old (GOAWAY NO_ERROR, then
 * close); keepalive PINGs and their timeout; the client's pings policed as
 * gRPC core does (GOAWAY ENHANCE_YOUR_CALM "too_many_pings").
 */
#include <nghttp2/nghttp2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "frontend/grpc/grpc_impl.h"
#include "util/alloc.h"
#include "util/log.h"

#define STREAM_WINDOW (1u << 20) /* per stream: a message of 1 MiB in one go */
#define CONN_WINDOW (16u << 20)  /* per connection */
#define WRITE_GATHER (64u * 1024u)
#define MAX_HEADER_LIST (16u * 1024u)
/* Open streams one connection may hold by default
 * (--grpc-max-concurrent-streams); a client past it is refused
 * (REFUSED_STREAM, which gRPC clients retry). Bounds the per-connection
 * state one client can pin; speech streams also count against admission. */
#define MAX_STREAMS 1024u
#define NS_PER_MS 1000000ull
/* A connection without calls may send pings this often unless
 * keepalive_permit_without_calls (gRPC core's rule). */
#define IDLE_PING_INTERVAL_MS (2ull * 3600 * 1000)
/* The tick that checks a connection's bounds: a quarter of the shortest,
 * within these. */
#define TICK_MIN_MS 50u
#define TICK_MAX_MS 1000u
/* Streams a client may cancel (RST_STREAM) before the connection is torn
 * down with GOAWAY (twice the streams it may hold), then per second: the
 * rapid-reset defence. nghttp2's
 * default (1000, then 33/s) cut off a client that hangs up a thousand
 * live calls on one channel at once; this still stops a flood. */
#define RESET_RATE 256u

struct h2conn {
  hark_grpc *g;
  hark_raw *raw;
  hark_http_loop *loop;
  nghttp2_session *s;
  hark_grpc_call *calls; /* its open streams' calls */
  bool in_recv;          /* inside nghttp2_session_mem_recv: no sending now */
  bool in_send;          /* inside conn_write: no writing again */
  hark_buf out;          /* frames gathered for one write, after the headroom */
  /* limits (loop thread) */
  hark_http_timer *tick;
  uint64_t opened_ns, last_rx_ns;
  uint64_t idle_since_ns;      /* the last call ended (or the connection began) */
  uint64_t ping_sent_ns;       /* our keepalive PING awaits its ACK; 0: none */
  uint64_t last_ping_recv_ns;  /* the client's last PING; 0: none since our data */
  uint64_t goaway_ns;          /* we sent GOAWAY for the age bound; 0: not */
  uint32_t ping_strikes;       /* the client's pings too soon */
  uint32_t pings_without_data; /* our PINGs since our last HEADERS/DATA */
  uint32_t n_bidi;             /* bidirectional streams begun and open */
  size_t declared;             /* its calls' messages: declared bytes not yet in */
  hark_grpc_share *share;      /* its replies made and not yet written */
  bool share_paused;           /* a call stopped reading for the share */
  uint64_t owed_ns;            /* its replies wait on a shut window since; 0: they do not */
  /* The frame filter in front of nghttp2 (idle_reset): the preface still
   * to pass, the frame header being read, what is left of the frame,
   * whether it is dropped, and the highest stream the client opened. */
  uint32_t preface_left, hdr_have, frame_left, max_opened;
  uint8_t hdr[9];
  bool dropping;
  bool goaway, terminating; /* GOAWAY sent; close once it is out */
};

const hark_grpc_reg *hark_grpc_find(const hark_grpc *g, const char *path, size_t len) {
  for (size_t i = 0; i < g->n_regs; i++)
    if (g->regs[i].path_len == len && memcmp(g->regs[i].path, path, len) == 0) return &g->regs[i];
  return NULL;
}

/* ---- writing ------------------------------------------------------------------- */

/* Sends what nghttp2 has to send, gathered; -1 when the connection is
 * done (failed, or both sides said goodbye). */
static int conn_write_now(h2conn *h) {
  for (;;) {
    if (hark_raw_choked(h->raw)) {
      hark_raw_want_write(h->raw);
      return 0;
    }
    h->out.len = HARK_RAW_HEADROOM;
    for (;;) {
      const uint8_t *p;
      ssize_t n = nghttp2_session_mem_send(h->s, &p);
      if (n < 0) {
        HARK_VERBOSE("grpc: closing a connection: %s", nghttp2_strerror((int)n));
        return -1;
      }
      if (n == 0) break;
      hark_buf_put(&h->out, p, (size_t)n);
      if (h->out.len >= WRITE_GATHER) break;
    }
    size_t len = h->out.len - HARK_RAW_HEADROOM;
    if (!len) break;
    if (hark_raw_write(h->raw, (uint8_t *)h->out.data + HARK_RAW_HEADROOM, len) < 0) {
      HARK_VERBOSE("grpc: closing a connection: the write failed");
      return -1;
    }
  }
  if (h->terminating && !nghttp2_session_want_write(h->s)) return -1; /* the GOAWAY is out */
  if (!nghttp2_session_want_read(h->s) && !nghttp2_session_want_write(h->s)) {
    HARK_VERBOSE("grpc: closing a connection: HTTP/2 is done both ways");
    return -1;
  }
  return 0;
}

/* Not while nghttp2 is reading (conn_rx writes once it is done), nor
 * while it is writing: a stream closed from inside nghttp2_session_mem_send
 * tells its service, whose answer on another call of this loop flushes
 * that call at once. nghttp2 must not be re-entered, and a nested write
 * would overwrite the frames gathered in h->out; what the nested call
 * submitted goes out with the write under way, which asks nghttp2 again
 * until it has nothing. */
static void resume_reading(h2conn *h);

static int conn_write(h2conn *h) {
  if (h->in_recv || h->in_send) return 0;
  h->in_send = true;
  int rc = conn_write_now(h);
  h->in_send = false;
  if (rc == 0) resume_reading(h);
  return rc;
}

/* grpc-message: percent-encoded, as gRPC asks, bytes outside printable
 * ASCII and '%'. */
static void percent_encode(const char *s, char *out, size_t cap) {
  static const char hex[] = "0123456789ABCDEF";
  size_t o = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && o + 4 < cap; p++) {
    if (*p >= 0x20 && *p < 0x7f && *p != '%') {
      out[o++] = (char)*p;
    } else {
      out[o++] = '%';
      out[o++] = hex[*p >> 4];
      out[o++] = hex[*p & 15];
    }
  }
  out[o] = '\0';
}

#define NV(n, v) \
  { (uint8_t *)(n), (uint8_t *)(v), sizeof(n) - 1, strlen(v), NGHTTP2_NV_FLAG_NONE }

/* The status as trailers (or, with `head`, as a trailers-only response). */
static int submit_status(h2conn *h, hark_grpc_call *c, bool head) {
  char code[16], msg[sizeof c->details * 3 + 1];
  pthread_mutex_lock(&c->mu);
  snprintf(code, sizeof code, "%d", (int)c->code);
  percent_encode(c->details, msg, sizeof msg);
  pthread_mutex_unlock(&c->mu);
  nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                     NV("grpc-status", code), NV("grpc-message", msg)};
  size_t n = msg[0] ? 4 : 3;
  c->trailers_sent = true;
  if (head) return nghttp2_submit_response(h->s, c->stream_id, nv, n, NULL);
  return nghttp2_submit_trailer(h->s, c->stream_id, nv + 2, n - 2);
}

/* Frees the slots at the head that are done and have nothing left to
 * write (c->mu held): they let later ones, and reading, go on. True when
 * that took a paused stream below its mark: what waits must be read. */
static bool pop_done_locked(hark_grpc_call *c) {
  bool was_paused = c->n_slots >= HARK_GRPC_STREAM_MAX_PENDING;
  while (c->head && c->head->done && !c->head->out_head) {
    hark_grpc_slot *slot = c->head;
    if (!(c->head = slot->next)) c->tail = NULL;
    c->n_slots--;
    slot->free_fn(slot);
  }
  return was_paused && c->n_slots < HARK_GRPC_STREAM_MAX_PENDING;
}

/* nghttp2 wants the stream's next bytes: the messages in order, then the
 * trailers when the status is due; DEFERRED until there is something. */
static ssize_t read_body(nghttp2_session *s, int32_t id, uint8_t *buf, size_t length,
                         uint32_t *flags, nghttp2_data_source *src, void *user) {
  (void)s, (void)id;
  h2conn *h = user;
  hark_grpc_call *c = src->ptr;
  size_t done = 0;
  bool unpaused = false;
  while (done < length) {
    if (!c->wout) {
      pthread_mutex_lock(&c->mu);
      if (!c->forced && c->uout) {
        c->wout = c->uout;
        c->uout = NULL;
      }
      if (!c->forced && !c->wout && pop_done_locked(c)) unpaused = true;
      if (!c->forced && !c->wout && c->head && c->head->out_head) {
        hark_grpc_slot *slot = c->head;
        c->wout = slot->out_head;
        if (!(slot->out_head = c->wout->next)) slot->out_tail = NULL;
      }
      bool due = !c->wout && hark_grpc_status_due_locked(c);
      pthread_mutex_unlock(&c->mu);
      if (!c->wout) {
        if (due) {
          *flags |= NGHTTP2_DATA_FLAG_EOF | NGHTTP2_DATA_FLAG_NO_END_STREAM;
          submit_status(h, c, false);
        } else if (!done) {
          c->deferred = true;
          if (unpaused) hark_grpc_kick_later(c);
          return NGHTTP2_ERR_DEFERRED;
        }
        break;
      }
      c->woff = 0;
    }
    size_t n = c->wout->len - c->woff;
    if (n > length - done) n = length - done;
    memcpy(buf + done, c->wout->data + c->woff, n);
    done += n;
    c->woff += n;
    if (c->woff == c->wout->len) {
      hark_grpc_out_free(c, c->wout);
      c->wout = NULL;
    }
  }
  if (done) h->owed_ns = 0; /* the client reads */
  /* Writing the replies freed slots of a stream that had stopped reading
   * at its mark: nothing else may come to read what waits (its client
   * sent it all, or is held back by flow control), so the loop is asked
   * to, once nghttp2 is done here. */
  if (unpaused) hark_grpc_kick_later(c);
  return (ssize_t)done;
}

static void read_messages(hark_grpc_call *c);

/* c->flush: writes what the call has ready (loop thread). */
static void flush(hark_grpc_call *c) {
  h2conn *h = c->conn;
  if (!h) {
    pthread_mutex_lock(&c->mu);
    hark_grpc_sweep_locked(c);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  pthread_mutex_lock(&c->mu);
  if (!c->wout) pop_done_locked(c);
  pthread_mutex_unlock(&c->mu);
  read_messages(c); /* a stream below its mark reads what waits */
  if (c->trailers_sent) return;
  pthread_mutex_lock(&c->mu);
  bool data = !c->forced && (c->uout || (c->head && c->head->out_head));
  bool due = hark_grpc_status_due_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (!c->response_started && (data || due)) {
    c->response_started = true;
    if (!data) {
      submit_status(h, c, true); /* trailers-only */
    } else {
      nghttp2_nv nv[] = {NV(":status", "200"), NV("content-type", "application/grpc"),
                         NV("grpc-accept-encoding", "identity")};
      nghttp2_data_provider dp = {.source.ptr = c, .read_callback = read_body};
      nghttp2_submit_response(h->s, c->stream_id, nv, 3, &dp);
    }
  } else if (c->deferred && (data || due || c->forced)) {
    c->deferred = false;
    nghttp2_session_resume_data(h->s, c->stream_id);
  }
  if (conn_write(h) < 0) hark_raw_close(h->raw);
}

static void message_drop(hark_grpc_call *c);

/* Ends the call with a status now (loop thread), as if replied; what it
 * was receiving is dropped. */
static void finish(hark_grpc_call *c, hark_grpc_code code, const char *details) {
  pthread_mutex_lock(&c->mu);
  if (c->code == HARK_GRPC_OK) {
    c->code = code;
    snprintf(c->details, sizeof c->details, "%s", details);
  }
  c->replied = true;
  c->read_done = true;
  pthread_mutex_unlock(&c->mu);
  message_drop(c); /* a message half in holds nothing once the call is over */
  if (!c->reading) {
    hark_buf_free(&c->in);
    c->in_off = c->skip = 0;
  }
  flush(c);
}

/* ---- reading ------------------------------------------------------------------ */

static bool is_streaming(const hark_grpc_call *c) {
  return c->reg && (c->reg->m->flags & HARK_GRPC_STREAMING);
}

static bool share_over(const h2conn *h) {
  return atomic_load_explicit(&h->share->bytes, memory_order_relaxed) >= h->g->max_reply_bytes;
}

/* Once the client has read its connection below its share: every call
 * that stopped for it is asked to read again (from the loop, not from
 * inside nghttp2). */
static void resume_reading(h2conn *h) {
  if (!h->share_paused || share_over(h)) return;
  h->share_paused = false;
  for (hark_grpc_call *c = h->calls; c; c = c->next)
    if (c->unconsumed || c->in.len > c->in_off) hark_grpc_kick_later(c);
}

/* True while the call may not read its next message: its connection's
 * replies wait for the client past its share, or (a stream) too many of
 * its messages wait for their replies. */
static bool paused(hark_grpc_call *c) {
  if (c->conn && share_over(c->conn)) {
    c->conn->share_paused = true;
    return true;
  }
  if (!is_streaming(c)) return false;
  pthread_mutex_lock(&c->mu);
  bool p = c->n_slots >= HARK_GRPC_STREAM_MAX_PENDING;
  pthread_mutex_unlock(&c->mu);
  return p;
}

/* True once nothing more the client sends matters: read and dropped. */
static bool deaf(hark_grpc_call *c) {
  pthread_mutex_lock(&c->mu);
  bool d = c->closed || c->forced || (is_streaming(c) ? c->read_done : c->replied);
  pthread_mutex_unlock(&c->mu);
  return d;
}

static void on_message(hark_grpc_call *c, const uint8_t *p, size_t n) {
  if (!is_streaming(c)) {
    if (c->got_message) return; /* a unary call reads one */
    c->got_message = true;
  }
  if (!hark_grpc_within_message_bound(c->reg->m->request, p, n)) {
    char text[200];
    snprintf(text, sizeof text,
             "%s holds more than %u messages (parameters, inputs, outputs and their parts); at "
             "most %u are allowed",
             c->reg->m->request->name, HARK_GRPC_MAX_NESTED_MESSAGES,
             HARK_GRPC_MAX_NESTED_MESSAGES);
    finish(c, HARK_GRPC_INVALID_ARGUMENT, text);
    return;
  }
  ProtobufCMessage *msg = hark_grpc_unpack(c, p, n);
  if (!msg) {
    char text[160];
    snprintf(text, sizeof text, "malformed %s message", c->reg->m->request->name);
    finish(c, HARK_GRPC_INVALID_ARGUMENT, text);
    return;
  }
  hark_grpc_handle(c, msg);
}

/* The client sent its last message, and every one was read. */
static void half_close(hark_grpc_call *c) {
  c->half_close_done = true;
  if (!is_streaming(c)) {
    if (!c->got_message) finish(c, HARK_GRPC_INVALID_ARGUMENT, "no request message");
    return;
  }
  if (deaf(c)) return;
  if (c->reg->m->half_close) c->reg->m->half_close(c);
  pthread_mutex_lock(&c->mu);
  c->read_done = true;
  pthread_mutex_unlock(&c->mu);
  flush(c);
}

/*
 * A message's bytes are charged to the in-flight budget as they arrive
 * (as HTTP bodies are), never as declared: a prefix that declares 64 MiB
 * and sends nothing holds nothing. What is declared and not yet sent is
 * bounded per connection instead (--grpc-max-declared-bytes-per-connection),
 * and a message that stops coming ends with the message timeout.
 */

/* The message being received is done with, whole or not: what it
 * declared and did not send leaves the connection's count. */
static void message_close(hark_grpc_call *c) {
  if (!c->msg_open) return;
  if (c->conn) c->conn->declared -= c->msg_unsent;
  c->msg_unsent = 0;
  c->msg_open = false;
}

/* The prefix of a message of `n` bytes is in: the bounds on its declared
 * size, before a byte of it is held; false (with the client's text in
 * c->refuse_text) when it passes one. */
static bool message_open(hark_grpc_call *c, size_t n) {
  h2conn *h = c->conn;
  size_t cap = c->g->max_message_bytes > HARK_GRPC_STREAM_MAX_INFLIGHT
                   ? c->g->max_message_bytes
                   : HARK_GRPC_STREAM_MAX_INFLIGHT;
  size_t held = atomic_load_explicit(&c->held, memory_order_relaxed);
  unsigned long long max = hark_inflight_max();
  if (is_streaming(c) && n > cap - held) {
    hark_limit_hit(HARK_LIMIT_INFLIGHT_BYTES,
                   "grpc: a message of %zu bytes refused: its stream holds %zu bytes in flight, "
                   "at most %zu: RESOURCE_EXHAUSTED",
                   n, held, cap);
    snprintf(c->refuse_text, sizeof c->refuse_text,
             "message of %zu bytes refused: this stream already holds %zu bytes of requests in "
             "flight, at most %zu per stream; wait for their responses",
             n, held, cap);
    return false;
  }
  if (max && n > max) { /* could never fit: refused before its bytes come */
    hark_limit_hit(HARK_LIMIT_INFLIGHT_BYTES,
                   "grpc: a message of %zu bytes refused: larger than --max-inflight-bytes "
                   "(%llu): RESOURCE_EXHAUSTED",
                   n, max);
    snprintf(c->refuse_text, sizeof c->refuse_text,
             "message of %zu bytes is larger than the server's whole in-flight memory budget "
             "(%llu bytes; --max-inflight-bytes)",
             n, max);
    return false;
  }
  size_t limit = c->g->max_declared_bytes;
  if (n > limit - h->declared) {
    hark_limit_hit(HARK_LIMIT_GRPC_DECLARED_BYTES,
                   "grpc: a message of %zu bytes refused: its connection has %zu bytes of "
                   "messages declared and not yet sent, at most %zu "
                   "(--grpc-max-declared-bytes-per-connection): RESOURCE_EXHAUSTED",
                   n, h->declared, limit);
    snprintf(c->refuse_text, sizeof c->refuse_text,
             "message of %zu bytes refused: this connection has %zu bytes of messages declared "
             "and not yet sent, at most %zu (--grpc-max-declared-bytes-per-connection); send "
             "them first, or open another connection",
             n, h->declared, limit);
    return false;
  }
  c->msg_open = true;
  c->msg_unsent = n;
  h->declared += n;
  return true;
}

/* Charges the message being received up to the `upto` of its bytes that
 * are in; false (with the client's text) when the in-flight budget
 * cannot take them. */
static bool message_charge(hark_grpc_call *c, size_t upto) {
  if (upto <= c->msg_charge) return true;
  size_t more = upto - c->msg_charge;
  if (!hark_inflight_take(more)) {
    unsigned long long now = hark_inflight_bytes(), max = hark_inflight_max();
    hark_limit_hit(HARK_LIMIT_INFLIGHT_BYTES,
                   "grpc: a message of %zu bytes refused: %llu of %llu bytes in flight "
                   "(--max-inflight-bytes): RESOURCE_EXHAUSTED",
                   c->msg_charge + c->msg_unsent, now, max);
    snprintf(c->refuse_text, sizeof c->refuse_text,
             "message of %zu bytes does not fit in the server's in-flight memory budget now "
             "(%llu of %llu bytes held; --max-inflight-bytes); try again later",
             c->msg_charge + c->msg_unsent, now, max);
    return false;
  }
  atomic_fetch_add_explicit(&c->held, more, memory_order_relaxed);
  c->msg_charge += more;
  c->msg_unsent -= more;
  c->conn->declared -= more;
  return true;
}

/* The message being received will not be: what it took goes back. */
static void message_drop(hark_grpc_call *c) {
  message_close(c);
  hark_grpc_message_give(c, c->msg_charge);
  c->msg_charge = 0;
}

/* A refused message of a stream whose first bytes are in: the method
 * answers it (or the call ends), and the rest of it is dropped as it
 * comes. */
static void refuse_message(hark_grpc_call *c, const uint8_t *p, size_t n, size_t have) {
  c->refusing = false;
  size_t prefix = n < HARK_GRPC_REFUSED_PREFIX ? n : HARK_GRPC_REFUSED_PREFIX;
  if (have >= n) {
    c->in_off += 5 + n;
  } else {
    c->skip = n - have;
    c->in_off = c->in.len;
  }
  if (c->reg->m->refused)
    c->reg->m->refused(c, p + 5, prefix, c->refuse_text);
  else
    finish(c, HARK_GRPC_RESOURCE_EXHAUSTED, c->refuse_text);
}

/* Reads the whole messages that have arrived, while the stream may; gives
 * the bytes read back to flow control. */
static void read_messages(hark_grpc_call *c) {
  h2conn *h = c->conn;
  if (!h || c->reading) return;
  c->reading = true;
  size_t limit = c->g->max_message_bytes;
  while (c->conn && (c->skip || c->in.len - c->in_off >= 5)) {
    if (deaf(c)) {
      c->in_off = c->in.len;
      c->skip = 0;
      c->refusing = false;
      message_drop(c); /* the one being assembled */
      break;
    }
    if (c->skip) { /* the rest of a refused message */
      size_t k = c->in.len - c->in_off < c->skip ? c->in.len - c->in_off : c->skip;
      if (!k) break;
      c->in_off += k;
      c->skip -= k;
      continue;
    }
    if (paused(c)) break;
    const uint8_t *p = (const uint8_t *)c->in.data + c->in_off;
    size_t n = (size_t)p[1] << 24 | (size_t)p[2] << 16 | (size_t)p[3] << 8 | p[4];
    size_t have = c->in.len - c->in_off - 5;
    char text[200];
    if (n > limit) {
      snprintf(text, sizeof text, "received message larger than max (%zu vs. %zu)", n, limit);
      finish(c, HARK_GRPC_RESOURCE_EXHAUSTED, text);
      continue;
    }
    if (p[0] & 1) {
      snprintf(text, sizeof text, "compressed messages (grpc-encoding %s) are not supported",
               c->encoding[0] ? c->encoding : "?");
      finish(c, HARK_GRPC_UNIMPLEMENTED, text);
      continue;
    }
    if (!c->refusing &&
        ((!c->msg_open && !message_open(c, n)) || !message_charge(c, have < n ? have : n))) {
      message_drop(c);
      if (!is_streaming(c)) {
        finish(c, HARK_GRPC_RESOURCE_EXHAUSTED, c->refuse_text);
        continue;
      }
      c->refusing = true;
    }
    if (c->refusing) { /* wait for its first bytes (its id), then drop it */
      if (have < (n < HARK_GRPC_REFUSED_PREFIX ? n : HARK_GRPC_REFUSED_PREFIX)) break;
      refuse_message(c, p, n, have);
      continue;
    }
    /* Not set aside as declared: the buffer grows with what arrives. */
    if (have < n) break;
    message_close(c);
    c->in_off += 5 + n;
    on_message(c, p + 5, n);
    hark_grpc_message_give(c, c->msg_charge); /* unless the handler kept the message */
    c->msg_charge = 0;
  }
  if (c->in_off == c->in.len) {
    c->in.len = c->in_off = 0;
    /* A big message's buffer goes with it: an idle stream holds little. */
    if (c->in.cap > STREAM_WINDOW && !c->msg_charge) hark_buf_free(&c->in);
  } else if (c->in_off > 0 && c->in_off >= c->in.len / 2) { /* keep the unread part in front */
    memmove(c->in.data, c->in.data + c->in_off, c->in.len - c->in_off);
    c->in.len -= c->in_off;
    c->in_off = 0;
  }
  if (c->conn && !paused(c) && c->unconsumed) {
    nghttp2_session_consume(h->s, c->stream_id, c->unconsumed);
    c->unconsumed = 0;
  }
  c->reading = false;
  if (c->conn && c->half_closed && !c->half_close_done && c->in.len == c->in_off) half_close(c);
}

/* ---- streams and calls ------------------------------------------------------------ */

static void on_deadline(void *arg) {
  hark_grpc_call *c = arg;
  pthread_mutex_lock(&c->mu);
  bool late = !c->closed;
  if (late) {
    c->code = HARK_GRPC_DEADLINE_EXCEEDED;
    snprintf(c->details, sizeof c->details, "Deadline Exceeded");
    c->forced = c->replied = c->read_done = c->cancelled = true;
    hark_cancel_set(c->cancel);
    hark_grpc_sweep_locked(c);
  }
  pthread_mutex_unlock(&c->mu);
  if (late) flush(c);
}

/* The request's headers are in: the method runs, or the call is refused. */
static void dispatch(h2conn *h, hark_grpc_call *c) {
  char text[300];
  if (!c->reg) {
    snprintf(text, sizeof text, "method '%s' is not implemented", c->path);
    finish(c, HARK_GRPC_UNIMPLEMENTED, text);
    return;
  }
  if (c->bad_type) {
    finish(c, HARK_GRPC_INTERNAL, "content-type is not application/grpc");
    return;
  }
  if (!hark_grpc_call_allowed(c, c->reg->m->api)) { /* --grpc-restricted-protocol */
    hark_restrict_message_state(h->g->opts.restricted, c->reg->m->api, c->opened, text,
                                sizeof text);
    finish(c, HARK_GRPC_PERMISSION_DENIED, text);
    return;
  }
  if ((c->reg->m->flags & HARK_GRPC_REFUSE_DRAINING) && atomic_load(&h->g->draining)) {
    /* A drain lets the calls already open finish; new ones go elsewhere. */
    finish(c, HARK_GRPC_UNAVAILABLE, "Server is shutting down");
    return;
  }
  uint32_t cap = h->g->opts.max_streams_per_connection;
  if (is_streaming(c) && cap && h->n_bidi >= cap) {
    hark_limit_hit(HARK_LIMIT_GRPC_STREAMS_PER_CONNECTION,
                   "grpc: a connection asked for more than %u streams at once "
                   "(--grpc-max-streams-per-connection): RESOURCE_EXHAUSTED",
                   cap);
    snprintf(text, sizeof text,
             "this connection has %u streams open: at most %u are allowed per connection "
             "(--grpc-max-streams-per-connection); open another connection or end one",
             h->n_bidi, cap);
    finish(c, HARK_GRPC_RESOURCE_EXHAUSTED, text);
    return;
  }
  if (c->timeout_us) {
    c->deadline = hark_http_timer_new(h->loop, on_deadline, c);
    hark_http_timer_arm(c->deadline, c->timeout_us);
  }
  if (is_streaming(c)) {
    c->began = true;
    c->last_rx_ns = hark_now_ns();
    h->n_bidi++;
    atomic_fetch_add(&h->g->open_streams, 1); /* until the call is freed */
  }
}

/* The stream is gone: the call is over for the service. */
static void stream_gone(h2conn *h, hark_grpc_call *c) {
  if (c->prev)
    c->prev->next = c->next;
  else if (h->calls == c)
    h->calls = c->next;
  if (c->next) c->next->prev = c->prev;
  c->prev = c->next = NULL;
  message_close(c);
  c->conn = NULL;
  /* DATA the stream received and never read (it was paused, or a message
   * was half in) still holds the connection's window: give it back, or
   * every such stream cancelled shrinks the window for good, until the
   * whole connection stalls. */
  if (c->unconsumed) nghttp2_session_consume_connection(h->s, c->unconsumed);
  c->unconsumed = 0;
  if (c->began) h->n_bidi--;
  if (!h->calls) h->idle_since_ns = hark_now_ns();
  hark_http_timer_free(c->deadline);
  c->deadline = NULL;
  pthread_mutex_lock(&c->mu);
  c->closed = true;
  if (!c->trailers_sent) {
    c->cancelled = true;
    hark_cancel_set(c->cancel);
  }
  hark_grpc_sweep_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (c->began && c->reg->m->closed) c->reg->m->closed(c);
  hark_grpc_call_unref(c); /* the stream's */
}

/* grpc-timeout: an integer of at most 8 digits and a unit. */
static uint64_t parse_timeout(const uint8_t *v, size_t n) {
  if (n < 2 || n > 9) return 0;
  uint64_t x = 0;
  for (size_t i = 0; i + 1 < n; i++) {
    if (v[i] < '0' || v[i] > '9') return 0;
    x = x * 10 + (v[i] - '0');
  }
  switch (v[n - 1]) {
  case 'H': return x * 3600000000ull;
  case 'M': return x * 60000000ull;
  case 'S': return x * 1000000ull;
  case 'm': return x * 1000ull;
  case 'u': return x;
  case 'n': return (x + 999) / 1000;
  default: return 0;
  }
}

/* ---- nghttp2's callbacks ----------------------------------------------------------- */

static int on_begin_headers(nghttp2_session *s, const nghttp2_frame *f, void *user) {
  h2conn *h = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  hark_grpc_call *c = hark_grpc_call_new(h->g, h->loop, flush);
  c->conn = h;
  snprintf(c->peer, sizeof c->peer, "%s", hark_raw_peer(h->raw));
  c->stream_id = f->hd.stream_id;
  c->share = h->share;
  hark_grpc_share_ref(h->share);
  c->last_rx_ns = hark_now_ns();
  c->next = h->calls;
  if (c->next) c->next->prev = c;
  h->calls = c;
  nghttp2_session_set_stream_user_data(s, c->stream_id, c);
  return 0;
}

static int on_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *name, size_t nlen,
                     const uint8_t *value, size_t vlen, uint8_t flags, void *user) {
  (void)flags;
  h2conn *h = user;
  if (f->hd.type != NGHTTP2_HEADERS || f->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  hark_grpc_call *c = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  if (!c) return 0;
  if (nlen == 5 && memcmp(name, ":path", 5) == 0) {
    snprintf(c->path, sizeof c->path, "%.*s", (int)vlen, value);
    c->reg = hark_grpc_find(h->g, (const char *)value, vlen);
  } else if (nlen == 12 && memcmp(name, "content-type", 12) == 0) {
    c->bad_type = vlen < 16 || strncasecmp((const char *)value, "application/grpc", 16) != 0;
  } else if (nlen == 12 && memcmp(name, "grpc-timeout", 12) == 0) {
    c->timeout_us = parse_timeout(value, vlen);
  } else if (nlen == 13 && memcmp(name, "grpc-encoding", 13) == 0) {
    snprintf(c->encoding, sizeof c->encoding, "%.*s", (int)vlen, value);
  } else if (nlen && name[0] != ':') {
    hark_restrict_collect(h->g->opts.restricted, &c->opened, name, nlen, value, vlen);
  }
  return 0;
}

static void on_ping(h2conn *h, const nghttp2_frame *f);

static int on_frame_recv(nghttp2_session *s, const nghttp2_frame *f, void *user) {
  h2conn *h = user;
  if (f->hd.type == NGHTTP2_PING) on_ping(h, f);
  if (f->hd.type == NGHTTP2_GOAWAY)
    HARK_VERBOSE("grpc: GOAWAY received, error %u, last stream %d", f->goaway.error_code,
                 f->goaway.last_stream_id);
  if (f->hd.type != NGHTTP2_HEADERS && f->hd.type != NGHTTP2_DATA) return 0;
  hark_grpc_call *c = nghttp2_session_get_stream_user_data(s, f->hd.stream_id);
  if (!c) return 0;
  if (f->hd.type == NGHTTP2_HEADERS && f->headers.cat == NGHTTP2_HCAT_REQUEST) dispatch(h, c);
  if (c->conn && (f->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
    c->half_closed = true;
    read_messages(c);
  }
  return 0;
}

static int on_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
                   void *user) {
  (void)flags, (void)user;
  hark_grpc_call *c = nghttp2_session_get_stream_user_data(s, id);
  if (!c || deaf(c)) {
    nghttp2_session_consume(s, id, len);
    return 0;
  }
  c->unconsumed += len;
  c->last_rx_ns = hark_now_ns();
  if (!hark_buf_append(&c->in, data, len)) { /* client-sized */
    finish(c, HARK_GRPC_RESOURCE_EXHAUSTED, "out of memory for the message");
    return 0;
  }
  read_messages(c);
  return 0;
}

/* After our last frame of a stream, one the client is still sending on
 * is reset (NO_ERROR): it has nothing left to say to us. */
static int on_frame_send(nghttp2_session *s, const nghttp2_frame *f, void *user) {
  h2conn *h = user;
  if (f->hd.type == NGHTTP2_GOAWAY)
    HARK_VERBOSE("grpc: GOAWAY sent, error %u, last stream %d", f->goaway.error_code,
                 f->goaway.last_stream_id);
  if (f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) {
    /* Data flows: the client's pings are welcome again (gRPC core's
     * rule), and our keepalive may ping again. */
    h->ping_strikes = 0;
    h->last_ping_recv_ns = 0;
    h->pings_without_data = 0;
  }
  if ((f->hd.type == NGHTTP2_HEADERS || f->hd.type == NGHTTP2_DATA) &&
      (f->hd.flags & NGHTTP2_FLAG_END_STREAM) &&
      !nghttp2_session_get_stream_remote_close(s, f->hd.stream_id))
    nghttp2_submit_rst_stream(s, NGHTTP2_FLAG_NONE, f->hd.stream_id, NGHTTP2_NO_ERROR);
  return 0;
}

/* nghttp2 found the client at fault (it answers by itself: RST_STREAM,
 * or GOAWAY and the end of the connection): say why, for whoever looks. */
static int on_error(nghttp2_session *s, int code, const char *msg, size_t len, void *user) {
  (void)s, (void)user;
  HARK_VERBOSE("grpc: HTTP/2 error from a client (%s): %.*s", nghttp2_strerror(code), (int)len,
               msg);
  return 0;
}

static int on_invalid_frame(nghttp2_session *s, const nghttp2_frame *f, int code, void *user) {
  (void)s, (void)user;
  HARK_VERBOSE("grpc: HTTP/2 frame of type %u on stream %d refused: %s", f->hd.type,
               f->hd.stream_id, nghttp2_strerror(code));
  return 0;
}

static int on_stream_close(nghttp2_session *s, int32_t id, uint32_t error, void *user) {
  (void)error;
  hark_grpc_call *c = nghttp2_session_get_stream_user_data(s, id);
  if (c) stream_gone(user, c);
  return 0;
}

/* ---- limits ------------------------------------------------------------------------------ */

/* GOAWAY with `code` and `why` (its debug data); streams the client opened
 * before it go on. With `now`, the connection closes once it is out. */
static void goaway(h2conn *h, uint32_t code, const char *why, bool now) {
  if (!h->goaway || now)
    nghttp2_submit_goaway(h->s, NGHTTP2_FLAG_NONE, nghttp2_session_get_last_proc_stream_id(h->s),
                          code, (const uint8_t *)why, strlen(why));
  h->goaway = true;
  if (now) h->terminating = true;
}

/* A PING from the client: its ACK (nghttp2 answers on its own) or one
 * that may be a strike; one of ours answered. */
static void on_ping(h2conn *h, const nghttp2_frame *f) {
  const hark_grpc_options *o = &h->g->opts;
  uint64_t now = hark_now_ns();
  if (f->hd.flags & NGHTTP2_FLAG_ACK) {
    h->ping_sent_ns = 0;
    return;
  }
  uint64_t interval_ms = !h->calls && !o->keepalive_permit_without_calls
                             ? IDLE_PING_INTERVAL_MS
                             : o->min_recv_ping_interval_ms;
  bool strike = h->last_ping_recv_ns && now - h->last_ping_recv_ns < interval_ms * NS_PER_MS;
  h->last_ping_recv_ns = now;
  if (!strike || ++h->ping_strikes <= o->max_ping_strikes || !o->max_ping_strikes) return;
  hark_limit_hit(HARK_LIMIT_GRPC_PING_STRIKES,
                 "grpc: a client sent %u pings too soon, less than %llu ms apart without data "
                 "(--grpc-http2-min-recv-ping-interval-without-data, "
                 "--grpc-http2-max-ping-strikes): GOAWAY ENHANCE_YOUR_CALM, closing",
                 h->ping_strikes, (unsigned long long)interval_ms);
  goaway(h, NGHTTP2_ENHANCE_YOUR_CALM, "too_many_pings", true);
}

/* A stream idle past its bound, with nothing of it in the works: the
 * text to end it with (DEADLINE_EXCEEDED); false when it is not. */
static bool stream_idle(hark_grpc_call *c, uint64_t now, char *text, size_t cap) {
  uint64_t ms = c->g->opts.stream_idle_timeout_ms;
  if (!ms || !c->began || now - c->last_rx_ns < ms * NS_PER_MS) return false;
  pthread_mutex_lock(&c->mu);
  bool busy = c->head != NULL;
  pthread_mutex_unlock(&c->mu);
  if (busy) return false;
  hark_limit_hit(HARK_LIMIT_GRPC_STREAM_IDLE,
                 "grpc: a stream sent nothing for %llu ms (--grpc-stream-idle-timeout-secs): "
                 "DEADLINE_EXCEEDED",
                 (unsigned long long)ms);
  snprintf(text, cap,
           "stream idle timeout: the client sent nothing for %llu ms "
           "(--grpc-stream-idle-timeout-secs)",
           (unsigned long long)ms);
  return true;
}

/* A request message that stopped coming: a unary call still waiting for
 * its request (from its HEADERS on), or a message of a stream whose
 * prefix is in, with no byte from the client for the message timeout. */
static bool message_stalled(hark_grpc_call *c, uint64_t now, char *text, size_t cap) {
  uint64_t ms = c->g->opts.message_timeout_ms;
  if (!ms || now - c->last_rx_ns < ms * NS_PER_MS) return false;
  if (c->conn && share_over(c->conn)) return false; /* we hold it back, not the client */
  bool waiting = c->msg_open || c->refusing || c->skip ||
                 (!is_streaming(c) && !c->got_message && !c->half_closed);
  if (!waiting) return false;
  hark_limit_hit(HARK_LIMIT_GRPC_MESSAGE_TIMEOUT,
                 "grpc: a request message got no byte for %llu ms (--grpc-message-timeout-secs): "
                 "DEADLINE_EXCEEDED",
                 (unsigned long long)ms);
  snprintf(text, cap,
           "request message timeout: the client sent no byte of its message for %llu ms "
           "(--grpc-message-timeout-secs)",
           (unsigned long long)ms);
  return true;
}

/* The calls idle past a bound end DEADLINE_EXCEEDED. Ending one writes,
 * and writing may close other streams (and free their calls): the walk
 * starts over after each; those ended are deaf and skipped. */
static void check_streams(h2conn *h, uint64_t now) {
  char text[200];
  for (hark_grpc_call *c = h->calls; c;) {
    if (!deaf(c) &&
        (stream_idle(c, now, text, sizeof text) || message_stalled(c, now, text, sizeof text))) {
      finish(c, HARK_GRPC_DEADLINE_EXCEEDED, text);
      c = h->calls;
      continue;
    }
    c = c->next;
  }
}

/* Some of the connection's replies can go no further because the client
 * keeps its flow-control window shut: the connection's, or a stream's that
 * has a reply under way. */
static bool window_shut(h2conn *h) {
  if (nghttp2_session_get_remote_window_size(h->s) <= 0) return true;
  for (hark_grpc_call *c = h->calls; c; c = c->next)
    if (c->response_started && !c->trailers_sent && !c->deferred &&
        nghttp2_session_find_stream(h->s, c->stream_id) &&
        nghttp2_session_get_stream_remote_window_size(h->s, c->stream_id) <= 0)
      return true;
  return false;
}

/* A client that leaves its replies unread behind a shut window for the
 * send timeout: what it holds goes, with the connection. */
static bool replies_unread(h2conn *h, uint64_t now) {
  size_t owed = atomic_load_explicit(&h->share->bytes, memory_order_relaxed);
  if (!owed || !window_shut(h)) {
    h->owed_ns = 0;
    return false;
  }
  if (!h->owed_ns) h->owed_ns = now;
  uint64_t ms = h->g->opts.send_timeout_ms;
  if (now - h->owed_ns < ms * NS_PER_MS) return false;
  hark_limit_hit(HARK_LIMIT_SEND_TIMEOUT,
                 "grpc: a client read none of its %zu bytes of replies for %llu ms, its HTTP/2 "
                 "window shut (--send-timeout-secs): closing",
                 owed, (unsigned long long)ms);
  return true;
}

/* The connection's bounds, now: -1 when it must close at once. */
static int check_conn(h2conn *h) {
  const hark_grpc_options *o = &h->g->opts;
  uint64_t now = hark_now_ns();
  if (replies_unread(h, now)) return -1;
  if (h->goaway_ns && o->max_connection_age_grace_ms &&
      now - h->goaway_ns >= o->max_connection_age_grace_ms * NS_PER_MS)
    return -1; /* its calls had their grace */
  if (o->max_connection_age_ms && !h->goaway_ns &&
      now - h->opened_ns >= o->max_connection_age_ms * NS_PER_MS) {
    hark_limit_hit(HARK_LIMIT_GRPC_MAX_AGE,
                   "grpc: a connection reached its maximum age of %llu ms "
                   "(--grpc-max-connection-age): GOAWAY",
                   (unsigned long long)o->max_connection_age_ms);
    goaway(h, NGHTTP2_NO_ERROR, "max_age", false);
    h->goaway_ns = now;
  }
  if (o->max_connection_idle_ms && !h->calls && !h->goaway &&
      now - h->idle_since_ns >= o->max_connection_idle_ms * NS_PER_MS) {
    hark_limit_hit(HARK_LIMIT_GRPC_IDLE,
                   "grpc: a connection had no call for %llu ms (--grpc-max-connection-idle): "
                   "GOAWAY, closing",
                   (unsigned long long)o->max_connection_idle_ms);
    goaway(h, NGHTTP2_NO_ERROR, "max_idle", true);
  }
  if (h->ping_sent_ns) {
    if (now - h->ping_sent_ns >= o->keepalive_timeout_ms * NS_PER_MS) {
      hark_limit_hit(HARK_LIMIT_GRPC_KEEPALIVE_TIMEOUT,
                     "grpc: a client did not answer a keepalive ping within %llu ms "
                     "(--grpc-keepalive-timeout): closing",
                     (unsigned long long)o->keepalive_timeout_ms);
      return -1;
    }
  } else if (o->keepalive_time_ms && !h->terminating &&
             now - h->last_rx_ns >= o->keepalive_time_ms * NS_PER_MS &&
             (h->calls || o->keepalive_permit_without_calls) &&
             (!o->max_pings_without_data || h->pings_without_data < o->max_pings_without_data)) {
    uint8_t opaque[8] = {'h', 'a', 'r', 'k', 'p', 'i', 'n', 'g'};
    nghttp2_submit_ping(h->s, NGHTTP2_FLAG_NONE, opaque);
    h->ping_sent_ns = now;
    h->pings_without_data++;
  }
  check_streams(h, now);
  return conn_write(h);
}

/* The shortest bound in use, a quarter of it: how often check_conn runs. */
static uint64_t tick_us(const hark_grpc_options *o) {
  uint64_t b[] = {o->stream_idle_timeout_ms,     o->message_timeout_ms,
                  o->keepalive_time_ms,          o->keepalive_timeout_ms,
                  o->max_connection_idle_ms,     o->max_connection_age_ms,
                  o->max_connection_age_grace_ms};
  uint64_t ms = TICK_MAX_MS;
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
    if (b[i] && b[i] / 4 < ms) ms = b[i] / 4;
  return (ms < TICK_MIN_MS ? TICK_MIN_MS : ms) * 1000;
}

static void on_tick(void *arg) {
  h2conn *h = arg;
  if (check_conn(h) < 0) {
    hark_raw_close(h->raw);
    return;
  }
  hark_http_timer_arm(h->tick, tick_us(&h->g->opts));
}

/* ---- the raw connection --------------------------------------------------------------- */

static void *conn_open(void *userp, hark_raw *raw) {
  hark_grpc *g = userp;
  h2conn *h = hark_xcalloc(1, sizeof *h);
  h->g = g;
  h->raw = raw;
  h->loop = hark_raw_loop(raw);
  if (nghttp2_session_server_new2(&h->s, g->cbs, h, g->h2_opts) != 0) {
    free(h);
    return NULL;
  }
  h->share = hark_xcalloc(1, sizeof *h->share);
  atomic_init(&h->share->refs, 1);
  uint32_t max_streams =
      g->opts.max_concurrent_streams ? g->opts.max_concurrent_streams : MAX_STREAMS;
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, STREAM_WINDOW},
                                 {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE, MAX_HEADER_LIST},
                                 {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, max_streams}};
  nghttp2_submit_settings(h->s, NGHTTP2_FLAG_NONE, iv, sizeof iv / sizeof iv[0]);
  nghttp2_session_set_local_window_size(h->s, NGHTTP2_FLAG_NONE, 0, CONN_WINDOW);
  if (!hark_buf_reserve(&h->out, HARK_RAW_HEADROOM + WRITE_GATHER)) hark_oom("h2", WRITE_GATHER);
  if (conn_write(h) < 0) {
    nghttp2_session_del(h->s);
    hark_buf_free(&h->out);
    hark_grpc_share_unref(h->share);
    free(h);
    return NULL;
  }
  h->opened_ns = h->last_rx_ns = h->idle_since_ns = hark_now_ns();
  h->preface_left = NGHTTP2_CLIENT_MAGIC_LEN;
  h->tick = hark_http_timer_new(h->loop, on_tick, h);
  hark_http_timer_arm(h->tick, tick_us(&g->opts));
  return h;
}

/* Hands [p, p + n) to nghttp2; -1 when the connection must close. */
static int feed(h2conn *h, const uint8_t *p, size_t n) {
  if (!n) return 0;
  h->in_recv = true;
  ssize_t rc = nghttp2_session_mem_recv(h->s, p, n);
  h->in_recv = false;
  if (rc < 0) {
    HARK_VERBOSE("grpc: closing a connection: %s", nghttp2_strerror((int)rc));
    return -1;
  }
  return 0;
}

/*
 * gRPC core clients (grpcio 1.51) that cancel a call as they make it now
 * and then send RST_STREAM for a stream whose HEADERS never went out. To
 * nghttp2 that stream is idle, and RFC 9113 6.4 makes it a connection
 * error: GOAWAY PROTOCOL_ERROR, and every live call on the connection is
 * lost ("Socket closed"). gRPC core's own server ignores such a reset, and
 * so do we: frames are followed on their way in (headers only, nothing is
 * copied), and an RST_STREAM for a client stream above the highest one
 * the client opened is dropped before nghttp2 sees it.
 */
static int conn_rx(void *p, const uint8_t *data, size_t len) {
  h2conn *h = p;
  h->last_rx_ns = hark_now_ns();
  h->ping_sent_ns = 0;              /* the client is there */
  size_t i = 0, pass = 0, held = 0; /* [pass, i) goes to nghttp2 */
  while (i < len) {
    size_t avail = len - i;
    if (h->preface_left) { /* the client magic: nghttp2 checks it */
      size_t k = avail < h->preface_left ? avail : h->preface_left;
      h->preface_left -= (uint32_t)k;
      i += k;
    } else if (h->frame_left) { /* a payload: passed on, or dropped */
      size_t k = avail < h->frame_left ? avail : h->frame_left;
      h->frame_left -= (uint32_t)k;
      i += k;
      if (h->dropping) pass = i;
    } else { /* a frame header, held back until whole */
      size_t had = h->hdr_have, k = 9 - had < avail ? 9 - had : avail;
      memcpy(h->hdr + had, data + i, k);
      h->hdr_have += (uint32_t)k;
      i += k;
      if (h->hdr_have < 9) {
        held = k;
        break;
      }
      h->hdr_have = 0;
      h->frame_left = (uint32_t)h->hdr[0] << 16 | (uint32_t)h->hdr[1] << 8 | h->hdr[2];
      uint32_t id = ((uint32_t)h->hdr[5] << 24 | (uint32_t)h->hdr[6] << 16 |
                     (uint32_t)h->hdr[7] << 8 | h->hdr[8]) &
                    0x7fffffffu;
      uint8_t type = h->hdr[3];
      if (type == NGHTTP2_HEADERS && (id & 1) && id > h->max_opened) h->max_opened = id;
      h->dropping = type == NGHTTP2_RST_STREAM && (id & 1) && id > h->max_opened;
      if (h->dropping) { /* what precedes it goes in; it does not */
        if (feed(h, data + pass, i - k - pass) < 0) return -1;
        pass = i;
        HARK_VERBOSE("grpc: dropped an RST_STREAM for stream %u, which the client never opened",
                     id);
      } else if (had && feed(h, h->hdr, had) < 0) { /* its start came in an earlier read */
        return -1;
      }
    }
  }
  if (feed(h, data + pass, len - held - pass) < 0) return -1;
  return conn_write(h);
}

static int conn_writable(void *p) { return conn_write(p); }

static void conn_closed(void *p) {
  h2conn *h = p;
  hark_http_timer_free(h->tick);
  h->tick = NULL;
  while (h->calls) stream_gone(h, h->calls);
  nghttp2_session_del(h->s);
  hark_buf_free(&h->out);
  hark_grpc_share_unref(h->share);
  free(h);
}

const hark_raw_handler hark_grpc_h2_handler = {
    .open = conn_open,
    .rx = conn_rx,
    .writable = conn_writable,
    .closed = conn_closed,
};

/* ---- the session's settings (grpc.c makes them once) ------------------------------------ */

void hark_grpc_h2_setup(hark_grpc *g) {
  nghttp2_session_callbacks *cbs;
  nghttp2_session_callbacks_new(&cbs);
  nghttp2_session_callbacks_set_on_begin_headers_callback(cbs, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(cbs, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cbs, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cbs, on_data);
  nghttp2_session_callbacks_set_on_frame_send_callback(cbs, on_frame_send);
  nghttp2_session_callbacks_set_on_stream_close_callback(cbs, on_stream_close);
  nghttp2_session_callbacks_set_error_callback2(cbs, on_error);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(cbs, on_invalid_frame);
  g->cbs = cbs;
  nghttp2_option *opt;
  nghttp2_option_new(&opt);
  nghttp2_option_set_no_auto_window_update(opt, 1); /* flow control is read_messages' */
  uint32_t max_streams =
      g->opts.max_concurrent_streams ? g->opts.max_concurrent_streams : MAX_STREAMS;
  nghttp2_option_set_stream_reset_rate_limit(opt, 2u * max_streams, RESET_RATE);
  g->h2_opts = opt;
}

void hark_grpc_h2_teardown(hark_grpc *g) {
  nghttp2_session_callbacks_del(g->cbs);
  nghttp2_option_del(g->h2_opts);
}
