/* Status codes and the caller-owned error record every fallible call fills. */
#ifndef RESHARD_ERROR_H
#define RESHARD_ERROR_H

#include <stddef.h>

/* The codes mirror the gRPC statuses of SPEC §3.4 so the daemon maps them
 * one to one; OK is zero so `if (status)` reads as "failed". */
typedef enum reshard_status {
  RESHARD_OK = 0,
  RESHARD_INVALID_ARGUMENT,
  RESHARD_NOT_FOUND,
  RESHARD_FAILED_PRECONDITION,
  RESHARD_RESOURCE_EXHAUSTED,
  RESHARD_UNAVAILABLE,
  RESHARD_DEADLINE_EXCEEDED,
  RESHARD_INTERNAL,
} reshard_status;

#define RESHARD_ERROR_MESSAGE_MAX 512

/* Filled by the callee when it fails and the caller passed a non-NULL
 * pointer; never heap-allocated. `message` names the field path and the
 * rule, e.g. "binding.ranges[3]: token_stride_bytes 256 is below the row
 * span 512". */
typedef struct reshard_error {
  reshard_status code;
  char message[RESHARD_ERROR_MESSAGE_MAX];
} reshard_error;

/* Records `code` and the formatted message in `err` (when non-NULL) and
 * returns `code`, so callers can write `return reshard_error_set(...)`. */
reshard_status reshard_error_set(reshard_error *err, reshard_status code,
                                 const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* Prefixes the message already in `err` with "prefix: "; used by callers
 * that know the outer field path. Returns err->code (OK when err is NULL). */
reshard_status reshard_error_prefix(reshard_error *err, const char *format, ...)
    __attribute__((format(printf, 2, 3)));

/* Clears `err` to RESHARD_OK with an empty message; NULL is allowed. */
void reshard_error_clear(reshard_error *err);

/* The canonical upper-case gRPC name of `code`, e.g. "INVALID_ARGUMENT". */
const char *reshard_status_name(reshard_status code);

#endif
