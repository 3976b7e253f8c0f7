/*
 * riva.c — Riva's speech recognition service
 * (nvidia.riva.asr.RivaSpeechRecognition) on hark's speech models, so
 * Riva's clients work against hark unchanged: a codec between the gRPC
 * transport and speech sessions (session.c).
 *
 * StreamingRecognize is a session: the first message's streaming_config
 * picks the model (config.model, else --speech-model) and its settings;
 * every audio_content message then becomes one item of the session, with
 * its place among the stream's replies (a transport slot). The client's
 * half-close ends the session (END), whose final closes the stream with
 * OK; a call that ends otherwise (cancelled, past its deadline, failed)
 * closes the session, which drops the waiting audio and ends the sequence
 * on the client's behalf, so the decoder goes back to the pool at once.
 * With interim_results on, every audio message gets exactly one response
 * (Riva's streaming benchmark client counts on it): a partial, a final, or
 * no results when there is nothing to say yet; with it off only non-empty
 * finals are sent. Any error ends the stream with its status after the
 * replies before it.
 *
 * Audio: LINEAR_PCM (16-bit little-endian mono), MULAW and ALAW (expanded
 * to 16-bit PCM by the session), or ENCODING_UNSPECIFIED with a WAV header
 * at the start (the model reads it); sample_rate_hertz 8000..48000,
 * resampled by the model. A streamed FLAC or OGG_OPUS file is held (up to
 * MAX_STREAMED_FILE) and decoded when the client half-closes: every audio
 * message still gets its response, the transcript comes at the end.
 *
 * Recognize runs the whole recording at once (offline.c: decoded when the
 * model cannot read it as it is — FLAC, Ogg Opus, any WAV, channels,
 * rates outside 8..48 kHz — one result per channel with
 * separate_recognition_per_channel, and a gated model's VAD run first);
 * GetRivaSpeechRecognitionConfig lists the speech models (a model with a
 * BYTES input AUDIO and an output TRANSCRIPT) and their parameters, file
 * paths hidden from a caller that may not see the model repository.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/security/restrict.h"
#include "frontend/speech/asr_result.h"
#include "frontend/speech/offline.h"
#include "frontend/speech/riva_config.h"
#include "frontend/speech/session.h"
#include "frontend/speech/speech.h"
#include "hark/audio.h"
#include "hark/config.h"
#include "hark/model.h"
#include "riva_asr.pb-c.h"
#include "util/alloc.h"
#include "util/arena.h"
#include "util/log.h"

typedef Nvidia__Riva__Asr__SpeechRecognitionAlternative pb_alternative;
typedef Nvidia__Riva__Asr__WordInfo pb_word;

#define DEFAULT_SPEECH_MODEL "asr"

struct hark_riva {
  hark_server *server;
  const char *speech_model;
  uint32_t sample_rate; /* of PCM that names none; 0: the model's */
  hark_speech_admission adm;
};

/* ---- results as protobuf -------------------------------------------------------- */

/* The alternatives of one result, their parts in one arena. */
typedef struct alt_set {
  hark_arena *a;
  pb_alternative alt[HARK_RIVA_MAX_ALTERNATIVES];
  pb_alternative *alt_p[HARK_RIVA_MAX_ALTERNATIVES];
  size_t n_alt;
} alt_set;

static char *dup_n(alt_set *a, const char *p, uint32_t len) {
  char *s = hark_arena_strndup(a->a, p, len);
  if (!s) hark_oom("result", len);
  return s;
}

static int32_t ms(float seconds) {
  double v = round((double)seconds * 1000.0);
  return v < 0 ? 0 : v > INT32_MAX ? INT32_MAX : (int32_t)v;
}

static void alt_add(alt_set *a, const char *text, uint32_t len, float conf, bool final) {
  pb_alternative *alt = &a->alt[a->n_alt];
  nvidia__riva__asr__speech_recognition_alternative__init(alt);
  alt->transcript = dup_n(a, text, len);
  if (final) alt->confidence = conf;
  a->alt_p[a->n_alt++] = alt;
}

/* The words of the result (alt < 0) or of its alternative `alt`, on the
 * alternative last added. */
