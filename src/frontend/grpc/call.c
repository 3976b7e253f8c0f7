/*
 * call.c — one gRPC call: its lifetime (reference counted: one reference
 * per batch of operations in flight on its queue, one while a service
 * holds work for it), its messages packed and unpacked, and a unary call's
 * reply — one batch with the initial metadata, the message, the status and
 * the wait for the client's close. Any thread. What a stream adds lives in
 * grpc_stream.c, which hooks into the call's end (c->fini).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/grpc/grpc_impl.h"
#include "util/alloc.h"
#include "util/arena.h"
#include "util/log.h"

grpc_status_code hark_grpc_status(hark_code code) {
  switch (code) {
    case HARK_OK: return GRPC_STATUS_OK;
    case HARK_ERR_NOT_FOUND: return GRPC_STATUS_NOT_FOUND;
    case HARK_ERR_INVALID_ARG: return GRPC_STATUS_INVALID_ARGUMENT;
    case HARK_ERR_UNAVAILABLE: return GRPC_STATUS_UNAVAILABLE;
    case HARK_ERR_UNSUPPORTED: return GRPC_STATUS_UNIMPLEMENTED;
    case HARK_ERR_ALREADY_EXISTS: return GRPC_STATUS_ALREADY_EXISTS;
    case HARK_ERR_CANCELLED: return GRPC_STATUS_CANCELLED;
    case HARK_ERR_DEADLINE: return GRPC_STATUS_DEADLINE_EXCEEDED;
    case HARK_ERR_RESOURCE_EXHAUSTED: return GRPC_STATUS_RESOURCE_EXHAUSTED;
    case HARK_ERR_INTERNAL:
    default: return GRPC_STATUS_INTERNAL;
  }
}

/* ---- call lifetime ---------------------------------------------------------- */

static void on_send(hark_grpc_call *c, bool ok);

hark_grpc_call *hark_grpc_call_new(hark_grpc_cq *q, const hark_grpc_reg *reg,
                                   void (*on_new)(hark_grpc_call *c, bool ok)) {
  hark_grpc_call *c = hark_xcalloc(1, sizeof *c);
  c->g = q->g;
  c->q = q;
  c->reg = reg;
  atomic_init(&c->refs, 1);
  pthread_mutex_init(&c->mu, NULL);
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->request_md);
  c->t_new = (hark_grpc_tag){on_new, c};
  c->t_send = (hark_grpc_tag){on_send, c};
  atomic_fetch_add(&q->g->live_calls, 1);
  return c;
}

static void call_free(hark_grpc_call *c) {
  hark_grpc *g = c->g;
  grpc_call_details_destroy(&c->details);
  grpc_metadata_array_destroy(&c->request_md);
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  if (c->send) grpc_byte_buffer_destroy(c->send);
  if (c->has_status_details) grpc_slice_unref(c->status_details);
  if (c->call) grpc_call_unref(c->call);
  if (c->fini) c->fini(c); /* a stream's */
  if (c->state_free) c->state_free(c->state);
  pthread_mutex_destroy(&c->mu);
  free(c);
  atomic_fetch_sub(&g->live_calls, 1);
}

void hark_grpc_call_ref(hark_grpc_call *c) { atomic_fetch_add(&c->refs, 1); }

void hark_grpc_call_unref(hark_grpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) call_free(c);
}

void *hark_grpc_call_service(const hark_grpc_call *c) { return c->reg ? c->reg->svc_userp : NULL; }
size_t hark_grpc_call_max_message(const hark_grpc_call *c) { return c->g->max_message_bytes; }
bool hark_grpc_call_cancelled(const hark_grpc_call *c) { return c->cancelled != 0; }

void hark_grpc_call_set_state(hark_grpc_call *c, void *state, void (*free_fn)(void *)) {
  c->state = state;
  c->state_free = free_fn;
}

void *hark_grpc_call_state(const hark_grpc_call *c) { return c->state; }


bool hark_grpc_start_batch(hark_grpc_call *c, const grpc_op *ops, size_t n, hark_grpc_tag *tag) {
  hark_grpc_call_ref(c);
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (e == GRPC_CALL_OK) return true;
  HARK_ERROR("grpc: start_batch failed (%d)", (int)e);
  hark_grpc_call_unref(c);
  return false;
}

