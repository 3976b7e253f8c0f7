/* Unit tests for src/core/request.c and validate.c: building requests,
 * attachments, the exactly-one-final rule, statistics on completion, and
 * validation against a model config. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/core.h"

static const char *CONFIG =
    "name: \"m\"\nbackend: \"simple\"\nmax_batch_size: 4\n"
    "input [ { name: \"A\" data_type: TYPE_INT32 dims: [ 2 ] },"
    "        { name: \"S\" data_type: TYPE_STRING dims: [ -1 ] optional: true } ]\n"
    "output [ { name: \"Y\" data_type: TYPE_INT32 dims: [ 2 ] } ]\n";

static hark_model *fake_model(void) {
  hark_model *m = calloc(1, sizeof *m);
  atomic_init(&m->refs, 1);
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->released, NULL);
  m->name = strdup("m");
  hark_error *err =
      hark_model_config_parse(CONFIG, strlen(CONFIG), "config.pbtxt", "m", &m->config);
  assert_null(err);
  m->stats.n_batch = 4;
  m->stats.batch = calloc(4, sizeof *m->stats.batch);
  return m;
}

static void fake_model_free(hark_model *m) {
  assert_int_equal(atomic_load(&m->refs), 1); /* every request gave its ref back */
  hark_model_config_free(m->config);
  free(m->stats.batch);
  free(m->name);
  free(m);
}

static int attach_freed;
static void count_free(void *p) {
  free(p);
  attach_freed++;
}

typedef struct seen {
  int responses, finals;
  hark_code last_code;
  int32_t y0;
} seen;

static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  seen *s = userp;
  s->responses++;
  if (flags & HARK_RESPONSE_FINAL) s->finals++;
  s->last_code = hark_error_code(err);
  if (resp && hark_response_output_by_name(resp, "Y"))
    s->y0 = ((const int32_t *)hark_response_output_by_name(resp, "Y")->data)[0];
  hark_response_free(resp);
  hark_error_free(err);
}

static hark_request *good_request(hark_model *m, int32_t *data, seen *s) {
  hark_request *req = hark_request_new(m);
  int64_t shape[2] = {1, 2};
  assert_null(hark_request_add_input(req, "A", HARK_TYPE_INT32, shape, 2, data, 8));
  hark_request_set_callback(req, on_response, s);
  return req;
}

static void test_build_and_read(void **state) {
  (void)state;
  hark_model *m = fake_model();
  int32_t data[2] = {7, 8};
  seen s = {0};
  hark_request *req = good_request(m, data, &s);
  hark_request_set_id(req, "r1");
  hark_request_set_priority(req, 2);
  hark_request_set_parameter(req, "k", "v1");
  hark_request_set_parameter(req, "k", "v2");
  hark_request_add_requested_output(req, "Y");
  assert_string_equal(hark_request_id(req), "r1");
  assert_int_equal(hark_request_priority(req), 2);
  assert_string_equal(hark_request_parameter(req, "k"), "v2");
  assert_null(hark_request_parameter(req, "nope"));
  assert_true(hark_request_output_requested(req, "Y"));
  assert_false(hark_request_output_requested(req, "Z"));
  /* The client: none until a front end sets it, copied, cut to fit. */
  assert_string_equal(hark_request_client(req), "");
  char addr[] = "2001:db8::7";
  hark_request_set_client(req, addr);
  addr[0] = 'x';
  assert_string_equal(hark_request_client(req), "2001:db8::7");
  char longer[HARK_REQUEST_CLIENT_MAX + 8];
  memset(longer, 'a', sizeof longer - 1);
  longer[sizeof longer - 1] = '\0';
  hark_request_set_client(req, longer);
  assert_int_equal(strlen(hark_request_client(req)), HARK_REQUEST_CLIENT_MAX - 1);
  hark_request_set_client(req, NULL);
  assert_string_equal(hark_request_client(req), "");
  int64_t shape[2] = {1, 2};
  hark_error *dup = hark_request_add_input(req, "A", HARK_TYPE_INT32, shape, 2, data, 8);
  assert_int_equal(hark_error_code(dup), HARK_ERR_INVALID_ARG);
  hark_error_free(dup);
  attach_freed = 0;
  hark_request_attach(req, malloc(10), count_free);
  hark_request_free(req);
  assert_int_equal(attach_freed, 1);
  assert_int_equal(s.responses, 0);
  fake_model_free(m);
}

/* Many inputs and outputs, with names short and long: the arrays grow
 * past their first room, names past the room kept beside the request or
 * response go to the heap, and each stays readable until it is freed
 * (ASan checks the frees). */
