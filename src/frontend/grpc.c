/*
 * grpc.c — the gRPC server and its completion-queue loop.
 *
 * One thread runs grpc_completion_queue_next() and never blocks on
 * anything else. A call starts as a pending grpc_server_request_call (any
 * method: hark dispatches on the path itself, so an unknown method gets
 * UNIMPLEMENTED); when it arrives, hark asks for the next one, waits for
 * the client's close (to learn of cancellation) and reads the one request
 * message, which grpc_kserve.c's handler turns into a reply — at once, or
 * from an engine worker thread when the request completes.
 *
 * Draining (SIGTERM): new streams, and new ModelInfer / Recognize calls,
 * are refused with UNAVAILABLE while the open ones finish; metadata and
 * health go on answering (health: NOT_SERVING).
 *
 * Stopping: shutdown_and_notify + cancel_all_calls, then the loop keeps
 * running until every call struct is gone (engine requests in flight hold
 * theirs until their final), and only then shuts the queue down.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


#include <grpc/grpc_security.h>

#include "frontend/grpc_impl.h"
#include "util/log.h"

#define DEFAULT_MAX_MESSAGE (64u << 20)

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

static void on_new(hark_grpc_call *c, bool ok);
static void on_read(hark_grpc_call *c, bool ok);
static void on_send(hark_grpc_call *c, bool ok);
static void on_close(hark_grpc_call *c, bool ok);

static hark_grpc_call *call_new(hark_grpc *g) {
  hark_grpc_call *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->g = g;
  atomic_init(&c->refs, 1);
  pthread_mutex_init(&c->mu, NULL);
  grpc_call_details_init(&c->details);
  grpc_metadata_array_init(&c->request_md);
  c->t_new = (hark_grpc_tag){on_new, c};
  c->t_read = (hark_grpc_tag){on_read, c};
  c->t_send = (hark_grpc_tag){on_send, c};
  c->t_close = (hark_grpc_tag){on_close, c};
  atomic_fetch_add(&g->live_calls, 1);
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
  while (c->head) { /* normally empty by now: on_close drained it */
    hark_grpc_job *j = c->head;
    c->head = j->next;
    hark_grpc_job_free(j);
  }
  if (c->write_bb) grpc_byte_buffer_destroy(c->write_bb);
  if (c->svc_free) c->svc_free(c->svc);
  if (c->stream_begun) atomic_fetch_sub(&g->open_streams, 1);
  pthread_mutex_destroy(&c->mu);
  free(c);
  atomic_fetch_sub(&g->live_calls, 1);
}

void hark_grpc_call_ref(hark_grpc_call *c) { atomic_fetch_add(&c->refs, 1); }

void hark_grpc_call_unref(hark_grpc_call *c) {
  if (atomic_fetch_sub(&c->refs, 1) == 1) call_free(c);
}

/* Asks gRPC for the next incoming call. */
static void request_next(hark_grpc *g) {
  if (atomic_load(&g->stopping)) return;
  hark_grpc_call *c = call_new(g);
  if (!c) {
    HARK_ERROR("grpc: out of memory; no longer accepting calls");
    return;
  }
  grpc_call_error e = grpc_server_request_call(g->gs, &c->call, &c->details, &c->request_md,
                                               g->cq, g->cq, &c->t_new);
  if (e != GRPC_CALL_OK) {
    HARK_ERROR("grpc: request_call failed (%d)", (int)e);
    hark_grpc_call_unref(c);
  }
}

bool hark_grpc_start_batch(hark_grpc_call *c, const grpc_op *ops, size_t n, hark_grpc_tag *tag) {
  hark_grpc_call_ref(c);
  grpc_call_error e = grpc_call_start_batch(c->call, ops, n, tag, NULL);
  if (e == GRPC_CALL_OK) return true;
  HARK_ERROR("grpc: start_batch failed (%d)", (int)e);
  hark_grpc_call_unref(c);
  return false;
}

