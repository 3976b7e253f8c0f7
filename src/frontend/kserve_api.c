/*
 * kserve_api.c — the KServe v2 / Triton documents that are not inference:
 * server and model metadata, per-model statistics and the repository
 * index, in exactly the JSON shapes Triton returns. Shared by every front
 * end that speaks KServe v2 in JSON; each reads the engine through its
 * public API and writes into a hark_kserve_buf, so they need no sockets
 * and are unit-tested directly.
 */
#include <stdlib.h>
#include <string.h>

#include "frontend/kserve.h"
#include "hark/server.h"

#define PUTS(b, s) hark_kserve_buf_puts(b, s)

static bool put_str(hark_kserve_buf *b, const char *s) {
  return hark_kserve_buf_put_jstr(b, s, strlen(s));
}

/* A version as Triton writes it: a JSON string of digits. */
static bool put_version(hark_kserve_buf *b, int64_t v) {
  return PUTS(b, "\"") && hark_kserve_buf_put_i64(b, v) && PUTS(b, "\"");
}

static hark_error *oom(void) { return hark_error_new(HARK_ERR_INTERNAL, "out of memory"); }

hark_error *hark_kserve_write_server_metadata(hark_kserve_buf *out) {
  bool ok = PUTS(out, "{\"name\":") && put_str(out, HARK_SERVER_NAME) &&
            PUTS(out, ",\"version\":") && put_str(out, HARK_SERVER_VERSION) &&
            PUTS(out, ",\"extensions\":[");
  const char *const *ext = hark_server_extensions();
  for (size_t i = 0; ok && ext && ext[i]; i++) ok = (!i || PUTS(out, ",")) && put_str(out, ext[i]);
  return ok && PUTS(out, "]}") ? NULL : oom();
}

/* ---- model metadata ------------------------------------------------------ */

typedef struct version_walk {
  const char *name;
  hark_kserve_buf *out;
  uint32_t n;
  bool ok;
} version_walk;

static void add_version(hark_model *model, void *userp) {
  version_walk *w = userp;
  if (!w->ok || strcmp(hark_model_name(model), w->name) != 0) return;
  w->ok = (!w->n++ || PUTS(w->out, ",")) && put_version(w->out, hark_model_version(model));
}

static bool put_io(hark_kserve_buf *out, const hark_model_io *io, uint32_t n, bool batch) {
  for (uint32_t i = 0; i < n; i++) {
    bool ok = (!i || PUTS(out, ",")) && PUTS(out, "{\"name\":") && put_str(out, io[i].name) &&
              PUTS(out, ",\"datatype\":") && put_str(out, hark_datatype_name(io[i].datatype)) &&
              PUTS(out, ",\"shape\":[") && (!batch || PUTS(out, io[i].ndims ? "-1," : "-1"));
    for (uint32_t d = 0; ok && d < io[i].ndims; d++)
      ok = (!d || PUTS(out, ",")) && hark_kserve_buf_put_i64(out, io[i].dims[d]);
    if (!ok || !PUTS(out, "]}")) return false;
  }
  return true;
}

hark_error *hark_kserve_write_model_metadata(hark_kserve_buf *out, hark_server *server,
                                             const hark_model *model) {
  const hark_model_config *cfg = hark_model_get_config(model);
  const char *platform = cfg->platform && *cfg->platform ? cfg->platform
                         : cfg->backend                  ? cfg->backend
                                                         : "";
  bool batch = cfg->max_batch_size > 0;
  version_walk w = {hark_model_name(model), out, 0, true};
  bool ok = PUTS(out, "{\"name\":") && put_str(out, w.name) && PUTS(out, ",\"versions\":[");
  if (ok) hark_server_model_foreach(server, add_version, &w);
  ok = ok && w.ok;
  if (ok && !w.n) ok = put_version(out, hark_model_version(model));
  ok = ok && PUTS(out, "],\"platform\":") && put_str(out, platform) && PUTS(out, ",\"inputs\":[") &&
       put_io(out, cfg->inputs, cfg->n_inputs, batch) && PUTS(out, "],\"outputs\":[") &&
       put_io(out, cfg->outputs, cfg->n_outputs, batch) && PUTS(out, "]}");
  return ok ? NULL : oom();
}

/* ---- statistics ---------------------------------------------------------- */

static bool put_stat(hark_kserve_buf *out, const char *key, hark_stat s) {
  return PUTS(out, "\"") && PUTS(out, key) && PUTS(out, "\":{\"count\":") &&
         hark_kserve_buf_put_u64(out, s.count) && PUTS(out, ",\"ns\":") &&
         hark_kserve_buf_put_u64(out, s.ns) && PUTS(out, "}");
}

