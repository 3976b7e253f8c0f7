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
 *   decoder_pool_spare       idle decoders kept ready by a background thread
 *                            (default 1; 0: a stream that finds none makes one)
 *   final_threads            threads that run utterance-end passes, so a final
 *                            never holds up the stream's or others' next replies
 *                            (default: one per core; 0: on the stream's worker)
 *   decode_threads           threads that decode the chunks of streams inside an
 *                            utterance, so the engine's workers stay free for
 *                            every other stream's chunk and the VAD's forward
 *                            calls (default: one per core; 0: on the worker)
 *   decoder_wait_ms          wait for a free decoder before UNAVAILABLE
 *   max_decoders_per_client  decoders one client (one IP address) may hold at once
 *                            (default decoder_pool_size - max(1, size / 4): 8 -> 6,
 *                            so any other client finds one; 0: no bound)
 *   decoder_idle_ms          a stream holding a decoder whose audio falls this
 *                            far behind the clock gives it back (3000; 0: never)
 *   max_buffered_ms          unprocessed audio a stream may hold
 *   block_samples            front-end block (2048, as pocketsphinx_continuous)
 *   max_alternatives         cap on a request's max_alternatives (100; more
 *                            is refused)
 *   default_sample_rate      the rate of audio whose stream or request names
 *                            none (16000; Vosk's servers assume 8000)
 *   language_code            informational (e.g. "en-US"): what the model recognises
 *   verbose                  "true": keep the library's log
 *   vad_model                a VAD model whose per-frame speech probabilities
 *                            (input VAD_PROB) open and close utterances (hark_vad_gate);
 *                            the speech front ends run it, this backend gates:
 *   speech_threshold, silence_threshold   a frame's probability class (0.5, 0.35)
 *   start_history_ms, start_threshold     speech that opens an utterance (96, 0.6)
 *   stop_history_ms, stop_threshold       silence that closes it (512, 0.95)
 *                            (prespeech_ms: audio kept before the opening window)
 * Any other key is an error naming it (a typo must not pass silently).
 */
#include "ps_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "hark/audio.h"
#include "profile_fast.h"

#define PS_MODEL_DIR "/usr/share/pocketsphinx/model/en-us"

static int parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out) {
  char *end;
  errno = 0;
  unsigned long x = strtoul(v, &end, 10);
  if (errno || end == v || *end || v[0] == '-' || x < lo || x > hi) return -1;
  *out = (uint32_t)x;
  return 0;
}

/* Sets argument `name` to `value` in argv, replacing an earlier setting. */
static int set_in(char **argv, int *argc, const char *name, const char *value) {
  for (int i = 0; i + 1 < *argc; i += 2)
    if (strcmp(argv[i], name) == 0) {
      char *v = strdup(value);
      if (!v) return -1;
      free(argv[i + 1]);
      argv[i + 1] = v;
      return 0;
    }
  if (*argc + 2 > PS_MAX_ARGS) return -1;
  argv[*argc] = strdup(name);
  argv[*argc + 1] = strdup(value);
  if (!argv[*argc] || !argv[*argc + 1]) return -1;
  *argc += 2;
  return 0;
}

static int set_arg(ps_settings *s, const char *name, const char *value) {
  return set_in(s->argv, &s->argc, name, value);
}

int ps_profile_parse(const char *name, ps_profile *out) {
  if (!strcmp(name, "accurate"))
    *out = PS_PROFILE_ACCURATE;
  else if (!strcmp(name, "fast"))
    *out = PS_PROFILE_FAST;
  else
    return -1;
  return 0;
}

const char *ps_profile_name(ps_profile p) { return p == PS_PROFILE_FAST ? "fast" : "accurate"; }

static int parse_bool(const char *v, int *out) {
  if (!strcmp(v, "true") || !strcmp(v, "1") || !strcmp(v, "yes"))
    *out = 1;
  else if (!strcmp(v, "false") || !strcmp(v, "0") || !strcmp(v, "no"))
    *out = 0;
  else
    return -1;
  return 0;
}

