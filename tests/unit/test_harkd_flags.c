/* Unit tests for src/harkd_flags.c and src/util/flags.c: harkd's flag
 * table parses what it promises, refuses a bad value naming the flag, the
 * value and the range, and --help lists every row. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harkd_flags.h"

/* Parses "harkd" + args; what went to err is returned in *msg (caller frees). */
static int parse(harkd_options *o, char **msg, int n, const char *const *args) {
  char *argv[32] = {"harkd"};
  for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
  size_t len;
  FILE *err = open_memstream(msg, &len);
  harkd_options_init(o);
  int rc = harkd_options_parse(o, n + 1, argv, err);
  fclose(err);
  return rc;
}

#define PARSE(o, msg, ...)                                              \
  parse(o, msg, sizeof((const char *[]){__VA_ARGS__}) / sizeof(char *), \
        (const char *[]){__VA_ARGS__})

static char *help_text(void) {
  char *text;
  size_t len;
  FILE *f = open_memstream(&text, &len);
  harkd_usage(f);
  fclose(f);
  return text;
}

/* Whether a row's help gives its default: "default ...", "(required)", or
 * a parenthesised value such as "(1024)", "(60; 0: never)", "(false)". */
static bool says_default(const char *help) {
  if (strstr(help, "default") || strstr(help, "(required)")) return true;
  for (const char *p = strchr(help, '('); p; p = strchr(p + 1, '('))
    if ((p[1] >= '0' && p[1] <= '9') || !strncmp(p + 1, "false", 5) || !strncmp(p + 1, "true", 4))
      return true;
  return false;
}

static void test_help_lists_every_flag(void **state) {
  (void)state;
  char *text = help_text();
  assert_true(harkd_n_flags >= 60);
  for (size_t i = 0; i < harkd_n_flags; i++) {
    const hark_flag *f = &harkd_flags[i];
    char want[128];
    snprintf(want, sizeof want, "\n  --%s%s%s", f->name, f->arg ? " " : "", f->arg ? f->arg : "");
    if (!strstr(text, want)) fail_msg("--help does not list --%s", f->name);
    assert_true(f->help && *f->help);
    if (!says_default(f->help)) fail_msg("--%s's help gives no default", f->name);
    /* The stores write exactly the member's width. */
    switch (f->kind) {
    case HARK_FLAG_STR: assert_int_equal(f->size, sizeof(const char *)); break;
    case HARK_FLAG_BOOL:
    case HARK_FLAG_STRICT_BOOL: assert_int_equal(f->size, sizeof(bool)); break;
    case HARK_FLAG_INT:
      assert_true(f->size == 8 || (f->size == 4 && f->min >= INT32_MIN &&
                                   f->max * (f->scale ? f->scale : 1) <= (long)UINT32_MAX));
      break;
    case HARK_FLAG_FN: assert_non_null(f->set); break;
    }
    for (size_t j = 0; j < i; j++)
      if (!strcmp(harkd_flags[j].name, f->name)) fail_msg("--%s has two rows", f->name);
  }
  /* The layout --help has always had: help at column 30. */
  assert_non_null(strstr(text, "\n  --http-port N               KServe v2 HTTP"));
  assert_non_null(strstr(text, "\n                              connection may have open"));
  free(text);
}

/* Every numeric row refuses a value past its range and one that is no
 * number, naming the flag, the value and the range. */
