/* Unit tests for src/frontend/kserve*.c: parsing KServe v2 infer requests
 * (JSON data of every type, nested arrays, BYTES, the binary tensor data
 * extension) and every kind of bad input; building hark_requests from
 * them; writing responses (JSON and binary outputs); the metadata,
 * statistics and index documents; and one full round trip through a real
 * server on the default model repository. */
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/core.h"
#include "frontend/kserve/kserve.h"

/* ---- helpers --------------------------------------------------------------- */

/* A writable copy of s (parsing decodes strings in place). */
static char *dup_body(const char *s, size_t len) {
  char *b = malloc(len + 1);
  memcpy(b, s, len);
  b[len] = '\0';
  return b;
}

typedef struct parsed_body {
  char *body;
  hark_kserve_request r;
} parsed_body;

static void parse_ok(parsed_body *p, const char *json) {
  p->body = dup_body(json, strlen(json));
  hark_error *err = hark_kserve_parse(p->body, strlen(json), HARK_KSERVE_NO_HEADER_LEN, &p->r);
  if (err) fail_msg("unexpected error: %s", hark_error_message(err));
}

static void parsed_free(parsed_body *p) {
  hark_kserve_request_clear(&p->r);
  free(p->body);
}

static void expect_error(const char *body, size_t len, size_t header_len, const char *fragment) {
  char *b = dup_body(body, len);
  hark_kserve_request r;
  hark_error *err = hark_kserve_parse(b, len, header_len, &r);
  if (!err) fail_msg("no error for %.*s", (int)(len < 200 ? len : 200), body);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  if (!strstr(hark_error_message(err), fragment))
    fail_msg("'%s' lacks '%s'", hark_error_message(err), fragment);
  assert_null(r.arena); /* nothing left to free */
  assert_int_equal(r.n_inputs, 0);
  hark_error_free(err);
  free(b);
}

static void expect_json_error(const char *body, const char *fragment) {
  expect_error(body, strlen(body), HARK_KSERVE_NO_HEADER_LEN, fragment);
}

/* {"inputs":[{"name":"X","shape":SHAPE,"datatype":DT,"data":DATA}]} */
static char *one_input(const char *dt, const char *shape, const char *data) {
  static char buf[4096];
  snprintf(buf, sizeof buf,
           "{\"inputs\":[{\"name\":\"X\",\"shape\":%s,\"datatype\":\"%s\",\"data\":%s}]}", shape,
           dt, data);
  return buf;
}

static const hark_kserve_input *input(const hark_kserve_request *r, const char *name) {
  for (uint32_t i = 0; i < r->n_inputs; i++)
    if (strcmp(r->inputs[i].name, name) == 0) return &r->inputs[i];
  fail_msg("no input '%s'", name);
  return NULL;
}

/* A model that exists only for this test: no server, no backend. */
static const char *CONFIG =
    "name: \"m\"\nbackend: \"simple\"\nmax_batch_size: 4\n"
    "input [ { name: \"A\" data_type: TYPE_INT32 dims: [ 2 ] },"
    "        { name: \"S\" data_type: TYPE_STRING dims: [ -1 ] optional: true } ]\n"
    "output [ { name: \"Y\" data_type: TYPE_INT32 dims: [ 2 ] },"
    "         { name: \"Z\" data_type: TYPE_FP32 dims: [ 2 ] } ]\n";

static hark_model *fake_model(void) {
  hark_model *m = calloc(1, sizeof *m);
  atomic_init(&m->refs, 1);
  pthread_mutex_init(&m->lock, NULL);
  pthread_cond_init(&m->released, NULL);
  m->name = strdup("m");
  m->version = 3;
  assert_null(hark_model_config_parse(CONFIG, strlen(CONFIG), "config.pbtxt", "m", &m->config));
  m->stats.n_batch = 4;
  m->stats.batch = calloc(4, sizeof *m->stats.batch);
  return m;
}

static void fake_model_free(hark_model *m) {
  assert_int_equal(atomic_load(&m->refs), 1);
  hark_model_config_free(m->config);
  free(m->stats.batch);
  free(m->name);
  pthread_mutex_destroy(&m->lock);
  pthread_cond_destroy(&m->released);
  free(m);
}

/* ---- parsing: JSON data ------------------------------------------------------ */

static void test_every_type_as_json(void **state) {
  (void)state;
  parsed_body p;
  parse_ok(&p,
           "{\"inputs\":["
           "{\"name\":\"b\",\"datatype\":\"BOOL\",\"shape\":[2],\"data\":[true,false]},"
           "{\"name\":\"u8\",\"datatype\":\"UINT8\",\"shape\":[2],\"data\":[0,255]},"
           "{\"name\":\"u16\",\"datatype\":\"UINT16\",\"shape\":[2],\"data\":[0,65535]},"
           "{\"name\":\"u32\",\"datatype\":\"UINT32\",\"shape\":[2],\"data\":[0,4294967295]},"
           "{\"name\":\"u64\",\"datatype\":\"UINT64\",\"shape\":[2],"
           "\"data\":[0,18446744073709551615]},"
           "{\"name\":\"i8\",\"datatype\":\"INT8\",\"shape\":[2],\"data\":[-128,127]},"
           "{\"name\":\"i16\",\"datatype\":\"INT16\",\"shape\":[2],\"data\":[-32768,32767]},"
           "{\"name\":\"i32\",\"datatype\":\"INT32\",\"shape\":[2],"
           "\"data\":[-2147483648,2147483647]},"
           "{\"name\":\"i64\",\"datatype\":\"INT64\",\"shape\":[2],"
           "\"data\":[-9223372036854775808,9223372036854775807]},"
           "{\"name\":\"f32\",\"datatype\":\"FP32\",\"shape\":[3],\"data\":[1.5,-2.25e3,7]},"
           "{\"name\":\"f64\",\"datatype\":\"FP64\",\"shape\":[2],\"data\":[1e300,-0.5]},"
           "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],\"data\":[\"hi\",\"\"]}]}");
  const hark_kserve_request *r = &p.r;
  assert_int_equal(r->n_inputs, 12);
  const uint8_t *b = input(r, "b")->data;
  assert_int_equal(input(r, "b")->byte_size, 2);
  assert_true(b[0] == 1 && b[1] == 0);
  const uint8_t *u8 = input(r, "u8")->data;
  assert_true(u8[0] == 0 && u8[1] == 255);
  const uint16_t *u16 = input(r, "u16")->data;
  assert_int_equal(u16[1], 65535);
  const uint32_t *u32 = input(r, "u32")->data;
  assert_true(u32[1] == 4294967295u);
  const uint64_t *u64 = input(r, "u64")->data;
  assert_true(u64[1] == UINT64_MAX);
  assert_int_equal(input(r, "u64")->byte_size, 16);
  const int8_t *i8 = input(r, "i8")->data;
  assert_true(i8[0] == -128 && i8[1] == 127);
  const int16_t *i16 = input(r, "i16")->data;
  assert_true(i16[0] == -32768 && i16[1] == 32767);
  const int32_t *i32 = input(r, "i32")->data;
  assert_true(i32[0] == INT32_MIN && i32[1] == INT32_MAX);
  const int64_t *i64 = input(r, "i64")->data;
  assert_true(i64[0] == INT64_MIN && i64[1] == INT64_MAX);
  const float *f32 = input(r, "f32")->data;
  assert_true(f32[0] == 1.5f && f32[1] == -2250.0f && f32[2] == 7.0f);
  const double *f64 = input(r, "f64")->data;
  assert_true(f64[0] == 1e300 && f64[1] == -0.5);
  const hark_kserve_input *s = input(r, "s");
  assert_int_equal(s->byte_size, 4 + 2 + 4);
  assert_memory_equal(s->data, "\x02\0\0\0hi\0\0\0\0", 10);
  assert_false(s->binary);
  parsed_free(&p);
}