/* A fraction or probability in 0..1. */
static int parse_unit(const char *v, float *out) {
  char *end;
  double d = strtod(v, &end);
  if (end == v || *end || !(d >= 0.0 && d <= 1.0)) return -1;
  *out = (float)d;
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
  s->pool_spare = 1;
  s->final_threads = (uint32_t)(cores > 0 ? cores : 1);
  s->decode_threads = (uint32_t)(cores > 0 ? cores : 1);
  s->decoder_wait_ms = 2000;
  s->max_per_client = UINT32_MAX; /* the default, from the pool's size below */
  s->decoder_idle_ms = 3000;
  s->max_buffered_ms = 10000;
  s->block_samples = 2048;
  s->max_alternatives = 100;
  s->default_sample_rate = 16000;
  s->degrade = (ps_degrade_settings){0, 10000, 200, 3, 1000};
  s->gate.on = 0;
  hark_vad_gate_settings_default(&s->gate.g);
  for (size_t i = 0; i < PS_FAST_PROFILE_ARGC; i++)
    if (set_in(s->fast_argv, &s->fast_argc, ps_fast_profile_args[i][0], ps_fast_profile_args[i][1]))
      goto oom;
  if (set_arg(s, "-hmm", PS_MODEL_DIR "/en-us") ||
      set_arg(s, "-lm", PS_MODEL_DIR "/en-us.lm.bin") ||
      set_arg(s, "-dict", PS_MODEL_DIR "/cmudict-en-us.dict"))
    goto oom;
  const char *key, *v;
  for (uint32_t i = 0; (v = get(ctx, i, &key)) != NULL; i++) {
    int bad = 0;
    if (key[0] == '-') {
      if (set_arg(s, key, v)) goto oom;
    } else if (!strncmp(key, "fast:-", 6)) {
      if (set_in(s->fast_argv, &s->fast_argc, key + 5, v)) goto oom;
    } else if (!strcmp(key, "profile")) {
      if (ps_profile_parse(v, &s->profile)) {
        snprintf(err, errlen,
                 "pocketsphinx: parameter 'profile' is '%s'; the profiles are 'accurate' and "
                 "'fast'",
                 v);
        ps_settings_fini(s);
        return -1;
      }
    } else if (!strcmp(key, "degrade")) {
      bad = parse_bool(v, &s->degrade.on);
    } else if (!strcmp(key, "degrade_window_ms")) {
      bad = parse_u32(v, 100, 3600000, &s->degrade.window_ms);
    } else if (!strcmp(key, "degrade_p99_ms")) {
      bad = parse_u32(v, 1, 60000, &s->degrade.bound_ms);
    } else if (!strcmp(key, "degrade_windows")) {
      bad = parse_u32(v, 1, 1000, &s->degrade.windows);
    } else if (!strcmp(key, "breaker_ms")) {
      bad = parse_u32(v, 1, 600000, &s->degrade.breaker_ms);
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
      bad = set_frames_arg(s, "-vad_prespeech", v) ||
            parse_u32(v, 0, 600000, &s->gate.g.prespeech_ms);
    } else if (!strcmp(key, "vad_model")) {
      s->gate.on = *v != '\0';
    } else if (!strcmp(key, "speech_threshold")) {
      bad = parse_unit(v, &s->gate.g.speech_threshold);
    } else if (!strcmp(key, "silence_threshold")) {
      bad = parse_unit(v, &s->gate.g.silence_threshold);
    } else if (!strcmp(key, "start_threshold")) {
      bad = parse_unit(v, &s->gate.g.start_threshold);
    } else if (!strcmp(key, "stop_threshold")) {
      bad = parse_unit(v, &s->gate.g.stop_threshold);
    } else if (!strcmp(key, "start_history_ms")) {
      bad = parse_u32(v, 1, 60000, &s->gate.g.start_history_ms);
    } else if (!strcmp(key, "stop_history_ms")) {
      bad = parse_u32(v, 1, 60000, &s->gate.g.stop_history_ms);
    } else if (!strcmp(key, "startspeech_ms")) {
      bad = set_frames_arg(s, "-vad_startspeech", v);
    } else if (!strcmp(key, "decoder_pool_size")) {
      bad = parse_u32(v, 1, 4096, &s->pool_size);
    } else if (!strcmp(key, "decoder_pool_preload")) {
      bad = parse_u32(v, 1, 4096, &s->pool_preload);
    } else if (!strcmp(key, "decoder_pool_spare")) {
      bad = parse_u32(v, 0, 4096, &s->pool_spare);
    } else if (!strcmp(key, "final_threads")) {
      bad = parse_u32(v, 0, 256, &s->final_threads);
    } else if (!strcmp(key, "decode_threads")) {
      bad = parse_u32(v, 0, 256, &s->decode_threads);
    } else if (!strcmp(key, "max_decoders_per_client")) {
      bad = parse_u32(v, 0, 4096, &s->max_per_client);
    } else if (!strcmp(key, "decoder_wait_ms")) {
      bad = parse_u32(v, 0, 600000, &s->decoder_wait_ms);
    } else if (!strcmp(key, "decoder_idle_ms")) {
      bad = parse_u32(v, 0, 600000, &s->decoder_idle_ms);
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
  if (s->pool_spare > s->pool_size) {
    snprintf(err, errlen, "pocketsphinx: decoder_pool_spare %u is more than decoder_pool_size %u",
             s->pool_spare, s->pool_size);
    ps_settings_fini(s);
    return -1;
  }
  if (s->max_per_client == UINT32_MAX) {
    uint32_t kept = s->pool_size / 4 > 1 ? s->pool_size / 4 : 1; /* for everyone else */
    s->max_per_client = s->pool_size - kept; /* 0 (no bound) for a pool of one */
  } else if (s->max_per_client > s->pool_size) {
    snprintf(err, errlen,
             "pocketsphinx: max_decoders_per_client %u is more than decoder_pool_size %u (0: no "
             "bound)",
             s->max_per_client, s->pool_size);
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
  for (int i = 0; i < s->fast_argc; i++) free(s->fast_argv[i]);
  s->argc = s->fast_argc = 0;
}

cmd_ln_t *ps_settings_cmdln(const ps_settings *s, int fast, char *err, size_t errlen) {
  /* argv, then (fast) each of the profile's arguments replacing the
   * model's of that name or added: the library refuses duplicates. */
  char *argv[2 * PS_MAX_ARGS + 1];
  int argc = s->argc;
  for (int i = 0; i < s->argc; i++) argv[i] = s->argv[i];
  for (int j = 0; fast && j + 1 < s->fast_argc; j += 2) {
    int i = 0;
    while (i < s->argc && strcmp(argv[i], s->fast_argv[j]) != 0) i += 2;
    if (i >= s->argc) {
      argv[argc] = s->fast_argv[j];
      i = argc;
      argc += 2;
    }
    argv[i + 1] = s->fast_argv[j + 1];
  }
  argv[argc] = NULL;
  /* strict: an unknown argument is an error, not a warning. */
  cmd_ln_t *c = cmd_ln_parse_r(NULL, ps_args(), argc, argv, TRUE);
  if (!c) {
    snprintf(err, errlen,
             "pocketsphinx: the library rejected the %sarguments (unknown argument or bad value "
             "among:",
             fast ? "fast profile's " : "");
    for (int i = 0; i < argc; i += 2) {
      size_t n = strlen(err);
      if (n + 4 >= errlen) break;
      snprintf(err + n, errlen - n, " %s=%s", argv[i], argv[i + 1]);
    }
    size_t n = strlen(err);
    if (n + 2 < errlen) snprintf(err + n, errlen - n, ")");
  }
  return c;
}
