/*
 * fbank_dump — a WAV file (or raw 16-bit PCM) through hark_audio_norm and
 * hark_fbank, the way a backend runs a stream, for tests/e2e/test_fbank.py
 * to compare with torchaudio's Kaldi filter bank.
 *
 *   fbank_dump [--scale S] [--bins N] [--window povey|hamming|hanning|rectangular]
 *              [--snip-edges] [--energy] [--seed N --max-chunk BYTES]
 *              [--bench SECONDS] FILE
 *
 * The file's bytes go to the normaliser in chunks: all at once, or with
 * --seed in uneven chunks of 0..max-chunk bytes (even, so each is whole
 * samples) from a fixed pseudo-random sequence, and each chunk's samples
 * straight on to the filter bank, whose ready frames are read and popped
 * after every chunk, as a recogniser would. Output (stdout): two
 * little-endian uint32 (frames, dim), then frames x dim float32.
 *
 * --bench S: no output; the file's samples through one stream per pass
 * until S seconds of CPU have gone, then one line on stderr: CPU
 * microseconds per second of audio.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hark/audio.h"

static uint32_t rng = 1;
static uint32_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (size_t got; buf && (got = fread(buf + n, 1, cap - n, fp)) > 0;) {
    n += got;
    if (n == cap) buf = realloc(buf, cap *= 2);
  }
  fclose(fp);
  *len = n;
  return buf;
}

static double cpu_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int usage(void) {
  fprintf(stderr,
          "usage: fbank_dump [--scale S] [--bins N] [--window W] [--snip-edges] "
          "[--energy] [--seed N --max-chunk BYTES] [--bench SECONDS] FILE\n");
  return 2;
}

static hark_fbank_window parse_window(const char *s) {
  if (!strcmp(s, "hamming")) return HARK_FBANK_HAMMING;
  if (!strcmp(s, "hanning")) return HARK_FBANK_HANNING;
  if (!strcmp(s, "rectangular")) return HARK_FBANK_RECTANGULAR;
  return HARK_FBANK_POVEY;
}

/* CPU microseconds per second of audio over passes of pcm's n samples. */
static double bench(const hark_fbank_bank *bank, const int16_t *pcm, size_t n, double seconds) {
  hark_fbank *f = hark_fbank_new(bank);
  double t0 = cpu_seconds(), t;
  uint64_t samples = 0;
  do {
    hark_fbank_reset(f);
    for (size_t off = 0; off < n; off += 1600) { /* 100 ms chunks */
      size_t k = n - off < 1600 ? n - off : 1600;
      hark_fbank_accept(f, pcm + off, k);
      hark_fbank_pop(f, hark_fbank_frames_ready(f));
    }
    hark_fbank_finish(f);
    samples += n;
  } while ((t = cpu_seconds() - t0) < seconds);
  hark_fbank_free(f);
  return t * 1e6 / ((double)samples / 16000.0);
}

int main(int argc, char **argv) {
  hark_fbank_opts o;
  hark_fbank_opts_default(&o);
  const char *path = NULL;
  size_t max_chunk = 0;
  double bench_s = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--scale") && v)
      o.scale = strtof(argv[++i], NULL);
    else if (!strcmp(a, "--bins") && v)
      o.num_mel_bins = (uint32_t)atoi(argv[++i]);
    else if (!strcmp(a, "--window") && v)
      o.window = parse_window(argv[++i]);
    else if (!strcmp(a, "--snip-edges"))
      o.snip_edges = 1;
    else if (!strcmp(a, "--energy"))
      o.use_energy = 1;
    else if (!strcmp(a, "--seed") && v)
      rng = (uint32_t)strtoul(argv[++i], NULL, 10) | 1u;
    else if (!strcmp(a, "--max-chunk") && v)
      max_chunk = strtoul(argv[++i], NULL, 10);
    else if (!strcmp(a, "--bench") && v)
      bench_s = strtod(argv[++i], NULL);
    else if (a[0] != '-' && !path)
      path = a;
    else
      return usage();
  }
  if (!path) return usage();
  size_t len;
  uint8_t *data = read_file(path, &len);
  if (!data) {
    perror(path);
    return 1;
  }
  char err[256];
  hark_fbank_bank *bank = hark_fbank_bank_new(&o, err, sizeof err);
  hark_audio_norm *norm =
      hark_audio_norm_new((uint32_t)o.sample_rate, (uint32_t)o.sample_rate, HARK_WAV_PCM16);
  hark_fbank *f = bank ? hark_fbank_new(bank) : NULL;
  if (!bank || !norm || !f) {
    fprintf(stderr, "fbank_dump: %s\n", bank ? "out of memory" : err);
    return 1;
  }
  size_t dim = hark_fbank_bank_dim(bank), frames = 0, cap = 1024;
  float *rows = malloc(cap * dim * sizeof *rows);
  int16_t *all = malloc(4 * len + 16); /* the normalised samples, for --bench */
  size_t n_all = 0;
  for (size_t off = 0;;) {
    size_t k = len - off;
    if (max_chunk && k > 0) {
      size_t want = (next_rand() % (max_chunk + 1)) & ~(size_t)1;
      if (want < k) k = want;
    }
    if (off == 0 && k < 64 && k < len) k = len < 64 ? len : 64; /* the header in one piece */
    int end = off + k == len;
    const int16_t *pcm;
    size_t n;
    hark_audio_norm_status st =
        hark_audio_norm_accept(norm, data + off, k, end, &pcm, &n, err, sizeof err);
    if (st != HARK_AUDIO_NORM_OK) {
      fprintf(stderr, "fbank_dump: %s\n", err);
      return 1;
    }
    if (n && hark_fbank_accept(f, pcm, n) != 0) {
      fprintf(stderr, "fbank_dump: hark_fbank_accept failed\n");
      return 1;
    }
    if (n) memcpy(all + n_all, pcm, n * sizeof *pcm); /* pcm is NULL when n is 0 */
    n_all += n;
    if (end && hark_fbank_finish(f) != 0) return 1;
    size_t ready = hark_fbank_frames_ready(f);
    while (frames + ready > cap) rows = realloc(rows, (cap *= 2) * dim * sizeof *rows);
    /* read in two pieces, as a reader that takes what it needs would */
    size_t first = ready / 2;
    hark_fbank_read(f, 0, first, rows + frames * dim);
    hark_fbank_read(f, first, ready - first, rows + (frames + first) * dim);
    hark_fbank_pop(f, ready);
    frames += ready;
    off += k;
    if (end) break;
  }
  if (bench_s > 0) {
    fprintf(stderr, "fbank_dump: %.1f us CPU per second of audio (%zu bins, %zu samples)\n",
            bench(bank, all, n_all, bench_s), (size_t)o.num_mel_bins, n_all);
  } else {
    uint32_t hdr[2] = {(uint32_t)frames, (uint32_t)dim};
    fwrite(hdr, sizeof hdr, 1, stdout);
    fwrite(rows, sizeof *rows, frames * dim, stdout);
  }
  free(all);
  free(rows);
  free(data);
  hark_fbank_free(f);
  hark_fbank_bank_free(bank);
  hark_audio_norm_free(norm);
  return 0;
}
