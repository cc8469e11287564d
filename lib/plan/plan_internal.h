/* Internal: the steps of load planning in lib/plan/ and what they share,
 * in pipeline order: the range cursor and page lowering (lower.c), pages as
 * strided sequences (sequences.c), coalescing (coalesce.c), batching
 * (batch.c), the run folder (runs.c), the varint column encoder
 * (varint_columns.c), and the planner state that the driver (plan.c) and
 * source selection (select.c) share. Not installed; not part of the public
 * API. */
#ifndef RESHARD_PLAN_INTERNAL_H
#define RESHARD_PLAN_INTERNAL_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/keyed_sort.h"
#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/join.h"
#include "reshard/plan.h"
#include "reshard/pool.h"
#include "reshard/runs.h"
#include "reshard/varint_columns.h"

/* The binding ranges that overlap the current page, per (layer, component)
 * group. Pages are visited in increasing order, so each range is opened
 * once and closed once: the cost is linear in the (range, page) pairs. */
typedef struct reshard__range_cursor {
  const reshard_bound_binding *binding;
  size_t *next; /* per group: the next range not yet opened */
  size_t *open; /* per group g: open ranges in open[group_start[g]..] */
  size_t *open_count;
  /* Pooled memory (SPEC §1.5a) has no bound binding: `binding` is
   * `page_binding`, whose ranges are the current page's alone, written
   * from the pool and the block table when a step needs them
   * (reshard__cursor_ranges), so a page whose plan is a remembered
   * page's with other blocks never writes them. */
  const reshard_pooled_memory *pooled;
  size_t *ranges_per_block; /* per group, reshard_pool_ranges_per_block */
  reshard_bound_binding page_binding;
  uint64_t window_start, window_end;
  bool stale; /* the open ranges are not yet the window's */
  /* The window page_binding was last written for: the ranges are a
   * function of the window alone, so pass 2 does not write again the
   * page pass 1 last wrote. */
  uint64_t written_start, written_end;
  bool written;
  /* A binding of whole-span ranges (reshard_bound_binding.whole_span)
   * whose every range is open: it stays so for every page. */
  bool all_open;
} reshard__range_cursor;

reshard_status reshard__cursor_init(reshard__range_cursor *cursor,
                                    const reshard_bound_binding *binding,
                                    reshard_arena *arena, reshard_error *err);
/* A cursor over pooled memory for pages of `page_size` tokens within
 * [0, token_span); the block table must have been checked for that
 * span. */
reshard_status reshard__cursor_init_pooled(
    reshard__range_cursor *cursor, const reshard_pooled_memory *pooled,
    const reshard_placement_part *part, uint64_t token_span, uint64_t page_size,
    reshard_arena *arena, reshard_error *err);
void reshard__cursor_reset(reshard__range_cursor *cursor);
/* Opens and closes ranges for the token window [page_start, page_end). */
void reshard__cursor_advance(reshard__range_cursor *cursor, uint64_t page_start,
                             uint64_t page_end);
/* Makes the open ranges the window's: pooled memory and a binding of
 * page blocks write them when a step first reads them. */
void reshard__cursor_write(reshard__range_cursor *cursor);
static inline void reshard__cursor_ranges(reshard__range_cursor *cursor) {
  if (cursor->stale) {
    reshard__cursor_write(cursor);
  }
}

/* What lowering one page produces, counted without producing it. */
typedef struct reshard__page_cost {
  uint64_t copies;
  uint64_t bytes;
} reshard__page_cost;

/* Context shared by counting and lowering one page. */
typedef struct reshard__page_lowering {
  const reshard_join *join;
  reshard__range_cursor *cursor;
  uint64_t page_index;
  uint64_t page_size;
  uint64_t head_bytes[2]; /* by component - 1 */
  /* Pass 1 found the page's open ranges alike the page before's, regions
   * included (select.c, counted_shape): only their shifts are left to
   * find when the page before is the one remembered. */
  bool alike;
} reshard__page_lowering;

/* Counts the copies (SPEC §2.2 step 3 granularity) and bytes of one page. */
reshard__page_cost reshard__lower_count(const reshard__page_lowering *page);

/* Writes the page's copies into `out` (room for the counted copies) in
 * lowering order; returns how many. */
size_t reshard__lower_page(const reshard__page_lowering *page,
                           reshard_copy *out);

/* The last page lowered to sequences, so that the next page whose
 * blocks are the same but for where its ranges lie in their regions (the
 * pages of a paged reader, one block each) shifts those sequences instead
 * of lowering again. Arrays of `room` entries, in the plan's arena. */
