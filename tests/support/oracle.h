/* The execution oracle of SPEC §2.4, written from the SPEC's formulas and
 * independent of the planner's implementation.
 *
 * It generates random but valid shapes (descriptors, writer and reader
 * placements, store layouts, runtime bindings in several memory styles),
 * builds the bytes of every stored Part so that each element encodes its
 * logical identity (page, token, layer, head, component, element), executes
 * a plan's copies into sentinel-filled region buffers and proves that every
 * byte the binding covers holds exactly its logical value and that no other
 * byte was written. It also computes the naive reference copy list of SPEC
 * §2.2 (one copy per (token, head), sorted and merged maximally) used to
 * prove coalescing minimal.
 *
 * Every checking function returns true on success; on failure it returns
 * false and writes a one-line explanation into the caller's `msg` buffer
 * (ORACLE_MSG_SIZE bytes are plenty). Nothing here calls Criterion, so the
 * tests decide how to report.
 *
 * The implementation is split by concept over tests/support/oracle_*.c;
 * oracle_internal.h lists the files. */
#ifndef RESHARD_TEST_ORACLE_H
#define RESHARD_TEST_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/error.h"
#include "reshard/identity.h"
#include "reshard/join.h"
#include "reshard/layout.h"
#include "reshard/limits.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/upload.h"

#define ORACLE_MSG_SIZE 2048
/* The byte every region holds before a plan runs. */
#define ORACLE_SENTINEL 0xA5u
/* Used when RESHARD_ORACLE_SEED is unset. */
#define ORACLE_DEFAULT_SEED 0x5eed0f0aac1e2024ull

/* ---- Seeded pseudo-random numbers (splitmix64). ---- */

typedef struct oracle_rng {
  uint64_t state;
} oracle_rng;

void oracle_rng_seed(oracle_rng *rng, uint64_t seed);
uint64_t oracle_rng_next(oracle_rng *rng);
/* Uniform in [lo, hi] (inclusive); lo <= hi. */
uint64_t oracle_rng_between(oracle_rng *rng, uint64_t lo, uint64_t hi);
/* True with probability percent / 100. */
bool oracle_rng_chance(oracle_rng *rng, unsigned percent);
/* Fisher-Yates shuffle of `count` elements of `size` bytes. */
void oracle_rng_shuffle(oracle_rng *rng, void *base, size_t count, size_t size);
/* Shuffles `count` elements of `size` bytes as runs of one to three
 * neighbours, each run kept in order: some neighbours stay neighbours. */
void oracle_rng_shuffle_in_runs(oracle_rng *rng, void *base, size_t count,
                                size_t size);

/* The run's base seed: RESHARD_ORACLE_SEED (decimal or 0x-hex) when set,
 * ORACLE_DEFAULT_SEED otherwise. */
uint64_t oracle_base_seed(void);
/* A well-mixed seed for case `index` of test stream `stream`. */
uint64_t oracle_case_seed(uint64_t base, uint64_t stream, uint64_t index);

/* ---- Shapes. All memory comes from the arena passed in. ---- */

/* A random valid descriptor: 1-8 layers with non-contiguous (sometimes
 * large) ids, itemsize 1/2/4, page 1-32 tokens, 1-8 heads, key dim 1-16,
 * value dim sometimes 0 (single tensor); one case in ten is larger (up to
 * 16 layers, 64-token pages, 16 heads, dims 64). Layer ids come out
 * sorted. When `single_tensor` is true value_head_dim is forced to 0. */
void oracle_random_descriptor(oracle_rng *rng, reshard_arena *arena,
                              bool single_tensor, reshard_descriptor *out);

/* A descriptor with layers 0..layer_count-1. */
void oracle_fixed_descriptor(reshard_arena *arena, size_t layer_count,
                             const char *dtype, uint64_t itemsize,
                             uint64_t page_size, uint64_t heads,
                             uint64_t key_dim, uint64_t value_dim,
                             reshard_descriptor *out);

/* A deep copy of `src` whose layer ids are shuffled when rng is non-NULL
 * (so the library's sorting is exercised). */
reshard_descriptor oracle_descriptor_clone(reshard_arena *arena,
                                           oracle_rng *rng,
                                           const reshard_descriptor *src);

/* Descriptor equality per SPEC §1.1 (layer sets, dtype, itemsize, page,
 * heads, dims), computed here, not by the library. */
bool oracle_descriptor_same(const reshard_descriptor *a,
                            const reshard_descriptor *b);

