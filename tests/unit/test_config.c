/* Unit tests for src/core/config.c: config.pbtxt → hark_model_config,
 * Triton's defaults and checks, errors with file:line, and the JSON form. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "hark/config.h"

#define F "models/x/config.pbtxt"

static hark_model_config *parse_in(const char *text, const char *dir) {
  hark_model_config *cfg = NULL;
  hark_error *err = hark_model_config_parse(text, strlen(text), F, dir, &cfg);
  if (err) fail_msg("unexpected error: %s", hark_error_message(err));
  assert_non_null(cfg);
  return cfg;
}

static hark_model_config *parse(const char *text) { return parse_in(text, "x"); }

static void expect_error_in(const char *text, size_t len, const char *dir, hark_code code,
                            const char *message) {
  hark_model_config *cfg = (hark_model_config *)1;
  hark_error *err = hark_model_config_parse(text, len, F, dir, &cfg);
  if (!err) fail_msg("expected \"%s\" for:\n%s", message, text);
  assert_null(cfg);
  if (strcmp(hark_error_message(err), message) != 0)
    fail_msg("for:\n%s\nexpected: %s\n     got: %s", text, message, hark_error_message(err));
  assert_int_equal(hark_error_code(err), code);
  hark_error_free(err);
}

static void expect_error(const char *text, const char *message) {
  expect_error_in(text, strlen(text), "x", HARK_ERR_INVALID_ARG, message);
}

/* ---- what parses ------------------------------------------------------------- */

static const char SIMPLE[] =
    "name: \"simple\"\n"
    "backend: \"simple\"\n"
    "max_batch_size: 8\n"
    "input [ { name: \"INPUT0\" data_type: TYPE_INT32 dims: [ 16 ] }, { name: \"INPUT1\" "
    "data_type: TYPE_INT32 dims: [ 16 ] } ]\n"
    "output [ { name: \"OUTPUT0\" data_type: TYPE_INT32 dims: [ 16 ] } ]\n"
    "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
    "dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }\n"
    "parameters { key: \"cost_ms\" value: { string_value: \"2\" } }\n";

static void test_simple_example(void **state) {
  (void)state;
  hark_model_config *cfg = parse_in(SIMPLE, "simple");
  assert_string_equal(cfg->name, "simple");
  assert_string_equal(cfg->backend, "simple");
  assert_string_equal(cfg->platform, "");
  assert_int_equal(cfg->max_batch_size, 8);
  assert_int_equal(cfg->n_inputs, 2);
  assert_string_equal(cfg->inputs[1].name, "INPUT1");
  assert_int_equal(cfg->inputs[1].datatype, HARK_TYPE_INT32);
  assert_int_equal(cfg->inputs[1].ndims, 1);
  assert_int_equal(cfg->inputs[1].dims[0], 16);
  assert_false(cfg->inputs[1].optional);
  assert_int_equal(cfg->n_outputs, 1);
  assert_string_equal(cfg->outputs[0].name, "OUTPUT0");
  assert_int_equal(cfg->n_instance_groups, 1);
  assert_int_equal(cfg->instance_groups[0].count, 2);
  assert_int_equal(cfg->instance_groups[0].kind, HARK_KIND_CPU);
  assert_string_equal(cfg->instance_groups[0].name, "simple_0");
  const hark_dynamic_batching *db = &cfg->dynamic_batching;
  assert_true(db->enabled);
  assert_int_equal(db->n_preferred_batch_size, 2);
  assert_int_equal(db->preferred_batch_size[0], 4);
  assert_int_equal(db->preferred_batch_size[1], 8);
  assert_int_equal(db->max_queue_delay_us, 100);
  assert_int_equal(db->priority_levels, 0);
  assert_int_equal(cfg->n_parameters, 1);
  assert_string_equal(hark_model_config_parameter(cfg, "cost_ms"), "2");
  assert_null(hark_model_config_parameter(cfg, "missing"));
  assert_null(hark_model_config_parameter(cfg, NULL));
  assert_int_equal(cfg->n_ensemble_steps, 0);
  hark_model_config_free(cfg);
}

static void test_defaults(void **state) {
  (void)state;
  hark_model_config *cfg = parse("backend: \"identity\"");
  assert_string_equal(cfg->name, "x"); /* from the folder */
  assert_string_equal(cfg->platform, "");
  assert_string_equal(cfg->default_model_filename, "");
  assert_int_equal(cfg->version_policy.kind, HARK_VERSION_LATEST);
  assert_int_equal(cfg->version_policy.latest_num_versions, 1);
  assert_int_equal(cfg->max_batch_size, 0);
  assert_int_equal(cfg->n_inputs, 0);
  assert_int_equal(cfg->n_instance_groups, 1);
  assert_int_equal(cfg->instance_groups[0].count, 1);
  assert_int_equal(cfg->instance_groups[0].kind, HARK_KIND_CPU);
  assert_string_equal(cfg->instance_groups[0].name, "x_0");
  assert_false(cfg->dynamic_batching.enabled);
  assert_false(cfg->decoupled);
  assert_int_equal(cfg->n_parameters, 0);
  hark_model_config_free(cfg);
  /* No folder name given: the config's own name stands. */
  cfg = parse_in("name: \"solo\" backend: \"b\"", NULL);
  assert_string_equal(cfg->name, "solo");
  hark_model_config_free(cfg);
}

static void test_version_policies(void **state) {
  (void)state;
  hark_model_config *cfg = parse("backend: \"b\" version_policy { latest { num_versions: 3 } }");
  assert_int_equal(cfg->version_policy.kind, HARK_VERSION_LATEST);
  assert_int_equal(cfg->version_policy.latest_num_versions, 3);
  hark_model_config_free(cfg);
  cfg = parse("backend: \"b\" version_policy: { all { } }");
  assert_int_equal(cfg->version_policy.kind, HARK_VERSION_ALL);
  hark_model_config_free(cfg);
  cfg = parse("backend: \"b\" version_policy { specific { versions: [ 1, 3 ] versions: 7 } }");
  assert_int_equal(cfg->version_policy.kind, HARK_VERSION_SPECIFIC);
  assert_int_equal(cfg->version_policy.n_versions, 3);
  assert_int_equal(cfg->version_policy.versions[0], 1);
  assert_int_equal(cfg->version_policy.versions[1], 3);
  assert_int_equal(cfg->version_policy.versions[2], 7);
  hark_model_config_free(cfg);
  cfg = parse("backend: \"b\" version_policy { }");
  assert_int_equal(cfg->version_policy.kind, HARK_VERSION_LATEST);
  assert_int_equal(cfg->version_policy.latest_num_versions, 1);
  hark_model_config_free(cfg);
}

static void test_io_fields(void **state) {
  (void)state;
  hark_model_config *cfg = parse(
      "backend: \"b\"\n"
      "max_batch_size: 4\n"
      "input { name: \"A\" data_type: TYPE_STRING dims: -1 optional: true }\n"
      "input < name: 'B' data_type: TYPE_BF16 dims: [2, -1, 3]; >\n"
      "input: { name: \"C\" data_type: TYPE_BOOL optional: false }\n"
      "output [ { name: \"A\" data_type: TYPE_FP64 dims: [ 1, 2, 3, 4, "
      "5, 6, 7, 8 ] } ]\n");
  assert_int_equal(cfg->n_inputs, 3);
  assert_int_equal(cfg->inputs[0].datatype, HARK_TYPE_BYTES);
  assert_int_equal(cfg->inputs[0].ndims, 1);
  assert_int_equal(cfg->inputs[0].dims[0], -1);
  assert_true(cfg->inputs[0].optional);
  assert_string_equal(cfg->inputs[1].name, "B");
  assert_int_equal(cfg->inputs[1].datatype, HARK_TYPE_BF16);
  assert_int_equal(cfg->inputs[1].ndims, 3);
  assert_int_equal(cfg->inputs[1].dims[1], -1);
  assert_int_equal(cfg->inputs[1].dims[2], 3);
  assert_int_equal(cfg->inputs[2].ndims, 0);
  assert_false(cfg->inputs[2].optional);
  /* An output may share an input's name, as Triton allows. */
  assert_string_equal(cfg->outputs[0].name, "A");
  assert_int_equal(cfg->outputs[0].ndims, HARK_MAX_DIMS);
  assert_int_equal(cfg->outputs[0].dims[7], 8);
  hark_model_config_free(cfg);
}

