/* Memory pools for the oracles (pool_oracle.h). */
#include "pool_oracle.h"

#include <inttypes.h>

#include "oracle_internal.h"
#include "reshard/runs.h"

const char *oracle_pool_style_name(oracle_pool_style style) {
  switch (style) {
  case ORACLE_POOL_VLLM:
    return "vllm-nhd";
  case ORACLE_POOL_FLASHINFER:
    return "flashinfer-hnd";
  case ORACLE_POOL_PAGE_FIRST:
    return "page-first";
  case ORACLE_POOL_LATENT:
    return "mla-latent";
  }
  return "?";
}

static uint64_t round_up(uint64_t value, uint64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

/* The shape every style derives its strides from. */
typedef struct pool_shape {
  uint64_t slot;       /* one head's slot: the wider of hb(K), hb(V) */
  uint64_t heads;      /* the participant's */
  uint64_t components; /* 1 or 2 */
  uint64_t layers;     /* the participant's */
  uint64_t block;      /* tokens per block */
  uint64_t packed;     /* one component's block, packed: block*heads*slot */
  uint64_t row;        /* latent: padded token stride */
  uint64_t latent;     /* latent: padded block stride */
} pool_shape;

static pool_shape shape_of(const reshard_descriptor *desc,
                           const reshard_placement_part *part,
                           uint64_t block_size) {
  pool_shape s;
  s.components = components_of(desc);
  s.slot = head_bytes(desc, RESHARD_COMPONENT_KEY);
  if (s.components == 2) {
    s.slot = max_u64(s.slot, head_bytes(desc, RESHARD_COMPONENT_VALUE));
  }
  s.heads = part->head_count;
  s.layers = part->layer_count;
  s.block = block_size;
  s.packed = block_size * s.heads * s.slot;
  s.row = round_up(s.heads * s.slot, 16);
  s.latent = round_up(block_size * s.row, 64);
  return s;
}

uint64_t oracle_pool_block_bytes(const reshard_descriptor *desc,
                                 const reshard_placement_part *part,
                                 oracle_pool_style style, uint64_t block_size) {
  pool_shape s = shape_of(desc, part, block_size);
  uint64_t per_tensor = style == ORACLE_POOL_LATENT ? s.latent : s.packed;
  return s.layers * s.components * per_tensor;
}

void oracle_build_pool_at(const reshard_descriptor *desc,
                          const reshard_placement_part *part,
                          oracle_pool_style style, uint64_t block_size,
                          uint64_t num_blocks, const oracle_pool_site *site,
                          reshard_arena *arena, reshard_pool *out) {
  pool_shape s = shape_of(desc, part, block_size);
  bool per_layer = style == ORACLE_POOL_VLLM || style == ORACLE_POOL_FLASHINFER;
  size_t region_count = per_layer ? part->layer_count : 1;
  reshard_region *regions = anew(arena, region_count, sizeof *regions);
  for (size_t r = 0; r < region_count; r++) {
    uint64_t bytes =
        num_blocks * oracle_pool_block_bytes(desc, part, style, block_size);
    if (per_layer) {
      bytes /= s.layers;
    }
    regions[r] = (reshard_region){
        aprintf(arena, "%s%zu", site->region_prefix, site->first_region + r),
        site->address + (uint64_t)r * site->address_step, bytes};
  }
  size_t count = (size_t)(s.layers * s.components);
  reshard_pool_tensor *tensors = anew(arena, count, sizeof *tensors);
  size_t n = 0;
  for (size_t l = 0; l < part->layer_count; l++) {
    for (uint64_t c = 0; c < s.components; c++) {
      reshard_pool_tensor *t = &tensors[n++];
      t->global_layer_id = part->layer_ids[l];
      t->component = component_at((unsigned)c);
      t->region_id = regions[per_layer ? l : 0].region_id;
      switch (style) {
      case ORACLE_POOL_VLLM:
        t->offset_bytes = c * num_blocks * s.packed;
        t->block_stride_bytes = s.packed;
        t->token_stride_bytes = s.heads * s.slot;
        t->head_stride_bytes = s.slot;
        break;
      case ORACLE_POOL_FLASHINFER:
        t->offset_bytes = c * s.packed;
        t->block_stride_bytes = s.components * s.packed;
        t->token_stride_bytes = s.slot;
        t->head_stride_bytes = s.block * s.slot;
        break;
      case ORACLE_POOL_PAGE_FIRST:
        t->offset_bytes = (l * s.components + c) * s.packed;
        t->block_stride_bytes = s.layers * s.components * s.packed;
        t->token_stride_bytes = s.heads * s.slot;
        t->head_stride_bytes = s.slot;
        break;
      case ORACLE_POOL_LATENT:
        t->offset_bytes = (l * s.components + c) * num_blocks * s.latent;
        t->block_stride_bytes = s.latent;
        t->token_stride_bytes = s.row;
        t->head_stride_bytes = s.slot;
        break;
      }
    }
  }
  *out = (reshard_pool){
      .participant_id = part->participant_id,
      .endpoint = site->endpoint,
      .regions = regions,
      .region_count = region_count,
      .block_size = block_size,
      .num_blocks = num_blocks,
      .tensors = tensors,
      .tensor_count = n,
  };
}

void oracle_build_pool(const reshard_descriptor *desc,
                       const reshard_placement_part *part,
                       oracle_pool_style style, uint64_t block_size,
                       uint64_t num_blocks, reshard_arena *arena,
                       reshard_pool *out) {
  const oracle_pool_site site = {"oracle://pool", "pool", 0, UINT64_C(1) << 40,
                                 UINT64_C(1) << 40};
  oracle_build_pool_at(desc, part, style, block_size, num_blocks, &site, arena,
                       out);
}

uint32_t *oracle_block_table(oracle_rng *rng, reshard_arena *arena,
                             uint64_t num_blocks) {
  uint32_t *ids = anew(arena, (size_t)num_blocks, sizeof *ids);
  for (uint64_t b = 0; b < num_blocks; b++) {
    ids[b] = (uint32_t)b;
  }
  oracle_rng_shuffle(rng, ids, (size_t)num_blocks, sizeof *ids);
  return ids;
}

uint32_t *oracle_block_table_in_runs(oracle_rng *rng, reshard_arena *arena,
                                     uint64_t num_blocks) {
  uint32_t *ids = anew(arena, (size_t)num_blocks, sizeof *ids);
  for (uint64_t b = 0; b < num_blocks; b++) {
    ids[b] = (uint32_t)b;
  }
  oracle_rng_shuffle_in_runs(rng, ids, (size_t)num_blocks, sizeof *ids);
  return ids;
}

void oracle_pool_binding(const reshard_pool *pool,
                         const reshard_descriptor *desc,
                         const reshard_placement_part *part,
                         const uint32_t *ids, uint64_t span,
                         reshard_arena *arena, reshard_binding *out) {
  uint64_t bs = pool->block_size;
  uint64_t blocks = (span + bs - 1) / bs;
  size_t room = (size_t)(pool->tensor_count * blocks * part->head_count);
  reshard_binding_range *ranges = anew(arena, room, sizeof *ranges);
  size_t n = 0;
  for (size_t t = 0; t < pool->tensor_count; t++) {
    const reshard_pool_tensor *tensor = &pool->tensors[t];
    uint64_t hb = head_bytes(desc, tensor->component);
    /* An axis of count 1 takes no part in addressing; SPEC §1.5 wants its
     * stride to be that of a packed axis. */
    uint64_t hs = part->head_count > 1 ? tensor->head_stride_bytes : hb;
    uint64_t row = (part->head_count - 1) * hs + hb;
    uint64_t ts = bs > 1 ? tensor->token_stride_bytes : row;
    bool per_head = ts < row;
    uint64_t heads = per_head ? part->head_count : 1;
    for (uint64_t i = 0; i < blocks; i++) {
      uint64_t start = i * bs;
      uint64_t count = min_u64(span - start, bs);
      for (uint64_t h = 0; h < heads; h++) {
        ranges[n++] = (reshard_binding_range){
            .global_layer_id = tensor->global_layer_id,
            .component = tensor->component,
            .token_start = start,
            .token_count = count,
            .head_start = part->head_start + h,
            .head_count = per_head ? 1 : part->head_count,
            .region_id = tensor->region_id,
            .offset_bytes = tensor->offset_bytes +
                            (uint64_t)ids[i] * tensor->block_stride_bytes +
                            h * hs,
            .token_stride_bytes = ts,
            .head_stride_bytes = per_head ? hb : hs,
        };
      }
    }
  }
  *out = (reshard_binding){
      .participant_id = pool->participant_id,
      .endpoint = pool->endpoint,
      .regions = pool->regions,
      .region_count = pool->region_count,
      .ranges = ranges,
      .range_count = n,
  };
}

#define SAME(what, a, b)                                                       \
  do {                                                                         \
    if ((uint64_t)(a) != (uint64_t)(b)) {                                      \
      return failf(msg, msg_size, "%s: %" PRIu64 " against %" PRIu64, what,    \
                   (uint64_t)(a), (uint64_t)(b));                              \
    }                                                                          \
  } while (0)

bool oracle_same_bound(const reshard_bound_binding *a,
                       const reshard_bound_binding *b, char *msg,
                       size_t msg_size) {
  SAME("token_span", a->token_span, b->token_span);
  SAME("range_count", a->range_count, b->range_count);
  SAME("group_count", a->group_count, b->group_count);
  for (size_t g = 0; g <= a->group_count; g++) {
    SAME("group_start", a->group_start[g], b->group_start[g]);
  }
  for (size_t i = 0; i < a->range_count; i++) {
    const reshard_bound_range *x = &a->ranges[i], *y = &b->ranges[i];
    if (x->layer_index != y->layer_index || x->component != y->component ||
        x->token_start != y->token_start || x->token_end != y->token_end ||
        x->head_start != y->head_start || x->head_end != y->head_end ||
        x->region_index != y->region_index ||
        x->region_offset != y->region_offset ||
        x->token_stride != y->token_stride ||
        x->head_stride != y->head_stride) {
      return failf(
          msg, msg_size,
          "range %zu: layer %" PRIu64 " %s tokens [%" PRIu64 ", %" PRIu64
          ") heads [%" PRIu64 ", %" PRIu64 ") region %" PRIu64 " +%" PRIu64
          " strides %" PRIu64 "/%" PRIu64 " against layer %" PRIu64
          " %s tokens [%" PRIu64 ", %" PRIu64 ") heads [%" PRIu64 ", %" PRIu64
          ") region %" PRIu64 " +%" PRIu64 " strides %" PRIu64 "/%" PRIu64,
          i, x->layer_index, component_name(x->component), x->token_start,
          x->token_end, x->head_start, x->head_end, x->region_index,
          x->region_offset, x->token_stride, x->head_stride, y->layer_index,
          component_name(y->component), y->token_start, y->token_end,
          y->head_start, y->head_end, y->region_index, y->region_offset,
          y->token_stride, y->head_stride);
    }
  }
  return true;
}

static bool same_copies(const reshard_copy *a, const reshard_copy *b,
                        size_t count, char *msg, size_t msg_size) {
  if (count > 0 && (a == NULL || b == NULL)) {
    return a == b || failf(msg, msg_size, "one plan has no copies");
  }
  for (size_t i = 0; i < count; i++) {
    const reshard_copy *x = &a[i], *y = &b[i];
    if (x->page_index != y->page_index || x->part_index != y->part_index ||
        x->part_offset != y->part_offset ||
        x->region_index != y->region_index ||
        x->region_offset != y->region_offset || x->nbytes != y->nbytes) {
      return failf(msg, msg_size,
                   "copy %zu: {page %" PRIu64 " part %" PRIu64 " +%" PRIu64
                   " region %" PRIu64 " +%" PRIu64 " n %" PRIu64
                   "} against {page %" PRIu64 " part %" PRIu64 " +%" PRIu64
                   " region %" PRIu64 " +%" PRIu64 " n %" PRIu64 "}",
                   i, x->page_index, x->part_index, x->part_offset,
                   x->region_index, x->region_offset, x->nbytes, y->page_index,
                   y->part_index, y->part_offset, y->region_index,
                   y->region_offset, y->nbytes);
    }
  }
  return true;
}

static bool same_batches(const reshard_batch *a, const reshard_batch *b,
                         size_t count, char *msg, size_t msg_size) {
  for (size_t i = 0; i < count; i++) {
    if (a[i].first != b[i].first || a[i].count != b[i].count ||
        a[i].bytes != b[i].bytes) {
      return failf(msg, msg_size,
                   "batch %zu: {%zu, %zu copies, %" PRIu64
                   " bytes} against {%zu, %zu copies, %" PRIu64 " bytes}",
                   i, a[i].first, a[i].count, a[i].bytes, b[i].first,
                   b[i].count, b[i].bytes);
    }
  }
  return true;
}

static bool same_runs(const reshard_runs *a, const reshard_runs *b, char *msg,
                      size_t msg_size) {
  SAME("runs.batch_count", a->batch_count, b->batch_count);
  SAME("runs.run_count", a->run_count, b->run_count);
  if ((a->batch_first == NULL) != (b->batch_first == NULL)) {
    return failf(msg, msg_size, "one plan has runs, the other none");
  }
  for (size_t i = 0; a->batch_first != NULL && i <= a->batch_count; i++) {
    SAME("runs.batch_first", a->batch_first[i], b->batch_first[i]);
  }
  for (size_t i = 0; i < a->run_count; i++) {
    const reshard_run *x = &a->runs[i], *y = &b->runs[i];
    if (!same_copies(&x->first, &y->first, 1, msg, msg_size) ||
        x->count != y->count || x->part_stride != y->part_stride ||
        x->region_stride != y->region_stride) {
      return failf(msg, msg_size,
                   "run %zu: %" PRIu64 " copies strides %" PRIu64 "/%" PRIu64
                   " against %" PRIu64 " copies strides %" PRIu64 "/%" PRIu64
                   " (or their first copies differ)",
                   i, x->count, x->part_stride, x->region_stride, y->count,
                   y->part_stride, y->region_stride);
    }
  }
  return true;
}

bool oracle_same_load_plans(const reshard_load_plan *a,
                            const reshard_load_plan *b, char *msg,
                            size_t msg_size) {
  SAME("hit_pages", a->hit_pages, b->hit_pages);
  for (uint64_t p = 0; p < a->hit_pages; p++) {
    SAME("page_source", a->page_source[p], b->page_source[p]);
  }
  SAME("copy_count", a->copy_count, b->copy_count);
  SAME("batch_count", a->batch_count, b->batch_count);
  SAME("operations", a->operations, b->operations);
  SAME("bytes", a->bytes, b->bytes);
  SAME("copies_before_coalescing", a->copies_before_coalescing,
       b->copies_before_coalescing);
  SAME("copies_after_coalescing", a->copies_after_coalescing,
       b->copies_after_coalescing);
  SAME("sequence_pages", a->sequence_pages, b->sequence_pages);
  if (strcmp(a->participant->participant_id, b->participant->participant_id)) {
    return failf(msg, msg_size, "participant \"%s\" against \"%s\"",
                 a->participant->participant_id,
                 b->participant->participant_id);
  }
  return same_copies(a->copies, b->copies, a->copy_count, msg, msg_size) &&
         same_batches(a->batches, b->batches, a->batch_count, msg, msg_size) &&
         same_runs(&a->runs, &b->runs, msg, msg_size);
}

bool oracle_same_store_plans(const reshard_store_plan *a,
                             const reshard_store_plan *b, char *msg,
                             size_t msg_size) {
  SAME("part_count", a->part_count, b->part_count);
  for (size_t i = 0; i < a->part_count; i++) {
    SAME("part_indexes", a->part_indexes[i], b->part_indexes[i]);
  }
  SAME("copy_count", a->copy_count, b->copy_count);
  SAME("batch_count", a->batch_count, b->batch_count);
  SAME("operations", a->operations, b->operations);
  SAME("bytes", a->bytes, b->bytes);
  SAME("copies_before_coalescing", a->copies_before_coalescing,
       b->copies_before_coalescing);
  SAME("copies_after_coalescing", a->copies_after_coalescing,
       b->copies_after_coalescing);
  return same_copies(a->copies, b->copies, a->copy_count, msg, msg_size) &&
         same_batches(a->batches, b->batches, a->batch_count, msg, msg_size) &&
         same_runs(&a->runs, &b->runs, msg, msg_size);
}

bool oracle_check_runs_fold(const reshard_copy *copies,
                            const reshard_batch *batches, size_t batch_count,
                            const reshard_runs *runs, char *msg,
                            size_t msg_size) {
  reshard_arena arena;
  reshard_arena_init(&arena, 0);
  reshard_runs expected;
  reshard_error err;
  reshard_error_clear(&err);
  bool ok;
  if (reshard_runs_fold(copies, batches, batch_count, &arena, &expected,
                        &err)) {
    ok = failf(msg, msg_size, "reshard_runs_fold: %s", err.message);
  } else {
    char inner[ORACLE_MSG_SIZE];
    ok = same_runs(runs, &expected, inner, sizeof inner) ||
         failf(msg, msg_size,
               "the plan's runs are not the fold of its copies: "
               "%s",
               inner);
  }
  reshard_arena_destroy(&arena);
  return ok;
}
