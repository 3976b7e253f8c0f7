/*
 * ps_internal.h — the pocketsphinx backend's private interfaces:
 *   settings.c  model parameters -> pocketsphinx arguments + hark settings
 *   pool.c      the model's bounded pool of decoders
 *   stream.c    one stream's recognition (front end, endpointing, results)
 *   backend.c   the hark backend API glue
 *
 * The central idea (stream.c): every stream owns a sphinxbase front end
 * (fe_t: MFCC, noise tracking, the library's own voice activity detector
 * and its pre-speech buffer — a few KiB), fed exactly as
 * pocketsphinx_continuous feeds its decoder's front end. Cepstra go to a
 * pooled decoder with ps_process_cep only while an utterance is open, so a
 * decoder (tens of MiB) is held only while the stream speaks, and a
 * decoder's state never depends on the audio of other streams.
 */
#ifndef HARK_PS_INTERNAL_H
#define HARK_PS_INTERNAL_H

#include <pocketsphinx.h>
#include <pthread.h>
#include <sphinxbase/cmn.h>
#include <sphinxbase/fe.h>
#include <sphinxbase/feat.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/audio.h"
#include "hark/request.h"

/* ---- settings.c ---------------------------------------------------------- */

#define PS_MAX_ARGS 128

/* Latency profiles: the model's settings (accurate: the library's two
 * passes, finals equal pocketsphinx_continuous), or a search of its own in
 * the same decoder (fast: the first pass only, narrower beams). */
typedef enum ps_profile { PS_PROFILE_ACCURATE = 0, PS_PROFILE_FAST } ps_profile;
#define PS_FAST_SEARCH "fast"

/* The per-model degradation controller's and breaker's settings. */
typedef struct ps_degrade_settings {
  int on;              /* parameter degrade = "true" */
  uint32_t window_ms;  /* degrade_window_ms: one window of reply latencies */
  uint32_t bound_ms;   /* degrade_p99_ms: a window's p99 must stay under it */
  uint32_t windows;    /* degrade_windows: consecutive windows to switch */
  uint32_t breaker_ms; /* breaker_ms: one reply this late switches its stream */
} ps_degrade_settings;

/* A neural VAD's gate (hark_vad_gate, src/audio/vad_gate.c): parameter
 * vad_model names the VAD whose per-frame speech probabilities (input
 * VAD_PROB, one per 32 ms) open and close utterances in place of the front
 * end's energy detector. */
typedef struct ps_gate_settings {
  int on; /* vad_model is set */
  hark_vad_gate_settings g;
} ps_gate_settings;

typedef struct ps_settings {
  char *argv[PS_MAX_ARGS]; /* "-hmm", "/usr/share/...", ... (owned) */
  int argc;
  char *fast_argv[PS_MAX_ARGS]; /* the fast profile's arguments over argv (owned) */
  int fast_argc;
  ps_profile profile; /* the model's default profile */
  ps_degrade_settings degrade;
  uint32_t pool_size;           /* decoders at most */
  uint32_t pool_preload;        /* decoders made at load (at least 1, at most pool_size) */
  uint32_t pool_spare;          /* idle decoders a background thread keeps ready (0: off) */
  uint32_t final_threads;       /* threads for utterance-end passes (0: on the worker) */
  uint32_t decode_threads;      /* threads that decode streams in speech (0: on the worker) */
  uint32_t decoder_wait_ms;     /* how long a stream waits for a free decoder */
  uint32_t max_per_client;      /* decoders one client may hold (0: no bound) */
  uint32_t decoder_idle_ms;     /* audio lag that takes a held decoder back (0: never) */
  uint32_t max_buffered_ms;     /* audio a stream may hold unprocessed */
  uint32_t block_samples;       /* samples per front-end block (continuous: 2048) */
  uint32_t max_alternatives;    /* cap on request max_alternatives */
  uint32_t default_sample_rate; /* of audio that names no rate */
  int verbose;                  /* keep the library's log on stderr */
  ps_gate_settings gate;
} ps_settings;

typedef const char *(*ps_param_fn)(void *ctx, uint32_t i, const char **key);

/* Builds settings from (key, value) pairs: get(ctx, i, &key) returns the
 * i-th value or NULL past the end. 0, or -1 with a reason in err. */
