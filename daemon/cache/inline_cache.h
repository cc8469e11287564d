/* Inline PlanLoad targets by content. A reader sends the same placement,
 * and often the same binding (contiguous tensors, a pool that did not
 * move), call after call while its page keys change. Those fields are
 * found in the request's wire bytes and looked up by their exact bytes:
 * an inline placement seen before is neither decoded, normalized nor
 * hashed again (its placement_id comes with it), and a binding seen before
 * for the same placement, page count and limits is neither decoded nor
 * validated again. Only the remaining fields are decoded. The cache
 * entries are the daemon cache's (kinds inline_placement and
 * bound_binding, under --cache-bytes). Loop thread, except that a shared
 * binding may be read by any thread holding a reference. */
#ifndef RESHARD_INLINE_CACHE_H
#define RESHARD_INLINE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cache/cache.h"
#include "cache/shared.h"
#include "reshard/binding.h"
#include "reshard/limits.h"

/* A field of a message's wire bytes: [start, end) spans the tag, the
 * length and the value; the value is [value, value + value_length). */
typedef struct reshard_wire_span {
  size_t start, end;
  const uint8_t *value;
  size_t value_length;
} reshard_wire_span;

/* What reshard_inline_scan found in a PlanLoadRequest. */
typedef struct reshard_inline_fields {
  reshard_wire_span placement; /* field 3 */
  reshard_wire_span binding;   /* field 6; value NULL when absent */
  reshard_wire_span limits;    /* field 7; value NULL when absent */
  uint64_t page_count;         /* occurrences of field 2 */
  unsigned bindings;           /* occurrences of field 6 */
  bool parsed;                 /* the whole top level parsed */
} reshard_inline_fields;

/* Scans the top level of a PlanLoadRequest's wire bytes into `out` (the
 * last occurrence of each span). Returns true when the request targets an
 * inline placement that can be looked up by its bytes: the bytes parse,
 * the placement occurs exactly once, placement_id never, binding and
 * limits at most once (a repeated singular message would be merged by the
 * decoder, so such requests take the ordinary path). False: decode the
 * request as usual. */
bool reshard_inline_scan(const uint8_t *data, size_t length,
                         reshard_inline_fields *out);

/* Scans the top level of a message's wire bytes for the length-delimited
 * field number `field`: its last occurrence in *last (value NULL when
 * none) and how many there are in *count. False when the top level does
 * not parse: decode the message as usual. */
bool reshard_inline_find(const uint8_t *data, size_t length, unsigned field,
                         reshard_wire_span *last, unsigned *count);

/* Copies `data` without the fields of `spans` (sorted by start, not
 * overlapping; a span with a NULL value is skipped) into `arena`. NULL
 * when memory runs out. */
uint8_t *reshard_inline_strip(const uint8_t *data, size_t length,
                              const reshard_wire_span *const *spans,
                              size_t span_count, reshard_arena *arena,
                              size_t *out_length);

/* An upper bound of a plan's copies before coalescing: the binding's
 * (token, head) values, sum of token_count * head_count, saturated. */
uint64_t reshard_binding_values(const reshard_binding *binding);

/* A binding decoded and validated once, shared by every call that sends
 * the same bytes for the same placement, page count and limits. */
typedef struct reshard_shared_binding {
  reshard_shared base;
  reshard_arena arena;
  reshard_binding binding;     /* decoded */
  reshard_bound_binding bound; /* validated */
  uint64_t values;             /* sum of token_count * head_count, saturated */
} reshard_shared_binding;

/* The cache key of a binding: its bytes, then the placement id, the page
 * count and the limits' bytes. In `arena`; NULL when memory runs out. */
char *reshard_inline_binding_key(const reshard_inline_fields *fields,
                                 const char *placement_id, reshard_arena *arena,
                                 size_t *key_length);

/* Decodes and validates the binding bytes of `fields` for `placement`,
 * under `limits`. NULL when they do not decode or validate (the caller
 * then takes the ordinary path, which reports the error) or memory runs
 * out. */
reshard_shared_binding *
reshard_shared_binding_create(const reshard_inline_fields *fields,
                              const reshard_placement *placement,
                              const reshard_limits *limits);

/* Remembers which binding keys were seen lately, so a binding is cached
 * only the second time it comes: paged readers send a new block table on
 * every call, and caching each would only evict useful entries. */
typedef struct reshard_inline_recent {
  uint64_t hashes[256];
} reshard_inline_recent;

/* True when `key` was seen lately; remembers it either way. */
bool reshard_inline_seen(reshard_inline_recent *recent, const char *key,
                         size_t key_length);

#endif
