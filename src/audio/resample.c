/*
 * resample.c — libsoxr in streaming mode (int16 in, float out, HQ quality),
 * rounded to int16 here with TPDF dither from a generator of our own with a
 * fixed seed. The dither matters: audio upsampled from 8 kHz has nothing
 * above 4 kHz, and a recogniser's log filterbank reads that digital silence
 * as -inf-like energies (one LibriVox file: "hm odd one" without dither,
 * its words with it). soxr's own dither is seeded from the clock and an
 * address, so the same audio gave other words on each run; ours depends
 * only on the sample's position, so the same audio always gives the same
 * samples, whatever the chunking. Output goes to a buffer owned by the
 * resampler and grown on demand, so a caller never has to guess soxr's
 * output size; soxr keeps its own filter history between calls. Rates that
 * match take a zero-copy path.
 */
#include "hark/audio.h"

#include <math.h>
#include <soxr.h>
#include <stdio.h>
#include <stdlib.h>

struct hark_resampler {
  uint32_t in_rate, out_rate;
  soxr_t soxr; /* NULL for a passthrough */
  float *fbuf; /* soxr's output */
  int16_t *buf;
  size_t cap;   /* of both buffers, in samples */
  uint32_t rng; /* the dither's xorshift32 state */
};

#define DITHER_SEED 0x9e3779b9u

hark_resampler *hark_resampler_new(uint32_t in_rate, uint32_t out_rate, char *err, size_t errlen) {
  if (in_rate < HARK_RESAMPLE_ANY_MIN_RATE || in_rate > HARK_RESAMPLE_ANY_MAX_RATE ||
      out_rate < HARK_RESAMPLE_ANY_MIN_RATE || out_rate > HARK_RESAMPLE_ANY_MAX_RATE) {
    if (err && errlen)
      snprintf(err, errlen, "sample rate %u -> %u outside %u..%u Hz", in_rate, out_rate,
               HARK_RESAMPLE_ANY_MIN_RATE, HARK_RESAMPLE_ANY_MAX_RATE);
    return NULL;
  }
  hark_resampler *r = calloc(1, sizeof *r);
  if (!r) {
    if (err && errlen) snprintf(err, errlen, "out of memory");
    return NULL;
  }
  r->in_rate = in_rate;
  r->out_rate = out_rate;
  r->rng = DITHER_SEED;
  if (in_rate != out_rate) {
    soxr_error_t e = NULL;
    soxr_io_spec_t io = soxr_io_spec(SOXR_INT16_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    r->soxr = soxr_create((double)in_rate, (double)out_rate, 1, &e, &io, &q, NULL);
    if (!r->soxr || e) {
      if (err && errlen) snprintf(err, errlen, "soxr_create: %s", e ? e : "failed");
      hark_resampler_free(r);
      return NULL;
    }
  }
  return r;
}

void hark_resampler_free(hark_resampler *r) {
  if (!r) return;
  if (r->soxr) soxr_delete(r->soxr);
  free(r->fbuf);
  free(r->buf);
  free(r);
}

uint32_t hark_resampler_in_rate(const hark_resampler *r) { return r->in_rate; }
uint32_t hark_resampler_out_rate(const hark_resampler *r) { return r->out_rate; }

static int reserve(hark_resampler *r, size_t need) {
  if (need <= r->cap) return 0;
  size_t cap = r->cap ? r->cap : 1024;
  while (cap < need) cap *= 2;
  float *nf = realloc(r->fbuf, cap * sizeof *nf);
  if (!nf) return -1;
  r->fbuf = nf;
  int16_t *nb = realloc(r->buf, cap * sizeof *nb);
  if (!nb) return -1;
  r->buf = nb;
  r->cap = cap;
  return 0;
}

/* Uniform in [0, 1). */
static float next_unit(hark_resampler *r) {
  uint32_t x = r->rng;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  r->rng = x;
  return (float)(x >> 8) * (1.0f / 16777216.0f);
}

/* Rounds soxr's float output to int16 with triangular (TPDF) dither of
 * one least significant bit. */
static void to_int16(hark_resampler *r, const float *in, int16_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    float d = next_unit(r) - next_unit(r);
    float v = floorf(in[i] * 32768.0f + d + 0.5f);
    out[i] = (int16_t)(v > 32767.0f ? 32767.0f : v < -32768.0f ? -32768.0f : v);
  }
}

int hark_resampler_process(hark_resampler *r, const int16_t *in, size_t n, int flush,
                           const int16_t **out, size_t *out_n) {
  *out = in;
  *out_n = n;
  if (!r->soxr) return 0;
  *out_n = 0;
  if (n == 0 && !flush) return 0; /* soxr reads an empty input as end of stream */
  size_t done_out = 0;
  /* Room for the converted input plus what the filter may release. */
  size_t want = (size_t)((double)n * r->out_rate / r->in_rate) + 256;
  for (;;) {
    if (reserve(r, done_out + want) != 0) return -1;
    size_t idone = 0, odone = 0;
    soxr_error_t e = soxr_process(r->soxr, n ? in : NULL, n, &idone, r->fbuf + done_out,
                                  r->cap - done_out, &odone);
    if (e) return -1;
    to_int16(r, r->fbuf + done_out, r->buf + done_out, odone);
    done_out += odone;
    in += idone;
    n -= idone;
    if (n > 0) continue; /* output was full: more room, then the rest */
    if (!flush || odone == 0) break;
    /* Flushing: call again until soxr has nothing left to give. */
  }
  *out = r->buf;
  *out_n = done_out;
  return 0;
}
