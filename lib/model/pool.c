#include "reshard/pool.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/checked.h"

/* A pool's rules are checked in the order their cost is known: counts
 * first, then each region and tensor on its own (linear), then the
 * disjointness of the tensors, one sort of their spans. */

typedef struct pool_check {
  const reshard_pool *pool;
  const reshard_descriptor *descriptor;
  const reshard_placement_part *part;
  const char *path;
  reshard_error *err;
  reshard_arena *arena;
} pool_check;

/* A region by id, for finding tensors' regions in a sorted array. */
typedef struct region_key {
  const char *id;
  size_t index;
} region_key;

/* A tensor's bytes: [start, end) in the endpoint's address space. */
typedef struct tensor_span {
  uint64_t start, end;
  uint64_t block_extent; /* one block's footprint */
  size_t tensor;
  size_t group;
} tensor_span;

/* A span's key in the sweep of check_disjoint: its per-block footprint's
 * start on the circle of its block stride (its offset modulo the stride),
 * or where the span ends. */
typedef struct span_key {
  uint64_t key;
  size_t span; /* index into the sorted spans */
} span_key;

static const char *component_name(reshard_component component) {
  return component == RESHARD_COMPONENT_KEY ? "KEY" : "VALUE";
}

static reshard_status out_of_memory(const pool_check *c) {
  return reshard_error_set(c->err, RESHARD_RESOURCE_EXHAUSTED,
                           "%s: out of memory", c->path);
}

static int compare_region_keys(const void *a, const void *b) {
  return strcmp(((const region_key *)a)->id, ((const region_key *)b)->id);
}

static int compare_spans(const void *a, const void *b) {
  const tensor_span *x = a, *y = b;
  if (x->start != y->start) {
    return x->start < y->start ? -1 : 1;
  }
  return x->tensor < y->tensor ? -1 : x->tensor > y->tensor;
}

static int compare_span_keys(const void *a, const void *b) {
  const span_key *x = a, *y = b;
  if (x->key != y->key) {
    return x->key < y->key ? -1 : 1;
  }
  return x->span < y->span ? -1 : x->span > y->span;
}

/* Checks each region (SPEC §1.5's rules) and returns them sorted by id in
 * *sorted, refusing an id that repeats. */
static reshard_status check_regions(const pool_check *c, region_key **sorted) {
  const reshard_pool *pool = c->pool;
  region_key *keys =
      RESHARD_ARENA_ARRAY(c->arena, region_key, pool->region_count + 1);
  if (keys == NULL) {
    return out_of_memory(c);
  }
  for (size_t i = 0; i < pool->region_count; i++) {
    const reshard_region *region = &pool->regions[i];
    uint64_t end;
    if (region->region_id == NULL || region->region_id[0] == '\0') {
      return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                               "%s.regions[%zu].region_id: must not be empty",
                               c->path, i);
    }
    if (region->address == 0) {
      return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                               "%s.regions[%zu].address: must be at least 1",
                               c->path, i);
    }
    if (region->nbytes == 0) {
      return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                               "%s.regions[%zu].nbytes: must be at least 1",
                               c->path, i);
    }
    if (!reshard_add(region->address, region->nbytes, &end)) {
      return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                               "%s.regions[%zu]: address + nbytes overflows "
                               "64 bits",
                               c->path, i);
    }
    keys[i] = (region_key){region->region_id, i};
  }
  qsort(keys, pool->region_count, sizeof *keys, compare_region_keys);
  for (size_t i = 1; i < pool->region_count; i++) {
    if (strcmp(keys[i].id, keys[i - 1].id) == 0) {
      size_t later =
          keys[i].index > keys[i - 1].index ? keys[i].index : keys[i - 1].index;
      return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                               "%s.regions[%zu].region_id: \"%s\" appears "
                               "more than once",
                               c->path, later, keys[i].id);
    }
  }
  *sorted = keys;
  return RESHARD_OK;
}

static ptrdiff_t find_region(const region_key *keys, size_t count,
                             const char *id) {
  size_t low = 0, high = count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    int order = strcmp(keys[mid].id, id);
    if (order == 0) {
      return (ptrdiff_t)keys[mid].index;
    }
    if (order < 0) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return -1;
}

static ptrdiff_t find_owned_layer(const reshard_placement_part *part,
                                  uint64_t layer) {
  size_t low = 0, high = part->layer_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (part->layer_ids[mid] < layer) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  return low < part->layer_count && part->layer_ids[low] == layer
             ? (ptrdiff_t)low
             : -1;
}

