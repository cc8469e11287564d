/* Binding validation (SPEC §1.5), reshard_binding_validate: the counts,
 * the regions indexed by id, every per-range rule, and the ranges sorted
 * into (layer, component) groups; then the proofs over the sorted ranges,
 * the head tiling (binding_tiling.c) and the physical disjointness
 * (binding_disjoint.c).
 *
 * Validation runs in the order the work bounds are known: counts first,
 * then per-range arithmetic (linear), then the head-tiling sweep and the
 * physical-disjointness proof, each after its work bound was checked
 * against max_validation_work. */
#include "reshard/binding.h"

#include <stdlib.h>
#include <string.h>

#include "base/keyed_sort.h"
#include "model/binding_internal.h"
#include "reshard/arena.h"
#include "reshard/checked.h"

/* The binding's regions by id: an open-addressed table of region indices
 * (SIZE_MAX: free), at most half full. A paged reader names a region in
 * every range, in any order, by ids that share long prefixes: one hash and
 * one strcmp each, where a sorted search took five strcmps for 32 regions. */
typedef struct region_table {
  size_t *slots;
  size_t mask;
} region_table;

/* FNV-1a: region ids are short. */
static uint64_t id_hash(const char *id) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (; *id != '\0'; id++) {
    hash = (hash ^ (uint8_t)*id) * 0x100000001b3ull;
  }
  return hash;
}

enum { REGION_ADDRESSES_MAX = 4096 }; /* a power of two: 64 KiB */

/* A region found by its id's address (see by_address). */
typedef struct reshard__region_address {
  const char *id; /* NULL: free */
  ptrdiff_t index;
} region_address;

/* Whether `value` is a multiple of the descriptor's itemsize. */
static inline bool item_multiple(const reshard__binding_validation *v,
                                 uint64_t value) {
  return v->item_power_of_two ? (value & v->item_mask) == 0
                              : value % v->descriptor->itemsize == 0;
}

reshard_status reshard__binding_spend_work(reshard__binding_validation *v,
                                           uint64_t units, const char *step) {
  if (!reshard_add(v->work, units, &v->work) ||
      v->work > v->limits->max_validation_work) {
    return reshard_error_set(
        v->err, RESHARD_RESOURCE_EXHAUSTED,
        "binding: %s needs more than the limit max_validation_work %llu", step,
        (unsigned long long)v->limits->max_validation_work);
  }
  return RESHARD_OK;
}

reshard_status reshard__binding_no_memory(reshard__binding_validation *v) {
  return reshard_error_set(v->err, RESHARD_RESOURCE_EXHAUSTED,
                           "binding: out of memory");
}

/* The slot that holds `id`, or the free slot where it would go. */
static size_t *region_slot(const region_table *table,
                           const reshard_region *regions, const char *id) {
  for (size_t i = id_hash(id) & table->mask;; i = (i + 1) & table->mask) {
    size_t *slot = &table->slots[i];
    if (*slot == SIZE_MAX || strcmp(regions[*slot].region_id, id) == 0) {
      return slot;
    }
  }
}

static reshard_status index_regions(reshard__binding_validation *v,
                                    region_table *out) {
  const reshard_binding *binding = v->binding;
  size_t capacity = 2;
  while (capacity < binding->region_count * 2) {
    capacity *= 2; /* region_count is capped by max_ranges */
  }
  out->mask = capacity - 1;
  out->slots = RESHARD_ARENA_ARRAY(v->arena, size_t, capacity);
  if (out->slots == NULL) {
    return reshard__binding_no_memory(v);
  }
  memset(out->slots, 0xff, capacity * sizeof *out->slots);
  /* Room for each region's address four times over (ids a decoder did
   * not share, or ranges naming no region, fill what is left), at most
   * REGION_ADDRESSES_MAX: past that, regions are found by hash only. */
  size_t addresses = capacity < REGION_ADDRESSES_MAX / 4
                         ? 4 * capacity
                         : (size_t)REGION_ADDRESSES_MAX;
  v->address_mask = addresses - 1;
  v->by_address = RESHARD_ARENA_ARRAY(v->arena, region_address, addresses);
  if (v->by_address == NULL) {
    return reshard__binding_no_memory(v);
  }
  memset(v->by_address, 0, addresses * sizeof *v->by_address);
  for (size_t i = 0; i < binding->region_count; i++) {
    const reshard_region *region = &binding->regions[i];
    uint64_t end;
    if (region->region_id == NULL || region->region_id[0] == '\0') {
      return reshard_error_set(v->err, RESHARD_INVALID_ARGUMENT,
                               "binding.regions[%zu].region_id: must not be "
                               "empty",
                               i);
    }
    if (region->address == 0) {
      return reshard_error_set(v->err, RESHARD_INVALID_ARGUMENT,
                               "binding.regions[%zu].address: must be at "
                               "least 1",
                               i);
    }
    if (region->nbytes == 0) {
      return reshard_error_set(v->err, RESHARD_INVALID_ARGUMENT,
                               "binding.regions[%zu].nbytes: must be at "
                               "least 1",
                               i);
    }
    if (!reshard_add(region->address, region->nbytes, &end)) {
      return reshard_error_set(v->err, RESHARD_INVALID_ARGUMENT,
                               "binding.regions[%zu]: address + nbytes "
                               "overflows 64 bits",
                               i);
    }
    size_t *slot = region_slot(out, binding->regions, region->region_id);
    if (*slot != SIZE_MAX) {
      return reshard_error_set(v->err, RESHARD_INVALID_ARGUMENT,
                               "binding.regions[%zu].region_id: \"%s\" "
                               "appears more than once",
                               i, region->region_id);
    }
    *slot = i;
  }
  return RESHARD_OK;
}

