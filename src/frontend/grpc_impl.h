/*
 * grpc_impl.h — what the gRPC front end's files share: the per-call state
 * machine (grpc.c) and the service methods (grpc_kserve.c, grpc_infer.c).
 *
 * Every call is a hark_grpc_call, reference counted: one reference per
 * batch of operations in flight on the completion queue, and one while the
 * engine holds work for it (an inference, a load). Tags complete on the
 * queue thread; replies may be started from any thread (gRPC C core allows
 * grpc_call_start_batch from any thread), which is how engine completions
 * reach the client without waking the queue thread first.
 */
#ifndef HARK_GRPC_IMPL_H
#define HARK_GRPC_IMPL_H

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "frontend/grpc.h"
#include "hark/server.h"

typedef struct hark_grpc_call hark_grpc_call;

/* Bound on a stream's requests awaiting their replies: past it, hark stops
 * reading the stream until the oldest is answered. */
#define HARK_GRPC_STREAM_MAX_PENDING 64

/*
 * One ModelInferRequest on its way through the engine (grpc_infer.c). A
 * unary call has one; a stream has a list of them in arrival order, and
 * writes each one's replies only after every earlier one is done, so
 * responses come back in request order. Fields are guarded by the call's
 * mutex once the job is visible to the engine.
 */
typedef struct hark_grpc_job {
  hark_grpc_call *c;
  struct hark_grpc_job *next;
  const void *request;     /* the ModelInferRequest: owned by the engine
                              request, valid until its final is handled */
  const void *sequence_id; /* its InferParameter, echoed back; or NULL */
  char *model_name;
  int64_t model_version;
  hark_response *first;    /* unary: the response kept for the reply */
  grpc_byte_buffer **out;  /* stream: packed replies, oldest first */
  size_t n_out, cap_out;
  bool done;               /* the final was handled */
} hark_grpc_job;

/* A completion-queue tag: what to run when it completes. */
typedef struct hark_grpc_tag {
  void (*fn)(hark_grpc_call *c, bool ok);
  hark_grpc_call *call;
} hark_grpc_tag;

/* A method: its full path, request type and handler. The handler owns
 * `msg` (free with protobuf_c_message_free_unpacked) and must reply
 * exactly once, now or later (keeping a reference meanwhile). */
typedef struct hark_grpc_method {
  const char *path;
  const ProtobufCMessageDescriptor *request;
  void (*handle)(hark_grpc_call *c, ProtobufCMessage *msg);
  bool streaming; /* bidirectional: handle() runs once per message */
  /* Streams only, optional, queue thread. half_close: the client sent its
   * last message (cleanly); a job appended now is answered before the
   * status. closed: the call is over, whether it finished, failed or was
   * cancelled (c->cancelled says which). */
  void (*half_close)(hark_grpc_call *c);
  void (*closed)(hark_grpc_call *c);
} hark_grpc_method;

struct hark_grpc {
  hark_server *server;
  grpc_server *gs;
  grpc_completion_queue *cq;
  pthread_t thread;
  int port;
  size_t max_message_bytes;
  atomic_bool stopping;
  bool shutdown_done;         /* queue thread only */
  bool cq_shut;               /* queue thread only */
  hark_grpc_tag shutdown_tag; /* fn NULL: the server's shutdown notice */
  atomic_long live_calls;     /* hark_grpc_call structs not yet freed */
  atomic_long open_streams;   /* streaming calls begun and not yet freed */
  /* Speech streams (grpc_riva.c). */
  const char *speech_model;
  uint32_t max_streams, stream_backlog_limit;
  atomic_uint speech_streams;
};

