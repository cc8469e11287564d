#include "wire/wire.h"

#include <stdio.h>
#include <string.h>

#include "google/protobuf/wrappers.pb-c.h"
#include "wire/decode.h"

/* Field paths are short ("binding.ranges[99999].component"); a longer one
 * is cut, never overflowed. */
enum { PATH_SIZE = 160 };

static void *arena_alloc(void *data, size_t size) {
  return reshard_arena_alloc(data, size, 16);
}

static void arena_free(void *data, void *pointer) {
  (void)data;
  (void)pointer;
}

ProtobufCAllocator reshard_wire_allocator(reshard_arena *arena) {
  ProtobufCAllocator allocator = {arena_alloc, arena_free, arena};
  return allocator;
}

ProtobufCMessage *reshard_wire_unpack(const ProtobufCMessageDescriptor *type,
                                      const uint8_t *data, size_t length,
                                      reshard_arena *arena,
                                      reshard_error *err) {
  return reshard_decode(type, data, length, reshard_decode_budget(length),
                        reshard_decode_caps(), arena, err);
}

uint8_t *reshard_wire_pack(const ProtobufCMessage *message,
                           reshard_arena *arena, size_t *length) {
  size_t size = protobuf_c_message_get_packed_size(message);
  uint8_t *buffer = reshard_arena_alloc(arena, size, 8);
  if (buffer == NULL) {
    return NULL;
  }
  *length = protobuf_c_message_pack(message, buffer);
  return buffer;
}

static const char *field_path(char *buffer, const char *path,
                              const char *field) {
  snprintf(buffer, PATH_SIZE, "%s.%s", path, field);
  return buffer;
}

static const char *item_path(char *buffer, const char *path, const char *field,
                             size_t index) {
  snprintf(buffer, PATH_SIZE, "%s.%s[%zu]", path, field, index);
  return buffer;
}

static reshard_status required(const char *path, reshard_error *err) {
  return reshard_error_set(err, RESHARD_INVALID_ARGUMENT, "%s: required", path);
}

static reshard_status out_of_memory(const char *path, reshard_error *err) {
  return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                           "%s: out of memory decoding the request", path);
}

static uint64_t *ids_from_pb(reshard_arena *arena, const uint32_t *ids,
                             size_t count) {
  uint64_t *out = reshard_arena_alloc(arena, count * sizeof *out, 8);
  if (out != NULL) {
    for (size_t i = 0; i < count; i++) {
      out[i] = ids[i];
    }
  }
  return out;
}

static uint32_t *ids_to_pb(reshard_arena *arena, const uint64_t *ids,
                           size_t count) {
  uint32_t *out = reshard_arena_alloc(arena, count * sizeof *out, 4);
  if (out != NULL) {
    for (size_t i = 0; i < count; i++) {
      /* Normalized values came from uint32 fields, so they fit. */
      out[i] = (uint32_t)ids[i];
    }
  }
  return out;
}

reshard_status
reshard_wire_descriptor_from_pb(const Reshard__V1__Descriptor *pb,
                                const char *path, reshard_arena *arena,
                                reshard_descriptor *out, reshard_error *err) {
  if (pb == NULL) {
    return required(path, err);
  }
  memset(out, 0, sizeof *out);
  out->global_layer_ids =
      ids_from_pb(arena, pb->global_layer_ids, pb->n_global_layer_ids);
  if (out->global_layer_ids == NULL) {
    return out_of_memory(path, err);
  }
  out->layer_count = pb->n_global_layer_ids;
  out->dtype = pb->dtype;
  out->itemsize = pb->itemsize;
  out->page_size = pb->page_size;
  out->total_kv_heads = pb->total_kv_heads;
  out->key_head_dim = pb->key_head_dim;
  out->value_head_dim = pb->value_head_dim;
  return RESHARD_OK;
}

