/*
 * grpc_impl.h — what the gRPC transport's files share, each using only
 * those before it: call.c (a call's life, and what the services send,
 * from any thread), h2.c (HTTP/2 with nghttp2 over the loops' raw
 * connections: streams become calls, messages go in and out) and grpc.c
 * (the transport object: its methods, options and drain). Private to
 * src/frontend/grpc.
 */
#ifndef HARK_FRONTEND_GRPC_IMPL_H
#define HARK_FRONTEND_GRPC_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "frontend/grpc/grpc.h"
#include "frontend/http/http.h"
#include "util/buf.h"

/* A registered method: its path, and the service it belongs to. */
typedef struct hark_grpc_reg {
  const hark_grpc_method *m;
  void *svc_userp;
  char *path;
  size_t path_len;
} hark_grpc_reg;

struct hark_grpc {
  hark_grpc_options opts;
  size_t max_message_bytes;
  size_t max_declared_bytes; /* per connection, not yet sent (opts' resolved) */
  /* Replies one connection may hold unwritten before its requests stop
   * being read: the same share as what it may declare. */
  size_t max_reply_bytes;
  hark_grpc_reg *regs;
  size_t n_regs, cap_regs;
  atomic_bool draining;
  atomic_long live_calls;   /* call structs not yet freed */
  atomic_long open_streams; /* streaming calls begun and not yet freed */
  struct nghttp2_session_callbacks *cbs;
  struct nghttp2_option *h2_opts;
};

typedef struct h2conn h2conn;

/* What one connection's replies hold, made and not yet written: charged
 * by call.c as a service sends (any thread), read by h2.c, which stops
 * reading the connection's requests past its share. Held by the
 * connection and each of its calls; the last frees it. */
typedef struct hark_grpc_share {
  _Atomic size_t bytes;
  atomic_int refs;
} hark_grpc_share;

/* One outgoing message: the 5-byte gRPC prefix, then the protobuf. */
typedef struct hark_grpc_out {
  struct hark_grpc_out *next;
  size_t len;
  uint8_t data[];
} hark_grpc_out;

struct hark_grpc_call {
  hark_grpc *g;
  hark_http_loop *loop; /* held for the call's whole life */
  const hark_grpc_reg *reg;
  atomic_int refs;
  /* h2.c's, loop thread only */
  h2conn *conn; /* NULL once the stream is gone */
  int32_t stream_id;
  hark_grpc_call *prev, *next; /* conn->calls */
  char path[200];              /* as the client sent it (for UNIMPLEMENTED) */
  char peer[HARK_PEER_MAX];    /* its connection's client address, copied at its start */
  hark_buf in;                 /* received bytes not yet a whole message */
  size_t in_off;               /* the unread part of `in` starts here */
  size_t unconsumed;           /* DATA bytes not yet given back to flow control */
  bool got_message, half_closed, half_close_done, began, bad_type, reading;
  char encoding[32];   /* grpc-encoding, when not identity */
  uint32_t opened;     /* what its metadata opens (hark_restrict_collect's state) */
  uint64_t timeout_us; /* grpc-timeout; 0: none */
  hark_http_timer *deadline;
  struct hark_arena *msg_arena; /* the message handle() has, until it returns */
  /* The in-flight budget (--max-inflight-bytes): what the message being
   * assembled or handled took (given back when it is done with, or by
   * hark_grpc_message_free when a handler kept it); a refused message of a
   * stream, read only for its first bytes (refusing) and then dropped
   * (skip bytes of it still to come). */
  size_t msg_charge;
  /* The message whose prefix is read and whose bytes are still coming:
   * msg_unsent of its declared size are not in yet (counted in the
   * connection's declared bytes, h2.c). */
  bool msg_open;
  size_t msg_unsent;
  bool refusing;
  size_t skip;
  char refuse_text[240];
  _Atomic size_t held; /* streams: bytes of its messages still held (any thread) */
  bool response_started, deferred, trailers_sent;
  uint64_t last_rx_ns;    /* the client last sent a byte on it (the idle bounds) */
  hark_grpc_share *share; /* its connection's replies (a reference) */
  hark_grpc_out *wout;    /* the message being written, and how far */
  size_t woff;
  /* any thread, under mu */
  pthread_mutex_t mu;
  bool closed;         /* the stream is gone, or its status is out: nothing more */
  bool cancelled;      /* ... before its status went out */
  hark_cancel *cancel; /* set with `cancelled`: the call's requests stop */
  bool replied;        /* unary: the reply is given */
  bool read_done;      /* streams: nothing more will be read (half-closed or failed) */
  bool forced;         /* the status goes now, whatever waits (past the deadline) */
  hark_grpc_code code;
  char details[256];
  hark_grpc_out *uout;         /* unary: the reply's message */
  hark_grpc_slot *head, *tail; /* streams: in arrival order */
  uint32_t n_slots;
  hark_http_call ev; /* the kick from another thread */
  bool ev_posted;
  void (*flush)(hark_grpc_call *c); /* h2.c's: write what is ready (loop thread) */
  /* the service's */
  void *state;
  void (*state_free)(void *);
};