/* One axis of a tensor: `count` steps of `stride` bytes. */
typedef struct axis {
  const char *name;
  uint64_t count;
  uint64_t stride;
} axis;

/* Proves that the strides nest (SPEC §1.5a): taken by increasing stride,
 * each axis of count > 1 steps at least over the extent of the axes below
 * it, starting from the head row, so no two values share a byte. Stores
 * one block's footprint (slot and head axes over the head row) in
 * *block_extent and the whole tensor's in *extent. */
static reshard_status check_nesting(const pool_check *c, size_t t,
                                    const axis axes[3], uint64_t head_bytes,
                                    uint64_t *block_extent, uint64_t *extent) {
  const axis *order[3] = {&axes[0], &axes[1], &axes[2]};
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 2 - pass; i++) {
      if (order[i]->stride > order[i + 1]->stride) {
        const axis *swap = order[i];
        order[i] = order[i + 1];
        order[i + 1] = swap;
      }
    }
  }
  uint64_t span = head_bytes;
  for (int i = 0; i < 3; i++) {
    const axis *a = order[i];
    if (a->count <= 1) {
      continue; /* free: it takes no part in the order */
    }
    if (a->stride < span) {
      return reshard_error_set(
          c->err, RESHARD_INVALID_ARGUMENT,
          "%s.tensors[%zu].%s: %llu is below %llu, the extent of the axes "
          "below it, so values would share bytes",
          c->path, t, a->name, (unsigned long long)a->stride,
          (unsigned long long)span);
    }
    if (!reshard_mul_add(a->count - 1, a->stride, span, &span)) {
      return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                               "%s.tensors[%zu]: its extent overflows 64 bits",
                               c->path, t);
    }
  }
  /* axes[0] is the block axis; the footprint of one block is what the
   * other two reach from the head row (bounded by `span`, so no overflow). */
  uint64_t below = head_bytes;
  for (int i = 1; i < 3; i++) {
    if (axes[i].count > 1) {
      below += (axes[i].count - 1) * axes[i].stride;
    }
  }
  *block_extent = below;
  *extent = span;
  return RESHARD_OK;
}

static bool item_multiple(const reshard_descriptor *descriptor,
                          uint64_t value) {
  return value % descriptor->itemsize == 0;
}