reshard_status reshard_wire_format_from_pb(Reshard__V1__StoreFormat pb,
                                           const char *path,
                                           reshard_format *out,
                                           reshard_error *err) {
  switch (pb) {
  case RESHARD__V1__STORE_FORMAT__PLHD:
    *out = RESHARD_FORMAT_PLHD;
    return RESHARD_OK;
  case RESHARD__V1__STORE_FORMAT__LPHD:
    *out = RESHARD_FORMAT_LPHD;
    return RESHARD_OK;
  case RESHARD__V1__STORE_FORMAT__HPLD:
    *out = RESHARD_FORMAT_HPLD;
    return RESHARD_OK;
  case RESHARD__V1__STORE_FORMAT__STORE_FORMAT_UNSPECIFIED:
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: must be set (PLHD, LPHD or HPLD)", path);
  default:
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: unknown value %d (must be PLHD, LPHD or "
                             "HPLD)",
                             path, (int)pb);
  }
}

reshard_status reshard_wire_layout_from_pb(const Reshard__V1__StoreLayout *pb,
                                           const char *path,
                                           reshard_arena *arena,
                                           reshard_layout *out,
                                           reshard_error *err) {
  char sub[PATH_SIZE];
  if (pb == NULL) {
    return required(path, err);
  }
  memset(out, 0, sizeof *out);
  reshard_status status = reshard_wire_descriptor_from_pb(
      pb->descriptor, field_path(sub, path, "descriptor"), arena,
      &out->descriptor, err);
  if (status != RESHARD_OK) {
    return status;
  }
  status = reshard_wire_format_from_pb(
      pb->format, field_path(sub, path, "format"), &out->format, err);
  if (status != RESHARD_OK) {
    return status;
  }
  out->shards = RESHARD_ARENA_NEW(arena, reshard_shard, pb->n_shards);
  if (out->shards == NULL) {
    return out_of_memory(path, err);
  }
  out->shard_count = pb->n_shards;
  for (size_t i = 0; i < pb->n_shards; i++) {
    const Reshard__V1__StoreShard *shard = pb->shards[i];
    reshard_shard *to = &out->shards[i];
    to->layer_ids = ids_from_pb(arena, shard->layer_ids, shard->n_layer_ids);
    if (to->layer_ids == NULL) {
      return out_of_memory(item_path(sub, path, "shards", i), err);
    }
    to->layer_count = shard->n_layer_ids;
    to->head_start = shard->head_start;
    to->head_count = shard->head_count;
    to->key_suffix = shard->key_suffix;
  }
  return RESHARD_OK;
}

reshard_status
reshard_wire_manifest_from_pb(const Reshard__V1__StoreManifest *pb,
                              const char *path, reshard_arena *arena,
                              reshard_manifest *out, reshard_error *err) {
  char sub[PATH_SIZE];
  if (pb == NULL) {
    return required(path, err);
  }
  memset(out, 0, sizeof *out);
  out->name_space = pb->namespace_;
  out->model_id = pb->model_id;
  out->model_revision = pb->model_revision;
  out->semantic_fingerprint = pb->semantic_fingerprint;
  return reshard_wire_layout_from_pb(
      pb->layout, field_path(sub, path, "layout"), arena, &out->layout, err);
}

