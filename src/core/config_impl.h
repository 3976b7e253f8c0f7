/*
 * config_impl.h — private to src/core/config*.c: what config.c (the
 * model's tables) offers its siblings beyond the public hark/config.h.
 */
#ifndef HARK_CONFIG_IMPL_H
#define HARK_CONFIG_IMPL_H

#include "hark/config.h"

/* The config's spellings of enum values ("" for a value out of range),
 * from the tables that read them; config_json.c writes them back. */
const char *hark_cfg_timeout_action_name(hark_timeout_action action);
const char *hark_cfg_instance_kind_name(hark_instance_kind kind);

#endif
