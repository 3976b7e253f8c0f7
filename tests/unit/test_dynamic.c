/*
 * test_dynamic.c — the default scheduler and the dynamic batcher
 * (src/sched/dynamic.c) driven through hark_sched_* with a fake run
 * function (fake_run.h): no server, no repository, no backend. What the
 * run is handed is the observation: which requests form each batch, when,
 * on which instance and thread; the fake holds batches to keep instances
 * busy while the test queues more.
 *
 * "Must not happen" checks use short sleeps; everything else waits on
 * conditions with generous limits, so a slow machine only makes it slower.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "fake_run.h"

/* The batch whose first request is `tag`. */
static const fake_batch *batch_of(fake *f, int tag) {
  for (int i = 0; i < f->n_batches; i++)
    for (uint32_t k = 0; k < f->batches[i].n; k++)
      if (f->batches[i].tags[k] == tag) return &f->batches[i];
  fail_msg("request %d never ran", tag);
  return NULL;
}

static void assert_batch(const fake_batch *b, const int *tags, uint32_t n) {
  assert_int_equal(b->n, n);
  for (uint32_t i = 0; i < n; i++) assert_int_equal(b->tags[i], tags[i]);
}

static void assert_all_ok(fake *f, int n) {
  assert_int_equal(f->n_finals, n);
  for (int i = 0; i < n; i++) assert_int_equal(f->finals[i].code, HARK_OK);
}

/* Reaching a preferred size dispatches at once; a smaller pending batch
 * waits for max_queue_delay (10 s here), and stopping flushes it. */
static void test_preferred_size_and_flush(void **state) {
  (void)state;
  fake *f = fake_start(
      "max_batch_size: 8\n"
      "dynamic_batching { preferred_batch_size: [ 4 ] "
      "max_queue_delay_microseconds: 10000000 }\n",
      1, 2);
  for (int i = 0; i < 4; i++) fake_send(f, i, 0, 0);
  fake_wait(f, &f->n_batches, 1);
  assert_batch(&f->batches[0], (const int[]){0, 1, 2, 3}, 4);

  fake_send(f, 4, 0, 0);
  fake_send(f, 5, 0, 0);
  sleep_ms(50);
  assert_int_equal(fake_count(f, &f->n_batches), 1); /* waiting for the delay */
  assert_int_equal(hark_sched_queued(f->sched), 2);

  hark_sched_stop(f->sched); /* returns once the flushed batch ran */
  assert_int_equal(f->n_batches, 2);
  assert_batch(&f->batches[1], (const int[]){4, 5}, 2);
  assert_int_equal(hark_sched_queued(f->sched), 0);
  assert_all_ok(f, 6);

  hark_error *err = fake_try(f, 6, 0, 0);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_UNAVAILABLE);
  assert_string_equal(hark_error_message(err), "model 'fake' version 1 is unloading");
  hark_error_free(err);
  fake_stop(f);
}

/* A pending batch leaves when its oldest request has waited
 * max_queue_delay — not before, and without anything else happening (the
 * pool's timer pumps). A full batch does not wait. */
static void test_max_queue_delay(void **state) {
  (void)state;
  fake *f = fake_start(
      "max_batch_size: 8\n"
      "dynamic_batching { max_queue_delay_microseconds: 100000 }\n",
      1, 2);
  uint64_t t0 = hark_now_ns();
  for (int i = 0; i < 3; i++) fake_send(f, i, 0, 0);
  fake_wait(f, &f->n_batches, 1);
  assert_batch(&f->batches[0], (const int[]){0, 1, 2}, 3);
  assert_true(f->batches[0].at_ns - t0 >= 100 * MS);
  fake_stop(f);

  f = fake_start(
      "max_batch_size: 8\n"
      "dynamic_batching { max_queue_delay_microseconds: 10000000 }\n",
      1, 2);
  uint64_t t1 = hark_now_ns();
  for (int i = 0; i < 9; i++) fake_send(f, i, 0, 0);
  fake_wait(f, &f->n_batches, 1);
  assert_batch(&f->batches[0], (const int[]){0, 1, 2, 3, 4, 5, 6, 7}, 8);
  assert_true(f->batches[0].at_ns - t1 < 5000 * MS); /* far from the 10 s delay */
  sleep_ms(50);
  assert_int_equal(fake_count(f, &f->n_batches), 1); /* the ninth waits */
  assert_int_equal(hark_sched_queued(f->sched), 1);
  hark_sched_stop(f->sched);
  assert_int_equal(f->n_batches, 2);
  assert_int_equal(f->n_finals, 9);
  fake_stop(f);
}

/* An instance runs one batch at a time: with both instances busy, requests
 * queue, and leave in order, max_batch_size at a time, as instances free. */
