/*
 * session.c — a speech stream as a sequence on its model (see session.h).
 *
 * Items enter a queue under the session's lock; whoever finds nothing in
 * flight takes the head and runs the chain: build the item's request and
 * hand it to the engine, or, when the item cannot run (dropped, or
 * failed before it started), report it and take the next. The engine's
 * final for the item in flight reports it and continues the chain on that
 * worker. So one request of the stream is in the engine at a time, items
 * are reported in the order they came, and neither the engine nor the
 * codec is ever called with the lock held. The session frees itself when
 * the codec has closed it and the chain has run dry.
 *
 * VAD-gated models (config parameter vad_model, e.g. asr_silero over
 * silero_vad): the session normalises the stream's audio once to 16 kHz
 * PCM (hark_audio_norm: WAV header stripped, G.711 expanded, resampled),
 * cuts it into 512-sample frames (the partial tail waits for the next
 * chunk; at END it is zero-padded to a whole frame, so the last audio has
 * a probability too), and an item's run has two phases: its frames go to
 * the VAD model as one request ([1, frames, 512]) of a sequence with the
 * stream's correlation id in the sessions' namespace (START on the
 * stream's first request, END on the END item's: its frame is a zero frame
 * whose probability is not used when no tail is left), so that one batched
 * round of the VAD serves a chunk of every live stream; when its
 * probabilities are back, the item's request to the speech model goes with
 * the 16 kHz audio and VAD_PROB (the frames' probabilities). A VAD failure
 * fails the item with the VAD's reason; an END still reaches the speech
 * model, so its stream state is freed. A client that vanishes mid-frame:
 * its tail is dropped and the VAD sequence ends on a zero frame.
 */
#include "frontend/speech/session.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "frontend/http/http.h"
#include "hark/audio.h"
#include "hark/config.h"
#include "hark/model.h"
#include "util/alloc.h"
#include "util/log.h"

#define DEFAULT_MAX_STREAMS 1024u
#define VAD_RATE 16000u
#define VAD_FRAME 512u /* samples per VAD frame (32 ms) */

typedef struct item item;
struct item {
  struct item *next;
  hark_speech_session *s;
  hark_speech_item_kind kind;
  bool reply;          /* false: the END the session sends for a gone client */
  void *tag;           /* the codec's */
  char *mem;           /* the AUDIO element: 4-byte length, then the PCM */
  size_t len;          /* PCM bytes */
  size_t budget;       /* bytes taken from the in-flight budget, given back when freed */
  hark_error *err;     /* set: fails when its turn comes (no memory for it) */
  hark_response *last; /* the latest response, until the final */
  /* gated models */
  float *frames;       /* n_frames x VAD_FRAME samples for the VAD, until sent */
  uint32_t n_frames;   /* frames of this item */
  uint32_t n_probs;    /* of them, those whose probabilities go to the model */
  float *probs;        /* one per frame, from the VAD */
  hark_error *vad_err; /* the VAD's failure */
  uint32_t flags;      /* START/END of the speech model's request */
};

struct hark_speech_session {
  pthread_mutex_t mu;
  hark_server *server;
  hark_model *model; /* a reference: the version the stream is pinned to */
  hark_speech_admission *adm;
  hark_speech_settings st;
  const hark_speech_handler *h;
  void *userp;
  uint64_t corr_id;
  char id[32];
  /* Set when the codec closes the session (its client is gone): the
   * request of the stream's audio in flight stops between decoder blocks
   * (hark_request_is_cancelled) instead of decoding for nobody. Only audio
   * and reset requests carry it: an END must run, so the model frees the
   * stream's state. */
  hark_cancel *gone;
  /* gated models: the VAD model (a reference), or why it cannot be had */
  hark_model *vad;
  hark_error *vad_unavailable;
  /* audio normalisation, on the codec's thread (submit and close) */
  hark_audio_norm *norm; /* client bytes -> 16 kHz samples; made on the first item */
  float tail[VAD_FRAME]; /* the partial frame waiting for more audio */
  uint32_t n_tail;
  /* guarded by mu */
  bool vad_started; /* the VAD sequence has started */
  item *q_head, *q_tail;
  size_t q_bytes;
  bool inflight; /* a chain is running (an item in the engine, or on its way) */
  bool started;  /* START has gone */
  bool ended;    /* an END is queued or gone */
  bool failed;   /* an item failed: what waits is dropped, but an END still goes */
  bool closed;   /* the codec let go */
};

