#include "reshard/binding.h"

#include <stdlib.h>
#include <string.h>

#include "keyed_sort.h"
#include "reshard/arena.h"
#include "reshard/checked.h"

/* Validation runs in the order the work bounds are known: counts first,
 * then per-range arithmetic (linear), then the head-tiling sweep and the
 * physical-disjointness proof, each after its work bound was checked
 * against max_validation_work. */

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

typedef struct region_address {
  const char *id; /* NULL: free */
  ptrdiff_t index;
} region_address;

typedef struct validation {
  const reshard_binding *binding;
  const reshard_descriptor *descriptor;
  const reshard_placement_part *part;
  const reshard_limits *limits;
  reshard_arena *arena;
  reshard_error *err;
  uint64_t work;
  size_t *source_index; /* bound range -> binding.ranges index */
  /* Regions found by their id's address (index -1: no such region), open
   * addressing, at most half full; addresses past that are not kept.
   * Decoders share one string among ranges of one region (the daemon's
   * among all of them), so most ranges name an address seen before and
   * cost neither a hash of the id nor a strcmp. */
  region_address *by_address;
  size_t address_mask, address_count;
  /* Worked out once rather than per range (a call for the head's bytes,
   * three 64-bit divisions by itemsize): with itemsize a power of two, as
   * every dtype's is, a multiple is a mask test. */
  uint64_t head_bytes[RESHARD_COMPONENT_VALUE + 1];
  bool item_power_of_two;
  uint64_t item_mask; /* itemsize - 1 then */
} validation;

/* Whether `value` is a multiple of the descriptor's itemsize. */
static inline bool item_multiple(const validation *v, uint64_t value) {
  return v->item_power_of_two ? (value & v->item_mask) == 0
                              : value % v->descriptor->itemsize == 0;
}

static reshard_status spend_work(validation *v, uint64_t units,
                                 const char *step) {
  if (!reshard_add(v->work, units, &v->work) ||
      v->work > v->limits->max_validation_work) {
    return reshard_error_set(
        v->err, RESHARD_RESOURCE_EXHAUSTED,
        "binding: %s needs more than the limit max_validation_work %llu", step,
        (unsigned long long)v->limits->max_validation_work);
  }
  return RESHARD_OK;
}

