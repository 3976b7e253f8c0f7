/* Unit tests for src/util/log.c: levels, formats, the thread's context
 * ids, and JSON lines that parse whatever the message holds. stderr is
 * pointed at a temporary file for each test. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "util/log.h"

static int saved_stderr = -1;
static FILE *capture;

static int setup(void **state) {
  (void)state;
  capture = tmpfile();
  if (!capture) return -1;
  fflush(stderr);
  saved_stderr = dup(STDERR_FILENO);
  dup2(fileno(capture), STDERR_FILENO);
  hark_log_set_level(HARK_LOG_INFO);
  hark_log_set_format(HARK_LOG_FORMAT_DEFAULT);
  hark_log_context_clear();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  dup2(saved_stderr, STDERR_FILENO);
  close(saved_stderr);
  fclose(capture);
  return 0;
}

/* Everything logged so far (caller frees). */
static char *captured(void) {
  long n = ftell(capture);
  char *buf = calloc(1, (size_t)n + 1);
  rewind(capture);
  size_t got = fread(buf, 1, (size_t)n, capture);
  buf[got] = '\0';
  return buf;
}

static int count_lines(const char *s) {
  int n = 0;
  for (; *s; s++) n += *s == '\n';
  return n;
}

static void test_levels(void **state) {
  (void)state;
  HARK_VERBOSE("hidden %d", 1);
  HARK_INFO("shown %d", 2);
  hark_log_set_enabled(HARK_LOG_INFO, false);
  HARK_INFO("hidden %d", 3);
  HARK_WARN("warned");
  hark_log_set_verbose(1);
  HARK_VERBOSE("verbose now");
  assert_true(hark_log_enabled(HARK_LOG_VERBOSE));
  assert_false(hark_log_enabled(HARK_LOG_INFO));
  char *out = captured();
  assert_null(strstr(out, "hidden"));
  assert_non_null(strstr(out, "shown 2"));
  assert_non_null(strstr(out, "warned"));
  assert_non_null(strstr(out, "verbose now"));
  assert_int_equal(count_lines(out), 3);
  assert_int_equal(out[0], 'I'); /* Triton's default: level letter first */
  free(out);
}

static void test_parse_format(void **state) {
  (void)state;
  hark_log_format f;
  assert_true(hark_log_parse_format("json", &f));
  assert_int_equal(f, HARK_LOG_FORMAT_JSON);
  assert_true(hark_log_parse_format("iso8601", &f));
  assert_int_equal(f, HARK_LOG_FORMAT_ISO8601);
  assert_true(hark_log_parse_format("default", &f));
  assert_int_equal(f, HARK_LOG_FORMAT_DEFAULT);
  assert_false(hark_log_parse_format("xml", &f));
  assert_false(hark_log_parse_format(NULL, &f));
}

static void test_context_ids_in_text(void **state) {
  (void)state;
  hark_log_set_format(HARK_LOG_FORMAT_ISO8601);
  hark_log_context_set("abc123", "42");
  HARK_INFO("with ids");
  hark_log_context saved;
  hark_log_context_save(&saved);
  hark_log_context_clear();
  HARK_INFO("without ids");
  hark_log_context_restore(&saved);
  hark_log_context_set_stream("ws-7");
  HARK_INFO("with stream");
  char *out = captured();
  assert_non_null(strstr(out, "] [request_id=abc123 sequence_id=42] with ids\n"));
  assert_non_null(strstr(out, "] without ids\n"));
  assert_non_null(strstr(out, "[request_id=abc123 sequence_id=42 stream_id=ws-7] with stream"));
  assert_non_null(strstr(out, " unit/test_log.c:"));
  free(out);
}

static cJSON *parse_line(const char *line, size_t len) {
  cJSON *obj = cJSON_ParseWithLength(line, len);
  assert_non_null(obj);
  assert_true(cJSON_IsObject(obj));
  return obj;
}

