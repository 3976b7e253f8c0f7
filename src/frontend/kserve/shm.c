/*
 * shm.c — the system shared-memory registry (see shm.h): a mutex-guarded
 * list of regions, each an mmap of a window of a POSIX shm object with its
 * fd kept open, and a reference count so that a request holding a region
 * keeps it mapped after it is unregistered.
 *
 * mmap offsets must be page aligned: a region is mapped from its offset
 * rounded down to a page, and its bytes start that far into the mapping.
 * Registration is a few syscalls (shm_open, fstat, mmap) done under the
 * lock on the caller's thread; nothing here blocks on I/O.
 *
 * Below the registry, the binding of tensors to regions that the KServe
 * codecs (JSON and gRPC) and the response writer share: an input copied
 * out, an output's window held, an output copied in.
 *
 * The client owns the object and may truncate it at any time; a load or
 * store through the mapping past its new end is SIGBUS, which kills the
 * server. An fstat check before the access only narrows that to a race.
 * So tensors never touch the mapping: an input is copied out with
 * pread(2) on the region's fd and an output copied in with pwrite(2). The
 * kernel does the copy, and a truncated object gives a short read (a clear
 * error to the client) instead of a fault; a write past a new end grows
 * the object rather than faulting. No signal handler, no per-thread jump
 * buffer (which every thread touching the bytes, backends included, would
 * need): the backend reads the private copy. The copy is charged to the
 * in-flight budget while the request holds it.
 *
 * The registry holds at most `max_regions` regions (each an fd and a
 * mapping): past it a registration is refused, so registrations cannot use
 * every descriptor the server has for connections.
 */
#include "frontend/kserve/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "frontend/http/http.h"
#include "util/alloc.h"

struct hark_shm_region {
  atomic_uint refs; /* the registry's (while registered) + one per user */
  char *name, *key;
  uint64_t offset, byte_size;
  int fd;
  void *map;
  size_t map_len;
  unsigned char *base; /* the region's first byte, inside map */
  hark_shm_region *next;
};

struct hark_shm {
  pthread_mutex_t mu;
  hark_shm_region *head; /* registered regions; guarded by mu */
  size_t n, max_regions; /* how many are registered, and at most */
};

hark_shm *hark_shm_new(size_t max_regions) {
  hark_shm *shm = hark_xcalloc(1, sizeof *shm);
  shm->max_regions = max_regions ? max_regions : HARK_SHM_DEFAULT_MAX_REGIONS;
  pthread_mutex_init(&shm->mu, NULL);
  return shm;
}

void hark_shm_free(hark_shm *shm) {
  if (!shm) return;
  hark_shm_unregister(shm, NULL);
  pthread_mutex_destroy(&shm->mu);
  free(shm);
}

static void region_destroy(hark_shm_region *r) {
  if (r->map) munmap(r->map, r->map_len);
  if (r->fd >= 0) close(r->fd);
  free(r->name);
  free(r->key);
  free(r);
}

void hark_shm_release(void *region) {
  hark_shm_region *r = region;
  if (r && atomic_fetch_sub(&r->refs, 1) == 1) region_destroy(r);
}

/* Under the lock. */
static hark_shm_region *find(hark_shm *shm, const char *name) {
  for (hark_shm_region *r = shm->head; r; r = r->next)
    if (strcmp(r->name, name) == 0) return r;
  return NULL;
}

/* Opens and maps the window; on error nothing is left open. */
static hark_error *region_map(hark_shm_region *r) {
  r->fd = shm_open(r->key, O_RDWR, 0);
  if (r->fd < 0)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "Unable to open shared memory region '%s': shared memory key '%s': %s",
                          r->name, r->key, strerror(errno));
  struct stat st;
  if (fstat(r->fd, &st) != 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "shared memory region '%s': fstat of '%s': %s",
                          r->name, r->key, strerror(errno));
  uint64_t end = r->offset + r->byte_size; /* no overflow: checked by the caller */
  if ((uint64_t)st.st_size < end)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "shared memory region '%s': offset %llu + byte_size %llu is beyond the "
                          "end of shared memory object '%s' (%lld bytes)",
                          r->name, (unsigned long long)r->offset, (unsigned long long)r->byte_size,
                          r->key, (long long)st.st_size);
  uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
  uint64_t start = r->offset - r->offset % page;
  r->map_len = (size_t)(end - start);
  void *m = mmap(NULL, r->map_len, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, (off_t)start);
  if (m == MAP_FAILED)
    return hark_error_new(HARK_ERR_INVALID_ARG, "shared memory region '%s': mmap of '%s': %s",
                          r->name, r->key, strerror(errno));
  r->map = m;
  r->base = (unsigned char *)m + (r->offset - start);
  return NULL;
}

