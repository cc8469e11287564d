/* The Redis catalog's objects (redis_internal.h): placements and memory
 * pools, one STRING each under reshard:placement:<id> or
 * reshard:memory:<id>. put_object is one SET NX, get_objects one MGET,
 * forget_object one DEL: single commands, so no MULTI. */
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_internal.h"

static bool kind_known(reshard_catalog_object_kind kind) {
  return (unsigned)kind < RESHARD_CATALOG_OBJECT_KINDS;
}

static void bad_kind(reshard_error *err, reshard_catalog_object_kind kind) {
  reshard_error_set(err, RESHARD_INTERNAL, "catalog: no object kind %d",
                    (int)kind);
}

/* ---- Commands ---- */

/* reshard:placement:<id> or reshard:memory:<id> */
void reshard__redis_args_object_key(redis_args *a,
                                    reshard_catalog_object_kind kind,
                                    const char *id) {
  if (kind == RESHARD_CATALOG_OBJECT_PLACEMENT) {
    reshard__redis_args_add(a, LIT("reshard:placement:"), id, strlen(id), NULL,
                            0);
  } else {
    reshard__redis_args_add(a, LIT("reshard:memory:"), id, strlen(id), NULL, 0);
  }
}

bool reshard__redis_object_commands(redis_catalog *r, redis_args *a,
                                    redis_op *op) {
  switch (op->kind) {
  case OP_PUT_OBJECT:
    args_word(a, "SET");
    reshard__redis_args_object_key(a, op->object, op->manifest_key);
    reshard__redis_args_add(a, op->record, op->length, NULL, 0, NULL, 0);
    args_word(a, "NX");
    break;
  case OP_GET_OBJECTS:
    args_word(a, "MGET");
    for (size_t i = 0; i < op->key_count; i++) {
      reshard__redis_args_object_key(a, op->object, op->keys[i]);
    }
    break;
  case OP_FORGET_OBJECT:
    args_word(a, "DEL");
    reshard__redis_args_object_key(a, op->object, op->manifest_key);
    break;
  default:
    return false;
  }
  return reshard__redis_send_args(r, a, reshard__redis_on_reply, op);
}

/* ---- Replies ---- */

/* What the operation was doing, naming the object, for its errors. */
static void object_what(const redis_op *op, char *buffer, size_t size) {
  const char *kind = reshard_catalog_object_kind_name(op->object);
  switch (op->kind) {
  case OP_PUT_OBJECT:
    snprintf(buffer, size, "storing %s %s", kind, op->manifest_key);
    break;
  case OP_FORGET_OBJECT:
    snprintf(buffer, size, "forgetting %s %s", kind, op->manifest_key);
    break;
  default:
    snprintf(buffer, size, "reading %s %s%s", kind,
             op->key_count > 0 ? op->keys[0] : "",
             op->key_count > 1 ? " and others" : "");
    break;
  }
}

/* Fails `op` for a reply that is an error or not of the expected shape. */
static void reply_failed(redis_op *op, const redisReply *reply) {
  char what[640];
  object_what(op, what, sizeof what);
  reshard_error err;
  if (reply->type == REDIS_REPLY_ERROR) {
    reshard__redis_reply_error(op->r, &err, what, reply->str);
  } else {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog %s: %s: unexpected reply (type %d)", op->r->spec,
                      what, reply->type);
  }
  reshard__redis_op_complete(op, &err);
}

static void reply_get_objects(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  reshard_catalog_record *records =
      calloc(op->key_count ? op->key_count : 1, sizeof *records);
  if (records == NULL) {
    reshard__redis_out_of_memory(&err);
    reshard__redis_op_complete(op, &err);
    return;
  }
  for (size_t i = 0; i < op->key_count; i++) {
    const redisReply *element = reply->element[i];
    if (element->type == REDIS_REPLY_STRING) {
      records[i].found = true;
      records[i].data = (const uint8_t *)element->str;
      records[i].length = element->len;
    }
  }
  op->get_cb(op->data, &err, records, op->key_count);
  free(records);
  reshard__redis_op_done(op);
}

void reshard__redis_reply_object(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  switch (op->kind) {
  case OP_PUT_OBJECT:
    /* SET NX: OK when it stored, nil when the key was there. */
    if (reply->type != REDIS_REPLY_STATUS && reply->type != REDIS_REPLY_NIL) {
      reply_failed(op, reply);
      return;
    }
    op->put_cb(op->data, &err, reply->type == REDIS_REPLY_STATUS);
    break;
  case OP_GET_OBJECTS:
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != op->key_count) {
      reply_failed(op, reply);
      return;
    }
    reply_get_objects(op, reply);
    return;
  case OP_FORGET_OBJECT:
    if (reply->type != REDIS_REPLY_INTEGER) {
      reply_failed(op, reply);
      return;
    }
    op->removed_cb(op->data, &err, reply->integer > 0);
    break;
  default:
    break;
  }
  reshard__redis_op_done(op);
}

/* ---- Operations ---- */

void reshard__redis_put_object(reshard_catalog *catalog,
                               reshard_catalog_object_kind kind, const char *id,
                               const uint8_t *record, size_t length,
                               reshard_catalog_put_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  reshard_error err;
  if (!kind_known(kind)) {
    bad_kind(&err, kind);
    cb(data, &err, false);
    return;
  }
  redis_op *op = reshard__redis_op_new(r, OP_PUT_OBJECT, id, NULL, record,
                                       length, NULL, 0);
  if (op == NULL) {
    reshard__redis_out_of_memory(&err);
    cb(data, &err, false);
    return;
  }
  op->object = kind;
  op->put_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}

void reshard__redis_get_objects(reshard_catalog *catalog,
                                reshard_catalog_object_kind kind,
                                const char *const *ids, size_t count,
                                reshard_catalog_get_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  if (!kind_known(kind)) {
    bad_kind(&err, kind);
    cb(data, &err, NULL, 0);
    return;
  }
  if (count == 0) {
    reshard_catalog_record none = {0};
    cb(data, &err, &none, 0);
    return;
  }
  if (r->cluster != NULL &&
      reshard__redis_cluster_split_get(r, OP_GET_OBJECTS, kind, ids, count, cb,
                                       data)) {
    return;
  }
  redis_op *op =
      reshard__redis_op_new(r, OP_GET_OBJECTS, NULL, NULL, NULL, 0, ids, count);
  if (op == NULL) {
    reshard__redis_out_of_memory(&err);
    cb(data, &err, NULL, 0);
    return;
  }
  op->object = kind;
  op->get_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}

void reshard__redis_forget_object(reshard_catalog *catalog,
                                  reshard_catalog_object_kind kind,
                                  const char *id, reshard_catalog_removed_cb cb,
                                  void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  reshard_error err;
  if (!kind_known(kind)) {
    bad_kind(&err, kind);
    cb(data, &err, false);
    return;
  }
  redis_op *op =
      reshard__redis_op_new(r, OP_FORGET_OBJECT, id, NULL, NULL, 0, NULL, 0);
  if (op == NULL) {
    reshard__redis_out_of_memory(&err);
    cb(data, &err, false);
    return;
  }
  op->object = kind;
  op->removed_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}
