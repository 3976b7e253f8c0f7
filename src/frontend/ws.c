/*
 * ws.c — Vosk's WebSocket speech protocol on the HTTP port, so Vosk
 * clients work unchanged: upgrade on "/" (the --speech-model) or on
 * /v2/models/{m}[/versions/{v}]/stream; binary messages carry 16-bit
 * little-endian mono PCM, text messages carry {"config": ...} (before the
 * audio), {"eof": 1} and {"reset": 1} (ws_text.c parses them). Every audio
 * message, reset and eof gets exactly one JSON reply, in order:
 * {"partial": ...}, or at the end of an utterance {"text": ...,
 * "result": [words]} (or {"alternatives": [...]}); eof's final is followed
 * by close 1000. Every problem closes the stream with a code and a reason.
 *
 * A stream is a sequence (a correlation id of its own, high bit set so it
 * cannot clash with ids HTTP clients choose). Each message becomes one
 * request on the model, AUDIO (BYTES, one element: the PCM), START on the
 * first, END on eof, parameter flush=true on reset; the first also carries
 * sample_rate, words, max_alternatives and phrase_list. One request is in
 * the engine at a time; later messages wait in a queue bounded in bytes,
 * and the socket's receive is paused (lws_rx_flow_control) while the queue
 * or the unsent replies are past their marks. The response (outputs
 * TRANSCRIPT, IS_FINAL, WORDS, WORD_START/END/CONF, CONFIDENCE, optional
 * ALTERNATIVES and ALTERNATIVE_CONFIDENCE) arrives on a worker, travels to
 * the loop on http.c's completion list, and is formatted there.
 *
 * A stream keeps a reference to the model version its first request ran
 * on, and sends every later request there: a reload swaps in a new
 * version for new streams while this one finishes on the old (which the
 * server keeps for it up to --model-unload-timeout-secs). While the server
 * drains, new streams are refused (503) and live ones go on.
 *
 * A stream outlives its connection while a request is in the engine; a
 * client that vanishes mid-utterance gets an END sent on its behalf so the
 * backend frees its decoder at once. A stream belongs to the loop that
 * accepted its connection (http_loop): only that loop's thread touches it,
 * its requests complete on that loop's list, and its idle sweep is that
 * loop's. Only the count of open streams (--max-streams) is shared by the
 * loops, an atomic.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "frontend/asr_result.h"
#include "frontend/http_impl.h"
#include "frontend/stream_admit.h"
#include "frontend/ws_text.h"
#include "util/log.h"

#define DEFAULT_SPEECH_MODEL "asr"
#define DEFAULT_MAX_MESSAGE (1u << 20)
#define DEFAULT_IDLE_SECS 60
#define DEFAULT_MAX_STREAMS 1024u
#define DEFAULT_SAMPLE_RATE 16000
#define OUT_HIGH_WATER (256u * 1024u) /* unsent replies: pause receiving */
#define SWEEP_US (1000 * LWS_US_PER_MS)
#define CORR_ID_BIT (1ull << 63)

typedef enum item_kind { ITEM_AUDIO = 0, ITEM_RESET, ITEM_EOF, ITEM_END } item_kind;

/* A message waiting for its turn in the engine. `mem` is the AUDIO
 * element, a 4-byte length and the PCM, handed to the request as is. */
typedef struct ws_item {
  struct ws_item *next;
  item_kind kind;
  char *mem;
  size_t len; /* PCM bytes after the 4-byte length */
} ws_item;

/* A reply waiting for the socket; the text starts LWS_PRE bytes in. */
typedef struct ws_out {
  struct ws_out *next;
  size_t len;
  unsigned char buf[];
} ws_out;

struct ws_stream {
  hark_http *http;
  http_loop *loop;            /* the loop of its connection */
  struct lws *wsi;            /* NULL once the connection is gone */
  ws_stream *prev, *next;     /* loop->streams, while connected */
  char *model;
  int64_t version;            /* as asked for; -1: the newest */
  hark_model *pinned;         /* the version the first request ran on (a reference) */
  uint64_t corr_id;
  /* settings */
  int sample_rate, max_alternatives;
  bool words;
  char *phrase_list;
  /* progress */
  bool audio_seen, eof_seen, seq_started, seq_ended;
  bool closing, rx_paused;
  int close_code;
  char close_reason[HARK_WS_REASON_MAX + 1];
  uint64_t last_rx_ns;
  /* the message being received (after 4 bytes of room for its length) */
  char *msg;
  size_t msg_len, msg_cap;
  bool in_msg, msg_binary;
  /* waiting for the engine, and in it */
  ws_item *q_head, *q_tail;
  size_t q_bytes;
  http_call *inflight;
  /* replies waiting for the socket */
  ws_out *out_head, *out_tail;
  size_t out_bytes;
};

