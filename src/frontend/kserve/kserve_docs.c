/*
 * kserve_docs.c — the KServe v2 / Triton documents that are not inference:
 * server and model metadata, per-model statistics and the repository
 * index, in exactly the JSON shapes Triton returns. Each reads the engine
 * through its public API and writes into a hark_buf, so they need no
 * sockets and are unit-tested directly. Everything written is of internal
 * size (names, counters), so the writers never fail (util/alloc.h).
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/kserve/kserve.h"
#include "frontend/security/restrict.h"
#include "hark/config.h"
#include "hark/model.h"
#include "util/alloc.h"

/* A version as Triton writes it: a JSON string of digits. */
static void put_version(hark_buf *b, int64_t v) {
  hark_buf_puts(b, "\"");
  hark_buf_put_i64(b, v);
  hark_buf_puts(b, "\"");
}

void hark_kserve_write_server_metadata(hark_buf *out, bool shared_memory) {
  hark_buf_puts(out, "{\"name\":");
  hark_buf_put_str(out, HARK_SERVER_NAME);
  hark_buf_puts(out, ",\"version\":");
  hark_buf_put_str(out, HARK_SERVER_VERSION);
  hark_buf_puts(out, ",\"extensions\":[");
  const char *const *ext = hark_server_extensions();
  for (size_t i = 0, n = 0; ext && ext[i]; i++) {
    if (!shared_memory && !strcmp(ext[i], "system_shared_memory")) continue;
    if (n++) hark_buf_puts(out, ",");
    hark_buf_put_str(out, ext[i]);
  }
  hark_buf_puts(out, "]}");
}

/* ---- model metadata ------------------------------------------------------ */

typedef struct version_walk {
  const char *name;
  hark_buf *out;
  uint32_t n;
} version_walk;

static void add_version(hark_model *model, void *userp) {
  version_walk *w = userp;
  if (strcmp(hark_model_name(model), w->name) != 0) return;
  if (w->n++) hark_buf_puts(w->out, ",");
  put_version(w->out, hark_model_version(model));
}

static void put_io(hark_buf *out, const hark_model_io *io, uint32_t n, bool batch) {
  for (uint32_t i = 0; i < n; i++) {
    if (i) hark_buf_puts(out, ",");
    hark_buf_puts(out, "{\"name\":");
    hark_buf_put_str(out, io[i].name);
    hark_buf_puts(out, ",\"datatype\":");
    hark_buf_put_str(out, hark_datatype_name(io[i].datatype));
    hark_buf_puts(out, ",\"shape\":[");
    if (batch) hark_buf_puts(out, io[i].ndims ? "-1," : "-1");
    for (uint32_t d = 0; d < io[i].ndims; d++) {
      if (d) hark_buf_puts(out, ",");
      hark_buf_put_i64(out, io[i].dims[d]);
    }
    hark_buf_puts(out, "]}");
  }
}

void hark_kserve_write_model_metadata(hark_buf *out, hark_server *server, const hark_model *model) {
  const hark_model_config *cfg = hark_model_get_config(model);
  const char *platform = cfg->platform && *cfg->platform ? cfg->platform
                         : cfg->backend                  ? cfg->backend
                                                         : "";
  bool batch = cfg->max_batch_size > 0;
  version_walk w = {hark_model_name(model), out, 0};
  hark_buf_puts(out, "{\"name\":");
  hark_buf_put_str(out, w.name);
  hark_buf_puts(out, ",\"versions\":[");
  hark_server_model_foreach(server, add_version, &w);
  if (!w.n) put_version(out, hark_model_version(model));
  hark_buf_puts(out, "],\"platform\":");
  hark_buf_put_str(out, platform);
  hark_buf_puts(out, ",\"inputs\":[");
  put_io(out, cfg->inputs, cfg->n_inputs, batch);
  hark_buf_puts(out, "],\"outputs\":[");
  put_io(out, cfg->outputs, cfg->n_outputs, batch);
  hark_buf_puts(out, "]}");
}

/* ---- statistics ---------------------------------------------------------- */

static void put_stat(hark_buf *out, const char *key, hark_stat s) {
  hark_buf_puts(out, "\"");
  hark_buf_puts(out, key);
  hark_buf_puts(out, "\":{\"count\":");
  hark_buf_put_u64(out, s.count);
  hark_buf_puts(out, ",\"ns\":");
  hark_buf_put_u64(out, s.ns);
  hark_buf_puts(out, "}");
}