int ps_settings_init(ps_settings *s, ps_param_fn get, void *ctx, char *err, size_t errlen);
void ps_settings_fini(ps_settings *s);
/* A fresh pocketsphinx configuration from s (caller frees with
 * cmd_ln_free_r), or NULL with the library's reason in err. fast: with
 * the fast profile's arguments over the model's. */
cmd_ln_t *ps_settings_cmdln(const ps_settings *s, int fast, char *err, size_t errlen);
/* "accurate" / "fast" -> *out; -1 for another name. */
int ps_profile_parse(const char *name, ps_profile *out);
const char *ps_profile_name(ps_profile p);

/* ---- pool.c -------------------------------------------------------------- */

/* A stream's cepstral-mean state, carried between its utterances exactly
 * as one long-lived decoder would carry it. */
typedef struct ps_cmn_state {
  mfcc_t mean[32];
  mfcc_t sum[32];
  int32 nframe;
  int32 veclen;
} ps_cmn_state;

typedef struct ps_pool ps_pool;

typedef struct ps_pool_stats {
  uint32_t max, created, in_use;
  uint64_t waits, timeouts;
} ps_pool_stats;

/* Creates s->pool_preload decoders now (the first validates the
 * configuration); the rest lazily, up to s->pool_size: with pool_spare, a
 * background thread keeps that many idle ahead of demand, else a stream
 * that finds none idle makes one. NULL with a reason in err. */
ps_pool *ps_pool_new(const ps_settings *s, char *err, size_t errlen);
void ps_pool_free(ps_pool *p);
/* A client's address (hark_request_client) as the pool keys its shares:
 * the request's own bound, so a key is never cut shorter than it. */
#define PS_CLIENT_MAX HARK_REQUEST_CLIENT_MAX

/* A decoder for `client` (NULL or "": a borrower of no client, outside the
 * shares), waiting up to wait_ms for one; NULL on timeout (or when a new
 * decoder fails to initialise). A client that holds max_decoders_per_client
 * decoders gets none until it gives one back; a waiting client that holds
 * fewer than this one goes first. With pool_spare, a caller that finds none
 * idle never makes one itself: the background thread does, and the caller
 * waits for it (wait_ms 0: returns NULL at once, to try again later).
 * Hand it back with ps_pool_release. */
ps_decoder_t *ps_pool_acquire(ps_pool *p, const char *client, uint32_t wait_ms);
void ps_pool_release(ps_pool *p, ps_decoder_t *ps);
/* Decoders `client` holds now. */
uint32_t ps_pool_client_held(ps_pool *p, const char *client);
/* True while `client` holds its share (max_decoders_per_client): waiting
 * for a decoder being made does not help it. */
bool ps_pool_client_at_share(ps_pool *p, const char *client);
/* Runs fn(arg) on one of the pool's final_threads, in order of
 * submission; -1 when it has none (or no memory): run it yourself. */
int ps_pool_run(ps_pool *p, void (*fn)(void *), void *arg);
/* The same on one of the pool's decode_threads. */
int ps_pool_run_decode(ps_pool *p, void (*fn)(void *), void *arg);
/* True while the spare maker is making, or will make, another decoder:
 * a borrower that found none waits for it rather than failing. */
bool ps_pool_growing(ps_pool *p);
void ps_pool_get_stats(ps_pool *p, ps_pool_stats *out);
/* A stream gave up waiting for a decoder (its request failed): counted in
 * the stats' timeouts. Attempts that go on waiting do not count. */
void ps_pool_count_timeout(ps_pool *p);
/* A stream's own endpointing, over the model's (0 = the model's). With a
 * gate, silence_ms and startspeech_ms are its stop and start histories. */
typedef struct ps_endpointing {
  uint32_t silence_ms;     /* silence that ends an utterance (-vad_postspeech) */
  uint32_t startspeech_ms; /* speech that opens one (-vad_startspeech) */
  float start_threshold;   /* gate only: fraction of start history (0: the model's) */
  float stop_threshold;    /* gate only: fraction of stop history (0: the model's) */
} ps_endpointing;

/* A front end configured like the decoders', with `ep`'s endpointing when
 * not NULL (freed by ps_pool_fe_free). gated: without the energy detector
 * (-remove_silence no): every frame of the audio given comes out. */
