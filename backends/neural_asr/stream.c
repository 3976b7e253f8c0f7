/*
 * stream.c — one stream of a neural recogniser (see asr.h).
 *
 * Audio enters as the client's bytes (hark_audio_norm: a WAV header, G.711,
 * any rate, to 16-bit samples at the model's rate) and becomes Kaldi
 * filter-bank frames (hark_fbank), which wait in the extractor until a
 * chunk of them is whole: chunk + pad frames, of which the chunk's first
 * `chunk` are consumed and the `pad` after them are seen again by the next
 * chunk (icefall's decode_chunk_len and pad_length). At the end of the
 * stream, frames not yet consumed make one last chunk padded with log(1e-10)
 * (icefall's LOG_EPS), so the tail is recognised too.
 *
 * The utterance's tokens carry the encoder frame that emitted them (from
 * the stream's start), so word times are frame times: a word starts at its
 * first token's frame and ends at the end of its last token's. Endpointing
 * is sherpa's three rules on trailing blank frames: rule 1 drops an
 * utterance that decoded nothing for rule1 s, rule 2 ends one whose last
 * token is rule2 s old, rule 3 ends one that has run rule3 s (0 turns a
 * rule off). A new utterance restarts the search; the encoder keeps its
 * states.
 *
 * A gated stream (the model names a vad_model) gets, with its audio, the
 * VAD's speech probability of each 32 ms of it (VAD_PROB), and its gate
 * (hark_vad_gate, as pocketsphinx's) decides what reaches the features:
 * each frame waits in a fifo for its probability; outside an utterance it
 * is kept only as pre-roll (the opening window plus prespeech_ms); the
 * opening frame feeds the pre-roll, the frames inside follow, and the
 * closing one ends the segment as the end of a stream does (the features
 * finish, their tail runs padded, the utterance closes with a final) and
 * the extractor and the encoder's state start afresh for the next. Silence costs no features and
 * no encoder call. Word times stay stream times: each segment carries the
 * offset between its audio's place in the stream and the encoder's frames.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asr.h"

#define LOG_EPS (-23.025850929940457f) /* log(1e-10) */

struct asr_stream {
  const asr_shared *sh;
  hark_audio_norm *norm;
  hark_fbank *fb;
  asr_net *net;
  asr_net_stream *ns;
  uint32_t dim;
  float *padded;  /* the last chunk, padded */
  bool finished;  /* the audio ended (fbank finished) */
  bool tail_done; /* its padded chunk ran */
  bool partials;
  uint32_t alternatives;
  asr_endpoint ep;
  uint64_t samples;   /* at the model's rate */
  uint64_t utt_start; /* the open utterance's first encoder frame */
  double offset;      /* s: stream time of encoder frame 0 in this segment */
  /* gated streams: audio not yet judged or kept as pre-roll,
   * fifo[f_head..f_len), fifo[f_judged..) not judged, fifo[0] at stream
   * sample f_base (the probabilities wait in the gate) */
  bool gated, seg_closing, end_pending;
  hark_vad_gate gate;
  int16_t *fifo;
  size_t f_head, f_judged, f_len, f_cap;
  uint64_t f_base;
  size_t frame_samples, preroll_samples, align_samples, max_waiting;
  /* the last partial's words, and how many partials before it each held */
  char **held_words;
  uint32_t *held_for;
  uint32_t n_held;
};

