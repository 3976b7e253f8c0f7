/* Unit tests for src/frontend/speech/session.c: a speech session driven
 * directly (no sockets, no protocol) against the real engine and the
 * echo_asr test backend, which "recognises" by counting samples. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "frontend/speech/asr_result.h"
#include "frontend/speech/session.h"
#include "hark/backend.h"
#include "test_repo.h"

#define MAX_RESULTS 64

/* What the codec side sees: every result, in the order it came. */
typedef struct results {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int n;
  int tag[MAX_RESULTS];
  hark_speech_status status[MAX_RESULTS];
  char text[MAX_RESULTS][64];
  bool final[MAX_RESULTS];
  hark_code code[MAX_RESULTS];
} results;

static void on_result(void *userp, void *tag, hark_speech_status status, hark_response *resp,
                      hark_error *err) {
  results *r = userp;
  pthread_mutex_lock(&r->lock);
  int i = r->n++;
  assert_true(i < MAX_RESULTS);
  r->tag[i] = (int)(intptr_t)tag;
  r->status[i] = status;
  r->code[i] = err ? hark_error_code(err) : HARK_OK;
  hark_asr_result a;
  hark_asr_result_read(resp, &a);
  snprintf(r->text[i], sizeof r->text[i], "%.*s", (int)a.text_len, a.text);
  r->final[i] = a.is_final;
  pthread_cond_broadcast(&r->cond);
  pthread_mutex_unlock(&r->lock);
  hark_response_free(resp);
  hark_error_free(err);
}

static const hark_speech_handler handler = {.result = on_result};

static void results_init(results *r) {
  memset(r, 0, sizeof *r);
  pthread_mutex_init(&r->lock, NULL);
  pthread_cond_init(&r->cond, NULL);
}

/* Waits (up to 10 s) until `n` results came. */
static void wait_results(results *r, int n) {
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 10;
  pthread_mutex_lock(&r->lock);
  while (r->n < n)
    if (pthread_cond_timedwait(&r->cond, &r->lock, &until) != 0) break;
  int got = r->n;
  pthread_mutex_unlock(&r->lock);
  if (got < n) fail_msg("%d results, want %d", got, n);
}

static hark_server *server;
static hark_speech_admission adm = {.protocol = "test"};

static int setup(void **state) {
  (void)state;
  repo_make("session");
  /* tests/models/echo_asr's inputs and outputs, one sequence at a time. */
  model_write("echo",
              "backend: \"echo_asr\"\nmax_batch_size: 0\n"
              "input [ { name: \"AUDIO\" data_type: TYPE_STRING dims: [ 1 ] } ]\n"
              "output [\n"
              "  { name: \"TRANSCRIPT\" data_type: TYPE_STRING dims: [ 1 ] },\n"
              "  { name: \"IS_FINAL\" data_type: TYPE_BOOL dims: [ 1 ] },\n"
              "  { name: \"WORDS\" data_type: TYPE_STRING dims: [ -1 ] },\n"
              "  { name: \"WORD_START\" data_type: TYPE_FP32 dims: [ -1 ] },\n"
              "  { name: \"WORD_END\" data_type: TYPE_FP32 dims: [ -1 ] },\n"
              "  { name: \"WORD_CONF\" data_type: TYPE_FP32 dims: [ -1 ] },\n"
              "  { name: \"CONFIDENCE\" data_type: TYPE_FP32 dims: [ 1 ] },\n"
              "  { name: \"ALTERNATIVES\" data_type: TYPE_STRING dims: [ -1 ] },\n"
              "  { name: \"ALTERNATIVE_CONFIDENCE\" data_type: TYPE_FP32 dims: [ -1 ] }\n"
              "]\n"
              "sequence_batching { max_sequence_idle_microseconds: 60000000 }\n"
              "parameters { key: \"max_sequences\" value: { string_value: \"1\" } }\n");
  server = server_start();
  return 0;
}