static _Atomic uint64_t next_stream = 1;

/*
 * A stream's correlation id: 64 random bits from the kernel, in the
 * sessions' own namespace (HARK_CORR_NS_SESSION), which no client can
 * name: KServe requests carry their clients' namespaces. The randomness is
 * a second wall: the id is never shown to anyone, and a server that ever
 * let a client choose a namespace would still not hand out ids that can
 * be counted. Never 0 (0 is "no sequence").
 */
static uint64_t stream_corr_id(void) {
  uint64_t id = 0;
  while (id == 0) {
    ssize_t n = getrandom(&id, sizeof id, 0);
    if (n == (ssize_t)sizeof id) continue;
    id = 0;
    if (n < 0 && errno != EINTR) { /* no kernel randomness: never fall back to a counter */
      HARK_ERROR("speech: cannot draw a random stream id: %s", strerror(errno));
      abort();
    }
  }
  return id;
}

void hark_speech_settings_fini(hark_speech_settings *st) {
  free(st->phrase_list);
  st->phrase_list = NULL;
  free(st->profile);
  st->profile = NULL;
}

/* ---- admission ------------------------------------------------------------------ */

static uint32_t backlog_limit(const hark_speech_admission *adm, const hark_model *model) {
  if (adm->backlog_limit) return adm->backlog_limit;
  const hark_model_config *cfg = hark_model_get_config(model);
  uint32_t instances = 0;
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) instances += cfg->instance_groups[i].count;
  return 4 * (instances ? instances : 1);
}

hark_error *hark_speech_admit(hark_speech_admission *adm, const hark_model *model) {
  uint32_t max = adm->max_streams ? adm->max_streams : DEFAULT_MAX_STREAMS;
  uint32_t n = atomic_load(&adm->streams);
  do {
    if (n >= max)
      return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED,
                            "too many streams: the server serves at most %u speech streams over "
                            "%s at once (--max-streams)",
                            max, adm->protocol);
  } while (!atomic_compare_exchange_weak(&adm->streams, &n, n + 1));
  uint32_t limit = backlog_limit(adm, model);
  /* Only what a new session would wait behind: KServe clients' sequences
   * parked in their own quota's backlog are not (issue 13, finding 6). */
  uint64_t pending = hark_model_pending_for(model, HARK_CORR_NS_SESSION);
  if (pending <= limit) return NULL;
  hark_speech_leave(adm);
  return hark_error_new(HARK_ERR_UNAVAILABLE,
                        "model '%s' is overloaded: %llu requests waiting (limit %u, "
                        "--stream-backlog-limit); try again later",
                        hark_model_name(model), (unsigned long long)pending, limit);
}

void hark_speech_leave(hark_speech_admission *adm) { atomic_fetch_sub(&adm->streams, 1); }

/* ---- requests -------------------------------------------------------------------- */

/* The AUDIO element for n bytes in `enc`: 4 bytes of length, then 16-bit
 * PCM. Client-sized: NULL when out of memory or too big for an element. */
static char *audio_element(hark_speech_encoding enc, const void *audio, size_t n, size_t *len) {
  bool g711 = enc == HARK_SPEECH_MULAW || enc == HARK_SPEECH_ALAW;
  if (g711 && n > UINT32_MAX / 2) return NULL;
  *len = g711 ? 2 * n : n;
  if (*len > UINT32_MAX - HARK_BYTES_PREFIX) return NULL;
  char *mem = malloc(HARK_BYTES_PREFIX + *len);
  if (!mem) return NULL;
  hark_bytes_put_len(mem, (uint32_t)*len);
  uint8_t *pcm = (uint8_t *)mem + HARK_BYTES_PREFIX;
  if (enc == HARK_SPEECH_MULAW)
    hark_audio_mulaw_to_pcm16le(audio, n, pcm);
  else if (enc == HARK_SPEECH_ALAW)
    hark_audio_alaw_to_pcm16le(audio, n, pcm);
  else if (n)
    memcpy(pcm, audio, n);
  return mem;
}

