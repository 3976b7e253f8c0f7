/*
 * riva_config.h — what a Riva RecognitionConfig asks for, read and checked
 * against the model it names (riva_config.c): the encoding and sample
 * rate, endpointing, alternatives, word times, custom_configuration's
 * "profile", the language. riva.c reads every Recognize and
 * StreamingRecognize config through it; tests/fuzz/fuzz_riva.c feeds it
 * arbitrary messages.
 */
#ifndef HARK_SPEECH_RIVA_CONFIG_H
#define HARK_SPEECH_RIVA_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "frontend/speech/session.h"
#include "hark/config.h"
#include "hark/server.h"
#include "riva_asr.pb-c.h"

/* The most alternatives a result carries. */
#define HARK_RIVA_MAX_ALTERNATIVES 16

typedef struct hark_riva_config {
  hark_model *model;         /* a reference */
  hark_speech_settings st;   /* what the session sends the model */
  uint32_t alternatives;     /* >= 1: how many a result carries */
  char *request_id;          /* echoed; NULL when none */
  bool file;                 /* FLAC or OGG_OPUS: a file to decode (offline.h) */
  const char *file_encoding; /* its name ("FLAC", "OGGOPUS"), static */
  uint32_t channels;         /* audio_channel_count (raw PCM); 0: 1 */
  bool separate;             /* separate_recognition_per_channel */
} hark_riva_config;

/*
 * Reads `rc` (NULL: every default) into *out, with a reference to the
 * model it names (else `speech_model`) on `server`; `streaming` asks for
 * a model with sequence_batching. `sample_rate` is the rate of PCM that
 * names none (0: the model's). `id` (may be NULL) is echoed. On error *out
 * holds nothing; else release it with hark_riva_config_fini.
 */
hark_error *hark_riva_config_parse(hark_server *server, const char *speech_model,
                                   uint32_t sample_rate,
                                   const Nvidia__Riva__Asr__RecognitionConfig *rc, bool streaming,
                                   const Nvidia__Riva__RequestId *id, hark_riva_config *out);
void hark_riva_config_fini(hark_riva_config *rc);

#endif
