/*
 * grpc.h — the gRPC transport (HTTP/2 with nghttp2, messages with
 * protobuf-c), knowing nothing of inference: it speaks gRPC over the raw
 * connections the HTTP transport's event loops accept on the gRPC port,
 * turns each HTTP/2 stream into a call, and orders a bidirectional
 * stream's replies. Services register a method table with it
 * (kserve/kserve_grpc.c: inference.GRPCInferenceService and
 * grpc.health.v1.Health; speech/riva.c: Riva's RivaSpeechRecognition),
 * and the transport calls their handlers, as Redis calls a ConnectionType's
 * functions.
 *
 * Threads: a call belongs to the loop that accepted its connection, and
 * its handler runs on that loop's thread. What a service sends (a reply, a
 * stream's messages, its status) may come from any thread — an engine
 * worker that finished the call's work; the loop writes it.
 */
#ifndef HARK_FRONTEND_GRPC_H
#define HARK_FRONTEND_GRPC_H

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/security/restrict.h"
#include "hark/request.h"
#include "hark/types.h"
#include "util/arena.h"

typedef struct hark_grpc hark_grpc;
typedef struct hark_grpc_call hark_grpc_call;
struct hark_raw_handler;

/* gRPC's status codes (the protocol's numbers). */
typedef enum hark_grpc_code {
  HARK_GRPC_OK = 0,
  HARK_GRPC_CANCELLED = 1,
  HARK_GRPC_UNKNOWN = 2,
  HARK_GRPC_INVALID_ARGUMENT = 3,
  HARK_GRPC_DEADLINE_EXCEEDED = 4,
  HARK_GRPC_NOT_FOUND = 5,
  HARK_GRPC_ALREADY_EXISTS = 6,
  HARK_GRPC_PERMISSION_DENIED = 7,
  HARK_GRPC_RESOURCE_EXHAUSTED = 8,
  HARK_GRPC_FAILED_PRECONDITION = 9,
  HARK_GRPC_ABORTED = 10,
  HARK_GRPC_OUT_OF_RANGE = 11,
  HARK_GRPC_UNIMPLEMENTED = 12,
  HARK_GRPC_INTERNAL = 13,
  HARK_GRPC_UNAVAILABLE = 14,
  HARK_GRPC_DATA_LOSS = 15,
  HARK_GRPC_UNAUTHENTICATED = 16,
} hark_grpc_code;

/* Method flags. */
#define HARK_GRPC_STREAMING 1u       /* bidirectional: handle() per message */
#define HARK_GRPC_REFUSE_DRAINING 2u /* new calls get UNAVAILABLE while draining */

/*
 * A method. `msg` lives until `handle` returns (in an arena the transport
 * frees), unless the handler keeps it with hark_grpc_take_message. For a
 * unary method `handle` must reply exactly once, now or later (holding a
 * call reference meanwhile). Streams only, optional, queue thread:
 * `half_close` — the client sent its last message cleanly (a slot
 * appended now is answered before the status); `closed` — the call is
 * over, finished, failed or cancelled (hark_grpc_call_cancelled says).
 */
typedef struct hark_grpc_method {
  const char *name; /* within the service: "ModelInfer" */
  const ProtobufCMessageDescriptor *request;
  void (*handle)(hark_grpc_call *c, ProtobufCMessage *msg);
  unsigned flags;
  void (*half_close)(hark_grpc_call *c);
  void (*closed)(hark_grpc_call *c);
  hark_api api; /* its category (--grpc-restricted-protocol); required */
  /* Streams only, optional, loop thread: a message was refused before it
   * was read (it would pass the in-flight bounds); `p`/`n` are its first
   * bytes (at most HARK_GRPC_REFUSED_PREFIX, for its id) and `why` says
   * what to tell the client. The stream goes on. Without it the call ends
   * with RESOURCE_EXHAUSTED. */
  void (*refused)(hark_grpc_call *c, const uint8_t *p, size_t n, const char *why);
} hark_grpc_method;

typedef struct hark_grpc_service {
  const char *name; /* "inference.GRPCInferenceService" */
  const hark_grpc_method *methods;
  size_t n_methods;
} hark_grpc_service;

/*
 * Per-connection limits. Times are milliseconds, 0 turns the bound off;
 * harkd passes Triton's defaults (its --grpc-keepalive-* flags), and the
 * pings follow gRPC core's server policy (doc/keepalive.md).
 */