static void add_words(alt_set *a, const hark_asr_result *r, int64_t alt) {
  uint32_t nw = alt < 0 ? r->n_words : hark_asr_result_alternative_words(r, (uint32_t)alt);
  if (!nw) return;
  pb_word *words = hark_arena_alloc(a->a, nw * sizeof *words);
  pb_word **word_p = hark_arena_alloc(a->a, nw * sizeof *word_p);
  if (!words || !word_p) hark_oom("result", nw * sizeof *words);
  size_t n = 0;
  for (uint32_t i = 0; i < nw; i++) {
    const char *w;
    uint32_t len;
    float start, end, conf;
    if (alt < 0
            ? !hark_asr_result_word(r, i, &w, &len, &start, &end, &conf)
            : !hark_asr_result_alternative_word(r, (uint32_t)alt, i, &w, &len, &start, &end, &conf))
      break;
    pb_word *pw = &words[n];
    nvidia__riva__asr__word_info__init(pw);
    pw->start_time = ms(start);
    pw->end_time = ms(end);
    pw->word = dup_n(a, w, len);
    pw->confidence = conf;
    word_p[n++] = pw;
  }
  a->alt[a->n_alt - 1].words = word_p;
  a->alt[a->n_alt - 1].n_words = n;
}

/* Alternatives of `r`: the transcript first, then up to max - 1 other
 * n-best texts (finals only); confidences and words (when asked) on
 * finals, as Riva sends them, each alternative its own. */
static void alt_set_build(alt_set *a, const hark_asr_result *r, uint32_t max, bool words) {
  memset(a, 0, sizeof *a);
  a->a = hark_arena_new();
  alt_add(a, r->text, r->text_len, r->confidence, r->is_final);
  if (r->is_final && words) add_words(a, r, -1);
  for (uint32_t i = 0; r->is_final && a->n_alt < max && a->n_alt < HARK_RIVA_MAX_ALTERNATIVES;
       i++) {
    const char *text;
    uint32_t len;
    float conf;
    if (!r->alts || !hark_asr_result_alternative(r, i, &text, &len, &conf)) break;
    if (len == r->text_len && !memcmp(text, r->text, len)) continue;
    alt_add(a, text, len, conf, true);
    if (words) add_words(a, r, i);
  }
}

static void alt_set_free(alt_set *a) { hark_arena_free(a->a); }

/* ---- StreamingRecognize --------------------------------------------------------- */

/* A stream: the call's state. */
typedef struct riva_stream {
  hark_riva *r;
  hark_speech_session *session; /* NULL until the streaming_config came */
  hark_riva_config cfg;         /* its model and settings go to the session */
  bool interim;
  bool ended;       /* queue thread: END was submitted */
  uint32_t n_audio; /* audio messages so far */
  /* FLAC / OGG_OPUS: the file's bytes so far, decoded at the half-close */
  uint8_t *file;
  size_t file_len, file_cap;
} riva_stream;

/* The most of a streamed FLAC or Ogg Opus file that is held until the
 * client half-closes. */
#define MAX_STREAMED_FILE (32u << 20)

/* One audio message (or the END) and its place among the replies. */
typedef struct riva_job {
  hark_grpc_slot slot; /* first: the transport hands it back */
  hark_grpc_call *c;   /* a reference, until the job is answered */
  bool end;            /* quiet: answered only with a non-empty final (END, a decoded file) */
} riva_job;

static void stream_free(void *p) {
  riva_stream *rs = p;
  free(rs->file);
  hark_riva_config_fini(&rs->cfg);
  free(rs);
}

static void job_free(hark_grpc_slot *slot) { free(slot); }

/* The reply to one item of the stream, or nothing when there is nothing to
 * send. */
