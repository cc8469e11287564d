/* Lowering (SPEC §2.2 step 3): joined fragments x binding ranges of one
 * page become byte copies at the coarsest granularity both sides allow. */
#include <string.h>

#include "plan/plan_internal.h"
#include "reshard/checked.h"

reshard_status reshard__cursor_init(reshard__range_cursor *cursor,
                                    const reshard_bound_binding *binding,
                                    reshard_arena *arena, reshard_error *err) {
  *cursor = (reshard__range_cursor){.binding = binding};
  cursor->next = RESHARD_ARENA_NEW(arena, size_t, binding->group_count + 1);
  cursor->open_count =
      RESHARD_ARENA_NEW(arena, size_t, binding->group_count + 1);
  cursor->open = RESHARD_ARENA_ARRAY(arena, size_t, binding->range_count + 1);
  if (cursor->next == NULL || cursor->open_count == NULL ||
      cursor->open == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "plan: out of memory for the range cursor");
  }
  reshard__cursor_reset(cursor);
  return RESHARD_OK;
}

reshard_status reshard__cursor_init_pooled(
    reshard__range_cursor *cursor, const reshard_pooled_memory *pooled,
    const reshard_placement_part *part, uint64_t token_span, uint64_t page_size,
    reshard_arena *arena, reshard_error *err) {
  const reshard_bound_pool *pool = pooled->pool;
  size_t groups = pool->group_count;
  /* A window of page_size tokens meets at most this many blocks. */
  uint64_t blocks = (page_size - 1) / pool->block_size + 2;
  *cursor = (reshard__range_cursor){
      .binding = &cursor->page_binding,
      .pooled = pooled,
      .next = RESHARD_ARENA_NEW(arena, size_t, groups + 1),
      .open_count = RESHARD_ARENA_NEW(arena, size_t, groups + 1),
      .ranges_per_block = RESHARD_ARENA_ARRAY(arena, size_t, groups + 1),
  };
  size_t *group_start = RESHARD_ARENA_ARRAY(arena, size_t, groups + 1);
  if (cursor->next == NULL || cursor->open_count == NULL ||
      cursor->ranges_per_block == NULL || group_start == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "plan: out of memory for the range cursor");
  }
  uint64_t room = 0;
  for (size_t g = 0; g < groups; g++) {
    group_start[g] = (size_t)room;
    cursor->ranges_per_block[g] = reshard_pool_ranges_per_block(pool, g);
    uint64_t group_room;
    if (!reshard_mul(blocks, cursor->ranges_per_block[g], &group_room) ||
        !reshard_add(room, group_room, &room) || room > SIZE_MAX / 2) {
      return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                               "plan: a page's pool ranges overflow");
    }
  }
  group_start[groups] = (size_t)room;
  reshard_bound_range *ranges =
      RESHARD_ARENA_ARRAY(arena, reshard_bound_range, (size_t)room + 1);
  cursor->open = RESHARD_ARENA_ARRAY(arena, size_t, (size_t)room + 1);
  if (ranges == NULL || cursor->open == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "plan: out of memory for the range cursor");
  }
  /* Each group's ranges are its open ones, in place. */
  for (size_t i = 0; i < (size_t)room; i++) {
    cursor->open[i] = i;
  }
  cursor->page_binding = (reshard_bound_binding){
      .part = part,
      .token_span = token_span,
      .ranges = ranges,
      .range_count = (size_t)room,
      .group_start = group_start,
      .group_count = groups,
      .region_count = pool->region_count,
  };
  return RESHARD_OK;
}

/* The window's ranges of a binding of page blocks: each group's range of
 * page p is its p-th, alone open. */
static void write_page_blocks(reshard__range_cursor *cursor) {
  const reshard_bound_binding *binding = cursor->binding;
  size_t page = (size_t)(cursor->window_start / binding->page_blocks);
  for (size_t g = 0; g < binding->group_count; g++) {
    size_t first = binding->group_start[g];
    if (first == binding->group_start[g + 1]) {
      continue; /* a component the cache has not: never opens */
    }
    cursor->open[first] = first + page;
    cursor->open_count[g] = 1;
    cursor->next[g] = first + page + 1;
  }
  cursor->stale = false;
}