static _Atomic uint64_t next_corr_id = 1;

/* A stream's id in logs, "ws-<n>": its correlation id without the high bit.
 * Its requests carry it as their id, so the workers' lines name it too. */
static void stream_id(const ws_stream *s, char *buf, size_t cap) {
  snprintf(buf, cap, "ws-%llu", (unsigned long long)(s->corr_id & ~CORR_ID_BIT));
}

#define WS_LOG(s, level, ...)                 \
  do {                                        \
    char sid_[32];                            \
    stream_id(s, sid_, sizeof sid_);          \
    HARK_LOG_STREAM(level, sid_, __VA_ARGS__); \
  } while (0)

static size_t max_message(const hark_http *http) {
  return http->opts.ws_max_message_bytes ? http->opts.ws_max_message_bytes : DEFAULT_MAX_MESSAGE;
}
/* Receiving pauses when this much audio waits; past the hard limit (which
 * only a client ignoring flow control reaches) the stream is closed. */
static size_t queue_high(const hark_http *http) { return max_message(http); }
static size_t queue_hard(const hark_http *http) { return 4 * max_message(http) + 65536; }

/* ---- refusing upgrades --------------------------------------------------- */

static const char *status_text(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 409: return "Conflict";
    case 429: return "Too Many Requests";
    case 499: return "Client Closed Request";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Internal Server Error";
  }
}

/* Writes `status` with {"error": msg} and returns 1, which tells lws the
 * upgrade was answered. The status line is written here: lws would say
 * HTTP/1.0 before the request's version is recorded, which WebSocket
 * clients reject. */
static int refuse(struct lws *wsi, int status, const char *msg) {
  hark_kserve_buf b = {0};
  char head[256];
  if (!hark_kserve_buf_reserve(&b, LWS_PRE + sizeof head)) return -1;
  b.len = LWS_PRE + sizeof head;
  size_t body = b.len;
  if (!hark_kserve_buf_put_error(&b, msg)) {
    hark_kserve_buf_free(&b);
    return -1;
  }
  int h = snprintf(head, sizeof head,
                   "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n", status,
                   status_text(status), HARK_HTTP_JSON, b.len - body);
  char *start = b.data + body - (size_t)h;
  memcpy(start, head, (size_t)h);
  size_t total = b.len - (body - (size_t)h);
  int n = lws_write(wsi, (unsigned char *)start, total, LWS_WRITE_HTTP_FINAL);
  hark_kserve_buf_free(&b);
  return n < 0 ? -1 : 1;
}

/* The stream route of this connection's URI: model (NULL = the speech
 * model) and version. False when it is not a stream route. */
static bool stream_route(struct lws *wsi, route *rt, hark_error **err) {
  char path[2048];
  *err = NULL;
  if (!wsi) return false;
  if (lws_hdr_copy(wsi, path, sizeof path, WSI_TOKEN_GET_URI) <= 0) return false;
  if (strcmp(path, "/") == 0) { /* where Vosk's clients connect */
    *rt = (route){.kind = R_STREAM, .version = -1};
    return true;
  }
  *err = hark_http_route_parse(path, false, rt);
  return !*err && rt->kind == R_STREAM;
}

static const char *speech_model(const hark_http *http) {
  return http->opts.speech_model ? http->opts.speech_model : DEFAULT_SPEECH_MODEL;
}

static uint32_t max_streams(const hark_http *http) {
  return http->opts.max_streams ? http->opts.max_streams : DEFAULT_MAX_STREAMS;
}

static void too_many_streams(const hark_http *http, char *msg, size_t len) {
  snprintf(msg, len, "too many streams: the server serves at most %u at once (--max-streams)",
           max_streams(http));
}

/* Takes one of the --max-streams slots, exactly, whichever loop asks. */
static bool take_slot(hark_http *http) {
  uint32_t n = atomic_load(&http->n_streams);
  do {
    if (n >= max_streams(http)) return false;
  } while (!atomic_compare_exchange_weak(&http->n_streams, &n, n + 1));
  return true;
}

