/*
 * fbank_cost.c — what hark's streaming filter bank (src/audio/fbank.c)
 * costs per second of audio, alone: bench/neural_streams.sh sets it against
 * the neural encoder's CPU per audio second (issue 26's features figure).
 *
 *   fbank_cost [--seconds S] [--piece-ms MS] FILE.wav...
 *
 * The options are those backend neural_asr gives a model by default
 * (icefall's: 80 mel bins, 25/10 ms, povey window, low 20 Hz, high -400,
 * samples scaled to [-1, 1), snip_edges false). Each file (16-bit PCM) is
 * read into memory, then fed through one stream's hark_fbank_accept in
 * pieces of MS (100, what `hark transcribe --chunk-ms 100` sends), the
 * frames popped as the backend pops them (a 32-frame chunk whenever 45 are
 * ready), hark_fbank_finish at the file's end, and the stream reset for the
 * next: file after file, over and over, until S (default 5) seconds of CPU
 * have gone. CPU is this thread's (CLOCK_THREAD_CPUTIME_ID), around the
 * feeding only. Prints one JSON object: audio_seconds, cpu_s,
 * cpu_per_audio_s, frames, us_per_frame.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hark/audio.h"

typedef struct clip {
  int16_t *pcm;
  size_t n;
} clip;

static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int load(const char *path, clip *c) {
  FILE *f = fopen(path, "rb");
  if (!f) return perror(path), -1;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc((size_t)len);
  if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
    fclose(f);
    free(buf);
    return fprintf(stderr, "%s: cannot read\n", path), -1;
  }
  fclose(f);
  hark_wav_info info;
  char why[256];
  if (hark_wav_parse(buf, (size_t)len, &info, why, sizeof why) != HARK_WAV_OK ||
      info.encoding != HARK_WAV_PCM16 || info.channels != 1 || info.sample_rate != 16000) {
    free(buf);
    return fprintf(stderr, "%s: need a 16 kHz mono 16-bit WAV\n", path), -1;
  }
  c->n = info.data_size / 2;
  c->pcm = malloc(c->n * sizeof *c->pcm);
  if (!c->pcm) return free(buf), -1;
  memcpy(c->pcm, buf + info.data_offset, c->n * sizeof *c->pcm);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  double seconds = 5;
  unsigned piece_ms = 100;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
      seconds = atof(argv[++i]);
    else if (!strcmp(argv[i], "--piece-ms") && i + 1 < argc)
      piece_ms = (unsigned)atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: fbank_cost [--seconds S] [--piece-ms MS] FILE.wav...\n");
      return 2;
    }
  }
  if (i >= argc || piece_ms == 0) {
    fprintf(stderr, "usage: fbank_cost [--seconds S] [--piece-ms MS] FILE.wav...\n");
    return 2;
  }
  int nclips = argc - i;
  clip *clips = calloc((size_t)nclips, sizeof *clips);
  for (int k = 0; k < nclips; k++)
    if (!clips || load(argv[i + k], &clips[k]) != 0) return 1;

  hark_fbank_opts o;
  hark_fbank_opts_default(&o);
  o.sample_rate = 16000;
  o.num_mel_bins = 80;
  o.low_freq = 20;
  o.high_freq = -400;
  o.scale = 1.0f / 32768.0f;
  char why[256];
  hark_fbank_bank *bank = hark_fbank_bank_new(&o, why, sizeof why);
  if (!bank) return fprintf(stderr, "fbank: %s\n", why), 1;
  hark_fbank *fb = hark_fbank_new(bank);
  if (!fb) return 1;
  size_t piece = 16000u * piece_ms / 1000u;
  const size_t T = 45, chunk = 32;
  uint64_t samples = 0, frames = 0;
  double cpu = 0;
  /* One pass untimed: the first touches of the tables and buffers. */
  for (int pass = 0; cpu < seconds; pass++) {
    for (int k = 0; k < nclips; k++) {
      double c0 = thread_cpu();
      for (size_t pos = 0; pos < clips[k].n; pos += piece) {
        size_t n = clips[k].n - pos < piece ? clips[k].n - pos : piece;
        if (hark_fbank_accept(fb, clips[k].pcm + pos, n) != 0) return 1;
        while (hark_fbank_frames_ready(fb) >= T) hark_fbank_pop(fb, chunk);
      }
      if (hark_fbank_finish(fb) != 0) return 1;
      uint64_t made = hark_fbank_frames_popped(fb) + hark_fbank_frames_ready(fb);
      hark_fbank_reset(fb);
      double c1 = thread_cpu();
      if (pass > 0) {
        cpu += c1 - c0;
        samples += clips[k].n;
        frames += made;
      }
    }
  }
  double audio = (double)samples / 16000.0;
  printf(
      "{\"audio_seconds\": %.2f, \"cpu_s\": %.4f, \"cpu_per_audio_s\": %.6f, \"frames\": %llu, "
      "\"us_per_frame\": %.3f, \"piece_ms\": %u}\n",
      audio, cpu, cpu / audio, (unsigned long long)frames, cpu / (double)frames * 1e6, piece_ms);
  hark_fbank_free(fb);
  hark_fbank_bank_free(bank);
  for (int k = 0; k < nclips; k++) free(clips[k].pcm);
  free(clips);
  return 0;
}
