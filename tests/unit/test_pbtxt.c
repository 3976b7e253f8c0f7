/* Unit tests for src/core/pbtxt.c: protobuf text format → field tree. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/pbtxt.h"

#define FILE_NAME "m/config.pbtxt"

static hark_pbtxt *parse_len(const char *text, size_t len) {
  hark_pbtxt *doc = NULL;
  hark_error *err = hark_pbtxt_parse(text, len, FILE_NAME, &doc);
  if (err) fail_msg("unexpected error: %s", hark_error_message(err));
  assert_non_null(doc);
  return doc;
}

static hark_pbtxt *parse(const char *text) { return parse_len(text, strlen(text)); }

static void expect_error_len(const char *text, size_t len, const char *message) {
  hark_pbtxt *doc = (hark_pbtxt *)1;
  hark_error *err = hark_pbtxt_parse(text, len, FILE_NAME, &doc);
  assert_non_null(err);
  assert_null(doc);
  assert_int_equal(hark_error_code(err), HARK_ERR_INVALID_ARG);
  assert_string_equal(hark_error_message(err), message);
  hark_error_free(err);
}

static void expect_error(const char *text, const char *message) {
  expect_error_len(text, strlen(text), message);
}

/* The index-th child of a message or list. */
static const hark_pb_field *child(const hark_pb_field *f, int index) {
  const hark_pb_field *c = f->child;
  while (c && index-- > 0) c = c->next;
  assert_non_null(c);
  return c;
}

static int count(const hark_pb_field *f) {
  int n = 0;
  for (const hark_pb_field *c = f->child; c; c = c->next) n++;
  return n;
}

static void test_scalars(void **state) {
  (void)state;
  hark_pbtxt *doc = parse(
      "s: \"hi\"\n"
      "i: 42\n"
      "n: -7\n"
      "h: 0x1F\n"
      "o: 017\n"
      "z: 0\n"
      "f: 1.5\n"
      "e: 1e3\n"
      "d: .25\n"
      "g: 2f\n"
      "ni: -inf\n"
      "nn: -nan\n"
      "id: TYPE_INT32\n"
      "b: true\n"
      "max: 18446744073709551615\n"
      "min: -9223372036854775808\n"
      "ne: -1.5e-2\n");
  const hark_pb_field *root = hark_pbtxt_root(doc);
  assert_int_equal(root->kind, HARK_PB_MESSAGE);
  assert_int_equal(count(root), 17);
  const hark_pb_field *f = child(root, 0);
  assert_string_equal(f->name, "s");
  assert_int_equal(f->kind, HARK_PB_STRING);
  assert_string_equal(f->text, "hi");
  assert_int_equal(f->len, 2);
  assert_int_equal(f->line, 1);
  f = child(root, 1);
  assert_int_equal(f->kind, HARK_PB_INT);
  assert_int_equal(f->u, 42);
  assert_false(f->negative);
  assert_int_equal(f->line, 2);
  f = child(root, 2);
  assert_int_equal(f->kind, HARK_PB_INT);
  assert_int_equal(f->u, 7);
  assert_true(f->negative);
  assert_string_equal(f->text, "-7");
  assert_int_equal(child(root, 3)->u, 31);
  assert_int_equal(child(root, 4)->u, 15);
  assert_int_equal(child(root, 5)->u, 0);
  f = child(root, 6);
  assert_int_equal(f->kind, HARK_PB_FLOAT);
  assert_true(f->d == 1.5);
  assert_true(child(root, 7)->d == 1000.0);
  assert_true(child(root, 8)->d == 0.25);
  assert_int_equal(child(root, 9)->kind, HARK_PB_FLOAT);
  assert_true(child(root, 9)->d == 2.0);
  assert_true(isinf(child(root, 10)->d) && child(root, 10)->d < 0);
  assert_true(isnan(child(root, 11)->d));
  f = child(root, 12);
  assert_int_equal(f->kind, HARK_PB_IDENT);
  assert_string_equal(f->text, "TYPE_INT32");
  assert_int_equal(child(root, 13)->kind, HARK_PB_IDENT);
  assert_string_equal(child(root, 13)->text, "true");
  assert_true(child(root, 14)->u == UINT64_MAX);
  f = child(root, 15);
  assert_true(f->negative && f->u == (uint64_t)1 << 63);
  assert_true(child(root, 16)->d == -0.015);
  assert_int_equal(child(root, 16)->line, 17);
  hark_pbtxt_free(doc);
}

