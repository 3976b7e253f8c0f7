/*
 * hark/audio.h — audio helpers for backends and tools: WAV headers,
 * G.711 expansion, and a streaming resampler (libsoxr). Independent of the
 * engine: the library libhark_audio.a is linked into the backends that
 * need it (pocketsphinx) and into the CLI, never reached through harkd.
 *
 * WAV: recognises a RIFF/WAVE header at the start of a byte buffer, so a
 * client may send a .wav file where raw PCM is expected. Pure parsing: no
 * allocation, safe on truncated or hostile input.
 *
 * Resampling: a stream sent at any rate from 8 kHz to 48 kHz reaches the
 * model at its own rate. Equal rates pass samples through untouched (no
 * soxr at all). One resampler belongs to one stream; not thread-safe.
 */
#ifndef HARK_AUDIO_H
#define HARK_AUDIO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- WAV ------------------------------------------------------------------ */

typedef enum hark_wav_encoding {
  HARK_WAV_PCM16 = 0, /* 16-bit little-endian linear PCM */
  HARK_WAV_MULAW,     /* 8-bit G.711 mu-law (WAVE_FORMAT_MULAW, 7) */
  HARK_WAV_ALAW,      /* 8-bit G.711 A-law (WAVE_FORMAT_ALAW, 6) */
} hark_wav_encoding;

typedef struct hark_wav_info {
  hark_wav_encoding encoding;
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
  HARK_WAV_UNSUPPORTED, /* a WAV, but not 16-bit PCM, mu-law or A-law */
  HARK_WAV_MALFORMED,   /* inconsistent chunk sizes or fields */
} hark_wav_status;

/* True when buf starts with a RIFF/WAVE signature (12 bytes). */
int hark_wav_is_wav(const uint8_t *buf, size_t len);

/*
 * Parses the header at the start of buf. On HARK_WAV_OK fills *info. On
 * any other status writes a one-line reason into err (when errlen > 0).
 * Chunks other than "fmt " and "data" (LIST, fact, ...) are skipped.
 */
hark_wav_status hark_wav_parse(const uint8_t *buf, size_t len, hark_wav_info *info, char *err,
                               size_t errlen);

/* ---- G.711 (telephone audio) --------------------------------------------- */

/* The 16-bit linear sample of one mu-law or A-law byte (ITU-T G.711). */
int16_t hark_audio_mulaw_sample(uint8_t b);
int16_t hark_audio_alaw_sample(uint8_t b);
/* Expands n G.711 bytes into n 16-bit little-endian samples at out (2n
 * bytes; out may not overlap in). */
void hark_audio_mulaw_to_pcm16le(const uint8_t *in, size_t n, uint8_t *out);
void hark_audio_alaw_to_pcm16le(const uint8_t *in, size_t n, uint8_t *out);

/* ---- resampling ------------------------------------------------------------ */

#define HARK_RESAMPLE_MIN_RATE 8000u
#define HARK_RESAMPLE_MAX_RATE 48000u

typedef struct hark_resampler hark_resampler;

/* NULL on failure, with a reason in err. Rates must be within
 * [HARK_RESAMPLE_MIN_RATE, HARK_RESAMPLE_MAX_RATE]. Free with
 * hark_resampler_free. */
hark_resampler *hark_resampler_new(uint32_t in_rate, uint32_t out_rate, char *err, size_t errlen);
void hark_resampler_free(hark_resampler *r);

uint32_t hark_resampler_in_rate(const hark_resampler *r);
uint32_t hark_resampler_out_rate(const hark_resampler *r);

/*
 * Resamples n input samples; *out points at the output, *out_n samples,
 * valid until the next call on r (for a passthrough it is `in` itself).
 * Pass in = NULL, n = 0 with flush = 1 at the end of the stream to drain
 * what the filter still holds. Returns 0, or -1 on a soxr error / OOM.
 */
int hark_resampler_process(hark_resampler *r, const int16_t *in, size_t n, int flush,
                           const int16_t **out, size_t *out_n);

#ifdef __cplusplus
}
#endif
#endif
