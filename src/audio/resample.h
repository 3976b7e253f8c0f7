/*
 * audio/resample.h — a streaming int16 mono resampler on libsoxr, so a
 * stream sent at any rate from 8 kHz to 48 kHz reaches the model at its
 * own rate. Equal rates pass samples through untouched (no soxr at all).
 * One resampler belongs to one stream; not thread-safe.
 */
#ifndef HARK_AUDIO_RESAMPLE_H
#define HARK_AUDIO_RESAMPLE_H

#include <stddef.h>
#include <stdint.h>

#define HARK_RESAMPLE_MIN_RATE 8000u
#define HARK_RESAMPLE_MAX_RATE 48000u

typedef struct hark_resampler hark_resampler;

/* NULL on failure, with a reason in err. Rates must be within
 * [HARK_RESAMPLE_MIN_RATE, HARK_RESAMPLE_MAX_RATE]. Free with
 * hark_resampler_free. */
hark_resampler *hark_resampler_new(uint32_t in_rate, uint32_t out_rate, char *err, size_t errlen);
void hark_resampler_free(hark_resampler *r);

uint32_t hark_resampler_in_rate(const hark_resampler *r);
uint32_t hark_resampler_out_rate(const hark_resampler *r);

/*
 * Resamples n input samples; *out points at the output, *out_n samples,
 * valid until the next call on r (for a passthrough it is `in` itself).
 * Pass in = NULL, n = 0 with flush = 1 at the end of the stream to drain
 * what the filter still holds. Returns 0, or -1 on a soxr error / OOM.
 */
int hark_resampler_process(hark_resampler *r, const int16_t *in, size_t n, int flush,
                           const int16_t **out, size_t *out_n);

#endif
