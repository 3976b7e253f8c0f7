/*
 * grpc_riva.c — Riva's speech recognition service
 * (nvidia.riva.asr.RivaSpeechRecognition) on hark's speech models, so
 * Riva's clients work against hark unchanged.
 *
 * StreamingRecognize is a sequence on the model, like a WebSocket stream
 * (ws.c): the first message's streaming_config picks the model (config.model,
 * else --speech-model) and its settings; every audio_content message then
 * becomes one request of the sequence (START on the first, with the
 * settings as parameters). As on a WebSocket, one request is in the
 * engine at a time: the next waits in the stream and goes when the one
 * before is done (from the worker that finished it), so the model's queue
 * counts streams, not chunks. grpc_stream.c writes the replies in order
 * and pauses reading past 64 waiting. The client's half-close sends END,
 * whose final closes the stream with OK; a call that ends otherwise
 * (cancelled, past its deadline, failed) drops its waiting audio and sends
 * END on its behalf, so the decoder goes back to the pool at once. With
 * interim_results on, every audio message gets exactly one
 * response (Riva's streaming benchmark client counts on it): a partial, a
 * final, or no results when there is nothing to say yet; with it off only
 * non-empty finals are sent. Any error ends the stream with its status
 * after the replies before it.
 *
 * Audio: LINEAR_PCM (16-bit little-endian mono), MULAW and ALAW (decoded
 * here to 16-bit PCM), or ENCODING_UNSPECIFIED with a WAV header at the
 * start (the model reads it); sample_rate_hertz 8000..48000, resampled by
 * the model.
 *
 * Recognize runs the whole recording as one request (a one-shot sequence);
 * GetRivaSpeechRecognitionConfig lists the speech models (a model with a
 * BYTES input AUDIO and an output TRANSCRIPT) and their parameters.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "frontend/asr_result.h"
#include "frontend/grpc_impl.h"
#include "frontend/stream_admit.h"
#include "hark/backend.h"
#include "hark/config.h"
#include "riva_asr.pb-c.h"
#include "util/log.h"

typedef Nvidia__Riva__Asr__RecognitionConfig recognition_config;
typedef Nvidia__Riva__Asr__SpeechRecognitionAlternative pb_alternative;
typedef Nvidia__Riva__Asr__WordInfo pb_word;

#define FREE_MSG(m) protobuf_c_message_free_unpacked((ProtobufCMessage *)(m), NULL)
/* Correlation ids of gRPC streams: the top two bits set, apart from the
 * WebSocket streams' (top bit only) and from ids HTTP clients choose. */
#define CORR_ID_BITS (3ull << 62)
#define MAX_ALTERNATIVES 16

static _Atomic uint64_t next_corr_id = 1;

/* ---- settings --------------------------------------------------------------- */

/* What a RecognitionConfig asks for, checked against the model. */
typedef struct riva_settings {
  hark_model *model; /* a reference */
  int encoding;
  uint32_t sample_rate;      /* 0: the WAV header's, else 16000 */
  uint32_t max_alternatives; /* >= 1 */
  bool words;
  int32_t silence_ms, startspeech_ms; /* 0: the model's */
  char *request_id;                   /* echoed; NULL when none */
} riva_settings;

static void settings_fini(riva_settings *st) {
  if (st->model) hark_model_release(st->model);
  free(st->request_id);
  memset(st, 0, sizeof *st);
}

static bool has_io(const hark_model_io *io, uint32_t n, const char *name, hark_datatype type) {
  for (uint32_t i = 0; i < n; i++)
    if (!strcmp(io[i].name, name) && io[i].datatype == type) return true;
  return false;
}

/* A speech model: audio in as BYTES "AUDIO", text out as "TRANSCRIPT". */
static bool is_speech_model(const hark_model_config *cfg) {
  return has_io(cfg->inputs, cfg->n_inputs, "AUDIO", HARK_TYPE_BYTES) &&
         has_io(cfg->outputs, cfg->n_outputs, "TRANSCRIPT", HARK_TYPE_BYTES);
}

static const char *encoding_name(int e) {
  const ProtobufCEnumValue *v =
      protobuf_c_enum_descriptor_get_value(&nvidia__riva__audio_encoding__descriptor, e);
  return v ? v->name : "unknown";
}

static hark_error *check_endpointing(const Nvidia__Riva__Asr__EndpointingConfig *ep,
                                     riva_settings *st) {
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
  st->startspeech_ms = ep->start_history;
  st->silence_ms = ep->stop_history;
  return NULL;
}

/* Reads `rc` (NULL: every default) into st, with a reference to the model
 * it names. On error st holds nothing. */
