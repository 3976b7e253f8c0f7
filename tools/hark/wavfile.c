/*
 * wavfile.c — see wavfile.h. The whole file is read into memory; the
 * header is parsed by the audio library (audio/wav.h, shared with the
 * server), and the samples are copied out as mono.
 */
#include "wavfile.h"

#include "hark/audio.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WAV_MAX_BYTES (1u << 30)

static unsigned char *slurp(const char *path, size_t *len, char *err, size_t errcap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(err, errcap, "%s: %s", path, strerror(errno));
    return NULL;
  }
  size_t cap = 1 << 16, n = 0;
  unsigned char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    if (cap >= WAV_MAX_BYTES) {
      snprintf(err, errcap, "%s: larger than %u bytes", path, WAV_MAX_BYTES);
      free(buf);
      fclose(f);
      return NULL;
    }
    unsigned char *p = realloc(buf, cap * 2);
    if (!p) free(buf);
    buf = p;
    cap *= 2;
  }
  bool bad = !buf || ferror(f);
  fclose(f);
  if (bad) {
    snprintf(err, errcap, "%s: %s", path, buf ? "read error" : "out of memory");
    free(buf);
    return NULL;
  }
  *len = n;
  return buf;
}

int wavfile_read(const char *path, wavfile *w, char *err, size_t errcap) {
  *w = (wavfile){0};
  size_t len;
  unsigned char *buf = slurp(path, &len, err, errcap);
  if (!buf) return -1;
  hark_wav_info info;
  char why[256];
  if (hark_wav_parse(buf, len, &info, why, sizeof why) != HARK_WAV_OK) {
    snprintf(err, errcap, "%s: %s", path, why);
    free(buf);
    return -1;
  }
  size_t frame = 2u * info.channels, frames = info.data_size / frame;
  w->samples = malloc((frames ? frames : 1) * sizeof *w->samples);
  if (!w->samples) {
    snprintf(err, errcap, "%s: out of memory", path);
    free(buf);
    return -1;
  }
  for (size_t i = 0; i < frames; i++) { /* little-endian in the file; channels averaged */
    const unsigned char *p = buf + info.data_offset + i * frame;
    int32_t sum = 0;
    for (unsigned c = 0; c < info.channels; c++)
      sum += (int16_t)(uint16_t)(p[2 * c] | p[2 * c + 1] << 8);
    w->samples[i] = (int16_t)(sum / (int32_t)info.channels);
  }
  w->n = frames;
  w->sample_rate = (int)info.sample_rate;
  w->channels = info.channels;
  free(buf);
  return 0;
}

void wavfile_free(wavfile *w) {
  free(w->samples);
  *w = (wavfile){0};
}
