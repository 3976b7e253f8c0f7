/*
 * decode.c — whole recordings in any format a Riva client sends offline
 * (WAV of any sample format, FLAC, Ogg Opus, ...) decoded with libsndfile,
 * which reads them from memory through its virtual I/O, and turned into
 * 16-bit mono PCM at a rate the recognisers take: one channel, or all of
 * them mixed down, resampled (hark_resampler) when the recording's rate is
 * outside the range a model reads. Raw interleaved PCM becomes a clip too,
 * so every offline request goes the same way. Memory is the caller's: a
 * clip's samples are malloc'd here and freed by hark_audio_clip_free.
 */
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hark/audio.h"

typedef struct mem_file {
  const uint8_t *buf;
  sf_count_t len, pos;
} mem_file;

static sf_count_t mem_len(void *p) { return ((mem_file *)p)->len; }
static sf_count_t mem_tell(void *p) { return ((mem_file *)p)->pos; }

static sf_count_t mem_seek(sf_count_t off, int whence, void *p) {
  mem_file *m = p;
  sf_count_t base = whence == SEEK_CUR ? m->pos : whence == SEEK_END ? m->len : 0;
  sf_count_t to = base + off;
  if (to < 0 || to > m->len) return -1;
  m->pos = to;
  return to;
}

static sf_count_t mem_read(void *dst, sf_count_t n, void *p) {
  mem_file *m = p;
  sf_count_t left = m->len - m->pos;
  if (n > left) n = left;
  if (n > 0) memcpy(dst, m->buf + m->pos, (size_t)n);
  m->pos += n;
  return n;
}

static sf_count_t mem_write(const void *src, sf_count_t n, void *p) {
  (void)src, (void)n, (void)p;
  return 0;
}

static int fail(char *err, size_t errlen, const char *what) {
  if (err && errlen) snprintf(err, errlen, "%s", what);
  return -1;
}

void hark_audio_clip_free(hark_audio_clip *clip) {
  free(clip->samples);
  memset(clip, 0, sizeof *clip);
}

int hark_audio_clip_decode(const uint8_t *buf, size_t len, size_t max_samples,
                           hark_audio_clip *clip, char *err, size_t errlen) {
  memset(clip, 0, sizeof *clip);
  SF_VIRTUAL_IO io = {mem_len, mem_seek, mem_read, mem_write, mem_tell};
  mem_file m = {buf, (sf_count_t)len, 0};
  SF_INFO info;
  memset(&info, 0, sizeof info);
  SNDFILE *f = sf_open_virtual(&io, SFM_READ, &info, &m);
  if (!f) {
    char why[160];
    snprintf(why, sizeof why, "AUDIO: cannot decode the audio: %s", sf_strerror(NULL));
    return fail(err, errlen, why);
  }
  if (info.channels < 1 || info.channels > (int)HARK_AUDIO_MAX_CHANNELS || info.samplerate < 1) {
    sf_close(f);
    char why[160];
    snprintf(why, sizeof why, "AUDIO: %d channels at %d Hz: 1..%u channels are supported",
             info.channels, info.samplerate, HARK_AUDIO_MAX_CHANNELS);
    return fail(err, errlen, why);
  }
  clip->channels = (uint32_t)info.channels;
  clip->rate = (uint32_t)info.samplerate;
  /* Frames are read in blocks: some formats (Ogg) do not know their length. */
  size_t cap = 0, frames = 0, ch = clip->channels;
  float *s = NULL;
  for (;;) {
    if ((frames + 4096) * ch > cap) {
      size_t want = cap ? cap * 2 : 65536 * ch;
      if (max_samples && want > max_samples + 4096 * ch) want = max_samples + 4096 * ch;
      float *ns = want > cap ? realloc(s, want * sizeof *ns) : NULL;
      if (!ns) {
        free(s);
        sf_close(f);
        return fail(err, errlen,
                    want > cap ? "out of memory for the decoded audio"
                               : "AUDIO: the decoded audio is too long");
      }
      s = ns;
      cap = want;
    }
    sf_count_t got = sf_readf_float(f, s + frames * ch, 4096);
    if (got <= 0) break;
    frames += (size_t)got;
    if (max_samples && frames * ch > max_samples) {
      free(s);
      sf_close(f);
      return fail(err, errlen, "AUDIO: the decoded audio is too long");
    }
  }
  int e = sf_error(f);
  sf_close(f);
  if (e != SF_ERR_NO_ERROR && frames == 0) {
    free(s);
    char why[160];
    snprintf(why, sizeof why, "AUDIO: cannot decode the audio: %s", sf_error_number(e));
    return fail(err, errlen, why);
  }
  clip->samples = s;
  clip->frames = frames;
  return 0;
}

int hark_audio_clip_from_pcm16(const uint8_t *buf, size_t len, uint32_t channels, uint32_t rate,
                               hark_audio_clip *clip, char *err, size_t errlen) {
  memset(clip, 0, sizeof *clip);
  if (channels < 1 || channels > HARK_AUDIO_MAX_CHANNELS)
    return fail(err, errlen, "AUDIO: unsupported channel count");
  size_t bytes_per_frame = 2u * channels;
  if (len % bytes_per_frame) {
    char why[160];
    snprintf(why, sizeof why,
             "AUDIO: %zu bytes is not a whole number of frames of %u 16-bit channels", len,
             channels);
    return fail(err, errlen, why);
  }
  size_t n = len / 2;
  float *s = malloc(n ? n * sizeof *s : 1);
  if (!s) return fail(err, errlen, "out of memory for the audio");
  for (size_t i = 0; i < n; i++)
    s[i] = (float)(int16_t)(uint16_t)(buf[2 * i] | buf[2 * i + 1] << 8) * (1.0f / 32768.0f);
  clip->samples = s;
  clip->frames = n / channels;
  clip->channels = channels;
  clip->rate = rate;
  return 0;
}

static int16_t to16(float v) {
  float x = v * 32768.0f;
  x = x >= 0 ? x + 0.5f : x - 0.5f;
  return (int16_t)(x > 32767.0f ? 32767.0f : x < -32768.0f ? -32768.0f : x);
}

int hark_audio_clip_pcm16(const hark_audio_clip *clip, int channel, uint32_t out_rate,
                          int16_t **out, size_t *out_n, char *err, size_t errlen) {
  *out = NULL;
  *out_n = 0;
  size_t n = clip->frames, ch = clip->channels;
  int16_t *x = malloc(n ? n * sizeof *x : 1);
  if (!x) return fail(err, errlen, "out of memory for the audio");
  for (size_t i = 0; i < n; i++) {
    const float *f = clip->samples + i * ch;
    if (channel >= 0) {
      x[i] = to16(f[channel]);
    } else {
      float sum = 0;
      for (size_t c = 0; c < ch; c++) sum += f[c];
      x[i] = to16(sum / (float)ch);
    }
  }
  if (!out_rate || out_rate == clip->rate) {
    *out = x;
    *out_n = n;
    return 0;
  }
  hark_resampler *r = hark_resampler_new(clip->rate, out_rate, err, errlen);
  if (!r) {
    free(x);
    return -1;
  }
  const int16_t *y;
  size_t ny = 0;
  int16_t *res = NULL;
  if (hark_resampler_process(r, x, n, 1, &y, &ny) == 0 && (res = malloc(ny ? ny * 2 : 1)))
    memcpy(res, y, ny * sizeof *y);
  hark_resampler_free(r);
  free(x);
  if (!res) return fail(err, errlen, "resampling failed");
  *out = res;
  *out_n = ny;
  return 0;
}
