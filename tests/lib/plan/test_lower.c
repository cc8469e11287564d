/* The range cursor of lowering (lib/plan/lower.c): over a binding of page
 * blocks (reshard_bound_binding.page_blocks) a page window's ranges are
 * written only when a step reads them, and a window of another size then
 * walks on from them. Either way the cursor must open what the walk over
 * the same ranges opens. Plans over such bindings are proved byte by byte
 * in test_oracle.c; both passes there advance by whole pages only. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "plan/plan_internal.h"
#include "reshard/arena.h"

enum { PAGE = 4, PAGES = 9, GROUPS = 4 };

/* Group g's range p holds the tokens of page p; group 2 has no ranges (a
 * component the cache has not). */
typedef struct fixture {
  reshard_bound_range ranges[GROUPS * PAGES];
  size_t group_start[GROUPS + 1];
  reshard_bound_binding binding;
} fixture;

static void build(fixture *f, uint64_t page_blocks) {
  memset(f, 0, sizeof *f);
  size_t count = 0;
  for (size_t g = 0; g < GROUPS; g++) {
    f->group_start[g] = count;
    for (uint64_t p = 0; g != 2 && p < PAGES; p++) {
      f->ranges[count++] = (reshard_bound_range){
          .layer_index = g / 2,
          .component = (reshard_component)(g % 2 + 1),
          .token_start = p * PAGE,
          .token_end = (p + 1) * PAGE,
          .head_end = 1,
          .region_offset = 1000 * g + p,
      };
    }
  }
  f->group_start[GROUPS] = count;
  f->binding = (reshard_bound_binding){
      .token_span = PAGES * PAGE,
      .ranges = f->ranges,
      .range_count = count,
      .group_start = f->group_start,
      .group_count = GROUPS,
      .region_count = 1,
      .page_blocks = page_blocks,
  };
}

/* The open ranges of each group, read as a step reads them. */
static void expect_same_open(reshard__range_cursor *lazy,
                             reshard__range_cursor *walk, uint64_t start,
                             uint64_t end) {
  reshard__cursor_ranges(lazy);
  reshard__cursor_ranges(walk);
  for (size_t g = 0; g < GROUPS; g++) {
    size_t first = lazy->binding->group_start[g];
    cr_assert_eq(lazy->open_count[g], walk->open_count[g],
                 "window [%llu, %llu), group %zu: %zu open, the walk %zu",
                 (unsigned long long)start, (unsigned long long)end, g,
                 lazy->open_count[g], walk->open_count[g]);
    for (size_t o = 0; o < lazy->open_count[g]; o++) {
      cr_assert_eq(lazy->open[first + o], walk->open[first + o],
                   "window [%llu, %llu), group %zu, open range %zu",
                   (unsigned long long)start, (unsigned long long)end, g, o);
    }
  }
}

Test(lower, page_block_cursor_opens_what_the_walk_opens) {
  fixture lazy_ranges, walk_ranges;
  build(&lazy_ranges, PAGE);
  build(&walk_ranges, 0);
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_error err;
  reshard__range_cursor lazy, walk;
  cr_assert_eq(reshard__cursor_init(&lazy, &lazy_ranges.binding, &arena, &err),
               RESHARD_OK);
  cr_assert_eq(reshard__cursor_init(&walk, &walk_ranges.binding, &arena, &err),
               RESHARD_OK);
  /* Window lengths in turn; a page's length at a page's start is a page
   * window, written lazily, and the others walk on from it. */
  static const uint64_t lengths[] = {PAGE, PAGE, 1, 3, PAGE, 2, 6, PAGE, PAGE};
  uint64_t checked_pages = 0, checked_walks = 0;
  for (unsigned seed = 0; seed < 64; seed++) {
    reshard__cursor_reset(&lazy);
    reshard__cursor_reset(&walk);
    uint64_t start = 0;
    for (unsigned step = 0; start < PAGES * PAGE; step++) {
      uint64_t length = lengths[(seed * 7 + step * (seed % 5 + 1)) %
                                (sizeof lengths / sizeof lengths[0])];
      uint64_t end = start + length;
      bool page_window = length == PAGE && start % PAGE == 0;
      reshard__cursor_advance(&lazy, start, end);
      reshard__cursor_advance(&walk, start, end);
      /* Read only every other page window: the next window then starts
       * from ranges not yet written. */
      if (!page_window || step % 2 == 0) {
        expect_same_open(&lazy, &walk, start, end);
        checked_pages += page_window;
        checked_walks += !page_window;
      }
      start = end;
    }
  }
  cr_assert_gt(checked_pages, 50, "page windows checked: %llu",
               (unsigned long long)checked_pages);
  cr_assert_gt(checked_walks, 50, "other windows checked: %llu",
               (unsigned long long)checked_walks);
  reshard_arena_destroy(&arena);
}
