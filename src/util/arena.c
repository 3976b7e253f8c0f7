/*
 * arena.c — block arenas (see arena.h). Small allocations fill the head
 * block; a large one gets a block of its own behind the head, so the small
 * ones keep filling the roomier block in front.
 */
#include "util/arena.h"

#include <stdalign.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/alloc.h"

#define ARENA_BLOCK 4096
#define ARENA_ALIGN 16

typedef struct arena_block {
  struct arena_block *next;
  size_t used, cap;
  alignas(ARENA_ALIGN) unsigned char data[];
} arena_block;

struct hark_arena {
  arena_block *head;
};

hark_arena *hark_arena_new(void) { return hark_xcalloc(1, sizeof(hark_arena)); }

void hark_arena_free(void *p) {
  hark_arena *a = p;
  if (!a) return;
  for (arena_block *b = a->head, *next; b; b = next) {
    next = b->next;
    free(b);
  }
  free(a);
}

void *hark_arena_alloc(hark_arena *a, size_t n) {
  size_t need = (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  if (need < n) return NULL;
  arena_block *b = a->head;
  if (!b || b->cap - b->used < need) {
    size_t cap = need > ARENA_BLOCK / 2 ? need : ARENA_BLOCK;
    if (cap > SIZE_MAX - sizeof *b) return NULL;
    arena_block *nb = malloc(sizeof *nb + cap);
    if (!nb) return NULL;
    nb->used = 0;
    nb->cap = cap;
    if (b && cap != ARENA_BLOCK) { /* keep the roomier head in front */
      nb->next = b->next;
      b->next = nb;
    } else {
      nb->next = b;
      a->head = nb;
    }
    b = nb;
  }
  void *p = b->data + b->used;
  b->used += need;
  memset(p, 0, n);
  return p;
}

char *hark_arena_strndup(hark_arena *a, const char *s, size_t n) {
  if (n == SIZE_MAX) return NULL;
  char *d = hark_arena_alloc(a, n + 1);
  if (d) memcpy(d, s, n);
  return d;
}

void *hark_arena_grow(hark_arena *a, void *arr, size_t n, size_t *cap, size_t item_size) {
  if (n < *cap) return arr;
  if (n > SIZE_MAX / 2 / (item_size ? item_size : 1)) return NULL;
  size_t ncap = n ? n * 2 : 4;
  void *na = hark_arena_alloc(a, ncap * item_size);
  if (!na) return NULL;
  if (n) memcpy(na, arr, n * item_size);
  *cap = ncap;
  return na;
}
