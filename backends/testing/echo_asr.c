/*
 * echo_asr — a deterministic stand-in for a streaming speech recogniser,
 * with the asr model's inputs and outputs, so the speech front ends can be
 * tested without a real model. It "recognises" by counting samples:
 *
 *   AUDIO (BYTES [1]): 16-bit PCM; a WAV header at the start of a sequence
 *   is skipped. Parameters: sample_rate (on START, default 16000),
 *   flush = "true" (end the utterance now).
 *   Partial: TRANSCRIPT "N samples" (N: samples in the utterance so far).
 *   Final (flush, END, or every `utterance_samples`): TRANSCRIPT "N", one
 *   word "N" spanning the utterance, ALTERNATIVES ["N", "N alt"].
 *
 * Each sequence (correlation id in its namespace) has its own state in a table of the
 * model's, created by START and freed by END, so it works under any
 * scheduler; `max_sequences` bounds the table like a decoder pool (a START
 * past it is UNAVAILABLE). Audio that begins with "FAIL" fails the request
 * (INTERNAL); audio that begins with "SLOW" takes 300 ms, with "LONG" 3 s — test hooks.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hark/backend.h"

#define BUCKETS 256

typedef struct seq {
  struct seq *next;
  hark_corr_ns ns; /* the same id in two namespaces is two sequences */
  uint64_t id;
  int rate;
  bool started_audio; /* a WAV header can only come first */
  uint64_t utt_start; /* samples before this utterance */
  uint64_t utt;       /* samples in it */
} seq;

typedef struct echo_model {
  uint64_t utterance_samples;
  uint32_t max_sequences, n_sequences;
  pthread_mutex_t lock;
  seq *table[BUCKETS];
} echo_model;

static hark_error *param_u64(hark_model *model, const char *key, uint64_t hi, uint64_t *out) {
  const char *v = hark_model_parameter(model, key);
  *out = 0;
  if (!v) return NULL;
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (!*v || *end || n > hi)
    return hark_error_new(HARK_ERR_INVALID_ARG, "echo_asr: parameter %s must be 0..%llu, got '%s'",
                          key, (unsigned long long)hi, v);
  *out = n;
  return NULL;
}

static hark_error *model_init(hark_model *model) {
  echo_model *m = calloc(1, sizeof *m);
  if (!m) return hark_error_new(HARK_ERR_INTERNAL, "out of memory");
  uint64_t maxseq;
  hark_error *err = param_u64(model, "utterance_samples", 1ull << 40, &m->utterance_samples);
  if (!err) err = param_u64(model, "max_sequences", 1u << 30, &maxseq);
  if (err) {
    free(m);
    return err;
  }
  m->max_sequences = (uint32_t)maxseq;
  pthread_mutex_init(&m->lock, NULL);
  hark_model_set_state(model, m);
  return NULL;
}

static void model_fini(hark_model *model) {
  echo_model *m = hark_model_state(model);
  for (int b = 0; b < BUCKETS; b++)
    for (seq *s = m->table[b], *next; s; s = next) {
      next = s->next;
      free(s);
    }
  pthread_mutex_destroy(&m->lock);
  free(m);
}

static hark_error *instance_init(hark_instance *inst) {
  (void)inst;
  return NULL;
}
static void instance_fini(hark_instance *inst) { (void)inst; }

/* The sequence for `id`: created (or restarted) on START. */
static hark_error *seq_get(echo_model *m, hark_corr_ns ns, uint64_t id, bool start, seq **out) {
  pthread_mutex_lock(&m->lock);
  seq **slot = &m->table[id % BUCKETS];
  while (*slot && ((*slot)->id != id || (*slot)->ns != ns)) slot = &(*slot)->next;
  hark_error *err = NULL;
  if (*slot && start) {
    memset(&(*slot)->rate, 0, sizeof **slot - offsetof(seq, rate));
  } else if (!*slot && start) {
    if (m->max_sequences && m->n_sequences >= m->max_sequences)
      err = hark_error_new(HARK_ERR_UNAVAILABLE, "echo_asr: no decoder free (%u in use)",
                           m->n_sequences);
    else if (!(*slot = calloc(1, sizeof **slot)))
      err = hark_error_new(HARK_ERR_INTERNAL, "out of memory");
    else {
      (*slot)->id = id;
      (*slot)->ns = ns;
      m->n_sequences++;
    }
  } else if (!*slot) {
    err = hark_error_new(HARK_ERR_INVALID_ARG,
                         "echo_asr: sequence %llu was not started (send START first)",
                         (unsigned long long)id);
  }
  *out = err ? NULL : *slot;
  pthread_mutex_unlock(&m->lock);
  return err;
}