/* dp x pp x tp ranks. head_groups is how many distinct head intervals the
 * TP ranks split into (each group of TP ranks replicates one interval);
 * 0 selects min(tp, heads). Groups are at most min(tp, heads). */
typedef struct oracle_topology {
  uint64_t dp, pp, tp, head_groups;
} oracle_topology;

/* Random sizes: tp 1-8 (often above the head count, giving replicas),
 * pp 1-4 (sometimes more stages than layers), dp 1-2. */
void oracle_random_topology(oracle_rng *rng, const reshard_descriptor *desc,
                            oracle_topology *out);

/* Builds a complete placement with every rank selected: PP splits the
 * sorted layers into contiguous (random-size) chunks, TP ranks are split
 * into head groups with replica ordinals, DP copies the whole thing.
 * Participant ids are "{prefix}-d{dp}-p{pp}-t{tp}". Parts and layer ids are
 * shuffled and replica counts sometimes given as 0 when 1, so the result
 * must still go through reshard_placement_normalize. rng may be NULL for a
 * deterministic, even split (used by the SPEC §6 scenarios). */
void oracle_build_placement(reshard_arena *arena, oracle_rng *rng,
                            const reshard_descriptor *desc,
                            const oracle_topology *topology, const char *prefix,
                            reshard_placement *out);

/* A hand-built random layout in `format`: layers partitioned into random
 * (possibly non-contiguous) groups, each group's heads split randomly,
 * random unique key suffixes, shards and layer ids shuffled. Not
 * normalized. */
void oracle_random_layout(oracle_rng *rng, reshard_arena *arena,
                          const reshard_descriptor *desc, reshard_format format,
                          reshard_layout *out);

/* Checks a normalized layout is in the canonical order SPEC §1.3 fixes:
 * shards by (layer_ids lexicographically, head_start), each shard's layers
 * ascending, and that every (layer, head) is covered exactly once. */
bool oracle_check_layout_canonical(const reshard_layout *layout, char *msg,
                                   size_t msg_size);

/* Checks an upload plan against SPEC §2.1 computed here: the DP rank's
 * ordinal-0 parts with layers, sorted by (layer_ids, head_start), one
 * shard each with suffix "{tp}" or "{tp}_{pp}", written by that part. */
bool oracle_check_upload(const reshard_placement *placement,
                         reshard_format format, uint64_t dp_rank,
                         const reshard_upload_plan *plan, char *msg,
                         size_t msg_size);

/* ---- Reader memory (runtime bindings). ---- */

typedef enum oracle_memory_style {
  /* one range per (layer, component) covering every token, NHD */
  ORACLE_MEM_CONTIGUOUS = 0,
  /* block pool, blocks smaller than the store page, scattered, NHD */
  ORACLE_MEM_PAGED_SMALL,
  /* block pool, blocks larger than the store page, scattered, NHD */
  ORACLE_MEM_PAGED_LARGE,
  /* [head, token, dim] per block, one range per head */
  ORACLE_MEM_HND,
  /* padded token/head strides, gaps, several regions, head splits */
  ORACLE_MEM_PADDED,
  /* token-major rows holding every (layer, component) side by side */
  ORACLE_MEM_INTERLEAVED,
} oracle_memory_style;
#define ORACLE_MEM_STYLE_COUNT 6

const char *oracle_memory_style_name(oracle_memory_style style);

typedef struct oracle_memory_opts {
  oracle_memory_style style;
  uint64_t block_tokens; /* 0: chosen at random for the style */
  size_t region_count;   /* 0: chosen at random for the style */
  /* Chunks (blocks) scattered in runs of one to three kept in order, so
   * that some neighbours lie back to back and others do not. */
  bool scatter_in_runs;
} oracle_memory_opts;

/* Builds a valid binding for participant `part` (of a normalized
 * placement with descriptor `desc`) over pages*page_size tokens. Regions
 * get fake, itemsize-aligned addresses; their sizes are in nbytes. */
void oracle_build_binding(oracle_rng *rng, reshard_arena *arena,
                          const reshard_descriptor *desc,
                          const reshard_placement_part *part,
                          uint64_t page_count, const oracle_memory_opts *opts,
                          reshard_binding *out);

/* ---- Logical values and Part bytes (SPEC §1.3). ---- */

/* The 64-bit identity hash of one element. Byte k of the element's
 * itemsize bytes is (hash >> (8 * (k % 8))) & 0xff. */
uint64_t oracle_element_hash(uint64_t page, uint64_t token, uint64_t layer,
                             uint64_t head, reshard_component component,
                             uint64_t element);

