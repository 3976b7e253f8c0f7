/*
 * stream.c — one stream's recognition.
 *
 * Audio enters as client-rate PCM bytes (or a WAV file), is normalised to
 * the model rate (hark_audio_norm: the header, G.711, resampling) and
 * queued (bounded) until a full block (block_samples, 2048 as
 * pocketsphinx_continuous reads) is there. Each block goes through the
 * stream's own front end (fe_t), whose voice activity detector drops
 * silence and releases its pre-speech frames when speech starts; the
 * cepstra it emits go to a decoder with ps_process_cep. After each block
 * the detector's state is checked exactly where pocketsphinx_continuous
 * checks ps_get_in_speech: speech seen and now silence ends the utterance
 * (fe_end_utt + ps_end_utt, then fe_start_utt), so finals match the
 * library's own tool word for word.
 *
 * A decoder is borrowed when the first cepstra of an utterance appear and
 * returned when it ends; its cepstral mean is restored from, and saved
 * back to, the stream. Waiting for a free decoder never blocks the worker
 * (other streams' chunks must keep flowing): when none is free the block's
 * cepstra stay pending, the rest of the audio stays queued (bounded), the
 * call answers with an empty partial, and the next call tries again. Only
 * once the stream has waited decoder_wait_ms does a call return PS_BUSY.
 * A closing call (END, flush) owes its client a final, so it waits for a
 * decoder in place, for what is left of the budget, unless its client
 * holds its share of the pool (max_decoders_per_client, pool.c): then only
 * its own decoders can come back, and no thread waits for them.
 *
 * With final_threads (the default), an utterance that ends in the middle
 * of a stream is finished off the worker: its decoder, with every frame
 * in, goes to one of the pool's threads for the second pass and the
 * final; the call answers at once with the first pass's words as a
 * partial, and the final goes out with the stream's next reply once it
 * is ready (a call that ends the stream waits for it). The stream's next
 * utterance takes a decoder only once that final is in (it carries the
 * cepstral mean forward), its frames pending until then, so finals stay
 * the library's own word for word while no worker, and no other stream's
 * chunk, waits out a second pass.
 *
 * A stream that holds a decoder must keep its audio coming: once the time
 * the server spent waiting for its next message, summed since it took the
 * decoder, exceeds the audio those messages carried by decoder_idle_ms (a
 * paused client, one trickling a few bytes now and then), the next call
 * ends its utterance there (a final) and gives the decoder back. Only the
 * client's gaps count (from one call's end to the next message's
 * arrival): a client that waits for each reply of a slow server is not
 * behind.
 * The stream then decodes again only once a second of speech is pending
 * (or an utterance ends), so a trickle can no longer hold a decoder while
 * other speakers wait, and a client that resumes at real time loses no
 * audio.
 *
 * Gated streams (the model names a vad_model, hark_vad_gate) have a front end
 * without its detector, and audio reaches it only inside utterances: each
 * 32 ms frame waits in the fifo for its probability (VAD_PROB), the gate
 * judges it, and outside an utterance it is kept only as pre-roll (the
 * opening window plus prespeech_ms), so a silent stream costs a few
 * comparisons and no MFCC, no decoder.
 */
#include "ps_internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hark/audio.h"

#define PS_MAX_CEP 32
#define PS_CEP_SLICE 4 /* cepstral frames per ps_process_cep call */
/* Internal flag: wait for a decoder in place (as a closing call does)
 * without closing the utterance: the slices of a request that ends the
 * stream. */
#define PS_FEED_WAIT 0x100u

struct ps_stream {
  ps_pool *pool;
  char client[PS_CLIENT_MAX];         /* whose share its decoders count in ("" none) */
  bool (*cancelled)(const void *arg); /* asked between blocks; NULL: never */
  const void *cancel_arg;
  const ps_settings *set;
  uint32_t model_rate;
  uint32_t alternatives; /* n-best count of the stream's results */
  ps_profile profile;    /* for the next utterance */
  hark_audio_norm *norm; /* client bytes (maybe a WAV file) -> model-rate samples */
  fe_t *fe;
  int ncep, frame_shift, frame_size;
  /* model-rate audio waiting for a complete block: fifo[head..len) */
  int16_t *fifo;
  size_t head, len, cap, max;
  /* cepstra from the front end not yet given to a decoder */
  mfcc_t *cep;
  mfcc_t **cep_rows;
  int n_cep, cap_cep;
  ps_decoder_t *ps;        /* held only inside an utterance */
  int utt_started;         /* speech seen at a block end (continuous's utt_started) */
  int end_pending;         /* the utterance ended; close it once its cepstra are in */
  int closing;             /* this call ends the stream or the utterance */
  uint64_t wait_since_ms;  /* when the stream began waiting for a decoder; 0 */
  uint64_t client_wait_ms; /* gaps between messages since it took its decoder */
  uint64_t held_in0;       /* samples_in then */
  uint64_t last_done_ms;   /* when the last call returned */
  uint64_t arrival_ms;     /* when this call's message arrived (0: now) */
  uint64_t samples_in;     /* model-rate samples received */
  uint64_t first_ms;       /* when the first of them came */
  int stalled;             /* its decoder was taken back for want of audio */
  uint32_t n_stalls;
  uint32_t n_async; /* utterances finished on a pool thread */
  int utt_has_frames;
  /* an utterance finishing on a pool thread (guarded by fin_mu) */
  pthread_mutex_t fin_mu;
  pthread_cond_t fin_cv;
  int fin_state;          /* FIN_NONE, FIN_RUNNING, FIN_READY */
  ps_decoder_t *fin_ps;   /* its decoder, until the thread gives it back */
  uint64_t fin_utt_start; /* its first sample */
  ps_result fin_res;      /* its final */
  ps_status fin_status;   /* PS_OK, or PS_INTERNAL with fin_err */
  char fin_err[128];
  double fin_cpu; /* CPU seconds its passes took on pool threads, not yet counted */
  ps_cmn_state cmn;
  uint64_t samples_fed;      /* model-rate samples given to the front end */
  uint64_t fe_utt_base;      /* samples_fed at the front end's last start_utt */
  uint64_t utt_start_sample; /* where this utterance's first cepstrum starts */
  /* gated streams: at most max_probs probabilities wait for their audio (in the gate) */
  bool gated;
  hark_vad_gate gate;
  size_t max_probs;
  size_t judged;          /* fifo[head..judged): pre-roll; [judged..len): not yet judged */
  size_t frame_samples;   /* model-rate samples a probability covers */
  size_t preroll_samples; /* opening window plus prespeech_ms */
  char *last_partial;     /* the utterance's last partial text; NULL after a final */
  char *jsgf;             /* the phrase_list's grammar; NULL: the model's search */
};

