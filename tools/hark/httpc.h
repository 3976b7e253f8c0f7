/*
 * httpc.h — a small blocking HTTP/1.1 keep-alive client for the hark CLI.
 *
 * One httpc is one connection owned by one thread. The caller formats the
 * whole request (head and body) once and sends the same bytes again and
 * again; the client keeps one receive buffer that grows to the largest
 * response seen and is reused, so a steady load allocates nothing. It
 * reconnects by itself when the server closed an idle keep-alive
 * connection, and understands Content-Length, chunked and read-to-close
 * bodies.
 */
#ifndef HARK_TOOLS_HTTPC_H
#define HARK_TOOLS_HTTPC_H

#include <netdb.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>

typedef struct httpc {
  char host[256]; /* as given, for the Host header and messages */
  char port[16];
  struct addrinfo *ai;         /* resolved once by httpc_init, owned */
  const struct addrinfo *good; /* the address that last connected */
  int timeout_ms;              /* per send/receive call; 0 = wait forever */
  atomic_int fd;               /* -1 when not connected; atomic for httpc_abort */
  unsigned reused;             /* responses read on the current connection */
  char *buf;                   /* receive buffer, owned */
  size_t cap, len;             /* its size and the bytes in it */
  char err[256];               /* the last error, for messages */
} httpc;

/* The last response; pointers into the client's buffer, valid until the
 * next request on the same client. */
typedef struct httpc_response {
  int status;
  const char *head; /* status line and headers, without the blank line */
  size_t head_len;
  const char *body; /* chunked bodies are already decoded */
  size_t body_len;
} httpc_response;

/* Resolves "host" / "port" (no connection yet). Returns 0, or -1 with
 * c->err set. Free with httpc_free. */
int httpc_init(httpc *c, const char *host, const char *port, int timeout_ms);
void httpc_free(httpc *c);

/* Sends req (a full HTTP/1.1 request) and reads the response into *resp.
 * Connects first if needed; on a reused connection the server closed, it
 * reconnects once and resends. Returns 0, or -1 with c->err set (transport
 * failure; the connection is then closed). */
int httpc_request(httpc *c, const char *req, size_t req_len, httpc_response *resp);

/* Convenience for one-off requests: formats "METHOD path" with an optional
 * JSON body, then as httpc_request. Allocates; not for the hot path. */
int httpc_simple(httpc *c, const char *method, const char *path, const char *json_body,
                 httpc_response *resp);

/* The value of header `name` (case-insensitive) in resp, or NULL; *len
 * gets its length. */
const char *httpc_header(const httpc_response *resp, const char *name, size_t *len);

void httpc_close(httpc *c);

/* From another thread: wakes a thread blocked in httpc_request on c, which
 * then fails. Only for shutting down. */
void httpc_abort(httpc *c);

#endif