static void stream_reply(hark_grpc_call *c, riva_job *j, const hark_response *resp) {
  riva_stream *rs = hark_grpc_call_state(c);
  hark_asr_result r;
  hark_asr_result_read(resp, &r);
  bool say = r.is_final ? (r.text_len > 0 || (rs->interim && !j->end)) : rs->interim && !j->end;
  if (!say) return;
  Nvidia__Riva__Asr__StreamingRecognizeResponse msg =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_RESPONSE__INIT;
  Nvidia__Riva__Asr__StreamingRecognitionResult res =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNITION_RESULT__INIT;
  Nvidia__Riva__Asr__StreamingRecognitionResult *res_p = &res;
  Nvidia__Riva__RequestId id = NVIDIA__RIVA__REQUEST_ID__INIT;
  alt_set a;
  alt_set_build(&a, &r, rs->cfg.alternatives, rs->cfg.st.words);
  /* Nothing heard yet, or an utterance without words: a response with no
   * results keeps one response per audio message. */
  if (r.text_len > 0) {
    res.alternatives = a.alt_p;
    res.n_alternatives = a.n_alt;
    res.is_final = r.is_final;
    res.stability = r.is_final ? 0.0f : r.stability; /* Riva's: interim results only */
    res.channel_tag = 1;
    res.audio_processed = r.audio_processed;
    msg.results = &res_p;
    msg.n_results = 1;
  }
  if (rs->cfg.request_id) {
    id.value = rs->cfg.request_id;
    msg.id = &id;
  }
  size_t size = 0;
  if (hark_grpc_slot_write(c, &j->slot, &msg.base, &size) == HARK_GRPC_WRITE_TOO_BIG) {
    char text[100];
    snprintf(text, sizeof text, "a response of %zu bytes is over the limit", size);
    hark_grpc_stream_fail(c, HARK_GRPC_RESOURCE_EXHAUSTED, text);
  }
  alt_set_free(&a);
}

/* An item's result, on an engine worker (or at once, when the engine
 * refused it). Every job is answered exactly once. */
static void on_result(void *userp, void *tag, hark_speech_status status, hark_response *resp,
                      hark_error *err) {
  (void)userp;
  riva_job *j = tag;
  hark_grpc_call *c = j->c;
  if (status == HARK_SPEECH_FAILED)
    hark_grpc_stream_fail(c, hark_grpc_status(hark_error_code(err)), hark_error_message(err));
  else if (status == HARK_SPEECH_OK && !hark_grpc_stream_over(c))
    stream_reply(c, j, resp);
  hark_response_free(resp);
  hark_error_free(err);
  hark_grpc_slot_done(c, &j->slot);
  hark_grpc_call_unref(c); /* the job's reference */
}

static const hark_speech_handler handler = {.result = on_result};

/* Queues one item of the stream with its place among the replies.
 * Queue thread. */
static void stream_submit_as(hark_grpc_call *c, riva_stream *rs, hark_speech_item_kind kind,
                             const void *audio, size_t n, bool quiet) {
  riva_job *j = hark_xcalloc(1, sizeof *j);
  j->c = c;
  j->end = quiet;
  if (kind == HARK_SPEECH_END) rs->ended = true;
  hark_grpc_slot_append(c, &j->slot, job_free);
  hark_grpc_call_ref(c);
  hark_speech_submit(rs->session, kind, audio, n, j);
}

static void stream_submit(hark_grpc_call *c, riva_stream *rs, hark_speech_item_kind kind,
                          const void *audio, size_t n) {
  stream_submit_as(c, rs, kind, audio, n, kind == HARK_SPEECH_END);
}

static hark_error *stream_configure(hark_grpc_call *c,
                                    const Nvidia__Riva__Asr__StreamingRecognizeRequest *q) {
  hark_riva *r = hark_grpc_call_service(c);
  const Nvidia__Riva__Asr__StreamingRecognitionConfig *sc = q->streaming_config;
  if (hark_server_is_draining(r->server))
    return hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down");
  riva_stream *rs = hark_xcalloc(1, sizeof *rs);
  hark_error *err = hark_riva_config_parse(r->server, r->speech_model, r->sample_rate,
                                           sc ? sc->config : NULL, true, q->id, &rs->cfg);
  if (!err) err = hark_speech_admit(&r->adm, rs->cfg.model);
  if (err) {
    stream_free(rs);
    return err;
  }
  rs->r = r;
  rs->interim = sc && sc->interim_results;
  rs->cfg.st.partials = rs->interim;
  snprintf(rs->cfg.st.client, sizeof rs->cfg.st.client, "%s", hark_grpc_call_peer(c));
  rs->session = hark_speech_open(r->server, &r->adm, "riva", &handler, rs);
  HARK_LOG_STREAM(HARK_LOG_VERBOSE, hark_speech_id(rs->session),
                  "riva: stream opened on model '%s' version %lld (%u Hz, interim %s)",
                  hark_model_name(rs->cfg.model), (long long)hark_model_version(rs->cfg.model),
                  rs->cfg.st.sample_rate, rs->interim ? "on" : "off");
  /* The session takes the model and the settings; rs->cfg.st's plain
   * fields stay readable for the replies. */
  hark_speech_configure(rs->session, rs->cfg.model, &rs->cfg.st);
  rs->cfg.model = NULL;
  hark_grpc_call_set_state(c, rs, stream_free);
  return NULL;
}