static void set_uint_param(hark_request *req, const char *key, uint32_t v) {
  char num[16];
  snprintf(num, sizeof num, "%u", v);
  hark_request_set_parameter(req, key, num);
}

/* The stream's settings, which its first request (or a one-shot) carries. */
static void put_settings(hark_request *req, const hark_speech_settings *st) {
  if (st->sample_rate) set_uint_param(req, "sample_rate", st->sample_rate);
  set_uint_param(req, "max_alternatives", st->max_alternatives);
  hark_request_set_parameter(req, "words", st->words ? "true" : "false");
  if (st->phrase_list) hark_request_set_parameter(req, "phrase_list", st->phrase_list);
  if (st->profile) hark_request_set_parameter(req, "profile", st->profile);
  if (st->silence_ms) set_uint_param(req, "silence_ms", st->silence_ms);
  if (st->startspeech_ms) set_uint_param(req, "startspeech_ms", st->startspeech_ms);
  char num[32];
  if (st->start_threshold > 0) {
    snprintf(num, sizeof num, "%g", (double)st->start_threshold);
    hark_request_set_parameter(req, "start_threshold", num);
  }
  if (st->stop_threshold > 0) {
    snprintf(num, sizeof num, "%g", (double)st->stop_threshold);
    hark_request_set_parameter(req, "stop_threshold", num);
  }
}

/* A request of `model` carrying `mem` (an AUDIO element, taken). */
static hark_request *audio_request(hark_model *model, char *mem, size_t len) {
  hark_request *req = hark_request_new(model);
  hark_request_attach(req, mem, free);
  bool batched = hark_model_get_config(model)->max_batch_size > 0;
  static const int64_t shape1[1] = {1}, shape2[2] = {1, 1};
  hark_error *err = hark_request_add_input(req, "AUDIO", HARK_TYPE_BYTES, batched ? shape2 : shape1,
                                           batched ? 2 : 1, mem, len + HARK_BYTES_PREFIX);
  hark_error_free(err); /* only a second AUDIO could fail, and there is one */
  return req;
}

hark_error *hark_speech_request_oneshot(hark_model *model, const hark_speech_settings *settings,
                                        const void *audio, size_t n, hark_request **out) {
  size_t len;
  char *mem = audio_element(settings->encoding, audio, n, &len);
  if (!mem)
    return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED, "out of memory for %zu bytes of audio", n);
  hark_request *req = audio_request(model, mem, len);
  put_settings(req, settings);
  hark_request_set_client(req, settings->client);
  if (!settings->partials) hark_request_set_parameter(req, "partial", "false");
  *out = req;
  return NULL;
}

/* ---- the chain -------------------------------------------------------------------- */

static void item_free(item *it) {
  if (it->budget) hark_inflight_give(it->budget);
  free(it->frames);
  free(it->probs);
  hark_error_free(it->vad_err);
  free(it->mem);
  hark_response_free(it->last);
  hark_error_free(it->err);
  free(it);
}

static void session_free(hark_speech_session *s) {
  hark_cancel_unref(s->gone);
  if (s->model) hark_model_release(s->model);
  if (s->vad) hark_model_release(s->vad);
  hark_error_free(s->vad_unavailable);
  hark_audio_norm_free(s->norm);
  hark_speech_settings_fini(&s->st);
  pthread_mutex_destroy(&s->mu);
  free(s);
}

/* Reports `it` to the codec (unless it is the session's own END), frees it. */
static void report(hark_speech_session *s, item *it, hark_speech_status status) {
  if (it->reply) {
    hark_response *resp = status == HARK_SPEECH_OK ? it->last : NULL;
    hark_error *err = status == HARK_SPEECH_FAILED ? it->err : NULL;
    if (status == HARK_SPEECH_OK) it->last = NULL;
    if (status == HARK_SPEECH_FAILED) it->err = NULL;
    s->h->result(s->userp, it->tag, status, resp, err);
  } else if (it->err) {
    HARK_LOG_STREAM(HARK_LOG_VERBOSE, s->id, "cannot end the sequence of a closed stream: %s",
                    hark_error_message(it->err));
  }
  item_free(it);
}