typedef struct hark_grpc_options {
  size_t max_message_bytes; /* largest message either way; 0 = 64 MiB */
  /* Calls one connection may have open (SETTINGS_MAX_CONCURRENT_STREAMS:
   * more are refused with REFUSED_STREAM); 0: 1024. */
  uint32_t max_concurrent_streams;
  /* Bidirectional streams (speech, ModelStreamInfer) one connection may
   * have open: more end RESOURCE_EXHAUSTED; 0: no cap of their own. */
  uint32_t max_streams_per_connection;
  /* A stream the client sends nothing on this long while nothing of it is
   * in the works ends DEADLINE_EXCEEDED. */
  uint64_t stream_idle_timeout_ms;
  /* A request message being received (a unary call's, from its HEADERS
   * until the whole message is in; a stream's, once its prefix is in)
   * that gets no byte for this long ends DEADLINE_EXCEEDED: a declared
   * message that never comes holds nothing for ever. */
  uint64_t message_timeout_ms;
  /* Bytes of messages one connection may have declared (in their 5-byte
   * prefixes) and not yet sent: a message past it is refused at once,
   * RESOURCE_EXHAUSTED. 0: four times max_message_bytes; never below
   * max_message_bytes. Bytes are charged to the in-flight budget as they
   * arrive, not as declared. */
  size_t max_declared_bytes_per_connection;
  /* A connection whose replies wait for the client to read them (its
   * HTTP/2 flow-control window is shut, a window of 0 included) and that
   * reads none of them for this long is closed; 0: 60 s
   * (--send-timeout-secs, as for a socket the client does not read).
   * Replies charge the in-flight budget while they wait, and a connection
   * holding more than max_declared_bytes_per_connection of them has no
   * more of its requests read until it reads. */
  uint64_t send_timeout_ms;
  /* Keepalive: a PING after this long without a byte from the client (on
   * a connection with calls open, or any with permit_without_calls); no
   * answer within keepalive_timeout closes the connection; at most
   * max_pings_without_data of them (0: no cap) between our HEADERS/DATA. */
  uint64_t keepalive_time_ms, keepalive_timeout_ms;
  bool keepalive_permit_without_calls;
  uint32_t max_pings_without_data;
  /* The client's pings: one sooner than this after the last (2 hours on a
   * connection without calls unless permit_without_calls) is a strike;
   * past max_ping_strikes (0: no limit) GOAWAY ENHANCE_YOUR_CALM
   * "too_many_pings" and close. Our HEADERS or DATA clear the strikes. */
  uint64_t min_recv_ping_interval_ms;
  uint32_t max_ping_strikes;
  /* A connection without calls this long gets GOAWAY (NO_ERROR) and
   * closes; one this old gets GOAWAY and `max_connection_age_grace_ms` for
   * its calls to finish, then closes. */
  uint64_t max_connection_idle_ms, max_connection_age_ms, max_connection_age_grace_ms;
  /* --grpc-restricted-protocol (NULL: nothing restricted): a call to a
   * method of a restricted category without the metadata gets
   * PERMISSION_DENIED before its handler runs. Must outlive the
   * transport. */
  const hark_restrict *restricted;
} hark_grpc_options;

/* ---- lifecycle ------------------------------------------------------------- */

/* The transport: add services, then serve it with the HTTP transport's
 * loops (hark_http_handler.raw = hark_grpc_raw_handler(), raw_userp = it,
 * on the gRPC port). Caller owns *out; free it after the HTTP transport. */
hark_error *hark_grpc_new(const hark_grpc_options *opts, hark_grpc **out);
/* Registers a service's methods; `userp` is what its calls' handlers get
 * from hark_grpc_call_service(). Before serving; `svc` and its table must
 * outlive the transport. */
hark_error *hark_grpc_add_service(hark_grpc *g, const hark_grpc_service *svc, void *userp);
const struct hark_raw_handler *hark_grpc_raw_handler(void);
/* Any thread, async-signal-safe: new calls of REFUSE_DRAINING methods get
 * UNAVAILABLE "Server is shutting down"; the rest go on. */
void hark_grpc_drain(hark_grpc *g);
bool hark_grpc_draining(const hark_grpc *g);
/* No stream open: what a drain waits for. True for NULL. */
bool hark_grpc_is_idle(const hark_grpc *g);
/* After the HTTP transport is freed (its loops closed every connection
 * and waited for the calls): frees. */
void hark_grpc_free(hark_grpc *g);

/* ---- calls ----------------------------------------------------------------- */

void *hark_grpc_call_service(const hark_grpc_call *c);
size_t hark_grpc_call_max_message(const hark_grpc_call *c);
void hark_grpc_call_ref(hark_grpc_call *c);
/* Drops a reference; the last frees the call (on whatever thread). */
void hark_grpc_call_unref(hark_grpc_call *c);
/* A service's state for the call, freed with it by free_fn. */
void hark_grpc_call_set_state(hark_grpc_call *c, void *state, void (*free_fn)(void *));
void *hark_grpc_call_state(const hark_grpc_call *c);
/* Inside handle(): the message handed to it outlives the call to it; the
 * caller owns what holds it and frees it with hark_grpc_message_free,
 * which also gives back what the message held of the in-flight budget
 * (it keeps a reference to the call until then). */