static int teardown(void **state) {
  (void)state;
  hark_server_free(server);
  repo_remove();
  return 0;
}

/* A session bound to the echo model, holding a slot of `adm`. */
static hark_speech_session *open_session(results *r, hark_speech_encoding enc) {
  hark_model *model;
  assert_null(hark_server_model_acquire(server, "echo", -1, &model));
  assert_null(hark_speech_admit(&adm, model));
  hark_speech_session *s = hark_speech_open(server, &adm, "test", &handler, r);
  hark_speech_settings st = {.partials = true, .encoding = enc};
  hark_speech_configure(s, model, &st);
  return s;
}

static void submit_pcm(hark_speech_session *s, const char *head, size_t samples, int tag) {
  char *pcm = calloc(samples, 2);
  memcpy(pcm, head, strlen(head));
  hark_speech_submit(s, HARK_SPEECH_AUDIO, pcm, samples * 2, (void *)(intptr_t)tag);
  free(pcm);
}

/* Every item is answered once, in order; one request of the stream is in
 * the engine at a time, the rest wait in the session. */
static void test_order_and_one_in_flight(void **state) {
  (void)state;
  results r;
  results_init(&r);
  hark_speech_session *s = open_session(&r, HARK_SPEECH_PCM16);
  submit_pcm(s, "SLOW", 100, 0); /* 300 ms in the backend */
  for (int i = 1; i < 20; i++) submit_pcm(s, "", 100, i);
  assert_int_equal(hark_speech_queued_bytes(s), /* waiting behind the first */
                   19 * (200 + HARK_SPEECH_ITEM_OVERHEAD));
  hark_model_stats st;
  hark_model_stats_read(hark_speech_model(s), &st);
  assert_int_equal(st.pending, 1);
  hark_speech_submit(s, HARK_SPEECH_END, NULL, 0, (void *)(intptr_t)20);
  assert_true(hark_speech_ended(s));
  wait_results(&r, 21);
  for (int i = 0; i < 20; i++) {
    char want[32];
    snprintf(want, sizeof want, "%d samples", (i + 1) * 100);
    assert_int_equal(r.tag[i], i);
    assert_int_equal(r.status[i], HARK_SPEECH_OK);
    assert_string_equal(r.text[i], want);
    assert_false(r.final[i]);
  }
  assert_int_equal(r.tag[20], 20);
  assert_string_equal(r.text[20], "2000");
  assert_true(r.final[20]);
  assert_int_equal(hark_speech_queued_bytes(s), 0);
  hark_speech_close(s);
}

/* After a failure the audio that waits is dropped, but the END still goes:
 * the backend's state for the sequence is freed (max_sequences is 1, so a
 * new stream could not start otherwise). */
static void test_failure_drops_but_ends(void **state) {
  (void)state;
  results r;
  results_init(&r);
  hark_speech_session *s = open_session(&r, HARK_SPEECH_PCM16);
  submit_pcm(s, "", 100, 0);
  submit_pcm(s, "FAIL", 100, 1);
  submit_pcm(s, "", 100, 2);
  submit_pcm(s, "", 100, 3);
  hark_speech_submit(s, HARK_SPEECH_END, NULL, 0, (void *)(intptr_t)4);
  wait_results(&r, 5);
  assert_int_equal(r.status[0], HARK_SPEECH_OK);
  assert_int_equal(r.status[1], HARK_SPEECH_FAILED);
  assert_int_equal(r.code[1], HARK_ERR_INTERNAL);
  assert_int_equal(r.status[2], HARK_SPEECH_DROPPED);
  assert_int_equal(r.status[3], HARK_SPEECH_DROPPED);
  assert_int_equal(r.tag[4], 4);
  assert_int_equal(r.status[4], HARK_SPEECH_OK);
  hark_speech_close(s);

  results r2;
  results_init(&r2);
  s = open_session(&r2, HARK_SPEECH_PCM16);
  submit_pcm(s, "", 50, 0);
  wait_results(&r2, 1);
  assert_int_equal(r2.status[0], HARK_SPEECH_OK);
  assert_string_equal(r2.text[0], "50 samples");
  hark_speech_close(s); /* ends it on the client's behalf */
}

