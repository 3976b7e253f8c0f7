/*
 * backend.c — the hark glue of backend "neural_asr": streaming
 * transducer and CTC models (icefall's TorchScript export, or a model
 * wrapped into its contract; docs/neural-asr.md).
 *
 * model_init reads the parameters, tokens.txt and the module (net.cc),
 * which it checks by running each part once. The model is shared by its
 * instances; each stream's state (stream.c) is the sequence's backend
 * state, freed on END, in sequence_fini (idle expiry, unload), or when a
 * round that held it fails. A request without a correlation id is a whole
 * stream in one (START|END).
 *
 * A round is one encoder call for every stream with a whole chunk, and
 * one batched search (net.cc): with max_batch_size > 1 the round threads
 * (below) run it over the chunks the executes held; with 1 the worker runs
 * its request's chunks itself. Each stream's audio becomes features a
 * second at a time, so a long request holds a second of features, not all
 * of them. A request is answered as soon as its audio is used up: a
 * partial, or a final when an endpoint fired within it, at END, or on
 * flush. Outputs are those of the pocketsphinx recogniser (TRANSCRIPT,
 * IS_FINAL, WORDS, WORD_START, WORD_END, WORD_CONF, CONFIDENCE,
 * AUDIO_PROCESSED, ALTERNATIVES), so every speech front end serves either.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "asr.h"

#define FEED_SLICE_BYTES 32000u /* a second of 16 kHz PCM per feed */

typedef struct job job;

/* The chunks held for the round threads (below), oldest first. */
typedef struct asr_rounds {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  job *head, *tail;
  uint32_t n_held, n_behind, max_batch;
  uint64_t wait_ns;
  pthread_t *threads;
  uint32_t n_threads;
  bool inited, stop;
} asr_rounds;

typedef struct asr_model {
  asr_settings set;
  asr_tokens tokens;
  hark_fbank_bank *bank;
  asr_net *net;
  asr_shared sh;
  bool batched;
  asr_rounds rounds_q;
  atomic_int live; /* streams with state: when as many chunks are held, a round is due */
  hark_metric *streams, *audio_seconds, *rounds, *round_streams;
} asr_model;

/* ---- parameters ------------------------------------------------------------ */

static hark_error *param_double(hark_model *hm, const asr_settings *set, const char *key, double lo,
                                double hi, double dflt, double *out) {
  const char *v = hark_model_parameter(hm, key);
  *out = dflt;
  if (!v) return NULL;
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (!*v || *end || errno || !(d >= lo && d <= hi))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: parameter %s must be a number %g..%g, got '%s'", set->label, key, lo,
                          hi, v);
  *out = d;
  return NULL;
}

static hark_error *param_uint(hark_model *hm, const asr_settings *set, const char *key, uint32_t lo,
                              uint32_t hi, uint32_t dflt, uint32_t *out) {
  double d;
  hark_error *err = param_double(hm, set, key, lo, hi, dflt, &d);
  if (err) return err;
  if (d != floor(d))
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: parameter %s must be a whole number, got '%s'",
                          set->label, key, hark_model_parameter(hm, key));
  *out = (uint32_t)d;
  return NULL;
}

/* The feature options: Kaldi's fbank as icefall computes it, unless the
 * model says otherwise. */
static hark_error *feature_opts(hark_model *hm, asr_model *m, hark_fbank_opts *fo) {
  hark_fbank_opts_default(fo);
  const asr_settings *set = &m->set;
  double d;
  hark_error *err;
  fo->sample_rate = (float)set->model_rate;
  uint32_t bins;
  if ((err = param_uint(hm, set, "num_mel_bins", 1, 512, 80, &bins))) return err;
  fo->num_mel_bins = bins;
  if ((err = param_double(hm, set, "low_freq", 0, 1e6, 20, &d))) return err;
  fo->low_freq = (float)d;
  if ((err = param_double(hm, set, "high_freq", -1e6, 1e6, -400, &d))) return err;
  fo->high_freq = (float)d;
  const char *dither = hark_model_parameter(hm, "dither");
  if (dither && strtod(dither, NULL) != 0.0)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: parameter dither must be 0 (recognition is deterministic), got '%s'",
                          set->label, dither);
  const char *range = hark_model_parameter(hm, "sample_range");
  if (!range || !strcmp(range, "normalized"))
    fo->scale = 1.0f / 32768.0f;
  else if (!strcmp(range, "int16"))
    fo->scale = 1.0f;
  else
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: parameter sample_range must be 'normalized' (samples in [-1, 1), "
                          "as icefall and NeMo train) or 'int16' (Kaldi, WeNet), got '%s'",
                          set->label, range);
  const char *snip = hark_model_parameter(hm, "snip_edges");
  if (snip && strcmp(snip, "false"))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: parameter snip_edges must be 'false' (a streaming extractor "
                          "cannot snip the stream's end), got '%s'",
                          set->label, snip);
  char why[256];
  if (!(m->bank = hark_fbank_bank_new(fo, why, sizeof why)))
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: features: %s", set->label, why);
  return NULL;
}

/* A VAD-gated model (vad_model): the gate's classes and rules, under the
 * names asr_silero uses (models/asr_silero/config.pbtxt). */
