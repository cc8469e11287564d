/* Memory a response is sent from as it lies.
 *
 * A PlanLoad response is mostly its batches' varint columns, which the
 * planner writes while batching (reshard/varint_columns.h). Copying them
 * into a send buffer cost S2's 3.9 MB response a memcpy of every byte on
 * the critical path. Instead the planner writes its columns into this
 * arena, and the response's slices point into it.
 *
 * The arena's chunks come from the daemon's chunk pool. It lives until its
 * creator released it and gRPC let go of every slice made over it, which
 * gRPC does on its own threads, maybe after the call is freed: the count
 * of references is atomic, and the memory keeps the pool alive. */
#ifndef RESHARD_RESPONSE_MEMORY_H
#define RESHARD_RESPONSE_MEMORY_H

#include <grpc/slice.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/chunk_pool.h"
#include "reshard/arena.h"

typedef struct reshard_response_memory reshard_response_memory;

/* One stretch of a response's bytes, in order. */
typedef struct reshard_response_piece {
  const uint8_t *bytes;
  size_t length;
} reshard_response_piece;

/* A new, empty memory over `pool`, with one reference for the caller.
 * NULL when out of memory. */
reshard_response_memory *
reshard_response_memory_create(reshard_chunk_pool *pool);

/* Its arena, to allocate from on the creator's thread until the slices are
 * made. */
reshard_arena *reshard_response_memory_arena(reshard_response_memory *memory);

/* Slices of the `count` pieces into `slices` (the caller's array, which
 * the caller unrefs slice by slice). Pieces that fit inside a slice are
 * copied there; the others lie in the arena and are views of one slice
 * over the arena chunk they lie in, which holds a reference to the memory
 * until gRPC drops the last view. */
void reshard_response_memory_slices(reshard_response_memory *memory,
                                    const reshard_response_piece *pieces,
                                    size_t count, grpc_slice *slices);

/* Drops the creator's reference; the memory goes once no slice holds it.
 * NULL is accepted. */
void reshard_response_memory_release(reshard_response_memory *memory);

#endif