/* What a queued message holds: its audio, and its bookkeeping here and
 * in the codec (items, the codec's tag and call: a few hundred bytes), so
 * a flood of empty messages fills the queue as surely as audio does. */
static size_t item_cost(const item *it) { return it->len + HARK_SPEECH_ITEM_OVERHEAD; }

/* The next item to run, or none (the chain stops; the session is freed if
 * the codec closed it). *free_it: the caller frees the session. */
static item *next_item(hark_speech_session *s, bool *free_it) {
  pthread_mutex_lock(&s->mu);
  item *it = s->q_head;
  if (it) {
    if (!(s->q_head = it->next)) s->q_tail = NULL;
    s->q_bytes -= item_cost(it);
  } else {
    s->inflight = false;
  }
  *free_it = !it && s->closed;
  pthread_mutex_unlock(&s->mu);
  return it;
}

static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp);
static void run(hark_speech_session *s, item *it);

/* Reports `it` with `status` and runs the rest of the chain. */
static void finish(hark_speech_session *s, item *it, hark_speech_status status) {
  if (status == HARK_SPEECH_FAILED) {
    pthread_mutex_lock(&s->mu);
    s->failed = true;
    pthread_mutex_unlock(&s->mu);
  }
  report(s, it, status);
  bool free_it;
  item *next = next_item(s, &free_it);
  if (free_it)
    session_free(s);
  else
    run(s, next);
}

/* Hands `it`'s request to the speech model: true once the engine has it
 * (on_response goes on from there), else false with it->err set. */
static bool submit_model(hark_speech_session *s, item *it) {
  if (!it->mem) { /* no audio: an empty element */
    it->mem = hark_xmalloc(HARK_BYTES_PREFIX);
    hark_bytes_put_len(it->mem, 0);
  }
  hark_request *req = audio_request(s->model, it->mem, it->len);
  it->mem = NULL; /* the request's now */
  hark_request_set_client(req, s->st.client);
  if (it->flags & HARK_REQUEST_SEQUENCE_START) put_settings(req, &s->st);
  if (s->vad) {
    /* The session resampled the audio to the VAD's rate, WAV header gone. */
    if (it->flags & HARK_REQUEST_SEQUENCE_START) set_uint_param(req, "sample_rate", VAD_RATE);
    float *probs = it->probs;
    it->probs = NULL;
    uint32_t n = it->vad_err ? 0 : it->n_probs;
    if (!probs) probs = hark_xcalloc(1, sizeof *probs);
    hark_request_attach(req, probs, free);
    bool batched = hark_model_get_config(s->model)->max_batch_size > 0;
    int64_t shape[2] = {1, n};
    hark_error_free(hark_request_add_input(req, "VAD_PROB", HARK_TYPE_FP32,
                                           batched ? shape : shape + 1, batched ? 2 : 1, probs,
                                           n * sizeof *probs));
  }
  if (!s->st.partials) hark_request_set_parameter(req, "partial", "false");
  if (it->kind == HARK_SPEECH_RESET) hark_request_set_parameter(req, "flush", "true");
  if (!(it->flags & HARK_REQUEST_SEQUENCE_END)) hark_request_set_cancel(req, s->gone);
  hark_request_set_flags(req, it->flags);
  hark_request_set_correlation_ns(req, HARK_CORR_NS_SESSION);
  hark_request_set_correlation_id(req, s->corr_id);
  hark_request_set_id(req, s->id);
  hark_request_set_callback(req, on_response, it);
  /* Once the engine has it, `it` is on_response's: it may be answered
   * and freed before hark_server_infer returns. */
  hark_error *err = hark_server_infer(s->server, req);
  if (!err) return true;
  it->err = err;
  hark_request_free(req);
  return false;
}

/* The VAD phase is over (all its requests answered or refused): the
 * speech model's request goes, unless the VAD failed an item that is not
 * the stream's END (an END still goes, so the model frees the stream). */
static void vad_done(hark_speech_session *s, item *it) {
  if (it->vad_err && it->kind != HARK_SPEECH_END) {
    it->err = it->vad_err;
    it->vad_err = NULL;
    finish(s, it, HARK_SPEECH_FAILED);
    return;
  }
  if (submit_model(s, it)) return;
  finish(s, it, HARK_SPEECH_FAILED);
}

