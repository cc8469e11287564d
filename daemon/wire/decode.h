/* Bounded decoding of request messages: the one path every RPC's request
 * bytes take before protobuf-c sees them (reshard_wire_unpack calls it, and
 * the fuzz targets call reshard_decode directly).
 *
 * A cheap pre-scan walks the wire bytes against the message descriptor
 * before anything is allocated. It
 *  - counts the elements of the capped repeated fields (binding ranges and
 *    regions, page keys, layout shards, placement parts, layer ids) and
 *    stops at the first element over its cap with RESOURCE_EXHAUSTED naming
 *    the limit; a placement's parts × descriptor layers (its identity
 *    repeats the descriptor in every part) is held to the fragments cap;
 *  - refuses a singular message field that occurs more than once
 *    (INVALID_ARGUMENT): protobuf would merge the occurrences, and
 *    protobuf-c's merge copies every repeated field each time, which turns
 *    a 160 KB request into gigabytes;
 *  - adds up what protobuf-c will allocate (messages, arrays, strings,
 *    unknown fields, its scratch) and refuses, with RESOURCE_EXHAUSTED, a
 *    request whose decoded form would pass the budget.
 * Then protobuf-c decodes through an allocator that refuses to go past the
 * same budget, so a mistake in the estimate cannot spend more than it. */
#ifndef RESHARD_DECODE_H
#define RESHARD_DECODE_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/error.h"
#include "reshard/limits.h"

/* Decoded bytes a request of `length` bytes may cost: 16 per wire byte
 * plus 1 MiB. 16 covers the densest valid input (a minimal BindingRange is
 * ~15 bytes on the wire and ~190 decoded, bounded by --max-ranges); the
 * constant lets small requests decode whatever their shape. */
uint64_t reshard_decode_budget(size_t length);

/* Decodes `length` bytes of `data` as a `type` message into `arena`,
 * spending at most `max_bytes` of it. `caps` (may be NULL: no count caps)
 * bounds the repeated fields listed above. Returns NULL with `err` set:
 * INVALID_ARGUMENT for malformed input or a repeated singular message
 * field, RESOURCE_EXHAUSTED naming the limit or the budget. The result
 * lives in the arena (never pass it to *_free_unpacked). */
ProtobufCMessage *reshard_decode(const ProtobufCMessageDescriptor *type,
                                 const uint8_t *data, size_t length,
                                 uint64_t max_bytes, const reshard_limits *caps,
                                 reshard_arena *arena, reshard_error *err);

/* The caps reshard_wire_unpack decodes every request under. Set once at
 * start, before the server serves (the daemon's caps from its flags);
 * read-only afterwards. Until set, the SPEC §2.3 defaults apply. */
void reshard_decode_set_caps(const reshard_limits *caps);
const reshard_limits *reshard_decode_caps(void);

#endif
