/*
 * transcribe.c — `hark transcribe`: a streaming speech client over the
 * Vosk WebSocket protocol (transcribe_ws.c) or Riva's gRPC
 * StreamingRecognize (transcribe_grpc.c), modelled on Riva's streaming
 * ASR client. This file owns the run: the options, the files (each read
 * once into memory) and the jobs; transcribe_job.c what a stream does with
 * a partial or a final result, which both drivers share.
 *
 * A run is a list of jobs (one stream each: --iterations passes over
 * max(--parallel, files) streams, cycling through the files) served by
 * --parallel slots, all on ONE thread; each protocol's file runs the
 * slots, and transcribe_report.c prints what the jobs collected.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "hostport.h"
#include "transcribe_grpc.h"
#include "transcribe_job.h"
#include "transcribe_report.h"
#include "transcribe_ws.h"

enum { EXIT_FAILED = 1, EXIT_USAGE = 2 };

#define TR_MAX_PARALLEL 10000

/* ---- options ---------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: hark transcribe FILE.wav... [options]\n"
      "Streams WAV files (16-bit PCM) to harkd's Vosk-compatible WebSocket, or to its Riva\n"
      "StreamingRecognize over gRPC, and prints the transcripts, then a report like Riva's\n"
      "streaming client: RTFX, per-chunk latency (chunk sent -> its reply) and final\n"
      "latency (end of audio -> final result).\n\n"
      "  -s, --server URL          ws://HOST:PORT[/PATH] or HOST:PORT (default localhost:8000),\n"
      "                            or grpc://HOST:PORT (Riva's API; port 8001 when not given)\n"
      "  -m, --model M             stream to /v2/models/M/stream, or over gRPC ask for model M\n"
      "                            (default: the server's speech model; WebSocket: the URL's\n"
      "                            path, else /)\n"
      "      --language-code L     gRPC: the language asked for (default en-US)\n"
      "      --simulate-realtime   send each chunk at real time (default: the next chunk as\n"
      "                            soon as the previous one's reply came)\n"
      "      --chunk-ms MS         audio per message (default 100)\n"
      "      --stagger-ms MS       with --simulate-realtime, spread the first streams' starts\n"
      "                            evenly over MS (default: one chunk period); live streams\n"
      "                            start at any time, so a span longer than the model's\n"
      "                            window spreads where their windows complete\n"
      "  -p, --parallel N          streams at once, on one thread (default 1)\n"
      "  -n, --iterations K        passes over max(N, number of files) streams (default 1)\n"
      "      --interim             also print partial results when they change\n"
      "      --words               ask for word times and confidences, and print them\n"
      "      --silent-fraction F   send silence (zeros) instead of the file on this fraction\n"
      "                            of the streams, e.g. 0.9: 10%% speaking (default 0)\n"
      "      --timeout-secs S      fail a stream whose reply takes longer than S (default 10)\n"
      "      --json                print one JSON object on stdout instead of the text\n"
      "  -h, --help                this help\n\n"
      "Exit status: 0 every stream finished; 1 some stream failed (error or timeout);\n"
      "2 bad usage or an unreadable file.\n");
}

static int bad(const char *fmt, const char *arg) {
  fprintf(stderr, "hark transcribe: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n(see hark transcribe --help)\n");
  return -1;
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return false;
  *out = (int)v;
  return true;
}

/* The model name percent-encoded into /v2/models/{m}/stream. */
static void model_path(const char *model, char *out, size_t cap) {
  size_t n = (size_t)snprintf(out, cap, "/v2/models/");
  for (const unsigned char *p = (const unsigned char *)model; *p && n + 4 < cap; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("-._~", *p))
      out[n++] = (char)*p;
    else
      n += (size_t)snprintf(out + n, cap - n, "%%%02X", *p);
  }
  snprintf(out + n, cap - n, "/stream");
}

