/* Store layouts: how one page is split into Parts and how each Part orders
 * its bytes (SPEC §1.3). */
#ifndef RESHARD_LAYOUT_H
#define RESHARD_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/descriptor.h"
#include "reshard/error.h"
#include "reshard/limits.h"

typedef enum reshard_format {
  RESHARD_FORMAT_PLHD = 1, /* [token, layer, head, dim] */
  RESHARD_FORMAT_LPHD = 2, /* [layer, token, head, dim] */
  RESHARD_FORMAT_HPLD = 3, /* [head, token, layer, dim] */
} reshard_format;

/* "PLHD", "LPHD", "HPLD", or NULL for an unknown value. */
const char *reshard_format_name(reshard_format format);

typedef struct reshard_shard {
  uint64_t *layer_ids; /* non-empty, sorted after normalisation */
  size_t layer_count;
  uint64_t head_start;
  uint64_t head_count;
  const char *key_suffix;
} reshard_shard;

typedef struct reshard_layout {
  reshard_descriptor descriptor;
  reshard_format format;
  reshard_shard *shards; /* Part i of a page is shards[i] */
  size_t shard_count;
} reshard_layout;

/* Validates the layout against `limits` (parts, fragments and bytes per
 * layout) and canonicalises it in place: descriptor layers sorted, each
 * shard's layers sorted (local layer l is the l-th smallest), shards sorted
 * by (layer_ids lexicographically, head_start). Proves coverage: every
 * (layer, head) of the descriptor is in exactly one shard. Messages start
 * with `path`. */
typedef struct reshard_arena reshard_arena;
reshard_status reshard_layout_normalize(reshard_layout *layout,
                                        const reshard_limits *limits,
                                        const char *path,
                                        reshard_arena *scratch,
                                        reshard_error *err);

/* Bytes of Part `part_index` of a normalized layout: L*P*H*(hb(K)+hb(V)). */
uint64_t reshard_layout_part_bytes(const reshard_layout *layout,
                                   size_t part_index);

/* Bytes of the K block of Part `part_index`; V starts here. */
uint64_t reshard_layout_key_block_bytes(const reshard_layout *layout,
                                        size_t part_index);

/* Where the values of one (shard, local layer, component) sit in a Part. */
typedef struct reshard_fragment {
  uint64_t layer; /* global layer id */
  reshard_component component;
  uint64_t part_index;
  uint64_t part_offset; /* of token 0, head shard.head_start, element 0 */
  uint64_t head_start;  /* absolute */
  uint64_t head_count;
  uint64_t token_stride; /* bytes */
  uint64_t head_stride;  /* bytes */
} reshard_fragment;

/* Fills `out` for shard `part_index`, local layer `local_layer`, `component`
 * of a normalized layout. */
void reshard_layout_fragment(const reshard_layout *layout, size_t part_index,
                             size_t local_layer, reshard_component component,
                             reshard_fragment *out);

/* Byte offset within its Part of element `element` of (token, head) in the
 * fragment; `token` is page-local, `head` absolute. For tests and tools. */
uint64_t reshard_fragment_byte(const reshard_fragment *fragment,
                               uint64_t itemsize, uint64_t token, uint64_t head,
                               uint64_t element);

#endif
