#include "wire/response_memory.h"

#include <stdatomic.h>
#include <stdlib.h>

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

grpc_slice reshard_response_memory_slice(reshard_response_memory *memory,
                                         const uint8_t *bytes, size_t length) {
  atomic_fetch_add_explicit(&memory->references, 1, memory_order_relaxed);
  return grpc_slice_new_with_user_data((void *)bytes, length, drop_slice,
                                       memory);
}