/* Appends a streamed file's bytes; -1 past MAX_STREAMED_FILE. */
static int file_append(riva_stream *rs, const uint8_t *p, size_t n) {
  if (n > MAX_STREAMED_FILE - rs->file_len) return -1;
  if (rs->file_len + n > rs->file_cap) {
    size_t cap = rs->file_cap ? rs->file_cap : 65536;
    while (cap < rs->file_len + n) cap *= 2;
    rs->file = hark_xrealloc(rs->file, cap);
    rs->file_cap = cap;
  }
  if (n) memcpy(rs->file + rs->file_len, p, n);
  rs->file_len += n;
  return 0;
}

static void streaming_recognize(hark_grpc_call *c, ProtobufCMessage *m) {
  Nvidia__Riva__Asr__StreamingRecognizeRequest *q = (void *)m;
  riva_stream *rs = hark_grpc_call_state(c);
  char text[200];
  if (hark_grpc_stream_over(c) || (rs && rs->ended)) {
    /* failing with its error, or cancelled: drop what still arrives (a
     * request after the sequence's END would open a new one) */
  } else if (q->streaming_request_case ==
             NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_STREAMING_CONFIG) {
    hark_error *err = NULL;
    if (rs) {
      snprintf(text, sizeof text,
               "streaming_config must come only in the first message; it came again after %u "
               "audio messages",
               rs->n_audio);
      hark_grpc_stream_fail(c, HARK_GRPC_INVALID_ARGUMENT, text);
    } else if ((err = stream_configure(c, q))) {
      hark_grpc_stream_fail(c, hark_grpc_status(hark_error_code(err)), hark_error_message(err));
      hark_error_free(err);
    }
  } else if (q->streaming_request_case ==
             NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_AUDIO_CONTENT) {
    if (!rs) {
      hark_grpc_stream_fail(c, HARK_GRPC_INVALID_ARGUMENT,
                            "the first message must carry streaming_config; audio came first");
    } else if (rs->cfg.file) {
      rs->n_audio++;
      if (file_append(rs, q->audio_content.data, q->audio_content.len)) {
        snprintf(text, sizeof text,
                 "a streamed %s file is decoded when the stream ends: at most %u bytes",
                 "FLAC or Ogg Opus", MAX_STREAMED_FILE);
        hark_grpc_stream_fail(c, HARK_GRPC_RESOURCE_EXHAUSTED, text);
      } else {
        stream_submit(c, rs, HARK_SPEECH_AUDIO, NULL, 0); /* its one response */
      }
    } else {
      rs->n_audio++;
      stream_submit(c, rs, HARK_SPEECH_AUDIO, q->audio_content.data, q->audio_content.len);
    }
  } else {
    hark_grpc_stream_fail(c, HARK_GRPC_INVALID_ARGUMENT,
                          "a StreamingRecognizeRequest needs streaming_config or audio_content");
  }
}

/* The client is done sending: a streamed file is decoded (its channels
 * mixed down, at 16 kHz) and goes as one item; END gives the last
 * utterance its final. */
