#include "scenario.h"

#include <stdio.h>
#include <string.h>

#include "reshard/placement.h"

const scenario_spec scenario_specs[5] = {
    {"S1 llama3-8b", 32, 8, 128, 128, 2, 16, "bf16", 1, 1, 2, 1,
     RESHARD_FORMAT_PLHD, 128, 16, SCENARIO_MEMORY_NHD},
    {"S2 llama3-70b", 80, 8, 128, 128, 2, 64, "bf16", 8, 1, 4, 2,
     RESHARD_FORMAT_LPHD, 32, 64, SCENARIO_MEMORY_NHD},
    {"S3 qwen2.5-72b", 80, 8, 128, 128, 2, 32, "bf16", 4, 1, 16, 1,
     RESHARD_FORMAT_HPLD, 64, 16, SCENARIO_MEMORY_HND},
    {"S4 deepseek-v3", 61, 1, 576, 0, 2, 64, "bf16", 8, 1, 4, 2,
     RESHARD_FORMAT_PLHD, 64, 64, SCENARIO_MEMORY_NHD},
    {"S5 llama3-405b", 126, 8, 128, 128, 1, 128, "fp8", 8, 2, 8, 4,
     RESHARD_FORMAT_LPHD, 256, 128, SCENARIO_MEMORY_NHD},
};

static uint64_t next_random(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static reshard_status out_of_memory(reshard_error *err) {
  return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                           "scenario: out of memory");
}

/* A TP x PP placement in DP 1: PP splits layers into contiguous chunks,
 * TP splits heads, or replicates them when TP exceeds the head count. */
static reshard_status build_placement(const scenario_spec *spec, uint64_t tp,
                                      uint64_t pp, reshard_arena *arena,
                                      reshard_placement *out,
                                      reshard_error *err) {
  uint64_t *all_layers = RESHARD_ARENA_NEW(arena, uint64_t, spec->layers);
  reshard_placement_part *parts =
      RESHARD_ARENA_NEW(arena, reshard_placement_part, tp * pp);
  if (all_layers == NULL || parts == NULL) {
    return out_of_memory(err);
  }
  for (uint64_t l = 0; l < spec->layers; l++) {
    all_layers[l] = l;
  }
  uint64_t replicas = tp > spec->heads ? tp / spec->heads : 1;
  uint64_t heads_per_rank = tp > spec->heads ? 1 : spec->heads / tp;
  for (uint64_t p = 0; p < pp; p++) {
    uint64_t first = spec->layers * p / pp;
    uint64_t last = spec->layers * (p + 1) / pp;
    for (uint64_t t = 0; t < tp; t++) {
      reshard_placement_part *part = &parts[p * tp + t];
      char id[64];
      snprintf(id, sizeof id, "pp%02llu-tp%02llu", (unsigned long long)p,
               (unsigned long long)t);
      part->participant_id = reshard_arena_strdup(arena, id);
      part->rank = (reshard_rank){0, p, t};
      part->layer_count = last - first;
      part->layer_ids = RESHARD_ARENA_NEW(arena, uint64_t, last - first + 1);
      if (part->participant_id == NULL || part->layer_ids == NULL) {
        return out_of_memory(err);
      }
      for (uint64_t l = first; l < last; l++) {
        part->layer_ids[l - first] = l;
      }
      part->head_start = (t / replicas) * heads_per_rank;
      part->head_count = heads_per_rank;
      part->replica_ordinal = t % replicas;
      part->replica_count = replicas;
    }
  }
  *out = (reshard_placement){
      .resource_id = "kv",
      .revision = "r1",
      .placement_set_id = "bench",
      .dp_size = 1,
      .pp_size = pp,
      .tp_size = tp,
      .descriptor = {.global_layer_ids = all_layers,
                     .layer_count = spec->layers,
                     .dtype = spec->dtype,
                     .itemsize = spec->itemsize,
                     .page_size = spec->page_size,
                     .total_kv_heads = spec->heads,
                     .key_head_dim = spec->key_dim,
                     .value_head_dim = spec->value_dim},
      .parts = parts,
      .part_count = tp * pp,
  };
  return reshard_placement_normalize(out, arena, err);
}

