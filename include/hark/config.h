/*
 * hark/config.h — a model's configuration, parsed from the config.pbtxt in
 * its repository folder (Triton's protobuf text format, the subset hark
 * supports, same field names and meanings).
 *
 * The struct is read-only after parsing: the server hands backends a const
 * pointer that stays valid until the model is finalized. Every field has
 * Triton's default when absent from the file.
 */
#ifndef HARK_CONFIG_H
#define HARK_CONFIG_H

#include "hark/types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HARK_MAX_PREFERRED_BATCH_SIZES 16

typedef struct hark_kv {
  char *key;
  char *value;
} hark_kv;

typedef struct hark_model_io {
  char *name;
  hark_datatype datatype;
  uint32_t ndims;
  int64_t dims[HARK_MAX_DIMS]; /* without the batch dimension; -1 = any */
  bool optional;               /* inputs only */
} hark_model_io;

typedef enum hark_version_policy_kind {
  HARK_VERSION_LATEST = 0, /* default, latest { num_versions: 1 } */
  HARK_VERSION_ALL,
  HARK_VERSION_SPECIFIC,
} hark_version_policy_kind;

typedef struct hark_version_policy {
  hark_version_policy_kind kind;
  uint32_t latest_num_versions; /* LATEST: how many of the newest */
  int64_t *versions;            /* SPECIFIC */
  uint32_t n_versions;
} hark_version_policy;

typedef enum hark_instance_kind {
  HARK_KIND_AUTO = 0,
  HARK_KIND_CPU,
  HARK_KIND_GPU,
  HARK_KIND_MODEL,
} hark_instance_kind;

typedef struct hark_instance_group {
  char *name;
  uint32_t count; /* default 1 */
  hark_instance_kind kind;
} hark_instance_group;

typedef enum hark_timeout_action {
  HARK_TIMEOUT_REJECT = 0,
  HARK_TIMEOUT_DELAY,
} hark_timeout_action;

typedef struct hark_queue_policy {
  hark_timeout_action timeout_action;
  uint64_t default_timeout_us; /* 0 = no timeout */
  bool allow_timeout_override;
  uint32_t max_queue_size; /* 0 = unbounded by config (server caps it) */
} hark_queue_policy;

typedef struct hark_priority_policy {
  uint32_t level;
  hark_queue_policy policy;
} hark_priority_policy;

/*
 * adaptive_queue_delay { } — hark's own, not Triton's: inside
 * dynamic_batching and sequence_batching.oldest, the batcher's queue delay
 * moves between min_us and max_us instead of staying at
 * max_queue_delay_microseconds: wider while the queue is at least
 * target_queue_depth deep (batches fill), narrower while it holds at most
 * half that or stays empty (a lone request is not held). The law is in
 * src/sched/adaptive.h.
 */
typedef struct hark_adaptive_delay {
  bool enabled; /* the block is present */
  uint64_t min_us, max_us;
  uint32_t target_queue_depth; /* requests; after parsing >= 2 (0 in the file: the
                                  largest preferred batch size, else max_batch_size) */
  uint64_t start_us;           /* the delay it starts from: max_queue_delay_microseconds
                                  when given (within [min_us, max_us]), else min_us */
} hark_adaptive_delay;

typedef struct hark_dynamic_batching {
  bool enabled; /* the dynamic_batching block is present */
  uint32_t preferred_batch_size[HARK_MAX_PREFERRED_BATCH_SIZES];
  uint32_t n_preferred_batch_size;
  uint64_t max_queue_delay_us;
  bool preserve_ordering;
  uint32_t priority_levels;        /* 0 = priorities off (one level) */
  uint32_t default_priority_level; /* 1..priority_levels (1 = highest) */
  hark_queue_policy default_queue_policy;
  hark_priority_policy *priority_queue_policy;
  uint32_t n_priority_queue_policy;
} hark_dynamic_batching;

/* sequence_batching: stateful models fed one stream (sequence) at a time. */
typedef enum hark_seq_strategy {
  HARK_SEQ_DIRECT = 0, /* default: each live sequence owns a batch slot */
  HARK_SEQ_OLDEST,     /* batches of the oldest ready requests of candidates */
} hark_seq_strategy;

typedef enum hark_seq_control_kind {
  HARK_SEQ_CONTROL_START = 0, /* Triton's ControlKind order */
  HARK_SEQ_CONTROL_READY,
  HARK_SEQ_CONTROL_END,
  HARK_SEQ_CONTROL_CORRID,
} hark_seq_control_kind;

