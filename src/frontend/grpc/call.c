/*
 * call.c — one gRPC call: its life and what a service sends on it.
 *
 * A call is reference counted: the stream holds one until it closes, a
 * service one while the engine has work for the call, and a kick posted
 * to the loop one until the loop ran it. It holds its loop until it is
 * freed, so a reply that comes late always finds the loop.
 *
 * What a service sends — a unary reply, a stream's messages in their
 * slots, a stream's failure — may come from any thread. It is recorded
 * under the call's mutex, packed with gRPC's 5-byte prefix, and then the
 * call is kicked: on its own loop's thread (a cheap model run inline) the
 * loop writes it at once; from anywhere else a transport call is posted
 * and the loop writes it when it runs. h2.c does the writing (c->flush).
 * A reply message holds its bytes until written: charged to the in-flight
 * budget (a unary reply that does not fit is RESOURCE_EXHAUSTED instead; a
 * stream's is added past it) and to its connection's share, which h2.c
 * reads to stop taking requests from a client that does not read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/grpc/grpc_impl.h"
#include "util/alloc.h"
#include "util/arena.h"

hark_grpc_code hark_grpc_status(hark_code code) {
  switch (code) {
  case HARK_OK: return HARK_GRPC_OK;
  case HARK_ERR_NOT_FOUND: return HARK_GRPC_NOT_FOUND;
  case HARK_ERR_INVALID_ARG: return HARK_GRPC_INVALID_ARGUMENT;
  case HARK_ERR_UNAVAILABLE: return HARK_GRPC_UNAVAILABLE;
  case HARK_ERR_UNSUPPORTED: return HARK_GRPC_UNIMPLEMENTED;
  case HARK_ERR_ALREADY_EXISTS: return HARK_GRPC_ALREADY_EXISTS;
  case HARK_ERR_CANCELLED: return HARK_GRPC_CANCELLED;
  case HARK_ERR_DEADLINE: return HARK_GRPC_DEADLINE_EXCEEDED;
  case HARK_ERR_RESOURCE_EXHAUSTED: return HARK_GRPC_RESOURCE_EXHAUSTED;
  case HARK_ERR_INTERNAL:
  default: return HARK_GRPC_INTERNAL;
  }
}

/* ---- life ----------------------------------------------------------------------- */

static void on_kick(hark_http_call *ev, hark_http_conn *unused);

hark_grpc_call *hark_grpc_call_new(hark_grpc *g, hark_http_loop *loop,
                                   void (*flush)(hark_grpc_call *c)) {
  hark_grpc_call *c = hark_xcalloc(1, sizeof *c);
  c->g = g;
  c->loop = loop;
  c->flush = flush;
  atomic_init(&c->refs, 1);
  c->cancel = hark_cancel_new();
  pthread_mutex_init(&c->mu, NULL);
  hark_http_call_init(&c->ev, loop, on_kick);
  hark_http_loop_hold(loop);
  atomic_fetch_add(&g->live_calls, 1);
  return c;
}

void hark_grpc_share_ref(hark_grpc_share *s) { atomic_fetch_add(&s->refs, 1); }

void hark_grpc_share_unref(hark_grpc_share *s) {
  if (s && atomic_fetch_sub(&s->refs, 1) == 1) free(s);
}

/* A reply message made for the call is held until written: charged to
 * the in-flight budget (a unary reply only if it fits: `force` false) and
 * to its connection's share. False: it does not fit, nothing taken. */
static bool out_charge(hark_grpc_call *c, hark_grpc_out *o, bool force) {
  if (force)
    hark_inflight_add(o->len);
  else if (!hark_inflight_take(o->len))
    return false;
  if (c->share) atomic_fetch_add_explicit(&c->share->bytes, o->len, memory_order_relaxed);
  return true;
}

void hark_grpc_out_free(hark_grpc_call *c, hark_grpc_out *o) {
  if (!o) return;
  hark_inflight_give(o->len);
  if (c->share) atomic_fetch_sub_explicit(&c->share->bytes, o->len, memory_order_relaxed);
  free(o);
}

static void outs_free(hark_grpc_call *c, hark_grpc_out *o) {
  for (hark_grpc_out *next; o; o = next) {
    next = o->next;
    hark_grpc_out_free(c, o);
  }
}

static void slot_free(hark_grpc_call *c, hark_grpc_slot *slot) {
  outs_free(c, slot->out_head);
  slot->out_head = slot->out_tail = NULL;
  slot->free_fn(slot);
}

