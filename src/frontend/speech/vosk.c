/*
 * vosk.c — Vosk's WebSocket speech protocol, so Vosk clients work
 * unchanged: a codec between the WebSocket transport (http/ws.c) and a
 * speech session (session.c). Streams open on any path outside /v2 ("/",
 * "/asr/en/": the --speech-model, PCM at 8000 Hz unless told) or on
 * /v2/models/{m}[/versions/{v}]/stream; binary messages carry 16-bit
 * little-endian mono PCM, text messages carry {"config": ...} (before the
 * audio), {"eof": 1} and {"reset": 1} (vosk_text.c parses them). Every
 * audio message, reset and eof gets exactly one JSON reply, in order:
 * {"partial": ...}, or at the end of an utterance {"text": ...,
 * "result": [words]} (or {"alternatives": [...]}); eof's final is followed
 * by close 1000. Every problem closes the stream with a code and a reason.
 *
 * The session opens with the stream's first item (audio, reset or eof),
 * carrying the config's settings. Each item's result arrives on an engine
 * worker, travels to the stream's loop as a transport call, and is
 * formatted and sent there. Receiving pauses while the session's backlog
 * is past a message's worth of audio. A stream outlives its connection
 * while any of its items is unanswered; closing the session on the
 * client's behalf ends its sequence, so the decoder goes back at once.
 * Loop thread only, but for the result handler.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/kserve/route.h"
#include "frontend/speech/asr_result.h"
#include "frontend/speech/session.h"
#include "frontend/speech/speech.h"
#include "frontend/speech/vosk_text.h"
#include "hark/audio.h"
#include "hark/model.h"
#include "util/alloc.h"
#include "util/log.h"

#define DEFAULT_SPEECH_MODEL "asr"
#define DEFAULT_MAX_MESSAGE (1u << 20)
#define VOSK_SAMPLE_RATE 8000 /* what Vosk's server assumes without a config */

struct hark_vosk {
  hark_server *server;
  const char *speech_model;
  size_t max_message;
  uint32_t sample_rate; /* of a stream without a config (--speech-sample-rate); 0: none set */
  hark_speech_admission adm;
};

/* What an accepted upgrade holds until the stream opens: the model it
 * asked for, and a stream slot. */
typedef struct ticket {
  char *model;
  int64_t version;
  bool vosk; /* on a Vosk path (not /v2/models/...) */
} ticket;

typedef struct vosk_stream {
  hark_vosk *v;
  hark_ws *ws;                  /* NULL once the connection is gone */
  hark_speech_session *session; /* NULL once closed */
  char id[32];                  /* the session's, for lines after it closed */
  char *model;
  int64_t version;         /* as asked for; -1: the newest */
  hark_speech_settings st; /* the config's; the session's from the first item */
  bool bound;              /* the session has its model (the first item came) */
  bool eof_seen;
  bool got_audio;            /* a non-empty binary message came */
  bool g711;                 /* ... and began with a mu-law or A-law WAV header */
  uint32_t max_alternatives; /* for the replies */
  bool words;
  uint32_t pending; /* items not yet answered on the loop */
} vosk_stream;

/* One item's answer, from the worker to the loop. */
typedef struct vosk_item {
  hark_http_call call; /* first: the transport hands it back */
  vosk_stream *s;
  hark_speech_item_kind kind;
  hark_speech_status status;
  hark_response *resp;
  hark_error *err;
} vosk_item;

#define VOSK_LOG(s, level, ...) HARK_LOG_STREAM(level, (s)->id, __VA_ARGS__)

/* A queue this long (bytes of audio behind the one in the engine) pauses
 * receiving; past the hard limit, which only a client ignoring flow
 * control reaches, the stream is closed. */
static size_t queue_high(const hark_vosk *v) { return v->max_message; }
static size_t queue_hard(const hark_vosk *v) { return 4 * v->max_message + 65536; }