static hark_error *settings_parse(hark_grpc *g, const recognition_config *rc, bool streaming,
                                  const Nvidia__Riva__RequestId *id, riva_settings *st) {
  static const recognition_config defaults = NVIDIA__RIVA__ASR__RECOGNITION_CONFIG__INIT;
  if (!rc) rc = &defaults;
  memset(st, 0, sizeof *st);
  st->encoding = rc->encoding;
  switch (rc->encoding) {
  case NVIDIA__RIVA__AUDIO_ENCODING__ENCODING_UNSPECIFIED:
  case NVIDIA__RIVA__AUDIO_ENCODING__LINEAR_PCM:
  case NVIDIA__RIVA__AUDIO_ENCODING__MULAW:
  case NVIDIA__RIVA__AUDIO_ENCODING__ALAW: break;
  default:
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "encoding %s (%d) is not supported: send LINEAR_PCM, MULAW or ALAW, or "
                          "leave it unspecified and start the audio with a WAV header",
                          encoding_name(rc->encoding), (int)rc->encoding);
  }
  if (rc->sample_rate_hertz != 0 && (rc->sample_rate_hertz < 8000 || rc->sample_rate_hertz > 48000))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "sample_rate_hertz %d is out of range: 8000..48000 Hz are supported",
                          (int)rc->sample_rate_hertz);
  st->sample_rate = (uint32_t)rc->sample_rate_hertz;
  if (!st->sample_rate && (rc->encoding == NVIDIA__RIVA__AUDIO_ENCODING__MULAW ||
                           rc->encoding == NVIDIA__RIVA__AUDIO_ENCODING__ALAW))
    st->sample_rate = 8000; /* G.711 is telephone audio */
  if (rc->audio_channel_count > 1)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "audio_channel_count %d: only mono audio (1 channel) is supported",
                          (int)rc->audio_channel_count);
  if (rc->diarization_config && rc->diarization_config->enable_speaker_diarization)
    return hark_error_new(HARK_ERR_INVALID_ARG, "speaker diarization is not supported");
  if (rc->max_alternatives < 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "max_alternatives must not be negative, got %d",
                          (int)rc->max_alternatives);
  st->max_alternatives = rc->max_alternatives == 0 ? 1
                         : rc->max_alternatives > MAX_ALTERNATIVES ? MAX_ALTERNATIVES
                                                                   : (uint32_t)rc->max_alternatives;
  st->words = rc->enable_word_time_offsets;
  hark_error *err = check_endpointing(rc->endpointing_config, st);
  if (err) return err;
  const char *name = rc->model && *rc->model ? rc->model : g->speech_model;
  err = hark_server_model_acquire(g->server, name, -1, &st->model);
  if (err) return err;
  const hark_model_config *cfg = hark_model_get_config(st->model);
  const char *lang = hark_model_config_parameter(cfg, "language_code");
  if (!is_speech_model(cfg))
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "model '%s' is not a speech model (it needs a BYTES input AUDIO and an "
                         "output TRANSCRIPT)", name);
  else if (streaming && !cfg->sequence_batching.enabled)
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "model '%s' does not stream (it has no sequence_batching): use Recognize",
                         name);
  else if (lang && rc->language_code && *rc->language_code && strcasecmp(lang, rc->language_code))
    err = hark_error_new(HARK_ERR_INVALID_ARG, "model '%s' recognises %s, not %s", name, lang,
                         rc->language_code);
  if (!err && id && id->value && *id->value && !(st->request_id = strdup(id->value)))
    err = hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  if (err) settings_fini(st);
  return err;
}

/* ---- audio ------------------------------------------------------------------- */

/* G.711 expansions to 16-bit linear PCM. */
static int16_t mulaw_sample(uint8_t b) {
  b = (uint8_t)~b;
  int t = (((b & 0x0F) << 3) + 0x84) << ((b & 0x70) >> 4);
  return (int16_t)((b & 0x80) ? 0x84 - t : t - 0x84);
}

static int16_t alaw_sample(uint8_t b) {
  b ^= 0x55;
  int seg = (b & 0x70) >> 4;
  int t = (b & 0x0F) << 4;
  t = seg == 0 ? t + 8 : (t + 0x108) << (seg - 1);
  return (int16_t)((b & 0x80) ? t : -t);
}

/* The request's AUDIO element: 4 bytes of room for its length, then the
 * audio as 16-bit PCM (G.711 expanded). *len: the PCM bytes. */