reshard_status reshard_wire_placement_from_pb(const Reshard__V1__Placement *pb,
                                              const char *path,
                                              reshard_arena *arena,
                                              reshard_placement *out,
                                              reshard_error *err) {
  char sub[PATH_SIZE];
  if (pb == NULL) {
    return required(path, err);
  }
  memset(out, 0, sizeof *out);
  out->resource_id = pb->resource_id;
  out->revision = pb->revision;
  out->placement_set_id = pb->placement_set_id;
  out->dp_size = pb->dp_size;
  out->pp_size = pb->pp_size;
  out->tp_size = pb->tp_size;
  reshard_status status = reshard_wire_descriptor_from_pb(
      pb->descriptor, field_path(sub, path, "descriptor"), arena,
      &out->descriptor, err);
  if (status != RESHARD_OK) {
    return status;
  }
  out->parts = RESHARD_ARENA_NEW(arena, reshard_placement_part, pb->n_parts);
  if (out->parts == NULL) {
    return out_of_memory(path, err);
  }
  out->part_count = pb->n_parts;
  for (size_t i = 0; i < pb->n_parts; i++) {
    const Reshard__V1__PlacementPart *part = pb->parts[i];
    reshard_placement_part *to = &out->parts[i];
    to->participant_id = part->participant_id;
    /* An absent rank is the default instance, (0, 0, 0), as proto3 reads
     * it. */
    if (part->rank != NULL) {
      to->rank.dp = part->rank->dp;
      to->rank.pp = part->rank->pp;
      to->rank.tp = part->rank->tp;
    }
    to->layer_ids = ids_from_pb(arena, part->layer_ids, part->n_layer_ids);
    if (to->layer_ids == NULL) {
      return out_of_memory(item_path(sub, path, "parts", i), err);
    }
    to->layer_count = part->n_layer_ids;
    to->head_start = part->head_start;
    to->head_count = part->head_count;
    to->replica_ordinal = part->replica_ordinal;
    to->replica_count = part->replica_count;
  }
  return RESHARD_OK;
}

reshard_status reshard_wire_component_from_pb(int32_t pb, const char *path,
                                              size_t index,
                                              reshard_component *out,
                                              reshard_error *err) {
  char sub[PATH_SIZE];
  switch (pb) {
  case RESHARD__V1__COMPONENT__KEY:
    *out = RESHARD_COMPONENT_KEY;
    return RESHARD_OK;
  case RESHARD__V1__COMPONENT__VALUE:
    *out = RESHARD_COMPONENT_VALUE;
    return RESHARD_OK;
  case RESHARD__V1__COMPONENT__COMPONENT_UNSPECIFIED:
    item_path(sub, path, "ranges", index);
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.component: must be KEY or VALUE", sub);
  default:
    item_path(sub, path, "ranges", index);
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.component: unknown value %d (must be KEY "
                             "or VALUE)",
                             sub, (int)pb);
  }
}

/* A binding's or a pool's regions; NULL when memory runs out. */
static reshard_region *regions_from_pb(Reshard__V1__Region *const *pb,
                                       size_t count, reshard_arena *arena) {
  reshard_region *out = RESHARD_ARENA_NEW(arena, reshard_region, count + 1);
  for (size_t i = 0; out != NULL && i < count; i++) {
    out[i].region_id = pb[i]->region_id;
    out[i].address = pb[i]->address;
    out[i].nbytes = pb[i]->nbytes;
  }
  return out;
}

reshard_status
reshard_wire_binding_from_pb(const Reshard__V1__RuntimeBinding *pb,
                             const char *path, reshard_arena *arena,
                             reshard_binding *out, reshard_error *err) {
  if (pb == NULL) {
    return required(path, err);
  }
  memset(out, 0, sizeof *out);
  out->participant_id = pb->participant_id;
  out->endpoint = pb->endpoint;
  out->regions = regions_from_pb(pb->regions, pb->n_regions, arena);
  out->ranges = RESHARD_ARENA_NEW(arena, reshard_binding_range, pb->n_ranges);
  if (out->regions == NULL || out->ranges == NULL) {
    return out_of_memory(path, err);
  }
  out->region_count = pb->n_regions;
  out->range_count = pb->n_ranges;
  for (size_t i = 0; i < pb->n_ranges; i++) {
    const Reshard__V1__BindingRange *range = pb->ranges[i];
    reshard_binding_range *to = &out->ranges[i];
    reshard_status status = reshard_wire_component_from_pb(
        (int32_t)range->component, path, i, &to->component, err);
    if (status != RESHARD_OK) {
      return status;
    }
    to->global_layer_id = range->global_layer_id;
    to->token_start = range->token_start;
    to->token_count = range->token_count;
    to->head_start = range->head_start;
    to->head_count = range->head_count;
    to->region_id = range->region_id;
    to->offset_bytes = range->offset_bytes;
    to->token_stride_bytes = range->token_stride_bytes;
    to->head_stride_bytes = range->head_stride_bytes;
  }
  return RESHARD_OK;
}

