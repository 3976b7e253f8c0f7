/*
 * g711.c — mu-law and A-law (ITU-T G.711) to 16-bit linear PCM, for
 * telephone audio (Riva's MULAW and ALAW encodings, G.711 WAV files).
 */
#include "hark/audio.h"

int16_t hark_audio_mulaw_sample(uint8_t b) {
  b = (uint8_t)~b;
  int t = (((b & 0x0F) << 3) + 0x84) << ((b & 0x70) >> 4);
  return (int16_t)((b & 0x80) ? 0x84 - t : t - 0x84);
}

int16_t hark_audio_alaw_sample(uint8_t b) {
  b ^= 0x55;
  int seg = (b & 0x70) >> 4;
  int t = (b & 0x0F) << 4;
  t = seg == 0 ? t + 8 : (t + 0x108) << (seg - 1);
  return (int16_t)((b & 0x80) ? t : -t);
}

static void put16(uint8_t *out, int16_t s) {
  uint16_t u = (uint16_t)s;
  out[0] = (uint8_t)(u & 0xFF);
  out[1] = (uint8_t)(u >> 8);
}

void hark_audio_mulaw_to_pcm16le(const uint8_t *in, size_t n, uint8_t *out) {
  for (size_t i = 0; i < n; i++) put16(out + 2 * i, hark_audio_mulaw_sample(in[i]));
}

void hark_audio_alaw_to_pcm16le(const uint8_t *in, size_t n, uint8_t *out) {
  for (size_t i = 0; i < n; i++) put16(out + 2 * i, hark_audio_alaw_sample(in[i]));
}
