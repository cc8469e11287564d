#include "identity/canonical_json.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void reshard__json_init(reshard__json *w, reshard_error *err) {
  memset(w, 0, sizeof *w);
  w->status = RESHARD_OK;
  w->err = err;
}

void reshard__json_set_sink(reshard__json *w, reshard__json_sink fn,
                            void *context) {
  assert(w->length == 0 && w->flushed == 0 && "sink set after writing");
  w->sink = fn;
  w->sink_context = context;
}

void reshard__json_free(reshard__json *w) {
  free(w->data);
  w->data = NULL;
  w->length = 0;
  w->capacity = 0;
}

static bool json_failed(const reshard__json *w) {
  return w->status != RESHARD_OK;
}

/* Makes room for `extra` more bytes plus the terminating NUL. */
static bool json_reserve(reshard__json *w, size_t extra) {
  if (json_failed(w)) {
    return false;
  }
  if (w->sink != NULL && w->length > 0 &&
      w->length + extra >= RESHARD__JSON_FLUSH) {
    w->sink(w->sink_context, w->data, w->length);
    w->flushed += w->length;
    w->length = 0;
  }
  size_t need;
  if (__builtin_add_overflow(w->length, extra, &need) ||
      __builtin_add_overflow(need, 1, &need)) {
    w->status = reshard_error_set(w->err, RESHARD_INTERNAL,
                                  "canonical JSON exceeds the address space");
    return false;
  }
  if (need <= w->capacity) {
    return true;
  }
  size_t capacity = w->capacity ? w->capacity : 256;
  while (capacity < need) {
    capacity = capacity > SIZE_MAX / 2 ? need : capacity * 2;
  }
  char *data = realloc(w->data, capacity);
  if (data == NULL) {
    w->status = reshard_error_set(w->err, RESHARD_INTERNAL,
                                  "out of memory writing canonical JSON");
    return false;
  }
  w->data = data;
  w->capacity = capacity;
  return true;
}

static void json_append(reshard__json *w, const char *bytes, size_t count) {
  if (!json_reserve(w, count)) {
    return;
  }
  memcpy(w->data + w->length, bytes, count);
  w->length += count;
  w->data[w->length] = '\0';
}

static void json_append_char(reshard__json *w, char c) {
  json_append(w, &c, 1);
}

/* Emits the separator a new value or key needs and checks that the value
 * is allowed here. Called before anything is written for the element. */
static void json_before_value(reshard__json *w) {
  if (w->depth == 0) {
    /* A top-level value: the writer holds exactly one. */
    assert(w->length + w->flushed == 0 &&
           "canonical JSON holds one top-level value");
    return;
  }
  reshard__json_level *level = &w->levels[w->depth - 1];
  if (level->is_object) {
    assert(level->expects_value && "object value written without a key");
    level->expects_value = false;
    return;
  }
  if (level->has_items) {
    json_append_char(w, ',');
  }
  level->has_items = true;
}

static void json_open(reshard__json *w, bool is_object, char bracket) {
  json_before_value(w);
  assert(w->depth < RESHARD__JSON_MAX_DEPTH && "canonical JSON nests too deep");
  w->levels[w->depth] = (reshard__json_level){.is_object = is_object};
  w->depth++;
  json_append_char(w, bracket);
}

static void json_close(reshard__json *w, bool is_object, char bracket) {
  assert(w->depth > 0 && "close without open");
  assert(w->levels[w->depth - 1].is_object == is_object && "mismatched close");
  assert(!w->levels[w->depth - 1].expects_value && "key without a value");
  (void)is_object;
  w->depth--;
  json_append_char(w, bracket);
}

void reshard__json_object_begin(reshard__json *w) {
  json_open(w, true, '{');
}

void reshard__json_object_end(reshard__json *w) {
  json_close(w, true, '}');
}

void reshard__json_array_begin(reshard__json *w) {
  json_open(w, false, '[');
}

