/*
 * config_seq.h — private to src/core/config*.c: the sequence_batching
 * block (config_seq.c), as config.c's model table and the JSON writer
 * (config_json.c) use it.
 */
#ifndef HARK_CONFIG_SEQ_H
#define HARK_CONFIG_SEQ_H

#include "core/config_walk.h"

/* The model table's sequence_batching row: its schema and hooks. */
extern const msg_spec hark_cfg_sequence_batching_spec;
void *hark_cfg_open_sequence_batching(void *cfg);
hark_error *hark_cfg_done_sequence_batching(cfg_ctx *c, void *cfg, const hark_pb_field *v);
/* Checks against the rest of the model (max_batch_size, inputs, dynamic_batching). */
hark_error *hark_cfg_finish_sequence_batching(cfg_ctx *c);
void hark_cfg_free_sequence_batching(hark_sequence_batching *sb);
/* The config's spelling of a control kind ("" out of range). */
const char *hark_cfg_control_kind_name(hark_seq_control_kind kind);

#endif