static void test_string_escapes_and_concatenation(void **state) {
  (void)state;
  hark_pbtxt *doc = parse(
      "a: \"x\\n\\t\\\\\\\"\\'\\?\\a\\b\\f\\r\\v\"\n"
      "b: 'it''s' \"\\x41\\101\\u00e9\\U0001F600\"\n"
      "   # a comment between parts\n"
      "   \"!\"\n"
      "c: \"nul\\0in\"\n"
      "d: \"\"\n"
      "e: '\"'\n"
      "u: \"\\u0041\\u20ac\"\n");
  const hark_pb_field *root = hark_pbtxt_root(doc);
  const hark_pb_field *a = child(root, 0);
  assert_string_equal(a->text, "x\n\t\\\"'?\a\b\f\r\v");
  const hark_pb_field *b = child(root, 1);
  assert_string_equal(b->text, "itsAA\xc3\xa9\xf0\x9f\x98\x80!");
  assert_int_equal(b->line, 2);
  const hark_pb_field *c = child(root, 2);
  assert_int_equal(c->line, 5);
  assert_int_equal(c->len, 6);
  assert_memory_equal(c->text, "nul\0in", 6);
  assert_int_equal(strlen(c->text), 3); /* what a C-string consumer would see */
  assert_int_equal(child(root, 3)->len, 0);
  assert_string_equal(child(root, 3)->text, "");
  assert_string_equal(child(root, 4)->text, "\"");
  assert_string_equal(child(root, 5)->text, "A\xe2\x82\xac");
  hark_pbtxt_free(doc);
}

static void test_messages_lists_and_separators(void **state) {
  (void)state;
  hark_pbtxt *doc = parse(
      "# leading comment\n"
      "m { a: 1 b: \"x\" }\n"
      "c: { }\n"
      "angle < k: 2; >\n"
      "msgs [ { n: 1 }, { n: 2 } ],\n"
      "nums: [ 1, -2,\n"
      "        3 ];\n"
      "empty: []\n"
      "mixed: [ { n: 1 }, <n: 2> ]\n"
      "x: 1, y: 2; z: 3 # trailing\n");
  const hark_pb_field *root = hark_pbtxt_root(doc);
  assert_int_equal(count(root), 10);
  const hark_pb_field *m = child(root, 0);
  assert_int_equal(m->kind, HARK_PB_MESSAGE);
  assert_int_equal(m->line, 2);
  assert_int_equal(count(m), 2);
  assert_string_equal(child(m, 1)->name, "b");
  assert_int_equal(child(m, 1)->line, 2);
  assert_int_equal(child(root, 1)->kind, HARK_PB_MESSAGE);
  assert_null(child(root, 1)->child);
  const hark_pb_field *angle = child(root, 2);
  assert_int_equal(angle->kind, HARK_PB_MESSAGE);
  assert_int_equal(child(angle, 0)->u, 2);
  const hark_pb_field *msgs = child(root, 3);
  assert_int_equal(msgs->kind, HARK_PB_LIST);
  assert_int_equal(count(msgs), 2);
  assert_string_equal(child(msgs, 1)->name, "msgs");
  assert_int_equal(child(msgs, 1)->kind, HARK_PB_MESSAGE);
  assert_int_equal(child(child(msgs, 1), 0)->u, 2);
  const hark_pb_field *nums = child(root, 4);
  assert_int_equal(nums->kind, HARK_PB_LIST);
  assert_int_equal(count(nums), 3);
  assert_true(child(nums, 1)->negative);
  assert_int_equal(child(nums, 0)->line, 6);
  assert_int_equal(child(nums, 2)->line, 7);
  const hark_pb_field *empty = child(root, 5);
  assert_int_equal(empty->kind, HARK_PB_LIST);
  assert_null(empty->child);
  assert_int_equal(count(child(root, 6)), 2);
  assert_string_equal(child(root, 9)->name, "z");
  assert_int_equal(child(root, 9)->line, 10);
  hark_pbtxt_free(doc);
}

static void test_empty_and_comment_only(void **state) {
  (void)state;
  hark_pbtxt *doc = parse("");
  assert_null(hark_pbtxt_root(doc)->child);
  hark_pbtxt_free(doc);
  doc = parse_len(NULL, 0);
  assert_null(hark_pbtxt_root(doc)->child);
  hark_pbtxt_free(doc);
  doc = parse("# only\n  # comments\r\n\t\n");
  assert_null(hark_pbtxt_root(doc)->child);
  hark_pbtxt_free(doc);
  /* Not NUL-terminated: the parser stops at len. */
  doc = parse_len("a: 12345", 5);
  assert_int_equal(child(hark_pbtxt_root(doc), 0)->u, 12);
  hark_pbtxt_free(doc);
  hark_pbtxt_free(NULL);
  assert_null(hark_pbtxt_root(NULL));
}

