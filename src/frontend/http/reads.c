/*
 * reads.c — whether a socket was read between two moments, without a
 * system call. harkd defines recv() (exported: CMakeLists.txt's
 * harkd.map), so the libraries it loads call this one in place of libc's
 * (the executable's symbols come first in the dynamic linker's lookup);
 * it reads through recvfrom() and counts, per descriptor, the reads that
 * took bytes. libwebsockets reads plain connections with recv() and
 * nothing else, so the count tells exchange.c's pipelining guard whether
 * lws read a connection's socket since its last exchange: lws 4.1 has no
 * way to say whether it holds input it read ahead, and asking the kernel
 * instead (TCP_INFO and SIOCINQ) cost four system calls a request, a
 * third of a loop's time (bench/RESULTS.md, 2026-11-29).
 *
 * Where the count cannot be trusted, hark_http_reads says so and the
 * guard asks the kernel: when this recv() is not the one libraries reach
 * (a program without the export, a preloaded library with its own), and
 * for descriptors past the table. TLS connections are read by OpenSSL
 * with read(), which is not counted; the guard never asks for them.
 */
#undef _FORTIFY_SOURCE /* its inline recv() would clash with ours */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "frontend/http/http_impl.h"

/* harkd raises its descriptor limit to this (FD_SOFT_CAP, harkd.c). */
#define READS_MAX 65536

/* Reads that took bytes, per descriptor. A descriptor is read by one
 * thread at a time (its loop's), so a relaxed load and store count it;
 * one reused by another loop's connection only needs to change. */
static _Atomic uint32_t reads[READS_MAX];

ssize_t recv(int fd, void *buf, size_t len, int flags) {
  ssize_t n = recvfrom(fd, buf, len, flags, NULL, NULL);
  if (n > 0 && !(flags & MSG_PEEK) && fd >= 0 && fd < READS_MAX)
    atomic_store_explicit(&reads[fd], atomic_load_explicit(&reads[fd], memory_order_relaxed) + 1,
                          memory_order_relaxed);
  return n;
}

static bool live;
static pthread_once_t live_once = PTHREAD_ONCE_INIT;

/* Whether the recv() every library binds to is this one. */
static void check_live(void) { live = dlsym(RTLD_DEFAULT, "recv") == (void *)recv; }

bool hark_http_reads_live(void) {
  pthread_once(&live_once, check_live);
  return live;
}

bool hark_http_reads(int fd, uint64_t *out) {
  if (!hark_http_reads_live() || fd < 0 || fd >= READS_MAX) return false;
  *out = atomic_load_explicit(&reads[fd], memory_order_relaxed);
  return true;
}
