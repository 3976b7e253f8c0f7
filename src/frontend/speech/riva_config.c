/*
 * riva_config.c — a Riva RecognitionConfig read into a speech stream's
 * settings (riva_config.h): LINEAR_PCM, MULAW and ALAW (or a WAV header),
 * 8000..48000 Hz, mono; endpointing histories and thresholds in range;
 * no diarization; max_alternatives capped; custom_configuration's
 * "profile". The model it names must be a speech model, streaming when
 * asked, and of the language asked for. No I/O: the model comes from the
 * server's repository.
 */
#include "frontend/speech/riva_config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "hark/audio.h"
#include "hark/model.h"
#include "util/alloc.h"

typedef Nvidia__Riva__Asr__RecognitionConfig recognition_config;

void hark_riva_config_fini(hark_riva_config *rc) {
  if (rc->model) hark_model_release(rc->model);
  hark_speech_settings_fini(&rc->st);
  free(rc->request_id);
  memset(rc, 0, sizeof *rc);
}

static const char *encoding_name(int e) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&nvidia__riva__audio_encoding__descriptor, e);
  return v ? v->name : "unknown";
}

static hark_error *check_endpointing(const Nvidia__Riva__Asr__EndpointingConfig *ep,
                                     hark_speech_settings *st) {
  if (!ep) return NULL;
  const int32_t hist[] = {ep->start_history, ep->stop_history, ep->stop_history_eou};
  const float thr[] = {ep->start_threshold, ep->stop_threshold, ep->stop_threshold_eou};
  for (int i = 0; i < 3; i++) {
    if (hist[i] < 0 || hist[i] > 60000)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "endpointing_config: histories are milliseconds in 0..60000, got %d",
                            (int)hist[i]);
    if (!(thr[i] >= 0.0f && thr[i] <= 1.0f))
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "endpointing_config: thresholds are in 0.0..1.0, got %g",
                            (double)thr[i]);
  }
  st->startspeech_ms = (uint32_t)ep->start_history;
  st->silence_ms = (uint32_t)ep->stop_history;
  /* Riva's meaning: the fraction of the history that must be speech (start)
   * or non-speech (stop); VAD-gated models use them, the energy VAD has no
   * such notion and ignores them. */
  st->start_threshold = ep->start_threshold;
  st->stop_threshold = ep->stop_threshold;
  return NULL;
}

static hark_error *check_audio(const recognition_config *rc, bool streaming,
                               hark_riva_config *out) {
  hark_speech_settings *st = &out->st;
  switch (rc->encoding) {
  case NVIDIA__RIVA__AUDIO_ENCODING__FLAC:
  case NVIDIA__RIVA__AUDIO_ENCODING__OGGOPUS:
    out->file = true;
    out->file_encoding = encoding_name(rc->encoding);
    st->encoding = HARK_SPEECH_PCM16;
    break;
  case NVIDIA__RIVA__AUDIO_ENCODING__ENCODING_UNSPECIFIED:
  case NVIDIA__RIVA__AUDIO_ENCODING__LINEAR_PCM: st->encoding = HARK_SPEECH_PCM16; break;
  case NVIDIA__RIVA__AUDIO_ENCODING__MULAW: st->encoding = HARK_SPEECH_MULAW; break;
  case NVIDIA__RIVA__AUDIO_ENCODING__ALAW: st->encoding = HARK_SPEECH_ALAW; break;
  default:
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "encoding %s (%d) is not supported: send LINEAR_PCM, MULAW, ALAW, "
                          "FLAC or OGG_OPUS, or leave it unspecified and start the audio with a "
                          "WAV header",
                          encoding_name(rc->encoding), (int)rc->encoding);
  }
  /* Offline, a rate a model does not read is resampled first (offline.c). */
  bool narrow = streaming && !out->file; /* a streamed file's header says its rate */
  int32_t lo = narrow ? 8000 : HARK_RESAMPLE_ANY_MIN_RATE,
          hi = narrow ? 48000 : HARK_RESAMPLE_ANY_MAX_RATE;
  if (rc->sample_rate_hertz != 0 && (rc->sample_rate_hertz < lo || rc->sample_rate_hertz > hi))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "sample_rate_hertz %d is out of range: %d..%d Hz are supported%s",
                          (int)rc->sample_rate_hertz, (int)lo, (int)hi,
                          narrow ? " when streaming (Recognize resamples others)" : "");
  st->sample_rate = (uint32_t)rc->sample_rate_hertz;
  /* A streamed FLAC or Ogg Opus file reaches the model decoded, at 16 kHz. */
  if (streaming && out->file) st->sample_rate = 16000;
  if (!st->sample_rate && st->encoding != HARK_SPEECH_PCM16)
    st->sample_rate = 8000; /* G.711 is telephone audio */
  if (rc->audio_channel_count < 0 || rc->audio_channel_count > (int32_t)HARK_AUDIO_MAX_CHANNELS ||
      (streaming && rc->audio_channel_count > 1))
    return hark_error_new(HARK_ERR_INVALID_ARG, "audio_channel_count %d: %s",
                          (int)rc->audio_channel_count,
                          streaming ? "only mono audio (1 channel) streams; Recognize takes more"
                                    : "1..32 channels are supported");
  out->channels = (uint32_t)rc->audio_channel_count;
  out->separate = rc->enable_separate_recognition_per_channel;
  return NULL;
}

