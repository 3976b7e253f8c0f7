/*
 * asr_result.c — bounds-checked reading of a speech model's outputs.
 */
#include "frontend/speech/asr_result.h"

#include <math.h>
#include <string.h>

/* BYTES element `i` of `t`. */
static bool bytes_at(const hark_tensor *t, uint32_t i, const char **p, uint32_t *len) {
  return t && t->datatype == HARK_TYPE_BYTES && hark_bytes_at(t->data, t->byte_size, i, p, len);
}

/* Elements of `t` by its shape, no more than its bytes hold (elem > 0). */
static uint32_t count_of(const hark_tensor *t, size_t elem) {
  if (!t) return 0;
  int64_t n = hark_shape_count(t->shape, t->ndims);
  if (n < 0) return 0;
  if (elem && (size_t)n * elem > t->byte_size) n = (int64_t)(t->byte_size / elem);
  return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static float fp32_at(const hark_tensor *t, uint32_t i, float dflt) {
  if (!t || t->datatype != HARK_TYPE_FP32 || i >= count_of(t, 4)) return dflt;
  float v;
  memcpy(&v, (const char *)t->data + 4 * (size_t)i, 4);
  return isfinite(v) ? v : dflt;
}

void hark_asr_result_read(const hark_response *resp, hark_asr_result *r) {
  memset(r, 0, sizeof *r);
  r->text = "";
  r->confidence = 1.0f;
  if (!resp) return;
  bytes_at(hark_response_output_by_name(resp, "TRANSCRIPT"), 0, &r->text, &r->text_len);
  const hark_tensor *fin = hark_response_output_by_name(resp, "IS_FINAL");
  r->is_final = fin && fin->datatype == HARK_TYPE_BOOL && fin->byte_size >= 1 &&
                ((const unsigned char *)fin->data)[0];
  r->confidence = fp32_at(hark_response_output_by_name(resp, "CONFIDENCE"), 0, 1.0f);
  r->audio_processed = fp32_at(hark_response_output_by_name(resp, "AUDIO_PROCESSED"), 0, 0.0f);
  r->stability = fp32_at(hark_response_output_by_name(resp, "STABILITY"), 0, 0.0f);
  r->words = hark_response_output_by_name(resp, "WORDS");
  if (r->words && r->words->datatype == HARK_TYPE_BYTES) r->n_words = count_of(r->words, 0);
  r->word_start = hark_response_output_by_name(resp, "WORD_START");
  r->word_end = hark_response_output_by_name(resp, "WORD_END");
  r->word_conf = hark_response_output_by_name(resp, "WORD_CONF");
  r->alts = hark_response_output_by_name(resp, "ALTERNATIVES");
  if (r->alts && r->alts->datatype == HARK_TYPE_BYTES) r->n_alternatives = count_of(r->alts, 0);
  r->alt_conf = hark_response_output_by_name(resp, "ALTERNATIVE_CONFIDENCE");
  r->alt_counts = hark_response_output_by_name(resp, "ALTERNATIVE_WORD_COUNT");
  if (r->alt_counts && r->alt_counts->datatype != HARK_TYPE_INT32) r->alt_counts = NULL;
  r->alt_words = hark_response_output_by_name(resp, "ALTERNATIVE_WORDS");
  r->alt_start = hark_response_output_by_name(resp, "ALTERNATIVE_WORD_START");
  r->alt_end = hark_response_output_by_name(resp, "ALTERNATIVE_WORD_END");
  r->alt_wconf = hark_response_output_by_name(resp, "ALTERNATIVE_WORD_CONF");
}

/* ALTERNATIVE_WORD_COUNT[i]; 0 when absent, negative or out of range. */
static uint32_t count_at(const hark_asr_result *r, uint32_t i) {
  const hark_tensor *t = r->alt_counts;
  if (!t || i >= count_of(t, 4)) return 0;
  int32_t v;
  memcpy(&v, (const char *)t->data + 4 * (size_t)i, 4);
  return v > 0 ? (uint32_t)v : 0;
}

uint32_t hark_asr_result_alternative_words(const hark_asr_result *r, uint32_t i) {
  if (!r->alt_counts) return i == 0 ? r->n_words : 0;
  return count_at(r, i);
}

bool hark_asr_result_alternative_word(const hark_asr_result *r, uint32_t i, uint32_t j,
                                      const char **word, uint32_t *len, float *start, float *end,
                                      float *conf) {
  if (!r->alt_counts) return i == 0 && hark_asr_result_word(r, j, word, len, start, end, conf);
  if (j >= count_at(r, i)) return false;
  uint64_t at = j;
  for (uint32_t a = 0; a < i; a++) at += count_at(r, a);
  if (at > UINT32_MAX || !bytes_at(r->alt_words, (uint32_t)at, word, len)) return false;
  *start = fp32_at(r->alt_start, (uint32_t)at, 0.0f);
  *end = fp32_at(r->alt_end, (uint32_t)at, 0.0f);
  *conf = fp32_at(r->alt_wconf, (uint32_t)at, 1.0f);
  return true;
}

bool hark_asr_result_word(const hark_asr_result *r, uint32_t i, const char **word, uint32_t *len,
                          float *start, float *end, float *conf) {
  if (i >= r->n_words || !bytes_at(r->words, i, word, len)) return false;
  *start = fp32_at(r->word_start, i, 0.0f);
  *end = fp32_at(r->word_end, i, 0.0f);
  *conf = fp32_at(r->word_conf, i, 1.0f);
  return true;
}

bool hark_asr_result_alternative(const hark_asr_result *r, uint32_t i, const char **text,
                                 uint32_t *len, float *conf) {
  if (!r->alts) {
    if (i > 0) return false;
    *text = r->text;
    *len = r->text_len;
    *conf = r->confidence;
    return true;
  }
  if (i >= r->n_alternatives || !bytes_at(r->alts, i, text, len)) return false;
  *conf = fp32_at(r->alt_conf, i, i == 0 ? r->confidence : 0.0f);
  return true;
}