/* Part size L*P*H*(hb(K)+hb(V)) from the SPEC formula. */
uint64_t oracle_part_size(const reshard_layout *layout, size_t part);

/* Writes every byte of Part `part` of page `page` (the request's page
 * index, which is the logical page identity) into `out`, which holds
 * oracle_part_size bytes. Every byte is written. */
void oracle_fill_part(const reshard_layout *layout, size_t part, uint64_t page,
                      uint8_t *out);

/* Builds all Parts of one page: out[i] is a malloc'd buffer of Part i
 * (free each with free()). `out` holds layout->shard_count pointers. */
void oracle_build_page(const reshard_layout *layout, uint64_t page,
                       uint8_t **out);

/* ---- Reference planning from the SPEC formulas. ---- */

/* A growable list of copies (malloc'd). */
typedef struct oracle_copy_list {
  reshard_copy *items;
  size_t count;
  size_t capacity;
} oracle_copy_list;

void oracle_copy_list_push(oracle_copy_list *list, const reshard_copy *copy);
void oracle_copy_list_free(oracle_copy_list *list);

/* Sorts by (page, part, part_offset, region, region_offset). */
void oracle_copy_list_sort(oracle_copy_list *list);

/* Merges, in the list's order, every copy whose source and destination
 * continue exactly where the previous one ended. */
void oracle_copy_list_merge(oracle_copy_list *list);

/* The naive reference for page `page` read from `layout` (normalized) into
 * `binding` of participant `part`: appends one copy per (token, head) to
 * `fine` (unsorted; may be NULL) and returns through `before` (may be NULL)
 * the copy count of SPEC §2.2 step 3's granularity rule. */
void oracle_reference_page(const reshard_layout *layout,
                           const reshard_placement_part *part,
                           const reshard_binding *binding, uint64_t page,
                           oracle_copy_list *fine, uint64_t *before);

/* The reference plan of a request (sources chosen as `plan->page_source`
 * says, for plan->hit_pages pages): `out` receives the maximal merge of
 * the sorted fine copies; `before` the step-3 count. */
void oracle_reference_plan(const reshard_load_request *request,
                           const reshard_load_plan *plan, oracle_copy_list *out,
                           uint64_t *before);

/* ---- Checking a plan. ---- */

/* Participant named by the request's binding, found by a linear scan. */
const reshard_placement_part *
oracle_request_participant(const reshard_load_request *request);

/* The hit prefix SPEC §2.2 step 1 gives for the request (pages up to the
 * first one without a candidate whose descriptor equals the target's). */
uint64_t oracle_expected_hits(const reshard_load_request *request);

/* Checks hit_pages and, for every hit page, that page_source is a
 * candidate with the target's descriptor chosen by the SPEC rule: the
 * first preferred layout id among the candidates, otherwise the fewest
 * coalesced copies for that page (ties: smallest layout id). */
bool oracle_check_selection(const reshard_load_request *request,
                            const reshard_load_plan *plan, char *msg,
                            size_t msg_size);

typedef struct oracle_exec_stats {
  uint64_t copies;
  uint64_t bytes;
  uint64_t covered_bytes; /* binding bytes that hold values of hit pages */
} oracle_exec_stats;

/* Executes the plan batch by batch (memcpy from Part bytes built by
 * oracle_fill_part into sentinel-filled region buffers), bounds-checking
 * every copy, then checks that every binding byte of a hit page holds its
 * logical value and was written exactly once, that bytes of miss pages and
 * bytes outside the binding were never written, and that the copies'
 * destination intervals are disjoint. Also checks the batch structure
 * (batches tile copies[0..copy_count) in order, batch.bytes is the sum)
 * and the plan's operations/bytes totals. */
bool oracle_execute(const reshard_load_request *request,
                    const reshard_load_plan *plan, oracle_exec_stats *stats,
                    char *msg, size_t msg_size);

/* ---- A complete random case. ---- */

typedef struct oracle_case_opts {
  reshard_format format;     /* format of the first source */
  oracle_memory_style style; /* reader memory */
  bool random_style;         /* ignore `style`, pick one per case */
  unsigned max_sources;      /* 1..4 candidate layouts per request */
  bool selection_twists;     /* miss pages, preferences, mismatches */
  bool single_tensor;        /* force value_head_dim = 0 */
  /* When non-NULL, writer and reader topologies come from here instead of
   * being random (head_groups 0 = automatic). */
  const oracle_topology *writer;
  const oracle_topology *reader;
  uint64_t max_batch_operations; /* 0: library default */
  uint64_t max_batch_bytes;      /* 0: library default */
  bool scatter_in_runs;          /* oracle_memory_opts.scatter_in_runs */
  /* Blocks of one page each, all in one region: the reader's ranges are
   * page blocks (reshard_bound_binding.page_blocks), their pages aligned
   * across groups when the blocks are laid out block-major. */
  bool page_blocks;
} oracle_case_opts;