void hark_ws_release_slot(hark_http *http, http_conn *c) {
  if (!c || !c->ws_slot) return;
  c->ws_slot = false;
  atomic_fetch_sub(&http->n_streams, 1);
}

int hark_ws_confirm_upgrade(struct lws *wsi, http_conn *c, const char *upgrade) {
  http_loop *loop = hark_http_loop_of(wsi);
  hark_http *http = loop->http;
  if (strcasecmp(upgrade, "websocket") != 0) return 0;
  if (lws_get_vhost(wsi) == loop->vh_metrics) return refuse(wsi, 404, "Not Found");
  route rt = {.kind = R_NONE, .version = -1};
  hark_error *err;
  bool ok = stream_route(wsi, &rt, &err);
  int ret;
  char msg[256];
  if (err) {
    ret = refuse(wsi, hark_code_http_status(hark_error_code(err)), hark_error_message(err));
    hark_error_free(err);
  } else if (!ok) {
    ret = refuse(wsi, 404,
                 "Not Found: stream on / or /v2/models/{model}[/versions/{version}]/stream");
  } else if (atomic_load(&http->stop) || hark_server_is_draining(http->server)) {
    ret = refuse(wsi, 503, "Server is shutting down: not accepting new streams");
  } else {
    hark_model *model;
    err = hark_server_model_acquire(http->server, rt.model ? rt.model : speech_model(http),
                                    rt.version, &model);
    if (err) {
      ret = refuse(wsi, hark_code_http_status(hark_error_code(err)), hark_error_message(err));
      hark_error_free(err);
    } else {
      ret = hark_stream_model_overloaded(model, http->opts.stream_backlog_limit, msg,
                                           sizeof msg)
                ? refuse(wsi, 503, msg)
                : 0;
      hark_model_release(model);
      /* Accepted: the stream's slot is taken now, so the next upgrade on
       * any loop sees it, even before this one is established. */
      if (ret == 0 && !take_slot(http)) {
        too_many_streams(http, msg, sizeof msg);
        ret = refuse(wsi, 503, msg);
      } else if (ret == 0 && c) {
        c->ws_slot = true;
      } else if (ret == 0) {
        atomic_fetch_sub(&http->n_streams, 1);
      }
    }
  }
  free(rt.model);
  return ret;
}

/* ---- stream lifetime ------------------------------------------------------ */

static void items_free(ws_stream *s) {
  for (ws_item *it = s->q_head, *next; it; it = next) {
    next = it->next;
    free(it->mem);
    free(it);
  }
  s->q_head = s->q_tail = NULL;
  s->q_bytes = 0;
}

static void outs_free(ws_stream *s) {
  for (ws_out *o = s->out_head, *next; o; o = next) {
    next = o->next;
    free(o);
  }
  s->out_head = s->out_tail = NULL;
  s->out_bytes = 0;
}

static void stream_free(ws_stream *s) {
  hark_model_release(s->pinned);
  items_free(s);
  outs_free(s);
  free(s->msg);
  free(s->model);
  free(s->phrase_list);
  free(s);
}

static void unlink_stream(ws_stream *s) {
  http_loop *loop = s->loop;
  if (s->prev)
    s->prev->next = s->next;
  else if (loop->streams == s)
    loop->streams = s->next;
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = NULL;
  atomic_fetch_sub(&s->http->n_streams, 1);
}

static void stream_close(ws_stream *s, int code, const char *reason);

int hark_ws_established(struct lws *wsi, http_conn *c) {
  http_loop *loop = hark_http_loop_of(wsi);
  hark_http *http = loop->http;
  route rt = {.kind = R_NONE, .version = -1};
  hark_error *err = NULL;
  if (!c || !stream_route(wsi, &rt, &err)) { /* confirmed a moment ago */
    hark_error_free(err);
    free(rt.model);
    return -1;
  }
  ws_stream *s = calloc(1, sizeof *s);
  if (!s || !(s->model = rt.model ? rt.model : strdup(speech_model(http)))) {
    free(rt.model);
    free(s);
    return -1;
  }
  s->http = http;
  s->loop = loop;
  s->wsi = wsi;
  s->version = rt.version;
  s->corr_id = CORR_ID_BIT | atomic_fetch_add(&next_corr_id, 1);
  s->sample_rate = DEFAULT_SAMPLE_RATE;
  s->words = true; /* Vosk's server shows words unless told otherwise */
  s->last_rx_ns = hark_now_ns();
  s->next = loop->streams;
  if (s->next) s->next->prev = s;
  loop->streams = s;
  /* The slot its upgrade took is the stream's now (unlink_stream gives it
   * back); without one (not expected) it takes one here, or goes at once. */
  bool over = false;
  if (c->ws_slot) c->ws_slot = false;
  else over = atomic_fetch_add(&http->n_streams, 1) >= max_streams(http);
  c->ws = s;
  WS_LOG(s, HARK_LOG_VERBOSE, "ws: stream opened on model '%s'", s->model);
  if (over) {
    char msg[HARK_WS_REASON_MAX + 1];
    too_many_streams(http, msg, sizeof msg);
    stream_close(s, HARK_WS_CLOSE_TRY_LATER, msg);
  }
  return 0;
}

