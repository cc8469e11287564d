/* Private to the oracle's files (tests/support/oracle_*.c); the public
 * face of the support library is oracle.h.
 *
 * Everything that decides what a correct plan is (Part byte positions,
 * fragment strides, granularity of step 3, coalescing, source choice) is
 * computed by these files from the SPEC's formulas; the library is only
 * used to normalize inputs, compute layout ids and produce the plan under
 * test. They are:
 *
 *   oracle_rng.c           seeded pseudo-random numbers, per-case seeds
 *   oracle_shapes.c        random descriptors, topologies, placements and
 *                          layouts
 *   oracle_layout_check.c  canonical layouts and upload plans (SPEC §1.3,
 *                          §2.1)
 *   oracle_binding.c       reader memory: paged, contiguous, HND, padded
 *                          and interleaved bindings
 *   oracle_part.c          logical values and the bytes of a Part per
 *                          format (SPEC §1.3)
 *   oracle_reference.c     the naive reference copies of SPEC §2.2 and the
 *                          source selection check
 *   oracle_execute.c       executing a plan's copies and checking every
 *                          byte
 *   oracle_case.c          whole cases: random, the SPEC §6 scenarios,
 *                          hand-made; the format x memory-style matrix
 *   pool_oracle.c          memory pools, block tables and their explicit
 *                          bindings (SPEC §1.5a; its own header,
 *                          pool_oracle.h)
 *
 * The small helpers below are static inline so that every file gets its
 * own copy and the library exports nothing but oracle.h's names and the
 * two oracle_ functions declared at the end. */
#ifndef RESHARD_TEST_ORACLE_INTERNAL_H
#define RESHARD_TEST_ORACLE_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

static inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static inline bool failf(char *msg, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

static inline bool failf(char *msg, size_t size, const char *format, ...) {
  if (msg != NULL && size > 0) {
    va_list args;
    va_start(args, format);
    vsnprintf(msg, size, format, args);
    va_end(args);
  }
  return false;
}

static inline void die(const char *what) {
  fprintf(stderr, "oracle: %s\n", what);
  abort();
}

static inline void *xmalloc(size_t size) {
  void *p = malloc(size ? size : 1);
  if (p == NULL) {
    die("out of memory");
  }
  return p;
}

static inline void *xcalloc(size_t count, size_t size) {
  void *p = calloc(count ? count : 1, size ? size : 1);
  if (p == NULL) {
    die("out of memory");
  }
  return p;
}

static inline void *anew(reshard_arena *arena, size_t count, size_t size) {
  void *p = reshard_arena_calloc(arena, count ? count : 1, size);
  if (p == NULL) {
    die("arena out of memory");
  }
  return p;
}

static inline char *aprintf(reshard_arena *arena, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

static inline char *aprintf(reshard_arena *arena, const char *format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  vsnprintf(buf, sizeof buf, format, args);
  va_end(args);
  char *out = reshard_arena_strdup(arena, buf);
  if (out == NULL) {
    die("arena out of memory");
  }
  return out;
}

static inline uint64_t min_u64(uint64_t a, uint64_t b) {
  return a < b ? a : b;
}

static inline uint64_t max_u64(uint64_t a, uint64_t b) {
  return a > b ? a : b;
}

static inline const char *component_name(reshard_component c) {
  return c == RESHARD_COMPONENT_KEY ? "K" : "V";
}

/* hb(component) from the SPEC: dim * itemsize. */
static inline uint64_t head_bytes(const reshard_descriptor *d,
                                  reshard_component c) {
  return (c == RESHARD_COMPONENT_KEY ? d->key_head_dim : d->value_head_dim) *
         d->itemsize;
}

static inline uint64_t component_dim(const reshard_descriptor *d,
                                     reshard_component c) {
  return c == RESHARD_COMPONENT_KEY ? d->key_head_dim : d->value_head_dim;
}

static inline unsigned components_of(const reshard_descriptor *d) {
  return d->value_head_dim == 0 ? 1u : 2u;
}

static inline reshard_component component_at(unsigned i) {
  return i == 0 ? RESHARD_COMPONENT_KEY : RESHARD_COMPONENT_VALUE;
}

static inline const char *format_name(reshard_format f) {
  switch (f) {
  case RESHARD_FORMAT_PLHD:
    return "PLHD";
  case RESHARD_FORMAT_LPHD:
    return "LPHD";
  case RESHARD_FORMAT_HPLD:
    return "HPLD";
  }
  return "?";
}

static inline int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Index of `layer` in a sorted list, or -1. */
static inline ptrdiff_t find_sorted(const uint64_t *ids, size_t n,
                                    uint64_t layer) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ids[mid] < layer) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < n && ids[lo] == layer ? (ptrdiff_t)lo : -1;
}

static inline uint8_t hash_byte(uint64_t hash, uint64_t k) {
  return (uint8_t)(hash >> (8 * (k % 8)));
}

static inline size_t region_index_of(const reshard_binding *binding,
                                     const char *id) {
  for (size_t i = 0; i < binding->region_count; i++) {
    if (strcmp(binding->regions[i].region_id, id) == 0) {
      return i;
    }
  }
  die("binding range names an unknown region");
  return 0;
}

/* Splits `total` into `n` sizes, each at least `min_each` (total >=
 * n * min_each). rng NULL: as even as possible, larger ones first.
 * (oracle_shapes.c) */
void oracle_split_sizes(oracle_rng *rng, uint64_t total, size_t n,
                        uint64_t min_each, uint64_t *sizes);

/* Offset of the fragment (shard, local layer, component) per SPEC §1.3;
 * its token and head strides through the pointers. (oracle_part.c) */
uint64_t oracle_fragment_offset(const reshard_layout *layout, size_t part,
                                size_t local_layer, reshard_component c,
                                uint64_t *token_stride, uint64_t *head_stride);

#endif
