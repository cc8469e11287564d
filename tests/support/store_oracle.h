/* The execution oracle of SPEC §2.5 (the store direction), written from
 * the SPEC's formulas like oracle.h and sharing its shapes and value
 * identities.
 *
 * A writer's memory is filled so that every value its binding holds is
 * the logical value oracle_element_hash names; a store plan is executed
 * from that memory into zeroed Part buffers; the Parts must then be
 * exactly what oracle_fill_part builds (SPEC §1.3), every Part byte
 * written once, nothing written outside the writer's Parts. The same
 * memory walk checks a reader's memory after a load executed from stored
 * Parts, which closes the write-then-read cycle.
 *
 * Checking functions return true on success, else false with a one-line
 * explanation in `msg`. */
#ifndef RESHARD_TEST_STORE_ORACLE_H
#define RESHARD_TEST_STORE_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "oracle.h"
#include "reshard/store.h"

/* One malloc'd buffer per binding region, regions[i] of
 * binding->regions[i].nbytes bytes. */
typedef struct oracle_memory {
  uint8_t **regions;
  size_t count;
} oracle_memory;

/* Allocates the regions of `binding`, every byte set to `fill`. */
void oracle_memory_alloc(const reshard_binding *binding, uint8_t fill,
                         oracle_memory *out);
void oracle_memory_free(oracle_memory *memory);

/* Writes into `memory` the logical value of every (token, head, element)
 * `binding` holds for tokens [0, page_count * page_size). */
void oracle_memory_fill_values(const reshard_descriptor *desc,
                               const reshard_binding *binding,
                               uint64_t page_count, oracle_memory *memory);

/* Checks that every value `binding` holds for tokens
 * [0, page_count * page_size) is its logical value. */
bool oracle_memory_check_values(const reshard_descriptor *desc,
                                const reshard_binding *binding,
                                uint64_t page_count,
                                const oracle_memory *memory, char *msg,
                                size_t msg_size);

/* The Parts of `layout` (normalized) whose SPEC §2.1 writer is `part` of a
 * placement writing DP rank part->rank.dp: none unless the part has
 * replica ordinal 0 and layers; else the shards holding exactly its layers
 * and heads. Writes up to `room` indexes to `out`; returns the count. */
size_t oracle_store_expected_parts(const reshard_layout *layout,
                                   const reshard_placement_part *part,
                                   uint64_t *out, size_t room);

/* Stored pages: parts[page * shard_count + i] is Part i of page `page`
 * (NULL for Parts nobody has written yet), calloc'd on first write. */
typedef struct oracle_store {
  const reshard_layout *layout;
  uint64_t page_count;
  uint8_t **parts;
  uint8_t **writes; /* per Part byte: how many copies wrote it */
} oracle_store;

void oracle_store_init(oracle_store *store, const reshard_layout *layout,
                       uint64_t page_count);
void oracle_store_free(oracle_store *store);

/* Executes `plan` batch by batch from `memory` into `store`, checking the
 * batch structure (SPEC §2.2 step 5 under request->limits) and totals,
 * that part_indexes are the expected Parts, that each copy stays inside
 * its region and a Part the participant writes, and that no Part byte is
 * written twice. */
bool oracle_store_execute(const reshard_store_request *request,
                          const reshard_store_plan *plan,
                          const oracle_memory *memory, oracle_store *store,
                          char *msg, size_t msg_size);

/* Checks that the stored Parts `part_indexes` of every page are exactly
 * oracle_fill_part's bytes and that every byte was written once. */
bool oracle_store_check_parts(const oracle_store *store,
                              const uint64_t *part_indexes, size_t part_count,
                              char *msg, size_t msg_size);

/* Executes a load plan's copies from the stored Parts into `memory`
 * (Parts must exist for every copy's page and part). */
bool oracle_store_load(const oracle_store *store, const reshard_load_plan *plan,
                       const reshard_binding *binding, oracle_memory *memory,
                       char *msg, size_t msg_size);

#endif
