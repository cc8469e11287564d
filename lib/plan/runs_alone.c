/* Pages whose sequences are runs of their own (SPEC §2.2 step 7 without a
 * fold): told from the page's sequences, and from the pairs of them that
 * share a region alone on a later page of the same shape, then written
 * piece by piece where batches cut the page. S3 read into one region per
 * layer: 320 sequences a page, each a run, each layer's region read by
 * the K and V of both blocks of the page. */
#include <string.h>

#include "plan/plan_internal.h"
#include "reshard/runs.h"

/* A group of the page being checked: its first sequence, its width, the
 * first copy of its last row in the page and, once asked for
 * (`cuts_known`), the columns of that row whose sequence a batch may
 * leave with its last copy alone (tail_cut). */
struct reshard__alone_group {
  size_t first, width;
  uint64_t last_row;
  bool cuts_known;
  size_t prefix_end, suffix_start;
};

/* Two sequences of one class and region, `before` of an earlier group than
 * `next` and the region's last before it: all that tells whether `next`
 * goes on with before's run but the two region offsets, which a page of
 * the same shape moves. */
struct reshard__alone_pair {
  size_t before, next;
  size_t group, column; /* before's */
  uint64_t span;        /* before's last region offset less its first */
  uint64_t region_stride;
  bool single;       /* before is one copy: any step forward goes on */
  bool part_goes_on; /* next starts a Part stride after before's last */
};

/* The page being checked, batches starting at its copy first_cut and
 * every cut_every after (none when first_cut is past its copies). */
typedef struct alone_page {
  const reshard__page_sequences *page;
  struct reshard__alone_group *groups;
  uint64_t first_cut, cut_every;
} alone_page;

/* Works out which columns of the group's last row a batch may leave with
 * their last copy alone: a batch starts after the copy before it (a row
 * back) and at or before the last. Those are the columns below
 * prefix_end (after a batch start in the row before) and from
 * suffix_start on (after one in the row). Once a group and page, and only
 * for groups a pair asks about. */
static void note_tail_cuts(const alone_page *check,
                           struct reshard__alone_group *group) {
  group->cuts_known = true;
  group->prefix_end = 0;
  group->suffix_start = group->width;
  if (check->first_cut >= check->page->copies) {
    return;
  }
  uint64_t row = group->last_row;
  uint64_t ahead; /* to the first batch start after the row's start */
  if (row < check->first_cut) {
    ahead = check->first_cut - row;
  } else {
    /* Back to the last batch start at or before the row's start. */
    uint64_t behind = (row - check->first_cut) % check->cut_every;
    if (behind < group->width) {
      group->prefix_end = group->width - (size_t)behind;
    }
    ahead = check->cut_every - behind;
  }
  if (ahead < group->width) {
    group->suffix_start = (size_t)ahead;
  }
}

/* Whether a batch may leave the last copy of column `column` of `group`
 * alone (note_tail_cuts). */
static inline bool tail_cut(const alone_page *check,
                            struct reshard__alone_group *group, size_t column) {
  if (!group->cuts_known) {
    note_tail_cuts(check, group);
  }
  return column < group->prefix_end || column >= group->suffix_start;
}

/* Notes each group of the page in folder->alone_groups; false when the
 * room cannot grow. */
static bool note_groups(reshard__run_folder *folder, alone_page *check) {
  const reshard__page_sequences *page = check->page;
  if (folder->alone_group_room < page->group_count) {
    folder->alone_groups = RESHARD_ARENA_ARRAY(
        folder->arena, struct reshard__alone_group, page->group_count);
    if (folder->alone_groups == NULL) {
      folder->alone_group_room = 0;
      return false;
    }
    folder->alone_group_room = page->group_count;
  }
  check->groups = folder->alone_groups;
  uint64_t group_first = 0; /* the group's first copy in the page */
  size_t first = 0;
  for (size_t g = 0; g < page->group_count; g++) {
    size_t width = page->group_ends[g] - first;
    uint64_t rows = page->sequences[first].count;
    check->groups[g] = (struct reshard__alone_group){
        .first = first,
        .width = width,
        .last_row = group_first + (rows - 1) * width,
    };
    group_first += rows * width;
    first = page->group_ends[g];
  }
  return true;
}

