/* reshard_plan_print: the two printed forms of a PlanLoadResponse, table and
 * JSON, and those of a PlanTransferResponse. Both are specified byte for
 * byte in docs/clients.md, so every client (reshardctl, the Python helper in
 * tests/e2e) prints a plan the same way.
 */
#ifndef RESHARD_PLAN_PRINT_H
#define RESHARD_PLAN_PRINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "reshard/v1/planner.pb-c.h"

/* True when the response carries strided runs (SPEC §2.2 step 7): some
 * batch has run columns. Both printed forms then list runs, not copies. */
bool reshard_plan_has_runs(const Reshard__V1__PlanLoadResponse *plan);

/* Checks that a response is self-consistent: every batch's columns have the
 * same length, run columns in every batch or in none, every run_count at
 * least 1, every page_index and region_index in range, a batch's bytes the
 * sum of its nbytes (times run_count), stats.runs the number of run
 * entries. Returns 0, or -1 with a message in `err` (capacity `errcap`). */
int reshard_plan_check(const Reshard__V1__PlanLoadResponse *plan, char *err,
                       size_t errcap);

/* Writes the plan document of docs/clients.md as one line: keys sorted,
 * separators "," and ":", strings escaped by jansson (UTF-8 kept as is),
 * then "\n". The document is streamed, so plans of millions of copies print
 * in constant memory. `plan` must have passed reshard_plan_check(). Returns
 * 0 or -1 on a write or memory error. */
int reshard_plan_print_json(FILE *out,
                            const Reshard__V1__PlanLoadResponse *plan);

/* Writes the table form. `plan` must have passed reshard_plan_check().
 * Returns 0 or -1 on a write or memory error. */
int reshard_plan_print_table(FILE *out,
                             const Reshard__V1__PlanLoadResponse *plan);

/* The same for a transfer plan (SPEC §2.6): some batch has run columns. */
bool reshard_transfer_plan_has_runs(
    const Reshard__V1__PlanTransferResponse *plan);

/* Checks a transfer plan as reshard_plan_check() does a load plan: every
 * batch's columns of one length, run columns in every batch or in none,
 * every run_count at least 1, every source_index below the number of
 * sources, every source_region_index below that source's regions, every
 * region_index below the region ids, a batch's bytes the sum of its nbytes
 * (times run_count), stats.runs the number of run entries. Returns 0, or -1
 * with a message in `err` (capacity `errcap`). */
int reshard_transfer_plan_check(const Reshard__V1__PlanTransferResponse *plan,
                                char *err, size_t errcap);

/* Writes the transfer plan document of docs/clients.md as one line (keys
 * sorted, separators "," and ":", then "\n"), streamed. `plan` must have
 * passed reshard_transfer_plan_check(). Returns 0 or -1 on a write or
 * memory error. */
int reshard_transfer_plan_print_json(
    FILE *out, const Reshard__V1__PlanTransferResponse *plan);

/* Writes the table form of a transfer plan: the sources and their
 * regions, each batch's source (participant, endpoint), then one row per
 * copy (or run). `plan` must have passed reshard_transfer_plan_check().
 * Returns 0 or -1 on a write error. */
int reshard_transfer_plan_print_table(
    FILE *out, const Reshard__V1__PlanTransferResponse *plan);

#endif /* RESHARD_PLAN_PRINT_H */
