/*
 * test_repo.h — a temporary model repository and a server on it, for the
 * unit tests that drive the engine through real backends (test_sched.c,
 * test_sequence.c). Include after <cmocka.h>; static, one copy per test.
 */
#ifndef HARK_TEST_REPO_H
#define HARK_TEST_REPO_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "hark/server.h"

static char repo[256];

/* A fresh folder under /tmp named after `tag`. */
static void repo_make(const char *tag) {
  snprintf(repo, sizeof repo, "/tmp/hark_test_%s_XXXXXX", tag);
  assert_non_null(mkdtemp(repo));
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void repo_remove(void) { nftw(repo, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* <repo>/<name>/config.pbtxt (with the name line prepended) and <name>/1. */
static void model_write(const char *name, const char *config) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", repo, name);
  assert_int_equal(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/%s/1", repo, name);
  assert_int_equal(mkdir(path, 0755), 0);
  snprintf(path, sizeof path, "%s/%s/config.pbtxt", repo, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fprintf(f, "name: \"%s\"\n%s", name, config);
  fclose(f);
}

/* A server on the repository, with the build's backends and `opts` for
 * the rest (its repository and backend directory are filled in). */
static hark_server *server_start_with(hark_server_options opts) {
  opts.model_repository = repo;
  opts.backend_directory = getenv("HARK_BACKEND_DIR");
  hark_server *s = NULL;
  hark_error *err = hark_server_new(&opts, &s);
  if (err) fail_msg("server: %s", hark_error_message(err));
  return s;
}

/* The same with every model loaded and 4 workers. */
static hark_server *server_start(void) {
  return server_start_with(
      (hark_server_options){.model_control = HARK_MODEL_CONTROL_NONE, .worker_threads = 4});
}

#endif