static void test_nested_data_and_shapes(void **state) {
  (void)state;
  parsed_body p;
  parse_ok(&p, one_input("INT32", "[2,2]", "[[1,2],[3,4]]"));
  const int32_t *d = p.r.inputs[0].data;
  assert_int_equal(p.r.inputs[0].ndims, 2);
  assert_true(p.r.inputs[0].shape[0] == 2 && p.r.inputs[0].shape[1] == 2);
  assert_true(d[0] == 1 && d[3] == 4);
  parsed_free(&p);
  /* A scalar (no dims) holds one element; an empty shape dim holds none. */
  parse_ok(&p, one_input("FP64", "[]", "[2.5]"));
  assert_int_equal(p.r.inputs[0].ndims, 0);
  assert_int_equal(p.r.inputs[0].byte_size, 8);
  parsed_free(&p);
  parse_ok(&p, one_input("INT32", "[0,3]", "[]"));
  assert_int_equal(p.r.inputs[0].byte_size, 0);
  parsed_free(&p);
  /* "data" may come before "datatype"; whitespace anywhere. */
  parse_ok(&p,
           " { \"inputs\" : [ { \"data\" : [ 7 , 8 ] , \"shape\" : [ 2 ] ,"
           " \"name\" : \"X\" , \"datatype\" : \"INT16\" } ] } \n");
  const int16_t *s = p.r.inputs[0].data;
  assert_true(s[0] == 7 && s[1] == 8);
  parsed_free(&p);
}

/* Flat integer arrays take a one-loop path; these sit on its edges (and
 * past them, where the general walk takes over): every value must come
 * out the same either way. */
static void test_flat_integer_arrays(void **state) {
  (void)state;
  parsed_body p;
  parse_ok(&p, one_input("UINT8", "[4]", "[0,255,-0,\t7 ]"));
  const uint8_t *u8 = p.r.inputs[0].data;
  assert_true(u8[0] == 0 && u8[1] == 255 && u8[2] == 0 && u8[3] == 7);
  parsed_free(&p);
  parse_ok(&p, one_input("INT16", "[3]", "[ -32768 ,\n32767, 0]"));
  const int16_t *i16 = p.r.inputs[0].data;
  assert_true(i16[0] == -32768 && i16[1] == 32767 && i16[2] == 0);
  parsed_free(&p);
  /* 18 digits (the loop's most), then 19 and 20 (the general walk's). */
  parse_ok(&p, one_input("INT64", "[4]",
                         "[999999999999999999,-999999999999999999,"
                         "-9223372036854775808,9223372036854775807]"));
  const int64_t *i64 = p.r.inputs[0].data;
  assert_true(i64[0] == 999999999999999999 && i64[1] == -999999999999999999);
  assert_true(i64[2] == INT64_MIN && i64[3] == INT64_MAX);
  parsed_free(&p);
  parse_ok(&p, one_input("UINT64", "[2]", "[18446744073709551615,1]"));
  const uint64_t *u64 = p.r.inputs[0].data;
  assert_true(u64[0] == UINT64_MAX && u64[1] == 1);
  parsed_free(&p);
  parse_ok(&p, one_input("UINT32", "[2]", "[4294967295,1]"));
  const uint32_t *u32 = p.r.inputs[0].data;
  assert_true(u32[0] == UINT32_MAX && u32[1] == 1);
  parsed_free(&p);
  /* Not JSON, or not integers: refused as before. */
  expect_json_error(one_input("INT32", "[2]", "[01,2]"), "malformed JSON");
  expect_json_error(one_input("INT32", "[2]", "[1,]"), "malformed JSON");
  expect_json_error(one_input("INT32", "[2]", "[1 2]"), "malformed JSON");
  expect_json_error(one_input("INT32", "[2]", "[1,-]"), "malformed JSON");
  expect_json_error(one_input("INT32", "[2]", "[1,2.0]"), "element 1 is not an integer");
  expect_json_error(one_input("INT32", "[2]", "[1,2E1]"), "element 1 is not an integer");
  expect_json_error(one_input("INT32", "[3]", "[1,2]"), "needs 3 elements but 'data' holds 2");
  expect_json_error(one_input("INT32", "[2]", "[1,2,3]"), "needs 2 elements but 'data' holds 3");
  expect_json_error(one_input("UINT16", "[2]", "[1,-1]"), "element 1 is not an integer in range");
}

static void test_bytes_escapes(void **state) {
  (void)state;
  parsed_body p;
  /* escapes, 2/3/4-byte UTF-8 from \u (with a surrogate pair), raw UTF-8
   * and an embedded NUL */
  parse_ok(&p, one_input("BYTES", "[3]",
                         "[\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\","
                         "\"\\u00e9\\u20ac\\ud83d\\ude00\xc3\xa9\",\"x\\u0000y\"]"));
  const hark_kserve_input *in = &p.r.inputs[0];
  const char want[] =
      "\x09\0\0\0a\"\\/\b\f\n\r\t"
      "\x0b\0\0\0\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xa9"
      "\x03\0\0\0x\0y";
  assert_int_equal(in->byte_size, sizeof want - 1);
  assert_memory_equal(in->data, want, sizeof want - 1);
  parsed_free(&p);
}

static void test_request_fields(void **state) {
  (void)state;
  parsed_body p;
  parse_ok(&p,
           "{\"id\":\"r\\u00e9q\",\"unknown\":{\"deep\":[1,{\"x\":null}]},"
           "\"parameters\":{\"priority\":2,\"timeout\":1500,\"sequence_id\":42,"
           "\"sequence_start\":true,\"sequence_end\":false,\"custom\":\"v\","
           "\"ratio\":0.5,\"flag\":true,\"binary_data_output\":true},"
           "\"inputs\":[{\"name\":\"A\",\"shape\":[1,2],\"datatype\":\"INT32\","
           "\"data\":[1,2],\"parameters\":{\"other\":[1]}}],"
           "\"outputs\":[{\"name\":\"Y\",\"parameters\":{\"binary_data\":false}},"
           "{\"name\":\"Z\"}]}");
  const hark_kserve_request *r = &p.r;
  assert_string_equal(r->id, "r\xc3\xa9q");
  assert_true(r->binary_data_output);
  assert_int_equal(r->n_params, 8);
  assert_int_equal(r->n_outputs, 2);
  assert_string_equal(r->outputs[0].name, "Y");
  assert_int_equal(r->outputs[0].binary, 0);
  assert_int_equal(r->outputs[1].binary, -1);

  hark_model *m = fake_model();
  hark_request *req = hark_request_new(m);
  assert_null(hark_kserve_to_request(&p.r, NULL, req));
  assert_string_equal(hark_request_id(req), "r\xc3\xa9q");
  assert_int_equal(hark_request_priority(req), 2);
  assert_int_equal(hark_request_timeout_us(req), 1500);
  assert_int_equal(hark_request_correlation_id(req), 42);
  assert_int_equal(hark_request_flags(req), HARK_REQUEST_SEQUENCE_START);
  assert_string_equal(hark_request_parameter(req, "custom"), "v");
  assert_string_equal(hark_request_parameter(req, "ratio"), "0.5");
  assert_string_equal(hark_request_parameter(req, "flag"), "true");
  assert_null(hark_request_parameter(req, "priority"));
  assert_int_equal(hark_request_requested_output_count(req), 2);
  assert_null(hark_request_validate(req));
  assert_int_equal(hark_request_batch_size(req), 1);
  hark_request_free(req); /* frees the arena the request took over */
  free(p.body);
  fake_model_free(m);

  parse_ok(&p, "{\"inputs\":[],\"parameters\":{\"sequence_id\":\"abc\",\"sequence_end\":true}}");
  m = fake_model();
  req = hark_request_new(m);
  assert_null(hark_kserve_to_request(&p.r, NULL, req));
  assert_string_equal(hark_request_correlation_id_str(req), "abc");
  assert_int_equal(hark_request_flags(req), HARK_REQUEST_SEQUENCE_END);
  hark_request_free(req);
  free(p.body);
  fake_model_free(m);
}