/* Stops taking input and closes once the replies already made are out. */
static void stream_close(ws_stream *s, int code, const char *reason) {
  if (s->closing || !s->wsi) return;
  WS_LOG(s, code == HARK_WS_CLOSE_INTERNAL ? HARK_LOG_WARN : HARK_LOG_VERBOSE,
         "ws: closing the stream: %d %s", code, reason ? reason : "");
  s->closing = true;
  s->close_code = code;
  snprintf(s->close_reason, sizeof s->close_reason, "%s", reason ? reason : "");
  hark_ws_reason_fit(s->close_reason, HARK_WS_REASON_MAX);
  items_free(s);
  if (s->rx_paused) { /* let the close handshake be read */
    lws_rx_flow_control(s->wsi, 1);
    s->rx_paused = false;
  }
  lws_callback_on_writable(s->wsi);
}

static int error_close_code(const hark_error *err) {
  hark_code code = hark_error_code(err);
  return code == HARK_ERR_UNAVAILABLE || code == HARK_ERR_RESOURCE_EXHAUSTED
             ? HARK_WS_CLOSE_TRY_LATER
             : HARK_WS_CLOSE_INTERNAL;
}

/* ---- requests --------------------------------------------------------------- */

/* Worker thread: keeps the last response and the first error; the final
 * hands the call to the loop. */
static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  http_call *call = userp;
  if (resp) {
    hark_response_free(call->ws_resp);
    call->ws_resp = resp;
  }
  if (err && !call->ws_err)
    call->ws_err = err;
  else
    hark_error_free(err);
  if (flags & HARK_RESPONSE_FINAL) hark_http_call_push(call);
}

static void set_int_param(hark_request *req, const char *key, long v) {
  char num[32];
  snprintf(num, sizeof num, "%ld", v);
  hark_request_set_parameter(req, key, num);
}

/* Builds the request for `it` (taking its memory) and hands it to the
 * engine. On error nothing reached the engine and `it` is freed. */
static hark_error *submit(ws_stream *s, ws_item *it) {
  hark_http *http = s->http;
  hark_model *model = s->pinned;
  hark_error *err = NULL;
  if (!model) err = hark_server_model_acquire(http->server, s->model, s->version, &model);
  if (err) {
    free(it->mem);
    free(it);
    return err;
  }
  hark_request *req = hark_request_new(model);
  bool batched = hark_model_get_config(model)->max_batch_size > 0;
  if (!s->pinned) s->pinned = model; /* kept (released in stream_free) if accepted */
  uint32_t flags = 0;
  if (!s->seq_started) {
    flags |= HARK_REQUEST_SEQUENCE_START;
    set_int_param(req, "sample_rate", s->sample_rate);
    hark_request_set_parameter(req, "words", s->words ? "true" : "false");
    set_int_param(req, "max_alternatives", s->max_alternatives);
    if (s->phrase_list) hark_request_set_parameter(req, "phrase_list", s->phrase_list);
  }
  if (it->kind == ITEM_EOF || it->kind == ITEM_END) flags |= HARK_REQUEST_SEQUENCE_END;
  if (it->kind == ITEM_RESET) hark_request_set_parameter(req, "flush", "true");
  hark_request_set_flags(req, flags);
  hark_request_set_correlation_id(req, s->corr_id);
  char sid[32];
  stream_id(s, sid, sizeof sid);
  hark_request_set_id(req, sid);
  uint32_t n = (uint32_t)it->len;
  memcpy(it->mem, &(uint32_t){n}, 4); /* the BYTES element's length, little-endian */
  static const int64_t shape1[1] = {1}, shape2[2] = {1, 1};
  err = hark_request_add_input(req, "AUDIO", HARK_TYPE_BYTES, batched ? shape2 : shape1,
                               batched ? 2 : 1, it->mem, it->len + 4);
  hark_request_attach(req, it->mem, free);
  item_kind kind = it->kind;
  free(it);
  http_call *call = err ? NULL : hark_http_call_new(s->loop, NULL);
  if (!err && !call) err = hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  if (err) {
    hark_request_free(req);
    if (!s->seq_started) {
      hark_model_release(s->pinned);
      s->pinned = NULL;
    }
    return err;
  }
  call->ws = s;
  call->ws_kind = kind;
  hark_request_set_callback(req, on_response, call);
  hark_http_outstanding_add(s->loop, 1);
  err = hark_server_infer(http->server, req);
  if (err) {
    hark_http_outstanding_add(s->loop, -1);
    hark_request_free(req);
    hark_http_call_free(call);
    if (!s->seq_started) {
      hark_model_release(s->pinned);
      s->pinned = NULL;
    }
    return err;
  }
  s->seq_started = true; /* the whole stream stays on s->pinned */
  if (flags & HARK_REQUEST_SEQUENCE_END) s->seq_ended = true;
  s->inflight = call;
  return NULL;
}

