/*
 * backend.c — the hark glue for model `asr` (backend "pocketsphinx").
 *
 * model_init parses the parameters (settings.c) and builds the decoder
 * pool (pool.c); each request of a sequence carries one AUDIO element,
 * which goes to the sequence's ps_stream (stream.c), kept with
 * hark_request_set_sequence_state between requests and freed on END or in
 * sequence_fini. A request without a correlation id is a whole stream in
 * one (START|END). Every request gets exactly one FINAL response: the
 * partial or final transcript, or an error.
 *
 * Observability (API 1.2): each streaming response's latency — from the
 * server accepting its request to the response being ready to send — goes
 * to the partial or the final histogram, and the worker's CPU time in the
 * recogniser to hark_asr_compute_seconds_total, so that
 * rate(compute) / rate(hark_audio_seconds_total) is the real-time factor.
 *
 * Latency profiles: a stream decodes each utterance with the model's
 * default profile (parameter profile) or its own (request parameter
 * profile on its first request). Degradation (parameter degrade): when
 * the model's reply latency p99 stays over degrade_p99_ms for
 * degrade_windows windows (degrade.c), new utterances of every stream
 * decode fast until as many windows pass within it; and a stream one of
 * whose replies ran past breaker_ms decodes fast from its next utterance
 * on (its breaker), so one late stream does not hold the others back.
 *
 * VAD-gated models (parameter vad_model, e.g. asr_silero): each request
 * with audio also carries VAD_PROB, the VAD model's speech probability of
 * each 32 ms of the stream's audio (the speech front ends compute it with
 * the model vad_model names, batched across streams), and the stream's
 * gate (hark_vad_gate) opens and closes utterances on it. Request parameters
 * start_threshold / stop_threshold join silence_ms / startspeech_ms (the
 * stop and start histories) as the stream's endpointing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hark/backend.h"
#include "ps_internal.h"

typedef struct asr_model {
  ps_pool *pool;
  ps_degrade degrade;
  /* degradation: state, switches, streams decoding fast without asking,
   * breaker trips */
  hark_metric *degraded, *degrade_transitions, *streams_degraded, *breaker_trips;
  /* /metrics: the pool's size and use, streams with state, audio consumed */
  hark_metric *decoders_max, *decoders_created, *decoders_in_use, *decoder_timeouts;
  hark_metric *decoder_stalls;
  hark_metric *streams, *audio_seconds;
  /* streaming latency (histograms) and recognition CPU time */
  hark_metric *partial_latency, *final_latency, *compute_seconds;
} asr_model;

static void free_metrics(asr_model *m) {
  hark_metric *all[] = {
      m->decoders_max,    m->decoders_created, m->decoders_in_use,     m->decoder_timeouts,
      m->streams,         m->audio_seconds,    m->partial_latency,     m->final_latency,
      m->compute_seconds, m->degraded,         m->degrade_transitions, m->streams_degraded,
      m->breaker_trips,   m->decoder_stalls};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) hark_metric_free(all[i]);
}