/* to_request refusals leave the arena with the parsed request. */
static void expect_request_error(const char *json, const char *fragment) {
  parsed_body p;
  parse_ok(&p, json);
  hark_model *m = fake_model();
  hark_request *req = hark_request_new(m);
  hark_error *err = hark_kserve_to_request(&p.r, NULL, req);
  if (!err) fail_msg("no error for %s", json);
  if (!strstr(hark_error_message(err), fragment))
    fail_msg("'%s' lacks '%s'", hark_error_message(err), fragment);
  hark_error_free(err);
  hark_request_free(req);
  parsed_free(&p);
  fake_model_free(m);
}

static void test_bad_parameters(void **state) {
  (void)state;
  expect_request_error("{\"inputs\":[],\"parameters\":{\"priority\":-1}}", "priority");
  /* shared memory named with no registry (harkd without --allow-shared-memory=true) */
  expect_request_error(
      "{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT32\",\"parameters\":"
      "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4}}]}",
      "--allow-shared-memory=true");
  expect_request_error(
      "{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":"
      "{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":4}}]}",
      "--allow-shared-memory=true");
  expect_request_error("{\"inputs\":[],\"parameters\":{\"priority\":\"high\"}}", "priority");
  expect_request_error("{\"inputs\":[],\"parameters\":{\"priority\":4294967296}}", "priority");
  expect_request_error("{\"inputs\":[],\"parameters\":{\"timeout\":1.5}}", "timeout");
  expect_request_error("{\"inputs\":[],\"parameters\":{\"sequence_id\":-3}}", "sequence_id");
  expect_request_error("{\"inputs\":[],\"parameters\":{\"sequence_start\":1}}", "sequence_start");
  expect_request_error(
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\","
      "\"data\":[1]},{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\","
      "\"data\":[2]}]}",
      "more than once");
  expect_json_error("{\"inputs\":[],\"parameters\":{\"binary_data_output\":1}}",
                    "binary_data_output");
  expect_json_error("{\"inputs\":[],\"parameters\":{\"x\":null}}", "parameter 'x'");
  expect_json_error("{\"inputs\":[],\"parameters\":{\"x\":[1]}}", "parameter 'x'");
  expect_json_error("{\"inputs\":[],\"parameters\":[]}", "expected an object");
  expect_json_error("{\"inputs\":[],\"id\":5}", "'id' must be a string");
}

/* A body with `n` parameters "p0".."p<n-1>" (malloc'd). */
static char *params_body(uint32_t n) {
  size_t cap = 64 + (size_t)n * 24;
  char *b = malloc(cap);
  size_t used = (size_t)snprintf(b, cap, "{\"inputs\":[],\"parameters\":{");
  for (uint32_t i = 0; i < n; i++)
    used += (size_t)snprintf(b + used, cap - used, "%s\"p%u\":%u", i ? "," : "", i, i);
  snprintf(b + used, cap - used, "}}");
  return b;
}

/* Issue 13, finding 3: what a request may hold is bounded before any of it
 * is applied (each parameter and input is looked up by name). */
static void test_request_counts(void **state) {
  (void)state;
  char *ok = params_body(HARK_KSERVE_MAX_PARAMETERS);
  parsed_body p;
  parse_ok(&p, ok);
  assert_int_equal(p.r.n_params, HARK_KSERVE_MAX_PARAMETERS);
  hark_model *m = fake_model();
  hark_request *req = hark_request_new(m);
  assert_null(hark_kserve_to_request(&p.r, NULL, req));
  assert_string_equal(hark_request_parameter(req, "p63"), "63");
  hark_request_free(req);
  free(p.body);
  fake_model_free(m);
  free(ok);
  /* One more, or a flood: refused at the first one over, naming the limit. */
  char *over = params_body(HARK_KSERVE_MAX_PARAMETERS + 1);
  expect_json_error(over, "more than 64 parameters; at most 64 are allowed");
  free(over);
  over = params_body(150000);
  expect_json_error(over, "at most 64 are allowed");
  free(over);
  expect_json_error(
      "{\"inputs\":[],\"parameters\":{\"binary_data_output\":true,"
      "\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1,"
      "\"k\":1,\"l\":1,\"m\":1,\"n\":1,\"o\":1,\"p\":1,\"q\":1,\"r\":1,\"s\":1,\"t\":1,"
      "\"u\":1,\"v\":1,\"w\":1,\"x\":1,\"y\":1,\"z\":1,\"A\":1,\"B\":1,\"C\":1,\"D\":1,"
      "\"E\":1,\"F\":1,\"G\":1,\"H\":1,\"I\":1,\"J\":1,\"K\":1,\"L\":1,\"M\":1,\"N\":1,"
      "\"O\":1,\"P\":1,\"Q\":1,\"R\":1,\"S\":1,\"T\":1,\"U\":1,\"V\":1,\"W\":1,\"X\":1,"
      "\"Y\":1,\"Z\":1,\"0\":1,\"1\":1,\"2\":1,\"3\":1,\"4\":1,\"5\":1,\"6\":1,\"7\":1,"
      "\"8\":1,\"9\":1,\"_\":1,\"-\":1}}",
      "at most 64"); /* binary_data_output counts */
  /* No more inputs than the model has: over it, the first one the model
   * lacks or given twice is named (and the rest never looked at). */
  expect_request_error(
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]},"
      "{\"name\":\"S\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]},"
      "{\"name\":\"C\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]}]}",
      "unexpected inference input 'C' for model 'm'");
  expect_request_error(
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]},"
      "{\"name\":\"S\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]},"
      "{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]}]}",
      "input 'A' is given more than once");
  expect_request_error(
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]},"
      "{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]}]}",
      "input 'A' is given more than once");
  expect_request_error(
      "{\"inputs\":[],\"outputs\":[{\"name\":\"Y\"},{\"name\":\"Z\"},"
      "{\"name\":\"Y\"}]}",
      "request asks for 3 outputs but model 'm' has only 2");
}