static void on_new(hark_grpc_call *c, bool ok) {
  hark_grpc *g = c->g;
  if (!ok) { /* the server is shutting down */
    hark_grpc_call_unref(c);
    return;
  }
  request_next(g);
  grpc_op close_op = {.op = GRPC_OP_RECV_CLOSE_ON_SERVER};
  close_op.data.recv_close_on_server.cancelled = &c->cancelled;
  if (!hark_grpc_start_batch(c, &close_op, 1, &c->t_close)) {
    hark_grpc_call_unref(c);
    return;
  }
  const char *path = (const char *)GRPC_SLICE_START_PTR(c->details.method);
  size_t len = GRPC_SLICE_LENGTH(c->details.method);
  c->method = hark_grpc_method_find(path, len);
  if (c->method && c->method->streaming && hark_server_is_draining(g->server)) {
    /* A drain lets the streams already open finish; new ones go elsewhere. */
    hark_grpc_reply(c, NULL, GRPC_STATUS_UNAVAILABLE, "Server is shutting down");
  } else if (c->method && c->method->streaming) {
    hark_grpc_stream_begin(c);
  } else if (!c->method) {
    char msg[256];
    snprintf(msg, sizeof msg, "method '%.*s' is not implemented", (int)(len < 200 ? len : 200),
             path);
    hark_grpc_reply(c, NULL, GRPC_STATUS_UNIMPLEMENTED, msg);
  } else {
    grpc_op read_op = {.op = GRPC_OP_RECV_MESSAGE};
    read_op.data.recv_message.recv_message = &c->recv;
    hark_grpc_start_batch(c, &read_op, 1, &c->t_read);
  }
  hark_grpc_call_unref(c); /* the request_call's reference */
}