hark_error *hark_shm_register(hark_shm *shm, const char *name, const char *key, uint64_t offset,
                              uint64_t byte_size) {
  if (!name || !*name)
    return hark_error_new(HARK_ERR_INVALID_ARG, "a shared memory region needs a name");
  if (!key || !*key)
    return hark_error_new(HARK_ERR_INVALID_ARG, "shared memory region '%s' needs a 'key'", name);
  if (!byte_size)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "shared memory region '%s': byte_size must be more than 0", name);
  if (offset > (uint64_t)INT64_MAX || byte_size > (uint64_t)INT64_MAX - offset ||
      byte_size > SIZE_MAX)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "shared memory region '%s': offset %llu + byte_size %llu is too large",
                          name, (unsigned long long)offset, (unsigned long long)byte_size);
  hark_shm_region *r = hark_xcalloc(1, sizeof *r);
  r->name = hark_xstrdup(name);
  r->key = hark_xstrdup(key);
  r->offset = offset;
  r->byte_size = byte_size;
  r->fd = -1;
  atomic_init(&r->refs, 1);
  pthread_mutex_lock(&shm->mu);
  hark_error *err = NULL;
  if (find(shm, name))
    err = hark_error_new(HARK_ERR_ALREADY_EXISTS, "shared memory region '%s' already in manager",
                         name);
  else if (shm->n >= shm->max_regions)
    err = hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED,
                         "shared memory region '%s' not registered: %zu regions are registered, "
                         "at most %zu (--shared-memory-max-regions); unregister some first",
                         name, shm->n, shm->max_regions);
  if (!err) err = region_map(r);
  if (!err) {
    r->next = shm->head;
    shm->head = r;
    shm->n++;
  }
  pthread_mutex_unlock(&shm->mu);
  if (err) region_destroy(r);
  return err;
}

void hark_shm_unregister(hark_shm *shm, const char *name) {
  hark_shm_region *gone = NULL;
  pthread_mutex_lock(&shm->mu);
  for (hark_shm_region **pp = &shm->head; *pp;) {
    hark_shm_region *r = *pp;
    if (name && strcmp(r->name, name) != 0) {
      pp = &r->next;
      continue;
    }
    *pp = r->next;
    r->next = gone;
    gone = r;
    shm->n--;
  }
  pthread_mutex_unlock(&shm->mu);
  while (gone) { /* outside the lock: munmap may take a while */
    hark_shm_region *next = gone->next;
    hark_shm_release(gone);
    gone = next;
  }
}

static hark_error *unknown(const char *name) {
  return hark_error_new(HARK_ERR_INVALID_ARG, "Unable to find system shared memory region: '%s'",
                        name);
}

static int by_name(const void *a, const void *b) {
  return strcmp(((const hark_shm_status *)a)->name, ((const hark_shm_status *)b)->name);
}

hark_error *hark_shm_status_get(hark_shm *shm, const char *name, hark_shm_status **out, size_t *n) {
  *out = NULL;
  *n = 0;
  pthread_mutex_lock(&shm->mu);
  size_t count = 0;
  for (hark_shm_region *r = shm->head; r; r = r->next)
    if (!name || strcmp(r->name, name) == 0) count++;
  if (name && !count) {
    pthread_mutex_unlock(&shm->mu);
    return unknown(name);
  }
  hark_shm_status *st = hark_xcalloc(count ? count : 1, sizeof *st);
  size_t i = 0;
  for (hark_shm_region *r = shm->head; r; r = r->next) {
    if (name && strcmp(r->name, name) != 0) continue;
    st[i].name = hark_xstrdup(r->name);
    st[i].key = hark_xstrdup(r->key);
    st[i].offset = r->offset;
    st[i].byte_size = r->byte_size;
    i++;
  }
  pthread_mutex_unlock(&shm->mu);
  qsort(st, count, sizeof *st, by_name);
  *out = st;
  *n = count;
  return NULL;
}