static reshard_status out_of_memory(validation *v) {
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

static reshard_status index_regions(validation *v, region_table *out) {
  const reshard_binding *binding = v->binding;
  size_t capacity = 2;
  while (capacity < binding->region_count * 2) {
    capacity *= 2; /* region_count is capped by max_ranges */
  }
  out->mask = capacity - 1;
  out->slots = RESHARD_ARENA_ARRAY(v->arena, size_t, capacity);
  if (out->slots == NULL) {
    return out_of_memory(v);
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
    return out_of_memory(v);
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

static ptrdiff_t find_region(validation *v, const region_table *table,
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

static const char *component_name(reshard_component component) {
  return component == RESHARD_COMPONENT_KEY ? "KEY" : "VALUE";
}

/* Checks every per-range rule of SPEC §1.5 and fills `out`. */
static reshard_status check_range(validation *v, const region_table *regions,
                                  uint64_t token_span, size_t i,
                                  reshard_bound_range *out) {
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
  ptrdiff_t layer_index = find_owned_layer(part, range->global_layer_id);
  if (layer_index < 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "binding.ranges[%zu].global_layer_id: layer %llu "
                             "is not owned by participant \"%s\"",
                             i, (unsigned long long)range->global_layer_id,
                             part->participant_id);
  }
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
  return RESHARD_OK;
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

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int compare_head_start(const void *a, const void *b) {
  return compare_u64(&((const reshard_bound_range *)a)->head_start,
                     &((const reshard_bound_range *)b)->head_start);
}

/* The first (token, head) in token-then-head order that no range of a
 * group binds, when the group's ranges are pairwise disjoint but bind
 * fewer cells than the rectangle holds. A token stops being covered only
 * where some range ends, so only token 0 and the range ends are looked
 * at; the ranges open there are disjoint on that token, at most head_count
 * of them, which keeps the walk within the sweep's work bound. */
static reshard_status first_unbound(validation *v,
                                    const reshard_bound_range *ranges,
                                    size_t count, uint64_t token_span,
                                    uint64_t *token, uint64_t *head) {
  const reshard_placement_part *part = v->part;
  uint64_t *stops = RESHARD_ARENA_ARRAY(v->arena, uint64_t, count + 1);
  reshard_bound_range *open =
      RESHARD_ARENA_ARRAY(v->arena, reshard_bound_range, count + 1);
  if (stops == NULL || open == NULL) {
    return out_of_memory(v);
  }
  size_t stop_count = 0;
  stops[stop_count++] = 0;
  for (size_t r = 0; r < count; r++) {
    if (ranges[r].token_end < token_span) {
      stops[stop_count++] = ranges[r].token_end;
    }
  }
  qsort(stops, stop_count, sizeof *stops, compare_u64);
  size_t next = 0, open_count = 0;
  for (size_t s = 0; s < stop_count; s++) {
    uint64_t t = stops[s];
    if (s > 0 && t == stops[s - 1]) {
      continue;
    }
    size_t kept = 0;
    uint64_t heads = 0;
    for (size_t o = 0; o < open_count; o++) {
      if (open[o].token_end > t) {
        heads += open[o].head_end - open[o].head_start;
        open[kept++] = open[o];
      }
    }
    for (; next < count && ranges[next].token_start <= t; next++) {
      if (ranges[next].token_end > t) {
        heads += ranges[next].head_end - ranges[next].head_start;
        open[kept++] = ranges[next];
      }
    }
    open_count = kept;
    if (heads < part->head_count) {
      qsort(open, open_count, sizeof *open, compare_head_start);
      uint64_t h = part->head_start;
      for (size_t o = 0; o < open_count && open[o].head_start == h; o++) {
        h = open[o].head_end;
      }
      *token = t;
      *head = h;
      return RESHARD_OK;
    }
  }
  /* Unreachable for disjoint ranges that miss a cell. */
  *token = 0;
  *head = part->head_start;
  return RESHARD_OK;
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

/* Proves that the ranges of one (layer, component) tile the rectangle
 * [0, span) x [head_start, head_end) exactly: pairwise disjoint (a sweep
 * over tokens with the ranges still open, at most one per head) and of
 * equal total area. */
static reshard_status
check_group_tiling(validation *v, const reshard_bound_range *ranges,
                   size_t base, size_t count, uint64_t layer_index,
                   unsigned component, uint64_t token_span, size_t *active) {
  const reshard_placement_part *part = v->part;
  uint64_t layer = part->layer_ids[layer_index];
  const char *name = component_name((reshard_component)component);
  size_t active_count = 0;
  uint64_t cells = 0;
  for (size_t r = 0; r < count; r++) {
    const reshard_bound_range *range = &ranges[r];
    size_t kept = 0;
    for (size_t a = 0; a < active_count; a++) {
      const reshard_bound_range *open = &ranges[active[a]];
      if (open->token_end <= range->token_start) {
        continue;
      }
      if (open->head_start < range->head_end &&
          range->head_start < open->head_end) {
        uint64_t head = open->head_start > range->head_start
                            ? open->head_start
                            : range->head_start;
        return reshard_error_set(
            v->err, RESHARD_INVALID_ARGUMENT,
            "binding.ranges[%zu] and binding.ranges[%zu] both bind layer "
            "%llu component %s token %llu head %llu",
            v->source_index[base + active[a]], v->source_index[base + r],
            (unsigned long long)layer, name,
            (unsigned long long)range->token_start, (unsigned long long)head);
      }
      active[kept++] = active[a];
    }
    active_count = kept;
    active[active_count++] = r;
    cells += (range->token_end - range->token_start) *
             (range->head_end - range->head_start);
  }
  uint64_t expected = token_span * part->head_count;
  if (cells != expected) {
    uint64_t token = 0, head = 0;
    reshard_status status =
        first_unbound(v, ranges, count, token_span, &token, &head);
    if (status) {
      return status;
    }
    return reshard_error_set(
        v->err, RESHARD_INVALID_ARGUMENT,
        "binding: layer %llu component %s: token %llu head %llu is not bound; "
        "the ranges bind %llu of the %llu "
        "(token, head) cells of tokens [0, %llu) x heads [%llu, %llu); every "
        "cell must be bound exactly once",
        (unsigned long long)layer, name, (unsigned long long)token,
        (unsigned long long)head, (unsigned long long)cells,
        (unsigned long long)expected, (unsigned long long)token_span,
        (unsigned long long)part->head_start,
        (unsigned long long)(part->head_start + part->head_count));
  }
  return RESHARD_OK;
}

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

static uint64_t range_first_byte(const validation *v,
                                 const reshard_bound_range *range) {
  return v->binding->regions[range->region_index].address +
         range->region_offset;
}

static uint64_t range_extent(const reshard_bound_range *range, uint64_t hb) {
  return (range->token_end - range->token_start - 1) * range->token_stride +
         (range->head_end - range->head_start - 1) * range->head_stride + hb;
}

static uint64_t bound_head_bytes(const validation *v,
                                 const reshard_bound_range *range) {
  return v->head_bytes[range->component];
}

/* Proves no two values share a byte. Ranges whose bounding spans touch no
 * other span are disjoint by construction (within a range the stride rules
 * already separate values); only clusters of overlapping spans are broken
 * into runs and compared, after their run count was charged as work. */
static reshard_status
check_disjoint(validation *v, const reshard_bound_range *ranges, size_t count) {
  if (count < 2) {
    return RESHARD_OK;
  }
  byte_run *runs = RESHARD_ARENA_ARRAY(v->arena, byte_run, count);
  reshard__keyed *keyed = RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, count);
  reshard__keyed *spare = RESHARD_ARENA_ARRAY(v->arena, reshard__keyed, count);
  byte_run *spans = RESHARD_ARENA_ARRAY(v->arena, byte_run, count);
  if (runs == NULL || keyed == NULL || spare == NULL || spans == NULL) {
    return out_of_memory(v);
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
          spend_work(v, piece_count, "the disjointness proof");
      if (status) {
        return status;
      }
      byte_run *pieces = RESHARD_ARENA_ARRAY(v->arena, byte_run, piece_count);
      if (pieces == NULL) {
        return out_of_memory(v);
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
        return out_of_memory(v);
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
              v->source_index[before->range], v->source_index[after->range],
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

reshard_status reshard_binding_validate(
    const reshard_binding *binding, const reshard_descriptor *descriptor,
    const reshard_placement_part *part, uint64_t page_count,
    const reshard_limits *limits, reshard_arena *arena,
    reshard_bound_binding *out, reshard_error *err) {
  validation v = {
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
  reshard_status status =
      spend_work(&v, (uint64_t)binding->range_count + binding->region_count,
                 "checking the ranges");
  if (status) {
    return status;
  }
  region_table regions;
  if ((status = index_regions(&v, &regions))) {
    return status;
  }
  size_t count = binding->range_count;
  bound_with_source *sorted =
      RESHARD_ARENA_ARRAY(arena, bound_with_source, count + 1);
  reshard_bound_range *ranges =
      RESHARD_ARENA_ARRAY(arena, reshard_bound_range, count + 1);
  v.source_index = RESHARD_ARENA_ARRAY(arena, size_t, count + 1);
  size_t group_count = part->layer_count * 2;
  size_t *group_start = RESHARD_ARENA_NEW(arena, size_t, group_count + 1);
  size_t *active = RESHARD_ARENA_ARRAY(arena, size_t, count + 1);
  if (sorted == NULL || ranges == NULL || v.source_index == NULL ||
      group_start == NULL || active == NULL) {
    return out_of_memory(&v);
  }
  for (size_t i = 0; i < count; i++) {
    if ((status = check_range(&v, &regions, token_span, i, &sorted[i].range))) {
      return status;
    }
    sorted[i].source = i;
  }
  /* Clients usually list ranges in (layer, component, token) order
   * already; only sort when they did not. */
  bool in_order = true;
  for (size_t i = 1; i < count && in_order; i++) {
    in_order = compare_bound(&sorted[i - 1].range, &sorted[i].range) <= 0;
  }
  const reshard__keyed *order = NULL;
  if (!in_order) {
    order = radix_order(sorted, count, token_span, arena);
    if (order == NULL) {
      qsort(sorted, count, sizeof *sorted, compare_bound_with_source);
    }
  }
  for (size_t i = 0; i < count; i++) {
    const bound_with_source *next =
        order ? &sorted[order[i].index] : &sorted[i];
    ranges[i] = next->range;
    v.source_index[i] = next->source;
  }

  /* Group boundaries, and the sweep's work bound before the sweep. */
  uint64_t sweep_work = 0;
  size_t cursor = 0;
  for (size_t g = 0; g < group_count; g++) {
    group_start[g] = cursor;
    uint64_t layer_index = g / 2;
    unsigned component = (unsigned)(g % 2) + 1;
    while (cursor < count && ranges[cursor].layer_index == layer_index &&
           ranges[cursor].component == component) {
      cursor++;
    }
    uint64_t members = cursor - group_start[g];
    uint64_t open = members < part->head_count ? members : part->head_count;
    sweep_work += members * (open + 1);
  }
  group_start[group_count] = cursor;
  if ((status = spend_work(&v, sweep_work, "the head-tiling proof"))) {
    return status;
  }
  unsigned components = reshard_component_count(descriptor);
  for (size_t g = 0; g < group_count; g++) {
    unsigned component = (unsigned)(g % 2) + 1;
    if (component > components) {
      continue;
    }
    status = check_group_tiling(&v, ranges + group_start[g], group_start[g],
                                group_start[g + 1] - group_start[g], g / 2,
                                component, token_span, active);
    if (status) {
      return status;
    }
  }
  if ((status = check_disjoint(&v, ranges, count))) {
    return status;
  }
  *out = (reshard_bound_binding){
      .part = part,
      .token_span = token_span,
      .ranges = ranges,
      .range_count = count,
      .group_start = group_start,
      .group_count = group_count,
      .validation_work = v.work,
  };
  return RESHARD_OK;
}
