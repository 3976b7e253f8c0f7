/*
 * settings.c — turns the model's `parameters` into pocketsphinx
 * command-line arguments plus hark's own settings.
 *
 *   hmm, lm, dict            -hmm/-lm/-dict (default: Debian's en-us model)
 *   any key starting with -  that pocketsphinx argument, verbatim
 *                            (e.g. "-beam", "-vad_threshold", "-kws")
 *   vad_threshold            -vad_threshold (speech/noise ratio, dB-ish)
 *   silence_ms               -vad_postspeech: silence that ends an utterance
 *   prespeech_ms             -vad_prespeech: audio kept before speech starts
 *   startspeech_ms           -vad_startspeech: speech needed to open one
 *   decoder_pool_size        decoders at most (default 4 per core)
 *   decoder_pool_preload     decoders made at load, before the model is ready
 *                            (default 1; at most decoder_pool_size)
 *   decoder_wait_ms          wait for a free decoder before UNAVAILABLE
 *   max_buffered_ms          unprocessed audio a stream may hold
 *   block_samples            front-end block (2048, as pocketsphinx_continuous)
 *   max_alternatives         cap on a request's max_alternatives
 *   default_sample_rate      the rate of audio whose stream or request names
 *                            none (16000; Vosk's servers assume 8000)
 *   language_code            informational (e.g. "en-US"): what the model recognises
 *   verbose                  "true": keep the library's log
 * Any other key is an error naming it (a typo must not pass silently).
 */
#include "ps_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hark/audio.h"

#define PS_MODEL_DIR "/usr/share/pocketsphinx/model/en-us"

static int parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out) {
  char *end;
  errno = 0;
  unsigned long x = strtoul(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi) return -1;
  *out = (uint32_t)x;
  return 0;
}

/* Sets argument `name` to `value`, replacing an earlier setting. */
static int set_arg(ps_settings *s, const char *name, const char *value) {
  for (int i = 0; i + 1 < s->argc; i += 2)
    if (strcmp(s->argv[i], name) == 0) {
      char *v = strdup(value);
      if (!v) return -1;
      free(s->argv[i + 1]);
      s->argv[i + 1] = v;
      return 0;
    }
  if (s->argc + 2 > PS_MAX_ARGS) return -1;
  s->argv[s->argc] = strdup(name);
  s->argv[s->argc + 1] = strdup(value);
  if (!s->argv[s->argc] || !s->argv[s->argc + 1]) return -1;
  s->argc += 2;
  return 0;
}

static int set_frames_arg(ps_settings *s, const char *name, const char *ms_value) {
  uint32_t ms;
  if (parse_u32(ms_value, 0, 600000, &ms) != 0) return -1;
  char buf[32];
  snprintf(buf, sizeof buf, "%u", (ms + 5) / 10); /* 100 frames per second */
  return set_arg(s, name, buf);
}