static hark_error *gate_settings(hark_model *hm, asr_settings *s) {
  const char *vad = hark_model_parameter(hm, "vad_model");
  hark_vad_gate_settings *g = &s->gate;
  hark_vad_gate_settings_default(g);
  s->gated = vad && *vad;
  if (!s->gated) return NULL;
  const char *fkeys[] = {"speech_threshold", "silence_threshold", "start_threshold",
                         "stop_threshold"};
  float *fvals[] = {&g->speech_threshold, &g->silence_threshold, &g->start_threshold,
                    &g->stop_threshold};
  hark_error *err;
  double d;
  for (size_t i = 0; i < sizeof fkeys / sizeof *fkeys; i++) {
    if ((err = param_double(hm, s, fkeys[i], 0, 1, *fvals[i], &d))) return err;
    *fvals[i] = (float)d;
  }
  if ((err = param_uint(hm, s, "start_history_ms", 1, 60000, g->start_history_ms,
                        &g->start_history_ms)) ||
      (err = param_uint(hm, s, "stop_history_ms", 1, 60000, g->stop_history_ms,
                        &g->stop_history_ms)) ||
      (err = param_uint(hm, s, "prespeech_ms", 0, 60000, g->prespeech_ms, &g->prespeech_ms)))
    return err;
  return NULL;
}

static hark_error *read_settings(hark_model *hm, asr_model *m) {
  asr_settings *s = &m->set;
  const hark_model_config *cfg = hark_model_get_config(hm);
  snprintf(s->label, sizeof s->label, "neural_asr: model '%s' version %lld", cfg->name,
           (long long)hark_model_version(hm));
  hark_error *err;
  double d;
  if ((err = param_uint(hm, s, "sample_rate", 8000, 48000, 16000, &s->model_rate))) return err;
  if ((err = param_uint(hm, s, "default_sample_rate", 8000, 48000, 16000, &s->default_rate)))
    return err;
  if ((err = param_uint(hm, s, "decode_chunk_len", 1, 10000, 32, &s->chunk))) return err;
  if ((err = param_uint(hm, s, "pad_length", 0, 10000, 13, &s->pad))) return err;
  if ((err = param_double(hm, s, "rule1_min_trailing_silence", 0, 3600, 2.4, &d))) return err;
  s->endpoint.rule1_silence = (float)d;
  if ((err = param_double(hm, s, "rule2_min_trailing_silence", 0, 3600, 1.2, &d))) return err;
  s->endpoint.rule2_silence = (float)d;
  if ((err = param_double(hm, s, "rule3_min_utterance_length", 0, 36000, 20, &d))) return err;
  s->endpoint.rule3_length = (float)d;
  const char *method = hark_model_parameter(hm, "decoding_method");
  if (!method || !strcmp(method, "greedy_search"))
    s->search = ASR_GREEDY;
  else if (!strcmp(method, "modified_beam_search") || !strcmp(method, "prefix_beam_search"))
    s->search = ASR_BEAM;
  else
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: parameter decoding_method must be greedy_search or "
                          "modified_beam_search (prefix_beam_search for CTC), got '%s'",
                          s->label, method);
  if ((err = param_uint(hm, s, "num_active_paths", 1, ASR_MAX_ALTERNATIVES, 4, &s->beam)))
    return err;
  if (s->search == ASR_GREEDY) s->beam = 1;
  if ((err = param_uint(hm, s, "max_alternatives", 0, ASR_MAX_ALTERNATIVES, s->beam,
                        &s->max_alternatives)))
    return err;
  return gate_settings(hm, s);
}

/* ---- lifecycle ----------------------------------------------------------------- */

static hark_error *rounds_start(asr_model *m, uint32_t threads, uint32_t wait_ms,
                                uint32_t max_batch);
static void rounds_stop(asr_model *m);

static void model_free(asr_model *m) {
  if (!m) return;
  rounds_stop(m);
  asr_net_free(m->net);
  hark_fbank_bank_free(m->bank);
  asr_tokens_free(&m->tokens);
  hark_metric *all[] = {m->streams, m->audio_seconds, m->rounds, m->round_streams};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) hark_metric_free(all[i]);
  free(m);
}

static hark_error *make_metrics(hark_model *hm, asr_model *m) {
  hark_error *err;
  if ((err = hark_metric_new(hm, HARK_METRIC_GAUGE, "hark_asr_streams",
                             "Streams with recogniser state", &m->streams)))
    return err;
  if ((err = hark_metric_new(hm, HARK_METRIC_COUNTER, "hark_audio_seconds_total",
                             "Seconds of audio recognised", &m->audio_seconds)))
    return err;
  if ((err = hark_metric_new(hm, HARK_METRIC_COUNTER, "hark_asr_encoder_calls_total",
                             "Batched encoder calls (one per round of chunks)", &m->rounds)))
    return err;
  return hark_metric_new(hm, HARK_METRIC_COUNTER, "hark_asr_encoder_chunks_total",
                         "Stream chunks through the encoder (divided by calls: the mean batch)",
                         &m->round_streams);
}