/* Checks tensor `t` on its own and records it in its group and `span`. */
static reshard_status check_tensor(const pool_check *c, const region_key *keys,
                                   size_t t, reshard_pool_group *groups,
                                   tensor_span *span) {
  const reshard_pool *pool = c->pool;
  const reshard_pool_tensor *tensor = &pool->tensors[t];
  const reshard_placement_part *part = c->part;
  if (tensor->component != RESHARD_COMPONENT_KEY &&
      tensor->component != RESHARD_COMPONENT_VALUE) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu].component: must be KEY or VALUE",
                             c->path, t);
  }
  if (tensor->component == RESHARD_COMPONENT_VALUE &&
      c->descriptor->value_head_dim == 0) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu].component: VALUE, but the "
                             "descriptor has value_head_dim 0 (a "
                             "single-tensor cache has no V)",
                             c->path, t);
  }
  ptrdiff_t layer = find_owned_layer(part, tensor->global_layer_id);
  if (layer < 0) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu].global_layer_id: layer %llu is "
                             "not owned by participant \"%s\"",
                             c->path, t,
                             (unsigned long long)tensor->global_layer_id,
                             part->participant_id);
  }
  size_t g = (size_t)layer * 2 + (size_t)(tensor->component - 1);
  if (groups[g].present) {
    return reshard_error_set(
        c->err, RESHARD_INVALID_ARGUMENT,
        "%s.tensors[%zu]: layer %llu %s has a tensor "
        "already (%s.tensors[%zu]); one per layer and "
        "component",
        c->path, t, (unsigned long long)tensor->global_layer_id,
        component_name(tensor->component), c->path, groups[g].tensor);
  }
  ptrdiff_t region_index =
      tensor->region_id == NULL
          ? -1
          : find_region(keys, pool->region_count, tensor->region_id);
  if (region_index < 0) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu].region_id: \"%s\" names no "
                             "region of the pool",
                             c->path, t,
                             tensor->region_id ? tensor->region_id : "");
  }
  const reshard_region *region = &pool->regions[region_index];
  uint64_t head_bytes = reshard_head_bytes(c->descriptor, tensor->component);
  const axis axes[3] = {
      {"block_stride_bytes", pool->num_blocks, tensor->block_stride_bytes},
      {"token_stride_bytes", pool->block_size, tensor->token_stride_bytes},
      {"head_stride_bytes", part->head_count, tensor->head_stride_bytes},
  };
  uint64_t block_extent = 0, extent = 0, end, start;
  reshard_status status =
      check_nesting(c, t, axes, head_bytes, &block_extent, &extent);
  if (status) {
    return status;
  }
  if (!reshard_add(tensor->offset_bytes, extent, &end) ||
      end > region->nbytes) {
    return reshard_error_set(
        c->err, RESHARD_INVALID_ARGUMENT,
        "%s.tensors[%zu]: the last byte of block %llu lies past the end of "
        "region \"%s\" (offset_bytes %llu + extent %llu > nbytes %llu)",
        c->path, t, (unsigned long long)(pool->num_blocks - 1),
        region->region_id, (unsigned long long)tensor->offset_bytes,
        (unsigned long long)extent, (unsigned long long)region->nbytes);
  }
  start = region->address + tensor->offset_bytes; /* below address + nbytes */
  if (!item_multiple(c->descriptor, start)) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu]: region address + offset_bytes "
                             "0x%llx is not a multiple of itemsize %llu",
                             c->path, t, (unsigned long long)start,
                             (unsigned long long)c->descriptor->itemsize);
  }
  for (int i = 0; i < 3; i++) {
    if (!item_multiple(c->descriptor, axes[i].stride)) {
      return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                               "%s.tensors[%zu].%s: %llu is not a multiple of "
                               "itemsize %llu",
                               c->path, t, axes[i].name,
                               (unsigned long long)axes[i].stride,
                               (unsigned long long)c->descriptor->itemsize);
    }
  }
  uint64_t head_stride =
      part->head_count > 1 ? tensor->head_stride_bytes : head_bytes;
  uint64_t row = (part->head_count - 1) * head_stride + head_bytes;
  groups[g] = (reshard_pool_group){
      .region_index = (uint64_t)region_index,
      .offset = tensor->offset_bytes,
      .block_stride = tensor->block_stride_bytes,
      .token_stride = pool->block_size > 1 ? tensor->token_stride_bytes : row,
      .head_stride = head_stride,
      .head_bytes = head_bytes,
      .tensor = t,
      .present = true,
  };
  *span = (tensor_span){start, start + extent, block_extent, t, g};
  return RESHARD_OK;
}

/* The footprints of the tensors whose spans hold the sweep's position, by
 * rank of their start on the circle (ranks 1..n, every tensor's fixed in
 * advance): a Fenwick tree of which ranks are present, so that the
 * footprints next to a new one are found in O(log n). */
typedef struct arc_set {
  size_t *tree;         /* n + 1 counts */
  size_t *at_rank;      /* n + 1: the span of each rank */
  size_t n, count, top; /* top: the highest power of two <= n */
} arc_set;

static void arc_set_update(arc_set *set, size_t rank, bool add) {
  for (; rank <= set->n; rank += rank & (~rank + 1)) {
    set->tree[rank] = add ? set->tree[rank] + 1 : set->tree[rank] - 1;
  }
  set->count = add ? set->count + 1 : set->count - 1;
}

/* How many present ranks are <= rank. */
static size_t arc_set_prefix(const arc_set *set, size_t rank) {
  size_t sum = 0;
  for (; rank > 0; rank -= rank & (~rank + 1)) {
    sum += set->tree[rank];
  }
  return sum;
}

/* The k-th present rank, 1 <= k <= count. */
static size_t arc_set_kth(const arc_set *set, size_t k) {
  size_t rank = 0;
  for (size_t step = set->top; step > 0; step >>= 1) {
    if (rank + step <= set->n && set->tree[rank + step] < k) {
      rank += step;
      k -= set->tree[rank];
    }
  }
  return rank + 1;
}

/* SPEC §1.5a for a pair whose spans overlap: one region, one block
 * stride, each block's extent within the stride, and the footprints
 * disjoint arcs of the circle of the stride's length. */
