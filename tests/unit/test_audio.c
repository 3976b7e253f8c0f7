/* Unit tests for src/audio: wav.c (header parsing) and resample.c. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hark/audio.h"

static size_t make_wav(uint8_t *b, uint16_t fmt, uint16_t ch, uint32_t rate, uint16_t bits,
                       int with_list, uint32_t data_len) {
  size_t p = 0;
  memcpy(b, "RIFF\0\0\0\0WAVE", 12);
  p = 12;
  if (with_list) {
    memcpy(b + p, "LIST\x05\0\0\0abcde\0", 14); /* odd size: padded */
    p += 14;
  }
  memcpy(b + p, "fmt \x10\0\0\0", 8);
  p += 8;
  b[p] = (uint8_t)fmt;
  b[p + 1] = (uint8_t)(fmt >> 8);
  b[p + 2] = (uint8_t)ch;
  b[p + 3] = 0;
  memcpy(b + p + 4, &rate, 4);
  uint32_t br = rate * ch * bits / 8;
  memcpy(b + p + 8, &br, 4);
  b[p + 12] = (uint8_t)(ch * bits / 8);
  b[p + 13] = 0;
  b[p + 14] = (uint8_t)bits;
  b[p + 15] = 0;
  p += 16;
  memcpy(b + p, "data", 4);
  memcpy(b + p + 4, &data_len, 4);
  p += 8;
  return p;
}

static void test_wav_plain_and_extra_chunks(void **state) {
  (void)state;
  uint8_t b[256] = {0};
  hark_wav_info info;
  char err[128];
  size_t off = make_wav(b, 1, 1, 16000, 16, 0, 100);
  assert_int_equal(hark_wav_parse(b, off + 100, &info, err, sizeof err), HARK_WAV_OK);
  assert_int_equal(info.data_offset, 44);
  assert_int_equal(info.sample_rate, 16000);
  assert_int_equal(info.channels, 1);
  assert_int_equal(info.data_size, 100);
  off = make_wav(b, 1, 2, 8000, 16, 1, 0xffffffffu); /* streaming writer size */
  assert_int_equal(hark_wav_parse(b, off + 10, &info, err, sizeof err), HARK_WAV_OK);
  assert_int_equal(info.data_offset, off);
  assert_int_equal(info.data_size, 10);
  assert_int_equal(info.channels, 2);
}

/* G.711 WAV files (format 7 mu-law, 6 A-law; 8 bits) are recognised. */
static void test_wav_g711(void **state) {
  (void)state;
  uint8_t b[256] = {0};
  hark_wav_info info;
  char err[128];
  size_t off = make_wav(b, 7, 1, 8000, 8, 0, 50);
  assert_int_equal(hark_wav_parse(b, off + 50, &info, err, sizeof err), HARK_WAV_OK);
  assert_int_equal(info.encoding, HARK_WAV_MULAW);
  assert_int_equal(info.sample_rate, 8000);
  assert_int_equal(info.data_size, 50);
  off = make_wav(b, 6, 1, 8000, 8, 0, 0);
  assert_int_equal(hark_wav_parse(b, off, &info, err, sizeof err), HARK_WAV_OK);
  assert_int_equal(info.encoding, HARK_WAV_ALAW);
  off = make_wav(b, 1, 1, 16000, 16, 0, 0);
  assert_int_equal(hark_wav_parse(b, off, &info, err, sizeof err), HARK_WAV_OK);
  assert_int_equal(info.encoding, HARK_WAV_PCM16);
}

static void test_wav_errors(void **state) {
  (void)state;
  uint8_t b[256] = {0};
  hark_wav_info info;
  char err[128];
  assert_int_equal(hark_wav_parse((const uint8_t *)"\x01\x02\x03\x04", 4, &info, err, sizeof err),
                   HARK_WAV_NOT_WAV);
  size_t off = make_wav(b, 3, 1, 16000, 32, 0, 0); /* float */
  assert_int_equal(hark_wav_parse(b, off, &info, err, sizeof err), HARK_WAV_UNSUPPORTED);
  assert_non_null(strstr(err, "16-bit PCM"));
  off = make_wav(b, 1, 1, 16000, 8, 0, 0);
  assert_int_equal(hark_wav_parse(b, off, &info, err, sizeof err), HARK_WAV_UNSUPPORTED);
  off = make_wav(b, 7, 1, 8000, 16, 0, 0); /* mu-law is 8-bit */
  assert_int_equal(hark_wav_parse(b, off, &info, err, sizeof err), HARK_WAV_UNSUPPORTED);
  assert_non_null(strstr(err, "G.711 is 8-bit"));
  off = make_wav(b, 1, 1, 16000, 16, 1, 0);
  for (size_t n = 12; n < off; n++) /* every truncation is refused cleanly */
    assert_int_equal(hark_wav_parse(b, n, &info, err, sizeof err), HARK_WAV_TRUNCATED);
  memcpy(b + 16, "\xff\xff\xff\xff", 4); /* a huge LIST chunk */
  assert_int_equal(hark_wav_parse(b, off, &info, err, sizeof err), HARK_WAV_TRUNCATED);
  off = make_wav(b, 1, 0, 16000, 16, 0, 0);
  assert_int_equal(hark_wav_parse(b, off, &info, err, sizeof err), HARK_WAV_MALFORMED);
}