static ptrdiff_t find_region_by_address(reshard__binding_validation *v,
                                        const region_table *table,
                                        const char *id) {
  size_t i = (size_t)(((uint64_t)(uintptr_t)id * 0x9e3779b97f4a7c15ull) >> 32) &
             v->address_mask;
  for (;; i = (i + 1) & v->address_mask) {
    region_address *slot = &v->by_address[i];
    if (slot->id == id) {
      return slot->index;
    }
    if (slot->id == NULL) {
      break;
    }
  }
  size_t index = *region_slot(table, v->binding->regions, id);
  ptrdiff_t found = index == SIZE_MAX ? -1 : (ptrdiff_t)index;
  if (2 * (v->address_count + 1) <= v->address_mask + 1) {
    v->by_address[i] = (region_address){id, found};
    v->address_count++;
  }
  return found;
}

static ptrdiff_t find_region(reshard__binding_validation *v,
                             const region_table *table, const char *id) {
  /* Neighbouring ranges mostly name one region (a paged reader's blocks
   * of one layer, in token order) by one shared string: no hash then. */
  if (id == v->last_region_id) {
    return v->last_region;
  }
  ptrdiff_t found = find_region_by_address(v, table, id);
  v->last_region_id = id;
  v->last_region = found;
  return found;
}

static ptrdiff_t find_owned_layer(const reshard_placement_part *part,
                                  uint64_t layer) {
  /* A participant's layers are mostly one consecutive run (a pipeline
   * stage): then the layer's place is its distance from the first. */
  if (part->layer_count > 0 && layer >= part->layer_ids[0]) {
    uint64_t guess = layer - part->layer_ids[0];
    if (guess < part->layer_count && part->layer_ids[guess] == layer) {
      return (ptrdiff_t)guess;
    }
  }
  size_t low = 0, high = part->layer_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (part->layer_ids[mid] < layer) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  if (low < part->layer_count && part->layer_ids[low] == layer) {
    return (ptrdiff_t)low;
  }
  return -1;
}

/* Checks every per-range rule of SPEC §1.5 and fills `out` and the
 * range's bounding span. */
