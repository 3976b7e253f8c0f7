/*
 * asr.h — the neural recogniser's private structures, shared by its C
 * files: backend.c (the hark glue: a round of requests), stream.c (one
 * stream: audio to features, the utterance's tokens, endpointing, text)
 * and tokens.c (tokens.txt and how tokens join into words). The network
 * and the search are net.cc behind net.h.
 */
#ifndef HARK_NEURAL_ASR_H
#define HARK_NEURAL_ASR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hark/audio.h"
#include "hark/backend.h"
#include "net.h"

/* ---- tokens.c ------------------------------------------------------------ */

typedef struct asr_tokens {
  char **text;     /* by id; the word-start mark removed */
  uint8_t *starts; /* 1: the piece starts a word (BPE's U+2581) */
  uint8_t *skip;   /* 1: never in text (<blk>, <unk>, <sos/eos>, ...) */
  uint32_t n;
  int64_t blank;           /* the id of <blk> / <blank>, or -1 */
  bool every_token_a_word; /* no piece marks word starts: characters (CJK) */
} asr_tokens;

/* Reads `path`; on failure a reason naming the file and line in err. */
int asr_tokens_load(asr_tokens *t, const char *path, char *err, size_t errlen);
void asr_tokens_free(asr_tokens *t);

/* ---- the model's settings ---------------------------------------------- */

typedef struct asr_endpoint {
  float rule1_silence; /* s of trailing silence with nothing decoded: drop */
  float rule2_silence; /* s of trailing silence after speech: final */
  float rule3_length;  /* s of utterance: final */
} asr_endpoint;

typedef struct asr_settings {
  char label[192];       /* "neural_asr: model 'x' version 1" */
  uint32_t model_rate;   /* the features' sample rate */
  uint32_t default_rate; /* audio that names none */
  uint32_t chunk, pad;   /* feature frames: advance, right context */
  asr_endpoint endpoint;
  asr_search search;
  uint32_t beam;             /* hypotheses the beam search keeps (1: greedy) */
  uint32_t max_alternatives; /* cap on a request's (default: the beam) */
  bool gated;                /* vad_model names a VAD: VAD_PROB opens utterances */
  hark_vad_gate_settings gate;
} asr_settings;

/* ---- stream.c: one stream -------------------------------------------------- */

typedef struct asr_word {
  char *text;
  float start, end, conf;
} asr_word;

/* Text and words of one or more utterances (a request's finals joined). */
typedef struct asr_result {
  char *text;
  size_t text_len;
  asr_word *words;
  uint32_t n_words, cap_words;
  char **alts;          /* the n-best texts of a final, best first */
  float *alt_conf;      /* and each one's share of their probability */
  asr_word **alt_words; /* and each one's words */
  uint32_t *alt_n_words;
  uint32_t n_alts;
  bool is_final;
  float audio_processed; /* s of the stream's audio taken so far */
  float stability;       /* a partial's: 0 (its words just changed) .. 1 (settled) */
} asr_result;

#define ASR_MAX_ALTERNATIVES 32u

void asr_result_free(asr_result *r);

typedef struct asr_stream asr_stream;

typedef struct asr_shared {
  const asr_settings *set;
  const asr_tokens *tokens;
  const hark_fbank_bank *bank;
  uint32_t out_frames; /* encoder frames per chunk */
  float frame_shift_s; /* one encoder frame, seconds */
} asr_shared;

/* Per-stream options a client may set on its first request. */
typedef struct asr_stream_opts {
  uint32_t client_rate;
  hark_wav_encoding encoding;
  bool partials;
  uint32_t alternatives; /* n-best texts in finals (0: none), capped by the model */
  asr_endpoint endpoint;
  const hark_vad_gate_settings *gate; /* a gated stream's (VAD_PROB); NULL: none */
} asr_stream_opts;

/* Audio and speech probabilities a gated stream may hold waiting for the
 * other. */
#define ASR_GATE_MAX_WAIT_S 30u

asr_stream *asr_stream_new(const asr_shared *sh, asr_net *net, const asr_stream_opts *o, char *err,
                           size_t errlen);
void asr_stream_free(asr_stream *s);
bool asr_stream_partials(const asr_stream *s);
uint32_t asr_stream_alternatives(const asr_stream *s);

/* Looks for a WAV header at the stream's first audio (skipping it) and
 * tells the bytes per sample of what follows. 0, or -1 with a reason. */
int asr_stream_begin(asr_stream *s, const uint8_t **data, size_t *len, size_t *sample_bytes,
                     char *err, size_t errlen);
/* Feeds client bytes (WAV header first, maybe); `end`: the last. Returns
 * 0, or -1 with a client's reason in err. */
int asr_stream_feed(asr_stream *s, const uint8_t *data, size_t len, bool end, char *err,
                    size_t errlen);
/* A gated stream's VAD_PROB: one probability per 32 ms of its audio, in
 * order. 0, or -1 with a reason. */
int asr_stream_add_probs(asr_stream *s, const float *p, size_t n, char *err, size_t errlen);
bool asr_stream_gated(const asr_stream *s);
/* When no chunk is whole: a gated segment that closed with no frames left
 * closes its utterance into r, and judging goes on; true if it did (a
 * chunk may be whole now). */
bool asr_stream_settle(asr_stream *s, asr_result *r, uint32_t want_alt);
/* The next chunk's features, or NULL when it is not complete yet (at the
 * end of the stream its tail is padded). Valid until the next feed or
 * asr_stream_advance. */
const float *asr_stream_chunk(asr_stream *s);
asr_net_stream *asr_stream_net(asr_stream *s);
/* After the stream's chunk was searched: the chunk's features are
 * dropped, endpointing runs, an utterance it ends goes to r (with up to
 * want_alt alternatives). */
void asr_stream_advance(asr_stream *s, asr_result *r, uint32_t want_alt);
/* Ends the open utterance into r (at END or on flush). */
void asr_stream_close_utterance(asr_stream *s, asr_result *r, uint32_t want_alt);
/* The open utterance as a partial into r (text and words). */
void asr_stream_partial(asr_stream *s, asr_result *r);
float asr_stream_audio_seconds(const asr_stream *s);

#endif
