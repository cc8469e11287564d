/* The logical KV schema shared by one placement or store layout (SPEC §1.1). */
#ifndef RESHARD_DESCRIPTOR_H
#define RESHARD_DESCRIPTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/error.h"

typedef enum reshard_component {
  RESHARD_COMPONENT_KEY = 1,
  RESHARD_COMPONENT_VALUE = 2,
} reshard_component;

/* All arrays and strings are owned by whoever built the struct (usually a
 * request arena); the library never frees them. */
typedef struct reshard_descriptor {
  uint64_t *global_layer_ids; /* sorted and unique once normalized */
  size_t layer_count;
  const char *dtype;
  uint64_t itemsize;
  uint64_t page_size;
  uint64_t total_kv_heads;
  uint64_t key_head_dim;
  uint64_t value_head_dim; /* 0: single-tensor cache, no V anywhere */
} reshard_descriptor;

/* Validates `descriptor` and sorts its layer ids in place. `path` is the
 * field path used in messages (e.g. "manifest.layout.descriptor"). */
reshard_status reshard_descriptor_normalize(reshard_descriptor *descriptor,
                                            const char *path,
                                            reshard_error *err);

/* Bytes of one head of `component`: dim * itemsize. Valid only on a
 * normalized descriptor (the product was checked there). */
uint64_t reshard_head_bytes(const reshard_descriptor *descriptor,
                            reshard_component component);

/* 1 for single-tensor caches, 2 otherwise. */
unsigned reshard_component_count(const reshard_descriptor *descriptor);

/* Index of `layer` in the sorted layer list, or -1 when absent. */
ptrdiff_t reshard_descriptor_layer_index(const reshard_descriptor *descriptor,
                                         uint64_t layer);

/* True when both normalized descriptors are equal. When they differ and
 * `differing_field` is non-NULL it receives the name of the first field
 * that differs (a static string). */
bool reshard_descriptor_equal(const reshard_descriptor *a,
                              const reshard_descriptor *b,
                              const char **differing_field);

/* Sorts `ids` ascending and checks uniqueness; on a duplicate fills `err`
 * naming `path` and returns INVALID_ARGUMENT. Shared by every layer list. */
reshard_status reshard_sort_unique_ids(uint64_t *ids, size_t count,
                                       const char *path, reshard_error *err);

#endif
