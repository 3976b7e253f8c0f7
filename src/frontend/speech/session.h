/*
 * session.h — one speech stream as the engine sees it, whatever protocol
 * carries it: a plain data structure and functions in the manner of
 * sched/seqtab.c (no sockets, no protocol). The Vosk WebSocket codec
 * (vosk.c) and the Riva gRPC codec (riva.c) are codecs over it: they turn
 * their protocol's messages into items and the session's results into
 * their protocol's replies.
 *
 * A session
 *   - pins the model version it opened on, so a reload lets it finish
 *     there while new streams get the new version;
 *   - is a sequence on that model, with a random correlation id in the
 *     sessions' own namespace (HARK_CORR_NS_SESSION), which no client can
 *     name, read, feed or end;
 *   - keeps one request in the engine at a time; later items wait in its
 *     queue (counted in bytes, for the codec's flow control), so the
 *     model's queue counts streams, not chunks;
 *   - builds each request: the AUDIO element (G.711 expanded to 16-bit
 *     PCM), START with the stream's settings on the first, END on the
 *     last, `flush` on a reset, `partial=false` when partials are off;
 *   - reports every submitted item exactly once to the codec's result
 *     handler, in order: its last response and error, or DROPPED when it
 *     never ran (the stream failed before its turn, or was closed);
 *   - after an engine error, drops the items still waiting (the stream
 *     has failed), but an END still goes, so the backend frees its state;
 *   - when the codec closes it (the client went away, or finished), ends
 *     the sequence on the client's behalf if it is still open (so the
 *     backend's decoder goes back to its pool at once, not at the idle
 *     timeout), then frees itself once nothing is in the engine.
 * Admission (how many streams, how long the model's backlog may be before
 * new streams are refused) is decided here too, once for both protocols.
 *
 * Threads: every function may be called from any thread; the session has
 * its own lock and never holds it while calling the engine or the codec.
 * The result handler runs on an engine worker, or on the submitting thread
 * when the engine refuses the request at once.
 */
#ifndef HARK_SPEECH_SESSION_H
#define HARK_SPEECH_SESSION_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/server.h"

typedef struct hark_speech_session hark_speech_session;

typedef enum hark_speech_encoding {
  HARK_SPEECH_PCM16 = 0, /* 16-bit little-endian mono (or a WAV file) */
  HARK_SPEECH_MULAW,     /* G.711 mu-law */
  HARK_SPEECH_ALAW,      /* G.711 A-law */
} hark_speech_encoding;

/* A stream's settings, sent with its first request. */
typedef struct hark_speech_settings {
  uint32_t sample_rate;                  /* 0: the model's default, or the WAV header's */
  uint32_t max_alternatives;             /* 0: the transcript only */
  bool words;                            /* word times and confidences */
  bool partials;                         /* false: finals only (parameter partial=false) */
  uint32_t silence_ms, startspeech_ms;   /* endpointing; 0: the model's */
  float start_threshold, stop_threshold; /* endpointing (VAD-gated models); 0: the model's */
  char *phrase_list;                     /* JSON array text, owned; NULL: none */
  char *profile;                         /* latency profile, owned; NULL: the model's */
  hark_speech_encoding encoding;
  /* The client's address (the transport's peer, no port; "" when none),
   * put on every request of the stream (hark_request_set_client): a
   * backend's per-client shares key on it. */
  char client[HARK_REQUEST_CLIENT_MAX];
} hark_speech_settings;

void hark_speech_settings_fini(hark_speech_settings *st);

typedef enum hark_speech_item_kind {
  HARK_SPEECH_AUDIO = 0, /* audio: a partial, or the final of an utterance */
  HARK_SPEECH_RESET,     /* no audio: the utterance ends here (its final) */
  HARK_SPEECH_END,       /* the stream's last request: its final, then done */
} hark_speech_item_kind;