/* Ends the sequence of a stream whose client is gone, so the backend
 * frees its decoder now rather than at its idle timeout. */
static void send_end(ws_stream *s) {
  ws_item *it = calloc(1, sizeof *it);
  if (it && !(it->mem = malloc(4))) {
    free(it);
    it = NULL;
  }
  if (!it) return;
  it->kind = ITEM_END;
  hark_error *err = submit(s, it);
  if (err) {
    WS_LOG(s, HARK_LOG_VERBOSE, "ws: cannot end the sequence of a closed stream: %s",
           hark_error_message(err));
    hark_error_free(err);
  }
}

static void update_flow(ws_stream *s) {
  if (!s->wsi || s->closing) return;
  hark_http *http = s->http;
  bool over = s->q_bytes >= queue_high(http) || s->out_bytes >= OUT_HIGH_WATER;
  bool under = s->q_bytes < queue_high(http) / 2 && s->out_bytes < OUT_HIGH_WATER / 2;
  if (!s->rx_paused && over) {
    lws_rx_flow_control(s->wsi, 0);
    s->rx_paused = true;
  } else if (s->rx_paused && under) {
    lws_rx_flow_control(s->wsi, 1);
    s->rx_paused = false;
  }
}

/* Sends the next queued message to the engine if none is there. */
static void pump(ws_stream *s) {
  while (!s->inflight && s->q_head && s->wsi && !s->closing) {
    ws_item *it = s->q_head;
    if (!(s->q_head = it->next)) s->q_tail = NULL;
    s->q_bytes -= it->len;
    hark_error *err = submit(s, it);
    if (err) {
      stream_close(s, error_close_code(err), hark_error_message(err));
      hark_error_free(err);
    }
  }
  update_flow(s);
}

static void enqueue(ws_stream *s, item_kind kind, char *mem, size_t len) {
  ws_item *it = calloc(1, sizeof *it);
  if (!it || (!mem && !(mem = malloc(4)))) {
    free(it);
    free(mem);
    stream_close(s, HARK_WS_CLOSE_INTERNAL, "out of memory");
    return;
  }
  it->kind = kind;
  it->mem = mem;
  it->len = len;
  if (s->q_tail)
    s->q_tail->next = it;
  else
    s->q_head = it;
  s->q_tail = it;
  s->q_bytes += len;
  if (s->q_bytes > queue_hard(s->http)) {
    stream_close(s, HARK_WS_CLOSE_TRY_LATER, "stream is too far behind");
    return;
  }
  pump(s);
}

/* ---- replies ----------------------------------------------------------------- */

static bool put_num(hark_kserve_buf *b, double v) {
  char num[48];
  int n = snprintf(num, sizeof num, "%.6f", isfinite(v) ? v : 0.0);
  return hark_kserve_buf_put(b, num, (size_t)n);
}