static void test_bool_spellings(void **state) {
  (void)state;
  static const char *const yes[] = {"true", "True", "t", "1"}, *const no[] = {"false", "False", "f",
                                                                              "0"};
  char text[128];
  for (int i = 0; i < 4; i++) {
    snprintf(text, sizeof text, "backend: \"b\" model_transaction_policy { decoupled: %s }",
             yes[i]);
    hark_model_config *cfg = parse(text);
    assert_true(cfg->decoupled);
    hark_model_config_free(cfg);
    snprintf(text, sizeof text, "backend: \"b\" model_transaction_policy { decoupled: %s }", no[i]);
    cfg = parse(text);
    assert_false(cfg->decoupled);
    hark_model_config_free(cfg);
  }
}

static void test_instance_groups(void **state) {
  (void)state;
  hark_model_config *cfg = parse(
      "backend: \"b\"\n"
      "instance_group [ { name: \"fast\" count: 4 kind: KIND_MODEL },\n"
      "  { kind: KIND_AUTO gpus: [] } ]\n"
      "instance_group { count: 1024 kind: KIND_GPU }\n"
      "instance_group { name: \"\" }\n");
  assert_int_equal(cfg->n_instance_groups, 4);
  assert_string_equal(cfg->instance_groups[0].name, "fast");
  assert_int_equal(cfg->instance_groups[0].count, 4);
  assert_int_equal(cfg->instance_groups[0].kind, HARK_KIND_MODEL);
  assert_string_equal(cfg->instance_groups[1].name, "x_1");
  assert_int_equal(cfg->instance_groups[1].count, 1);
  assert_int_equal(cfg->instance_groups[1].kind, HARK_KIND_CPU); /* AUTO on a host without GPUs */
  assert_int_equal(cfg->instance_groups[2].count, 1024);
  assert_int_equal(cfg->instance_groups[2].kind, HARK_KIND_GPU);
  assert_string_equal(cfg->instance_groups[3].name, "x_3");
  hark_model_config_free(cfg);
}

static void test_dynamic_batching_full(void **state) {
  (void)state;
  hark_model_config *cfg = parse(
      "backend: \"b\"\n"
      "max_batch_size: 16\n"
      "dynamic_batching {\n"
      "  preferred_batch_size: [ 4, 8 ] preferred_batch_size: 16\n"
      "  max_queue_delay_microseconds: 18446744073709551615\n"
      "  preserve_ordering: true\n"
      "  priority_levels: 3\n"
      "  default_priority_level: 2\n"
      "  default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 5000\n"
      "                         allow_timeout_override: true max_queue_size: 32 }\n"
      "  priority_queue_policy { key: 1 value { max_queue_size: 4 timeout_action: REJECT } }\n"
      "  priority_queue_policy [ { key: 3 value: { default_timeout_microseconds: 7 } },\n"
      "                          { key: 2 } ]\n"
      "}\n");
  const hark_dynamic_batching *db = &cfg->dynamic_batching;
  assert_true(db->enabled);
  assert_int_equal(db->n_preferred_batch_size, 3);
  assert_int_equal(db->preferred_batch_size[2], 16);
  assert_true(db->max_queue_delay_us == UINT64_MAX);
  assert_true(db->preserve_ordering);
  assert_int_equal(db->priority_levels, 3);
  assert_int_equal(db->default_priority_level, 2);
  assert_int_equal(db->default_queue_policy.timeout_action, HARK_TIMEOUT_DELAY);
  assert_int_equal(db->default_queue_policy.default_timeout_us, 5000);
  assert_true(db->default_queue_policy.allow_timeout_override);
  assert_int_equal(db->default_queue_policy.max_queue_size, 32);
  assert_int_equal(db->n_priority_queue_policy, 3);
  assert_int_equal(db->priority_queue_policy[0].level, 1);
  assert_int_equal(db->priority_queue_policy[0].policy.max_queue_size, 4);
  assert_int_equal(db->priority_queue_policy[0].policy.timeout_action, HARK_TIMEOUT_REJECT);
  assert_int_equal(db->priority_queue_policy[1].level, 3);
  assert_int_equal(db->priority_queue_policy[1].policy.default_timeout_us, 7);
  assert_int_equal(db->priority_queue_policy[2].level, 2);
  assert_int_equal(db->priority_queue_policy[2].policy.max_queue_size, 0);
  hark_model_config_free(cfg);
  /* The whole block may be empty: batching on, Triton's defaults. */
  cfg = parse("backend: \"b\" max_batch_size: 2 dynamic_batching { }");
  assert_true(cfg->dynamic_batching.enabled);
  assert_int_equal(cfg->dynamic_batching.n_preferred_batch_size, 0);
  assert_int_equal(cfg->dynamic_batching.max_queue_delay_us, 0);
  hark_model_config_free(cfg);
}

static const char ENSEMBLE[] =
    "name: \"ens\"\n"
    "platform: \"ensemble\"\n"
    "max_batch_size: 8\n"
    "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
    "output [ { name: \"OUT\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
    "ensemble_scheduling { step [ { model_name: \"a\" model_version: -1 input_map { key: "
    "\"INPUT0\" value: \"IN\" } output_map { key: \"OUTPUT0\" value: \"TMP\" } },\n"
    "  { model_name: \"b\" model_version: 2 input_map [ { key: \"X\" value: \"TMP\" }, { key: "
    "\"Y\" value: \"IN\" } ] output_map { key: \"Z\" value: \"OUT\" } } ] }\n";

static void test_ensemble(void **state) {
  (void)state;
  hark_model_config *cfg = parse_in(ENSEMBLE, "ens");
  assert_string_equal(cfg->platform, "ensemble");
  assert_string_equal(cfg->backend, "");
  assert_int_equal(cfg->n_ensemble_steps, 2);
  const hark_ensemble_step *s = &cfg->ensemble_steps[0];
  assert_string_equal(s->model_name, "a");
  assert_int_equal(s->model_version, -1);
  assert_int_equal(s->n_input_map, 1);
  assert_string_equal(s->input_map[0].key, "INPUT0");
  assert_string_equal(s->input_map[0].value, "IN");
  assert_string_equal(s->output_map[0].key, "OUTPUT0");
  assert_string_equal(s->output_map[0].value, "TMP");
  s = &cfg->ensemble_steps[1];
  assert_int_equal(s->model_version, 2);
  assert_int_equal(s->n_input_map, 2);
  assert_string_equal(s->input_map[1].key, "Y");
  assert_int_equal(s->n_output_map, 1);
  hark_model_config_free(cfg);
  /* model_version left out means the latest. */
  cfg = parse("platform: \"ensemble\" ensemble_scheduling { step { model_name: \"m\" } }");
  assert_int_equal(cfg->ensemble_steps[0].model_version, -1);
  assert_int_equal(cfg->ensemble_steps[0].n_input_map, 0);
  hark_model_config_free(cfg);
}