static void test_bad_value_names_flag_value_range(void **state) {
  (void)state;
  size_t checked = 0;
  for (size_t i = 0; i < harkd_n_flags; i++) {
    const hark_flag *f = &harkd_flags[i];
    if (f->min == 0 && f->max == 0) continue;
    char flag[96], big[32], range[64];
    snprintf(flag, sizeof flag, "--%s", f->name);
    snprintf(big, sizeof big, "%lu", (unsigned long)f->max + 1); /* LONG_MAX + 1 too */
    snprintf(range, sizeof range, "[%ld, %ld]", f->min, f->max);
    const char *bad[] = {big, "12x"};
    for (int b = 0; b < 2; b++) {
      harkd_options o;
      char *msg;
      int rc = PARSE(&o, &msg, "--model-repository", "/m", flag, bad[b]);
      assert_int_equal(rc, HARK_FLAGS_BAD);
      if (!strstr(msg, flag) || !strstr(msg, bad[b]) || !strstr(msg, range))
        fail_msg("%s %s: '%s'", flag, bad[b], msg);
      assert_null(strstr(msg, "usage:")); /* a bad value is not a usage error */
      free(msg);
      harkd_options_free(&o);
    }
    checked++;
  }
  assert_true(checked >= 30);
}

static void test_values_stored(void **state) {
  (void)state;
  harkd_options o;
  char *msg;
  assert_int_equal(
      PARSE(&o, &msg, "--model-store=/m", "--http-port", "9000",
            "--grpc-stream-idle-timeout-secs=5", "--exit-timeout-secs", "0", "--max-streams", "10",
            "--max-inflight-bytes", "4096", "--grpc-keepalive-time", "100", "--model-control-mode",
            "explicit", "--load-model", "a", "--load-model", "b", "--strict-readiness", "no",
            "--speech-model", "kws", "--http-max-input", "2048"),
      HARK_FLAGS_OK);
  assert_string_equal(msg, "");
  free(msg);
  assert_string_equal(o.server.model_repository, "/m");
  assert_int_equal(o.fe.http.http_port, 9000);
  assert_int_equal(o.fe.grpc.stream_idle_timeout_ms, 5000);
  assert_int_equal(o.fe.http.exit_timeout_secs, -1);
  assert_int_equal(o.fe.speech.max_streams, 10);
  assert_int_equal(o.fe.grpc.max_streams_per_connection, 5);
  assert_int_equal(o.inflight_max, 4096);
  assert_int_equal(o.fe.grpc.keepalive_time_ms, 100);
  assert_int_equal(o.server.model_control, HARK_MODEL_CONTROL_EXPLICIT);
  assert_int_equal(o.server.n_load_models, 2);
  assert_string_equal(o.server.load_models[1], "b");
  assert_false(o.server.strict_readiness);
  assert_string_equal(o.fe.speech.speech_model, "kws");
  assert_int_equal(o.fe.http.max_input_size, 2048);         /* a prefix, as getopt allows */
  assert_int_equal(o.fe.grpc.max_message_bytes, 64u << 20); /* untouched: the default */
  harkd_options_free(&o);
}

static void test_refusals(void **state) {
  (void)state;
  harkd_options o;
  char *msg;
  assert_int_equal(PARSE(&o, &msg, "--model-repository", "/m", "--grpc-use-ssl", "yes"),
                   HARK_FLAGS_BAD);
  assert_string_equal(msg, "harkd: --grpc-use-ssl expects true or false, got 'yes'\n");
  free(msg);
  harkd_options_free(&o);
  assert_int_equal(PARSE(&o, &msg, "--model-repository", "/m", "--model-control-mode", "x"),
                   HARK_FLAGS_BAD);
  assert_string_equal(msg, "harkd: --model-control-mode must be none, explicit or poll, got 'x'\n");
  free(msg);
  harkd_options_free(&o);
  assert_int_equal(PARSE(&o, &msg, "--http-port", "1"), HARK_FLAGS_BAD); /* no repository */
  assert_non_null(strstr(msg, "usage: harkd"));
  free(msg);
  harkd_options_free(&o);
  assert_int_equal(PARSE(&o, &msg, "--model-repository", "/m", "--help"), HARK_FLAGS_HELP);
  free(msg);
  harkd_options_free(&o);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_help_lists_every_flag),
      cmocka_unit_test(test_bad_value_names_flag_value_range),
      cmocka_unit_test(test_values_stored),
      cmocka_unit_test(test_refusals),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
