/*
 * wavfile.h — reads a RIFF/WAVE file of 16-bit PCM into memory for the hark
 * CLI: the samples as mono int16 in host order (the Vosk protocol carries
 * little-endian, which every host hark builds on is), ready to be sent in
 * chunks.
 *
 * Accepts 16-bit PCM (format 1, or WAVE_FORMAT_EXTENSIBLE with a PCM subformat),
 * any rate, any channel count (channels are averaged into one). Anything
 * else is refused with a message that says what the file holds.
 */
#ifndef HARK_TOOLS_WAVFILE_H
#define HARK_TOOLS_WAVFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct wavfile {
  int16_t *samples; /* owned; mono, n of them */
  size_t n;
  int sample_rate;
  int channels; /* as stored in the file */
} wavfile;

/* Reads `path` into *w. Returns 0, or -1 with a message in err. Free with
 * wavfile_free. */
int wavfile_read(const char *path, wavfile *w, char *err, size_t errcap);
void wavfile_free(wavfile *w);

#endif