typedef struct reshard__sequence_memo {
  const reshard_join *join; /* the page's source; NULL: none remembered */
  uint64_t page_start;
  /* Pooled memory: the remembered page's first block and where the page
   * starts in it. A page that starts at the same place in its block meets
   * its blocks as the remembered page met its own, so its sequences are
   * the remembered ones with each block's region offsets moved by the
   * difference of the two blocks' addresses. */
  uint64_t first_block;
  uint64_t block_phase;
  size_t count;       /* its sequences */
  size_t *origin;     /* per sequence: the ordinal of its range */
  size_t *ranges;     /* per ordinal: the range (index into the binding) */
  uint64_t *shift;    /* per ordinal: scratch for the region offset shift */
  size_t range_count; /* the page's open ranges */
  size_t room;
  bool overflowed;
  /* Whether the last shift moved every range of a region by one and the
   * same amount (as integers, not only modulo 2^64), and that amount per
   * region index (region_shift, valid for the regions the page's ranges
   * lie in). Then every relation between two copies of
   * one region (touching, coalescing, a run's progression, which one
   * comes first) is the remembered page's, so the page's coalesced
   * sequences and its runs are the remembered page's moved by
   * region_shift. region_mark holds (serial << 1 | negative) per region,
   * `serial` counting the shifts. */
  bool uniform;
  uint64_t *region_shift;
  uint64_t *region_mark;
  uint64_t serial;
  size_t region_count;
  /* Pooled memory whose present groups share one block stride
   * (`block_stride`; every engine layout measured): a page of one block
   * moves every range by the same amount, `single_shift`, when `single`
   * says the last shift was such a one (memo->shift is then not
   * written). `ranges_per_page_block`: the ranges one block of a page
   * stands for, over all groups. */
  bool one_stride;
  uint64_t block_stride;
  size_t ranges_per_page_block;
  bool single;
  uint64_t single_shift;
  /* With one block stride, a page at the remembered page's place in its
   * blocks moves each range by its block's amount: `by_block` says the
   * last shift was such a one, `block_shift` holding the amount per block
   * of the page (`block_room` entries) and `ordinal_block` the page block
   * of each range ordinal (memo->room entries, written once for pages of
   * `ordinal_blocks` blocks; 0: not yet). memo->shift is then not
   * written. */
  bool by_block;
  uint64_t *block_shift;
  size_t block_room;
  uint32_t *ordinal_block;
  uint64_t ordinal_blocks;
  /* Over whole-span ranges (reshard_bound_binding.whole_span) every page
   * opens the same ranges in the same order and moves each by the same
   * amount from the page before: once noted (`span_noted`), `shift`,
   * region_shift and `span_uniform` (the page's `uniform`) hold for every
   * page of the plan, whichever pages were lowered afresh between. */
  bool span_noted;
  bool span_uniform;
  /* Set by the caller before each page: it takes a page moved by one
   * amount per region (`uniform`) from its own kept copy of the
   * remembered page, so `out` may stay as it was (`behind`; a later page
   * not taken so is then lowered afresh). */
  bool defer;
  bool behind;
} reshard__sequence_memo;

/* Writes the page's copies into `out` as strided sequences (reshard_run:
 * `count` copies `part_stride` and `region_stride` apart), at most `room`
 * of them, in lowering order. Returns how many, or SIZE_MAX when they do
 * not fit `room` or a sequence's copies would overlap in the Part: then
 * the caller lowers the page copy by copy. `out` must hold what the last
 * call wrote there, as `memo` remembers it: *reused says the page was the
 * remembered one shifted (same sequences in the same order, their page
 * index and region offsets changed; with memo->defer and memo->uniform,
 * left as they were). */
size_t reshard__lower_page_sequences(const reshard__page_lowering *page,
                                     reshard_run *out, size_t room,
                                     reshard__sequence_memo *memo,
                                     bool *reused);

/* One page lowered to strided sequences sorted by first copy, standing for
 * its coalesced copies (see lib/plan/sequences.c). The sequences form groups
 * one after another in the Part: group g is sequences [group_ends[g - 1],
 * group_ends[g]), and source order takes copy k of each of its sequences
 * in turn, k = 0, 1, ... (a group of one is its sequence). */
typedef struct reshard__page_sequences {
  const reshard_run *sequences;
  size_t count;
  const size_t *group_ends;
  size_t group_count;
  uint64_t copies;
  bool reused; /* the remembered page's sequences, shifted */
  /* The coalesced sequences of page `from_page` (the sequence page
   * before this one) with each region offset moved by
   * region_shift[region index], one amount per region (see
   * reshard__sequence_memo.uniform): the same groups, and, batched and
   * folded alike, the same runs moved alike. */
  bool shifted;
  uint64_t from_page;
  const uint64_t *region_shift;
  /* Pages of one shape (never 0) are the same sequences in the same
   * groups but for their page index and region offsets: those taken
   * from the page grouped last, moved. */
  uint64_t shape;
} reshard__page_sequences;

