/* The physical-disjointness proof of binding validation (SPEC §1.5): no
 * two bound values share a byte of memory, across ranges and regions. */
#include <stdbool.h>
#include <string.h>

#include "base/keyed_sort.h"
#include "model/binding_internal.h"
#include "reshard/arena.h"
#include "reshard/checked.h"

/* One maximal run of contiguous bytes of a range, at an absolute address. */
typedef struct byte_run {
  uint64_t start;
  uint64_t end;
  size_t range; /* index into the sorted bound ranges */
} byte_run;

/* How a range decomposes into contiguous runs: whole block, one per token,
 * or one per (token, head). */
static uint64_t run_count(const reshard_bound_range *range, uint64_t hb) {
  uint64_t tokens = range->token_end - range->token_start;
  uint64_t heads = range->head_end - range->head_start;
  if (range->head_stride != hb && heads > 1) {
    return tokens * heads;
  }
  if (range->token_stride != heads * hb && tokens > 1) {
    return tokens;
  }
  return 1;
}

static uint64_t range_first_byte(const reshard__binding_validation *v,
                                 const reshard_bound_range *range) {
  return v->binding->regions[range->region_index].address +
         range->region_offset;
}

static uint64_t range_extent(const reshard_bound_range *range, uint64_t hb) {
  return (range->token_end - range->token_start - 1) * range->token_stride +
         (range->head_end - range->head_start - 1) * range->head_stride + hb;
}

static uint64_t bound_head_bytes(const reshard__binding_validation *v,
                                 const reshard_bound_range *range) {
  return v->head_bytes[range->component];
}

/* Slots of the table pass per range, at most: past that, the spans lie
 * too sparsely for a table to beat the sort. */
enum { SLOTS_PER_RANGE = 4 };

/* Whether no two of the `count` ranges' spans overlap, proved without a
 * sort: with 2^shift at most the shortest span, two spans that start in
 * one slot of 2^shift bytes overlap, so when no slot holds two starts,
 * the slots list the spans in address order, one each, and a pass over
 * them compares each start with the ends before it. false means an
 * overlap, spans too sparse for the table, or no memory: the sorted proof
 * then decides. S5's 15 872 spans of 16 KiB take two such slots per
 * range where the radix sort took three passes. */
static bool spans_apart(const reshard__binding_validation *v, size_t count) {
  const reshard__binding_span *spans = v->spans;
  if (spans == NULL || v->span_shortest == 0 || count >= UINT32_MAX) {
    return false;
  }
  unsigned shift = 63 - (unsigned)__builtin_clzll(v->span_shortest);
  uint64_t slots = ((v->span_high - 1 - v->span_low) >> shift) + 1;
  if (slots > (uint64_t)count * SLOTS_PER_RANGE) {
    return false;
  }
  /* Range i + 1 at its start's slot, 0 where none starts. */
  uint32_t *table = RESHARD_ARENA_ARRAY(v->arena, uint32_t, (size_t)slots);
  if (table == NULL) {
    return false;
  }
  memset(table, 0, (size_t)slots * sizeof *table);
  for (size_t i = 1; i <= count; i++) {
    uint32_t *slot = &table[(spans[i].start - v->span_low) >> shift];
    if (*slot != 0) {
      return false;
    }
    *slot = (uint32_t)i;
  }
  /* Without a branch per slot (about half of them are empty, at random):
   * an empty slot reads the sentinel spans[0], which starts past every
   * end and ends before every start. */
  uint64_t end = 0;
  bool overlap = false;
  for (size_t slot = 0; slot < (size_t)slots; slot++) {
    const reshard__binding_span *span = &spans[table[slot]];
    overlap |= span->start < end;
    end = span->end > end ? span->end : end;
  }
  return !overlap;
}

