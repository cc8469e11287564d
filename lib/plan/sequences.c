/* A page as strided sequences (SPEC §2.2 steps 3-4 without a copy at a
 * time): the common memory shapes lower a page to a few dozen sequences of
 * equal strides, whose copies in source order are either the sequences one
 * after another or, when the Part keeps tokens outermost, the k-th copy of
 * every sequence in turn. When no two of those copies coalesce, the sorted
 * sequences are the coalesced page; anything else is left to the copy by
 * copy path, which handles every shape. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "plan/plan_internal.h"

static uint64_t position(const uint64_t *part_base, const reshard_copy *copy) {
  return part_base[copy->part_index] + copy->part_offset;
}

/* Whether `a` ends where `b` starts in the Part. */
static bool touch_in_part(const reshard_copy *a, const reshard_copy *b) {
  return a->part_index == b->part_index &&
         a->part_offset + a->nbytes == b->part_offset;
}

/* Whether `a` ends where `b` starts in the region. */
static bool touch_in_region(const reshard_copy *a, const reshard_copy *b) {
  return a->region_index == b->region_index &&
         a->region_offset + a->nbytes == b->region_offset;
}

/* Whether some copy k of `from` ends in the region where the next copy in
 * source order, copy k (k + 1 when `next_row`) of `to`, starts: then the
 * two would coalesce when they also touch in the Part. With unequal
 * region strides that depends on k; such groups count as touching. */
static bool touches_in_region(const reshard_run *from, const reshard_run *to,
                              bool next_row) {
  if (from->first.region_index != to->first.region_index) {
    return false;
  }
  if (from->region_stride != to->region_stride) {
    return true;
  }
  uint64_t to_start =
      to->first.region_offset + (next_row ? to->region_stride : 0);
  return from->first.region_offset + from->first.nbytes == to_start;
}

/* Whether touches_in_region(from, to, ...) compared region offsets, which
 * a page shifted block by block may move apart or together: not when the
 * region or the strides alone decided. */
static bool moves_with_region(const reshard_run *from, const reshard_run *to) {
  return from->first.region_index == to->first.region_index &&
         from->region_stride == to->region_stride;
}

/* The end of sequence `i`'s first group in `sorted`, or 0 when the page
 * does not split into groups whose copies are the sequences of each group
 * in turn without coalescing. A group is one sequence, or sequences in
 * lockstep: equal counts and Part strides, all first copies within one
 * stride, each ending before the next starts, so source order takes copy k
 * of each in turn, and no copy continuing the one before it in both the
 * Part and the region. The group's copies all lie before the next
 * group's first, and its last copy does not coalesce with that one. */
static size_t group_end(const reshard_run *sorted, size_t count, size_t i,
                        const uint64_t *part_base, bool *region_free) {
  const reshard_run *head = &sorted[i];
  uint64_t start = position(part_base, &head->first);
  size_t end = i + 1;
  if (head->count > 1) {
    while (end < count && sorted[end].count == head->count &&
           sorted[end].part_stride == head->part_stride &&
           position(part_base, &sorted[end].first) <
               start + head->part_stride) {
      end++;
    }
  }
  for (size_t s = i; end - i > 1 && s < end; s++) {
    /* Copy k of sequence s is followed by copy k of s + 1, or by copy
     * k + 1 of the group's first after its last. */
    const reshard_run *from = &sorted[s];
    const reshard_run *to = s + 1 < end ? &sorted[s + 1] : head;
    uint64_t shift = s + 1 < end ? 0 : head->part_stride;
    uint64_t from_end = position(part_base, &from->first) + from->first.nbytes;
    uint64_t to_start = position(part_base, &to->first) + shift;
    if (from_end > to_start) {
      return 0;
    }
    if (from_end == to_start) {
      if (touches_in_region(from, to, shift > 0)) {
        return 0;
      }
      *region_free &= !moves_with_region(from, to);
    }
  }
  if (end < count) {
    const reshard_run *last_sequence = &sorted[end - 1];
    reshard_copy last =
        reshard_run_copy(last_sequence, last_sequence->count - 1);
    if (position(part_base, &last) + last.nbytes >
        position(part_base, &sorted[end].first)) {
      return 0;
    }
    if (touch_in_part(&last, &sorted[end].first)) {
      if (touch_in_region(&last, &sorted[end].first)) {
        return 0;
      }
      *region_free &= last.region_index != sorted[end].first.region_index;
    }
  }
  return end;
}