static hark_error *model_init(hark_model *hm) {
  asr_model *m = calloc(1, sizeof *m);
  if (!m) return hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory");
  const hark_model_config *cfg = hark_model_get_config(hm);
  m->batched = cfg->max_batch_size > 0;
  hark_error *err = read_settings(hm, m);
  hark_fbank_opts fo;
  if (!err) err = feature_opts(hm, m, &fo);
  char dir[4096], path[4096 + 256], tokens_path[4096 + 256], why[1024];
  const char *prec = hark_model_parameter(hm, "precision");
  snprintf(dir, sizeof dir, "%s/%lld", hark_model_path(hm), (long long)hark_model_version(hm));
  if (!err) {
    const char *tokens = hark_model_parameter(hm, "tokens");
    snprintf(tokens_path, sizeof tokens_path, "%s/%s", dir, tokens ? tokens : "tokens.txt");
    if (asr_tokens_load(&m->tokens, tokens_path, why, sizeof why) != 0)
      err = hark_error_new(HARK_ERR_INVALID_ARG, "%s: tokens: %s", m->set.label, why);
  }
  if (!err) {
    const char *file = *cfg->default_model_filename ? cfg->default_model_filename : "model.pt";
    snprintf(path, sizeof path, "%s/%s", dir, file);
    uint32_t threads;
    /* One thread a call unless asked: the workers, the event loops and the
     * other models share the cores, and a second intra-op thread's OpenMP
     * barrier waits out whoever holds its core (bench/RESULTS.md,
     * 2026-11-28: 3 streams at 2 threads, 16 at 1, on a shared host). */
    int dflt = 1;
    err = param_uint(hm, &m->set, "INTRA_OP_THREAD_COUNT", 0, 4096, 0, &threads);
    const char *family = hark_model_parameter(hm, "family");
    if (!err && family && strcmp(family, "transducer") && strcmp(family, "ctc"))
      err = hark_error_new(HARK_ERR_INVALID_ARG,
                           "%s: parameter family must be 'transducer' or 'ctc', got '%s'",
                           m->set.label, family);
    asr_precision precision = ASR_FP32;
    if (!err && prec && !strcmp(prec, "int8"))
      precision = ASR_INT8;
    else if (!err && prec && !strcmp(prec, "bf16"))
      precision = ASR_BF16;
    else if (!err && prec && strcmp(prec, "fp32"))
      err = hark_error_new(HARK_ERR_INVALID_ARG,
                           "%s: parameter precision must be 'fp32', 'int8' or 'bf16', got '%s'",
                           m->set.label, prec);
    const char *lk = hark_model_parameter(hm, "linear_kernel");
    asr_linear linear = ASR_LINEAR_DEFAULT;
    if (!err && lk && !strcmp(lk, "xnnpack"))
      linear = ASR_LINEAR_XNNPACK;
    else if (!err && lk && !strcmp(lk, "blas"))
      linear = ASR_LINEAR_BLAS;
    else if (!err && lk)
      err = hark_error_new(HARK_ERR_INVALID_ARG,
                           "%s: parameter linear_kernel must be 'xnnpack' or 'blas', got '%s'",
                           m->set.label, lk);
    if (!err && linear == ASR_LINEAR_XNNPACK && precision != ASR_FP32)
      err = hark_error_new(HARK_ERR_INVALID_ARG,
                           "%s: parameter linear_kernel xnnpack is for precision fp32; precision "
                           "%s makes its own linear layers",
                           m->set.label, prec);
    asr_net_opts o = {.model_label = m->set.label,
                      .file = path,
                      .family = family && !strcmp(family, "ctc") ? ASR_CTC : ASR_TRANSDUCER,
                      .family_given = family != NULL,
                      .chunk_frames = m->set.chunk,
                      .pad_frames = m->set.pad,
                      .chunk_given = hark_model_parameter(hm, "decode_chunk_len") ||
                                     hark_model_parameter(hm, "pad_length"),
                      .ctc_blank = m->tokens.blank,
                      .feature_dim = (uint32_t)hark_fbank_bank_dim(m->bank),
                      .vocab_size = m->tokens.n,
                      .search = m->set.search,
                      .beam = m->set.beam,
                      .intra_threads = threads ? (int)threads : dflt,
                      .precision = precision,
                      .linear = linear};
    if (!err && !(m->net = asr_net_load(&o, why, sizeof why)))
      err = hark_error_new(HARK_ERR_INVALID_ARG, "%s", why);
    /* Measured, not guessed (bench/RESULTS.md, 2026-11-28 afternoon):
     * libtorch 1.13's oneDNN builds an int8 layer's kernel anew for each
     * new activation scale, which dynamic quantisation makes every call. */
    if (!err && precision == ASR_INT8)
      HARK_BACKEND_LOG(HARK_BACKEND_LOG_WARN,
                       "%s: precision int8: %u linear layers quantised; this libtorch's oneDNN "
                       "rebuilds an int8 layer's kernel for every new activation scale (every "
                       "call), so int8 costs more CPU than fp32 here (docs/neural-asr.md)",
                       m->set.label, asr_net_get_info(m->net)->quantised);
  }
  if (!err && *asr_net_get_info(m->net)->linear_note)
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_WARN,
                     "%s: linear layers left to libtorch's BLAS, not XNNPACK: %s", m->set.label,
                     asr_net_get_info(m->net)->linear_note);
  if (!err) {
    const asr_net_info *info = asr_net_get_info(m->net);
    m->set.chunk = info->chunk_frames;
    m->set.pad = info->pad_frames;

    m->sh =
        (asr_shared){.set = &m->set,
                     .tokens = &m->tokens,
                     .bank = m->bank,
                     .out_frames = info->out_frames,
                     .frame_shift_s = (float)m->set.chunk * (float)hark_fbank_bank_shift(m->bank) /
                                      (float)fo.sample_rate / (float)info->out_frames};
  }
  if (!err) err = make_metrics(hm, m);
  /* A batched model's rounds run on threads of their own, as many as its
   * instances unless round_threads says; round_wait_ms is how long a held
   * chunk waits for others (a reply's latency against the round's size). */
  uint32_t n_threads = 0, wait_ms = 0;
  for (uint32_t i = 0; i < cfg->n_instance_groups; i++) n_threads += cfg->instance_groups[i].count;
  if (!err)
    err = param_uint(hm, &m->set, "round_threads", 0, 64, n_threads ? n_threads : 1, &n_threads);
  if (!err) err = param_uint(hm, &m->set, "round_wait_ms", 0, 60000, 40, &wait_ms);
  if (!err && cfg->max_batch_size > 1 && n_threads > 0)
    err = rounds_start(m, n_threads, wait_ms, (uint32_t)cfg->max_batch_size);
  if (err) {
    model_free(m);
    return err;
  }
  const asr_net_info *info = asr_net_get_info(m->net);
  char kernels[64] = "";
  if (info->packed)
    snprintf(kernels, sizeof kernels, ", %u linear layers on XNNPACK", info->packed);
  else if (!prec || !strcmp(prec, "fp32"))
    snprintf(kernels, sizeof kernels, ", linear layers on libtorch's BLAS");
  HARK_BACKEND_LOG(HARK_BACKEND_LOG_INFO,
                   "%s: %s, %u tokens, chunks of %u+%u frames -> %u encoder frames of %.0f ms, %u "
                   "state tensors (%zu bytes a stream)%s, precision %s",
                   m->set.label, info->family == ASR_CTC ? "CTC" : "transducer", m->tokens.n,
                   m->set.chunk, m->set.pad, info->out_frames, m->sh.frame_shift_s * 1000.0,
                   info->n_states, info->state_bytes, kernels, prec ? prec : "fp32");
  hark_model_set_state(hm, m);
  return NULL;
}

