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
 */
#include "frontend/speech/session.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hark/audio.h"
#include "hark/backend.h"
#include "hark/config.h"
#include "util/alloc.h"
#include "util/log.h"

#define DEFAULT_MAX_STREAMS 1024u

typedef struct item {
  struct item *next;
  hark_speech_session *s;
  hark_speech_item_kind kind;
  bool reply;          /* false: the END the session sends for a gone client */
  void *tag;           /* the codec's */
  char *mem;           /* the AUDIO element: 4-byte length, then the PCM */
  size_t len;          /* PCM bytes */
  hark_error *err;     /* set: fails when its turn comes (no memory for it) */
  hark_response *last; /* the latest response, until the final */
} item;

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
  /* guarded by mu */
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
  hark_model_stats *st = hark_xmalloc(sizeof *st);
  hark_model_stats_read(model, st);
  uint64_t pending = st->pending;
  free(st);
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
  if (!settings->partials) hark_request_set_parameter(req, "partial", "false");
  *out = req;
  return NULL;
}

/* ---- the chain -------------------------------------------------------------------- */

static void item_free(item *it) {
  free(it->mem);
  hark_response_free(it->last);
  hark_error_free(it->err);
  free(it);
}

static void session_free(hark_speech_session *s) {
  if (s->model) hark_model_release(s->model);
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
    pthread_mutex_unlock(&s->mu);
    hark_speech_status status = HARK_SPEECH_FAILED;
    if (skip || pointless) {
      status = HARK_SPEECH_DROPPED;
    } else if (!it->err) {
      if (!it->mem) { /* no audio: an empty element */
        it->mem = hark_xmalloc(HARK_BYTES_PREFIX);
        hark_bytes_put_len(it->mem, 0);
      }
      hark_request *req = audio_request(s->model, it->mem, it->len);
      it->mem = NULL; /* the request's now */
      if (flags & HARK_REQUEST_SEQUENCE_START) put_settings(req, &s->st);
      if (!s->st.partials) hark_request_set_parameter(req, "partial", "false");
      if (it->kind == HARK_SPEECH_RESET) hark_request_set_parameter(req, "flush", "true");
      hark_request_set_flags(req, flags);
      hark_request_set_correlation_ns(req, HARK_CORR_NS_SESSION);
      hark_request_set_correlation_id(req, s->corr_id);
      hark_request_set_id(req, s->id);
      hark_request_set_callback(req, on_response, it);
      /* Once the engine has it, `it` is on_response's: it may be answered
       * and freed before hark_server_infer returns. */
      hark_error *err = hark_server_infer(s->server, req);
      if (!err) return;
      it->err = err;
      hark_request_free(req);
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
  if (it->err) {
    pthread_mutex_lock(&s->mu);
    s->failed = true;
    pthread_mutex_unlock(&s->mu);
  }
  report(s, it, it->err ? HARK_SPEECH_FAILED : HARK_SPEECH_OK);
  bool free_it;
  item *next = next_item(s, &free_it);
  if (free_it)
    session_free(s);
  else
    run(s, next);
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
  if (kind == HARK_SPEECH_AUDIO) {
    it->mem = audio_element(s->st.encoding, audio, n, &it->len);
    if (!it->mem)
      it->err =
          hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED, "out of memory for %zu bytes of audio", n);
  }
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
  pthread_mutex_lock(&s->mu);
  s->closed = true;
  if (!s->ended && s->model) { /* after what is in flight; the audio waiting is dropped */
    item *end = hark_xcalloc(1, sizeof *end);
    end->s = s;
    end->kind = HARK_SPEECH_END;
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
