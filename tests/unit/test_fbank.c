/* Unit tests for src/audio/fbank.c: frame counts, chunking invariance, a
 * sine's energy in its mel bin, the edges, hostile sizes and options. The
 * comparison with torchaudio's Kaldi filter bank is tests/e2e/test_fbank.py. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hark/audio.h"

static hark_fbank_bank *bank_default(void) {
  hark_fbank_opts o;
  hark_fbank_opts_default(&o);
  char err[128];
  hark_fbank_bank *b = hark_fbank_bank_new(&o, err, sizeof err);
  assert_non_null(b);
  return b;
}

/* n samples of a test signal: a chirp plus a little noise, deterministic. */
static int16_t *signal_make(size_t n) {
  int16_t *x = malloc((n ? n : 1) * sizeof *x);
  uint32_t r = 12345;
  for (size_t i = 0; i < n; i++) {
    r = r * 1103515245u + 12345u;
    double t = (double)i / 16000.0;
    double v = 8000.0 * sin(2 * M_PI * (200.0 + 1500.0 * t) * t) + (double)(r >> 20) - 2048.0;
    x[i] = (int16_t)v;
  }
  return x;
}

/* Every frame of x fed in chunks from sizes[] (cycled; 0 = an empty call),
 * finished. The caller frees *rows. */
static size_t features(const hark_fbank_bank *b, const int16_t *x, size_t n, const size_t *sizes,
                       size_t n_sizes, float **rows) {
  hark_fbank *f = hark_fbank_new(b);
  assert_non_null(f);
  size_t dim = hark_fbank_bank_dim(b), got = 0, cap = 16;
  *rows = malloc(cap * dim * sizeof **rows);
  for (size_t off = 0, c = 0;; c++) {
    size_t k = n - off < sizes[c % n_sizes] ? n - off : sizes[c % n_sizes];
    int end = off + k == n;
    assert_int_equal(hark_fbank_accept(f, x + off, k), 0);
    off += k;
    if (end) assert_int_equal(hark_fbank_finish(f), 0);
    size_t ready = hark_fbank_frames_ready(f);
    assert_int_equal(hark_fbank_frames_popped(f), got);
    while (got + ready > cap) *rows = realloc(*rows, (cap *= 2) * dim * sizeof **rows);
    if (ready) memcpy(*rows + got * dim, hark_fbank_frames(f), ready * dim * sizeof **rows);
    hark_fbank_pop(f, ready);
    got += ready;
    if (end) break;
  }
  hark_fbank_free(f);
  return got;
}

/* Kaldi's frame count without snip_edges: (n + shift / 2) / shift. */
static void test_fbank_frame_counts(void **state) {
  (void)state;
  hark_fbank_bank *b = bank_default();
  assert_int_equal(hark_fbank_bank_dim(b), 80);
  assert_int_equal(hark_fbank_bank_shift(b), 160);
  assert_int_equal(hark_fbank_bank_window(b), 400);
  size_t lens[] = {0, 1, 79, 80, 81, 239, 240, 399, 400, 401, 1000, 16000, 16079, 16080};
  int16_t *x = signal_make(16080);
  for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
    size_t n = lens[i], one = n ? n : 1;
    float *rows;
    size_t got = features(b, x, n, &one, 1, &rows);
    assert_int_equal(got, (n + 80) / 160);
    assert_int_equal(hark_fbank_bank_num_frames(b, n), (n + 80) / 160);
    for (size_t k = 0; k < got * 80; k++) assert_true(isfinite(rows[k]));
    free(rows);
  }
  free(x);
  hark_fbank_bank_free(b);
}