reshard_status reshard_wire_pool_from_pb(const Reshard__V1__MemoryPool *pb,
                                         const char *path, reshard_arena *arena,
                                         reshard_pool *out,
                                         reshard_error *err) {
  if (pb == NULL) {
    return required(path, err);
  }
  memset(out, 0, sizeof *out);
  out->participant_id = pb->participant_id;
  out->endpoint = pb->endpoint;
  out->regions = regions_from_pb(pb->regions, pb->n_regions, arena);
  out->tensors =
      RESHARD_ARENA_NEW(arena, reshard_pool_tensor, pb->n_tensors + 1);
  if (out->regions == NULL || out->tensors == NULL) {
    return out_of_memory(path, err);
  }
  out->region_count = pb->n_regions;
  out->block_size = pb->block_size;
  out->num_blocks = pb->num_blocks;
  out->tensor_count = pb->n_tensors;
  for (size_t i = 0; i < pb->n_tensors; i++) {
    const Reshard__V1__PoolTensor *tensor = pb->tensors[i];
    /* An unknown component stays as sent: reshard_pool_validate names it. */
    out->tensors[i] = (reshard_pool_tensor){
        .global_layer_id = tensor->global_layer_id,
        .component = (reshard_component)tensor->component,
        .region_id = tensor->region_id,
        .offset_bytes = tensor->offset_bytes,
        .block_stride_bytes = tensor->block_stride_bytes,
        .token_stride_bytes = tensor->token_stride_bytes,
        .head_stride_bytes = tensor->head_stride_bytes,
    };
  }
  return RESHARD_OK;
}

void reshard_wire_limits_from_pb(const Reshard__V1__Limits *pb,
                                 reshard_limits *out) {
  memset(out, 0, sizeof *out);
  if (pb == NULL) {
    return;
  }
  out->max_operations = pb->max_operations;
  out->max_bytes = pb->max_bytes;
  out->max_batch_operations = pb->max_batch_operations;
  out->max_batch_bytes = pb->max_batch_bytes;
  out->max_ranges = pb->max_ranges;
  out->max_validation_work = pb->max_validation_work;
}

/* Narrows a normalized value that arrived in a uint32 field. */
static uint32_t u32(uint64_t value) {
  return value > UINT32_MAX ? UINT32_MAX : (uint32_t)value;
}

/* protobuf-c wants mutable char pointers in messages it only reads. */
static char *text(const char *value) {
  return (char *)(value ? value : "");
}

Reshard__V1__Descriptor *
reshard_wire_descriptor_to_pb(const reshard_descriptor *descriptor,
                              reshard_arena *arena) {
  Reshard__V1__Descriptor *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__Descriptor, 1);
  if (pb == NULL) {
    return NULL;
  }
  reshard__v1__descriptor__init(pb);
  pb->global_layer_ids =
      ids_to_pb(arena, descriptor->global_layer_ids, descriptor->layer_count);
  if (pb->global_layer_ids == NULL) {
    return NULL;
  }
  pb->n_global_layer_ids = descriptor->layer_count;
  pb->dtype = text(descriptor->dtype);
  pb->itemsize = u32(descriptor->itemsize);
  pb->page_size = u32(descriptor->page_size);
  pb->total_kv_heads = u32(descriptor->total_kv_heads);
  pb->key_head_dim = u32(descriptor->key_head_dim);
  pb->value_head_dim = u32(descriptor->value_head_dim);
  return pb;
}