/* ---- call.c ---------------------------------------------------------------- */

/* A call on `loop` (held until the call is freed), one reference: the
 * stream's. */
hark_grpc_call *hark_grpc_call_new(hark_grpc *g, hark_http_loop *loop,
                                   void (*flush)(hark_grpc_call *c));
/* `msg` packed behind a gRPC message prefix; NULL when it is over `max`
 * (*size says how big it is). */
hark_grpc_out *hark_grpc_pack(const ProtobufCMessage *msg, size_t max, size_t *size);
/* Frees a reply message of the call and gives back what it took from the
 * in-flight budget and its connection's share. NULL is a no-op. */
void hark_grpc_out_free(hark_grpc_call *c, hark_grpc_out *o);
/* A reference on a share; the last unref frees it. */
void hark_grpc_share_ref(hark_grpc_share *s);
void hark_grpc_share_unref(hark_grpc_share *s);
/* Asks for what the call has to send to be written: at once on its loop's
 * thread, else from the loop soon. Any thread; c->mu not held. */
void hark_grpc_kick(hark_grpc_call *c);
/* Posts the kick even from the loop's own thread: for h2.c's data
 * provider, which runs inside nghttp2 where no handler may run, to have
 * the loop read a stream again once it is below its mark. */
void hark_grpc_kick_later(hark_grpc_call *c);
/*
 * Unpacking costs the loop a little per message nested in a request (a
 * map entry, a parameter, an input): a request may hold at most this many,
 * checked on the wire before anything is unpacked. Legitimate requests
 * hold tens (a KServe request's 64 parameters are 128); a flood of
 * parameters is refused without being decoded.
 */
#define HARK_GRPC_MAX_NESTED_MESSAGES 4096u
/* True when the message of type `d` in [p, p + n) holds at most
 * HARK_GRPC_MAX_NESTED_MESSAGES messages at any depth. Allocates nothing. */
bool hark_grpc_within_message_bound(const ProtobufCMessageDescriptor *d, const uint8_t *p,
                                    size_t n);
/* Gives back what a message of the call took from the in-flight budget
 * and from the call's share. Any thread. */
void hark_grpc_message_give(hark_grpc_call *c, size_t n);
/* Unpacks the message in [p, p + n) into a fresh arena (c->msg_arena);
 * NULL if malformed. */
ProtobufCMessage *hark_grpc_unpack(hark_grpc_call *c, const uint8_t *p, size_t n);
/* Runs the method's handler on `msg`, then frees its arena unless the
 * handler took it. */
void hark_grpc_handle(hark_grpc_call *c, ProtobufCMessage *msg);
/* The status a stream ends with is due (c->mu held): it read its last
 * message, and every slot is done and written. */
bool hark_grpc_status_due_locked(const hark_grpc_call *c);
/* Frees what waits to be written and the slots that are done (c->mu
 * held): the call is over. */
void hark_grpc_sweep_locked(hark_grpc_call *c);

/* ---- h2.c ------------------------------------------------------------------- */

/* The raw-connection handlers that speak HTTP/2 to gRPC clients. */
extern const hark_raw_handler hark_grpc_h2_handler;
/* nghttp2's callbacks and options, made once per transport. */
void hark_grpc_h2_setup(hark_grpc *g);
void hark_grpc_h2_teardown(hark_grpc *g);
/* The method at `path`, or NULL. */
const hark_grpc_reg *hark_grpc_find(const hark_grpc *g, const char *path, size_t len);

#endif