int ps_settings_init(ps_settings *s, ps_param_fn get, void *ctx, char *err, size_t errlen) {
  memset(s, 0, sizeof *s);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  s->pool_size = (uint32_t)(4 * (cores > 0 ? cores : 1));
  s->pool_preload = 1;
  s->decoder_wait_ms = 2000;
  s->max_buffered_ms = 10000;
  s->block_samples = 2048;
  s->max_alternatives = 10;
  s->default_sample_rate = 16000;
  if (set_arg(s, "-hmm", PS_MODEL_DIR "/en-us") ||
      set_arg(s, "-lm", PS_MODEL_DIR "/en-us.lm.bin") ||
      set_arg(s, "-dict", PS_MODEL_DIR "/cmudict-en-us.dict"))
    goto oom;
  const char *key, *v;
  for (uint32_t i = 0; (v = get(ctx, i, &key)) != NULL; i++) {
    int bad = 0;
    if (key[0] == '-') {
      if (set_arg(s, key, v)) goto oom;
    } else if (!strcmp(key, "hmm") || !strcmp(key, "lm") || !strcmp(key, "dict")) {
      char name[8];
      snprintf(name, sizeof name, "-%s", key);
      if (set_arg(s, name, v)) goto oom;
    } else if (!strcmp(key, "vad_threshold")) {
      char *end;
      strtod(v, &end);
      bad = end == v || *end || set_arg(s, "-vad_threshold", v);
    } else if (!strcmp(key, "silence_ms")) {
      bad = set_frames_arg(s, "-vad_postspeech", v);
    } else if (!strcmp(key, "prespeech_ms")) {
      bad = set_frames_arg(s, "-vad_prespeech", v);
    } else if (!strcmp(key, "startspeech_ms")) {
      bad = set_frames_arg(s, "-vad_startspeech", v);
    } else if (!strcmp(key, "decoder_pool_size")) {
      bad = parse_u32(v, 1, 4096, &s->pool_size);
    } else if (!strcmp(key, "decoder_pool_preload")) {
      bad = parse_u32(v, 1, 4096, &s->pool_preload);
    } else if (!strcmp(key, "decoder_wait_ms")) {
      bad = parse_u32(v, 0, 600000, &s->decoder_wait_ms);
    } else if (!strcmp(key, "max_buffered_ms")) {
      bad = parse_u32(v, 1000, 600000, &s->max_buffered_ms);
    } else if (!strcmp(key, "block_samples")) {
      bad = parse_u32(v, 160, 1u << 20, &s->block_samples);
    } else if (!strcmp(key, "max_alternatives")) {
      bad = parse_u32(v, 0, 100, &s->max_alternatives);
    } else if (!strcmp(key, "default_sample_rate")) {
      bad = parse_u32(v, HARK_RESAMPLE_MIN_RATE, HARK_RESAMPLE_MAX_RATE, &s->default_sample_rate);
    } else if (!strcmp(key, "language_code")) {
      /* what the model recognises, for clients that ask (Riva's config) */
    } else if (!strcmp(key, "verbose")) {
      s->verbose = !strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes");
    } else {
      snprintf(err, errlen,
               "pocketsphinx: unknown parameter '%s' (pocketsphinx arguments start with '-', "
               "e.g. '-beam')",
               key);
      ps_settings_fini(s);
      return -1;
    }
    if (bad) {
      snprintf(err, errlen, "pocketsphinx: bad value '%s' for parameter '%s'", v, key);
      ps_settings_fini(s);
      return -1;
    }
  }
  if (s->pool_preload > s->pool_size) {
    snprintf(err, errlen, "pocketsphinx: decoder_pool_preload %u is more than decoder_pool_size %u",
             s->pool_preload, s->pool_size);
    ps_settings_fini(s);
    return -1;
  }
  return 0;
oom:
  snprintf(err, errlen, "pocketsphinx: out of memory (or more than %d arguments)", PS_MAX_ARGS / 2);
  ps_settings_fini(s);
  return -1;
}

void ps_settings_fini(ps_settings *s) {
  for (int i = 0; i < s->argc; i++) free(s->argv[i]);
  s->argc = 0;
}

cmd_ln_t *ps_settings_cmdln(const ps_settings *s, char *err, size_t errlen) {
  char *argv[PS_MAX_ARGS + 1];
  for (int i = 0; i < s->argc; i++) argv[i] = s->argv[i];
  argv[s->argc] = NULL;
  /* strict: an unknown argument is an error, not a warning. */
  cmd_ln_t *c = cmd_ln_parse_r(NULL, ps_args(), s->argc, argv, TRUE);
  if (!c) {
    snprintf(err, errlen,
             "pocketsphinx: the library rejected the arguments (unknown argument or bad value "
             "among:");
    for (int i = 0; i < s->argc; i += 2) {
      size_t n = strlen(err);
      if (n + 4 >= errlen) break;
      snprintf(err + n, errlen - n, " %s=%s", s->argv[i], s->argv[i + 1]);
    }
    size_t n = strlen(err);
    if (n + 2 < errlen) snprintf(err + n, errlen - n, ")");
  }
  return c;
}