static hark_error *make_metrics(hark_model *model, asr_model *m) {
  struct {
    hark_metric **out;
    hark_metric_kind kind;
    const char *name, *help;
  } defs[] = {
      {&m->decoders_max, HARK_METRIC_GAUGE, "hark_decoders_max",
       "Decoders the model's pool may hold (decoder_pool_size)"},
      {&m->decoders_created, HARK_METRIC_GAUGE, "hark_decoders_created",
       "Decoders created so far (decoder_pool_preload at load, then on demand up to the "
       "pool size)"},
      {&m->decoders_in_use, HARK_METRIC_GAUGE, "hark_decoders_in_use",
       "Decoders held by streams inside an utterance"},
      {&m->decoder_timeouts, HARK_METRIC_COUNTER, "hark_decoder_wait_timeouts_total",
       "Requests failed because no decoder freed up within decoder_wait_ms"},
      {&m->streams, HARK_METRIC_GAUGE, "hark_asr_streams",
       "Streams with recognition state (connected, speaking or not)"},
      {&m->audio_seconds, HARK_METRIC_COUNTER, "hark_audio_seconds_total",
       "Seconds of audio recognised"},
      {&m->compute_seconds, HARK_METRIC_COUNTER, "hark_asr_compute_seconds_total",
       "CPU seconds workers spent recognising audio; real-time factor = "
       "rate(hark_asr_compute_seconds_total) / rate(hark_audio_seconds_total)"},
      {&m->degraded, HARK_METRIC_GAUGE, "hark_asr_degraded",
       "1 while new utterances decode with the fast profile because reply latency p99 stayed "
       "over degrade_p99_ms for degrade_windows windows"},
      {&m->degrade_transitions, HARK_METRIC_COUNTER, "hark_asr_degrade_transitions_total",
       "Switches into and out of the degraded state"},
      {&m->streams_degraded, HARK_METRIC_GAUGE, "hark_asr_streams_degraded",
       "Streams decoding with the fast profile without having asked for it (degraded state "
       "or their breaker)"},
      {&m->breaker_trips, HARK_METRIC_COUNTER, "hark_asr_breaker_trips_total",
       "Streams switched to the fast profile by a reply later than breaker_ms"},
      {&m->decoder_stalls, HARK_METRIC_COUNTER, "hark_decoder_stalls_total",
       "Decoders taken back from streams whose audio fell decoder_idle_ms behind the clock"},
  };
  for (size_t i = 0; i < sizeof defs / sizeof *defs; i++) {
    hark_error *err = hark_metric_new(model, defs[i].kind, defs[i].name, defs[i].help, defs[i].out);
    if (err) return err;
  }
  /* 1 ms to 5 s: partials take milliseconds, a final at most a few hundred */
  static const double bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
                                  0.2,   0.3,    0.5,   0.75, 1,     1.5,  2,     3,   5};
  const uint32_t nb = sizeof bounds / sizeof *bounds;
  hark_error *err = hark_metric_new_histogram(
      model, "hark_asr_partial_latency_seconds",
      "Streaming partial results: seconds from the server accepting the audio chunk to its "
      "partial transcript",
      bounds, nb, &m->partial_latency);
  if (!err)
    err = hark_metric_new_histogram(
        model, "hark_asr_final_latency_seconds",
        "Streaming final results: seconds from the server accepting the request that ended the "
        "utterance (speech end, eof or reset) to its final transcript",
        bounds, nb, &m->final_latency);
  return err;
}