/* ---- parsing: bad JSON and bad data --------------------------------------------- */

static void test_malformed_json(void **state) {
  (void)state;
  expect_json_error("", "empty");
  expect_json_error("   ", "empty");
  expect_json_error("{\"inputs\": [", "malformed JSON");
  expect_json_error("not json at all", "malformed JSON");
  expect_json_error("[1,2]", "expected an object");
  expect_json_error("{\"inputs\":[]} x", "unexpected data after");
  expect_json_error("{\"inputs\":[]}{}", "unexpected data after");
  expect_json_error("{\"inputs\":[],}", "malformed JSON");
  expect_json_error("{\"inputs\" []}", "expected ':'");
  expect_json_error("{inputs:[]}", "expected a string");
  expect_json_error("{\"a\":tru,\"inputs\":[]}", "expected a value");
  expect_json_error("{\"a\":01,\"inputs\":[]}", "expected ','");
  expect_json_error("{\"a\":1.,\"inputs\":[]}", "bad number");
  expect_json_error("{\"a\":1e,\"inputs\":[]}", "bad number");
  expect_json_error("{\"a\":\"\\x\",\"inputs\":[]}", "bad string");
  expect_json_error("{\"a\":\"\\ud800\",\"inputs\":[]}", "bad string");
  expect_json_error("{\"a\":\"\\udc00\",\"inputs\":[]}", "bad string");
  expect_json_error("{\"a\":\"\\u12\",\"inputs\":[]}", "bad string");
  expect_json_error("{\"a\":\"tab\there\",\"inputs\":[]}", "bad string");
  expect_json_error("{\"a\":\"unterminated", "bad string");
  expect_json_error("{\"id\":\"x\"}", "no 'inputs'");
  expect_json_error("{\"inputs\":[],\"inputs\":[]}", "'inputs' appears more than once");
  expect_json_error("{\"inputs\":[],\"outputs\":[],\"outputs\":[]}", "'outputs' appears");
  expect_json_error("{\"parameters\":{},\"inputs\":[],\"parameters\":{}}", "'parameters' appears");
  char deep[400];
  int n = 0;
  n += snprintf(deep + n, sizeof deep - (size_t)n, "{\"x\":");
  for (int i = 0; i < 70; i++) deep[n++] = '[';
  for (int i = 0; i < 70; i++) deep[n++] = ']';
  snprintf(deep + n, sizeof deep - (size_t)n, ",\"inputs\":[]}");
  expect_json_error(deep, "nested too deeply");
  /* A NUL byte inside the body is not JSON. */
  expect_error("{\"inputs\":[]}\0", 14, HARK_KSERVE_NO_HEADER_LEN, "unexpected data after");
}

static void test_bad_inputs(void **state) {
  (void)state;
  expect_json_error("{\"inputs\":{}}", "expected an array");
  expect_json_error("{\"inputs\":[1]}", "expected an object");
  expect_json_error("{\"inputs\":[{\"shape\":[1],\"datatype\":\"INT8\",\"data\":[1]}]}",
                    "no 'name'");
  expect_json_error("{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"data\":[1]}]}",
                    "'X' has no 'datatype'");
  expect_json_error("{\"inputs\":[{\"name\":\"X\",\"datatype\":\"INT8\",\"data\":[1]}]}",
                    "'X' has no 'shape'");
  expect_json_error("{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT8\"}]}",
                    "'X' has no 'data'");
  expect_json_error(one_input("INT3", "[1]", "[1]"), "unknown datatype 'INT3'");
  expect_json_error(one_input("INT8", "[-1]", "[1]"), "non-negative");
  expect_json_error(one_input("INT8", "[1.5]", "[1]"), "non-negative");
  expect_json_error(one_input("INT8", "[\"1\"]", "[1]"), "array of integers");
  expect_json_error(one_input("INT8", "[1,1,1,1,1,1,1,1,1]", "[1]"), "more than 8");
  expect_json_error(one_input("INT8", "[4294967296,4294967296]", "[1]"), "too many elements");
  expect_json_error(one_input("INT8", "[3]", "[1,2]"), "needs 3 elements but 'data' holds 2");
  expect_json_error(one_input("INT8", "[1]", "[1,2]"), "needs 1 elements but 'data' holds 2");
  expect_json_error(one_input("INT8", "[100000]", "[1,2]"), "needs 100000 elements");
  expect_json_error(one_input("INT8", "[1]", "1"), "'data' must be an array");
  expect_json_error(one_input("INT8", "[1]", "[128]"), "element 0 is not an integer in range");
  expect_json_error(one_input("INT8", "[2]", "[0,-129]"), "element 1");
  expect_json_error(one_input("UINT8", "[1]", "[-1]"), "UINT8");
  expect_json_error(one_input("UINT16", "[1]", "[65536]"), "UINT16");
  expect_json_error(one_input("UINT32", "[1]", "[4294967296]"), "UINT32");
  expect_json_error(one_input("UINT64", "[1]", "[18446744073709551616]"), "UINT64");
  expect_json_error(one_input("INT64", "[1]", "[9223372036854775808]"), "INT64");
  expect_json_error(one_input("INT64", "[1]", "[-9223372036854775809]"), "INT64");
  expect_json_error(one_input("INT32", "[1]", "[1.5]"), "INT32");
  expect_json_error(one_input("INT32", "[1]", "[1e3]"), "INT32");
  expect_json_error(one_input("INT32", "[1]", "[true]"), "a number (INT32)");
  expect_json_error(one_input("BOOL", "[1]", "[1]"), "a boolean (BOOL)");
  expect_json_error(one_input("FP32", "[1]", "[\"1\"]"), "a number (FP32)");
  expect_json_error(one_input("FP32", "[1]", "[1e39]"), "range for FP32");
  expect_json_error(one_input("FP64", "[1]", "[1e309]"), "range for FP64");
  expect_json_error(one_input("FP32", "[1]", "[null]"), "a number (FP32)");
  expect_json_error(one_input("BYTES", "[1]", "[1]"), "a string (BYTES)");
  expect_json_error(one_input("BYTES", "[1]", "[{\"a\":1}]"), "a string (BYTES)");
  expect_json_error(one_input("FP16", "[1]", "[1.0]"), "binary data");
  expect_json_error(one_input("BF16", "[1]", "[1.0]"), "binary data");
  expect_json_error(
      "{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT8\","
      "\"data\":[1],\"parameters\":{\"shared_memory_region\":\"r\"}}]}",
      "no shared_memory_byte_size");
  expect_json_error(
      "{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT8\","
      "\"data\":[1],\"parameters\":{\"shared_memory_region\":\"r\","
      "\"shared_memory_byte_size\":1}}]}",
      "as well as in shared memory");
  expect_json_error(
      "{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT8\","
      "\"parameters\":{\"shared_memory_offset\":0}}]}",
      "no shared_memory_region");
  expect_json_error(
      "{\"inputs\":[{\"name\":\"X\",\"shape\":[1],\"datatype\":\"INT8\","
      "\"parameters\":{\"shared_memory_region\":\"r\",\"shared_memory_byte_size\":-1}}]}",
      "shared_memory_byte_size must be a non-negative integer");
}