static void model_fini(hark_model *hm) {
  model_free(hark_model_state(hm));
  hark_model_set_state(hm, NULL);
}

static hark_error *instance_init(hark_instance *hi) {
  (void)hi;
  return NULL;
}

static void instance_fini(hark_instance *hi) { (void)hi; }

static void count_stream(asr_model *m, int d) {
  atomic_fetch_add(&m->live, d);
  hark_metric_add(m->streams, d);
}

static void sequence_fini(hark_model *hm, void *state) {
  asr_model *m = hark_model_state(hm);
  asr_stream_free(state);
  if (m) count_stream(m, -1);
}

/* ---- a round ------------------------------------------------------------------- */

struct job {
  hark_request *req;
  job *next;        /* held for a round */
  uint64_t held_ns; /* since when */
  bool behind;      /* a recording, or more than a chunk in hand: no waiting */
  asr_stream *st;
  const uint8_t *data;
  size_t len, pos;
  size_t sample_bytes; /* of the client's audio: slices are whole samples */
  bool end, in_seq, flush, fed_end, answered;
  uint32_t want_alt;
  float seconds0; /* the stream's audio before this request */
  asr_result res;
};

static int param_true(hark_request *req, const char *key, int dflt) {
  const char *v = hark_request_parameter(req, key);
  if (!v) return dflt;
  return !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "True");
}

static hark_error *add_bytes(hark_response *resp, asr_model *m, hark_request *req, const char *name,
                             const char *const *strs, uint32_t n) {
  if (!hark_request_output_requested(req, name)) return NULL;
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) total += 4 + strlen(strs[i]);
  int64_t shape[2] = {1, n};
  uint8_t *buf;
  hark_error *err = hark_response_add_output(resp, name, HARK_TYPE_BYTES, shape + !m->batched,
                                             m->batched ? 2 : 1, total, (void **)&buf);
  for (uint32_t i = 0; !err && i < n; i++) {
    uint32_t l = (uint32_t)strlen(strs[i]);
    hark_bytes_put_len(buf, l);
    memcpy(buf + 4, strs[i], l);
    buf += 4 + l;
  }
  return err;
}

static hark_error *add_f32(hark_response *resp, asr_model *m, hark_request *req, const char *name,
                           const float *vals, uint32_t n) {
  if (!hark_request_output_requested(req, name)) return NULL;
  int64_t shape[2] = {1, n};
  float *out;
  hark_error *err =
      hark_response_add_output(resp, name, HARK_TYPE_FP32, shape + !m->batched, m->batched ? 2 : 1,
                               (size_t)n * sizeof(float), (void **)&out);
  if (!err && n) memcpy(out, vals, (size_t)n * sizeof(float));
  return err;
}

static hark_error *add_i32(hark_response *resp, asr_model *m, hark_request *req, const char *name,
                           const int32_t *vals, uint32_t n) {
  if (!hark_request_output_requested(req, name)) return NULL;
  int64_t shape[2] = {1, n};
  int32_t *out;
  hark_error *err =
      hark_response_add_output(resp, name, HARK_TYPE_INT32, shape + !m->batched, m->batched ? 2 : 1,
                               (size_t)n * sizeof(int32_t), (void **)&out);
  if (!err && n) memcpy(out, vals, (size_t)n * sizeof(int32_t));
  return err;
}

/* A final's n-best (docs/backends.md, "Speech outputs"): each alternative's
 * text, confidence and words; the first is the final itself, with its
 * CONFIDENCE, the others that scaled by their probability against it. */
static hark_error *add_alternatives(hark_response *resp, asr_model *m, hark_request *req,
                                    const asr_result *r, const char *text, float conf) {
  uint32_t k = r->n_alts, total = 0;
  if (!k) { /* no n-best: the final alone */
    hark_error *err = add_bytes(resp, m, req, "ALTERNATIVES", &text, 1);
    return err ? err : add_f32(resp, m, req, "ALTERNATIVE_CONFIDENCE", &conf, 1);
  }
  for (uint32_t i = 0; i < k; i++) total += r->alt_n_words[i];
  float *confs = calloc(k, sizeof *confs), *vals = calloc(3 * (size_t)total + 1, sizeof *vals);
  int32_t *counts = calloc(k, sizeof *counts);
  const char **words = calloc(total + 1, sizeof *words);
  hark_error *err = confs && vals && counts && words
                        ? NULL
                        : hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory");
  uint32_t w = 0;
  for (uint32_t i = 0; !err && i < k; i++) {
    confs[i] = r->alt_conf[0] > 0 ? conf * r->alt_conf[i] / r->alt_conf[0] : 0.0f;
    counts[i] = (int32_t)r->alt_n_words[i];
    for (uint32_t n = 0; n < r->alt_n_words[i]; n++, w++) {
      const asr_word *x = &r->alt_words[i][n];
      words[w] = x->text ? x->text : "";
      vals[w] = x->start;
      vals[total + w] = x->end;
      vals[2 * (size_t)total + w] = x->conf;
    }
  }
  if (!err) err = add_bytes(resp, m, req, "ALTERNATIVES", (const char *const *)r->alts, k);
  if (!err) err = add_f32(resp, m, req, "ALTERNATIVE_CONFIDENCE", confs, k);
  if (!err) err = add_i32(resp, m, req, "ALTERNATIVE_WORD_COUNT", counts, k);
  if (!err) err = add_bytes(resp, m, req, "ALTERNATIVE_WORDS", words, total);
  if (!err) err = add_f32(resp, m, req, "ALTERNATIVE_WORD_START", vals, total);
  if (!err) err = add_f32(resp, m, req, "ALTERNATIVE_WORD_END", vals + total, total);
  if (!err) err = add_f32(resp, m, req, "ALTERNATIVE_WORD_CONF", vals + 2 * (size_t)total, total);
  free(confs), free(vals), free(counts), free(words);
  return err;
}