Reshard__V1__StoreLayout *
reshard_wire_layout_to_pb(const reshard_layout *layout, reshard_arena *arena) {
  Reshard__V1__StoreLayout *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__StoreLayout, 1);
  if (pb == NULL) {
    return NULL;
  }
  reshard__v1__store_layout__init(pb);
  pb->descriptor = reshard_wire_descriptor_to_pb(&layout->descriptor, arena);
  pb->format = (Reshard__V1__StoreFormat)layout->format;
  pb->shards =
      RESHARD_ARENA_NEW(arena, Reshard__V1__StoreShard *, layout->shard_count);
  Reshard__V1__StoreShard *shards =
      RESHARD_ARENA_NEW(arena, Reshard__V1__StoreShard, layout->shard_count);
  if (pb->descriptor == NULL || pb->shards == NULL || shards == NULL) {
    return NULL;
  }
  pb->n_shards = layout->shard_count;
  for (size_t i = 0; i < layout->shard_count; i++) {
    const reshard_shard *shard = &layout->shards[i];
    Reshard__V1__StoreShard *to = &shards[i];
    reshard__v1__store_shard__init(to);
    to->layer_ids = ids_to_pb(arena, shard->layer_ids, shard->layer_count);
    if (to->layer_ids == NULL) {
      return NULL;
    }
    to->n_layer_ids = shard->layer_count;
    to->head_start = u32(shard->head_start);
    to->head_count = u32(shard->head_count);
    to->key_suffix = text(shard->key_suffix);
    pb->shards[i] = to;
  }
  return pb;
}

Reshard__V1__StoreManifest *
reshard_wire_manifest_to_pb(const reshard_manifest *manifest,
                            reshard_arena *arena) {
  Reshard__V1__StoreManifest *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__StoreManifest, 1);
  if (pb == NULL) {
    return NULL;
  }
  reshard__v1__store_manifest__init(pb);
  pb->namespace_ = text(manifest->name_space);
  pb->model_id = text(manifest->model_id);
  pb->model_revision = text(manifest->model_revision);
  pb->semantic_fingerprint = text(manifest->semantic_fingerprint);
  pb->layout = reshard_wire_layout_to_pb(&manifest->layout, arena);
  return pb->layout ? pb : NULL;
}

Reshard__V1__Placement *
reshard_wire_placement_to_pb(const reshard_placement *placement,
                             reshard_arena *arena) {
  Reshard__V1__Placement *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__Placement, 1);
  if (pb == NULL) {
    return NULL;
  }
  reshard__v1__placement__init(pb);
  pb->resource_id = text(placement->resource_id);
  pb->revision = text(placement->revision);
  pb->placement_set_id = text(placement->placement_set_id);
  pb->dp_size = u32(placement->dp_size);
  pb->pp_size = u32(placement->pp_size);
  pb->tp_size = u32(placement->tp_size);
  pb->descriptor = reshard_wire_descriptor_to_pb(&placement->descriptor, arena);
  pb->parts = RESHARD_ARENA_NEW(arena, Reshard__V1__PlacementPart *,
                                placement->part_count);
  Reshard__V1__PlacementPart *parts = RESHARD_ARENA_NEW(
      arena, Reshard__V1__PlacementPart, placement->part_count);
  Reshard__V1__Rank *ranks =
      RESHARD_ARENA_NEW(arena, Reshard__V1__Rank, placement->part_count);
  if (pb->descriptor == NULL || pb->parts == NULL || parts == NULL ||
      ranks == NULL) {
    return NULL;
  }
  pb->n_parts = placement->part_count;
  for (size_t i = 0; i < placement->part_count; i++) {
    const reshard_placement_part *part = &placement->parts[i];
    Reshard__V1__PlacementPart *to = &parts[i];
    reshard__v1__placement_part__init(to);
    reshard__v1__rank__init(&ranks[i]);
    ranks[i].dp = u32(part->rank.dp);
    ranks[i].pp = u32(part->rank.pp);
    ranks[i].tp = u32(part->rank.tp);
    to->rank = &ranks[i];
    to->participant_id = text(part->participant_id);
    to->layer_ids = ids_to_pb(arena, part->layer_ids, part->layer_count);
    if (to->layer_ids == NULL) {
      return NULL;
    }
    to->n_layer_ids = part->layer_count;
    to->head_start = u32(part->head_start);
    to->head_count = u32(part->head_count);
    to->replica_ordinal = u32(part->replica_ordinal);
    to->replica_count = u32(part->replica_count);
    pb->parts[i] = to;
  }
  return pb;
}