static char *audio_element(int encoding, const uint8_t *p, size_t n, size_t *len) {
  bool g711 = encoding == NVIDIA__RIVA__AUDIO_ENCODING__MULAW ||
              encoding == NVIDIA__RIVA__AUDIO_ENCODING__ALAW;
  *len = g711 ? 2 * n : n;
  if (*len > UINT32_MAX) return NULL;
  char *mem = malloc(4 + *len);
  if (!mem) return NULL;
  if (!g711) {
    if (n) memcpy(mem + 4, p, n);
    return mem;
  }
  for (size_t i = 0; i < n; i++) {
    int16_t s = encoding == NVIDIA__RIVA__AUDIO_ENCODING__MULAW ? mulaw_sample(p[i])
                                                                 : alaw_sample(p[i]);
    uint16_t u = (uint16_t)s;
    mem[4 + 2 * i] = (char)(u & 0xFF);
    mem[5 + 2 * i] = (char)(u >> 8);
  }
  return mem;
}

static void set_int_param(hark_request *req, const char *key, long v) {
  char num[32];
  snprintf(num, sizeof num, "%ld", v);
  hark_request_set_parameter(req, key, num);
}

/*
 * Builds a request of `st->model` carrying `audio` and hands it to the
 * engine, answering to fn(userp). `corr_id` 0 is a one-shot sequence (the
 * whole recording). On error nothing reached the engine.
 */
static hark_error *submit(hark_grpc *g, const riva_settings *st, uint64_t corr_id, uint32_t flags,
                          bool partials, const char *id, const uint8_t *audio, size_t n,
                          hark_response_fn fn, void *userp) {
  size_t len;
  char *mem = audio_element(st->encoding, audio, n, &len);
  if (!mem) return hark_error_new(HARK_ERR_INTERNAL, "out of memory for %zu bytes of audio", n);
  memcpy(mem, &(uint32_t){(uint32_t)len}, 4); /* the BYTES element's length, little-endian */
  hark_request *req = hark_request_new(st->model);
  if (!req) {
    free(mem);
    return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  }
  hark_request_attach(req, mem, free);
  bool batched = hark_model_get_config(st->model)->max_batch_size > 0;
  static const int64_t shape1[1] = {1}, shape2[2] = {1, 1};
  hark_error *err = hark_request_add_input(req, "AUDIO", HARK_TYPE_BYTES, batched ? shape2 : shape1,
                                           batched ? 2 : 1, mem, len + 4);
  if (!err) {
    if (corr_id) {
      hark_request_set_correlation_id(req, corr_id);
      hark_request_set_flags(req, flags);
    }
    if (!corr_id || (flags & HARK_REQUEST_SEQUENCE_START)) {
      if (st->sample_rate) set_int_param(req, "sample_rate", (long)st->sample_rate);
      set_int_param(req, "max_alternatives", st->max_alternatives > 1 ? (long)st->max_alternatives : 0);
      hark_request_set_parameter(req, "words", st->words ? "true" : "false");
      if (st->silence_ms) set_int_param(req, "silence_ms", st->silence_ms);
      if (st->startspeech_ms) set_int_param(req, "startspeech_ms", st->startspeech_ms);
    }
    if (!partials) hark_request_set_parameter(req, "partial", "false");
    if (id) hark_request_set_id(req, id);
    hark_request_set_callback(req, fn, userp);
    err = hark_server_infer(g->server, req);
  }
  if (err) hark_request_free(req);
  return err;
}

/* ---- results as protobuf -------------------------------------------------------- */

/* The alternatives of one result, built on the heap and freed together. */
typedef struct alt_set {
  pb_alternative alt[MAX_ALTERNATIVES];
  pb_alternative *alt_p[MAX_ALTERNATIVES];
  size_t n_alt;
  pb_word *words;
  pb_word **word_p;
  size_t n_words;
  bool failed; /* out of memory */
} alt_set;