static int parse_server(tr_opts *o) {
  const char *s = o->server;
  if (strncmp(s, "wss://", 6) == 0 || strncmp(s, "https://", 8) == 0 ||
      strncmp(s, "grpcs://", 8) == 0)
    return bad("'%s': TLS is not supported; use ws:// or grpc://", s);
  if (strncmp(s, "grpc://", 7) == 0) {
    o->grpc = true;
    s += 7;
    if (s[strcspn(s, "/")] ||
        hark_split_hostport(s, "8001", o->host, sizeof o->host, o->port, sizeof o->port) < 0)
      return bad("bad --server '%s' (grpc://HOST:PORT)", o->server);
    bool v6 = strchr(o->host, ':') != NULL;
    snprintf(o->hostport, sizeof o->hostport, "%s%s%s:%s", v6 ? "[" : "", o->host, v6 ? "]" : "",
             o->port);
    return 0;
  }
  if (strncmp(s, "ws://", 5) == 0)
    s += 5;
  else if (strncmp(s, "http://", 7) == 0)
    s += 7;
  if (hark_split_hostport(s, "8000", o->host, sizeof o->host, o->port, sizeof o->port) < 0)
    return bad("bad --server '%s' (ws://HOST:PORT[/PATH])", o->server);
  size_t hp = strcspn(s, "/");
  snprintf(o->hostport, sizeof o->hostport, "%.*s", (int)hp, s);
  if (o->model)
    model_path(o->model, o->path, sizeof o->path);
  else
    snprintf(o->path, sizeof o->path, "%s", s[hp] ? s + hp : "/");
  return 0;
}

enum {
  O_REALTIME = 256,
  O_CHUNK,
  O_INTERIM,
  O_WORDS,
  O_JSON,
  O_TIMEOUT,
  O_SILENT,
  O_LANGUAGE,
  O_STAGGER
};

static const struct option long_opts[] = {
    {"server", required_argument, NULL, 's'},
    {"model", required_argument, NULL, 'm'},
    {"language-code", required_argument, NULL, O_LANGUAGE},
    {"simulate-realtime", no_argument, NULL, O_REALTIME},
    {"chunk-ms", required_argument, NULL, O_CHUNK},
    {"stagger-ms", required_argument, NULL, O_STAGGER},
    {"parallel", required_argument, NULL, 'p'},
    {"iterations", required_argument, NULL, 'n'},
    {"interim", no_argument, NULL, O_INTERIM},
    {"words", no_argument, NULL, O_WORDS},
    {"silent-fraction", required_argument, NULL, O_SILENT},
    {"timeout-secs", required_argument, NULL, O_TIMEOUT},
    {"json", no_argument, NULL, O_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_one(tr_opts *o, int c, const char *arg) {
  char *end;
  switch (c) {
  case 's': o->server = arg; return 0;
  case 'm': o->model = arg; return 0;
  case O_LANGUAGE: o->language = arg; return 0;
  case 'p':
    return parse_int(arg, 1, TR_MAX_PARALLEL, &o->parallel) ? 0 : bad("bad --parallel '%s'", arg);
  case 'n':
    return parse_int(arg, 1, 1000000, &o->iterations) ? 0 : bad("bad --iterations '%s'", arg);
  case O_CHUNK: return parse_int(arg, 1, 60000, &o->chunk_ms) ? 0 : bad("bad --chunk-ms '%s'", arg);
  case O_STAGGER:
    return parse_int(arg, 0, 600000, &o->stagger_ms) ? 0 : bad("bad --stagger-ms '%s'", arg);
  case O_TIMEOUT:
    return parse_int(arg, 1, 86400, &o->timeout_s) ? 0 : bad("bad --timeout-secs '%s'", arg);
  case O_REALTIME: o->realtime = true; return 0;
  case O_INTERIM: o->interim = true; return 0;
  case O_WORDS: o->words = true; return 0;
  case O_JSON: o->json = true; return 0;
  case O_SILENT:
    errno = 0;
    o->silent_fraction = strtod(arg, &end);
    if (errno || end == arg || *end || !(o->silent_fraction >= 0 && o->silent_fraction <= 1))
      return bad("bad --silent-fraction '%s' (0 to 1)", arg);
    return 0;
  case 'h': usage(stdout); return 1;
  default: return bad("%s", "unknown option");
  }
}

static int parse_opts(int argc, char **argv, tr_opts *o) {
  *o = (tr_opts){.server = "localhost:8000",
                 .language = "en-US",
                 .chunk_ms = 100,
                 .stagger_ms = -1,
                 .parallel = 1,
                 .iterations = 1,
                 .timeout_s = 10};
  optind = 1;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":s:m:p:n:h", long_opts, NULL)) != -1) {
    if (c == '?') return bad("unknown option '%s'", argv[optind - 1]);
    if (c == ':') return bad("option '%s' needs a value", argv[optind - 1]);
    int rc = parse_one(o, c, optarg);
    if (rc) return rc;
  }
  o->files = (const char **)argv + optind;
  o->n_files = argc - optind;
  if (o->n_files == 0) return bad("%s", "no audio file given");
  return parse_server(o);
}