static bool put_words(hark_kserve_buf *b, const hark_asr_result *r) {
  bool ok = hark_kserve_buf_puts(b, "[");
  for (uint32_t i = 0; ok && i < r->n_words; i++) {
    const char *p;
    uint32_t len;
    float start, end, conf;
    if (!hark_asr_result_word(r, i, &p, &len, &start, &end, &conf)) break;
    ok = (i == 0 || hark_kserve_buf_puts(b, ",")) && hark_kserve_buf_puts(b, "{\"conf\": ") &&
         put_num(b, conf) && hark_kserve_buf_puts(b, ", \"end\": ") && put_num(b, end) &&
         hark_kserve_buf_puts(b, ", \"start\": ") && put_num(b, start) &&
         hark_kserve_buf_puts(b, ", \"word\": ") && hark_kserve_buf_put_jstr(b, p, len) &&
         hark_kserve_buf_puts(b, "}");
  }
  return ok && hark_kserve_buf_puts(b, "]");
}

/* Vosk's alternatives: the n-best texts (ALTERNATIVES, best first; the
 * transcript alone when absent), each with its confidence, the best with
 * its words. */
static bool put_alternatives(hark_kserve_buf *b, const ws_stream *s, const hark_asr_result *r) {
  uint32_t n = r->alts ? r->n_alternatives : 1;
  if (n > (uint32_t)s->max_alternatives) n = (uint32_t)s->max_alternatives;
  bool ok = hark_kserve_buf_puts(b, "{\"alternatives\": [");
  for (uint32_t i = 0; ok && i < n; i++) {
    const char *p;
    uint32_t len;
    float conf;
    if (!hark_asr_result_alternative(r, i, &p, &len, &conf)) break;
    ok = (i == 0 || hark_kserve_buf_puts(b, ", ")) &&
         hark_kserve_buf_puts(b, "{\"confidence\": ") && put_num(b, conf);
    if (ok && i == 0 && s->words && r->n_words)
      ok = hark_kserve_buf_puts(b, ", \"result\": ") && put_words(b, r);
    ok = ok && hark_kserve_buf_puts(b, ", \"text\": ") && hark_kserve_buf_put_jstr(b, p, len) &&
         hark_kserve_buf_puts(b, "}");
  }
  return ok && hark_kserve_buf_puts(b, "]}");
}

/* The Vosk JSON for a response, after LWS_PRE bytes of headroom. A reset
 * or eof always answers with a final, as Vosk's FinalResult does. */
static bool format_reply(hark_kserve_buf *b, const ws_stream *s, const hark_response *resp,
                         bool force_final) {
  hark_asr_result r;
  hark_asr_result_read(resp, &r);
  bool final = force_final || r.is_final;
  if (!hark_kserve_buf_reserve(b, LWS_PRE + 64)) return false;
  b->len = LWS_PRE;
  if (!final)
    return hark_kserve_buf_puts(b, "{\"partial\": ") &&
           hark_kserve_buf_put_jstr(b, r.text, r.text_len) && hark_kserve_buf_puts(b, "}");
  if (s->max_alternatives > 0 && resp) return put_alternatives(b, s, &r);
  bool ok = hark_kserve_buf_puts(b, "{");
  if (ok && s->words && r.n_words)
    ok = hark_kserve_buf_puts(b, "\"result\": ") && put_words(b, &r) &&
         hark_kserve_buf_puts(b, ", ");
  return ok && hark_kserve_buf_puts(b, "\"text\": ") &&
         hark_kserve_buf_put_jstr(b, r.text, r.text_len) && hark_kserve_buf_puts(b, "}");
}

static void queue_reply(ws_stream *s, const hark_response *resp, bool force_final) {
  hark_kserve_buf b = {0};
  if (!format_reply(&b, s, resp, force_final)) {
    hark_kserve_buf_free(&b);
    stream_close(s, HARK_WS_CLOSE_INTERNAL, "out of memory");
    return;
  }
  size_t len = b.len - LWS_PRE;
  ws_out *o = malloc(sizeof *o + b.len);
  if (!o) {
    hark_kserve_buf_free(&b);
    stream_close(s, HARK_WS_CLOSE_INTERNAL, "out of memory");
    return;
  }
  o->next = NULL;
  o->len = len;
  memcpy(o->buf + LWS_PRE, b.data + LWS_PRE, len);
  hark_kserve_buf_free(&b);
  if (s->out_tail)
    s->out_tail->next = o;
  else
    s->out_head = o;
  s->out_tail = o;
  s->out_bytes += len;
  lws_callback_on_writable(s->wsi);
}

