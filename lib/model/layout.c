#include "reshard/layout.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/checked.h"

const char *reshard_format_name(reshard_format format) {
  switch (format) {
  case RESHARD_FORMAT_PLHD:
    return "PLHD";
  case RESHARD_FORMAT_LPHD:
    return "LPHD";
  case RESHARD_FORMAT_HPLD:
    return "HPLD";
  }
  return NULL;
}

static int compare_shards(const void *a, const void *b) {
  const reshard_shard *x = a;
  const reshard_shard *y = b;
  size_t common =
      x->layer_count < y->layer_count ? x->layer_count : y->layer_count;
  for (size_t i = 0; i < common; i++) {
    if (x->layer_ids[i] != y->layer_ids[i]) {
      return x->layer_ids[i] < y->layer_ids[i] ? -1 : 1;
    }
  }
  if (x->layer_count != y->layer_count) {
    return x->layer_count < y->layer_count ? -1 : 1;
  }
  if (x->head_start != y->head_start) {
    return x->head_start < y->head_start ? -1 : 1;
  }
  return 0;
}

static int compare_suffix_pointers(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One (layer, head interval) claim of a shard, for the coverage proof. */
typedef struct coverage_claim {
  uint64_t layer_index;
  uint64_t head_start;
  uint64_t head_count;
  size_t shard;
} coverage_claim;

static int compare_claims(const void *a, const void *b) {
  const coverage_claim *x = a;
  const coverage_claim *y = b;
  if (x->layer_index != y->layer_index) {
    return x->layer_index < y->layer_index ? -1 : 1;
  }
  if (x->head_start != y->head_start) {
    return x->head_start < y->head_start ? -1 : 1;
  }
  return (x->shard > y->shard) - (x->shard < y->shard);
}

static reshard_status validate_shard(const reshard_layout *layout,
                                     reshard_shard *shard, size_t index,
                                     const char *path, reshard_error *err) {
  const reshard_descriptor *descriptor = &layout->descriptor;
  if (shard->layer_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.shards[%zu].layer_ids: must not be empty",
                             path, index);
  }
  char ids_path[160];
  snprintf(ids_path, sizeof ids_path, "%s.shards[%zu].layer_ids", path, index);
  reshard_status status = reshard_sort_unique_ids(
      shard->layer_ids, shard->layer_count, ids_path, err);
  if (status) {
    return status;
  }
  for (size_t l = 0; l < shard->layer_count; l++) {
    if (reshard_descriptor_layer_index(descriptor, shard->layer_ids[l]) < 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: layer %llu is not in the descriptor",
                               ids_path,
                               (unsigned long long)shard->layer_ids[l]);
    }
  }
  uint64_t head_end;
  if (shard->head_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.shards[%zu].head_count: must be at least 1",
                             path, index);
  }
  if (!reshard_add(shard->head_start, shard->head_count, &head_end) ||
      head_end > descriptor->total_kv_heads) {
    return reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "%s.shards[%zu]: heads [%llu, +%llu) exceed total_kv_heads %llu", path,
        index, (unsigned long long)shard->head_start,
        (unsigned long long)shard->head_count,
        (unsigned long long)descriptor->total_kv_heads);
  }
  if (shard->key_suffix == NULL || shard->key_suffix[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.shards[%zu].key_suffix: must not be empty",
                             path, index);
  }
  return RESHARD_OK;
}

/* Part bytes L*P*H*(hb(K)+hb(V)), or false on overflow. */
static bool part_bytes_checked(const reshard_layout *layout,
                               const reshard_shard *shard, uint64_t *out) {
  const reshard_descriptor *d = &layout->descriptor;
  uint64_t row = (d->key_head_dim + d->value_head_dim) * d->itemsize;
  uint64_t cells;
  return reshard_mul3(shard->layer_count, d->page_size, shard->head_count,
                      &cells) &&
         reshard_mul(cells, row, out);
}