/* ---- results ------------------------------------------------------------- */

void ps_result_init(ps_result *r, uint32_t want_alternatives) {
  memset(r, 0, sizeof *r);
  r->want_alternatives = want_alternatives;
}

static void alternatives_clear(ps_result *r) {
  for (uint32_t i = 0; i < r->n_alternatives; i++) free(r->alternatives[i]);
  for (uint32_t i = 0; i < r->n_alt_words; i++) free(r->alt_words[i].word);
  r->n_alternatives = 0;
  r->n_alt_words = 0;
}

void ps_result_fini(ps_result *r) {
  free(r->text);
  for (uint32_t i = 0; i < r->n_words; i++) free(r->words[i].word);
  free(r->words);
  alternatives_clear(r);
  free(r->alternatives);
  free(r->alt_rel);
  free(r->alt_n_words);
  free(r->alt_words);
  memset(r, 0, sizeof *r);
}

static int text_append(char **text, size_t *len, const char *s) {
  size_t n = strlen(s);
  if (n == 0) return 0;
  size_t sep = *len > 0 ? 1 : 0;
  char *t = realloc(*text, *len + sep + n + 1);
  if (!t) return -1;
  if (sep) t[(*len)++] = ' ';
  memcpy(t + *len, s, n + 1);
  *len += n;
  *text = t;
  return 0;
}

/* Fillers (<sil>, [NOISE], +breath+) and a grammar's null transitions
 * ("(NULL)") are not words. */
static int is_filler(const char *w) {
  return w[0] == '<' || w[0] == '[' || w[0] == '+' || w[0] == '(';
}

/* Appends a word to a list (`words`, n, cap: the result's, or its
 * alternatives'). */
static int push_word(ps_word **words, uint32_t *count, uint32_t *cap, const char *w, float start,
                     float end, float conf) {
  if (*count == *cap) {
    uint32_t c = *cap ? *cap * 2 : 16;
    ps_word *nw = realloc(*words, c * sizeof *nw);
    if (!nw) return -1;
    *words = nw;
    *cap = c;
  }
  /* A posterior from the lattice's fixed-point log arithmetic can land a
   * hair outside [0, 1] (or be NaN on a degenerate lattice). */
  if (!(conf >= 0.0f)) conf = 0.0f;
  if (conf > 1.0f) conf = 1.0f;
  size_t n = strlen(w);
  const char *paren = strchr(w, '(');
  if (paren && paren > w && w[n - 1] == ')') n = (size_t)(paren - w); /* "read(2)" -> "read" */
  char *copy = strndup(w, n);
  if (!copy) return -1;
  (*words)[(*count)++] = (ps_word){copy, start, end, conf};
  return 0;
}

static int add_word(ps_result *r, const char *w, float start, float end, float conf) {
  return push_word(&r->words, &r->n_words, &r->cap_words, w, start, end, conf);
}

/* n-best path scores are acoustic plus language-model log-likelihoods;
 * scaled down as the lattice's posteriors scale them, their differences
 * give each alternative a likelihood relative to the best. */
#define PS_NBEST_SCALE 20.0

/* A word of an n-best path: its posterior when the best path has the same
 * word at the same frame; else the path's relative likelihood times the
 * posterior mass the best path's word over it leaves to others. */
static float nbest_word_conf(const ps_result *r, uint32_t from, const char *w, float start,
                             float end, float rel) {
  float other = 0.0f;
  for (uint32_t i = from; i < r->n_words; i++) {
    const ps_word *b = &r->words[i];
    size_t n = strlen(b->word);
    if (b->start == start && !strncmp(b->word, w, n) && (w[n] == 0 || w[n] == '(')) return b->conf;
    if (other == 0.0f && b->start < end && start < b->end) other = b->conf;
  }
  return rel * (1.0f - other);
}

/* One n-best path as alternative r->n_alternatives: the words of earlier
 * utterances in this result (the first prefix_words), then the path's. */
static int add_nbest_words(ps_stream *st, ps_nbest_t *nb, ps_result *r, uint32_t prefix_words,
                           uint64_t utt_start, float rel) {
  uint32_t n0 = r->n_alt_words;
  for (uint32_t i = 0; i < prefix_words; i++)
    if (push_word(&r->alt_words, &r->n_alt_words, &r->cap_alt_words, r->words[i].word,
                  r->words[i].start, r->words[i].end, r->words[i].conf) != 0)
      return -1;
  double rate = st->model_rate, shift = st->frame_shift;
  for (ps_seg_t *seg = ps_nbest_seg(nb); seg; seg = ps_seg_next(seg)) {
    const char *w = ps_seg_word(seg);
    if (!w || is_filler(w)) continue;
    int sf, ef;
    ps_seg_frames(seg, &sf, &ef);
    float start = (float)((utt_start + (double)sf * shift) / rate);
    float end = (float)((utt_start + (double)(ef + 1) * shift) / rate);
    float conf = nbest_word_conf(r, prefix_words, w, start, end, rel);
    if (push_word(&r->alt_words, &r->n_alt_words, &r->cap_alt_words, w, start, end, conf) != 0) {
      ps_seg_free(seg);
      return -1;
    }
  }
  r->alt_n_words[r->n_alternatives] = r->n_alt_words - n0;
  return 0;
}

/* The n-best of the utterance just ended, each alternative a whole result
 * (earlier utterances' text and words first). Alternative 0 is the result
 * itself, the best path's, whatever rank the n-best search gives it: the
 * plain final and alternative 0 are the same, as Vosk's are. */
