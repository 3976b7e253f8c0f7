/*
 * asr_result.h — reading a speech model's response, for the front ends
 * that turn it into their protocol's messages (Vosk JSON over WebSocket,
 * Riva protobuf over gRPC).
 *
 * A speech model answers each request with these outputs (models/asr's
 * config.pbtxt documents them): TRANSCRIPT (BYTES [1]), IS_FINAL (BOOL
 * [1]), WORDS (BYTES [n]), WORD_START / WORD_END (FP32 [n], seconds from
 * the start of the stream's audio), WORD_CONF (FP32 [n]), CONFIDENCE (FP32
 * [1]), AUDIO_PROCESSED (FP32 [1], seconds), STABILITY (FP32 [1], a
 * partial's), and, when asked for, the n-best of a final: ALTERNATIVES
 * (BYTES [k], best first, the first the transcript itself) with
 * ALTERNATIVE_CONFIDENCE (FP32 [k]), ALTERNATIVE_WORD_COUNT (INT32 [k]) and
 * every alternative's words in turn in ALTERNATIVE_WORDS (BYTES [n]),
 * ALTERNATIVE_WORD_START / _END / _CONF (FP32 [n]); docs/backends.md has
 * the contract. Every output is optional; every read is bounds-checked,
 * so a model that sends less, or the wrong types, yields defaults, not a
 * crash.
 */
#ifndef HARK_SPEECH_ASR_RESULT_H
#define HARK_SPEECH_ASR_RESULT_H

#include <stdbool.h>
#include <stdint.h>

#include "hark/server.h"

typedef struct hark_asr_result {
  const char *text; /* TRANSCRIPT, not NUL-terminated; "" when absent */
  uint32_t text_len;
  bool is_final;
  float confidence;      /* 1 when absent */
  float audio_processed; /* 0 when absent */
  float stability;       /* a partial's STABILITY (0..1); 0 when absent */
  uint32_t n_words;
  uint32_t n_alternatives; /* 0 when the model sent no ALTERNATIVES */
  const hark_tensor *words, *word_start, *word_end, *word_conf, *alts, *alt_conf;
  /* per-alternative words; NULL when the model sent none */
  const hark_tensor *alt_counts, *alt_words, *alt_start, *alt_end, *alt_wconf;
} hark_asr_result;

/* Reads `resp` (NULL: an empty partial). The result points into resp. */
void hark_asr_result_read(const hark_response *resp, hark_asr_result *r);

/* Word i: its text (not NUL-terminated) and times; false when out of range. */
bool hark_asr_result_word(const hark_asr_result *r, uint32_t i, const char **word, uint32_t *len,
                          float *start, float *end, float *conf);

/* Alternative i (best first): its text and confidence. Without
 * ALTERNATIVES, alternative 0 is the transcript. */
bool hark_asr_result_alternative(const hark_asr_result *r, uint32_t i, const char **text,
                                 uint32_t *len, float *conf);

/* How many words alternative i has: its own (ALTERNATIVE_WORD_COUNT), or
 * for alternative 0 of a model without them, the transcript's. */
uint32_t hark_asr_result_alternative_words(const hark_asr_result *r, uint32_t i);

/* Word j of alternative i, as hark_asr_result_word; false when out of range. */
bool hark_asr_result_alternative_word(const hark_asr_result *r, uint32_t i, uint32_t j,
                                      const char **word, uint32_t *len, float *start, float *end,
                                      float *conf);

#endif