/* The same frames, bit for bit, however the audio is cut. */
static void test_fbank_chunking_invariant(void **state) {
  (void)state;
  hark_fbank_bank *b = bank_default();
  size_t n = 48000 + 123;
  int16_t *x = signal_make(n);
  float *ref;
  size_t all = n;
  size_t nref = features(b, x, n, &all, 1, &ref);
  assert_int_equal(nref, (n + 80) / 160);
  size_t cuts[][5] = {{1}, {7, 0, 13}, {160}, {159, 161}, {399, 401, 0}, {5000, 1, 4096, 4097, 2}};
  size_t n_cuts[] = {1, 3, 1, 2, 3, 5};
  for (size_t c = 0; c < sizeof n_cuts / sizeof *n_cuts; c++) {
    float *rows;
    size_t got = features(b, x, n, cuts[c], n_cuts[c], &rows);
    assert_int_equal(got, nref);
    assert_memory_equal(rows, ref, nref * 80 * sizeof *ref);
    free(rows);
  }
  free(ref);
  free(x);
  hark_fbank_bank_free(b);
}

/* Frames come as soon as their samples are in: before finish, frame i is
 * out once sample i * 160 + 280 has arrived (a 400-sample window centred
 * on i * 160 + 80), and finish adds the last ones. */
static void test_fbank_streaming_lag(void **state) {
  (void)state;
  hark_fbank_bank *b = bank_default();
  hark_fbank *f = hark_fbank_new(b);
  int16_t *x = signal_make(1000);
  assert_int_equal(hark_fbank_accept(f, x, 279), 0);
  assert_int_equal(hark_fbank_frames_ready(f), 0);
  assert_int_equal(hark_fbank_accept(f, x + 279, 1), 0);
  assert_int_equal(hark_fbank_frames_ready(f), 1);
  assert_int_equal(hark_fbank_accept(f, x + 280, 720), 0); /* 1000: frames 0..4 */
  assert_int_equal(hark_fbank_frames_ready(f), 5);
  float row[80];
  assert_int_equal(hark_fbank_read(f, 4, 10, row), 1);
  assert_int_equal(hark_fbank_read(f, 5, 1, row), 0);
  hark_fbank_pop(f, 2);
  assert_int_equal(hark_fbank_frames_ready(f), 3);
  assert_int_equal(hark_fbank_frames_popped(f), 2);
  assert_int_equal(hark_fbank_finish(f), 0); /* (1000 + 80) / 160 = 6 */
  assert_int_equal(hark_fbank_frames_ready(f), 4);
  assert_true(hark_fbank_finished(f));
  assert_int_equal(hark_fbank_accept(f, x, 10), -1);
  assert_int_equal(hark_fbank_finish(f), 0); /* twice: nothing more */
  assert_int_equal(hark_fbank_frames_ready(f), 4);
  hark_fbank_pop(f, 100);
  assert_int_equal(hark_fbank_frames_ready(f), 0);
  assert_int_equal(hark_fbank_frames_popped(f), 6);
  hark_fbank_reset(f); /* a new stream: the same features again */
  assert_int_equal(hark_fbank_accept(f, x, 1000), 0);
  assert_int_equal(hark_fbank_frames_ready(f), 5);
  assert_int_equal(hark_fbank_frames_popped(f), 0);
  free(x);
  hark_fbank_free(f);
  hark_fbank_bank_free(b);
}

static double mel(double hz) { return 1127.0 * log(1.0 + hz / 700.0); }

/* A 1 kHz sine's energy peaks in the bin centred nearest 1 kHz, and
 * float input with the same scale gives the same features. */
