/*
 * arena.h — memory that lives exactly as long as one object (a parsed
 * request, a reply being built), freed all at once, as nginx's pools and
 * ggml's contexts do. 16-byte aligned, zeroed blocks; no individual frees.
 * Allocation returns NULL when out of memory: arenas hold client-sized
 * data (alloc.h), so the caller turns that into the client's error.
 */
#ifndef HARK_UTIL_ARENA_H
#define HARK_UTIL_ARENA_H

#include <stddef.h>

typedef struct hark_arena hark_arena;

/* Never NULL (the arena itself is a small internal allocation). */
hark_arena *hark_arena_new(void);
/* Frees every block and the arena; NULL is fine. A void * parameter, so
 * it can be handed to hark_request_attach as a free function. */
void hark_arena_free(void *arena);
/* n zeroed bytes, 16-byte aligned; NULL when out of memory or n overflows. */
void *hark_arena_alloc(hark_arena *a, size_t n);
/* A NUL-terminated copy of s[0..n); NULL when out of memory. */
char *hark_arena_strndup(hark_arena *a, const char *s, size_t n);
/* Grows an array held in the arena from n used items to room for n + 1,
 * doubling *cap (the old copy stays in the arena until it is freed).
 * Returns the array to use, or NULL when out of memory or n is too big. */
void *hark_arena_grow(hark_arena *a, void *arr, size_t n, size_t *cap, size_t item_size);

#endif