/* A paged pool: per (layer, component) an array of twice the blocks the
 * request needs, the request's blocks at shuffled slots. */
static reshard_status build_binding(const scenario_spec *spec, uint64_t pages,
                                    const reshard_placement_part *part,
                                    uint64_t seed, reshard_arena *arena,
                                    scenario *built, reshard_error *err) {
  reshard_binding *out = &built->binding;
  unsigned components = spec->value_dim == 0 ? 1 : 2;
  uint64_t tokens = pages * spec->page_size;
  uint64_t blocks = (tokens + spec->block_tokens - 1) / spec->block_tokens;
  uint64_t slots = blocks * 2;
  uint64_t heads = part->head_count;
  uint64_t width =
      spec->key_dim > spec->value_dim ? spec->key_dim : spec->value_dim;
  uint64_t block_bytes = spec->block_tokens * heads * width * spec->itemsize;
  uint64_t groups = part->layer_count * components;
  uint64_t ranges_per_block = spec->memory == SCENARIO_MEMORY_HND ? heads : 1;
  size_t range_count = groups * blocks * ranges_per_block;
  reshard_binding_range *ranges =
      RESHARD_ARENA_NEW(arena, reshard_binding_range, range_count);
  uint64_t *slot_of = RESHARD_ARENA_NEW(arena, uint64_t, slots);
  reshard_region *region = RESHARD_ARENA_NEW(arena, reshard_region, 1);
  if (ranges == NULL || slot_of == NULL || region == NULL) {
    return out_of_memory(err);
  }
  for (uint64_t s = 0; s < slots; s++) {
    slot_of[s] = s;
  }
  for (uint64_t s = slots - 1; s > 0; s--) {
    uint64_t j = next_random(&seed) % (s + 1);
    uint64_t swap = slot_of[s];
    slot_of[s] = slot_of[j];
    slot_of[j] = swap;
  }
  size_t n = 0;
  for (uint64_t l = 0; l < part->layer_count; l++) {
    for (unsigned c = 0; c < components; c++) {
      uint64_t hb = (c == 0 ? spec->key_dim : spec->value_dim) * spec->itemsize;
      uint64_t group_base = (l * components + c) * slots * block_bytes;
      for (uint64_t b = 0; b < blocks; b++) {
        uint64_t start = b * spec->block_tokens;
        uint64_t count = tokens - start < spec->block_tokens
                             ? tokens - start
                             : spec->block_tokens;
        uint64_t base = group_base + slot_of[b] * block_bytes;
        for (uint64_t r = 0; r < ranges_per_block; r++) {
          reshard_binding_range *range = &ranges[n++];
          *range = (reshard_binding_range){
              .global_layer_id = part->layer_ids[l],
              .component =
                  c == 0 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE,
              .token_start = start,
              .token_count = count,
              .region_id = "pool",
          };
          if (spec->memory == SCENARIO_MEMORY_HND) {
            range->head_start = part->head_start + r;
            range->head_count = 1;
            range->offset_bytes = base + r * spec->block_tokens * hb;
            range->token_stride_bytes = hb;
            range->head_stride_bytes = hb;
          } else {
            range->head_start = part->head_start;
            range->head_count = heads;
            range->offset_bytes = base;
            range->token_stride_bytes = heads * hb;
            range->head_stride_bytes = hb;
          }
        }
      }
    }
  }
  *region = (reshard_region){"pool", 1ull << 20, groups * slots * block_bytes};
  built->groups = (size_t)groups;
  built->group_bytes = slots * block_bytes;
  *out = (reshard_binding){
      .participant_id = part->participant_id,
      .endpoint = "bench",
      .regions = region,
      .region_count = 1,
      .ranges = ranges,
      .range_count = n,
  };
  return RESHARD_OK;
}

