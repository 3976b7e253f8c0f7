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
 * A round is one execute: the sequence batcher hands over one request of
 * each of up to max_batch_size streams. Each stream's audio becomes
 * features; every stream with a whole chunk goes into ONE encoder call
 * and one batched search (net.cc); the round repeats while any stream has
 * another chunk (a request longer than a chunk, a whole file), its audio
 * fed a second at a time so a long request holds a second of features,
 * not all of them. A request is answered as soon as its audio is used up:
 * a partial, or a final when an endpoint fired within it, at END, or on
 * flush. Outputs are those of the pocketsphinx recogniser (TRANSCRIPT,
 * IS_FINAL, WORDS, WORD_START, WORD_END, WORD_CONF, CONFIDENCE,
 * AUDIO_PROCESSED, ALTERNATIVES), so every speech front end serves either.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "asr.h"

#define FEED_SLICE_BYTES 32000u /* a second of 16 kHz PCM per feed */

typedef struct asr_model {
  asr_settings set;
  asr_tokens tokens;
  hark_fbank_bank *bank;
  asr_net *net;
  asr_shared sh;
  bool batched;
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
  return NULL;
}

/* ---- lifecycle ----------------------------------------------------------------- */

static void model_free(asr_model *m) {
  if (!m) return;
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
    const char *prec = hark_model_parameter(hm, "precision");
    asr_precision precision = ASR_FP32;
    if (!err && prec && !strcmp(prec, "int8"))
      precision = ASR_INT8;
    else if (!err && prec && !strcmp(prec, "bf16"))
      precision = ASR_BF16;
    else if (!err && prec && strcmp(prec, "fp32"))
      err = hark_error_new(HARK_ERR_INVALID_ARG,
                           "%s: parameter precision must be 'fp32', 'int8' or 'bf16', got '%s'",
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
                      .precision = precision};
    if (!err && !(m->net = asr_net_load(&o, why, sizeof why)))
      err = hark_error_new(HARK_ERR_INVALID_ARG, "%s", why);
  }
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
  if (err) {
    model_free(m);
    return err;
  }
  const asr_net_info *info = asr_net_get_info(m->net);
  HARK_BACKEND_LOG(HARK_BACKEND_LOG_INFO,
                   "%s: %s, %u tokens, chunks of %u+%u frames -> %u encoder frames of %.0f ms, %u "
                   "state tensors (%zu bytes a stream)",
                   m->set.label, info->family == ASR_CTC ? "CTC" : "transducer", m->tokens.n,
                   m->set.chunk, m->set.pad, info->out_frames, m->sh.frame_shift_s * 1000.0,
                   info->n_states, info->state_bytes);
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

static void sequence_fini(hark_model *hm, void *state) {
  asr_model *m = hark_model_state(hm);
  asr_stream_free(state);
  if (m) hark_metric_add(m->streams, -1);
}

/* ---- a round ------------------------------------------------------------------- */

typedef struct job {
  hark_request *req;
  asr_stream *st;
  const uint8_t *data;
  size_t len, pos;
  size_t sample_bytes; /* of the client's audio: slices are whole samples */
  bool end, in_seq, flush, fed_end, answered;
  uint32_t want_alt;
  float seconds0; /* the stream's audio before this request */
  asr_result res;
} job;

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
  if (!err && j->want_alt > 0 && r->is_final) {
    const char *best = text;
    err = r->n_alts
              ? add_bytes(resp, m, j->req, "ALTERNATIVES", (const char *const *)r->alts, r->n_alts)
              : add_bytes(resp, m, j->req, "ALTERNATIVES", &best, 1);
    if (!err)
      err = r->n_alts ? add_f32(resp, m, j->req, "ALTERNATIVE_CONFIDENCE", r->alt_conf, r->n_alts)
                      : add_f32(resp, m, j->req, "ALTERNATIVE_CONFIDENCE", &conf, 1);
  }
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
      hark_metric_add(m->streams, -1);
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

static hark_error *stream_options(asr_model *m, hark_request *req, asr_stream_opts *o) {
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
    o->alternatives = (uint32_t)n < m->set.max_alternatives ? (uint32_t)n : m->set.max_alternatives;
  }
  v = hark_request_parameter(req, "silence_ms");
  if (v) {
    char *end;
    long ms = strtol(v, &end, 10);
    if (!*v || *end || ms < 0 || ms > 60000)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: silence_ms '%s' is not 0..60000",
                            m->set.label, v);
    if (ms > 0) o->endpoint.rule2_silence = (float)ms / 1000.0f;
  }
  return NULL;
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
    hark_metric_add(m->streams, -1);
    st = NULL;
  }
  if (!st) {
    asr_stream_opts o;
    char reason[512];
    hark_error *err = stream_options(m, req, &o);
    if (err) {
      fail(m, j, err);
      return false;
    }
    if (!(st = asr_stream_new(&m->sh, m->net, &o, reason, sizeof reason))) {
      fail(m, j, hark_error_new(HARK_ERR_INTERNAL, "%s", reason));
      return false;
    }
    if (j->in_seq) hark_metric_add(m->streams, 1);
  }
  j->st = st;
  j->seconds0 = asr_stream_audio_seconds(st);
  char why[512];
  if (asr_stream_begin(st, &j->data, &j->len, &j->sample_bytes, why, sizeof why) != 0) {
    fail(m, j, hark_error_new(HARK_ERR_INVALID_ARG, "%s", why));
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

static hark_error *instance_execute(hark_instance *hi, hark_request **reqs, uint32_t n) {
  asr_model *m = hark_model_state(hark_instance_model(hi));
  job *jobs = calloc(n, sizeof *jobs);
  asr_stream **ss = calloc(n, sizeof *ss);
  asr_net_stream **ns = calloc(n, sizeof *ns);
  const float **feats = calloc(n, sizeof *feats);
  uint32_t *who = calloc(n, sizeof *who);
  if (!jobs || !ss || !ns || !feats || !who) {
    free(jobs), free(ss), free(ns), free(feats), free(who);
    return hark_error_new(HARK_ERR_INTERNAL, "neural_asr: out of memory");
  }
  for (uint32_t i = 0; i < n; i++) {
    jobs[i].req = reqs[i];
    open_job(m, &jobs[i]);
  }
  for (;;) {
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
      job *j = &jobs[i];
      if (!j->answered && hark_request_is_cancelled(j->req)) /* its client went: stop here */
        fail(m, j,
             hark_error_new(HARK_ERR_CANCELLED, "neural_asr: request cancelled by its client"));
      if (j->answered || !feed_job(m, j)) continue;
      const float *f = asr_stream_chunk(j->st);
      if (!f) {
        answer(m, j); /* its audio is used up: answered now, not after the others */
        continue;
      }
      who[k] = i;
      ns[k] = asr_stream_net(j->st);
      feats[k] = f;
      k++;
    }
    if (k == 0) break;
    char why[1024];
    if (asr_net_step(m->net, ns, feats, k, why, sizeof why) != 0) {
      HARK_BACKEND_LOG(HARK_BACKEND_LOG_ERROR, "%s", why);
      for (uint32_t i = 0; i < k; i++)
        fail(m, &jobs[who[i]], hark_error_new(HARK_ERR_INTERNAL, "%s", why));
      continue;
    }
    hark_metric_add(m->rounds, 1);
    hark_metric_add(m->round_streams, k);
    for (uint32_t i = 0; i < k; i++) {
      job *j = &jobs[who[i]];
      asr_stream_advance(j->st, &j->res, j->want_alt);
    }
  }
  free(jobs), free(ss), free(ns), free(feats), free(who);
  return NULL;
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
