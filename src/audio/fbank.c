/*
 * fbank.c — Kaldi's log mel filter bank (compute-fbank, FbankComputer),
 * streaming. A bank (hark_fbank_bank) holds what the options imply and
 * never changes: the window function, the FFT's bit-reversal and twiddle
 * tables, and each mel bin's weights as a run over the FFT bins (first
 * bin, count, weights). A stream (hark_fbank) owns a buffer of scaled
 * samples, from a window's length before its next frame's first sample to
 * the last sample received, and the frames computed but not yet popped.
 *
 * Samples enter through hark_fbank_accept in pieces of at most CHUNK, so
 * the sample buffer has a size fixed at creation; every frame whose samples
 * have all arrived is computed at once (Kaldi's OnlineGenericBaseFeature
 * with flush = false), so chunking never changes a feature. With
 * snip_edges = 0 frame i is centred on i * shift + shift / 2, and the
 * first frames read the signal reflected about its start; the last ones,
 * computed by hark_fbank_finish, read it reflected about its end (Kaldi's
 * ExtractWindow), so a finished stream has exactly the frames, and the
 * values, of an offline extractor (torchaudio.compliance.kaldi.fbank).
 *
 * Each frame is computed in double (DC offset, energy, pre-emphasis,
 * window, a real FFT as a half-size complex radix-2 FFT, power spectrum,
 * mel sums, log) and stored as float; a window that is not a power of two
 * long without rounding uses a plain DFT.
 */
#include "hark/audio.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHUNK 1024u           /* samples taken into the buffer at a time */
#define MAX_WINDOW 65536u     /* samples in a frame (FFT size), at most */
#define MAX_DFT 8192u         /* ... when it is not a power of two (a DFT) */
#define MAX_BINS 1024u        /* mel bins */
#define LOG_EPS (FLT_EPSILON) /* Kaldi's floor before a log */

struct hark_fbank_bank {
  hark_fbank_opts o;
  size_t shift, wlen, padded, dim;
  double *window; /* wlen */
  /* FFT: padded = 2 * m; a complex FFT of m points when padded is a power
   * of two, else a DFT over cos/sin tables of padded entries */
  int pow2;
  size_t m;
  size_t *bitrev;        /* m */
  double *tw_re, *tw_im; /* the complex FFT's twiddles, stage by stage (m - 1) */
  double *sp_re, *sp_im; /* m: the split into a real FFT's bins */
  double *dft_c, *dft_s; /* padded (DFT only) */
  size_t nbins;          /* FFT bins used: padded / 2 */
  uint32_t *mel_first;   /* num_mel_bins */
  uint32_t *mel_len;     /* num_mel_bins */
  size_t *mel_off;       /* num_mel_bins: each bin's weights in mel_w */
  float *mel_w;
  double log_energy_floor; /* log(energy_floor), or -HUGE_VAL for none */
};

struct hark_fbank {
  const hark_fbank_bank *b;
  /* samples: buf[0..nbuf) are the samples from absolute index base */
  float *buf;
  size_t nbuf, cap;
  uint64_t base, n_in; /* samples received in all */
  uint64_t next;       /* the next frame to compute */
  int finished;
  /* frames: rows [head, head + ready) of out, frame `popped` first */
  float *out;
  size_t head, ready, out_cap; /* in rows */
  uint64_t popped;
  /* a frame's work space (padded + 2 * m doubles) */
  double *work;
};

/* ---- options and bank ------------------------------------------------------ */

void hark_fbank_opts_default(hark_fbank_opts *o) {
  memset(o, 0, sizeof *o);
  o->sample_rate = 16000.0f;
  o->num_mel_bins = 80;
  o->frame_length_ms = 25.0f;
  o->frame_shift_ms = 10.0f;
  o->dither = 0.0f;
  o->window = HARK_FBANK_POVEY;
  o->preemph = 0.97f;
  o->remove_dc_offset = 1;
  o->low_freq = 20.0f;
  o->high_freq = -400.0f;
  o->snip_edges = 0;
  o->use_energy = 0;
  o->raw_energy = 1;
  o->energy_floor = 0.0f;
  o->use_log_fbank = 1;
  o->use_power = 1;
  o->round_to_power_of_two = 1;
  o->scale = 1.0f;
}

static float mel_scale(float freq) { return 1127.0f * logf(1.0f + freq / 700.0f); }

