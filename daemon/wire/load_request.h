/* The PlanLoad request an engine sends on every call, decoded without
 * protobuf-c.
 *
 * With pooled memory (issue 14) a PlanLoad request is a few hundred bytes:
 * the page keys, the pool's id, the block table, a few scalars. Through the
 * bounded pre-scan and protobuf-c that is two generic walks over the
 * descriptors, one allocation per string and a search per field: about
 * 8 000 instructions for S1×8 (callgrind) and 11 µs for S5's 256 pages,
 * more than the catalog lookups of the same pages. Here the request is
 * read twice (its shape, then its values) into arrays sized once and one
 * block for all its strings (request_fields.h, which PlanTransfer's
 * decoder shares).
 *
 * This reads that shape only: the fields of PlanLoadRequest but the inline
 * placement (3) and the binding (6) — the inline cache and the binding
 * decoder take those out of the bytes first (plan_load.c) — with a pooled
 * memory by its id. Anything else makes it return NULL, and the caller
 * decodes the request as every request is decoded (reshard_wire_unpack):
 * an inline pool, an unknown field, a known field of another wire type, a
 * singular message field more than once, malformed bytes, more page keys
 * or block ids than `caps` allows. Where it returns a request, that request
 * holds what reshard_wire_unpack gives for the same bytes: the same value
 * for every field (the last occurrence of a scalar or a string wins; block
 * ids packed or not, in wire order; uint32 fields keep a varint's low 32
 * bits; absent strings are ""). Nothing it allocates can pass the budget
 * reshard_wire_unpack grants the same bytes: a string costs its bytes, a
 * NUL and, in a list, a pointer, against at least two wire bytes beside
 * its own; a block id four bytes against at least one; the messages and
 * alignment under 1 KiB. tests/daemon/wire/test_load_request.c holds the two
 * paths equal on random and mutated requests. */
#ifndef RESHARD_LOAD_REQUEST_H
#define RESHARD_LOAD_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/limits.h"
#include "reshard/v1/planner.pb-c.h"

/* Decodes the `length` bytes at `data` as a PlanLoadRequest of the shape
 * above, into `arena` (every string and array, never pointing into
 * `data`); NULL when the bytes are not of that shape or the arena is out
 * of memory. The result lives in the arena (never pass it to
 * *_free_unpacked). */
Reshard__V1__PlanLoadRequest *
reshard_load_request_decode(const uint8_t *data, size_t length,
                            const reshard_limits *caps, reshard_arena *arena);

#endif
