/*
 * ws_frame.c — the server side of RFC 6455's framing (ws_frame.h): a
 * byte-at-a-time header, then payload runs unmasked in place.
 */
#include "frontend/http/ws_frame.h"

#include <string.h>

#include "frontend/http/http.h"

void hark_ws_parser_init(hark_ws_parser *p) {
  memset(p, 0, sizeof *p);
  p->hdr_need = 2;
}

bool hark_ws_close_code_valid(unsigned code) {
  if (code >= 3000 && code <= 4999) return true; /* libraries' and applications' own */
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014);
}

/* XORs n bytes with the mask, starting `at` bytes into it: 8 bytes at a
 * time (the mask repeats every 4, so a word of it repeats every 8). */
static void unmask(uint8_t *b, size_t n, const uint8_t mask[4], unsigned at) {
  uint8_t m[8];
  for (unsigned j = 0; j < 8; j++) m[j] = mask[(at + j) & 3];
  uint64_t word;
  memcpy(&word, m, sizeof word);
  size_t k = 0;
  for (; k + 8 <= n; k += 8) {
    uint64_t v;
    memcpy(&v, b + k, sizeof v);
    v ^= word;
    memcpy(b + k, &v, sizeof v);
  }
  for (; k < n; k++) b[k] ^= m[k & 7];
}

bool hark_utf8_valid(const uint8_t *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    uint8_t c = s[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    size_t len;
    uint32_t cp, min;
    if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1Fu, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0Fu, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07u, min = 0x10000;
    } else {
      return false;
    }
    if (n - i < len) return false;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = cp << 6 | (s[i + k] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

static size_t fail(int *code, const char **why, const char *reason, size_t taken) {
  *code = HARK_WS_CLOSE_PROTOCOL;
  *why = reason;
  return taken;
}

/* The header is whole: checks it and readies the payload; NULL when it
 * is acceptable, else why not. */
static const char *header_done(hark_ws_parser *p) {
  const uint8_t *h = p->hdr;
  p->fin = h[0] & 0x80;
  p->opcode = h[0] & 0x0F;
  unsigned n7 = h[1] & 0x7F;
  if (n7 == 126)
    p->left = (uint64_t)h[2] << 8 | h[3];
  else if (n7 == 127) {
    p->left = 0;
    for (int i = 2; i < 10; i++) p->left = p->left << 8 | h[i];
  } else
    p->left = n7;
  memcpy(p->mask, h + p->hdr_need - 4, 4);
  p->mask_at = 0;
  bool control = p->opcode & 0x08;
  if (control) {
    if (!p->fin) return "a control frame must not be fragmented";
    p->ctl_len = 0;
  } else if (p->opcode == HARK_WS_OP_CONTINUATION) {
    if (!p->in_message) return "a continuation frame with no message to continue";
  } else {
    if (p->in_message) return "a new message began before the last one ended";
    p->in_message = true;
    p->message_binary = p->opcode == HARK_WS_OP_BINARY;
    p->message_started = false;
  }
  p->in_payload = true;
  return NULL;
}

/* What the first two bytes say, as soon as they are in: NULL, or why the
 * frame is refused before its length is read. */
static const char *first_bytes(hark_ws_parser *p) {
  uint8_t b0 = p->hdr[0], b1 = p->hdr[1];
  unsigned op = b0 & 0x0F;
  if (b0 & 0x70) return "reserved bits set (no extension was agreed)";
  if (!(op <= HARK_WS_OP_BINARY || (op >= HARK_WS_OP_CLOSE && op <= HARK_WS_OP_PONG)))
    return "unknown opcode";
  if (!(b1 & 0x80)) return "unmasked frame (a client must mask every frame)";
  unsigned n7 = b1 & 0x7F;
  if ((op & 0x08) && n7 > HARK_WS_CONTROL_MAX) return "a control frame longer than 125 bytes";
  p->hdr_need = (uint8_t)(2 + (n7 == 126 ? 2 : n7 == 127 ? 8 : 0) + 4);
  return NULL;
}

/* A control frame is whole: 0 when a close's payload is acceptable (or
 * it is no close), else the close code for the error and why. */
static int control_done(const hark_ws_parser *p, const char **why) {
  if (p->opcode != HARK_WS_OP_CLOSE || !p->ctl_len) return 0;
  if (p->ctl_len == 1) {
    *why = "a close frame with a 1-byte payload";
    return HARK_WS_CLOSE_PROTOCOL;
  }
  unsigned code = (unsigned)p->ctl[0] << 8 | p->ctl[1];
  if (!hark_ws_close_code_valid(code)) {
    *why = "a close code a peer may not send";
    return HARK_WS_CLOSE_PROTOCOL;
  }
  if (!hark_utf8_valid(p->ctl + 2, p->ctl_len - 2u)) {
    *why = "a close reason that is not UTF-8";
    return HARK_WS_CLOSE_INVALID;
  }
  return 0;
}

size_t hark_ws_parse(hark_ws_parser *p, uint8_t *buf, size_t len, const hark_ws_sink *sink,
                     void *userp, int *code, const char **why) {
  *code = 0;
  *why = NULL;
  size_t i = 0;
  while (i < len) {
    if (!p->in_payload) {
      p->hdr[p->hdr_have++] = buf[i++];
      if (p->hdr_have == 2) {
        const char *bad = first_bytes(p);
        if (bad) return fail(code, why, bad, i);
      }
      if (p->hdr_have == 3 && p->hdr_need == 14 && (p->hdr[2] & 0x80))
        return fail(code, why, "a 64-bit length with its top bit set", i);
      if (p->hdr_have < p->hdr_need) continue;
      const char *bad = header_done(p);
      p->hdr_have = 0;
      p->hdr_need = 2;
      if (bad) return fail(code, why, bad, i);
      if (!(p->opcode & 0x08) && sink->frame && !sink->frame(userp, !p->message_started, p->left))
        return i;
      if (p->left) continue;
      /* An empty frame: nothing more to read for it. */
    }
    size_t n = p->left < len - i ? (size_t)p->left : len - i;
    uint8_t *piece = buf + i;
    unmask(piece, n, p->mask, p->mask_at);
    p->mask_at = (unsigned)((p->mask_at + n) & 3);
    p->left -= n;
    i += n;
    bool go = true;
    if (p->opcode & 0x08) {
      memcpy(p->ctl + p->ctl_len, piece, n);
      p->ctl_len = (uint8_t)(p->ctl_len + n);
      if (p->left) continue;
      p->in_payload = false;
      const char *bad = NULL;
      int bad_code = control_done(p, &bad);
      if (bad_code) {
        fail(code, why, bad, i);
        *code = bad_code;
        return i;
      }
      go = sink->control(userp, p->opcode, p->ctl, p->ctl_len);
    } else {
      if (!p->left) p->in_payload = false;
      bool last = p->fin && !p->left;
      if (n || last || !p->message_started) {
        bool first = !p->message_started;
        p->message_started = true;
        if (last) p->in_message = false;
        go = sink->data(userp, piece, n, first, p->message_binary, last, p->left);
      }
    }
    if (!go) return i;
  }
  return i;
}
