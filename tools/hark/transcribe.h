/*
 * transcribe.h — what `hark transcribe` shares between its files:
 * transcribe.c runs the streams (one epoll loop, wsc connections) and fills
 * one tr_job per stream; transcribe_report.c turns the jobs and the latency
 * series into the human report or the --json document.
 */
#ifndef HARK_TOOLS_TRANSCRIBE_H
#define HARK_TOOLS_TRANSCRIBE_H

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
  bool realtime, interim, words, json;
  int chunk_ms, parallel, iterations, timeout_s;
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
  int id;       /* 0.. in start order */
  int file;     /* index into the file table */
  bool silent;  /* sends zeros of the file's length (--silent-fraction) */
  tr_status status;
  char *transcript; /* owned: the finals joined by spaces */
  cJSON *finals;    /* owned: each final reply as received (for --json) */
  int close_code, http_status;
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

/* Prints the end-of-run report (text) or the one JSON object (--json). */
void tr_report(tr_run *r);

#endif
