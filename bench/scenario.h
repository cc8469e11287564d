/* The standard scenarios of SPEC §6 as planner inputs: a writer placement
 * uploaded in a format, a reader placement, and a paged binding for one
 * reader participant. Shared by the benchmark and the tests. */
#ifndef RESHARD_BENCH_SCENARIO_H
#define RESHARD_BENCH_SCENARIO_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/identity.h"
#include "reshard/plan.h"
#include "reshard/pool.h"
#include "reshard/store.h"
#include "reshard/transfer.h"
#include "reshard/upload.h"

typedef enum scenario_memory {
  SCENARIO_MEMORY_NHD, /* [block, token, head, dim] per (layer, component) */
  SCENARIO_MEMORY_HND, /* [block, head, token, dim], one range per head */
} scenario_memory;

typedef struct scenario_spec {
  const char *name;
  uint64_t layers, heads, key_dim, value_dim, itemsize, page_size;
  const char *dtype;
  uint64_t writer_tp, writer_pp;
  uint64_t reader_tp, reader_pp;
  reshard_format format;
  uint64_t pages;
  uint64_t block_tokens;
  scenario_memory memory;
} scenario_spec;

/* The five rows of SPEC §6. */
extern const scenario_spec scenario_specs[5];

/* Whether a benchmark asked for `only` (a name prefix such as "S5"; NULL:
 * every scenario) runs `spec`. */
static inline bool scenario_selected(const scenario_spec *spec,
                                     const char *only) {
  return only == NULL || strncmp(spec->name, only, strlen(only)) == 0;
}

/* Everything reshard_plan_load needs, built in `arena`. The region's
 * address is fictitious (planning never dereferences it). */
typedef struct scenario {
  reshard_placement writer;
  reshard_placement reader;
  reshard_upload_plan upload;
  reshard_binding binding;
  reshard_plan_source source;
  size_t *page_source_start;
  size_t *page_sources;
  reshard_load_request request;
  /* The pool holds one equal slice per (layer, component), in order. */
  size_t groups;
  uint64_t group_bytes;
} scenario;

/* Builds `spec` with `pages` pages (0: the spec's count) for reader
 * participant `reader_index` (in canonical participant order), blocks
 * scattered by `seed`. Returns RESHARD_OK or fills `err`. */
reshard_status scenario_build(const scenario_spec *spec, uint64_t pages,
                              size_t reader_index, uint64_t seed,
                              reshard_arena *arena, scenario *out,
                              reshard_error *err);

/* The store side of a scenario (SPEC §2.5): the first writer participant
 * that writes a Part (canonical order), its memory laid out like the
 * spec's reader memory (same blocks and axis order) over the writer's own
 * layers and heads, storing into the uploaded layout. */
typedef struct store_scenario {
  scenario load; /* the same scenario's load side */
  const reshard_placement_part *writer_part;
  reshard_binding binding;
  reshard_store_request request;
} store_scenario;

reshard_status scenario_build_store(const scenario_spec *spec, uint64_t pages,
                                    uint64_t seed, reshard_arena *arena,
                                    store_scenario *out, reshard_error *err);
/* Splits the pool into one region per (layer, component), each at the
 * address its slice had, offsets rebased: the same bytes, registered as
 * vLLM allocates them (one tensor per layer and component). */
reshard_status scenario_region_per_layer(scenario *s, reshard_arena *arena,
                                         reshard_error *err);
/* Lists the binding's ranges in an order drawn from `seed`, as a client
 * that collects them from a hash map would (scripts/load.py's paged
 * readers): the same memory, none of the order validation's fast paths
 * read. */
void scenario_shuffle_ranges(scenario *s, uint64_t seed);

/* The pooled reader of SPEC §6 for a built scenario's reader participant:
 * its blocks as a MemoryPool (SPEC §1.5a) of twice the blocks the request
 * needs, one region per layer, laid out as the engines allocate them —
 * vLLM's [2, blocks, block, heads, dim] (NHD) per layer; S3 (HND)
 * FlashInfer's [blocks, 2, heads, block, dim], K and V interleaved per
 * block; an MLA latent cache (no V) [blocks, block, 1, dim], K only — and
 * a block table of scattered ids. `binding` is the same memory and table
 * as the explicit binding SPEC §1.5 writes for them (one range per block,
 * layer and component; per head too where heads lie outside tokens), so
 * the two forms must give the same plan. */
typedef struct scenario_pool {
  reshard_pool pool;
  uint32_t *block_ids;
  size_t block_count;
  reshard_binding binding;
} scenario_pool;

/* Builds the pooled reader of `s` (built by scenario_build from `spec`),
 * blocks scattered by `seed`, in `arena`. */
reshard_status scenario_build_pool(const scenario_spec *spec, const scenario *s,
                                   uint64_t seed, reshard_arena *arena,
                                   scenario_pool *out, reshard_error *err);

/* The P/D transfer scenarios of SPEC §6 (PlanTransfer, §2.6): an S shape,
 * a prefill (source) and a decode (target) layout with their block sizes
 * and memory styles, and the tokens moved. Both sides pooled as
 * scenario_build_pool lays them out, block tables scattered. */
typedef struct transfer_spec {
  const char *name;
  size_t shape; /* index into scenario_specs */
  uint64_t source_tp, source_pp, source_block;
  scenario_memory source_memory;
  uint64_t target_tp, target_pp, target_block;
  scenario_memory target_memory;
  uint64_t tokens;
} transfer_spec;

/* T1..T5 of SPEC §6. */
extern const transfer_spec transfer_specs[5];

static inline bool transfer_selected(const transfer_spec *spec,
                                     const char *only) {
  return only == NULL || strncmp(spec->name, only, strlen(only)) == 0;
}

/* A built transfer scenario: the source placement and one pool per source
 * participant (canonical order, each registered against the source
 * placement: `memory_ids`), sharing one scattered block table; the target
 * placement and its first participant's pool with its own table. `request`
 * names the pools and the target by `target_shell` (regions, no ranges)
 * with bound_binding NULL: a caller binds the target table per call
 * (reshard_pool_bind over [0, tokens) into `target_bound`), or plans the
 * explicit binding `target_pool.binding` instead. */
typedef struct transfer_scenario {
  scenario_spec shape; /* the S shape with the source block and memory */
  reshard_placement source;
  reshard_placement target;
  char source_placement_id[RESHARD_ID_SIZE];
  char target_placement_id[RESHARD_ID_SIZE];
  size_t pool_count;
  scenario_pool *source_pools;
  reshard_bound_pool *source_bound;
  reshard_transfer_pool *pools; /* name: the memory id */
  char (*memory_ids)[RESHARD_ID_SIZE];
  const uint32_t *source_block_ids;
  size_t source_block_count;
  scenario_pool target_pool;
  reshard_bound_pool target_bound;
  char target_memory_id[RESHARD_ID_SIZE];
  reshard_binding target_shell;
  uint64_t tokens;
  reshard_transfer_request request;
} transfer_scenario;

/* Builds `spec` with `tokens` tokens (0: the spec's count), source blocks
 * scattered by `seed`, target blocks by seed + 1, in `arena`. */
reshard_status transfer_scenario_build(const transfer_spec *spec,
                                       uint64_t tokens, uint64_t seed,
                                       reshard_arena *arena,
                                       transfer_scenario *out,
                                       reshard_error *err);

#endif
