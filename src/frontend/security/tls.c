/*
 * tls.c — TLS with OpenSSL (tls.h): a server context checked and made
 * from PEM files at start, and per connection an SSL session over two
 * memory BIOs, so the event loop owns the socket and never blocks in
 * OpenSSL: what the socket read is fed in, what OpenSSL has to send is
 * taken out and written by the raw transport.
 */
#include "frontend/security/tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"
#include "util/log.h"

struct hark_tls {
  SSL_CTX *ctx;
  unsigned char alpn[32]; /* the one protocol, in ALPN's wire form */
  size_t alpn_len;
};

struct hark_tls_conn {
  SSL *ssl;
  BIO *in, *out; /* in: from the socket; out: to it (both owned by ssl) */
};

/* OpenSSL's last error, as text (and the queue cleared). */
static const char *ssl_reason(char *buf, size_t cap) {
  unsigned long e = ERR_peek_last_error();
  if (!e) {
    snprintf(buf, cap, "not a PEM file of the expected kind");
  } else {
    const char *r = ERR_reason_error_string(e);
    snprintf(buf, cap, "%s", r ? r : "unknown error");
  }
  ERR_clear_error();
  return buf;
}

/* Opens `path` for reading, or an error that names flag and file. */
static hark_error *open_file(const char *flag, const char *path, FILE **out) {
  if (!path || !*path) return hark_error_new(HARK_ERR_INVALID_ARG, "%s: no file given", flag);
  FILE *f = fopen(path, "r");
  if (!f)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: cannot read %s: %s", flag, path,
                          strerror(errno));
  *out = f;
  return NULL;
}

/* The certificate file holds a certificate; the key file a private key
 * that belongs to it. */
static hark_error *check_pair(const hark_tls_options *o) {
  char why[200];
  FILE *f = NULL; /* set when open_file succeeds; gcc -O3 cannot see that */
  hark_error *err = open_file(o->cert_flag, o->cert, &f);
  if (err) return err;
  X509 *x = PEM_read_X509(f, NULL, NULL, NULL);
  fclose(f);
  if (!x)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: %s holds no PEM certificate (%s)",
                          o->cert_flag, o->cert, ssl_reason(why, sizeof why));
  if ((err = open_file(o->key_flag, o->key, &f))) {
    X509_free(x);
    return err;
  }
  EVP_PKEY *k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
  fclose(f);
  if (!k) {
    X509_free(x);
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: %s holds no unencrypted PEM private key (%s)",
                          o->key_flag, o->key, ssl_reason(why, sizeof why));
  }
  bool match = X509_check_private_key(x, k) == 1;
  ERR_clear_error();
  X509_free(x);
  EVP_PKEY_free(k);
  if (!match)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: the key in %s does not belong to %s",
                          o->key_flag, o->key, o->cert);
  return NULL;
}

static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg) {
  (void)ssl;
  hark_tls *t = arg;
  unsigned char *sel;
  if (SSL_select_next_proto(&sel, outlen, t->alpn, (unsigned)t->alpn_len, in, inlen) !=
      OPENSSL_NPN_NEGOTIATED)
    return SSL_TLSEXT_ERR_ALERT_FATAL; /* the client speaks something else */
  *out = sel;
  return SSL_TLSEXT_ERR_OK;
}

static hark_error *ctx_setup(hark_tls *t, const hark_tls_options *o) {
  char why[200];
  SSL_CTX *ctx = t->ctx;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_RELEASE_BUFFERS);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE);
  if (SSL_CTX_use_certificate_chain_file(ctx, o->cert) != 1)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: cannot use %s: %s", o->cert_flag, o->cert,
                          ssl_reason(why, sizeof why));
  if (SSL_CTX_use_PrivateKey_file(ctx, o->key, SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(ctx) != 1)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: cannot use %s: %s", o->key_flag, o->key,
                          ssl_reason(why, sizeof why));
  if (o->root) {
    FILE *f = NULL;
    hark_error *err = open_file(o->root_flag, o->root, &f);
    if (err) return err;
    fclose(f);
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(o->root);
    if (!names || SSL_CTX_load_verify_locations(ctx, o->root, NULL) != 1) {
      if (names) sk_X509_NAME_pop_free(names, X509_NAME_free);
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: %s holds no PEM CA certificate (%s)",
                            o->root_flag, o->root, ssl_reason(why, sizeof why));
    }
    SSL_CTX_set_client_CA_list(ctx, names); /* takes names */
  }
  if (o->mutual) {
    if (!o->root)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "client certificates are required but no root certificate (%s) "
                            "says whose to accept",
                            o->root_flag);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
  }
  if (o->alpn) {
    size_t n = strlen(o->alpn);
    if (n == 0 || n + 1 > sizeof t->alpn)
      return hark_error_new(HARK_ERR_INVALID_ARG, "bad ALPN protocol '%s'", o->alpn);
    t->alpn[0] = (unsigned char)n;
    memcpy(t->alpn + 1, o->alpn, n);
    t->alpn_len = n + 1;
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, t);
  }
  return NULL;
}