static void vad_fail(item *it, hark_error *err) {
  hark_speech_session *s = it->s;
  pthread_mutex_lock(&s->mu);
  if (!it->vad_err)
    it->vad_err = hark_error_new(hark_error_code(err), "VAD model '%s' failed: %s",
                                 hark_model_name(s->vad), hark_error_message(err));
  pthread_mutex_unlock(&s->mu);
  hark_error_free(err);
}

/* Engine worker: the speech probabilities of an item's frames. */
static void on_vad(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  item *it = userp;
  if (resp) {
    const char *name = hark_model_get_config(it->s->vad)->outputs[0].name;
    const hark_tensor *t = hark_response_output_by_name(resp, name);
    size_t want = (size_t)it->n_frames * sizeof(float);
    if (t && t->datatype == HARK_TYPE_FP32 && t->byte_size == want)
      memcpy(it->probs, t->data, want);
    else
      vad_fail(it, hark_error_new(HARK_ERR_INTERNAL, "expected %u FP32 probabilities, got %s",
                                  it->n_frames, t ? "another output" : "none"));
    hark_response_free(resp);
  }
  if (err) vad_fail(it, err);
  if (flags & HARK_RESPONSE_FINAL) vad_done(it->s, it);
}

/* Sends `it`'s frames to the VAD model as one request of the stream's
 * sequence, [1, n_frames, 512] ([n_frames, 512] without batching): the
 * frames of every live stream's chunk go in one batched round. Its final
 * answer runs vad_done. */
static void run_vad(hark_speech_session *s, item *it) {
  pthread_mutex_lock(&s->mu);
  bool start = !s->vad_started;
  s->vad_started = true;
  pthread_mutex_unlock(&s->mu);
  bool batched = hark_model_get_config(s->vad)->max_batch_size > 0;
  int64_t shape[3] = {1, it->n_frames, VAD_FRAME};
  it->probs = hark_xcalloc(it->n_frames, sizeof *it->probs);
  hark_request *req = hark_request_new(s->vad);
  hark_request_set_client(req, s->st.client);
  hark_request_attach(req, it->frames, free); /* the request owns them now */
  float *frames = it->frames;
  it->frames = NULL;
  hark_error_free(hark_request_add_input(req, hark_model_get_config(s->vad)->inputs[0].name,
                                         HARK_TYPE_FP32, batched ? shape : shape + 1,
                                         batched ? 3 : 2, frames,
                                         (size_t)it->n_frames * VAD_FRAME * sizeof *frames));
  uint32_t flags = start ? HARK_REQUEST_SEQUENCE_START : 0;
  if (it->kind == HARK_SPEECH_END) flags |= HARK_REQUEST_SEQUENCE_END;
  hark_request_set_flags(req, flags);
  hark_request_set_correlation_ns(req, HARK_CORR_NS_SESSION);
  hark_request_set_correlation_id(req, s->corr_id);
  hark_request_set_id(req, s->id);
  hark_request_set_callback(req, on_vad, it);
  hark_error *err = hark_server_infer(s->server, req);
  if (err) {
    hark_request_free(req);
    vad_fail(it, err);
    vad_done(s, it);
  }
}

/*
 * Runs the chain from `it` (the caller set inflight): each item either
 * reaches the engine — then the chain goes on from its final — or is
 * reported at once and the next one taken.
 */
static void run(hark_speech_session *s, item *it) {
  while (it) {
    pthread_mutex_lock(&s->mu);
    bool skip = it->kind != HARK_SPEECH_END && (s->failed || s->closed);
    bool pointless = !it->reply && !s->started; /* no sequence to end */
    uint32_t flags = s->started ? 0 : HARK_REQUEST_SEQUENCE_START;
    if (it->kind == HARK_SPEECH_END) flags |= HARK_REQUEST_SEQUENCE_END;
    if (!skip && !pointless && !it->err) s->started = true;
    /* an END with no VAD sequence to end has no frame to send */
    if (it->kind == HARK_SPEECH_END && !s->vad_started && it->n_probs == 0) it->n_frames = 0;
    pthread_mutex_unlock(&s->mu);
    hark_speech_status status = HARK_SPEECH_FAILED;
    if (skip || pointless) {
      status = HARK_SPEECH_DROPPED;
    } else if (!it->err) {
      it->flags = flags;
      if (s->vad && it->n_frames) {
        run_vad(s, it);
        return;
      }
      if (submit_model(s, it)) return;
    }
    if (status == HARK_SPEECH_FAILED) {
      pthread_mutex_lock(&s->mu);
      s->failed = true;
      pthread_mutex_unlock(&s->mu);
    }
    report(s, it, status);
    bool free_it;
    it = next_item(s, &free_it);
    if (free_it) session_free(s);
  }
}