fe_t *ps_pool_fe_new(ps_pool *p, const ps_endpointing *ep, bool gated);
void ps_pool_fe_free(ps_pool *p, fe_t *fe);
/* The cepstral-mean state of a fresh decoder (-cmninit). */
void ps_pool_cmn_initial(const ps_pool *p, ps_cmn_state *out);
uint32_t ps_pool_sample_rate(const ps_pool *p);
const ps_settings *ps_pool_settings(const ps_pool *p);
/* The decoders' search for a profile. */
const char *ps_pool_search(const ps_pool *p, ps_profile prof);

void ps_cmn_save(ps_decoder_t *ps, ps_cmn_state *st);
void ps_cmn_restore(ps_decoder_t *ps, const ps_cmn_state *st);

/* ---- stream.c ------------------------------------------------------------ */

typedef struct ps_stream ps_stream;

typedef enum ps_status {
  PS_OK = 0,
  PS_BUSY,      /* no decoder within decoder_wait_ms: retry later */
  PS_WAIT,      /* (inside stream.c) no decoder free yet, still within the wait */
  PS_FULL,      /* the stream's audio buffer bound was reached */
  PS_INVALID,   /* bad input (odd byte count, bad rate, bad WAV) */
  PS_INTERNAL,  /* the library failed */
  PS_CANCELLED, /* the request's client cancelled or went (ps_stream_set_cancel) */
} ps_status;

#define PS_FEED_END 1u     /* the stream ends after this audio */
#define PS_FEED_FLUSH 2u   /* end the current utterance now (Vosk reset) */
#define PS_FEED_PARTIAL 4u /* compute a partial hypothesis */

typedef struct ps_word {
  char *word;
  float start, end, conf; /* seconds from the stream's start; posterior */
} ps_word;

typedef struct ps_result {
  int is_final;
  char *text; /* "" when nothing was recognised (owned) */
  size_t text_len;
  ps_word *words;
  uint32_t n_words, cap_words;
  float confidence;      /* mean word posterior; 0 with no words */
  float audio_processed; /* seconds of the stream's audio consumed */
  float stability;       /* a partial's: share of its words the last partial had too */
  /* The n-best of a final, best first: alternative 0 is the result itself
   * (text, words, confidence); each other one has its own text, words
   * (alt_words, alternative 1's first, alt_n_words[i] each; alternative
   * 0's are `words`) and a likelihood relative to alternative 0 (alt_rel,
   * in [0, 1]; its confidence is that times `confidence`). */
  char **alternatives; /* texts (owned) */
  float *alt_rel;
  uint32_t *alt_n_words;
  ps_word *alt_words;
  uint32_t n_alt_words, cap_alt_words;
  uint32_t n_alternatives;
  uint32_t want_alternatives;
} ps_result;

void ps_result_init(ps_result *r, uint32_t want_alternatives);
void ps_result_fini(ps_result *r);

/* client_rate: the rate of the PCM the client sends (8000..48000); ep:
 * the stream's endpointing, NULL for the model's. */
ps_stream *ps_stream_new(ps_pool *pool, uint32_t client_rate, const ps_endpointing *ep, char *err,
                         size_t errlen);
/* The client the stream's decoders are lent to (hark_request_client; copied,
 * "" for none), set before its first feed. */
void ps_stream_set_client(ps_stream *st, const char *client);
/* Gated streams (the model has a vad_model): the speech probabilities of
 * the next frames of the stream's audio, one per HARK_VAD_FRAME_MS of it at
 * the model rate, in order. Audio waits (bounded by max_buffered_ms) until
 * its frame's probability is there; at END or flush, audio no probability
 * covers belongs to the utterance if one is open, else is dropped. PS_FULL
 * when more than max_buffered_ms of probabilities wait for audio. */
ps_status ps_stream_add_probs(ps_stream *st, const float *p, size_t n, char *err, size_t errlen);
bool ps_stream_gated(const ps_stream *st);
/* Gives back the decoder if it holds one. */
void ps_stream_free(ps_stream *st);
uint32_t ps_stream_client_rate(const ps_stream *st);
/* The n-best count the stream's results carry (0: none), set from its
 * first request: later requests of a stream carry no settings. */
uint32_t ps_stream_alternatives(const ps_stream *st);
void ps_stream_set_alternatives(ps_stream *st, uint32_t n);

