/* Unit tests for src/core/types.c: errors, data type names, shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "hark/types.h"

static void test_error_format_and_code(void **state) {
  (void)state;
  hark_error *err = hark_error_new(HARK_ERR_NOT_FOUND, "model '%s' v%d", "m", 3);
  assert_int_equal(hark_error_code(err), HARK_ERR_NOT_FOUND);
  assert_string_equal(hark_error_message(err), "model 'm' v3");
  assert_int_equal(hark_code_http_status(hark_error_code(err)), 404);
  hark_error_free(err);
  assert_int_equal(hark_error_code(NULL), HARK_OK);
  assert_int_equal(hark_code_http_status(HARK_ERR_UNAVAILABLE), 503);
  assert_int_equal(hark_code_http_status(HARK_ERR_INVALID_ARG), 400);
  assert_string_equal(hark_code_name(HARK_ERR_INVALID_ARG), "INVALID_ARGUMENT");
}

static void test_datatype_names_round_trip(void **state) {
  (void)state;
  for (int i = 1; i < HARK_TYPE_COUNT_; i++) {
    hark_datatype dt = (hark_datatype)i;
    assert_int_equal(hark_datatype_from_name(hark_datatype_name(dt)), dt);
    assert_int_equal(hark_datatype_from_config_name(hark_datatype_config_name(dt)), dt);
  }
  assert_int_equal(hark_datatype_from_name("STRING"), HARK_TYPE_INVALID);
  assert_int_equal(hark_datatype_from_name(NULL), HARK_TYPE_INVALID);
  assert_int_equal(hark_datatype_from_config_name("TYPE_STRING"), HARK_TYPE_BYTES);
  assert_int_equal(hark_datatype_size(HARK_TYPE_FP64), 8);
  assert_int_equal(hark_datatype_size(HARK_TYPE_BYTES), 0);
  assert_int_equal(hark_datatype_size((hark_datatype)999), 0);
}

static void test_shape_count(void **state) {
  (void)state;
  int64_t s[3] = {2, 3, 4};
  assert_int_equal(hark_shape_count(s, 3), 24);
  assert_int_equal(hark_shape_count(s, 0), 1);
  int64_t neg[2] = {2, -1};
  assert_int_equal(hark_shape_count(neg, 2), -1);
  int64_t huge[2] = {INT64_MAX / 2, 3};
  assert_int_equal(hark_shape_count(huge, 2), -1);
  int64_t zero[2] = {0, INT64_MAX};
  assert_int_equal(hark_shape_count(zero, 2), 0);
}

static void test_clock_monotonic(void **state) {
  (void)state;
  uint64_t a = hark_now_ns(), b = hark_now_ns();
  assert_true(b >= a);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_error_format_and_code),
      cmocka_unit_test(test_datatype_names_round_trip),
      cmocka_unit_test(test_shape_count),
      cmocka_unit_test(test_clock_monotonic),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