asr_stream *asr_stream_new(const asr_shared *sh, asr_net *net, const asr_stream_opts *o, char *err,
                           size_t errlen) {
  asr_stream *s = calloc(1, sizeof *s);
  if (!s) {
    snprintf(err, errlen, "%s: out of memory", sh->set->label);
    return NULL;
  }
  s->sh = sh;
  s->dim = (uint32_t)hark_fbank_bank_dim(sh->bank);
  s->partials = o->partials;
  s->alternatives = o->alternatives;
  s->ep = o->endpoint;
  s->norm = hark_audio_norm_new(o->client_rate, sh->set->model_rate, o->encoding);
  s->fb = hark_fbank_new(sh->bank);
  s->padded = malloc((size_t)(sh->set->chunk + sh->set->pad) * s->dim * sizeof(float));
  if (!s->norm || !s->fb || !s->padded) {
    snprintf(err, errlen, "%s: out of memory", sh->set->label);
    asr_stream_free(s);
    return NULL;
  }
  s->net = net;
  if (!(s->ns = asr_net_stream_new(net, err, errlen))) {
    asr_stream_free(s);
    return NULL;
  }
  if (o->gate) {
    if (hark_vad_gate_init(&s->gate, o->gate) != 0) {
      snprintf(err, errlen, "%s: out of memory", sh->set->label);
      asr_stream_free(s);
      return NULL;
    }
    s->gated = true;
    s->frame_samples = (size_t)sh->set->model_rate * HARK_VAD_FRAME_MS / 1000;
    s->preroll_samples = s->gate.start_window * s->frame_samples +
                         (size_t)sh->set->model_rate * o->gate->prespeech_ms / 1000;
    /* A segment starts on a chunk boundary of the stream, so its chunks
     * (and the encoder's subsampling) fall where an ungated stream's do:
     * the pre-roll keeps a chunk more to start from. */
    s->align_samples = (size_t)sh->set->chunk * hark_fbank_bank_shift(sh->bank);
    s->preroll_samples += s->align_samples;
    s->max_waiting = (size_t)sh->set->model_rate * ASR_GATE_MAX_WAIT_S;
  }
  return s;
}

static void held_clear(asr_stream *s) {
  for (uint32_t i = 0; i < s->n_held; i++) free(s->held_words[i]);
  free(s->held_words);
  free(s->held_for);
  s->held_words = NULL;
  s->held_for = NULL;
  s->n_held = 0;
}

void asr_stream_free(asr_stream *s) {
  if (!s) return;
  held_clear(s);
  hark_audio_norm_free(s->norm);
  hark_fbank_free(s->fb);
  asr_net_stream_free(s->ns);
  free(s->padded);
  if (s->gated) hark_vad_gate_fini(&s->gate);
  free(s->fifo);
  free(s);
}

bool asr_stream_partials(const asr_stream *s) { return s->partials; }
uint32_t asr_stream_alternatives(const asr_stream *s) { return s->alternatives; }
asr_net_stream *asr_stream_net(asr_stream *s) { return s->ns; }

float asr_stream_audio_seconds(const asr_stream *s) {
  return (float)((double)s->samples / s->sh->set->model_rate);
}

int asr_stream_begin(asr_stream *s, const uint8_t **data, size_t *len, size_t *sample_bytes,
                     char *err, size_t errlen) {
  if (hark_audio_norm_begin(s->norm, data, len, err, errlen) != HARK_AUDIO_NORM_OK) return -1;
  *sample_bytes = hark_audio_norm_sample_bytes(s->norm);
  return 0;
}

/* Judges the frames that have both audio and a probability, feeding the
 * features inside utterances; stops at a closing frame (the segment's tail
 * runs before more audio may enter). -1 out of memory. */
static int judge(asr_stream *s) {
  while (!s->seg_closing && hark_vad_gate_queued(&s->gate) > 0 &&
         s->f_len - s->f_judged >= s->frame_samples) {
    size_t a = s->f_judged, b = a + s->frame_samples;
    hark_vad_gate_event ev = hark_vad_gate_step_queued(&s->gate);
    s->f_judged = b;
    if (ev == HARK_VAD_GATE_IDLE) {
      if (b - s->f_head > s->preroll_samples) s->f_head = b - s->preroll_samples;
      continue;
    }
    if (ev == HARK_VAD_GATE_OPEN) { /* the pre-roll first; a new segment's times */
      size_t want = s->preroll_samples - s->align_samples;
      a = b - s->f_head > want ? b - want : s->f_head;
      uint64_t at = (s->f_base + a) / s->align_samples * s->align_samples;
      if (at >= s->f_base + s->f_head) a = (size_t)(at - s->f_base);
      s->offset = (double)(s->f_base + a) / s->sh->set->model_rate -
                  (double)asr_net_stream_frames(s->ns) * s->sh->frame_shift_s;
    }
    if (hark_fbank_accept(s->fb, s->fifo + a, b - a) != 0) return -1;
    s->f_head = b;
    if (ev == HARK_VAD_GATE_CLOSE) {
      if (hark_fbank_finish(s->fb) != 0) return -1;
      s->seg_closing = true;
    }
  }
  return 0;
}