static void test_many_tensors(void **state) {
  (void)state;
  hark_model *m = fake_model();
  hark_request *req = hark_request_new(m);
  hark_response *resp = hark_response_new(req);
  assert_string_equal(hark_response_id(resp), "");
  int32_t data[2] = {1, 2};
  int64_t shape[1] = {2};
  char names[40][48];
  for (int i = 0; i < 40; i++) {
    /* "t0", "tensor-1-xxxx...": every fourth a long one */
    if (i % 4)
      snprintf(names[i], sizeof names[i], "t%d", i);
    else
      snprintf(names[i], sizeof names[i], "tensor-%d-%0*d", i, 30, i);
    assert_null(hark_request_add_input(req, names[i], HARK_TYPE_INT32, shape, 1, data, 8));
    int32_t *y;
    assert_null(
        hark_response_add_output(resp, names[i], HARK_TYPE_INT32, shape, 1, 8, (void **)&y));
    y[0] = i;
    hark_request_set_parameter(req, names[i], names[i]);
    hark_request_attach(req, malloc(4), free);
  }
  assert_int_equal(hark_request_input_count(req), 40);
  assert_int_equal(hark_response_output_count(resp), 40);
  for (int i = 0; i < 40; i++) {
    assert_string_equal(hark_request_input(req, (uint32_t)i)->name, names[i]);
    assert_non_null(hark_request_input_by_name(req, names[i]));
    assert_string_equal(hark_request_parameter(req, names[i]), names[i]);
    const hark_tensor *t = hark_response_output_by_name(resp, names[i]);
    assert_non_null(t);
    assert_int_equal(((const int32_t *)t->data)[0], i);
  }
  /* Taking outputs out (long and short names), then adding after. */
  hark_tensor taken;
  assert_true(hark_response_take_output(resp, names[0], &taken));
  assert_null(taken.name);
  assert_int_equal(((const int32_t *)taken.data)[0], 0);
  free((void *)taken.data);
  assert_true(hark_response_take_output(resp, names[1], &taken));
  free((void *)taken.data);
  assert_false(hark_response_take_output(resp, names[1], &taken));
  int32_t *y;
  assert_null(hark_response_add_output(resp, "after", HARK_TYPE_INT32, shape, 1, 8, (void **)&y));
  assert_int_equal(hark_response_output_count(resp), 39);
  assert_string_equal(hark_response_output(resp, 0)->name, names[2]);
  assert_string_equal(hark_response_output(resp, 38)->name, "after");
  hark_response_free(resp);
  hark_request_free(req);
  fake_model_free(m);
}

static void test_exactly_one_final(void **state) {
  (void)state;
  hark_model *m = fake_model();
  int32_t data[2] = {1, 2};
  seen s = {0};
  hark_request *req = good_request(m, data, &s);
  assert_null(hark_request_validate(req));
  atomic_fetch_add(&m->stats.pending, 1);
  hark_response *r1 = hark_response_new(req);
  hark_response_send(r1, 0, NULL); /* a streamed, non-final response */
  hark_response *r2 = hark_response_new(req);
  int32_t *y;
  int64_t shape[2] = {1, 2};
  assert_null(hark_response_add_output(r2, "Y", HARK_TYPE_INT32, shape, 2, 8, (void **)&y));
  y[0] = 42;
  hark_response_send(r2, HARK_RESPONSE_FINAL, NULL);
  assert_int_equal(s.responses, 2);
  assert_int_equal(s.finals, 1);
  assert_int_equal(s.y0, 42);
  hark_model_stats st;
  hark_model_stats_read(m, &st);
  assert_int_equal(st.success.count, 1);
  assert_int_equal(st.inference_count, 1);
  assert_int_equal(st.pending, 0);
  fake_model_free(m);
}

static void test_complete_with_error_counts_failure(void **state) {
  (void)state;
  hark_model *m = fake_model();
  int32_t data[2] = {1, 2};
  seen s = {0};
  hark_request *req = good_request(m, data, &s);
  atomic_fetch_add(&m->stats.pending, 1);
  hark_request_set_queued_ns(req, hark_now_ns());
  hark_request_complete(req, hark_error_new(HARK_ERR_DEADLINE, "Request timeout expired"));
  assert_int_equal(s.finals, 1);
  assert_int_equal(s.last_code, HARK_ERR_DEADLINE);
  hark_model_stats st;
  hark_model_stats_read(m, &st);
  assert_int_equal(st.fail.count, 1);
  assert_int_equal(st.fail_rejected, 1);
  assert_int_equal(st.success.count, 0);
  fake_model_free(m);
}