/* protobuf-c allocates the message's parts in the call's message arena:
 * one block for a whole ModelInferRequest instead of a malloc per field,
 * and one free. */
static void *pb_alloc(void *arena, size_t size) { return hark_arena_alloc(arena, size); }
static void pb_free(void *arena, void *ptr) { (void)arena, (void)ptr; }

/* Unpacks bytes [p, p + n) into the call's message arena. */
static ProtobufCMessage *unpack_bytes(hark_grpc_call *c, const uint8_t *p, size_t n) {
  c->msg_arena = hark_arena_new();
  ProtobufCAllocator a = {pb_alloc, pb_free, c->msg_arena};
  ProtobufCMessage *msg = protobuf_c_message_unpack(c->reg->m->request, &a, n, p);
  if (!msg) {
    hark_arena_free(c->msg_arena);
    c->msg_arena = NULL;
  }
  return msg;
}

ProtobufCMessage *hark_grpc_unpack(hark_grpc_call *c) {
  ProtobufCMessage *msg = NULL;
  grpc_byte_buffer *bb = c->recv;
  grpc_byte_buffer_reader reader;
  if (!bb) return NULL;
  c->recv = NULL;
  if (bb->type == GRPC_BB_RAW && bb->data.raw.compression == GRPC_COMPRESS_NONE &&
      bb->data.raw.slice_buffer.count == 1) { /* one slice: read in place */
    grpc_slice s = bb->data.raw.slice_buffer.slices[0];
    msg = unpack_bytes(c, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
  } else if (grpc_byte_buffer_reader_init(&reader, bb)) {
    grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    msg = unpack_bytes(c, GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s));
    grpc_slice_unref(s);
  }
  grpc_byte_buffer_destroy(bb);
  return msg;
}

void hark_grpc_handle(hark_grpc_call *c, ProtobufCMessage *msg) {
  c->reg->m->handle(c, msg);
  hark_arena_free(c->msg_arena);
  c->msg_arena = NULL;
}

hark_arena *hark_grpc_take_message(hark_grpc_call *c) {
  hark_arena *a = c->msg_arena;
  c->msg_arena = NULL;
  return a;
}

static void on_send(hark_grpc_call *c, bool ok) {
  (void)ok;
  if (c->send) {
    grpc_byte_buffer_destroy(c->send);
    c->send = NULL;
  }
  hark_grpc_call_unref(c);
}


/* ---- replies ---------------------------------------------------------------- */

grpc_byte_buffer *hark_grpc_pack(const ProtobufCMessage *msg, size_t max, size_t *size) {
  *size = protobuf_c_message_get_packed_size(msg);
  if (*size > max) return NULL;
  grpc_slice s = grpc_slice_malloc(*size);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

void hark_grpc_reply(hark_grpc_call *c, const ProtobufCMessage *msg, grpc_status_code code,
                     const char *details) {
  char text[160];
  pthread_mutex_lock(&c->mu);
  if (c->closed || c->replied) {
    pthread_mutex_unlock(&c->mu);
    return;
  }
  c->replied = true;
  grpc_op ops[4];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
  if (msg && code == GRPC_STATUS_OK) {
    size_t size;
    c->send = hark_grpc_pack(msg, c->g->max_message_bytes, &size);
    if (c->send) {
      ops[n].op = GRPC_OP_SEND_MESSAGE;
      ops[n++].data.send_message.send_message = c->send;
    } else {
      snprintf(text, sizeof text, "response of %zu bytes is larger than the %zu-byte limit", size,
               c->g->max_message_bytes);
      code = GRPC_STATUS_RESOURCE_EXHAUSTED;
      details = text;
    }
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = code;
  if (details && *details) {
    c->status_details = grpc_slice_from_copied_string(details);
    c->has_status_details = true;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
  }
  n++;
  /* A unary call (or a stream refused at once) watches for the client's
   * close only now, in the same batch: it ends when the call does. */
  if (!c->reg || !(c->reg->m->flags & HARK_GRPC_STREAMING) || !c->stream_begun) {
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &c->cancelled;
  }
  hark_grpc_start_batch(c, ops, n, &c->t_send);
  pthread_mutex_unlock(&c->mu);
}

void hark_grpc_reply_error(hark_grpc_call *c, hark_error *err) {
  hark_grpc_reply(c, NULL, hark_grpc_status(hark_error_code(err)), hark_error_message(err));
  hark_error_free(err);
}

