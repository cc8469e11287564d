/* The PlanTransfer request a decode instance sends on every call,
 * decoded without protobuf-c.
 *
 * Between live instances with pooled memory (SPEC §2.6) a PlanTransfer
 * request is a few hundred bytes: the source's placement id, pool ids and
 * block table, the token count, the target's placement id, pool and block
 * table, a few scalars. Through the pre-scan and protobuf-c that was about
 * 6 300 instructions of T1-128 with runs (callgrind), a third of what the
 * call costs beside the Check's, its plan and its encoding.
 *
 * This reads that shape only (request_fields.h): every field of
 * PlanTransferRequest but the inline placements (1, 7) and the binding
 * (10), with the target's pooled memory by its id. Anything else makes it
 * return NULL, and the caller decodes the request through
 * reshard_wire_unpack: an inline placement or pool, a binding, an unknown
 * field, a known field of another wire type, a nested message more than
 * once, malformed bytes, more source pool ids than caps->max_layout_parts,
 * or more block ids, the source's and the target's together, than
 * caps->max_block_ids (the pre-scan's counts). Where it returns a request,
 * that request holds what reshard_wire_unpack gives for the same bytes, as
 * load_request.h says for PlanLoad, and costs no more of the call's arena
 * than that decoder's budget. tests/daemon/wire/test_transfer_request.c
 * holds the two paths equal on random and mutated requests. */
#ifndef RESHARD_TRANSFER_REQUEST_H
#define RESHARD_TRANSFER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/limits.h"
#include "reshard/v1/planner.pb-c.h"

/* Decodes the `length` bytes at `data` as a PlanTransferRequest of the
 * shape above, into `arena` (never pointing into `data`); NULL when the
 * bytes are not of that shape or the arena is out of memory. The result
 * lives in the arena (never pass it to *_free_unpacked). */
Reshard__V1__PlanTransferRequest *
reshard_transfer_request_decode(const uint8_t *data, size_t length,
                                const reshard_limits *caps,
                                reshard_arena *arena);

#endif