bool reshard__sequence_page(const reshard__page_lowering *lowering,
                            reshard__sequence_scratch *scratch,
                            reshard__page_sequences *out) {
  const uint64_t *part_base = lowering->join->part_base;
  bool reused;
  /* A page moved by one amount per region is taken from `sorted` below
   * when that is current: `lowered` need not move with it. */
  scratch->memo.defer = scratch->sorted_current;
  size_t count = reshard__lower_page_sequences(
      lowering, scratch->lowered, scratch->room, &scratch->memo, &reused);
  if (count == SIZE_MAX || count == 0) {
    scratch->sorted_current = false;
    return false;
  }
  if (reused && scratch->memo.uniform && scratch->sorted_current) {
    /* Every copy of a region moved by one amount: touching, coalescing
     * and grouping, which compare copies of one region only, come out as
     * they did, so the remembered coalesced page, moved, is this one. */
    const uint64_t *region_shift = scratch->memo.region_shift;
    reshard_run *sorted = scratch->sorted;
    /* In locals, as the stores could alias them. */
    uint64_t page_index = lowering->page_index;
    size_t sorted_count = scratch->sorted_count;
    for (size_t i = 0; i < sorted_count; i++) {
      sorted[i].first.page_index = page_index;
      sorted[i].first.region_offset +=
          region_shift[sorted[i].first.region_index];
    }
    *out = (reshard__page_sequences){
        .sequences = sorted,
        .count = scratch->sorted_count,
        .group_ends = scratch->group_ends,
        .group_count = scratch->sorted_groups,
        .copies = scratch->sorted_copies,
        .reused = true,
        .shifted = true,
        .from_page = scratch->sorted_page,
        .region_shift = region_shift,
        .shape = scratch->sorted_shape,
    };
    scratch->sorted_page = lowering->page_index;
    return true;
  }
  if (reused && scratch->sorted_current && scratch->sorted_region_free) {
    /* Moved by other amounts, but the remembered page's grouping looked at
     * no region offset: no two of its sequences met in the Part, where
     * this page's lie as they did. It groups the same, in the same order,
     * with nothing coalesced. */
    for (size_t i = 0; i < count; i++) {
      scratch->sorted[i] = scratch->lowered[scratch->order[i]];
    }
    *out = (reshard__page_sequences){
        .sequences = scratch->sorted,
        .count = count,
        .group_ends = scratch->group_ends,
        .group_count = scratch->sorted_groups,
        .copies = scratch->sorted_copies,
        .reused = true,
        .shape = scratch->sorted_shape,
    };
    scratch->sorted_page = lowering->page_index;
    return true;
  }
  /* From here on `sorted` is rewritten: current again only if the page
   * groups. */
  scratch->sorted_current = false;
  if (!reused) {
    /* A shifted page keeps its Part positions, so its order too. */
    reshard__keyed *keys = scratch->keys;
    for (size_t i = 0; i < count; i++) {
      keys[i] =
          (reshard__keyed){position(part_base, &scratch->lowered[i].first), i};
    }
    const reshard__keyed *sorted =
        reshard__sort_keyed(keys, scratch->spare, count);
    for (size_t i = 0; i < count; i++) {
      scratch->order[i] = sorted[i].index;
    }
  }
  /* Single copies that continue one another coalesce here (whole blocks
   * that happen to lie back to back on both sides); copies of longer
   * sequences that would are refused below. */
  size_t kept = 0;
  uint64_t copies = 0;
  bool region_free = true;
  for (size_t i = 0; i < count; i++) {
    const reshard_run *next = &scratch->lowered[scratch->order[i]];
    reshard_run *previous = kept > 0 ? &scratch->sorted[kept - 1] : NULL;
    if (previous != NULL && previous->count == 1 && next->count == 1 &&
        touch_in_part(&previous->first, &next->first)) {
      region_free &= previous->first.region_index != next->first.region_index;
      if (touch_in_region(&previous->first, &next->first)) {
        previous->first.nbytes += next->first.nbytes;
        continue;
      }
    }
    scratch->sorted[kept++] = *next;
    copies += next->count;
  }
  count = kept;
  size_t groups = 0;
  for (size_t i = 0; i < count;) {
    size_t end = group_end(scratch->sorted, count, i, part_base, &region_free);
    if (end == 0) {
      return false;
    }
    scratch->group_ends[groups++] = end;
    i = end;
  }
  scratch->sorted_current = true;
  scratch->sorted_region_free = region_free;
  scratch->sorted_count = count;
  scratch->sorted_groups = groups;
  scratch->sorted_copies = copies;
  scratch->sorted_page = lowering->page_index;
  scratch->sorted_shape++;
  *out = (reshard__page_sequences){
      .sequences = scratch->sorted,
      .count = count,
      .group_ends = scratch->group_ends,
      .group_count = groups,
      .copies = copies,
      .reused = reused,
      .shape = scratch->sorted_shape,
  };
  return true;
}

