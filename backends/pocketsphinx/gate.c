/*
 * gate.c — utterances opened and closed by a neural VAD's per-frame speech
 * probabilities (model parameter vad_model; input VAD_PROB), instead of the
 * front end's energy detector.
 *
 * The rule is Riva's endpointing_config: a frame (32 ms) counts as speech
 * when its probability is at least speech_threshold, as silence when it is
 * below silence_threshold (silero's own hysteresis: 0.5 and 0.35). Outside
 * an utterance, once start_threshold of the last start_history ms are
 * speech, one opens (its audio starts with that window and prespeech_ms
 * before it); inside, once stop_threshold of the last stop_history ms are
 * silence, it closes (that silence is its trailing padding). Pure logic:
 * stream.c moves the audio.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps_internal.h"

static uint32_t frames_of(uint32_t ms) {
  uint32_t n = (ms + PS_GATE_FRAME_MS - 1) / PS_GATE_FRAME_MS;
  return n ? n : 1;
}

static uint32_t needed(float threshold, uint32_t window) {
  double n = ceil((double)threshold * window - 1e-6);
  return n < 1 ? 1 : n > window ? window : (uint32_t)n;
}

int ps_gate_init(ps_gate *g, const ps_gate_settings *set, const ps_endpointing *ep) {
  memset(g, 0, sizeof *g);
  g->set = *set;
  if (ep && ep->startspeech_ms) g->set.start_history_ms = ep->startspeech_ms;
  if (ep && ep->silence_ms) g->set.stop_history_ms = ep->silence_ms;
  if (ep && ep->start_threshold > 0) g->set.start_threshold = ep->start_threshold;
  if (ep && ep->stop_threshold > 0) g->set.stop_threshold = ep->stop_threshold;
  g->start_window = frames_of(g->set.start_history_ms);
  g->stop_window = frames_of(g->set.stop_history_ms);
  g->start_need = needed(g->set.start_threshold, g->start_window);
  g->stop_need = needed(g->set.stop_threshold, g->stop_window);
  g->start_ring = calloc(g->start_window, 1);
  g->stop_ring = calloc(g->stop_window, 1);
  return g->start_ring && g->stop_ring ? 0 : -1;
}

void ps_gate_fini(ps_gate *g) {
  free(g->start_ring);
  free(g->stop_ring);
  memset(g, 0, sizeof *g);
}

static void ring_clear(uint8_t *ring, uint32_t n, uint32_t *pos, uint32_t *count) {
  memset(ring, 0, n);
  *pos = 0;
  *count = 0;
}

void ps_gate_reset(ps_gate *g) {
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

ps_gate_event ps_gate_step(ps_gate *g, float prob) {
  if (!g->in_speech) {
    bool speech = prob >= g->set.speech_threshold;
    if (push(g->start_ring, g->start_window, &g->start_pos, &g->start_count, speech) <
        g->start_need)
      return PS_GATE_IDLE;
    g->in_speech = true;
    ring_clear(g->stop_ring, g->stop_window, &g->stop_pos, &g->stop_count);
    return PS_GATE_OPEN;
  }
  bool silence = prob < g->set.silence_threshold;
  if (push(g->stop_ring, g->stop_window, &g->stop_pos, &g->stop_count, silence) < g->stop_need)
    return PS_GATE_SPEECH;
  g->in_speech = false;
  ring_clear(g->start_ring, g->start_window, &g->start_pos, &g->start_count);
  return PS_GATE_CLOSE;
}