void reshard__json_array_end(reshard__json *w) {
  json_close(w, false, ']');
}

#ifndef NDEBUG
static bool json_key_is_plain(const char *key) {
  for (const char *p = key; *p != '\0'; p++) {
    if (*p < 0x20 || *p > 0x7e || *p == '"' || *p == '\\') {
      return false;
    }
  }
  return true;
}
#endif

void reshard__json_key(reshard__json *w, const char *key) {
  assert(w->depth > 0 && w->levels[w->depth - 1].is_object &&
         "key outside an object");
  reshard__json_level *level = &w->levels[w->depth - 1];
  assert(!level->expects_value && "two keys in a row");
  /* Python's sort_keys compares str code points; the keys are ASCII, so a
   * byte comparison gives the same order. */
  assert((level->last_key == NULL || strcmp(level->last_key, key) < 0) &&
         "canonical JSON keys must be written in ascending order");
  assert(json_key_is_plain(key) && "keys are plain ASCII literals");
  if (level->has_items) {
    json_append_char(w, ',');
  }
  level->has_items = true;
  level->last_key = key;
  level->expects_value = true;
  json_append_char(w, '"');
  json_append(w, key, strlen(key));
  json_append(w, "\":", 2);
}

void reshard__json_uint(reshard__json *w, uint64_t value) {
  char digits[20]; /* UINT64_MAX has 20 decimal digits */
  size_t n = sizeof digits;
  do {
    digits[--n] = (char)('0' + value % 10);
    value /= 10;
  } while (value != 0);
  json_before_value(w);
  json_append(w, digits + n, sizeof digits - n);
}

/* Decodes one UTF-8 sequence at `s` with the rules of Python's strict
 * decoder (RFC 3629): no overlong forms, no surrogates, nothing above
 * U+10FFFF. Returns its length (1..4) and stores the code point, or 0 when
 * the bytes are not valid UTF-8. The NUL terminator ends any truncated
 * sequence because it is not a continuation byte. */
static size_t utf8_decode(const unsigned char *s, uint32_t *code_point) {
  unsigned char b0 = s[0];
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  size_t length;
  uint32_t value;
  unsigned char low = 0x80, high = 0xbf; /* allowed range of the 2nd byte */
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    length = 2;
    value = b0 & 0x1fu;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    length = 3;
    value = b0 & 0x0fu;
    if (b0 == 0xe0) {
      low = 0xa0; /* overlong below U+0800 */
    } else if (b0 == 0xed) {
      high = 0x9f; /* U+D800..U+DFFF are surrogates */
    }
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    length = 4;
    value = b0 & 0x07u;
    if (b0 == 0xf0) {
      low = 0x90; /* overlong below U+10000 */
    } else if (b0 == 0xf4) {
      high = 0x8f; /* above U+10FFFF */
    }
  } else {
    return 0; /* continuation byte, overlong lead C0/C1, or F5..FF */
  }
  for (size_t i = 1; i < length; i++) {
    unsigned char b = s[i];
    if (b < (i == 1 ? low : 0x80) || b > (i == 1 ? high : 0xbf)) {
      return 0;
    }
    value = (value << 6) | (b & 0x3fu);
  }
  *code_point = value;
  return length;
}

static void json_append_u_escape(reshard__json *w, uint32_t unit) {
  /* Lower-case hex, as Python writes it; jansson would write upper-case. */
  static const char hex[] = "0123456789abcdef";
  char text[6] = {'\\',
                  'u',
                  hex[(unit >> 12) & 0xf],
                  hex[(unit >> 8) & 0xf],
                  hex[(unit >> 4) & 0xf],
                  hex[unit & 0xf]};
  json_append(w, text, sizeof text);
}