static void test_json_escapes_anything(void **state) {
  (void)state;
  hark_log_set_format(HARK_LOG_FORMAT_JSON);
  hark_log_context_set("id \"quoted\"\n", NULL);
  /* quotes, backslashes, control bytes, invalid UTF-8, valid UTF-8 */
  HARK_WARN("a \"b\" \\c \x01\t\nd \xff\xfe é €");
  char *out = captured();
  assert_int_equal(count_lines(out), 1);
  cJSON *obj = parse_line(out, strlen(out) - 1);
  assert_string_equal(cJSON_GetObjectItem(obj, "level")->valuestring, "WARNING");
  assert_string_equal(cJSON_GetObjectItem(obj, "message")->valuestring,
                      "a \"b\" \\c \x01\t\nd \xef\xbf\xbd\xef\xbf\xbd é €");
  assert_string_equal(cJSON_GetObjectItem(obj, "request_id")->valuestring, "id \"quoted\"\n");
  assert_null(cJSON_GetObjectItem(obj, "sequence_id"));
  assert_null(cJSON_GetObjectItem(obj, "stream_id"));
  assert_true(cJSON_IsNumber(cJSON_GetObjectItem(obj, "line")));
  assert_string_equal(cJSON_GetObjectItem(obj, "file")->valuestring, "unit/test_log.c");
  assert_true(cJSON_IsNumber(cJSON_GetObjectItem(obj, "thread")));
  cJSON_Delete(obj);
  free(out);
}

static void test_json_long_message_is_cut_whole(void **state) {
  (void)state;
  hark_log_set_format(HARK_LOG_FORMAT_JSON);
  char *big = malloc(20000);
  for (int i = 0; i < 19999; i++) big[i] = "\"\x02\xc3\xa9"[i % 4]; /* escapes and é */
  big[19999] = '\0';
  char id[300];
  memset(id, '"', sizeof id - 1);
  id[sizeof id - 1] = '\0';
  hark_log_context_set(id, "1");
  hark_log_set_enabled(HARK_LOG_ERROR, true);
  HARK_ERROR("%s", big);
  hark_log(HARK_LOG_ERROR, "no source line");
  char *out = captured();
  assert_int_equal(count_lines(out), 2);
  char *nl = strchr(out, '\n');
  cJSON *obj = parse_line(out, (size_t)(nl - out));
  const char *msg = cJSON_GetObjectItem(obj, "message")->valuestring;
  assert_true(strlen(msg) > 1000);
  assert_int_equal(strcmp(msg + strlen(msg) - 3, "..."), 0);
  assert_non_null(cJSON_GetObjectItem(obj, "request_id"));
  assert_string_equal(cJSON_GetObjectItem(obj, "sequence_id")->valuestring, "1");
  cJSON_Delete(obj);
  obj = parse_line(nl + 1, strlen(nl + 1) - 1);
  assert_null(cJSON_GetObjectItem(obj, "file"));
  assert_string_equal(cJSON_GetObjectItem(obj, "message")->valuestring, "no source line");
  cJSON_Delete(obj);
  free(out);
  free(big);
}

static void *other_thread(void *arg) {
  (void)arg;
  HARK_INFO("from another thread");
  return NULL;
}

static void test_context_is_per_thread(void **state) {
  (void)state;
  hark_log_context_set("mine", NULL);
  pthread_t t;
  pthread_create(&t, NULL, other_thread, NULL);
  pthread_join(t, NULL);
  char *out = captured();
  char *line = strstr(out, "from another thread");
  assert_non_null(line);
  assert_null(strstr(out, "mine"));
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_levels, setup, teardown),
      cmocka_unit_test_setup_teardown(test_parse_format, setup, teardown),
      cmocka_unit_test_setup_teardown(test_context_ids_in_text, setup, teardown),
      cmocka_unit_test_setup_teardown(test_json_escapes_anything, setup, teardown),
      cmocka_unit_test_setup_teardown(test_json_long_message_is_cut_whole, setup, teardown),
      cmocka_unit_test_setup_teardown(test_context_is_per_thread, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