static int collect_alternatives(ps_stream *st, ps_decoder_t *ps, ps_result *r, size_t prefix_len,
                                uint32_t prefix_words, uint64_t utt_start) {
  alternatives_clear(r);
  uint32_t want = r->want_alternatives;
  if (want == 0) return 0;
  if (!r->alternatives) {
    r->alternatives = calloc(want, sizeof *r->alternatives);
    r->alt_rel = calloc(want, sizeof *r->alt_rel);
    r->alt_n_words = calloc(want, sizeof *r->alt_n_words);
    if (!r->alternatives || !r->alt_rel || !r->alt_n_words) return -1;
  }
  if (!(r->alternatives[0] = strdup(r->text ? r->text : ""))) return -1;
  r->alt_rel[0] = 1.0f;
  r->n_alternatives = 1;
  logmath_t *lm = ps_get_logmath(ps);
  ps_nbest_t *nb = ps_nbest(ps);
  int tries = 0, have_top = 0;
  int32 top = 0;
  while (nb && r->n_alternatives < want && tries++ < 2 * (int)want + 20) {
    int32 score = 0;
    const char *h = ps_nbest_hyp(nb, &score);
    if (!have_top) { /* the search's best: alternative 0, or as good */
      top = score;
      have_top = 1;
    }
    char *t = NULL;
    size_t tl = 0;
    if (h && prefix_len && !(t = strndup(r->text, prefix_len))) goto fail;
    tl = t ? prefix_len : 0;
    if (h && text_append(&t, &tl, h) != 0) {
      free(t);
      goto fail;
    }
    int dup = !h;
    for (uint32_t i = 0; i < r->n_alternatives && !dup; i++)
      dup = !strcmp(r->alternatives[i], t ? t : "");
    if (dup) {
      free(t);
    } else {
      if (!t && !(t = strdup(""))) goto fail;
      double d = (double)(score - top) / PS_NBEST_SCALE;
      float rel = d >= 0 ? 1.0f : (float)logmath_exp(lm, (int)(d < -1e9 ? -1e9 : d));
      r->alternatives[r->n_alternatives] = t;
      r->alt_rel[r->n_alternatives] = rel;
      if (add_nbest_words(st, nb, r, prefix_words, utt_start, rel) != 0) {
        r->n_alternatives++;
        goto fail;
      }
      r->n_alternatives++;
    }
    nb = ps_nbest_next(nb);
  }
  if (nb) ps_nbest_free(nb);
  return 0;
fail:
  if (nb) ps_nbest_free(nb);
  return -1;
}

static int collect_final(ps_stream *st, ps_decoder_t *ps, uint64_t utt_start, ps_result *r) {
  size_t prefix_len = r->text_len;
  uint32_t prefix_words = r->n_words;
  const char *hyp = ps_get_hyp(ps, NULL);
  if (hyp && text_append(&r->text, &r->text_len, hyp) != 0) return -1;
  logmath_t *lm = ps_get_logmath(ps);
  double rate = st->model_rate, shift = st->frame_shift;
  for (ps_seg_t *seg = ps_seg_iter(ps); seg; seg = ps_seg_next(seg)) {
    const char *w = ps_seg_word(seg);
    if (!w || is_filler(w)) continue;
    int sf, ef;
    ps_seg_frames(seg, &sf, &ef);
    int32 prob = ps_seg_prob(seg, NULL, NULL, NULL);
    float start = (float)((utt_start + (double)sf * shift) / rate);
    float end = (float)((utt_start + (double)(ef + 1) * shift) / rate);
    if (add_word(r, w, start, end, (float)logmath_exp(lm, prob)) != 0) {
      ps_seg_free(seg);
      return -1;
    }
  }
  return collect_alternatives(st, ps, r, prefix_len, prefix_words, utt_start);
}

/* ---- decoder ------------------------------------------------------------- */

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

enum { FIN_NONE = 0, FIN_RUNNING, FIN_READY };

/* On a pool thread: the second pass and the final of the utterance whose
 * decoder the stream handed over. */