hark_error *hark_tls_new(const hark_tls_options *opts, hark_tls **out) {
  hark_error *err = check_pair(opts);
  if (err) return err;
  hark_tls *t = hark_xcalloc(1, sizeof *t);
  if (!(t->ctx = SSL_CTX_new(TLS_server_method()))) {
    free(t);
    return hark_error_new(HARK_ERR_INTERNAL, "cannot make a TLS context");
  }
  if ((err = ctx_setup(t, opts))) {
    hark_tls_free(t);
    return err;
  }
  *out = t;
  return NULL;
}

void hark_tls_free(hark_tls *t) {
  if (!t) return;
  SSL_CTX_free(t->ctx);
  free(t);
}

/* ---- one connection ---------------------------------------------------------- */

hark_tls_conn *hark_tls_conn_new(hark_tls *t) {
  hark_tls_conn *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->ssl = SSL_new(t->ctx);
  s->in = BIO_new(BIO_s_mem());
  s->out = BIO_new(BIO_s_mem());
  if (!s->ssl || !s->in || !s->out) {
    if (s->ssl) SSL_free(s->ssl);
    BIO_free(s->in);
    BIO_free(s->out);
    free(s);
    return NULL;
  }
  BIO_set_mem_eof_return(s->in, -1);  /* empty: "try again", not end of file */
  SSL_set_bio(s->ssl, s->in, s->out); /* ssl owns both now */
  SSL_set_accept_state(s->ssl);
  return s;
}

void hark_tls_conn_free(hark_tls_conn *s) {
  if (!s) return;
  SSL_free(s->ssl);
  free(s);
}

void hark_tls_conn_feed(hark_tls_conn *s, const uint8_t *data, size_t len) {
  while (len > 0) {
    int n = BIO_write(s->in, data, len > 1u << 30 ? 1 << 30 : (int)len);
    if (n <= 0) return; /* out of memory: the handshake or read fails next */
    data += n;
    len -= (size_t)n;
  }
}

/* A failed session: why, verbosely (a client's mistake, not the server's). */
static void log_failure(hark_tls_conn *s, int rc) {
  char why[200];
  int e = SSL_get_error(s->ssl, rc);
  if (e == SSL_ERROR_SSL)
    HARK_VERBOSE("tls: closing a connection: %s", ssl_reason(why, sizeof why));
  ERR_clear_error();
}

int hark_tls_conn_handshake(hark_tls_conn *s) {
  int rc = SSL_do_handshake(s->ssl);
  if (rc == 1) return 1;
  int e = SSL_get_error(s->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  log_failure(s, rc);
  return -1;
}

int hark_tls_conn_read(hark_tls_conn *s, uint8_t *buf, size_t cap) {
  int rc = SSL_read(s->ssl, buf, cap > 1u << 30 ? 1 << 30 : (int)cap);
  if (rc > 0) return rc;
  int e = SSL_get_error(s->ssl, rc);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  if (e != SSL_ERROR_ZERO_RETURN) log_failure(s, rc);
  return -1;
}

int hark_tls_conn_write(hark_tls_conn *s, const uint8_t *data, size_t len) {
  while (len > 0) {
    int rc = SSL_write(s->ssl, data, len > 1u << 30 ? 1 << 30 : (int)len);
    if (rc <= 0) {
      log_failure(s, rc);
      return -1;
    }
    data += rc;
    len -= (size_t)rc;
  }
  return 0;
}

size_t hark_tls_conn_pending(hark_tls_conn *s) { return BIO_ctrl_pending(s->out); }

size_t hark_tls_conn_take(hark_tls_conn *s, uint8_t *buf, size_t cap) {
  int n = BIO_read(s->out, buf, cap > 1u << 30 ? 1 << 30 : (int)cap);
  return n > 0 ? (size_t)n : 0;
}