static void test_one_batch_per_instance(void **state) {
  (void)state;
  fake *f = fake_start("max_batch_size: 4\ndynamic_batching { }\n", 2, 4);
  f->hold_all = true;
  fake_send(f, 0, 0, 0);
  fake_send(f, 1, 0, 0);
  fake_wait(f, &f->held, 2);
  assert_int_not_equal(f->batches[0].instance, f->batches[1].instance);
  for (int i = 2; i < 8; i++) fake_send(f, i, 0, 0);
  sleep_ms(50);
  assert_int_equal(fake_count(f, &f->n_batches), 2);
  assert_int_equal(hark_sched_queued(f->sched), 6);
  fake_release(f);
  fake_wait(f, &f->n_finals, 8);
  assert_int_equal(f->n_batches, 4);
  assert_batch(batch_of(f, 2), (const int[]){2, 3, 4, 5}, 4);
  assert_batch(batch_of(f, 6), (const int[]){6, 7}, 2);
  assert_int_equal(f->overlaps, 0);
  assert_all_ok(f, 8);
  fake_stop(f);
}

/* Without dynamic_batching: one request per execution, whatever waits. */
static void test_default_scheduler(void **state) {
  (void)state;
  fake *f = fake_start("max_batch_size: 8\n", 2, 4);
  f->hold_all = true;
  for (int i = 0; i < 6; i++) fake_send(f, i, 0, 0);
  fake_wait(f, &f->held, 2);
  assert_int_equal(hark_sched_queued(f->sched), 4);
  fake_release(f);
  fake_wait(f, &f->n_finals, 6);
  assert_int_equal(f->n_batches, 6);
  for (int i = 0; i < 6; i++) assert_int_equal(batch_of(f, i)->n, 1);
  assert_int_equal(f->overlaps, 0);
  assert_all_ok(f, 6);
  fake_stop(f);
}

/* The queue's bound refuses at enqueue; REJECT timeouts complete queued
 * requests with DEADLINE from the timer, more of them than one pump pass
 * takes (32), and none of them ever reaches the run. */
static void test_queue_bound_and_reject_timeouts(void **state) {
  (void)state;
  fake *f = fake_start(
      "max_batch_size: 4\n"
      "dynamic_batching { default_queue_policy { max_queue_size: 40 "
      "timeout_action: REJECT default_timeout_microseconds: 100000 } }\n",
      1, 2);
  f->hold_all = true;
  fake_send(f, 0, 0, 0);
  fake_wait(f, &f->held, 1);
  uint64_t t0 = hark_now_ns();
  for (int i = 1; i <= 40; i++) fake_send(f, i, 0, 0);
  hark_error *err = fake_try(f, 41, 0, 0);
  assert_non_null(err);
  assert_int_equal(hark_error_code(err), HARK_ERR_UNAVAILABLE);
  assert_string_equal(hark_error_message(err), "Exceeds maximum queue size");
  hark_error_free(err);

  fake_wait(f, &f->n_finals, 40);
  for (int i = 1; i <= 40; i++) {
    const fake_final *x = fake_final_of(f, i);
    assert_int_equal(x->code, HARK_ERR_DEADLINE);
    assert_string_equal(x->msg, "Request timeout expired");
    assert_true(x->at_ns - t0 >= 100 * MS);
  }
  assert_int_equal(hark_sched_queued(f->sched), 0);
  fake_release(f);
  fake_wait(f, &f->n_finals, 41);
  assert_int_equal(fake_final_of(f, 0)->code, HARK_OK);
  assert_int_equal(f->n_batches, 1); /* only request 0 ever ran */
  fake_stop(f);
}

/* preserve_ordering: a request that finished first waits for the one
 * accepted before it, then both arrive in acceptance order. */
static void test_preserve_ordering(void **state) {
  (void)state;
  fake *f = fake_start("max_batch_size: 1\ndynamic_batching { preserve_ordering: true }\n", 2, 4);
  f->hold_tag = 0;
  fake_send(f, 0, 0, 0);
  fake_wait(f, &f->held, 1);
  fake_send(f, 1, 0, 0);
  fake_wait(f, &f->runs_done, 1); /* request 1 ran and sent its FINAL */
  assert_int_equal(fake_count(f, &f->n_finals), 0);
  fake_release(f);
  fake_wait(f, &f->n_finals, 2);
  assert_int_equal(f->finals[0].tag, 0);
  assert_int_equal(f->finals[1].tag, 1);
  assert_all_ok(f, 2);
  fake_stop(f);
}

/* Inline runs: once warmed up, a cheap model's batch runs on an enqueuing
 * thread that allowed it, before hark_sched_enqueue returns, when an
 * instance is free; otherwise on a worker. (A worker that sent a FINAL may
 * still be returning from its execution: each send waits until none is.) */
static void test_inline_runs(void **state) {
  (void)state;
  fake *f = fake_start("max_batch_size: 1\ndynamic_batching { }\n", 2, 2);
  hark_pool_set_inline_max_ns(f->pool, 1000 * MS);
  /* The warm-up (16 executions, and a few more) is timed on the workers. */
  for (int i = 0; i < 20; i++) {
    fake_send(f, i, 0, 0);
    fake_wait(f, &f->n_finals, i + 1);
    assert_false(pthread_equal(f->batches[i].thread, pthread_self()));
  }
  hark_pool_thread_may_inline(true);
  for (int i = 20; i < 24; i++) {
    fake_wait_quiet(f);
    fake_send(f, i, 0, 0);
    assert_int_equal(fake_count(f, &f->n_finals), i + 1); /* done in place */
    assert_true(pthread_equal(f->batches[i].thread, pthread_self()));
  }
  hark_pool_thread_may_inline(false);
  fake_send(f, 24, 0, 0);
  fake_wait(f, &f->n_finals, 25);
  assert_false(pthread_equal(f->batches[24].thread, pthread_self()));
  assert_all_ok(f, 25);
  fake_stop(f);
}