/* Engine worker: keeps the last response and the first error; the final
 * reports the item and runs the rest of the chain. */
static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  item *it = userp;
  hark_speech_session *s = it->s;
  if (resp) {
    hark_response_free(it->last);
    it->last = resp;
  }
  if (err && !it->err)
    it->err = err;
  else
    hark_error_free(err);
  if (!(flags & HARK_RESPONSE_FINAL)) return;
  if (!it->err && it->vad_err) { /* an END that went despite its VAD's failure */
    it->err = it->vad_err;
    it->vad_err = NULL;
  }
  finish(s, it, it->err ? HARK_SPEECH_FAILED : HARK_SPEECH_OK);
}

/* ---- gated models: the audio as the VAD sees it ------------------------------------- */

/* The stream's rate before any audio says otherwise: its own, or the model's. */
static uint32_t stream_rate(const hark_speech_session *s) {
  if (s->st.sample_rate) return s->st.sample_rate;
  const char *v =
      hark_model_config_parameter(hark_model_get_config(s->model), "default_sample_rate");
  long r = v ? strtol(v, NULL, 10) : 0;
  return r > 0 ? (uint32_t)r : VAD_RATE;
}

/* Appends samples to the item's frames, the partial frame kept in s->tail;
 * with `end`, the tail zero-padded to a whole frame (a zero frame when the
 * stream's audio ended on a frame boundary: it ends the VAD's sequence, and
 * its probability is not used). */
/* y's n samples as floats in [-1, 1) (a loop the compiler vectorises). */
static void to_float(float *dst, const int16_t *y, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = (float)y[i] * (1.0f / 32768.0f);
}

static void cut_frames(hark_speech_session *s, item *it, const int16_t *y, size_t ny, bool end) {
  size_t total = s->n_tail + ny;
  size_t nf = total / VAD_FRAME + (end && total % VAD_FRAME ? 1 : 0);
  it->n_probs = (uint32_t)nf;
  if (end && nf == 0) nf = 1;
  it->n_frames = (uint32_t)nf;
  if (!nf) {
    to_float(s->tail + s->n_tail, y, ny);
    s->n_tail += ny;
    return;
  }
  size_t cap = nf * VAD_FRAME;
  it->frames = hark_xmalloc(cap * sizeof *it->frames);
  memcpy(it->frames, s->tail, s->n_tail * sizeof *s->tail);
  size_t now = ny < cap - s->n_tail ? ny : cap - s->n_tail;
  to_float(it->frames + s->n_tail, y, now);
  size_t filled = s->n_tail + now; /* short of cap only at the end: zero padding */
  memset(it->frames + filled, 0, (cap - filled) * sizeof *it->frames);
  s->n_tail = ny - now;
  if (s->n_tail) to_float(s->tail, y + now, s->n_tail); /* y may be NULL (no audio) */
}

/* Samples to 16-bit little-endian PCM, on any host (a copy on a
 * little-endian one). */
static void le16_encode(uint8_t *out, const int16_t *y, size_t n) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  if (n) memcpy(out, y, n * sizeof *y);
#else
  for (size_t i = 0; i < n; i++) {
    out[2 * i] = (uint8_t)((uint16_t)y[i] & 0xff);
    out[2 * i + 1] = (uint8_t)((uint16_t)y[i] >> 8);
  }
#endif
}

/*
 * A gated model's item (codec's thread, in submission order): its audio
 * (16-bit PCM at the stream's rate, maybe a WAV file first) becomes 16 kHz
 * PCM for the model and whole frames for the VAD. `end`: the stream's last
 * audio (the resampler's and the tail's rest go with it).
 */