static reshard_status check_pair(const pool_check *c,
                                 const reshard_pool_group *groups,
                                 const tensor_span *a, const tensor_span *b) {
  const reshard_pool_group *ga = &groups[a->group], *gb = &groups[b->group];
  size_t lo = a->tensor < b->tensor ? a->tensor : b->tensor;
  size_t hi = a->tensor < b->tensor ? b->tensor : a->tensor;
  if (ga->region_index != gb->region_index ||
      ga->block_stride != gb->block_stride) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu] and %s.tensors[%zu] share "
                             "bytes: their spans overlap and they do not "
                             "interleave in one region with one block "
                             "stride",
                             c->path, lo, c->path, hi);
  }
  uint64_t stride = ga->block_stride;
  if (a->block_extent > stride || b->block_extent > stride) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu] and %s.tensors[%zu] share "
                             "bytes: their spans overlap and a block's "
                             "extent exceeds the block stride %llu",
                             c->path, lo, c->path, hi,
                             (unsigned long long)stride);
  }
  uint64_t pa = c->pool->tensors[a->tensor].offset_bytes % stride;
  uint64_t pb = c->pool->tensors[b->tensor].offset_bytes % stride;
  /* How far each arc's start lies past the other's, around the circle. */
  uint64_t b_after_a = pb >= pa ? pb - pa : (stride - pa) + pb;
  uint64_t a_after_b = pa >= pb ? pa - pb : (stride - pb) + pa;
  if (b_after_a < a->block_extent || a_after_b < b->block_extent) {
    return reshard_error_set(c->err, RESHARD_INVALID_ARGUMENT,
                             "%s.tensors[%zu] and %s.tensors[%zu] share "
                             "bytes",
                             c->path, lo, c->path, hi);
  }
  return RESHARD_OK;
}

/* SPEC §1.5a's disjointness rule over every pair of tensors, in
 * O(tensors · log tensors). A sweep over the spans sorted by start keeps
 * the active ones, those holding the current start: they all overlap one
 * another, so once there are two of them they share one region and one
 * block stride and their footprints are disjoint arcs of one circle,
 * sorted by where they start. A new span overlaps exactly the active
 * ones; its arc is disjoint from all of them when it is from the two
 * around it (the only one, when there is one). Two tensors whose spans
 * are disjoint are never compared, even when a third overlaps both: the
 * rule is pairwise, so their footprints may meet on the circle. (K and V
 * of a FlashInfer block and every layer of a page-first pool are active
 * together.) */
static reshard_status check_disjoint(const pool_check *c,
                                     const reshard_pool_group *groups,
                                     tensor_span *spans, size_t count) {
  qsort(spans, count, sizeof *spans, compare_spans);
  span_key *phases = RESHARD_ARENA_ARRAY(c->arena, span_key, count + 1);
  span_key *ends = RESHARD_ARENA_ARRAY(c->arena, span_key, count + 1);
  size_t *rank_of = RESHARD_ARENA_ARRAY(c->arena, size_t, count + 1);
  arc_set set = {
      .tree = RESHARD_ARENA_NEW(c->arena, size_t, count + 1),
      .at_rank = RESHARD_ARENA_ARRAY(c->arena, size_t, count + 1),
      .n = count,
  };
  if (phases == NULL || ends == NULL || rank_of == NULL || set.tree == NULL ||
      set.at_rank == NULL) {
    return out_of_memory(c);
  }
  set.top = 1;
  while (set.top <= count / 2) {
    set.top <<= 1;
  }
  for (size_t i = 0; i < count; i++) {
    uint64_t stride = groups[spans[i].group].block_stride;
    uint64_t offset = c->pool->tensors[spans[i].tensor].offset_bytes;
    /* A stride of 0 (one block) is refused before any arc is needed. */
    phases[i] = (span_key){stride > 0 ? offset % stride : 0, i};
    ends[i] = (span_key){spans[i].end, i};
  }
  qsort(phases, count, sizeof *phases, compare_span_keys);
  qsort(ends, count, sizeof *ends, compare_span_keys);
  for (size_t r = 0; r < count; r++) {
    rank_of[phases[r].span] = r + 1;
    set.at_rank[r + 1] = phases[r].span;
  }
  size_t ended = 0;
  for (size_t i = 0; i < count; i++) {
    /* Spans that end by this start were inserted (they start before it)
     * and overlap nothing from here on. */
    while (ended < count && ends[ended].key <= spans[i].start) {
      arc_set_update(&set, rank_of[ends[ended].span], false);
      ended++;
    }
    size_t rank = rank_of[i];
    if (set.count > 0) {
      size_t below = arc_set_prefix(&set, rank - 1);
      size_t before = arc_set_kth(&set, below > 0 ? below : set.count);
      size_t after = arc_set_kth(&set, below < set.count ? below + 1 : 1);
      reshard_status status =
          check_pair(c, groups, &spans[set.at_rank[before]], &spans[i]);
      if (status == RESHARD_OK && after != before) {
        status = check_pair(c, groups, &spans[set.at_rank[after]], &spans[i]);
      }
      if (status) {
        return status;
      }
    }
    arc_set_update(&set, rank, true);
  }
  return RESHARD_OK;
}