static void call_free(hark_grpc_call *c) {
  hark_grpc *g = c->g;
  hark_http_loop *loop = c->loop;
  while (c->head) { /* normally none by now: every slot was done */
    hark_grpc_slot *slot = c->head;
    c->head = slot->next;
    slot_free(c, slot);
  }
  outs_free(c, c->uout);
  hark_grpc_out_free(c, c->wout);
  hark_buf_free(&c->in);
  hark_arena_free(c->msg_arena);
  hark_inflight_give(c->msg_charge); /* the client went mid-message */
  if (c->state_free) c->state_free(c->state);
  hark_cancel_unref(c->cancel);
  hark_grpc_share_unref(c->share);
  if (c->began) atomic_fetch_sub(&g->open_streams, 1);
  pthread_mutex_destroy(&c->mu);
  free(c);
  atomic_fetch_sub(&g->live_calls, 1);
  hark_http_loop_release(loop);
}

void hark_grpc_call_ref(hark_grpc_call *c) { atomic_fetch_add(&c->refs, 1); }

void hark_grpc_call_unref(hark_grpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) call_free(c);
}

void *hark_grpc_call_service(const hark_grpc_call *c) { return c->reg ? c->reg->svc_userp : NULL; }
size_t hark_grpc_call_max_message(const hark_grpc_call *c) { return c->g->max_message_bytes; }

bool hark_grpc_call_allowed(const hark_grpc_call *c, hark_api api) {
  return hark_restrict_allows_mask(c->g->opts.restricted, api, c->opened);
}

bool hark_grpc_call_cancelled(const hark_grpc_call *c) {
  pthread_mutex_lock(&((hark_grpc_call *)c)->mu);
  bool cancelled = c->cancelled;
  pthread_mutex_unlock(&((hark_grpc_call *)c)->mu);
  return cancelled;
}

hark_cancel *hark_grpc_call_cancel_token(hark_grpc_call *c) { return c->cancel; }

const char *hark_grpc_call_peer(const hark_grpc_call *c) { return c->peer; }

void hark_grpc_call_set_state(hark_grpc_call *c, void *state, void (*free_fn)(void *)) {
  c->state = state;
  c->state_free = free_fn;
}

void *hark_grpc_call_state(const hark_grpc_call *c) { return c->state; }

/* ---- messages ----------------------------------------------------------------- */

/* protobuf-c allocates the message's parts in the call's message arena:
 * one block for a whole ModelInferRequest instead of a malloc per field,
 * and one free. */
static void *pb_alloc(void *arena, size_t size) { return hark_arena_alloc(arena, size); }
static void pb_free(void *arena, void *ptr) { (void)arena, (void)ptr; }

/* ---- the nested-message bound ---------------------------------------------------- */

