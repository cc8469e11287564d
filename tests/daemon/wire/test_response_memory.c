/* Tests daemon/wire/response_memory.c: a response's pieces sent where
 * they lie, as views of one slice per arena chunk, and the memory kept
 * until gRPC drops the last of them. */
#include <criterion/criterion.h>
#include <grpc/slice.h>
#include <string.h>

#include "memory/chunk_pool.h"
#include "wire/response_memory.h"

Test(response_memory, pieces_are_views_of_one_slice_per_chunk) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(16u << 20);
  cr_assert_not_null(pool);
  reshard_response_memory *memory = reshard_response_memory_create(pool);
  cr_assert_not_null(memory);
  reshard_arena *arena = reshard_response_memory_arena(memory);
  /* Two pieces in the first chunk, one large enough for a chunk of its
   * own, one short enough to be copied into its slice, and one that is
   * not in the arena at all. */
  uint8_t *first = reshard_arena_alloc(arena, 100, 1);
  uint8_t *large = reshard_arena_alloc(arena, 300000, 1);
  uint8_t *last = reshard_arena_alloc(arena, 200, 1);
  static uint8_t elsewhere[64];
  cr_assert(first && large && last);
  memset(first, 1, 100);
  memset(large, 2, 300000);
  memset(last, 3, 200);
  memset(elsewhere, 4, sizeof elsewhere);
  const reshard_response_piece pieces[] = {
      {first, 100},     {large, 300000}, {first + 90, 8},
      {last + 50, 150}, {elsewhere, 64}, {first, 100}, /* said again */
  };
  enum { COUNT = sizeof pieces / sizeof pieces[0] };
  grpc_slice slices[COUNT];
  reshard_response_memory_slices(memory, pieces, COUNT, slices);
  for (size_t i = 0; i < COUNT; i++) {
    cr_assert_eq(GRPC_SLICE_LENGTH(slices[i]), pieces[i].length, "piece %zu",
                 i);
    cr_assert_eq(memcmp(GRPC_SLICE_START_PTR(slices[i]), pieces[i].bytes,
                        pieces[i].length),
                 0, "piece %zu", i);
    bool copied = pieces[i].length <= GRPC_SLICE_INLINED_SIZE;
    cr_assert_eq(GRPC_SLICE_START_PTR(slices[i]) == pieces[i].bytes, !copied,
                 "piece %zu is %s", i, copied ? "not copied" : "copied");
  }
  /* One reference count per chunk: the first chunk's pieces share one,
   * the large one's chunk and the piece from elsewhere have their own. */
  cr_assert_eq(slices[0].refcount, slices[3].refcount);
  cr_assert_eq(slices[0].refcount, slices[5].refcount);
  cr_assert_neq(slices[0].refcount, slices[1].refcount);
  cr_assert_neq(slices[4].refcount, slices[0].refcount);
  cr_assert_neq(slices[4].refcount, slices[1].refcount);

  /* The creator lets go: the slices still hold the memory. */
  reshard_chunk_pool_stats before, after;
  reshard_chunk_pool_get_stats(pool, &before);
  reshard_response_memory_release(memory);
  reshard_chunk_pool_get_stats(pool, &after);
  cr_assert_eq(after.kept_blocks, before.kept_blocks);
  cr_assert_eq(GRPC_SLICE_START_PTR(slices[1])[299999], 2);
  for (size_t i = 0; i < COUNT; i++) {
    grpc_slice_unref(slices[i]);
  }
  /* The last slice gone, the arena's two chunks go back to the pool. */
  reshard_chunk_pool_get_stats(pool, &after);
  cr_assert_eq(after.kept_blocks, before.kept_blocks + 2);
  reshard_chunk_pool_free(pool);
}

/* More chunks than the slices kept at once: every piece still lies where
 * it was written, the chunks used last keep their slices, and every chunk
 * goes back once its views are gone. */
Test(response_memory, more_chunks_than_kept_slices) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(16u << 20);
  reshard_response_memory *memory = reshard_response_memory_create(pool);
  cr_assert(pool && memory);
  reshard_arena *arena = reshard_response_memory_arena(memory);
  enum { CHUNKS = 12, COUNT = 2 * CHUNKS };
  reshard_response_piece pieces[COUNT];
  for (size_t i = 0; i < CHUNKS; i++) {
    uint8_t *bytes = reshard_arena_alloc(arena, 300000, 1); /* a chunk each */
    cr_assert_not_null(bytes);
    memset(bytes, (int)i, 300000);
    pieces[i] = (reshard_response_piece){bytes, 300000};
  }
  /* Then each again, newest first: each lookup misses the slices kept. */
  for (size_t i = 0; i < CHUNKS; i++) {
    pieces[CHUNKS + i] = pieces[CHUNKS - 1 - i];
  }
  grpc_slice slices[COUNT];
  reshard_response_memory_slices(memory, pieces, COUNT, slices);
  reshard_chunk_pool_stats before, after;
  reshard_chunk_pool_get_stats(pool, &before);
  reshard_response_memory_release(memory);
  for (size_t i = 0; i < COUNT; i++) {
    cr_assert_eq(GRPC_SLICE_START_PTR(slices[i]), pieces[i].bytes);
    cr_assert_eq(GRPC_SLICE_LENGTH(slices[i]), 300000);
    size_t chunk = i < CHUNKS ? i : COUNT - 1 - i;
    cr_assert_eq(GRPC_SLICE_START_PTR(slices[i])[299999], (uint8_t)chunk);
  }
  /* The eight chunks used last are looked up again, not sliced anew:
   * the second pass shares the reference counts of the first for the
   * eight newest chunks and makes its own for the older four. */
  enum { KEPT = 8 };
  for (size_t i = 0; i < CHUNKS; i++) {
    cr_assert_eq(slices[CHUNKS + i].refcount == slices[CHUNKS - 1 - i].refcount,
                 i < KEPT, "chunk %zu", CHUNKS - 1 - i);
  }
  for (size_t i = 0; i < COUNT; i++) {
    grpc_slice_unref(slices[i]);
  }
  reshard_chunk_pool_get_stats(pool, &after);
  cr_assert_eq(after.kept_blocks, before.kept_blocks + CHUNKS);
  reshard_chunk_pool_free(pool);
}
