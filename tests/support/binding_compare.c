#include "binding_compare.h"

#include <stdio.h>
#include <string.h>

static bool same_text(const char *a, const char *b, const char *what,
                      size_t index, char *why, size_t why_size) {
  if (strcmp(a, b) == 0) {
    return true;
  }
  snprintf(why, why_size, "%s [%zu]: \"%s\" against \"%s\"", what, index, a, b);
  return false;
}

static bool same_value(unsigned long long a, unsigned long long b,
                       const char *what, size_t index, char *why,
                       size_t why_size) {
  if (a == b) {
    return true;
  }
  snprintf(why, why_size, "%s [%zu]: %llu against %llu", what, index, a, b);
  return false;
}

bool reshard_test_bindings_equal(const reshard_binding *a,
                                 const reshard_binding *b, char *why,
                                 size_t why_size) {
  if (!same_text(a->participant_id, b->participant_id, "participant_id", 0, why,
                 why_size) ||
      !same_text(a->endpoint, b->endpoint, "endpoint", 0, why, why_size) ||
      !same_value(a->region_count, b->region_count, "region_count", 0, why,
                  why_size) ||
      !same_value(a->range_count, b->range_count, "range_count", 0, why,
                  why_size)) {
    return false;
  }
  for (size_t i = 0; i < a->region_count; i++) {
    const reshard_region *x = &a->regions[i], *y = &b->regions[i];
    if (!same_text(x->region_id, y->region_id, "regions.region_id", i, why,
                   why_size) ||
        !same_value(x->address, y->address, "regions.address", i, why,
                    why_size) ||
        !same_value(x->nbytes, y->nbytes, "regions.nbytes", i, why, why_size)) {
      return false;
    }
  }
  for (size_t i = 0; i < a->range_count; i++) {
    const reshard_binding_range *x = &a->ranges[i], *y = &b->ranges[i];
    if (!same_value(x->global_layer_id, y->global_layer_id,
                    "ranges.global_layer_id", i, why, why_size) ||
        !same_value(x->component, y->component, "ranges.component", i, why,
                    why_size) ||
        !same_value(x->token_start, y->token_start, "ranges.token_start", i,
                    why, why_size) ||
        !same_value(x->token_count, y->token_count, "ranges.token_count", i,
                    why, why_size) ||
        !same_value(x->head_start, y->head_start, "ranges.head_start", i, why,
                    why_size) ||
        !same_value(x->head_count, y->head_count, "ranges.head_count", i, why,
                    why_size) ||
        !same_text(x->region_id, y->region_id, "ranges.region_id", i, why,
                   why_size) ||
        !same_value(x->offset_bytes, y->offset_bytes, "ranges.offset_bytes", i,
                    why, why_size) ||
        !same_value(x->token_stride_bytes, y->token_stride_bytes,
                    "ranges.token_stride_bytes", i, why, why_size) ||
        !same_value(x->head_stride_bytes, y->head_stride_bytes,
                    "ranges.head_stride_bytes", i, why, why_size)) {
      return false;
    }
  }
  return true;
}
