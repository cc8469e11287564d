#include "cache/shared.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

/* Objects are small; big layer lists get chunks of their own. */
enum { SHARED_ARENA_CHUNK = 1024 };

void reshard_shared_unref(reshard_shared *shared) {
  if (shared == NULL) {
    return;
  }
  if (atomic_fetch_sub_explicit(&shared->refs, 1, memory_order_acq_rel) == 1) {
    shared->destroy(shared);
  }
}

static void shared_init(reshard_shared *shared,
                        void (*destroy)(reshard_shared *)) {
  atomic_init(&shared->refs, 1);
  shared->bytes = 0;
  shared->destroy = destroy;
}

static const char *copy_string(reshard_arena *arena, const char *text) {
  return text ? reshard_arena_strdup(arena, text) : NULL;
}

static bool copy_ids(reshard_arena *arena, uint64_t **dst, const uint64_t *src,
                     size_t count) {
  *dst = reshard_arena_alloc(arena, count * sizeof **dst, 8);
  if (*dst == NULL) {
    return false;
  }
  if (count > 0) {
    memcpy(*dst, src, count * sizeof **dst);
  }
  return true;
}

bool reshard_copy_descriptor(reshard_arena *arena, reshard_descriptor *dst,
                             const reshard_descriptor *src) {
  *dst = *src;
  dst->dtype = copy_string(arena, src->dtype);
  return dst->dtype != NULL &&
         copy_ids(arena, &dst->global_layer_ids, src->global_layer_ids,
                  src->layer_count);
}

bool reshard_copy_layout(reshard_arena *arena, reshard_layout *dst,
                         const reshard_layout *src) {
  *dst = *src;
  if (!reshard_copy_descriptor(arena, &dst->descriptor, &src->descriptor)) {
    return false;
  }
  dst->shards = RESHARD_ARENA_NEW(arena, reshard_shard, src->shard_count);
  if (dst->shards == NULL) {
    return false;
  }
  for (size_t i = 0; i < src->shard_count; i++) {
    const reshard_shard *from = &src->shards[i];
    reshard_shard *to = &dst->shards[i];
    *to = *from;
    to->key_suffix = copy_string(arena, from->key_suffix);
    if (to->key_suffix == NULL ||
        !copy_ids(arena, &to->layer_ids, from->layer_ids, from->layer_count)) {
      return false;
    }
  }
  return true;
}

bool reshard_copy_manifest(reshard_arena *arena, reshard_manifest *dst,
                           const reshard_manifest *src) {
  dst->name_space = copy_string(arena, src->name_space);
  dst->model_id = copy_string(arena, src->model_id);
  dst->model_revision = copy_string(arena, src->model_revision);
  dst->semantic_fingerprint = copy_string(arena, src->semantic_fingerprint);
  return dst->name_space && dst->model_id && dst->model_revision &&
         dst->semantic_fingerprint &&
         reshard_copy_layout(arena, &dst->layout, &src->layout);
}

bool reshard_copy_placement(reshard_arena *arena, reshard_placement *dst,
                            const reshard_placement *src) {
  *dst = *src;
  dst->resource_id = copy_string(arena, src->resource_id);
  dst->revision = copy_string(arena, src->revision);
  dst->placement_set_id = copy_string(arena, src->placement_set_id);
  if (dst->resource_id == NULL || dst->revision == NULL ||
      dst->placement_set_id == NULL ||
      !reshard_copy_descriptor(arena, &dst->descriptor, &src->descriptor)) {
    return false;
  }
  dst->parts =
      RESHARD_ARENA_NEW(arena, reshard_placement_part, src->part_count);
  if (dst->parts == NULL) {
    return false;
  }
  for (size_t i = 0; i < src->part_count; i++) {
    const reshard_placement_part *from = &src->parts[i];
    reshard_placement_part *to = &dst->parts[i];
    *to = *from;
    to->participant_id = copy_string(arena, from->participant_id);
    if (to->participant_id == NULL ||
        !copy_ids(arena, &to->layer_ids, from->layer_ids, from->layer_count)) {
      return false;
    }
  }
  return true;
}

static void manifest_destroy(reshard_shared *shared) {
  reshard_shared_manifest *m = (reshard_shared_manifest *)shared;
  reshard_arena_destroy(&m->arena);
  free(m);
}

reshard_shared_manifest *
reshard_shared_manifest_create(const reshard_manifest *normalized,
                               const char *manifest_key, const char *layout_id,
                               const char *model_domain) {
  reshard_shared_manifest *m = calloc(1, sizeof *m);
  if (m == NULL) {
    return NULL;
  }
  shared_init(&m->base, manifest_destroy);
  reshard_arena_init(&m->arena, SHARED_ARENA_CHUNK);
  snprintf(m->manifest_key, sizeof m->manifest_key, "%s", manifest_key);
  snprintf(m->layout_id, sizeof m->layout_id, "%s", layout_id);
  snprintf(m->model_domain, sizeof m->model_domain, "%s", model_domain);
  if (!reshard_copy_manifest(&m->arena, &m->manifest, normalized)) {
    manifest_destroy(&m->base);
    return NULL;
  }
  m->base.bytes = sizeof *m + m->arena.total_bytes;
  return m;
}

static void placement_destroy(reshard_shared *shared) {
  reshard_shared_placement *p = (reshard_shared_placement *)shared;
  reshard_arena_destroy(&p->arena);
  free(p);
}

