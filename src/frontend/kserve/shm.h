/*
 * shm.h — the registry of system (POSIX) shared-memory regions behind
 * Triton's system_shared_memory extension, shared by the HTTP and gRPC
 * services of one server.
 *
 * A client registers a region by name: a POSIX shm object (its `key`, as
 * given to shm_open) and a window of it (offset, byte_size). Inference
 * requests then name the region for an input's data or an output's
 * destination instead of carrying the bytes. The registry maps each region
 * once and keeps its fd, so a region whose object was truncated after
 * registration is found (fstat) before it is read or written.
 *
 * Regions are reference-counted: the registry holds one reference, each
 * request that uses a region another (hark_shm_acquire, released when the
 * request is freed, i.e. after its response was written). Unregistering
 * drops the registry's; the mapping goes away with the last reference, so
 * never under a request. Every function is thread-safe.
 */
#ifndef HARK_FRONTEND_KSERVE_SHM_H
#define HARK_FRONTEND_KSERVE_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "hark/request.h"
#include "hark/types.h"

typedef struct hark_shm hark_shm;
typedef struct hark_shm_region hark_shm_region;

/* An empty registry that holds at most `max_regions` regions (0: the
 * default); past it a registration is RESOURCE_EXHAUSTED. Never NULL. */
#define HARK_SHM_DEFAULT_MAX_REGIONS 1024u
hark_shm *hark_shm_new(size_t max_regions);
/* Drops every registered region (regions still held by requests stay
 * mapped until released). NULL is a no-op. */
void hark_shm_free(hark_shm *shm);

/*
 * Registers `name` as bytes [offset, offset + byte_size) of the POSIX shm
 * object `key`. Copies the strings. Errors: ALREADY_EXISTS when `name` is
 * registered; RESOURCE_EXHAUSTED when the registry is full; INVALID_ARG
 * when the object cannot be opened, the window is empty or does not fit
 * in the object, or the mapping fails.
 */
hark_error *hark_shm_register(hark_shm *shm, const char *name, const char *key, uint64_t offset,
                              uint64_t byte_size);
/* Unregisters `name`; NULL unregisters every region. An unknown name is
 * not an error (as Triton: unregistering is idempotent). */
void hark_shm_unregister(hark_shm *shm, const char *name);

/* One region's registration, as the status calls report it. */
typedef struct hark_shm_status {
  char *name;
  char *key;
  uint64_t offset;
  uint64_t byte_size;
} hark_shm_status;

/*
 * Every registered region (name NULL), sorted by name, or the one named:
 * *out (malloc'd, free with hark_shm_status_free) and *n. NOT_FOUND-style
 * INVALID_ARG "Unable to find system shared memory region: 'x'" for an
 * unknown name.
 */
hark_error *hark_shm_status_get(hark_shm *shm, const char *name, hark_shm_status **out, size_t *n);
void hark_shm_status_free(hark_shm_status *st, size_t n);

/*
 * A reference on the region `name`, for one request: INVALID_ARG when no
 * such region is registered. Release it with hark_shm_release (any
 * thread), typically through hark_request_attach.
 */
hark_error *hark_shm_acquire(hark_shm *shm, const char *name, hark_shm_region **out);
void hark_shm_release(void *region);

const char *hark_shm_region_name(const hark_shm_region *r);
uint64_t hark_shm_region_size(const hark_shm_region *r);

/*
 * The address of bytes [offset, offset + size) of region `r` (offsets are
 * relative to the region's own offset in its object). INVALID_ARG, naming
 * `what` (e.g. "input 'X'"), when the span does not fit in the region, or
 * when the object has been truncated below it since registration (checked
 * with fstat on every call: reading a truncated mapping would be SIGBUS).
 */
hark_error *hark_shm_span(hark_shm_region *r, uint64_t offset, uint64_t size, const char *what,
                          void **out);
/* Copies bytes [offset, offset + size) of region `r` to `dst`, or `src` to
 * them, through the region's descriptor, never its mapping: an object
 * truncated meanwhile is INVALID_ARG naming `what`, not SIGBUS. */
hark_error *hark_shm_read(hark_shm_region *r, uint64_t offset, uint64_t size, const char *what,
                          void *dst);
hark_error *hark_shm_write(hark_shm_region *r, uint64_t offset, const void *src, uint64_t size,
                           const char *what);

/* ---- binding tensors to regions (both protocols, and the response writer) ------ */

/*
 * An input's data in shared memory: checks `byte_size` against the tensor
 * (count elements of `dt`; BYTES: length-prefixed elements filling it) and
 * offset + byte_size against the region `region` of `shm`, holds the region
 * for `req` (released when it is freed), and returns the address of a
 * copy of the data that `req` owns (charged to the in-flight budget).
 * INVALID_ARG naming input `name` otherwise. Shared by HTTP and gRPC.
 */
hark_error *hark_kserve_shm_input(hark_shm *shm, hark_request *req, const char *name,
                                  hark_datatype dt, int64_t count, const char *region,
                                  uint64_t offset, uint64_t byte_size, const void **data);
/* Holds the region of a requested output for `req` after checking that
 * offset + byte_size fits in it; *out is the region. */
hark_error *hark_kserve_shm_output(hark_shm *shm, hark_request *req, const char *name,
                                   const char *region, uint64_t offset, uint64_t byte_size,
                                   hark_shm_region **out);
/* Copies output `t` into its region (held), checking that it fits in
 * byte_size: INVALID_ARG when the region is too small or was truncated. */
hark_error *hark_kserve_shm_write(hark_shm_region *r, uint64_t offset, uint64_t byte_size,
                                  const hark_tensor *t);

#endif
