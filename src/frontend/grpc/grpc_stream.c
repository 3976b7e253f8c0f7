/*
 * grpc_stream.c — bidirectional streams: reads one message at a time,
 * hands each to the method's handler, which appends slots in arrival
 * order, and writes the slots' replies strictly in that order, one write
 * in flight at a time (gRPC allows no more).
 *
 * Reads run on the queue thread; writes start from whichever thread made
 * the next reply ready (a worker, usually), under the call's mutex. At
 * most HARK_GRPC_STREAM_MAX_PENDING slots wait at once: past that, reading
 * pauses until the oldest is written. When the client half-closes, the
 * method may append a last slot (half_close), and the stream ends with OK
 * after the last reply; a malformed message, or hark_grpc_stream_fail,
 * ends it with that status after the replies already queued.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/grpc/grpc_impl.h"
#include "util/alloc.h"

static void on_stream_read(hark_grpc_call *c, bool ok);
static void on_write(hark_grpc_call *c, bool ok);
static void on_close(hark_grpc_call *c, bool ok);
static void stream_fini(hark_grpc_call *c);
static void sweep_done_locked(hark_grpc_call *c);
static void pump(hark_grpc_call *c);

/* Starts the next read (c->mu held). */
static void start_read_locked(hark_grpc_call *c) {
  if (c->reading || c->read_done || c->closed) return;
  grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
  op.data.recv_message.recv_message = &c->recv;
  c->reading = hark_grpc_start_batch(c, &op, 1, &c->t_read);
  if (!c->reading) c->read_done = true;
}

void hark_grpc_stream_begin(hark_grpc_call *c) {
  c->t_read = (hark_grpc_tag){on_stream_read, c};
  c->t_write = (hark_grpc_tag){on_write, c};
  c->t_close = (hark_grpc_tag){on_close, c};
  c->stream_code = GRPC_STATUS_OK;
  /* The client's close tells of a cancellation while the stream runs. */
  grpc_op close_op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
  close_op.data.recv_close_on_server.cancelled = &c->cancelled;
  if (!hark_grpc_start_batch(c, &close_op, 1, &c->t_close)) return;
  atomic_fetch_add(&c->g->open_streams, 1); /* until the call is freed */
  c->stream_begun = true;
  c->fini = stream_fini;
  pthread_mutex_lock(&c->mu);
  start_read_locked(c);
  pthread_mutex_unlock(&c->mu);
}

/* The call is over: nothing more may be written. */
static void on_close(hark_grpc_call *c, bool ok) {
  (void)ok;
  pthread_mutex_lock(&c->mu);
  c->closed = true;
  sweep_done_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (c->reg->m->closed) c->reg->m->closed(c);
  hark_grpc_call_unref(c);
}

/* ---- slots ----------------------------------------------------------------- */

static void slot_free(hark_grpc_slot *slot) {
  for (size_t i = 0; i < slot->n_out; i++) grpc_byte_buffer_destroy(slot->out[i]);
  free(slot->out);
  slot->out = NULL;
  slot->free_fn(slot);
}

void hark_grpc_slot_append(hark_grpc_call *c, hark_grpc_slot *slot,
                           void (*free_fn)(hark_grpc_slot *)) {
  slot->free_fn = free_fn;
  slot->next = NULL;
  slot->out = NULL;
  slot->n_out = slot->cap_out = 0;
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
  grpc_byte_buffer *bb = hark_grpc_pack(msg, c->g->max_message_bytes, size);
  if (!bb) return HARK_GRPC_WRITE_TOO_BIG;
  pthread_mutex_lock(&c->mu);
  if (c->closed) {
    pthread_mutex_unlock(&c->mu);
    grpc_byte_buffer_destroy(bb);
    return HARK_GRPC_WRITE_OVER;
  }
  if (slot->n_out == slot->cap_out) {
    slot->cap_out = slot->cap_out ? 2 * slot->cap_out : 2;
    slot->out = hark_xrealloc(slot->out, slot->cap_out * sizeof *slot->out);
  }
  slot->out[slot->n_out++] = bb;
  pthread_mutex_unlock(&c->mu);
  pump(c);
  return HARK_GRPC_WRITE_OK;
}

/* Unlinks and frees every slot that is done, and drops what the others
 * would have written (c->mu held): the call is over. */
static void sweep_done_locked(hark_grpc_call *c) {
  hark_grpc_slot **pp = &c->head, *prev = NULL;
  while (*pp) {
    hark_grpc_slot *slot = *pp;
    if (!slot->done) {
      for (size_t i = 0; i < slot->n_out; i++) grpc_byte_buffer_destroy(slot->out[i]);
      slot->n_out = 0;
      prev = slot;
      pp = &slot->next;
      continue;
    }
    *pp = slot->next;
    c->n_slots--;
    slot_free(slot);
  }
  c->tail = prev;
}

void hark_grpc_slot_done(hark_grpc_call *c, hark_grpc_slot *slot) {
  pthread_mutex_lock(&c->mu);
  slot->done = true;
  pthread_mutex_unlock(&c->mu);
  pump(c);
}

