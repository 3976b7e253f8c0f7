/*
 * grpc_impl.h — what the transport's files share: call.c (a call's life
 * and unary reply), grpc_stream.c (bidirectional streams) and grpc.c (the
 * server, its queues and threads, the dispatch of new calls), each using
 * only those before it. Private to src/frontend/grpc.
 *
 * Every call is reference counted: one reference per batch of operations
 * in flight on its queue, and one while a service holds work for it (an
 * inference, a load). Tags complete on the queue thread.
 */
#ifndef HARK_FRONTEND_GRPC_IMPL_H
#define HARK_FRONTEND_GRPC_IMPL_H

#include <grpc/byte_buffer_reader.h>
#include <pthread.h>
#include <stdatomic.h>

#include "frontend/grpc/grpc.h"

/* A completion-queue tag: what to run when it completes. */
typedef struct hark_grpc_tag {
  void (*fn)(hark_grpc_call *c, bool ok);
  hark_grpc_call *call;
} hark_grpc_tag;

/* A registered method: its path, and the service it belongs to. */
typedef struct hark_grpc_reg {
  const hark_grpc_method *m;
  void *svc_userp;
  void *handle; /* gRPC core's registered method */
  char *path;
} hark_grpc_reg;

/* One completion queue and the thread that serves it. */
typedef struct hark_grpc_cq {
  hark_grpc *g;
  unsigned index;
  grpc_completion_queue *cq;
  pthread_t thread;
  bool started, shut;
} hark_grpc_cq;

struct hark_grpc {
  grpc_server *gs;
  hark_grpc_options opts;
  size_t max_message_bytes;
  int port;
  unsigned n_cqs;
  hark_grpc_cq *cqs;
  hark_grpc_reg *regs;
  size_t n_regs, cap_regs;
  bool started;
  atomic_bool stopping;
  atomic_bool draining;
  atomic_bool shutdown_done;  /* the server's shutdown notice came */
  hark_grpc_tag shutdown_tag; /* fn NULL: the server's shutdown notice */
  atomic_long live_calls;     /* call structs not yet freed */
  atomic_long open_streams;   /* streaming calls begun and not yet freed */
};

struct hark_grpc_call {
  hark_grpc *g;
  hark_grpc_cq *q;
  const hark_grpc_reg *reg; /* NULL: a method nobody registered */
  grpc_call *call;
  gpr_timespec deadline;
  grpc_call_details details; /* unregistered calls only */
  grpc_metadata_array request_md;
  grpc_byte_buffer *recv;
  struct hark_arena *msg_arena; /* the message handle() has, until it returns */
  grpc_byte_buffer *send;
  grpc_slice status_details;
  bool has_status_details;
  int cancelled; /* set by RECV_CLOSE_ON_SERVER */
  atomic_int refs;
  pthread_mutex_t mu; /* guards what follows against other threads */
  bool closed;        /* the call is over: nothing more may be sent */
  bool replied;
  hark_grpc_tag t_new, t_read, t_send, t_close, t_write;
  /* streams (grpc_stream.c) */
  bool stream_begun;          /* counted in g->open_streams */
  hark_grpc_slot *head, *tail; /* in arrival order */
  uint32_t n_slots;
  grpc_byte_buffer *write_bb; /* the one write in flight */
  bool writing, reading, read_done, md_sent, status_sent;
  grpc_status_code stream_code; /* the final status of a stream */
  char stream_details[160];
  /* the service's */
  void *state;
  void (*state_free)(void *);
  void (*fini)(hark_grpc_call *c); /* grpc_stream.c's, when the call is freed */
};

/* ---- call.c ---------------------------------------------------------------- */

/* A call struct for the next call of `reg` (NULL: an unregistered method)
 * on queue q; on_new runs when it arrives. One reference, the request's. */
hark_grpc_call *hark_grpc_call_new(hark_grpc_cq *q, const hark_grpc_reg *reg,
                                   void (*on_new)(hark_grpc_call *c, bool ok));
/* Starts a batch holding a call reference until its tag completes. */
bool hark_grpc_start_batch(hark_grpc_call *c, const grpc_op *ops, size_t n, hark_grpc_tag *tag);
/* The call's message, unpacked into a fresh arena (c->msg_arena), of the
 * method's request type; NULL if malformed. Consumes c->recv. */
ProtobufCMessage *hark_grpc_unpack(hark_grpc_call *c);
/* Runs the method's handler on `msg`, then frees its arena unless the
 * handler took it. */
void hark_grpc_handle(hark_grpc_call *c, ProtobufCMessage *msg);
/* `msg` packed into a byte buffer; NULL when over the limit (*size says
 * how big it is). */
grpc_byte_buffer *hark_grpc_pack(const ProtobufCMessage *msg, size_t max, size_t *size);

/* ---- grpc_stream.c ---------------------------------------------------------------- */

/* A streaming call arrived: watch for its end and start reading it. Queue
 * thread. */
void hark_grpc_stream_begin(hark_grpc_call *c);

#endif
