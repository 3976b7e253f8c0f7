/*
 * fuzz_vosk_ws.c — libFuzzer target for a Vosk WebSocket stream as a
 * whole (src/frontend/speech/vosk.c over session.c and the engine): the
 * upgrade's path, then a sequence of text messages (config, eof, reset,
 * anything) and binary ones (PCM, WAV headers, odd sizes), each handed to
 * the service's ws handler as the transport does, on a WebSocket with no
 * socket (hark_ws_detached_new) of a loop that this thread drains. The
 * engine is real: a server with echo_asr models (fuzz_server.h).
 *
 * Input: a byte choosing the path, a flags byte (bit 0: the client goes
 * away before the last answers came), then messages, each a header byte
 * (bit 0: binary; bit 1: do not wait for its answer before the next) and a
 * 2-byte little-endian length (at most 4096: the transport's limit). Checks what the protocol promises: every
 * reply is a JSON object; a close has a code in 1000..4999 and a reason
 * that fits a close frame; a stream that reaches eof is closed once its
 * answers are in, and one closed 1000 answered every audio message, reset
 * and eof exactly once.
 */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/http/http_impl.h"
#include "frontend/speech/speech.h"
#include "frontend/speech/vosk_text.h"
#include "fuzz_server.h"

/* Small, so that a short input can fill a stream's queue (it pauses past
 * one message's worth). */
#define MAX_MESSAGE 4096

static hark_vosk *vosk;
static hark_http_loop *loop;

static void init(void) {
  hark_speech_options opts = {.speech_model = "asr", .ws_max_message = MAX_MESSAGE};
  vosk = hark_vosk_new(fuzz_server_get(), &opts);
  loop = calloc(1, sizeof *loop); /* never runs: this thread drains it */
  if (!loop) abort();
  pthread_mutex_init(&loop->lock, NULL);
  pthread_cond_init(&loop->idle, NULL);
}

/* Runs the answers that came; with `all`, until nothing is in flight. */
static void drain(bool all) {
  for (;;) {
    pthread_mutex_lock(&loop->lock);
    while (all && !loop->done_head && loop->holds > 0) pthread_cond_wait(&loop->idle, &loop->lock);
    bool more = loop->done_head != NULL, busy = loop->holds > 0;
    pthread_mutex_unlock(&loop->lock);
    if (more) hark_http_drain_calls(loop);
    if (!all || (!more && !busy)) return;
  }
}

typedef struct input {
  const uint8_t *p;
  size_t n;
} input;

static uint8_t byte(input *in) {
  if (!in->n) return 0;
  in->n--;
  return *in->p++;
}

static const char *const PATHS[] = {
    "/",
    "/v2/models/asr/stream",
    "/v2/models/asr/versions/1/stream",
    "/v2/models/oneshot/stream",
    "/v2/models/identity/stream",
    "/v2/models/asr/versions/7/stream",
    "/v2/models/asr/ready",
};
#define N_PATHS (sizeof PATHS / sizeof PATHS[0])

/* echo_asr takes 300 ms over audio that begins "SLOW", 3 s over "LONG":
 * not for fuzzing. */
static void unslow(char *p, size_t n) {
  for (size_t i = 0; i + 4 <= n; i++)
    if (!memcmp(p + i, "SLOW", 4) || !memcmp(p + i, "LONG", 4)) p[i] = 's';
}

/* Whether a message is one the stream answers (if it is not closed). */
static bool is_item(const char *data, size_t len, bool binary) {
  if (binary) return true;
  hark_vosk_text t;
  hark_vosk_text_parse(data, len, &t);
  bool item = t.kind == HARK_VOSK_TEXT_EOF || t.kind == HARK_VOSK_TEXT_RESET;
  hark_vosk_text_clear(&t);
  return item;
}

static bool is_eof(const char *data, size_t len, bool binary) {
  if (binary) return false;
  hark_vosk_text t;
  hark_vosk_text_parse(data, len, &t);
  bool eof = t.kind == HARK_VOSK_TEXT_EOF;
  hark_vosk_text_clear(&t);
  return eof;
}

/* Every reply so far must be a JSON object; returns how many. */
static unsigned take_replies(hark_ws *ws) {
  unsigned n = 0;
  char *text;
  size_t len;
  while ((text = hark_ws_detached_take(ws, &len))) {
    cJSON *doc = cJSON_ParseWithLength(text, len);
    if (!cJSON_IsObject(doc)) abort();
    cJSON_Delete(doc);
    free(text);
    n++;
  }
  return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!vosk) init();
  input in = {data, size};
  const char *path = PATHS[byte(&in) % N_PATHS];
  bool vanish = byte(&in) & 1;
  const hark_ws_handler *h = hark_vosk_ws_handler();
  /* As ws.c: accepted at the upgrade (and given back), again when open. */
  void *ticket = NULL;
  hark_error *err = h->accept(vosk, path, &ticket);
  if (err) {
    hark_error_free(err);
    return 0;
  }
  h->release(vosk, ticket);
  if ((err = h->accept(vosk, path, &ticket))) abort(); /* nothing changed meanwhile */
  hark_ws *ws = hark_ws_detached_new(loop);
  void *stream = h->open(vosk, ws, ticket);
  unsigned items = 0, replies = 0;
  bool eof = false;
  const char *reason;
  while (in.n && !eof && !hark_ws_detached_close_code(ws, &reason)) {
    uint8_t head = byte(&in);
    size_t len = byte(&in);
    len |= (size_t)byte(&in) << 8;
    if (len > MAX_MESSAGE) len = MAX_MESSAGE; /* the transport's limit */
    if (len > in.n) len = in.n;
    bool binary = head & 1;
    /* A copy of exactly `len` bytes, as the transport's buffer. */
    char *msg = malloc(len ? len : 1);
    if (!msg) abort();
    memcpy(msg, in.p, len);
    in.p += len;
    in.n -= len;
    if (binary) unslow(msg, len);
    items += is_item(msg, len, binary);
    eof = is_eof(msg, len, binary);
    h->message(stream, msg, len, binary);
    free(msg);
    drain(!(head & 2));
    replies += take_replies(ws);
  }
  if (!vanish) drain(true);
  replies += take_replies(ws);
  int code = hark_ws_detached_close_code(ws, &reason);
  if (code && (code < 1000 || code > 4999 || strlen(reason) > HARK_WS_REASON_MAX)) abort();
  if (eof && !vanish && !code) abort(); /* eof's final closes the stream */
  if (code == HARK_WS_CLOSE_NORMAL && replies != items) abort();
  h->closed(stream);
  drain(true); /* the answers of a client that went away */
  hark_ws_detached_free(ws);
  return 0;
}
