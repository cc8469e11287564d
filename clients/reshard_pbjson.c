/* reshard_pbjson: descriptor-driven JSON <-> protobuf-c conversion. */
#include "reshard_pbjson.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UINT32_WRAPPER "google.protobuf.UInt32Value"

/* A JSON path under construction, e.g. "binding.ranges[3]". */
typedef struct path {
  char text[512];
  size_t len;
} path;

static size_t path_push_key(path *p, const char *key) {
  size_t saved = p->len;
  int n = snprintf(p->text + p->len, sizeof p->text - p->len, "%s%s",
                   p->len > 0 ? "." : "", key);
  if (n > 0)
    p->len += (size_t)n < sizeof p->text - p->len ? (size_t)n
                                                  : sizeof p->text - p->len - 1;
  return saved;
}

static size_t path_push_index(path *p, size_t index) {
  size_t saved = p->len;
  int n = snprintf(p->text + p->len, sizeof p->text - p->len, "[%zu]", index);
  if (n > 0)
    p->len += (size_t)n < sizeof p->text - p->len ? (size_t)n
                                                  : sizeof p->text - p->len - 1;
  return saved;
}

static void path_pop(path *p, size_t saved) {
  p->len = saved;
  p->text[saved] = '\0';
}

typedef struct ctx {
  path path;
  char *err;
  size_t errcap;
} ctx;

static bool fail(ctx *c, const char *fmt, ...) {
  int n = snprintf(c->err, c->errcap,
                   "%s: ", c->path.len > 0 ? c->path.text : "(document)");
  if (n < 0 || (size_t)n >= c->errcap)
    return false;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err + n, c->errcap - (size_t)n, fmt, ap);
  va_end(ap);
  return false;
}

static const char *json_kind(const json_t *j) {
  switch (json_typeof(j)) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  case JSON_REAL:
    return "a real number";
  case JSON_TRUE:
  case JSON_FALSE:
    return "a boolean";
  case JSON_NULL:
    return "null";
  }
  return "an unknown value";
}

/* Reads an unsigned integer no larger than `max`. */
static bool read_unsigned(ctx *c, const json_t *j, uint64_t max,
                          uint64_t *out) {
  if (json_is_integer(j)) {
    json_int_t v = json_integer_value(j);
    if (v < 0)
      return fail(c, "expected an unsigned integer, got %" JSON_INTEGER_FORMAT,
                  v);
    if ((uint64_t)v > max)
      return fail(c, "%" JSON_INTEGER_FORMAT " exceeds the maximum %" PRIu64, v,
                  max);
    *out = (uint64_t)v;
    return true;
  }
  if (json_is_string(j)) {
    const char *s = json_string_value(j);
    if (*s == '\0' || strspn(s, "0123456789") != strlen(s))
      return fail(c, "expected an unsigned integer, got the string \"%s\"", s);
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno != 0 || v > max)
      return fail(c, "%s exceeds the maximum %" PRIu64, s, max);
    *out = v;
    return true;
  }
  return fail(c, "expected an unsigned integer, got %s", json_kind(j));
}

static bool read_signed(ctx *c, const json_t *j, int64_t min, int64_t max,
                        int64_t *out) {
  if (!json_is_integer(j))
    return fail(c, "expected an integer, got %s", json_kind(j));
  json_int_t v = json_integer_value(j);
  if (v < min || v > max)
    return fail(c, "%" JSON_INTEGER_FORMAT " is out of range", v);
  *out = v;
  return true;
}

static bool read_enum(ctx *c, const json_t *j, const ProtobufCEnumDescriptor *e,
                      int *out) {
  if (json_is_string(j)) {
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value_by_name(e, json_string_value(j));
    if (v == NULL) {
      char names[256] = "";
      size_t used = 0;
      for (unsigned i = 0; i < e->n_values && used < sizeof names; i++) {
        int n = snprintf(names + used, sizeof names - used, "%s%s",
                         i > 0 ? ", " : "", e->values[i].name);
        if (n < 0)
          break;
        used += (size_t)n;
      }
      return fail(c, "\"%s\" is not a %s (one of %s)", json_string_value(j),
                  e->name, names);
    }
    *out = v->value;
    return true;
  }
  if (json_is_integer(j)) {
    json_int_t n = json_integer_value(j);
    if (n < INT32_MIN || n > INT32_MAX ||
        protobuf_c_enum_descriptor_get_value(e, (int)n) == NULL)
      return fail(c, "%" JSON_INTEGER_FORMAT " is not a %s value", n, e->name);
    *out = (int)n;
    return true;
  }
  return fail(c, "expected a %s name, got %s", e->name, json_kind(j));
}

