/*
 * ps_bare.c — the bare-library reference for the speech benchmarks: what
 * pocketsphinx alone costs per second of audio, with nothing of hark's
 * around it.
 *
 * It loads one decoder with the defaults pocketsphinx_continuous uses
 * (Debian's en-us acoustic model, en-us.lm.bin, cmudict-en-us.dict), reads
 * every WAV file into memory, then decodes each one the way the continuous
 * tool decodes a file: 2048-sample blocks through ps_process_raw, an
 * utterance ended whenever ps_get_in_speech turns false, the last one ended
 * with the file. With --partial-ms N it also asks for the partial
 * hypothesis after every N ms of audio inside an utterance, as a streaming
 * server answering each N-ms audio message with a partial must (Vosk's
 * protocol, Riva's interim results). CPU time (getrusage: user + system)
 * counts only the
 * decoding, not the model load or the file reading. Prints each file's
 * transcript and the CPU seconds per second of audio (--json: one object),
 * and the CPU time of each step a streaming reply would wait for — one
 * block (with its partial), and each utterance's end (ps_end_utt, whose
 * -fwdflat second pass re-decodes the utterance): the floor under any
 * server's chunk and final latency on one core.
 * Each file gets a freshly loaded decoder, as `pocketsphinx_continuous
 * -infile FILE` does and as a hark stream starts from the model's initial
 * cepstral mean and a new front end: a decoder carried from one file to
 * the next adapts its cepstral mean and noise estimate to the previous
 * speaker, which changes both the words and the search's cost (seen here:
 * up to 1.7x the CPU on a file decoded cold instead of warm). The loads
 * are not counted.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <err.h> /* sphinxbase: err_set_logfp */
#include <pocketsphinx.h>

#include "hark/audio.h"
#include "profile_fast.h"

#define MODEL_DIR "/usr/share/pocketsphinx/model/en-us"
#define BLOCK_SAMPLES 2048 /* pocketsphinx_continuous reads this much at a time */
#define DECODER_RATE 16000 /* the en-us model's; ps_bare does not resample */
#define MAX_FILE_BYTES (1u << 30)

typedef struct bare_file {
  const char *path;
  int16_t *pcm; /* owned, mono */
  size_t n;
  char *transcript; /* owned: the utterances' hypotheses joined by spaces */
} bare_file;

typedef struct bare_opts {
  const char *hmm, *lm, *dict;
  bool json, verbose;
  int repeat;
  int partial_ms; /* 0: no partial hypotheses */
  bool fast;      /* hark's fast profile's arguments over the defaults */
} bare_opts;

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: ps_bare [options] FILE.wav...\n"
      "Decodes 16 kHz mono 16-bit WAV files with bare pocketsphinx, as pocketsphinx_continuous\n"
      "does, and reports the decoding's CPU seconds per second of audio (model load excluded).\n\n"
      "  --hmm DIR      acoustic model (default " MODEL_DIR
      "/en-us)\n"
      "  --lm FILE      language model (default " MODEL_DIR
      "/en-us.lm.bin)\n"
      "  --dict FILE    dictionary (default " MODEL_DIR
      "/cmudict-en-us.dict)\n"
      "  --repeat K     decode the file list K times (default 1)\n"
      "  --partial-ms N a partial hypothesis per N ms of audio in an utterance (default 0: none)\n"
      "  --profile P    accurate (default: the library's defaults, as pocketsphinx_continuous) or\n"
      "                 fast (hark's fast profile: no second pass, narrower beams)\n"
      "  --json         one JSON object on stdout\n"
      "  --verbose      keep pocketsphinx's log on stderr\n"
      "  -h, --help     this help\n");
}

/* CPU time of each decoding step, in ms: blocks and utterance ends. */
typedef struct step_times {
  double *ms;
  size_t n, cap;
} step_times;
static step_times g_blocks, g_ends;