/* The end of a gated stream: audio no probability covers follows the
 * gate (fed inside an utterance, dropped outside), and the features
 * finish. A segment closing at END does this once its tail ran. */
static int finish_gated(asr_stream *s) {
  if (s->gate.in_speech && s->f_judged < s->f_len &&
      hark_fbank_accept(s->fb, s->fifo + s->f_judged, s->f_len - s->f_judged) != 0)
    return -1;
  s->f_head = s->f_judged = s->f_len;
  s->end_pending = false;
  s->finished = true;
  return hark_fbank_finish(s->fb);
}

/* The gated path of asr_stream_feed: x into the fifo, then judged. */
static int feed_gated(asr_stream *s, const int16_t *x, size_t nx, bool end, char *err,
                      size_t errlen) {
  if (s->f_head > 0 && s->f_len + nx > s->f_cap) { /* drop what is behind the pre-roll */
    memmove(s->fifo, s->fifo + s->f_head, (s->f_len - s->f_head) * sizeof *s->fifo);
    s->f_base += s->f_head;
    s->f_len -= s->f_head;
    s->f_judged -= s->f_head;
    s->f_head = 0;
  }
  if (s->f_len - s->f_judged + nx > s->max_waiting) {
    snprintf(err, errlen,
             "%s: %u s of audio wait for their speech probabilities: VAD_PROB lags AUDIO",
             s->sh->set->label, ASR_GATE_MAX_WAIT_S);
    return -1;
  }
  if (s->f_len + nx > s->f_cap) {
    size_t cap = s->f_cap ? s->f_cap : 16384;
    while (cap < s->f_len + nx) cap *= 2;
    int16_t *f = realloc(s->fifo, cap * sizeof *f);
    if (!f) goto oom;
    s->fifo = f;
    s->f_cap = cap;
  }
  if (nx) memcpy(s->fifo + s->f_len, x, nx * sizeof *x);
  s->f_len += nx;
  if (judge(s) != 0) goto oom;
  s->end_pending = end;
  if (end && !s->seg_closing && finish_gated(s) != 0) goto oom;
  return 0;
oom:
  snprintf(err, errlen, "%s: out of memory for features", s->sh->set->label);
  return -1;
}

int asr_stream_add_probs(asr_stream *s, const float *p, size_t n, char *err, size_t errlen) {
  if (!n) return 0;
  int rc = hark_vad_gate_queue(&s->gate, p, n, ASR_GATE_MAX_WAIT_S * 1000u / HARK_VAD_FRAME_MS);
  if (rc == -1)
    snprintf(err, errlen,
             "%s: %zu speech probabilities wait for their audio: VAD_PROB runs ahead of AUDIO",
             s->sh->set->label, hark_vad_gate_queued(&s->gate) + n);
  else if (rc)
    snprintf(err, errlen, "%s: out of memory", s->sh->set->label);
  return rc ? -1 : 0;
}

bool asr_stream_gated(const asr_stream *s) { return s->gated; }

int asr_stream_feed(asr_stream *s, const uint8_t *data, size_t len, bool end, char *err,
                    size_t errlen) {
  if (s->finished) return len ? (snprintf(err, errlen, "audio after the end"), -1) : 0;
  const int16_t *x;
  size_t nx;
  if (hark_audio_norm_accept(s->norm, data, len, end, &x, &nx, err, errlen) != HARK_AUDIO_NORM_OK)
    return -1;
  s->samples += nx;
  if (s->gated) return feed_gated(s, x, nx, end, err, errlen);
  if ((nx && hark_fbank_accept(s->fb, x, nx) != 0) || (end && hark_fbank_finish(s->fb) != 0)) {
    snprintf(err, errlen, "%s: out of memory for features", s->sh->set->label);
    return -1;
  }
  s->finished = end;
  return 0;
}

