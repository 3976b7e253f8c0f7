/*
 * wsc.h — a non-blocking RFC 6455 WebSocket client for the hark CLI.
 *
 * One wsc is one connection over plain TCP, driven by the caller's epoll
 * loop: wsc_connect registers the socket with the loop's epoll fd (event
 * data.ptr = the wsc), and the loop hands each event back to wsc_handle.
 * The client does the opening handshake (Sec-WebSocket-Key, and checks
 * Sec-WebSocket-Accept), masks every frame it sends, reassembles
 * fragmented messages, answers pings, and runs the closing handshake.
 * Everything it learns reaches the caller through three callbacks, called
 * only from wsc_handle, wsc_send, wsc_close and wsc_abort, on the loop
 * thread. Nothing blocks; output that the socket cannot take yet waits in
 * the connection's buffer.
 */
#ifndef HARK_TOOLS_WSC_H
#define HARK_TOOLS_WSC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

enum {
  WSC_OP_CONT = 0x0, WSC_OP_TEXT = 0x1, WSC_OP_BINARY = 0x2,
  WSC_OP_CLOSE = 0x8, WSC_OP_PING = 0x9, WSC_OP_PONG = 0xA,
};

/* Close codes (RFC 6455 §7.4). 1005 and 1006 never travel on the wire: they
 * say "the close frame had no code" and "no close frame at all". */
enum {
  WSC_CLOSE_NORMAL = 1000, WSC_CLOSE_GOING_AWAY = 1001, WSC_CLOSE_PROTOCOL = 1002,
  WSC_CLOSE_NO_CODE = 1005, WSC_CLOSE_ABNORMAL = 1006, WSC_CLOSE_TOO_BIG = 1009,
};

typedef enum wsc_state {
  WSC_IDLE,       /* not connected (before wsc_connect, after the end) */
  WSC_CONNECTING, /* TCP connect in progress */
  WSC_HANDSHAKE,  /* HTTP upgrade sent, waiting for 101 */
  WSC_OPEN,
  WSC_CLOSING, /* close frame sent, waiting for the server's */
  WSC_CLOSED,  /* finished; on_closed has fired */
} wsc_state;

/* How a connection ended. */
typedef struct wsc_close_info {
  int code;        /* the server's close code, else the reason we ended it (1002, 1006, 1009) */
  bool by_server;  /* code and reason came in the server's close frame */
  int http_status; /* the server refused the upgrade with this status; else 0 */
  char reason[512];
} wsc_close_info;

typedef struct wsc wsc;

typedef struct wsc_callbacks {
  void (*on_open)(wsc *c);
  /* One whole message (fragments joined); data is valid only during the
   * call. `binary` is false for text. */
  void (*on_message)(wsc *c, bool binary, const char *data, size_t len);
  /* Exactly once per successful wsc_connect, when the connection is over
   * (cleanly or not); the socket is already closed. Must not free c: free
   * it after the call that fired the callback returns. */
  void (*on_closed)(wsc *c, const wsc_close_info *info);
} wsc_callbacks;

/* Read-only for the caller, except `user`. */
struct wsc {
  void *user;
  wsc_state state;
  wsc_close_info close; /* filled when the state reaches WSC_CLOSED */

  int fd, epfd;
  uint32_t armed; /* epoll events currently registered */
  const wsc_callbacks *cb;
  size_t max_message;
  char accept[32]; /* the Sec-WebSocket-Accept we expect */
  uint64_t rng;    /* mask keys */
  bool close_sent, close_received;
  int write_err; /* errno of a failed write: nothing more is written */
  char *out; /* bytes waiting for the socket, from out_off to out_len */
  size_t out_off, out_len, out_cap;
  char *in; /* bytes read, not yet parsed */
  size_t in_len, in_cap;
  char *msg; /* a fragmented message being joined */
  size_t msg_len, msg_cap;
  int msg_opcode; /* WSC_OP_TEXT/BINARY while joining, else 0 */
};

/* Starts connecting to `addr` and queues the upgrade request for
 * GET `path` with Host: `host_header`. Registers the socket with epfd.
 * max_message bounds one incoming message (0: 1 MiB). Returns 0: the
 * connection goes on in wsc_handle and ends with exactly one on_closed.
 * Returns -1 when it could not even start (c->close.reason says why); no
 * callback fires. Either way, free with wsc_free. */
int wsc_connect(wsc *c, int epfd, const struct sockaddr *addr, socklen_t addrlen,
                const char *host_header, const char *path, size_t max_message,
                const wsc_callbacks *cb, void *user);

/* Handles the epoll events `events` of c's socket. */
void wsc_handle(wsc *c, uint32_t events);

/* Queues one message (a single masked frame) and writes what the socket
 * takes. Returns 0, or -1 when the connection is not open (closing or
 * closed) or memory ran out. A failed write ends the connection later,
 * through on_closed, once what the server sent before it has been read
 * (often a close frame that says why). */
int wsc_send(wsc *c, int opcode, const void *data, size_t len);

/* Bytes queued but not yet taken by the socket. */
static inline size_t wsc_pending(const wsc *c) { return c->out_len - c->out_off; }

/* Starts the closing handshake with `code` and `reason` (at most 123 bytes
 * are sent). on_closed fires when the server answers (or the socket ends);
 * bound the wait yourself and call wsc_abort. */
void wsc_close(wsc *c, int code, const char *reason);

/* Ends the connection now without a handshake; on_closed fires (from
 * inside this call) with `code` and `reason` unless it already fired. */
void wsc_abort(wsc *c, int code, const char *reason);

/* Releases c's buffers and, if still open, its socket (without a
 * callback). c itself is the caller's. */
void wsc_free(wsc *c);

#endif
