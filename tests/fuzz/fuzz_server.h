/*
 * fuzz_server.h — a real server for the fuzz targets that drive the speech
 * front ends (fuzz_riva.c, fuzz_vosk_ws.c): a model repository made once
 * under /tmp with echo_asr models (the build's test backend, which
 * "recognises" by counting samples), loaded on a server with two workers.
 * Both are removed at exit.
 *
 *   asr       streaming (sequence_batching), en-US, a final every 4000
 *             samples: the speech model a stream naming none runs on
 *   oneshot   the same without sequence_batching (Recognize only)
 *   identity  not a speech model
 */
#ifndef HARK_FUZZ_SERVER_H
#define HARK_FUZZ_SERVER_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hark/server.h"
#include "util/log.h"

#define FUZZ_ECHO_IO                                                           \
  "input [ { name: \"AUDIO\" data_type: TYPE_STRING dims: [ 1 ] } ]\n"         \
  "output [\n"                                                                 \
  "  { name: \"TRANSCRIPT\" data_type: TYPE_STRING dims: [ 1 ] },\n"           \
  "  { name: \"IS_FINAL\" data_type: TYPE_BOOL dims: [ 1 ] },\n"               \
  "  { name: \"WORDS\" data_type: TYPE_STRING dims: [ -1 ] },\n"               \
  "  { name: \"WORD_START\" data_type: TYPE_FP32 dims: [ -1 ] },\n"            \
  "  { name: \"WORD_END\" data_type: TYPE_FP32 dims: [ -1 ] },\n"              \
  "  { name: \"WORD_CONF\" data_type: TYPE_FP32 dims: [ -1 ] },\n"             \
  "  { name: \"CONFIDENCE\" data_type: TYPE_FP32 dims: [ 1 ] },\n"             \
  "  { name: \"ALTERNATIVES\" data_type: TYPE_STRING dims: [ -1 ] },\n"        \
  "  { name: \"ALTERNATIVE_CONFIDENCE\" data_type: TYPE_FP32 dims: [ -1 ] }\n" \
  "]\n"

static char fuzz_repo[256];
static hark_server *fuzz_server;

static void fuzz_model_write(const char *name, const char *config) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", fuzz_repo, name);
  if (mkdir(path, 0755) != 0) abort();
  snprintf(path, sizeof path, "%s/%s/1", fuzz_repo, name);
  if (mkdir(path, 0755) != 0) abort();
  snprintf(path, sizeof path, "%s/%s/config.pbtxt", fuzz_repo, name);
  FILE *f = fopen(path, "w");
  if (!f) abort();
  fprintf(f, "name: \"%s\"\n%s", name, config);
  fclose(f);
}

static int fuzz_rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void fuzz_server_stop(void) {
  hark_server_free(fuzz_server);
  fuzz_server = NULL;
  nftw(fuzz_repo, fuzz_rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static hark_server *fuzz_server_get(void) {
  if (fuzz_server) return fuzz_server;
  hark_log_set_level(HARK_LOG_ERROR); /* what a stream does is not news here */
  snprintf(fuzz_repo, sizeof fuzz_repo, "/tmp/hark_fuzz_XXXXXX");
  if (!mkdtemp(fuzz_repo)) abort();
  fuzz_model_write("asr", "backend: \"echo_asr\"\nmax_batch_size: 0\n" FUZZ_ECHO_IO
                          "sequence_batching { max_sequence_idle_microseconds: 5000000 }\n"
                          "parameters { key: \"utterance_samples\" value: { string_value: "
                          "\"4000\" } }\n"
                          "parameters { key: \"language_code\" value: { string_value: "
                          "\"en-US\" } }\n");
  fuzz_model_write("oneshot", "backend: \"echo_asr\"\nmax_batch_size: 0\n" FUZZ_ECHO_IO);
  fuzz_model_write("identity",
                   "backend: \"identity\"\nmax_batch_size: 0\n"
                   "input [ { name: \"AUDIO\" data_type: TYPE_STRING dims: [ 1 ] } ]\n"
                   "output [ { name: \"OUTPUT0\" data_type: TYPE_STRING dims: [ 1 ] } ]\n");
  const char *dir = getenv("HARK_BACKEND_DIR");
  hark_server_options opts = {
      .model_repository = fuzz_repo,
      .backend_directory = dir && *dir ? dir : HARK_FUZZ_BACKEND_DIR,
      .model_control = HARK_MODEL_CONTROL_NONE,
      .worker_threads = 2,
  };
  hark_error *err = hark_server_new(&opts, &fuzz_server);
  if (err) {
    fprintf(stderr, "fuzz server: %s\n", hark_error_message(err));
    abort();
  }
  atexit(fuzz_server_stop);
  return fuzz_server;
}

#endif
