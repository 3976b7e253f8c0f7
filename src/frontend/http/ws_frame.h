/*
 * ws_frame.h — RFC 6455 frames as a server reads them: a parser with no
 * socket under it (ws.c feeds it what it reads; fuzz_ws_frame.c feeds it
 * anything). It checks what a server must refuse with 1002 (an unmasked
 * frame, a length with its top bit set, reserved bits, unknown opcodes,
 * fragmented or oversized control frames, continuations out of place, a
 * malformed close; 1007 for a close reason that is not UTF-8), unmasks
 * payloads in place and hands them on as they arrive; it keeps nothing
 * but a control frame's 125 bytes. Whether a text message is UTF-8 is
 * for whoever joins its pieces (hark_utf8_valid).
 */
#ifndef HARK_FRONTEND_HTTP_WS_FRAME_H
#define HARK_FRONTEND_HTTP_WS_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
  HARK_WS_OP_CONTINUATION = 0,
  HARK_WS_OP_TEXT = 1,
  HARK_WS_OP_BINARY = 2,
  HARK_WS_OP_CLOSE = 8,
  HARK_WS_OP_PING = 9,
  HARK_WS_OP_PONG = 10,
};

#define HARK_WS_CONTROL_MAX 125

typedef struct hark_ws_sink {
  /* A piece of a data message's payload, unmasked: `first` opens a message
   * (text or binary), `last` ends it; `more` is what the frame still
   * declares after this piece (a message that will not fit can be refused
   * at its first byte). An empty message comes as one empty piece. Returns
   * false to stop the parse after this piece. */
  bool (*data)(void *userp, const uint8_t *p, size_t n, bool first, bool binary, bool last,
               uint64_t more);
  /* A whole control frame (close, ping or pong) of at most 125 bytes; a
   * close's payload is checked (a code a peer may send, or none). Returns
   * false to stop the parse after it. */
  bool (*control)(void *userp, int opcode, const uint8_t *p, size_t n);
  /* Optional: a data frame's header is whole, before any of its payload:
   * `first` when it opens a message, `len` its declared payload. A
   * message that cannot fit is refused here, at the header, rather than
   * at its first payload byte, which a client need never send. Returns
   * false to stop the parse after the header. */
  bool (*frame)(void *userp, bool first, uint64_t len);
} hark_ws_sink;

typedef struct hark_ws_parser {
  uint8_t hdr[14]; /* the frame header so far */
  uint8_t hdr_have, hdr_need;
  bool in_payload;
  bool in_message;      /* a fragmented data message waits for its continuation */
  bool message_binary;  /* ... and its kind */
  bool message_started; /* its first piece was handed on */
  uint8_t opcode;       /* the current frame's */
  bool fin;             /* ... whether it ends its message */
  uint64_t left;        /* ... payload bytes still to come */
  uint8_t mask[4];
  unsigned mask_at;
  uint8_t ctl[HARK_WS_CONTROL_MAX];
  uint8_t ctl_len;
} hark_ws_parser;

void hark_ws_parser_init(hark_ws_parser *p);

/*
 * Parses `len` bytes (unmasking payloads in place) and returns how many it
 * took: all of them, unless a sink callback stopped it or the peer broke
 * the protocol, when *code is set (1002, or 1007) with a reason for the
 * close frame in *why. Otherwise *code is 0.
 */
size_t hark_ws_parse(hark_ws_parser *p, uint8_t *buf, size_t len, const hark_ws_sink *sink,
                     void *userp, int *code, const char **why);

/* Whether a close code may be sent by a peer (RFC 6455 7.4). */
bool hark_ws_close_code_valid(unsigned code);

/* Whether n bytes are well-formed UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF), as a text message and a close reason must
 * be (RFC 6455 8.1). */
bool hark_utf8_valid(const uint8_t *s, size_t n);

#endif
