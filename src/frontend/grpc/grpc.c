/*
 * grpc.c — the gRPC server: its completion queues and their threads,
 * method registration, and the dispatch of each new call to its method
 * (a call's own life and its unary reply are call.c's; a stream's,
 * grpc_stream.c's).
 *
 * Every method a service registers is registered with gRPC core, so a
 * call arrives already matched to its method and, for a unary one, with
 * its request message (GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER): the
 * handler runs as soon as the call's tag completes, and the reply is one
 * batch (initial metadata, message, status, and the wait for the client's
 * close). One call of each method is always requested on each queue; a
 * method nobody registered comes through grpc_server_request_call and is
 * answered UNIMPLEMENTED. A stream instead starts by watching for the
 * client's close (to learn of cancellation) and reads message by message
 * (grpc_stream.c).
 *
 * Each queue's thread runs grpc_completion_queue_next() and never blocks on
 * anything else; `thread_hook` lets the owner mark these threads (as ones
 * that may run a cheap model's batch in place, so a unary inference can
 * complete without leaving the thread).
 *
 * Draining (SIGTERM): new calls of methods flagged REFUSE_DRAINING get
 * UNAVAILABLE while the open ones finish. Stopping:
 * shutdown_and_notify + cancel_all_calls, then the threads keep serving
 * until every call struct is gone (work in the engine holds its call until
 * its final), and only then shut their queues down.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc_security.h>

#include "frontend/grpc/grpc_impl.h"
#include "util/alloc.h"
#include "util/log.h"

#define DEFAULT_MAX_MESSAGE (64u << 20)
#define MAX_THREADS 16
#define STOP_POLL_MS 20
/* ---- calls ------------------------------------------------------------------ */

static void on_new(hark_grpc_call *c, bool ok);

/* Asks gRPC for the next call of `reg` (NULL: of any method nobody
 * registered) on queue q. */
static void request_call(hark_grpc_cq *q, const hark_grpc_reg *reg) {
  hark_grpc *g = q->g;
  if (atomic_load(&g->stopping)) return;
  hark_grpc_call *c = hark_grpc_call_new(q, reg, on_new);
  grpc_call_error e;
  if (reg) {
    bool unary = !(reg->m->flags & HARK_GRPC_STREAMING);
    e = grpc_server_request_registered_call(g->gs, reg->handle, &c->call, &c->deadline,
                                            &c->request_md, unary ? &c->recv : NULL, q->cq, q->cq,
                                            &c->t_new);
  } else {
    e = grpc_server_request_call(g->gs, &c->call, &c->details, &c->request_md, q->cq, q->cq,
                                 &c->t_new);
  }
  if (e != GRPC_CALL_OK) {
    HARK_ERROR("grpc: request_call failed (%d)", (int)e);
    hark_grpc_call_unref(c);
  }
}

/* A unary call: its message is here; hand it to the handler. */
static void serve_unary(hark_grpc_call *c) {
  if (!c->recv) { /* the client closed without a request message */
    hark_grpc_reply(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, "no request message");
    return;
  }
  ProtobufCMessage *msg = hark_grpc_unpack(c);
  if (!msg) {
    char text[160];
    snprintf(text, sizeof text, "malformed %s message", c->reg->m->request->name);
    hark_grpc_reply(c, NULL, GRPC_STATUS_INVALID_ARGUMENT, text);
    return;
  }
  hark_grpc_handle(c, msg);
}

static void on_new(hark_grpc_call *c, bool ok) {
  hark_grpc *g = c->g;
  if (!ok) { /* the server is shutting down */
    hark_grpc_call_unref(c);
    return;
  }
  request_call(c->q, c->reg); /* the next call of the same method */
  const hark_grpc_method *m = c->reg ? c->reg->m : NULL;
  if (!m) {
    char msg[256];
    const char *path = (const char *)GRPC_SLICE_START_PTR(c->details.method);
    size_t len = GRPC_SLICE_LENGTH(c->details.method);
    snprintf(msg, sizeof msg, "method '%.*s' is not implemented", (int)(len < 200 ? len : 200),
             path);
    hark_grpc_reply(c, NULL, GRPC_STATUS_UNIMPLEMENTED, msg);
  } else if ((m->flags & HARK_GRPC_REFUSE_DRAINING) && atomic_load(&g->draining)) {
    /* A drain lets the calls already open finish; new ones go elsewhere. */
    hark_grpc_reply(c, NULL, GRPC_STATUS_UNAVAILABLE, "Server is shutting down");
  } else if (m->flags & HARK_GRPC_STREAMING) {
    hark_grpc_stream_begin(c);
  } else {
    serve_unary(c);
  }
  hark_grpc_call_unref(c); /* the request's reference */
}

