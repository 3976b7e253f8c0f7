/*
 * grpcc.h — what the hark CLI's gRPC clients share, on gRPC C core's
 * client API and the protobuf-c messages generated from proto/ (the same
 * ones harkd serves): channels, packing and unpacking messages, a blocking
 * unary call for one-off requests, and status names for messages.
 *
 * transcribe_grpc.c drives its streams on its own completion queue;
 * these helpers are for setup and for the pieces every call needs.
 * (`hark perf`'s ModelInfer calls go over h2grpc.h instead.)
 */
#ifndef HARK_TOOLS_GRPCC_H
#define HARK_TOOLS_GRPCC_H

#include <stddef.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#define GRPCC_MAX_MESSAGE (64 << 20) /* either way, as harkd's default limit */

/* grpc_init() / grpc_shutdown(): one shutdown for each init (counted). */
void grpcc_init(void);
void grpcc_shutdown(void);

/* An insecure channel to `target` ("host:port"). Never NULL (gRPC returns
 * a channel that fails its calls when the target is bad). Free with
 * grpc_channel_destroy. */
grpc_channel *grpcc_channel(const char *target);

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

/*
 * A blocking unary call of `method` ("/package.Service/Method") on `ch`,
 * on a completion queue of its own. Returns 0 with *reply set (free it
 * with protobuf_c_message_free_unpacked) when the status is OK and the
 * reply parses; else -1 with *st saying why (a reply that does not parse
 * reads INTERNAL).
 */
int grpcc_unary(grpc_channel *ch, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *reply_type, int timeout_ms,
                ProtobufCMessage **reply, grpcc_status *st);

#endif