static int fail(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "fbank: %s", msg);
  return -1;
}

static int check_opts(const hark_fbank_opts *o, char *err, size_t errlen) {
  if (!(o->sample_rate >= 1.0f && o->sample_rate <= 1e6f))
    return fail(err, errlen, "sample_rate must be 1..1000000 Hz");
  if (o->dither != 0.0f) return fail(err, errlen, "dither must be 0 (features are deterministic)");
  if (o->num_mel_bins < 3 || o->num_mel_bins > MAX_BINS)
    return fail(err, errlen, "num_mel_bins must be 3..1024");
  if (!(o->frame_shift_ms > 0.0f) || !(o->frame_length_ms > 0.0f))
    return fail(err, errlen, "frame_length_ms and frame_shift_ms must be positive");
  if ((unsigned)o->window > HARK_FBANK_RECTANGULAR) return fail(err, errlen, "unknown window");
  if (!(o->preemph >= 0.0f && o->preemph <= 1.0f)) return fail(err, errlen, "preemph must be 0..1");
  if (!isfinite(o->scale) || !isfinite(o->low_freq) || !isfinite(o->high_freq) ||
      !(o->energy_floor >= 0.0f && isfinite(o->energy_floor)))
    return fail(err, errlen, "scale, low_freq, high_freq and energy_floor must be finite");
  return 0;
}

static double window_value(hark_fbank_window w, size_t i, size_t n) {
  double a = 2.0 * M_PI / (double)(n - 1);
  switch (w) {
  case HARK_FBANK_HANNING: return 0.5 - 0.5 * cos(a * (double)i);
  case HARK_FBANK_HAMMING: return 0.54 - 0.46 * cos(a * (double)i);
  case HARK_FBANK_RECTANGULAR: return 1.0;
  case HARK_FBANK_POVEY:
  default: return pow(0.5 - 0.5 * cos(a * (double)i), 0.85);
  }
}

static int fft_tables(hark_fbank_bank *b) {
  size_t m = b->m, bits = 0;
  while (((size_t)1 << bits) < m) bits++;
  b->bitrev = malloc(m * sizeof *b->bitrev);
  b->tw_re = malloc(m * sizeof *b->tw_re);
  b->tw_im = malloc(m * sizeof *b->tw_im);
  b->sp_re = malloc(m * sizeof *b->sp_re);
  b->sp_im = malloc(m * sizeof *b->sp_im);
  if (!b->bitrev || !b->tw_re || !b->tw_im || !b->sp_re || !b->sp_im) return -1;
  for (size_t i = 0; i < m; i++) {
    size_t r = 0;
    for (size_t k = 0; k < bits; k++) r |= ((i >> k) & 1u) << (bits - 1 - k);
    b->bitrev[i] = r;
  }
  /* the stage of butterflies `half` apart reads its half twiddles in a
   * row, from half - 1 */
  for (size_t half = 1; half < m; half <<= 1)
    for (size_t j = 0; j < half; j++) {
      b->tw_re[half - 1 + j] = cos(-M_PI * (double)j / (double)half);
      b->tw_im[half - 1 + j] = sin(-M_PI * (double)j / (double)half);
    }
  for (size_t k = 0; k < m; k++) {
    b->sp_re[k] = cos(-2.0 * M_PI * (double)k / (double)b->padded);
    b->sp_im[k] = sin(-2.0 * M_PI * (double)k / (double)b->padded);
  }
  return 0;
}

static int dft_tables(hark_fbank_bank *b) {
  size_t n = b->padded;
  b->dft_c = malloc(n * sizeof *b->dft_c);
  b->dft_s = malloc(n * sizeof *b->dft_s);
  if (!b->dft_c || !b->dft_s) return -1;
  for (size_t j = 0; j < n; j++) {
    b->dft_c[j] = cos(2.0 * M_PI * (double)j / (double)n);
    b->dft_s[j] = sin(2.0 * M_PI * (double)j / (double)n);
  }
  return 0;
}

