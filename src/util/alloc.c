/*
 * alloc.c — allocations that never fail (see alloc.h for the policy).
 */
#include "util/alloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void hark_oom(const char *what, size_t size) {
  /* No allocation here: stdio may need some, so write(2) a fixed line. */
  char line[160];
  int n =
      snprintf(line, sizeof line, "hark: out of memory (%s of %zu bytes); aborting\n", what, size);
  if (n > 0) {
    ssize_t w = write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    (void)w;
  }
  abort();
}

void *hark_xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (!p) hark_oom("malloc", size);
  return p;
}

void *hark_xcalloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) hark_oom("calloc (overflow)", SIZE_MAX);
  void *p = calloc(n ? n : 1, size ? size : 1);
  if (!p) hark_oom("calloc", n * size);
  return p;
}

void *hark_xrealloc(void *ptr, size_t size) {
  void *p = realloc(ptr, size ? size : 1);
  if (!p) hark_oom("realloc", size);
  return p;
}

char *hark_xstrdup(const char *s) { return hark_xstrndup(s, strlen(s)); }

char *hark_xstrndup(const char *s, size_t n) {
  size_t len = strnlen(s, n);
  char *d = hark_xmalloc(len + 1);
  memcpy(d, s, len);
  d[len] = '\0';
  return d;
}
