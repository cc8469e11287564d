#include "reshard/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct reshard_arena_chunk {
  reshard_arena_chunk *next;
  size_t capacity;
  size_t used;
  size_t block_size; /* header included, as the source handed it out */
  _Alignas(64) unsigned char data[];
};

enum { RESHARD_ARENA_DEFAULT_CHUNK = 64 * 1024 };

void reshard_arena_init(reshard_arena *arena, size_t chunk_size) {
  reshard_arena_init_from(arena, chunk_size, NULL);
}

void reshard_arena_init_from(reshard_arena *arena, size_t chunk_size,
                             const reshard_arena_source *source) {
  arena->head = NULL;
  arena->chunk_size = chunk_size ? chunk_size : RESHARD_ARENA_DEFAULT_CHUNK;
  arena->total_bytes = 0;
  arena->source = source;
}

static reshard_arena_chunk *chunk_new(const reshard_arena *arena,
                                      size_t block_size) {
  const reshard_arena_source *source = arena->source;
  size_t got = block_size;
  reshard_arena_chunk *chunk =
      source != NULL ? source->take(source->context, block_size, &got)
                     : malloc(block_size);
  if (chunk != NULL) {
    chunk->block_size = got;
    /* A source may hand out more than asked for: use all of it. */
    chunk->capacity = got - sizeof(reshard_arena_chunk);
    chunk->used = 0;
  }
  return chunk;
}

static void chunk_free(const reshard_arena *arena, reshard_arena_chunk *chunk) {
  const reshard_arena_source *source = arena->source;
  if (source != NULL) {
    source->give(source->context, chunk, chunk->block_size);
  } else {
    free(chunk);
  }
}

static reshard_arena_chunk *arena_grow(reshard_arena *arena, size_t need) {
  if (arena->chunk_size == 0) {
    arena->chunk_size = RESHARD_ARENA_DEFAULT_CHUNK;
  }
  size_t capacity = arena->chunk_size;
  /* Large requests get a chunk of their own so small ones keep filling
   * the current chunk. */
  if (need > capacity / 4) {
    capacity = need;
  }
  if (capacity > SIZE_MAX - sizeof(reshard_arena_chunk)) {
    return NULL;
  }
  reshard_arena_chunk *chunk =
      chunk_new(arena, sizeof(reshard_arena_chunk) + capacity);
  if (chunk == NULL) {
    return NULL;
  }
  arena->total_bytes += chunk->block_size;
  if (need == capacity && arena->head != NULL) {
    /* Keep the partly used chunk at the head for later small requests. */
    chunk->next = arena->head->next;
    arena->head->next = chunk;
  } else {
    chunk->next = arena->head;
    arena->head = chunk;
  }
  return chunk;
}

/* The offset of the next `alignment`-aligned address in the chunk: malloc
 * and the sources align blocks to 16 bytes only, not to the 64 the
 * header's data member asks for. */
static size_t aligned_start(const reshard_arena_chunk *chunk,
                            size_t alignment) {
  uintptr_t at = (uintptr_t)(chunk->data + chunk->used);
  uintptr_t aligned = (at + alignment - 1) & ~(uintptr_t)(alignment - 1);
  return chunk->used + (size_t)(aligned - at);
}

void *reshard_arena_alloc(reshard_arena *arena, size_t size, size_t alignment) {
  if (alignment == 0) {
    alignment = 1;
  }
  size_t need = size ? size : 1;
  reshard_arena_chunk *chunk = arena->head;
  if (chunk != NULL) {
    size_t start = aligned_start(chunk, alignment);
    if (start <= chunk->capacity && chunk->capacity - start >= need) {
      chunk->used = start + need;
      return chunk->data + start;
    }
  }
  if (need > SIZE_MAX - alignment) {
    return NULL;
  }
  chunk = arena_grow(arena, need + alignment);
  if (chunk == NULL) {
    return NULL;
  }
  size_t start = aligned_start(chunk, alignment);
  chunk->used = start + need;
  return chunk->data + start;
}

void *reshard_arena_array(reshard_arena *arena, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    return NULL;
  }
  return reshard_arena_alloc(arena, total, 16);
}

void *reshard_arena_calloc(reshard_arena *arena, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    return NULL;
  }
  void *memory = reshard_arena_alloc(arena, total, 16);
  if (memory != NULL) {
    memset(memory, 0, total);
  }
  return memory;
}

char *reshard_arena_strndup(reshard_arena *arena, const char *text,
                            size_t length) {
  if (length == SIZE_MAX) {
    return NULL;
  }
  char *copy = reshard_arena_alloc(arena, length + 1, 1);
  if (copy != NULL) {
    memcpy(copy, text, length);
    copy[length] = '\0';
  }
  return copy;
}

char *reshard_arena_strdup(reshard_arena *arena, const char *text) {
  return reshard_arena_strndup(arena, text, strlen(text));
}

bool reshard_arena_chunk_of(const reshard_arena *arena, const void *pointer,
                            const unsigned char **start, size_t *size) {
  /* Compared as integers: pointers into different objects may not be. */
  uintptr_t at = (uintptr_t)pointer;
  for (const reshard_arena_chunk *chunk = arena->head; chunk != NULL;
       chunk = chunk->next) {
    uintptr_t data = (uintptr_t)chunk->data;
    if (at >= data && at - data < chunk->capacity) {
      *start = chunk->data;
      *size = chunk->capacity;
      return true;
    }
  }
  return false;
}

void reshard_arena_destroy(reshard_arena *arena) {
  reshard_arena_chunk *chunk = arena->head;
  while (chunk != NULL) {
    reshard_arena_chunk *next = chunk->next;
    chunk_free(arena, chunk);
    chunk = next;
  }
  arena->head = NULL;
  arena->total_bytes = 0;
}