static ProtobufCMessage *build_message(ctx *c, const json_t *j,
                                       const ProtobufCMessageDescriptor *desc);

/* Size of one element of a repeated field's array. */
static size_t element_size(ProtobufCType type) {
  switch (type) {
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return 4;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    return 8;
  case PROTOBUF_C_TYPE_FLOAT:
    return sizeof(float);
  case PROTOBUF_C_TYPE_DOUBLE:
    return sizeof(double);
  case PROTOBUF_C_TYPE_BOOL:
    return sizeof(protobuf_c_boolean);
  case PROTOBUF_C_TYPE_ENUM:
    return sizeof(int);
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_MESSAGE:
    return sizeof(void *);
  case PROTOBUF_C_TYPE_BYTES:
    return sizeof(ProtobufCBinaryData);
  }
  return 0;
}

/* Reads one value of field `f` from `j` into the storage at `dst`. Strings
 * and messages are heap-allocated and stored as pointers. */
static bool read_value(ctx *c, const json_t *j,
                       const ProtobufCFieldDescriptor *f, void *dst) {
  uint64_t u;
  int64_t s;
  switch (f->type) {
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    if (!read_unsigned(c, j, UINT32_MAX, &u))
      return false;
    *(uint32_t *)dst = (uint32_t)u;
    return true;
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    if (!read_unsigned(c, j, UINT64_MAX, &u))
      return false;
    *(uint64_t *)dst = u;
    return true;
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    if (!read_signed(c, j, INT32_MIN, INT32_MAX, &s))
      return false;
    *(int32_t *)dst = (int32_t)s;
    return true;
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    if (!read_signed(c, j, INT64_MIN, INT64_MAX, &s))
      return false;
    *(int64_t *)dst = s;
    return true;
  case PROTOBUF_C_TYPE_FLOAT:
  case PROTOBUF_C_TYPE_DOUBLE:
    if (!json_is_number(j))
      return fail(c, "expected a number, got %s", json_kind(j));
    if (f->type == PROTOBUF_C_TYPE_FLOAT)
      *(float *)dst = (float)json_number_value(j);
    else
      *(double *)dst = json_number_value(j);
    return true;
  case PROTOBUF_C_TYPE_BOOL:
    if (!json_is_boolean(j))
      return fail(c, "expected true or false, got %s", json_kind(j));
    *(protobuf_c_boolean *)dst = json_is_true(j);
    return true;
  case PROTOBUF_C_TYPE_ENUM:
    return read_enum(c, j, f->descriptor, (int *)dst);
  case PROTOBUF_C_TYPE_STRING: {
    if (!json_is_string(j))
      return fail(c, "expected a string, got %s", json_kind(j));
    char *copy = strdup(json_string_value(j));
    if (copy == NULL)
      return fail(c, "out of memory");
    *(char **)dst = copy;
    return true;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    ProtobufCMessage *m = build_message(c, j, f->descriptor);
    if (m == NULL)
      return false;
    *(ProtobufCMessage **)dst = m;
    return true;
  }
  case PROTOBUF_C_TYPE_BYTES:
    return fail(c, "bytes fields are not supported in JSON input");
  }
  return fail(c, "unsupported field type");
}