typedef struct hark_grpc_message hark_grpc_message;
hark_grpc_message *hark_grpc_take_message(hark_grpc_call *c);
/* Frees a kept message (a void * for hark_request_attach). NULL is fine. */
void hark_grpc_message_free(void *m);
/* Whether the call's metadata would let it reach a method of category
 * `api` (a service that shows more to some clients asks). */
bool hark_grpc_call_allowed(const hark_grpc_call *c, hark_api api);
/* A stream the client cancelled (or whose deadline passed); meaningful
 * once the call is over. */
bool hark_grpc_call_cancelled(const hark_grpc_call *c);
/* The call's cancel token (the call's reference; hark/request.h): set the
 * moment the client cancels, the deadline passes or the connection goes,
 * so the engine stops the requests the call started (give each one with
 * hark_request_set_cancel, which takes its own reference). */
hark_cancel *hark_grpc_call_cancel_token(hark_grpc_call *c);
/* The client's address (hark_raw_peer: its IP, no port), for
 * hark_request_set_client. Any thread, as long as the call. */
const char *hark_grpc_call_peer(const hark_grpc_call *c);

/*
 * Sends a unary call's reply (initial metadata, `msg` when not NULL, the
 * status) and ends the call. Any thread. A second reply is dropped. `msg`
 * stays the caller's. A reply over the message limit becomes
 * RESOURCE_EXHAUSTED.
 */
void hark_grpc_reply(hark_grpc_call *c, const ProtobufCMessage *msg, hark_grpc_code code,
                     const char *details);
/* Replies with the status for `err`, which it frees. */
void hark_grpc_reply_error(hark_grpc_call *c, hark_error *err);
hark_grpc_code hark_grpc_status(hark_code code);

/* ---- streams (grpc_stream.c) ------------------------------------------------ */

/*
 * A stream's replies go out in the order of its slots: a service appends a
 * slot per message it handles (in arrival order), writes the slot's
 * replies as they come, and marks it done. A slot's replies are written
 * only after every earlier slot is done. At most 64 slots wait at once:
 * past that, reading pauses, so a client that sends faster than the model
 * answers is slowed by HTTP/2 flow control, not by our memory. The
 * service embeds the slot in its own struct; `free_fn` frees that struct
 * once the slot is done and written (or the call is over).
 */
typedef struct hark_grpc_slot hark_grpc_slot;
struct hark_grpc_slot {
  void (*free_fn)(hark_grpc_slot *slot);
  /* the transport's */
  hark_grpc_slot *next;
  struct hark_grpc_out *out_head, *out_tail;
  bool done;
};

#define HARK_GRPC_STREAM_MAX_PENDING 64
/* Bytes of its messages one stream may hold in flight (assembled, or in
 * the engine until their requests are freed), at least the largest
 * message: 64 requests of 64 MiB each would otherwise be 4 GiB for one
 * call. A message past it is refused (RESOURCE_EXHAUSTED, in the stream
 * where the method answers per message). */
#define HARK_GRPC_STREAM_MAX_INFLIGHT (64u << 20)
#define HARK_GRPC_REFUSED_PREFIX 1024u

/* Appends a slot (queue thread: from handle() or half_close()). */
void hark_grpc_slot_append(hark_grpc_call *c, hark_grpc_slot *slot,
                           void (*free_fn)(hark_grpc_slot *));
typedef enum hark_grpc_write {
  HARK_GRPC_WRITE_OK = 0,
  HARK_GRPC_WRITE_OVER,    /* the call is over: dropped */
  HARK_GRPC_WRITE_TOO_BIG, /* over the message limit (*size says how big) */
} hark_grpc_write;
/* Packs `msg` as the slot's next reply. Any thread. */
hark_grpc_write hark_grpc_slot_write(hark_grpc_call *c, hark_grpc_slot *slot,
                                     const ProtobufCMessage *msg, size_t *size);
/* The slot has all its replies: they go out in turn, then the slot is
 * freed. Any thread; the caller must not touch the slot afterwards. */
void hark_grpc_slot_done(hark_grpc_call *c, hark_grpc_slot *slot);
/* Ends the stream with `code` once the replies before it are out, and
 * reads no more (the first failure wins). Any thread. */
void hark_grpc_stream_fail(hark_grpc_call *c, hark_grpc_code code, const char *details);
/* True once the stream is failing, or the call is over. Any thread. */
bool hark_grpc_stream_over(hark_grpc_call *c);

#endif