static char *dup_n(alt_set *a, const char *p, uint32_t len) {
  char *s = malloc((size_t)len + 1);
  if (!s) {
    a->failed = true;
    return (char *)protobuf_c_empty_string;
  }
  memcpy(s, p, len);
  s[len] = '\0';
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

/* Alternatives of `r`: the transcript first (the words belong to it), then
 * up to max - 1 other n-best texts (finals only); confidences and words
 * (when asked) on finals, as Riva sends them. */
static void alt_set_build(alt_set *a, const hark_asr_result *r, uint32_t max, bool words) {
  memset(a, 0, sizeof *a);
  alt_add(a, r->text, r->text_len, r->confidence, r->is_final);
  for (uint32_t i = 0; r->is_final && a->n_alt < max && a->n_alt < MAX_ALTERNATIVES; i++) {
    const char *text;
    uint32_t len;
    float conf;
    if (!r->alts || !hark_asr_result_alternative(r, i, &text, &len, &conf)) break;
    if (len == r->text_len && !memcmp(text, r->text, len)) continue;
    alt_add(a, text, len, conf, true);
  }
  if (!r->is_final || !words || !r->n_words || !a->n_alt) return;
  a->words = calloc(r->n_words, sizeof *a->words);
  a->word_p = calloc(r->n_words, sizeof *a->word_p);
  if (!a->words || !a->word_p) {
    a->failed = true;
    return;
  }
  for (uint32_t i = 0; i < r->n_words; i++) {
    const char *w;
    uint32_t len;
    float start, end, conf;
    if (!hark_asr_result_word(r, i, &w, &len, &start, &end, &conf)) break;
    pb_word *pw = &a->words[a->n_words];
    nvidia__riva__asr__word_info__init(pw);
    pw->start_time = ms(start);
    pw->end_time = ms(end);
    pw->word = dup_n(a, w, len);
    pw->confidence = conf;
    a->word_p[a->n_words++] = pw;
  }
  a->alt[0].words = a->word_p;
  a->alt[0].n_words = a->n_words;
}

static void alt_set_free(alt_set *a) {
  for (size_t i = 0; i < a->n_alt; i++)
    if (a->alt[i].transcript != protobuf_c_empty_string) free(a->alt[i].transcript);
  for (size_t i = 0; i < a->n_words; i++)
    if (a->words[i].word != protobuf_c_empty_string) free(a->words[i].word);
  free(a->words);
  free(a->word_p);
}

/* ---- StreamingRecognize --------------------------------------------------------- */

/* One request of the stream waiting for its turn in the engine. */
typedef struct riva_item {
  struct riva_item *next;
  hark_grpc_job *j; /* its place among the replies; NULL: an abandoned END */
  uint32_t flags;   /* START / END */
  size_t n;
  uint8_t audio[]; /* as the client sent it */
} riva_item;

typedef struct riva_stream {
  hark_grpc *g;
  riva_settings st;
  uint64_t corr_id;
  char id[32]; /* "riva-<n>": in logs, and the id of its requests */
  bool interim;
  uint32_t n_audio;            /* audio messages so far */
  bool seq_started, seq_ended; /* queue thread only: flags of the next item */
  /* One request in the engine at a time, as a WebSocket stream: the
   * others wait here (c->mu), so a stream's backlog is its own and the
   * model's queue shows streams, not chunks, to admission control. */
  riva_item *q_head, *q_tail;
  bool inflight;
} riva_stream;

static void stream_free(void *p) {
  riva_stream *rs = p;
  for (riva_item *it = rs->q_head, *next; it; it = next) { /* none left, normally */
    next = it->next;
    free(it);
  }
  atomic_fetch_sub(&rs->g->speech_streams, 1);
  settings_fini(&rs->st);
  free(rs);
}

/* The reply to one request of the stream (c->mu held): packed onto the
 * job, or nothing when there is nothing to send. */
static void stream_reply_locked(hark_grpc_call *c, hark_grpc_job *j, const hark_response *resp,
                                bool end) {
  riva_stream *rs = c->svc;
  hark_asr_result r;
  hark_asr_result_read(resp, &r);
  bool say = r.is_final ? (r.text_len > 0 || (rs->interim && !end)) : rs->interim && !end;
  if (!say) return;
  Nvidia__Riva__Asr__StreamingRecognizeResponse msg =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_RESPONSE__INIT;
  Nvidia__Riva__Asr__StreamingRecognitionResult res =
      NVIDIA__RIVA__ASR__STREAMING_RECOGNITION_RESULT__INIT;
  Nvidia__Riva__Asr__StreamingRecognitionResult *res_p = &res;
  Nvidia__Riva__RequestId id = NVIDIA__RIVA__REQUEST_ID__INIT;
  alt_set a;
  alt_set_build(&a, &r, rs->st.max_alternatives, rs->st.words);
  /* Nothing heard yet, or an utterance without words: a response with no
   * results keeps one response per audio message. */
  if (r.text_len > 0) {
    res.alternatives = a.alt_p;
    res.n_alternatives = a.n_alt;
    res.is_final = r.is_final;
    res.channel_tag = 1;
    res.audio_processed = r.audio_processed;
    msg.results = &res_p;
    msg.n_results = 1;
  }
  if (rs->st.request_id) {
    id.value = rs->st.request_id;
    msg.id = &id;
  }
  size_t size = 0;
  grpc_byte_buffer *bb = a.failed ? NULL : hark_grpc_pack(&msg.base, c->g->max_message_bytes, &size);
  alt_set_free(&a);
  if (!bb || !hark_grpc_job_add_out(j, bb)) {
    if (c->stream_code == GRPC_STATUS_OK) {
      c->stream_code = bb || a.failed ? GRPC_STATUS_INTERNAL : GRPC_STATUS_RESOURCE_EXHAUSTED;
      snprintf(c->stream_details, sizeof c->stream_details,
               bb || a.failed ? "out of memory" : "a response of %zu bytes is over the limit", size);
    }
    c->read_done = true;
  }
}

static void item_submit(hark_grpc_call *c, riva_item *it);

/* The next waiting item, or none in flight any more (c->mu held). */
static riva_item *next_item_locked(riva_stream *rs) {
  riva_item *it = rs->q_head;
  if (it && !(rs->q_head = it->next)) rs->q_tail = NULL;
  if (!it) rs->inflight = false;
  return it;
}

/* The engine's callback for a stream request, on a worker thread. The job
 * keeps the latest response in `first` until the final; then the stream's
 * next waiting request goes to the engine. */
static void on_stream_response(hark_response *resp, uint32_t flags, hark_error *err,
                               void *userp) {
  hark_grpc_job *j = userp;
  hark_grpc_call *c = j->c;
  riva_stream *rs = c->svc;
  riva_item *next = NULL;
  pthread_mutex_lock(&c->mu);
  if (resp) {
    if (j->first) hark_response_free(j->first);
    j->first = resp;
  }
  bool final = flags & HARK_RESPONSE_FINAL;
  if (err && c->stream_code == GRPC_STATUS_OK) {
    c->stream_code = hark_grpc_status(hark_error_code(err));
    snprintf(c->stream_details, sizeof c->stream_details, "%s", hark_error_message(err));
    c->read_done = true;
  }
  if (final) {
    if (!c->closed && c->stream_code == GRPC_STATUS_OK)
      stream_reply_locked(c, j, j->first, j->sequence_id != NULL);
    if (j->first) hark_response_free(j->first);
    j->first = NULL;
    j->done = true;
    next = next_item_locked(rs);
  }
  pthread_mutex_unlock(&c->mu);
  hark_error_free(err);
  if (final) {
    if (next) item_submit(c, next);
    hark_grpc_stream_pump(c);
    hark_grpc_call_unref(c); /* the engine's reference */
  }
}

static void on_abandoned_end(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  hark_response_free(resp);
  hark_error_free(err);
}

/*
 * Hands `it` to the engine (any thread; the stream has nothing else in
 * flight). A stream that failed or was cancelled sends no more audio: what
 * waits is answered with nothing (its jobs are done) — but an END still
 * goes, so the model ends the sequence. If the engine refuses the request,
 * the stream fails and the same happens to the rest.
 */
static void item_submit(hark_grpc_call *c, riva_item *it) {
  riva_stream *rs = c->svc;
  while (it) {
    pthread_mutex_lock(&c->mu);
    bool skip = (c->closed || c->stream_code != GRPC_STATUS_OK) &&
                !(it->flags & HARK_REQUEST_SEQUENCE_END);
    pthread_mutex_unlock(&c->mu);
    hark_error *err = NULL;
    if (!skip) {
      hark_response_fn fn = it->j ? on_stream_response : on_abandoned_end;
      err = submit(c->g, &rs->st, rs->corr_id, it->flags, rs->interim, rs->id, it->audio, it->n,
                   fn, it->j);
      if (!err && it->j) { /* the engine has it: on_stream_response goes on */
        free(it);
        return;
      }
    }
    if (err) {
      HARK_LOG_STREAM(HARK_LOG_VERBOSE, rs->id, "riva: request refused: %s",
                      hark_error_message(err));
      hark_grpc_stream_fail(c, hark_grpc_status(hark_error_code(err)), hark_error_message(err));
      hark_error_free(err);
    }
    pthread_mutex_lock(&c->mu);
    if (it->j) it->j->done = true;
    riva_item *next = next_item_locked(rs);
    pthread_mutex_unlock(&c->mu);
    if (it->j) {
      hark_grpc_stream_pump(c);
      hark_grpc_call_unref(c); /* the reference it held for the engine */
    }
    free(it);
    it = next;
  }
}

/* Queues one request of the stream (and its place among the replies) and
 * submits it if nothing is in flight. `end`: the client's half-close (no
 * audio); `reply`: false for the END of an abandoned stream. Queue thread. */
static void stream_submit(hark_grpc_call *c, const uint8_t *audio, size_t n, bool end,
                          bool reply) {
  riva_stream *rs = c->svc;
  riva_item *it = malloc(sizeof *it + n);
  hark_grpc_job *j = reply ? calloc(1, sizeof *j) : NULL;
  if (!it || (reply && !j)) {
    free(it);
    free(j);
    hark_grpc_stream_fail(c, GRPC_STATUS_INTERNAL, "out of memory");
    return;
  }
  *it = (riva_item){.j = j, .n = n,
                    .flags = (rs->seq_started ? 0 : HARK_REQUEST_SEQUENCE_START) |
                             (end ? HARK_REQUEST_SEQUENCE_END : 0)};
  if (n) memcpy(it->audio, audio, n);
  rs->seq_started = true;
  if (end) rs->seq_ended = true;
  if (j) {
    j->c = c;
    j->model_version = -1;
    j->sequence_id = end ? (const void *)rs : NULL; /* marks the END job */
    hark_grpc_call_ref(c); /* held until the engine's final, or the item is dropped */
  }
  pthread_mutex_lock(&c->mu);
  if (j) hark_grpc_stream_append_locked(c, j);
  bool now = !rs->inflight;
  if (now) {
    rs->inflight = true;
  } else {
    if (rs->q_tail) rs->q_tail->next = it;
    else rs->q_head = it;
    rs->q_tail = it;
  }
  pthread_mutex_unlock(&c->mu);
  if (now) item_submit(c, it);
}

static hark_error *stream_configure(hark_grpc_call *c,
                                    const Nvidia__Riva__Asr__StreamingRecognizeRequest *q) {
  hark_grpc *g = c->g;
  const Nvidia__Riva__Asr__StreamingRecognitionConfig *sc = q->streaming_config;
  if (atomic_load(&g->stopping) || hark_server_is_draining(g->server))
    return hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down");
  riva_stream *rs = calloc(1, sizeof *rs);
  if (!rs) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  hark_error *err = settings_parse(g, sc ? sc->config : NULL, true, q->id, &rs->st);
  if (err) {
    free(rs);
    return err;
  }
  char msg[256];
  if (atomic_fetch_add(&g->speech_streams, 1) >= g->max_streams) {
    atomic_fetch_sub(&g->speech_streams, 1);
    settings_fini(&rs->st);
    free(rs);
    return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED,
                          "too many streams: the server serves at most %u speech streams over "
                          "gRPC at once (--max-streams)", g->max_streams);
  }
  rs->g = g;
  if (hark_stream_model_overloaded(rs->st.model, g->stream_backlog_limit, msg, sizeof msg)) {
    stream_free(rs);
    return hark_error_new(HARK_ERR_UNAVAILABLE, "%s", msg);
  }
  rs->interim = sc && sc->interim_results;
  rs->corr_id = CORR_ID_BITS | atomic_fetch_add(&next_corr_id, 1);
  snprintf(rs->id, sizeof rs->id, "riva-%llu", (unsigned long long)(rs->corr_id & ~CORR_ID_BITS));
  c->svc = rs;
  c->svc_free = stream_free;
  HARK_LOG_STREAM(HARK_LOG_VERBOSE, rs->id,
                  "riva: stream opened on model '%s' version %lld (%s, %u Hz, interim %s)",
                  hark_model_name(rs->st.model), (long long)hark_model_version(rs->st.model),
                  encoding_name(rs->st.encoding), rs->st.sample_rate, rs->interim ? "on" : "off");
  return NULL;
}

