/*
 * offline.h — a whole recording recognised at once (Riva's Recognize), on
 * any speech model: the recording decoded into channels of 16-bit PCM
 * (hark_audio_clip: WAV of any sample format, FLAC, Ogg Opus, raw PCM or
 * G.711, rates outside what models read resampled), and each channel one
 * one-shot request. A VAD-gated model (parameter vad_model) gets the
 * recording at 16 kHz and its speech probabilities (VAD_PROB): the VAD
 * runs over the whole recording first, in blocks of one sequence, as a
 * streaming session feeds it chunk by chunk.
 */
#ifndef HARK_SPEECH_OFFLINE_H
#define HARK_SPEECH_OFFLINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "frontend/speech/session.h"
#include "hark/request.h"
#include "hark/server.h"

/* How the recording's bytes are packed. */
typedef enum hark_offline_container {
  HARK_OFFLINE_RAW = 0, /* the settings' encoding (or a WAV file, told by its header) */
  HARK_OFFLINE_FILE,    /* a file libsndfile reads (FLAC, Ogg Opus, ...) */
} hark_offline_container;

typedef struct hark_offline_audio {
  const uint8_t *data; /* borrowed until hark_offline_run returns */
  size_t len;
  hark_offline_container container;
  uint32_t channels; /* of raw PCM; a file's header says its own */
  bool separate;     /* one result per channel; else they are mixed down */
} hark_offline_audio;

/* The engine's answers: n results (one per channel, in order), each the
 * request's last response (NULL when none); or err. Both the callee's to
 * free: each response with hark_response_free, the array with free, err
 * with hark_error_free. On an engine worker. */
typedef void (*hark_offline_done)(void *userp, hark_response **resps, uint32_t n, hark_error *err);

/*
 * Decodes `audio` and starts its recognition on `model` (borrowed until
 * done is called) with `st` (read now: sample_rate 0 is `default_rate`, or
 * the model's). `cancel` (may be NULL) stops it; `id` names the requests.
 * Returns NULL once done is sure to be called exactly once; else the error
 * (INVALID_ARGUMENT for audio that cannot be read, or holds no samples)
 * and done is never called.
 */
hark_error *hark_offline_run(hark_server *server, hark_model *model, const hark_speech_settings *st,
                             const hark_offline_audio *audio, hark_cancel *cancel, const char *id,
                             hark_offline_done done, void *userp);

#endif