static reshard_status check_range(reshard__binding_validation *v,
                                  const region_table *regions,
                                  uint64_t token_span, size_t i,
                                  reshard_bound_range *out,
                                  reshard__binding_span *span) {
  const reshard_binding_range *range = &v->binding->ranges[i];
  const reshard_descriptor *d = v->descriptor;
  const reshard_placement_part *part = v->part;
  reshard_error *err = v->err;
  if (range->component != RESHARD_COMPONENT_KEY &&
      range->component != RESHARD_COMPONENT_VALUE) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].component: must be KEY or "
                             "VALUE",
                             i);
  }
  if (range->component == RESHARD_COMPONENT_VALUE && d->value_head_dim == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].component: VALUE, but the "
                             "cache has no V component (value_head_dim 0)",
                             i);
  }
  /* Neighbouring ranges mostly bind one layer (its blocks in token
   * order): its place is the last range's. */
  ptrdiff_t layer_index =
      v->last_layer_index >= 0 && range->global_layer_id == v->last_layer
          ? v->last_layer_index
          : find_owned_layer(part, range->global_layer_id);
  if (layer_index < 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].global_layer_id: layer %llu "
                             "is not owned by participant \"%s\"",
                             i, (unsigned long long)range->global_layer_id,
                             part->participant_id);
  }
  v->last_layer = range->global_layer_id;
  v->last_layer_index = layer_index;
  if (range->token_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].token_count: must be at "
                             "least 1",
                             i);
  }
  if (range->head_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].head_count: must be at "
                             "least 1",
                             i);
  }
  uint64_t token_end, head_end;
  if (!reshard_add(range->token_start, range->token_count, &token_end) ||
      token_end > token_span) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "binding.ranges[%zu]: tokens [%llu, +%llu) leave the request's span "
        "[0, %llu)",
        i, (unsigned long long)range->token_start,
        (unsigned long long)range->token_count, (unsigned long long)token_span);
  }
  uint64_t part_head_end = part->head_start + part->head_count;
  if (!reshard_add(range->head_start, range->head_count, &head_end) ||
      range->head_start < part->head_start || head_end > part_head_end) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "binding.ranges[%zu]: heads [%llu, +%llu) leave participant \"%s\"'s "
        "heads [%llu, %llu)",
        i, (unsigned long long)range->head_start,
        (unsigned long long)range->head_count, part->participant_id,
        (unsigned long long)part->head_start,
        (unsigned long long)part_head_end);
  }
  if (range->region_id == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].region_id: must not be "
                             "empty",
                             i);
  }
  ptrdiff_t region_index = find_region(v, regions, range->region_id);
  if (region_index < 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].region_id: \"%s\" is not a "
                             "region of the binding",
                             i, range->region_id);
  }
  const reshard_region *region = &v->binding->regions[region_index];
  uint64_t hb = v->head_bytes[range->component];
  if (range->head_stride_bytes < hb) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu]: head_stride_bytes %llu is "
                             "below the head width %llu",
                             i, (unsigned long long)range->head_stride_bytes,
                             (unsigned long long)hb);
  }
  uint64_t row_span;
  if (!reshard_mul_add(range->head_count - 1, range->head_stride_bytes, hb,
                       &row_span)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu]: the row span overflows 64 "
                             "bits",
                             i);
  }
  if (range->token_stride_bytes < row_span) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu]: token_stride_bytes %llu is "
                             "below the row span %llu",
                             i, (unsigned long long)range->token_stride_bytes,
                             (unsigned long long)row_span);
  }
  uint64_t extent, last_end;
  if (!reshard_mul_add(range->token_count - 1, range->token_stride_bytes,
                       row_span, &extent) ||
      !reshard_add(range->offset_bytes, extent, &last_end) ||
      last_end > region->nbytes) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "binding.ranges[%zu]: its last byte lies outside region \"%s\" of "
        "%llu bytes",
        i, region->region_id, (unsigned long long)region->nbytes);
  }
  uint64_t itemsize = d->itemsize;
  if (!item_multiple(v, region->address + range->offset_bytes)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].offset_bytes: region "
                             "address + offset is not a multiple of itemsize "
                             "%llu",
                             i, (unsigned long long)itemsize);
  }
  if (!item_multiple(v, range->token_stride_bytes)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].token_stride_bytes: %llu is "
                             "not a multiple of itemsize %llu",
                             i, (unsigned long long)range->token_stride_bytes,
                             (unsigned long long)itemsize);
  }
  if (!item_multiple(v, range->head_stride_bytes)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].head_stride_bytes: %llu is "
                             "not a multiple of itemsize %llu",
                             i, (unsigned long long)range->head_stride_bytes,
                             (unsigned long long)itemsize);
  }
  *out = (reshard_bound_range){
      .layer_index = (uint64_t)layer_index,
      .component = range->component,
      .token_start = range->token_start,
      .token_end = token_end,
      .head_start = range->head_start,
      .head_end = head_end,
      .region_index = (uint64_t)region_index,
      .region_offset = range->offset_bytes,
      .token_stride = range->token_stride_bytes,
      .head_stride = range->head_stride_bytes,
  };
  /* Inside the region, whose end does not overflow: neither does this. */
  span->start = region->address + range->offset_bytes;
  span->end = span->start + extent;
  return RESHARD_OK;
}

/* Whether `range` differs from `before` only in where it lies: its tokens
 * and its offset. Paged readers list a layer's blocks one after another,
 * each shaped as the last. */