#define ORACLE_MAX_SOURCES 6

/* The format x memory-style matrix the oracle suites are parameterized
 * over, and the seeded case streams of tests/lib/test_oracle.c, so that
 * suites replaying those very cases (test_runs.c) cannot drift from them. */
typedef struct oracle_matrix_param {
  reshard_format format;
  oracle_memory_style style;
  bool single_tensor;
} oracle_matrix_param;

#define ORACLE_MATRIX_SIZE (3 * ORACLE_MEM_STYLE_COUNT)

/* Fills params[0 .. ORACLE_MATRIX_SIZE) with every (format, style). */
void oracle_fill_matrix(oracle_matrix_param *params, bool single_tensor);

/* The options of the matrix case `param` and the stream its seeds come
 * from; *count is how many cases the stream holds. */
uint64_t oracle_matrix_stream(const oracle_matrix_param *param,
                              oracle_case_opts *opts, unsigned *count);

typedef struct oracle_case {
  reshard_arena arena;
  uint64_t seed;
  reshard_descriptor descriptor; /* canonical (sorted) reference copy */
  reshard_placement reader;      /* normalized */
  const reshard_placement_part *participant;
  reshard_layout layouts[ORACLE_MAX_SOURCES]; /* normalized */
  char layout_ids[ORACLE_MAX_SOURCES][RESHARD_ID_SIZE];
  reshard_plan_source sources[ORACLE_MAX_SOURCES];
  reshard_join *prebuilt[ORACLE_MAX_SOURCES]; /* joins we own */
  size_t source_count;
  reshard_binding binding;
  reshard_load_request request;
  char description[1024]; /* shape summary for failure messages */
} oracle_case;

/* Builds a random case from `seed`. Returns false with `msg` when the
 * library rejects an input the oracle considers valid (a library bug or
 * an oracle bug; the message says which step). */
bool oracle_case_build(oracle_case *c, uint64_t seed,
                       const oracle_case_opts *opts, char *msg,
                       size_t msg_size);

/* The SPEC §6 scenarios S1..S5 with `pages` pages, planned for the reader
 * participant with index `participant` among the normalized reader parts
 * (taken modulo the part count). */
bool oracle_scenario_build(oracle_case *c, int scenario, uint64_t pages,
                           size_t participant, char *msg, size_t msg_size);
/* The same with the reader's memory in `style` instead of the scenario's
 * own (ORACLE_MEM_CONTIGUOUS: one range per layer and component over all
 * pages, the contiguous reader of reshard-roundtrip). */
bool oracle_scenario_build_memory(oracle_case *c, int scenario, uint64_t pages,
                                  size_t participant, oracle_memory_style style,
                                  char *msg, size_t msg_size);

/* A hand-made case: the reader is TP1 (one participant "r-d0-p0-t0" with
 * every layer and head of `desc`), the only source is a layout in
 * `format` with the given shards (NULL: one shard holding everything,
 * suffix "0"), every page has that source as its candidate, and the
 * binding has the given regions and ranges (copied; strings must outlive
 * the case). */
bool oracle_manual_case(oracle_case *c, const reshard_descriptor *desc,
                        reshard_format format, const reshard_shard *shards,
                        size_t shard_count, const reshard_region *regions,
                        size_t region_count,
                        const reshard_binding_range *ranges, size_t range_count,
                        uint64_t pages, char *msg, size_t msg_size);

/* Runs reshard_plan_load on the case, then oracle_check_selection and
 * oracle_execute. `plan_arena` is initialised here and receives the plan;
 * whatever the result, the caller hands both to oracle_plan_release (the
 * plan is zeroed when reshard_plan_load fails). Returns false with `msg`
 * (which includes the case description) on any failure. */
bool oracle_case_run(oracle_case *c, reshard_arena *plan_arena,
                     reshard_load_plan *plan, oracle_exec_stats *stats,
                     char *msg, size_t msg_size);

/* Frees what oracle_case_run left: the joins the plan built (when the plan
 * succeeded) and the plan arena. Safe after a failed run. */
void oracle_plan_release(oracle_case *c, reshard_arena *plan_arena,
                         reshard_load_plan *plan);

/* Frees the case's prebuilt joins and its arena. */
void oracle_case_destroy(oracle_case *c);

#endif
