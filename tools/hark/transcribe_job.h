/*
 * transcribe_job.h — `hark transcribe`'s run and its jobs, as every part
 * of it sees them: transcribe.c parses the options, reads the files and
 * makes the jobs; a driver (transcribe_ws.c over Vosk's WebSocket
 * protocol, transcribe_grpc.c over Riva's StreamingRecognize) runs them,
 * handing each result to the helpers below (transcribe_job.c); and
 * transcribe_report.c turns the jobs and the latency series into the
 * human report or the --json document. The drivers depend on this file,
 * not on transcribe.c that calls them.
 */
#ifndef HARK_TOOLS_TRANSCRIBE_JOB_H
#define HARK_TOOLS_TRANSCRIBE_JOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "stats.h"
#include "wavfile.h"

typedef struct tr_opts {
  const char **files; /* argv entries */
  int n_files;
  const char *server, *model;
  const char *language; /* gRPC: RecognitionConfig.language_code */
  bool realtime, interim, words, json;
  bool grpc; /* --server grpc://HOST:PORT: Riva's gRPC API, else Vosk's WebSocket */
  int chunk_ms, parallel, iterations, timeout_s;
  int stagger_ms; /* realtime: first starts spread over this; -1: one chunk period */
  double silent_fraction;
  /* derived from --server / --model */
  char host[256], port[16], hostport[300], path[1024];
} tr_opts;

typedef struct tr_file {
  const char *path;
  wavfile wav;
  double seconds;
} tr_file;

typedef enum tr_status { TR_PENDING, TR_OK, TR_ERROR, TR_TIMEOUT } tr_status;

/* One stream: one pass of one file over one connection. */
typedef struct tr_job {
  int id;      /* 0.. in start order */
  int file;    /* index into the file table */
  bool silent; /* sends zeros of the file's length (--silent-fraction) */
  tr_status status;
  char *transcript; /* owned: the finals joined by spaces */
  cJSON *finals;    /* owned: each final reply as received (for --json) */
  int close_code, http_status;
  int grpc_status; /* gRPC only: the stream's status code when not OK */
  char reason[512];
} tr_job;

typedef struct tr_run {
  const tr_opts *o;
  tr_file *files;
  tr_job *jobs;
  int n_jobs;
  stats_series chunk_ns, final_ns; /* send → reply latencies */
  uint64_t started_ns, ended_ns;
  double audio_seconds; /* of the streams that finished ok */
} tr_run;

/* ---- what a stream does with its results (transcribe_job.c) ---- */

/* The file's name without its folder, to tag printed lines. */
const char *tr_file_tag(const tr_file *f);
/* Samples per --chunk-ms chunk of a file (at least 1). */
size_t tr_chunk_samples(const tr_opts *o, const tr_file *f);
/* When slot i of n starts, after the run's start: with --simulate-realtime
 * the starts are spread evenly over --stagger-ms (one chunk period by
 * default), else all at once. */
uint64_t tr_start_offset_ns(const tr_opts *o, int i, int n);
/* A partial result: printed with --interim (text mode) when it differs
 * from *last, which keeps the latest (owned; NULL after a final). */
void tr_partial(const tr_opts *o, const tr_file *f, const tr_job *j, const char *text, char **last);
/* A final result in Vosk's shape ({"text": ..., "result": [{word, start,
 * end, conf}...]}): appended to the transcript, printed, and copied into
 * j->finals with --json. Empty texts are skipped. */
void tr_final(const tr_opts *o, const tr_file *f, tr_job *j, const cJSON *doc);
/* The stream's one line when it ends (text mode). */
void tr_print_end(const tr_file *f, const tr_job *j);

#endif
