/*
 * Unit tests for src/audio/vad_gate.c: Riva's endpointing rule over a
 * VAD's per-frame speech probabilities, with the model's settings and with
 * a stream's own histories and fractions over them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "hark/audio.h"

static void test_rule(void **state) {
  (void)state;
  hark_vad_gate_settings set = {0.5f, 0.35f, 96, 0.6f, 128, 1.0f, 200};
  hark_vad_gate g;
  assert_int_equal(hark_vad_gate_init(&g, &set), 0);
  assert_int_equal(g.start_window, 3); /* 96 ms: 3 frames, 2 of them speech */
  assert_int_equal(g.start_need, 2);
  assert_int_equal(g.stop_window, 4);
  assert_int_equal(g.stop_need, 4);
  assert_int_equal(hark_vad_gate_step(&g, 0.9f), HARK_VAD_GATE_IDLE);
  assert_int_equal(hark_vad_gate_step(&g, 0.1f), HARK_VAD_GATE_IDLE);
  assert_int_equal(hark_vad_gate_step(&g, 0.5f), HARK_VAD_GATE_OPEN); /* 2 of the last 3 */
  /* between the thresholds is neither: it does not count as silence */
  for (int i = 0; i < 10; i++) assert_int_equal(hark_vad_gate_step(&g, 0.4f), HARK_VAD_GATE_SPEECH);
  assert_int_equal(hark_vad_gate_step(&g, 0.1f), HARK_VAD_GATE_SPEECH);
  assert_int_equal(hark_vad_gate_step(&g, 0.1f), HARK_VAD_GATE_SPEECH);
  assert_int_equal(hark_vad_gate_step(&g, 0.9f), HARK_VAD_GATE_SPEECH); /* breaks the run */
  for (int i = 0; i < 3; i++) assert_int_equal(hark_vad_gate_step(&g, 0.34f), HARK_VAD_GATE_SPEECH);
  assert_int_equal(hark_vad_gate_step(&g, 0.34f), HARK_VAD_GATE_CLOSE);
  /* a closed gate starts its window afresh */
  assert_int_equal(hark_vad_gate_step(&g, 0.9f), HARK_VAD_GATE_IDLE);
  hark_vad_gate_reset(&g);
  assert_false(g.in_speech);
  hark_vad_gate_fini(&g);
}

/* A stream's endpointing (Riva's endpointing_config) replaces histories
 * and fractions. */
static void test_stream_settings(void **state) {
  (void)state;
  hark_vad_gate_settings set;
  hark_vad_gate_settings_default(&set);
  assert_int_equal(set.stop_history_ms, 512);
  set.start_history_ms = 32;
  set.stop_history_ms = 256;
  set.start_threshold = 1.0f;
  set.stop_threshold = 0.25f;
  hark_vad_gate g;
  assert_int_equal(hark_vad_gate_init(&g, &set), 0);
  assert_int_equal(g.start_window, 1);
  assert_int_equal(g.start_need, 1);
  assert_int_equal(g.stop_window, 8);
  assert_int_equal(g.stop_need, 2);
  assert_int_equal(hark_vad_gate_step(&g, 0.7f), HARK_VAD_GATE_OPEN);
  assert_int_equal(hark_vad_gate_step(&g, 0.1f), HARK_VAD_GATE_SPEECH);
  assert_int_equal(hark_vad_gate_step(&g, 0.9f), HARK_VAD_GATE_SPEECH);
  assert_int_equal(hark_vad_gate_step(&g, 0.1f), HARK_VAD_GATE_CLOSE); /* 2 of 8 */
  hark_vad_gate_fini(&g);
}

/* Probabilities wait in the gate until their audio comes: oldest first,
 * bounded, kept across a reset, the same steps as fed one by one. */
static void test_queue(void **state) {
  (void)state;
  hark_vad_gate_settings set;
  hark_vad_gate_settings_default(&set);
  hark_vad_gate a, b;
  assert_int_equal(hark_vad_gate_init(&a, &set), 0);
  assert_int_equal(hark_vad_gate_init(&b, &set), 0);
  float p[200];
  for (int i = 0; i < 200; i++) p[i] = (i / 40) % 2 ? 0.9f : 0.1f;
  assert_int_equal(hark_vad_gate_queue(&a, p, 150, 160), 0);
  assert_int_equal(hark_vad_gate_queue(&a, p + 150, 11, 160), -1); /* past the bound: nothing */
  assert_int_equal(hark_vad_gate_queued(&a), 150);
  assert_true(hark_vad_gate_queued_probs(&a)[0] == p[0]);
  for (int i = 0; i < 100; i++)
    assert_int_equal(hark_vad_gate_step_queued(&a), hark_vad_gate_step(&b, p[i]));
  hark_vad_gate_reset(&a);
  hark_vad_gate_reset(&b);
  assert_int_equal(hark_vad_gate_queue(&a, p + 150, 50, 160), 0); /* room again after 100 left */
  assert_int_equal(hark_vad_gate_queued(&a), 100);
  assert_true(hark_vad_gate_queued_probs(&a)[0] == p[100]);
  for (int i = 100; i < 200; i++)
    assert_int_equal(hark_vad_gate_step_queued(&a), hark_vad_gate_step(&b, p[i]));
  assert_int_equal(hark_vad_gate_queued(&a), 0);
  hark_vad_gate_fini(&a);
  hark_vad_gate_fini(&b);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rule),
      cmocka_unit_test(test_stream_settings),
      cmocka_unit_test(test_queue),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
