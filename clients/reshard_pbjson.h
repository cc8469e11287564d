/* reshard_pbjson: conversion between jansson values and protobuf-c messages,
 * driven by the generated message descriptors, so the JSON schema mirrors
 * the proto field names exactly (docs/clients.md).
 *
 * JSON to message: an object whose keys are proto field names. Unsigned
 * integers are JSON integers >= 0 or strings of decimal digits (for 64-bit
 * values beyond 2^63); enums are their value names ("LPHD", "KEY") or
 * numbers; google.protobuf.UInt32Value fields are plain integers; null
 * leaves a field unset; repeated fields are arrays; at most one member of a
 * oneof may be present. Unknown keys are errors, so typos do not pass
 * silently.
 */
#ifndef RESHARD_PBJSON_H
#define RESHARD_PBJSON_H

#include <stddef.h>

#include <jansson.h>
#include <protobuf-c/protobuf-c.h>

/* Builds a message of type `desc` from `json`. Returns a message allocated
 * with the default protobuf-c allocator, freed by
 * protobuf_c_message_free_unpacked(msg, NULL); or NULL with a message in
 * `err` (capacity `errcap`, never NULL) that starts with the JSON path of
 * the offending value, e.g. "binding.ranges[3].token_count: expected an
 * unsigned integer, got a string". */
ProtobufCMessage *
reshard_pbjson_to_message(const json_t *json,
                          const ProtobufCMessageDescriptor *desc, char *err,
                          size_t errcap);

/* Converts `msg` to a new JSON object (caller owns the reference): every
 * scalar field is present (defaults included), unset message fields and
 * unset oneof members are omitted, enums are written by name, 64-bit
 * values above 2^63-1 as decimal strings, UInt32Value as a plain integer.
 * Returns NULL only when memory runs out. */
json_t *reshard_pbjson_from_message(const ProtobufCMessage *msg);

#endif /* RESHARD_PBJSON_H */
