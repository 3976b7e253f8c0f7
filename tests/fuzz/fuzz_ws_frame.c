/*
 * fuzz_ws_frame.c — libFuzzer target for the WebSocket frame parser
 * (src/frontend/http/ws_frame.c). The first byte seeds how the rest is
 * cut into reads; the rest is parsed twice, whole and cut, and both parses
 * must tell the same story: the same messages with the same bytes, the
 * same control frames, the same protocol error at the same offset. Also
 * what every parse promises: control frames of at most 125 bytes, a
 * close's code one a peer may send, a reason for every error.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/http/http.h"
#include "frontend/http/ws_frame.h"

typedef struct story {
  uint8_t *text;
  size_t len, cap;
  bool in_message;
} story;

static void tell(story *s, const void *p, size_t n) {
  if (s->len + n > s->cap) {
    size_t cap = s->cap ? s->cap : 256;
    while (cap < s->len + n) cap *= 2;
    uint8_t *t = realloc(s->text, cap);
    if (!t) abort();
    s->text = t;
    s->cap = cap;
  }
  if (n) memcpy(s->text + s->len, p, n);
  s->len += n;
}

static bool on_data(void *userp, const uint8_t *p, size_t n, bool first, bool binary, bool last,
                    uint64_t more) {
  story *s = userp;
  if (first == s->in_message) abort(); /* a message opens once, and only when none is open */
  if (last && more) abort();
  if (first) tell(s, binary ? "B" : "T", 1);
  tell(s, p, n);
  s->in_message = !last;
  if (last) tell(s, "|", 1);
  return true;
}

static bool on_control(void *userp, int opcode, const uint8_t *p, size_t n) {
  story *s = userp;
  if (n > HARK_WS_CONTROL_MAX) abort();
  if (opcode != HARK_WS_OP_CLOSE && opcode != HARK_WS_OP_PING && opcode != HARK_WS_OP_PONG) abort();
  if (opcode == HARK_WS_OP_CLOSE &&
      (n == 1 || (n >= 2 && (!hark_ws_close_code_valid((unsigned)p[0] << 8 | p[1]) ||
                             !hark_utf8_valid(p + 2, n - 2)))))
    abort();
  uint8_t head[2] = {(uint8_t)opcode, (uint8_t)n};
  tell(s, head, 2);
  tell(s, p, n);
  return true;
}

static const hark_ws_sink sink = {on_data, on_control, NULL};

/* Parses `len` bytes of `data` in reads whose sizes come from `seed`;
 * returns the offset it stopped at and the error code. */
static size_t parse(const uint8_t *data, size_t len, unsigned seed, story *s, int *code) {
  uint8_t *copy = malloc(len ? len : 1); /* unmasked in place */
  if (!copy) abort();
  if (len) memcpy(copy, data, len);
  hark_ws_parser p;
  hark_ws_parser_init(&p);
  size_t at = 0;
  *code = 0;
  while (at < len) {
    size_t n = len - at;
    if (seed) {
      seed = seed * 1103515245u + 12345u;
      size_t cut = 1 + (seed >> 16) % 23;
      if (cut < n) n = cut;
    }
    const char *why;
    size_t took = hark_ws_parse(&p, copy + at, n, &sink, s, code, &why);
    if (*code) {
      if ((*code != HARK_WS_CLOSE_PROTOCOL && *code != HARK_WS_CLOSE_INVALID) || !why || !*why)
        abort();
      at += took;
      break;
    }
    if (took != n) abort(); /* the sink never stops it */
    at += took;
  }
  free(copy);
  return at;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  unsigned seed = data[0] | 1u;
  story whole = {0}, cut = {0};
  int code_whole, code_cut;
  size_t at_whole = parse(data + 1, size - 1, 0, &whole, &code_whole);
  size_t at_cut = parse(data + 1, size - 1, seed, &cut, &code_cut);
  if (code_whole != code_cut || at_whole != at_cut) abort();
  /* Data pieces split differently; the bytes and the marks must agree. */
  if (whole.len != cut.len || (whole.len && memcmp(whole.text, cut.text, whole.len) != 0)) abort();
  free(whole.text);
  free(cut.text);
  return 0;
}