static double thread_cpu_seconds(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Copies the pool's figures to the gauges; after every execute. */
static void publish(asr_model *m) {
  ps_pool_stats s;
  ps_pool_get_stats(m->pool, &s);
  hark_metric_set(m->decoders_max, s.max);
  hark_metric_set(m->decoders_created, s.created);
  hark_metric_set(m->decoders_in_use, s.in_use);
  hark_metric_set(m->decoder_timeouts, (double)s.timeouts);
}

/* A stream's recogniser and its profile policy: the sequence's state. */
typedef struct asr_stream {
  ps_stream *st;
  ps_profile requested; /* the stream's own profile, or the model's default */
  bool breaker;         /* a reply ran past breaker_ms */
  bool degraded;        /* decoding fast without asking (counted in streams_degraded) */
} asr_stream;

static asr_stream *stream_new(asr_model *m, uint32_t rate, const ps_endpointing *ep,
                              ps_profile requested, char *why, size_t len) {
  asr_stream *as = calloc(1, sizeof *as);
  if (!as) {
    snprintf(why, len, "out of memory");
    return NULL;
  }
  as->st = ps_stream_new(m->pool, rate, ep, why, len);
  if (!as->st) {
    free(as);
    return NULL;
  }
  as->requested = requested;
  hark_metric_add(m->streams, 1);
  return as;
}

static bool word_known(void *arg, const char *word) {
  char *pron = ps_lookup_word(arg, word);
  free(pron);
  return pron != NULL;
}

static bool word_assumed(void *arg, const char *word) {
  (void)arg;
  (void)word;
  return true;
}

/* The stream's phrase_list (a JSON array of strings) as its grammar. Its
 * words are looked up on a free decoder; with none free at once, the
 * grammar's own making refuses an unknown word when the first utterance
 * opens. */
static hark_error *set_phrases(asr_model *m, ps_stream *st, const char *json, const char *client) {
  char why[256];
  ps_decoder_t *ps = ps_pool_acquire(m->pool, client, 0);
  char *jsgf = ps_phrases_jsgf(json, ps ? word_known : word_assumed, ps, why, sizeof why);
  if (ps) ps_pool_release(m->pool, ps);
  if (!jsgf) return hark_error_new(HARK_ERR_INVALID_ARG, "asr: %s", why);
  ps_stream_set_grammar(st, jsgf);
  return NULL;
}

static void stream_free(asr_model *m, asr_stream *as) {
  if (!as) return;
  ps_stream_free(as->st);
  if (as->degraded) hark_metric_add(m->streams_degraded, -1);
  free(as);
  hark_metric_add(m->streams, -1);
}

/* The profile of the stream's next utterance: its own, unless the model is
 * degraded or its breaker tripped. */
static void choose_profile(asr_model *m, asr_stream *as) {
  bool forced = as->requested != PS_PROFILE_FAST && (as->breaker || ps_degrade_active(&m->degrade));
  ps_stream_set_profile(as->st, forced ? PS_PROFILE_FAST : as->requested);
  if (forced != as->degraded) {
    as->degraded = forced;
    hark_metric_add(m->streams_degraded, forced ? 1 : -1);
  }
}

/* One streaming reply's latency: the model's windows and the stream's
 * breaker. A stream whose breaker tripped no longer counts in the model's
 * windows: its breaker already answers for it, and one client whose own
 * replies run late (a huge chunk, say) must not degrade every stream. */
static void judge_latency(asr_model *m, asr_stream *as, double latency) {
  const ps_degrade_settings *ds = &ps_pool_settings(m->pool)->degrade;
  int change = as->breaker ? 0 : ps_degrade_observe(&m->degrade, hark_now_ns(), latency);
  if (change) {
    uint64_t transitions;
    uint32_t p99;
    ps_degrade_get(&m->degrade, &transitions, &p99);
    hark_metric_set(m->degraded, change > 0 ? 1 : 0);
    hark_metric_set(m->degrade_transitions, (double)transitions);
    if (change > 0)
      HARK_BACKEND_LOG(HARK_BACKEND_LOG_WARN,
                       "asr: degraded: reply latency p99 over %u ms in %u windows of %u ms in a "
                       "row (last %u ms); new utterances decode with the fast profile",
                       ds->bound_ms, ds->windows, ds->window_ms, p99);
    else
      HARK_BACKEND_LOG(HARK_BACKEND_LOG_INFO,
                       "asr: recovered: reply latency p99 within %u ms for %u windows; new "
                       "utterances decode with their own profile",
                       ds->bound_ms, ds->windows);
  }
  if (ds->on && !as->breaker && latency * 1e3 > ds->breaker_ms) {
    as->breaker = true;
    hark_metric_add(m->breaker_trips, 1);
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_WARN,
                     "asr: breaker: a reply took %.0f ms (breaker_ms %u); this stream's next "
                     "utterances decode with the fast profile",
                     latency * 1e3, ds->breaker_ms);
  }
}

static const char *cfg_param(void *ctx, uint32_t i, const char **key) {
  const hark_model_config *cfg = ctx;
  if (i >= cfg->n_parameters) return NULL;
  *key = cfg->parameters[i].key;
  return cfg->parameters[i].value;
}

static hark_error *model_init(hark_model *model) {
  const hark_model_config *cfg = hark_model_get_config(model);
  char err[1024] = "";
  ps_settings s;
  if (ps_settings_init(&s, cfg_param, (void *)cfg, err, sizeof err) != 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "model '%s': %s", cfg->name, err);
  asr_model *m = calloc(1, sizeof *m);
  if (!m) {
    ps_settings_fini(&s);
    return hark_error_new(HARK_ERR_INTERNAL, "pocketsphinx: out of memory");
  }
  m->pool = ps_pool_new(&s, err, sizeof err);
  ps_degrade_init(&m->degrade, &s.degrade, hark_now_ns());
  ps_settings_fini(&s);
  if (!m->pool) {
    ps_degrade_fini(&m->degrade);
    free(m);
    return hark_error_new(HARK_ERR_INVALID_ARG, "model '%s': %s", cfg->name, err);
  }
  hark_error *merr = make_metrics(model, m);
  if (merr) {
    free_metrics(m);
    ps_pool_free(m->pool);
    ps_degrade_fini(&m->degrade);
    free(m);
    return merr;
  }
  publish(m);
  hark_model_set_state(model, m);
  return NULL;
}

static void model_fini(hark_model *model) {
  asr_model *m = hark_model_state(model);
  if (!m) return;
  free_metrics(m);
  ps_pool_free(m->pool);
  ps_degrade_fini(&m->degrade);
  free(m);
}