static void streaming_recognize(hark_grpc_call *c, ProtobufCMessage *m) {
  Nvidia__Riva__Asr__StreamingRecognizeRequest *q = (void *)m;
  pthread_mutex_lock(&c->mu);
  bool over = hark_grpc_stream_failed_locked(c) || c->closed;
  pthread_mutex_unlock(&c->mu);
  riva_stream *rs = c->svc;
  char text[200];
  if (over || (rs && rs->seq_ended)) {
    /* failing with its error, or cancelled: drop what still arrives (a
     * request after the sequence's END would open a new one) */
  } else if (q->streaming_request_case ==
             NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_STREAMING_CONFIG) {
    hark_error *err = NULL;
    if (rs) {
      snprintf(text, sizeof text,
               "streaming_config must come only in the first message; it came again after %u "
               "audio messages", rs->n_audio);
      hark_grpc_stream_fail(c, GRPC_STATUS_INVALID_ARGUMENT, text);
    } else if ((err = stream_configure(c, q))) {
      hark_grpc_stream_fail(c, hark_grpc_status(hark_error_code(err)), hark_error_message(err));
      hark_error_free(err);
    }
  } else if (q->streaming_request_case ==
             NVIDIA__RIVA__ASR__STREAMING_RECOGNIZE_REQUEST__STREAMING_REQUEST_AUDIO_CONTENT) {
    if (!rs) {
      hark_grpc_stream_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                            "the first message must carry streaming_config; audio came first");
    } else {
      rs->n_audio++;
      stream_submit(c, q->audio_content.data, q->audio_content.len, false, true);
    }
  } else {
    hark_grpc_stream_fail(c, GRPC_STATUS_INVALID_ARGUMENT,
                          "a StreamingRecognizeRequest needs streaming_config or audio_content");
  }
  FREE_MSG(q);
}