/* Kaldi's MelBanks (no VTLN), in float as Kaldi computes them. */
static int mel_tables(hark_fbank_bank *b, char *err, size_t errlen) {
  const hark_fbank_opts *o = &b->o;
  uint32_t nb = o->num_mel_bins;
  float nyquist = 0.5f * o->sample_rate;
  float lo = o->low_freq, hi = o->high_freq > 0.0f ? o->high_freq : nyquist + o->high_freq;
  if (lo < 0.0f || lo >= nyquist || hi <= 0.0f || hi > nyquist || hi <= lo)
    return fail(err, errlen, "low_freq and high_freq must satisfy 0 <= low < high <= Nyquist");
  float bin_width = o->sample_rate / (float)b->padded;
  float mel_lo = mel_scale(lo), mel_hi = mel_scale(hi);
  float delta = (mel_hi - mel_lo) / (float)(nb + 1);
  b->mel_first = calloc(nb, sizeof *b->mel_first);
  b->mel_len = calloc(nb, sizeof *b->mel_len);
  b->mel_off = calloc(nb, sizeof *b->mel_off);
  b->mel_w = malloc(nb * b->nbins * sizeof *b->mel_w); /* trimmed below */
  if (!b->mel_first || !b->mel_len || !b->mel_off || !b->mel_w)
    return fail(err, errlen, "out of memory");
  size_t used = 0;
  for (uint32_t bin = 0; bin < nb; bin++) {
    float left = mel_lo + (float)bin * delta, centre = mel_lo + (float)(bin + 1) * delta,
          right = mel_lo + (float)(bin + 2) * delta;
    long first = -1, last = -1;
    b->mel_off[bin] = used;
    for (size_t i = 0; i < b->nbins; i++) {
      float mel = mel_scale(bin_width * (float)i);
      if (!(mel > left && mel < right)) continue;
      float w = mel <= centre ? (mel - left) / (centre - left) : (right - mel) / (right - centre);
      if (first < 0) first = (long)i;
      /* bins inside a triangle are contiguous: fill any gap with zeros */
      for (long k = last + 1; last >= 0 && k < (long)i; k++) b->mel_w[used++] = 0.0f;
      b->mel_w[used++] = w;
      last = (long)i;
    }
    if (first < 0) return fail(err, errlen, "a mel bin has no FFT bins: num_mel_bins is too large");
    b->mel_first[bin] = (uint32_t)first;
    b->mel_len[bin] = (uint32_t)(last - first + 1);
  }
  float *w = realloc(b->mel_w, used * sizeof *w);
  if (w) b->mel_w = w;
  return 0;
}

hark_fbank_bank *hark_fbank_bank_new(const hark_fbank_opts *o, char *err, size_t errlen) {
  if (check_opts(o, err, errlen) != 0) return NULL;
  double shift = (double)o->sample_rate * 0.001 * (double)o->frame_shift_ms;
  double wlen = (double)o->sample_rate * 0.001 * (double)o->frame_length_ms;
  if (shift < 1.0 || wlen < 2.0 || wlen > MAX_WINDOW) {
    fail(err, errlen, "a frame must be 2..65536 samples long and shift by at least 1");
    return NULL;
  }
  hark_fbank_bank *b = calloc(1, sizeof *b);
  if (!b) {
    fail(err, errlen, "out of memory");
    return NULL;
  }
  b->o = *o;
  b->shift = (size_t)shift; /* Kaldi truncates both, as int32 */
  b->wlen = (size_t)wlen;
  size_t p = 1;
  while (p < b->wlen) p <<= 1;
  b->padded = o->round_to_power_of_two ? p : b->wlen;
  b->pow2 = b->padded == p && p >= 2;
  b->m = b->padded / 2;
  b->nbins = b->padded / 2;
  b->dim = o->num_mel_bins + (o->use_energy ? 1u : 0u);
  b->log_energy_floor = o->energy_floor > 0.0f ? log((double)o->energy_floor) : -HUGE_VAL;
  if (!b->pow2 && b->padded > MAX_DFT) {
    fail(err, errlen, "a frame that is not a power of two long must be at most 8192 samples");
    goto bad;
  }
  b->window = malloc(b->wlen * sizeof *b->window);
  if (!b->window || (b->pow2 ? fft_tables(b) : dft_tables(b)) != 0) {
    fail(err, errlen, "out of memory");
    goto bad;
  }
  for (size_t i = 0; i < b->wlen; i++) b->window[i] = window_value(o->window, i, b->wlen);
  if (mel_tables(b, err, errlen) != 0) goto bad;
  return b;
bad:
  hark_fbank_bank_free(b);
  return NULL;
}

