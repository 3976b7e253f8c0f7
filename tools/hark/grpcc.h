/*
 * grpcc.h — what the hark CLI's gRPC clients share, on gRPC C core's
 * client API and the protobuf-c messages generated from proto/ (the same
 * ones harkd serves): channels, packing and unpacking messages, a blocking
 * unary call for one-off requests, and status names for messages.
 *
 * Hot paths (perf_grpc.c, transcribe_grpc.c) drive their own calls on
 * their own completion queues; these helpers are for setup and for the
 * pieces every call needs.
 */
#ifndef HARK_TOOLS_GRPCC_H
#define HARK_TOOLS_GRPCC_H

#include <stdbool.h>
#include <stddef.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#define GRPCC_MAX_MESSAGE (64 << 20) /* either way, as harkd's default limit */

/* grpc_init() / grpc_shutdown(): one shutdown for each init (counted). */
void grpcc_init(void);
void grpcc_shutdown(void);

/*
 * An insecure channel to `target` ("host:port"). With `own_connection`
 * the channel keeps its own subchannel (TCP connection) instead of
 * sharing one with other channels to the same target, as `hark perf`'s
 * one-connection-per-client-thread load needs. Never NULL (gRPC returns a
 * channel that fails its calls when the target is bad). Free with
 * grpc_channel_destroy.
 */
grpc_channel *grpcc_channel(const char *target, bool own_connection);

/* `msg` serialized into a new byte buffer (caller destroys it). */
grpc_byte_buffer *grpcc_pack(const ProtobufCMessage *msg);

/* The message in `bb` (not consumed), or NULL when it does not parse.
 * Free with protobuf_c_message_free_unpacked. */
ProtobufCMessage *grpcc_unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb);

/* A deadline `ms` milliseconds from now (ms <= 0: none). */
gpr_timespec grpcc_deadline(int ms);

/* "UNAVAILABLE", "NOT_FOUND", ... for a status code. */
const char *grpcc_status_name(grpc_status_code code);

/* The status of a finished call. */
typedef struct grpcc_status {
  grpc_status_code code;
  char details[512];
} grpcc_status;

/* Takes `details` (unrefs it) into st->details, with the code. */
void grpcc_status_set(grpcc_status *st, grpc_status_code code, grpc_slice details);

/* The six operations of a unary call, and what they receive. */
typedef struct grpcc_unary_batch {
  grpc_op ops[6];
  grpc_metadata_array md, trailing;
  grpc_byte_buffer *in; /* the reply, when one came */
  grpc_status_code code;
  grpc_slice details;
} grpcc_unary_batch;

/* Sets up b to send `out` (still the caller's) and receive the reply and
 * status: start it with grpc_call_start_batch(call, b->ops, 6, ...). */
void grpcc_unary_batch_init(grpcc_unary_batch *b, grpc_byte_buffer *out);
/* Frees what the call left in b. */
void grpcc_unary_batch_fini(grpcc_unary_batch *b);

/*
 * A blocking unary call of `method` ("/package.Service/Method") on `ch`,
 * on a completion queue of its own. Returns 0 with *reply set (free it
 * with protobuf_c_message_free_unpacked) when the status is OK and the
 * reply parses; else -1 with *st saying why (a reply that does not parse
 * reads INTERNAL).
 */
int grpcc_unary(grpc_channel *ch, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *reply_type, int timeout_ms, ProtobufCMessage **reply,
                grpcc_status *st);

#endif