static int error_close_code(const hark_error *err) {
  hark_code code = hark_error_code(err);
  if (code == HARK_ERR_UNAVAILABLE || code == HARK_ERR_RESOURCE_EXHAUSTED)
    return HARK_WS_CLOSE_TRY_LATER;
  /* the model refused what the client sent (a setting, the audio) */
  return code == HARK_ERR_INVALID_ARG ? HARK_WS_CLOSE_INVALID : HARK_WS_CLOSE_INTERNAL;
}

/* ---- upgrades -------------------------------------------------------------------- */

/* A path outside KServe's /v2 tree: Vosk's server takes an upgrade on any
 * path, and its clients use "/", "/asr/en/" and the like. */
static bool vosk_path(const char *path) {
  return strncmp(path, "/v2", 3) != 0 || (path[3] != '/' && path[3] != '\0');
}

/* The model a stream path names: any path outside /v2 is the speech model
 * (where Vosk's clients connect), else /v2/models/{m}[/versions/{v}]/stream. */
static hark_error *stream_route(const hark_vosk *v, const char *path, char **model,
                                int64_t *version) {
  if (vosk_path(path)) {
    *model = hark_xstrdup(v->speech_model);
    *version = -1;
    return NULL;
  }
  hark_kserve_route rt;
  hark_error *err = hark_kserve_route_parse(path, false, &rt);
  if (err) return err;
  if (rt.kind != HARK_ROUTE_STREAM) {
    hark_kserve_route_clear(&rt);
    return hark_error_new(HARK_ERR_NOT_FOUND,
                          "Not Found: stream on any path outside /v2 (the speech model), or on "
                          "/v2/models/{model}[/versions/{version}]/stream");
  }
  *model = rt.model;
  *version = rt.version;
  return NULL;
}

static hark_error *on_accept(void *userp, const char *path, void **out) {
  hark_vosk *v = userp;
  char *name = NULL;
  int64_t version = -1;
  hark_error *err = stream_route(v, path, &name, &version);
  if (err) return err;
  if (hark_server_is_draining(v->server)) {
    free(name);
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "Server is shutting down: not accepting new streams");
  }
  hark_model *model;
  err = hark_server_model_acquire(v->server, name, version, &model);
  if (!err) {
    /* The slot is taken now, so the next upgrade on any loop sees it,
     * even before this one is established. */
    err = hark_speech_admit(&v->adm, model);
    hark_model_release(model);
  }
  if (err) {
    free(name);
    if (hark_error_code(err) == HARK_ERR_RESOURCE_EXHAUSTED) { /* 503, as before */
      hark_error *e = hark_error_new(HARK_ERR_UNAVAILABLE, "%s", hark_error_message(err));
      hark_error_free(err);
      err = e;
    }
    return err;
  }
  ticket *t = hark_xmalloc(sizeof *t);
  t->model = name;
  t->version = version;
  t->vosk = vosk_path(path);
  *out = t;
  return NULL;
}

static void on_release(void *userp, void *p) {
  hark_vosk *v = userp;
  ticket *t = p;
  hark_speech_leave(&v->adm);
  free(t->model);
  free(t);
}

static const hark_speech_handler handler;

static void *on_open(void *userp, hark_ws *ws, void *p) {
  hark_vosk *v = userp;
  ticket *t = p;
  vosk_stream *s = hark_xcalloc(1, sizeof *s);
  s->v = v;
  s->ws = ws;
  s->model = t->model;
  s->version = t->version;
  /* PCM that names no rate: --speech-sample-rate's, else on a Vosk path
   * Vosk's server's (VOSK_SAMPLE_RATE, 8000), else the model's. */
  s->st.sample_rate = v->sample_rate ? v->sample_rate : t->vosk ? VOSK_SAMPLE_RATE : 0;
  s->st.words = true; /* Vosk's server shows words unless told otherwise */
  s->st.partials = true;
  snprintf(s->st.client, sizeof s->st.client, "%s", hark_ws_peer(ws));
  free(t);
  s->session = hark_speech_open(v->server, &v->adm, "ws", &handler, s); /* takes the slot */
  snprintf(s->id, sizeof s->id, "%s", hark_speech_id(s->session));
  VOSK_LOG(s, HARK_LOG_VERBOSE, "ws: stream opened on model '%s'", s->model);
  return s;
}