/* Triton's platform for TorchScript stands for hark's pytorch backend. */
static void test_platform_backend(void **state) {
  (void)state;
  hark_model_config *cfg = parse("platform: \"pytorch_libtorch\"");
  assert_string_equal(cfg->platform, "pytorch_libtorch");
  assert_string_equal(cfg->backend, "pytorch");
  hark_model_config_free(cfg);
  cfg = parse("platform: \"pytorch_libtorch\" backend: \"pytorch\"");
  assert_string_equal(cfg->backend, "pytorch");
  hark_model_config_free(cfg);
  cfg = parse("backend: \"pytorch\"");
  assert_string_equal(cfg->platform, "");
  hark_model_config_free(cfg);
}

static void test_parameters_and_misc(void **state) {
  (void)state;
  hark_model_config *cfg = parse(
      "backend: \"b\"\n"
      "parameters { key: \"a\" value: { string_value: \"1\" } }\n"
      "parameters [ { key: \"b\" value { string_value: \"two\" \" "
      "parts\" } }, { key: \"empty\" } ]\n"
      "default_model_filename: \"model.bin\"\n"
      "model_transaction_policy { }\n");
  assert_int_equal(cfg->n_parameters, 3);
  assert_string_equal(hark_model_config_parameter(cfg, "a"), "1");
  assert_string_equal(hark_model_config_parameter(cfg, "b"), "two parts");
  assert_string_equal(hark_model_config_parameter(cfg, "empty"), "");
  assert_string_equal(cfg->default_model_filename, "model.bin");
  assert_false(cfg->decoupled);
  hark_model_config_free(cfg);
  hark_model_config_free(NULL);
  assert_null(hark_model_config_parameter(NULL, "a"));
  assert_null(hark_model_config_to_json(NULL));
}

/* ---- JSON ------------------------------------------------------------------------ */

static void test_json_simple(void **state) {
  (void)state;
  hark_model_config *cfg = parse_in(SIMPLE, "simple");
  char *json = hark_model_config_to_json(cfg);
  assert_string_equal(
      json,
      "{\"name\":\"simple\",\"platform\":\"\",\"backend\":\"simple\","
      "\"version_policy\":{\"latest\":{\"num_versions\":1}},\"max_batch_size\":8,"
      "\"input\":[{\"name\":\"INPUT0\",\"data_type\":\"TYPE_INT32\",\"dims\":[16],\"optional\":"
      "false},"
      "{\"name\":\"INPUT1\",\"data_type\":\"TYPE_INT32\",\"dims\":[16],\"optional\":false}],"
      "\"output\":[{\"name\":\"OUTPUT0\",\"data_type\":\"TYPE_INT32\",\"dims\":[16]}],"
      "\"instance_group\":[{\"name\":\"simple_0\",\"kind\":\"KIND_CPU\",\"count\":2}],"
      "\"dynamic_batching\":{\"preferred_batch_size\":[4,8],\"max_queue_delay_microseconds\":100,"
      "\"preserve_ordering\":false,\"priority_levels\":0,\"default_priority_level\":0,"
      "\"default_queue_policy\":{\"timeout_action\":\"REJECT\",\"default_timeout_microseconds\":0,"
      "\"allow_timeout_override\":false,\"max_queue_size\":0},\"priority_queue_policy\":{}},"
      "\"parameters\":{\"cost_ms\":{\"string_value\":\"2\"}},"
      "\"model_transaction_policy\":{\"decoupled\":false},\"default_model_filename\":\"\"}");
  free(json);
  hark_model_config_free(cfg);
}

static cJSON *get(const cJSON *o, const char *path) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", path);
  const cJSON *cur = o;
  for (char *save, *k = strtok_r(buf, ".", &save); k; k = strtok_r(NULL, ".", &save)) {
    cur = cJSON_IsArray(cur) ? cJSON_GetArrayItem(cur, atoi(k))
                             : cJSON_GetObjectItemCaseSensitive(cur, k);
    if (!cur) fail_msg("no %s in the JSON", path);
  }
  return (cJSON *)cur;
}

static void test_json_full(void **state) {
  (void)state;
  hark_model_config *cfg = parse_in(
      "backend: \"b\" max_batch_size: 4\n"
      "version_policy { specific { versions: [ 2, 9007199254740993 ] } }\n"
      "input { name: \"I\" data_type: TYPE_UINT8 dims: [ -1, 3 ] optional: true }\n"
      "instance_group { count: 3 kind: KIND_MODEL name: \"g\" }\n"
      "dynamic_batching { priority_levels: 2 default_priority_level: 1\n"
      "  priority_queue_policy { key: 2 value { timeout_action: DELAY max_queue_size: 5 } } }\n"
      "model_transaction_policy { decoupled: true }\n",
      "x");
  char *json = hark_model_config_to_json(cfg);
  /* 64-bit integers keep every digit (a double would round this one). */
  assert_non_null(strstr(json, "\"versions\":[2,9007199254740993]"));
  cJSON *doc = cJSON_Parse(json);
  assert_non_null(doc);
  assert_int_equal(get(doc, "input.0.dims.0")->valueint, -1);
  assert_true(cJSON_IsTrue(get(doc, "input.0.optional")));
  assert_string_equal(get(doc, "input.0.data_type")->valuestring, "TYPE_UINT8");
  assert_int_equal(cJSON_GetArraySize(get(doc, "output")), 0);
  assert_string_equal(get(doc, "instance_group.0.kind")->valuestring, "KIND_MODEL");
  assert_string_equal(get(doc, "instance_group.0.name")->valuestring, "g");
  assert_int_equal(get(doc, "instance_group.0.count")->valueint, 3);
  assert_int_equal(get(doc, "dynamic_batching.priority_levels")->valueint, 2);
  assert_int_equal(get(doc, "dynamic_batching.default_priority_level")->valueint, 1);
  assert_string_equal(
      get(doc, "dynamic_batching.priority_queue_policy.2.timeout_action")->valuestring, "DELAY");
  assert_int_equal(get(doc, "dynamic_batching.priority_queue_policy.2.max_queue_size")->valueint,
                   5);
  assert_true(cJSON_IsTrue(get(doc, "model_transaction_policy.decoupled")));
  assert_null(cJSON_GetObjectItem(doc, "ensemble_scheduling"));
  cJSON_Delete(doc);
  free(json);
  hark_model_config_free(cfg);

  cfg = parse("backend: \"b\" version_policy { all {} }");
  json = hark_model_config_to_json(cfg);
  assert_non_null(strstr(json, "\"version_policy\":{\"all\":{}}"));
  assert_null(strstr(json, "dynamic_batching"));
  free(json);
  hark_model_config_free(cfg);

  cfg = parse_in(ENSEMBLE, "ens");
  json = hark_model_config_to_json(cfg);
  assert_non_null(
      strstr(json,
             "\"ensemble_scheduling\":{\"step\":[{\"model_name\":\"a\",\"model_version\":-1,"
             "\"input_map\":{\"INPUT0\":\"IN\"},\"output_map\":{\"OUTPUT0\":\"TMP\"}},"
             "{\"model_name\":\"b\",\"model_version\":2,\"input_map\":{\"X\":\"TMP\","
             "\"Y\":\"IN\"},\"output_map\":{\"Z\":\"OUT\"}}]}"));
  assert_non_null(strstr(json, "\"platform\":\"ensemble\",\"backend\":\"\""));
  free(json);
  hark_model_config_free(cfg);
}

/* ---- errors ------------------------------------------------------------------------ */

typedef struct bad_config {
  const char *text;
  const char *message;
} bad_config;

static void run_table(const bad_config *t, size_t n, hark_code code) {
  for (size_t i = 0; i < n; i++)
    expect_error_in(t[i].text, strlen(t[i].text), "x", code, t[i].message);
}

