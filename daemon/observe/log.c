#include "observe/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static reshard_log_level log_level = RESHARD_LOG_INFO;
static int log_fd = 2;

void reshard_log_set_level(reshard_log_level level) {
  log_level = level;
}

reshard_log_level reshard_log_get_level(void) {
  return log_level;
}

bool reshard_log_enabled(reshard_log_level level) {
  return level >= log_level;
}

void reshard_log_set_fd(int fd) {
  log_fd = fd;
}

bool reshard_log_level_parse(const char *text, reshard_log_level *out) {
  static const struct {
    const char *name;
    reshard_log_level level;
  } names[] = {
      {"debug", RESHARD_LOG_DEBUG}, {"info", RESHARD_LOG_INFO},
      {"warn", RESHARD_LOG_WARN},   {"warning", RESHARD_LOG_WARN},
      {"error", RESHARD_LOG_ERROR},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    if (strcasecmp(text, names[i].name) == 0) {
      *out = names[i].level;
      return true;
    }
  }
  return false;
}

const char *reshard_log_level_name(reshard_log_level level) {
  switch (level) {
  case RESHARD_LOG_DEBUG:
    return "debug";
  case RESHARD_LOG_INFO:
    return "info";
  case RESHARD_LOG_WARN:
    return "warn";
  case RESHARD_LOG_ERROR:
    return "error";
  }
  return "info";
}

static bool needs_quotes(const char *value, size_t length) {
  if (length == 0) {
    return true;
  }
  for (size_t i = 0; i < length; i++) {
    unsigned char c = (unsigned char)value[i];
    if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f) {
      return true;
    }
  }
  return false;
}

size_t reshard_log_format_value(char *out, size_t size, const char *value,
                                size_t length) {
  size_t needed = 0;
  /* Writes one byte when it fits, counting it either way. */
#define PUT(ch)                                                                \
  do {                                                                         \
    if (size > 0 && needed < size - 1) {                                       \
      out[needed] = (ch);                                                      \
    }                                                                          \
    needed++;                                                                  \
  } while (0)
  if (!needs_quotes(value, length)) {
    for (size_t i = 0; i < length; i++) {
      PUT(value[i]);
    }
  } else {
    static const char hex[] = "0123456789abcdef";
    PUT('"');
    for (size_t i = 0; i < length; i++) {
      unsigned char c = (unsigned char)value[i];
      switch (c) {
      case '"':
        PUT('\\');
        PUT('"');
        break;
      case '\\':
        PUT('\\');
        PUT('\\');
        break;
      case '\n':
        PUT('\\');
        PUT('n');
        break;
      case '\t':
        PUT('\\');
        PUT('t');
        break;
      case '\r':
        PUT('\\');
        PUT('r');
        break;
      default:
        if (c < ' ' || c == 0x7f) {
          PUT('\\');
          PUT('x');
          PUT(hex[c >> 4]);
          PUT(hex[c & 15]);
        } else {
          PUT((char)c);
        }
      }
    }
    PUT('"');
  }
#undef PUT
  if (size > 0) {
    out[needed < size ? needed : size - 1] = '\0';
  }
  return needed;
}

/* Reserve room for the final "\n". */
#define LINE_ROOM (RESHARD_LOG_LINE_MAX - 2)

static void append_raw(reshard_log_line *line, const char *text,
                       size_t length) {
  if (line->truncated) {
    return;
  }
  if (length > LINE_ROOM - line->length) {
    line->truncated = true;
    return;
  }
  memcpy(line->text + line->length, text, length);
  line->length += length;
}

static void append_key(reshard_log_line *line, const char *key) {
  append_raw(line, " ", 1);
  append_raw(line, key, strlen(key));
  append_raw(line, "=", 1);
}

void reshard_log_strn(reshard_log_line *line, const char *key,
                      const char *value, size_t length) {
  if (value == NULL) {
    value = "";
    length = 0;
  }
  size_t mark = line->length;
  append_key(line, key);
  if (line->truncated) {
    line->length = mark;
    return;
  }
  size_t room = LINE_ROOM - line->length + 1;
  size_t needed =
      reshard_log_format_value(line->text + line->length, room, value, length);
  if (needed >= room) {
    /* Drop the whole field rather than leave half a quoted value. */
    line->length = mark;
    line->truncated = true;
    return;
  }
  line->length += needed;
}

void reshard_log_str(reshard_log_line *line, const char *key,
                     const char *value) {
  reshard_log_strn(line, key, value, value ? strlen(value) : 0);
}

void reshard_log_u64(reshard_log_line *line, const char *key, uint64_t value) {
  char text[24];
  int n = snprintf(text, sizeof text, "%" PRIu64, value);
  append_key(line, key);
  append_raw(line, text, (size_t)n);
}

void reshard_log_i64(reshard_log_line *line, const char *key, int64_t value) {
  char text[24];
  int n = snprintf(text, sizeof text, "%" PRId64, value);
  append_key(line, key);
  append_raw(line, text, (size_t)n);
}

void reshard_log_bool(reshard_log_line *line, const char *key, bool value) {
  append_key(line, key);
  append_raw(line, value ? "true" : "false", value ? 4 : 5);
}

bool reshard_log_begin(reshard_log_line *line, reshard_log_level level,
                       const char *msg) {
  if (!reshard_log_enabled(level)) {
    return false;
  }
  struct timespec now;
  struct tm utc;
  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &utc);
  int n = snprintf(line->text, sizeof line->text,
                   "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s",
                   utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday, utc.tm_hour,
                   utc.tm_min, utc.tm_sec, now.tv_nsec / 1000000,
                   reshard_log_level_name(level));
  line->length = (size_t)n;
  line->truncated = false;
  reshard_log_str(line, "msg", msg);
  return true;
}

void reshard_log_end(reshard_log_line *line) {
  if (line->truncated) {
    static const char mark[] = " truncated=true";
    size_t room = RESHARD_LOG_LINE_MAX - 1 - line->length;
    if (room >= sizeof mark - 1) {
      memcpy(line->text + line->length, mark, sizeof mark - 1);
      line->length += sizeof mark - 1;
    }
  }
  line->text[line->length++] = '\n';
  const char *p = line->text;
  size_t left = line->length;
  while (left > 0) {
    ssize_t written = write(log_fd, p, left);
    if (written < 0) {
      if (errno == EINTR) {
        continue;
      }
      return; /* nowhere left to report it */
    }
    p += written;
    left -= (size_t)written;
  }
}

void reshard_log_msg(reshard_log_level level, const char *msg,
                     const char *error) {
  reshard_log_line line;
  if (reshard_log_begin(&line, level, msg)) {
    if (error != NULL) {
      reshard_log_str(&line, "error", error);
    }
    reshard_log_end(&line);
  }
}