static double thread_cpu_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void step_add(step_times *t, double ms) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 1024;
    double *g = realloc(t->ms, cap * sizeof *g);
    if (!g) return;
    t->ms = g;
    t->cap = cap;
  }
  t->ms[t->n++] = ms;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (nearest rank) of t, sorting it. */
static double step_quantile(step_times *t, double q) {
  if (!t->n) return 0;
  qsort(t->ms, t->n, sizeof *t->ms, cmp_double);
  size_t i = (size_t)(q * (double)t->n + 0.999999);
  return t->ms[i == 0 ? 0 : i > t->n ? t->n - 1 : i - 1];
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void cpu_s(double *user, double *sys) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6;
  *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

/* ---- input ------------------------------------------------------------------ */

static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  uint8_t *buf = NULL;
  size_t cap = 0, n = 0;
  for (;;) {
    if (n == cap) {
      uint8_t *p = cap < MAX_FILE_BYTES ? realloc(buf, cap ? 2 * cap : 65536) : NULL;
      if (!p) break;
      buf = p;
      cap = cap ? 2 * cap : 65536;
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) {
      bool ok = !ferror(f);
      fclose(f);
      *len = n;
      if (ok) return buf;
      free(buf);
      return NULL;
    }
  }
  fclose(f);
  free(buf);
  errno = ENOMEM;
  return NULL;
}

static int read_wav(bare_file *bf) {
  size_t len;
  uint8_t *buf = slurp(bf->path, &len);
  if (!buf) {
    fprintf(stderr, "ps_bare: %s: %s\n", bf->path, strerror(errno));
    return -1;
  }
  hark_wav_info info;
  char err[256];
  int rc = -1;
  if (hark_wav_parse(buf, len, &info, err, sizeof err) != HARK_WAV_OK)
    fprintf(stderr, "ps_bare: %s: %s\n", bf->path, err);
  else if (info.channels != 1 || info.sample_rate != DECODER_RATE)
    fprintf(stderr, "ps_bare: %s: %u channels at %u Hz; the bare reference takes mono %d Hz only\n",
            bf->path, info.channels, info.sample_rate, DECODER_RATE);
  else if (!(bf->pcm = malloc(info.data_size + 2)))
    fprintf(stderr, "ps_bare: out of memory\n");
  else {
    bf->n = info.data_size / 2;
    for (size_t i = 0; i < bf->n; i++) { /* little-endian in the file */
      const uint8_t *p = buf + info.data_offset + 2 * i;
      bf->pcm[i] = (int16_t)(uint16_t)(p[0] | p[1] << 8);
    }
    rc = 0;
  }
  free(buf);
  return rc;
}

/* ---- decoding ---------------------------------------------------------------- */

static void append(char **dst, const char *hyp) {
  if (!hyp || !*hyp) return;
  size_t old = *dst ? strlen(*dst) : 0, add = strlen(hyp);
  char *p = realloc(*dst, old + add + 2);
  if (!p) return;
  if (old) p[old++] = ' ';
  memcpy(p + old, hyp, add + 1);
  *dst = p;
}

/* One file, utterance by utterance as the decoder's voice activity
 * detection splits it. */
