#include "reshard/join.h"

#include <stdalign.h>
#include <stdlib.h>

/* The layout's fragments of one layer, ordered by head: the interval index
 * the join searches instead of scanning heads. */
typedef struct indexed_fragment {
  uint64_t layer_index; /* in the descriptor */
  uint64_t head_start;
  size_t shard;
  size_t local_layer;
} indexed_fragment;

static int compare_indexed(const void *a, const void *b) {
  const indexed_fragment *x = a;
  const indexed_fragment *y = b;
  if (x->layer_index != y->layer_index) {
    return x->layer_index < y->layer_index ? -1 : 1;
  }
  return (x->head_start > y->head_start) - (x->head_start < y->head_start);
}

/* First index in [low, high) whose fragment ends after `head`; fragments of
 * one layer tile the heads, so ends grow with starts. */
static size_t first_ending_after(const reshard_layout *layout,
                                 const indexed_fragment *index, size_t low,
                                 size_t high, uint64_t head) {
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    const reshard_shard *shard = &layout->shards[index[mid].shard];
    if (shard->head_start + shard->head_count <= head) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low;
}

/* Range of `index` holding descriptor layer `layer_index`. */
static void layer_bounds(const indexed_fragment *index, size_t count,
                         uint64_t layer_index, size_t *start, size_t *end) {
  size_t low = 0, high = count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (index[mid].layer_index < layer_index) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  *start = low;
  high = count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (index[mid].layer_index <= layer_index) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  *end = low;
}

static size_t align_up(size_t value, size_t alignment) {
  return (value + alignment - 1) & ~(alignment - 1);
}

reshard_join *reshard_join_build(const reshard_layout *layout,
                                 const reshard_placement_part *part,
                                 reshard_error *err) {
  const reshard_descriptor *descriptor = &layout->descriptor;
  size_t fragment_count = 0;
  for (size_t s = 0; s < layout->shard_count; s++) {
    fragment_count += layout->shards[s].layer_count;
  }
  indexed_fragment *index =
      malloc((fragment_count ? fragment_count : 1) * sizeof *index);
  if (index == NULL) {
    reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                      "join: out of memory for the fragment index");
    return NULL;
  }
  size_t n = 0;
  for (size_t s = 0; s < layout->shard_count; s++) {
    const reshard_shard *shard = &layout->shards[s];
    for (size_t l = 0; l < shard->layer_count; l++) {
      index[n++] = (indexed_fragment){
          .layer_index = (uint64_t)reshard_descriptor_layer_index(
              descriptor, shard->layer_ids[l]),
          .head_start = shard->head_start,
          .shard = s,
          .local_layer = l,
      };
    }
  }
  qsort(index, n, sizeof *index, compare_indexed);

  uint64_t head_start = part->head_start;
  uint64_t head_end = part->head_start + part->head_count;
  unsigned components = reshard_component_count(descriptor);
  size_t group_count = part->layer_count * 2;

  /* First pass counts the entries so the join is one allocation. */
  size_t entry_count = 0;
  for (size_t l = 0; l < part->layer_count; l++) {
    size_t start, end;
    layer_bounds(index, n,
                 (uint64_t)reshard_descriptor_layer_index(descriptor,
                                                          part->layer_ids[l]),
                 &start, &end);
    for (size_t f = first_ending_after(layout, index, start, end, head_start);
         f < end && index[f].head_start < head_end; f++) {
      entry_count += components;
    }
  }
  size_t offset_groups = align_up(sizeof(reshard_join), alignof(size_t));
  size_t offset_entries =
      align_up(offset_groups + (group_count + 1) * sizeof(size_t),
               alignof(reshard_join_entry));
  size_t offset_bases =
      align_up(offset_entries + entry_count * sizeof(reshard_join_entry),
               alignof(uint64_t));
  size_t total = offset_bases + (layout->shard_count + 1) * sizeof(uint64_t);
  unsigned char *block = malloc(total);
  if (block == NULL) {
    free(index);
    reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                      "join: out of memory for %zu entries", entry_count);
    return NULL;
  }
  reshard_join *join = (reshard_join *)block;
  join->group_count = group_count;
  join->group_start = (size_t *)(block + offset_groups);
  join->entries = (reshard_join_entry *)(block + offset_entries);
  join->entry_count = entry_count;
  join->part_base = (uint64_t *)(block + offset_bases);
  join->part_count = layout->shard_count;
  join->memory_bytes = total;

  join->part_base[0] = 0;
  for (size_t s = 0; s < layout->shard_count; s++) {
    join->part_base[s + 1] =
        join->part_base[s] + reshard_layout_part_bytes(layout, s);
  }
  join->page_bytes = join->part_base[layout->shard_count];

  size_t e = 0;
  for (size_t l = 0; l < part->layer_count; l++) {
    size_t start, end;
    layer_bounds(index, n,
                 (uint64_t)reshard_descriptor_layer_index(descriptor,
                                                          part->layer_ids[l]),
                 &start, &end);
    size_t first = first_ending_after(layout, index, start, end, head_start);
    for (unsigned c = 0; c < 2; c++) {
      reshard_component component =
          c == 0 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE;
      join->group_start[l * 2 + c] = e;
      if (c >= components) {
        continue;
      }
      for (size_t f = first; f < end && index[f].head_start < head_end; f++) {
        reshard_fragment fragment;
        reshard_layout_fragment(layout, index[f].shard, index[f].local_layer,
                                component, &fragment);
        uint64_t clip_start =
            fragment.head_start > head_start ? fragment.head_start : head_start;
        uint64_t fragment_end = fragment.head_start + fragment.head_count;
        uint64_t clip_end = fragment_end < head_end ? fragment_end : head_end;
        join->entries[e++] = (reshard_join_entry){
            .part_index = fragment.part_index,
            .part_offset =
                fragment.part_offset +
                (clip_start - fragment.head_start) * fragment.head_stride,
            .head_start = clip_start,
            .head_end = clip_end,
            .token_stride = fragment.token_stride,
            .head_stride = fragment.head_stride,
        };
      }
    }
  }
  join->group_start[group_count] = e;
  free(index);
  return join;
}

void reshard_join_free(reshard_join *join) {
  free(join);
}