static void test_schema_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"backend: \"b\"\nfoo: 1\n", F ":2: unknown field 'foo'"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching {\n  foo: 1\n}\n",
       F ":4: unknown field 'foo' in 'dynamic_batching'"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { default_queue_policy { bar: 1 } }",
       F ":3: unknown field 'bar' in 'dynamic_batching.default_queue_policy'"},
      {"backend: \"b\"\nparameters { key: \"k\" value { int_value: 3 } }",
       F ":2: unknown field 'int_value' in 'parameters.value'"},
      {"backend: \"b\"\noutput { name: \"O\" data_type: TYPE_FP32\n optional: true }",
       F ":3: unknown field 'optional' in 'output'"},
      {"backend: \"b\"\nunknown_list: []", F ":2: unknown field 'unknown_list'"},
      {"backend: \"b\"\nmax_batch_size: \"8\"",
       F ":2: field 'max_batch_size' expects an unsigned integer, not a string"},
      {"name: 5\nbackend: \"b\"", F ":1: field 'name' expects a string, not an integer '5'"},
      {"name: x", F ":1: field 'name' expects a string, not an identifier 'x'"},
      {"backend { }", F ":1: field 'backend' expects a string, not a message"},
      {"backend: \"b\"\ndynamic_batching: 1",
       F ":2: field 'dynamic_batching' expects a message, not an integer '1'"},
      {"backend: \"b\"\nmax_batch_size: 1.5",
       F ":2: field 'max_batch_size' expects an unsigned integer, not a number '1.5'"},
      {"backend: \"b\"\nmax_batch_size: [1, 2]",
       F ":2: field 'max_batch_size' is not repeated: it takes no list"},
      {"backend: \"b\"\ndynamic_batching [ { } ]",
       F ":2: field 'dynamic_batching' is not repeated: it takes no list"},
      {"backend: \"b\"\nbackend: \"c\"", F ":2: field 'backend' is set more than once"},
      {"backend: \"b\"\nmax_batch_size: 4\ndynamic_batching { max_queue_delay_microseconds: 1\n"
       "max_queue_delay_microseconds: 2 }",
       F ":4: field 'max_queue_delay_microseconds' in 'dynamic_batching' is set more than once"},
      {"backend: \"b\"\nmodel_transaction_policy { decoupled: yes }",
       F ":2: field 'decoupled' expects true or false, not an identifier 'yes'"},
      {"backend: \"b\"\nmodel_transaction_policy { decoupled: 2 }",
       F ":2: field 'decoupled' expects true or false, not an integer '2'"},
      {"backend: \"b\"\nmodel_transaction_policy { decoupled: \"true\" }",
       F ":2: field 'decoupled' expects true or false, not a string"},
      {"backend: \"b\"\nparameters { key: \"k\" value: \"v\" }",
       F ":2: field 'value' expects a message, not a string"},
      {"backend: \"b\"\ninstance_group { kind: \"KIND_CPU\" }",
       F ":2: field 'kind' expects an enum name, not a string"},
      {"name: \"a\\0b\"", F ":1: field 'name' holds a NUL byte"},
      {"backend: \"b\"\nmax_batch_size: 99999999999999999999",
       F ":2: integer '99999999999999999999' does not fit in 64 bits"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FP32 dims: [1] }\ninput { name: \"J\" ",
       F ":3: unexpected end of input: '{' opened at line 3 is not closed"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
}

static void test_unsupported_fields(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"backend: \"b\"\nsequence_batching {\n iterative_sequence: true }\n",
       F ":3: unsupported field 'iterative_sequence' in 'sequence_batching'"},
      {"backend: \"b\"\nsequence_batching { oldest { max_candidate_sequences: 1\n"
       " preserve_ordering: true } }",
       F ":3: unsupported field 'preserve_ordering' in 'sequence_batching.oldest'"},
      {"backend: \"b\"\nsequence_batching { state { input_name: \"a\" output_name: \"b\" "
       "data_type: TYPE_FP32 dims: [1]\n initial_state { data_type: TYPE_FP32 dims: [1] data_file: "
       "\"f\" } } }",
       F ":3: unsupported field 'data_file' in 'sequence_batching.state.initial_state'"},
      {"backend: \"b\"\n\noptimization { }", F ":3: unsupported field 'optimization'"},
      {"backend: \"b\"\ninput [ { name: \"I\" data_type: TYPE_FP32 dims: [1] reshape: { shape: [] "
       "} } ]",
       F ":2: unsupported field 'reshape' in 'input'"},
      {"backend: \"b\"\ninstance_group [ { count: 1\n gpus: [ 0 ] } ]",
       F ":3: unsupported field 'gpus' in 'instance_group': hark does not place instances on GPUs "
         "(leave gpus out or empty)"},
      {"backend: \"b\"\ninstance_group { rate_limiter { } }",
       F ":2: unsupported field 'rate_limiter' in 'instance_group'"},
      {"platform: \"tensorrt_plan\"",
       F ":1: unsupported platform 'tensorrt_plan': hark runs a model through its 'backend', as "
         "platform \"ensemble\" or as platform \"pytorch_libtorch\""},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_UNSUPPORTED);
}

static void test_io_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"backend: \"b\"\ninput { name: \"I\"\n data_type: \"TYPE_FP32\" }",
       F ":3: field 'data_type' expects an enum name, not a string"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FOO }",
       F ":2: unknown data_type 'TYPE_FOO' (expected TYPE_BOOL, TYPE_INT32, TYPE_FP32, "
         "TYPE_STRING, ...)"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_INVALID }",
       F ":2: unknown data_type 'TYPE_INVALID' (expected TYPE_BOOL, TYPE_INT32, TYPE_FP32, "
         "TYPE_STRING, ...)"},
      {"backend: \"b\"\n\ninput { name: \"I\" dims: [1] }", F ":3: input 'I' has no data_type"},
      {"backend: \"b\"\noutput { data_type: TYPE_FP32 dims: [1] }", F ":2: output without a name"},
      {"backend: \"b\"\noutput { name: \"\" data_type: TYPE_FP32 }", F ":2: output without a name"},
      {"backend: \"b\"\ninput [ { name: \"I\" data_type: TYPE_FP32 },\n { name: \"I\" data_type: "
       "TYPE_FP16 } ]",
       F ":3: duplicate input 'I'"},
      {"backend: \"b\"\noutput { name: \"O\" data_type: TYPE_FP32 }\noutput { name: \"O\" "
       "data_type: TYPE_FP32 }",
       F ":3: duplicate output 'O'"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FP32 dims: [ 4,\n 0 ] }",
       F ":3: dims entry 0 must be >= 1, or -1 for a variable size"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FP32 dims: [ \"4\" ] }",
       F ":2: field 'dims' expects an integer, not a string"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FP32 dims: -2 }",
       F ":2: dims entry -2 must be >= 1, or -1 for a variable size"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FP32 dims: [ -9223372036854775808 ] }",
       F ":2: dims entry -9223372036854775808 must be >= 1, or -1 for a variable size"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FP32 dims: [ 9223372036854775808 ] }",
       F ":2: value 9223372036854775808 for field 'dims' is out of range [-9223372036854775808, "
         "9223372036854775807]"},
      {"backend: \"b\"\ninput { name: \"I\" data_type: TYPE_FP32 dims: [ 1, 1, 1, 1, 1, 1, 1, 1,\n "
       "1 ] }",
       F ":3: more than 8 dims"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
}

