#include "reshard/descriptor.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/checked.h"

static int compare_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a;
  uint64_t y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

reshard_status reshard_sort_unique_ids(uint64_t *ids, size_t count,
                                       const char *path, reshard_error *err) {
  if (count > 1) {
    qsort(ids, count, sizeof *ids, compare_u64);
  }
  for (size_t i = 1; i < count; i++) {
    if (ids[i] == ids[i - 1]) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s: layer id %llu appears more than once", path,
                               (unsigned long long)ids[i]);
    }
  }
  return RESHARD_OK;
}

reshard_status reshard_descriptor_normalize(reshard_descriptor *descriptor,
                                            const char *path,
                                            reshard_error *err) {
  if (descriptor->layer_count == 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.global_layer_ids: must not be empty", path);
  }
  if (descriptor->dtype == NULL || descriptor->dtype[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s.dtype: must not be empty", path);
  }
  static const struct {
    const char *name;
    size_t offset;
  } at_least_one[] = {
      {"itemsize", offsetof(reshard_descriptor, itemsize)},
      {"page_size", offsetof(reshard_descriptor, page_size)},
      {"total_kv_heads", offsetof(reshard_descriptor, total_kv_heads)},
      {"key_head_dim", offsetof(reshard_descriptor, key_head_dim)},
  };
  for (size_t i = 0; i < sizeof at_least_one / sizeof at_least_one[0]; i++) {
    uint64_t value =
        *(const uint64_t *)((const char *)descriptor + at_least_one[i].offset);
    if (value == 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "%s.%s: must be at least 1", path,
                               at_least_one[i].name);
    }
  }
  uint64_t bytes;
  if (!reshard_mul(descriptor->key_head_dim, descriptor->itemsize, &bytes) ||
      !reshard_mul(descriptor->value_head_dim, descriptor->itemsize, &bytes) ||
      !reshard_add(descriptor->key_head_dim, descriptor->value_head_dim,
                   &bytes) ||
      !reshard_mul(bytes, descriptor->itemsize, &bytes)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: head dims times itemsize overflow 64 bits",
                             path);
  }
  char ids_path[256];
  snprintf(ids_path, sizeof ids_path, "%s.global_layer_ids", path);
  return reshard_sort_unique_ids(descriptor->global_layer_ids,
                                 descriptor->layer_count, ids_path, err);
}

uint64_t reshard_head_bytes(const reshard_descriptor *descriptor,
                            reshard_component component) {
  uint64_t dim = component == RESHARD_COMPONENT_KEY
                     ? descriptor->key_head_dim
                     : descriptor->value_head_dim;
  return dim * descriptor->itemsize;
}

unsigned reshard_component_count(const reshard_descriptor *descriptor) {
  return descriptor->value_head_dim == 0 ? 1 : 2;
}

ptrdiff_t reshard_descriptor_layer_index(const reshard_descriptor *descriptor,
                                         uint64_t layer) {
  size_t low = 0;
  size_t high = descriptor->layer_count;
  while (low < high) {
    size_t mid = low + (high - low) / 2;
    if (descriptor->global_layer_ids[mid] < layer) {
      low = mid + 1;
    } else {
      high = mid;
    }
  }
  if (low < descriptor->layer_count &&
      descriptor->global_layer_ids[low] == layer) {
    return (ptrdiff_t)low;
  }
  return -1;
}

bool reshard_descriptor_equal(const reshard_descriptor *a,
                              const reshard_descriptor *b,
                              const char **differing_field) {
  const char *field = NULL;
  if (strcmp(a->dtype, b->dtype) != 0) {
    field = "dtype";
  } else if (a->itemsize != b->itemsize) {
    field = "itemsize";
  } else if (a->page_size != b->page_size) {
    field = "page_size";
  } else if (a->total_kv_heads != b->total_kv_heads) {
    field = "total_kv_heads";
  } else if (a->key_head_dim != b->key_head_dim) {
    field = "key_head_dim";
  } else if (a->value_head_dim != b->value_head_dim) {
    field = "value_head_dim";
  } else if (a->layer_count != b->layer_count ||
             memcmp(a->global_layer_ids, b->global_layer_ids,
                    a->layer_count * sizeof *a->global_layer_ids) != 0) {
    field = "global_layer_ids";
  }
  if (differing_field != NULL) {
    *differing_field = field;
  }
  return field == NULL;
}