const float *asr_stream_chunk(asr_stream *s) {
  size_t T = s->sh->set->chunk + s->sh->set->pad, ready = hark_fbank_frames_ready(s->fb);
  if (ready >= T) return hark_fbank_frames(s->fb);
  if (!(s->finished || s->seg_closing) || s->tail_done || ready == 0) return NULL;
  hark_fbank_read(s->fb, 0, ready, s->padded);
  for (size_t i = ready * s->dim; i < T * s->dim; i++) s->padded[i] = LOG_EPS;
  return s->padded;
}

/* Appends `add` (len bytes) to r's text, a space between utterances. */
static int text_add(asr_result *r, const char *add, size_t len, bool space) {
  char *t = realloc(r->text, r->text_len + len + 2);
  if (!t) return -1;
  r->text = t;
  if (space && r->text_len) t[r->text_len++] = ' ';
  memcpy(t + r->text_len, add, len);
  r->text_len += len;
  t[r->text_len] = 0;
  return 0;
}

static asr_word *word_add(asr_result *r) {
  if (r->n_words == r->cap_words) {
    uint32_t c = r->cap_words ? r->cap_words * 2 : 16;
    asr_word *w = realloc(r->words, c * sizeof *w);
    if (!w) return NULL;
    r->words = w;
    r->cap_words = c;
  }
  asr_word *w = &r->words[r->n_words++];
  memset(w, 0, sizeof *w);
  return w;
}

/* Hypothesis h's words into r (after what r holds). */
static void words_into(const asr_stream *s, const asr_hyp *h, asr_result *r) {
  const asr_tokens *tk = s->sh->tokens;
  float shift = s->sh->frame_shift_s;
  asr_word *w = NULL;
  size_t wlen = 0;
  for (uint32_t i = 0; i < h->n; i++) {
    int32_t id = h->tokens[i];
    if (id < 0 || (uint32_t)id >= tk->n || tk->skip[id]) continue;
    const char *piece = tk->text[id];
    size_t pl = strlen(piece);
    bool starts = !w || tk->every_token_a_word || tk->starts[id];
    if (starts && pl == 0) { /* a bare word mark: the next piece starts a word */
      w = NULL;
      continue;
    }
    if (starts) {
      if (!(w = word_add(r))) return;
      w->start = (float)(s->offset + (double)h->frames[i] * shift);
      w->conf = 1.0f;
      wlen = 0;
    }
    char *nt = realloc(w->text, wlen + pl + 1);
    if (!nt) return;
    w->text = nt;
    memcpy(w->text + wlen, piece, pl);
    wlen += pl;
    w->text[wlen] = 0;
    w->end = (float)(s->offset + (double)(h->ends[i] + 1) * shift);
    if (h->probs[i] < w->conf) w->conf = h->probs[i];
  }
}

static void alternatives_free(asr_result *r);

/* r's text made from its words. */
static void text_from_words(asr_result *r) {
  r->text_len = 0;
  if (r->text) r->text[0] = 0;
  for (uint32_t i = 0; i < r->n_words; i++)
    if (r->words[i].text) text_add(r, r->words[i].text, strlen(r->words[i].text), true);
  if (!r->text) text_add(r, "", 0, false);
}

void asr_result_free(asr_result *r) {
  alternatives_free(r);
  for (uint32_t i = 0; i < r->n_words; i++) free(r->words[i].text);
  free(r->words);
  free(r->text);
  memset(r, 0, sizeof *r);
}

static void new_utterance(asr_stream *s) {
  held_clear(s);
  s->utt_start = asr_net_stream_frames(s->ns);
  asr_net_stream_reset_search(s->ns);
}