static void test_value_range_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"backend: \"b\"\nmax_batch_size: -1",
       F ":2: value -1 for field 'max_batch_size' is out of range [0, 2147483647]"},
      {"backend: \"b\"\nmax_batch_size: 2147483648",
       F ":2: value 2147483648 for field 'max_batch_size' is out of range [0, 2147483647]"},
      {"backend: \"b\"\nmax_batch_size: 18446744073709551615", F
       ":2: value 18446744073709551615 for field 'max_batch_size' is out of range [0, 2147483647]"},
      {"backend: \"b\"\ninstance_group { count: 0 }",
       F ":2: value 0 for field 'count' is out of range [1, 1024]"},
      {"backend: \"b\"\ninstance_group { count: 1025 }",
       F ":2: value 1025 for field 'count' is out of range [1, 1024]"},
      {"backend: \"b\"\ninstance_group { kind: KIND_TPU }",
       F ":2: field 'kind' has no value 'KIND_TPU' (expected one of KIND_AUTO, KIND_CPU, KIND_GPU, "
         "KIND_MODEL)"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { default_queue_policy { "
       "timeout_action: FOO } }",
       F ":3: field 'timeout_action' has no value 'FOO' (expected one of REJECT, DELAY)"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { default_queue_policy { "
       "max_queue_size: 4294967296 } }",
       F ":3: value 4294967296 for field 'max_queue_size' is out of range [0, 4294967295]"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { max_queue_delay_microseconds: -5 }",
       F ":3: value -5 for field 'max_queue_delay_microseconds' is out of range [0, "
         "18446744073709551615]"},
      {"backend: \"b\"\nversion_policy { latest { num_versions: 0 } }",
       F ":2: value 0 for field 'num_versions' is out of range [1, 4294967295]"},
      {"backend: \"b\"\nversion_policy { specific { versions: [ -1 ] } }",
       F ":2: value -1 for field 'versions' is out of range [0, 9223372036854775807]"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
}

static void test_batching_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"backend: \"b\"\nmax_batch_size: 4\ndynamic_batching { preferred_batch_size: [ 0 ] }",
       F ":3: value 0 for field 'preferred_batch_size' is out of range [1, 2147483647]"},
      {"backend: \"b\"\ndynamic_batching {\n preferred_batch_size: [ 2,\n 8 ] }\nmax_batch_size: 4",
       F ":4: preferred_batch_size 8 is larger than max_batch_size 4"},
      {"backend: \"b\"\nmax_batch_size: 16\ndynamic_batching { preferred_batch_size: [ 1, 2, 3, 4, "
       "5, 6, 7, 8, "
       "9, 10, 11, 12, 13, 14, 15, 16,\n 16 ] }",
       F ":4: more than 16 preferred_batch_size values"},
      {"backend: \"b\"\n\ndynamic_batching { }",
       F ":3: dynamic_batching needs max_batch_size > 0 (the model must batch)"},
      {"backend: \"b\"\nmax_batch_size: 0\ndynamic_batching { max_queue_delay_microseconds: 10 }",
       F ":3: dynamic_batching needs max_batch_size > 0 (the model must batch)"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching {\n priority_levels: 2 }",
       F ":3: default_priority_level 0 must be in [1, 2] when priority_levels is 2"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching {\n priority_levels: 2\n "
       "default_priority_level: 3 }",
       F ":5: default_priority_level 3 must be in [1, 2] when priority_levels is 2"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching {\n default_priority_level: 1 }",
       F ":4: default_priority_level 1 needs priority_levels"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { priority_levels: 1025 }",
       F ":3: value 1025 for field 'priority_levels' is out of range [0, 1024]"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { priority_levels: 2 "
       "default_priority_level: 1\n"
       " priority_queue_policy { key: 1 }\n priority_queue_policy { key: 3 } }",
       F ":5: priority_queue_policy key 3 is above priority_levels 2"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { priority_queue_policy [ { key: 1 } ] "
       "}",
       F ":3: priority_queue_policy key 1 is above priority_levels 0"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { priority_levels: 2 "
       "default_priority_level: 1\n"
       " priority_queue_policy [ { key: 1 },\n { key: 1 } ] }",
       F ":5: duplicate priority_queue_policy key 1"},
      {"backend: \"b\"\nmax_batch_size: 1\ndynamic_batching { priority_levels: 2 "
       "default_priority_level: 1\n"
       " priority_queue_policy { value { } } }",
       F ":4: priority_queue_policy entry without a key"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
}

/* ---- adaptive_queue_delay (hark's own) --------------------------------------------- */

#define SEQ_OLDEST(inner)                                                                       \
  "backend: \"b\"\nmax_batch_size: 8\nsequence_batching {\n oldest { max_candidate_sequences: " \
  "16\n" inner " } }"

static void test_adaptive_queue_delay(void **state) {
  (void)state;
  /* Absent: nothing changes. */
  hark_model_config *cfg = parse_in(SIMPLE, "simple");
  assert_false(cfg->dynamic_adaptive_delay.enabled);
  assert_false(cfg->oldest_adaptive_delay.enabled);
  hark_model_config_free(cfg);

  /* Defaults: target is the largest preferred size; the start is min. */
  cfg = parse(
      "backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 4, "
      "2 ]\n adaptive_queue_delay { min_microseconds: 100 max_microseconds: 5000 } }");
  const hark_adaptive_delay *a = &cfg->dynamic_adaptive_delay;
  assert_true(a->enabled);
  assert_int_equal(a->min_us, 100);
  assert_int_equal(a->max_us, 5000);
  assert_int_equal(a->target_queue_depth, 4);
  assert_int_equal(a->start_us, 100);
  char *json = hark_model_config_to_json(cfg);
  cJSON *doc = cJSON_Parse(json);
  assert_int_equal(get(doc, "dynamic_batching.adaptive_queue_delay.min_microseconds")->valueint,
                   100);
  assert_int_equal(get(doc, "dynamic_batching.adaptive_queue_delay.max_microseconds")->valueint,
                   5000);
  assert_int_equal(get(doc, "dynamic_batching.adaptive_queue_delay.target_queue_depth")->valueint,
                   4);
  cJSON_Delete(doc);
  free(json);
  hark_model_config_free(cfg);

  /* Without preferred sizes: max_batch_size; max_queue_delay is the start. */
  cfg = parse(
      "backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { "
      "max_queue_delay_microseconds: 700\n adaptive_queue_delay { max_microseconds: 800 "
      "target_queue_depth: 3 } }");
  a = &cfg->dynamic_adaptive_delay;
  assert_int_equal(a->min_us, 0);
  assert_int_equal(a->target_queue_depth, 3);
  assert_int_equal(a->start_us, 700);
  hark_model_config_free(cfg);
  cfg = parse(
      "backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { "
      "adaptive_queue_delay { max_microseconds: 800 } }");
  assert_int_equal(cfg->dynamic_adaptive_delay.target_queue_depth, 8);
  hark_model_config_free(cfg);

  /* oldest: the same block; max_batch_size 1 still gets a target of 2. */
  cfg = parse(SEQ_OLDEST(" adaptive_queue_delay { min_microseconds: 10 max_microseconds: 20 }"));
  a = &cfg->oldest_adaptive_delay;
  assert_true(a->enabled);
  assert_false(cfg->dynamic_adaptive_delay.enabled);
  assert_int_equal(a->target_queue_depth, 8);
  json = hark_model_config_to_json(cfg);
  doc = cJSON_Parse(json);
  assert_int_equal(
      get(doc, "sequence_batching.oldest.adaptive_queue_delay.max_microseconds")->valueint, 20);
  cJSON_Delete(doc);
  free(json);
  hark_model_config_free(cfg);
  cfg = parse(
      "backend: \"b\"\nmax_batch_size: 1\nsequence_batching { oldest { "
      "max_candidate_sequences: 4 adaptive_queue_delay { max_microseconds: 20 } } }");
  assert_int_equal(cfg->oldest_adaptive_delay.target_queue_depth, 2);
  hark_model_config_free(cfg);
}

static void test_adaptive_queue_delay_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching {\n adaptive_queue_delay {\n "
       "min_microseconds: 5000 max_microseconds: 1000 } }",
       F ":5: dynamic_batching.adaptive_queue_delay.min_microseconds 5000 is larger than "
         "max_microseconds 1000"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching {\n adaptive_queue_delay { "
       "min_microseconds: 10 } }",
       F ":4: dynamic_batching.adaptive_queue_delay needs max_microseconds (the widest the queue "
         "delay may grow, 1 to 10000000)"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { adaptive_queue_delay {\n "
       "max_microseconds: 20000000 } }",
       F ":4: value 20000000 for field 'max_microseconds' is out of range [1, 10000000]"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { adaptive_queue_delay {\n "
       "max_microseconds: 0 } }",
       F ":4: value 0 for field 'max_microseconds' is out of range [1, 10000000]"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { adaptive_queue_delay {\n "
       "min_microseconds: -5 max_microseconds: 10 } }",
       F ":4: value -5 for field 'min_microseconds' is out of range [0, 10000000]"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { adaptive_queue_delay {\n "
       "max_microseconds: 10 target_queue_depth: 1 } }",
       F ":4: value 1 for field 'target_queue_depth' is out of range [2, 1048576]"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching { adaptive_queue_delay { "
       "max_microseconds: 10 unknown: 1 } }",
       F ":3: unknown field 'unknown' in 'dynamic_batching.adaptive_queue_delay'"},
      {"backend: \"b\"\nmax_batch_size: 8\ndynamic_batching {\n max_queue_delay_microseconds: 50\n "
       "adaptive_queue_delay { min_microseconds: 100 max_microseconds: 1000 } }",
       F ":4: dynamic_batching.max_queue_delay_microseconds 50 is outside adaptive_queue_delay's "
         "[100, 1000]: with adaptive_queue_delay it is the delay to start from"},
      {SEQ_OLDEST(" max_queue_delay_microseconds: 5000\n adaptive_queue_delay { max_microseconds: "
                  "1000 }"),
       F ":5: sequence_batching.oldest.max_queue_delay_microseconds 5000 is outside "
         "adaptive_queue_delay's [0, 1000]: with adaptive_queue_delay it is the delay to start "
         "from"},
      {SEQ_OLDEST(" adaptive_queue_delay {\n min_microseconds: 9 max_microseconds: 8 }"),
       F ":6: sequence_batching.oldest.adaptive_queue_delay.min_microseconds 9 is larger than "
         "max_microseconds 8"},
      /* Where it does not belong: the strategy without a queue delay. */
      {"backend: \"b\"\nmax_batch_size: 8\nsequence_batching { direct {\n adaptive_queue_delay { "
       "max_microseconds: 10 } } }",
       F ":4: adaptive_queue_delay adapts a batcher's max_queue_delay_microseconds: it belongs "
         "inside dynamic_batching or sequence_batching's 'oldest' strategy (the 'direct' strategy "
         "batches by slot and has no such delay)"},
      {"backend: \"b\"\nmax_batch_size: 8\nsequence_batching {\n adaptive_queue_delay { "
       "max_microseconds: 10 } }",
       F ":4: adaptive_queue_delay adapts a batcher's max_queue_delay_microseconds: it belongs "
         "inside dynamic_batching or sequence_batching's 'oldest' strategy (the 'direct' strategy "
         "batches by slot and has no such delay)"},
      {"backend: \"b\"\nadaptive_queue_delay { max_microseconds: 10 }",
       F ":2: unknown field 'adaptive_queue_delay'"},
      {"backend: \"b\"\n\ndynamic_batching { adaptive_queue_delay { max_microseconds: 10 } }",
       F ":3: dynamic_batching needs max_batch_size > 0 (the model must batch)"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
}

/* ---- sequence_batching ------------------------------------------------------------ */

static void test_sequence_batching_defaults(void **state) {
  (void)state;
  hark_model_config *cfg = parse("backend: \"b\"\nsequence_batching { }\n");
  const hark_sequence_batching *sb = &cfg->sequence_batching;
  assert_true(sb->enabled);
  assert_int_equal(sb->strategy, HARK_SEQ_DIRECT);
  assert_int_equal(sb->max_sequence_idle_us, 1000000); /* Triton's 1 s */
  assert_int_equal(sb->n_controls, 0);
  assert_int_equal(sb->n_states, 0);
  assert_false(cfg->dynamic_batching.enabled);
  hark_model_config_free(cfg);
  cfg = parse("backend: \"b\"\n");
  assert_false(cfg->sequence_batching.enabled);
  hark_model_config_free(cfg);
}

static const char SEQ_FULL[] =
    "backend: \"b\"\nmax_batch_size: 8\n"
    "input [ { name: \"IN\" data_type: TYPE_FP32 dims: [ 4 ] } ]\n"
    "sequence_batching {\n"
    "  max_sequence_idle_microseconds: 500000\n"
    "  oldest { max_candidate_sequences: 4000 preferred_batch_size: [ 4, 8 ] "
    "max_queue_delay_microseconds: 250 }\n"
    "  control_input [\n"
    "    { name: \"S\" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },\n"
    "    { name: \"E\" control { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1.5 ] } },\n"
    "    { name: \"R\" control { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } "
    "},\n"
    "    { name: \"C\" control { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } }\n"
    "  ]\n"
    "  state [ { input_name: \"h_in\" output_name: \"h_out\" data_type: TYPE_FP32 dims: [ -1, 3 ]\n"
    "            initial_state { data_type: TYPE_FP32 dims: [ 2, 3 ] zero_data: true name: \"z\" } "
    "},\n"
    "          { input_name: \"c_in\" output_name: \"c_out\" data_type: TYPE_INT32 dims: [ 1 ] } "
    "]\n"
    "}\n";

static void test_sequence_batching_full(void **state) {
  (void)state;
  hark_model_config *cfg = parse(SEQ_FULL);
  const hark_sequence_batching *sb = &cfg->sequence_batching;
  assert_int_equal(sb->strategy, HARK_SEQ_OLDEST);
  assert_int_equal(sb->max_sequence_idle_us, 500000);
  assert_int_equal(sb->max_candidate_sequences, 4000);
  assert_int_equal(sb->n_preferred_batch_size, 2);
  assert_int_equal(sb->preferred_batch_size[1], 8);
  assert_int_equal(sb->oldest_max_queue_delay_us, 250);
  assert_int_equal(sb->n_controls, 4);
  assert_string_equal(sb->controls[0].name, "S");
  assert_int_equal(sb->controls[0].kind, HARK_SEQ_CONTROL_START);
  assert_int_equal(sb->controls[0].datatype, HARK_TYPE_INT32);
  assert_int_equal(sb->controls[0].int32_false_true[1], 1);
  assert_int_equal(sb->controls[1].kind, HARK_SEQ_CONTROL_END);
  assert_int_equal(sb->controls[1].datatype, HARK_TYPE_FP32);
  assert_true(sb->controls[1].fp32_false_true[1] == 1.5f);
  assert_int_equal(sb->controls[2].kind, HARK_SEQ_CONTROL_READY);
  assert_true(sb->controls[2].bool_false_true[1]);
  assert_false(sb->controls[2].bool_false_true[0]);
  assert_int_equal(sb->controls[3].kind, HARK_SEQ_CONTROL_CORRID);
  assert_int_equal(sb->controls[3].datatype, HARK_TYPE_BYTES);
  assert_int_equal(sb->n_states, 2);
  assert_string_equal(sb->states[0].output_name, "h_out");
  assert_int_equal(sb->states[0].ndims, 2);
  assert_int_equal(sb->states[0].dims[0], -1);
  assert_true(sb->states[0].has_initial);
  assert_int_equal(sb->states[0].initial_dims[0], 2);
  assert_false(sb->states[1].has_initial);
  /* JSON in Triton's shape, and it reparses. */
  char *json = hark_model_config_to_json(cfg);
  cJSON *doc = cJSON_Parse(json);
  assert_non_null(doc);
  assert_int_equal(get(doc, "sequence_batching.max_sequence_idle_microseconds")->valueint, 500000);
  assert_int_equal(get(doc, "sequence_batching.oldest.max_candidate_sequences")->valueint, 4000);
  assert_string_equal(get(doc, "sequence_batching.control_input.3.control.0.kind")->valuestring,
                      "CONTROL_SEQUENCE_CORRID");
  assert_string_equal(
      get(doc, "sequence_batching.control_input.3.control.0.data_type")->valuestring,
      "TYPE_STRING");
  assert_int_equal(get(doc, "sequence_batching.state.0.initial_state.0.dims.0")->valueint, 2);
  cJSON_Delete(doc);
  free(json);
  hark_model_config_free(cfg);

  cfg = parse(
      "backend: \"b\"\nmax_batch_size: 2\nsequence_batching { direct { "
      "max_queue_delay_microseconds: 100 minimum_slot_utilization: 0.5 } }");
  assert_int_equal(cfg->sequence_batching.strategy, HARK_SEQ_DIRECT);
  assert_int_equal(cfg->sequence_batching.direct_max_queue_delay_us, 100);
  assert_true(cfg->sequence_batching.minimum_slot_utilization == 0.5f);
  hark_model_config_free(cfg);
}

static void test_sequence_batching_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"backend: \"b\"\nsequence_batching {\n foo: 1 }",
       F ":3: unknown field 'foo' in 'sequence_batching'"},
      {"backend: \"b\"\nsequence_batching { oldest {\n max_candidates: 1 } }",
       F ":3: unknown field 'max_candidates' in 'sequence_batching.oldest'"},
      {"backend: \"b\"\nmax_batch_size: 4\ndynamic_batching { }\nsequence_batching { }",
       F ":4: a model takes one of dynamic_batching and sequence_batching, not both"},
      {"backend: \"b\"\nsequence_batching { direct { }\n oldest { max_candidate_sequences: 1 } }",
       F ":3: sequence_batching takes only one of 'direct' and 'oldest'"},
      {"backend: \"b\"\nsequence_batching { oldest {\n } }",
       F ":2: oldest needs max_candidate_sequences >= 1"},
      {"backend: \"b\"\nmax_batch_size: 2\nsequence_batching { oldest { max_candidate_sequences: "
       "1\n"
       " preferred_batch_size: [ 4 ] } }",
       F ":4: oldest.preferred_batch_size 4 is larger than max_batch_size 2"},
      {"backend: \"b\"\nsequence_batching { direct { minimum_slot_utilization: 1.5 } }",
       F ":2: value 1.5 for field 'minimum_slot_utilization' is out of range [0, 1]"},
      {"backend: \"b\"\nsequence_batching { control_input {\n control { kind: "
       "CONTROL_SEQUENCE_START "
       "int32_false_true: [0, 1] } } }",
       F ":2: control_input without a name"},
      {"backend: \"b\"\nsequence_batching { control_input { name: \"S\"\n control { kind: "
       "CONTROL_SEQUENCE_START int32_false_true: [ 1 ] } } }",
       F ":3: control_input 'S': CONTROL_SEQUENCE_START takes exactly two values in one of "
         "int32_false_true, fp32_false_true, bool_false_true (and no data_type)"},
      {"backend: \"b\"\nsequence_batching { control_input { name: \"C\"\n control { kind: "
       "CONTROL_SEQUENCE_CORRID } } }",
       F ":3: control_input 'C': CONTROL_SEQUENCE_CORRID takes a data_type and no *_false_true "
         "values"},
      {"backend: \"b\"\nsequence_batching { control_input { name: \"C\" control { kind: "
       "CONTROL_SEQUENCE_CORRID\n data_type: TYPE_FP32 } } }",
       F ":3: control data_type 'TYPE_FP32' is not one of TYPE_INT32, TYPE_UINT32, TYPE_INT64, "
         "TYPE_UINT64, TYPE_STRING"},
      {"backend: \"b\"\nsequence_batching { control_input { name: \"S\" control { kind: "
       "CONTROL_SEQUENCE_START int32_false_true: [0, 1] } }\n control_input { name: \"T\" control "
       "{ "
       "kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] } } }",
       F ":3: control_input 'T' repeats CONTROL_SEQUENCE_START (already on 'S')"},
      {"backend: \"b\"\ninput { name: \"S\" data_type: TYPE_INT32 dims: [1] }\nsequence_batching "
       "{\n control_input { name: \"S\" control { kind: CONTROL_SEQUENCE_START int32_false_true: "
       "[0, "
       "1] } } }",
       F ":4: control_input 'S' is also a model input: the engine supplies it"},
      {"backend: \"b\"\nsequence_batching { state {\n input_name: \"a\" data_type: TYPE_FP32 dims: "
       "[1] } }",
       F ":2: state needs both input_name and output_name"},
      {"backend: \"b\"\nsequence_batching { state { input_name: \"a\" output_name: \"b\"\n "
       "data_type: TYPE_STRING dims: [1] } }",
       F
       ":3: state data_type 'TYPE_STRING' is not a fixed-size tensor type (TYPE_INT32, TYPE_FP32, "
       "...)"},
      {"backend: \"b\"\nsequence_batching { state {\n input_name: \"a\" output_name: \"b\" "
       "data_type: TYPE_FP32 dims: [-1] } }",
       F ":2: state 'a' has variable dims: give an initial_state with fixed dims"},
      {"backend: \"b\"\nsequence_batching { state { input_name: \"a\" output_name: \"b\" "
       "data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [3] zero_data: "
       "true } } }",
       F ":3: initial_state dims do not match state 'a' dims"},
      {"backend: \"b\"\nsequence_batching { state { input_name: \"a\" output_name: \"b\" "
       "data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_FP32 dims: [2] } } }",
       F ":3: initial_state needs zero_data: true (data_file is not supported)"},
      {"backend: \"b\"\nsequence_batching { state { input_name: \"a\" output_name: \"b\" "
       "data_type: TYPE_FP32 dims: [2]\n initial_state { data_type: TYPE_INT32 dims: [2] "
       "zero_data: "
       "true } } }",
       F ":3: initial_state data_type TYPE_INT32 differs from state 'a' data_type TYPE_FP32"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
}

static void test_model_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"name: \"y\"\nbackend: \"b\"", F ":1: model name 'y' does not match its folder name 'x'"},
      {"\nname: \"\"\nbackend: \"b\"", F ":2: 'name' is empty"},
      {"max_batch_size: 1",
       F ": model 'x' names no backend (set 'backend', or platform \"ensemble\")"},
      {"max_batch_size: 1\nbackend: \"\"",
       F ":2: model 'x' names no backend (set 'backend', or platform \"ensemble\")"},
      {"backend: \"b\"\nversion_policy { latest { num_versions: 1 }\n all { } }",
       F ":3: version_policy takes only one of 'latest', 'all' and 'specific'"},
      {"backend: \"b\"\nversion_policy {\n latest { } }",
       F ":3: version_policy.latest needs num_versions >= 1"},
      {"backend: \"b\"\nversion_policy {\n specific { versions: [] } }",
       F ":3: version_policy.specific needs at least one version"},
      {"backend: \"b\"\nparameters { key: \"k\" value { string_value: \"1\" } }\nparameters { key: "
       "\"k\" }",
       F ":3: duplicate parameters key 'k'"},
      {"backend: \"b\"\nparameters { value { string_value: \"1\" } }",
       F ":2: parameters entry without a key"},
      {"platform: \"pytorch_libtorch\"\n\nbackend: \"onnxruntime\"",
       F ":3: platform 'pytorch_libtorch' runs on backend 'pytorch', but 'backend' names "
         "'onnxruntime'"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
  expect_error_in("backend: \"b\"", 12, NULL, HARK_ERR_INVALID_ARG,
                  F ": no 'name', and no model folder name to take it from");
  expect_error_in("backend: \"b\"", 12, "", HARK_ERR_INVALID_ARG,
                  F ": no 'name', and no model folder name to take it from");
}

static void test_ensemble_errors(void **state) {
  (void)state;
  static const bad_config t[] = {
      {"platform: \"ensemble\"\nbackend: \"b\"\nensemble_scheduling { step { model_name: \"m\" } }",
       F ":2: an ensemble has no backend, found backend 'b'"},
      {"\nplatform: \"ensemble\"",
       F ":2: platform 'ensemble' requires ensemble_scheduling with at least one step"},
      {"platform: \"ensemble\"\nensemble_scheduling { }",
       F ":2: platform 'ensemble' requires ensemble_scheduling with at least one step"},
      {"backend: \"b\"\nensemble_scheduling { step { model_name: \"m\" } }",
       F ":2: ensemble_scheduling needs platform \"ensemble\""},
      {"platform: \"ensemble\"\nensemble_scheduling { step [ { model_name: \"m\" },\n { "
       "model_version: 1 } ] }",
       F ":3: ensemble step without a model_name"},
      {"platform: \"ensemble\"\nensemble_scheduling { step { model_name: \"m\" model_version: -2 } "
       "}",
       F ":2: value -2 for field 'model_version' is out of range [-1, 9223372036854775807]"},
      {"platform: \"ensemble\"\nensemble_scheduling { step { model_name: \"m\"\n"
       " input_map { key: \"A\" value: \"X\" }\n input_map { key: \"A\" value: \"Y\" } } }",
       F ":4: duplicate input_map key 'A'"},
      {"platform: \"ensemble\"\nensemble_scheduling { step { model_name: \"m\"\n output_map { key: "
       "\"A\" } } }",
       F ":3: output_map entry 'A' without a value"},
      {"platform: \"ensemble\"\nensemble_scheduling { step { model_name: \"m\"\n input_map { "
       "value: \"A\" } } }",
       F ":3: input_map entry without a key"},
      {"platform: \"ensemble\"\nmax_batch_size: 2\nensemble_scheduling { step { model_name: \"m\" "
       "} }\n"
       "dynamic_batching { }",
       F ":4: an ensemble cannot use dynamic_batching: its steps' models batch"},
  };
  run_table(t, sizeof t / sizeof t[0], HARK_ERR_INVALID_ARG);
}

static void test_hostile_inputs(void **state) {
  (void)state;
  static const char nul[] = "backend: \"b\"\nname: \"x\0\"";
  expect_error_in(nul, sizeof nul - 1, "x", HARK_ERR_INVALID_ARG, F ":2: NUL byte in the text");
  expect_error("backend: \"b\"\nname: \"x",
               F ":2: unterminated string (a string ends on the line it starts)");
  /* Deep nesting inside a known field: the parser's bound stops it first. */
  size_t depth = 100000;
  char *deep = malloc(depth * 2 + 32);
  size_t n = (size_t)sprintf(deep, "dynamic_batching ");
  for (size_t i = 0; i < depth; i++) n += (size_t)sprintf(deep + n, "{a");
  expect_error(deep, F ":1: messages nested deeper than 64 levels");
  free(deep);
  /* Many inputs: arrays grow, and the last duplicate is still caught. */
  size_t count = 2000;
  char *many = malloc(count * 64 + 64);
  n = (size_t)sprintf(many, "backend: \"b\"\n");
  for (size_t i = 0; i < count; i++)
    n += (size_t)sprintf(many + n, "input { name: \"I%zu\" data_type: TYPE_FP32 dims: 1 }\n", i);
  hark_model_config *cfg = parse(many);
  assert_int_equal(cfg->n_inputs, count);
  assert_string_equal(cfg->inputs[count - 1].name, "I1999");
  hark_model_config_free(cfg);
  sprintf(many + n, "input { name: \"I7\" data_type: TYPE_FP32 }\n");
  expect_error(many, F ":2002: duplicate input 'I7'");
  free(many);
  /* A field name far longer than any message buffer is cut, not overflowed. */
  size_t long_len = 100000;
  char *longname = malloc(long_len + 8);
  memset(longname, 'z', long_len);
  memcpy(longname + long_len, ": 1", 4);
  hark_model_config *out = (hark_model_config *)1;
  hark_error *err = hark_model_config_parse(longname, strlen(longname), F, "x", &out);
  assert_non_null(err);
  assert_null(out);
  assert_non_null(strstr(hark_error_message(err), F ":1: unknown field 'zzzz"));
  hark_error_free(err);
  free(longname);
  /* Bytes that are not text at all. */
  static const char junk[] = "\xff\xfe\x01\x02";
  expect_error_in(junk, 4, "x", HARK_ERR_INVALID_ARG,
                  F ":1: expected a field name, found byte 0xff");
}

/* Every config the project ships must parse, and reparse to the same JSON. */
static void test_repository_models(void **state) {
  (void)state;
  const char *src = getenv("HARK_SOURCE_DIR");
  if (!src) src = ".";
  char path[4096];
  snprintf(path, sizeof path, "%s/models", src);
  DIR *d = opendir(path);
  if (!d) skip();
  int parsed = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/models/%s/config.pbtxt", src, e->d_name);
    FILE *f = fopen(path, "rb");
    if (!f) continue;
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof text, f);
    fclose(f);
    hark_model_config *cfg = NULL;
    hark_error *err = hark_model_config_parse(text, len, path, e->d_name, &cfg);
    if (err) fail_msg("%s", hark_error_message(err));
    assert_string_equal(cfg->name, e->d_name);
    char *json = hark_model_config_to_json(cfg);
    assert_non_null(json);
    cJSON *doc = cJSON_Parse(json);
    assert_non_null(doc);
    assert_string_equal(get(doc, "name")->valuestring, e->d_name);
    cJSON_Delete(doc);
    free(json);
    hark_model_config_free(cfg);
    parsed++;
  }
  closedir(d);
  assert_true(parsed >= 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_simple_example),
      cmocka_unit_test(test_defaults),
      cmocka_unit_test(test_version_policies),
      cmocka_unit_test(test_io_fields),
      cmocka_unit_test(test_bool_spellings),
      cmocka_unit_test(test_instance_groups),
      cmocka_unit_test(test_dynamic_batching_full),
      cmocka_unit_test(test_ensemble),
      cmocka_unit_test(test_platform_backend),
      cmocka_unit_test(test_parameters_and_misc),
      cmocka_unit_test(test_json_simple),
      cmocka_unit_test(test_json_full),
      cmocka_unit_test(test_schema_errors),
      cmocka_unit_test(test_unsupported_fields),
      cmocka_unit_test(test_io_errors),
      cmocka_unit_test(test_value_range_errors),
      cmocka_unit_test(test_batching_errors),
      cmocka_unit_test(test_adaptive_queue_delay),
      cmocka_unit_test(test_adaptive_queue_delay_errors),
      cmocka_unit_test(test_sequence_batching_defaults),
      cmocka_unit_test(test_sequence_batching_full),
      cmocka_unit_test(test_sequence_batching_errors),
      cmocka_unit_test(test_model_errors),
      cmocka_unit_test(test_ensemble_errors),
      cmocka_unit_test(test_hostile_inputs),
      cmocka_unit_test(test_repository_models),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