static void test_bad_outputs(void **state) {
  (void)state;
  expect_json_error("{\"inputs\":[],\"outputs\":[{\"parameters\":{}}]}", "no 'name'");
  expect_json_error(
      "{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":"
      "{\"binary_data\":\"yes\"}}]}",
      "binary_data");
  expect_json_error(
      "{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":"
      "{\"classification\":3}}]}",
      "not supported");
  expect_json_error("{\"inputs\":[],\"outputs\":{}}", "expected an array");
  expect_json_error(
      "{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":"
      "{\"shared_memory_region\":\"r\"}}]}",
      "no shared_memory_byte_size");
  expect_json_error(
      "{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":"
      "{\"shared_memory_byte_size\":4}}]}",
      "no shared_memory_region");
}

/* ---- parsing: binary tensor data ------------------------------------------------ */

/* header + blobs as one body; returns its length, header length in *hlen. */
static size_t binary_body(char *out, const char *header, const void *blob, size_t blob_len,
                          size_t *hlen) {
  *hlen = strlen(header);
  memcpy(out, header, *hlen);
  memcpy(out + *hlen, blob, blob_len);
  return *hlen + blob_len;
}

static void test_binary_inputs(void **state) {
  (void)state;
  char body[512];
  size_t hlen;
  const char *header =
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[1,2],\"datatype\":\"INT32\","
      "\"parameters\":{\"binary_data_size\":8}},"
      "{\"name\":\"S\",\"shape\":[1,2],\"datatype\":\"BYTES\","
      "\"parameters\":{\"binary_data_size\":13}},"
      "{\"name\":\"H\",\"shape\":[3],\"datatype\":\"FP16\","
      "\"parameters\":{\"binary_data_size\":6}},"
      "{\"name\":\"J\",\"shape\":[1],\"datatype\":\"UINT8\",\"data\":[9]}]}";
  const char blob[] =
      "\x01\0\0\0\x02\0\0\0"
      "\x03\0\0\0abc\x02\0\0\0\xff\x00"
      "\x00\x3c\x00\xc0\x00\x38";
  size_t len = binary_body(body, header, blob, sizeof blob - 1, &hlen);
  hark_kserve_request r;
  hark_error *err = hark_kserve_parse(body, len, hlen, &r);
  if (err) fail_msg("%s", hark_error_message(err));
  const hark_kserve_input *a = input(&r, "A");
  assert_true(a->binary);
  assert_int_equal(a->byte_size, 8);
  assert_int_equal((uintptr_t)a->data % 4, 0); /* aligned, copied if need be */
  int32_t a0;
  memcpy(&a0, a->data, 4);
  assert_int_equal(a0, 1);
  const hark_kserve_input *s = input(&r, "S");
  assert_ptr_equal(s->data, body + hlen + 8); /* BYTES stay in the body */
  assert_int_equal(s->byte_size, 13);
  assert_int_equal(input(&r, "H")->byte_size, 6);
  assert_false(input(&r, "J")->binary);
  hark_kserve_request_clear(&r);

  /* An aligned binary part is used in place, without a copy. */
  char *aligned = aligned_alloc(64, 256);
  const char *h2 =
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[2],\"datatype\":\"INT64\","
      "\"parameters\":{\"binary_data_size\":16}}]}";
  size_t h2len = strlen(h2), pad = (64 - h2len % 64) % 64;
  memcpy(aligned + pad, h2, h2len);
  memset(aligned + pad + h2len, 7, 16);
  assert_null(hark_kserve_parse(aligned + pad, h2len + 16, h2len, &r));
  assert_ptr_equal(r.inputs[0].data, aligned + pad + h2len);
  hark_kserve_request_clear(&r);
  free(aligned);
}

static void test_binary_errors(void **state) {
  (void)state;
  char body[512];
  size_t hlen, len;
  const char *two =
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[2],\"datatype\":\"INT32\","
      "\"parameters\":{\"binary_data_size\":8}}]}";
  char blob[16] = {0};
  len = binary_body(body, two, blob, 7, &hlen);
  expect_error(body, len, hlen, "more than the 7 bytes");
  len = binary_body(body, two, blob, 9, &hlen);
  expect_error(body, len, hlen, "1 bytes of binary data that no input claims");
  len = binary_body(body, "{\"inputs\":[]}", blob, 4, &hlen);
  expect_error(body, len, hlen, "4 bytes of binary data");
  expect_error("{}", 2, 100, "larger than the request body");
  /* the declared size disagrees with the shape */
  len = binary_body(body,
                    "{\"inputs\":[{\"name\":\"A\",\"shape\":[2],\"datatype\":\"INT32\","
                    "\"parameters\":{\"binary_data_size\":6}}]}",
                    blob, 6, &hlen);
  expect_error(body, len, hlen, "does not match 2 INT32 elements (8 bytes)");
  /* both data and a binary size */
  len = binary_body(body,
                    "{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\","
                    "\"data\":[1],\"parameters\":{\"binary_data_size\":1}}]}",
                    blob, 1, &hlen);
  expect_error(body, len, hlen, "both 'data' and a binary_data_size");
  len = binary_body(body,
                    "{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\","
                    "\"parameters\":{\"binary_data_size\":-1}}]}",
                    blob, 1, &hlen);
  expect_error(body, len, hlen, "non-negative integer");
  /* BYTES: an element length that overruns, too few elements, too many */
  const char overrun[] = "\x64\0\0\0abc";
  len = binary_body(body,
                    "{\"inputs\":[{\"name\":\"S\",\"shape\":[1],\"datatype\":\"BYTES\","
                    "\"parameters\":{\"binary_data_size\":7}}]}",
                    overrun, 7, &hlen);
  expect_error(body, len, hlen, "not 1 length-prefixed elements");
  const char one[] = "\x01\0\0\0a";
  len = binary_body(body,
                    "{\"inputs\":[{\"name\":\"S\",\"shape\":[2],\"datatype\":\"BYTES\","
                    "\"parameters\":{\"binary_data_size\":5}}]}",
                    one, 5, &hlen);
  expect_error(body, len, hlen, "not 2 length-prefixed");
  const char three[] = "\x00\0\0\0\x00\0\0\0\x00\0\0\0";
  len = binary_body(body,
                    "{\"inputs\":[{\"name\":\"S\",\"shape\":[2],\"datatype\":\"BYTES\","
                    "\"parameters\":{\"binary_data_size\":12}}]}",
                    three, 12, &hlen);
  expect_error(body, len, hlen, "not 2 length-prefixed");
  /* JSON binary_data_size without the header: there is no binary part */
  expect_json_error(
      "{\"inputs\":[{\"name\":\"A\",\"shape\":[1],\"datatype\":\"INT8\","
      "\"parameters\":{\"binary_data_size\":1}}]}",
      "more than the 0 bytes");
}

/* ---- responses ------------------------------------------------------------------------ */

/* A request for the fake model and a response whose outputs the test adds. */
typedef struct resp_fixture {
  hark_model *model;
  hark_request *req;
  hark_response *resp;
  parsed_body p;
} resp_fixture;

static void fixture_new(resp_fixture *f, const char *json) {
  f->model = fake_model();
  parse_ok(&f->p, json);
  f->req = hark_request_new(f->model);
  assert_null(hark_kserve_to_request(&f->p.r, NULL, f->req));
  f->resp = hark_response_new(f->req);
}