/* ---- the queues --------------------------------------------------------------- */

/* Serves queue q until `deadline`; false once the queue is shut down. */
static bool serve_once(hark_grpc_cq *q, gpr_timespec deadline) {
  hark_grpc *g = q->g;
  grpc_event ev = grpc_completion_queue_next(q->cq, deadline, NULL);
  if (ev.type == GRPC_QUEUE_SHUTDOWN) return false;
  if (ev.type == GRPC_OP_COMPLETE) {
    hark_grpc_tag *tag = ev.tag;
    if (!tag->fn)
      atomic_store(&g->shutdown_done, true);
    else
      tag->fn(tag->call, ev.success != 0);
  }
  if (atomic_load(&g->shutdown_done) && !q->shut && atomic_load(&g->live_calls) == 0) {
    grpc_completion_queue_shutdown(q->cq);
    q->shut = true;
  }
  return true;
}

/* While stopping, wake now and then: engine completions on worker threads
 * may free the last calls without touching the queue. */
static gpr_timespec next_deadline(const hark_grpc *g) {
  if (!atomic_load(&g->stopping)) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_millis(STOP_POLL_MS, GPR_TIMESPAN));
}

static void *cq_main(void *arg) {
  hark_grpc_cq *q = arg;
  hark_grpc *g = q->g;
  if (g->opts.thread_hook) g->opts.thread_hook(true);
  while (serve_once(q, next_deadline(g))) {
  }
  if (g->opts.thread_hook) g->opts.thread_hook(false);
  return NULL;
}

/* ---- the server ---------------------------------------------------------------- */

hark_error *hark_grpc_new(const hark_grpc_options *opts, hark_grpc **out) {
  hark_grpc *g = hark_xcalloc(1, sizeof *g);
  g->opts = *opts;
  g->max_message_bytes = opts->max_message_bytes ? opts->max_message_bytes : DEFAULT_MAX_MESSAGE;
  if (g->max_message_bytes > INT_MAX) g->max_message_bytes = INT_MAX;
  atomic_init(&g->stopping, false);
  atomic_init(&g->draining, false);
  atomic_init(&g->shutdown_done, false);
  atomic_init(&g->live_calls, 0);
  atomic_init(&g->open_streams, 0);
  g->n_cqs = opts->threads;
  if (!g->n_cqs) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    g->n_cqs = cores < 1 ? 1 : (unsigned)cores;
  }
  if (g->n_cqs > MAX_THREADS) g->n_cqs = MAX_THREADS;
  grpc_init();
  grpc_arg args[2] = {{.type = GRPC_ARG_INTEGER,
                       .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                       .value.integer = (int)g->max_message_bytes},
                      {.type = GRPC_ARG_INTEGER,
                       .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
                       .value.integer = (int)g->max_message_bytes}};
  grpc_channel_args cargs = {2, args};
  g->gs = grpc_server_create(&cargs, NULL);
  g->cqs = hark_xcalloc(g->n_cqs, sizeof *g->cqs);
  for (unsigned i = 0; i < g->n_cqs; i++) {
    g->cqs[i] = (hark_grpc_cq){.g = g, .index = i,
                               .cq = grpc_completion_queue_create_for_next(NULL)};
    grpc_server_register_completion_queue(g->gs, g->cqs[i].cq, NULL);
  }
  *out = g;
  return NULL;
}