static hark_error *instance_init(hark_instance *inst) {
  (void)inst;
  return NULL;
}
static void instance_fini(hark_instance *inst) { (void)inst; }

static void sequence_fini(hark_model *model, void *state) {
  asr_model *m = hark_model_state(model);
  stream_free(m, state);
  publish(m);
}

/* ---- one request --------------------------------------------------------- */

/* The AUDIO tensor's elements (4-byte length + bytes each), concatenated
 * into *out when there are several; *owned tells whether to free it. */
static hark_error *audio_bytes(const hark_tensor *t, const uint8_t **out, size_t *len,
                               uint8_t **owned) {
  *owned = NULL;
  *out = (const uint8_t *)"";
  *len = 0;
  if (!t) return hark_error_new(HARK_ERR_INVALID_ARG, "asr: input AUDIO is missing");
  if (t->datatype != HARK_TYPE_BYTES)
    return hark_error_new(HARK_ERR_INVALID_ARG, "asr: input AUDIO must be BYTES");
  const uint8_t *p = t->data, *end = p + t->byte_size;
  size_t total = 0, n = 0;
  const uint8_t *first = NULL;
  while (p < end) {
    if (end - p < 4) return hark_error_new(HARK_ERR_INVALID_ARG, "asr: AUDIO element truncated");
    uint32_t l = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    p += 4;
    if ((size_t)(end - p) < l)
      return hark_error_new(HARK_ERR_INVALID_ARG, "asr: AUDIO element longer than the tensor");
    if (!first) first = p;
    total += l;
    n++;
    p += l;
  }
  if (n <= 1) {
    if (first) *out = first;
    *len = total;
    return NULL;
  }
  uint8_t *buf = malloc(total ? total : 1);
  if (!buf) return hark_error_new(HARK_ERR_INTERNAL, "asr: out of memory");
  size_t off = 0;
  for (p = t->data; p < end;) {
    uint32_t l = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    memcpy(buf + off, p + 4, l);
    off += l;
    p += 4 + l;
  }
  *owned = buf;
  *out = buf;
  *len = total;
  return NULL;
}

static hark_error *parse_rate(const asr_model *m, hark_request *req, uint32_t *rate) {
  const char *v = hark_request_parameter(req, "sample_rate");
  *rate = ps_pool_settings(m->pool)->default_sample_rate;
  if (!v) return NULL;
  char *end;
  double r = strtod(v, &end);
  if (end == v || *end || r != (double)(uint32_t)r || r < 8000 || r > 48000)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "asr: sample_rate '%s' is not an integer in 8000..48000 Hz", v);
  *rate = (uint32_t)r;
  return NULL;
}

/* The stream's endpointing, from the parameters silence_ms and
 * startspeech_ms of its first request (0 or absent: the model's), and
 * for a gated model start_threshold and stop_threshold. */
static hark_error *parse_endpointing(const asr_model *m, hark_request *req, ps_endpointing *ep) {
  const char *keys[2] = {"silence_ms", "startspeech_ms"};
  uint32_t *vals[2] = {&ep->silence_ms, &ep->startspeech_ms};
  *ep = (ps_endpointing){0, 0, 0, 0};
  const char *tkeys[2] = {"start_threshold", "stop_threshold"};
  float *tvals[2] = {&ep->start_threshold, &ep->stop_threshold};
  for (int i = 0; i < 2 && ps_pool_settings(m->pool)->gate.on; i++) {
    const char *v = hark_request_parameter(req, tkeys[i]);
    if (!v) continue;
    char *end;
    double t = strtod(v, &end);
    if (end == v || *end || !(t >= 0.0 && t <= 1.0))
      return hark_error_new(HARK_ERR_INVALID_ARG, "asr: %s '%s' is not a fraction in 0.0..1.0",
                            tkeys[i], v);
    *tvals[i] = (float)t;
  }
  for (int i = 0; i < 2; i++) {
    const char *v = hark_request_parameter(req, keys[i]);
    if (!v) continue;
    char *end;
    long ms = strtol(v, &end, 10);
    if (end == v || *end || ms < 0 || ms > 60000)
      return hark_error_new(HARK_ERR_INVALID_ARG, "asr: %s '%s' is not milliseconds in 0..60000",
                            keys[i], v);
    *vals[i] = (uint32_t)ms;
  }
  return NULL;
}