/* The client is done sending: END gives the last utterance its final. */
static void streaming_half_close(hark_grpc_call *c) {
  riva_stream *rs = c->svc;
  pthread_mutex_lock(&c->mu);
  bool failed = hark_grpc_stream_failed_locked(c);
  pthread_mutex_unlock(&c->mu);
  if (rs && rs->seq_started && !rs->seq_ended && !failed) stream_submit(c, NULL, 0, true, true);
}

/* The call is over. If its sequence is still open (the client cancelled or
 * its deadline passed, or the stream failed), end it now so the model
 * gives its decoder back, rather than at the idle timeout. */
static void streaming_closed(hark_grpc_call *c) {
  riva_stream *rs = c->svc;
  if (!rs) return;
  pthread_mutex_lock(&c->mu);
  grpc_status_code code = c->stream_code;
  char details[sizeof c->stream_details];
  memcpy(details, c->stream_details, sizeof details);
  pthread_mutex_unlock(&c->mu);
  HARK_LOG_STREAM(code == GRPC_STATUS_INTERNAL ? HARK_LOG_WARN : HARK_LOG_VERBOSE, rs->id,
                  "riva: stream over after %u audio messages: %s%s%s", rs->n_audio,
                  c->cancelled ? "cancelled" : code == GRPC_STATUS_OK ? "ok" : "failed",
                  code != GRPC_STATUS_OK ? ": " : "", code != GRPC_STATUS_OK ? details : "");
  /* After whatever is in flight; the audio still waiting is dropped. */
  if (rs->seq_started && !rs->seq_ended) stream_submit(c, NULL, 0, true, false);
}