/* ---- the stream ------------------------------------------------------------------ */

static void stream_free(vosk_stream *s) {
  hark_speech_settings_fini(&s->st);
  free(s->model);
  free(s);
}

static void stream_close(vosk_stream *s, int code, const char *reason) {
  if (!s->ws || hark_ws_closing(s->ws)) return;
  VOSK_LOG(s, code == HARK_WS_CLOSE_INTERNAL ? HARK_LOG_WARN : HARK_LOG_VERBOSE,
           "ws: closing the stream: %d %s", code, reason ? reason : "");
  hark_ws_close(s->ws, code, reason);
}

static void update_flow(vosk_stream *s) {
  if (!s->ws || !s->bound) return;
  size_t queued = hark_speech_queued_bytes(s->session);
  if (queued >= queue_high(s->v))
    hark_ws_pause(s->ws, true);
  else if (queued < queue_high(s->v) / 2)
    hark_ws_pause(s->ws, false);
}

static void on_result(void *userp, void *tag, hark_speech_status status, hark_response *resp,
                      hark_error *err) {
  vosk_item *it = tag;
  (void)userp;
  it->status = status;
  it->resp = resp;
  it->err = err;
  hark_http_call_post(&it->call);
}

static const hark_speech_handler handler = {.result = on_result};

/* The first item binds the session to the model's newest version (or the
 * one asked for): the stream runs on it to its end, whatever reloads come.
 * False when the model cannot be had (the stream is then closed with the
 * reason). */
static bool session_bind(vosk_stream *s) {
  if (s->bound) return true;
  hark_model *model;
  hark_error *err = hark_server_model_acquire(s->v->server, s->model, s->version, &model);
  if (err) {
    stream_close(s, error_close_code(err), hark_error_message(err));
    hark_error_free(err);
    return false;
  }
  s->max_alternatives = s->st.max_alternatives;
  s->words = s->st.words;
  hark_speech_configure(s->session, model, &s->st);
  s->bound = true;
  return true;
}

static void on_item_done(hark_http_call *call, hark_http_conn *c);

static void submit(vosk_stream *s, hark_speech_item_kind kind, const char *audio, size_t n) {
  if (!session_bind(s)) return;
  vosk_item *it = hark_xcalloc(1, sizeof *it);
  it->s = s;
  it->kind = kind;
  hark_http_call_start_ws(s->ws, &it->call, on_item_done);
  s->pending++;
  hark_speech_submit(s->session, kind, audio, n, it);
  if (hark_speech_queued_bytes(s->session) > queue_hard(s->v))
    stream_close(s, HARK_WS_CLOSE_TRY_LATER, "stream is too far behind");
  else
    update_flow(s);
}

/* ---- replies ---------------------------------------------------------------------- */

static void put_word(hark_buf *b, const char *p, uint32_t len, float start, float end, float conf) {
  hark_buf_puts(b, "{\"conf\": ");
  hark_buf_put_fixed6(b, conf);
  hark_buf_puts(b, ", \"end\": ");
  hark_buf_put_fixed6(b, end);
  hark_buf_puts(b, ", \"start\": ");
  hark_buf_put_fixed6(b, start);
  hark_buf_puts(b, ", \"word\": ");
  if (!hark_buf_put_jstr(b, p, len)) hark_oom("reply", len);
  hark_buf_puts(b, "}");
}

/* The words of the result (alt < 0) or of alternative `alt`. */
static void put_words(hark_buf *b, const hark_asr_result *r, int64_t alt) {
  uint32_t n = alt < 0 ? r->n_words : hark_asr_result_alternative_words(r, (uint32_t)alt);
  hark_buf_puts(b, "[");
  for (uint32_t i = 0; i < n; i++) {
    const char *p;
    uint32_t len;
    float start, end, conf;
    if (alt < 0
            ? !hark_asr_result_word(r, i, &p, &len, &start, &end, &conf)
            : !hark_asr_result_alternative_word(r, (uint32_t)alt, i, &p, &len, &start, &end, &conf))
      break;
    if (i) hark_buf_puts(b, ",");
    put_word(b, p, len, start, end, conf);
  }
  hark_buf_puts(b, "]");
}