static void test_kind_names(void **state) {
  (void)state;
  assert_string_equal(hark_pb_kind_name(HARK_PB_MESSAGE), "a message");
  assert_string_equal(hark_pb_kind_name(HARK_PB_LIST), "a list");
  assert_string_equal(hark_pb_kind_name(HARK_PB_STRING), "a string");
  assert_string_equal(hark_pb_kind_name(HARK_PB_INT), "an integer");
  assert_string_equal(hark_pb_kind_name(HARK_PB_FLOAT), "a number");
  assert_string_equal(hark_pb_kind_name(HARK_PB_IDENT), "an identifier");
}

static void test_syntax_errors(void **state) {
  (void)state;
  expect_error("a: 1\nb: \"open\n",
               FILE_NAME ":2: unterminated string (a string ends on the line it starts)");
  expect_error("a: 1\n\nb: 'open",
               FILE_NAME ":3: unterminated string (a string ends on the line it starts)");
  expect_error("a: \"x\\",
               FILE_NAME ":1: unterminated string (a string ends on the line it starts)");
  expect_error("m {\n a: 1\n",
               FILE_NAME ":3: unexpected end of input: '{' opened at line 1 is not closed");
  expect_error("m <\n a: 1 }",
               FILE_NAME ":2: expected a field name or the message's end, found '}'");
  expect_error("a: [1,\n2",
               FILE_NAME ":2: unexpected end of input: '[' opened at line 1 is not closed");
  expect_error("a: [1, 2,]", FILE_NAME ":1: expected a value for field 'a', found ']'");
  expect_error("a: [1 2]", FILE_NAME ":1: expected ',' or ']' in a list, found '2'");
  expect_error("a [1, 2]", FILE_NAME ":1: field 'a' needs ':' before a list of values");
  expect_error("a 1", FILE_NAME ":1: expected ':' or '{' after field 'a', found '1'");
  expect_error("a:", FILE_NAME ":1: expected a value for field 'a', found end of input");
  expect_error("}", FILE_NAME ":1: expected a field name, found '}'");
  expect_error("\n\n9a: 1", FILE_NAME ":3: expected a field name, found '9'");
  expect_error("[ext.field]: 1", FILE_NAME ":1: expected a field name, found '['");
  expect_error("a: @", FILE_NAME ":1: expected a value for field 'a', found '@'");
  expect_error("a: \"x\"\n\x80: 1", FILE_NAME ":2: expected a field name, found byte 0x80");
  expect_error("a: -foo", FILE_NAME ":1: expected a number after '-', found 'foo'");
  expect_error("a: -\"x\"", FILE_NAME ":1: expected a number after '-', found '\"'");
  expect_error("a: \"\\q\"", FILE_NAME ":1: invalid escape \\ before 'q'");
  expect_error("a: \"\\xZZ\"", FILE_NAME ":1: \\x escape needs hex digits");
  expect_error("a: \"\\777\"", FILE_NAME ":1: octal escape \\777 is over \\377");
  expect_error("a: \"\\u12\"", FILE_NAME ":1: \\u escape needs 4 hex digits");
  expect_error("a: \"\\uD800\"", FILE_NAME ":1: \\u escape names no Unicode character");
  expect_error("a: \"\\U00110000\"", FILE_NAME ":1: \\U escape names no Unicode character");
}

static void test_number_errors(void **state) {
  (void)state;
  expect_error("a: 18446744073709551616",
               FILE_NAME ":1: integer '18446744073709551616' does not fit in 64 bits");
  expect_error("\na: -99999999999999999999999",
               FILE_NAME ":2: integer '-99999999999999999999999' does not fit in 64 bits");
  expect_error("a: 0x10000000000000000",
               FILE_NAME ":1: integer '0x10000000000000000' does not fit in 64 bits");
  expect_error("a: 1.2.3", FILE_NAME ":1: invalid number '1.2.3'");
  expect_error("a: 08", FILE_NAME ":1: invalid number '08'");
  expect_error("a: 0x", FILE_NAME ":1: invalid number '0x'");
  expect_error("a: 12abc", FILE_NAME ":1: invalid number '12abc'");
  expect_error("a: 1e", FILE_NAME ":1: invalid number '1e'");
  expect_error("a: 1e999", FILE_NAME ":1: number '1e999' is out of range");
  char longnum[200];
  memset(longnum, '1', sizeof longnum);
  memcpy(longnum, "a: 1.", 5);
  longnum[sizeof longnum - 1] = '\0';
  hark_pbtxt *doc = NULL;
  hark_error *err = hark_pbtxt_parse(longnum, strlen(longnum), FILE_NAME, &doc);
  assert_non_null(err);
  assert_non_null(strstr(hark_error_message(err), FILE_NAME ":1: number '1.111"));
  assert_non_null(strstr(hark_error_message(err), "is too long"));
  hark_error_free(err);
}

