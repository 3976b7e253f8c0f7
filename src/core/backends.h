/*
 * backends.h — the server's backend registry (backends.c): each backend
 * shared object named by a config is loaded once and kept until the
 * server goes.
 */
#ifndef HARK_BACKENDS_H
#define HARK_BACKENDS_H

#include "hark/backend.h"

typedef struct hark_backends hark_backends;

/* An empty registry that looks in `dir` (copied). */
hark_backends *hark_backends_new(const char *dir);
/* Finalizes and closes every backend. Only once no model uses them. */
void hark_backends_free(hark_backends *b);
/*
 * The backend `name`, loaded on first use: libhark_<name>.so from the
 * model folder `model_path`, else from the registry's folder (flat, or in
 * a folder named after the backend, as Triton lays them out). The
 * registry keeps it. Not thread-safe: the caller serializes calls.
 */
hark_error *hark_backends_get(hark_backends *b, const char *model_path, const char *name,
                              hark_backend **out);

#endif
