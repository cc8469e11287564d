/* Tests lib/base/arena.c: allocation, alignment, overflow and chunks drawn from
 * and given back to a caller's source. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/arena.h"

/* A source that counts what it hands out and takes back, and hands out
 * twice the size asked for (the arena must use all of it). */
typedef struct counting_source {
  size_t taken, given;
  size_t bytes_out;
} counting_source;

static void *take(void *context, size_t size, size_t *capacity) {
  counting_source *c = context;
  c->taken++;
  *capacity = size * 2;
  c->bytes_out += size * 2;
  return malloc(size * 2);
}

static void give(void *context, void *block, size_t capacity) {
  counting_source *c = context;
  c->given++;
  c->bytes_out -= capacity;
  free(block);
}

Test(arena, aligns_and_keeps_small_allocations_apart) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  unsigned char *a = reshard_arena_alloc(&arena, 3, 1);
  uint64_t *b = reshard_arena_alloc(&arena, sizeof *b, 8);
  void *c = reshard_arena_alloc(&arena, 100, 64);
  cr_assert(a != NULL && b != NULL && c != NULL);
  cr_assert_eq((uintptr_t)b % 8, 0);
  cr_assert_eq((uintptr_t)c % 64, 0);
  memset(a, 0xff, 3);
  *b = 0;
  cr_assert_eq(*b, 0, "the byte run of a overlaps b");
  reshard_arena_destroy(&arena);
  cr_assert_eq(arena.total_bytes, 0);
}

Test(arena, checks_the_multiplication) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  cr_assert_null(reshard_arena_calloc(&arena, SIZE_MAX / 2, 4));
  cr_assert_null(reshard_arena_array(&arena, SIZE_MAX / 8 + 1, 16));
  reshard_arena_destroy(&arena);
}

Test(arena, draws_every_chunk_from_the_source_and_gives_it_back) {
  counting_source counts = {0};
  reshard_arena_source source = {take, give, &counts};
  reshard_arena arena;
  reshard_arena_init_from(&arena, 1024, &source);
  /* Small requests fill one chunk, of twice the asked size; a large one
   * gets its own. */
  for (int i = 0; i < 32; i++) {
    cr_assert_not_null(reshard_arena_alloc(&arena, 32, 16));
  }
  cr_assert_eq(counts.taken, 1,
               "1 KiB asked, 2 KiB given: one chunk holds "
               "32 x 32 bytes");
  unsigned char *big = reshard_arena_alloc(&arena, 100000, 16);
  cr_assert_not_null(big);
  memset(big, 1, 100000);
  cr_assert_eq(counts.taken, 2);
  cr_assert_eq(arena.total_bytes, counts.bytes_out);
  reshard_arena_destroy(&arena);
  cr_assert_eq(counts.given, counts.taken);
  cr_assert_eq(counts.bytes_out, 0);
  cr_assert_eq(arena.total_bytes, 0);
}

/* reshard_arena_chunk_of names the chunk each allocation lies in (a
 * response's slices are made over whole chunks): small ones share the
 * first chunk, a large one has its own, and a pointer from elsewhere lies
 * in none. */
Test(arena, names_the_chunk_an_allocation_lies_in) {
  reshard_arena arena;
  reshard_arena_init(&arena, 1024);
  unsigned char *small[2], *big;
  small[0] = reshard_arena_alloc(&arena, 100, 1);
  small[1] = reshard_arena_alloc(&arena, 100, 1);
  big = reshard_arena_alloc(&arena, 5000, 1);
  unsigned char *after = reshard_arena_alloc(&arena, 100, 1);
  cr_assert(small[0] && small[1] && big && after);
  const unsigned char *start[4];
  size_t size[4];
  unsigned char *const in[4] = {small[0], small[1] + 99, big + 4999, after};
  for (int i = 0; i < 4; i++) {
    cr_assert(reshard_arena_chunk_of(&arena, in[i], &start[i], &size[i]),
              "allocation %d", i);
    cr_assert(in[i] >= start[i] && in[i] < start[i] + size[i],
              "allocation %d lies outside the chunk named", i);
  }
  cr_assert_eq(start[0], start[1]);
  cr_assert_eq(start[0], start[3], "the first chunk still takes small ones");
  cr_assert_neq(start[2], start[0], "a large allocation has its own chunk");
  cr_assert_geq(size[2], 5000);
  cr_assert(big + 5000 <= start[2] + size[2]);
  unsigned char elsewhere[16];
  const unsigned char *unused = NULL;
  size_t unused_size = 0;
  cr_assert_not(
      reshard_arena_chunk_of(&arena, elsewhere, &unused, &unused_size));
  cr_assert_null(unused);
  reshard_arena_destroy(&arena);
}