static void alternatives_free(asr_result *r) {
  for (uint32_t i = 0; i < r->n_alts; i++) {
    free(r->alts[i]);
    for (uint32_t k = 0; r->alt_words && k < r->alt_n_words[i]; k++) free(r->alt_words[i][k].text);
    if (r->alt_words) free(r->alt_words[i]);
  }
  free(r->alts);
  free(r->alt_conf);
  free(r->alt_words);
  free(r->alt_n_words);
  r->alts = NULL;
  r->alt_conf = NULL;
  r->alt_words = NULL;
  r->alt_n_words = NULL;
  r->n_alts = 0;
}

/* r's words, then one's, copied into a new array; NULL out of memory. */
static asr_word *words_join(const asr_result *r, const asr_result *one, uint32_t *n) {
  *n = r->n_words + one->n_words;
  asr_word *w = calloc(*n + 1, sizeof *w);
  for (uint32_t i = 0; w && i < *n; i++) {
    const asr_word *src = i < r->n_words ? &r->words[i] : &one->words[i - r->n_words];
    w[i] = *src;
    w[i].text = strdup(src->text ? src->text : "");
    if (!w[i].text) {
      for (uint32_t k = 0; k < i; k++) free(w[k].text);
      free(w);
      return NULL;
    }
  }
  return w;
}

/* The n-best texts of the open utterance, after the text r already holds
 * (earlier utterances of the same request), so that the first is r's
 * final text. */
static void alternatives_into(const asr_stream *s, const asr_hyp *hyps, uint32_t n, asr_result *r) {
  alternatives_free(r);
  if (!n || !(r->alts = calloc(n, sizeof *r->alts)) || !(r->alt_conf = calloc(n, sizeof(float))) ||
      !(r->alt_words = calloc(n, sizeof *r->alt_words)) ||
      !(r->alt_n_words = calloc(n, sizeof *r->alt_n_words)))
    return;
  /* Each one's share of the n-best's probability. */
  double total = 0;
  for (uint32_t i = 0; i < n; i++) total += exp((double)hyps[i].score - hyps[0].score);
  for (uint32_t i = 0; i < n; i++) {
    r->alt_conf[r->n_alts] = (float)(exp((double)hyps[i].score - hyps[0].score) / total);
    asr_result one = {0};
    words_into(s, &hyps[i], &one);
    text_from_words(&one);
    size_t pl = r->text_len, ol = one.text_len;
    char *t = malloc(pl + ol + 2);
    uint32_t nw = 0;
    asr_word *w = t ? words_join(r, &one, &nw) : NULL;
    if (!w) {
      free(t);
      t = NULL;
    }
    if (t) {
      r->alt_words[r->n_alts] = w;
      r->alt_n_words[r->n_alts] = nw;
      memcpy(t, r->text ? r->text : "", pl);
      size_t k = pl;
      if (pl && ol) t[k++] = ' ';
      memcpy(t + k, one.text, ol);
      t[k + ol] = 0;
      r->alts[r->n_alts++] = t;
    }
    asr_result_free(&one);
  }
}

void asr_stream_close_utterance(asr_stream *s, asr_result *r, uint32_t want_alt) {
  asr_hyp hyps[ASR_MAX_ALTERNATIVES];
  uint32_t k = want_alt < 1 ? 1 : want_alt > ASR_MAX_ALTERNATIVES ? ASR_MAX_ALTERNATIVES : want_alt;
  uint32_t n = asr_net_stream_hyps(s->ns, k, hyps);
  text_from_words(r);
  if (want_alt) alternatives_into(s, hyps, n, r);
  if (n) words_into(s, &hyps[0], r);
  text_from_words(r);
  r->is_final = true;
  new_utterance(s);
}

/* Riva's stability of a partial: how settled its words are. A word that
 * stood at its place in the last STABLE_AFTER partials counts fully, one
 * that just changed not at all; the partial's stability is their mean. */
#define STABLE_AFTER 3u