static hark_error *respond(asr_model *m, job *j) {
  asr_result *r = &j->res;
  hark_response *resp = hark_response_new(j->req);
  uint32_t n = r->n_words;
  const char **words = calloc(n + 1, sizeof *words);
  float *vals = calloc(3 * (size_t)n + 1, sizeof *vals);
  float conf = 0;
  hark_error *err =
      words && vals ? NULL : hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory");
  for (uint32_t i = 0; !err && i < n; i++) {
    words[i] = r->words[i].text ? r->words[i].text : "";
    vals[i] = r->words[i].start;
    vals[n + i] = r->words[i].end;
    vals[2 * n + i] = r->words[i].conf;
    conf += r->words[i].conf;
  }
  conf = n ? conf / (float)n : 0.0f;
  const char *text = r->text ? r->text : "";
  float processed = r->audio_processed;
  if (!err) err = add_bytes(resp, m, j->req, "TRANSCRIPT", &text, 1);
  if (!err && hark_request_output_requested(j->req, "IS_FINAL")) {
    int64_t shape[2] = {1, 1};
    uint8_t *b;
    err = hark_response_add_output(resp, "IS_FINAL", HARK_TYPE_BOOL, shape + !m->batched,
                                   m->batched ? 2 : 1, 1, (void **)&b);
    if (!err) b[0] = r->is_final;
  }
  if (!err) err = add_bytes(resp, m, j->req, "WORDS", words, n);
  if (!err) err = add_f32(resp, m, j->req, "WORD_START", vals, n);
  if (!err) err = add_f32(resp, m, j->req, "WORD_END", vals + n, n);
  if (!err) err = add_f32(resp, m, j->req, "WORD_CONF", vals + 2 * n, n);
  if (!err) err = add_f32(resp, m, j->req, "CONFIDENCE", &conf, 1);
  if (!err) err = add_f32(resp, m, j->req, "AUDIO_PROCESSED", &processed, 1);
  if (!err && !r->is_final) err = add_f32(resp, m, j->req, "STABILITY", &r->stability, 1);
  if (!err && j->want_alt > 0 && r->is_final)
    err = add_alternatives(resp, m, j->req, r, text, conf);
  free(words);
  free(vals);
  if (err) {
    hark_response_free(resp);
    return err;
  }
  hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
  return NULL;
}

/* The stream leaves the request: freed at its end, else kept for the
 * sequence's next request. */
static void settle(asr_model *m, job *j, bool drop) {
  if (!j->st) return;
  if (j->end || drop || !j->in_seq) {
    asr_stream_free(j->st);
    if (j->in_seq) {
      hark_request_set_sequence_state(j->req, NULL);
      count_stream(m, -1);
    }
  } else {
    hark_request_set_sequence_state(j->req, j->st);
  }
  j->st = NULL;
}

/* Answers j with an error; its stream is dropped (a later request of the
 * sequence starts afresh). */
static void fail(asr_model *m, job *j, hark_error *err) {
  settle(m, j, true);
  asr_result_free(&j->res);
  j->answered = true;
  hark_request_complete(j->req, err);
}

static void answer(asr_model *m, job *j) {
  if (j->end || j->flush)
    asr_stream_close_utterance(j->st, &j->res, j->want_alt);
  else if (!j->res.is_final)
    asr_stream_partial(j->st, &j->res);
  j->res.audio_processed = asr_stream_audio_seconds(j->st);
  hark_metric_add(m->audio_seconds, j->res.audio_processed - j->seconds0);
  hark_request *req = j->req;
  settle(m, j, false);
  j->req = req;
  hark_error *err = respond(m, j);
  asr_result_free(&j->res);
  j->answered = true;
  if (err) hark_request_complete(req, err);
}

