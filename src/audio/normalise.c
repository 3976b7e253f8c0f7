/*
 * normalise.c — a stream's audio as its client sends it, to 16-bit
 * samples at the model's rate: the one place that sniffs a WAV header,
 * expands G.711 and resamples for the speech session (gated models) and
 * the pocketsphinx backend alike.
 *
 * The normaliser owns a conversion buffer (the last call's samples at the
 * input rate, grown to the largest call) and the stream's resampler, made
 * once the input's rate is known: from a WAV header, or at the first
 * samples (or the flush) of a stream without one. Output is the
 * resampler's buffer, or, at equal rates, the conversion buffer itself.
 */
#include "hark/audio.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct hark_audio_norm {
  uint32_t client_rate, out_rate, in_rate;
  hark_wav_encoding client_enc, in_enc;
  int begun; /* a non-empty input was looked at for a WAV header */
  hark_resampler *rs;
  int16_t *conv;
  size_t conv_cap;
};

__attribute__((format(printf, 4, 5))) static hark_audio_norm_status fail(hark_audio_norm_status st,
                                                                         char *err, size_t errlen,
                                                                         const char *fmt, ...);

static hark_audio_norm_status fail(hark_audio_norm_status st, char *err, size_t errlen,
                                   const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return st;
}

hark_audio_norm *hark_audio_norm_new(uint32_t client_rate, uint32_t out_rate,
                                     hark_wav_encoding encoding) {
  hark_audio_norm *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->client_rate = a->in_rate = client_rate;
  a->out_rate = out_rate;
  a->client_enc = a->in_enc = encoding;
  return a;
}

void hark_audio_norm_free(hark_audio_norm *a) {
  if (!a) return;
  hark_resampler_free(a->rs);
  free(a->conv);
  free(a);
}

uint32_t hark_audio_norm_in_rate(const hark_audio_norm *a) { return a->in_rate; }
uint32_t hark_audio_norm_out_rate(const hark_audio_norm *a) { return a->out_rate; }
hark_wav_encoding hark_audio_norm_encoding(const hark_audio_norm *a) { return a->in_enc; }
size_t hark_audio_norm_sample_bytes(const hark_audio_norm *a) {
  return a->in_enc == HARK_WAV_PCM16 ? 2 : 1;
}

/* The resampler for the input's rate, made on first need. */
static hark_audio_norm_status make_resampler(hark_audio_norm *a, char *err, size_t errlen) {
  if (a->rs && hark_resampler_in_rate(a->rs) == a->in_rate) return HARK_AUDIO_NORM_OK;
  char why[160];
  /* A stream names a rate a model reads; wider ones are for decoded files. */
  if (a->in_rate < HARK_RESAMPLE_MIN_RATE || a->in_rate > HARK_RESAMPLE_MAX_RATE)
    return fail(HARK_AUDIO_NORM_BAD_RATE, err, errlen, "sample rate %u -> %u outside %u..%u Hz",
                a->in_rate, a->out_rate, HARK_RESAMPLE_MIN_RATE, HARK_RESAMPLE_MAX_RATE);
  hark_resampler *rs = hark_resampler_new(a->in_rate, a->out_rate, why, sizeof why);
  if (!rs) return fail(HARK_AUDIO_NORM_BAD_RATE, err, errlen, "%s", why);
  hark_resampler_free(a->rs);
  a->rs = rs;
  return HARK_AUDIO_NORM_OK;
}

hark_audio_norm_status hark_audio_norm_begin(hark_audio_norm *a, const uint8_t **data, size_t *len,
                                             char *err, size_t errlen) {
  if (a->begun || *len == 0) return HARK_AUDIO_NORM_OK;
  a->in_rate = a->client_rate;
  a->in_enc = a->client_enc;
  if (!hark_wav_is_wav(*data, *len)) {
    a->begun = 1;
    return HARK_AUDIO_NORM_OK;
  }
  hark_wav_info info;
  char why[128];
  if (hark_wav_parse(*data, *len, &info, why, sizeof why) != HARK_WAV_OK)
    return fail(HARK_AUDIO_NORM_BAD_WAV, err, errlen, "AUDIO: %s", why);
  if (info.channels != 1)
    return fail(HARK_AUDIO_NORM_CHANNELS, err, errlen,
                "AUDIO: WAV has %u channels; only mono is supported", info.channels);
  a->in_rate = info.sample_rate; /* reported even when it is refused below */
  hark_audio_norm_status st = make_resampler(a, err, errlen);
  if (st != HARK_AUDIO_NORM_OK) return st;
  a->in_enc = info.encoding;
  a->begun = 1;
  *data += info.data_offset;
  *len = info.encoding == HARK_WAV_PCM16 ? info.data_size & ~(size_t)1 : info.data_size;
  return HARK_AUDIO_NORM_OK;
}

hark_audio_norm_status hark_audio_norm_check(const hark_audio_norm *a, size_t len, char *err,
                                             size_t errlen) {
  if (a->in_enc == HARK_WAV_PCM16 && len % 2)
    return fail(HARK_AUDIO_NORM_ODD_BYTES, err, errlen,
                "AUDIO: %zu bytes is not a whole number of 16-bit samples", len);
  return HARK_AUDIO_NORM_OK;
}

/* n samples of `enc` bytes into a->conv (grown as needed). */
static int convert(hark_audio_norm *a, const uint8_t *in, size_t n) {
  if (n > a->conv_cap) {
    int16_t *c = realloc(a->conv, n * sizeof *c);
    if (!c) return -1;
    a->conv = c;
    a->conv_cap = n;
  }
  int16_t *x = a->conv;
  if (a->in_enc == HARK_WAV_MULAW)
    for (size_t i = 0; i < n; i++) x[i] = hark_audio_mulaw_sample(in[i]);
  else if (a->in_enc == HARK_WAV_ALAW)
    for (size_t i = 0; i < n; i++) x[i] = hark_audio_alaw_sample(in[i]);
  else
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(x, in, n * sizeof *x);
#else
    for (size_t i = 0; i < n; i++) x[i] = (int16_t)(uint16_t)(in[2 * i] | in[2 * i + 1] << 8);
#endif
  return 0;
}

hark_audio_norm_status hark_audio_norm_accept(hark_audio_norm *a, const uint8_t *data, size_t len,
                                              int flush, const int16_t **out, size_t *out_n,
                                              char *err, size_t errlen) {
  *out = NULL;
  *out_n = 0;
  hark_audio_norm_status st = hark_audio_norm_begin(a, &data, &len, err, errlen);
  if (st == HARK_AUDIO_NORM_OK) st = hark_audio_norm_check(a, len, err, errlen);
  if (st != HARK_AUDIO_NORM_OK) return st;
  size_t n = len / hark_audio_norm_sample_bytes(a);
  if (n == 0 && !flush) return HARK_AUDIO_NORM_OK;
  if ((st = make_resampler(a, err, errlen)) != HARK_AUDIO_NORM_OK) return st;
  if (n && convert(a, data, n) != 0)
    return fail(HARK_AUDIO_NORM_INTERNAL, err, errlen, "out of memory");
  if (hark_resampler_process(a->rs, n ? a->conv : NULL, n, flush, out, out_n) != 0) {
    *out = NULL;
    *out_n = 0;
    return fail(HARK_AUDIO_NORM_INTERNAL, err, errlen, "resampler failed");
  }
  return HARK_AUDIO_NORM_OK;
}
