/* Unit tests for src/audio/normalise.c: a stream's bytes (raw PCM, G.711,
 * or a WAV file first) to 16-bit samples at the model's rate, and the
 * errors a client reads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hark/audio.h"

/* A 44-byte WAV header (fmt 1 PCM, 6 A-law, 7 mu-law) for data_len bytes. */
static size_t make_wav(uint8_t *b, uint16_t fmt, uint16_t ch, uint32_t rate, uint16_t bits,
                       uint32_t data_len) {
  memcpy(b, "RIFF\0\0\0\0WAVEfmt \x10\0\0\0", 20);
  b[20] = (uint8_t)fmt;
  b[21] = (uint8_t)(fmt >> 8);
  b[22] = (uint8_t)ch;
  b[23] = 0;
  memcpy(b + 24, &rate, 4);
  uint32_t br = rate * ch * bits / 8;
  memcpy(b + 28, &br, 4);
  b[32] = (uint8_t)(ch * bits / 8);
  b[33] = 0;
  b[34] = (uint8_t)bits;
  b[35] = 0;
  memcpy(b + 36, "data", 4);
  memcpy(b + 40, &data_len, 4);
  return 44;
}

static hark_audio_norm_status feed(hark_audio_norm *a, const void *data, size_t len, int flush,
                                   const int16_t **out, size_t *n, char *err) {
  return hark_audio_norm_accept(a, data, len, flush, out, n, err, 160);
}

/* Raw 16-bit PCM at the model's rate passes through unchanged; an odd byte
 * count is refused with the message clients have always read. */