static reshard_status check_coverage(const reshard_layout *layout,
                                     const char *path, reshard_arena *scratch,
                                     reshard_error *err) {
  const reshard_descriptor *descriptor = &layout->descriptor;
  size_t claim_count = 0;
  for (size_t s = 0; s < layout->shard_count; s++) {
    claim_count += layout->shards[s].layer_count;
  }
  coverage_claim *claims =
      RESHARD_ARENA_NEW(scratch, coverage_claim, claim_count + 1);
  if (claims == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s: out of memory for the coverage proof", path);
  }
  size_t n = 0;
  for (size_t s = 0; s < layout->shard_count; s++) {
    const reshard_shard *shard = &layout->shards[s];
    for (size_t l = 0; l < shard->layer_count; l++) {
      claims[n++] = (coverage_claim){
          .layer_index = (uint64_t)reshard_descriptor_layer_index(
              descriptor, shard->layer_ids[l]),
          .head_start = shard->head_start,
          .head_count = shard->head_count,
          .shard = s,
      };
    }
  }
  qsort(claims, n, sizeof *claims, compare_claims);
  size_t cursor = 0;
  for (size_t layer = 0; layer < descriptor->layer_count; layer++) {
    uint64_t next_head = 0;
    uint64_t layer_id = descriptor->global_layer_ids[layer];
    for (; cursor < n && claims[cursor].layer_index == layer; cursor++) {
      const coverage_claim *claim = &claims[cursor];
      if (claim->head_start > next_head) {
        break;
      }
      if (claim->head_start < next_head) {
        return reshard_error_set(
            err, RESHARD_INVALID_ARGUMENT,
            "%s.shards: layer %llu head %llu is stored in more than one "
            "shard (shard \"%s\" overlaps an earlier one)",
            path, (unsigned long long)layer_id,
            (unsigned long long)claim->head_start,
            layout->shards[claim->shard].key_suffix);
      }
      next_head = claim->head_start + claim->head_count;
    }
    if (next_head != descriptor->total_kv_heads) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s.shards: layer %llu head %llu is stored in "
                               "no shard",
                               path, (unsigned long long)layer_id,
                               (unsigned long long)next_head);
    }
  }
  return RESHARD_OK;
}

reshard_status reshard_layout_normalize(reshard_layout *layout,
                                        const reshard_limits *limits,
                                        const char *path,
                                        reshard_arena *scratch,
                                        reshard_error *err) {
  char descriptor_path[128];
  snprintf(descriptor_path, sizeof descriptor_path, "%s.descriptor", path);
  reshard_status status =
      reshard_descriptor_normalize(&layout->descriptor, descriptor_path, err);
  if (status) {
    return status;
  }
  if (reshard_format_name(layout->format) == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.format: must be PLHD, LPHD or HPLD", path);
  }
  if (layout->shard_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.shards: must not be empty", path);
  }
  if (layout->shard_count > limits->max_layout_parts) {
    return reshard_error_set(
        err, RESHARD_RESOURCE_EXHAUSTED,
        "%s.shards: %zu parts exceed the limit max_layout_parts %llu", path,
        layout->shard_count, (unsigned long long)limits->max_layout_parts);
  }
  uint64_t fragments = 0;
  unsigned components = reshard_component_count(&layout->descriptor);
  for (size_t s = 0; s < layout->shard_count; s++) {
    fragments += (uint64_t)layout->shards[s].layer_count * components;
  }
  if (fragments > limits->max_layout_fragments) {
    return reshard_error_set(
        err, RESHARD_RESOURCE_EXHAUSTED,
        "%s.shards: %llu fragments exceed the limit max_layout_fragments %llu",
        path, (unsigned long long)fragments,
        (unsigned long long)limits->max_layout_fragments);
  }
  uint64_t total_bytes = 0;
  for (size_t s = 0; s < layout->shard_count; s++) {
    status = validate_shard(layout, &layout->shards[s], s, path, err);
    if (status) {
      return status;
    }
    uint64_t bytes;
    if (!part_bytes_checked(layout, &layout->shards[s], &bytes) ||
        !reshard_add(total_bytes, bytes, &total_bytes) ||
        total_bytes > limits->max_layout_bytes) {
      return reshard_error_set(
          err, RESHARD_RESOURCE_EXHAUSTED,
          "%s.shards[%zu]: the page's parts exceed the limit max_layout_bytes "
          "%llu",
          path, s, (unsigned long long)limits->max_layout_bytes);
    }
  }
  qsort(layout->shards, layout->shard_count, sizeof *layout->shards,
        compare_shards);
  const char **suffixes =
      RESHARD_ARENA_NEW(scratch, const char *, layout->shard_count);
  if (suffixes == NULL) {
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "%s: out of memory", path);
  }
  for (size_t s = 0; s < layout->shard_count; s++) {
    suffixes[s] = layout->shards[s].key_suffix;
  }
  qsort(suffixes, layout->shard_count, sizeof *suffixes,
        compare_suffix_pointers);
  for (size_t s = 1; s < layout->shard_count; s++) {
    if (strcmp(suffixes[s], suffixes[s - 1]) == 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s.shards: key_suffix \"%s\" appears more "
                               "than once",
                               path, suffixes[s]);
    }
  }
  return check_coverage(layout, path, scratch, err);
}