reshard_status scenario_build(const scenario_spec *spec, uint64_t pages,
                              size_t reader_index, uint64_t seed,
                              reshard_arena *arena, scenario *out,
                              reshard_error *err) {
  memset(out, 0, sizeof *out);
  if (pages == 0) {
    pages = spec->pages;
  }
  reshard_limits limits = reshard_limits_default();
  reshard_status status;
  if ((status = build_placement(spec, spec->writer_tp, spec->writer_pp, arena,
                                &out->writer, err)) ||
      (status = build_placement(spec, spec->reader_tp, spec->reader_pp, arena,
                                &out->reader, err)) ||
      (status = reshard_plan_upload(&out->writer, spec->format, false, 0,
                                    &limits, arena, &out->upload, err))) {
    return status;
  }
  if (reader_index >= out->reader.part_count) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "scenario: reader index %zu out of range",
                             reader_index);
  }
  if ((status = build_binding(spec, pages, &out->reader.parts[reader_index],
                              seed, arena, out, err))) {
    return status;
  }
  out->source =
      (reshard_plan_source){&out->upload.layout, out->upload.layout_id, NULL};
  out->page_source_start = RESHARD_ARENA_NEW(arena, size_t, pages + 1);
  out->page_sources = RESHARD_ARENA_NEW(arena, size_t, pages);
  if (out->page_source_start == NULL || out->page_sources == NULL) {
    return out_of_memory(err);
  }
  for (uint64_t p = 0; p <= pages; p++) {
    out->page_source_start[p] = p;
  }
  out->request = (reshard_load_request){
      .placement = &out->reader,
      .binding = &out->binding,
      .page_count = pages,
      .sources = &out->source,
      .source_count = 1,
      .page_source_start = out->page_source_start,
      .page_sources = out->page_sources,
      .limits = limits,
  };
  return RESHARD_OK;
}

reshard_status scenario_build_store(const scenario_spec *spec, uint64_t pages,
                                    uint64_t seed, reshard_arena *arena,
                                    store_scenario *out, reshard_error *err) {
  memset(out, 0, sizeof *out);
  if (pages == 0) {
    pages = spec->pages;
  }
  reshard_status status =
      scenario_build(spec, pages, 0, seed, arena, &out->load, err);
  if (status) {
    return status;
  }
  const reshard_placement *writer = &out->load.writer;
  for (size_t p = 0; p < writer->part_count && out->writer_part == NULL; p++) {
    const reshard_placement_part *part = &writer->parts[p];
    if (part->replica_ordinal == 0 && part->layer_count > 0) {
      out->writer_part = part;
    }
  }
  /* The writer's memory is built like a reader's; only its binding is kept. */
  scenario memory = {0};
  if ((status = build_binding(spec, pages, out->writer_part, seed, arena,
                              &memory, err))) {
    return status;
  }
  out->binding = memory.binding;
  out->request = (reshard_store_request){
      .placement = writer,
      .binding = &out->binding,
      .page_count = pages,
      .layout = &out->load.upload.layout,
      .layout_id = out->load.upload.layout_id,
      .limits = reshard_limits_default(),
  };
  return RESHARD_OK;
}

reshard_status scenario_region_per_layer(scenario *s, reshard_arena *arena,
                                         reshard_error *err) {
  const reshard_region *pool = &s->binding.regions[0];
  reshard_region *regions = RESHARD_ARENA_NEW(arena, reshard_region, s->groups);
  if (regions == NULL) {
    return out_of_memory(err);
  }
  for (size_t g = 0; g < s->groups; g++) {
    char id[32];
    snprintf(id, sizeof id, "layer-slot-%zu", g);
    regions[g] =
        (reshard_region){reshard_arena_strdup(arena, id),
                         pool->address + g * s->group_bytes, s->group_bytes};
    if (regions[g].region_id == NULL) {
      return out_of_memory(err);
    }
  }
  for (size_t i = 0; i < s->binding.range_count; i++) {
    reshard_binding_range *range = &s->binding.ranges[i];
    size_t g = (size_t)(range->offset_bytes / s->group_bytes);
    range->region_id = regions[g].region_id;
    range->offset_bytes -= g * s->group_bytes;
  }
  s->binding.regions = regions;
  s->binding.region_count = s->groups;
  return RESHARD_OK;
}

void scenario_shuffle_ranges(scenario *s, uint64_t seed) {
  reshard_binding_range *ranges = s->binding.ranges;
  for (size_t i = s->binding.range_count; i > 1; i--) {
    size_t j = (size_t)(next_random(&seed) % i);
    reshard_binding_range swap = ranges[i - 1];
    ranges[i - 1] = ranges[j];
    ranges[j] = swap;
  }
}