/* Scratch for reshard__page_sequences: `room` entries in each array.
 * `lowered` and `order` belong to the memo between pages. */
typedef struct reshard__sequence_scratch {
  reshard_run *lowered;
  size_t *order; /* sorted position -> index into lowered */
  reshard_run *sorted;
  reshard__keyed *keys;
  reshard__keyed *spare;
  size_t *group_ends;
  size_t room;
  reshard__sequence_memo memo;
  /* Whether `sorted` and `group_ends` hold the coalesced page the memo
   * remembers (page `sorted_page`: sorted_count sequences in
   * sorted_groups groups, sorted_copies copies), so that a page shifted
   * from it by one amount per region takes them moved, without sorting,
   * coalescing or grouping again. */
  bool sorted_current;
  /* Whether grouping `sorted` compared no region offsets (no two of its
   * sequences met in the Part), so that any page shifted from it groups
   * alike, whatever the shifts. */
  bool sorted_region_free;
  size_t sorted_count;
  size_t sorted_groups;
  uint64_t sorted_copies;
  uint64_t sorted_page;
  uint64_t sorted_shape; /* counts the pages grouped: their shapes */
} reshard__sequence_scratch;

/* Lowers a page to sequences when they can stand for its coalesced copies:
 * at most `room` of them, in groups as above, no two copies coalescing. Returns
 * false otherwise; the caller then lowers and coalesces copy by copy. `out`
 * points into `scratch`. */
bool reshard__sequence_page(const reshard__page_lowering *lowering,
                            reshard__sequence_scratch *scratch,
                            reshard__page_sequences *out);
/* Copies of a plan that keeps at least this many bytes of them are
 * written past the caches (`streamed` below): with this machine's 16 MiB
 * L3, 15.7 MB of copies cost 3.2-3.6 ns a copy stored through the caches
 * against 2.2-2.3 streamed, and 6.3 MB 1.7 against 2.3 (reshard-bench's
 * store floor, docs/performance.md Round 33). Under it the copies stay in
 * cache for whoever reads them next. */
#define RESHARD__STREAM_COPIES_MIN_BYTES ((size_t)8 << 20)
/* Writes a group's copies (copy k of each of its `width` sequences in
 * turn, k = 0, 1, ...; the sequences' counts are equal) to `out`; returns
 * the end of what it wrote. `streamed`: with non-temporal stores where the
 * target has them (x86-64) and `out` is 16-byte aligned; the caller
 * fences (reshard__stream_fence) before another thread may read them. */
reshard_copy *reshard__group_expand(const reshard_run *group, size_t width,
                                    reshard_copy *out, bool streamed);
/* Orders the streamed stores before any store that follows. */
void reshard__stream_fence(void);
/* Writes the page's copies, in source order, to `out` (room for
 * page->copies), streamed as reshard__group_expand's. */
void reshard__page_sequences_expand(const reshard__page_sequences *page,
                                    reshard_copy *out, bool streamed);

/* Sorts the copies of one page by (part, part_offset) and merges those
 * whose source and destination both continue the previous copy, writing
 * the result to `out`; returns the number written. `keyed` and `spare` are
 * scratch with room for `count` entries. */
size_t reshard__coalesce_page(const reshard_copy *copies, size_t count,
                              const uint64_t *part_base, reshard__keyed *keyed,
                              reshard__keyed *spare, reshard_copy *out);

/* Splits coalesced copies into batches (SPEC §2.2 step 5). */
typedef struct reshard__batching {
  uint64_t max_operations; /* >= 1 */
  uint64_t max_bytes;      /* >= 1 */
} reshard__batching;

/* Upper bounds of the copies and batches batching can produce, for sizing
 * the output before writing it. */
void reshard__batch_bounds(size_t count, uint64_t total_bytes,
                           const reshard__batching *limits, size_t *max_copies,
                           size_t *max_batches);

/* Streams coalesced copies into batches: push them in plan order, then
 * finish. `out` and `batches` are sized by reshard__batch_bounds. Copies
 * are counted in plan order (`written`, batch firsts); copy i lies at
 * out[i - dropped]. Only the transfer walk drops copies (once encoded,
 * when nothing reads them again: transfer_direct.c); `dropped` stays 0
 * elsewhere. */