void reshard__json_string(reshard__json *w, const char *value,
                          const char *path_format, ...) {
  /* The structure is tracked even after a failure so the debug assertions
   * keep describing the caller's shape, not the error path. */
  json_before_value(w);
  if (json_failed(w)) {
    return;
  }
  /* Validate first: a code point is escaped only once it is known whole. */
  const unsigned char *s = (const unsigned char *)value;
  for (size_t i = 0; s[i] != '\0';) {
    uint32_t code_point;
    size_t n = utf8_decode(s + i, &code_point);
    if (n == 0) {
      char path[RESHARD_ERROR_MESSAGE_MAX];
      va_list args;
      va_start(args, path_format);
      vsnprintf(path, sizeof path, path_format, args);
      va_end(args);
      w->status = reshard_error_set(w->err, RESHARD_INVALID_ARGUMENT,
                                    "%s: not valid UTF-8 at byte %zu", path, i);
      return;
    }
    i += n;
  }

  json_append_char(w, '"');
  size_t run = 0; /* start of the pending run of bytes copied verbatim */
  size_t i = 0;
  while (s[i] != '\0' && !json_failed(w)) {
    unsigned char c = s[i];
    if (c >= 0x20 && c <= 0x7e && c != '"' && c != '\\') {
      i++;
      continue;
    }
    json_append(w, value + run, i - run);
    uint32_t code_point;
    size_t n = utf8_decode(s + i, &code_point);
    switch (code_point) {
    case '"':
      json_append(w, "\\\"", 2);
      break;
    case '\\':
      json_append(w, "\\\\", 2);
      break;
    case '\n':
      json_append(w, "\\n", 2);
      break;
    case '\r':
      json_append(w, "\\r", 2);
      break;
    case '\t':
      json_append(w, "\\t", 2);
      break;
    case '\b':
      json_append(w, "\\b", 2);
      break;
    case '\f':
      json_append(w, "\\f", 2);
      break;
    default:
      if (code_point > 0xffff) {
        /* JSON's \u holds one UTF-16 unit, so astral characters become a
         * surrogate pair, exactly as ensure_ascii does. */
        uint32_t offset = code_point - 0x10000;
        json_append_u_escape(w, 0xd800 | (offset >> 10));
        json_append_u_escape(w, 0xdc00 | (offset & 0x3ff));
      } else {
        json_append_u_escape(w, code_point);
      }
      break;
    }
    i += n;
    run = i;
  }
  json_append(w, value + run, i - run);
  json_append_char(w, '"');
}

void reshard__json_raw(reshard__json *w, const char *json, size_t length) {
  json_before_value(w);
  json_append(w, json, length);
}

void reshard__json_key_uint(reshard__json *w, const char *key, uint64_t value) {
  reshard__json_key(w, key);
  reshard__json_uint(w, value);
}

void reshard__json_key_literal(reshard__json *w, const char *key,
                               const char *ascii_value) {
  reshard__json_key(w, key);
  /* Literals are ASCII, so they cannot fail validation; the path is unused. */
  reshard__json_string(w, ascii_value, "%s", key);
}

void reshard__json_fail(reshard__json *w, reshard_status code,
                        const char *format, ...) {
  assert(code != RESHARD_OK);
  if (json_failed(w)) {
    return;
  }
  char message[RESHARD_ERROR_MESSAGE_MAX];
  va_list args;
  va_start(args, format);
  vsnprintf(message, sizeof message, format, args);
  va_end(args);
  w->status = reshard_error_set(w->err, code, "%s", message);
}

reshard_status reshard__json_finish(reshard__json *w, const char **text,
                                    size_t *length) {
  if (json_failed(w)) {
    return w->status;
  }
  assert(w->depth == 0 && "unclosed object or array");
  /* An empty writer still yields a valid (empty) C string. */
  if (w->data == NULL && !json_reserve(w, 0)) {
    return w->status;
  }
  w->data[w->length] = '\0';
  if (text != NULL) {
    *text = w->data;
  }
  if (length != NULL) {
    *length = w->length;
  }
  return RESHARD_OK;
}