static hark_error *stream_options(asr_model *m, hark_request *req, asr_stream_opts *o,
                                  hark_vad_gate_settings *gate) {
  *gate = m->set.gate;
  *o = (asr_stream_opts){.client_rate = m->set.default_rate,
                         .encoding = HARK_WAV_PCM16,
                         .partials = param_true(req, "partial", 1),
                         .endpoint = m->set.endpoint};
  const char *v = hark_request_parameter(req, "sample_rate");
  if (v) {
    char *end;
    long r = strtol(v, &end, 10);
    if (!*v || *end || r < (long)HARK_RESAMPLE_MIN_RATE || r > (long)HARK_RESAMPLE_MAX_RATE)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: sample_rate '%s' is not %u..%u Hz",
                            m->set.label, v, HARK_RESAMPLE_MIN_RATE, HARK_RESAMPLE_MAX_RATE);
    o->client_rate = (uint32_t)r;
  }
  v = hark_request_parameter(req, "max_alternatives");
  if (v) {
    char *end;
    long n = strtol(v, &end, 10);
    if (!*v || *end || n < 0 || n > 1000)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: max_alternatives '%s' is not 0..1000",
                            m->set.label, v);
    if ((uint32_t)n > m->set.max_alternatives)
      return hark_error_new(
          HARK_ERR_INVALID_ARG,
          "%s: max_alternatives %ld is more than this model gives (%u: its "
          "parameter max_alternatives, at most num_active_paths of a beam search)",
          m->set.label, n, m->set.max_alternatives);
    o->alternatives = (uint32_t)n;
  }
  v = hark_request_parameter(req, "phrase_list");
  if (v && *v && strcmp(v, "[]"))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: phrase_list: this model cannot restrict recognition to phrases "
                          "(a pocketsphinx model can); send no phrase_list",
                          m->set.label);
  v = hark_request_parameter(req, "silence_ms");
  if (v) {
    char *end;
    long ms = strtol(v, &end, 10);
    if (!*v || *end || ms < 0 || ms > 60000)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: silence_ms '%s' is not 0..60000",
                            m->set.label, v);
    if (ms > 0) o->endpoint.rule2_silence = (float)ms / 1000.0f;
    if (ms > 0) gate->stop_history_ms = (uint32_t)ms;
  }
  if (!m->set.gated) return NULL;
  /* Riva's endpointing_config, as asr_silero reads it: start_history
   * (startspeech_ms) and the two thresholds. */
  v = hark_request_parameter(req, "startspeech_ms");
  if (v) {
    char *end;
    long ms = strtol(v, &end, 10);
    if (!*v || *end || ms < 0 || ms > 60000)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: startspeech_ms '%s' is not 0..60000",
                            m->set.label, v);
    if (ms > 0) gate->start_history_ms = (uint32_t)ms;
  }
  const char *tkeys[2] = {"start_threshold", "stop_threshold"};
  float *tvals[2] = {&gate->start_threshold, &gate->stop_threshold};
  for (int i = 0; i < 2; i++) {
    if (!(v = hark_request_parameter(req, tkeys[i]))) continue;
    char *end;
    double t = strtod(v, &end);
    if (end == v || *end || !(t >= 0.0 && t <= 1.0))
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: %s '%s' is not a fraction in 0.0..1.0",
                            m->set.label, tkeys[i], v);
    if (t > 0) *tvals[i] = (float)t;
  }
  o->gate = gate;
  return NULL;
}

/* A gated model's VAD_PROB (FP32, one per 32 ms of audio) into the
 * stream; a request with audio must carry it. */
static hark_error *take_probs(asr_model *m, hark_request *req, asr_stream *st, size_t len) {
  const hark_tensor *t = hark_request_input_by_name(req, "VAD_PROB");
  if (!asr_stream_gated(st)) {
    if (t && t->byte_size)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "%s: input VAD_PROB is for models with a vad_model parameter",
                            m->set.label);
    return NULL;
  }
  if (!t) {
    if (!len) return NULL;
    return hark_error_new(
        HARK_ERR_INVALID_ARG,
        "%s: input VAD_PROB is missing: this model's utterances are opened by "
        "the speech probabilities of '%s' (one FP32 per 32 ms of audio), which "
        "the Vosk WebSocket and Riva front ends compute",
        m->set.label,
        hark_model_config_parameter(hark_model_get_config(hark_request_model(req)), "vad_model"));
  }
  if (t->datatype != HARK_TYPE_FP32 || t->byte_size % sizeof(float))
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: input VAD_PROB must be FP32", m->set.label);
  size_t n = t->byte_size / sizeof(float);
  float *p = malloc(n ? t->byte_size : 1);
  if (!p) return hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory");
  if (n) memcpy(p, t->data, t->byte_size); /* the tensor's data may not be aligned */
  char why[512];
  int rc = asr_stream_add_probs(st, p, n, why, sizeof why);
  free(p);
  return rc ? hark_error_new(HARK_ERR_INVALID_ARG, "%s", why) : NULL;
}

/* The request's audio element and its stream; on a failure answers it. */
static bool open_job(asr_model *m, job *j) {
  hark_request *req = j->req;
  uint32_t flags = hark_request_flags(req);
  j->in_seq = hark_request_correlation_id(req) || hark_request_correlation_id_str(req);
  j->end = !j->in_seq || (flags & HARK_REQUEST_SEQUENCE_END);
  j->flush = param_true(req, "flush", 0);
  const hark_tensor *t = hark_request_input_by_name(req, "AUDIO");
  if (!t || t->datatype != HARK_TYPE_BYTES || t->byte_size < HARK_BYTES_PREFIX) {
    fail(m, j,
         hark_error_new(HARK_ERR_INVALID_ARG, "%s: input AUDIO must be one BYTES element",
                        m->set.label));
    return false;
  }
  const uint8_t *b = t->data;
  uint32_t len = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
  if (len > t->byte_size - HARK_BYTES_PREFIX) {
    fail(m, j,
         hark_error_new(HARK_ERR_INVALID_ARG, "%s: input AUDIO's element is truncated",
                        m->set.label));
    return false;
  }
  j->data = b + HARK_BYTES_PREFIX;
  j->len = len;
  asr_stream *st = j->in_seq ? hark_request_sequence_state(req) : NULL;
  if (st && (flags & HARK_REQUEST_SEQUENCE_START)) { /* a restarted sequence */
    asr_stream_free(st);
    hark_request_set_sequence_state(req, NULL);
    count_stream(m, -1);
    st = NULL;
  }
  if (!st) {
    asr_stream_opts o;
    hark_vad_gate_settings gate;
    char reason[512];
    hark_error *err = stream_options(m, req, &o, &gate);
    if (err) {
      fail(m, j, err);
      return false;
    }
    if (!(st = asr_stream_new(&m->sh, m->net, &o, reason, sizeof reason))) {
      fail(m, j, hark_error_new(HARK_ERR_INTERNAL, "%s", reason));
      return false;
    }
    if (j->in_seq) count_stream(m, 1);
  }
  j->st = st;
  j->seconds0 = asr_stream_audio_seconds(st);
  char why[512];
  if (asr_stream_begin(st, &j->data, &j->len, &j->sample_bytes, why, sizeof why) != 0) {
    fail(m, j, hark_error_new(HARK_ERR_INVALID_ARG, "%s", why));
    return false;
  }
  hark_error *err = take_probs(m, req, st, j->len);
  if (err) {
    fail(m, j, err);
    return false;
  }
  j->want_alt = asr_stream_alternatives(st);
  return true;
}

