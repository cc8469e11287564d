/* A bump allocator for everything one request needs: decoded input,
 * planning scratch and the response. Freed in one place, all at once. */
#ifndef RESHARD_ARENA_H
#define RESHARD_ARENA_H

#include <stdbool.h>
#include <stddef.h>

typedef struct reshard_arena_chunk reshard_arena_chunk;

/* Where an arena's chunks come from, when not from malloc: a daemon keeps
 * freed chunks for the next request instead of returning them to the
 * system and page-faulting them in again. `take` returns a block of at
 * least `size` bytes and stores its real size in *capacity, or NULL;
 * `give` takes back a block `take` returned, with that capacity. Both are
 * called from whichever thread allocates from or destroys the arena, so a
 * source shared by threads does its own locking. */
typedef struct reshard_arena_source {
  void *(*take)(void *context, size_t size, size_t *capacity);
  void (*give)(void *context, void *block, size_t capacity);
  void *context;
} reshard_arena_source;

/* Embed in the owner; zero-initialise or call reshard_arena_init. */
typedef struct reshard_arena {
  reshard_arena_chunk *head;
  size_t chunk_size;  /* default size of a new chunk */
  size_t total_bytes; /* bytes obtained for chunks, for accounting */
  const reshard_arena_source *source; /* NULL: malloc and free */
} reshard_arena;

/* Prepares an empty arena whose chunks are at least `chunk_size` bytes
 * (0 selects 64 KiB). Allocates nothing until the first request. */
void reshard_arena_init(reshard_arena *arena, size_t chunk_size);

/* Like reshard_arena_init with chunks from `source` (not owned; it must
 * outlive the arena). */
void reshard_arena_init_from(reshard_arena *arena, size_t chunk_size,
                             const reshard_arena_source *source);

/* Returns `size` bytes aligned to `alignment` (a power of two, at most 64),
 * owned by the arena, or NULL when memory is exhausted or size overflows.
 * size 0 returns a valid unique pointer. */
void *reshard_arena_alloc(reshard_arena *arena, size_t size, size_t alignment);

/* Like reshard_arena_alloc for `count` elements of `size` bytes, zeroed,
 * with the multiplication checked. */
void *reshard_arena_calloc(reshard_arena *arena, size_t count, size_t size);

/* Copies the NUL-terminated `text` (or `length` bytes of it plus a NUL when
 * using the _n form) into the arena. */
char *reshard_arena_strdup(reshard_arena *arena, const char *text);
char *reshard_arena_strndup(reshard_arena *arena, const char *text,
                            size_t length);

/* The chunk of `arena` that holds `pointer`: *start and *size cover its
 * bytes, everything allocated from it and the room after. False when no
 * chunk holds `pointer`. Walks the chunks from the one small allocations
 * go to; the caller owns nothing new. */
bool reshard_arena_chunk_of(const reshard_arena *arena, const void *pointer,
                            const unsigned char **start, size_t *size);

/* Frees every chunk (to its source, if any); the arena may be reused after
 * reshard_arena_init. */
void reshard_arena_destroy(reshard_arena *arena);

/* Like reshard_arena_calloc without the zeroing, for arrays the caller
 * fills completely (the planner's copy arrays). */
void *reshard_arena_array(reshard_arena *arena, size_t count, size_t size);

/* A zeroed array of `count` elements of `type`. */
#define RESHARD_ARENA_NEW(arena, type, count)                                  \
  ((type *)reshard_arena_calloc((arena), (count), sizeof(type)))

/* An uninitialised array of `count` elements of `type`. */
#define RESHARD_ARENA_ARRAY(arena, type, count)                                \
  ((type *)reshard_arena_array((arena), (count), sizeof(type)))

#endif