uint64_t reshard_layout_key_block_bytes(const reshard_layout *layout,
                                        size_t part_index) {
  const reshard_shard *shard = &layout->shards[part_index];
  const reshard_descriptor *d = &layout->descriptor;
  return shard->layer_count * d->page_size * shard->head_count *
         reshard_head_bytes(d, RESHARD_COMPONENT_KEY);
}

uint64_t reshard_layout_part_bytes(const reshard_layout *layout,
                                   size_t part_index) {
  const reshard_shard *shard = &layout->shards[part_index];
  const reshard_descriptor *d = &layout->descriptor;
  return shard->layer_count * d->page_size * shard->head_count *
         (d->key_head_dim + d->value_head_dim) * d->itemsize;
}

void reshard_layout_fragment(const reshard_layout *layout, size_t part_index,
                             size_t local_layer, reshard_component component,
                             reshard_fragment *out) {
  const reshard_shard *shard = &layout->shards[part_index];
  const reshard_descriptor *d = &layout->descriptor;
  uint64_t hb = reshard_head_bytes(d, component);
  uint64_t layers = shard->layer_count;
  uint64_t heads = shard->head_count;
  uint64_t page = d->page_size;
  uint64_t layer_stride = 0;
  switch (layout->format) {
  case RESHARD_FORMAT_PLHD:
    layer_stride = heads * hb;
    out->token_stride = layers * heads * hb;
    out->head_stride = hb;
    break;
  case RESHARD_FORMAT_LPHD:
    layer_stride = page * heads * hb;
    out->token_stride = heads * hb;
    out->head_stride = hb;
    break;
  case RESHARD_FORMAT_HPLD:
    layer_stride = hb;
    out->token_stride = layers * hb;
    out->head_stride = page * layers * hb;
    break;
  }
  out->layer = shard->layer_ids[local_layer];
  out->component = component;
  out->part_index = part_index;
  out->part_offset = local_layer * layer_stride +
                     (component == RESHARD_COMPONENT_VALUE
                          ? reshard_layout_key_block_bytes(layout, part_index)
                          : 0);
  out->head_start = shard->head_start;
  out->head_count = heads;
}

uint64_t reshard_fragment_byte(const reshard_fragment *fragment,
                               uint64_t itemsize, uint64_t token, uint64_t head,
                               uint64_t element) {
  return fragment->part_offset + token * fragment->token_stride +
         (head - fragment->head_start) * fragment->head_stride +
         element * itemsize;
}