reshard_status reshard_pool_validate(const reshard_pool *pool,
                                     const reshard_descriptor *descriptor,
                                     const reshard_placement_part *part,
                                     const reshard_limits *limits,
                                     const char *path, reshard_arena *arena,
                                     reshard_bound_pool *out,
                                     reshard_error *err) {
  pool_check c = {pool, descriptor, part, path, err, arena};
  if (pool->tensor_count > limits->max_pool_tensors) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s.tensors: %zu tensors exceed the limit "
                             "max_pool_tensors %llu",
                             path, pool->tensor_count,
                             (unsigned long long)limits->max_pool_tensors);
  }
  if (pool->region_count > limits->max_ranges) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s.regions: %zu regions exceed the limit "
                             "max_ranges %llu",
                             path, pool->region_count,
                             (unsigned long long)limits->max_ranges);
  }
  if (pool->block_size == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.block_size: must be at least 1", path);
  }
  if (pool->num_blocks == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.num_blocks: must be at least 1", path);
  }
  region_key *keys = NULL;
  reshard_status status = check_regions(&c, &keys);
  if (status) {
    return status;
  }
  size_t group_count = part->layer_count * 2;
  reshard_pool_group *groups =
      RESHARD_ARENA_NEW(arena, reshard_pool_group, group_count + 1);
  tensor_span *spans =
      RESHARD_ARENA_ARRAY(arena, tensor_span, pool->tensor_count + 1);
  if (groups == NULL || spans == NULL) {
    return out_of_memory(&c);
  }
  for (size_t t = 0; t < pool->tensor_count; t++) {
    if ((status = check_tensor(&c, keys, t, groups, &spans[t]))) {
      return status;
    }
  }
  unsigned components = reshard_component_count(descriptor);
  for (size_t g = 0; g < group_count; g++) {
    unsigned component = (unsigned)(g % 2) + 1;
    if (component <= components && !groups[g].present) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s.tensors: no tensor for layer %llu %s, "
                               "which participant \"%s\" owns",
                               path, (unsigned long long)part->layer_ids[g / 2],
                               component_name((reshard_component)component),
                               part->participant_id);
    }
  }
  if ((status = check_disjoint(&c, groups, spans, pool->tensor_count))) {
    return status;
  }
  *out = (reshard_bound_pool){
      .part = part,
      .block_size = pool->block_size,
      .num_blocks = pool->num_blocks,
      .region_count = pool->region_count,
      .groups = groups,
      .group_count = group_count,
  };
  return RESHARD_OK;
}

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Finds an id that repeats an earlier one, in one pass over a bitmap of
 * the pool's blocks when that is small next to the table, else over a
 * sorted copy; stores both positions of the first repeat found. */