void reshard__cursor_write(reshard__range_cursor *cursor) {
  if (cursor->pooled == NULL) {
    write_page_blocks(cursor);
    return;
  }
  const reshard_pooled_memory *pooled = cursor->pooled;
  reshard_bound_binding *binding = &cursor->page_binding;
  for (size_t g = 0; g < binding->group_count; g++) {
    cursor->open_count[g] = reshard_pool_window_ranges(
        pooled->pool, g, pooled->block_ids, cursor->window_start,
        cursor->window_end, binding->ranges + binding->group_start[g]);
  }
  cursor->stale = false;
  cursor->written = true;
  cursor->written_start = cursor->window_start;
  cursor->written_end = cursor->window_end;
}

void reshard__cursor_reset(reshard__range_cursor *cursor) {
  if (cursor->pooled != NULL) {
    /* The page's ranges depend on its window alone: what was written
     * stays true for that window. */
    return;
  }
  const reshard_bound_binding *binding = cursor->binding;
  for (size_t g = 0; g < binding->group_count; g++) {
    cursor->next[g] = binding->group_start[g];
    cursor->open_count[g] = 0;
  }
  cursor->stale = false;
  cursor->all_open = false;
}

void reshard__cursor_advance(reshard__range_cursor *cursor, uint64_t page_start,
                             uint64_t page_end) {
  if (cursor->pooled != NULL) {
    cursor->window_start = page_start;
    cursor->window_end = page_end;
    cursor->stale = !cursor->written || cursor->written_start != page_start ||
                    cursor->written_end != page_end;
    return;
  }
  const reshard_bound_binding *binding = cursor->binding;
  const reshard_bound_range *ranges = binding->ranges;
  uint64_t page_size = binding->page_blocks;
  if (page_size != 0 && page_end - page_start == page_size &&
      page_start % page_size == 0) {
    /* Each group's range of this page is known by its place: the walk
     * below would open it alone. (Both passes advance by whole pages; a
     * window of another size would take the walk.) Written when a step
     * reads them (reshard__cursor_ranges): a page planned as the page
     * before it with its ranges' shifts never does. */
    cursor->window_start = page_start;
    cursor->window_end = page_end;
    cursor->stale = true;
    return;
  }
  /* The walk goes on from the last window's ranges. */
  reshard__cursor_ranges(cursor);
  if (cursor->all_open) {
    return;
  }
  for (size_t g = 0; g < binding->group_count; g++) {
    size_t *open = cursor->open + binding->group_start[g];
    size_t kept = 0;
    for (size_t i = 0; i < cursor->open_count[g]; i++) {
      if (ranges[open[i]].token_end > page_start) {
        open[kept++] = open[i];
      }
    }
    size_t next = cursor->next[g];
    size_t end = binding->group_start[g + 1];
    while (next < end && ranges[next].token_start < page_end) {
      if (ranges[next].token_end > page_start) {
        open[kept++] = next;
      }
      next++;
    }
    cursor->next[g] = next;
    cursor->open_count[g] = kept;
  }
  /* Each range starts on the first page and ends past the last. */
  cursor->all_open = binding->whole_span && page_start < page_end &&
                     page_start < binding->token_span;
}

/* The block where one join entry meets one binding range on this page. */
typedef struct block {
  uint64_t token_start, token_end; /* absolute tokens */
  uint64_t head_start, head_end;
  uint64_t head_bytes;
} block;