void hark_fbank_bank_free(hark_fbank_bank *b) {
  if (!b) return;
  free(b->window);
  free(b->bitrev);
  free(b->tw_re);
  free(b->tw_im);
  free(b->sp_re);
  free(b->sp_im);
  free(b->dft_c);
  free(b->dft_s);
  free(b->mel_first);
  free(b->mel_len);
  free(b->mel_off);
  free(b->mel_w);
  free(b);
}

size_t hark_fbank_bank_dim(const hark_fbank_bank *b) { return b->dim; }
size_t hark_fbank_bank_shift(const hark_fbank_bank *b) { return b->shift; }
size_t hark_fbank_bank_window(const hark_fbank_bank *b) { return b->wlen; }

uint64_t hark_fbank_bank_num_frames(const hark_fbank_bank *b, uint64_t n) {
  if (b->o.snip_edges) return n < b->wlen ? 0 : 1 + (n - b->wlen) / b->shift;
  return (n + b->shift / 2) / b->shift;
}

/* The first sample of frame i (Kaldi's FirstSampleOfFrame); negative at
 * the start without snip_edges. */
static int64_t first_sample(const hark_fbank_bank *b, uint64_t i) {
  if (b->o.snip_edges) return (int64_t)(i * b->shift);
  return (int64_t)(i * b->shift + b->shift / 2) - (int64_t)(b->wlen / 2);
}

/* Frames whose samples all lie in the first n (Kaldi's NumFrames with
 * flush = false). */
static uint64_t complete_frames(const hark_fbank_bank *b, uint64_t n) {
  uint64_t nf = hark_fbank_bank_num_frames(b, n);
  while (nf > 0 && first_sample(b, nf - 1) + (int64_t)b->wlen > (int64_t)n) nf--;
  return nf;
}

/* ---- one frame --------------------------------------------------------------- */

/* In-place complex FFT of m points (m a power of two). */
static void fft_complex(const hark_fbank_bank *b, double *re, double *im) {
  size_t m = b->m;
  for (size_t i = 0; i < m; i++) {
    size_t r = b->bitrev[i];
    if (r > i) {
      double t = re[i];
      re[i] = re[r];
      re[r] = t;
      t = im[i];
      im[i] = im[r];
      im[r] = t;
    }
  }
  for (size_t i = 0; i + 1 < m; i += 2) { /* the first stage: no twiddles */
    double r = re[i + 1], q = im[i + 1];
    re[i + 1] = re[i] - r;
    im[i + 1] = im[i] - q;
    re[i] += r;
    im[i] += q;
  }
  for (size_t half = 2; half < m; half <<= 1) {
    const double *twr = b->tw_re + half - 1, *twi = b->tw_im + half - 1;
    for (size_t i = 0; i < m; i += 2 * half) {
      for (size_t j = 0; j < half; j++) {
        double wr = twr[j], wi = twi[j];
        size_t a = i + j, c = a + half;
        double tr = re[c] * wr - im[c] * wi, ti = re[c] * wi + im[c] * wr;
        re[c] = re[a] - tr;
        im[c] = im[a] - ti;
        re[a] += tr;
        im[a] += ti;
      }
    }
  }
}

/* The power spectrum of x (padded real samples) into pw[0 .. nbins). */
static void power_spectrum(const hark_fbank_bank *b, const double *x, double *pw, double *re,
                           double *im) {
  if (!b->pow2) {
    size_t n = b->padded;
    for (size_t k = 0; k < b->nbins; k++) {
      double sr = 0, si = 0;
      size_t j = 0;
      for (size_t t = 0; t < n; t++) {
        sr += x[t] * b->dft_c[j];
        si -= x[t] * b->dft_s[j];
        j += k;
        if (j >= n) j -= n;
      }
      pw[k] = sr * sr + si * si;
    }
    return;
  }
  size_t m = b->m;
  for (size_t i = 0; i < m; i++) {
    re[i] = x[2 * i];
    im[i] = x[2 * i + 1];
  }
  fft_complex(b, re, im);
  /* X[k] = (Z[k] + conj Z[m-k]) / 2 - i e^{-2 pi i k / n} (Z[k] - conj Z[m-k]) / 2 */
  pw[0] = (re[0] + im[0]) * (re[0] + im[0]);
  for (size_t k = 1; k < b->nbins; k++) {
    double ar = re[k], ai = im[k], br = re[m - k], bi = -im[m - k];
    double er = 0.5 * (ar + br), ei = 0.5 * (ai + bi); /* even part */
    double dr = 0.5 * (ar - br), di = 0.5 * (ai - bi); /* odd part times i */
    double wr = b->sp_re[k], wi = b->sp_im[k];
    /* odd = -i * d; X = e + w * odd */
    double orr = di, oi = -dr;
    double xr = er + wr * orr - wi * oi, xi = ei + wr * oi + wi * orr;
    pw[k] = xr * xr + xi * xi;
  }
}