static reshard_status find_repeat(const uint32_t *ids, size_t count,
                                  uint64_t num_blocks, reshard_arena *arena,
                                  bool *found, size_t *first, size_t *again) {
  *found = false;
  if (num_blocks / 64 <= (uint64_t)count + 64) {
    uint64_t *seen = RESHARD_ARENA_NEW(arena, uint64_t, num_blocks / 64 + 1);
    if (seen == NULL) {
      return RESHARD_RESOURCE_EXHAUSTED;
    }
    for (size_t i = 0; i < count; i++) {
      uint64_t bit = 1ull << (ids[i] & 63);
      if (seen[ids[i] >> 6] & bit) {
        size_t earlier = 0;
        while (ids[earlier] != ids[i]) {
          earlier++;
        }
        *found = true;
        *first = earlier;
        *again = i;
        return RESHARD_OK;
      }
      seen[ids[i] >> 6] |= bit;
    }
    return RESHARD_OK;
  }
  /* (id, position) packed so that sorting integers orders by id, then
   * position; count is below 2^32 (max_block_ids). */
  uint64_t *keyed = RESHARD_ARENA_ARRAY(arena, uint64_t, count + 1);
  if (keyed == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  for (size_t i = 0; i < count; i++) {
    keyed[i] = (uint64_t)ids[i] << 32 | (uint64_t)i;
  }
  qsort(keyed, count, sizeof *keyed, compare_u64);
  size_t best = SIZE_MAX;
  for (size_t i = 1; i < count; i++) {
    if (keyed[i] >> 32 == keyed[i - 1] >> 32) {
      size_t position = (size_t)(keyed[i] & 0xffffffffu);
      best = position < best ? position : best;
    }
  }
  if (best != SIZE_MAX) {
    /* The earliest repeat in table order, and where its id first was. */
    *found = true;
    *again = best;
    size_t earlier = 0;
    while (ids[earlier] != ids[best]) {
      earlier++;
    }
    *first = earlier;
  }
  return RESHARD_OK;
}

/* Whether a group's head rows do not fit inside its token stride (heads
 * outside tokens, HND), so it binds one range per head. */
static bool group_split_heads(const reshard_bound_pool *pool,
                              const reshard_pool_group *group) {
  uint64_t heads = pool->part->head_count;
  return heads > 1 && group->token_stride <
                          (heads - 1) * group->head_stride + group->head_bytes;
}

reshard_status reshard_block_table_check(
    uint64_t block_size, uint64_t num_blocks, const uint32_t *block_ids,
    size_t count, uint64_t token_span, const reshard_limits *limits,
    const char *path, reshard_arena *scratch, reshard_error *err) {
  if (count > limits->max_block_ids) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s: %zu block ids exceed the limit "
                             "max_block_ids %llu",
                             path, count,
                             (unsigned long long)limits->max_block_ids);
  }
  /* ceil(token_span / block_size), without overflow. */
  uint64_t needed =
      token_span / block_size + (token_span % block_size != 0 ? 1 : 0);
  if (count < needed) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: %zu blocks of %llu tokens do not "
                             "cover the request's %llu tokens (%llu blocks "
                             "needed)",
                             path, count, (unsigned long long)block_size,
                             (unsigned long long)token_span,
                             (unsigned long long)needed);
  }
  for (size_t i = 0; i < count; i++) {
    if (block_ids[i] >= num_blocks) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s[%zu]: block %u is not below "
                               "num_blocks %llu",
                               path, i, block_ids[i],
                               (unsigned long long)num_blocks);
    }
  }
  bool repeated;
  size_t first = 0, again = 0;
  if (find_repeat(block_ids, count, num_blocks, scratch, &repeated, &first,
                  &again)) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s: out of memory", path);
  }
  if (repeated) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s[%zu]: block %u appears already at "
                             "%s[%zu]",
                             path, again, block_ids[again], path, first);
  }
  return RESHARD_OK;
}

reshard_status reshard_pooled_check(const reshard_pooled_memory *pooled,
                                    uint64_t page_count, uint64_t page_size,
                                    const reshard_limits *limits,
                                    reshard_arena *scratch,
                                    reshard_error *err) {
  uint64_t token_span;
  if (!reshard_mul(page_count, page_size, &token_span)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "page_keys: %llu pages of %llu tokens overflow",
                             (unsigned long long)page_count,
                             (unsigned long long)page_size);
  }
  const reshard_bound_pool *pool = pooled->pool;
  return reshard_block_table_check(pool->block_size, pool->num_blocks,
                                   pooled->block_ids, pooled->block_count,
                                   token_span, limits, "pooled.block_ids",
                                   scratch, err);
}

size_t reshard_pool_ranges_per_block(const reshard_bound_pool *pool,
                                     size_t group) {
  const reshard_pool_group *g = &pool->groups[group];
  if (!g->present) {
    return 0;
  }
  return group_split_heads(pool, g) ? (size_t)pool->part->head_count : 1;
}

