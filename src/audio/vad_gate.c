/*
 * vad_gate.c — utterances opened and closed by a neural VAD's per-frame
 * speech probabilities (a speech model's parameter vad_model; its input
 * VAD_PROB), for every recogniser that is gated (pocketsphinx, neural_asr).
 *
 * The rule is Riva's endpointing_config: a frame (32 ms) counts as speech
 * when its probability is at least speech_threshold, as silence when it is
 * below silence_threshold (silero's own hysteresis: 0.5 and 0.35). Outside
 * an utterance, once start_threshold of the last start_history ms are
 * speech, one opens (its audio starts with that window and prespeech_ms
 * before it); inside, once stop_threshold of the last stop_history ms are
 * silence, it closes (that silence is its trailing padding). Pure logic:
 * the recogniser moves the audio.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "hark/audio.h"

static uint32_t frames_of(uint32_t ms) {
  uint32_t n = (ms + HARK_VAD_FRAME_MS - 1) / HARK_VAD_FRAME_MS;
  return n ? n : 1;
}

static uint32_t needed(float threshold, uint32_t window) {
  double n = ceil((double)threshold * window - 1e-6);
  return n < 1 ? 1 : n > window ? window : (uint32_t)n;
}

void hark_vad_gate_settings_default(hark_vad_gate_settings *s) {
  *s = (hark_vad_gate_settings){0.5f, 0.35f, 96, 0.6f, 512, 0.95f, 200};
}

int hark_vad_gate_init(hark_vad_gate *g, const hark_vad_gate_settings *set) {
  memset(g, 0, sizeof *g);
  g->set = *set;
  g->start_window = frames_of(g->set.start_history_ms);
  g->stop_window = frames_of(g->set.stop_history_ms);
  g->start_need = needed(g->set.start_threshold, g->start_window);
  g->stop_need = needed(g->set.stop_threshold, g->stop_window);
  g->start_ring = calloc(g->start_window, 1);
  g->stop_ring = calloc(g->stop_window, 1);
  return g->start_ring && g->stop_ring ? 0 : -1;
}

void hark_vad_gate_fini(hark_vad_gate *g) {
  free(g->start_ring);
  free(g->stop_ring);
  free(g->q);
  memset(g, 0, sizeof *g);
}

static void ring_clear(uint8_t *ring, uint32_t n, uint32_t *pos, uint32_t *count) {
  memset(ring, 0, n);
  *pos = 0;
  *count = 0;
}

void hark_vad_gate_reset(hark_vad_gate *g) {
  g->in_speech = false;
  ring_clear(g->start_ring, g->start_window, &g->start_pos, &g->start_count);
  ring_clear(g->stop_ring, g->stop_window, &g->stop_pos, &g->stop_count);
}

/* Pushes one flag into a window: the count of set flags follows. */
static uint32_t push(uint8_t *ring, uint32_t n, uint32_t *pos, uint32_t *count, bool flag) {
  *count -= ring[*pos];
  ring[*pos] = flag;
  *count += flag;
  *pos = (*pos + 1) % n;
  return *count;
}

hark_vad_gate_event hark_vad_gate_step(hark_vad_gate *g, float prob) {
  if (!g->in_speech) {
    bool speech = prob >= g->set.speech_threshold;
    if (push(g->start_ring, g->start_window, &g->start_pos, &g->start_count, speech) <
        g->start_need)
      return HARK_VAD_GATE_IDLE;
    g->in_speech = true;
    ring_clear(g->stop_ring, g->stop_window, &g->stop_pos, &g->stop_count);
    return HARK_VAD_GATE_OPEN;
  }
  bool silence = prob < g->set.silence_threshold;
  if (push(g->stop_ring, g->stop_window, &g->stop_pos, &g->stop_count, silence) < g->stop_need)
    return HARK_VAD_GATE_SPEECH;
  g->in_speech = false;
  ring_clear(g->start_ring, g->start_window, &g->start_pos, &g->start_count);
  return HARK_VAD_GATE_CLOSE;
}

int hark_vad_gate_queue(hark_vad_gate *g, const float *p, size_t n, size_t max) {
  size_t waiting = g->q_len - g->q_head;
  if (n == 0) return 0;
  if (waiting + n > max) return -1;
  if (g->q_head > 0) {
    memmove(g->q, g->q + g->q_head, waiting * sizeof *g->q);
    g->q_len = waiting;
    g->q_head = 0;
  }
  if (g->q_len + n > g->q_cap) {
    size_t cap = g->q_cap ? g->q_cap : 64;
    while (cap < g->q_len + n) cap *= 2;
    float *q = realloc(g->q, cap * sizeof *q);
    if (!q) return -2;
    g->q = q;
    g->q_cap = cap;
  }
  memcpy(g->q + g->q_len, p, n * sizeof *p);
  g->q_len += n;
  return 0;
}

size_t hark_vad_gate_queued(const hark_vad_gate *g) { return g->q_len - g->q_head; }

const float *hark_vad_gate_queued_probs(const hark_vad_gate *g) {
  return g->q ? g->q + g->q_head : NULL;
}

hark_vad_gate_event hark_vad_gate_step_queued(hark_vad_gate *g) {
  return hark_vad_gate_step(g, g->q[g->q_head++]);
}