static void put_model_stats(hark_buf *out, const hark_model *model) {
  hark_model_stats *st = hark_xmalloc(sizeof *st); /* 5 KiB: not on a loop's stack */
  hark_model_stats_read(model, st);
  const hark_stat none = {0, 0};
  hark_buf_puts(out, "{\"name\":");
  hark_buf_put_str(out, hark_model_name(model));
  hark_buf_puts(out, ",\"version\":");
  put_version(out, hark_model_version(model));
  hark_buf_puts(out, ",\"last_inference\":");
  hark_buf_put_u64(out, st->last_inference_ms);
  hark_buf_puts(out, ",\"inference_count\":");
  hark_buf_put_u64(out, st->inference_count);
  hark_buf_puts(out, ",\"execution_count\":");
  hark_buf_put_u64(out, st->execution_count);
  hark_buf_puts(out, ",\"inference_stats\":{");
  const struct {
    const char *key;
    hark_stat s;
  } stats[] = {{"success", st->success},
               {"fail", st->fail},
               {"queue", st->queue},
               {"compute_input", st->compute_input},
               {"compute_infer", st->compute_infer},
               {"compute_output", st->compute_output},
               {"cache_hit", none},
               {"cache_miss", none}};
  for (size_t i = 0; i < sizeof stats / sizeof stats[0]; i++) {
    if (i) hark_buf_puts(out, ",");
    put_stat(out, stats[i].key, stats[i].s);
  }
  hark_buf_puts(out, "},\"batch_stats\":[");
  uint32_t nb = st->n_batch < 64 ? st->n_batch : 64;
  for (uint32_t i = 0; i < nb; i++) {
    const hark_batch_stat *b = &st->batch[i];
    if (i) hark_buf_puts(out, ",");
    hark_buf_puts(out, "{\"batch_size\":");
    hark_buf_put_u64(out, b->batch_size);
    hark_buf_puts(out, ",");
    put_stat(out, "compute_input", b->compute_input);
    hark_buf_puts(out, ",");
    put_stat(out, "compute_infer", b->compute_infer);
    hark_buf_puts(out, ",");
    put_stat(out, "compute_output", b->compute_output);
    hark_buf_puts(out, "}");
  }
  hark_buf_puts(out, "],\"memory_usage\":[]}");
  free(st);
}

typedef struct stats_walk {
  const char *name; /* NULL: every model */
  int64_t version;  /* -1: every version */
  hark_buf *out;
  uint32_t n;
} stats_walk;

static void add_stats(hark_model *model, void *userp) {
  stats_walk *w = userp;
  if ((w->name && strcmp(hark_model_name(model), w->name) != 0) ||
      (w->version >= 0 && hark_model_version(model) != w->version))
    return;
  if (w->n++) hark_buf_puts(w->out, ",");
  put_model_stats(w->out, model);
}

hark_error *hark_kserve_write_stats(hark_buf *out, hark_server *server, const char *name,
                                    int64_t version) {
  size_t start = out->len;
  stats_walk w = {name, version, out, 0};
  hark_buf_puts(out, "{\"model_stats\":[");
  hark_server_model_foreach(server, add_stats, &w);
  hark_buf_puts(out, "]}");
  if (!name || w.n) return NULL;
  out->len = start;
  if (version >= 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "requested model '%s' version %lld is not found",
                          name, (long long)version);
  return hark_error_new(HARK_ERR_INVALID_ARG, "requested model '%s' is not found", name);
}

/* ---- repository index ------------------------------------------------------ */

hark_error *hark_kserve_write_index(hark_buf *out, hark_server *server, bool ready_only) {
  hark_index_entry *entries;
  size_t n;
  hark_error *err = hark_server_repository_index(server, ready_only, &entries, &n);
  if (err) return err;
  hark_buf_puts(out, "[");
  for (size_t i = 0; i < n; i++) {
    const hark_index_entry *e = &entries[i];
    if (i) hark_buf_puts(out, ",");
    hark_buf_puts(out, "{\"name\":");
    hark_buf_put_str(out, e->name);
    if (e->version >= 0) {
      hark_buf_puts(out, ",\"version\":");
      put_version(out, e->version);
    }
    if (e->state && *e->state) {
      hark_buf_puts(out, ",\"state\":");
      hark_buf_put_str(out, e->state);
    }
    if (e->reason && *e->reason) {
      hark_buf_puts(out, ",\"reason\":");
      hark_buf_put_str(out, e->reason);
    }
    hark_buf_puts(out, "}");
  }
  hark_index_free(entries, n);
  hark_buf_puts(out, "]");
  return NULL;
}

void hark_kserve_config_hide_paths(const hark_model_config *cfg, hark_model_config *view) {
  static char hidden[] = HARK_RESTRICT_PATH_HIDDEN;
  *view = *cfg;
  view->parameters = hark_xcalloc(cfg->n_parameters ? cfg->n_parameters : 1, sizeof(hark_kv));
  for (uint32_t i = 0; i < cfg->n_parameters; i++) {
    view->parameters[i] = cfg->parameters[i];
    if (hark_restrict_is_path(cfg->parameters[i].value)) view->parameters[i].value = hidden;
  }
  if (hark_restrict_is_path(cfg->default_model_filename)) view->default_model_filename = hidden;
}