typedef struct reshard__batcher {
  reshard__batching limits;
  reshard_copy *out;
  reshard_batch *batches;
  size_t written;     /* copies written, in plan order */
  size_t dropped;     /* copies no longer held: out[0] is copy `dropped` */
  size_t batch_count; /* closed batches */
  size_t batch_first;
  uint64_t batch_ops;
  uint64_t batch_bytes;
  uint64_t pushed; /* copies pushed: the count after coalescing */
} reshard__batcher;

/* Where copy `index` (plan order, at least `dropped`) lies. */
static inline reshard_copy *reshard__batcher_copy(const reshard__batcher *b,
                                                  size_t index) {
  assert(index >= b->dropped && "a dropped copy read again");
  return b->out + (index - b->dropped);
}

void reshard__batcher_init(reshard__batcher *batcher,
                           const reshard__batching *limits, reshard_copy *out,
                           reshard_batch *batches);
void reshard__batcher_push(reshard__batcher *batcher,
                           const reshard_copy *copies, size_t count);
/* Whether `count` copies moving `bytes` in all fit the open batch, so none
 * is split and the batch closes, if at all, at the last of them. */
bool reshard__batcher_fits(const reshard__batcher *batcher, size_t count,
                           uint64_t bytes);
/* Takes `count` copies moving `bytes` that the caller wrote at
 * out + written, after reshard__batcher_fits said they fit: what
 * reshard__batcher_push of the same copies would have done. */
void reshard__batcher_commit(reshard__batcher *batcher, size_t count,
                             uint64_t bytes);
void reshard__batcher_finish(reshard__batcher *batcher);

/* Folds batches into runs as the batcher fills them (SPEC §2.2 step 7),
 * so each copy is folded while it is still in cache: fold the open batch's
 * copies (or strided sequences of them) in plan order, then close it. */
/* A class, its current run and where the run's last copy lies, so the
 * progression test is a subtraction (no multiplication that could wrap).
 * One cache line; the key is kept here so a probe reads nothing else. */
struct fold_slot {
  uint64_t stamp; /* the batch this slot belongs to; stale otherwise */
  uint64_t page_index, part_index, region_index, nbytes; /* the class */
  size_t run;
  uint64_t last_part;
  uint64_t last_region;
};
enum { RESHARD__FOLD_RECENT = 64 };
/* A region's mark (reshard__run_folder.region_group): the group that
 * last named it (`serial`, group_serial's count) and, for
 * reshard__run_folder_alone, which of the page's sequences that was. */
struct reshard__region_mark {
  uint64_t serial;
  size_t sequence;
};
typedef struct reshard__run_folder {
  reshard_run *runs;
  size_t run_count;
  size_t *batch_first; /* batch_count + 1 entries */
  size_t batch_count;  /* closed batches */
  size_t *batch_like;  /* per closed batch (reshard_runs.batch_like) */
  size_t open_like;    /* the closed batch last renamed whole into the open
                          one, or SIZE_MAX (see _renamed, _close) */
  /* Where the runs came from, for naming batches alike: segments of runs
   * [0, segments_end), in order, segment k starting at run
   * segment_start[k] and holding the runs from segment_origin[k] on,
   * renamed (reshard__run_folder_renamed) or the folder's own (origin:
   * its own first run). Origins are runs of the second kind, so runs of
   * equal origin are equal but for their part and region indices. Each
   * batch starts a segment, batch b's first is batch_segment[b], and
   * segments are as long as they can be, so two batches of equal origins
   * hold the same segments. */
  size_t *segment_start, *segment_origin;
  size_t segment_count, segment_room, segments_end;
  size_t *batch_segment;   /* batch_count + 1 entries */
  bool segments_lost;      /* the arena could not grow them: none named so */
  struct fold_slot *slots; /* class table, mask + 1 slots */
  size_t mask;
  size_t live;        /* classes of the open batch in the table */
  size_t open_copies; /* copies folded into the open batch */
  /* The last slot seen per region (modulo the size), for the open batch
   * and the current table only: copies in source order visit one region
   * per layer in turn, and each finds its class here without hashing. */
  struct fold_slot *recent[RESHARD__FOLD_RECENT];
  /* Scratch for one group, grown in the arena as groups need. */
  struct fold_step *steps;
  reshard__keyed *keys;
  reshard__keyed *spare_keys;
  size_t *hashes;           /* each sequence's class hash */
  struct fold_slot **found; /* each sequence's class slot, as looked up */
  size_t group_room;
  /* Per region index, the last group whose sequences named it: a group
   * whose sequences all lie in distinct regions has distinct classes,
   * known without sorting their hashes. Grown in the arena as regions
   * appear. */
  struct reshard__region_mark *region_group;
  size_t region_room;
  uint64_t group_serial;
  /* reshard__run_folder_alone (runs_alone.c): the groups of the page it
   * looks at (alone_groups); from its last pass over a page's sequences
   * that did not refuse their shape, for a page of shape `alone_shape`
   * (0: none), the pairs of them that share a region (alone_pairs); and
   * the last shape it refused (`alone_refused`). Grown in the arena. */
  struct reshard__alone_group *alone_groups;
  size_t alone_group_room;
  struct reshard__alone_pair *alone_pairs;
  size_t alone_pair_count;
  size_t alone_pair_room;
  uint64_t alone_shape;
  uint64_t alone_refused;
  reshard_arena *arena; /* where the table and scratch grow */
} reshard__run_folder;