static int decode(ps_decoder_t *ps, bare_file *bf, int partial_ms) {
  free(bf->transcript);
  bf->transcript = NULL;
  if (ps_start_utt(ps) < 0) return -1;
  bool in_utt = false;
  size_t every = (size_t)partial_ms * DECODER_RATE / 1000, since = 0;
  for (size_t off = 0; off < bf->n; off += BLOCK_SAMPLES) {
    size_t k = bf->n - off < BLOCK_SAMPLES ? bf->n - off : BLOCK_SAMPLES;
    double t0 = thread_cpu_ms();
    if (ps_process_raw(ps, bf->pcm + off, k, FALSE, FALSE) < 0) return -1;
    bool speech = ps_get_in_speech(ps);
    if (speech && !in_utt) in_utt = true;
    for (since += k; every && since >= every; since -= every)
      if (in_utt) (void)ps_get_hyp(ps, NULL);
    if (in_utt) step_add(&g_blocks, thread_cpu_ms() - t0);
    if (!speech && in_utt) { /* silence after speech: that utterance is over */
      t0 = thread_cpu_ms();
      ps_end_utt(ps);
      append(&bf->transcript, ps_get_hyp(ps, NULL));
      step_add(&g_ends, thread_cpu_ms() - t0);
      if (ps_start_utt(ps) < 0) return -1;
      in_utt = false;
    }
  }
  double t0 = thread_cpu_ms();
  ps_end_utt(ps);
  if (in_utt) {
    append(&bf->transcript, ps_get_hyp(ps, NULL));
    step_add(&g_ends, thread_cpu_ms() - t0);
  }
  return 0;
}

/* ---- main -------------------------------------------------------------------- */

static int parse_opts(int argc, char **argv, bare_opts *o, int *first_file) {
  *o = (bare_opts){.hmm = MODEL_DIR "/en-us",
                   .lm = MODEL_DIR "/en-us.lm.bin",
                   .dict = MODEL_DIR "/cmudict-en-us.dict",
                   .repeat = 1};
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 1;
    } else if (!strcmp(a, "--json"))
      o->json = true;
    else if (!strcmp(a, "--verbose"))
      o->verbose = true;
    else if (v && !strcmp(a, "--hmm"))
      o->hmm = v, i++;
    else if (v && !strcmp(a, "--lm"))
      o->lm = v, i++;
    else if (v && !strcmp(a, "--dict"))
      o->dict = v, i++;
    else if (v && !strcmp(a, "--repeat") && (o->repeat = atoi(v)) >= 1)
      i++;
    else if (v && !strcmp(a, "--partial-ms") && (o->partial_ms = atoi(v)) >= 0)
      i++;
    else if (v && !strcmp(a, "--profile")) {
      if (strcmp(v, "accurate") && strcmp(v, "fast")) {
        fprintf(stderr, "ps_bare: --profile must be 'accurate' or 'fast', not '%s'\n", v);
        return -1;
      }
      o->fast = !strcmp(v, "fast"), i++;
    } else {
      fprintf(stderr, "ps_bare: bad option '%s'\n", a);
      usage(stderr);
      return -1;
    }
  }
  if (i == argc) {
    fprintf(stderr, "ps_bare: no WAV file given\n");
    usage(stderr);
    return -1;
  }
  *first_file = i;
  return 0;
}

