/* Encodes the PlanTransferResponse straight from a transfer plan into
 * wire bytes: its TransferSources, the target's region ids, its
 * TransferBatches (range_batches.h, with the source of each batch as one
 * scalar) and PlanStats (plan_response.h). The bytes are exactly what
 * protobuf-c packs for the message of the same plan
 * (tests/daemon/wire/test_transfer_response.c, on random plans). */
#ifndef RESHARD_TRANSFER_RESPONSE_H
#define RESHARD_TRANSFER_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/transfer.h"
#include "reshard/varint_columns.h"
#include "wire/range_batches.h"

/* A PlanTransferResponse, measured and ready to write. With runs requested
 * (plan->runs.batch_first non-NULL) the batches carry runs, written from
 * the runs and the batches' bytes alone: plan->copies is not read and may
 * be NULL (a plan made with request.omit_copies). */
typedef struct reshard_transfer_response {
  const reshard_transfer_plan *plan;
  const reshard_transfer_pool *pools; /* the request's: plan->sources index
                                         them */
  const reshard_binding *binding;     /* the target's: its region ids */
  const char *source_placement_id;
  const char *target_placement_id;
  reshard_range_batches batches;
  size_t *source_bytes; /* per source, its TransferSource body */
  size_t size;          /* the whole encoded response */
} reshard_transfer_response;

/* Measures the response for `plan`, whose sources are entries of `pools`
 * (each source: participant, endpoint, memory id and every region of its
 * pool, in the pool's order), whose copies write the regions of `binding`
 * (region ids in its order) and whose batches are, when `columns` is
 * non-NULL and no runs were folded, those varint columns (the six copy
 * fields of each batch; today's reshard_plan_transfer writes none, so the
 * daemon passes NULL and the copies are read). The ids may be NULL or
 * empty (left out). Everything must outlive `out`. The bytes are exactly
 * what protobuf-c packs for the PlanTransferResponse of the same plan.
 * RESHARD_RESOURCE_EXHAUSTED when the arena cannot grow or the size would
 * pass SIZE_MAX. */
reshard_status reshard_transfer_response_measure(
    const reshard_transfer_plan *plan, const reshard_transfer_pool *pools,
    const reshard_binding *binding, const char *source_placement_id,
    const char *target_placement_id, const reshard_varint_batches *columns,
    reshard_arena *arena, reshard_transfer_response *out);

/* Writes the response into `out`, which has room for response->size
 * bytes; returns the bytes written (response->size). */
size_t
reshard_transfer_response_write(const reshard_transfer_response *response,
                                uint8_t *out);

/* The same response as pieces (reshard_response_pieces_fn). */
reshard_response_pieces_fn reshard_transfer_response_write_pieces;

#endif