/* The call is being freed: every slot left, and the open-stream count. */
static void stream_fini(hark_grpc_call *c) {
  atomic_fetch_sub(&c->g->open_streams, 1);
  while (c->head) { /* normally empty by now: every slot was done */
    hark_grpc_slot *slot = c->head;
    c->head = slot->next;
    slot_free(slot);
  }
  c->tail = NULL;
  if (c->write_bb) grpc_byte_buffer_destroy(c->write_bb);
  c->write_bb = NULL;
}

/* ---- status ------------------------------------------------------------------ */

bool hark_grpc_stream_over(hark_grpc_call *c) {
  pthread_mutex_lock(&c->mu);
  bool over = c->stream_code != GRPC_STATUS_OK || c->closed;
  pthread_mutex_unlock(&c->mu);
  return over;
}

void hark_grpc_stream_fail(hark_grpc_call *c, grpc_status_code code, const char *details) {
  pthread_mutex_lock(&c->mu);
  if (c->stream_code == GRPC_STATUS_OK) {
    c->stream_code = code;
    snprintf(c->stream_details, sizeof c->stream_details, "%s", details ? details : "");
  }
  c->read_done = true;
  pthread_mutex_unlock(&c->mu);
  pump(c);
}

/* The end of the stream: its status, once every reply is out. */
static void send_status_locked(hark_grpc_call *c) {
  grpc_op ops[2];
  size_t n = 0;
  memset(ops, 0, sizeof ops);
  if (!c->md_sent) {
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    c->md_sent = true;
  }
  ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  ops[n].data.send_status_from_server.status = c->stream_code;
  if (c->stream_details[0]) {
    c->status_details = grpc_slice_from_copied_string(c->stream_details);
    c->has_status_details = true;
    ops[n].data.send_status_from_server.status_details = &c->status_details;
  }
  n++;
  c->status_sent = true;
  c->replied = true;
  hark_grpc_start_batch(c, ops, n, &c->t_send);
}

/* ---- writing ------------------------------------------------------------------- */

/* Writes whatever is next in order, or the final status. Any thread;
 * c->mu not held. */
static void pump(hark_grpc_call *c) {
  pthread_mutex_lock(&c->mu);
  if (c->closed) {
    sweep_done_locked(c);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  while (!c->writing && !c->status_sent) {
    hark_grpc_slot *slot = c->head;
    if (slot && slot->n_out) {
      grpc_op ops[2];
      size_t n = 0;
      memset(ops, 0, sizeof ops);
      if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
      }
      c->write_bb = slot->out[0];
      memmove(slot->out, slot->out + 1, (slot->n_out - 1) * sizeof *slot->out);
      slot->n_out--;
      ops[n].op = GRPC_OP_SEND_MESSAGE;
      ops[n++].data.send_message.send_message = c->write_bb;
      c->writing = hark_grpc_start_batch(c, ops, n, &c->t_write);
      if (!c->writing) {
        grpc_byte_buffer_destroy(c->write_bb);
        c->write_bb = NULL;
      }
      break;
    }
    if (slot && slot->done) {
      c->head = slot->next;
      if (!c->head) c->tail = NULL;
      c->n_slots--;
      slot_free(slot);
      if (c->n_slots < HARK_GRPC_STREAM_MAX_PENDING) start_read_locked(c);
      continue;
    }
    if (!slot && c->read_done && !c->reading) send_status_locked(c);
    break;
  }
  pthread_mutex_unlock(&c->mu);
}

static void on_write(hark_grpc_call *c, bool ok) {
  pthread_mutex_lock(&c->mu);
  if (c->write_bb) grpc_byte_buffer_destroy(c->write_bb);
  c->write_bb = NULL;
  c->writing = false;
  pthread_mutex_unlock(&c->mu);
  if (ok) pump(c);
  hark_grpc_call_unref(c);
}

/* ---- reading -------------------------------------------------------------------- */

static void on_stream_read(hark_grpc_call *c, bool ok) {
  const hark_grpc_method *m = c->reg->m;
  bool half_closed = ok && !c->recv;
  ProtobufCMessage *msg = ok && c->recv ? hark_grpc_unpack(c) : NULL;
  bool malformed = ok && !half_closed && !msg;
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  c->recv = NULL;
  /* Still `reading`, so no status can go out before the last slot is in. */
  if (half_closed && m->half_close) m->half_close(c);
  pthread_mutex_lock(&c->mu);
  c->reading = false;
  if (!msg) { /* half-closed, cancelled, or malformed: read no more */
    c->read_done = true;
    if (malformed && c->stream_code == GRPC_STATUS_OK) {
      c->stream_code = GRPC_STATUS_INVALID_ARGUMENT;
      snprintf(c->stream_details, sizeof c->stream_details, "malformed %s message",
               m->request->name);
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (msg) {
    hark_grpc_handle(c, msg);
    pthread_mutex_lock(&c->mu);
    if (c->n_slots < HARK_GRPC_STREAM_MAX_PENDING) start_read_locked(c);
    pthread_mutex_unlock(&c->mu);
  }
  pump(c);
  hark_grpc_call_unref(c);
}