static bool read_field(ctx *c, ProtobufCMessage *msg,
                       const ProtobufCMessageDescriptor *desc,
                       const ProtobufCFieldDescriptor *f, const json_t *j) {
  char *base = (char *)msg;
  if (json_is_null(j))
    return true;
  if (f->label == PROTOBUF_C_LABEL_REPEATED) {
    if (!json_is_array(j))
      return fail(c, "expected an array, got %s", json_kind(j));
    size_t n = json_array_size(j);
    if (n == 0)
      return true;
    size_t esize = element_size(f->type);
    void *arr = calloc(n, esize);
    if (arr == NULL)
      return fail(c, "out of memory");
    size_t *count = (size_t *)(base + f->quantifier_offset);
    *(void **)(base + f->offset) = arr;
    *count = 0;
    for (size_t i = 0; i < n; i++) {
      size_t saved = path_push_index(&c->path, i);
      const json_t *item = json_array_get(j, i);
      if (json_is_null(item))
        return fail(c, "null is not allowed in an array");
      if (!read_value(c, item, f, (char *)arr + i * esize))
        return false;
      (*count)++;
      path_pop(&c->path, saved);
    }
    return true;
  }
  if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
    uint32_t *which = (uint32_t *)(base + f->quantifier_offset);
    if (*which != 0 && *which != f->id) {
      const ProtobufCFieldDescriptor *other =
          protobuf_c_message_descriptor_get_field(desc, *which);
      return fail(c, "conflicts with \"%s\": only one of them may be set",
                  other != NULL ? other->name : "another field");
    }
    if (!read_value(c, j, f, base + f->offset))
      return false;
    *which = f->id;
    return true;
  }
  if (f->type == PROTOBUF_C_TYPE_MESSAGE &&
      strcmp(((const ProtobufCMessageDescriptor *)f->descriptor)->name,
             UINT32_WRAPPER) == 0 &&
      !json_is_object(j)) {
    /* Proto3 JSON mapping: a wrapper is written as its plain value. */
    uint64_t v;
    if (!read_unsigned(c, j, UINT32_MAX, &v))
      return false;
    const ProtobufCMessageDescriptor *wd = f->descriptor;
    ProtobufCMessage *w = malloc(wd->sizeof_message);
    if (w == NULL)
      return fail(c, "out of memory");
    wd->message_init(w);
    /* UInt32Value's only field, "value", is field 1. */
    const ProtobufCFieldDescriptor *vf =
        protobuf_c_message_descriptor_get_field(wd, 1);
    *(uint32_t *)((char *)w + vf->offset) = (uint32_t)v;
    *(ProtobufCMessage **)(base + f->offset) = w;
    return true;
  }
  if (f->type == PROTOBUF_C_TYPE_STRING || f->type == PROTOBUF_C_TYPE_MESSAGE) {
    /* Store into a temporary so a failure leaves the default in place. */
    void *tmp = NULL;
    if (!read_value(c, j, f, &tmp))
      return false;
    *(void **)(base + f->offset) = tmp;
    return true;
  }
  if (!read_value(c, j, f, base + f->offset))
    return false;
  if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0)
    *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
  return true;
}

static ProtobufCMessage *build_message(ctx *c, const json_t *j,
                                       const ProtobufCMessageDescriptor *desc) {
  if (!json_is_object(j)) {
    fail(c, "expected an object (%s), got %s", desc->name, json_kind(j));
    return NULL;
  }
  ProtobufCMessage *msg = malloc(desc->sizeof_message);
  if (msg == NULL) {
    fail(c, "out of memory");
    return NULL;
  }
  desc->message_init(msg);
  const char *key;
  json_t *value;
  /* Walk the keys in sorted order so the first reported error does not
   * depend on the hash table's order. */
  size_t nkeys = json_object_size(j);
  const char **keys = calloc(nkeys > 0 ? nkeys : 1, sizeof *keys);
  if (keys == NULL) {
    fail(c, "out of memory");
    protobuf_c_message_free_unpacked(msg, NULL);
    return NULL;
  }
  size_t k = 0;
  json_object_foreach((json_t *)j, key, value) {
    keys[k++] = key;
  }
  for (size_t a = 1; a < nkeys; a++) {
    const char *t = keys[a];
    size_t b = a;
    for (; b > 0 && strcmp(keys[b - 1], t) > 0; b--)
      keys[b] = keys[b - 1];
    keys[b] = t;
  }
  for (k = 0; k < nkeys; k++) {
    size_t saved = path_push_key(&c->path, keys[k]);
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field_by_name(desc, keys[k]);
    bool ok;
    if (f == NULL)
      ok = fail(c, "unknown field of %s", desc->name);
    else
      ok = read_field(c, msg, desc, f, json_object_get(j, keys[k]));
    if (!ok) {
      free(keys);
      protobuf_c_message_free_unpacked(msg, NULL);
      return NULL;
    }
    path_pop(&c->path, saved);
  }
  free(keys);
  return msg;
}