/* The explicit binding SPEC §1.5 writes for `pool` and its first `blocks`
 * table entries over tokens [0, tokens): per tensor one range per block,
 * and per head too where a head's tokens are not one row. */
static reshard_status pool_binding(const scenario_spec *spec,
                                   const reshard_placement_part *part,
                                   scenario_pool *p, uint64_t tokens,
                                   reshard_arena *arena, reshard_error *err) {
  const reshard_pool *pool = &p->pool;
  uint64_t heads = part->head_count;
  size_t room = pool->tensor_count * p->block_count * heads;
  reshard_binding_range *ranges =
      RESHARD_ARENA_NEW(arena, reshard_binding_range, room + 1);
  if (ranges == NULL) {
    return out_of_memory(err);
  }
  size_t n = 0;
  for (size_t t = 0; t < pool->tensor_count; t++) {
    const reshard_pool_tensor *tensor = &pool->tensors[t];
    uint64_t hb =
        (tensor->component == RESHARD_COMPONENT_KEY ? spec->key_dim
                                                    : spec->value_dim) *
        spec->itemsize;
    uint64_t hs = heads > 1 ? tensor->head_stride_bytes : hb;
    uint64_t row = (heads - 1) * hs + hb;
    uint64_t ts = pool->block_size > 1 ? tensor->token_stride_bytes : row;
    bool per_head = ts < row;
    for (size_t i = 0; i < p->block_count; i++) {
      uint64_t start = i * pool->block_size;
      uint64_t count =
          tokens - start < pool->block_size ? tokens - start : pool->block_size;
      for (uint64_t h = 0; h < (per_head ? heads : 1); h++) {
        ranges[n++] = (reshard_binding_range){
            .global_layer_id = tensor->global_layer_id,
            .component = tensor->component,
            .token_start = start,
            .token_count = count,
            .head_start = part->head_start + h,
            .head_count = per_head ? 1 : heads,
            .region_id = tensor->region_id,
            .offset_bytes =
                tensor->offset_bytes +
                (uint64_t)p->block_ids[i] * tensor->block_stride_bytes + h * hs,
            .token_stride_bytes = ts,
            .head_stride_bytes = per_head ? hb : hs,
        };
      }
    }
  }
  p->binding = (reshard_binding){
      .participant_id = pool->participant_id,
      .endpoint = pool->endpoint,
      .regions = pool->regions,
      .region_count = pool->region_count,
      .ranges = ranges,
      .range_count = n,
  };
  return RESHARD_OK;
}