/* Sizes the folder for `max_copies` copies in all and `max_batches`
 * batches; the class table grows in `arena` as batches need. */
reshard_status reshard__run_folder_init(reshard__run_folder *folder,
                                        size_t max_copies, size_t max_batches,
                                        reshard_arena *arena,
                                        reshard_error *err);
/* Folds `count` more copies of the open batch. */
reshard_status reshard__run_folder_copies(reshard__run_folder *folder,
                                          const reshard_copy *copies,
                                          size_t count, reshard_error *err);
/* Folds a group of `width` sequences (see reshard__page_sequences: copy k
 * of each in turn, k = 0, 1, ...) into the open batch: what folding its
 * copies one by one would do, in work per run rather than per copy when
 * the group is one sequence, sequences of distinct new classes, or
 * sequences of one class with equal strides. */
reshard_status reshard__run_folder_group(reshard__run_folder *folder,
                                         const reshard_run *group, size_t width,
                                         reshard_error *err);
/* Appends to the open batch runs [first, end) of the folder, each moved
 * to page `page_index` and its region offset moved by
 * region_shift[its region index], standing for `copies` copies: what
 * folding a page does when its copies are those runs' page's moved by
 * one amount per region, both pages wholly inside one batch (a run's
 * class includes its page, so no copy of either page meets a run of
 * another, and the greedy fold depends only on how copies of one region
 * lie relative to each other). The runs must be the fold of exactly
 * that page. */
void reshard__run_folder_shifted(reshard__run_folder *folder, size_t first,
                                 size_t end, uint64_t page_index,
                                 const uint64_t *region_shift, uint64_t copies);
/* Appends to the open batch runs [first, end) of the folder with their
 * part index set to `part_index` and their region index to
 * `region_index`: what folding a transfer region's copies does when they
 * are those runs' region's renamed (see transfer_direct.c). The caller
 * counts the copies (open_copies). Like reshard__run_folder_shifted, the
 * new classes stay out of the table: no later copy is of them, so the
 * runs renamed are final (a region is renamed once walked). A batch is
 * named like an earlier one (reshard_runs.batch_like) when it holds a
 * whole closed batch renamed and nothing else, or when its runs are of
 * the same origins as one of the few batches before it (runs.c). */
void reshard__run_folder_renamed(reshard__run_folder *folder, size_t first,
                                 size_t end, uint64_t part_index,
                                 uint64_t region_index);
/* Whether each sequence of `page` is a run of its own in any stretch of
 * the page's copies that batches cut it into, a batch starting at copy
 * `first_cut` of the page and every `cut_every` copies after (none when
 * `first_cut` is at least the page's copies). So it is when each steps
 * forward in its Part and not back in its region (told by its first and
 * last copies: a lowered page's copies lie in their Parts and regions),
 * so the greedy fold extends its first copy by every later one; when no
 * two of one group share a region (copies of a group interleave); and
 * when a sequence that shares its region with one of an earlier group
 * (S3: a layer's region read by both blocks of a page, K and V) is of
 * its class, starts after it in the Part and does not continue its run:
 * it starts back in the region, or off the run's strides where no batch
 * starts between that one's last two copies (which would leave the last
 * a run of one copy, which any later copy forward of it continues).
 * Conservative: a region shared by another class is a no. Uses the folder's
 * region marks; false also when they cannot grow.
 *
 * `shape`, when not 0, says that every page given it is the same
 * sequences in the same groups but for their region offsets: after one
 * of them, another is told from the pairs of sequences that share a
 * region alone, or at once when the shape itself was the no. */
bool reshard__run_folder_alone(reshard__run_folder *folder,
                               const reshard__page_sequences *page,
                               uint64_t first_cut, uint64_t cut_every,
                               uint64_t shape);
/* The mark of `region` in folder->region_group, grown as regions appear;
 * NULL when the marks cannot grow. */