/* Streamed only where the target stores 16 aligned bytes past the caches;
 * a copy is 48 bytes, so an aligned `out` stays aligned. */
static inline bool stream_to(const reshard_copy *out, bool streamed) {
#if defined(__SSE2__)
  return streamed && ((uintptr_t)out & 15) == 0;
#else
  (void)out;
  (void)streamed;
  return false;
#endif
}

void reshard__stream_fence(void) {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

#if defined(__GNUC__)
/* Two adjacent fields of a reshard_copy as one 16-byte value, so a copy
 * is written in three stores rather than six: writing a plan's copies is
 * bound by stores, not arithmetic (S1: 131 072 copies, 6 MiB, one pass).
 * On the 2-core machine of docs/performance.md a loop of six 8-byte
 * stores a copy ran at about half the speed of three 16-byte ones. */
typedef uint64_t copy_pair __attribute__((vector_size(16)));

/* Copy `first` moved by the two steps, as three 16-byte stores:
 * (page, part), (part offset, region), (region offset, nbytes). */
static inline void put_copy(reshard_copy *out, const reshard_copy *first,
                            copy_pair part_step, copy_pair region_step,
                            bool streamed) {
  const char *from = (const char *)first;
  copy_pair head, part, region;
  memcpy(&head, from, sizeof head);
  memcpy(&part, from + 16, sizeof part);
  memcpy(&region, from + 32, sizeof region);
  part += part_step;
  region += region_step;
  char *to = (char *)out;
  (void)streamed; /* without SSE2, stream_to never asks */
#if defined(__SSE2__)
  if (streamed) {
    _mm_stream_si128((__m128i *)to, (__m128i)head);
    _mm_stream_si128((__m128i *)(to + 16), (__m128i)part);
    _mm_stream_si128((__m128i *)(to + 32), (__m128i)region);
    return;
  }
#endif
  memcpy(to, &head, sizeof head);
  memcpy(to + 16, &part, sizeof part);
  memcpy(to + 32, &region, sizeof region);
}

/* The loop of reshard__group_expand, with `streamed` a constant in each
 * of its two uses. */
__attribute__((always_inline)) static inline reshard_copy *
expand_group(const reshard_run *group, size_t width, reshard_copy *out,
             bool streamed) {
  for (uint64_t k = 0; k < group->count; k++) {
    for (size_t s = 0; s < width; s++) {
      put_copy(out++, &group[s].first, (copy_pair){k * group[s].part_stride, 0},
               (copy_pair){k * group[s].region_stride, 0}, streamed);
    }
  }
  return out;
}

reshard_copy *reshard__group_expand(const reshard_run *group, size_t width,
                                    reshard_copy *out, bool streamed) {
  return stream_to(out, streamed) ? expand_group(group, width, out, true)
                                  : expand_group(group, width, out, false);
}
#else
reshard_copy *reshard__group_expand(const reshard_run *group, size_t width,
                                    reshard_copy *out, bool streamed) {
  (void)streamed;
  for (uint64_t k = 0; k < group->count; k++) {
    for (size_t s = 0; s < width; s++) {
      *out++ = reshard_run_copy(&group[s], k);
    }
  }
  return out;
}
#endif

void reshard__page_sequences_expand(const reshard__page_sequences *page,
                                    reshard_copy *out, bool streamed) {
  if (page->copies == page->count) {
    /* Every sequence one copy (copies are at least one a sequence; S5's
     * whole blocks, 62 a page): however they group, the copies are the
     * sequences' first copies in order. */
    if (streamed) {
      /* Each sequence is a group of one row. */
      reshard__group_expand(page->sequences, page->count, out, true);
      return;
    }
    for (size_t i = 0; i < page->count; i++) {
      out[i] = page->sequences[i].first;
    }
    return;
  }
  size_t first = 0;
  for (size_t g = 0; g < page->group_count; g++) {
    size_t end = page->group_ends[g];
    const reshard_run *group = &page->sequences[first];
    if (end - first == 1 && group->count == 1 && !streamed) {
      /* A group of one copy: the copy, without a call and its two
       * loops. */
      *out++ = group->first;
    } else {
      out = reshard__group_expand(group, end - first, out, streamed);
    }
    first = end;
  }
}