Reshard__V1__Region **reshard_wire_regions_to_pb(const reshard_region *regions,
                                                 size_t count,
                                                 reshard_arena *arena) {
  Reshard__V1__Region **out =
      RESHARD_ARENA_ARRAY(arena, Reshard__V1__Region *, count + 1);
  Reshard__V1__Region *items =
      RESHARD_ARENA_ARRAY(arena, Reshard__V1__Region, count + 1);
  if (out == NULL || items == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < count; i++) {
    reshard__v1__region__init(&items[i]);
    items[i].region_id = text(regions[i].region_id);
    items[i].address = regions[i].address;
    items[i].nbytes = regions[i].nbytes;
    out[i] = &items[i];
  }
  return out;
}

Reshard__V1__MemoryPool *reshard_wire_pool_to_pb(const reshard_pool *pool,
                                                 reshard_arena *arena) {
  Reshard__V1__MemoryPool *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__MemoryPool, 1);
  Reshard__V1__PoolTensor *tensors =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PoolTensor, pool->tensor_count + 1);
  if (pb == NULL || tensors == NULL) {
    return NULL;
  }
  reshard__v1__memory_pool__init(pb);
  pb->participant_id = text(pool->participant_id);
  pb->endpoint = text(pool->endpoint);
  pb->block_size = u32(pool->block_size);
  pb->num_blocks = u32(pool->num_blocks);
  pb->n_regions = pool->region_count;
  pb->regions =
      reshard_wire_regions_to_pb(pool->regions, pool->region_count, arena);
  pb->n_tensors = pool->tensor_count;
  pb->tensors = RESHARD_ARENA_NEW(arena, Reshard__V1__PoolTensor *,
                                  pool->tensor_count + 1);
  if (pb->regions == NULL || pb->tensors == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < pool->tensor_count; i++) {
    const reshard_pool_tensor *t = &pool->tensors[i];
    reshard__v1__pool_tensor__init(&tensors[i]);
    tensors[i].global_layer_id = u32(t->global_layer_id);
    tensors[i].component = t->component == RESHARD_COMPONENT_KEY
                               ? RESHARD__V1__COMPONENT__KEY
                               : RESHARD__V1__COMPONENT__VALUE;
    tensors[i].region_id = text(t->region_id);
    tensors[i].offset_bytes = t->offset_bytes;
    tensors[i].block_stride_bytes = t->block_stride_bytes;
    tensors[i].token_stride_bytes = t->token_stride_bytes;
    tensors[i].head_stride_bytes = t->head_stride_bytes;
    pb->tensors[i] = &tensors[i];
  }
  return pb;
}