struct reshard__region_mark *
reshard__run_folder_region_mark(reshard__run_folder *folder, uint64_t region);
/* Appends to the open batch the runs of copies [from, to) of `page`,
 * whose sequences are alone (reshard__run_folder_alone), copies numbered
 * as the planner batches them (group by group, copy k of each of a
 * group's sequences in turn): each sequence's copies in the range are one
 * run, in the order of their first copies. What folding those copies
 * does, with no class table: no copy outside the page is of their
 * classes. */
void reshard__run_folder_alone_piece(reshard__run_folder *folder,
                                     const reshard__page_sequences *page,
                                     uint64_t from, uint64_t to);
/* Whether a strided sequence starting at `first` is of `slot`'s class and
 * its first copy follows the class's last: what folding it in line
 * (reshard__fold_slot_extend) needs. */
static inline bool reshard__fold_slot_takes(const struct fold_slot *slot,
                                            const reshard_copy *first) {
  return slot->page_index == first->page_index &&
         slot->part_index == first->part_index &&
         slot->region_index == first->region_index &&
         slot->nbytes == first->nbytes && first->part_offset > slot->last_part;
}

/* Folds one strided sequence (`count` >= 1 copies, copy k at first + k
 * strides, strides > 0 when count > 1) of the class of `slot`, which takes
 * it (reshard__fold_slot_takes), into `runs`: the class's run goes on or
 * the sequence starts the next (at *run_count, which it counts), as
 * reshard__run_folder_group of that one sequence would. The slot may be
 * the caller's copy of the folder's (the transfer walk keeps it in a
 * local while it walks a region); the caller counts the copies. */
static inline __attribute__((always_inline)) void
reshard__fold_slot_extend(struct fold_slot *slot, reshard_run *runs,
                          size_t *run_count, const reshard_copy *first,
                          uint64_t count, uint64_t part_stride,
                          uint64_t region_stride) {
  reshard_run *run = &runs[slot->run];
  uint64_t part_step = first->part_offset - slot->last_part;
  uint64_t region_step = first->region_offset - slot->last_region;
  bool forward = first->region_offset >= slot->last_region;
  uint64_t rest = count - 1;
  if (forward && run->count == 1) {
    /* The first copy is the run's second: it fixes the strides, and the
     * rest follow it only if the sequence steps alike. */
    run->part_stride = part_step;
    run->region_stride = region_step;
    run->count = 2;
  } else if (forward && part_step == run->part_stride &&
             region_step == run->region_stride) {
    run->count++;
  } else {
    /* A new run of the class from the first copy: with its rest, the
     * sequence itself. */
    slot->run = *run_count;
    runs[(*run_count)++] =
        (reshard_run){*first, count, rest > 0 ? part_stride : 0,
                      rest > 0 ? region_stride : 0};
    rest = 0;
  }
  if (rest > 0) {
    run = &runs[slot->run];
    if (run->part_stride == part_stride &&
        run->region_stride == region_stride) {
      run->count += rest;
    } else {
      slot->run = *run_count;
      reshard_copy second = *first;
      second.part_offset += part_stride;
      second.region_offset += region_stride;
      runs[(*run_count)++] =
          (reshard_run){second, rest, rest > 1 ? part_stride : 0,
                        rest > 1 ? region_stride : 0};
    }
  }
  slot->last_part = first->part_offset + (count - 1) * part_stride;
  slot->last_region = first->region_offset + (count - 1) * region_stride;
}

/* The folder's slot for `region_index`'s class when it belongs to the
 * open batch (recent[]), else NULL. */
static inline struct fold_slot *
reshard__run_folder_recent(const reshard__run_folder *folder,
                           uint64_t region_index) {
  struct fold_slot *slot = folder->recent[region_index % RESHARD__FOLD_RECENT];
  return slot != NULL && slot->stamp == folder->batch_count + 1 ? slot : NULL;
}

/* Folds one strided sequence into the open batch in line, as
 * reshard__run_folder_group of that one sequence would, when its class
 * is the one the folder last saw in its region (recent[]) and its first
 * copy follows that class's last: a compare and a few stores, no call.
 * False, with nothing changed, otherwise (a class new to the batch, a
 * copy out of order): the caller folds it the
 * general way. Used by the transfer walk (transfer_direct.c), whose
 * copies meet one class per region in turn. */
static inline bool reshard__run_folder_fast(reshard__run_folder *folder,
                                            const reshard_copy *first,
                                            uint64_t count,
                                            uint64_t part_stride,
                                            uint64_t region_stride) {
  struct fold_slot *slot =
      reshard__run_folder_recent(folder, first->region_index);
  if (slot == NULL || !reshard__fold_slot_takes(slot, first)) {
    return false;
  }
  reshard__fold_slot_extend(slot, folder->runs, &folder->run_count, first,
                            count, part_stride, region_stride);
  folder->open_copies += (size_t)count;
  return true;
}