static inline bool shaped_as(const reshard_binding_range *range,
                             const reshard_binding_range *before) {
  return range->global_layer_id == before->global_layer_id &&
         range->component == before->component &&
         range->token_count == before->token_count &&
         range->head_start == before->head_start &&
         range->head_count == before->head_count &&
         range->region_id == before->region_id &&
         range->token_stride_bytes == before->token_stride_bytes &&
         range->head_stride_bytes == before->head_stride_bytes;
}

/* check_range for a range shaped as the range before it, which passed:
 * every rule on its layer, component, heads, strides and region holds as
 * it did there, so only the rules on where it lies are checked. false
 * when one fails (check_range then words the error) or nothing was
 * saved. */
static inline bool check_shaped_range(const reshard__binding_validation *v,
                                      uint64_t token_span,
                                      const reshard_binding_range *range,
                                      const reshard_bound_range *before,
                                      const reshard__binding_span *before_span,
                                      reshard_bound_range *out,
                                      reshard__binding_span *span) {
  const reshard_region *region = &v->binding->regions[before->region_index];
  uint64_t extent = before_span->end - before_span->start;
  uint64_t token_end, last_end;
  if (!reshard_add(range->token_start, range->token_count, &token_end) ||
      token_end > token_span ||
      !reshard_add(range->offset_bytes, extent, &last_end) ||
      last_end > region->nbytes ||
      !item_multiple(v, region->address + range->offset_bytes)) {
    return false;
  }
  *out = *before;
  out->token_start = range->token_start;
  out->token_end = token_end;
  out->region_offset = range->offset_bytes;
  span->start = region->address + range->offset_bytes;
  span->end = span->start + extent;
  return true;
}

/* The run of ranges from binding.ranges[i] on that are shaped as
 * binding.ranges[i - 1] (which passed; the caller found ranges[i] shaped
 * as it) and pass check_shaped_range's rules on where they lie: a paged
 * reader's blocks of one layer, listed one after another. Fills their
 * bound ranges and spans, widens the spans' bounds, clears *in_order when
 * a range starts before the last one's end, and returns how many there
 * were; the range that ends the run is the caller's. Two ranges of a run
 * whose tokens meet bind the same heads of them twice: the sorted path's
 * tiling proof names them, and a run kept in order has its ranges apart
 * (tokens_apart in reshard_binding_validate). The run's shape, region and
 * limits stay in locals, where check_shaped_range reads them back from the
 * range before, per range. */
static size_t check_run(reshard__binding_validation *v, uint64_t token_span,
                        size_t i, size_t count, reshard_bound_range *ranges,
                        bool *in_order) {
  const reshard_binding_range *shape = &v->binding->ranges[i - 1];
  const reshard_bound_range bound = ranges[i - 1];
  const reshard_region *region = &v->binding->regions[bound.region_index];
  uint64_t extent = v->spans[i].end - v->spans[i].start;
  /* The first range passed: its tokens lie in the span and its extent in
   * the region, so neither difference wraps, and a start at most the
   * difference ends inside without overflow. */
  uint64_t last_token_start = token_span - shape->token_count;
  uint64_t last_offset = region->nbytes - extent;
  uint64_t address = region->address;
  uint64_t low = v->span_low, high = v->span_high;
  uint64_t before_end = bound.token_end;
  bool apart = true;
  /* The shape's fields as values: the stores below could alias them. */
  const reshard_binding_range like = *shape;
  size_t j = i;
  for (; j < count; j++) {
    const reshard_binding_range *range = &v->binding->ranges[j];
    uint64_t token_start = range->token_start;
    uint64_t offset = range->offset_bytes;
    if (!shaped_as(range, &like) || token_start > last_token_start ||
        offset > last_offset || !item_multiple(v, address + offset)) {
      break;
    }
    apart = apart && before_end <= token_start;
    before_end = token_start + like.token_count;
    reshard_bound_range *out = &ranges[j];
    *out = bound;
    out->token_start = token_start;
    out->token_end = before_end;
    out->region_offset = offset;
    reshard__binding_span *span = &v->spans[j + 1];
    span->start = address + offset;
    span->end = span->start + extent;
    low = span->start < low ? span->start : low;
    high = span->end > high ? span->end : high;
  }
  v->span_low = low;
  v->span_high = high;
  *in_order = *in_order && apart;
  return j - i;
}