static void seq_end(echo_model *m, hark_corr_ns ns, uint64_t id) {
  pthread_mutex_lock(&m->lock);
  for (seq **slot = &m->table[id % BUCKETS]; *slot; slot = &(*slot)->next)
    if ((*slot)->id == id && (*slot)->ns == ns) {
      seq *s = *slot;
      *slot = s->next;
      free(s);
      m->n_sequences--;
      break;
    }
  pthread_mutex_unlock(&m->lock);
}

/* Skips a RIFF/WAVE header up to its "data" chunk. */
static size_t wav_header_len(const unsigned char *p, size_t n) {
  if (n < 12 || memcmp(p, "RIFF", 4) || memcmp(p + 8, "WAVE", 4)) return 0;
  size_t off = 12;
  while (off + 8 <= n) {
    uint32_t len = (uint32_t)p[off + 4] | (uint32_t)p[off + 5] << 8 | (uint32_t)p[off + 6] << 16 |
                   (uint32_t)p[off + 7] << 24;
    if (!memcmp(p + off, "data", 4)) return off + 8;
    if (len > n - off - 8) return n;
    off += 8 + len + (len & 1);
  }
  return n;
}

/* Adds a BYTES output of the given strings. */
static hark_error *add_strings(hark_response *resp, const char *name, const char *const *strs,
                               uint32_t n) {
  size_t size = 0;
  for (uint32_t i = 0; i < n; i++) size += 4 + strlen(strs[i]);
  int64_t shape[1] = {n};
  void *buf;
  hark_error *err = hark_response_add_output(resp, name, HARK_TYPE_BYTES, shape, 1, size, &buf);
  char *p = buf;
  for (uint32_t i = 0; !err && i < n; i++) {
    uint32_t len = (uint32_t)strlen(strs[i]);
    memcpy(p, &len, 4);
    memcpy(p + 4, strs[i], len);
    p += 4 + len;
  }
  return err;
}

static hark_error *add_floats(hark_response *resp, const char *name, const float *v, uint32_t n) {
  int64_t shape[1] = {n};
  void *buf;
  hark_error *err =
      hark_response_add_output(resp, name, HARK_TYPE_FP32, shape, 1, 4 * (size_t)n, &buf);
  if (!err && n) memcpy(buf, v, 4 * (size_t)n);
  return err;
}

static hark_error *respond(hark_response *resp, const seq *s, bool final) {
  char text[64], alt[80];
  if (final)
    snprintf(text, sizeof text, "%llu", (unsigned long long)s->utt);
  else
    snprintf(text, sizeof text, "%llu samples", (unsigned long long)s->utt);
  snprintf(alt, sizeof alt, "%s alt", text);
  const char *texts[1] = {text}, *alts[2] = {text, alt};
  float rate = (float)(s->rate ? s->rate : 16000);
  float start = (float)s->utt_start / rate, end = (float)(s->utt_start + s->utt) / rate;
  float one = 1.0f, alt_conf[2] = {1.0f, 0.5f};
  uint32_t nw = final ? 1 : 0;
  void *fin;
  int64_t shape1[1] = {1};
  hark_error *err = add_strings(resp, "TRANSCRIPT", texts, 1);
  if (!err) err = hark_response_add_output(resp, "IS_FINAL", HARK_TYPE_BOOL, shape1, 1, 1, &fin);
  if (!err) *(unsigned char *)fin = final;
  if (!err) err = add_strings(resp, "WORDS", texts, nw);
  if (!err) err = add_floats(resp, "WORD_START", &start, nw);
  if (!err) err = add_floats(resp, "WORD_END", &end, nw);
  if (!err) err = add_floats(resp, "WORD_CONF", &one, nw);
  if (!err) err = add_floats(resp, "CONFIDENCE", &one, 1);
  if (!err) err = add_strings(resp, "ALTERNATIVES", alts, final ? 2 : 0);
  if (!err) err = add_floats(resp, "ALTERNATIVE_CONFIDENCE", alt_conf, final ? 2 : 0);
  return err;
}

