/*
 * harkd_flags.h — harkd's command line: every flag is one row of the
 * table in harkd_flags.c (util/flags.h's machinery), which both parses
 * argv into harkd_options and prints --help.
 */
#ifndef HARKD_FLAGS_H
#define HARKD_FLAGS_H

#include <stdint.h>
#include <stdio.h>

#include "frontend/frontends.h"
#include "hark/server.h"
#include "util/flags.h"

#define HARKD_MAX_LOAD_MODELS 64

/* What the flags set: the engine's options, the front ends', and the few
 * values harkd applies itself. */
typedef struct harkd_options {
  hark_server_options server;
  hark_frontend_options fe;
  uint64_t inflight_max;   /* --max-inflight-bytes */
  int memory_release_secs; /* --memory-release-secs */
  const char *loads[HARKD_MAX_LOAD_MODELS];
  bool streams_per_conn_set; /* --grpc-max-streams-per-connection given */
  bool http_ssl;
  const char *http_cert, *http_key;
  hark_restrict *http_restrict, *grpc_restrict; /* owned; harkd_options_free */
} harkd_options;

extern const hark_flag harkd_flags[];
extern const size_t harkd_n_flags;

/* The defaults, as --help gives them. */
void harkd_options_init(harkd_options *o);
/* Parses argv into o (initialised) and settles what the flags imply
 * together (TLS, the per-connection stream cap). HARK_FLAGS_OK, _HELP, or
 * _BAD once err says why (a flag, its value and what it accepts). */
int harkd_options_parse(harkd_options *o, int argc, char **argv, FILE *err);
void harkd_options_free(harkd_options *o);
void harkd_usage(FILE *f);

#endif