/* Whether no two spans of aligned page blocks overlap. Group g's page p
 * spans [start_g + d_p, + extent_g), where start_g is its page 0's start
 * and d_p the first group's page p's distance from its page 0 (the
 * caller's 2^63 bound on the spans makes these integers), so each group
 * reaches from its lowest page's start to its highest page's end. Groups
 * whose reaches meet form a cluster: blocks that hold a page of several
 * layers (block-major pools: one cluster of every group), or a layer's K
 * and V blocks side by side in a place of their own. Clusters lie apart
 * as their reaches do. Within one, page 0's blocks lie apart and no two
 * pages lie closer than they reach, from the lowest start to the highest
 * end, so page p's blocks are page 0's moved by d_p and no other page's
 * meet them. A layer-major pool is a cluster of one group a layer and
 * component. S5's 15 872 page blocks take a sort of 256 pages and one of
 * 62 groups. false when that does not hold (the other proofs decide) or
 * memory runs out. */
static bool aligned_pages_apart(const reshard__binding_validation *v,
                                const reshard_bound_range *ranges,
                                const reshard__aligned_pages *aligned) {
  const size_t *group_start = aligned->group_start;
  size_t group_count = aligned->group_count;
  size_t first = 0;
  while (first < group_count && group_start[first + 1] == group_start[first]) {
    first++;
  }
  if (first == group_count) {
    return false;
  }
  /* Room for a key a page and one a group from the first on, empty or
   * not. */
  size_t pages = group_start[first + 1] - group_start[first];
  size_t room = pages + (group_count - first);
  reshard__keyed *keys = RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, room);
  reshard__keyed *spare = RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, room);
  if (keys == NULL || spare == NULL) {
    return false;
  }
  const uint64_t *place =
      aligned->places + group_start[first] * aligned->stride;
  for (size_t p = 0; p < pages; p++) {
    keys[p] = (reshard__keyed){place[p * aligned->stride], p};
  }
  const reshard__keyed *by_place = reshard__sort_keyed(keys, spare, pages);
  uint64_t closest = UINT64_MAX;
  for (size_t p = 1; p < pages; p++) {
    uint64_t gap = by_place[p].key - by_place[p - 1].key;
    closest = gap < closest ? gap : closest;
  }
  /* How far the lowest page lies below page 0, and the highest above. */
  uint64_t below = place[0] - by_place[0].key;
  uint64_t above = by_place[pages - 1].key - place[0];
  keys += pages;
  spare += pages;
  size_t groups = 0;
  for (size_t g = first; g < group_count; g++) {
    if (group_start[g + 1] > group_start[g]) {
      keys[groups++] = (reshard__keyed){
          range_first_byte(v, &ranges[group_start[g]]), group_start[g]};
    }
  }
  const reshard__keyed *by_start = reshard__sort_keyed(keys, spare, groups);
  /* Every bound below is a span's: page 0's, or the group's page that
   * lies lowest or highest. None wraps. */
  uint64_t cluster_low = 0, page_end = 0, reach_end = 0;
  for (size_t k = 0; k < groups; k++) {
    const reshard_bound_range *range = &ranges[by_start[k].index];
    uint64_t start = by_start[k].key;
    uint64_t end = start + range_extent(range, bound_head_bytes(v, range));
    if (k == 0 || start - below >= reach_end) {
      /* A cluster of its own: the one before it ends here. */
      if (k > 0 && closest < page_end - cluster_low) {
        return false;
      }
      cluster_low = start; /* past page_end: the reaches held it */
    } else if (start < page_end) {
      return false; /* two of page 0's blocks meet */
    }
    page_end = end > page_end ? end : page_end;
    reach_end = end + above > reach_end ? end + above : reach_end;
  }
  return closest >= page_end - cluster_low;
}

/* Proves no two values share a byte. Ranges whose bounding spans touch no
 * other span are disjoint by construction (within a range the stride rules
 * already separate values); only clusters of overlapping spans are broken
 * into runs and compared, after their run count was charged as work. */