/* The message as one contiguous, unpacked protobuf; NULL if malformed. */
static ProtobufCMessage *unpack(hark_grpc_call *c) {
  grpc_byte_buffer_reader reader;
  if (!grpc_byte_buffer_reader_init(&reader, c->recv)) return NULL;
  grpc_slice s = grpc_byte_buffer_reader_readall(&reader);
  grpc_byte_buffer_reader_destroy(&reader);
  ProtobufCMessage *msg = protobuf_c_message_unpack(c->method->request, NULL,
                                                    GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  return msg;
}

static void on_read(hark_grpc_call *c, bool ok) {
  if (!ok || !c->recv) {
    /* Cancelled, or the client closed without a request message. */
    hark_grpc_reply(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
    hark_grpc_call_unref(c);
    return;
  }
  ProtobufCMessage *msg = unpack(c);
  grpc_byte_buffer_destroy(c->recv);
  c->recv = NULL;
  if (!msg) {
    char text[160];
    snprintf(text, sizeof text, "malformed %s message", c->method->request->name);
    hark_grpc_reply(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, text);
  } else {
    c->method->handle(c, msg);
  }
  hark_grpc_call_unref(c);
}

static void on_send(hark_grpc_call *c, bool ok) {
  if (c->send) {
    grpc_byte_buffer_destroy(c->send);
    c->send = NULL;
  }
  hark_grpc_call_unref(c);
}

static void on_close(hark_grpc_call *c, bool ok) {
  pthread_mutex_lock(&c->mu);
  c->closed = true;
  /* A cancelled call lets go of what it held for the reply at once; its
   * engine requests still complete and their results are dropped. */
  if (c->unary && c->unary->first) {
    hark_response_free(c->unary->first);
    c->unary->first = NULL;
  }
  hark_grpc_stream_closed_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (c->method && c->method->closed) c->method->closed(c);
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
  grpc_op ops[3];
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
  hark_grpc_start_batch(c, ops, n, &c->t_send);
  pthread_mutex_unlock(&c->mu);
}

void hark_grpc_reply_error(hark_grpc_call *c, hark_error *err) {
  hark_grpc_reply(c, NULL, hark_grpc_status(hark_error_code(err)), hark_error_message(err));
  hark_error_free(err);
}

/* ---- the server -------------------------------------------------------------- */

static void *cq_main(void *arg) {
  hark_grpc *g = arg;
  for (;;) {
    /* While stopping, wake now and then: engine completions on worker
     * threads may free the last calls without touching the queue. */
    gpr_timespec deadline =
        g->shutdown_done ? gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                        gpr_time_from_millis(20, GPR_TIMESPAN))
                         : gpr_inf_future(GPR_CLOCK_MONOTONIC);
    grpc_event ev = grpc_completion_queue_next(g->cq, deadline, NULL);
    if (ev.type == GRPC_QUEUE_SHUTDOWN) break;
    if (ev.type == GRPC_OP_COMPLETE) {
      hark_grpc_tag *tag = ev.tag;
      if (!tag->fn) g->shutdown_done = true;
      else tag->fn(tag->call, ev.success != 0);
    }
    if (g->shutdown_done && !g->cq_shut && atomic_load(&g->live_calls) == 0) {
      grpc_completion_queue_shutdown(g->cq);
      g->cq_shut = true;
    }
  }
  return NULL;
}

hark_error *hark_grpc_new(hark_server *server, const hark_grpc_options *opts, hark_grpc **out) {
  *out = NULL;
  hark_grpc *g = calloc(1, sizeof *g);
  if (!g) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  g->server = server;
  g->max_message_bytes = opts->max_message_bytes ? opts->max_message_bytes : DEFAULT_MAX_MESSAGE;
  g->speech_model = opts->speech_model && *opts->speech_model ? opts->speech_model : "asr";
  g->max_streams = opts->max_streams ? opts->max_streams : 1024;
  g->stream_backlog_limit = opts->stream_backlog_limit;
  atomic_init(&g->speech_streams, 0);
  if (g->max_message_bytes > INT_MAX) g->max_message_bytes = INT_MAX;
  atomic_init(&g->stopping, false);
  atomic_init(&g->live_calls, 0);
  atomic_init(&g->open_streams, 0);
  grpc_init();
  grpc_arg args[2] = {
      {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
       .value.integer = (int)g->max_message_bytes},
      {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
       .value.integer = (int)g->max_message_bytes}};
  grpc_channel_args cargs = {2, args};
  g->gs = grpc_server_create(&cargs, NULL);
  g->cq = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(g->gs, g->cq, NULL);
  char addr[300];
  const char *host = opts->address ? opts->address : "0.0.0.0";
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, opts->port);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  g->port = grpc_server_add_http2_port(g->gs, addr, creds);
  grpc_server_credentials_release(creds);
  if (g->port <= 0) {
    grpc_server_destroy(g->gs);
    grpc_completion_queue_shutdown(g->cq);
    while (grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(g->cq);
    grpc_shutdown();
    free(g);
    return hark_error_new(HARK_ERR_UNAVAILABLE, "cannot bind the gRPC port %s", addr);
  }
  grpc_server_start(g->gs);
  request_next(g);
  if (pthread_create(&g->thread, NULL, cq_main, g) != 0) {
    g->thread = 0;
    hark_grpc_free(g);
    return hark_error_new(HARK_ERR_INTERNAL, "cannot start the gRPC thread");
  }
  *out = g;
  return NULL;
}

int hark_grpc_port(const hark_grpc *g) { return g->port; }

bool hark_grpc_is_idle(const hark_grpc *g) {
  return !g || atomic_load(&((hark_grpc *)g)->open_streams) == 0;
}

void hark_grpc_free(hark_grpc *g) {
  if (!g) return;
  atomic_store(&g->stopping, true);
  g->shutdown_tag = (hark_grpc_tag){NULL, NULL};
  grpc_server_shutdown_and_notify(g->gs, g->cq, &g->shutdown_tag);
  grpc_server_cancel_all_calls(g->gs);
  if (g->thread) {
    pthread_join(g->thread, NULL);
  } else {
    g->shutdown_done = false;
    cq_main(g);
  }
  grpc_server_destroy(g->gs);
  grpc_completion_queue_destroy(g->cq);
  grpc_shutdown();
  free(g);
}