/* control_input: a tensor the engine adds to each request of a sequence. */
typedef struct hark_seq_control {
  char *name; /* the input tensor's name */
  hark_seq_control_kind kind;
  hark_datatype datatype; /* START/END/READY: INT32, FP32 or BOOL (from
                              which *_false_true was given); CORRID: data_type */
  int32_t int32_false_true[2];
  float fp32_false_true[2];
  bool bool_false_true[2];
} hark_seq_control;

/* Implicit state: fed as input `input_name`, taken back from output
 * `output_name` after each request; never shown to clients. */
typedef struct hark_seq_state {
  char *input_name;
  char *output_name;
  hark_datatype datatype;
  uint32_t ndims;
  int64_t dims[HARK_MAX_DIMS]; /* without the batch dimension */
  /* initial_state { zero_data: true ... }: zeros of these dims on START
   * (absent: zeros of `dims`, which must then be fixed). */
  bool has_initial;
  uint32_t initial_ndims;
  int64_t initial_dims[HARK_MAX_DIMS];
} hark_seq_state;

typedef struct hark_sequence_batching {
  bool enabled; /* the sequence_batching block is present */
  hark_seq_strategy strategy;
  uint64_t max_sequence_idle_us; /* default 1000000 (Triton's 1 s) */
  /* direct { } */
  uint64_t direct_max_queue_delay_us;
  float minimum_slot_utilization; /* 0..1 */
  /* oldest { } */
  uint32_t max_candidate_sequences; /* >= 1 */
  uint32_t preferred_batch_size[HARK_MAX_PREFERRED_BATCH_SIZES];
  uint32_t n_preferred_batch_size;
  uint64_t oldest_max_queue_delay_us;
  hark_seq_control *controls;
  uint32_t n_controls;
  hark_seq_state *states;
  uint32_t n_states;
} hark_sequence_batching;

typedef struct hark_ensemble_step {
  char *model_name;
  int64_t model_version; /* -1 = latest */
  hark_kv *input_map;    /* key: the step model's input, value: ensemble tensor */
  uint32_t n_input_map;
  hark_kv *output_map; /* key: the step model's output, value: ensemble tensor */
  uint32_t n_output_map;
} hark_ensemble_step;

typedef struct hark_model_config {
  char *name;
  char *platform; /* "" or "ensemble" */
  char *backend;  /* shared object libhark_<backend>.so; "" for ensembles */
  hark_version_policy version_policy;
  uint32_t max_batch_size; /* 0: no batch dimension */
  hark_model_io *inputs;
  uint32_t n_inputs;
  hark_model_io *outputs;
  uint32_t n_outputs;
  hark_instance_group *instance_groups; /* at least one after parsing */
  uint32_t n_instance_groups;
  hark_dynamic_batching dynamic_batching;
  hark_sequence_batching sequence_batching;
  bool decoupled;                     /* model_transaction_policy { decoupled: true } */
  hark_ensemble_step *ensemble_steps; /* ensemble_scheduling { step [...] } */
  uint32_t n_ensemble_steps;
  hark_kv *parameters; /* parameters { key: "k" value: { string_value: "v" } } */
  uint32_t n_parameters;
  char *default_model_filename;
  /* Appended here, after every field of API 1.3's layout, so that a backend
   * built on an older header still finds its fields where it expects:
   * dynamic_batching { adaptive_queue_delay { } } and
   * sequence_batching { oldest { adaptive_queue_delay { } } }. */
  hark_adaptive_delay dynamic_adaptive_delay;
  hark_adaptive_delay oldest_adaptive_delay;
} hark_model_config;

/*
 * Parses config.pbtxt text. `file` names the file in error messages, which
 * read "FILE:LINE: ..." and name the offending field. An unknown or
 * unsupported field is an error. `dir_name` is the model's folder name: a
 * missing `name` is filled from it; a different one is an error. Checks the
 * config is coherent (e.g. preferred sizes <= max_batch_size, ensemble
 * platform has steps). On success *out is owned by the caller, who frees it
 * with hark_model_config_free().
 */
hark_error *hark_model_config_parse(const char *text, size_t len, const char *file,
                                    const char *dir_name, hark_model_config **out);
void hark_model_config_free(hark_model_config *cfg);

/* The value of parameters[key], or NULL. */
const char *hark_model_config_parameter(const hark_model_config *cfg, const char *key);

/* A streaming speech model: BYTES input AUDIO and BYTES output TRANSCRIPT
 * (what the Vosk and Riva front ends serve). */
bool hark_model_config_is_speech(const hark_model_config *cfg);

/*
 * The config as JSON, in the shape Triton's /v2/models/{m}/config returns
 * (field names as in model_config.proto, enums as their names, data types
 * as "TYPE_INT32", dims as numbers). Caller frees with free().
 */
char *hark_model_config_to_json(const hark_model_config *cfg);

#ifdef __cplusplus
}
#endif
#endif
