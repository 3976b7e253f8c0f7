/*
 * h2grpc.h — a lean gRPC unary client over one HTTP/2 cleartext (h2c)
 * connection, on nghttp2, for `hark perf -i grpc`'s hot loop.
 *
 * gRPC C core's client costs several times the CPU per call of the HTTP/2
 * framing it rides on (see perf_grpc.c for the figures): on a small
 * machine the load generator, not harkd, set the rate. This client keeps
 * only what a unary call is on the wire: one HEADERS (the method's path,
 * content-type application/grpc, te: trailers, grpc-timeout), one DATA
 * with the length-prefixed message, and the reply's headers, DATA and
 * trailers (grpc-status, grpc-message). nghttp2 does the HTTP/2 framing,
 * HPACK, flow control, SETTINGS and PING.
 *
 * One h2grpc is one connection owned by one thread; a call blocks until
 * its reply (or the timeout). It (re)connects by itself, and once only
 * resends a call that a connection closed before answering anything, as
 * httpc does for HTTP/1.1 keep-alive.
 */
#ifndef HARK_TOOLS_H2GRPC_H
#define HARK_TOOLS_H2GRPC_H

#include <stdbool.h>
#include <stddef.h>

typedef struct h2grpc h2grpc;

/* What a call ended with. */
typedef struct h2grpc_status {
  int code;          /* gRPC status code; 0 = OK */
  bool transport;    /* no reply came: the connection failed or was refused */
  char message[512]; /* grpc-message (decoded) or what went wrong */
  size_t reply_len;  /* bytes of the reply message (without its 5-byte prefix) */
} h2grpc_status;

/* A client of HOST:PORT calling `path` ("/package.Service/Method"). No
 * connection yet. timeout_ms bounds each call (0: none). NULL when out of
 * memory. Free with h2grpc_free. */
h2grpc *h2grpc_new(const char *host, const char *port, const char *path, int timeout_ms);
void h2grpc_free(h2grpc *c);

/* Frames a serialized message as gRPC sends it: a 0 byte (not
 * compressed), its length in 4 bytes big-endian, the message. Returns a
 * malloc'ed buffer of *len bytes, or NULL. */
unsigned char *h2grpc_frame(const void *msg, size_t msg_len, size_t *len);

/* One unary call sending `framed` (from h2grpc_frame; still the
 * caller's). Returns 0 when the status is OK and a reply came; else -1,
 * with *st saying why. */
int h2grpc_call(h2grpc *c, const unsigned char *framed, size_t len, h2grpc_status *st);

/* From another thread: makes a call blocked on c fail now. Shutdown only. */
void h2grpc_abort(h2grpc *c);

#endif