/* Feeds j's audio until its stream has a whole chunk or the audio is
 * used up: a slice at a time, so a long request holds a slice's features. */
static bool feed_job(asr_model *m, job *j) {
  while (!asr_stream_chunk(j->st) && (j->pos < j->len || (j->end && !j->fed_end))) {
    size_t k = j->len - j->pos;
    if (k > FEED_SLICE_BYTES) k = FEED_SLICE_BYTES / j->sample_bytes * j->sample_bytes;
    bool last = j->pos + k == j->len;
    char why[512];
    if (asr_stream_feed(j->st, j->data + j->pos, k, last && j->end, why, sizeof why) != 0) {
      fail(m, j, hark_error_new(HARK_ERR_INVALID_ARG, "%s", why));
      return false;
    }
    j->pos += k;
    if (last && j->end) j->fed_end = true;
    if (last && !j->end) break;
  }
  return true;
}

/* Answers j if it needs no round: its audio is used up without a whole
 * chunk (a partial, or a final), its client went, or its audio is bad.
 * True when a whole chunk waits for the encoder. */
static bool wants_round(asr_model *m, job *j) {
  if (!j->answered && hark_request_is_cancelled(j->req)) /* its client went: stop here */
    fail(m, j, hark_error_new(HARK_ERR_CANCELLED, "neural_asr: request cancelled by its client"));
  if (j->answered) return false;
  do { /* a gated segment that closed with no frames left goes on at once */
    if (!feed_job(m, j)) return false;
    if (asr_stream_chunk(j->st)) return true;
  } while (asr_stream_settle(j->st, &j->res, j->want_alt));
  answer(m, j); /* answered now, not after the others */
  return false;
}

/* One encoder call and one batched search for the k jobs, each with a
 * whole chunk; a failure fails them all. ns and feats hold k. */
static void step(asr_model *m, job **js, uint32_t k, asr_net_stream **ns, const float **feats) {
  for (uint32_t i = 0; i < k; i++) {
    ns[i] = asr_stream_net(js[i]->st);
    feats[i] = asr_stream_chunk(js[i]->st);
  }
  char why[1024];
  if (asr_net_step(m->net, ns, feats, k, why, sizeof why) != 0) {
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_ERROR, "%s", why);
    for (uint32_t i = 0; i < k; i++) fail(m, js[i], hark_error_new(HARK_ERR_INTERNAL, "%s", why));
    return;
  }
  hark_metric_add(m->rounds, 1);
  hark_metric_add(m->round_streams, k);
  for (uint32_t i = 0; i < k; i++) asr_stream_advance(js[i]->st, &js[i]->res, js[i]->want_alt);
}

/* ---- the round threads ---------------------------------------------------------
 *
 * A batched model answers on threads of its own. An execute feeds each
 * request's audio and answers at once every request that completes no
 * chunk (two in three of a live stream's 100 ms messages); a request that
 * completes one is held, still unanswered, so the sequence batcher sends
 * the stream nothing more until it is. A round thread takes the held
 * chunks, up to max_batch_size, oldest first, into one encoder call when
 *   - the oldest has waited round_wait_ms (the others may join it till then),
 *   - every live stream has a chunk held (no one else can join),
 *   - max_batch_size are held, or
 *   - one is behind real time: a whole recording, or a message holding
 *     more than a chunk (it must not wait a round's delay per chunk);
 * then feeds each job's next audio: held again when another chunk is
 * whole, else answered. Waiting only for the chunks that run the encoder
 * lets rounds grow without delaying the partial replies
 * (bench/RESULTS.md, 2026-11-28: a 100 ms max_queue_delay on every
 * message grew rounds to 7 but broke latency at 5 streams). The threads
 * run the search and the features of what they hold too, so a long
 * recording takes a row of each round, not a worker. */

static uint64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* r->mu held. */
static void hold_locked(asr_rounds *r, job *j, bool behind) {
  j->next = NULL;
  j->held_ns = mono_ns();
  j->behind = behind || !j->in_seq;
  if (r->tail)
    r->tail->next = j;
  else
    r->head = j;
  r->tail = j;
  r->n_held++;
  r->n_behind += j->behind;
}

/* When the round of the held chunks is due, true; else *until is when it
 * will be (0: when more arrive). r->mu held. */
static bool round_due(asr_model *m, uint64_t now, uint64_t *until) {
  asr_rounds *r = &m->rounds_q;
  *until = 0;
  if (!r->head) return false;
  if (r->stop || r->n_behind || r->n_held >= r->max_batch) return true;
  if (r->n_held >= (uint32_t)atomic_load(&m->live)) return true;
  *until = r->head->held_ns + r->wait_ns;
  return now >= *until;
}