static void test_fbank_sine_bin(void **state) {
  (void)state;
  hark_fbank_opts o;
  hark_fbank_opts_default(&o);
  o.scale = 1.0f / 32768.0f;
  char err[128];
  hark_fbank_bank *b = hark_fbank_bank_new(&o, err, sizeof err);
  assert_non_null(b);
  size_t n = 16000;
  int16_t *x = malloc(n * sizeof *x);
  float *xf = malloc(n * sizeof *xf);
  for (size_t i = 0; i < n; i++) {
    x[i] = (int16_t)lrint(10000.0 * sin(2 * M_PI * 1000.0 * (double)i / 16000.0));
    xf[i] = (float)x[i];
  }
  double lo = mel(20), hi = mel(7600), delta = (hi - lo) / 81;
  int want = 0;
  for (int bin = 1; bin < 80; bin++)
    if (fabs(lo + (bin + 1) * delta - mel(1000)) < fabs(lo + (want + 1) * delta - mel(1000)))
      want = bin;
  hark_fbank *f = hark_fbank_new(b), *g = hark_fbank_new(b);
  assert_int_equal(hark_fbank_accept(f, x, n), 0);
  assert_int_equal(hark_fbank_accept_float(g, xf, n), 0);
  assert_int_equal(hark_fbank_finish(f), 0);
  assert_int_equal(hark_fbank_finish(g), 0);
  assert_int_equal(hark_fbank_frames_ready(f), 100);
  assert_memory_equal(hark_fbank_frames(f), hark_fbank_frames(g), 100 * 80 * sizeof(float));
  const float *row = hark_fbank_frames(f) + 50 * 80;
  int top = 0;
  for (int bin = 1; bin < 80; bin++)
    if (row[bin] > row[top]) top = bin;
  assert_int_equal(top, want);
  assert_true(row[top] > 0.0f);
  assert_true(row[top] - row[(top + 40) % 80] > 10.0f);
  free(x);
  free(xf);
  hark_fbank_free(f);
  hark_fbank_free(g);
  hark_fbank_bank_free(b);
}

/* Digital silence is floored at log(FLT_EPSILON), never -inf or NaN. */
static void test_fbank_silence_and_empty(void **state) {
  (void)state;
  hark_fbank_bank *b = bank_default();
  hark_fbank *f = hark_fbank_new(b);
  assert_int_equal(hark_fbank_finish(f), 0); /* no audio at all */
  assert_int_equal(hark_fbank_frames_ready(f), 0);
  assert_null(hark_fbank_frames(f));
  hark_fbank_reset(f);
  int16_t zeros[800] = {0};
  assert_int_equal(hark_fbank_accept(f, zeros, 0), 0);
  assert_int_equal(hark_fbank_accept(f, NULL, 0), 0);
  assert_int_equal(hark_fbank_accept(f, zeros, 800), 0);
  assert_int_equal(hark_fbank_finish(f), 0);
  assert_int_equal(hark_fbank_frames_ready(f), 5);
  const float *r = hark_fbank_frames(f);
  for (size_t k = 0; k < 5 * 80; k++) assert_float_equal(r[k], logf(1.1920929e-07f), 1e-5);
  hark_fbank_free(f);
  hark_fbank_bank_free(b);
}

/* Far more audio than any buffer, in one call and in many: the sample
 * buffer stays fixed and only unpopped frames are held. */
static void test_fbank_long_and_hostile(void **state) {
  (void)state;
  hark_fbank_bank *b = bank_default();
  hark_fbank *f = hark_fbank_new(b);
  size_t n = 16000 * 30;
  int16_t *x = signal_make(n);
  x[1000] = INT16_MIN;
  x[1001] = INT16_MAX;
  assert_int_equal(hark_fbank_accept(f, x, n), 0);
  assert_int_equal(hark_fbank_frames_ready(f), (n - 280) / 160 + 1);
  for (int rep = 0; rep < 20; rep++) { /* read and pop as it goes: nothing grows */
    hark_fbank_pop(f, hark_fbank_frames_ready(f));
    assert_int_equal(hark_fbank_accept(f, x, n), 0);
  }
  uint64_t total = hark_fbank_frames_popped(f) + hark_fbank_frames_ready(f);
  assert_int_equal(hark_fbank_finish(f), 0);
  assert_int_equal(hark_fbank_frames_popped(f) + hark_fbank_frames_ready(f),
                   (21 * (uint64_t)n + 80) / 160);
  assert_true(total < (21 * (uint64_t)n + 80) / 160);
  float out[80];
  assert_int_equal(hark_fbank_read(f, SIZE_MAX - 1, 5, out), 0);
  hark_fbank_pop(f, SIZE_MAX);
  assert_int_equal(hark_fbank_frames_ready(f), 0);
  free(x);
  hark_fbank_free(f);
  hark_fbank_bank_free(b);
}