/* Group g holds layer g / 2's component g % 2 + 1. */
static inline size_t group_of(uint64_t layer_index,
                              reshard_component component) {
  return (size_t)layer_index * 2 + (size_t)(component - 1);
}

static inline size_t bound_group(const reshard_bound_range *range) {
  return group_of(range->layer_index, range->component);
}

/* The group of a range whose component and layer check_range would
 * accept, or SIZE_MAX. */
static size_t range_group(const reshard__binding_validation *v,
                          const reshard_binding_range *range) {
  if (range->component != RESHARD_COMPONENT_KEY &&
      range->component != RESHARD_COMPONENT_VALUE) {
    return SIZE_MAX;
  }
  ptrdiff_t layer_index = find_owned_layer(v->part, range->global_layer_id);
  return layer_index < 0 ? SIZE_MAX
                         : group_of((uint64_t)layer_index, range->component);
}

/* The sorted order of page blocks listed in another order, without a sort:
 * each group's ranges are its pages, so the range over tokens [t, t +
 * page_size) of group g goes to group_start[g] + t / page_size. Fills
 * group_start, `sorted`, `source_index` and `places` (each sorted range's
 * region offset, for pages_aligned). false when a start is not a
 * page's or two ranges claim one page; tiling refuses those, after the
 * general sort has put them where its message can name them. */
static bool place_page_blocks(const reshard_bound_range *ranges, size_t count,
                              uint64_t page_size, size_t *group_start,
                              size_t group_count, reshard_bound_range *sorted,
                              size_t *source_index, uint64_t *places) {
  memset(group_start, 0, (group_count + 1) * sizeof *group_start);
  for (size_t i = 0; i < count; i++) {
    group_start[bound_group(&ranges[i]) + 1]++;
  }
  for (size_t g = 0; g < group_count; g++) {
    group_start[g + 1] += group_start[g];
  }
  memset(source_index, 0xff, count * sizeof *source_index);
  /* Page sizes are powers of two in practice: a shift, not a division
   * per range. */
  bool power_of_two = (page_size & (page_size - 1)) == 0;
  unsigned shift = (unsigned)__builtin_ctzll(page_size);
  for (size_t i = 0; i < count; i++) {
    const reshard_bound_range *range = &ranges[i];
    size_t g = bound_group(range);
    uint64_t page = power_of_two ? range->token_start >> shift
                                 : range->token_start / page_size;
    if (page * page_size != range->token_start ||
        page >= group_start[g + 1] - group_start[g]) {
      return false;
    }
    size_t place = group_start[g] + (size_t)page;
    if (source_index[place] != SIZE_MAX) {
      return false;
    }
    sorted[place] = *range;
    source_index[place] = i;
    places[place] = range->region_offset;
  }
  return true;
}

/* Whether the page blocks of every group lie as the first group's do
 * (reshard_bound_binding.pages_aligned), over the sorted and tiled
 * ranges, each group one range a page: sorted range k lies at
 * places[k * stride]. The caller has checked that every range starts
 * within 2^63 bytes of every other, so two differences of places equal
 * modulo 2^64 are equal as integers: none passes by wrapping around. */
static bool pages_aligned(const uint64_t *places, size_t stride,
                          const size_t *group_start, size_t group_count) {
  const uint64_t *first = NULL;
  size_t pages = 0;
  for (size_t g = 0; g < group_count; g++) {
    const uint64_t *group = places + group_start[g] * stride;
    size_t count = group_start[g + 1] - group_start[g];
    if (count == 0) {
      continue; /* a component the cache has not */
    }
    if (first == NULL) {
      first = group;
      pages = count;
      continue;
    }
    if (count != pages) {
      return false;
    }
    /* Page p lies as far from the first group's page p as page 0 does. */
    uint64_t apart_by = group[0] - first[0];
    bool apart = false;
    for (size_t p = 1; p < pages; p++) {
      apart |= group[p * stride] - first[p * stride] != apart_by;
    }
    if (apart) {
      return false;
    }
  }
  return true;
}

static int compare_bound(const void *a, const void *b) {
  const reshard_bound_range *x = a;
  const reshard_bound_range *y = b;
#define RESHARD_CMP(field)                                                     \
  if (x->field != y->field) {                                                  \
    return x->field < y->field ? -1 : 1;                                       \
  }
  RESHARD_CMP(layer_index)
  RESHARD_CMP(component)
  RESHARD_CMP(token_start)
  RESHARD_CMP(head_start)
#undef RESHARD_CMP
  return 0;
}