static void fixture_free(resp_fixture *f) {
  hark_response_free(f->resp);
  hark_request_free(f->req);
  free(f->p.body);
  fake_model_free(f->model);
}

static void add_output(hark_response *resp, const char *name, hark_datatype dt, const void *data,
                       size_t size, int64_t n) {
  void *buf;
  int64_t shape[1] = {n};
  assert_null(hark_response_add_output(resp, name, dt, shape, 1, size, &buf));
  memcpy(buf, data, size);
}

static char *write_json(resp_fixture *f, const hark_kserve_request *r, size_t *json_len,
                        bool *binary, hark_buf *out) {
  *out = (hark_buf){0};
  hark_error *err = hark_kserve_write_response(out, f->resp, "m", 3, r, json_len, binary);
  if (err) fail_msg("%s", hark_error_message(err));
  hark_buf_put(out, "", 1);
  return out->data;
}

static void test_response_every_type(void **state) {
  (void)state;
  resp_fixture f;
  fixture_new(&f, "{\"id\":\"q\\\"1\",\"inputs\":[]}");
  hark_response_set_parameter(f.resp, "sequence_id", "7");
  uint8_t b[2] = {1, 0};
  add_output(f.resp, "b", HARK_TYPE_BOOL, b, 2, 2);
  uint64_t u64[2] = {0, UINT64_MAX};
  add_output(f.resp, "u64", HARK_TYPE_UINT64, u64, 16, 2);
  int64_t i64[2] = {INT64_MIN, INT64_MAX};
  add_output(f.resp, "i64", HARK_TYPE_INT64, i64, 16, 2);
  int8_t i8[2] = {-128, 127};
  add_output(f.resp, "i8", HARK_TYPE_INT8, i8, 2, 2);
  uint16_t u16[1] = {65535};
  add_output(f.resp, "u16", HARK_TYPE_UINT16, u16, 2, 1);
  int16_t i16[1] = {-32768};
  add_output(f.resp, "i16", HARK_TYPE_INT16, i16, 2, 1);
  uint32_t u32[1] = {4294967295u};
  add_output(f.resp, "u32", HARK_TYPE_UINT32, u32, 4, 1);
  int32_t i32[4] = {INT32_MIN, -7, 0, INT32_MAX};
  add_output(f.resp, "i32", HARK_TYPE_INT32, i32, 16, 4);
  uint8_t u8[1] = {255};
  add_output(f.resp, "u8", HARK_TYPE_UINT8, u8, 1, 1);
  float f32[4] = {1.5f, 0.1f, NAN, -3.0f};
  add_output(f.resp, "f32", HARK_TYPE_FP32, f32, 16, 4);
  double f64[3] = {1e300, 0.1, -0.5};
  add_output(f.resp, "f64", HARK_TYPE_FP64, f64, 24, 3);
  uint16_t half[3] = {0x3c00, 0xc000, 0x0001}; /* 1, -2, smallest subnormal */
  add_output(f.resp, "f16", HARK_TYPE_FP16, half, 6, 3);
  uint16_t bf[1] = {0x3fc0}; /* 1.5 */
  add_output(f.resp, "bf16", HARK_TYPE_BF16, bf, 2, 1);
  const char bytes[] = "\x02\0\0\0hi\x03\0\0\0\xff\"\n";
  add_output(f.resp, "s", HARK_TYPE_BYTES, bytes, sizeof bytes - 1, 2);
  size_t json_len;
  bool binary;
  hark_buf out;
  const char *json = write_json(&f, NULL, &json_len, &binary, &out);
  assert_false(binary);
  assert_int_equal(json_len, strlen(json));
  const char *want =
      "{\"model_name\":\"m\",\"model_version\":\"3\",\"id\":\"q\\\"1\","
      "\"parameters\":{\"sequence_id\":\"7\"},\"outputs\":["
      "{\"name\":\"b\",\"datatype\":\"BOOL\",\"shape\":[2],\"data\":[true,false]},"
      "{\"name\":\"u64\",\"datatype\":\"UINT64\",\"shape\":[2],"
      "\"data\":[0,18446744073709551615]},"
      "{\"name\":\"i64\",\"datatype\":\"INT64\",\"shape\":[2],"
      "\"data\":[-9223372036854775808,9223372036854775807]},"
      "{\"name\":\"i8\",\"datatype\":\"INT8\",\"shape\":[2],\"data\":[-128,127]},"
      "{\"name\":\"u16\",\"datatype\":\"UINT16\",\"shape\":[1],\"data\":[65535]},"
      "{\"name\":\"i16\",\"datatype\":\"INT16\",\"shape\":[1],\"data\":[-32768]},"
      "{\"name\":\"u32\",\"datatype\":\"UINT32\",\"shape\":[1],\"data\":[4294967295]},"
      "{\"name\":\"i32\",\"datatype\":\"INT32\",\"shape\":[4],"
      "\"data\":[-2147483648,-7,0,2147483647]},"
      "{\"name\":\"u8\",\"datatype\":\"UINT8\",\"shape\":[1],\"data\":[255]},"
      "{\"name\":\"f32\",\"datatype\":\"FP32\",\"shape\":[4],\"data\":[1.5,0.1,null,-3]},"
      "{\"name\":\"f64\",\"datatype\":\"FP64\",\"shape\":[3],\"data\":[1e+300,0.1,-0.5]},"
      "{\"name\":\"f16\",\"datatype\":\"FP16\",\"shape\":[3],"
      "\"data\":[1,-2,5.96046448e-08]},"
      "{\"name\":\"bf16\",\"datatype\":\"BF16\",\"shape\":[1],\"data\":[1.5]},"
      "{\"name\":\"s\",\"datatype\":\"BYTES\",\"shape\":[2],"
      "\"data\":[\"hi\",\"\\u00ff\\\"\\n\"]}]}";
  assert_string_equal(json, want);
  cJSON *doc = cJSON_Parse(json); /* and it is JSON */
  assert_non_null(doc);
  cJSON_Delete(doc);
  hark_buf_free(&out);
  fixture_free(&f);
}

