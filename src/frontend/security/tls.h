/*
 * tls.h — TLS for hark's ports, with OpenSSL. The HTTP port's TLS is
 * libwebsockets' own (it is built with OpenSSL); the gRPC port's raw
 * connections carry hark's own HTTP/2, so their TLS is here: a server
 * context made once from PEM files (optionally requiring client
 * certificates signed by a root), and per connection a session over
 * memory buffers that the raw transport feeds with what the socket read
 * and drains into the socket. ALPN selects h2, as gRPC requires. Loop
 * thread for everything per connection; the context is read-only once
 * made.
 */
#ifndef HARK_FRONTEND_TLS_H
#define HARK_FRONTEND_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/types.h"

typedef struct hark_tls hark_tls;
typedef struct hark_tls_conn hark_tls_conn;

typedef struct hark_tls_options {
  const char *cert, *key; /* PEM files: the certificate (chain) and its key */
  const char *root;       /* PEM file of the CAs client certificates must chain to */
  bool mutual;            /* require a client certificate that verifies against root */
  const char *alpn;       /* the one protocol ALPN may select ("h2"); NULL: any */
  /* The flags' names, for errors: "--grpc-server-cert" ... */
  const char *cert_flag, *key_flag, *root_flag;
} hark_tls_options;

/* Reads and checks the files (readable, PEM, the key matches the
 * certificate, the root holds a CA): an error that names the flag and the
 * file otherwise. Caller owns *out. */
hark_error *hark_tls_new(const hark_tls_options *opts, hark_tls **out);
void hark_tls_free(hark_tls *t);

/* A server session on one connection. NULL when out of memory. */
hark_tls_conn *hark_tls_conn_new(hark_tls *t);
void hark_tls_conn_free(hark_tls_conn *s);
/* Bytes that arrived from the socket. */
void hark_tls_conn_feed(hark_tls_conn *s, const uint8_t *data, size_t len);
/* Takes the handshake as far as the bytes fed allow: 1 done, 0 more to
 * come, -1 failed (the reason is logged verbosely; what is pending, an
 * alert, should still go out before the connection closes). */
int hark_tls_conn_handshake(hark_tls_conn *s);
/* Application bytes read: > 0, 0 when nothing whole is in, -1 when the
 * peer closed or the session failed. */
int hark_tls_conn_read(hark_tls_conn *s, uint8_t *buf, size_t cap);
/* Encrypts application bytes (all of them; the output waits in the
 * session): 0, or -1 when the session failed. */
int hark_tls_conn_write(hark_tls_conn *s, const uint8_t *data, size_t len);
/* Bytes waiting to go to the socket, and taking them. */
size_t hark_tls_conn_pending(hark_tls_conn *s);
size_t hark_tls_conn_take(hark_tls_conn *s, uint8_t *buf, size_t cap);

#endif
