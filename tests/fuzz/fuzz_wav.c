/*
 * fuzz_wav.c — libFuzzer target for the WAV header parser (src/audio/wav.c):
 * any bytes go through hark_wav_parse; a header that parses must describe
 * data inside the buffer.
 */
#include <stdint.h>
#include <stdlib.h>

#include "hark/audio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hark_wav_info info;
  char err[128];
  if (hark_wav_parse(data, size, &info, err, sizeof err) == HARK_WAV_OK) {
    if (info.data_offset > size || info.data_size > size - info.data_offset) abort();
  }
  (void)hark_wav_is_wav(data, size);
  return 0;
}