reshard_shared_placement *
reshard_shared_placement_create(const reshard_placement *normalized,
                                const char *placement_id) {
  reshard_shared_placement *p = calloc(1, sizeof *p);
  if (p == NULL) {
    return NULL;
  }
  shared_init(&p->base, placement_destroy);
  reshard_arena_init(&p->arena, SHARED_ARENA_CHUNK);
  snprintf(p->placement_id, sizeof p->placement_id, "%s", placement_id);
  if (!reshard_copy_placement(&p->arena, &p->placement, normalized)) {
    placement_destroy(&p->base);
    return NULL;
  }
  p->base.bytes = sizeof *p + p->arena.total_bytes;
  return p;
}

static void pool_destroy(reshard_shared *shared) {
  reshard_shared_pool *p = (reshard_shared_pool *)shared;
  reshard_shared_unref(p->placement ? &p->placement->base : NULL);
  reshard_arena_destroy(&p->arena);
  free(p);
}

static bool copy_pool(reshard_arena *arena, reshard_pool *dst,
                      const reshard_pool *src) {
  *dst = *src;
  dst->participant_id = copy_string(arena, src->participant_id);
  dst->endpoint = copy_string(arena, src->endpoint ? src->endpoint : "");
  dst->regions =
      RESHARD_ARENA_ARRAY(arena, reshard_region, src->region_count + 1);
  dst->tensors =
      RESHARD_ARENA_ARRAY(arena, reshard_pool_tensor, src->tensor_count + 1);
  if (dst->participant_id == NULL || dst->endpoint == NULL ||
      dst->regions == NULL || dst->tensors == NULL) {
    return false;
  }
  for (size_t i = 0; i < src->region_count; i++) {
    dst->regions[i] = src->regions[i];
    dst->regions[i].region_id = copy_string(arena, src->regions[i].region_id);
    if (dst->regions[i].region_id == NULL) {
      return false;
    }
  }
  for (size_t i = 0; i < src->tensor_count; i++) {
    dst->tensors[i] = src->tensors[i];
    dst->tensors[i].region_id = copy_string(
        arena, src->tensors[i].region_id ? src->tensors[i].region_id : "");
    if (dst->tensors[i].region_id == NULL) {
      return false;
    }
  }
  return true;
}

reshard_shared_pool *
reshard_shared_pool_create(const reshard_pool *pool, const char *memory_id,
                           reshard_shared_placement *placement,
                           const reshard_limits *caps, const char *path,
                           reshard_error *err) {
  const reshard_placement_part *part =
      reshard_placement_find_part(&placement->placement, pool->participant_id);
  if (part == NULL) {
    reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                      "%s.participant_id: \"%.200s\" is not a participant of "
                      "placement %s",
                      path, pool->participant_id ? pool->participant_id : "",
                      placement->placement_id);
    return NULL;
  }
  reshard_shared_pool *p = calloc(1, sizeof *p);
  if (p == NULL) {
    reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED, "%s: out of memory",
                      path);
    return NULL;
  }
  shared_init(&p->base, pool_destroy);
  reshard_arena_init(&p->arena, SHARED_ARENA_CHUNK);
  p->placement = placement;
  reshard_shared_ref(&placement->base);
  snprintf(p->memory_id, sizeof p->memory_id, "%s", memory_id);
  if (!copy_pool(&p->arena, &p->pool, pool)) {
    reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED, "%s: out of memory",
                      path);
    pool_destroy(&p->base);
    return NULL;
  }
  /* Validation scratch goes to the object's arena too: the sorted copies
   * are small next to the pool, and the groups must stay. */
  if (reshard_pool_validate(&p->pool, &placement->placement.descriptor, part,
                            caps, path, &p->arena, &p->bound, err)) {
    pool_destroy(&p->base);
    return NULL;
  }
  p->base.bytes = sizeof *p + p->arena.total_bytes;
  p->read_ns = uv_hrtime();
  return p;
}

static void join_destroy(reshard_shared *shared) {
  reshard_shared_join *j = (reshard_shared_join *)shared;
  reshard_join_free(j->join);
  free(j);
}

reshard_shared_join *reshard_shared_join_wrap(reshard_join *join) {
  reshard_shared_join *j = malloc(sizeof *j);
  if (j == NULL) {
    reshard_join_free(join);
    return NULL;
  }
  shared_init(&j->base, join_destroy);
  j->join = join;
  j->base.bytes = sizeof *j + join->memory_bytes;
  return j;
}

static void keys_destroy(reshard_shared *shared) {
  free(shared);
}

reshard_shared_keys *reshard_shared_keys_create(const char *const *keys,
                                                size_t count) {
  size_t total = sizeof(reshard_shared_keys) + count * sizeof(char *);
  for (size_t i = 0; i < count; i++) {
    total += strlen(keys[i]) + 1;
  }
  reshard_shared_keys *k = malloc(total);
  if (k == NULL) {
    return NULL;
  }
  shared_init(&k->base, keys_destroy);
  k->count = count;
  k->keys = (const char **)(k + 1);
  char *text = (char *)(k->keys + count);
  for (size_t i = 0; i < count; i++) {
    size_t length = strlen(keys[i]) + 1;
    memcpy(text, keys[i], length);
    k->keys[i] = text;
    text += length;
  }
  k->base.bytes = total;
  return k;
}