/* Holds batches with `tag` from now on; a held batch without it goes. */
static void hold_only(fake *f, int tag) {
  pthread_mutex_lock(&f->lock);
  f->hold_tag = tag;
  pthread_cond_broadcast(&f->cond);
  pthread_mutex_unlock(&f->lock);
}

static hark_sched_delay delay_now(fake *f) {
  hark_sched_delay d;
  assert_true(hark_sched_queue_delay(f->sched, &d));
  return d;
}

/* adaptive_queue_delay (min 0, max 800 ms: rungs of 50, 100, 200, 400 and
 * 800 ms; target 4). Each batch formed from a deep queue (eight requests
 * queued behind a busy instance) widens the delay one rung, up to max and
 * no further; full batches still leave at once. A lone request waits out
 * the wide delay and narrows it; a quiet spell takes it back to 0, where a
 * lone request goes at once. */
static void test_adaptive_queue_delay(void **state) {
  (void)state;
  fake *f = fake_start(
      "max_batch_size: 8\n"
      "dynamic_batching { adaptive_queue_delay { max_microseconds: 800000 "
      "target_queue_depth: 4 } }\n",
      1, 2);
  hark_sched_delay d = delay_now(f);
  assert_true(d.adaptive);
  assert_int_equal(d.delay_us, 0);
  assert_int_equal(d.min_us, 0);
  assert_int_equal(d.max_us, 800000);

  hold_only(f, 0);
  fake_send(f, 0, 0, 0); /* delay 0: at once, and held */
  fake_wait(f, &f->n_batches, 1);
  const uint64_t rungs_ms[] = {50, 100, 200, 400, 800, 800};
  for (int r = 0; r < 6; r++) {
    int first = 1 + 8 * r;
    for (int i = 0; i < 8; i++) fake_send(f, first + i, 0, 0);
    assert_int_equal(hark_sched_queued(f->sched), 8);
    hold_only(f, first + 7); /* the held batch goes; this one is held */
    fake_wait(f, &f->n_batches, r + 2);
    assert_int_equal(f->batches[r + 1].n, 8);
    assert_int_equal(f->batches[r + 1].tags[0], first);
    d = delay_now(f);
    assert_int_equal(d.delay_us, rungs_ms[r] * 1000);
  }
  assert_int_equal(d.widened, 5);
  assert_int_equal(d.narrowed, 0);
  fake_release(f);
  fake_wait(f, &f->n_finals, 49);

  /* A lone request waits out the wide delay, and narrows it. */
  fake_send(f, 49, 0, 0);
  sleep_ms(50);
  assert_int_equal(fake_count(f, &f->n_batches), 7);
  fake_wait(f, &f->n_finals, 50);
  fake_wait_quiet(f);
  assert_int_equal(delay_now(f).delay_us, 400000);

  /* Quiet for 400 + 200 + 100 + 50 ms: back to 0, and a lone request goes
   * at once. */
  sleep_ms(800);
  d = delay_now(f);
  assert_int_equal(d.delay_us, 0);
  fake_send(f, 50, 0, 0);
  fake_wait(f, &f->n_finals, 51);
  d = delay_now(f);
  assert_int_equal(d.delay_us, 0);
  assert_int_equal(d.narrowed, 5);
  assert_all_ok(f, 51);
  fake_stop(f);
}

/* Without the block the delay is max_queue_delay, fixed; the default
 * scheduler has none. */
static void test_fixed_queue_delay_reported(void **state) {
  (void)state;
  fake *f = fake_start(
      "max_batch_size: 8\n"
      "dynamic_batching { max_queue_delay_microseconds: 1500 }\n",
      1, 2);
  hark_sched_delay d = delay_now(f);
  assert_false(d.adaptive);
  assert_int_equal(d.delay_us, 1500);
  for (int i = 0; i < 16; i++) fake_send(f, i, 0, 0);
  fake_wait(f, &f->n_finals, 16);
  assert_int_equal(delay_now(f).delay_us, 1500);
  fake_stop(f);
  f = fake_start("max_batch_size: 8\n", 1, 2);
  assert_false(hark_sched_queue_delay(f->sched, &d));
  fake_stop(f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_preferred_size_and_flush),
      cmocka_unit_test(test_max_queue_delay),
      cmocka_unit_test(test_one_batch_per_instance),
      cmocka_unit_test(test_default_scheduler),
      cmocka_unit_test(test_queue_bound_and_reject_timeouts),
      cmocka_unit_test(test_preserve_ordering),
      cmocka_unit_test(test_inline_runs),
      cmocka_unit_test(test_adaptive_queue_delay),
      cmocka_unit_test(test_fixed_queue_delay_reported),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
