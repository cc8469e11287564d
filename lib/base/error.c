#include "reshard/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

reshard_status reshard_error_set(reshard_error *err, reshard_status code,
                                 const char *format, ...) {
  if (err != NULL) {
    va_list args;
    err->code = code;
    va_start(args, format);
    vsnprintf(err->message, sizeof err->message, format, args);
    va_end(args);
  }
  return code;
}

reshard_status reshard_error_prefix(reshard_error *err, const char *format,
                                    ...) {
  if (err == NULL) {
    return RESHARD_OK;
  }
  char prefix[RESHARD_ERROR_MESSAGE_MAX];
  char joined[2 * RESHARD_ERROR_MESSAGE_MAX + 4];
  va_list args;
  va_start(args, format);
  vsnprintf(prefix, sizeof prefix, format, args);
  va_end(args);
  snprintf(joined, sizeof joined, "%s%s%s", prefix,
           err->message[0] == '\0' ? "" : ": ", err->message);
  /* Truncate to the record's size; the field path at the front matters
   * more than the tail of a long message. */
  memcpy(err->message, joined, sizeof err->message - 1);
  err->message[sizeof err->message - 1] = '\0';
  return err->code;
}

void reshard_error_clear(reshard_error *err) {
  if (err != NULL) {
    err->code = RESHARD_OK;
    err->message[0] = '\0';
  }
}

const char *reshard_status_name(reshard_status code) {
  switch (code) {
  case RESHARD_OK:
    return "OK";
  case RESHARD_INVALID_ARGUMENT:
    return "INVALID_ARGUMENT";
  case RESHARD_NOT_FOUND:
    return "NOT_FOUND";
  case RESHARD_FAILED_PRECONDITION:
    return "FAILED_PRECONDITION";
  case RESHARD_RESOURCE_EXHAUSTED:
    return "RESOURCE_EXHAUSTED";
  case RESHARD_UNAVAILABLE:
    return "UNAVAILABLE";
  case RESHARD_DEADLINE_EXCEEDED:
    return "DEADLINE_EXCEEDED";
  case RESHARD_INTERNAL:
    return "INTERNAL";
  }
  return "UNKNOWN";
}
