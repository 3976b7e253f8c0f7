/* Unit tests for src/frontend/security/restrict.c: Triton's restricted-API flags,
 * parsed, and the checks the front ends make with them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "frontend/security/restrict.h"

static void expect_refused(hark_restrict *r, const char *spec, const char *words) {
  hark_error *err = hark_restrict_add(r, "--http-restricted-api", spec);
  assert_non_null(err);
  if (!strstr(hark_error_message(err), words)) fail_msg("%s", hark_error_message(err));
  hark_error_free(err);
}

static void test_parse(void **state) {
  (void)state;
  hark_restrict *r = hark_restrict_new();
  assert_false(hark_restrict_any(r));
  assert_null(hark_restrict_add(r, "f", "inference,model-repository:Admin-Key=a=b c"));
  assert_null(hark_restrict_add(r, "f", "health:k=v"));
  assert_true(hark_restrict_any(r));
  assert_string_equal(hark_restrict_header(r, HARK_API_INFERENCE), "admin-key");
  assert_string_equal(hark_restrict_header(r, HARK_API_MODEL_REPOSITORY), "admin-key");
  assert_string_equal(hark_restrict_header(r, HARK_API_HEALTH), "k");
  assert_null(hark_restrict_header(r, HARK_API_METADATA));
  expect_refused(r, "metadata,health:x=y", "restricted more than once");
  assert_null(hark_restrict_header(r, HARK_API_METADATA)); /* nothing half-applied */
  expect_refused(r, "bogus:x=y", "unknown category 'bogus'");
  expect_refused(r, "metadata", "expects <category>");
  expect_refused(r, "metadata:x", "expects <category>");
  expect_refused(r, ":x=y", "no category");
  expect_refused(r, ",metadata:x=y", "unknown category ''");
  expect_refused(r, "metadata,statistics,:x=y", "empty category");
  expect_refused(r, "metadata,metadata:x=y", "named twice");
  expect_refused(r, "metadata:x y=z", "not a valid header name");
  expect_refused(r, "metadata:=z", "not a valid header name");
  expect_refused(r, "metadata:x=", "printable ASCII");
  expect_refused(r, "metadata:x=a\nb", "printable ASCII");
  hark_restrict_free(r);
  hark_restrict_free(NULL);
}

static void test_checks(void **state) {
  (void)state;
  hark_restrict *r = hark_restrict_new();
  assert_null(hark_restrict_add(r, "f", "inference:admin-key=s3cret"));
  assert_true(hark_restrict_allows(r, HARK_API_HEALTH, NULL, 0));
  assert_false(hark_restrict_allows(r, HARK_API_INFERENCE, NULL, 0));
  assert_false(hark_restrict_allows(r, HARK_API_INFERENCE, "s3cre", 5));
  assert_false(hark_restrict_allows(r, HARK_API_INFERENCE, "s3cret!", 7));
  assert_true(hark_restrict_allows(r, HARK_API_INFERENCE, "s3cret", 6));
  assert_false(hark_restrict_allows(r, HARK_API_UNSET, NULL, 0)); /* unknown: closed */
  assert_true(hark_restrict_allows(NULL, HARK_API_INFERENCE, NULL, 0));
  /* HTTP/2: headers one by one, names in any case. */
  uint32_t m =
      hark_restrict_opens(r, (const uint8_t *)"Admin-Key", 9, (const uint8_t *)"s3cret", 6);
  assert_true(hark_restrict_allows_mask(r, HARK_API_INFERENCE, m));
  m = hark_restrict_opens(r, (const uint8_t *)"admin-key", 9, (const uint8_t *)"nope", 4);
  assert_false(hark_restrict_allows_mask(r, HARK_API_INFERENCE, m));
  assert_true(hark_restrict_allows_mask(r, HARK_API_STATISTICS, 0));
  char msg[128];
  hark_restrict_message(r, HARK_API_INFERENCE, msg, sizeof msg);
  assert_string_equal(msg, "This API is restricted, expecting header 'admin-key'");
  assert_string_equal(hark_api_name(HARK_API_SHARED_MEMORY), "shared-memory");
  hark_restrict_free(r);
}

/* A key header sent twice opens nothing, whichever value is right. */
static void test_repeated(void **state) {
  (void)state;
  hark_restrict *r = hark_restrict_new();
  assert_null(hark_restrict_add(r, "f", "inference,logging:admin-key=s3cret"));
  const uint8_t *k = (const uint8_t *)"admin-key", *good = (const uint8_t *)"s3cret";
  const uint8_t *bad = (const uint8_t *)"guess";
  uint32_t st = 0;
  hark_restrict_collect(r, &st, k, 9, good, 6);
  assert_true(hark_restrict_allows_mask(r, HARK_API_INFERENCE, st));
  hark_restrict_collect(r, &st, (const uint8_t *)"other", 5, bad, 5);
  assert_true(hark_restrict_allows_mask(r, HARK_API_LOGGING, st));
  const uint8_t *orders[][3] = {
      {good, bad, NULL}, {bad, good, NULL}, {good, good, NULL}, {bad, good, good}};
  for (size_t o = 0; o < sizeof orders / sizeof *orders; o++) {
    st = 0;
    for (int i = 0; i < 3 && orders[o][i]; i++)
      hark_restrict_collect(r, &st, (const uint8_t *)(i ? "Admin-Key" : "admin-key"), 9,
                            orders[o][i], orders[o][i] == good ? 6 : 5);
    assert_false(hark_restrict_allows_mask(r, HARK_API_INFERENCE, st));
    assert_false(hark_restrict_allows_mask(r, HARK_API_LOGGING, st));
    assert_true(hark_restrict_allows_mask(r, HARK_API_HEALTH, st));
  }
  char msg[160];
  hark_restrict_message_state(r, HARK_API_INFERENCE, st, msg, sizeof msg);
  assert_string_equal(msg,
                      "This API is restricted, expecting header 'admin-key' once (it was "
                      "sent more than once)");
  hark_restrict_message_state(r, HARK_API_INFERENCE, 0, msg, sizeof msg);
  assert_string_equal(msg, "This API is restricted, expecting header 'admin-key'");
  hark_restrict_free(r);
}

static void test_paths(void **state) {
  (void)state;
  assert_true(hark_restrict_is_path("/usr/share/model"));
  assert_true(hark_restrict_is_path("models/asr/lm.bin"));
  assert_true(hark_restrict_is_path("~/lm"));
  assert_false(hark_restrict_is_path("1e-60"));
  assert_false(hark_restrict_is_path("en-US"));
  assert_false(hark_restrict_is_path(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_checks),
      cmocka_unit_test(test_repeated),
      cmocka_unit_test(test_paths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