/* Closes the open batch. */
void reshard__run_folder_close(reshard__run_folder *folder);
void reshard__run_folder_finish(const reshard__run_folder *folder,
                                reshard_runs *out);

/* Encodes batches as varint columns (see reshard/varint_columns.h) as
 * the batcher writes their copies, so each copy is encoded while it is
 * still in cache: push the rows written since the last call, close a
 * batch when the batcher closed it. */
typedef struct reshard__column_encoder {
  reshard_varint_batches out;
  reshard_arena *arena;
  reshard_arena *bytes_arena; /* where closed batches' bytes go */
  uint8_t *scratch;   /* RESHARD_COPY_COLUMNS columns of column_room bytes */
  size_t column_room; /* the longest column of a batch */
  uint8_t *cursor[RESHARD_COPY_COLUMNS]; /* the open batch's column ends */
  size_t rows;                           /* copies encoded */
  /* The last page reshard__column_encoder_page wrote, when it lies in the
   * open batch: its index, rows, and where each column's bytes for it
   * lie in the scratch. */
  bool page_valid;
  uint64_t page_index;
  uint64_t page_rows;
  uint8_t *page_start[RESHARD_COPY_COLUMNS];
  uint8_t *page_end[RESHARD_COPY_COLUMNS];
  uint64_t template_pages; /* pages that took those bytes */
} reshard__column_encoder;

/* Sizes the encoder for at most `max_batch_copies` copies in a batch and
 * `max_batches` batches; closed batches' bytes go to `bytes_arena`,
 * everything else to `arena`. */
reshard_status reshard__column_encoder_init(reshard__column_encoder *encoder,
                                            size_t max_batch_copies,
                                            size_t max_batches,
                                            reshard_arena *arena,
                                            reshard_arena *bytes_arena,
                                            reshard_error *err);
/* Appends `count` copies to the open batch. */
void reshard__column_encoder_rows(reshard__column_encoder *encoder,
                                  const reshard_copy *copies, size_t count);
/* Appends a group's copies (see reshard__group_expand) to the open batch,
 * read from the sequences. */
void reshard__column_encoder_group(reshard__column_encoder *encoder,
                                   const reshard_run *group, size_t width);
/* Appends page `page_index`'s groups (see reshard__page_sequences) to
 * the open batch: what reshard__column_encoder_group does group by group.
 * A page shifted from the page this call encoded last, in the same batch,
 * takes that page's bytes for the columns the shift leaves alone. */
void reshard__column_encoder_page(reshard__column_encoder *encoder,
                                  const reshard__page_sequences *page,
                                  uint64_t page_index);
/* Closes the open batch. */
reshard_status reshard__column_encoder_close(reshard__column_encoder *encoder,
                                             reshard_error *err);
/* Whether copies `a` and `b`, `count` each, are equal but for their part
 * and region indices: a batch of `b` is then encoded as one of `a` with
 * those two columns written anew (reshard__column_encoder_renamed). */
bool reshard__copies_renamed(const reshard_copy *a, const reshard_copy *b,
                             size_t count);
/* Encodes `count` copies as a batch of their own and closes it, taking
 * every column but the part and region indices from closed batch `like`,
 * whose copies they equal but for those (reshard__copies_renamed). The
 * open batch must be empty. */
reshard_status reshard__column_encoder_renamed(reshard__column_encoder *encoder,
                                               const reshard_copy *copies,
                                               size_t count, size_t like,
                                               reshard_error *err);
/* The same for `count` copies never written, known to be closed batch
 * `like`'s (as many) with every part index `part_index` and every region
 * index `region_index`: those two columns one value repeated. */
reshard_status reshard__column_encoder_renamed_to(
    reshard__column_encoder *encoder, size_t count, size_t like,
    uint64_t part_index, uint64_t region_index, reshard_error *err);

/* One load plan in progress (reshard_plan_load): plan.c checks the request
 * and drives both passes; select.c runs pass 1, choosing each page's source
 * and counting what lowering will cost; plan.c lowers and batches the
 * chosen pages (pass 2). */