/* Vosk's alternatives: the n-best (ALTERNATIVES, best first, the first the
 * plain final; the transcript alone when absent), each with its own
 * confidence and words. With nothing recognised, one empty alternative of
 * confidence 1, as Vosk answers: clients index alternatives[0]. */
static void put_alternatives(hark_buf *b, const vosk_stream *s, const hark_asr_result *r) {
  uint32_t n = r->alts ? r->n_alternatives : 1;
  if (n > s->max_alternatives) n = s->max_alternatives;
  hark_buf_puts(b, "{\"alternatives\": [");
  uint32_t i = 0;
  for (; i < n; i++) {
    const char *p;
    uint32_t len;
    float conf;
    if (!hark_asr_result_alternative(r, i, &p, &len, &conf)) break;
    if (i) hark_buf_puts(b, ", ");
    hark_buf_puts(b, "{\"confidence\": ");
    hark_buf_put_fixed6(b, conf);
    if (s->words && hark_asr_result_alternative_words(r, i)) {
      hark_buf_puts(b, ", \"result\": ");
      put_words(b, r, i);
    }
    hark_buf_puts(b, ", \"text\": ");
    if (!hark_buf_put_jstr(b, p, len)) hark_oom("reply", len);
    hark_buf_puts(b, "}");
  }
  if (i == 0) hark_buf_puts(b, "{\"confidence\": 1.000000, \"text\": \"\"}");
  hark_buf_puts(b, "]}");
}

/* The Vosk JSON for a response. A reset or eof always answers with a
 * final, as Vosk's FinalResult does. */
static void format_reply(hark_buf *b, const vosk_stream *s, const hark_response *resp,
                         bool force_final) {
  hark_asr_result r;
  hark_asr_result_read(resp, &r);
  bool final = force_final || r.is_final;
  if (!final) {
    hark_buf_puts(b, "{\"partial\": ");
    if (!hark_buf_put_jstr(b, r.text, r.text_len)) hark_oom("reply", r.text_len);
    hark_buf_puts(b, "}");
    return;
  }
  if (s->max_alternatives > 0) {
    put_alternatives(b, s, &r);
    return;
  }
  hark_buf_puts(b, "{");
  if (s->words && r.n_words) {
    hark_buf_puts(b, "\"result\": ");
    put_words(b, &r, -1);
    hark_buf_puts(b, ", ");
  }
  hark_buf_puts(b, "\"text\": ");
  if (!hark_buf_put_jstr(b, r.text, r.text_len)) hark_oom("reply", r.text_len);
  hark_buf_puts(b, "}");
}

/* Loop thread: one item's answer goes out (or the stream closes). */
static void on_item_done(hark_http_call *call, hark_http_conn *c) {
  (void)c;
  vosk_item *it = (vosk_item *)call;
  vosk_stream *s = it->s;
  s->pending--;
  if (s->ws && !hark_ws_closing(s->ws)) {
    if (it->status == HARK_SPEECH_FAILED) {
      stream_close(s, error_close_code(it->err), hark_error_message(it->err));
    } else if (it->status == HARK_SPEECH_OK) {
      hark_buf b = {0};
      format_reply(&b, s, it->resp, it->kind == HARK_SPEECH_END || it->kind == HARK_SPEECH_RESET);
      hark_ws_send_text(s->ws, b.data, b.len);
      hark_buf_free(&b);
      if (it->kind == HARK_SPEECH_END) stream_close(s, HARK_WS_CLOSE_NORMAL, "");
    }
    update_flow(s);
  }
  hark_response_free(it->resp);
  hark_error_free(it->err);
  free(it);
  if (!s->ws && !s->pending) stream_free(s);
}

/* ---- receiving -------------------------------------------------------------------- */