static void test_response_binary_outputs(void **state) {
  (void)state;
  resp_fixture f;
  fixture_new(&f,
              "{\"inputs\":[],\"outputs\":[{\"name\":\"Y\",\"parameters\":"
              "{\"binary_data\":true}},{\"name\":\"Z\"}]}");
  int32_t y[2] = {5, 6};
  float z[2] = {0.25f, 2.0f};
  add_output(f.resp, "W", HARK_TYPE_INT32, y, 8, 2); /* not asked for: left out */
  add_output(f.resp, "Y", HARK_TYPE_INT32, y, 8, 2);
  add_output(f.resp, "Z", HARK_TYPE_FP32, z, 8, 2);
  size_t json_len;
  bool binary;
  hark_buf out;
  write_json(&f, &f.p.r, &json_len, &binary, &out);
  assert_true(binary);
  const char *want_json =
      "{\"model_name\":\"m\",\"model_version\":\"3\",\"outputs\":["
      "{\"name\":\"Y\",\"datatype\":\"INT32\",\"shape\":[2],"
      "\"parameters\":{\"binary_data_size\":8}},"
      "{\"name\":\"Z\",\"datatype\":\"FP32\",\"shape\":[2],\"data\":[0.25,2]}]}";
  assert_int_equal(json_len, strlen(want_json));
  assert_memory_equal(out.data, want_json, json_len);
  assert_int_equal(out.len, json_len + 8 + 1);
  assert_memory_equal(out.data + json_len, y, 8);
  hark_buf_free(&out);
  fixture_free(&f);

  /* binary_data_output: every output binary unless it says otherwise */
  fixture_new(&f,
              "{\"inputs\":[],\"parameters\":{\"binary_data_output\":true},"
              "\"outputs\":[{\"name\":\"Y\",\"parameters\":{\"binary_data\":false}},"
              "{\"name\":\"Z\"}]}");
  add_output(f.resp, "Y", HARK_TYPE_INT32, y, 8, 2);
  add_output(f.resp, "Z", HARK_TYPE_FP32, z, 8, 2);
  write_json(&f, &f.p.r, &json_len, &binary, &out);
  assert_true(binary);
  assert_non_null(strstr(out.data, "\"data\":[5,6]"));
  assert_memory_equal(out.data + json_len, z, 8);
  hark_buf_free(&out);
  fixture_free(&f);
}

static void test_response_bad_bytes(void **state) {
  (void)state;
  resp_fixture f;
  fixture_new(&f, "{\"inputs\":[]}");
  add_output(f.resp, "s", HARK_TYPE_BYTES, "\x09\0\0\0ab", 6, 1);
  hark_buf out = {0};
  size_t json_len;
  bool binary;
  hark_error *err = hark_kserve_write_response(&out, f.resp, "m", 3, NULL, &json_len, &binary);
  assert_int_equal(hark_error_code(err), HARK_ERR_INTERNAL);
  assert_non_null(strstr(hark_error_message(err), "malformed BYTES"));
  hark_error_free(err);
  hark_buf_free(&out);
  fixture_free(&f);
}