/* The model `rc` names, checked: a speech model, streaming if asked, of
 * the language asked for. */
static hark_error *config_model(hark_server *server, const char *speech_model,
                                const recognition_config *rc, bool streaming, hark_model **out) {
  const char *name = rc->model && *rc->model ? rc->model : speech_model;
  hark_error *err = hark_server_model_acquire(server, name, -1, out);
  if (err) return err;
  const hark_model_config *cfg = hark_model_get_config(*out);
  const char *lang = hark_model_config_parameter(cfg, "language_code");
  if (!hark_model_config_is_speech(cfg))
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "model '%s' is not a speech model (it needs a BYTES input AUDIO and an "
                         "output TRANSCRIPT)",
                         name);
  else if (streaming && !cfg->sequence_batching.enabled)
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "model '%s' does not stream (it has no sequence_batching): use Recognize",
                         name);
  else if (lang && rc->language_code && *rc->language_code && strcasecmp(lang, rc->language_code))
    err = hark_error_new(HARK_ERR_INVALID_ARG, "model '%s' recognises %s, not %s", name, lang,
                         rc->language_code);
  if (err) {
    hark_model_release(*out);
    *out = NULL;
  }
  return err;
}

hark_error *hark_riva_config_parse(hark_server *server, const char *speech_model,
                                   uint32_t sample_rate, const recognition_config *rc,
                                   bool streaming, const Nvidia__Riva__RequestId *id,
                                   hark_riva_config *out) {
  static const recognition_config defaults = NVIDIA__RIVA__ASR__RECOGNITION_CONFIG__INIT;
  if (!rc) rc = &defaults;
  memset(out, 0, sizeof *out);
  hark_error *err = check_audio(rc, streaming, out);
  if (!err && rc->diarization_config && rc->diarization_config->enable_speaker_diarization)
    err = hark_error_new(HARK_ERR_INVALID_ARG, "speaker diarization is not supported");
  if (!err && rc->max_alternatives < 0)
    err = hark_error_new(HARK_ERR_INVALID_ARG, "max_alternatives must not be negative, got %d",
                         (int)rc->max_alternatives);
  if (!err) err = check_endpointing(rc->endpointing_config, &out->st);
  if (!err) err = config_model(server, speech_model, rc, streaming, &out->model);
  if (err) {
    hark_riva_config_fini(out);
    return err;
  }
  out->alternatives = rc->max_alternatives == 0 ? 1
                      : rc->max_alternatives > HARK_RIVA_MAX_ALTERNATIVES
                          ? HARK_RIVA_MAX_ALTERNATIVES
                          : (uint32_t)rc->max_alternatives;
  out->st.max_alternatives = out->alternatives > 1 ? out->alternatives : 0;
  out->st.words = rc->enable_word_time_offsets;
  if (!out->st.sample_rate) out->st.sample_rate = sample_rate;
  /* custom_configuration: "profile" picks the model's latency profile;
   * other keys are the model's business, as in Riva, and ignored here. */
  for (size_t i = 0; i < rc->n_custom_configuration; i++) {
    const char *k = rc->custom_configuration[i]->key, *v = rc->custom_configuration[i]->value;
    if (k && v && !strcmp(k, "profile")) {
      free(out->st.profile);
      out->st.profile = hark_xstrdup(v);
    }
  }
  if (id && id->value && *id->value) out->request_id = hark_xstrdup(id->value);
  return NULL;
}