Reshard__V1__RuntimeBinding *
reshard_wire_binding_to_pb(const reshard_binding *binding,
                           reshard_arena *arena) {
  Reshard__V1__RuntimeBinding *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__RuntimeBinding, 1);
  Reshard__V1__Region *regions =
      RESHARD_ARENA_NEW(arena, Reshard__V1__Region, binding->region_count);
  Reshard__V1__BindingRange *ranges =
      RESHARD_ARENA_NEW(arena, Reshard__V1__BindingRange, binding->range_count);
  if (pb == NULL || regions == NULL || ranges == NULL) {
    return NULL;
  }
  reshard__v1__runtime_binding__init(pb);
  pb->participant_id = text(binding->participant_id);
  pb->endpoint = text(binding->endpoint);
  pb->n_regions = binding->region_count;
  pb->regions =
      RESHARD_ARENA_NEW(arena, Reshard__V1__Region *, binding->region_count);
  pb->n_ranges = binding->range_count;
  pb->ranges = RESHARD_ARENA_NEW(arena, Reshard__V1__BindingRange *,
                                 binding->range_count);
  if (pb->regions == NULL || pb->ranges == NULL) {
    return NULL;
  }
  for (size_t i = 0; i < binding->region_count; i++) {
    reshard__v1__region__init(&regions[i]);
    regions[i].region_id = text(binding->regions[i].region_id);
    regions[i].address = binding->regions[i].address;
    regions[i].nbytes = binding->regions[i].nbytes;
    pb->regions[i] = &regions[i];
  }
  for (size_t i = 0; i < binding->range_count; i++) {
    const reshard_binding_range *r = &binding->ranges[i];
    Reshard__V1__BindingRange *to = &ranges[i];
    reshard__v1__binding_range__init(to);
    to->global_layer_id = u32(r->global_layer_id);
    to->component = r->component == RESHARD_COMPONENT_KEY
                        ? RESHARD__V1__COMPONENT__KEY
                        : RESHARD__V1__COMPONENT__VALUE;
    to->token_start = r->token_start;
    to->token_count = r->token_count;
    to->head_start = u32(r->head_start);
    to->head_count = u32(r->head_count);
    to->region_id = text(r->region_id);
    to->offset_bytes = r->offset_bytes;
    to->token_stride_bytes = r->token_stride_bytes;
    to->head_stride_bytes = r->head_stride_bytes;
    pb->ranges[i] = to;
  }
  return pb;
}

Reshard__V1__PlanLoadResponse *
reshard_wire_plan_to_pb(const reshard_load_plan *plan,
                        const reshard_wire_plan_names *names,
                        reshard_arena *arena) {
  Reshard__V1__PlanLoadResponse *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PlanLoadResponse, 1);
  Reshard__V1__PlanStats *stats =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PlanStats, 1);
  if (pb == NULL || stats == NULL) {
    return NULL;
  }
  reshard__v1__plan_load_response__init(pb);
  reshard__v1__plan_stats__init(stats);
  pb->hit_pages = u32(plan->hit_pages);
  pb->placement_id = text(names->placement_id);

  size_t hits = (size_t)plan->hit_pages;
  pb->pages = RESHARD_ARENA_NEW(arena, Reshard__V1__PageSource *, hits);
  Reshard__V1__PageSource *pages =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PageSource, hits);
  if (pb->pages == NULL || pages == NULL) {
    return NULL;
  }
  pb->n_pages = hits;
  for (size_t p = 0; p < hits; p++) {
    size_t source = plan->page_source[p];
    reshard__v1__page_source__init(&pages[p]);
    pages[p].page_key = text(names->page_keys[p]);
    pages[p].manifest_key = text(names->manifest_keys[source]);
    pages[p].layout_id = text(names->sources[source].layout_id);
    pb->pages[p] = &pages[p];
  }

  const reshard_binding *binding = names->binding;
  pb->region_ids = RESHARD_ARENA_NEW(arena, char *, binding->region_count);
  if (pb->region_ids == NULL) {
    return NULL;
  }
  pb->n_region_ids = binding->region_count;
  for (size_t r = 0; r < binding->region_count; r++) {
    pb->region_ids[r] = text(binding->regions[r].region_id);
  }

  pb->batches =
      RESHARD_ARENA_NEW(arena, Reshard__V1__RangeBatch *, plan->batch_count);
  Reshard__V1__RangeBatch *batches =
      RESHARD_ARENA_NEW(arena, Reshard__V1__RangeBatch, plan->batch_count);
  /* With runs, one entry per run and nine columns; else one per copy. */
  const reshard_runs *runs = plan->runs.batch_first ? &plan->runs : NULL;
  size_t entries = runs ? runs->run_count : plan->copy_count;
  size_t width = runs ? 9 : 6;
  uint64_t *columns =
      reshard_arena_alloc(arena, entries * width * sizeof(uint64_t), 8);
  if (pb->batches == NULL || batches == NULL || columns == NULL) {
    return NULL;
  }
  pb->n_batches = plan->batch_count;
  for (size_t b = 0; b < plan->batch_count; b++) {
    const reshard_batch *batch = &plan->batches[b];
    Reshard__V1__RangeBatch *to = &batches[b];
    reshard__v1__range_batch__init(to);
    size_t first = runs ? runs->batch_first[b] : batch->first;
    size_t n = runs ? runs->batch_first[b + 1] - first : batch->count;
    uint64_t *base = columns + first * width;
    to->page_index = base;
    to->part_index = base + n;
    to->part_offset = base + 2 * n;
    to->region_index = base + 3 * n;
    to->region_offset = base + 4 * n;
    to->nbytes = base + 5 * n;
    to->n_page_index = to->n_part_index = to->n_part_offset = n;
    to->n_region_index = to->n_region_offset = to->n_nbytes = n;
    if (runs) {
      to->run_count = base + 6 * n;
      to->part_stride = base + 7 * n;
      to->region_stride = base + 8 * n;
      to->n_run_count = to->n_part_stride = to->n_region_stride = n;
    }
    for (size_t i = 0; i < n; i++) {
      const reshard_copy *copy =
          runs ? &runs->runs[first + i].first : &plan->copies[first + i];
      to->page_index[i] = copy->page_index;
      to->part_index[i] = copy->part_index;
      to->part_offset[i] = copy->part_offset;
      to->region_index[i] = copy->region_index;
      to->region_offset[i] = copy->region_offset;
      to->nbytes[i] = copy->nbytes;
      if (runs) {
        to->run_count[i] = runs->runs[first + i].count;
        to->part_stride[i] = runs->runs[first + i].part_stride;
        to->region_stride[i] = runs->runs[first + i].region_stride;
      }
    }
    to->bytes = batch->bytes;
    pb->batches[b] = to;
  }

  stats->operations = plan->operations;
  stats->bytes = plan->bytes;
  stats->copies_before_coalescing = plan->copies_before_coalescing;
  stats->runs = plan->runs.run_count;
  pb->stats = stats;
  return pb;
}

