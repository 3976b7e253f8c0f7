/*
 * offline.c — Riva's Recognize on any speech model (offline.h).
 *
 * The recording is read once, on the caller's thread: a mono recording
 * the model reads as it is (16-bit PCM or G.711, or a WAV of them, at
 * 8..48 kHz) goes unchanged; anything else — a FLAC or Ogg Opus file, a
 * WAV of another sample format, several channels, a rate outside 8..48 kHz
 * — is decoded (hark_audio_clip) into 16-bit PCM channels at a rate the
 * model reads. Each channel (or their mix) is one one-shot request, all
 * of them in the engine at once; the last one's final calls done.
 *
 * A gated model's channel first goes through its VAD at 16 kHz: frames of
 * 512 samples (the last zero-padded), in blocks of VAD_BLOCK frames, one
 * request after another in a sequence of its own (a random id in the
 * sessions' namespace, START on the first block, END on the last), as a
 * streaming session feeds it; then the speech request carries the
 * probabilities as VAD_PROB.
 */
#include "frontend/speech/offline.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hark/audio.h"
#include "hark/config.h"
#include "hark/model.h"
#include "util/alloc.h"

#define VAD_RATE 16000u
#define VAD_FRAME 512u          /* samples per VAD frame (32 ms) */
#define VAD_BLOCK 1024u         /* frames per VAD request (~33 s) */
#define MAX_SAMPLES (96u << 20) /* decoded: ~33 min of 48 kHz mono, 384 MiB of floats */

typedef struct job job;

typedef struct channel {
  job *j;
  int16_t *pcm; /* the channel's samples; NULL: the request's own bytes go as they are */
  size_t n;
  float *probs; /* gated: one per frame */
  uint32_t n_frames, done_frames;
  uint64_t corr_id;
  hark_response *last;
} channel;

struct job {
  hark_server *server;
  hark_model *model, *vad;
  hark_speech_settings st; /* the caller's, but sample_rate and encoding ours */
  const uint8_t *raw;      /* passthrough: the caller's bytes (used before run returns) */
  size_t raw_len;
  hark_cancel *cancel;
  char id[128];
  hark_offline_done done;
  void *userp;
  pthread_mutex_t mu;
  hark_error *err; /* the first */
  _Atomic uint32_t pending;
  uint32_t n;
  channel ch[];
};

static hark_error *invalid(const char *why) {
  return hark_error_new(HARK_ERR_INVALID_ARG, "%s", why);
}

static void job_free(job *j) {
  for (uint32_t i = 0; i < j->n; i++) {
    free(j->ch[i].pcm);
    free(j->ch[i].probs);
    hark_response_free(j->ch[i].last);
  }
  if (j->vad) hark_model_release(j->vad);
  hark_cancel_unref(j->cancel);
  hark_error_free(j->err);
  pthread_mutex_destroy(&j->mu);
  free(j);
}

/* A channel is over (answered, or failed with err): the last one reports. */
static void channel_over(channel *c, hark_error *err) {
  job *j = c->j;
  if (err) {
    pthread_mutex_lock(&j->mu);
    if (!j->err)
      j->err = err;
    else
      hark_error_free(err);
    pthread_mutex_unlock(&j->mu);
  }
  if (atomic_fetch_sub(&j->pending, 1) != 1) return;
  if (j->err) {
    hark_error *e = j->err;
    j->err = NULL;
    j->done(j->userp, NULL, 0, e);
  } else {
    hark_response **r = hark_xcalloc(j->n, sizeof *r);
    for (uint32_t i = 0; i < j->n; i++) {
      r[i] = j->ch[i].last;
      j->ch[i].last = NULL;
    }
    j->done(j->userp, r, j->n, NULL);
  }
  job_free(j);
}

static void on_speech(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  channel *c = userp;
  if (resp) {
    hark_response_free(c->last);
    c->last = resp;
  }
  if (!(flags & HARK_RESPONSE_FINAL)) {
    hark_error_free(err);
    return;
  }
  channel_over(c, err);
}

static void submit_speech(channel *c) {
  job *j = c->j;
  hark_request *req = NULL;
  hark_error *err =
      c->pcm ? hark_speech_request_oneshot(j->model, &j->st, c->pcm, c->n * sizeof *c->pcm, &req)
             : hark_speech_request_oneshot(j->model, &j->st, j->raw, j->raw_len, &req);
  free(c->pcm); /* copied into the request */
  c->pcm = NULL;
  if (err) {
    channel_over(c, err);
    return;
  }
  if (j->vad) {
    int64_t shape[1] = {c->n_frames};
    hark_request_attach(req, c->probs, free);
    hark_error_free(hark_request_add_input(req, "VAD_PROB", HARK_TYPE_FP32, shape, 1, c->probs,
                                           (size_t)c->n_frames * sizeof *c->probs));
    c->probs = NULL;
  }
  if (*j->id) hark_request_set_id(req, j->id);
  hark_request_set_callback(req, on_speech, c);
  hark_request_set_cancel(req, j->cancel);
  if ((err = hark_server_infer(j->server, req))) {
    hark_request_free(req);
    channel_over(c, err);
  }
}