/* ---- Recognize ---------------------------------------------------------------- */

typedef struct recognize_job {
  hark_grpc_call *c;
  riva_settings st;
  hark_response *last;
} recognize_job;

static void on_recognize_response(hark_response *resp, uint32_t flags, hark_error *err,
                                  void *userp) {
  recognize_job *rj = userp;
  if (resp) {
    hark_response_free(rj->last);
    rj->last = resp;
  }
  if (!(flags & HARK_RESPONSE_FINAL)) {
    hark_error_free(err);
    return;
  }
  hark_grpc_call *c = rj->c;
  if (err) {
    hark_grpc_reply_error(c, err);
  } else {
    hark_asr_result r;
    hark_asr_result_read(rj->last, &r);
    r.is_final = true; /* the whole recording: one final */
    alt_set a;
    alt_set_build(&a, &r, rj->st.max_alternatives, rj->st.words);
    Nvidia__Riva__Asr__RecognizeResponse msg = NVIDIA__RIVA__ASR__RECOGNIZE_RESPONSE__INIT;
    Nvidia__Riva__Asr__SpeechRecognitionResult res =
        NVIDIA__RIVA__ASR__SPEECH_RECOGNITION_RESULT__INIT;
    Nvidia__Riva__Asr__SpeechRecognitionResult *res_p = &res;
    Nvidia__Riva__RequestId id = NVIDIA__RIVA__REQUEST_ID__INIT;
    res.alternatives = a.alt_p;
    res.n_alternatives = a.n_alt;
    res.channel_tag = 1;
    res.audio_processed = r.audio_processed;
    msg.results = &res_p;
    msg.n_results = 1;
    if (rj->st.request_id) {
      id.value = rj->st.request_id;
      msg.id = &id;
    }
    if (a.failed) hark_grpc_reply(c, NULL, GRPC_STATUS_INTERNAL, "out of memory");
    else hark_grpc_reply(c, &msg.base, GRPC_STATUS_OK, NULL);
    alt_set_free(&a);
  }
  hark_response_free(rj->last);
  settings_fini(&rj->st);
  free(rj);
  hark_grpc_call_unref(c); /* the engine's reference */
}

static void recognize(hark_grpc_call *c, ProtobufCMessage *m) {
  Nvidia__Riva__Asr__RecognizeRequest *q = (void *)m;
  recognize_job *rj = calloc(1, sizeof *rj);
  hark_error *err = !rj ? hark_error_new(HARK_ERR_INTERNAL, "out of memory")
                    : hark_server_is_draining(c->g->server)
                        ? hark_error_new(HARK_ERR_UNAVAILABLE, "Server is shutting down")
                        : settings_parse(c->g, q->config, false, q->id, &rj->st);
  if (!err) {
    rj->c = c;
    hark_grpc_call_ref(c);
    err = submit(c->g, &rj->st, 0, 0, false, q->id && *q->id->value ? q->id->value : NULL,
                 q->audio.data, q->audio.len, on_recognize_response, rj);
    if (err) {
      hark_grpc_call_unref(c);
      settings_fini(&rj->st);
    }
  }
  if (err) {
    free(rj);
    hark_grpc_reply_error(c, err);
  }
  FREE_MSG(q);
}

/* ---- GetRivaSpeechRecognitionConfig ------------------------------------------------- */

typedef Nvidia__Riva__Asr__RivaSpeechRecognitionConfigResponse__Config pb_model_config;
typedef Nvidia__Riva__Asr__RivaSpeechRecognitionConfigResponse__Config__ParametersEntry pb_param;