/* ---- setup ---------------------------------------------------------------- */

static int load_files(const tr_opts *o, tr_file *files) {
  char err[512];
  for (int i = 0; i < o->n_files; i++) {
    files[i].path = o->files[i];
    if (wavfile_read(o->files[i], &files[i].wav, err, sizeof err) < 0) {
      fprintf(stderr, "hark transcribe: %s\n", err);
      return -1;
    }
    files[i].seconds = (double)files[i].wav.n / files[i].wav.sample_rate;
  }
  return 0;
}

/* Spreads the silent streams evenly: job j is silent when the running
 * count floor((j+1)·F) steps up at j. */
static bool job_silent(int j, double f) { return (int)((j + 1) * f + 1e-9) > (int)(j * f + 1e-9); }

/* ---- main ---------------------------------------------------------------------- */

/* The jobs: --iterations passes over max(--parallel, files) streams. */
static int setup_jobs(tr_run *run, const tr_opts *o) {
  int per_pass = o->parallel > o->n_files ? o->parallel : o->n_files;
  run->n_jobs = o->iterations * per_pass;
  run->jobs = calloc((size_t)run->n_jobs, sizeof *run->jobs);
  if (!run->jobs) return -1;
  for (int j = 0; j < run->n_jobs; j++)
    run->jobs[j] =
        (tr_job){.id = j, .file = j % o->n_files, .silent = job_silent(j, o->silent_fraction)};
  return 0;
}

static void teardown(tr_run *run) {
  for (int j = 0; run->jobs && j < run->n_jobs; j++) {
    free(run->jobs[j].transcript);
    cJSON_Delete(run->jobs[j].finals);
  }
  free(run->jobs);
  for (int i = 0; run->files && i < run->o->n_files; i++) wavfile_free(&run->files[i].wav);
  free(run->files);
  stats_series_free(&run->chunk_ns);
  stats_series_free(&run->final_ns);
}

int hark_transcribe_main(int argc, char **argv) {
  tr_opts o;
  int rc = parse_opts(argc, argv, &o);
  if (rc) return rc > 0 ? 0 : EXIT_USAGE;
  tr_run run = {.o = &o, .files = calloc((size_t)o.n_files, sizeof(tr_file))};
  rc = EXIT_USAGE;
  if (!run.files || load_files(&o, run.files) < 0) goto out;
  rc = EXIT_FAILED;
  if (setup_jobs(&run, &o) < 0) {
    fprintf(stderr, "hark transcribe: out of memory\n");
    goto out;
  }
  if ((o.grpc ? tr_grpc_run(&run, run.files) : tr_ws_run(&run)) < 0) goto out;
  tr_report(&run);
  rc = 0;
  for (int j = 0; j < run.n_jobs; j++)
    if (run.jobs[j].status != TR_OK) rc = EXIT_FAILED;
out:
  teardown(&run);
  return rc;
}