static void test_resample_passthrough_is_exact(void **state) {
  (void)state;
  char err[128];
  hark_resampler *r = hark_resampler_new(16000, 16000, err, sizeof err);
  assert_non_null(r);
  int16_t x[5] = {1, -2, 3, 32767, -32768};
  const int16_t *y;
  size_t n;
  assert_int_equal(hark_resampler_process(r, x, 5, 0, &y, &n), 0);
  assert_int_equal(n, 5);
  assert_memory_equal(x, y, sizeof x);
  hark_resampler_free(r);
  assert_null(hark_resampler_new(999, 16000, err, sizeof err));
  assert_non_null(strstr(err, "outside"));
  assert_null(hark_resampler_new(16000, 384001, err, sizeof err));
  hark_resampler *wide = hark_resampler_new(96000, 16000, err, sizeof err); /* decoded files */
  assert_non_null(wide);
  hark_resampler_free(wide);
}

static void test_resample_streaming_lengths_and_tone(void **state) {
  (void)state;
  uint32_t rates[] = {8000, 11025, 22050, 44100, 48000};
  for (size_t k = 0; k < sizeof rates / sizeof *rates; k++) {
    char err[128];
    hark_resampler *r = hark_resampler_new(rates[k], 16000, err, sizeof err);
    assert_non_null(r);
    size_t total_in = rates[k], total_out = 0; /* one second of a 440 Hz tone */
    int16_t *in = malloc(total_in * 2), *out = malloc(32000 * 2);
    for (size_t i = 0; i < total_in; i++)
      in[i] = (int16_t)(10000 * sin(2 * M_PI * 440 * (double)i / rates[k]));
    for (size_t off = 0; off < total_in; off += 999) { /* odd chunk sizes */
      size_t n = total_in - off < 999 ? total_in - off : 999;
      const int16_t *y;
      size_t m;
      assert_int_equal(hark_resampler_process(r, in + off, n, 0, &y, &m), 0);
      assert_true(total_out + m <= 32000);
      memcpy(out + total_out, y, m * 2);
      total_out += m;
    }
    const int16_t *y;
    size_t m;
    assert_int_equal(hark_resampler_process(r, NULL, 0, 1, &y, &m), 0);
    memcpy(out + total_out, y, m * 2);
    total_out += m;
    assert_true(total_out >= 15990 && total_out <= 16010);
    /* The tone survives: compare with the ideal 16 kHz tone mid-signal. */
    double errsum = 0;
    for (size_t i = 4000; i < 12000; i++) {
      double want = 10000 * sin(2 * M_PI * 440 * (double)i / 16000);
      errsum += fabs(out[i] - want);
    }
    assert_true(errsum / 8000 < 200);
    free(in);
    free(out);
    hark_resampler_free(r);
  }
}

/* Resamples `in` (n samples at `rate`) to 16 kHz in chunks of `chunk`,
 * flushing at the end; returns the output length, output in out[cap]. */
static size_t resample_all(uint32_t rate, const int16_t *in, size_t n, size_t chunk, int16_t *out,
                           size_t cap) {
  char err[128];
  hark_resampler *r = hark_resampler_new(rate, 16000, err, sizeof err);
  assert_non_null(r);
  size_t total = 0;
  const int16_t *y;
  size_t m;
  for (size_t off = 0; off < n; off += chunk) {
    size_t k = n - off < chunk ? n - off : chunk;
    assert_int_equal(hark_resampler_process(r, in + off, k, 0, &y, &m), 0);
    assert_true(total + m <= cap);
    memcpy(out + total, y, m * 2);
    total += m;
  }
  assert_int_equal(hark_resampler_process(r, NULL, 0, 1, &y, &m), 0);
  assert_true(total + m <= cap);
  memcpy(out + total, y, m * 2);
  hark_resampler_free(r);
  return total + m;
}

/* The same audio gives the same samples: the dither's generator has a
 * fixed seed (soxr seeds its own from the clock and an address), and
 * chunking does not matter. A quiet signal, where the dither's least
 * significant bit shows. */
static void test_resample_is_deterministic(void **state) {
  (void)state;
  size_t n = 8000;
  int16_t *in = malloc(n * 2), *a = malloc(20000 * 2), *b = malloc(20000 * 2);
  for (size_t i = 0; i < n; i++) in[i] = (int16_t)(3 * sin(2 * M_PI * 300 * (double)i / 8000));
  size_t na = resample_all(8000, in, n, 800, a, 20000);
  for (int run = 0; run < 5; run++) {
    size_t chunk = run == 0 ? 800 : (size_t)(137 * run + 1);
    size_t nb = resample_all(8000, in, n, chunk, b, 20000);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * 2);
  }
  free(in);
  free(a);
  free(b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wav_plain_and_extra_chunks),
      cmocka_unit_test(test_wav_g711),
      cmocka_unit_test(test_wav_errors),
      cmocka_unit_test(test_resample_passthrough_is_exact),
      cmocka_unit_test(test_resample_streaming_lengths_and_tone),
      cmocka_unit_test(test_resample_is_deterministic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