static void test_nul_bytes(void **state) {
  (void)state;
  static const char text[] = "a: 1\nb: \"x\0y\"\n";
  expect_error_len(text, sizeof text - 1, FILE_NAME ":2: NUL byte in the text");
  static const char text2[] = "\0";
  expect_error_len(text2, 1, FILE_NAME ":1: NUL byte in the text");
  static const char text3[] = "# comment \0\n";
  expect_error_len(text3, sizeof text3 - 1, FILE_NAME ":1: NUL byte in the text");
  hark_pbtxt *doc = NULL;
  hark_error *err = hark_pbtxt_parse(NULL, 3, FILE_NAME, &doc);
  assert_non_null(err);
  assert_string_equal(hark_error_message(err), FILE_NAME ": no text");
  hark_error_free(err);
}

/* `depth` nested messages a { a { ... } }. */
static char *nested(int depth, bool close) {
  char *s = malloc((size_t)depth * 5 + 8);
  size_t n = 0;
  for (int i = 0; i < depth; i++) n += (size_t)sprintf(s + n, "a { ");
  for (int i = 0; close && i < depth; i++) s[n++] = '}';
  s[n] = '\0';
  return s;
}

static void test_nesting_is_bounded(void **state) {
  (void)state;
  char *ok = nested(HARK_PBTXT_MAX_DEPTH, true);
  hark_pbtxt *doc = parse(ok);
  const hark_pb_field *f = hark_pbtxt_root(doc);
  int depth = 0;
  while (f->child) {
    f = f->child;
    depth++;
  }
  assert_int_equal(depth, HARK_PBTXT_MAX_DEPTH);
  hark_pbtxt_free(doc);
  free(ok);
  char *deep = nested(HARK_PBTXT_MAX_DEPTH + 1, true);
  expect_error(deep, FILE_NAME ":1: messages nested deeper than 64 levels");
  free(deep);
  /* Half a million nested openings: an error, not a stack overflow. */
  size_t n = 500000;
  char *hostile = malloc(2 * n + 1);
  for (size_t i = 0; i < n; i++) memcpy(hostile + 2 * i, "a{", 2);
  hostile[2 * n] = '\0';
  expect_error(hostile, FILE_NAME ":1: messages nested deeper than 64 levels");
  expect_error("a { b { c {",
               FILE_NAME ":1: unexpected end of input: '{' opened at line 1 is not closed");
  /* Lists of lists are not protobuf: refused, not recursed into. */
  expect_error("a: [[1]]", FILE_NAME ":1: expected a value for field 'a', found '['");
  free(hostile);
}

static void test_large_inputs(void **state) {
  (void)state;
  /* 50k fields and a 1 MiB string: the arena grows past its block size. */
  size_t fields = 50000, big = 1 << 20;
  char *text = malloc(fields * 16 + big + 32);
  size_t n = 0;
  for (size_t i = 0; i < fields; i++) n += (size_t)sprintf(text + n, "f%zu: %zu\n", i, i);
  n += (size_t)sprintf(text + n, "s: \"");
  memset(text + n, 'x', big);
  n += big;
  text[n++] = '"';
  hark_pbtxt *doc = parse_len(text, n);
  const hark_pb_field *root = hark_pbtxt_root(doc);
  assert_int_equal(count(root), (int)fields + 1);
  const hark_pb_field *last = child(root, (int)fields);
  assert_int_equal(last->len, big);
  assert_int_equal(last->line, fields + 1);
  assert_int_equal(child(root, 49999)->u, 49999);
  hark_pbtxt_free(doc);
  free(text);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_scalars),
      cmocka_unit_test(test_string_escapes_and_concatenation),
      cmocka_unit_test(test_messages_lists_and_separators),
      cmocka_unit_test(test_empty_and_comment_only),
      cmocka_unit_test(test_kind_names),
      cmocka_unit_test(test_syntax_errors),
      cmocka_unit_test(test_number_errors),
      cmocka_unit_test(test_nul_bytes),
      cmocka_unit_test(test_nesting_is_bounded),
      cmocka_unit_test(test_large_inputs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
