/*
 * grpc_stream.c — bidirectional streams (ModelStreamInfer, Riva's
 * StreamingRecognize): reads one message at a time, hands each to the
 * method's handler, which queues jobs in arrival order (grpc_infer.c,
 * grpc_riva.c), and writes the jobs' replies strictly in that order, one
 * write in flight at a time (gRPC allows no more).
 *
 * Reads run on the queue thread; writes start from whichever thread made
 * the next reply ready (a worker, usually), under the call's mutex. At
 * most HARK_GRPC_STREAM_MAX_PENDING jobs wait at once: past that, reading
 * pauses until the oldest is written, so a client that sends faster than
 * the model answers is slowed by HTTP/2 flow control, not by our memory.
 * When the client half-closes, the method may queue a last job
 * (half_close), and the stream ends with OK after the last reply; a
 * malformed message, or a handler's hark_grpc_stream_fail, ends it with
 * that status after the replies already queued.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/grpc_impl.h"

static void on_stream_read(hark_grpc_call *c, bool ok);
static void on_write(hark_grpc_call *c, bool ok);

/* Starts the next read (c->mu held). */
static void start_read_locked(hark_grpc_call *c) {
  if (c->reading || c->read_done || c->closed) return;
  grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
  op.data.recv_message.recv_message = &c->recv;
  c->reading = hark_grpc_start_batch(c, &op, 1, &c->t_read);
  if (!c->reading) c->read_done = true;
}

void hark_grpc_stream_begin(hark_grpc_call *c) {
  atomic_fetch_add(&c->g->open_streams, 1); /* until the call is freed */
  c->stream_begun = true;
  c->t_read = (hark_grpc_tag){on_stream_read, c};
  c->t_write = (hark_grpc_tag){on_write, c};
  c->stream_code = GRPC_STATUS_OK;
  pthread_mutex_lock(&c->mu);
  start_read_locked(c);
  pthread_mutex_unlock(&c->mu);
}

void hark_grpc_stream_append_locked(hark_grpc_call *c, hark_grpc_job *j) {
  if (c->tail) c->tail->next = j;
  else c->head = j;
  c->tail = j;
  c->n_jobs++;
}

/* Unlinks and frees every job that is done (c->mu held): the call is over
 * and nothing more will be written. */
static void sweep_done_locked(hark_grpc_call *c) {
  hark_grpc_job **pp = &c->head, *prev = NULL;
  while (*pp) {
    hark_grpc_job *j = *pp;
    if (!j->done) {
      for (size_t i = 0; i < j->n_out; i++) grpc_byte_buffer_destroy(j->out[i]);
      j->n_out = 0;
      prev = j;
      pp = &j->next;
      continue;
    }
    *pp = j->next;
    c->n_jobs--;
    hark_grpc_job_free(j);
  }
  c->tail = prev;
}

void hark_grpc_stream_closed_locked(hark_grpc_call *c) { sweep_done_locked(c); }

bool hark_grpc_stream_failed_locked(const hark_grpc_call *c) {
  return c->stream_code != GRPC_STATUS_OK;
}

void hark_grpc_stream_fail(hark_grpc_call *c, grpc_status_code code, const char *details) {
  pthread_mutex_lock(&c->mu);
  if (c->stream_code == GRPC_STATUS_OK) {
    c->stream_code = code;
    snprintf(c->stream_details, sizeof c->stream_details, "%s", details ? details : "");
  }
  c->read_done = true;
  pthread_mutex_unlock(&c->mu);
  hark_grpc_stream_pump(c);
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

void hark_grpc_stream_pump(hark_grpc_call *c) {
  pthread_mutex_lock(&c->mu);
  if (c->closed) {
    sweep_done_locked(c);
    pthread_mutex_unlock(&c->mu);
    return;
  }
  while (!c->writing && !c->status_sent) {
    hark_grpc_job *j = c->head;
    if (j && j->n_out) {
      grpc_op ops[2];
      size_t n = 0;
      memset(ops, 0, sizeof ops);
      if (!c->md_sent) {
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
        c->md_sent = true;
      }
      c->write_bb = j->out[0];
      memmove(j->out, j->out + 1, (j->n_out - 1) * sizeof *j->out);
      j->n_out--;
      ops[n].op = GRPC_OP_SEND_MESSAGE;
      ops[n++].data.send_message.send_message = c->write_bb;
      c->writing = hark_grpc_start_batch(c, ops, n, &c->t_write);
      if (!c->writing) {
        grpc_byte_buffer_destroy(c->write_bb);
        c->write_bb = NULL;
      }
      break;
    }
    if (j && j->done) {
      c->head = j->next;
      if (!c->head) c->tail = NULL;
      c->n_jobs--;
      hark_grpc_job_free(j);
      if (c->n_jobs < HARK_GRPC_STREAM_MAX_PENDING) start_read_locked(c);
      continue;
    }
    if (!j && c->read_done && !c->reading) send_status_locked(c);
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
  if (ok) hark_grpc_stream_pump(c);
  hark_grpc_call_unref(c);
}

static void on_stream_read(hark_grpc_call *c, bool ok) {
  ProtobufCMessage *msg = NULL;
  bool malformed = false;
  if (ok && c->recv) {
    grpc_byte_buffer_reader reader;
    if (grpc_byte_buffer_reader_init(&reader, c->recv)) {
      grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
      grpc_byte_buffer_reader_destroy(&reader);
      msg = protobuf_c_message_unpack(c->method->request, NULL, GRPC_SLICE_LENGTH(s),
                                      GRPC_SLICE_START_PTR(s));
      grpc_slice_unref(s);
    }
    malformed = !msg;
  }
  bool half_closed = ok && !c->recv;
  if (c->recv) grpc_byte_buffer_destroy(c->recv);
  c->recv = NULL;
  /* Still `reading`, so no status can go out before the last job is in. */
  if (half_closed && c->method->half_close) c->method->half_close(c);
  pthread_mutex_lock(&c->mu);
  c->reading = false;
  if (!msg) { /* half-closed, cancelled, or malformed: read no more */
    c->read_done = true;
    if (malformed && c->stream_code == GRPC_STATUS_OK) {
      c->stream_code = GRPC_STATUS_INVALID_ARGUMENT;
      snprintf(c->stream_details, sizeof c->stream_details, "malformed %s message",
               c->method->request->name);
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (msg) {
    c->method->handle(c, msg);
    pthread_mutex_lock(&c->mu);
    if (c->n_jobs < HARK_GRPC_STREAM_MAX_PENDING) start_read_locked(c);
    pthread_mutex_unlock(&c->mu);
  }
  hark_grpc_stream_pump(c);
  hark_grpc_call_unref(c);
}