/* First entry of the group whose heads end after `head`. */
static size_t first_entry(const reshard_join_entry *entries, size_t low,
                          size_t high, uint64_t head) {
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (entries[mid].head_end <= head) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

/* Calls `visit` for every (entry, range) block of group g (a layer and
 * component) of the page. `ordinal` is the range's place among the page's
 * open ranges in the order they are visited: `first_ordinal` for the
 * group's first. */
typedef void (*block_visitor)(void *context, const reshard_join_entry *entry,
                              const reshard_bound_range *range, const block *b,
                              size_t ordinal);

static inline void visit_group(const reshard__page_lowering *page, size_t g,
                               size_t first_ordinal, block_visitor visit,
                               void *context) {
  const reshard_join *join = page->join;
  const reshard__range_cursor *cursor = page->cursor;
  const reshard_bound_binding *binding = cursor->binding;
  uint64_t page_start = page->page_index * page->page_size;
  uint64_t page_end = page_start + page->page_size;
  size_t entry_low = join->group_start[g];
  size_t entry_high = join->group_start[g + 1];
  if (entry_low == entry_high) {
    return;
  }
  const size_t *open = cursor->open + binding->group_start[g];
  uint64_t head_bytes = page->head_bytes[g % 2];
  for (size_t o = 0; o < cursor->open_count[g]; o++) {
    const reshard_bound_range *range = &binding->ranges[open[o]];
    uint64_t t0 =
        range->token_start > page_start ? range->token_start : page_start;
    uint64_t t1 = range->token_end < page_end ? range->token_end : page_end;
    for (size_t e = first_entry(join->entries, entry_low, entry_high,
                                range->head_start);
         e < entry_high && join->entries[e].head_start < range->head_end; e++) {
      const reshard_join_entry *entry = &join->entries[e];
      block b = {
          .token_start = t0,
          .token_end = t1,
          .head_start = entry->head_start > range->head_start
                            ? entry->head_start
                            : range->head_start,
          .head_end = entry->head_end < range->head_end ? entry->head_end
                                                        : range->head_end,
          .head_bytes = head_bytes,
      };
      visit(context, entry, range, &b, first_ordinal + o);
    }
  }
}

/* Calls `visit` for every block of the page, group by group. The counting
 * and the emitting passes share this walk so they cannot disagree. */
static inline void for_each_block(const reshard__page_lowering *page,
                                  block_visitor visit, void *context) {
  size_t groups = page->cursor->binding->group_count;
  for (size_t g = 0, ordinal = 0; g < groups; g++) {
    visit_group(page, g, ordinal, visit, context);
    ordinal += page->cursor->open_count[g];
  }
}

/* How many copies a block lowers to: one per (token, head) unless both
 * head strides equal hb (then one per token), and one in all when also
 * both token strides equal the row width. */
static uint64_t block_copies(const reshard_join_entry *entry,
                             const reshard_bound_range *range, const block *b,
                             bool *rows, bool *whole) {
  uint64_t tokens = b->token_end - b->token_start;
  uint64_t heads = b->head_end - b->head_start;
  uint64_t hb = b->head_bytes;
  *rows = entry->head_stride == hb && range->head_stride == hb;
  uint64_t row = heads * hb;
  *whole = *rows && entry->token_stride == row && range->token_stride == row;
  if (*whole) {
    return 1;
  }
  return *rows ? tokens : tokens * heads;
}

static void count_block(void *context, const reshard_join_entry *entry,
                        const reshard_bound_range *range, const block *b,
                        size_t ordinal) {
  (void)ordinal;
  reshard__page_cost *cost = context;
  bool rows, whole;
  cost->copies += block_copies(entry, range, b, &rows, &whole);
  cost->bytes += (b->token_end - b->token_start) *
                 (b->head_end - b->head_start) * b->head_bytes;
}

reshard__page_cost reshard__lower_count(const reshard__page_lowering *page) {
  reshard__cursor_ranges(page->cursor);
  reshard__page_cost cost = {0, 0};
  for_each_block(page, count_block, &cost);
  return cost;
}

typedef struct emitter {
  reshard_copy *out;
  size_t count;
  uint64_t page_index;
  uint64_t page_start;
} emitter;

static void emit_block(void *context, const reshard_join_entry *entry,
                       const reshard_bound_range *range, const block *b,
                       size_t ordinal) {
  (void)ordinal;
  emitter *emit = context;
  bool rows, whole;
  block_copies(entry, range, b, &rows, &whole);
  uint64_t tokens = b->token_end - b->token_start;
  uint64_t heads = b->head_end - b->head_start;
  uint64_t hb = b->head_bytes;
  uint64_t source = entry->part_offset +
                    (b->token_start - emit->page_start) * entry->token_stride +
                    (b->head_start - entry->head_start) * entry->head_stride;
  uint64_t target =
      range->region_offset +
      (b->token_start - range->token_start) * range->token_stride +
      (b->head_start - range->head_start) * range->head_stride;
  reshard_copy copy = {
      .page_index = emit->page_index,
      .part_index = entry->part_index,
      .region_index = range->region_index,
  };
  reshard_copy *out = emit->out + emit->count;
  if (whole) {
    copy.part_offset = source;
    copy.region_offset = target;
    copy.nbytes = tokens * heads * hb;
    *out = copy;
    emit->count += 1;
  } else if (rows) {
    copy.nbytes = heads * hb;
    for (uint64_t t = 0; t < tokens; t++) {
      copy.part_offset = source + t * entry->token_stride;
      copy.region_offset = target + t * range->token_stride;
      out[t] = copy;
    }
    emit->count += tokens;
  } else {
    copy.nbytes = hb;
    for (uint64_t t = 0; t < tokens; t++) {
      for (uint64_t h = 0; h < heads; h++) {
        copy.part_offset =
            source + t * entry->token_stride + h * entry->head_stride;
        copy.region_offset =
            target + t * range->token_stride + h * range->head_stride;
        *out++ = copy;
      }
    }
    emit->count += tokens * heads;
  }
}

size_t reshard__lower_page(const reshard__page_lowering *page,
                           reshard_copy *out) {
  reshard__cursor_ranges(page->cursor);
  emitter emit = {
      .out = out,
      .count = 0,
      .page_index = page->page_index,
      .page_start = page->page_index * page->page_size,
  };
  for_each_block(page, emit_block, &emit);
  return emit.count;
}

/* Lowering to strided sequences: each block becomes the few progressions
 * its copies form, so a page costs work per block rather than per copy. */
typedef struct sequencer {
  reshard_run *out;
  size_t *origin; /* per sequence: its range's ordinal */
  size_t ordinal; /* the block's range's */
  size_t count;
  size_t room;
  bool refused; /* a sequence would not fit, or its copies overlap */
  uint64_t page_index;
  uint64_t page_start;
} sequencer;

static void put_sequence(sequencer *seq, const reshard_copy *first,
                         uint64_t count, uint64_t part_stride,
                         uint64_t region_stride) {
  if (seq->count == seq->room) {
    seq->refused = true;
    return;
  }
  if (count > 1 && part_stride < first->nbytes) {
    /* Copies of a valid page never overlap in the Part; leave anything
     * else to the copy-by-copy path, which reports it. */
    seq->refused = true;
    return;
  }
  if (count > 1 && part_stride == first->nbytes &&
      region_stride == first->nbytes) {
    /* Contiguous on both sides: coalescing makes it one copy. */
    reshard_copy whole = *first;
    whole.nbytes *= count;
    seq->origin[seq->count] = seq->ordinal;
    seq->out[seq->count++] = (reshard_run){whole, 1, 0, 0};
    return;
  }
  seq->origin[seq->count] = seq->ordinal;
  seq->out[seq->count++] = (reshard_run){
      *first,
      count,
      count > 1 ? part_stride : 0,
      count > 1 ? region_stride : 0,
  };
}

static void sequence_block(void *context, const reshard_join_entry *entry,
                           const reshard_bound_range *range, const block *b,
                           size_t ordinal) {
  sequencer *seq = context;
  if (seq->refused) {
    return;
  }
  seq->ordinal = ordinal;
  bool rows, whole;
  block_copies(entry, range, b, &rows, &whole);
  uint64_t tokens = b->token_end - b->token_start;
  uint64_t heads = b->head_end - b->head_start;
  uint64_t hb = b->head_bytes;
  reshard_copy first = {
      .page_index = seq->page_index,
      .part_index = entry->part_index,
      .part_offset = entry->part_offset +
                     (b->token_start - seq->page_start) * entry->token_stride +
                     (b->head_start - entry->head_start) * entry->head_stride,
      .region_index = range->region_index,
      .region_offset =
          range->region_offset +
          (b->token_start - range->token_start) * range->token_stride +
          (b->head_start - range->head_start) * range->head_stride,
  };
  if (whole) {
    first.nbytes = tokens * heads * hb;
    put_sequence(seq, &first, 1, 0, 0);
  } else if (rows) {
    first.nbytes = heads * hb;
    put_sequence(seq, &first, tokens, entry->token_stride, range->token_stride);
  } else if (heads == 1 ||
             (tokens > 1 && entry->token_stride < entry->head_stride)) {
    /* Tokens are the inner (closer in the Part) dimension: one sequence
     * along the tokens per head. */
    first.nbytes = hb;
    for (uint64_t h = 0; h < heads; h++) {
      put_sequence(seq, &first, tokens, entry->token_stride,
                   range->token_stride);
      first.part_offset += entry->head_stride;
      first.region_offset += range->head_stride;
    }
  } else {
    first.nbytes = hb;
    for (uint64_t t = 0; t < tokens; t++) {
      put_sequence(seq, &first, heads, entry->head_stride, range->head_stride);
      first.part_offset += entry->token_stride;
      first.region_offset += range->token_stride;
    }
  }
}

/* The i-th group lower_page_sequences visits: every key group (g even),
 * then every value group. Where the Part keeps the components apart (S1,
 * S4) the sequences come out in Part order, and where it interleaves them
 * by layer (S2, S5) in two ascending runs, so the caller's sort is a pass
 * or a merge. Range ordinals (the memo's) follow the same order. */
static size_t visited_group(size_t i, size_t groups) {
  size_t keys = (groups + 1) / 2;
  return i < keys ? 2 * i : 2 * (i - keys) + 1;
}

/* The page's open ranges in visiting order. Calls `step` with each range,
 * its ordinal and `context`; stops early when `step` returns false.
 * Returns the number of ranges visited. */
typedef bool (*range_step)(void *context, size_t ordinal, size_t range);

static size_t for_each_open_range(const reshard__range_cursor *cursor,
                                  range_step step, void *context) {
  const reshard_bound_binding *binding = cursor->binding;
  size_t ordinal = 0;
  for (size_t i = 0; i < binding->group_count; i++) {
    size_t g = visited_group(i, binding->group_count);
    const size_t *open = cursor->open + binding->group_start[g];
    for (size_t o = 0; o < cursor->open_count[g]; o++, ordinal++) {
      if (!step(context, ordinal, open[o])) {
        return ordinal;
      }
    }
  }
  return ordinal;
}

/* Notes that the ranges of `region` move by `shift` (modulo 2^64), the
 * true amount negative when `negative`; clears memo->uniform when the
 * region's ranges move by different amounts. */
static void note_region_shift(reshard__sequence_memo *memo, uint64_t region,
                              uint64_t shift, bool negative) {
  uint64_t mark = memo->serial << 1 | (uint64_t)negative;
  if (memo->region_mark[region] >> 1 != memo->serial) {
    memo->region_mark[region] = mark;
    memo->region_shift[region] = shift;
  } else if (memo->region_mark[region] != mark ||
             memo->region_shift[region] != shift) {
    memo->uniform = false;
  }
}

/* A page's open ranges against the remembered page's, which they meet
 * alike (pass 1's counted_shape): the shift of each noted. */
typedef struct memo_compare {
  const reshard_bound_range *ranges;
  reshard__sequence_memo *memo;
  uint64_t page_start;
  bool differs;
} memo_compare;

/* The region offset of range `r`'s first token on the page starting at
 * `page_start` (the range open on it). Inside the region, so no wrap. */
static inline uint64_t range_page_offset(const reshard_bound_range *r,
                                         uint64_t page_start) {
  uint64_t first = r->token_start > page_start ? r->token_start : page_start;
  return r->region_offset + (first - r->token_start) * r->token_stride;
}

/* Notes how far `range` moved from the remembered page's range of the
 * same ordinal, the two meeting their pages alike. */
static bool note_shift(void *context, size_t ordinal, size_t range) {
  memo_compare *compare = context;
  reshard__sequence_memo *memo = compare->memo;
  if (ordinal >= memo->range_count) {
    /* More ranges than the remembered page. Pages alike hold as many;
     * a shift must not rest on that, though. */
    compare->differs = true;
    return false;
  }
  const reshard_bound_range *now = &compare->ranges[range];
  const reshard_bound_range *then = &compare->ranges[memo->ranges[ordinal]];
  /* A range that spans both pages (a contiguous reader's) meets the later
   * one further in: its shift is that of its first token on each. */
  uint64_t to = range_page_offset(now, compare->page_start);
  uint64_t from = range_page_offset(then, memo->page_start);
  memo->shift[ordinal] = to - from;
  if (memo->uniform) {
    note_region_shift(memo, now->region_index, memo->shift[ordinal], to < from);
  }
  /* Remembered as this page's; a page that turns out longer is lowered
   * afresh, which remembers every range again. */
  memo->ranges[ordinal] = range;
  return true;
}

/* note_shift for every range of a page of page blocks (binding.h) after
 * the remembered page, the page before it: each ordinal's range is the
 * one after the remembered one in its group, and both start on their
 * pages, so the shift is the difference of their region offsets. */
static void note_page_block_shifts(const reshard_bound_range *ranges,
                                   reshard__sequence_memo *memo) {
  for (size_t ordinal = 0; ordinal < memo->range_count; ordinal++) {
    size_t then = memo->ranges[ordinal];
    const reshard_bound_range *now = &ranges[then + 1];
    uint64_t to = now->region_offset, from = ranges[then].region_offset;
    memo->shift[ordinal] = to - from;
    if (memo->uniform) {
      note_region_shift(memo, now->region_index, to - from, to < from);
    }
    memo->ranges[ordinal] = then + 1;
  }
}

/* A page that moves every range by `shift`: memo->single, and every
 * region moved by it (the remembered page's coalesced sequences move so,
 * sequences.c). */
static void note_single_shift(reshard__sequence_memo *memo, uint64_t shift) {
  memo->single = true;
  memo->single_shift = shift;
  /* In locals: the stores could alias the memo, whose fields the loop
   * would then load again for every region. */
  uint64_t *region_shift = memo->region_shift;
  size_t regions = memo->region_count;
  for (size_t r = 0; r < regions; r++) {
    region_shift[r] = shift;
  }
}

/* The shift of a page of aligned page blocks (binding.h, pages_aligned)
 * from the page before, the remembered one: one amount for every range,
 * read off the first group's two ranges alone, as pooled_block_shift
 * reads a pool's off two block ids. The memo's per-ordinal ranges are
 * left as they were: with aligned pages no page reads them. */
static void note_aligned_page_shift(const reshard_bound_binding *binding,
                                    uint64_t page_index,
                                    reshard__sequence_memo *memo) {
  size_t g = 0;
  while (binding->group_start[g] == binding->group_start[g + 1]) {
    g++; /* a component the cache has not */
  }
  const reshard_bound_range *now =
      &binding->ranges[binding->group_start[g] + (size_t)page_index];
  note_single_shift(memo, now->region_offset - now[-1].region_offset);
}

/* note_shift for every range of a page of whole-span ranges (binding.h)
 * after the remembered page, the page before it: the same ranges, each
 * meeting this page a page of its rows further in. */
static void note_whole_span_shifts(const reshard_bound_range *ranges,
                                   uint64_t page_size,
                                   reshard__sequence_memo *memo) {
  for (size_t ordinal = 0; ordinal < memo->range_count; ordinal++) {
    const reshard_bound_range *range = &ranges[memo->ranges[ordinal]];
    uint64_t shift = page_size * range->token_stride;
    memo->shift[ordinal] = shift;
    if (memo->uniform) {
      note_region_shift(memo, range->region_index, shift, false);
    }
  }
}

static bool remember_range(void *context, size_t ordinal, size_t range) {
  reshard__sequence_memo *memo = context;
  if (ordinal == memo->room) {
    memo->overflowed = true;
    return false;
  }
  memo->ranges[ordinal] = range;
  return true;
}

/* Remembers the page whose `count` sequences the caller's `out` now holds,
 * unless it has more open ranges than the memo has room for. */
static void remember(const reshard__page_lowering *page,
                     reshard__sequence_memo *memo, size_t count) {
  memo->overflowed = false;
  memo->range_count = for_each_open_range(page->cursor, remember_range, memo);
  memo->join = memo->overflowed ? NULL : page->join;
  memo->page_start = page->page_index * page->page_size;
  memo->count = count;
  if (page->cursor->pooled != NULL) {
    uint64_t block_size = page->cursor->pooled->pool->block_size;
    memo->first_block = memo->page_start / block_size;
    memo->block_phase = memo->page_start % block_size;
  }
}

/* The ranges of page block j (of `blocks`) in the order pooled_shift
 * visits them: per group, each block's ranges in turn. */
static void note_ordinal_blocks(const reshard__range_cursor *cursor,
                                reshard__sequence_memo *memo, uint64_t blocks) {
  size_t groups = cursor->pooled->pool->group_count;
  size_t ordinal = 0;
  for (size_t i = 0; i < groups; i++) {
    size_t per_block = cursor->ranges_per_block[visited_group(i, groups)];
    for (uint64_t j = 0; j < blocks; j++) {
      for (size_t h = 0; h < per_block; h++) {
        memo->ordinal_block[ordinal++] = (uint32_t)j;
      }
    }
  }
  memo->ordinal_blocks = blocks;
}

/* pooled_shift for pools of one block stride and a page at the
 * remembered page's place in its blocks: every range of a block moves by
 * the difference of the two blocks' addresses, whatever its group, so the
 * page's `blocks` amounts (from block `first` on) are all there is to
 * work out. One amount for every block moves every region by it
 * (memo->single); else each range moves by its block's (memo->by_block). */
static bool pooled_block_shift(const reshard__page_lowering *page,
                               reshard__sequence_memo *memo, uint64_t first,
                               uint64_t blocks) {
  const uint32_t *now = page->cursor->pooled->block_ids + first;
  const uint32_t *then = page->cursor->pooled->block_ids + memo->first_block;
  /* The remembered page met as many ranges per block (no product: a sum
   * of `blocks` terms, each below the cursor's room). */
  size_t ranges = 0;
  for (uint64_t j = 0; j < blocks && ranges <= memo->range_count; j++) {
    ranges += memo->ranges_per_page_block;
  }
  if (ranges != memo->range_count) {
    memo->uniform = false;
    return false;
  }
  /* Modulo 2^64, as pooled_shift's. Every block lies in its regions
   * (pool validation), so the sign of the true amount is the ids'. */
  uint64_t stride = memo->block_stride;
  bool one = true;
  for (uint64_t j = 0; j < blocks; j++) {
    memo->block_shift[j] =
        (uint64_t)now[j] * stride - (uint64_t)then[j] * stride;
    one = one && memo->block_shift[j] == memo->block_shift[0] &&
          (now[j] < then[j]) == (now[0] < then[0]);
  }
  memo->first_block = first;
  if (one) {
    note_single_shift(memo, memo->block_shift[0]);
    return true;
  }
  memo->uniform = false;
  memo->by_block = true;
  if (memo->ordinal_blocks != blocks) {
    note_ordinal_blocks(page->cursor, memo, blocks);
  }
  return true;
}

/* For pooled memory: whether the page starts where the remembered one
 * did in its block, or each lies inside one block (blocks of more than a
 * page), and if so the shift of each of its ranges (by ordinal) from the
 * block ids and the two places alone, none of its ranges written; also
 * whether each region moves by one amount (memo->uniform). */
static bool pooled_shift(const reshard__page_lowering *page,
                         reshard__sequence_memo *memo) {
  const reshard_pooled_memory *pooled = page->cursor->pooled;
  const reshard_bound_pool *pool = pooled->pool;
  uint64_t page_start = page->page_index * page->page_size;
  uint64_t phase = page_start % pool->block_size;
  /* Pages at two places in their blocks meet their ranges alike only when
   * each lies inside its block: then each range covers its whole page,
   * the later one further into its block by the places' difference. */
  bool moved_in_block = phase != memo->block_phase;
  memo->uniform = false;
  if (memo->join != page->join ||
      (moved_in_block &&
       (pool->block_size - phase < page->page_size ||
        pool->block_size - memo->block_phase < page->page_size))) {
    return false;
  }
  uint64_t first = page_start / pool->block_size;
  uint64_t blocks =
      (page_start + page->page_size - 1) / pool->block_size - first + 1;
  const uint32_t *now = pooled->block_ids + first;
  const uint32_t *then = pooled->block_ids + memo->first_block;
  size_t groups = pool->group_count;
  size_t ordinal = 0;
  memo->serial++;
  memo->uniform = true;
  memo->single = false;
  memo->by_block = false;
  if (memo->one_stride && !moved_in_block && blocks <= memo->block_room) {
    return pooled_block_shift(page, memo, first, blocks);
  }
  for (size_t i = 0; i < groups; i++) {
    size_t g = visited_group(i, groups);
    size_t per_block = page->cursor->ranges_per_block[g];
    uint64_t stride = pool->groups[g].block_stride;
    /* Where each page starts in its block, in the group's bytes. */
    uint64_t now_place = phase * pool->groups[g].token_stride;
    uint64_t then_place = memo->block_phase * pool->groups[g].token_stride;
    if (per_block == 0) {
      continue;
    }
    if (ordinal + blocks * per_block > memo->range_count) {
      memo->uniform = false;
      return false; /* not the remembered shape after all */
    }
    for (uint64_t j = 0; j < blocks; j++) {
      /* Modulo 2^64: the sum the caller forms is the block's offset. The
       * sums themselves do not wrap, every block's offset and each token
       * of it lying in its region (pool validation), so `to < from` is
       * the sign of the true shift. */
      uint64_t to = (uint64_t)now[j] * stride + now_place;
      uint64_t from = (uint64_t)then[j] * stride + then_place;
      uint64_t shift = to - from;
      if (memo->uniform) {
        note_region_shift(memo, pool->groups[g].region_index, shift, to < from);
      }
      for (size_t h = 0; h < per_block; h++) {
        memo->shift[ordinal++] = shift;
      }
    }
  }
  if (ordinal != memo->range_count) {
    memo->uniform = false;
    return false;
  }
  memo->first_block = first;
  memo->block_phase = phase;
  return true;
}

size_t reshard__lower_page_sequences(const reshard__page_lowering *page,
                                     reshard_run *out, size_t room,
                                     reshard__sequence_memo *memo,
                                     bool *reused) {
  *reused = false;
  memo->uniform = false;
  memo->single = false;
  memo->by_block = false;
  bool same = false;
  if (page->cursor->pooled != NULL) {
    same = pooled_shift(page, memo);
  } else if (page->alike && memo->join == page->join &&
             memo->page_start + page->page_size ==
                 page->page_index * page->page_size) {
    /* Pass 1 found the page's ranges alike the page before's (whose
     * sequences the memo holds): only their shifts are left. */
    memo_compare compare = {
        .ranges = page->cursor->binding->ranges,
        .memo = memo,
        .page_start = page->page_index * page->page_size,
    };
    memo->serial++;
    memo->uniform = true;
    if (page->cursor->binding->pages_aligned) {
      note_aligned_page_shift(page->cursor->binding, page->page_index, memo);
      same = true;
    } else if (page->cursor->binding->page_blocks != 0) {
      note_page_block_shifts(compare.ranges, memo);
      same = true;
    } else if (page->cursor->binding->whole_span) {
      if (!memo->span_noted) {
        note_whole_span_shifts(compare.ranges, page->page_size, memo);
        memo->span_noted = true;
        memo->span_uniform = memo->uniform;
      }
      memo->uniform = memo->span_uniform;
      same = true;
    } else {
      size_t ranges = for_each_open_range(page->cursor, note_shift, &compare);
      same = !compare.differs && ranges == memo->range_count;
      memo->uniform = memo->uniform && same;
    }
  }
  if (same && memo->behind && !(memo->uniform && memo->defer)) {
    /* `out` stayed as it was while pages were taken from the caller's
     * copy; moving it by this page's shifts would start from the wrong
     * page: lowered afresh. */
    same = false;
  }
  if (same) {
    /* The same blocks: `out` still holds the remembered page's
     * sequences (the caller keeps them), which become this page's. */
    if (memo->uniform && memo->defer) {
      memo->behind = true;
    } else if (memo->single) {
      for (size_t i = 0; i < memo->count; i++) {
        out[i].first.page_index = page->page_index;
        out[i].first.region_offset += memo->single_shift;
      }
    } else if (memo->by_block) {
      for (size_t i = 0; i < memo->count; i++) {
        out[i].first.page_index = page->page_index;
        out[i].first.region_offset +=
            memo->block_shift[memo->ordinal_block[memo->origin[i]]];
      }
    } else {
      for (size_t i = 0; i < memo->count; i++) {
        out[i].first.page_index = page->page_index;
        out[i].first.region_offset += memo->shift[memo->origin[i]];
      }
    }
    memo->page_start = page->page_index * page->page_size;
    *reused = true;
    return memo->count;
  }
  memo->behind = false; /* written afresh below */
  reshard__cursor_ranges(page->cursor);
  sequencer seq = {
      .out = out,
      .origin = memo->origin,
      .room = room,
      .page_index = page->page_index,
      .page_start = page->page_index * page->page_size,
  };
  size_t groups = page->cursor->binding->group_count;
  size_t ordinal = 0;
  for (size_t i = 0; i < groups && !seq.refused; i++) {
    size_t g = visited_group(i, groups);
    visit_group(page, g, ordinal, sequence_block, &seq);
    ordinal += page->cursor->open_count[g];
  }
  if (seq.refused) {
    memo->join = NULL;
    return SIZE_MAX;
  }
  remember(page, memo, seq.count);
  return seq.count;
}