void hark_shm_status_free(hark_shm_status *st, size_t n) {
  for (size_t i = 0; st && i < n; i++) {
    free(st[i].name);
    free(st[i].key);
  }
  free(st);
}

hark_error *hark_shm_acquire(hark_shm *shm, const char *name, hark_shm_region **out) {
  *out = NULL;
  pthread_mutex_lock(&shm->mu);
  hark_shm_region *r = find(shm, name);
  if (r) atomic_fetch_add(&r->refs, 1);
  pthread_mutex_unlock(&shm->mu);
  if (!r) return unknown(name);
  *out = r;
  return NULL;
}

const char *hark_shm_region_name(const hark_shm_region *r) { return r->name; }
uint64_t hark_shm_region_size(const hark_shm_region *r) { return r->byte_size; }

hark_error *hark_shm_span(hark_shm_region *r, uint64_t offset, uint64_t size, const char *what,
                          void **out) {
  *out = NULL;
  if (offset > r->byte_size || size > r->byte_size - offset)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: shared_memory_offset %llu + shared_memory_byte_size %llu is beyond "
                          "shared memory region '%s' (%llu bytes)",
                          what, (unsigned long long)offset, (unsigned long long)size, r->name,
                          (unsigned long long)r->byte_size);
  /* The object may have been truncated (or unlinked and truncated) since it
   * was mapped; touching pages past its end would be SIGBUS. This check
   * narrows that to a race, so the tensors' bytes never go through the
   * mapping (hark_shm_read, hark_shm_write). */
  struct stat st;
  uint64_t need = r->offset + offset + size;
  if (fstat(r->fd, &st) != 0)
    return hark_error_new(HARK_ERR_INVALID_ARG, "%s: shared memory region '%s': fstat: %s", what,
                          r->name, strerror(errno));
  if ((uint64_t)st.st_size < need)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "%s: shared memory region '%s' is no longer valid: its object '%s' was "
                          "truncated to %lld bytes, less than the %llu it needs",
                          what, r->name, r->key, (long long)st.st_size, (unsigned long long)need);
  *out = r->base + offset;
  return NULL;
}

static hark_error *truncated(hark_shm_region *r, const char *what, uint64_t need) {
  return hark_error_new(HARK_ERR_INVALID_ARG,
                        "%s: shared memory region '%s' is no longer valid: its object '%s' was "
                        "truncated below the %llu bytes it needs",
                        what, r->name, r->key, (unsigned long long)need);
}