static float stability(asr_stream *s, const asr_result *r, uint32_t first) {
  uint32_t n = r->n_words - first;
  char **words = calloc(n + 1, sizeof *words);
  uint32_t *held = calloc(n + 1, sizeof *held);
  float sum = 0;
  bool same = true;
  for (uint32_t i = 0; words && held && i < n; i++) {
    const char *w = r->words[first + i].text ? r->words[first + i].text : "";
    same = same && i < s->n_held && !strcmp(s->held_words[i], w);
    held[i] = same ? s->held_for[i] + 1 : 0;
    if (!(words[i] = strdup(w))) {
      n = i;
      break;
    }
    sum += (float)(held[i] < STABLE_AFTER ? held[i] : STABLE_AFTER) / (float)STABLE_AFTER;
  }
  held_clear(s);
  if (!words || !held) {
    free(words);
    free(held);
    return 0.0f;
  }
  s->held_words = words;
  s->held_for = held;
  s->n_held = n;
  return n ? sum / (float)n : 0.0f;
}

void asr_stream_partial(asr_stream *s, asr_result *r) {
  asr_hyp best;
  uint32_t first = r->n_words;
  if (s->partials && asr_net_stream_hyps(s->ns, 1, &best)) words_into(s, &best, r);
  r->stability = stability(s, r, first);
  text_from_words(r);
}

/* Sherpa's rules on the open utterance, after a chunk. */
static void endpoint(asr_stream *s, asr_result *r, uint32_t want_alt) {
  float shift = s->sh->frame_shift_s;
  uint64_t now = asr_net_stream_frames(s->ns), last_end = s->utt_start;
  bool decoded = false;
  asr_hyp best;
  if (asr_net_stream_hyps(s->ns, 1, &best))
    for (uint32_t i = best.n; i-- > 0;)
      if (!s->sh->tokens->skip[best.tokens[i]]) {
        last_end = best.frames[i] + 1;
        decoded = true;
        break;
      }
  float trailing = (float)(now - last_end) * shift;
  float length = (float)(now - s->utt_start) * shift;
  if (!decoded) {
    if ((s->ep.rule1_silence > 0 && trailing >= s->ep.rule1_silence) ||
        (s->ep.rule3_length > 0 && length >= s->ep.rule3_length))
      new_utterance(s); /* nothing said: no final */
    return;
  }
  if ((s->ep.rule2_silence > 0 && trailing >= s->ep.rule2_silence) ||
      (s->ep.rule3_length > 0 && length >= s->ep.rule3_length))
    asr_stream_close_utterance(s, r, want_alt);
}

/* A closing segment whose tail ran (or had none): its utterance closes
 * into r, the features start afresh, and judging goes on. */
static void segment_end(asr_stream *s, asr_result *r, uint32_t want_alt) {
  asr_stream_close_utterance(s, r, want_alt);
  /* The next segment starts as a stream does (sherpa-onnx's VAD examples
   * make a new stream per segment): the encoder's caches would otherwise
   * carry this one's padded tail into it. Out of memory: the old state
   * stays. */
  char why[256];
  asr_net_stream *fresh = asr_net_stream_new(s->net, why, sizeof why);
  if (fresh) {
    asr_net_stream_free(s->ns);
    s->ns = fresh;
    s->utt_start = 0;
  }
  hark_fbank_reset(s->fb);
  s->seg_closing = false;
  s->tail_done = false;
  /* out of memory: the frames wait for the next feed (or the END's) */
  if (judge(s) == 0 && s->end_pending && !s->seg_closing) finish_gated(s);
}

void asr_stream_advance(asr_stream *s, asr_result *r, uint32_t want_alt) {
  size_t ready = hark_fbank_frames_ready(s->fb);
  size_t T = s->sh->set->chunk + s->sh->set->pad;
  if (ready >= T) {
    hark_fbank_pop(s->fb, s->sh->set->chunk);
  } else {
    hark_fbank_pop(s->fb, ready);
    s->tail_done = true;
  }
  if (s->seg_closing && s->tail_done && !s->finished) {
    segment_end(s, r, want_alt);
    return;
  }
  endpoint(s, r, want_alt);
}

bool asr_stream_settle(asr_stream *s, asr_result *r, uint32_t want_alt) {
  if (!s->seg_closing || s->finished || hark_fbank_frames_ready(s->fb)) return false;
  segment_end(s, r, want_alt);
  return true;
}
