/*
 * wav.c — RIFF/WAVE header recognition. Walks the chunk list after the
 * 12-byte RIFF header, reading every size as untrusted: each step checks
 * the remaining length before it reads, and chunk sizes are added with
 * overflow checks. Stops at the "data" chunk, whose size is clamped to the
 * bytes actually present (streaming writers put 0 or 0xffffffff there).
 */
#include "hark/audio.h"

#include <stdio.h>
#include <string.h>

#define WAVE_FORMAT_PCM 1u
#define WAVE_FORMAT_ALAW 6u
#define WAVE_FORMAT_MULAW 7u
#define WAVE_FORMAT_EXTENSIBLE 0xfffeu

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

static hark_wav_status fail(hark_wav_status st, char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return st;
}

int hark_wav_is_wav(const uint8_t *buf, size_t len) {
  return buf && len >= 12 && memcmp(buf, "RIFF", 4) == 0 && memcmp(buf + 8, "WAVE", 4) == 0;
}

static hark_wav_status parse_fmt(const uint8_t *p, uint32_t size, hark_wav_info *info, char *err,
                                 size_t errlen) {
  if (size < 16)
    return fail(HARK_WAV_MALFORMED, err, errlen, "WAV fmt chunk shorter than 16 bytes");
  uint16_t format = rd16(p);
  info->channels = rd16(p + 2);
  info->sample_rate = rd32(p + 4);
  info->bits_per_sample = rd16(p + 14);
  if (format == WAVE_FORMAT_EXTENSIBLE && size >= 26) format = rd16(p + 24); /* sub-format GUID */
  unsigned want_bits = 16;
  switch (format) {
  case WAVE_FORMAT_PCM: info->encoding = HARK_WAV_PCM16; break;
  case WAVE_FORMAT_MULAW: info->encoding = HARK_WAV_MULAW, want_bits = 8; break;
  case WAVE_FORMAT_ALAW: info->encoding = HARK_WAV_ALAW, want_bits = 8; break;
  default: {
    char msg[112];
    snprintf(msg, sizeof msg,
             "unsupported WAV format %u (16-bit PCM, 8-bit mu-law or A-law are supported)", format);
    return fail(HARK_WAV_UNSUPPORTED, err, errlen, msg);
  }
  }
  if (info->bits_per_sample != want_bits) {
    char msg[112];
    snprintf(msg, sizeof msg, "unsupported WAV sample width %u bits (%s is %u-bit)",
             info->bits_per_sample, want_bits == 16 ? "PCM" : "G.711", want_bits);
    return fail(HARK_WAV_UNSUPPORTED, err, errlen, msg);
  }
  if (info->channels == 0)
    return fail(HARK_WAV_MALFORMED, err, errlen, "WAV header has 0 channels");
  if (info->sample_rate == 0) return fail(HARK_WAV_MALFORMED, err, errlen, "WAV header has rate 0");
  return HARK_WAV_OK;
}

hark_wav_status hark_wav_parse(const uint8_t *buf, size_t len, hark_wav_info *info, char *err,
                               size_t errlen) {
  hark_wav_info tmp;
  memset(&tmp, 0, sizeof tmp);
  if (!hark_wav_is_wav(buf, len)) {
    if (buf && len >= 4 && memcmp(buf, "RIFF", 4) == 0 && len < 12)
      return fail(HARK_WAV_TRUNCATED, err, errlen, "WAV header truncated");
    return fail(HARK_WAV_NOT_WAV, err, errlen, "not a RIFF/WAVE file");
  }
  size_t pos = 12;
  int have_fmt = 0;
  for (;;) {
    if (len - pos < 8)
      return fail(HARK_WAV_TRUNCATED, err, errlen, "WAV header truncated before its data chunk");
    const uint8_t *ck = buf + pos;
    uint32_t size = rd32(ck + 4);
    pos += 8;
    if (memcmp(ck, "data", 4) == 0) {
      if (!have_fmt)
        return fail(HARK_WAV_MALFORMED, err, errlen, "WAV data chunk before fmt chunk");
      tmp.data_offset = pos;
      tmp.data_size = len - pos;
      if (size < tmp.data_size) tmp.data_size = size;
      *info = tmp;
      return HARK_WAV_OK;
    }
    if (memcmp(ck, "fmt ", 4) == 0) {
      if (size > len - pos) return fail(HARK_WAV_TRUNCATED, err, errlen, "WAV fmt chunk truncated");
      hark_wav_status st = parse_fmt(buf + pos, size, &tmp, err, errlen);
      if (st != HARK_WAV_OK) return st;
      have_fmt = 1;
    }
    /* Chunks are padded to an even size. */
    uint64_t skip = (uint64_t)size + (size & 1u);
    if (skip > len - pos)
      return fail(HARK_WAV_TRUNCATED, err, errlen, "WAV header truncated inside a chunk");
    pos += (size_t)skip;
  }
}