static void on_text(vosk_stream *s, const char *data, size_t len) {
  hark_vosk_text t;
  hark_vosk_text_parse(data, len, &t);
  switch (t.kind) {
  case HARK_VOSK_TEXT_CONFIG:
    /* Vosk reads the config when it makes the recogniser, at the first
       * audio; a later one would be silently ignored there. Say so here. */
    if (s->bound) {
      stream_close(s, HARK_WS_CLOSE_POLICY, "config must come before the first audio message");
      break;
    }
    if (t.config.has_sample_rate) s->st.sample_rate = (uint32_t)t.config.sample_rate;
    if (t.config.has_words) s->st.words = t.config.words;
    if (t.config.has_max_alternatives) s->st.max_alternatives = (uint32_t)t.config.max_alternatives;
    if (t.config.profile) {
      free(s->st.profile);
      s->st.profile = t.config.profile;
      t.config.profile = NULL;
    }
    if (t.config.phrase_list) {
      free(s->st.phrase_list);
      s->st.phrase_list = t.config.phrase_list;
      t.config.phrase_list = NULL;
    }
    break;
  case HARK_VOSK_TEXT_EOF:
    s->eof_seen = true;
    submit(s, HARK_SPEECH_END, NULL, 0);
    break;
  case HARK_VOSK_TEXT_RESET: submit(s, HARK_SPEECH_RESET, NULL, 0); break;
  default: stream_close(s, t.close_code, t.reason); break;
  }
  hark_vosk_text_clear(&t);
}

static void on_message(void *stream, const char *data, size_t len, bool binary) {
  vosk_stream *s = stream;
  if (s->eof_seen || hark_ws_closing(s->ws)) return; /* Vosk reads nothing after eof */
  if (!binary) {
    on_text(s, data, len);
    return;
  }
  if (!s->got_audio && len) {
    /* A G.711 WAV file has a byte a sample: the model reads its header. */
    hark_wav_info info;
    s->got_audio = true;
    s->g711 = hark_wav_parse((const uint8_t *)data, len, &info, NULL, 0) == HARK_WAV_OK &&
              info.encoding != HARK_WAV_PCM16;
  }
  if (len % 2 && !s->g711) {
    char reason[HARK_WS_REASON_MAX + 1];
    snprintf(reason, sizeof reason,
             "audio must be 16-bit little-endian PCM: got a binary message of %zu bytes (odd)",
             len);
    stream_close(s, HARK_WS_CLOSE_UNSUPPORTED, reason);
    return;
  }
  submit(s, HARK_SPEECH_AUDIO, data, len);
}

/* Waiting on the engine is not the client's idling. */
static bool on_busy(void *stream) {
  vosk_stream *s = stream;
  return s->pending > 0;
}

static void on_closed(void *stream) {
  vosk_stream *s = stream;
  VOSK_LOG(s, HARK_LOG_VERBOSE, "ws: connection closed%s",
           s->pending ? " (a request is still in the engine)" : "");
  s->ws = NULL;
  hark_speech_close(s->session); /* ends the sequence for a vanished client */
  s->session = NULL;
  if (!s->pending) stream_free(s);
}

static const hark_ws_handler ws_handler = {
    .accept = on_accept,
    .open = on_open,
    .release = on_release,
    .message = on_message,
    .busy = on_busy,
    .closed = on_closed,
};

/* ---- the service --------------------------------------------------------------------- */

hark_vosk *hark_vosk_new(hark_server *server, const hark_speech_options *opts) {
  hark_vosk *v = hark_xcalloc(1, sizeof *v);
  v->server = server;
  v->speech_model =
      opts->speech_model && *opts->speech_model ? opts->speech_model : DEFAULT_SPEECH_MODEL;
  v->max_message = opts->ws_max_message ? opts->ws_max_message : DEFAULT_MAX_MESSAGE;
  atomic_init(&v->adm.streams, 0);
  v->sample_rate = opts->sample_rate;
  v->adm.max_streams = opts->max_streams;
  v->adm.backlog_limit = opts->backlog_limit;
  v->adm.protocol = "WebSocket";
  return v;
}

void hark_vosk_free(hark_vosk *v) { free(v); }

const hark_ws_handler *hark_vosk_ws_handler(void) { return &ws_handler; }