static void streaming_half_close(hark_grpc_call *c) {
  riva_stream *rs = hark_grpc_call_state(c);
  if (!rs || rs->ended || hark_grpc_stream_over(c)) return;
  if (rs->cfg.file) {
    hark_audio_clip clip;
    int16_t *pcm = NULL;
    size_t n = 0;
    char why[256];
    int rc = -1;
    memset(&clip, 0, sizeof clip);
    if (rs->file_len == 0)
      snprintf(why, sizeof why, "AUDIO: the %s stream ended before any audio",
               rs->cfg.file_encoding);
    else
      rc = hark_audio_clip_decode(rs->file, rs->file_len, 96u << 20, &clip, why, sizeof why);
    if (rc == 0 && clip.frames == 0) {
      snprintf(why, sizeof why, "AUDIO: the audio holds no samples");
      rc = -1;
    }
    if (rc == 0)
      rc = hark_audio_clip_pcm16(&clip, clip.channels == 1 ? 0 : -1, rs->cfg.st.sample_rate, &pcm,
                                 &n, why, sizeof why);
    hark_audio_clip_free(&clip); /* zeroed when decoding failed */
    free(rs->file);
    rs->file = NULL;
    if (rc != 0) {
      hark_grpc_stream_fail(c, HARK_GRPC_INVALID_ARGUMENT, why);
      return;
    }
    rs->cfg.file = false;
    /* In chunks of 100 ms, as a client streams; their messages were
     * answered already, so only their finals are sent. */
    for (size_t off = 0; off < n; off += 1600)
      stream_submit_as(c, rs, HARK_SPEECH_AUDIO, pcm + off, (n - off < 1600 ? n - off : 1600) * 2,
                       true); /* copied */
    free(pcm);
  }
  stream_submit(c, rs, HARK_SPEECH_END, NULL, 0);
}

/* The call is over. Closing the session ends its sequence if it is still
 * open (the client cancelled or its deadline passed, or the stream
 * failed), so the model gives its decoder back now rather than at the
 * idle timeout. */
static void streaming_closed(hark_grpc_call *c) {
  riva_stream *rs = hark_grpc_call_state(c);
  if (!rs) return;
  bool cancelled = hark_grpc_call_cancelled(c), failed = hark_grpc_stream_over(c);
  HARK_LOG_STREAM(HARK_LOG_VERBOSE, hark_speech_id(rs->session),
                  "riva: stream over after %u audio messages: %s", rs->n_audio,
                  cancelled              ? "cancelled"
                  : failed && !rs->ended ? "failed"
                                         : "ok");
  hark_speech_close(rs->session);
  rs->session = NULL;
}

/* ---- Recognize ---------------------------------------------------------------- */

typedef struct recognize_job {
  hark_grpc_call *c;
  hark_riva_config cfg;
} recognize_job;

/* One result per channel (channel_tag 1..n), each the whole recording's
 * final. */
static void recognize_reply(recognize_job *rj, hark_response **resps, uint32_t n) {
  Nvidia__Riva__Asr__RecognizeResponse msg = NVIDIA__RIVA__ASR__RECOGNIZE_RESPONSE__INIT;
  Nvidia__Riva__Asr__SpeechRecognitionResult *res = hark_xcalloc(n, sizeof *res);
  Nvidia__Riva__Asr__SpeechRecognitionResult **res_p = hark_xcalloc(n, sizeof *res_p);
  alt_set *a = hark_xcalloc(n, sizeof *a);
  Nvidia__Riva__RequestId id = NVIDIA__RIVA__REQUEST_ID__INIT;
  for (uint32_t i = 0; i < n; i++) {
    hark_asr_result r;
    hark_asr_result_read(resps[i], &r);
    r.is_final = true; /* the whole recording: one final */
    alt_set_build(&a[i], &r, rj->cfg.alternatives, rj->cfg.st.words);
    nvidia__riva__asr__speech_recognition_result__init(&res[i]);
    res[i].alternatives = a[i].alt_p;
    res[i].n_alternatives = a[i].n_alt;
    res[i].channel_tag = (int32_t)i + 1;
    res[i].audio_processed = r.audio_processed;
    res_p[i] = &res[i];
  }
  msg.results = res_p;
  msg.n_results = n;
  if (rj->cfg.request_id) {
    id.value = rj->cfg.request_id;
    msg.id = &id;
  }
  hark_grpc_reply(rj->c, &msg.base, HARK_GRPC_OK, NULL);
  for (uint32_t i = 0; i < n; i++) alt_set_free(&a[i]);
  free(a);
  free(res_p);
  free(res);
}

static void on_recognized(void *userp, hark_response **resps, uint32_t n, hark_error *err) {
  recognize_job *rj = userp;
  hark_grpc_call *c = rj->c;
  if (err)
    hark_grpc_reply_error(c, err);
  else
    recognize_reply(rj, resps, n);
  for (uint32_t i = 0; i < n; i++) hark_response_free(resps[i]);
  free(resps);
  hark_riva_config_fini(&rj->cfg);
  free(rj);
  hark_grpc_call_unref(c); /* the engine's reference */
}