reshard_status scenario_build_pool(const scenario_spec *spec, const scenario *s,
                                   uint64_t seed, reshard_arena *arena,
                                   scenario_pool *out, reshard_error *err) {
  memset(out, 0, sizeof *out);
  const reshard_placement_part *part =
      reshard_placement_find_part(&s->reader, s->binding.participant_id);
  if (part == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "scenario: no reader participant %s",
                             s->binding.participant_id);
  }
  unsigned components = spec->value_dim == 0 ? 1 : 2;
  uint64_t tokens = s->request.page_count * spec->page_size;
  uint64_t block = spec->block_tokens;
  uint64_t needed = (tokens + block - 1) / block;
  uint64_t num_blocks = needed * 2;
  uint64_t heads = part->head_count;
  uint64_t slot =
      (spec->key_dim > spec->value_dim ? spec->key_dim : spec->value_dim) *
      spec->itemsize;
  uint64_t component_block = block * heads * slot;
  uint64_t layer_bytes = num_blocks * components * component_block;
  bool hnd = spec->memory == SCENARIO_MEMORY_HND;
  size_t layers = (size_t)part->layer_count;
  reshard_region *regions = RESHARD_ARENA_NEW(arena, reshard_region, layers);
  reshard_pool_tensor *tensors =
      RESHARD_ARENA_NEW(arena, reshard_pool_tensor, layers * components);
  uint64_t *order = RESHARD_ARENA_NEW(arena, uint64_t, num_blocks);
  out->block_ids = RESHARD_ARENA_NEW(arena, uint32_t, needed);
  if (regions == NULL || tensors == NULL || order == NULL ||
      out->block_ids == NULL) {
    return out_of_memory(err);
  }
  /* One allocation per layer, 1 MiB apart, as an engine's tensors are. */
  uint64_t address = 1ull << 32;
  size_t n = 0;
  for (size_t l = 0; l < layers; l++) {
    char id[32];
    snprintf(id, sizeof id, "L%llu", (unsigned long long)part->layer_ids[l]);
    regions[l] =
        (reshard_region){reshard_arena_strdup(arena, id), address, layer_bytes};
    if (regions[l].region_id == NULL) {
      return out_of_memory(err);
    }
    address += (layer_bytes + (2ull << 20) - 1) & ~((1ull << 20) - 1);
    for (unsigned c = 0; c < components; c++) {
      reshard_pool_tensor *t = &tensors[n++];
      *t = (reshard_pool_tensor){
          .global_layer_id = part->layer_ids[l],
          .component = c == 0 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE,
          .region_id = regions[l].region_id,
      };
      if (hnd) { /* [blocks, 2, heads, block, dim] */
        t->offset_bytes = c * component_block;
        t->block_stride_bytes = components * component_block;
        t->head_stride_bytes = block * slot;
        t->token_stride_bytes = slot;
      } else { /* [2, blocks, block, heads, dim], or [blocks, block, 1, dim] */
        t->offset_bytes = c * num_blocks * component_block;
        t->block_stride_bytes = component_block;
        t->token_stride_bytes = heads * slot;
        t->head_stride_bytes = slot;
      }
    }
  }
  for (uint64_t b = 0; b < num_blocks; b++) {
    order[b] = b;
  }
  for (uint64_t b = num_blocks - 1; b > 0; b--) {
    uint64_t j = next_random(&seed) % (b + 1);
    uint64_t swap = order[b];
    order[b] = order[j];
    order[j] = swap;
  }
  for (uint64_t i = 0; i < needed; i++) {
    out->block_ids[i] = (uint32_t)order[i];
  }
  out->block_count = (size_t)needed;
  out->pool = (reshard_pool){
      .participant_id = part->participant_id,
      .endpoint = "bench",
      .regions = regions,
      .region_count = layers,
      .block_size = block,
      .num_blocks = num_blocks,
      .tensors = tensors,
      .tensor_count = n,
  };
  return pool_binding(spec, part, out, tokens, arena, err);
}

const transfer_spec transfer_specs[5] = {
    {"T1 llama3-8b", 0, 1, 1, 16, SCENARIO_MEMORY_NHD, 2, 1, 16,
     SCENARIO_MEMORY_NHD, 2048},
    {"T2 llama3-70b", 1, 8, 1, 16, SCENARIO_MEMORY_NHD, 4, 2, 64,
     SCENARIO_MEMORY_NHD, 4096},
    {"T3 qwen2.5-72b", 2, 4, 1, 16, SCENARIO_MEMORY_HND, 16, 1, 32,
     SCENARIO_MEMORY_NHD, 4096},
    {"T4 deepseek-v3", 3, 8, 1, 64, SCENARIO_MEMORY_NHD, 4, 2, 64,
     SCENARIO_MEMORY_NHD, 4096},
    {"T5 llama3-405b", 4, 8, 2, 128, SCENARIO_MEMORY_NHD, 8, 4, 128,
     SCENARIO_MEMORY_NHD, 32768},
};

/* scenario_build_pool for `participant` of `placement`: it reads only the
 * reader placement, the participant and the page count of the scenario it
 * is given, and the block size and memory style of the spec. */
static reshard_status side_pool(const scenario_spec *shape, uint64_t block,
                                scenario_memory memory,
                                const reshard_placement *placement,
                                const char *participant, uint64_t pages,
                                uint64_t seed, reshard_arena *arena,
                                scenario_pool *out, reshard_error *err) {
  scenario_spec spec = *shape;
  spec.block_tokens = block;
  spec.memory = memory;
  scenario s;
  memset(&s, 0, sizeof s);
  s.reader = *placement;
  s.binding.participant_id = participant;
  s.request.page_count = pages;
  return scenario_build_pool(&spec, &s, seed, arena, out, err);
}