/* The pair of `before` (column `column` of group `group`) and `next`, the
 * next sequence of before's region, in *pair; false when next does not
 * come after before in the fold's order whatever their region offsets: of
 * another class (a page's sequences share its page index and these their
 * region; conservative: the region's last sequence would not be its
 * class's), or not after before's last copy in the Part (the fold's
 * order, or its refusal). */
static bool pair_of(const reshard_run *sequences, size_t before, size_t next,
                    size_t group, size_t column,
                    struct reshard__alone_pair *pair) {
  const reshard_run *a = &sequences[before], *b = &sequences[next];
  if (a->first.part_index != b->first.part_index ||
      a->first.nbytes != b->first.nbytes) {
    return false;
  }
  uint64_t steps = a->count - 1;
  uint64_t last_part = a->first.part_offset + steps * a->part_stride;
  if (b->first.part_offset <= last_part) {
    return false;
  }
  *pair = (struct reshard__alone_pair){
      .before = before,
      .next = next,
      .group = group,
      .column = column,
      .span = steps * a->region_stride,
      .region_stride = a->region_stride,
      .single = a->count == 1,
      .part_goes_on = b->first.part_offset - last_part == a->part_stride,
  };
  return true;
}

/* Whether the pair's `next` starts a run of its own after before's: it
 * starts back in the region, or off before's strides where no batch
 * leaves before's last copy alone (a run of one copy, which any later
 * copy forward of it continues). */
static inline bool pair_apart(const alone_page *check,
                              const struct reshard__alone_pair *pair) {
  const reshard_run *sequences = check->page->sequences;
  uint64_t last = sequences[pair->before].first.region_offset + pair->span;
  uint64_t next = sequences[pair->next].first.region_offset;
  if (next < last) {
    return true;
  }
  return !pair->single &&
         !(pair->part_goes_on && next - last == pair->region_stride) &&
         !tail_cut(check, &check->groups[pair->group], pair->column);
}

/* reshard__run_folder_alone for a page of the shape the pairs were noted
 * from: only the pairs' region offsets may differ. */
static bool pairs_apart(const reshard__run_folder *folder,
                        const alone_page *check) {
  for (size_t i = 0; i < folder->alone_pair_count; i++) {
    if (!pair_apart(check, &folder->alone_pairs[i])) {
      return false;
    }
  }
  return true;
}

/* What a pass over a page's sequences tells: alone; not, for the region
 * offsets of a pair of them (a page of its shape may be); or not for its
 * shape (no page of it is). */
typedef enum { ALONE, PAIRS_NOT_APART, SHAPE_NOT_ALONE } alone_answer;

/* reshard__run_folder_alone's pass over every sequence, noting the pairs
 * that share a region (room for one a sequence, allocated by the
 * caller), all of them unless the shape says no. */
static alone_answer sequences_apart(reshard__run_folder *folder,
                                    const alone_page *check) {
  const reshard__page_sequences *page = check->page;
  const reshard_run *sequences = page->sequences;
  /* Groups are marked from `page_serial` on: a mark below it is another
   * page's. */
  uint64_t page_serial = folder->group_serial + 1;
  alone_answer answer = ALONE;
  folder->alone_pair_count = 0;
  for (size_t g = 0; g < page->group_count; g++) {
    uint64_t serial = ++folder->group_serial;
    for (size_t s = check->groups[g].first; s < page->group_ends[g]; s++) {
      const reshard_run *sequence = &sequences[s];
      struct reshard__region_mark *mark =
          reshard__run_folder_region_mark(folder, sequence->first.region_index);
      if (mark == NULL || mark->serial == serial) {
        return SHAPE_NOT_ALONE; /* copies of one group interleave */
      }
      if (mark->serial >= page_serial) {
        size_t group = (size_t)(mark->serial - page_serial);
        struct reshard__alone_pair *pair =
            &folder->alone_pairs[folder->alone_pair_count++];
        if (!pair_of(sequences, mark->sequence, s, group,
                     mark->sequence - check->groups[group].first, pair)) {
          return SHAPE_NOT_ALONE;
        }
        if (answer == ALONE && !pair_apart(check, pair)) {
          answer = PAIRS_NOT_APART;
        }
      }
      *mark = (struct reshard__region_mark){serial, s};
      if (sequence->count < 2) {
        continue;
      }
      /* A lowered page's copies lie in their Parts and regions, so the
       * last copy's offsets, taken modulo 2^64, are the real ones: below
       * the first's where a stride steps back. */
      reshard_copy last = reshard_run_copy(sequence, sequence->count - 1);
      if (last.part_offset <= sequence->first.part_offset ||
          last.region_offset < sequence->first.region_offset) {
        return SHAPE_NOT_ALONE;
      }
    }
  }
  return answer;
}