reshard_status
reshard__binding_check_disjoint(reshard__binding_validation *v,
                                const reshard_bound_range *ranges, size_t count,
                                const reshard__aligned_pages *aligned) {
  if (count < 2 ||
      (aligned != NULL && aligned_pages_apart(v, ranges, aligned)) ||
      spans_apart(v, count)) {
    return RESHARD_OK;
  }
  byte_run *runs = RESHARD_ARENA_ARRAY(v->arena, byte_run, count);
  reshard__keyed *keyed = RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, count);
  reshard__keyed *spare = RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, count);
  byte_run *spans = RESHARD_ARENA_ARRAY(v->arena, byte_run, count);
  if (runs == NULL || keyed == NULL || spare == NULL || spans == NULL) {
    return reshard__binding_no_memory(v);
  }
  for (size_t r = 0; r < count; r++) {
    uint64_t start = range_first_byte(v, &ranges[r]);
    runs[r] = (byte_run){
        .start = start,
        .end =
            start + range_extent(&ranges[r], bound_head_bytes(v, &ranges[r])),
        .range = r,
    };
    keyed[r] = (reshard__keyed){start, r};
  }
  const reshard__keyed *order = reshard__sort_keyed(keyed, spare, count);
  for (size_t r = 0; r < count; r++) {
    spans[r] = runs[order[r].index];
  }
  size_t cluster_start = 0;
  uint64_t cluster_end = spans[0].end;
  for (size_t s = 1; s <= count; s++) {
    if (s < count && spans[s].start < cluster_end) {
      if (spans[s].end > cluster_end) {
        cluster_end = spans[s].end;
      }
      continue;
    }
    size_t members = s - cluster_start;
    if (members > 1) {
      uint64_t piece_count = 0;
      for (size_t m = cluster_start; m < s; m++) {
        const reshard_bound_range *range = &ranges[spans[m].range];
        if (!reshard_add(piece_count,
                         run_count(range, bound_head_bytes(v, range)),
                         &piece_count)) {
          piece_count = UINT64_MAX;
        }
      }
      reshard_status status =
          reshard__binding_spend_work(v, piece_count, "the disjointness proof");
      if (status) {
        return status;
      }
      byte_run *pieces = RESHARD_ARENA_ARRAY(v->arena, byte_run, piece_count);
      if (pieces == NULL) {
        return reshard__binding_no_memory(v);
      }
      size_t n = 0;
      for (size_t m = cluster_start; m < s; m++) {
        const reshard_bound_range *range = &ranges[spans[m].range];
        uint64_t hb = bound_head_bytes(v, range);
        uint64_t tokens = range->token_end - range->token_start;
        uint64_t heads = range->head_end - range->head_start;
        uint64_t base = range_first_byte(v, range);
        uint64_t per_range = run_count(range, hb);
        if (per_range == 1) {
          pieces[n++] =
              (byte_run){base, base + range_extent(range, hb), spans[m].range};
        } else if (per_range == tokens) {
          for (uint64_t t = 0; t < tokens; t++) {
            uint64_t start = base + t * range->token_stride;
            pieces[n++] = (byte_run){start, start + heads * hb, spans[m].range};
          }
        } else {
          for (uint64_t t = 0; t < tokens; t++) {
            for (uint64_t h = 0; h < heads; h++) {
              uint64_t start =
                  base + t * range->token_stride + h * range->head_stride;
              pieces[n++] = (byte_run){start, start + hb, spans[m].range};
            }
          }
        }
      }
      reshard__keyed *piece_keys =
          RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, n);
      reshard__keyed *piece_spare =
          RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, n);
      if (piece_keys == NULL || piece_spare == NULL) {
        return reshard__binding_no_memory(v);
      }
      for (size_t p = 0; p < n; p++) {
        piece_keys[p] = (reshard__keyed){pieces[p].start, p};
      }
      const reshard__keyed *piece_order =
          reshard__sort_keyed(piece_keys, piece_spare, n);
      for (size_t p = 1; p < n; p++) {
        const byte_run *before = &pieces[piece_order[p - 1].index];
        const byte_run *after = &pieces[piece_order[p].index];
        if (after->start < before->end) {
          return reshard_error_set(
              v->err, RESHARD_INVALID_ARGUMENT,
              "binding.ranges[%zu] and binding.ranges[%zu] share memory at "
              "address 0x%llx; no two values may share a byte",
              reshard__binding_source(v, before->range),
              reshard__binding_source(v, after->range),
              (unsigned long long)after->start);
        }
      }
    }
    if (s < count) {
      cluster_start = s;
      cluster_end = spans[s].end;
    }
  }
  return RESHARD_OK;
}