static hark_error *run(echo_model *m, hark_request *req, hark_response *resp) {
  uint64_t id = hark_request_correlation_id(req);
  hark_corr_ns ns = hark_request_correlation_ns(req);
  uint32_t flags = hark_request_flags(req);
  seq *s;
  hark_error *err = seq_get(m, ns, id, flags & HARK_REQUEST_SEQUENCE_START, &s);
  if (err) return err;
  const char *profile = hark_request_parameter(req, "profile");
  if (profile) {
    if (flags & HARK_REQUEST_SEQUENCE_END) seq_end(m, ns, id);
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "echo_asr: this model has no latency profiles (asked for '%s')", profile);
  }
  if (flags & HARK_REQUEST_SEQUENCE_START) {
    const char *rate = hark_request_parameter(req, "sample_rate");
    s->rate = rate ? atoi(rate) : 16000;
    if (s->rate <= 0) s->rate = 16000;
  }
  const hark_tensor *in = hark_request_input_by_name(req, "AUDIO");
  const unsigned char *pcm = NULL;
  size_t n = 0;
  if (in && in->byte_size >= 4) {
    uint32_t len;
    memcpy(&len, in->data, 4);
    if (len <= in->byte_size - 4) {
      pcm = (const unsigned char *)in->data + 4;
      n = len;
    }
  }
  if (n >= 4 && !memcmp(pcm, "FAIL", 4)) {
    if (flags & HARK_REQUEST_SEQUENCE_END) seq_end(m, ns, id);
    return hark_error_new(HARK_ERR_INTERNAL, "echo_asr: failing as asked");
  }
  if (n >= 4 && (!memcmp(pcm, "SLOW", 4) || !memcmp(pcm, "LONG", 4))) {
    struct timespec ts = {pcm[0] == 'L' ? 3 : 0, pcm[0] == 'L' ? 0 : 300 * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  if (!s->started_audio && n) {
    size_t skip = wav_header_len(pcm, n);
    pcm += skip;
    n -= skip;
    s->started_audio = true;
  }
  s->utt += n / 2;
  const char *flush = hark_request_parameter(req, "flush");
  bool final = (flush && strcmp(flush, "true") == 0) || (flags & HARK_REQUEST_SEQUENCE_END) ||
               (m->utterance_samples && s->utt >= m->utterance_samples);
  err = respond(resp, s, final);
  if (final) {
    s->utt_start += s->utt;
    s->utt = 0;
  }
  if (flags & HARK_REQUEST_SEQUENCE_END) seq_end(m, ns, id);
  return err;
}

static hark_error *instance_execute(hark_instance *inst, hark_request **reqs, uint32_t n) {
  echo_model *m = hark_model_state(hark_instance_model(inst));
  for (uint32_t i = 0; i < n; i++) {
    hark_response *resp = hark_response_new(reqs[i]);
    hark_error *err = run(m, reqs[i], resp);
    if (err) {
      hark_response_free(resp);
      hark_request_complete(reqs[i], err);
    } else {
      hark_response_send(resp, HARK_RESPONSE_FINAL, NULL);
    }
  }
  return NULL;
}

static const hark_backend_api api = {
    .api_version = HARK_BACKEND_API_VERSION,
    .model_init = model_init,
    .model_fini = model_fini,
    .instance_init = instance_init,
    .instance_fini = instance_fini,
    .instance_execute = instance_execute,
};

HARK_BACKEND_EXPORT const hark_backend_api *hark_backend_get_api(void) { return &api; }
