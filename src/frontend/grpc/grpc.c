/*
 * grpc.c — the gRPC transport object: the methods services register, the
 * options, and the drain. It serves nothing by itself: the HTTP
 * transport's loops accept the gRPC port's connections and hand their
 * bytes to h2.c (hark_grpc_raw_handler), so gRPC calls run on the same
 * threads, with the same completions and the same cheap inline runs, as
 * HTTP requests.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frontend/grpc/grpc_impl.h"
#include "util/alloc.h"

#define DEFAULT_MAX_MESSAGE (64u << 20)
#define DEFAULT_SEND_TIMEOUT_MS 60000u

hark_error *hark_grpc_new(const hark_grpc_options *opts, hark_grpc **out) {
  hark_grpc *g = hark_xcalloc(1, sizeof *g);
  g->opts = *opts;
  g->max_message_bytes = opts->max_message_bytes ? opts->max_message_bytes : DEFAULT_MAX_MESSAGE;
  if (g->max_message_bytes > INT_MAX) g->max_message_bytes = INT_MAX;
  size_t declared = opts->max_declared_bytes_per_connection;
  if (!declared) declared = 4 * g->max_message_bytes;
  g->max_declared_bytes = declared < g->max_message_bytes ? g->max_message_bytes : declared;
  g->max_reply_bytes = g->max_declared_bytes;
  if (!g->opts.send_timeout_ms) g->opts.send_timeout_ms = DEFAULT_SEND_TIMEOUT_MS;
  atomic_init(&g->draining, false);
  atomic_init(&g->live_calls, 0);
  atomic_init(&g->open_streams, 0);
  hark_grpc_h2_setup(g);
  *out = g;
  return NULL;
}

hark_error *hark_grpc_add_service(hark_grpc *g, const hark_grpc_service *svc, void *userp) {
  for (size_t i = 0; i < svc->n_methods; i++) {
    const hark_grpc_method *m = &svc->methods[i];
    size_t len = strlen(svc->name) + strlen(m->name) + 3;
    char *path = hark_xmalloc(len);
    snprintf(path, len, "/%s/%s", svc->name, m->name);
    if (m->api <= HARK_API_UNSET || m->api >= HARK_API_COUNT) { /* restrictions need it */
      hark_error *err = hark_error_new(HARK_ERR_INTERNAL, "grpc: %s has no category", path);
      free(path);
      return err;
    }
    if (hark_grpc_find(g, path, strlen(path))) {
      hark_error *err =
          hark_error_new(HARK_ERR_ALREADY_EXISTS, "grpc: %s is registered twice", path);
      free(path);
      return err;
    }
    if (g->n_regs == g->cap_regs) {
      g->cap_regs = g->cap_regs ? 2 * g->cap_regs : 16;
      g->regs = hark_xrealloc(g->regs, g->cap_regs * sizeof *g->regs);
    }
    g->regs[g->n_regs++] =
        (hark_grpc_reg){.m = m, .svc_userp = userp, .path = path, .path_len = strlen(path)};
  }
  return NULL;
}

const hark_raw_handler *hark_grpc_raw_handler(void) { return &hark_grpc_h2_handler; }

void hark_grpc_drain(hark_grpc *g) { atomic_store(&g->draining, true); }

bool hark_grpc_draining(const hark_grpc *g) { return atomic_load(&((hark_grpc *)g)->draining); }

bool hark_grpc_is_idle(const hark_grpc *g) {
  return !g || atomic_load(&((hark_grpc *)g)->open_streams) == 0;
}

void hark_grpc_free(hark_grpc *g) {
  if (!g) return;
  hark_grpc_h2_teardown(g);
  for (size_t k = 0; k < g->n_regs; k++) free(g->regs[k].path);
  free(g->regs);
  free(g);
}