ProtobufCMessage *
reshard_pbjson_to_message(const json_t *json,
                          const ProtobufCMessageDescriptor *desc, char *err,
                          size_t errcap) {
  ctx c;
  memset(&c, 0, sizeof c);
  c.err = err;
  c.errcap = errcap;
  if (errcap > 0)
    err[0] = '\0';
  return build_message(&c, json, desc);
}

/* ---- message to JSON ---- */

static json_t *unsigned_json(uint64_t v) {
  if (v > (uint64_t)INT64_MAX) {
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRIu64, v);
    return json_string(buf);
  }
  return json_integer((json_int_t)v);
}

static json_t *value_json(const ProtobufCFieldDescriptor *f, const void *src) {
  switch (f->type) {
  case PROTOBUF_C_TYPE_UINT32:
  case PROTOBUF_C_TYPE_FIXED32:
    return json_integer(*(const uint32_t *)src);
  case PROTOBUF_C_TYPE_UINT64:
  case PROTOBUF_C_TYPE_FIXED64:
    return unsigned_json(*(const uint64_t *)src);
  case PROTOBUF_C_TYPE_INT32:
  case PROTOBUF_C_TYPE_SINT32:
  case PROTOBUF_C_TYPE_SFIXED32:
    return json_integer(*(const int32_t *)src);
  case PROTOBUF_C_TYPE_INT64:
  case PROTOBUF_C_TYPE_SINT64:
  case PROTOBUF_C_TYPE_SFIXED64:
    return json_integer(*(const int64_t *)src);
  case PROTOBUF_C_TYPE_FLOAT:
    return json_real(*(const float *)src);
  case PROTOBUF_C_TYPE_DOUBLE:
    return json_real(*(const double *)src);
  case PROTOBUF_C_TYPE_BOOL:
    return json_boolean(*(const protobuf_c_boolean *)src);
  case PROTOBUF_C_TYPE_ENUM: {
    int v = *(const int *)src;
    const ProtobufCEnumValue *ev =
        protobuf_c_enum_descriptor_get_value(f->descriptor, v);
    return ev != NULL ? json_string(ev->name) : json_integer(v);
  }
  case PROTOBUF_C_TYPE_STRING: {
    const char *s = *(char *const *)src;
    return json_string(s != NULL ? s : "");
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    const ProtobufCMessage *m = *(ProtobufCMessage *const *)src;
    return m != NULL ? reshard_pbjson_from_message(m) : json_null();
  }
  case PROTOBUF_C_TYPE_BYTES:
    return json_null();
  }
  return json_null();
}

json_t *reshard_pbjson_from_message(const ProtobufCMessage *msg) {
  const ProtobufCMessageDescriptor *desc = msg->descriptor;
  const char *base = (const char *)msg;
  if (strcmp(desc->name, UINT32_WRAPPER) == 0) {
    const ProtobufCFieldDescriptor *vf =
        protobuf_c_message_descriptor_get_field(desc, 1);
    return json_integer(*(const uint32_t *)(base + vf->offset));
  }
  json_t *obj = json_object();
  if (obj == NULL)
    return NULL;
  for (unsigned i = 0; i < desc->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &desc->fields[i];
    json_t *v;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      size_t n = *(const size_t *)(base + f->quantifier_offset);
      const char *arr = *(char *const *)(base + f->offset);
      size_t esize = element_size(f->type);
      v = json_array();
      for (size_t k = 0; v != NULL && k < n; k++)
        json_array_append_new(v, value_json(f, arr + k * esize));
    } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
      if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
        continue;
      v = value_json(f, base + f->offset);
    } else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
      if (*(ProtobufCMessage *const *)(base + f->offset) == NULL)
        continue;
      v = value_json(f, base + f->offset);
    } else {
      if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0 &&
          !*(const protobuf_c_boolean *)(base + f->quantifier_offset))
        continue;
      v = value_json(f, base + f->offset);
    }
    if (v == NULL || json_object_set_new(obj, f->name, v) != 0) {
      json_decref(obj);
      return NULL;
    }
  }
  return obj;
}