reshard_status transfer_scenario_build(const transfer_spec *spec,
                                       uint64_t tokens, uint64_t seed,
                                       reshard_arena *arena,
                                       transfer_scenario *out,
                                       reshard_error *err) {
  memset(out, 0, sizeof *out);
  const scenario_spec *shape = &scenario_specs[spec->shape];
  if (tokens == 0) {
    tokens = spec->tokens;
  }
  if (tokens % shape->page_size != 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "scenario: %llu tokens are not whole %llu-token "
                             "pages",
                             (unsigned long long)tokens,
                             (unsigned long long)shape->page_size);
  }
  uint64_t pages = tokens / shape->page_size;
  out->tokens = tokens;
  out->shape = *shape;
  out->shape.block_tokens = spec->source_block;
  out->shape.memory = spec->source_memory;
  reshard_status status;
  if ((status = build_placement(shape, spec->source_tp, spec->source_pp, arena,
                                &out->source, err)) ||
      (status = build_placement(shape, spec->target_tp, spec->target_pp, arena,
                                &out->target, err)) ||
      (status =
           reshard_placement_id(&out->source, out->source_placement_id, err)) ||
      (status =
           reshard_placement_id(&out->target, out->target_placement_id, err))) {
    return status;
  }
  reshard_limits limits = reshard_limits_default();
  size_t n = out->source.part_count;
  out->source_pools = RESHARD_ARENA_NEW(arena, scenario_pool, n);
  out->source_bound = RESHARD_ARENA_NEW(arena, reshard_bound_pool, n);
  out->pools = RESHARD_ARENA_NEW(arena, reshard_transfer_pool, n);
  out->memory_ids = reshard_arena_alloc(arena, n * RESHARD_ID_SIZE, 8);
  if (out->source_pools == NULL || out->source_bound == NULL ||
      out->pools == NULL || out->memory_ids == NULL) {
    return out_of_memory(err);
  }
  /* Every source pool has the same blocks and the same seed: the same
   * scattered table, the one the replica's ranks share. */
  for (size_t p = 0; p < n; p++) {
    const reshard_placement_part *part = &out->source.parts[p];
    if ((status = side_pool(shape, spec->source_block, spec->source_memory,
                            &out->source, part->participant_id, pages, seed,
                            arena, &out->source_pools[p], err)) ||
        (status = reshard_pool_validate(
             &out->source_pools[p].pool, &out->source.descriptor, part, &limits,
             "pool", arena, &out->source_bound[p], err)) ||
        (status = reshard_memory_id(&out->source_pools[p].pool,
                                    out->source_placement_id,
                                    out->memory_ids[p], err))) {
      return status;
    }
    out->pools[p] = (reshard_transfer_pool){
        out->memory_ids[p], &out->source_pools[p].pool, &out->source_bound[p]};
  }
  out->pool_count = n;
  out->source_block_ids = out->source_pools[0].block_ids;
  out->source_block_count = out->source_pools[0].block_count;
  const reshard_placement_part *reader = &out->target.parts[0];
  if ((status = side_pool(shape, spec->target_block, spec->target_memory,
                          &out->target, reader->participant_id, pages, seed + 1,
                          arena, &out->target_pool, err)) ||
      (status = reshard_pool_validate(
           &out->target_pool.pool, &out->target.descriptor, reader, &limits,
           "pool", arena, &out->target_bound, err)) ||
      (status =
           reshard_memory_id(&out->target_pool.pool, out->target_placement_id,
                             out->target_memory_id, err))) {
    return status;
  }
  out->target_shell = (reshard_binding){
      .participant_id = out->target_pool.pool.participant_id,
      .endpoint = out->target_pool.pool.endpoint,
      .regions = out->target_pool.pool.regions,
      .region_count = out->target_pool.pool.region_count,
  };
  out->request = (reshard_transfer_request){
      .source_placement = &out->source,
      .pools = out->pools,
      .pool_count = n,
      .source_block_ids = out->source_block_ids,
      .source_block_count = out->source_block_count,
      .token_count = tokens,
      .target_placement = &out->target,
      .binding = &out->target_shell,
      .limits = limits,
  };
  return RESHARD_OK;
}