/* Sorting moves the bound ranges; this pairs each with its input index so
 * messages can still name binding.ranges[i]. */
typedef struct bound_with_source {
  reshard_bound_range range;
  size_t source;
} bound_with_source;

static int compare_bound_with_source(const void *a, const void *b) {
  return compare_bound(&((const bound_with_source *)a)->range,
                       &((const bound_with_source *)b)->range);
}

/* The order compare_bound defines, by two stable radix passes (head
 * start, then layer, component and token start packed in one key): a
 * paged binding lists tens of thousands of ranges, and qsort's callback
 * per comparison cost more than planning them. NULL when the fields do
 * not fit the packed key (the caller falls back to qsort) or memory runs
 * out. Token starts lie below the checked token span. */
static const reshard__keyed *radix_order(const bound_with_source *items,
                                         size_t count, uint64_t token_span,
                                         reshard_arena *arena) {
  enum { TOKEN_BITS = 40, LAYER_BITS = 64 - TOKEN_BITS - 1 };
  if (token_span > (1ull << TOKEN_BITS)) {
    return NULL;
  }
  reshard__keyed *keyed = RESHARD_ARENA_ARRAY(arena, reshard__keyed, count);
  reshard__keyed *spare = RESHARD_ARENA_ARRAY(arena, reshard__keyed, count);
  if (keyed == NULL || spare == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < count; i++) {
    if (items[i].range.layer_index >= (1ull << LAYER_BITS)) {
      return NULL;
    }
    keyed[i] = (reshard__keyed){items[i].range.head_start, i};
  }
  reshard__keyed *by_head = reshard__sort_keyed(keyed, spare, count);
  reshard__keyed *other = by_head == keyed ? spare : keyed;
  for (size_t i = 0; i < count; i++) {
    const reshard_bound_range *r = &items[by_head[i].index].range;
    by_head[i].key = r->layer_index << (TOKEN_BITS + 1) |
                     (uint64_t)(r->component - 1) << TOKEN_BITS |
                     r->token_start;
  }
  return reshard__sort_keyed(by_head, other, count);
}

/* Sorts the bound ranges, which arrived in another order, and notes each
 * group's start; v->source_index (room for `count`) maps them back to
 * binding.ranges for messages. */
static reshard_status sort_ranges(reshard__binding_validation *v,
                                  reshard_bound_range *ranges, size_t count,
                                  uint64_t token_span, size_t *group_start,
                                  size_t group_count) {
  bound_with_source *sorted =
      RESHARD_ARENA_ARRAY(v->arena, bound_with_source, count + 1);
  if (sorted == NULL) {
    return reshard__binding_no_memory(v);
  }
  for (size_t i = 0; i < count; i++) {
    sorted[i] = (bound_with_source){ranges[i], i};
  }
  const reshard__keyed *order =
      radix_order(sorted, count, token_span, v->arena);
  if (order == NULL) {
    qsort(sorted, count, sizeof *sorted, compare_bound_with_source);
  }
  for (size_t i = 0; i < count; i++) {
    const bound_with_source *next =
        order ? &sorted[order[i].index] : &sorted[i];
    ranges[i] = next->range;
    v->source_index[i] = next->source;
  }
  /* Group boundaries: group g holds layer g / 2's component g % 2 + 1. */
  size_t cursor = 0;
  for (size_t g = 0; g < group_count; g++) {
    group_start[g] = cursor;
    uint64_t layer_index = g / 2;
    unsigned component = (unsigned)(g % 2) + 1;
    while (cursor < count && ranges[cursor].layer_index == layer_index &&
           ranges[cursor].component == component) {
      cursor++;
    }
  }
  group_start[group_count] = cursor;
  return RESHARD_OK;
}

