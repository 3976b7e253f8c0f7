/*
 * config_adaptive.c — `adaptive_queue_delay { min_microseconds
 * max_microseconds target_queue_depth }`, hark's extension of Triton's
 * dynamic_batching and sequence_batching.oldest: its table, its checks,
 * and the refusals where it does not belong.
 *
 * The parsed block lives at the end of hark_model_config (the public
 * struct's 1.x layout stays put), so the open hooks step from the parent
 * block they are handed back to the model that holds it.
 */
#include <stddef.h>

#include "core/config_adaptive.h"

static const field_spec adaptive_fields[] = {
    RANGED("min_microseconds", V_U64, hark_adaptive_delay, min_us, 0, HARK_ADAPTIVE_MAX_US),
    RANGED("max_microseconds", V_U64, hark_adaptive_delay, max_us, 1, HARK_ADAPTIVE_MAX_US),
    RANGED("target_queue_depth", V_U32, hark_adaptive_delay, target_queue_depth, 2, 1 << 20),
};
const msg_spec hark_cfg_adaptive_spec = SPEC(adaptive_fields);

static hark_model_config *model_of_db(void *db) {
  return (hark_model_config *)((char *)db - offsetof(hark_model_config, dynamic_batching));
}

static hark_model_config *model_of_sb(void *sb) {
  return (hark_model_config *)((char *)sb - offsetof(hark_model_config, sequence_batching));
}

static hark_error *check_bounds(cfg_ctx *c, const hark_adaptive_delay *a, const hark_pb_field *v,
                                const char *where) {
  if (!hark_cfg_find_value(v, "max_microseconds", 0))
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                         "%s.adaptive_queue_delay needs max_microseconds (the widest the queue "
                         "delay may grow, 1 to %u)",
                         where, HARK_ADAPTIVE_MAX_US);
  if (a->min_us > a->max_us)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG,
                         hark_cfg_line_of(v, "min_microseconds", 0, v->line),
                         "%s.adaptive_queue_delay.min_microseconds %llu is larger than "
                         "max_microseconds %llu",
                         where, (unsigned long long)a->min_us, (unsigned long long)a->max_us);
  return NULL;
}

void *hark_cfg_open_dynamic_adaptive(void *db) {
  hark_adaptive_delay *a = &model_of_db(db)->dynamic_adaptive_delay;
  a->enabled = true;
  return a;
}

hark_error *hark_cfg_done_dynamic_adaptive(cfg_ctx *c, void *db, const hark_pb_field *v) {
  return check_bounds(c, &model_of_db(db)->dynamic_adaptive_delay, v, "dynamic_batching");
}

void *hark_cfg_open_oldest_adaptive(void *sb) {
  hark_adaptive_delay *a = &model_of_sb(sb)->oldest_adaptive_delay;
  a->enabled = true;
  return a;
}

hark_error *hark_cfg_done_oldest_adaptive(cfg_ctx *c, void *sb, const hark_pb_field *v) {
  return check_bounds(c, &model_of_sb(sb)->oldest_adaptive_delay, v, "sequence_batching.oldest");
}

/* Filled (so the walk still checks the block's own fields) into a scratch
 * that the refusal below makes moot. */
void *hark_cfg_open_misplaced_adaptive(void *sb) { return &model_of_sb(sb)->oldest_adaptive_delay; }

hark_error *hark_cfg_done_misplaced_adaptive(cfg_ctx *c, void *sb, const hark_pb_field *v) {
  (void)sb;
  return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, v->line,
                       "adaptive_queue_delay adapts a batcher's max_queue_delay_microseconds: it "
                       "belongs inside dynamic_batching or sequence_batching's 'oldest' strategy "
                       "(the 'direct' strategy batches by slot and has no such delay)");
}

hark_error *hark_cfg_finish_adaptive(cfg_ctx *c, hark_adaptive_delay *a, const hark_pb_field *block,
                                     const char *where, uint64_t fixed_us, uint32_t default_depth) {
  if (!a->enabled) return NULL;
  if (a->target_queue_depth == 0) a->target_queue_depth = default_depth < 2 ? 2 : default_depth;
  const hark_pb_field *fixed = hark_cfg_find_value(block, "max_queue_delay_microseconds", 0);
  if (!fixed) {
    a->start_us = a->min_us;
    return NULL;
  }
  if (fixed_us < a->min_us || fixed_us > a->max_us)
    return hark_cfg_fail(c, HARK_ERR_INVALID_ARG, fixed->line,
                         "%s.max_queue_delay_microseconds %llu is outside adaptive_queue_delay's "
                         "[%llu, %llu]: with adaptive_queue_delay it is the delay to start from",
                         where, (unsigned long long)fixed_us, (unsigned long long)a->min_us,
                         (unsigned long long)a->max_us);
  a->start_us = fixed_us;
  return NULL;
}
