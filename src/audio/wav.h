/*
 * audio/wav.h — recognises a RIFF/WAVE header at the start of a byte
 * buffer (16-bit PCM only), so a client may send a .wav file where raw PCM
 * is expected. Pure parsing: no allocation, safe on truncated or hostile
 * input, and independent of the engine (the CLI links it too).
 */
#ifndef HARK_AUDIO_WAV_H
#define HARK_AUDIO_WAV_H

#include <stddef.h>
#include <stdint.h>

typedef struct hark_wav_info {
  uint32_t sample_rate;
  uint16_t channels;
  uint16_t bits_per_sample;
  size_t data_offset; /* first byte of the samples in the buffer */
  size_t data_size;   /* bytes of samples present (clamped to the buffer) */
} hark_wav_info;

typedef enum hark_wav_status {
  HARK_WAV_OK = 0,
  HARK_WAV_NOT_WAV,     /* does not start with "RIFF....WAVE": raw PCM */
  HARK_WAV_TRUNCATED,   /* a WAV header that ends before its data chunk */
  HARK_WAV_UNSUPPORTED, /* a WAV, but not 16-bit integer PCM */
  HARK_WAV_MALFORMED,   /* inconsistent chunk sizes or fields */
} hark_wav_status;

/* True when buf starts with a RIFF/WAVE signature (12 bytes). */
int hark_wav_is_wav(const uint8_t *buf, size_t len);

/*
 * Parses the header at the start of buf. On HARK_WAV_OK fills *info. On
 * any other status writes a one-line reason into err (when errlen > 0).
 * Chunks other than "fmt " and "data" (LIST, fact, ...) are skipped.
 */
hark_wav_status hark_wav_parse(const uint8_t *buf, size_t len, hark_wav_info *info,
                               char *err, size_t errlen);

#endif