static void recognize(hark_grpc_call *c, ProtobufCMessage *m) {
  Nvidia__Riva__Asr__RecognizeRequest *q = (void *)m;
  hark_riva *r = hark_grpc_call_service(c);
  recognize_job *rj = hark_xcalloc(1, sizeof *rj);
  rj->c = c;
  hark_error *err = hark_riva_config_parse(r->server, r->speech_model, r->sample_rate, q->config,
                                           false, q->id, &rj->cfg);
  if (!err) {
    snprintf(rj->cfg.st.client, sizeof rj->cfg.st.client, "%s", hark_grpc_call_peer(c));
    hark_offline_audio audio = {q->audio.data, q->audio.len,
                                rj->cfg.file ? HARK_OFFLINE_FILE : HARK_OFFLINE_RAW,
                                rj->cfg.channels, rj->cfg.separate};
    hark_grpc_call_ref(c);
    /* A client that cancels (or goes) stops the decode between blocks. */
    err = hark_offline_run(r->server, rj->cfg.model, &rj->cfg.st, &audio,
                           hark_grpc_call_cancel_token(c), q->id ? q->id->value : NULL,
                           on_recognized, rj);
    if (err) hark_grpc_call_unref(c);
  }
  if (err) {
    hark_riva_config_fini(&rj->cfg);
    free(rj);
    hark_grpc_reply_error(c, err);
  }
}

/* ---- GetRivaSpeechRecognitionConfig ------------------------------------------------- */

typedef Nvidia__Riva__Asr__RivaSpeechRecognitionConfigResponse__Config pb_model_config;
typedef Nvidia__Riva__Asr__RivaSpeechRecognitionConfigResponse__Config__ParametersEntry pb_param;

/* The reply's parts, in one arena (internal-sized). */
typedef struct config_list {
  const char *want; /* "" = every speech model */
  bool hide_paths;  /* the caller may not see model-repository: no paths */
  hark_arena *a;
  pb_model_config **models;
  size_t n, cap;
} config_list;

static void *take(hark_arena *a, size_t n) {
  void *p = hark_arena_alloc(a, n ? n : 1);
  if (!p) hark_oom("reply", n);
  return p;
}

static char *take_str(hark_arena *a, const char *s) {
  char *d = hark_arena_strndup(a, s, strlen(s));
  if (!d) hark_oom("reply", strlen(s));
  return d;
}

static void add_param(hark_arena *a, pb_model_config *mc, size_t *cap, const char *key,
                      const char *value) {
  mc->parameters =
      hark_arena_grow(a, mc->parameters, mc->n_parameters, cap, sizeof *mc->parameters);
  if (!mc->parameters) hark_oom("reply", *cap);
  pb_param *p = take(a, sizeof *p);
  nvidia__riva__asr__riva_speech_recognition_config_response__config__parameters_entry__init(p);
  p->key = take_str(a, key);
  p->value = take_str(a, value);
  mc->parameters[mc->n_parameters++] = p;
}

/* One entry of the list: `model` as Riva describes a deployment of type
 * "online" (streaming) or "offline". */
static void add_entry(config_list *l, hark_model *model, bool online) {
  const hark_model_config *cfg = hark_model_get_config(model);
  l->models = hark_arena_grow(l->a, l->models, l->n, &l->cap, sizeof *l->models);
  if (!l->models) hark_oom("reply", l->cap);
  pb_model_config *mc = take(l->a, sizeof *mc);
  nvidia__riva__asr__riva_speech_recognition_config_response__config__init(mc);
  l->models[l->n++] = mc;
  mc->model_name = take_str(l->a, hark_model_name(model));
  size_t cap = 0;
  char num[32];
  add_param(l->a, mc, &cap, "type", online ? "online" : "offline");
  add_param(l->a, mc, &cap, "streaming", online ? "true" : "false");
  snprintf(num, sizeof num, "%lld", (long long)hark_model_version(model));
  add_param(l->a, mc, &cap, "version", num);
  add_param(l->a, mc, &cap, "backend", cfg->backend ? cfg->backend : "");
  /* As ModelConfig shows them: a path (a dictionary, a weights file) only
   * to a caller allowed the model-repository API. */
  for (uint32_t i = 0; i < cfg->n_parameters; i++) {
    const char *v = cfg->parameters[i].value;
    if (l->hide_paths && hark_restrict_is_path(v)) v = HARK_RESTRICT_PATH_HIDDEN;
    add_param(l->a, mc, &cap, cfg->parameters[i].key, v);
  }
}