hark_error *hark_grpc_add_service(hark_grpc *g, const hark_grpc_service *svc, void *userp) {
  if (g->started)
    return hark_error_new(HARK_ERR_INTERNAL, "grpc: service '%s' added after the start",
                          svc->name);
  for (size_t i = 0; i < svc->n_methods; i++) {
    const hark_grpc_method *m = &svc->methods[i];
    size_t len = strlen(svc->name) + strlen(m->name) + 3;
    char *path = hark_xmalloc(len);
    snprintf(path, len, "/%s/%s", svc->name, m->name);
    bool unary = !(m->flags & HARK_GRPC_STREAMING);
    void *handle = grpc_server_register_method(
        g->gs, path, NULL,
        unary ? GRPC_SRM_PAYLOAD_READ_INITIAL_BYTE_BUFFER : GRPC_SRM_PAYLOAD_NONE, 0);
    if (!handle) {
      hark_error *err = hark_error_new(HARK_ERR_INTERNAL, "grpc: cannot register %s", path);
      free(path);
      return err;
    }
    if (g->n_regs == g->cap_regs) {
      g->cap_regs = g->cap_regs ? 2 * g->cap_regs : 16;
      g->regs = hark_xrealloc(g->regs, g->cap_regs * sizeof *g->regs);
    }
    g->regs[g->n_regs++] = (hark_grpc_reg){.m = m, .svc_userp = userp, .handle = handle,
                                           .path = path};
  }
  return NULL;
}

hark_error *hark_grpc_start(hark_grpc *g) {
  char addr[300];
  const char *host = g->opts.address ? g->opts.address : "0.0.0.0";
  snprintf(addr, sizeof addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, g->opts.port);
  grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
  g->port = grpc_server_add_http2_port(g->gs, addr, creds);
  grpc_server_credentials_release(creds);
  if (g->port <= 0) return hark_error_new(HARK_ERR_UNAVAILABLE, "cannot bind the gRPC port %s", addr);
  grpc_server_start(g->gs);
  g->started = true;
  for (unsigned i = 0; i < g->n_cqs; i++) {
    hark_grpc_cq *q = &g->cqs[i];
    for (size_t k = 0; k < g->n_regs; k++) request_call(q, &g->regs[k]);
    request_call(q, NULL);
  }
  for (unsigned i = 0; i < g->n_cqs; i++) {
    hark_grpc_cq *q = &g->cqs[i];
    if (pthread_create(&q->thread, NULL, cq_main, q) != 0)
      return hark_error_new(HARK_ERR_INTERNAL, "cannot start gRPC thread %u", i);
    q->started = true;
  }
  return NULL;
}

int hark_grpc_port(const hark_grpc *g) { return g->port; }

void hark_grpc_drain(hark_grpc *g) { atomic_store(&g->draining, true); }

bool hark_grpc_draining(const hark_grpc *g) { return atomic_load(&((hark_grpc *)g)->draining); }

bool hark_grpc_is_idle(const hark_grpc *g) {
  return !g || atomic_load(&((hark_grpc *)g)->open_streams) == 0;
}

void hark_grpc_free(hark_grpc *g) {
  if (!g) return;
  atomic_store(&g->stopping, true);
  if (g->started) {
    g->shutdown_tag = (hark_grpc_tag){NULL, NULL};
    grpc_server_shutdown_and_notify(g->gs, g->cqs[0].cq, &g->shutdown_tag);
    grpc_server_cancel_all_calls(g->gs);
  } else {
    atomic_store(&g->shutdown_done, true); /* nothing was ever requested */
  }
  for (unsigned i = 0; i < g->n_cqs; i++)
    if (g->cqs[i].started) pthread_join(g->cqs[i].thread, NULL);
  /* Queues without a thread of their own (it never started): serve them
   * here, in turn, until each is shut down. */
  for (bool left = true; left;) {
    left = false;
    for (unsigned i = 0; i < g->n_cqs; i++) {
      hark_grpc_cq *q = &g->cqs[i];
      if (q->started) continue;
      if (serve_once(q, next_deadline(g)))
        left = true;
      else
        q->started = true; /* done with it */
    }
  }
  grpc_server_destroy(g->gs);
  for (unsigned i = 0; i < g->n_cqs; i++) grpc_completion_queue_destroy(g->cqs[i].cq);
  for (size_t k = 0; k < g->n_regs; k++) free(g->regs[k].path);
  free(g->regs);
  free(g->cqs);
  grpc_shutdown();
  free(g);
}