static double thread_cpu(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void finish_job(void *arg) {
  ps_stream *st = arg;
  double cpu0 = thread_cpu();
  ps_status s = PS_OK;
  char why[128] = "";
  if (ps_end_utt(st->fin_ps) < 0) {
    snprintf(why, sizeof why, "pocketsphinx: ps_end_utt failed");
    s = PS_INTERNAL;
  } else if (collect_final(st, st->fin_ps, st->fin_utt_start, &st->fin_res) != 0) {
    snprintf(why, sizeof why, "pocketsphinx: out of memory");
    s = PS_INTERNAL;
  }
  st->fin_res.is_final = 1;
  pthread_mutex_lock(&st->fin_mu);
  ps_cmn_save(st->fin_ps, &st->cmn); /* read by the next utterance only after READY */
  ps_pool_release(st->pool, st->fin_ps);
  st->fin_ps = NULL;
  st->fin_status = s;
  memcpy(st->fin_err, why, sizeof why);
  st->fin_state = FIN_READY;
  st->fin_cpu += thread_cpu() - cpu0;
  pthread_cond_broadcast(&st->fin_cv);
  pthread_mutex_unlock(&st->fin_mu);
}

/* The state of the utterance finishing off the worker; with wait, waits
 * until it is not running. */
static int fin_state(ps_stream *st, bool wait) {
  pthread_mutex_lock(&st->fin_mu);
  while (wait && st->fin_state == FIN_RUNNING) pthread_cond_wait(&st->fin_cv, &st->fin_mu);
  int state = st->fin_state;
  pthread_mutex_unlock(&st->fin_mu);
  return state;
}

/* A finished utterance's final into r (empty: the call's first result),
 * waiting for it with wait. */
static ps_status take_final(ps_stream *st, ps_result *r, bool wait, char *err, size_t errlen) {
  if (fin_state(st, wait) != FIN_READY) return PS_OK;
  ps_status s = st->fin_status;
  if (s != PS_OK) {
    snprintf(err, errlen, "%s", st->fin_err);
    ps_result_fini(&st->fin_res);
  } else {
    uint32_t want = r->want_alternatives;
    ps_result_fini(r);
    *r = st->fin_res; /* the call's result was empty */
    r->want_alternatives = want;
  }
  memset(&st->fin_res, 0, sizeof st->fin_res);
  st->fin_state = FIN_NONE;
  return s;
}

/* The client sends faster than real time: more than a second of audio
 * ahead of the clock since its first. */
static bool ahead_of_clock(const ps_stream *st) {
  uint64_t audio_ms = st->samples_in * 1000u / st->model_rate;
  return audio_ms > now_ms() - st->first_ms + 1000u;
}

/* The search a phrase_list's grammar makes, one per decoder: each stream
 * with a phrase_list makes it anew on the decoder its utterance takes
 * (milliseconds for a list of phrases), and every other utterance sets its
 * own search, so it never leaks into another stream's. */
#define PS_PHRASE_SEARCH "hark_phrases"

static int set_grammar(ps_decoder_t *ps, ps_stream *st, char *err, size_t errlen) {
  ps_set_search(ps, ps_pool_search(st->pool, PS_PROFILE_ACCURATE));
  ps_unset_search(ps, PS_PHRASE_SEARCH); /* the last one made on this decoder */
  if (ps_set_jsgf_string(ps, PS_PHRASE_SEARCH, st->jsgf) < 0 ||
      ps_set_search(ps, PS_PHRASE_SEARCH) < 0) {
    snprintf(err, errlen, "pocketsphinx: the phrase_list's grammar could not be made");
    return -1;
  }
  return 0;
}

/* Why no decoder came within decoder_wait_ms: the client holds its share,
 * or every decoder is in use. */
static void busy_reason(ps_stream *st, char *err, size_t errlen) {
  ps_pool_stats s;
  ps_pool_get_stats(st->pool, &s);
  uint32_t held = ps_pool_client_held(st->pool, st->client);
  if (st->set->max_per_client && held >= st->set->max_per_client)
    snprintf(err, errlen,
             "pocketsphinx: this client (%s) holds %u of the %u decoders, its share "
             "(max_decoders_per_client), and none came back within %u ms; the other decoders "
             "are kept for other clients; the audio is kept, retry",
             st->client, held, s.max, st->set->decoder_wait_ms);
  else
    snprintf(err, errlen,
             "pocketsphinx: no free decoder within %u ms (%u of %u in use); the audio is kept, "
             "retry",
             st->set->decoder_wait_ms, s.in_use, s.max);
}

static ps_status ensure_decoder(ps_stream *st, char *err, size_t errlen) {
  if (st->ps) return PS_OK;
  /* The next utterance starts from the cepstral mean the last one leaves:
   * it waits until that one's final is out (not counted against
   * decoder_wait_ms), so finals leave in order, one at a time. It waits
   * here, in place, and that final leaves in this call's reply: had the
   * next utterance's audio run on to the stream's closing call meanwhile,
   * the two finals would leave as one. (The wait is what is left of the
   * second pass, which has usually finished by the next utterance's
   * onset.) */
  if (fin_state(st, true) != FIN_NONE) return PS_WAIT;
  uint64_t now = now_ms(), budget = st->set->decoder_wait_ms;
  if (!st->wait_since_ms) st->wait_since_ms = now;
  uint64_t waited = now - st->wait_since_ms;
  /* A client that holds its share gets a decoder only when one of its own
   * comes back: a decoder being made is no use to it, and its closing call
   * does not wait in place for one, holding a thread that every client's
   * chunks need (an attacker's closing streams would each hold one for up
   * to decoder_wait_ms). */
  bool at_share = ps_pool_client_at_share(st->pool, st->client);
  bool growing = !at_share && ps_pool_growing(st->pool);
  /* A closing call waits what is left of the budget, or for a decoder
   * being made for it however long it has waited already. */
  uint32_t wait = !st->closing || at_share ? 0
                  : waited < budget        ? (uint32_t)(budget - waited)
                  : growing                ? 1
                                           : 0;
  ps_decoder_t *ps = ps_pool_acquire(st->pool, st->client, wait);
  if (!ps) {
    /* Waiting for another stream's decoder is bounded by decoder_wait_ms;
     * for one being made, by the stream's buffer (max_buffered_ms). */
    growing = ps_pool_growing(st->pool) && !ps_pool_client_at_share(st->pool, st->client);
    if (!st->closing && (now_ms() - st->wait_since_ms < budget || growing)) return PS_WAIT;
    ps_pool_count_timeout(st->pool);
    busy_reason(st, err, errlen);
    return PS_BUSY;
  }
  st->wait_since_ms = 0;
  st->client_wait_ms = 0;
  st->held_in0 = st->samples_in;
  ps_cmn_restore(ps, &st->cmn);
  if (st->jsgf && set_grammar(ps, st, err, errlen) != 0) {
    ps_pool_release(st->pool, ps);
    return PS_INVALID;
  }
  if ((!st->jsgf && ps_set_search(ps, ps_pool_search(st->pool, st->profile)) < 0) ||
      ps_start_utt(ps) < 0) {
    ps_pool_release(st->pool, ps);
    snprintf(err, errlen, "pocketsphinx: ps_start_utt failed");
    return PS_INTERNAL;
  }
  st->ps = ps;
  return PS_OK;
}

/* Cepstral frames (100 a second) a stalled stream must have pending
 * before it takes a decoder again. */
#define PS_STALL_RESUME_FRAMES 100

static ps_status drain(ps_stream *st, char *err, size_t errlen) {
  if (st->n_cep == 0) return PS_OK;
  if (st->stalled && !st->ps && !st->closing && !st->end_pending &&
      st->n_cep < PS_STALL_RESUME_FRAMES)
    return PS_OK; /* frames stay pending */
  st->stalled = 0;
  ps_status s = ensure_decoder(st, err, errlen);
  if (s != PS_OK) return s;
  for (int i = 0; i < st->n_cep; i++) st->cep_rows[i] = st->cep + (size_t)i * st->ncep;
  int n = st->n_cep;
  st->n_cep = 0;
  /* Without -fwdflat the decoder keeps only a short feature queue, and a
   * long run of cepstra in one call overruns it before the search has
   * scored them ("Frame N outside queue"): hand those decoders a few frames
   * per call. With -fwdflat (the default) the queue holds the utterance, and
   * one call per block is what keeps finals identical to the library's own
   * tool, so that path stays as it is. */
  int slice = cmd_ln_boolean_r(ps_get_config(st->ps), "-fwdflat") ? n : PS_CEP_SLICE;
  for (int i = 0; i < n; i += slice) {
    int m = n - i < slice ? n - i : slice;
    if (ps_process_cep(st->ps, st->cep_rows + i, m, FALSE, FALSE) < 0) {
      snprintf(err, errlen, "pocketsphinx: ps_process_cep failed");
      return PS_INTERNAL;
    }
  }
  return PS_OK;
}

/*
 * The front end's last frame at the end of an utterance in speech. The
 * library's own path (ps_end_utt on a decoder that read raw audio) feeds
 * it with the feature window padded by copies of it; here it is fed, then
 * window copies of it, with the cepstral-mean statistics put back after
 * the copies so the padding counts only as padding.
 */
static ps_status feed_last_frame(ps_stream *st, const mfcc_t *last, char *err, size_t errlen) {
  feat_t *feat = ps_get_feat(st->ps);
  int win = feat_window_size(feat);
  mfcc_t buf[PS_MAX_CEP * 8];
  mfcc_t *rows[8];
  if (win > 7) win = 7;
  for (int i = 0; i <= win; i++) {
    rows[i] = buf + (size_t)i * st->ncep;
    memcpy(rows[i], last, (size_t)st->ncep * sizeof(mfcc_t));
  }
  ps_cmn_state before, after, pad;
  ps_cmn_save(st->ps, &before);
  mfcc_t **p = rows;
  if (ps_process_cep(st->ps, p, 1, FALSE, FALSE) < 0) goto fail;
  if (win > 0) {
    ps_cmn_save(st->ps, &after);
    pad = after;
    memcpy(pad.mean, before.mean, sizeof pad.mean); /* normalise as the frame was */
    ps_cmn_restore(st->ps, &pad);
    if (ps_process_cep(st->ps, rows + 1, win, FALSE, FALSE) < 0) goto fail;
    ps_cmn_restore(st->ps, &after);
  }
  return PS_OK;
fail:
  snprintf(err, errlen, "pocketsphinx: ps_process_cep failed");
  return PS_INTERNAL;
}

/* Closes the utterance: front end and decoder, result into r. */
static ps_status end_utterance(ps_stream *st, ps_result *r, char *err, size_t errlen) {
  mfcc_t last[PS_MAX_CEP];
  int32 nfr = 0;
  fe_end_utt(st->fe, last, &nfr);
  ps_status s = PS_OK;
  if (nfr > 0 && st->ps) s = feed_last_frame(st, last, err, errlen);
  if (st->ps) {
    if (s == PS_OK && ps_end_utt(st->ps) < 0) {
      snprintf(err, errlen, "pocketsphinx: ps_end_utt failed");
      s = PS_INTERNAL;
    }
    if (s == PS_OK && collect_final(st, st->ps, st->utt_start_sample, r) != 0) {
      snprintf(err, errlen, "pocketsphinx: out of memory");
      s = PS_INTERNAL;
    }
    ps_cmn_save(st->ps, &st->cmn);
    ps_pool_release(st->pool, st->ps);
    st->ps = NULL;
  }
  fe_start_utt(st->fe);
  if (st->gated) hark_vad_gate_reset(&st->gate);
  st->fe_utt_base = st->samples_fed;
  st->utt_started = 0;
  st->end_pending = 0;
  st->utt_has_frames = 0;
  r->is_final = 1;
  return s;
}

/* Ends the utterance and hands its decoder to a pool thread for the
 * second pass; r gets the first pass's words as a partial. Runs it here
 * (end_utterance) when the pool has no threads for it. */
static ps_status end_utterance_async(ps_stream *st, ps_result *r, char *err, size_t errlen) {
  if (!st->ps || !st->set->final_threads) return end_utterance(st, r, err, errlen);
  mfcc_t last[PS_MAX_CEP];
  int32 nfr = 0;
  fe_end_utt(st->fe, last, &nfr);
  ps_status s = nfr > 0 ? feed_last_frame(st, last, err, errlen) : PS_OK;
  if (s != PS_OK) return s;
  const char *hyp = ps_get_hyp(st->ps, NULL);
  if (hyp && !r->is_final && r->text_len == 0 && text_append(&r->text, &r->text_len, hyp) != 0) {
    snprintf(err, errlen, "pocketsphinx: out of memory");
    return PS_INTERNAL;
  }
  ps_result_init(&st->fin_res, st->alternatives);
  st->fin_ps = st->ps;
  st->fin_utt_start = st->utt_start_sample;
  st->fin_state = FIN_RUNNING;
  st->n_async++;
  st->ps = NULL;
  if (ps_pool_run(st->pool, finish_job, st) != 0) finish_job(st); /* here, then */
  fe_start_utt(st->fe);
  if (st->gated) hark_vad_gate_reset(&st->gate);
  st->fe_utt_base = st->samples_fed;
  st->utt_started = 0;
  st->end_pending = 0;
  st->utt_has_frames = 0;
  return PS_OK;
}

/* ---- front end ----------------------------------------------------------- */

static int reserve_cep(ps_stream *st, int need) {
  if (need <= st->cap_cep) return 0;
  int cap = st->cap_cep ? st->cap_cep : 64;
  while (cap < need) cap *= 2;
  mfcc_t *c = realloc(st->cep, (size_t)cap * (size_t)st->ncep * sizeof *c);
  if (!c) return -1;
  st->cep = c;
  mfcc_t **rows = realloc(st->cep_rows, (size_t)cap * sizeof *rows);
  if (!rows) return -1;
  st->cep_rows = rows;
  st->cap_cep = cap;
  return 0;
}

static ps_status fe_block(ps_stream *st, const int16_t *pcm, size_t n, char *err, size_t errlen) {
  size_t left = n;
  int32 maxfr = 0;
  fe_process_frames(st->fe, NULL, &left, NULL, &maxfr, NULL);
  if (reserve_cep(st, st->n_cep + maxfr + 1) != 0) {
    snprintf(err, errlen, "pocketsphinx: out of memory");
    return PS_INTERNAL;
  }
  for (int i = 0; i < st->cap_cep; i++) st->cep_rows[i] = st->cep + (size_t)i * st->ncep;
  int before = st->n_cep;
  const int16 *p = pcm;
  while (left > 0) {
    int32 nfr = st->cap_cep - st->n_cep;
    size_t had = left;
    if (fe_process_frames(st->fe, &p, &left, st->cep_rows + st->n_cep, &nfr, NULL) < 0) {
      snprintf(err, errlen, "pocketsphinx: front end failed");
      return PS_INTERNAL;
    }
    st->n_cep += nfr;
    if (left == had && nfr == 0) break;
  }
  if (st->gated) return PS_OK; /* run_gated keeps the books */
  st->samples_fed += n;
  int out = st->n_cep - before;
  if (out > 0 && !st->utt_has_frames) {
    /* Frames of one utterance are contiguous and end at the front end's
     * latest frame: count back from it. */
    uint64_t since = st->samples_fed - st->fe_utt_base;
    uint64_t k = since >= (uint64_t)st->frame_size
                     ? (since - (uint64_t)st->frame_size) / (uint64_t)st->frame_shift + 1
                     : 0;
    uint64_t first = k >= (uint64_t)out ? k - (uint64_t)out : 0;
    st->utt_start_sample = st->fe_utt_base + first * (uint64_t)st->frame_shift;
    st->utt_has_frames = 1;
  }
  return PS_OK;
}

/* ---- stream -------------------------------------------------------------- */

void ps_stream_set_client(ps_stream *st, const char *client) {
  snprintf(st->client, sizeof st->client, "%s", client ? client : "");
}

ps_stream *ps_stream_new(ps_pool *pool, uint32_t client_rate, const ps_endpointing *ep, char *err,
                         size_t errlen) {
  if (client_rate < HARK_RESAMPLE_MIN_RATE || client_rate > HARK_RESAMPLE_MAX_RATE) {
    snprintf(err, errlen, "sample_rate %u is outside the supported %u..%u Hz", client_rate,
             HARK_RESAMPLE_MIN_RATE, HARK_RESAMPLE_MAX_RATE);
    return NULL;
  }
  ps_stream *st = calloc(1, sizeof *st);
  if (!st) {
    snprintf(err, errlen, "pocketsphinx: out of memory");
    return NULL;
  }
  pthread_mutex_init(&st->fin_mu, NULL);
  pthread_cond_init(&st->fin_cv, NULL);
  st->pool = pool;
  st->set = ps_pool_settings(pool);
  st->model_rate = ps_pool_sample_rate(pool);
  st->max = (size_t)st->model_rate * st->set->max_buffered_ms / 1000;
  st->norm = hark_audio_norm_new(client_rate, st->model_rate, HARK_WAV_PCM16);
  if (!st->norm) snprintf(err, errlen, "pocketsphinx: out of memory");
  st->gated = st->set->gate.on != 0;
  if (st->gated && st->norm) {
    hark_vad_gate_settings gs = st->set->gate.g; /* the stream's endpointing over the model's */
    if (ep && ep->startspeech_ms) gs.start_history_ms = ep->startspeech_ms;
    if (ep && ep->silence_ms) gs.stop_history_ms = ep->silence_ms;
    if (ep && ep->start_threshold > 0) gs.start_threshold = ep->start_threshold;
    if (ep && ep->stop_threshold > 0) gs.stop_threshold = ep->stop_threshold;
    if (hark_vad_gate_init(&st->gate, &gs) != 0) {
      snprintf(err, errlen, "pocketsphinx: out of memory");
      ps_stream_free(st);
      return NULL;
    }
    st->frame_samples = (size_t)st->model_rate * HARK_VAD_FRAME_MS / 1000;
    st->preroll_samples = st->gate.start_window * st->frame_samples +
                          (size_t)st->model_rate * st->gate.set.prespeech_ms / 1000;
    st->max_probs = st->set->max_buffered_ms / HARK_VAD_FRAME_MS + 64;
  }
  st->fe = st->norm ? ps_pool_fe_new(pool, ep, st->gated) : NULL;
  if (!st->fe) {
    if (st->norm) snprintf(err, errlen, "pocketsphinx: cannot create a front end");
    ps_stream_free(st);
    return NULL;
  }
  st->ncep = fe_get_output_size(st->fe);
  fe_get_input_size(st->fe, &st->frame_shift, &st->frame_size);
  if (st->ncep > PS_MAX_CEP) {
    snprintf(err, errlen, "pocketsphinx: %d cepstra per frame (at most %d)", st->ncep, PS_MAX_CEP);
    ps_stream_free(st);
    return NULL;
  }
  ps_pool_cmn_initial(pool, &st->cmn);
  return st;
}

void ps_stream_free(ps_stream *st) {
  if (!st) return;
  if (fin_state(st, true) == FIN_READY) ps_result_fini(&st->fin_res);
  pthread_mutex_destroy(&st->fin_mu);
  pthread_cond_destroy(&st->fin_cv);
  if (st->ps) {
    ps_end_utt(st->ps); /* leave it idle for its next borrower */
    ps_pool_release(st->pool, st->ps);
  }
  ps_pool_fe_free(st->pool, st->fe);
  hark_audio_norm_free(st->norm);
  free(st->fifo);
  free(st->cep);
  free(st->cep_rows);
  if (st->gated) hark_vad_gate_fini(&st->gate);
  free(st->last_partial);
  free(st->jsgf);
  free(st);
}

uint32_t ps_stream_client_rate(const ps_stream *st) { return hark_audio_norm_in_rate(st->norm); }
int ps_stream_has_decoder(const ps_stream *st) { return st->ps != NULL; }

bool ps_stream_may_decode(const ps_stream *st) {
  if (st->ps) return true;
  if (!st->gated) return false;
  if (st->gate.in_speech) return true;
  const float *p = hark_vad_gate_queued_probs(&st->gate);
  for (size_t i = 0, n = hark_vad_gate_queued(&st->gate); i < n; i++)
    if (p[i] >= st->gate.set.speech_threshold) return true;
  return false;
}
uint32_t ps_stream_stalls(const ps_stream *st) { return st->n_stalls; }
uint32_t ps_stream_async_finals(const ps_stream *st) { return st->n_async; }

double ps_stream_take_pool_cpu(ps_stream *st) {
  pthread_mutex_lock(&st->fin_mu);
  double c = st->fin_cpu;
  st->fin_cpu = 0;
  pthread_mutex_unlock(&st->fin_mu);
  return c;
}
uint32_t ps_stream_alternatives(const ps_stream *st) { return st->alternatives; }
void ps_stream_set_profile(ps_stream *st, ps_profile p) { st->profile = p; }

void ps_stream_set_grammar(ps_stream *st, char *jsgf) {
  free(st->jsgf);
  st->jsgf = jsgf;
}
void ps_stream_set_alternatives(ps_stream *st, uint32_t n) { st->alternatives = n; }

double ps_stream_audio_processed(const ps_stream *st) {
  return (double)st->samples_fed / st->model_rate;
}

static ps_status queue_audio(ps_stream *st, const int16_t *x, size_t n, char *err, size_t errlen) {
  if (n == 0) return PS_OK;
  size_t queued = st->len - st->head;
  if (queued + n > st->max) {
    snprintf(err, errlen,
             "pocketsphinx: stream buffer full (%zu ms of audio waiting, bound %u ms); audio "
             "dropped",
             queued * 1000 / st->model_rate, st->set->max_buffered_ms);
    return PS_FULL;
  }
  if (st->head > 0 && st->len + n > st->cap) {
    memmove(st->fifo, st->fifo + st->head, queued * sizeof *st->fifo);
    if (st->gated) st->judged -= st->head;
    st->len = queued;
    st->head = 0;
  }
  if (st->len + n > st->cap) {
    size_t cap = st->cap ? st->cap : 8192;
    while (cap < st->len + n) cap *= 2;
    int16_t *f = realloc(st->fifo, cap * sizeof *f);
    if (!f) {
      snprintf(err, errlen, "pocketsphinx: out of memory");
      return PS_INTERNAL;
    }
    st->fifo = f;
    st->cap = cap;
  }
  memcpy(st->fifo + st->len, x, n * sizeof *x);
  st->len += n;
  st->samples_in += n;
  return PS_OK;
}

static ps_status run_blocks(ps_stream *st, unsigned flags, ps_result *r, char *err, size_t errlen) {
  int closing = (flags & (PS_FEED_END | PS_FEED_FLUSH)) != 0;
  ps_status s;
  st->closing = closing || (flags & PS_FEED_WAIT); /* waits for a decoder in place */
  /* Work a previous call left when no decoder was free. */
  if ((s = drain(st, err, errlen)) != PS_OK) return s;
  /* Mid-stream, an utterance of a real-time stream finishes off the
   * worker; a call that closes (or waits in place), or a stream sent
   * faster than real time (a file: nobody waits on its chunks, and its
   * next final could otherwise join this one), finishes it here. */
  ps_status (*end)(ps_stream *, ps_result *, char *, size_t) =
      st->closing || ahead_of_clock(st) ? end_utterance : end_utterance_async;
  if (st->end_pending && (s = end(st, r, err, errlen)) != PS_OK) return s;
  for (;;) {
    size_t queued = st->len - st->head;
    if (queued == 0 || (queued < st->set->block_samples && !closing)) break;
    if (st->cancelled && st->cancelled(st->cancel_arg)) return PS_CANCELLED;
    size_t n = queued < st->set->block_samples ? queued : st->set->block_samples;
    s = fe_block(st, st->fifo + st->head, n, err, errlen);
    st->head += n;
    if (s != PS_OK) return s;
    int in_speech = fe_get_vad_state(st->fe) != 0;
    if (in_speech) st->utt_started = 1;
    if (!in_speech && st->utt_started) st->end_pending = 1;
    if ((s = drain(st, err, errlen)) != PS_OK) return s;
    if (st->end_pending && (s = end(st, r, err, errlen)) != PS_OK) return s;
  }
  if (closing && (st->utt_started || st->ps))
    if ((s = end_utterance(st, r, err, errlen)) != PS_OK) return s;
  return PS_OK;
}

/* Stream position (model-rate samples since its start) of fifo[i]. */
static uint64_t stream_index(const ps_stream *st, size_t i) {
  return st->samples_in - (uint64_t)(st->len - i);
}

/*
 * run_blocks for gated streams: judges each frame that has both its audio
 * and its probability. An opening frame gives the front end the pre-roll
 * kept before it; frames inside the utterance follow; the closing frame
 * ends it. With END or flush, the audio no probability covers follows the
 * gate's state (fed inside an utterance, dropped outside), and an open
 * utterance closes.
 */
static ps_status run_gated(ps_stream *st, unsigned flags, ps_result *r, char *err, size_t errlen) {
  int closing = (flags & (PS_FEED_END | PS_FEED_FLUSH)) != 0;
  ps_status s;
  st->closing = closing || (flags & PS_FEED_WAIT);
  if ((s = drain(st, err, errlen)) != PS_OK) return s;
  /* Utterances end off the worker as in run_blocks. */
  ps_status (*end)(ps_stream *, ps_result *, char *, size_t) =
      st->closing || ahead_of_clock(st) ? end_utterance : end_utterance_async;
  if (st->end_pending && (s = end(st, r, err, errlen)) != PS_OK) return s;
  while (hark_vad_gate_queued(&st->gate) > 0) {
    size_t avail = st->len - st->judged;
    if (avail == 0 || (avail < st->frame_samples && !closing)) break;
    size_t a = st->judged, b = a + (avail < st->frame_samples ? avail : st->frame_samples);
    hark_vad_gate_event ev = hark_vad_gate_step_queued(&st->gate);
    st->judged = b;
    if (ev == HARK_VAD_GATE_OPEN) {
      a = b - st->head > st->preroll_samples ? b - st->preroll_samples : st->head;
      st->utt_start_sample = stream_index(st, a);
      st->utt_has_frames = 1;
    }
    s = PS_OK;
    if (ev != HARK_VAD_GATE_IDLE) {
      s = fe_block(st, st->fifo + a, b - a, err, errlen);
      st->head = b;
      if (ev == HARK_VAD_GATE_CLOSE) st->end_pending = 1;
    } else if (b - st->head > st->preroll_samples) {
      st->head = b - st->preroll_samples;
    }
    st->samples_fed = stream_index(st, b);
    if (s != PS_OK) return s;
    if ((s = drain(st, err, errlen)) != PS_OK) return s;
    if (st->end_pending && (s = end(st, r, err, errlen)) != PS_OK) return s;
  }
  if (!closing) return PS_OK;
  if (st->gate.in_speech && st->judged < st->len)
    s = fe_block(st, st->fifo + st->judged, st->len - st->judged, err, errlen);
  st->head = st->judged = st->len;
  st->samples_fed = st->samples_in;
  if (s != PS_OK || (s = drain(st, err, errlen)) != PS_OK) return s;
  if (st->gate.in_speech || st->ps) return end_utterance(st, r, err, errlen);
  hark_vad_gate_reset(&st->gate);
  return PS_OK;
}

bool ps_stream_gated(const ps_stream *st) { return st->gated; }

ps_status ps_stream_add_probs(ps_stream *st, const float *p, size_t n, char *err, size_t errlen) {
  if (n == 0) return PS_OK;
  if (!st->gated) {
    snprintf(err, errlen, "VAD_PROB: this model has no vad_model");
    return PS_INVALID;
  }
  int rc = hark_vad_gate_queue(&st->gate, p, n, st->max_probs);
  if (rc == -1) {
    snprintf(err, errlen,
             "pocketsphinx: %zu speech probabilities wait for audio (bound %zu): VAD_PROB runs "
             "ahead of AUDIO",
             hark_vad_gate_queued(&st->gate) + n, st->max_probs);
    return PS_FULL;
  }
  if (rc) {
    snprintf(err, errlen, "pocketsphinx: out of memory");
    return PS_INTERNAL;
  }
  return PS_OK;
}

/* Input samples (at the client rate) converted and resampled at a time:
 * a long request (a whole recording) is recognised slice by slice, so
 * what it costs in memory is bounded by the slice and the stream's queue,
 * not by the request's size. */
#define PS_SLICE_SECONDS 1

static ps_status feed_slice(ps_stream *st, const uint8_t *pcm, size_t n, unsigned flags,
                            ps_result *r, char *err, size_t errlen);

/* A stream holding a decoder whose client's gaps outran its audio by
 * decoder_idle_ms gives the decoder back (the utterance's final into r). */
static ps_status check_stall(ps_stream *st, size_t incoming, unsigned flags, ps_result *r,
                             char *err, size_t errlen) {
  uint64_t arrival = st->arrival_ms ? st->arrival_ms : now_ms();
  if (st->ps && st->last_done_ms && arrival > st->last_done_ms)
    st->client_wait_ms += arrival - st->last_done_ms;
  if (!st->ps || (flags & (PS_FEED_END | PS_FEED_FLUSH)) || !st->set->decoder_idle_ms) return PS_OK;
  uint64_t got = (st->samples_in + incoming - st->held_in0) * 1000u / st->model_rate;
  if (st->client_wait_ms <= got + st->set->decoder_idle_ms) return PS_OK;
  ps_status s = drain(st, err, errlen);
  if (s == PS_OK) s = end_utterance(st, r, err, errlen);
  if (s == PS_OK) {
    st->stalled = 1;
    st->n_stalls++;
  }
  return s;
}

/* A partial's stability: the share of its words that the previous partial
 * of the utterance began with too, so a hypothesis that only grows or
 * holds scores high and one that rewrites itself scores low (0 for the
 * utterance's first partial). */
static float partial_stability(const char *prev, const char *text) {
  uint32_t words = 0, kept = 0;
  bool same = prev != NULL;
  for (const char *p = text; *p;) {
    while (*p == ' ') p++;
    if (!*p) break;
    const char *e = strchr(p, ' ');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    words++;
    if (same) {
      while (*prev == ' ') prev++;
      same = !strncmp(prev, p, n) && (prev[n] == ' ' || prev[n] == 0);
      if (same) {
        kept++;
        prev += n;
      }
    }
    p += n;
  }
  return words ? (float)kept / (float)words : 0.0f;
}

ps_status ps_stream_feed(ps_stream *st, const uint8_t *pcm, size_t len, unsigned flags,
                         ps_result *r, char *err, size_t errlen) {
  ps_status s;
  if (!st->first_ms) st->first_ms = now_ms();
  /* The first audio may be a WAV file: its rate and encoding, its header
   * skipped. */
  hark_audio_norm_status ns = hark_audio_norm_begin(st->norm, &pcm, &len, err, errlen);
  if (ns == HARK_AUDIO_NORM_BAD_RATE)
    snprintf(err, errlen, "AUDIO: WAV sample rate %u Hz unsupported (%u..%u Hz)",
             hark_audio_norm_in_rate(st->norm), HARK_RESAMPLE_MIN_RATE, HARK_RESAMPLE_MAX_RATE);
  if (ns == HARK_AUDIO_NORM_OK) ns = hark_audio_norm_check(st->norm, len, err, errlen);
  if (ns != HARK_AUDIO_NORM_OK) return PS_INVALID;
  uint32_t in_rate = hark_audio_norm_in_rate(st->norm);
  size_t bps = hark_audio_norm_sample_bytes(st->norm), n = len / bps;
  /* More than the stream may hold, once at the model's rate, is refused
   * before any of it is converted (a request that ends the stream is
   * recognised as it goes, so only its slices count). */
  size_t at_model = (size_t)((uint64_t)n * st->model_rate / in_rate);
  bool ends = (flags & (PS_FEED_END | PS_FEED_FLUSH)) != 0;
  if (!ends && (st->len - st->head) + at_model > st->max) {
    snprintf(err, errlen,
             "pocketsphinx: stream buffer full (%zu ms of audio waiting and %zu ms more sent, "
             "bound %u ms); audio dropped",
             (st->len - st->head) * 1000 / st->model_rate, at_model * 1000 / st->model_rate,
             st->set->max_buffered_ms);
    return PS_FULL;
  }
  s = take_final(st, r, ends, err, errlen); /* one finished since, or the one an end awaits */
  if (s == PS_OK) s = check_stall(st, at_model, flags, r, err, errlen);
  size_t slice = (size_t)in_rate * PS_SLICE_SECONDS;
  for (size_t off = 0; s == PS_OK || s == PS_WAIT;) { /* waiting: the audio still queues */
    size_t k = n - off < slice ? n - off : slice;
    bool last = off + k == n;
    unsigned f = last ? flags
                      : (flags & ~(PS_FEED_END | PS_FEED_FLUSH | PS_FEED_PARTIAL)) |
                            (ends ? PS_FEED_WAIT : 0);
    s = feed_slice(st, pcm + off * bps, k, f, r, err, errlen);
    off += k;
    if (last) break;
    if (s != PS_CANCELLED && st->cancelled && st->cancelled(st->cancel_arg)) s = PS_CANCELLED;
  }
  if (s == PS_CANCELLED) snprintf(err, errlen, "request cancelled by its client");
  if ((s == PS_OK || s == PS_WAIT) && !r->is_final) { /* a final that came meanwhile */
    ps_status t = take_final(st, r, false, err, errlen);
    if (t != PS_OK) s = t;
  }
  st->last_done_ms = now_ms();
  st->arrival_ms = 0;
  if (s == PS_WAIT) s = PS_OK; /* an empty partial while a decoder is awaited */
  if (s == PS_OK && !r->is_final && st->ps && (flags & PS_FEED_PARTIAL)) {
    const char *hyp = ps_get_hyp(st->ps, NULL);
    if (hyp && text_append(&r->text, &r->text_len, hyp) != 0) s = PS_INTERNAL;
  }
  if (s == PS_OK && ends) r->is_final = 1;
  if (!r->text) r->text = strdup("");
  if (r->is_final) {
    free(st->last_partial);
    st->last_partial = NULL;
  } else if (r->text && r->text_len) {
    r->stability = partial_stability(st->last_partial, r->text);
    free(st->last_partial);
    st->last_partial = strdup(r->text);
  }
  float conf = 0;
  for (uint32_t i = 0; i < r->n_words; i++) conf += r->words[i].conf;
  r->confidence = r->n_words ? conf / (float)r->n_words : 0.0f;
  r->audio_processed = (float)((double)st->samples_fed / st->model_rate);
  return s;
}

void ps_stream_set_arrival(ps_stream *st, uint64_t arrival_ms) { st->arrival_ms = arrival_ms; }

void ps_stream_set_cancel(ps_stream *st, bool (*cancelled)(const void *arg), const void *arg) {
  st->cancelled = cancelled;
  st->cancel_arg = arg;
}

/* n samples of the client's bytes: converted, resampled, queued, and
 * recognised block by block. */
static ps_status feed_slice(ps_stream *st, const uint8_t *pcm, size_t n, unsigned flags,
                            ps_result *r, char *err, size_t errlen) {
  const int16_t *x;
  size_t nx;
  char why[160];
  hark_audio_norm_status ns =
      hark_audio_norm_accept(st->norm, pcm, n * hark_audio_norm_sample_bytes(st->norm),
                             (flags & PS_FEED_END) != 0, &x, &nx, why, sizeof why);
  if (ns != HARK_AUDIO_NORM_OK) {
    snprintf(err, errlen, "pocketsphinx: %s", why);
    return ns == HARK_AUDIO_NORM_INTERNAL ? PS_INTERNAL : PS_INVALID;
  }
  ps_status s = queue_audio(st, x, nx, err, errlen);
  if (s == PS_OK)
    s = st->gated ? run_gated(st, flags, r, err, errlen) : run_blocks(st, flags, r, err, errlen);
  return s;
}