struct hark_grpc_call {
  hark_grpc *g;
  grpc_call *call;
  grpc_call_details details;
  grpc_metadata_array request_md;
  grpc_byte_buffer *recv;
  grpc_byte_buffer *send;
  grpc_slice status_details;
  bool has_status_details;
  int cancelled; /* set by RECV_CLOSE_ON_SERVER */
  atomic_int refs;
  pthread_mutex_t mu; /* guards closed/replied against worker threads */
  bool closed;        /* the call is over: nothing more may be sent */
  bool replied;
  hark_grpc_tag t_new, t_read, t_send, t_close;
  const hark_grpc_method *method;
  hark_grpc_job *unary; /* ModelInfer: its job until the final */
  /* ModelStreamInfer (grpc_stream.c); all guarded by mu. */
  hark_grpc_tag t_write;
  bool stream_begun; /* counted in g->open_streams */
  hark_grpc_job *head, *tail; /* in arrival order */
  uint32_t n_jobs;
  grpc_byte_buffer *write_bb; /* the one write in flight */
  bool writing, reading, read_done, md_sent, status_sent;
  grpc_status_code stream_code; /* the final status of a stream */
  char stream_details[160];
  /* A service's own state for the call, freed with it. */
  void *svc;
  void (*svc_free)(void *svc);
};

/* ---- grpc.c ---------------------------------------------------------------- */

void hark_grpc_call_ref(hark_grpc_call *c);
/* Drops a reference; the last frees the call (on whatever thread). */
void hark_grpc_call_unref(hark_grpc_call *c);
/*
 * Sends the reply (initial metadata, `msg` when not NULL, and the status)
 * and closes the call. Any thread. A second reply, or one after the call
 * was cancelled, is dropped. `msg` stays the caller's.
 */
void hark_grpc_reply(hark_grpc_call *c, const ProtobufCMessage *msg,
                     grpc_status_code code, const char *details);
/* `msg` serialized into a byte buffer; NULL when it is over `max` bytes
 * (*size says how big it is). */
grpc_byte_buffer *hark_grpc_pack(const ProtobufCMessage *msg, size_t max, size_t *size);
/* Starts a batch holding a call reference until its tag completes. */
bool hark_grpc_start_batch(hark_grpc_call *c, const grpc_op *ops, size_t n, hark_grpc_tag *tag);
/* Replies with the status for `err`, which it frees. */
void hark_grpc_reply_error(hark_grpc_call *c, hark_error *err);
grpc_status_code hark_grpc_status(hark_code code);

/* ---- grpc_kserve.c ------------------------------------------------------------ */

/* The method served at `path` (len bytes), or NULL. */
const hark_grpc_method *hark_grpc_method_find(const char *path, size_t len);
/* "" -> -1 (newest); digits -> the version; else INVALID_ARG. */
hark_error *hark_grpc_parse_version(const char *s, int64_t *out);

/* ---- grpc_riva.c ------------------------------------------------------------------ */

/* The Riva speech method served at `path` (len bytes), or NULL. */
const hark_grpc_method *hark_grpc_riva_method_find(const char *path, size_t len);

/* ---- grpc_infer.c ---------------------------------------------------------------- */

void hark_grpc_model_infer(hark_grpc_call *c, ProtobufCMessage *msg);
/* ModelStreamInfer: one message of the stream, queued in order. */
void hark_grpc_stream_infer(hark_grpc_call *c, ProtobufCMessage *msg);
void hark_grpc_job_free(hark_grpc_job *j);
/* Adds a packed reply to a stream job (c->mu held); false (bb freed) when
 * out of memory. */
bool hark_grpc_job_add_out(hark_grpc_job *j, grpc_byte_buffer *bb);

/* ---- grpc_stream.c ---------------------------------------------------------------- */

/* A streaming call arrived: start reading it. Queue thread. */
void hark_grpc_stream_begin(hark_grpc_call *c);
/* Appends a job (c->mu held). */
void hark_grpc_stream_append_locked(hark_grpc_call *c, hark_grpc_job *j);
/* Writes whatever is next in order, or the final status. Any thread;
 * c->mu not held. */
void hark_grpc_stream_pump(hark_grpc_call *c);
/* The call is over (c->mu held): frees what waits to be written. */
void hark_grpc_stream_closed_locked(hark_grpc_call *c);
/* Ends the stream with `code` once the replies before it are written, and
 * reads no more (the first failure wins). Any thread; c->mu not held. */
void hark_grpc_stream_fail(hark_grpc_call *c, grpc_status_code code, const char *details);
/* True once the stream is failing (c->mu held). */
bool hark_grpc_stream_failed_locked(const hark_grpc_call *c);

#endif
