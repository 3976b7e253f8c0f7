/*
 * ws_text.h — the text messages of the Vosk WebSocket protocol, parsed by a
 * pure function (no I/O, no server) so a fuzz target can drive it:
 *
 *   {"config": {"sample_rate": R, "words": B, "max_alternatives": N,
 *               "phrase_list": ["...", ...]}}   settings, before audio
 *   {"eof" : 1}                                  end of the stream
 *   {"reset" : 1}                                end of the utterance
 *
 * Anything else is invalid, with the WebSocket close code and a reason
 * short enough for a close frame. Unknown config keys are ignored, as Vosk
 * ignores them; a known key with a wrong type or range is invalid.
 */
#ifndef HARK_WS_TEXT_H
#define HARK_WS_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#define HARK_WS_MIN_SAMPLE_RATE 8000
#define HARK_WS_MAX_SAMPLE_RATE 48000
#define HARK_WS_MAX_ALTERNATIVES 100
/* A close frame carries at most 123 bytes of reason. */
#define HARK_WS_REASON_MAX 123

/* WebSocket close codes (RFC 6455 section 7.4.1). */
enum {
  HARK_WS_CLOSE_NORMAL = 1000,
  HARK_WS_CLOSE_GOING_AWAY = 1001,
  HARK_WS_CLOSE_UNSUPPORTED = 1003,
  HARK_WS_CLOSE_INVALID = 1007,
  HARK_WS_CLOSE_POLICY = 1008,
  HARK_WS_CLOSE_TOO_BIG = 1009,
  HARK_WS_CLOSE_INTERNAL = 1011,
  HARK_WS_CLOSE_TRY_LATER = 1013,
};

typedef enum hark_ws_text_kind {
  HARK_WS_TEXT_INVALID = 0,
  HARK_WS_TEXT_CONFIG,
  HARK_WS_TEXT_EOF,
  HARK_WS_TEXT_RESET,
} hark_ws_text_kind;

/* The settings a config message gave; has_* says which. */
typedef struct hark_ws_config {
  bool has_sample_rate, has_words, has_max_alternatives;
  int sample_rate;
  bool words;
  int max_alternatives;
  char *phrase_list; /* the array as compact JSON, owned; NULL when absent */
} hark_ws_config;

typedef struct hark_ws_text {
  hark_ws_text_kind kind;
  hark_ws_config config;                /* CONFIG */
  int close_code;                       /* INVALID */
  char reason[HARK_WS_REASON_MAX + 1];  /* INVALID, NUL-terminated */
} hark_ws_text;

/* Parses one complete text message of `len` bytes (not NUL-terminated).
 * Always fills *out; release it with hark_ws_text_clear(). */
void hark_ws_text_parse(const char *data, size_t len, hark_ws_text *out);
void hark_ws_text_clear(hark_ws_text *t);

/* Cuts `s` (NUL-terminated, in place) to at most `max` bytes without
 * splitting a UTF-8 sequence: what fits in a close frame's reason. */
void hark_ws_reason_fit(char *s, size_t max);

#endif