static void report(const bare_opts *o, bare_file *files, int n, double audio, double user,
                   double sys, double wall, double load) {
  double cpu = user + sys, per = audio > 0 ? cpu / audio : 0;
  if (!o->json) {
    for (int i = 0; i < n; i++)
      printf("%s: %s\n", files[i].path, files[i].transcript ? files[i].transcript : "");
    printf(
        "audio %.2f s (%d file%s x %d), decoding CPU %.3f s (user %.3f, sys %.3f), wall %.3f s, "
        "model load %.2f s\n",
        audio, n, n == 1 ? "" : "s", o->repeat, cpu, user, sys, wall, load);
    printf("CPU seconds per audio second: %.4f (RTFX per core %.1f)\n", per, per > 0 ? 1 / per : 0);
    printf(
        "CPU per block in speech (%zu): p50 %.1f ms, p99 %.1f ms, max %.1f ms; per utterance end "
        "(%zu): p50 %.1f ms, max %.1f ms\n",
        g_blocks.n, step_quantile(&g_blocks, 0.5), step_quantile(&g_blocks, 0.99),
        step_quantile(&g_blocks, 1.0), g_ends.n, step_quantile(&g_ends, 0.5),
        step_quantile(&g_ends, 1.0));
    return;
  }
  printf("{\"files\": [");
  for (int i = 0; i < n; i++) {
    printf("%s{\"file\": \"", i ? ", " : "");
    for (const char *p = files[i].path; *p; p++)
      printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
    printf("\", \"audio_seconds\": %.3f, \"transcript\": \"%s\"}",
           (double)files[i].n / DECODER_RATE,
           files[i].transcript ? files[i].transcript : ""); /* hypotheses are lower-case words */
  }
  printf(
      "], \"repeat\": %d, \"audio_seconds\": %.3f, \"cpu_seconds\": %.4f, \"user_seconds\": %.4f, "
      "\"sys_seconds\": %.4f, \"wall_seconds\": %.4f, \"load_seconds\": %.3f, "
      "\"partial_ms\": %d, \"profile\": \"%s\", \"cpu_per_audio_second\": %.6f, \"block_ms\": "
      "{\"n\": %zu, "
      "\"p50\": %.2f, \"p99\": %.2f, \"max\": %.2f}, \"utterance_end_ms\": {\"n\": %zu, "
      "\"p50\": %.2f, \"max\": %.2f}}\n",
      o->repeat, audio, cpu, user, sys, wall, load, o->partial_ms, o->fast ? "fast" : "accurate",
      per, g_blocks.n, step_quantile(&g_blocks, 0.5), step_quantile(&g_blocks, 0.99),
      step_quantile(&g_blocks, 1.0), g_ends.n, step_quantile(&g_ends, 0.5),
      step_quantile(&g_ends, 1.0));
}

int main(int argc, char **argv) {
  bare_opts o;
  int first, rc = parse_opts(argc, argv, &o, &first);
  if (rc) return rc > 0 ? 0 : 2;
  int n = argc - first;
  bare_file *files = calloc((size_t)n, sizeof *files);
  if (!files) return 1;
  for (int i = 0; i < n; i++) {
    files[i].path = argv[first + i];
    if (read_wav(&files[i]) < 0) return 2;
  }
  if (!o.verbose) err_set_logfp(NULL);
  char *args[6 + 2 * PS_FAST_PROFILE_ARGC] = {"-hmm",       (char *)o.hmm, "-lm",
                                              (char *)o.lm, "-dict",       (char *)o.dict};
  int nargs = 6;
  for (size_t k = 0; o.fast && k < PS_FAST_PROFILE_ARGC; k++) {
    args[nargs++] = (char *)ps_fast_profile_args[k][0];
    args[nargs++] = (char *)ps_fast_profile_args[k][1];
  }
  cmd_ln_t *config = cmd_ln_parse_r(NULL, ps_args(), nargs, args, TRUE);
  double load = 0, user = 0, sys = 0, wall = 0, audio = 0;
  for (int r = 0; r < o.repeat; r++)
    for (int i = 0; i < n; i++) {
      double t0 = now_s();
      ps_decoder_t *ps = config ? ps_init(config) : NULL;
      if (!ps) {
        fprintf(stderr, "ps_bare: cannot load the model (hmm %s, lm %s, dict %s)%s\n", o.hmm, o.lm,
                o.dict, o.verbose ? "" : "; --verbose shows why");
        return 1;
      }
      double u0, s0, u1, s1;
      cpu_s(&u0, &s0);
      double t1 = now_s();
      load += t1 - t0;
      if (decode(ps, &files[i], o.partial_ms) < 0) {
        fprintf(stderr, "ps_bare: %s: decoding failed\n", files[i].path);
        return 1;
      }
      wall += now_s() - t1;
      cpu_s(&u1, &s1);
      user += u1 - u0;
      sys += s1 - s0;
      audio += (double)files[i].n / DECODER_RATE;
      ps_free(ps);
    }
  report(&o, files, n, audio, user, sys, wall, load);
  for (int i = 0; i < n; i++) free(files[i].pcm), free(files[i].transcript);
  free(files);
  cmd_ln_free_r(config);
  free(g_blocks.ms);
  free(g_ends.ms);
  return 0;
}
