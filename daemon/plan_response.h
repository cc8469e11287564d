/* Encodes a PlanLoadResponse straight from a plan into wire bytes. The
 * copies go out as packed varint columns without building the protobuf-c
 * message first: for a large plan that message is six uint64 arrays per
 * batch which protobuf-c would then walk twice (size, then pack). The bytes
 * are exactly what protobuf-c packs for reshard_wire_plan_to_pb's message
 * (tests/daemon/test_plan_response.c proves it). */
#ifndef RESHARD_PLAN_RESPONSE_H
#define RESHARD_PLAN_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "reshard/plan.h"
#include "wire.h"

/* The encoded size of the response for `plan` and `names`. */
size_t reshard_plan_response_size(const reshard_load_plan *plan,
                                  const reshard_wire_plan_names *names);

/* Writes the response into `out`, which has room for
 * reshard_plan_response_size bytes; returns the bytes written. */
size_t reshard_plan_response_write(const reshard_load_plan *plan,
                                   const reshard_wire_plan_names *names,
                                   uint8_t *out);

#endif