/* Frame `i` of f into row `row`. */
static void compute_frame(hark_fbank *f, uint64_t i, float *row) {
  const hark_fbank_bank *b = f->b;
  const hark_fbank_opts *o = &b->o;
  size_t wlen = b->wlen;
  double *x = f->work, *pw = x + b->padded, *re = pw + b->nbins + 1, *im = re + b->m + 1;
  int64_t start = first_sample(b, i), n = (int64_t)f->n_in;
  double sum = 0;
  if (start >= (int64_t)f->base && start + (int64_t)wlen <= n) {
    const float *s = f->buf + (start - (int64_t)f->base);
    for (size_t t = 0; t < wlen; t++) sum += x[t] = s[t];
  } else { /* an edge: Kaldi's ExtractWindow reflects the signal about it */
    for (size_t t = 0; t < wlen; t++) {
      int64_t s = start + (int64_t)t;
      while (s < 0 || s >= n) s = s < 0 ? -s - 1 : 2 * n - 1 - s;
      if (s < (int64_t)f->base) s = (int64_t)f->base; /* cannot happen; never read outside */
      sum += x[t] = f->buf[s - (int64_t)f->base];
    }
  }
  double mean = o->remove_dc_offset ? sum / (double)wlen : 0.0;
  double log_energy = 0;
  if (o->use_energy && o->raw_energy) {
    double e = 0;
    for (size_t t = 0; t < wlen; t++) e += (x[t] - mean) * (x[t] - mean);
    log_energy = log(e > LOG_EPS ? e : LOG_EPS);
  }
  /* DC offset, pre-emphasis and window in one pass, from the end (each
   * sample's pre-emphasis reads its predecessor before it changes). */
  double c = o->preemph;
  const double *win = b->window;
  for (size_t t = wlen - 1; t > 0; t--) x[t] = ((x[t] - mean) - c * (x[t - 1] - mean)) * win[t];
  x[0] = (x[0] - mean) * (1.0 - c) * win[0];
  memset(x + wlen, 0, (b->padded - wlen) * sizeof *x);
  if (o->use_energy && !o->raw_energy) {
    double e = 0;
    for (size_t t = 0; t < wlen; t++) e += x[t] * x[t];
    log_energy = log(e > LOG_EPS ? e : LOG_EPS);
  }
  power_spectrum(b, x, pw, re, im);
  if (!o->use_power)
    for (size_t k = 0; k < b->nbins; k++) pw[k] = sqrt(pw[k]);
  float *mel = row;
  if (o->use_energy) {
    row[0] = (float)(log_energy < b->log_energy_floor ? b->log_energy_floor : log_energy);
    mel = row + 1;
  }
  for (uint32_t bin = 0; bin < o->num_mel_bins; bin++) {
    const float *w = b->mel_w + b->mel_off[bin];
    const double *p = pw + b->mel_first[bin];
    double e = 0;
    for (uint32_t k = 0; k < b->mel_len[bin]; k++) e += (double)w[k] * p[k];
    if (o->use_log_fbank) e = log(e > LOG_EPS ? e : LOG_EPS);
    mel[bin] = (float)e;
  }
}

/* ---- the stream -------------------------------------------------------------- */

hark_fbank *hark_fbank_new(const hark_fbank_bank *b) {
  hark_fbank *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->b = b;
  /* a window before the next frame, a frame, a shift of slack, a chunk */
  f->cap = 2 * b->wlen + b->shift + CHUNK;
  f->buf = malloc(f->cap * sizeof *f->buf);
  f->work = malloc((b->padded + b->nbins + 2 * b->m + 4) * sizeof *f->work);
  if (!f->buf || !f->work) {
    hark_fbank_free(f);
    return NULL;
  }
  return f;
}

void hark_fbank_free(hark_fbank *f) {
  if (!f) return;
  free(f->buf);
  free(f->out);
  free(f->work);
  free(f);
}

void hark_fbank_reset(hark_fbank *f) {
  f->nbuf = 0;
  f->base = f->n_in = f->next = 0;
  f->finished = 0;
  f->head = f->ready = 0;
  f->popped = 0;
}