/* Options out of range are refused with a reason; others work. */
static void test_fbank_options(void **state) {
  (void)state;
  char err[128];
  hark_fbank_opts o;
  hark_fbank_opts_default(&o);
  o.dither = 1.0f;
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));
  assert_non_null(strstr(err, "dither"));
  hark_fbank_opts_default(&o);
  o.num_mel_bins = 2;
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));
  hark_fbank_opts_default(&o);
  o.num_mel_bins = 1000; /* more bins than FFT bins between 20 and 7600 Hz */
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));
  assert_non_null(strstr(err, "num_mel_bins"));
  hark_fbank_opts_default(&o);
  o.high_freq = 9000.0f;
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));
  hark_fbank_opts_default(&o);
  o.frame_shift_ms = 0.0f;
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));
  hark_fbank_opts_default(&o);
  o.frame_length_ms = 1e9f;
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));
  hark_fbank_opts_default(&o);
  o.scale = NAN;
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));
  hark_fbank_opts_default(&o);
  o.window = (hark_fbank_window)42;
  assert_null(hark_fbank_bank_new(&o, err, sizeof err));

  /* Every window, energy, snip_edges, a DFT-sized frame: finite features
   * of the expected count and width, chunking-invariant. */
  int16_t *x = signal_make(8000);
  for (int v = 0; v < 6; v++) {
    hark_fbank_opts_default(&o);
    o.window = (hark_fbank_window)(v % 4);
    o.use_energy = v == 4 || v == 5;
    o.energy_floor = v == 5 ? 1.0f : 0.0f;
    o.raw_energy = v != 5;
    o.snip_edges = v == 1 || v == 5;
    o.round_to_power_of_two = v != 3;
    o.use_power = v != 2;
    o.num_mel_bins = 23;
    hark_fbank_bank *b = hark_fbank_bank_new(&o, err, sizeof err);
    assert_non_null(b);
    assert_int_equal(hark_fbank_bank_dim(b), 23 + (size_t)o.use_energy);
    size_t all = 8000, some[] = {33, 160, 1};
    float *r1, *r2;
    size_t n1 = features(b, x, 8000, &all, 1, &r1);
    size_t n2 = features(b, x, 8000, some, 3, &r2);
    assert_int_equal(n1, o.snip_edges ? 1 + (8000 - 400) / 160 : (8000 + 80) / 160);
    assert_int_equal(n1, n2);
    assert_memory_equal(r1, r2, n1 * hark_fbank_bank_dim(b) * sizeof *r1);
    for (size_t k = 0; k < n1 * hark_fbank_bank_dim(b); k++) assert_true(isfinite(r1[k]));
    if (v == 5)
      for (size_t k = 0; k < n1; k++) assert_true(r1[k * 24] >= 0.0f); /* floor log(1) */
    free(r1);
    free(r2);
    hark_fbank_bank_free(b);
  }
  free(x);
}

/* Hundreds of streams on one bank, interleaved, each its own. */
static void test_fbank_many_streams(void **state) {
  (void)state;
  hark_fbank_bank *b = bank_default();
  enum { N = 300 };
  hark_fbank *fs[N];
  int16_t *x = signal_make(4000);
  for (int i = 0; i < N; i++) assert_non_null(fs[i] = hark_fbank_new(b));
  for (size_t off = 0; off < 4000; off += 400)
    for (int i = 0; i < N; i++) assert_int_equal(hark_fbank_accept(fs[i], x + off, 400), 0);
  for (int i = 0; i < N; i++) {
    assert_int_equal(hark_fbank_finish(fs[i]), 0);
    assert_int_equal(hark_fbank_frames_ready(fs[i]), 25);
    assert_memory_equal(hark_fbank_frames(fs[i]), hark_fbank_frames(fs[0]), 25 * 80 * 4);
  }
  for (int i = 0; i < N; i++) hark_fbank_free(fs[i]);
  free(x);
  hark_fbank_bank_free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_fbank_frame_counts),
      cmocka_unit_test(test_fbank_chunking_invariant),
      cmocka_unit_test(test_fbank_streaming_lag),
      cmocka_unit_test(test_fbank_sine_bin),
      cmocka_unit_test(test_fbank_silence_and_empty),
      cmocka_unit_test(test_fbank_long_and_hostile),
      cmocka_unit_test(test_fbank_options),
      cmocka_unit_test(test_fbank_many_streams),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