static void test_norm_raw_passthrough(void **state) {
  (void)state;
  hark_audio_norm *a = hark_audio_norm_new(16000, 16000, HARK_WAV_PCM16);
  assert_non_null(a);
  int16_t x[100];
  for (int i = 0; i < 100; i++) x[i] = (int16_t)(i * 300 - 15000);
  const int16_t *y;
  size_t n;
  char err[160];
  assert_int_equal(feed(a, x, 0, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 0);
  assert_int_equal(feed(a, x, 200, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 100);
  assert_memory_equal(y, x, 200);
  assert_int_equal(feed(a, x, 3, 0, &y, &n, err), HARK_AUDIO_NORM_ODD_BYTES);
  assert_string_equal(err, "AUDIO: 3 bytes is not a whole number of 16-bit samples");
  assert_int_equal(n, 0);
  assert_int_equal(hark_audio_norm_check(a, 5, err, sizeof err), HARK_AUDIO_NORM_ODD_BYTES);
  assert_int_equal(hark_audio_norm_check(a, 6, err, sizeof err), HARK_AUDIO_NORM_OK);
  /* a later chunk that happens to start with "RIFF" is audio, not a header */
  uint8_t riff[44];
  make_wav(riff, 1, 1, 8000, 16, 0);
  assert_int_equal(feed(a, riff, 44, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 22);
  assert_int_equal(hark_audio_norm_in_rate(a), 16000);
  assert_int_equal(feed(a, NULL, 0, 1, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 0);
  hark_audio_norm_free(a);
  hark_audio_norm_free(NULL);
}

/* A WAV header's rate and encoding win; its header is skipped. */
static void test_norm_wav_header(void **state) {
  (void)state;
  uint8_t buf[44 + 64];
  size_t off = make_wav(buf, 1, 1, 16000, 16, 64);
  for (int i = 0; i < 64; i++) buf[off + i] = (uint8_t)(i * 7);
  hark_audio_norm *a = hark_audio_norm_new(8000, 16000, HARK_WAV_PCM16);
  const int16_t *y;
  size_t n;
  char err[160];
  assert_int_equal(feed(a, buf, sizeof buf, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(hark_audio_norm_in_rate(a), 16000);
  assert_int_equal(hark_audio_norm_out_rate(a), 16000);
  assert_int_equal(hark_audio_norm_encoding(a), HARK_WAV_PCM16);
  assert_int_equal(n, 32);
  assert_memory_equal(y, buf + off, 64);
  hark_audio_norm_free(a);

  /* begin alone, as a caller that slices a long message does */
  a = hark_audio_norm_new(8000, 16000, HARK_WAV_PCM16);
  const uint8_t *p = buf;
  size_t len = 44 + 63; /* an odd data chunk: rounded down to whole samples */
  assert_int_equal(hark_audio_norm_begin(a, &p, &len, err, sizeof err), HARK_AUDIO_NORM_OK);
  assert_ptr_equal(p, buf + 44);
  assert_int_equal(len, 62);
  assert_int_equal(hark_audio_norm_sample_bytes(a), 2);
  assert_int_equal(feed(a, p, 32, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 16);
  assert_int_equal(feed(a, p + 32, 30, 1, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 15);
  hark_audio_norm_free(a);
}

/* G.711: from a WAV header, or as the stream's own encoding; one byte a
 * sample, so odd counts are fine. */
static void test_norm_g711(void **state) {
  (void)state;
  uint8_t buf[44 + 5] = {0};
  size_t off = make_wav(buf, 7, 1, 16000, 8, 5);
  memcpy(buf + off, "\x00\x7f\x80\xff\x55", 5);
  hark_audio_norm *a = hark_audio_norm_new(16000, 16000, HARK_WAV_PCM16);
  const int16_t *y;
  size_t n;
  char err[160];
  assert_int_equal(feed(a, buf, sizeof buf, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(hark_audio_norm_encoding(a), HARK_WAV_MULAW);
  assert_int_equal(hark_audio_norm_sample_bytes(a), 1);
  assert_int_equal(n, 5);
  for (int i = 0; i < 5; i++) assert_int_equal(y[i], hark_audio_mulaw_sample(buf[off + i]));
  assert_int_equal(feed(a, "\x12\x34\x56", 3, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 3);
  assert_int_equal(y[2], hark_audio_mulaw_sample(0x56));
  hark_audio_norm_free(a);

  a = hark_audio_norm_new(16000, 16000, HARK_WAV_ALAW);
  assert_int_equal(feed(a, "\xd5\x2a\x80", 3, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 3);
  assert_int_equal(y[0], hark_audio_alaw_sample(0xd5));
  assert_int_equal(y[1], hark_audio_alaw_sample(0x2a));
  hark_audio_norm_free(a);
}

/* Stereo, truncated and unsupported WAV headers: one clear line each, and
 * the next input is looked at again. */
static void test_norm_bad_wav(void **state) {
  (void)state;
  uint8_t buf[44 + 8] = {0};
  const int16_t *y;
  size_t n;
  char err[160];
  hark_audio_norm *a = hark_audio_norm_new(16000, 16000, HARK_WAV_PCM16);
  make_wav(buf, 1, 2, 16000, 16, 8);
  assert_int_equal(feed(a, buf, sizeof buf, 0, &y, &n, err), HARK_AUDIO_NORM_CHANNELS);
  assert_string_equal(err, "AUDIO: WAV has 2 channels; only mono is supported");
  assert_int_equal(n, 0);
  assert_int_equal(feed(a, buf, 30, 0, &y, &n, err), HARK_AUDIO_NORM_BAD_WAV);
  assert_non_null(strstr(err, "AUDIO: WAV"));
  assert_non_null(strstr(err, "truncated"));
  make_wav(buf, 3, 1, 16000, 32, 8); /* IEEE float */
  assert_int_equal(feed(a, buf, sizeof buf, 0, &y, &n, err), HARK_AUDIO_NORM_BAD_WAV);
  assert_non_null(strstr(err, "AUDIO: unsupported WAV format 3"));
  make_wav(buf, 1, 1, 16000, 16, 8); /* now a good one */
  assert_int_equal(feed(a, buf, sizeof buf, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(n, 4);
  hark_audio_norm_free(a);
}

/* Rates: checked when the resampler is made, so a WAV header may rescue a
 * stream whose own rate is bad; a bad WAV rate is refused at the header. */
static void test_norm_rates(void **state) {
  (void)state;
  const int16_t *y;
  size_t n;
  char err[160];
  int16_t x[10] = {0};
  hark_audio_norm *a = hark_audio_norm_new(4000, 16000, HARK_WAV_PCM16);
  assert_non_null(a);
  assert_int_equal(feed(a, x, 20, 0, &y, &n, err), HARK_AUDIO_NORM_BAD_RATE);
  assert_non_null(strstr(err, "4000"));
  assert_int_equal(hark_audio_norm_in_rate(a), 4000);
  hark_audio_norm_free(a);

  a = hark_audio_norm_new(4000, 16000, HARK_WAV_PCM16); /* the end of a stream with no audio */
  assert_int_equal(feed(a, NULL, 0, 1, &y, &n, err), HARK_AUDIO_NORM_BAD_RATE);
  hark_audio_norm_free(a);

  uint8_t buf[44 + 20] = {0};
  make_wav(buf, 1, 1, 8000, 16, 20);
  a = hark_audio_norm_new(4000, 16000, HARK_WAV_PCM16);
  assert_int_equal(feed(a, buf, sizeof buf, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  assert_int_equal(hark_audio_norm_in_rate(a), 8000);
  hark_audio_norm_free(a);

  make_wav(buf, 1, 1, 96000, 16, 20);
  a = hark_audio_norm_new(16000, 16000, HARK_WAV_PCM16);
  const uint8_t *p = buf;
  size_t len = sizeof buf;
  assert_int_equal(hark_audio_norm_begin(a, &p, &len, err, sizeof err), HARK_AUDIO_NORM_BAD_RATE);
  assert_int_equal(hark_audio_norm_in_rate(a), 96000);
  assert_ptr_equal(p, buf);
  hark_audio_norm_free(a);
}

/* 8 kHz to 16 kHz: twice the samples once flushed, a sine still a sine;
 * hostile sizes (one sample at a time, a large block) work. */
static void test_norm_resample(void **state) {
  (void)state;
  enum { N = 8000 };
  int16_t *x = malloc(N * sizeof *x);
  for (int i = 0; i < N; i++) x[i] = (int16_t)(i % 16 < 8 ? 8000 : -8000);
  const int16_t *y;
  size_t n, total = 0;
  char err[160];
  hark_audio_norm *a = hark_audio_norm_new(8000, 16000, HARK_WAV_PCM16);
  for (int i = 0; i < 100; i++) {
    assert_int_equal(feed(a, x + i, 2, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
    total += n;
  }
  assert_int_equal(feed(a, x + 100, (N - 100) * 2, 0, &y, &n, err), HARK_AUDIO_NORM_OK);
  total += n;
  assert_int_equal(feed(a, NULL, 0, 1, &y, &n, err), HARK_AUDIO_NORM_OK);
  total += n;
  assert_true(total >= 2 * N - 2 && total <= 2 * N + 2);
  hark_audio_norm_free(a);
  free(x);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_norm_raw_passthrough),
      cmocka_unit_test(test_norm_wav_header),
      cmocka_unit_test(test_norm_g711),
      cmocka_unit_test(test_norm_bad_wav),
      cmocka_unit_test(test_norm_rates),
      cmocka_unit_test(test_norm_resample),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