/* Room for `rows` more frames after those ready. */
static int reserve_rows(hark_fbank *f, uint64_t rows) {
  size_t dim = f->b->dim;
  if (rows > (SIZE_MAX / sizeof(float)) / dim - f->ready - 1) return -1;
  size_t need = f->ready + (size_t)rows;
  if (f->head + need <= f->out_cap) return 0;
  if (f->head > 0) { /* move the unread rows to the front first */
    if (f->ready) memmove(f->out, f->out + f->head * dim, f->ready * dim * sizeof *f->out);
    f->head = 0;
    if (need <= f->out_cap) return 0;
  }
  size_t cap = f->out_cap ? f->out_cap : 64;
  while (cap < need) cap = cap > SIZE_MAX / 2 / sizeof(float) / dim ? need : cap * 2;
  float *o = realloc(f->out, cap * dim * sizeof *o);
  if (!o) return -1;
  f->out = o;
  f->out_cap = cap;
  return 0;
}

/* Computes frames [f->next, upto), then drops the samples no later frame
 * reads (all but a window before the next frame's start). */
static void run_frames(hark_fbank *f, uint64_t upto) {
  const hark_fbank_bank *b = f->b;
  for (; f->next < upto; f->next++) {
    compute_frame(f, f->next, f->out + (f->head + f->ready) * b->dim);
    f->ready++;
  }
  int64_t keep = first_sample(b, f->next) - (int64_t)b->wlen;
  if (keep > (int64_t)f->base) {
    size_t drop = (size_t)keep - (size_t)f->base;
    if (drop > f->nbuf) drop = f->nbuf;
    memmove(f->buf, f->buf + drop, (f->nbuf - drop) * sizeof *f->buf);
    f->nbuf -= drop;
    f->base += drop;
  }
}

/* Takes n samples, from int16 (pcm) or float (x). */
static int take(hark_fbank *f, const int16_t *pcm, const float *x, size_t n) {
  if (f->finished) return -1;
  if (n == 0) return 0;
  if (reserve_rows(f, complete_frames(f->b, f->n_in + n) - f->next) != 0) return -1;
  float scale = f->b->o.scale;
  for (size_t off = 0; off < n;) {
    size_t k = n - off < CHUNK ? n - off : CHUNK;
    /* The buffer holds at most a window and a frame before the chunk. */
    float *dst = f->buf + f->nbuf;
    if (pcm)
      for (size_t t = 0; t < k; t++) dst[t] = (float)pcm[off + t] * scale;
    else
      for (size_t t = 0; t < k; t++) dst[t] = x[off + t] * scale;
    f->nbuf += k;
    f->n_in += k;
    off += k;
    run_frames(f, complete_frames(f->b, f->n_in));
  }
  return 0;
}

int hark_fbank_accept(hark_fbank *f, const int16_t *pcm, size_t n) { return take(f, pcm, NULL, n); }

int hark_fbank_accept_float(hark_fbank *f, const float *x, size_t n) { return take(f, NULL, x, n); }

int hark_fbank_finish(hark_fbank *f) {
  if (f->finished) return 0;
  uint64_t total = hark_fbank_bank_num_frames(f->b, f->n_in);
  if (total > f->next && reserve_rows(f, total - f->next) != 0) return -1;
  run_frames(f, total);
  f->finished = 1;
  return 0;
}

int hark_fbank_finished(const hark_fbank *f) { return f->finished; }
size_t hark_fbank_frames_ready(const hark_fbank *f) { return f->ready; }
uint64_t hark_fbank_frames_popped(const hark_fbank *f) { return f->popped; }

const float *hark_fbank_frames(const hark_fbank *f) {
  return f->out ? f->out + f->head * f->b->dim : NULL;
}

size_t hark_fbank_read(const hark_fbank *f, size_t i, size_t k, float *out) {
  if (i >= f->ready) return 0;
  if (k > f->ready - i) k = f->ready - i;
  if (k) memcpy(out, f->out + (f->head + i) * f->b->dim, k * f->b->dim * sizeof *out);
  return k;
}

void hark_fbank_pop(hark_fbank *f, size_t n) {
  if (n > f->ready) n = f->ready;
  f->head += n;
  f->ready -= n;
  f->popped += n;
  if (f->ready == 0) f->head = 0;
}
