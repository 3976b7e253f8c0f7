/*
 * config_adaptive.h — private to src/core/config*.c: the
 * adaptive_queue_delay block (config_adaptive.c), hark's own, which
 * dynamic_batching (config.c) and sequence_batching.oldest (config_seq.c)
 * take, and which direct and the top of sequence_batching refuse by name.
 */
#ifndef HARK_CONFIG_ADAPTIVE_H
#define HARK_CONFIG_ADAPTIVE_H

#include "core/config_walk.h"

/* No delay bound above this (10 s): a larger one is a typo, not a plan. */
#define HARK_ADAPTIVE_MAX_US 10000000u

extern const msg_spec hark_cfg_adaptive_spec;

/* The rows' hooks. dynamic: obj is the model's hark_dynamic_batching;
 * oldest and misplaced: obj is its hark_sequence_batching. */
void *hark_cfg_open_dynamic_adaptive(void *db);
hark_error *hark_cfg_done_dynamic_adaptive(cfg_ctx *c, void *db, const hark_pb_field *v);
void *hark_cfg_open_oldest_adaptive(void *sb);
hark_error *hark_cfg_done_oldest_adaptive(cfg_ctx *c, void *sb, const hark_pb_field *v);
/* In `direct { }` or at the top of sequence_batching: a load error. */
void *hark_cfg_open_misplaced_adaptive(void *sb);
hark_error *hark_cfg_done_misplaced_adaptive(cfg_ctx *c, void *sb, const hark_pb_field *v);

/*
 * After the walk, for a block (dynamic_batching or oldest, the tree node
 * `block`, named `where` in errors) holding `a`: fills target_queue_depth's
 * default (`default_depth`, at least 2) and the delay to start from, which
 * is the block's max_queue_delay_microseconds (`fixed_us`) when the file
 * gives it — then it must lie within [min, max] — else min.
 */
hark_error *hark_cfg_finish_adaptive(cfg_ctx *c, hark_adaptive_delay *a, const hark_pb_field *block,
                                     const char *where, uint64_t fixed_us, uint32_t default_depth);

#endif
