/*
 * grpcc.c — gRPC client helpers for the hark CLI (see grpcc.h): channels,
 * protobuf-c messages in and out of byte buffers, and one blocking unary
 * call, built as one batch of all six client operations on a private
 * completion queue.
 */
#include "grpcc.h"

#include <stdio.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>

/* gRPC counts its own init/shutdown pairs, from any thread. */
void grpcc_init(void) { grpc_init(); }

void grpcc_shutdown(void) { grpc_shutdown(); }

grpc_channel *grpcc_channel(const char *target) {
  grpc_arg args[2] = {
      {.type = GRPC_ARG_INTEGER,
       .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
       .value.integer = GRPCC_MAX_MESSAGE},
      {.type = GRPC_ARG_INTEGER,
       .key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH,
       .value.integer = GRPCC_MAX_MESSAGE},
  };
  grpc_channel_args ca = {.num_args = 2, .args = args};
  grpc_channel_credentials *creds = grpc_insecure_credentials_create();
  grpc_channel *ch = grpc_channel_create(target, creds, &ca);
  grpc_channel_credentials_release(creds);
  return ch;
}

grpc_byte_buffer *grpcc_pack(const ProtobufCMessage *msg) {
  size_t n = protobuf_c_message_get_packed_size(msg);
  grpc_slice s = grpc_slice_malloc(n);
  protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
  grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
  grpc_slice_unref(s);
  return bb;
}

ProtobufCMessage *grpcc_unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb) {
  grpc_byte_buffer_reader r;
  if (!bb || !grpc_byte_buffer_reader_init(&r, bb)) return NULL;
  grpc_slice s = grpc_byte_buffer_reader_readall(&r);
  grpc_byte_buffer_reader_destroy(&r);
  ProtobufCMessage *m =
      protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
  grpc_slice_unref(s);
  return m;
}

gpr_timespec grpcc_deadline(int ms) {
  if (ms <= 0) return gpr_inf_future(GPR_CLOCK_MONOTONIC);
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(ms, GPR_TIMESPAN));
}

const char *grpcc_status_name(grpc_status_code code) {
  static const char *const names[] = {
      "OK",
      "CANCELLED",
      "UNKNOWN",
      "INVALID_ARGUMENT",
      "DEADLINE_EXCEEDED",
      "NOT_FOUND",
      "ALREADY_EXISTS",
      "PERMISSION_DENIED",
      "RESOURCE_EXHAUSTED",
      "FAILED_PRECONDITION",
      "ABORTED",
      "OUT_OF_RANGE",
      "UNIMPLEMENTED",
      "INTERNAL",
      "UNAVAILABLE",
      "DATA_LOSS",
      "UNAUTHENTICATED",
  };
  return (unsigned)code < sizeof names / sizeof names[0] ? names[code] : "UNKNOWN";
}

/* Takes `details` (unrefs it) into st->details, with the code. */
static void status_set(grpcc_status *st, grpc_status_code code, grpc_slice details) {
  size_t n = GRPC_SLICE_LENGTH(details);
  if (n >= sizeof st->details) n = sizeof st->details - 1;
  memcpy(st->details, GRPC_SLICE_START_PTR(details), n);
  st->details[n] = '\0';
  st->code = code;
  grpc_slice_unref(details);
}

/* The six operations of a unary call, and what they receive. */
typedef struct unary_batch {
  grpc_op ops[6];
  grpc_metadata_array md, trailing;
  grpc_byte_buffer *in; /* the reply, when one came */
  grpc_status_code code;
  grpc_slice details;
} unary_batch;

/* Sets up b to send `out` (still the caller's) and receive the reply and
 * status: start it with grpc_call_start_batch(call, b->ops, 6, ...). */
static void unary_batch_init(unary_batch *b, grpc_byte_buffer *out) {
  memset(b, 0, sizeof *b);
  grpc_metadata_array_init(&b->md);
  grpc_metadata_array_init(&b->trailing);
  b->code = GRPC_STATUS_UNKNOWN;
  b->details = grpc_empty_slice();
  b->ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  b->ops[1].op = GRPC_OP_SEND_MESSAGE;
  b->ops[1].data.send_message.send_message = out;
  b->ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
  b->ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
  b->ops[3].data.recv_initial_metadata.recv_initial_metadata = &b->md;
  b->ops[4].op = GRPC_OP_RECV_MESSAGE;
  b->ops[4].data.recv_message.recv_message = &b->in;
  b->ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
  b->ops[5].data.recv_status_on_client.trailing_metadata = &b->trailing;
  b->ops[5].data.recv_status_on_client.status = &b->code;
  b->ops[5].data.recv_status_on_client.status_details = &b->details;
}

/* Frees what the call left in b. */
static void unary_batch_fini(unary_batch *b) {
  grpc_slice_unref(b->details);
  if (b->in) grpc_byte_buffer_destroy(b->in);
  grpc_metadata_array_destroy(&b->md);
  grpc_metadata_array_destroy(&b->trailing);
}

int grpcc_unary(grpc_channel *ch, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *reply_type, int timeout_ms,
                ProtobufCMessage **reply, grpcc_status *st) {
  *reply = NULL;
  grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
  grpc_slice path = grpc_slice_from_static_string(method);
  grpc_call *call = grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, path, NULL,
                                             grpcc_deadline(timeout_ms), NULL);
  grpc_byte_buffer *out = grpcc_pack(req);
  unary_batch b;
  unary_batch_init(&b, out);
  int tag;
  grpc_call_error e = grpc_call_start_batch(call, b.ops, 6, &tag, NULL);
  if (e == GRPC_CALL_OK) {
    grpc_event ev;
    do ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    while (ev.type != GRPC_OP_COMPLETE);
    status_set(st, b.code, grpc_slice_ref(b.details));
  } else {
    st->code = GRPC_STATUS_INTERNAL;
    snprintf(st->details, sizeof st->details, "cannot start the call (error %d)", (int)e);
  }
  if (st->code == GRPC_STATUS_OK) {
    *reply = grpcc_unpack(reply_type, b.in);
    if (!*reply) {
      st->code = GRPC_STATUS_INTERNAL;
      snprintf(st->details, sizeof st->details, "the reply to %s does not parse", method);
    }
  }
  unary_batch_fini(&b);
  grpc_byte_buffer_destroy(out);
  grpc_call_unref(call);
  grpc_completion_queue_shutdown(cq);
  while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(cq);
  return *reply ? 0 : -1;
}