int hark_ws_writable(struct lws *wsi, http_conn *c) {
  ws_stream *s = c ? c->ws : NULL;
  if (!s) return 0;
  if (lws_partial_buffered(wsi)) { /* lws sends its leftovers first */
    lws_callback_on_writable(wsi);
    return 0;
  }
  ws_out *o = s->out_head;
  if (o) {
    if (lws_write(wsi, o->buf + LWS_PRE, o->len, LWS_WRITE_TEXT) < (int)o->len) return -1;
    if (!(s->out_head = o->next)) s->out_tail = NULL;
    s->out_bytes -= o->len;
    free(o);
    if (s->out_head || s->closing) lws_callback_on_writable(wsi);
    update_flow(s);
    return 0;
  }
  if (!s->closing) return 0;
  lws_close_reason(wsi, (enum lws_close_status)s->close_code, (unsigned char *)s->close_reason,
                   strlen(s->close_reason));
  return -1;
}

/* ---- completions ---------------------------------------------------------------- */

static void call_free(http_call *call) {
  hark_response_free(call->ws_resp);
  hark_error_free(call->ws_err);
  hark_http_call_free(call);
}

void hark_ws_complete(http_loop *loop, http_call *call) {
  (void)loop;
  ws_stream *s = call->ws;
  if (s->inflight == call) s->inflight = NULL;
  if (s->wsi && !s->closing) {
    if (call->ws_err) {
      stream_close(s, error_close_code(call->ws_err), hark_error_message(call->ws_err));
    } else {
      bool flush = call->ws_kind == ITEM_EOF || call->ws_kind == ITEM_RESET;
      queue_reply(s, call->ws_resp, flush);
      if (call->ws_kind == ITEM_EOF) stream_close(s, HARK_WS_CLOSE_NORMAL, "");
    }
  }
  call_free(call);
  if (s->wsi) {
    pump(s);
    return;
  }
  /* The client is gone: end its sequence, then free the stream. */
  if (s->seq_started && !s->seq_ended) send_end(s);
  if (!s->inflight) stream_free(s);
}

void hark_ws_discard(http_call *call) {
  ws_stream *s = call->ws;
  if (s->inflight == call) s->inflight = NULL;
  call_free(call);
  if (!s->wsi && !s->inflight) stream_free(s);
}

/* ---- receiving -------------------------------------------------------------------- */

static void on_text(ws_stream *s, const char *data, size_t len) {
  hark_ws_text t;
  hark_ws_text_parse(data, len, &t);
  switch (t.kind) {
    case HARK_WS_TEXT_CONFIG:
      /* Vosk reads the config when it makes the recogniser, at the first
       * audio; a later one would be silently ignored there. Say so here. */
      if (s->audio_seen || s->seq_started) {
        stream_close(s, HARK_WS_CLOSE_POLICY,
                     "config must come before the first audio message");
        break;
      }
      if (t.config.has_sample_rate) s->sample_rate = t.config.sample_rate;
      if (t.config.has_words) s->words = t.config.words;
      if (t.config.has_max_alternatives) s->max_alternatives = t.config.max_alternatives;
      if (t.config.phrase_list) {
        free(s->phrase_list);
        s->phrase_list = t.config.phrase_list;
        t.config.phrase_list = NULL;
      }
      break;
    case HARK_WS_TEXT_EOF:
      s->eof_seen = true;
      enqueue(s, ITEM_EOF, NULL, 0);
      break;
    case HARK_WS_TEXT_RESET: enqueue(s, ITEM_RESET, NULL, 0); break;
    default: stream_close(s, t.close_code, t.reason); break;
  }
  hark_ws_text_clear(&t);
}

static void on_message(ws_stream *s) {
  char *mem = s->msg;
  size_t len = s->msg_len;
  s->msg = NULL;
  s->msg_len = s->msg_cap = 0;
  if (!s->msg_binary) {
    on_text(s, mem ? mem + 4 : "", len);
    free(mem);
    return;
  }
  if (len % 2) {
    char reason[HARK_WS_REASON_MAX + 1];
    snprintf(reason, sizeof reason,
             "audio must be 16-bit little-endian PCM: got a binary message of %zu bytes (odd)",
             len);
    free(mem);
    stream_close(s, HARK_WS_CLOSE_UNSUPPORTED, reason);
    return;
  }
  s->audio_seen = true;
  enqueue(s, ITEM_AUDIO, mem, len);
}