static void submit_vad(channel *c);

static void on_vad(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  channel *c = userp;
  job *j = c->j;
  uint32_t k = c->n_frames - c->done_frames;
  if (k > VAD_BLOCK) k = VAD_BLOCK;
  if (resp) {
    const char *name = hark_model_get_config(j->vad)->outputs[0].name;
    const hark_tensor *t = hark_response_output_by_name(resp, name);
    if (t && t->datatype == HARK_TYPE_FP32 && t->byte_size == k * sizeof(float))
      memcpy(c->probs + c->done_frames, t->data, t->byte_size);
    else if (!err)
      err = hark_error_new(HARK_ERR_INTERNAL, "expected %u FP32 probabilities", k);
    hark_response_free(resp);
  }
  if (!(flags & HARK_RESPONSE_FINAL)) {
    hark_error_free(err);
    return;
  }
  if (err) {
    hark_error *e = hark_error_new(hark_error_code(err), "VAD model '%s' failed: %s",
                                   hark_model_name(j->vad), hark_error_message(err));
    hark_error_free(err);
    channel_over(c, e);
    return;
  }
  c->done_frames += k;
  if (c->done_frames < c->n_frames)
    submit_vad(c);
  else
    submit_speech(c);
}

/* The next block of the channel's frames to the VAD. */
static void submit_vad(channel *c) {
  job *j = c->j;
  uint32_t first = c->done_frames, k = c->n_frames - first;
  if (k > VAD_BLOCK) k = VAD_BLOCK;
  float *f = hark_xcalloc((size_t)k * VAD_FRAME, sizeof *f);
  size_t from = (size_t)first * VAD_FRAME;
  size_t have = c->n > from ? c->n - from : 0;
  if (have > (size_t)k * VAD_FRAME) have = (size_t)k * VAD_FRAME;
  for (size_t i = 0; i < have; i++) f[i] = (float)c->pcm[from + i] * (1.0f / 32768.0f);
  const hark_model_config *vc = hark_model_get_config(j->vad);
  bool batched = vc->max_batch_size > 0;
  int64_t shape[3] = {1, k, VAD_FRAME};
  hark_request *req = hark_request_new(j->vad);
  hark_request_set_client(req, j->st.client);
  hark_request_attach(req, f, free);
  hark_error_free(hark_request_add_input(req, vc->inputs[0].name, HARK_TYPE_FP32,
                                         batched ? shape : shape + 1, batched ? 3 : 2, f,
                                         (size_t)k * VAD_FRAME * sizeof *f));
  uint32_t flags = first == 0 ? HARK_REQUEST_SEQUENCE_START : 0;
  if (first + k == c->n_frames) flags |= HARK_REQUEST_SEQUENCE_END;
  hark_request_set_flags(req, flags);
  hark_request_set_correlation_ns(req, HARK_CORR_NS_SESSION);
  hark_request_set_correlation_id(req, c->corr_id);
  if (*j->id) hark_request_set_id(req, j->id);
  hark_request_set_callback(req, on_vad, c);
  hark_request_set_cancel(req, j->cancel);
  hark_error *err = hark_server_infer(j->server, req);
  if (err) {
    hark_request_free(req);
    hark_error *e = hark_error_new(hark_error_code(err), "VAD model '%s' failed: %s",
                                   hark_model_name(j->vad), hark_error_message(err));
    hark_error_free(err);
    channel_over(c, e);
  }
}

/* ---- reading the recording ----------------------------------------------------------- */

static uint32_t default_rate(hark_model *model) {
  const char *v = hark_model_config_parameter(hark_model_get_config(model), "default_sample_rate");
  long r = v ? strtol(v, NULL, 10) : 0;
  return r > 0 ? (uint32_t)r : 16000u;
}

static bool rate_ok(uint32_t r) {
  return r >= HARK_RESAMPLE_MIN_RATE && r <= HARK_RESAMPLE_MAX_RATE;
}

/* The recording as a clip (always decoded), or *as_is when the model
 * reads its bytes as they are. */
static hark_error *read_clip(const hark_speech_settings *st, const hark_offline_audio *a,
                             uint32_t rate, bool gated, hark_audio_clip *clip, bool *as_is) {
  char why[256];
  *as_is = false;
  if (a->len == 0) return invalid("AUDIO: the audio is empty");
  bool wav = hark_wav_is_wav(a->data, a->len);
  if (a->container == HARK_OFFLINE_RAW && wav) {
    hark_wav_info info;
    if (hark_wav_parse(a->data, a->len, &info, why, sizeof why) == HARK_WAV_OK) {
      if (info.data_size == 0) return invalid("AUDIO: the WAV file holds no samples");
      if (info.channels == 1 && rate_ok(info.sample_rate) && !gated) {
        *as_is = true;
        return NULL;
      }
    }
  }
  if (a->container == HARK_OFFLINE_FILE || wav) {
    if (hark_audio_clip_decode(a->data, a->len, MAX_SAMPLES, clip, why, sizeof why) != 0)
      return invalid(why);
    return NULL;
  }
  uint32_t ch = a->channels ? a->channels : 1;
  if (ch == 1 && rate_ok(rate) && !gated) {
    *as_is = true;
    return NULL;
  }
  const uint8_t *pcm = a->data;
  size_t len = a->len;
  uint8_t *exp = NULL;
  if (st->encoding == HARK_SPEECH_MULAW || st->encoding == HARK_SPEECH_ALAW) {
    exp = malloc(2 * len);
    if (!exp) return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED, "out of memory for the audio");
    if (st->encoding == HARK_SPEECH_MULAW)
      hark_audio_mulaw_to_pcm16le(a->data, len, exp);
    else
      hark_audio_alaw_to_pcm16le(a->data, len, exp);
    pcm = exp;
    len *= 2;
  }
  int rc = hark_audio_clip_from_pcm16(pcm, len, ch, rate, clip, why, sizeof why);
  free(exp);
  return rc == 0 ? NULL : invalid(why);
}

