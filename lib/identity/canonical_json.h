/* Internal: a minimal writer of canonical JSON, the text hashed by the
 * identities of SPEC §1.6 (docs/identity.md). Not a public header.
 *
 * The output is byte-identical to Python's
 *   json.dumps(value, ensure_ascii=True, sort_keys=True,
 *              separators=(",", ":"))
 * for the values the identities use: objects, arrays, unsigned integers and
 * strings. A general JSON library cannot give that guarantee: jansson keeps
 * integers as signed 64-bit (json_int_t), so a uint64 above 2^63 cannot be
 * represented; it writes \u escapes with upper-case hex where Python
 * writes lower-case; and its ASCII mode leaves DEL (0x7f) unescaped. Any of
 * these would make the digests differ from the reference.
 *
 * Keys are never sorted by the writer: every caller knows its shape and
 * emits keys in ascending byte order, which debug builds assert. That keeps
 * the writer free of per-object buffering and makes the order visible in
 * the code that defines each shape.
 *
 * Errors are sticky: once a call fails (invalid UTF-8 in a string, or out
 * of memory), every later call does nothing and reshard__json_finish
 * reports the first failure. Callers therefore write a whole shape and
 * check once at the end. */
#ifndef RESHARD_CANONICAL_JSON_H
#define RESHARD_CANONICAL_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "reshard/error.h"

/* Deeper than any identity shape (the placement's participant ranks sit at
 * depth 5). Exceeding it is a programmer error and asserts. */
#define RESHARD__JSON_MAX_DEPTH 16

typedef struct reshard__json_level {
  bool is_object;
  bool has_items;
  bool expects_value;   /* a key was written and its value is pending */
  const char *last_key; /* for the ordering assertion; NULL before the first */
} reshard__json_level;

/* Text goes to a sink, when one is set, in pieces of about this size. */
#define RESHARD__JSON_FLUSH (64 * 1024)

/* Receives written text in order (see reshard__json_set_sink). */
typedef void (*reshard__json_sink)(void *context, const char *bytes,
                                   size_t length);

/* Embed in the caller (usually on the stack); initialise with
 * reshard__json_init and release with reshard__json_free on every path. */
typedef struct reshard__json {
  char *data; /* NUL-terminated once anything was written; owned */
  size_t length;
  size_t capacity;
  reshard_status status; /* first failure, RESHARD_OK while healthy */
  reshard_error *err;    /* receives the first failure; may be NULL */
  size_t depth;
  reshard__json_level levels[RESHARD__JSON_MAX_DEPTH];
  reshard__json_sink sink; /* NULL: the whole text stays in `data` */
  void *sink_context;
  size_t flushed; /* bytes handed to the sink */
} reshard__json;

/* Prepares an empty writer; allocates nothing. `err` (may be NULL) is filled
 * with the first failure and must outlive the writer. */
void reshard__json_init(reshard__json *w, reshard_error *err);

/* Streams the text to `fn` as it is written instead of keeping it whole:
 * whenever the buffer would pass RESHARD__JSON_FLUSH bytes, what it holds
 * is handed over, so the writer's memory stays bounded by that plus one
 * value, whatever the shape's size (identities hash a placement this way).
 * reshard__json_finish then returns only the tail not yet handed over.
 * Set before anything is written. */
void reshard__json_set_sink(reshard__json *w, reshard__json_sink fn,
                            void *context);

/* Frees the buffer. Safe on a writer that failed or wrote nothing. */
void reshard__json_free(reshard__json *w);

/* Structure. Inside an object each value must follow reshard__json_key;
 * begin/end must pair up (asserted). */
void reshard__json_object_begin(reshard__json *w);
void reshard__json_object_end(reshard__json *w);
void reshard__json_array_begin(reshard__json *w);
void reshard__json_array_end(reshard__json *w);

/* Writes an object key. `key` must be printable ASCII without '"' or '\\'
 * (keys are the shape's literals) and greater, bytewise, than the previous
 * key of the same object; both are asserted in debug builds. The pointer
 * must stay valid until the object ends. */
void reshard__json_key(reshard__json *w, const char *key);

/* Writes `value` in plain decimal; the full uint64 range. */
void reshard__json_uint(reshard__json *w, uint64_t value);

/* Writes the NUL-terminated UTF-8 `value` as an escaped JSON string (see
 * reshard__json_escape). When `value` is not valid UTF-8 the writer fails
 * with INVALID_ARGUMENT and the message "<path>: not valid UTF-8 at byte N",
 * where <path> is formatted from `path_format` (only on failure). */
void reshard__json_string(reshard__json *w, const char *value,
                          const char *path_format, ...)
    __attribute__((format(printf, 3, 4)));

/* Writes `length` bytes of already canonical JSON text as one value, e.g. a
 * descriptor rendered once and repeated in every placement part. */
void reshard__json_raw(reshard__json *w, const char *json, size_t length);

/* Convenience: key followed by a value. */
void reshard__json_key_uint(reshard__json *w, const char *key, uint64_t value);
void reshard__json_key_literal(reshard__json *w, const char *key,
                               const char *ascii_value);

/* Records a failure found by the caller (e.g. an enum value with no name)
 * unless one is already recorded; later calls then do nothing. */
void reshard__json_fail(reshard__json *w, reshard_status code,
                        const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Returns the first failure (RESHARD_OK when none) and asserts that every
 * object and array was closed. On success `*text` (NUL-terminated, owned by
 * the writer) and `*length` describe the output; either may be NULL. */
reshard_status reshard__json_finish(reshard__json *w, const char **text,
                                    size_t *length);

/* The §1.6 shapes, defined in identity.c and declared here so tests can pin
 * the exact canonical text, not only its digest. Each appends one complete
 * value to `w`; `path` prefixes the field paths of error messages (e.g.
 * "manifest"). Inputs must be normalized (see identity.h). */
typedef struct reshard_descriptor reshard_descriptor;
typedef struct reshard_layout reshard_layout;
typedef struct reshard_manifest reshard_manifest;
typedef struct reshard_placement reshard_placement;
void reshard__json_descriptor(reshard__json *w,
                              const reshard_descriptor *descriptor,
                              const char *path);
void reshard__json_layout(reshard__json *w, const reshard_layout *layout,
                          const char *path);
void reshard__json_model_domain(reshard__json *w,
                                const reshard_manifest *manifest,
                                const char *path);
void reshard__json_topology(reshard__json *w,
                            const reshard_placement *placement,
                            const char *path);
/* `topology_id` is the "sha256:..." id of the placement's topology. */
void reshard__json_placement(reshard__json *w,
                             const reshard_placement *placement,
                             const char *topology_id, const char *path);

/* The memory pool shape of SPEC §1.5a (identity.h: reshard_memory_id). */
typedef struct reshard_pool reshard_pool;
void reshard__json_memory_pool(reshard__json *w, const reshard_pool *pool,
                               const char *placement_id, const char *path);
#endif