static int param_true(hark_request *req, const char *key, int dflt) {
  const char *v = hark_request_parameter(req, key);
  if (!v) return dflt;
  return !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes") || !strcmp(v, "True");
}

static hark_error *add_bytes(hark_response *resp, hark_request *req, const char *name,
                             const char *const *strs, uint32_t n) {
  if (!hark_request_output_requested(req, name)) return NULL;
  size_t total = 0;
  for (uint32_t i = 0; i < n; i++) total += 4 + strlen(strs[i]);
  int64_t shape[1] = {n};
  uint8_t *buf;
  hark_error *err =
      hark_response_add_output(resp, name, HARK_TYPE_BYTES, shape, 1, total, (void **)&buf);
  if (err) return err;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t l = (uint32_t)strlen(strs[i]);
    buf[0] = (uint8_t)l;
    buf[1] = (uint8_t)(l >> 8);
    buf[2] = (uint8_t)(l >> 16);
    buf[3] = (uint8_t)(l >> 24);
    memcpy(buf + 4, strs[i], l);
    buf += 4 + l;
  }
  return NULL;
}

static hark_error *add_f32(hark_response *resp, hark_request *req, const char *name,
                           const float *vals, uint32_t n) {
  if (!hark_request_output_requested(req, name)) return NULL;
  int64_t shape[1] = {n};
  float *out;
  hark_error *err = hark_response_add_output(resp, name, HARK_TYPE_FP32, shape, 1,
                                             (size_t)n * sizeof(float), (void **)&out);
  if (!err && n) memcpy(out, vals, (size_t)n * sizeof(float));
  return err;
}

/* A final's n-best (docs/backends.md, "Speech outputs"): ALTERNATIVES and
 * ALTERNATIVE_CONFIDENCE [k], ALTERNATIVE_WORD_COUNT (INT32 [k]), and the
 * words of every alternative in turn in ALTERNATIVE_WORDS,
 * ALTERNATIVE_WORD_START, _END and _CONF; alternative 0 is the result
 * itself. A partial has none. */
static hark_error *add_alternatives(hark_response *resp, hark_request *req, const ps_result *r) {
  uint32_t k = r->n_alternatives, n0 = k ? r->n_words : 0, n = n0 + r->n_alt_words;
  float *conf = calloc(k + 1, sizeof *conf), *f = calloc(3 * (size_t)n + 1, sizeof *f);
  int32_t *counts = calloc(k + 1, sizeof *counts);
  const char **w = calloc(n + 1, sizeof *w);
  hark_error *err =
      conf && f && counts && w ? NULL : hark_error_new(HARK_ERR_INTERNAL, "asr: out of memory");
  for (uint32_t i = 0; !err && i < k; i++) {
    conf[i] = r->confidence * r->alt_rel[i];
    counts[i] = (int32_t)(i == 0 ? n0 : r->alt_n_words[i]);
  }
  for (uint32_t i = 0; !err && i < n; i++) {
    const ps_word *pw = i < n0 ? &r->words[i] : &r->alt_words[i - n0];
    w[i] = pw->word;
    f[i] = pw->start;
    f[n + i] = pw->end;
    f[2 * n + i] = pw->conf;
  }
  if (!err) err = add_bytes(resp, req, "ALTERNATIVES", (const char *const *)r->alternatives, k);
  if (!err) err = add_f32(resp, req, "ALTERNATIVE_CONFIDENCE", conf, k);
  if (!err && hark_request_output_requested(req, "ALTERNATIVE_WORD_COUNT")) {
    int64_t shape[1] = {k};
    int32_t *out;
    err = hark_response_add_output(resp, "ALTERNATIVE_WORD_COUNT", HARK_TYPE_INT32, shape, 1,
                                   (size_t)k * sizeof *out, (void **)&out);
    if (!err && k) memcpy(out, counts, (size_t)k * sizeof *out);
  }
  if (!err) err = add_bytes(resp, req, "ALTERNATIVE_WORDS", w, n);
  if (!err) err = add_f32(resp, req, "ALTERNATIVE_WORD_START", f, n);
  if (!err) err = add_f32(resp, req, "ALTERNATIVE_WORD_END", f + n, n);
  if (!err) err = add_f32(resp, req, "ALTERNATIVE_WORD_CONF", f + 2 * n, n);
  free(conf);
  free(f);
  free(counts);
  free(w);
  return err;
}