reshard_status reshard_binding_validate(
    const reshard_binding *binding, const reshard_descriptor *descriptor,
    const reshard_placement_part *part, uint64_t page_count,
    const reshard_limits *limits, reshard_arena *arena,
    reshard_bound_binding *out, reshard_error *err) {
  reshard__binding_validation v = {
      .binding = binding,
      .descriptor = descriptor,
      .part = part,
      .limits = limits,
      .arena = arena,
      .err = err,
      .head_bytes =
          {
              [RESHARD_COMPONENT_KEY] =
                  reshard_head_bytes(descriptor, RESHARD_COMPONENT_KEY),
              [RESHARD_COMPONENT_VALUE] =
                  reshard_head_bytes(descriptor, RESHARD_COMPONENT_VALUE),
          },
      .item_power_of_two =
          descriptor->itemsize != 0 &&
          (descriptor->itemsize & (descriptor->itemsize - 1)) == 0,
      .item_mask = descriptor->itemsize - 1,
      .last_layer_index = -1,
  };
  if (binding->range_count > limits->max_ranges) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "binding.ranges: %zu ranges exceed the limit "
                             "max_ranges %llu",
                             binding->range_count,
                             (unsigned long long)limits->max_ranges);
  }
  if (binding->region_count > limits->max_ranges) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "binding.regions: %zu regions exceed the limit "
                             "max_ranges %llu",
                             binding->region_count,
                             (unsigned long long)limits->max_ranges);
  }
  uint64_t token_span, cells;
  if (!reshard_mul(page_count, descriptor->page_size, &token_span) ||
      !reshard_mul(token_span, part->head_count, &cells)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "page_keys: %llu pages of %llu tokens overflow "
                             "64 bits",
                             (unsigned long long)page_count,
                             (unsigned long long)descriptor->page_size);
  }
  reshard_status status = reshard__binding_spend_work(
      &v, (uint64_t)binding->range_count + binding->region_count,
      "checking the ranges");
  if (status) {
    return status;
  }
  region_table regions;
  if ((status = index_regions(&v, &regions))) {
    return status;
  }
  size_t count = binding->range_count;
  reshard_bound_range *ranges =
      RESHARD_ARENA_ARRAY(arena, reshard_bound_range, count + 1);
  v.spans = RESHARD_ARENA_ARRAY(arena, reshard__binding_span, count + 1);
  size_t group_count = part->layer_count * 2;
  size_t *group_start = RESHARD_ARENA_NEW(arena, size_t, group_count + 1);
  size_t *active = RESHARD_ARENA_ARRAY(arena, size_t, count + 1);
  if (ranges == NULL || v.spans == NULL || group_start == NULL ||
      active == NULL) {
    return reshard__binding_no_memory(&v);
  }
  /* The first range of each group that check_range checked: the ranges
   * of a paged reader's group are shaped alike, and a client may list
   * them in any order (scripts/load.py's paged readers: shuffled). */
  size_t *group_shape = RESHARD_ARENA_ARRAY(arena, size_t, group_count + 1);
  if (group_shape == NULL) {
    return reshard__binding_no_memory(&v);
  }
  memset(group_shape, 0xff, (group_count + 1) * sizeof *group_shape);
  /* One pass: each range is checked straight into its bound form, its
   * span noted, and, while the ranges keep the sorted order (clients
   * usually list them in (layer, component, token) order), its group
   * boundary too: group g holds layer g / 2's component g % 2 + 1. For
   * S5's 15 872 ranges, sorting them into a second array, copying them
   * back and walking them again for the boundaries cost a fifth of the
   * validation, in memory traffic on ranges long out of cache. */
  v.spans[0] = (reshard__binding_span){UINT64_MAX, 0}; /* see spans */
  v.span_low = UINT64_MAX;
  v.span_high = 0;
  v.span_shortest = UINT64_MAX;
  bool in_order = true;
  bool page_blocks = descriptor->page_size > 0;
  bool whole_span = true;
  size_t next_group = 0;
  for (size_t i = 0; i < count; i++) {
    /* A run shaped as the range before: every rule but those on where
     * each lies holds as it did there. Its ranges stay in that range's
     * group and leave page_blocks, whole_span and the shortest span as
     * it left them: as many tokens, and a range with as many as the span
     * starts at 0. */
    if (i > 0 && shaped_as(&binding->ranges[i], &binding->ranges[i - 1])) {
      i += check_run(&v, token_span, i, count, ranges, &in_order);
      if (i == count) {
        break;
      }
    }
    const reshard_binding_range *range = &binding->ranges[i];
    reshard__binding_span *span = &v.spans[i + 1];
    /* Else shaped as its group's first, listed before. */
    size_t group = range_group(&v, range);
    size_t first = group == SIZE_MAX ? SIZE_MAX : group_shape[group];
    bool shaped = first != SIZE_MAX &&
                  shaped_as(range, &binding->ranges[first]) &&
                  check_shaped_range(&v, token_span, range, &ranges[first],
                                     &v.spans[first + 1], &ranges[i], span);
    bool group_first = false;
    if (!shaped) {
      if ((status =
               check_range(&v, &regions, token_span, i, &ranges[i], span))) {
        return status;
      }
      group = bound_group(&ranges[i]);
      group_first = group_shape[group] == SIZE_MAX;
      if (group_first) {
        group_shape[group] = i;
      }
    }
    /* Page blocks: each group's first range a page long, the others
     * shaped as it. Once tiled, they lie a page apart and each binds all
     * the heads: they bind the first's heads, and a range of the other
     * heads would be shaped as none of them. */
    page_blocks = page_blocks &&
                  (shaped || (group_first &&
                              ranges[i].token_end - ranges[i].token_start ==
                                  descriptor->page_size));
    whole_span = whole_span && ranges[i].token_start == 0 &&
                 ranges[i].token_end == token_span;
    v.span_low = span->start < v.span_low ? span->start : v.span_low;
    v.span_high = span->end > v.span_high ? span->end : v.span_high;
    if (!shaped) {
      uint64_t length = span->end - span->start;
      v.span_shortest = length < v.span_shortest ? length : v.span_shortest;
    }
    in_order =
        in_order && (i == 0 || compare_bound(&ranges[i - 1], &ranges[i]) <= 0);
    if (in_order) {
      size_t g = bound_group(&ranges[i]);
      while (next_group <= g) {
        group_start[next_group++] = i;
      }
    }
  }
  /* Whether each of a group's ranges starts at or past the end of the one
   * before, so that the tiling proof need not sweep page blocks. In
   * order, a group of page blocks is its first range and one run shaped
   * as it (a range shaped as the one before that fails check_run's rules
   * fails check_range's), and check_run keeps a run in order only so. */
  bool tokens_apart = in_order;
  /* Where each sorted range lies, for pages_aligned, in the densest array
   * at hand: the spans while the ranges kept the client's order (a
   * group's ranges share their region, so the differences are the
   * offsets'), the places noted while placing page blocks, else the
   * bound ranges themselves. */
  const uint64_t *places = &v.spans[1].start;
  size_t place_stride = sizeof *v.spans / sizeof(uint64_t);
  if (in_order) {
    while (next_group <= group_count) {
      group_start[next_group++] = count;
    }
  } else {
    reshard_bound_range *placed =
        page_blocks ? RESHARD_ARENA_ARRAY(arena, reshard_bound_range, count + 1)
                    : NULL;
    uint64_t *page_places =
        page_blocks ? RESHARD_ARENA_ARRAY(arena, uint64_t, count + 1) : NULL;
    v.source_index = RESHARD_ARENA_ARRAY(arena, size_t, count + 1);
    if (v.source_index == NULL ||
        (page_blocks && (placed == NULL || page_places == NULL))) {
      return reshard__binding_no_memory(&v);
    }
    if (page_blocks &&
        place_page_blocks(ranges, count, descriptor->page_size, group_start,
                          group_count, placed, v.source_index, page_places)) {
      ranges = placed;
      tokens_apart = true; /* one range a page, each where its page is */
      places = page_places;
      place_stride = 1;
    } else {
      if ((status = sort_ranges(&v, ranges, count, token_span, group_start,
                                group_count))) {
        return status;
      }
      tokens_apart = false; /* not known: the tiling proof looks */
      places = &ranges[0].region_offset;
      place_stride = sizeof *ranges / sizeof(uint64_t);
    }
  }
  if ((status = reshard__binding_check_tiling(
           &v, ranges, group_start, group_count, token_span,
           page_blocks ? descriptor->page_size : 0, tokens_apart, active))) {
    return status;
  }
  /* The bound on the spans makes the places' differences integers. */
  bool aligned = page_blocks && v.span_high - v.span_low < UINT64_C(1) << 63 &&
                 pages_aligned(places, place_stride, group_start, group_count);
  const reshard__aligned_pages where = {places, place_stride, group_start,
                                        group_count};
  if ((status = reshard__binding_check_disjoint(&v, ranges, count,
                                                aligned ? &where : NULL))) {
    return status;
  }
  *out = (reshard_bound_binding){
      .part = part,
      .token_span = token_span,
      .ranges = ranges,
      .range_count = count,
      .group_start = group_start,
      .group_count = group_count,
      .region_count = binding->region_count,
      /* Sorted and tiled, each group's ranges are its pages, one a page. */
      .page_blocks = page_blocks ? descriptor->page_size : 0,
      .pages_aligned = aligned,
      .whole_span = whole_span,
      .validation_work = v.work,
  };
  return RESHARD_OK;
}