/*
 * Feeds little-endian 16-bit mono PCM bytes (len must be even) at the
 * client rate and runs recognition over every complete block; with
 * PS_FEED_END or PS_FEED_FLUSH also the tail, then closes the utterance.
 * Fills *res (initialised by the caller): a final when an utterance ended
 * (finals of several utterances concatenated) or with END/FLUSH, else a
 * partial. On PS_BUSY / PS_FULL the audio that was not processed stays
 * buffered (up to the bound) and a later call resumes. err gets a reason.
 */
ps_status ps_stream_feed(ps_stream *st, const uint8_t *pcm, size_t len, unsigned flags,
                         ps_result *res, char *err, size_t errlen);
/* What the next ps_stream_feed asks between blocks whether to stop:
 * `cancelled(arg)` true ends it PS_CANCELLED (the audio left is dropped,
 * the utterance stays open for the caller to free). NULL: never. */
void ps_stream_set_cancel(ps_stream *st, bool (*cancelled)(const void *arg), const void *arg);
/* True while the stream holds a decoder (inside an utterance). */
int ps_stream_has_decoder(const ps_stream *st);
/* True when the stream's next feed may decode: it holds a decoder, or (gated)
 * it is inside an utterance or has a waiting probability that could open one.
 * A silent gated stream's feed is a few comparisons; a decoding one takes
 * tens of ms of CPU. */
bool ps_stream_may_decode(const ps_stream *st);
/* When the message the next ps_stream_feed carries arrived (CLOCK_MONOTONIC
 * ms; default: when the call starts): decoder_idle_ms counts the client's
 * gaps, not the time its messages waited inside the server. */
void ps_stream_set_arrival(ps_stream *st, uint64_t arrival_ms);
/* CPU seconds the stream's utterance-end passes took on the pool's
 * threads since the last call (so the model's CPU figures count them). */
double ps_stream_take_pool_cpu(ps_stream *st);
/* Utterances the stream finished on the pool's threads (final_threads). */
uint32_t ps_stream_async_finals(const ps_stream *st);
/* Times the stream's decoder was taken back because its audio stalled
 * (decoder_idle_ms). */
uint32_t ps_stream_stalls(const ps_stream *st);
/* Seconds of the stream's audio (at the model rate) recognised so far. */
double ps_stream_audio_processed(const ps_stream *st);
/* The profile the stream's next utterance decodes with (the current one
 * keeps its own: a search cannot change inside an utterance). */
void ps_stream_set_profile(ps_stream *st, ps_profile p);

/* The stream's utterances recognise with this JSGF grammar (taken over;
 * NULL: the model's own search). */
void ps_stream_set_grammar(ps_stream *st, char *jsgf);

/* phrases.c: a phrase_list (JSON array of strings) as a JSGF grammar that
 * accepts any sequence of the phrases, its words checked with known();
 * the caller frees it. NULL with the reason in err. */
typedef bool (*ps_word_known)(void *arg, const char *word);
char *ps_phrases_jsgf(const char *json, ps_word_known known, void *arg, char *err, size_t errlen);

/* ---- degrade.c ------------------------------------------------------------ */

#define PS_DEGRADE_BUCKETS 10000u /* 1 ms each; the last holds 10 s and more */

typedef struct ps_degrade {
  ps_degrade_settings set;
  pthread_mutex_t mu;
  uint64_t window_start_ns;
  uint32_t counts[PS_DEGRADE_BUCKETS]; /* this window's latencies */
  uint64_t n;
  uint32_t over_run, under_run; /* consecutive windows over / within the bound */
  uint32_t last_p99_ms;         /* of the last finished window */
  uint64_t transitions;
  atomic_int degraded;
} ps_degrade;

void ps_degrade_init(ps_degrade *d, const ps_degrade_settings *s, uint64_t now_ns);
void ps_degrade_fini(ps_degrade *d);
/* Records one reply's latency at now_ns (thread-safe). Returns 1 when a
 * window it closed switched the model to degraded, -1 back to normal, 0
 * otherwise. Does nothing unless the settings turn degradation on. */
int ps_degrade_observe(ps_degrade *d, uint64_t now_ns, double latency_s);
bool ps_degrade_active(ps_degrade *d);
void ps_degrade_get(ps_degrade *d, uint64_t *transitions, uint32_t *last_p99_ms);

#endif