/* Appends a piece of the current message, within the size limit. */
static bool msg_append(ws_stream *s, const void *in, size_t len) {
  size_t limit = max_message(s->http);
  if (len > limit - s->msg_len) {
    char reason[HARK_WS_REASON_MAX + 1];
    snprintf(reason, sizeof reason,
             "message too big: the limit is %zu bytes (--ws-max-message-bytes)", limit);
    stream_close(s, HARK_WS_CLOSE_TOO_BIG, reason);
    return false;
  }
  size_t need = 4 + s->msg_len + len;
  if (need > s->msg_cap) {
    size_t cap = s->msg_cap ? s->msg_cap : 8192;
    while (cap < need) cap *= 2;
    if (cap > 4 + limit) cap = 4 + limit;
    char *m = realloc(s->msg, cap);
    if (!m) {
      stream_close(s, HARK_WS_CLOSE_INTERNAL, "out of memory");
      return false;
    }
    s->msg = m;
    s->msg_cap = cap;
  }
  if (len) memcpy(s->msg + 4 + s->msg_len, in, len);
  s->msg_len += len;
  return true;
}

int hark_ws_receive(struct lws *wsi, http_conn *c, const void *in, size_t len) {
  ws_stream *s = c ? c->ws : NULL;
  if (!s) return -1;
  s->last_rx_ns = hark_now_ns();
  if (s->closing || s->eof_seen) return 0; /* Vosk reads nothing after eof */
  if (!s->in_msg) {
    s->in_msg = true;
    s->msg_binary = lws_frame_is_binary(wsi) != 0;
    s->msg_len = 0;
  }
  if (!msg_append(s, in, len)) return 0;
  if (lws_is_final_fragment(wsi) && lws_remaining_packet_payload(wsi) == 0) {
    s->in_msg = false;
    on_message(s);
  }
  return 0;
}

void hark_ws_closed(http_loop *loop, http_conn *c) {
  ws_stream *s = c->ws;
  hark_ws_release_slot(loop->http, c); /* established without a stream */
  if (!s) return;
  WS_LOG(s, HARK_LOG_VERBOSE, "ws: connection closed%s",
         s->inflight ? " (a request is still in the engine)" : "");
  c->ws = NULL;
  unlink_stream(s);
  s->wsi = NULL;
  items_free(s);
  outs_free(s);
  free(s->msg);
  s->msg = NULL;
  if (s->inflight) return; /* hark_ws_complete finishes the job */
  if (s->seq_started && !s->seq_ended) send_end(s);
  if (!s->inflight) stream_free(s);
}

/* ---- idle sweep and shutdown ---------------------------------------------------------- */

static void on_sweep(lws_sorted_usec_list_t *sul) {
  http_loop *loop = lws_container_of(sul, http_loop, ws_sweep);
  hark_http *http = loop->http;
  int secs = http->opts.ws_idle_timeout_secs > 0 ? http->opts.ws_idle_timeout_secs
                                                  : DEFAULT_IDLE_SECS;
  uint64_t now = hark_now_ns(), limit = (uint64_t)secs * 1000000000ull;
  for (ws_stream *s = loop->streams; s; s = s->next) {
    /* Waiting on the engine or on our replies is not the client's idling. */
    if (s->closing || s->inflight || s->q_head || s->out_head || s->rx_paused) continue;
    if (now - s->last_rx_ns >= limit) stream_close(s, HARK_WS_CLOSE_GOING_AWAY, "idle timeout");
  }
  lws_sul_schedule(loop->ctx, 0, &loop->ws_sweep, on_sweep, SWEEP_US);
}

void hark_ws_start(http_loop *loop) {
  lws_sul_schedule(loop->ctx, 0, &loop->ws_sweep, on_sweep, SWEEP_US);
}

void hark_ws_stop(http_loop *loop) { lws_sul_cancel(&loop->ws_sweep); }

bool hark_ws_close_all(http_loop *loop) {
  if (!loop->ws_closing_all) {
    loop->ws_closing_all = true;
    for (ws_stream *s = loop->streams; s; s = s->next)
      stream_close(s, HARK_WS_CLOSE_GOING_AWAY, "server is shutting down");
  }
  return loop->streams != NULL;
}

void hark_ws_free_all(http_loop *loop) {
  /* lws_context_destroy closed every connection, so only streams whose
   * CLOSED never came could be left: free them. */
  while (loop->streams) {
    ws_stream *s = loop->streams;
    unlink_stream(s);
    stream_free(s);
  }
}
