/*
 * vosk_text.h — the text messages of the Vosk WebSocket protocol, parsed by a
 * pure function (no I/O, no server) so a fuzz target can drive it:
 *
 *   {"config": {"sample_rate": R, "words": B, "max_alternatives": N,
 *               "phrase_list": ["...", ...],
 *               "profile": "fast"}}             settings, before audio
 *   {"eof" : 1}                                  end of the stream
 *   {"reset" : 1}                                end of the utterance
 *
 * Anything else is invalid, with the WebSocket close code and a reason
 * short enough for a close frame. Unknown config keys are ignored, as Vosk
 * ignores them. Known keys are read as Vosk's Python reads them:
 * sample_rate with float() ("16000", 44100.5: to the nearest Hz),
 * max_alternatives with int() (2, "2", 2.7 -> 2; not "2.5"), words with
 * bool() (any JSON value: false, null, 0, "", [] and {} are false); a
 * value those refuse, or one out of range, is invalid.
 */
#ifndef HARK_VOSK_TEXT_H
#define HARK_VOSK_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "frontend/http/http.h" /* close codes */

#define HARK_VOSK_MIN_SAMPLE_RATE 8000
#define HARK_VOSK_MAX_SAMPLE_RATE 48000
#define HARK_VOSK_MAX_ALTERNATIVES 100
typedef enum hark_vosk_text_kind {
  HARK_VOSK_TEXT_INVALID = 0,
  HARK_VOSK_TEXT_CONFIG,
  HARK_VOSK_TEXT_EOF,
  HARK_VOSK_TEXT_RESET,
} hark_vosk_text_kind;

/* The settings a config message gave; has_* says which. */
typedef struct hark_vosk_config {
  bool has_sample_rate, has_words, has_max_alternatives;
  int sample_rate;
  bool words;
  int max_alternatives;
  char *phrase_list; /* the array as compact JSON, owned; NULL when absent */
  char *profile;     /* the latency profile asked for, owned; NULL when absent */
} hark_vosk_config;

typedef struct hark_vosk_text {
  hark_vosk_text_kind kind;
  hark_vosk_config config;             /* CONFIG */
  int close_code;                      /* INVALID */
  char reason[HARK_WS_REASON_MAX + 1]; /* INVALID, NUL-terminated */
} hark_vosk_text;

/* Parses one complete text message of `len` bytes (not NUL-terminated).
 * Always fills *out; release it with hark_vosk_text_clear(). */
void hark_vosk_text_parse(const char *data, size_t len, hark_vosk_text *out);
void hark_vosk_text_clear(hark_vosk_text *t);

#endif
