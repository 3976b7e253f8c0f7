/*
 * alloc.h — hark's out-of-memory policy, in one place.
 *
 * Two kinds of allocation, two answers (as Redis's zmalloc and nginx's
 * pools draw the same line):
 *   - small internal allocations (a request's bookkeeping, a list node, a
 *     copied name, a reply header) never fail: hark_xmalloc and friends
 *     abort with a message when the system is out of memory. A server that
 *     cannot find a few hundred bytes cannot answer anyone anyway, and the
 *     error paths such allocations would need are paths nobody tests;
 *   - client-sized buffers (a request body, a WebSocket message, a tensor,
 *     a response built from a model's outputs) use plain malloc and turn a
 *     failure into an error that reaches that client (HTTP 4xx/5xx, a gRPC
 *     status, a close code), because their size is the client's choice.
 *     A model config's sizes (max_batch_size, instance counts) count as
 *     the client's: the repository API loads configs a client sends.
 * Size every client-sized buffer against its bound before allocating it.
 */
#ifndef HARK_UTIL_ALLOC_H
#define HARK_UTIL_ALLOC_H

#include <stddef.h>

/* Never NULL: abort() with a message on exhaustion. hark_xcalloc zeroes and
 * checks n * size for overflow; a size of 0 still returns a unique pointer. */
void *hark_xmalloc(size_t size);
void *hark_xcalloc(size_t n, size_t size);
void *hark_xrealloc(void *ptr, size_t size);
char *hark_xstrdup(const char *s);
char *hark_xstrndup(const char *s, size_t n);
/* The abort, for allocations made elsewhere (a library's) that follow the
 * policy: names what failed, then aborts. */
void hark_oom(const char *what, size_t size) __attribute__((noreturn));

#endif