typedef enum hark_speech_status {
  HARK_SPEECH_OK = 0,  /* the engine answered: the last response (may be NULL) */
  HARK_SPEECH_FAILED,  /* the engine or the model refused it: err */
  HARK_SPEECH_DROPPED, /* never ran */
} hark_speech_status;

/* The codec's handlers. `result`: one per submitted item, in order;
 * `resp` and `err` are the handler's to free. */
typedef struct hark_speech_handler {
  void (*result)(void *userp, void *tag, hark_speech_status status, hark_response *resp,
                 hark_error *err);
} hark_speech_handler;

/* ---- admission ---------------------------------------------------------------- */

/* One per protocol: its stream count and limits. */
typedef struct hark_speech_admission {
  _Atomic uint32_t streams;
  uint32_t max_streams;   /* 0: 1024 (--max-streams) */
  uint32_t backlog_limit; /* 0: 4 per instance (--stream-backlog-limit) */
  const char *protocol;   /* "WebSocket", "gRPC": for messages */
} hark_speech_admission;

/* Takes one stream slot for `model`: RESOURCE_EXHAUSTED when every slot is
 * taken; UNAVAILABLE while the model has more requests waiting than the
 * backlog limit (the streams already admitted would fall behind). */
hark_error *hark_speech_admit(hark_speech_admission *adm, const hark_model *model);
/* Gives a slot back. */
void hark_speech_leave(hark_speech_admission *adm);

/* ---- sessions -------------------------------------------------------------------- */

/*
 * Opens a session for a stream that holds an admission slot (taken over:
 * given back when the session closes). `proto` names the stream in logs
 * ("ws", "riva"): "<proto>-<n>". Never fails. Configure it before its
 * first item.
 */
hark_speech_session *hark_speech_open(hark_server *server, hark_speech_admission *adm,
                                      const char *proto, const hark_speech_handler *handler,
                                      void *userp);
/* Binds the session to `model` (a reference it takes over: the version the
 * stream is pinned to) with `settings` (taken over: phrase_list moves).
 * Once, before the first submit. */
void hark_speech_configure(hark_speech_session *s, hark_model *model,
                           hark_speech_settings *settings);
/* "ws-12": the stream's id in logs; the id of its requests. */
const char *hark_speech_id(const hark_speech_session *s);
/* The model it is bound to, or NULL before hark_speech_configure. */
hark_model *hark_speech_model(const hark_speech_session *s);

/*
 * Queues one item, answered later through the result handler with `tag`.
 * AUDIO takes `audio` (n bytes as the client sent them, in the session's
 * encoding; copied). An END ends the stream: nothing may follow it.
 * Client-sized: an audio buffer that cannot be had is reported FAILED.
 */
void hark_speech_submit(hark_speech_session *s, hark_speech_item_kind kind, const void *audio,
                        size_t n, void *tag);
/* What each queued message counts besides its audio: its bookkeeping
 * here and in the codec, so a flood of empty messages fills the queue. */
#define HARK_SPEECH_ITEM_OVERHEAD 512u
/* Bytes waiting behind the request in the engine: each message's audio
 * plus HARK_SPEECH_ITEM_OVERHEAD. */
size_t hark_speech_queued_bytes(hark_speech_session *s);
/* True once an END was submitted. */
bool hark_speech_ended(hark_speech_session *s);
/*
 * The codec lets go: no more submits. Items already submitted are still
 * reported (so the codec must keep its state until the last); the audio
 * still waiting is DROPPED. An open sequence is ended on the client's
 * behalf. The session frees itself when nothing of it is in the engine.
 */
void hark_speech_close(hark_speech_session *s);

/* ---- one-shot recognition ----------------------------------------------------------- */

/* A request of `model` carrying a whole recording (a one-shot sequence):
 * Riva's Recognize. `settings` are read, not taken. Caller owns *out. */
hark_error *hark_speech_request_oneshot(hark_model *model, const hark_speech_settings *settings,
                                        const void *audio, size_t n, hark_request **out);

#endif
