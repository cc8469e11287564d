/* Tests daemon/chunk_pool.c: blocks are reused by size class, the pool
 * keeps no more than its bound, and arenas run on it. */
#include <criterion/criterion.h>
#include <string.h>

#include "memory/chunk_pool.h"

Test(chunk_pool, reuses_a_given_back_block_of_the_same_class) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(1 << 20);
  size_t capacity = 0;
  void *block = reshard_chunk_pool_take(pool, 20000, &capacity);
  cr_assert_not_null(block);
  cr_assert_eq(capacity, 20480, "20000 bytes round up to 1.25 x 16 KiB");
  memset(block, 7, capacity);
  reshard_chunk_pool_give(pool, block, capacity);
  size_t again = 0;
  void *reused = reshard_chunk_pool_take(pool, 16385, &again);
  cr_assert_eq(reused, block);
  cr_assert_eq(again, 20480);
  size_t other = 0;
  void *larger = reshard_chunk_pool_take(pool, 20481, &other);
  cr_assert_neq(larger, block);
  cr_assert_eq(other, 24576);
  reshard_chunk_pool_stats stats;
  reshard_chunk_pool_get_stats(pool, &stats);
  cr_assert_eq(stats.takes, 3);
  cr_assert_eq(stats.reuses, 1);
  reshard_chunk_pool_give(pool, reused, again);
  reshard_chunk_pool_give(pool, larger, other);
  reshard_chunk_pool_free(pool);
}

Test(chunk_pool, keeps_at_most_its_bound) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(100000);
  void *blocks[4];
  size_t capacity[4];
  for (int i = 0; i < 4; i++) {
    blocks[i] = reshard_chunk_pool_take(pool, 32768, &capacity[i]);
    cr_assert_eq(capacity[i], 32768);
    cr_assert_not_null(blocks[i]);
  }
  for (int i = 0; i < 4; i++) {
    reshard_chunk_pool_give(pool, blocks[i], capacity[i]);
  }
  reshard_chunk_pool_stats stats;
  reshard_chunk_pool_get_stats(pool, &stats);
  cr_assert_eq(stats.kept_blocks, 3, "3 x 32 KiB fit under 100 000 bytes");
  cr_assert_leq(stats.kept_bytes, 100000);
  reshard_chunk_pool_free(pool);
}

Test(chunk_pool, serves_blocks_beyond_the_largest_class_unpooled) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(1u << 30);
  size_t capacity = 0;
  size_t size = ((size_t)64 << 20) + 1;
  void *block = reshard_chunk_pool_take(pool, size, &capacity);
  cr_assert_not_null(block);
  cr_assert_eq(capacity, size);
  reshard_chunk_pool_give(pool, block, capacity);
  reshard_chunk_pool_stats stats;
  reshard_chunk_pool_get_stats(pool, &stats);
  cr_assert_eq(stats.kept_blocks, 0);
  reshard_chunk_pool_free(pool);
}

Test(chunk_pool, backs_an_arena) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(1 << 20);
  for (int round = 0; round < 2; round++) {
    reshard_arena arena;
    reshard_arena_init_from(&arena, 16 * 1024, reshard_chunk_pool_source(pool));
    for (int i = 0; i < 100; i++) {
      char *text = reshard_arena_strdup(&arena, "a page key");
      cr_assert_str_eq(text, "a page key");
    }
    cr_assert_not_null(reshard_arena_alloc(&arena, 200000, 64));
    reshard_arena_destroy(&arena);
  }
  reshard_chunk_pool_stats stats;
  reshard_chunk_pool_get_stats(pool, &stats);
  cr_assert_eq(stats.reuses, stats.takes / 2,
               "the second arena reuses every block of the first");
  reshard_chunk_pool_free(pool);
}

Test(chunk_pool, rounds_up_to_a_quarter_octave) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(0);
  static const size_t cases[][2] = {
      {1, 16384},       {16384, 16384},
      {16385, 20480},   {24577, 28672},
      {28673, 32768},   {65537, 81920},
      {100000, 114688}, {(size_t)64 << 20, (size_t)64 << 20},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    size_t capacity = 0;
    void *block = reshard_chunk_pool_take(pool, cases[i][0], &capacity);
    cr_assert_not_null(block);
    cr_assert_eq(capacity, cases[i][1], "%zu bytes: class %zu, want %zu",
                 cases[i][0], capacity, cases[i][1]);
    reshard_chunk_pool_give(pool, block, capacity);
  }
  reshard_chunk_pool_free(pool);
}

/* A burst of one size must not leave the pool full of it for good: blocks
 * of a class used since take the place of the class used longest ago. */
Test(chunk_pool, gives_up_the_stalest_class_for_the_one_in_use) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(4 * 65536);
  void *old[4];
  size_t old_capacity[4];
  for (int i = 0; i < 4; i++) {
    old[i] = reshard_chunk_pool_take(pool, 65536, &old_capacity[i]);
  }
  for (int i = 0; i < 4; i++) {
    reshard_chunk_pool_give(pool, old[i], old_capacity[i]);
  }
  reshard_chunk_pool_stats stats;
  reshard_chunk_pool_get_stats(pool, &stats);
  cr_assert_eq(stats.kept_bytes, 4 * 65536, "the pool is full of 64 KiB");

  for (int round = 0; round < 2; round++) {
    void *now[2];
    size_t now_capacity[2];
    for (int i = 0; i < 2; i++) {
      now[i] = reshard_chunk_pool_take(pool, 100000, &now_capacity[i]);
      cr_assert_eq(now_capacity[i], 114688);
    }
    for (int i = 0; i < 2; i++) {
      reshard_chunk_pool_give(pool, now[i], now_capacity[i]);
    }
  }
  reshard_chunk_pool_get_stats(pool, &stats);
  cr_assert_eq(stats.reuses, 2, "the second round reuses the first's blocks");
  cr_assert_eq(stats.kept_blocks, 2,
               "the four 64 KiB blocks gave way to two of 112 KiB");
  cr_assert_eq(stats.kept_bytes, 2 * 114688);
  reshard_chunk_pool_free(pool);
}

/* The other way round: a block of a class not used since is not kept at
 * the cost of blocks of a class in use. */
Test(chunk_pool, keeps_the_class_in_use_over_a_stale_one) {
  reshard_chunk_pool *pool = reshard_chunk_pool_create(2 * 65536);
  size_t stale_capacity = 0;
  void *stale = reshard_chunk_pool_take(pool, 100000, &stale_capacity);
  void *used[2];
  size_t used_capacity[2];
  for (int i = 0; i < 2; i++) {
    used[i] = reshard_chunk_pool_take(pool, 65536, &used_capacity[i]);
  }
  for (int i = 0; i < 2; i++) {
    reshard_chunk_pool_give(pool, used[i], used_capacity[i]);
  }
  reshard_chunk_pool_give(pool, stale, stale_capacity);
  reshard_chunk_pool_stats stats;
  reshard_chunk_pool_get_stats(pool, &stats);
  cr_assert_eq(stats.kept_blocks, 2);
  cr_assert_eq(stats.kept_bytes, 2 * 65536);
  reshard_chunk_pool_free(pool);
}