typedef struct reshard__planner {
  const reshard_load_request *request;
  const reshard_placement_part *part;
  reshard_bound_binding binding; /* unused for pooled memory */
  reshard__range_cursor cursor;
  /* The last page pass 1 counted: its source, its cost, and over pooled
   * memory where it starts in its block; over a binding where it starts,
   * its open ranges group by group (room for `counted_room`) and how many
   * each group held. */
  const reshard_join *counted_join;
  uint64_t counted_phase;
  reshard__page_cost counted;
  uint64_t counted_start;
  size_t *counted_ranges;
  size_t counted_room;
  size_t *counted_open; /* per group */
  bool *page_alike;     /* per page: alike the page before (counted_shape) */
  /* The last source descriptor found equal to the target's: sources
   * are immutable for the call, and most pages share one layout. */
  const reshard_descriptor *matching_descriptor;
  const reshard_join **joins; /* per source, built on first use */
  reshard_join **built;       /* per source, what this plan built */
  uint64_t head_bytes[2];
  reshard_arena *arena;
  reshard_error *err;
  /* Growable scratch for comparing candidate layouts of one page. */
  reshard_copy *trial_copies;
  reshard_copy *trial_out;
  reshard__keyed *trial_keys;
  reshard__keyed *trial_spare;
  size_t trial_capacity;
  uint64_t *page_bytes; /* per hit page, what lowering it moves */
  reshard__sequence_scratch sequence_scratch;
  /* A stretch of a group cut at a batch boundary (sequence_scratch.room
   * entries, made the first time one is needed). */
  reshard_run *stretch;
  /* The runs the last page folded into, runs [first, end) of the
   * folder, when that page was folded from its sequences wholly inside
   * one batch: a page that is it shifted one amount per region takes
   * them moved (reshard__run_folder_shifted) instead of folding. */
  struct {
    uint64_t page;
    size_t first, end;
    bool valid;
  } run_template;
  /* The last page folded from its sequences wholly inside one batch
   * over pooled memory: the cut_chain it was folded in, its runs
   * [first, end) of the folder, and its sequences' first region offsets
   * (`room` entries), so that a later whole page of the same chain
   * takes those runs moved even when pages cut by batches came between
   * (S4's pages alternate whole and cut). */
  struct {
    bool valid;
    uint64_t chain;
    size_t first, end;
    size_t count;
    uint64_t *region_offsets;
    size_t room;
  } whole_template;
  /* Runs of pages cut by batch boundaries, kept per place in the batch
   * where such a page starts (plan.c, `cut_template`), made on first
   * use; `cut_chain` counts the pages that were not the page before
   * them shifted, and `cut_shift` / `cut_mark` (per region index) hold a
   * template's shift while it is checked. */
  struct reshard__cut_template *cut_templates;
  size_t cut_next;
  uint64_t cut_chain;
  uint64_t *cut_shift;
  uint64_t *cut_mark;
  uint64_t cut_serial;
  unsigned cut_misses; /* templates left since one was taken */
  /* Pages whose sequences could not stand for their copies; past a few,
   * the plan stops trying and lowers copy by copy. */
  unsigned sequence_refusals;
  /* Whether the plan writes every copy: unless the caller reads only runs
   * or varint columns (request.omit_copies). */
  bool keep_copies;
  /* Whether the kept copies are written streamed: at least
   * RESHARD__STREAM_COPIES_MIN_BYTES of them. */
  bool stream_copies;
} reshard__planner;

/* The plan's errors when memory runs out or the caller asks it to stop. */
reshard_status reshard__plan_no_memory(reshard__planner *plan);
reshard_status reshard__plan_deadline(reshard__planner *plan);

static inline bool
reshard__plan_stop_requested(const reshard_load_request *request) {
  return request->should_stop != NULL &&
         request->should_stop(request->should_stop_context);
}

/* Context for counting or lowering page `page` from the source `join`,
 * through the plan's cursor (the caller advanced it to that page). */
static inline reshard__page_lowering
reshard__plan_page_lowering(reshard__planner *plan, const reshard_join *join,
                            uint64_t page) {
  return (reshard__page_lowering){
      .join = join,
      .cursor = &plan->cursor,
      .page_index = page,
      .page_size = plan->request->placement->descriptor.page_size,
      .head_bytes = {plan->head_bytes[0], plan->head_bytes[1]},
      .alike = plan->page_alike[page],
  };
}

/* Pass 1 (select.c): the hit prefix, its sources (out->page_source,
 * out->hit_pages), what lowering it will cost (out->bytes,
 * out->copies_before_coalescing, plan->page_bytes), all before any copy is
 * materialised; *largest_page is the most copies (before coalescing) one
 * page lowers to. */
reshard_status reshard__select_sources(reshard__planner *plan,
                                       reshard_load_plan *out,
                                       uint64_t *largest_page);
/* Frees the scratch in which select.c compares candidate layouts. */
void reshard__plan_free_trial(reshard__planner *plan);

#endif