/* A client that goes away: what waits is dropped (still reported, so the
 * codec can let go of its state), and the session ends the sequence
 * itself — the next stream can start at once. */
static void test_close_ends_the_sequence(void **state) {
  (void)state;
  results r;
  results_init(&r);
  hark_speech_session *s = open_session(&r, HARK_SPEECH_PCM16);
  submit_pcm(s, "SLOW", 100, 0);
  for (int i = 1; i <= 5; i++) submit_pcm(s, "", 100, i);
  hark_speech_close(s);
  wait_results(&r, 6);
  /* The one in flight is cancelled with its client (issue 24): answered
   * if the model finished first, else failed as cancelled. */
  assert_true(r.status[0] == HARK_SPEECH_OK || r.status[0] == HARK_SPEECH_FAILED);
  for (int i = 1; i <= 5; i++) assert_int_equal(r.status[i], HARK_SPEECH_DROPPED);

  /* The END went after the slow request: a new START is taken (the
   * decoder table holds one sequence), within a moment. */
  uint64_t deadline = hark_now_ns() + 5000000000ull;
  for (;;) {
    results r2;
    results_init(&r2);
    s = open_session(&r2, HARK_SPEECH_PCM16);
    submit_pcm(s, "", 10, 0);
    wait_results(&r2, 1);
    hark_speech_close(s);
    if (r2.status[0] == HARK_SPEECH_OK) break;
    assert_int_equal(r2.code[0], HARK_ERR_UNAVAILABLE);
    if (hark_now_ns() > deadline) fail_msg("the sequence was not ended");
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
  }
  assert_int_equal(atomic_load(&adm.streams), 0);
}

/* G.711 is expanded to 16-bit PCM: n bytes are n samples. */
static void test_g711(void **state) {
  (void)state;
  results r;
  results_init(&r);
  hark_speech_session *s = open_session(&r, HARK_SPEECH_MULAW);
  char ulaw[80];
  memset(ulaw, 0xff, sizeof ulaw); /* mu-law silence */
  hark_speech_submit(s, HARK_SPEECH_AUDIO, ulaw, sizeof ulaw, NULL);
  hark_speech_submit(s, HARK_SPEECH_RESET, NULL, 0, NULL);
  hark_speech_submit(s, HARK_SPEECH_END, NULL, 0, NULL);
  wait_results(&r, 3);
  assert_string_equal(r.text[0], "80 samples");
  assert_string_equal(r.text[1], "80");
  assert_true(r.final[1]);
  hark_speech_close(s);
}

/* Admission: a bounded number of streams; a slot comes back when its
 * session closes. */
static void test_admission(void **state) {
  (void)state;
  hark_speech_admission a = {.max_streams = 2, .protocol = "test"};
  hark_model *model;
  assert_null(hark_server_model_acquire(server, "echo", -1, &model));
  assert_null(hark_speech_admit(&a, model));
  assert_null(hark_speech_admit(&a, model));
  hark_error *err = hark_speech_admit(&a, model);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(hark_error_message(err), "at most 2 speech streams over test"));
  hark_error_free(err);
  results r;
  results_init(&r);
  hark_speech_session *s = hark_speech_open(server, &a, "test", &handler, &r);
  hark_speech_close(s); /* never configured: nothing to end, the slot comes back */
  assert_null(hark_speech_admit(&a, model));
  assert_int_equal(atomic_load(&a.streams), 2);
  hark_model_release(model);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_and_one_in_flight),
      cmocka_unit_test(test_failure_drops_but_ends),
      cmocka_unit_test(test_close_ends_the_sequence),
      cmocka_unit_test(test_g711),
      cmocka_unit_test(test_admission),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