hark_error *hark_shm_read(hark_shm_region *r, uint64_t offset, uint64_t size, const char *what,
                          void *dst) {
  void *p;
  hark_error *err = hark_shm_span(r, offset, size, what, &p); /* the bounds, and a clear error */
  if (err) return err;
  uint64_t at = r->offset + offset, done = 0;
  while (done < size) {
    size_t want = size - done > (1u << 30) ? (1u << 30) : (size_t)(size - done);
    ssize_t n = pread(r->fd, (char *)dst + done, want, (off_t)(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: shared memory region '%s': read: %s", what,
                            r->name, strerror(errno));
    if (n == 0) return truncated(r, what, at + size); /* it shrank under us */
    done += (uint64_t)n;
  }
  return NULL;
}

hark_error *hark_shm_write(hark_shm_region *r, uint64_t offset, const void *src, uint64_t size,
                           const char *what) {
  void *p;
  hark_error *err = hark_shm_span(r, offset, size, what, &p);
  if (err) return err;
  uint64_t at = r->offset + offset, done = 0;
  while (done < size) {
    size_t want = size - done > (1u << 30) ? (1u << 30) : (size_t)(size - done);
    ssize_t n = pwrite(r->fd, (const char *)src + done, want, (off_t)(at + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return hark_error_new(HARK_ERR_INVALID_ARG, "%s: shared memory region '%s': write: %s", what,
                            r->name, n < 0 ? strerror(errno) : "no progress");
    done += (uint64_t)n;
  }
  return NULL;
}

/* An input's private copy: what it took from the in-flight budget in its
 * first bytes, the data 64-byte aligned after them. */
#define COPY_HEADER 64u

static void copy_free(void *mem) {
  if (!mem) return;
  hark_inflight_give(*(size_t *)mem);
  free(mem);
}

/* ---- binding tensors to regions (shm.h) ---------------------------------------- */

static hark_error *shm_off(const char *what, const char *name) {
  return hark_error_new(HARK_ERR_UNSUPPORTED,
                        "%s '%s': system shared memory is turned off on this server "
                        "(start harkd with --allow-shared-memory=true)",
                        what, name);
}

hark_error *hark_kserve_shm_input(hark_shm *shm, hark_request *req, const char *name,
                                  hark_datatype dt, int64_t count, const char *region,
                                  uint64_t offset, uint64_t byte_size, const void **data) {
  *data = NULL;
  if (!shm) return shm_off("input", name);
  size_t esize = hark_datatype_size(dt);
  if (dt != HARK_TYPE_BYTES &&
      (count < 0 || (uint64_t)count > SIZE_MAX / esize || (uint64_t)count * esize != byte_size))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "input '%s': shared_memory_byte_size %llu does not match %lld %s "
                          "elements (%llu bytes)",
                          name, (unsigned long long)byte_size, (long long)count,
                          hark_datatype_name(dt), (unsigned long long)count * esize);
  hark_shm_region *r;
  hark_error *err = hark_shm_acquire(shm, region, &r);
  if (err) return err;
  hark_request_attach(req, r, hark_shm_release);
  char what[200];
  snprintf(what, sizeof what, "input '%.150s'", name);
  /* The backend reads a private copy, never the client's mapping (see
   * the top of this file). */
  if (byte_size > SIZE_MAX - COPY_HEADER)
    return hark_error_new(HARK_ERR_INVALID_ARG, "input '%s': %llu bytes is too large", name,
                          (unsigned long long)byte_size);
  size_t len = (size_t)byte_size;
  if (!hark_inflight_take(len))
    return hark_error_new(HARK_ERR_UNAVAILABLE,
                          "input '%s' of %zu bytes from shared memory does not fit in the "
                          "server's in-flight memory budget now (%llu of %llu bytes held; "
                          "--max-inflight-bytes); try again later",
                          name, len, (unsigned long long)hark_inflight_bytes(),
                          (unsigned long long)hark_inflight_max());
  void *mem = NULL;
  if (posix_memalign(&mem, 64, COPY_HEADER + len + 1) != 0) { /* client-sized */
    hark_inflight_give(len);
    return hark_error_new(HARK_ERR_RESOURCE_EXHAUSTED, "out of memory for input '%s'", name);
  }
  *(size_t *)mem = len;
  hark_request_attach(req, mem, copy_free);
  void *p = (char *)mem + COPY_HEADER;
  if ((err = hark_shm_read(r, offset, byte_size, what, p))) return err;
  /* BYTES in shared memory are laid out as in the binary extension:
   * each element a 4-byte little-endian length and its bytes. */
  if (dt == HARK_TYPE_BYTES && !hark_bytes_check(p, len, count))
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "input '%s': shared memory region '%s' does not hold %lld "
                          "length-prefixed BYTES elements filling shared_memory_byte_size %llu",
                          name, region, (long long)count, (unsigned long long)byte_size);
  *data = p;
  return NULL;
}

hark_error *hark_kserve_shm_output(hark_shm *shm, hark_request *req, const char *name,
                                   const char *region, uint64_t offset, uint64_t byte_size,
                                   hark_shm_region **out) {
  *out = NULL;
  if (!shm) return shm_off("output", name);
  hark_shm_region *r;
  hark_error *err = hark_shm_acquire(shm, region, &r);
  if (err) return err;
  hark_request_attach(req, r, hark_shm_release);
  char what[200];
  snprintf(what, sizeof what, "output '%.150s'", name);
  void *p;
  if ((err = hark_shm_span(r, offset, byte_size, what, &p))) return err;
  *out = r;
  return NULL;
}

hark_error *hark_kserve_shm_write(hark_shm_region *r, uint64_t offset, uint64_t byte_size,
                                  const hark_tensor *t) {
  if (t->byte_size > byte_size)
    return hark_error_new(HARK_ERR_INVALID_ARG,
                          "output '%s' of %zu bytes does not fit in its shared_memory_byte_size "
                          "%llu (shared memory region '%s')",
                          t->name, t->byte_size, (unsigned long long)byte_size,
                          hark_shm_region_name(r));
  char what[200];
  snprintf(what, sizeof what, "output '%.150s'", t->name);
  return hark_shm_write(r, offset, t->data, t->byte_size, what);
}