static bool put_model_stats(hark_kserve_buf *out, const hark_model *model) {
  hark_model_stats st;
  hark_model_stats_read(model, &st);
  const hark_stat none = {0, 0};
  bool ok =
      PUTS(out, "{\"name\":") && put_str(out, hark_model_name(model)) &&
      PUTS(out, ",\"version\":") && put_version(out, hark_model_version(model)) &&
      PUTS(out, ",\"last_inference\":") && hark_kserve_buf_put_u64(out, st.last_inference_ms) &&
      PUTS(out, ",\"inference_count\":") && hark_kserve_buf_put_u64(out, st.inference_count) &&
      PUTS(out, ",\"execution_count\":") && hark_kserve_buf_put_u64(out, st.execution_count) &&
      PUTS(out, ",\"inference_stats\":{") && put_stat(out, "success", st.success) &&
      PUTS(out, ",") && put_stat(out, "fail", st.fail) && PUTS(out, ",") &&
      put_stat(out, "queue", st.queue) && PUTS(out, ",") &&
      put_stat(out, "compute_input", st.compute_input) && PUTS(out, ",") &&
      put_stat(out, "compute_infer", st.compute_infer) && PUTS(out, ",") &&
      put_stat(out, "compute_output", st.compute_output) && PUTS(out, ",") &&
      put_stat(out, "cache_hit", none) && PUTS(out, ",") && put_stat(out, "cache_miss", none) &&
      PUTS(out, "},\"batch_stats\":[");
  uint32_t nb = st.n_batch < 64 ? st.n_batch : 64;
  for (uint32_t i = 0; ok && i < nb; i++) {
    const hark_batch_stat *b = &st.batch[i];
    ok = (!i || PUTS(out, ",")) && PUTS(out, "{\"batch_size\":") &&
         hark_kserve_buf_put_u64(out, b->batch_size) && PUTS(out, ",") &&
         put_stat(out, "compute_input", b->compute_input) && PUTS(out, ",") &&
         put_stat(out, "compute_infer", b->compute_infer) && PUTS(out, ",") &&
         put_stat(out, "compute_output", b->compute_output) && PUTS(out, "}");
  }
  return ok && PUTS(out, "],\"memory_usage\":[]}");
}

typedef struct stats_walk {
  const char *name; /* NULL: every model */
  int64_t version;  /* -1: every version */
  hark_kserve_buf *out;
  uint32_t n;
  bool ok;
} stats_walk;

static void add_stats(hark_model *model, void *userp) {
  stats_walk *w = userp;
  if (!w->ok || (w->name && strcmp(hark_model_name(model), w->name) != 0) ||
      (w->version >= 0 && hark_model_version(model) != w->version))
    return;
  w->ok = (!w->n++ || PUTS(w->out, ",")) && put_model_stats(w->out, model);
}

hark_error *hark_kserve_write_stats(hark_kserve_buf *out, hark_server *server, const char *name,
                                    int64_t version) {
  size_t start = out->len;
  stats_walk w = {name, version, out, 0, true};
  if (!PUTS(out, "{\"model_stats\":[")) return oom();
  hark_server_model_foreach(server, add_stats, &w);
  if (!w.ok || !PUTS(out, "]}")) return oom();
  if (name && !w.n) {
    out->len = start;
    if (version >= 0)
      return hark_error_new(HARK_ERR_NOT_FOUND, "requested model '%s' version %lld is not found",
                            name, (long long)version);
    return hark_error_new(HARK_ERR_NOT_FOUND, "requested model '%s' is not found", name);
  }
  return NULL;
}

/* ---- repository index ------------------------------------------------------ */

hark_error *hark_kserve_write_index(hark_kserve_buf *out, hark_server *server, bool ready_only) {
  hark_index_entry *entries;
  size_t n;
  hark_error *err = hark_server_repository_index(server, ready_only, &entries, &n);
  if (err) return err;
  bool ok = PUTS(out, "[");
  for (size_t i = 0; ok && i < n; i++) {
    const hark_index_entry *e = &entries[i];
    ok = (!i || PUTS(out, ",")) && PUTS(out, "{\"name\":") && put_str(out, e->name);
    if (ok && e->version >= 0) ok = PUTS(out, ",\"version\":") && put_version(out, e->version);
    if (ok && e->state && *e->state) ok = PUTS(out, ",\"state\":") && put_str(out, e->state);
    if (ok && e->reason && *e->reason) ok = PUTS(out, ",\"reason\":") && put_str(out, e->reason);
    ok = ok && PUTS(out, "}");
  }
  hark_index_free(entries, n);
  return ok && PUTS(out, "]") ? NULL : oom();
}
