/*
 * fuzz_riva.c — libFuzzer target for Riva's speech requests as
 * RivaSpeechRecognition reads them (src/frontend/speech/riva.c through
 * riva_config.c): a RecognizeRequest, a StreamingRecognizeRequest or a bare
 * RecognitionConfig, unpacked from arbitrary bytes, its config (encoding,
 * sample rate, channels, endpointing_config, diarization, alternatives,
 * custom_configuration, speech contexts, language, model) read into a
 * stream's settings against a real server's models (fuzz_server.h), and a
 * RecognizeRequest's audio run through the model as Recognize runs it.
 *
 * Input: a byte (bits 0-1: the message; bit 2: a bare config asks for a
 * streaming model; bit 3: the server's --sample-rate is 8000, else none),
 * then the message bytes as they would arrive in a gRPC frame. Checks that
 * an accepted config is in range and names a speech model that streams
 * when asked to, and that Recognize answers with exactly one final.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/speech/asr_result.h"
#include "frontend/speech/riva_config.h"
#include "fuzz_server.h"
#include "hark/audio.h"
#include "hark/backend.h"
#include "hark/config.h"

typedef struct waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int finals;
} waiter;

static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  waiter *w = userp;
  if (resp) {
    hark_asr_result r;
    hark_asr_result_read(resp, &r);
    if (r.text_len && !r.text) abort();
    hark_response_free(resp);
  }
  hark_error_free(err);
  if (!(flags & HARK_RESPONSE_FINAL)) return;
  pthread_mutex_lock(&w->lock);
  w->finals++;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

/* What an accepted config promises riva.c. */
static void check_config(const hark_riva_config *c, bool streaming) {
  const hark_model_config *mc = hark_model_get_config(c->model);
  if (!hark_model_config_is_speech(mc) || (streaming && !mc->sequence_batching.enabled)) abort();
  if (c->alternatives < 1 || c->alternatives > HARK_RIVA_MAX_ALTERNATIVES) abort();
  if (c->st.max_alternatives != (c->alternatives > 1 ? c->alternatives : 0)) abort();
  /* a stream is held to what the stream normaliser takes; a recording
   * (Recognize) is decoded and resampled from any rate the resampler takes */
  uint32_t lo = streaming ? HARK_RESAMPLE_MIN_RATE : HARK_RESAMPLE_ANY_MIN_RATE;
  uint32_t hi = streaming ? HARK_RESAMPLE_MAX_RATE : HARK_RESAMPLE_ANY_MAX_RATE;
  if (c->st.sample_rate && (c->st.sample_rate < lo || c->st.sample_rate > hi)) abort();
  if (c->st.encoding > HARK_SPEECH_ALAW) abort();
}

/* echo_asr takes 300 ms over audio that begins "SLOW", 3 s over "LONG":
 * not for fuzzing. */
static void unslow(uint8_t *p, size_t n) {
  for (size_t i = 0; i + 4 <= n; i++)
    if (!memcmp(p + i, "SLOW", 4) || !memcmp(p + i, "LONG", 4)) p[i] = 's';
}

/* Recognize: the whole recording as one request; one final comes back. */
static void recognize(hark_server *server, uint32_t rate,
                      const Nvidia__Riva__Asr__RecognizeRequest *q) {
  hark_riva_config cfg;
  hark_error *err = hark_riva_config_parse(server, "asr", rate, q->config, false, q->id, &cfg);
  if (err) {
    hark_error_free(err);
    return;
  }
  check_config(&cfg, false);
  unslow(q->audio.data, q->audio.len);
  hark_request *req;
  err = hark_speech_request_oneshot(cfg.model, &cfg.st, q->audio.data, q->audio.len, &req);
  if (!err) {
    waiter w = {.finals = 0};
    pthread_mutex_init(&w.lock, NULL);
    pthread_cond_init(&w.cond, NULL);
    if (q->id && *q->id->value) hark_request_set_id(req, q->id->value);
    hark_request_set_callback(req, on_response, &w);
    err = hark_server_infer(server, req);
    if (err) {
      hark_request_free(req);
    } else {
      pthread_mutex_lock(&w.lock);
      while (!w.finals) pthread_cond_wait(&w.cond, &w.lock);
      pthread_mutex_unlock(&w.lock);
    }
    pthread_mutex_destroy(&w.lock);
    pthread_cond_destroy(&w.cond);
  }
  hark_error_free(err);
  hark_riva_config_fini(&cfg);
}

static void configure(hark_server *server, uint32_t rate,
                      const Nvidia__Riva__Asr__RecognitionConfig *rc, bool streaming,
                      const Nvidia__Riva__RequestId *id) {
  hark_riva_config cfg;
  hark_error *err = hark_riva_config_parse(server, "asr", rate, rc, streaming, id, &cfg);
  if (err) {
    hark_error_free(err);
    return;
  }
  check_config(&cfg, streaming);
  hark_riva_config_fini(&cfg);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  hark_server *server = fuzz_server_get();
  uint32_t rate = data[0] & 8 ? 8000 : 0;
  const uint8_t *msg = data + 1;
  size_t len = size - 1;
  switch (data[0] & 3) {
  case 0: {
    Nvidia__Riva__Asr__RecognizeRequest *q =
        nvidia__riva__asr__recognize_request__unpack(NULL, len, msg);
    if (!q) return 0;
    recognize(server, rate, q);
    nvidia__riva__asr__recognize_request__free_unpacked(q, NULL);
    break;
  }
  case 1: {
    Nvidia__Riva__Asr__StreamingRecognizeRequest *q =
        nvidia__riva__asr__streaming_recognize_request__unpack(NULL, len, msg);
    if (!q) return 0;
    /* riva.c's streaming_recognize: a config message opens the stream. */
    if (q->streaming_request_case ==
        NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_STREAMING_CONFIG) {
      const Nvidia__Riva__Asr__StreamingRecognitionConfig *sc = q->streaming_config;
      configure(server, rate, sc ? sc->config : NULL, true, q->id);
    }
    nvidia__riva__asr__streaming_recognize_request__free_unpacked(q, NULL);
    break;
  }
  default: {
    Nvidia__Riva__Asr__RecognitionConfig *rc =
        nvidia__riva__asr__recognition_config__unpack(NULL, len, msg);
    if (!rc) return 0;
    configure(server, rate, rc, data[0] & 4, NULL);
    nvidia__riva__asr__recognition_config__free_unpacked(rc, NULL);
    break;
  }
  }
  return 0;
}