static hark_error *build_response(hark_request *req, const ps_result *r, hark_response **out) {
  hark_response *resp = hark_response_new(req);
  const char *text = r->text ? r->text : "";
  uint32_t n = r->n_words;
  const char **words = calloc(n + 1, sizeof *words);
  float *times = calloc(3 * (size_t)n + 1, sizeof *times); /* starts, ends, confs */
  hark_error *err = words && times ? NULL : hark_error_new(HARK_ERR_INTERNAL, "asr: out of memory");
  for (uint32_t i = 0; !err && i < n; i++) {
    words[i] = r->words[i].word;
    times[i] = r->words[i].start;
    times[n + i] = r->words[i].end;
    times[2 * n + i] = r->words[i].conf;
  }
  if (!err) err = add_bytes(resp, req, "TRANSCRIPT", &text, 1);
  if (!err && hark_request_output_requested(req, "IS_FINAL")) {
    int64_t shape[1] = {1};
    uint8_t *b;
    err = hark_response_add_output(resp, "IS_FINAL", HARK_TYPE_BOOL, shape, 1, 1, (void **)&b);
    if (!err) b[0] = r->is_final ? 1 : 0;
  }
  if (!err) err = add_bytes(resp, req, "WORDS", words, n);
  if (!err) err = add_f32(resp, req, "WORD_START", times, n);
  if (!err) err = add_f32(resp, req, "WORD_END", times + n, n);
  if (!err) err = add_f32(resp, req, "WORD_CONF", times + 2 * n, n);
  if (!err) err = add_f32(resp, req, "CONFIDENCE", &r->confidence, 1);
  if (!err) err = add_f32(resp, req, "AUDIO_PROCESSED", &r->audio_processed, 1);
  if (!err) err = add_f32(resp, req, "STABILITY", &r->stability, 1);
  if (!err && r->want_alternatives > 0) err = add_alternatives(resp, req, r);
  free(words);
  free(times);
  if (err) {
    hark_response_free(resp);
    return err;
  }
  *out = resp;
  return NULL;
}

static hark_code status_code(ps_status s) {
  switch (s) {
  case PS_BUSY:
  case PS_FULL: return HARK_ERR_UNAVAILABLE;
  case PS_INVALID: return HARK_ERR_INVALID_ARG;
  case PS_CANCELLED: return HARK_ERR_CANCELLED;
  default: return HARK_ERR_INTERNAL;
  }
}

/* A gated model's VAD_PROB (FP32, one per 32 ms of audio) into the
 * stream; a request with audio must carry it. */
static hark_error *take_probs(hark_request *req, ps_stream *st, size_t len) {
  const hark_tensor *t = hark_request_input_by_name(req, "VAD_PROB");
  if (!ps_stream_gated(st)) {
    if (t && t->byte_size)
      return hark_error_new(HARK_ERR_INVALID_ARG,
                            "asr: input VAD_PROB is for models with a vad_model parameter");
    return NULL;
  }
  if (!t) {
    if (!len) return NULL;
    const char *vad =
        hark_model_config_parameter(hark_model_get_config(hark_request_model(req)), "vad_model");
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "asr: input VAD_PROB is missing: this model's utterances are opened by "
                          "the speech probabilities of '%s' (one FP32 per 32 ms of audio), which "
                          "the Vosk WebSocket and Riva streaming front ends compute",
                          vad ? vad : "?");
  }
  if (t->datatype != HARK_TYPE_FP32 || t->byte_size % sizeof(float))
    return hark_error_new(HARK_ERR_INVALID_ARG, "asr: input VAD_PROB must be FP32");
  size_t n = t->byte_size / sizeof(float);
  float *p = malloc(n ? t->byte_size : 1);
  if (!p) return hark_error_new(HARK_ERR_INTERNAL, "asr: out of memory");
  if (n) memcpy(p, t->data, t->byte_size); /* the tensor's data may not be aligned */
  char why[256];
  ps_status s = ps_stream_add_probs(st, p, n, why, sizeof why);
  free(p);
  return s == PS_OK ? NULL : hark_error_new(status_code(s), "asr: %s", why);
}

/* The half of a request that feeds the stream its audio and answers:
 * on the worker, or on a decode thread (async). */