bool reshard__run_folder_alone(reshard__run_folder *folder,
                               const reshard__page_sequences *page,
                               uint64_t first_cut, uint64_t cut_every,
                               uint64_t shape) {
  if (shape != 0 && shape == folder->alone_refused) {
    return false;
  }
  alone_page check = {
      .page = page,
      .first_cut = cut_every == 0 ? UINT64_MAX : first_cut,
      .cut_every = cut_every,
  };
  if (!note_groups(folder, &check)) {
    return false;
  }
  if (shape != 0 && shape == folder->alone_shape) {
    return pairs_apart(folder, &check);
  }
  folder->alone_shape = 0;
  if (folder->alone_pair_room < page->count) {
    folder->alone_pairs = RESHARD_ARENA_ARRAY(
        folder->arena, struct reshard__alone_pair, page->count);
    if (folder->alone_pairs == NULL) {
      folder->alone_pair_room = 0;
      return false;
    }
    folder->alone_pair_room = page->count;
  }
  alone_answer answer = sequences_apart(folder, &check);
  if (answer == SHAPE_NOT_ALONE) {
    folder->alone_refused = shape;
    return false;
  }
  folder->alone_shape = shape;
  return answer == ALONE;
}

void reshard__run_folder_alone_piece(reshard__run_folder *folder,
                                     const reshard__page_sequences *page,
                                     uint64_t from, uint64_t to) {
  reshard_run *out = folder->runs + folder->run_count;
  uint64_t group_first = 0; /* the group's first copy in the page */
  size_t first = 0;
  for (size_t g = 0; g < page->group_count && group_first < to; g++) {
    const reshard_run *group = page->sequences + first;
    size_t width = page->group_ends[g] - first;
    uint64_t group_end = group_first + group->count * width;
    if (from <= group_first && to >= group_end) {
      /* The whole group: its sequences are its runs. */
      for (size_t s = 0; s < width; s++, out++) {
        *out = group[s];
        if (out->count == 1) {
          out->part_stride = 0;
          out->region_stride = 0;
        }
      }
    } else if (from < group_end) {
      /* Copy i of the group is copy i / width of sequence i % width. The
       * piece's copies of the group are [begin, end): a sequence at or
       * past begin's column starts in begin's row, one before it in the
       * next, and each takes the rows up to end's, plus end's own row
       * when it lies before end's column. In that order their first
       * copies rise, so the first sequence with none ends the group. */
      uint64_t begin = from > group_first ? from - group_first : 0;
      uint64_t end = (to < group_end ? to : group_end) - group_first;
      uint64_t row = begin / width, last_row = end / width;
      size_t column = (size_t)(begin % width);
      size_t last_column = (size_t)(end % width);
      for (size_t i = 0; i < width; i++) {
        size_t s = column + i < width ? column + i : column + i - width;
        uint64_t k = row + (s < column);
        uint64_t past = last_row + (s < last_column);
        if (past <= k) {
          break;
        }
        uint64_t count = past - k;
        const reshard_run *sequence = &group[s];
        *out++ = (reshard_run){reshard_run_copy(sequence, k), count,
                               count > 1 ? sequence->part_stride : 0,
                               count > 1 ? sequence->region_stride : 0};
      }
    }
    group_first = group_end;
    first = page->group_ends[g];
  }
  folder->run_count = (size_t)(out - folder->runs);
  folder->open_copies += (size_t)(to - from);
}