typedef struct config_list {
  const char *want; /* "" = every speech model */
  pb_model_config **models;
  size_t n, cap;
  bool failed;
} config_list;

static bool add_param(pb_model_config *mc, const char *key, const char *value) {
  pb_param **g = realloc(mc->parameters, (mc->n_parameters + 1) * sizeof *g);
  pb_param *p = malloc(sizeof *p);
  if (g) mc->parameters = g;
  if (!g || !p) {
    free(p);
    return false;
  }
  nvidia__riva__asr__riva_speech_recognition_config_response__config__parameters_entry__init(p);
  p->key = strdup(key);
  p->value = strdup(value);
  mc->parameters[mc->n_parameters++] = p;
  return p->key && p->value;
}

static void collect_model(hark_model *model, void *userp) {
  config_list *l = userp;
  const hark_model_config *cfg = hark_model_get_config(model);
  const char *name = hark_model_name(model);
  if (!is_speech_model(cfg) || (*l->want && strcmp(l->want, name))) return;
  for (size_t i = 0; i < l->n; i++) /* versions come oldest first: keep the newest */
    if (!strcmp(l->models[i]->model_name, name)) {
      FREE_MSG(l->models[i]);
      l->models[i] = l->models[--l->n];
      break;
    }
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 4;
    pb_model_config **g = realloc(l->models, cap * sizeof *g);
    if (!g) {
      l->failed = true;
      return;
    }
    l->models = g;
    l->cap = cap;
  }
  pb_model_config *mc = malloc(sizeof *mc);
  if (!mc) {
    l->failed = true;
    return;
  }
  nvidia__riva__asr__riva_speech_recognition_config_response__config__init(mc);
  l->models[l->n++] = mc;
  char num[32];
  bool ok = (mc->model_name = strdup(name)) != NULL;
  bool streaming = cfg->sequence_batching.enabled;
  ok = ok && add_param(mc, "type", streaming ? "online" : "offline");
  ok = ok && add_param(mc, "streaming", streaming ? "true" : "false");
  snprintf(num, sizeof num, "%lld", (long long)hark_model_version(model));
  ok = ok && add_param(mc, "version", num);
  ok = ok && add_param(mc, "backend", cfg->backend ? cfg->backend : "");
  for (uint32_t i = 0; ok && i < cfg->n_parameters; i++)
    ok = add_param(mc, cfg->parameters[i].key, cfg->parameters[i].value);
  if (!ok) l->failed = true;
}

static void get_config(hark_grpc_call *c, ProtobufCMessage *m) {
  Nvidia__Riva__Asr__RivaSpeechRecognitionConfigRequest *q = (void *)m;
  config_list l = {.want = q->model_name ? q->model_name : ""};
  hark_server_model_foreach(c->g->server, collect_model, &l);
  Nvidia__Riva__Asr__RivaSpeechRecognitionConfigResponse resp =
      NVIDIA__RIVA__ASR__RIVA_SPEECH_RECOGNITION_CONFIG_RESPONSE__INIT;
  resp.model_config = l.models;
  resp.n_model_config = l.n;
  char text[256];
  if (l.failed) {
    hark_grpc_reply(c, NULL, GRPC_STATUS_INTERNAL, "out of memory");
  } else if (*l.want && !l.n) {
    snprintf(text, sizeof text, "no speech model '%s' is loaded", l.want);
    hark_grpc_reply(c, NULL, GRPC_STATUS_NOT_FOUND, text);
  } else {
    hark_grpc_reply(c, &resp.base, GRPC_STATUS_OK, NULL);
  }
  for (size_t i = 0; i < l.n; i++) FREE_MSG(l.models[i]);
  free(l.models);
  FREE_MSG(q);
}

/* ---- the method table ------------------------------------------------------------- */

#define RIVA_ASR "/nvidia.riva.asr.RivaSpeechRecognition/"
static const hark_grpc_method methods[] = {
    {RIVA_ASR "Recognize", &nvidia__riva__asr__recognize_request__descriptor, recognize, false,
     NULL, NULL},
    {RIVA_ASR "StreamingRecognize", &nvidia__riva__asr__streaming_recognize_request__descriptor,
     streaming_recognize, true, streaming_half_close, streaming_closed},
    {RIVA_ASR "GetRivaSpeechRecognitionConfig",
     &nvidia__riva__asr__riva_speech_recognition_config_request__descriptor, get_config, false,
     NULL, NULL},
};

const hark_grpc_method *hark_grpc_riva_method_find(const char *path, size_t len) {
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strlen(methods[i].path) == len && memcmp(methods[i].path, path, len) == 0)
      return &methods[i];
  return NULL;
}
