/* A RuntimeBinding's wire bytes straight into the library's binding.
 *
 * The binding is most of a paged reader's request (S5: 15 872 ranges,
 * 640 KB) and changes on every call, so it is decoded every call. Through
 * protobuf-c each range is a message of its own (allocated, initialised,
 * every field found by a descriptor search) after the bounded pre-scan has
 * walked the same bytes once already; that was a third of the daemon's CPU
 * under S5. Here each range is read once, into its place in one array.
 *
 * The result is what reshard_wire_unpack followed by
 * reshard_wire_binding_from_pb gives for the same bytes — the same values
 * for every field (the last occurrence of a scalar or string wins, unknown
 * fields are skipped, uint32 and enum fields keep a varint's low 32 bits,
 * absent strings are ""), and an error wherever that pair fails:
 * INVALID_ARGUMENT for malformed bytes, for a component that is not KEY or
 * VALUE (the first such range, after the whole message decoded, as
 * from_pb reports it), RESOURCE_EXHAUSTED for more ranges or regions than
 * caps->max_ranges (at the first element past the cap, in wire order) or
 * for a decoded size past `max_bytes`. A message both over a cap and
 * malformed may be refused for either. tests/daemon/wire/test_binding_decode.c
 * holds the two paths equal on random and mutated messages. */
#ifndef RESHARD_BINDING_DECODE_H
#define RESHARD_BINDING_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/arena.h"
#include "reshard/binding.h"
#include "reshard/error.h"
#include "reshard/limits.h"

/* Decodes the `length` bytes of a RuntimeBinding message at `data` into
 * `out`. Every string and array `out` points to is allocated from `arena`
 * (at most `max_bytes` of it), never into `data`; ranges that name the same
 * region as the range before them share its string. `path` ("binding")
 * prefixes error messages; `caps` may be NULL (no count caps). */
reshard_status reshard_binding_decode(const uint8_t *data, size_t length,
                                      const char *path,
                                      const reshard_limits *caps,
                                      uint64_t max_bytes, reshard_arena *arena,
                                      reshard_binding *out, reshard_error *err);

#endif