/* Riva lists a deployment per mode: a streaming model (sequence batching)
 * serves Recognize too, so it is listed as "online" and as "offline", and
 * a client choosing by type finds it for either. */
static void collect_model(hark_model *model, void *userp) {
  config_list *l = userp;
  const hark_model_config *cfg = hark_model_get_config(model);
  const char *name = hark_model_name(model);
  if (!hark_model_config_is_speech(cfg) || (*l->want && strcmp(l->want, name))) return;
  /* Versions come oldest first: the newest replaces an older one's entries. */
  for (size_t i = 0; i < l->n;)
    if (!strcmp(l->models[i]->model_name, name))
      l->models[i] = l->models[--l->n];
    else
      i++;
  if (cfg->sequence_batching.enabled) add_entry(l, model, true);
  add_entry(l, model, false);
}

static void get_config(hark_grpc_call *c, ProtobufCMessage *m) {
  Nvidia__Riva__Asr__RivaSpeechRecognitionConfigRequest *q = (void *)m;
  hark_riva *r = hark_grpc_call_service(c);
  config_list l = {.want = q->model_name ? q->model_name : "",
                   .hide_paths = !hark_grpc_call_allowed(c, HARK_API_MODEL_REPOSITORY),
                   .a = hark_arena_new()};
  hark_server_model_foreach(r->server, collect_model, &l);
  Nvidia__Riva__Asr__RivaSpeechRecognitionConfigResponse resp =
      NVIDIA__RIVA__ASR__RIVA_SPEECH_RECOGNITION_CONFIG_RESPONSE__INIT;
  resp.model_config = l.models;
  resp.n_model_config = l.n;
  char text[256];
  if (*l.want && !l.n) {
    snprintf(text, sizeof text, "no speech model '%s' is loaded", l.want);
    hark_grpc_reply(c, NULL, HARK_GRPC_NOT_FOUND, text);
  } else {
    hark_grpc_reply(c, &resp.base, HARK_GRPC_OK, NULL);
  }
  hark_arena_free(l.a);
}

/* ---- the service ------------------------------------------------------------------ */

#define REFUSE HARK_GRPC_REFUSE_DRAINING
static const hark_grpc_method methods[] = {
    {"Recognize", &nvidia__riva__asr__recognize_request__descriptor, recognize, REFUSE, NULL, NULL,
     HARK_API_INFERENCE, NULL},
    {"StreamingRecognize", &nvidia__riva__asr__streaming_recognize_request__descriptor,
     streaming_recognize, HARK_GRPC_STREAMING | REFUSE, streaming_half_close, streaming_closed,
     HARK_API_INFERENCE, NULL},
    {"GetRivaSpeechRecognitionConfig",
     &nvidia__riva__asr__riva_speech_recognition_config_request__descriptor, get_config, 0, NULL,
     NULL, HARK_API_METADATA, NULL},
};

static const hark_grpc_service service = {"nvidia.riva.asr.RivaSpeechRecognition", methods,
                                          sizeof methods / sizeof methods[0]};

hark_riva *hark_riva_new(hark_server *server, const hark_speech_options *opts) {
  hark_riva *r = hark_xcalloc(1, sizeof *r);
  r->server = server;
  r->speech_model =
      opts->speech_model && *opts->speech_model ? opts->speech_model : DEFAULT_SPEECH_MODEL;
  atomic_init(&r->adm.streams, 0);
  r->sample_rate = opts->sample_rate;
  r->adm.max_streams = opts->max_streams;
  r->adm.backlog_limit = opts->backlog_limit;
  r->adm.protocol = "gRPC";
  return r;
}

hark_error *hark_riva_register(hark_grpc *g, hark_riva *r) {
  return hark_grpc_add_service(g, &service, r);
}

void hark_riva_free(hark_riva *r) { free(r); }