/* Reads a varint at *p (below end); false when malformed. */
static bool wire_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
  *v = 0;
  for (unsigned shift = 0; shift < 64 && *p < end; shift += 7) {
    uint8_t b = *(*p)++;
    *v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

/*
 * Walks the wire form of a message of type `d` without unpacking it,
 * taking one from *left for every message inside it (map entries count),
 * at any depth. False once *left runs out. Malformed input stops the walk
 * with true: protobuf-c's unpack then says what is wrong.
 */
static bool wire_count(const ProtobufCMessageDescriptor *d, const uint8_t *p, const uint8_t *end,
                       uint32_t *left, int depth) {
  while (p < end) {
    uint64_t tag, len;
    if (!wire_varint(&p, end, &tag)) return true;
    switch (tag & 7) {
    case 0:
      if (!wire_varint(&p, end, &len)) return true;
      break;
    case 1:
      if (end - p < 8) return true;
      p += 8;
      break;
    case 5:
      if (end - p < 4) return true;
      p += 4;
      break;
    case 2: {
      if (!wire_varint(&p, end, &len) || len > (uint64_t)(end - p)) return true;
      const ProtobufCFieldDescriptor *f =
          tag >> 3 <= UINT32_MAX ? protobuf_c_message_descriptor_get_field(d, (unsigned)(tag >> 3))
                                 : NULL;
      if (f && f->type == PROTOBUF_C_TYPE_MESSAGE) {
        if (*left == 0) return false;
        (*left)--;
        if (depth < 32 && !wire_count(f->descriptor, p, p + len, left, depth + 1)) return false;
      }
      p += len;
      break;
    }
    default: return true; /* groups, or garbage */
    }
  }
  return true;
}

bool hark_grpc_within_message_bound(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                                    size_t n) {
  uint32_t left = HARK_GRPC_MAX_NESTED_MESSAGES;
  return wire_count(d, p, p + n, &left, 0);
}

ProtobufCMessage *hark_grpc_unpack(hark_grpc_call *c, const uint8_t *p, size_t n) {
  c->msg_arena = hark_arena_new();
  ProtobufCAllocator a = {pb_alloc, pb_free, c->msg_arena};
  ProtobufCMessage *msg = protobuf_c_message_unpack(c->reg->m->request, &a, n, p);
  if (!msg) {
    hark_arena_free(c->msg_arena);
    c->msg_arena = NULL;
  }
  return msg;
}

void hark_grpc_handle(hark_grpc_call *c, ProtobufCMessage *msg) {
  c->reg->m->handle(c, msg);
  hark_arena_free(c->msg_arena);
  c->msg_arena = NULL;
}

void hark_grpc_message_give(hark_grpc_call *c, size_t n) {
  if (!n) return;
  hark_inflight_give(n);
  atomic_fetch_sub_explicit(&c->held, n, memory_order_relaxed);
}

/* A message a handler kept: its arena, and what it holds of the in-flight
 * budget and of its call's share (the call is referenced until then). */
struct hark_grpc_message {
  hark_arena *arena;
  hark_grpc_call *c;
  size_t charge;
};

hark_grpc_message *hark_grpc_take_message(hark_grpc_call *c) {
  hark_grpc_message *m = hark_xmalloc(sizeof *m);
  *m = (hark_grpc_message){c->msg_arena, c, c->msg_charge};
  c->msg_arena = NULL;
  c->msg_charge = 0;
  hark_grpc_call_ref(c);
  return m;
}

void hark_grpc_message_free(void *p) {
  hark_grpc_message *m = p;
  if (!m) return;
  hark_arena_free(m->arena);
  hark_grpc_message_give(m->c, m->charge);
  hark_grpc_call_unref(m->c);
  free(m);
}

hark_grpc_out *hark_grpc_pack(const ProtobufCMessage *msg, size_t max, size_t *size) {
  *size = protobuf_c_message_get_packed_size(msg);
  if (*size > max) return NULL;
  hark_grpc_out *o = malloc(sizeof *o + 5 + *size); /* client-sized */
  if (!o) return NULL;
  o->next = NULL;
  o->len = 5 + *size;
  o->data[0] = 0; /* not compressed */
  o->data[1] = (uint8_t)(*size >> 24);
  o->data[2] = (uint8_t)(*size >> 16);
  o->data[3] = (uint8_t)(*size >> 8);
  o->data[4] = (uint8_t)*size;
  protobuf_c_message_pack(msg, o->data + 5);
  return o;
}

/* ---- kicks ---------------------------------------------------------------------- */

static void on_kick(hark_http_call *ev, hark_http_conn *unused) {
  (void)unused;
  hark_grpc_call *c = (hark_grpc_call *)((char *)ev - offsetof(hark_grpc_call, ev));
  pthread_mutex_lock(&c->mu);
  c->ev_posted = false;
  pthread_mutex_unlock(&c->mu);
  c->flush(c);
  hark_grpc_call_unref(c); /* the post's */
}

void hark_grpc_kick(hark_grpc_call *c) {
  if (hark_http_current_loop() == c->loop) {
    c->flush(c);
    return;
  }
  hark_grpc_kick_later(c);
}

void hark_grpc_kick_later(hark_grpc_call *c) {
  pthread_mutex_lock(&c->mu);
  bool post = !c->ev_posted && !c->closed;
  if (post) c->ev_posted = true;
  pthread_mutex_unlock(&c->mu);
  if (!post) return;
  hark_grpc_call_ref(c);
  hark_http_call_post(&c->ev);
}

/* ---- unary replies ------------------------------------------------------------- */

/* Sets the status, unless one is set (c->mu held). */
static void set_status_locked(hark_grpc_call *c, hark_grpc_code code, const char *details) {
  if (c->code != HARK_GRPC_OK) return;
  c->code = code;
  snprintf(c->details, sizeof c->details, "%s", details ? details : "");
}

void hark_grpc_reply(hark_grpc_call *c, const ProtobufCMessage *msg, hark_grpc_code code,
                     const char *details) {
  char text[240];
  hark_grpc_out *o = NULL;
  if (msg && code == HARK_GRPC_OK) {
    size_t size;
    o = hark_grpc_pack(msg, c->g->max_message_bytes, &size);
    if (!o) {
      snprintf(text, sizeof text, "response of %zu bytes is larger than the %zu-byte limit", size,
               c->g->max_message_bytes);
      code = HARK_GRPC_RESOURCE_EXHAUSTED;
      details = text;
    } else if (!out_charge(c, o, false)) {
      unsigned long long now = hark_inflight_bytes(), max = hark_inflight_max();
      hark_limit_hit(HARK_LIMIT_INFLIGHT_BYTES,
                     "grpc: a response of %zu bytes refused: %llu of %llu bytes in flight "
                     "(--max-inflight-bytes): RESOURCE_EXHAUSTED",
                     size, now, max);
      snprintf(text, sizeof text,
               "response of %zu bytes does not fit in the server's in-flight memory budget now "
               "(%llu of %llu bytes held; --max-inflight-bytes); try again later",
               size, now, max);
      free(o);
      o = NULL;
      code = HARK_GRPC_RESOURCE_EXHAUSTED;
      details = text;
    }
  }
  pthread_mutex_lock(&c->mu);
  bool take = !c->closed && !c->replied;
  if (take) {
    c->replied = true;
    c->uout = o;
    set_status_locked(c, code, details);
  }
  pthread_mutex_unlock(&c->mu);
  if (!take) {
    hark_grpc_out_free(c, o);
    return;
  }
  hark_grpc_kick(c);
}

void hark_grpc_reply_error(hark_grpc_call *c, hark_error *err) {
  hark_grpc_reply(c, NULL, hark_grpc_status(hark_error_code(err)), hark_error_message(err));
  hark_error_free(err);
}

/* ---- streams --------------------------------------------------------------------- */

void hark_grpc_slot_append(hark_grpc_call *c, hark_grpc_slot *slot,
                           void (*free_fn)(hark_grpc_slot *)) {
  slot->free_fn = free_fn;
  slot->next = NULL;
  slot->out_head = slot->out_tail = NULL;
  slot->done = false;
  pthread_mutex_lock(&c->mu);
  if (c->tail)
    c->tail->next = slot;
  else
    c->head = slot;
  c->tail = slot;
  c->n_slots++;
  pthread_mutex_unlock(&c->mu);
}

hark_grpc_write hark_grpc_slot_write(hark_grpc_call *c, hark_grpc_slot *slot,
                                     const ProtobufCMessage *msg, size_t *size) {
  hark_grpc_out *o = hark_grpc_pack(msg, c->g->max_message_bytes, size);
  if (!o) return HARK_GRPC_WRITE_TOO_BIG;
  out_charge(c, o, true); /* the connection stops being read past its share */
  pthread_mutex_lock(&c->mu);
  bool over = c->closed;
  if (!over) {
    if (slot->out_tail)
      slot->out_tail->next = o;
    else
      slot->out_head = o;
    slot->out_tail = o;
  }
  pthread_mutex_unlock(&c->mu);
  if (over) {
    hark_grpc_out_free(c, o);
    return HARK_GRPC_WRITE_OVER;
  }
  hark_grpc_kick(c);
  return HARK_GRPC_WRITE_OK;
}

void hark_grpc_slot_done(hark_grpc_call *c, hark_grpc_slot *slot) {
  pthread_mutex_lock(&c->mu);
  slot->done = true;
  if (c->closed) hark_grpc_sweep_locked(c);
  pthread_mutex_unlock(&c->mu);
  hark_grpc_kick(c);
}

void hark_grpc_stream_fail(hark_grpc_call *c, hark_grpc_code code, const char *details) {
  pthread_mutex_lock(&c->mu);
  set_status_locked(c, code, details);
  c->read_done = true;
  pthread_mutex_unlock(&c->mu);
  hark_grpc_kick(c);
}

bool hark_grpc_stream_over(hark_grpc_call *c) {
  pthread_mutex_lock(&c->mu);
  bool over = c->code != HARK_GRPC_OK || c->closed;
  pthread_mutex_unlock(&c->mu);
  return over;
}

bool hark_grpc_status_due_locked(const hark_grpc_call *c) {
  if (c->forced || !c->reg || !(c->reg->m->flags & HARK_GRPC_STREAMING)) return c->replied;
  return c->read_done && !c->head;
}

void hark_grpc_sweep_locked(hark_grpc_call *c) {
  hark_grpc_slot **pp = &c->head, *prev = NULL;
  while (*pp) {
    hark_grpc_slot *slot = *pp;
    outs_free(c, slot->out_head);
    slot->out_head = slot->out_tail = NULL;
    if (!slot->done) {
      prev = slot;
      pp = &slot->next;
      continue;
    }
    *pp = slot->next;
    c->n_slots--;
    slot->free_fn(slot);
  }
  c->tail = prev;
  outs_free(c, c->uout);
  c->uout = NULL;
}