static hark_error *vad_of(hark_server *server, hark_model *model, hark_model **vad) {
  *vad = NULL;
  const char *name = hark_model_config_parameter(hark_model_get_config(model), "vad_model");
  if (!name || !*name) return NULL;
  hark_error *err = hark_server_model_acquire(server, name, -1, vad);
  const hark_model_config *vc = *vad ? hark_model_get_config(*vad) : NULL;
  if (!err && (vc->n_inputs < 1 || vc->inputs[0].datatype != HARK_TYPE_FP32 || vc->n_outputs < 1 ||
               !vc->sequence_batching.enabled))
    err = hark_error_new(HARK_ERR_INVALID_ARG, "is not a VAD");
  if (!err) return NULL;
  if (*vad) hark_model_release(*vad);
  *vad = NULL;
  hark_error *e =
      hark_error_new(HARK_ERR_UNAVAILABLE, "model '%s' cannot serve: its VAD model '%s' %s",
                     hark_model_name(model), name, hark_error_message(err));
  hark_error_free(err);
  return e;
}

static uint64_t random_id(void) {
  uint64_t id = 0;
  while (id == 0)
    if (getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id) id = 0;
  return id;
}

hark_error *hark_offline_run(hark_server *server, hark_model *model, const hark_speech_settings *st,
                             const hark_offline_audio *audio, hark_cancel *cancel, const char *id,
                             hark_offline_done done, void *userp) {
  hark_model *vad = NULL;
  hark_error *err = vad_of(server, model, &vad);
  if (err) return err;
  uint32_t rate = st->sample_rate ? st->sample_rate : default_rate(model);
  hark_audio_clip clip = {0};
  bool as_is = false;
  if ((err = read_clip(st, audio, rate, vad != NULL, &clip, &as_is))) {
    if (vad) hark_model_release(vad);
    return err;
  }
  if (!as_is && clip.frames == 0) {
    hark_audio_clip_free(&clip);
    if (vad) hark_model_release(vad);
    return invalid("AUDIO: the audio holds no samples");
  }
  uint32_t n = !as_is && audio->separate && clip.channels > 1 ? clip.channels : 1;
  job *j = hark_xcalloc(1, sizeof *j + n * sizeof(channel));
  pthread_mutex_init(&j->mu, NULL);
  j->server = server;
  j->model = model;
  j->vad = vad;
  j->st = *st;
  j->raw = audio->data;
  j->raw_len = audio->len;
  if (cancel) hark_cancel_ref(cancel);
  j->cancel = cancel;
  snprintf(j->id, sizeof j->id, "%s", id ? id : "");
  j->done = done;
  j->userp = userp;
  j->n = n;
  atomic_init(&j->pending, n);
  uint32_t out_rate = vad ? VAD_RATE : rate_ok(clip.rate) ? clip.rate : 16000u;
  if (!as_is) {
    j->st.encoding = HARK_SPEECH_PCM16;
    j->st.sample_rate = out_rate;
  }
  char why[256];
  for (uint32_t i = 0; i < n && !as_is; i++) {
    channel *c = &j->ch[i];
    int which = n > 1 ? (int)i : clip.channels == 1 ? 0 : -1;
    if (hark_audio_clip_pcm16(&clip, which, out_rate, &c->pcm, &c->n, why, sizeof why) != 0) {
      hark_audio_clip_free(&clip);
      job_free(j);
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s", why);
    }
  }
  hark_audio_clip_free(&clip);
  for (uint32_t i = 0; i < n; i++) {
    channel *c = &j->ch[i];
    c->j = j;
    if (vad) {
      c->n_frames = (uint32_t)((c->n + VAD_FRAME - 1) / VAD_FRAME);
      c->probs = hark_xcalloc(c->n_frames, sizeof *c->probs);
      c->corr_id = random_id();
    }
  }
  /* From here every channel ends in channel_over; the job may be freed
   * before the loop is done, so it reads nothing of it after the last. */
  for (uint32_t i = 0; i < n; i++) {
    channel *c = &j->ch[i];
    if (c->n_frames)
      submit_vad(c);
    else
      submit_speech(c);
  }
  return NULL;
}