static hark_error *normalise(hark_speech_session *s, item *it, bool end) {
  const uint8_t *pcm = it->mem ? (const uint8_t *)it->mem + HARK_BYTES_PREFIX : NULL;
  /* G.711 streams were expanded to PCM by audio_element already. */
  if (!s->norm && !(s->norm = hark_audio_norm_new(stream_rate(s), VAD_RATE, HARK_WAV_PCM16)))
    hark_oom("speech: an audio normaliser", sizeof(void *));
  const int16_t *y = NULL;
  size_t ny = 0;
  char why[192];
  switch (hark_audio_norm_accept(s->norm, pcm, it->len, end, &y, &ny, why, sizeof why)) {
  case HARK_AUDIO_NORM_OK: break;
  case HARK_AUDIO_NORM_BAD_RATE:
    return hark_error_new(HARK_ERR_INVALID_ARG, "sample rate %u Hz: %s",
                          hark_audio_norm_in_rate(s->norm), why);
  case HARK_AUDIO_NORM_INTERNAL: return hark_error_new(HARK_ERR_INTERNAL, "%s", why);
  default: return hark_error_new(HARK_ERR_INVALID_ARG, "%s", why);
  }
  free(it->mem);
  it->len = ny * 2;
  it->mem = hark_xmalloc(HARK_BYTES_PREFIX + it->len);
  hark_bytes_put_len(it->mem, (uint32_t)it->len);
  le16_encode((uint8_t *)it->mem + HARK_BYTES_PREFIX, y, ny);
  cut_frames(s, it, y, ny, end);
  return NULL;
}

/* Appends `it` (s->mu held). */
static void append_locked(hark_speech_session *s, item *it) {
  if (s->q_tail)
    s->q_tail->next = it;
  else
    s->q_head = it;
  s->q_tail = it;
  s->q_bytes += item_cost(it);
  if (it->kind == HARK_SPEECH_END) s->ended = true;
}

/* The head of the queue if no chain runs (it runs one then), else NULL
 * (s->mu held). */
static item *start_chain_locked(hark_speech_session *s) {
  if (s->inflight || !s->q_head) return NULL;
  s->inflight = true;
  item *first = s->q_head;
  if (!(s->q_head = first->next)) s->q_tail = NULL;
  s->q_bytes -= item_cost(first);
  return first;
}

/* ---- the session ------------------------------------------------------------------- */

hark_speech_session *hark_speech_open(hark_server *server, hark_speech_admission *adm,
                                      const char *proto, const hark_speech_handler *handler,
                                      void *userp) {
  hark_speech_session *s = hark_xcalloc(1, sizeof *s);
  pthread_mutex_init(&s->mu, NULL);
  s->server = server;
  s->adm = adm;
  s->h = handler;
  s->userp = userp;
  s->gone = hark_cancel_new();
  uint64_t n = atomic_fetch_add(&next_stream, 1);
  s->corr_id = stream_corr_id();
  snprintf(s->id, sizeof s->id, "%s-%llu", proto, (unsigned long long)n);
  return s;
}

void hark_speech_configure(hark_speech_session *s, hark_model *model,
                           hark_speech_settings *settings) {
  s->model = model;
  s->st = *settings;
  settings->phrase_list = NULL;
  settings->profile = NULL;
  /* A gated model's VAD is checked when a stream opens on it: the backend
   * cannot reach other models, and the repository loads models in any
   * order (the VAD may be loaded, unloaded or reloaded after it). */
  const char *vad = hark_model_config_parameter(hark_model_get_config(model), "vad_model");
  if (!vad || !*vad) return;
  hark_error *err = hark_server_model_acquire(s->server, vad, -1, &s->vad);
  const hark_model_config *vc = s->vad ? hark_model_get_config(s->vad) : NULL;
  if (!err &&
      (vc->n_inputs < 1 || vc->inputs[0].datatype != HARK_TYPE_FP32 || vc->inputs[0].ndims != 2 ||
       vc->inputs[0].dims[0] != -1 || vc->inputs[0].dims[1] != VAD_FRAME || vc->n_outputs < 1 ||
       !vc->sequence_batching.enabled))
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "is not a VAD: it needs sequence batching, an FP32 input of frames of "
                         "%u samples (32 ms at 16 kHz; dims [-1, %u]) and an output of one "
                         "speech probability per frame",
                         VAD_FRAME, VAD_FRAME);
  if (!err) return;
  if (s->vad) hark_model_release(s->vad);
  s->vad = NULL;
  s->vad_unavailable =
      hark_error_new(HARK_ERR_UNAVAILABLE, "model '%s' cannot serve: its VAD model '%s' %s%s",
                     hark_model_name(model), vad,
                     hark_error_code(err) == HARK_ERR_INVALID_ARG ? "" : "is not available: ",
                     hark_error_message(err));
  hark_error_free(err);
}