static void expect_invalid(hark_request *req, const char *fragment) {
  hark_error *err = hark_request_validate(req);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  if (!strstr(hark_error_message(err), fragment))
    fail_msg("'%s' lacks '%s'", hark_error_message(err), fragment);
  hark_error_free(err);
  hark_request_free(req);
}

static void test_validation(void **state) {
  (void)state;
  hark_model *m = fake_model();
  int32_t data[8] = {0};
  int64_t s12[2] = {1, 2}, s13[2] = {1, 3}, s52[2] = {5, 2}, s22[2] = {2, 2};
  hark_request *req;

  req = hark_request_new(m); /* missing required input */
  expect_invalid(req, "missing required input 'A'");

  req = hark_request_new(m);
  hark_request_add_input(req, "B", HARK_TYPE_INT32, s12, 2, data, 8);
  expect_invalid(req, "unexpected inference input 'B'");

  req = hark_request_new(m);
  hark_request_add_input(req, "A", HARK_TYPE_FP32, s12, 2, data, 8);
  expect_invalid(req, "data-type");

  req = hark_request_new(m);
  hark_request_add_input(req, "A", HARK_TYPE_INT32, s13, 2, data, 12);
  expect_invalid(req, "unexpected shape");

  req = hark_request_new(m);
  hark_request_add_input(req, "A", HARK_TYPE_INT32, s52, 2, data, 40);
  expect_invalid(req, "batch-size must be <= 4");

  req = hark_request_new(m);
  hark_request_add_input(req, "A", HARK_TYPE_INT32, s12, 2, data, 7);
  expect_invalid(req, "byte size mismatch");

  req = hark_request_new(m);
  hark_request_add_input(req, "A", HARK_TYPE_INT32, s12, 2, data, 8);
  hark_request_add_requested_output(req, "Z");
  expect_invalid(req, "unexpected inference output 'Z'");

  /* BYTES: a length that runs past the data */
  uint8_t bad[6] = {9, 0, 0, 0, 'a', 'b'};
  int64_t s11[2] = {1, 1};
  req = hark_request_new(m);
  hark_request_add_input(req, "A", HARK_TYPE_INT32, s12, 2, data, 8);
  hark_request_add_input(req, "S", HARK_TYPE_BYTES, s11, 2, bad, sizeof bad);
  expect_invalid(req, "BYTES");

  /* good, with batch 2 and a BYTES element */
  uint8_t good[6] = {2, 0, 0, 0, 'a', 'b'};
  req = hark_request_new(m);
  hark_request_add_input(req, "A", HARK_TYPE_INT32, s22, 2, data, 16);
  int64_t s21[2] = {2, 1};
  uint8_t two[12] = {2, 0, 0, 0, 'a', 'b', 2, 0, 0, 0, 'c', 'd'};
  (void)good;
  hark_request_add_input(req, "S", HARK_TYPE_BYTES, s21, 2, two, sizeof two);
  assert_null(hark_request_validate(req));
  assert_int_equal(hark_request_batch_size(req), 2);
  hark_request_free(req);
  fake_model_free(m);
}

/* A front end's cancel token: every request holding it reads cancelled
 * once it is set; each holds its own reference, so the front end may drop
 * its own first. */
static void test_cancel_token(void **state) {
  (void)state;
  hark_model *m = fake_model();
  hark_cancel *c = hark_cancel_new();
  hark_request *a = hark_request_new(m), *b = hark_request_new(m), *other = hark_request_new(m);
  hark_request_set_cancel(a, c);
  hark_request_set_cancel(b, c);
  assert_false(hark_request_is_cancelled(a));
  assert_false(hark_request_is_cancelled(other));
  hark_cancel_set(c);
  hark_cancel_unref(c); /* the front end's reference */
  assert_true(hark_request_is_cancelled(a));
  assert_true(hark_request_is_cancelled(b));
  assert_false(hark_request_is_cancelled(other));
  hark_request_set_cancel(b, NULL);
  assert_false(hark_request_is_cancelled(b));
  hark_request_free(a);
  hark_request_free(b);
  hark_request_free(other);
  fake_model_free(m);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_build_and_read),
      cmocka_unit_test(test_many_tensors),
      cmocka_unit_test(test_exactly_one_final),
      cmocka_unit_test(test_complete_with_error_counts_failure),
      cmocka_unit_test(test_validation),
      cmocka_unit_test(test_cancel_token),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
