/* What the direct decoders of the engines' per-call requests share
 * (load_request.c for PlanLoad, transfer_request.c for PlanTransfer): a
 * field read with its tag, one block holding every string of a request,
 * protobuf-c's reading of scalars, and the nested messages both requests
 * carry (a UInt32Value dp rank, Limits, a PooledMemory by id).
 *
 * Each decoder walks a request twice: its shape first (every field known
 * and of the wire type protobuf-c expects, the lists counted, the strings'
 * bytes added up), then its values into arrays sized once. Whatever the
 * first walk does not accept makes the decoder decline, and the request is
 * decoded through the pre-scan and protobuf-c (decode.h). Nothing here
 * allocates but the nested messages' decoders, from the caller's arena. */
#ifndef RESHARD_REQUEST_FIELDS_H
#define RESHARD_REQUEST_FIELDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "google/protobuf/wrappers.pb-c.h"
#include "reshard/arena.h"
#include "reshard/v1/planner.pb-c.h"
#include "wire/wire_reader.h"

/* One field: its number, its wire type and its value's bytes (a delimited
 * value's without its length). */
typedef struct reshard_request_field {
  uint64_t number;
  unsigned wire;
  reshard_wire_reader value;
} reshard_request_field;

/* Reads the next field of `r` into `f`; false at malformed bytes. */
static inline bool reshard_request_next_field(reshard_wire_reader *r,
                                              reshard_request_field *f) {
  return reshard_wire_read_tag(r, &f->number, &f->wire) &&
         reshard_wire_read_value(r, f->wire, &f->value);
}

static inline bool reshard_request_is_text(const reshard_request_field *f) {
  return f->wire == RESHARD_WIRE_DELIMITED;
}

static inline size_t
reshard_request_value_length(const reshard_request_field *f) {
  return (size_t)(f->value.end - f->value.at);
}

/* Every string of a request goes into one block, sized on the first walk
 * (each string's bytes and its NUL): one allocation, not one a string. */
typedef struct reshard_request_texts {
  char *at;
} reshard_request_texts;

/* A string field on the first walk: adds its bytes and NUL to
 * *text_bytes; false when it is not of the string's wire type. */
static inline bool reshard_request_take_text(const reshard_request_field *f,
                                             size_t *text_bytes) {
  *text_bytes += reshard_request_value_length(f) + 1;
  return reshard_request_is_text(f);
}

/* The block for `bytes` bytes of strings, from `arena`; false when out of
 * memory. */
bool reshard_request_texts_init(reshard_request_texts *texts, size_t bytes,
                                reshard_arena *arena);

/* An array of `count` strings from `arena` into *list, NULL when `count`
 * is 0, as protobuf-c leaves an empty repeated field; false when out of
 * memory. */
bool reshard_request_text_list(size_t count, reshard_arena *arena,
                               char ***list);

/* The same for `count` block ids. */
bool reshard_request_id_list(size_t count, reshard_arena *arena,
                             uint32_t **list);

/* Copies a string field's bytes and a NUL to the block; returns them. */
static inline char *reshard_request_copy_text(reshard_request_texts *texts,
                                              const reshard_request_field *f) {
  size_t length = reshard_request_value_length(f);
  char *text = texts->at;
  memcpy(text, f->value.at, length);
  text[length] = '\0';
  texts->at += length + 1;
  return text;
}

/* A varint field's value (read_value has checked it). */
static inline uint64_t reshard_request_varint(const reshard_request_field *f) {
  reshard_wire_reader r = f->value;
  uint64_t value = 0;
  reshard_wire_read_varint(&r, &value);
  return value;
}

/* A bool as protobuf-c reads it: set when any byte of its varint holds a
 * value bit, the tenth byte's high bits included, which a uint64 drops. */
static inline protobuf_c_boolean
reshard_request_bool(const reshard_request_field *f) {
  for (const uint8_t *at = f->value.at; at < f->value.end; at++) {
    if (*at & 0x7f) {
      return 1;
    }
  }
  return 0;
}

/* A nested message's one occurrence, its bytes into *bytes; false at a
 * second (the pre-scan refuses it) or at another wire type. */
static inline bool reshard_request_take_once(const reshard_request_field *f,
                                             reshard_wire_reader *bytes,
                                             bool *seen) {
  if (*seen || f->wire != RESHARD_WIRE_DELIMITED) {
    return false;
  }
  *seen = true;
  *bytes = f->value;
  return true;
}

/* One occurrence of a repeated uint32 field (block ids), packed or not,
 * on the first walk: adds its values to *count; false at another wire
 * type or a packed run that ends inside a varint (protobuf-c refuses it).
 * A varint longer than ten bytes, which protobuf-c refuses too, is counted
 * here and found by reshard_request_take_ids. */
bool reshard_request_count_ids(const reshard_request_field *f, size_t *count);

/* The same occurrence on the second walk: stores its values (a varint's
 * low 32 bits) at *ids and moves it past them; false at a varint longer
 * than ten bytes. */
bool reshard_request_take_ids(const reshard_request_field *f, uint32_t **ids);

/* A UInt32Value's bytes, decoded into `arena`; NULL when it holds anything
 * but its value, or when out of memory. */
Google__Protobuf__UInt32Value *
reshard_request_dp_rank(reshard_wire_reader bytes, reshard_arena *arena);

/* A Limits' bytes, decoded into `arena`; NULL as above. */
Reshard__V1__Limits *reshard_request_limits(reshard_wire_reader bytes,
                                            reshard_arena *arena);

/* The first walk of a PooledMemory's bytes: true when it names its pool by
 * id (not inline) and holds nothing else but its block table; counts the
 * block ids into *block_ids and adds its strings' bytes to *text_bytes. */
bool reshard_request_pooled_shape(reshard_wire_reader bytes, size_t *block_ids,
                                  size_t *text_bytes);

/* The second: the pool's id into `texts` and the `block_ids` ids counted,
 * into `arena`; NULL when out of memory or at a varint longer than ten
 * bytes. */
Reshard__V1__PooledMemory *reshard_request_pooled(reshard_wire_reader bytes,
                                                  size_t block_ids,
                                                  reshard_request_texts *texts,
                                                  reshard_arena *arena);

#endif