size_t reshard_pool_window_ranges(const reshard_bound_pool *pool, size_t group,
                                  const uint32_t *block_ids,
                                  uint64_t window_start, uint64_t window_end,
                                  reshard_bound_range *out) {
  const reshard_pool_group *g = &pool->groups[group];
  if (!g->present || window_start >= window_end) {
    return 0;
  }
  const reshard_placement_part *part = pool->part;
  /* A group whose head axis is outside its token axis (HND) stands for
   * one range per block and head, as SPEC §1.5 writes such memory: a
   * range's token stride spans its head row. */
  bool split = group_split_heads(pool, g);
  uint64_t heads = split ? part->head_count : 1;
  uint64_t head_bytes = split ? g->head_bytes : g->head_stride;
  uint64_t block_size = pool->block_size;
  size_t written = 0;
  for (uint64_t block = window_start / block_size;
       block * block_size < window_end; block++) {
    uint64_t block_start = block * block_size;
    uint64_t token_start =
        block_start > window_start ? block_start : window_start;
    uint64_t token_end = window_end - block_start > block_size
                             ? block_start + block_size
                             : window_end;
    /* The pool's bounds check covered every block below num_blocks. */
    uint64_t offset = g->offset + (uint64_t)block_ids[block] * g->block_stride +
                      (token_start - block_start) * g->token_stride;
    for (uint64_t h = 0; h < heads; h++) {
      out[written++] = (reshard_bound_range){
          .layer_index = group / 2,
          .component = (reshard_component)(group % 2 + 1),
          .token_start = token_start,
          .token_end = token_end,
          .head_start = part->head_start + (split ? h : 0),
          .head_end = split ? part->head_start + h + 1
                            : part->head_start + part->head_count,
          .region_index = g->region_index,
          .region_offset = offset + h * g->head_stride,
          .token_stride = g->token_stride,
          .head_stride = head_bytes,
      };
    }
  }
  return written;
}

uint64_t reshard_pool_values(const reshard_bound_pool *pool,
                             uint64_t token_span) {
  uint64_t groups = 0;
  for (size_t g = 0; g < pool->group_count; g++) {
    groups += pool->groups[g].present;
  }
  uint64_t values;
  if (!reshard_mul(token_span, pool->part->head_count, &values) ||
      !reshard_mul(values, groups, &values)) {
    return UINT64_MAX;
  }
  return values;
}

reshard_status reshard_pool_bind(
    const reshard_bound_pool *pool, const uint32_t *block_ids, size_t count,
    uint64_t token_span, const reshard_limits *limits, const char *path,
    reshard_arena *arena, reshard_bound_binding *out, reshard_error *err) {
  char table_path[128];
  snprintf(table_path, sizeof table_path, "%s.block_ids", path);
  reshard_status status = reshard_block_table_check(
      pool->block_size, pool->num_blocks, block_ids, count, token_span, limits,
      table_path, arena, err);
  if (status) {
    return status;
  }
  uint64_t needed = token_span / pool->block_size +
                    (token_span % pool->block_size != 0 ? 1 : 0);
  uint64_t ranges_per_block = 0;
  for (size_t g = 0; g < pool->group_count; g++) {
    ranges_per_block += reshard_pool_ranges_per_block(pool, g);
  }
  /* Each range the table stands for is a unit of work and of memory, as a
   * binding range is: held to the same bound before they are written. */
  uint64_t range_count;
  if (!reshard_mul(needed, ranges_per_block, &range_count) ||
      range_count > limits->max_validation_work) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s: %llu blocks × %llu ranges a block exceed "
                             "the limit max_validation_work %llu",
                             path, (unsigned long long)needed,
                             (unsigned long long)ranges_per_block,
                             (unsigned long long)limits->max_validation_work);
  }
  reshard_bound_range *ranges =
      RESHARD_ARENA_ARRAY(arena, reshard_bound_range, range_count + 1);
  size_t *group_start =
      RESHARD_ARENA_ARRAY(arena, size_t, pool->group_count + 1);
  if (ranges == NULL || group_start == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s: out of memory", path);
  }
  size_t written = 0;
  for (size_t g = 0; g < pool->group_count; g++) {
    group_start[g] = written;
    /* Block by block, so each range is its block's, cut at the span. */
    for (uint64_t i = 0; i < needed; i++) {
      uint64_t start = i * pool->block_size; /* below token_span */
      uint64_t end = token_span - start > pool->block_size
                         ? start + pool->block_size
                         : token_span;
      written += reshard_pool_window_ranges(pool, g, block_ids, start, end,
                                            ranges + written);
    }
  }
  group_start[pool->group_count] = written;
  *out = (reshard_bound_binding){
      .part = pool->part,
      .token_span = token_span,
      .ranges = ranges,
      .range_count = written,
      .group_start = group_start,
      .group_count = pool->group_count,
      .region_count = pool->region_count,
      .validation_work = (uint64_t)count + range_count,
  };
  return RESHARD_OK;
}
