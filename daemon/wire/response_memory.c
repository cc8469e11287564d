#include "wire/response_memory.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

struct reshard_response_memory {
  atomic_size_t references;
  reshard_chunk_pool *pool;
  reshard_arena arena;
};

reshard_response_memory *
reshard_response_memory_create(reshard_chunk_pool *pool) {
  reshard_response_memory *memory = malloc(sizeof *memory);
  if (memory == NULL) {
    return NULL;
  }
  atomic_init(&memory->references, 1);
  memory->pool = pool;
  reshard_chunk_pool_retain(pool);
  reshard_arena_init_from(&memory->arena, 64 * 1024,
                          reshard_chunk_pool_source(pool));
  return memory;
}

reshard_arena *reshard_response_memory_arena(reshard_response_memory *memory) {
  return &memory->arena;
}

void reshard_response_memory_release(reshard_response_memory *memory) {
  if (memory == NULL || atomic_fetch_sub_explicit(&memory->references, 1,
                                                  memory_order_acq_rel) != 1) {
    return;
  }
  reshard_chunk_pool *pool = memory->pool;
  reshard_arena_destroy(&memory->arena);
  free(memory);
  reshard_chunk_pool_free(pool);
}

static void drop_slice(void *memory) {
  reshard_response_memory_release(memory);
}

/* A slice over `length` bytes at `bytes` that holds a reference to the
 * memory: gRPC allocates its reference count. */
static grpc_slice memory_slice(reshard_response_memory *memory,
                               const uint8_t *bytes, size_t length) {
  atomic_fetch_add_explicit(&memory->references, 1, memory_order_relaxed);
  return grpc_slice_new_with_user_data((void *)bytes, length, drop_slice,
                                       memory);
}

/* The chunks slices were made over, used last first: a response's
 * pieces lie in few chunks, a renamed batch's shared columns in an
 * earlier batch's. */
enum { CHUNK_SLICES = 8 };
typedef struct chunk_slice {
  const uint8_t *start;
  size_t size;
  grpc_slice slice;
} chunk_slice;

void reshard_response_memory_slices(reshard_response_memory *memory,
                                    const reshard_response_piece *pieces,
                                    size_t count, grpc_slice *slices) {
  /* One slice of its own per piece cost a malloc of gRPC's reference
   * count each (T2's explicit response has hundreds of pieces) and its
   * free on the thread that sent it; a view only counts a reference. */
  chunk_slice chunks[CHUNK_SLICES];
  size_t held = 0;
  for (size_t i = 0; i < count; i++) {
    const uint8_t *bytes = pieces[i].bytes;
    size_t length = pieces[i].length;
    if (length <= GRPC_SLICE_INLINED_SIZE) {
      slices[i] = grpc_slice_from_copied_buffer((const char *)bytes, length);
      continue;
    }
    uintptr_t at = (uintptr_t)bytes;
    size_t c = 0;
    while (c < held && !(at >= (uintptr_t)chunks[c].start &&
                         at - (uintptr_t)chunks[c].start < chunks[c].size)) {
      c++;
    }
    chunk_slice found;
    if (c < held) {
      found = chunks[c];
    } else {
      const unsigned char *start;
      size_t size;
      if (!reshard_arena_chunk_of(&memory->arena, bytes, &start, &size)) {
        /* Not in the arena: nothing to share a slice with. */
        slices[i] = memory_slice(memory, bytes, length);
        continue;
      }
      if (held == CHUNK_SLICES) {
        grpc_slice_unref(chunks[--held].slice);
      }
      c = held++;
      found = (chunk_slice){start, size, memory_slice(memory, start, size)};
    }
    /* Used last goes first: the frame's chunk and the batch a renamed
     * batch shares columns with stay while new batches' chunks pass. */
    if (c > 0) {
      memmove(&chunks[1], &chunks[0], c * sizeof chunks[0]);
    }
    chunks[0] = found;
    size_t offset = (size_t)(at - (uintptr_t)found.start);
    slices[i] = grpc_slice_sub(found.slice, offset, offset + length);
  }
  for (size_t c = 0; c < held; c++) {
    grpc_slice_unref(chunks[c].slice);
  }
}
