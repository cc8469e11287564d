/* Structured logging: one logfmt line per event on stderr, e.g.
 *   ts=2024-05-01T12:00:00.123Z level=info msg=listening
 * address=127.0.0.1:50051 Values are quoted when they are empty or hold spaces,
 * '=', quotes or control characters. Each line is written with a single
 * write(2), so lines from different threads never interleave. */
#ifndef RESHARD_LOG_H
#define RESHARD_LOG_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum reshard_log_level {
  RESHARD_LOG_DEBUG = 0,
  RESHARD_LOG_INFO = 1,
  RESHARD_LOG_WARN = 2,
  RESHARD_LOG_ERROR = 3,
} reshard_log_level;

#define RESHARD_LOG_LINE_MAX 2048

/* A line being built on the caller's stack. */
typedef struct reshard_log_line {
  size_t length;
  bool truncated;
  char text[RESHARD_LOG_LINE_MAX];
} reshard_log_line;

/* Sets the lowest level that is written (default: info). Call before any
 * thread logs; the level is read without synchronisation afterwards. */
void reshard_log_set_level(reshard_log_level level);
reshard_log_level reshard_log_get_level(void);
bool reshard_log_enabled(reshard_log_level level);

/* Parses "debug", "info", "warn" (or "warning") and "error". Returns false
 * for anything else and leaves *out untouched. */
bool reshard_log_level_parse(const char *text, reshard_log_level *out);
const char *reshard_log_level_name(reshard_log_level level);

/* Redirects output to `fd` (default 2) for tests. */
void reshard_log_set_fd(int fd);

/* Starts a line with ts, level and msg. Returns false, building nothing,
 * when `level` is below the configured level; callers skip the fields then. */
bool reshard_log_begin(reshard_log_line *line, reshard_log_level level,
                       const char *msg);

/* Append one key=value field; `key` must be a bare word. */
void reshard_log_str(reshard_log_line *line, const char *key,
                     const char *value);
void reshard_log_strn(reshard_log_line *line, const char *key,
                      const char *value, size_t length);
void reshard_log_u64(reshard_log_line *line, const char *key, uint64_t value);
void reshard_log_i64(reshard_log_line *line, const char *key, int64_t value);
void reshard_log_bool(reshard_log_line *line, const char *key, bool value);

/* Terminates the line with '\n' and writes it. */
void reshard_log_end(reshard_log_line *line);

/* One-field convenience: `msg` plus an optional "error" field. */
void reshard_log_msg(reshard_log_level level, const char *msg,
                     const char *error);

/* Appends `value` to `out` (capacity `size`) as a logfmt value, quoting and
 * escaping it when needed. Returns the number of bytes the full value
 * needs; writes at most size - 1 bytes plus a NUL. Exposed for tests. */
size_t reshard_log_format_value(char *out, size_t size, const char *value,
                                size_t length);

#endif