/* JSON in, engine layout, JSON out: the same values come back. */
static void test_round_trip_json(void **state) {
  (void)state;
  static const struct {
    const char *dt, *data;
  } cases[] = {
      {"BOOL", "[true,false]"},
      {"UINT8", "[0,255]"},
      {"UINT16", "[0,65535]"},
      {"UINT32", "[0,4294967295]"},
      {"UINT64", "[0,18446744073709551615]"},
      {"INT8", "[-128,127]"},
      {"INT16", "[-32768,32767]"},
      {"INT32", "[-2147483648,2147483647]"},
      {"INT64", "[-9223372036854775808,9223372036854775807]"},
      {"FP32", "[1.5,0.1]"},
      {"FP64", "[1e+300,0.1]"},
      {"BYTES", "[\"hello\",\"\"]"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    resp_fixture f;
    fixture_new(&f, one_input(cases[i].dt, "[2]", cases[i].data));
    const hark_tensor *t = hark_request_input(f.req, 0);
    void *buf;
    assert_null(
        hark_response_add_output(f.resp, "X", t->datatype, t->shape, t->ndims, t->byte_size, &buf));
    memcpy(buf, t->data, t->byte_size);
    size_t json_len;
    bool binary;
    hark_buf out;
    const char *json = write_json(&f, NULL, &json_len, &binary, &out);
    char want[256];
    snprintf(want, sizeof want, "\"data\":%s}", cases[i].data);
    if (!strstr(json, want)) fail_msg("%s: %s lacks %s", cases[i].dt, json, want);
    hark_buf_free(&out);
    fixture_free(&f);
  }
}

/* ---- URL routes (kserve_http.c) ------------------------------------------------ */

static void expect_route(const char *path, bool metrics, hark_kserve_route_kind kind,
                         const char *model, int64_t version) {
  hark_kserve_route rt;
  hark_error *err = hark_kserve_route_parse(path, metrics, &rt);
  if (err) fail_msg("%s: %s", path, hark_error_message(err));
  if (rt.kind != kind) fail_msg("%s: route %d, want %d", path, (int)rt.kind, (int)kind);
  if (model)
    assert_string_equal(rt.model, model);
  else
    assert_null(rt.model);
  assert_int_equal(rt.version, version);
  free(rt.model);
}

static void test_routes(void **state) {
  (void)state;
  expect_route("/v2", false, HARK_ROUTE_SERVER_META, NULL, -1);
  expect_route("/v2/health/live", false, HARK_ROUTE_LIVE, NULL, -1);
  expect_route("/v2/health/ready", false, HARK_ROUTE_READY, NULL, -1);
  expect_route("/v2/models/stats", false, HARK_ROUTE_ALL_STATS, NULL, -1);
  expect_route("/v2/models/simple", false, HARK_ROUTE_MODEL_META, "simple", -1);
  expect_route("/v2/models/simple/versions/12", false, HARK_ROUTE_MODEL_META, "simple", 12);
  expect_route("/v2/models/simple/ready", false, HARK_ROUTE_MODEL_READY, "simple", -1);
  expect_route("/v2/models/simple/versions/1/config", false, HARK_ROUTE_MODEL_CONFIG, "simple", 1);
  expect_route("/v2/models/simple/stats", false, HARK_ROUTE_MODEL_STATS, "simple", -1);
  expect_route("/v2/models/simple/versions/0/infer", false, HARK_ROUTE_INFER, "simple", 0);
  expect_route("/v2/repository/index", false, HARK_ROUTE_REPO_INDEX, NULL, -1);
  expect_route("/v2/repository/models/simple/load", false, HARK_ROUTE_REPO_LOAD, "simple", -1);
  expect_route("/v2/repository/models/simple/unload", false, HARK_ROUTE_REPO_UNLOAD, "simple", -1);
  expect_route("/metrics", true, HARK_ROUTE_METRICS, NULL, -1);
  /* not routes */
  expect_route("/metrics", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2", true, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v3", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2/", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2//health/live", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2/models/simple/infer/more", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2/models/simple/versions", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2/models/simple/explode", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2/repository/models/simple/reload", false, HARK_ROUTE_NONE, NULL, -1);
  expect_route("/v2/a/b/c/d/e/f/g/h/i/j", false, HARK_ROUTE_NONE, NULL, -1);
  char longpath[4096];
  memset(longpath, 'a', sizeof longpath - 1);
  longpath[0] = '/';
  longpath[sizeof longpath - 1] = '\0';
  expect_route(longpath, false, HARK_ROUTE_NONE, NULL, -1);
  /* a version that is not a number */
  static const char *bad[] = {"/v2/models/m/versions/abc", "/v2/models/m/versions/-1/infer",
                              "/v2/models/m/versions/99999999999999999999/ready"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    hark_kserve_route rt;
    hark_error *err = hark_kserve_route_parse(bad[i], false, &rt);
    if (!err) fail_msg("no error for %s", bad[i]);
    assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
    assert_non_null(strstr(hark_error_message(err), "invalid model version"));
    hark_error_free(err);
    assert_null(rt.model);
  }
  assert_true(hark_kserve_route_is_post(HARK_ROUTE_INFER));
  assert_false(hark_kserve_route_is_post(HARK_ROUTE_MODEL_META));
}

/* ---- with a real server ---------------------------------------------------------------- */

static hark_server *real_server(void) {
  const char *src = getenv("HARK_SOURCE_DIR"), *backends = getenv("HARK_BACKEND_DIR");
  if (!src || !backends) return NULL;
  static char repo[4096];
  snprintf(repo, sizeof repo, "%s/models", src);
  hark_server_options opts = {.model_repository = repo,
                              .backend_directory = backends,
                              .worker_threads = 2,
                              .strict_readiness = true};
  hark_server *server;
  hark_error *err = hark_server_new(&opts, &server);
  if (err) fail_msg("server: %s", hark_error_message(err));
  return server;
}

typedef struct waiter {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  bool done;
  hark_kserve_request *parsed;
  hark_buf out;
  size_t json_len;
  bool binary;
  hark_code code;
} waiter;

static void on_response(hark_response *resp, uint32_t flags, hark_error *err, void *userp) {
  waiter *w = userp;
  if (resp && !err) {
    hark_error *werr =
        hark_kserve_write_response(&w->out, resp, "simple", 1, w->parsed, &w->json_len, &w->binary);
    w->code = hark_error_code(werr);
    hark_error_free(werr);
  }
  if (err) w->code = hark_error_code(err);
  hark_response_free(resp);
  hark_error_free(err);
  if (!(flags & HARK_RESPONSE_FINAL)) return;
  pthread_mutex_lock(&w->lock);
  w->done = true;
  pthread_cond_signal(&w->cond);
  pthread_mutex_unlock(&w->lock);
}

static void test_real_server(void **state) {
  (void)state;
  hark_server *server = real_server();
  if (!server) skip();
  hark_buf b = {0};
  hark_kserve_write_server_metadata(&b, false);
  hark_buf_put(&b, "", 1);
  assert_non_null(strstr(b.data, "\"binary_tensor_data\""));
  assert_null(strstr(b.data, "shared_memory")); /* not served: not listed */
  b.len = 0;
  hark_kserve_write_server_metadata(&b, true);
  hark_buf_put(&b, "", 1);
  assert_non_null(strstr(b.data, "\"system_shared_memory\""));
  b.len = 0;

  hark_model *model;
  assert_null(hark_server_model_acquire(server, "simple", -1, &model));
  hark_kserve_write_model_metadata(&b, server, model);
  hark_buf_put(&b, "", 1);
  assert_string_equal(
      b.data,
      "{\"name\":\"simple\",\"versions\":[\"1\"],\"platform\":\"simple\","
      "\"inputs\":[{\"name\":\"INPUT0\",\"datatype\":\"INT32\",\"shape\":[-1,16]},"
      "{\"name\":\"INPUT1\",\"datatype\":\"INT32\",\"shape\":[-1,16]}],"
      "\"outputs\":[{\"name\":\"OUTPUT0\",\"datatype\":\"INT32\",\"shape\":[-1,16]},"
      "{\"name\":\"OUTPUT1\",\"datatype\":\"INT32\",\"shape\":[-1,16]}]}");
  b.len = 0;

  /* One inference, the binary way in and out. */
  char body[1024];
  const char *header =
      "{\"id\":\"t\",\"inputs\":["
      "{\"name\":\"INPUT0\",\"shape\":[1,16],\"datatype\":\"INT32\","
      "\"parameters\":{\"binary_data_size\":64}},"
      "{\"name\":\"INPUT1\",\"shape\":[1,16],\"datatype\":\"INT32\","
      "\"data\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]}],"
      "\"outputs\":[{\"name\":\"OUTPUT0\",\"parameters\":{\"binary_data\":true}}]}";
  int32_t a[16];
  for (int i = 0; i < 16; i++) a[i] = i;
  size_t hlen, len = binary_body(body, header, a, sizeof a, &hlen);
  hark_kserve_request parsed;
  assert_null(hark_kserve_parse(body, len, hlen, &parsed));
  hark_request *req = hark_request_new(model);
  assert_null(hark_kserve_to_request(&parsed, NULL, req));
  waiter w = {.parsed = &parsed};
  pthread_mutex_init(&w.lock, NULL);
  pthread_cond_init(&w.cond, NULL);
  hark_request_set_callback(req, on_response, &w);
  assert_null(hark_server_infer(server, req));
  pthread_mutex_lock(&w.lock);
  while (!w.done) pthread_cond_wait(&w.cond, &w.lock);
  pthread_mutex_unlock(&w.lock);
  assert_int_equal(w.code, HARK_OK);
  assert_true(w.binary);
  const char *want =
      "{\"model_name\":\"simple\",\"model_version\":\"1\",\"id\":\"t\","
      "\"outputs\":[{\"name\":\"OUTPUT0\",\"datatype\":\"INT32\",\"shape\":[1,16],"
      "\"parameters\":{\"binary_data_size\":64}}]}";
  assert_int_equal(w.json_len, strlen(want));
  assert_memory_equal(w.out.data, want, w.json_len);
  assert_int_equal(w.out.len, w.json_len + 64);
  int32_t got[16];
  memcpy(got, w.out.data + w.json_len, 64);
  for (int i = 0; i < 16; i++) assert_int_equal(got[i], i + 1);
  hark_buf_free(&w.out);
  pthread_mutex_destroy(&w.lock);
  pthread_cond_destroy(&w.cond);

  /* Statistics count it; unknown names are NOT_FOUND. */
  assert_null(hark_kserve_write_stats(&b, server, "simple", -1));
  hark_buf_put(&b, "", 1);
  cJSON *doc = cJSON_Parse(b.data);
  assert_non_null(doc);
  cJSON *st = cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "model_stats"), 0);
  assert_string_equal(cJSON_GetObjectItem(st, "version")->valuestring, "1");
  cJSON *succ = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "inference_stats"), "success");
  assert_int_equal(cJSON_GetObjectItem(succ, "count")->valueint, 1);
  cJSON_Delete(doc);
  b.len = 0;
  hark_error *err = hark_kserve_write_stats(&b, server, "nope", -1);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  hark_error_free(err);
  err = hark_kserve_write_stats(&b, server, "simple", 9);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  hark_error_free(err);
  b.len = 0;
  assert_null(hark_kserve_write_stats(&b, server, NULL, -1));
  b.len = 0;

  assert_null(hark_kserve_write_index(&b, server, true));
  hark_buf_put(&b, "", 1);
  assert_non_null(strstr(b.data, "{\"name\":\"simple\",\"version\":\"1\",\"state\":\"READY\"}"));
  hark_buf_free(&b);
  hark_model_release(model);
  hark_server_free(server);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_type_as_json),
      cmocka_unit_test(test_nested_data_and_shapes),
      cmocka_unit_test(test_flat_integer_arrays),
      cmocka_unit_test(test_bytes_escapes),
      cmocka_unit_test(test_request_fields),
      cmocka_unit_test(test_bad_parameters),
      cmocka_unit_test(test_request_counts),
      cmocka_unit_test(test_malformed_json),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_bad_outputs),
      cmocka_unit_test(test_binary_inputs),
      cmocka_unit_test(test_binary_errors),
      cmocka_unit_test(test_response_every_type),
      cmocka_unit_test(test_response_binary_outputs),
      cmocka_unit_test(test_response_bad_bytes),
      cmocka_unit_test(test_round_trip_json),
      cmocka_unit_test(test_routes),
      cmocka_unit_test(test_real_server),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