static void *round_main(void *arg) {
  asr_model *m = arg;
  asr_rounds *r = &m->rounds_q;
  uint32_t cap = r->max_batch;
  pthread_setname_np(pthread_self(), "hark-asr-round");
  job **js = calloc(cap, sizeof *js), **again = calloc(cap, sizeof *again);
  asr_net_stream **ns = calloc(cap, sizeof *ns);
  const float **feats = calloc(cap, sizeof *feats);
  pthread_mutex_lock(&r->mu);
  for (;;) {
    uint64_t until;
    while (!round_due(m, mono_ns(), &until)) {
      if (r->stop) goto out;
      if (!until) {
        pthread_cond_wait(&r->cv, &r->mu);
      } else {
        struct timespec ts = {.tv_sec = (time_t)(until / 1000000000u),
                              .tv_nsec = (long)(until % 1000000000u)};
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
      }
    }
    uint32_t k = 0;
    while (r->head && k < cap) {
      job *j = r->head;
      if (!(r->head = j->next)) r->tail = NULL;
      r->n_held--;
      r->n_behind -= j->behind;
      js[k++] = j;
    }
    bool failing = r->stop || !js[0] || !ns || !feats || !again;
    if (r->head) pthread_cond_signal(&r->cv); /* more than a round: another thread may take it */
    pthread_mutex_unlock(&r->mu);
    uint32_t live = 0, n_again = 0;
    for (uint32_t i = 0; i < k; i++) {
      job *j = js[i];
      if (failing)
        fail(m, j,
             hark_error_new(r->stop ? HARK_ERR_UNAVAILABLE : HARK_ERR_INTERNAL, "%s: %s",
                            m->set.label, r->stop ? "the model is unloading" : "out of memory"));
      else if (!hark_request_is_cancelled(j->req))
        js[live++] = j;
      else
        fail(m, j,
             hark_error_new(HARK_ERR_CANCELLED, "neural_asr: request cancelled by its client"));
      if (j->answered) free(j);
    }
    if (live) step(m, js, live, ns, feats);
    for (uint32_t i = 0; i < live; i++) {
      if (wants_round(m, js[i]))
        again[n_again++] = js[i];
      else
        free(js[i]);
    }
    pthread_mutex_lock(&r->mu);
    for (uint32_t i = 0; i < n_again; i++) hold_locked(r, again[i], true);
  }
out:
  pthread_mutex_unlock(&r->mu);
  free(js), free(again), free(ns), free(feats);
  return NULL;
}

static hark_error *rounds_start(asr_model *m, uint32_t threads, uint32_t wait_ms,
                                uint32_t max_batch) {
  asr_rounds *r = &m->rounds_q;
  pthread_mutex_init(&r->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&r->cv, &ca);
  pthread_condattr_destroy(&ca);
  r->inited = true;
  r->wait_ns = (uint64_t)wait_ms * 1000000u;
  r->max_batch = max_batch;
  if (!(r->threads = calloc(threads, sizeof *r->threads)))
    return hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory");
  for (; r->n_threads < threads; r->n_threads++) {
    int rc = pthread_create(&r->threads[r->n_threads], NULL, round_main, m);
    if (rc)
      return hark_error_new(HARK_ERR_INTERNAL, "%s: cannot start a round thread: %s", m->set.label,
                            strerror(rc));
  }
  return NULL;
}

/* Every held request is answered before the model's fini (the server waits
 * for them), so the threads find nothing left to do. */
static void rounds_stop(asr_model *m) {
  asr_rounds *r = &m->rounds_q;
  if (!r->inited) return;
  pthread_mutex_lock(&r->mu);
  r->stop = true;
  pthread_cond_broadcast(&r->cv);
  pthread_mutex_unlock(&r->mu);
  for (uint32_t i = 0; i < r->n_threads; i++) pthread_join(r->threads[i], NULL);
  free(r->threads);
  pthread_cond_destroy(&r->cv);
  pthread_mutex_destroy(&r->mu);
}

/* ---- execute ------------------------------------------------------------------- */

/* A batched model: answer what needs no encoder, hold the rest for the
 * round threads. */
static hark_error *execute_held(asr_model *m, hark_request **reqs, uint32_t n) {
  asr_rounds *r = &m->rounds_q;
  for (uint32_t i = 0; i < n; i++) {
    job *j = calloc(1, sizeof *j);
    if (!j) {
      hark_request_complete(reqs[i],
                            hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory"));
      continue;
    }
    j->req = reqs[i];
    if (!open_job(m, j) || !wants_round(m, j)) {
      free(j);
      continue;
    }
    pthread_mutex_lock(&r->mu);
    hold_locked(r, j, false);
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
  }
  return NULL;
}

/* max_batch_size 1 (or 0): the worker runs its request's rounds itself. */
static hark_error *execute_inline(asr_model *m, hark_request **reqs, uint32_t n) {
  job *jobs = calloc(n, sizeof *jobs);
  job **js = calloc(n, sizeof *js);
  asr_net_stream **ns = calloc(n, sizeof *ns);
  const float **feats = calloc(n, sizeof *feats);
  if (!jobs || !js || !ns || !feats) {
    free(jobs), free(js), free(ns), free(feats);
    return hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory");
  }
  for (uint32_t i = 0; i < n; i++) {
    jobs[i].req = reqs[i];
    open_job(m, &jobs[i]);
  }
  for (;;) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++)
      if (wants_round(m, &jobs[i])) js[k++] = &jobs[i];
    if (k == 0) break;
    step(m, js, k, ns, feats);
  }
  free(jobs), free(js), free(ns), free(feats);
  return NULL;
}

static hark_error *instance_execute(hark_instance *hi, hark_request **reqs, uint32_t n) {
  asr_model *m = hark_model_state(hark_instance_model(hi));
  return m->rounds_q.n_threads ? execute_held(m, reqs, n) : execute_inline(m, reqs, n);
}

static const hark_backend_api api = {
    .api_version = HARK_BACKEND_API_VERSION,
    .model_init = model_init,
    .model_fini = model_fini,
    .instance_init = instance_init,
    .instance_fini = instance_fini,
    .instance_execute = instance_execute,
    .sequence_fini = sequence_fini,
};

HARK_BACKEND_EXPORT const hark_backend_api *hark_backend_get_api(void) { return &api; }