typedef struct feed_job {
  asr_model *m;
  hark_request *req;
  asr_stream *as;
  const uint8_t *pcm;
  size_t len;
  uint8_t *owned;
  unsigned ff;
  uint32_t want_alt;
  int end, in_sequence;
  bool async;
} feed_job;

/* The stream's state settled before its request's FINAL hands it back: an
 * ending stream freed, any other kept for the sequence's next request. */
static void settle_stream(asr_model *m, hark_request *req, asr_stream *as, int end,
                          int in_sequence) {
  if (end) {
    stream_free(m, as);
    if (in_sequence) hark_request_set_sequence_state(req, NULL);
  } else if (in_sequence) {
    hark_request_set_sequence_state(req, as);
  }
}

static bool request_cancelled(const void *req) { return hark_request_is_cancelled(req); }

/* Feeds and answers; returns an error to fail the request with, or NULL
 * once its FINAL has been sent. Either way the stream's state is settled
 * first, and an async job has touched the model for the last time: once
 * the FINAL is out, the model may unload. */
static hark_error *feed(const feed_job *j) {
  asr_model *m = j->m;
  hark_request *req = j->req;
  ps_stream *st = j->as->st;
  hark_response *resp = NULL;
  hark_error *err = NULL;
  ps_result r;
  ps_result_init(&r, j->want_alt);
  char why[512] = "";
  double before = ps_stream_audio_processed(st), cpu = thread_cpu_seconds();
  uint32_t stalls = ps_stream_stalls(st);
  ps_stream_set_arrival(st, hark_request_received_ns(req) / 1000000u);
  ps_stream_set_cancel(st, request_cancelled, req); /* a gone client stops the decode */
  ps_status s = ps_stream_feed(st, j->pcm, j->len, j->ff, &r, why, sizeof why);
  ps_stream_set_cancel(st, NULL, NULL);
  if (ps_stream_stalls(st) != stalls) {
    hark_metric_add(m->decoder_stalls, 1);
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_VERBOSE,
                     "asr: a stream's audio fell more than %u ms behind the clock; its "
                     "utterance ended there and its decoder went back to the pool",
                     ps_pool_settings(m->pool)->decoder_idle_ms);
  }
  hark_metric_add(m->compute_seconds, thread_cpu_seconds() - cpu + ps_stream_take_pool_cpu(st));
  hark_metric_add(m->audio_seconds, ps_stream_audio_processed(st) - before);
  if (s != PS_OK)
    err = hark_error_new(status_code(s), "asr: %s", why);
  else
    err = build_response(req, &r, &resp);
  if (!err) {
    /* Whole-file requests (no sequence) are not streaming latency. */
    double latency = (double)(hark_now_ns() - hark_request_received_ns(req)) * 1e-9;
    if (j->in_sequence) {
      hark_metric_observe(r.is_final ? m->final_latency : m->partial_latency, latency);
      judge_latency(m, j->as, latency);
    }
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_VERBOSE, "asr: %zu bytes of audio: %s '%s' after %.1f ms",
                     j->len, r.is_final ? "final" : "partial", r.text ? r.text : "", latency * 1e3);
  } else {
    HARK_BACKEND_LOG(HARK_BACKEND_LOG_VERBOSE, "asr: request failed: %s", hark_error_message(err));
  }
  ps_result_fini(&r);
  free(j->owned);
  settle_stream(m, req, j->as, j->end, j->in_sequence);
  if (j->async) publish(m);
  if (err) return err;
  hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
  return NULL;
}

static void feed_async(void *arg) {
  feed_job *j = arg;
  hark_request *req = j->req;
  hark_backend_log_request(req); /* this thread's lines name the stream */
  hark_error *err = feed(j);
  free(j);
  if (err) hark_request_complete(req, err);
  hark_backend_log_request(NULL);
}

/* Runs one request; returns an error to fail it with, or NULL once its
 * FINAL response has been sent. */