const char *hark_speech_id(const hark_speech_session *s) { return s->id; }
hark_model *hark_speech_model(const hark_speech_session *s) { return s->model; }

void hark_speech_submit(hark_speech_session *s, hark_speech_item_kind kind, const void *audio,
                        size_t n, void *tag) {
  item *it = hark_xcalloc(1, sizeof *it);
  it->s = s;
  it->kind = kind;
  it->reply = true;
  it->tag = tag;
  if (kind == HARK_SPEECH_AUDIO && !hark_inflight_take(n + HARK_SPEECH_ITEM_OVERHEAD)) {
    /* Queued audio counts in the server's in-flight budget like request
     * bodies and gRPC messages: past it, the stream ends (try later)
     * rather than the pod running out of memory. */
    unsigned long long now = hark_inflight_bytes(), max = hark_inflight_max();
    hark_limit_hit(HARK_LIMIT_INFLIGHT_BYTES,
                   "speech: stream %s: %zu bytes of audio refused: %llu of %llu bytes in flight "
                   "(--max-inflight-bytes)",
                   s->id, n, now, max);
    it->err = hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED,
                             "the server holds as much audio and data in flight as it may "
                             "(--max-inflight-bytes); try again later");
  } else if (kind == HARK_SPEECH_AUDIO) {
    it->budget = n + HARK_SPEECH_ITEM_OVERHEAD;
    it->mem = audio_element(s->st.encoding, audio, n, &it->len);
    if (!it->mem)
      it->err =
          hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED, "out of memory for %zu bytes of audio", n);
  }
  if (s->vad_unavailable && !it->err)
    it->err = hark_error_new(hark_error_code(s->vad_unavailable), "%s",
                             hark_error_message(s->vad_unavailable));
  else if (s->vad && !it->err && kind != HARK_SPEECH_RESET)
    it->err = normalise(s, it, kind == HARK_SPEECH_END);
  pthread_mutex_lock(&s->mu);
  append_locked(s, it);
  item *first = start_chain_locked(s);
  pthread_mutex_unlock(&s->mu);
  if (first) run(s, first);
}

size_t hark_speech_queued_bytes(hark_speech_session *s) {
  pthread_mutex_lock(&s->mu);
  size_t n = s->q_bytes;
  pthread_mutex_unlock(&s->mu);
  return n;
}

bool hark_speech_ended(hark_speech_session *s) {
  pthread_mutex_lock(&s->mu);
  bool ended = s->ended;
  pthread_mutex_unlock(&s->mu);
  return ended;
}

void hark_speech_close(hark_speech_session *s) {
  hark_cancel_set(s->gone); /* the audio in flight decodes for nobody now */
  pthread_mutex_lock(&s->mu);
  s->closed = true;
  if (!s->ended && s->model) { /* after what is in flight; the audio waiting is dropped */
    item *end = hark_xcalloc(1, sizeof *end);
    end->s = s;
    end->kind = HARK_SPEECH_END;
    if (s->vad) { /* the tail of a vanished client is dropped; a zero frame ends the VAD's */
      s->n_tail = 0;
      cut_frames(s, end, NULL, 0, true);
    }
    append_locked(s, end);
  }
  item *first = start_chain_locked(s);
  bool idle = !first && !s->inflight;
  hark_speech_admission *adm = s->adm;
  s->adm = NULL;
  pthread_mutex_unlock(&s->mu);
  if (adm) hark_speech_leave(adm);
  if (first)
    run(s, first);
  else if (idle)
    session_free(s);
}