Reshard__V1__PlanStoreResponse *
reshard_wire_store_plan_to_pb(const reshard_store_plan *plan,
                              const reshard_binding *binding,
                              const char *layout_id, reshard_arena *arena) {
  /* The copies read as a load plan without pages; only the columns, the
   * region ids and the stats of that message are taken. */
  reshard_load_plan columns = {
      .copies = plan->copies,
      .copy_count = plan->copy_count,
      .batches = plan->batches,
      .batch_count = plan->batch_count,
      .operations = plan->operations,
      .bytes = plan->bytes,
      .copies_before_coalescing = plan->copies_before_coalescing,
      .runs = plan->runs,
  };
  reshard_wire_plan_names names = {.binding = binding, .placement_id = ""};
  Reshard__V1__PlanLoadResponse *load =
      reshard_wire_plan_to_pb(&columns, &names, arena);
  Reshard__V1__PlanStoreResponse *pb =
      RESHARD_ARENA_NEW(arena, Reshard__V1__PlanStoreResponse, 1);
  uint32_t *parts = RESHARD_ARENA_NEW(arena, uint32_t, plan->part_count);
  if (load == NULL || pb == NULL || parts == NULL) {
    return NULL;
  }
  reshard__v1__plan_store_response__init(pb);
  for (size_t i = 0; i < plan->part_count; i++) {
    parts[i] = u32(plan->part_indexes[i]);
  }
  pb->part_indexes = parts;
  pb->n_part_indexes = plan->part_count;
  pb->region_ids = load->region_ids;
  pb->n_region_ids = load->n_region_ids;
  pb->batches = load->batches;
  pb->n_batches = load->n_batches;
  pb->stats = load->stats;
  pb->layout_id = text(layout_id);
  return pb;
}