static hark_error *run_one(asr_model *m, hark_request *req) {
  uint32_t flags = hark_request_flags(req);
  int in_sequence =
      hark_request_correlation_id(req) != 0 || hark_request_correlation_id_str(req) != NULL;
  if (!in_sequence) flags |= HARK_REQUEST_SEQUENCE_START | HARK_REQUEST_SEQUENCE_END;
  asr_stream *as = in_sequence ? hark_request_sequence_state(req) : NULL;
  if (as && (flags & HARK_REQUEST_SEQUENCE_START)) { /* a restarted sequence */
    stream_free(m, as);
    as = NULL;
    hark_request_set_sequence_state(req, NULL);
  }
  const uint8_t *pcm;
  size_t len;
  uint8_t *owned;
  hark_error *err = audio_bytes(hark_request_input_by_name(req, "AUDIO"), &pcm, &len, &owned);
  uint32_t rate = 0;
  if (!err) err = parse_rate(m, req, &rate);
  uint32_t want_alt = 0;
  const char *alt = hark_request_parameter(req, "max_alternatives");
  if (!err && alt) {
    char *end;
    long a = strtol(alt, &end, 10);
    if (end == alt || *end || a < 0)
      err = hark_error_new(HARK_ERR_INVALID_ARG, "asr: max_alternatives '%s' is not a count", alt);
    uint32_t cap = ps_pool_settings(m->pool)->max_alternatives;
    if (!err && a > (long)cap)
      err = hark_error_new(HARK_ERR_INVALID_ARG,
                           "asr: max_alternatives %ld is more than this model gives (%u: its "
                           "max_alternatives parameter)",
                           a, cap);
    want_alt = a > (long)cap ? cap : (uint32_t)(a < 0 ? 0 : a);
  }
  ps_profile profile = ps_pool_settings(m->pool)->profile;
  const char *pname = hark_request_parameter(req, "profile");
  if (!err && pname && ps_profile_parse(pname, &profile) != 0)
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "asr: profile '%s' does not exist; the profiles are 'accurate' and 'fast'",
                         pname);
  char why[512] = "";
  ps_endpointing ep;
  if (!err && !as) err = parse_endpointing(m, req, &ep);
  if (!err && !as) {
    as = stream_new(m, rate, &ep, profile, why, sizeof why);
    if (!as) err = hark_error_new(HARK_ERR_INVALID_ARG, "asr: %s", why);
    /* Its decoders count in its client's share (max_decoders_per_client). */
    if (as) ps_stream_set_client(as->st, hark_request_client(req));
    const char *phrases = hark_request_parameter(req, "phrase_list");
    if (!err && phrases && (err = set_phrases(m, as->st, phrases, hark_request_client(req)))) {
      stream_free(m, as);
      as = NULL;
    }
  }
  ps_stream *st = as ? as->st : NULL;
  /* A stream's n-best count and profile come with its first request; its
   * later requests keep them. */
  if (!err && alt) ps_stream_set_alternatives(st, want_alt);
  if (!err) want_alt = ps_stream_alternatives(st);
  if (!err && pname) as->requested = profile;
  if (!err) choose_profile(m, as);
  int end = (flags & HARK_REQUEST_SEQUENCE_END) != 0;
  if (!err) err = take_probs(req, st, len);
  feed_job job = {m, req, as, pcm, len, owned, 0, want_alt, end, in_sequence, false};
  if (!err)
    job.ff = (end ? PS_FEED_END : 0) | (param_true(req, "flush", 0) ? PS_FEED_FLUSH : 0) |
             (param_true(req, "partial", 1) ? PS_FEED_PARTIAL : 0);
  /* A stream inside an utterance decodes: tens of ms of CPU per chunk (the
   * pre-roll too, when one opens), and a second pass when it ends. Off the
   * worker, every other stream's chunk and the VAD's forward calls go on
   * meanwhile; the sequence batcher holds this stream's next request until
   * this one's FINAL. */
  if (!err && in_sequence && ps_stream_may_decode(st)) {
    feed_job *j = malloc(sizeof *j);
    if (j) {
      *j = job;
      j->async = true;
      if (ps_pool_run_decode(m->pool, feed_async, j) == 0) return NULL;
      free(j);
    }
  }
  if (err) {
    free(owned);
    settle_stream(m, req, as, end, in_sequence);
    return err;
  }
  return feed(&job);
}

static hark_error *instance_execute(hark_instance *inst, hark_request **reqs, uint32_t n) {
  asr_model *m = hark_model_state(hark_instance_model(inst));
  for (uint32_t i = 0; i < n; i++) {
    hark_error *err = run_one(m, reqs[i]);
    if (err) hark_request_complete(reqs[i], err);
  }
  publish(m);
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
