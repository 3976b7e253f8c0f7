/*
 * fuzz_vosk_text.c — libFuzzer target for the Vosk text-message parser
 * (src/frontend/speech/vosk_text.c): Vosk's {"config": ...}, {"eof": 1} and
 * {"reset": 1}. Checks what every parse promises: a kind, and for an
 * invalid message a close code and a reason that fits a close frame and
 * does not end in a cut UTF-8 sequence.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/speech/vosk_text.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* A copy of exactly `size` bytes, so reading past the end is caught. */
  char *copy = malloc(size ? size : 1);
  if (!copy) return 0;
  if (size) memcpy(copy, data, size);
  hark_vosk_text t;
  hark_vosk_text_parse(copy, size, &t);
  if (t.kind == HARK_VOSK_TEXT_INVALID) {
    size_t n = strlen(t.reason);
    if (!n || n > HARK_WS_REASON_MAX || t.close_code < 1000 || t.close_code > 4999) abort();
  } else if (t.kind == HARK_VOSK_TEXT_CONFIG) {
    if (t.config.has_sample_rate && (t.config.sample_rate < HARK_VOSK_MIN_SAMPLE_RATE ||
                                     t.config.sample_rate > HARK_VOSK_MAX_SAMPLE_RATE))
      abort();
  } else if (t.kind != HARK_VOSK_TEXT_EOF && t.kind != HARK_VOSK_TEXT_RESET) {
    abort();
  }
  hark_vosk_text_clear(&t);
  /* The reason fitter on the input itself, as a string. */
  char *s = malloc(size + 1);
  if (s) {
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    size_t max = size ? data[0] % 130 : 0;
    hark_ws_reason_fit(s, max);
    if (strlen(s) > max) abort();
    free(s);
  }
  free(copy);
  return 0;
}
