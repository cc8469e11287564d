/* The Redis catalog's manifests (redis_internal.h): put_manifest and
 * get_manifests, their commands and their replies. */
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_internal.h"

/* ---- Commands ---- */

/* SET NX of the record and the SADDs that publish it in its domain (on a
 * cluster only the domain's own set: a fleet-wide set would be another
 * slot, and a transaction cannot span two); before the domain's SADD, the
 * script marking a new domain's page layout (redis_pages.c). */
bool reshard__redis_put_commands(redis_catalog *r, redis_args *a,
                                 const redis_op *op) {
  args_word(a, "SET");
  reshard__redis_args_manifest_key(r, a, op->manifest_key);
  reshard__redis_args_add(a, op->record, op->length, NULL, 0, NULL, 0);
  args_word(a, "NX");
  bool ok = reshard__redis_send_args(r, a, NULL, NULL);
  if (r->cluster == NULL) {
    args_word(a, "SADD");
    args_word(a, "reshard:domains");
    args_word(a, op->domain);
    ok = ok && reshard__redis_send_args(r, a, NULL, NULL);
  }
  reshard__redis_args_mark(a, op->domain);
  ok = ok && reshard__redis_send_args(r, a, NULL, NULL);
  args_word(a, "SADD");
  args_domain_key(a, op->domain, "manifests", NULL);
  args_word(a, op->manifest_key);
  ok = ok && reshard__redis_send_args(r, a, NULL, NULL);
  return ok;
}

/* One MGET, outside MULTI. */
bool reshard__redis_get_commands(redis_catalog *r, redis_args *a,
                                 redis_op *op) {
  args_word(a, "MGET");
  for (size_t i = 0; i < op->key_count; i++) {
    reshard__redis_args_manifest_key(r, a, op->keys[i]);
  }
  return reshard__redis_send_args(r, a, reshard__redis_on_reply, op);
}

/* ---- Replies ---- */

void reshard__redis_reply_put(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  size_t commands = op->r->cluster != NULL ? 3 : 4;
  if (!reshard__redis_exec_ok(op->r, reply, commands, "storing the manifest",
                              &err)) {
    reshard__redis_op_complete(op, &err);
    return;
  }
  bool created = reply->element[0]->type == REDIS_REPLY_STATUS;
  op->put_cb(op->data, &err, created);
  reshard__redis_op_done(op);
}

void reshard__redis_reply_get(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  if (reply->type == REDIS_REPLY_ERROR) {
    reshard__redis_reply_error(r, &err, "reading manifests", reply->str);
    reshard__redis_op_complete(op, &err);
    return;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != op->key_count) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog %s: reading manifests: unexpected reply",
                      r->spec);
    reshard__redis_op_complete(op, &err);
    return;
  }
  reshard_catalog_record *records =
      calloc(op->key_count ? op->key_count : 1, sizeof *records);
  if (records == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
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

/* ---- Operations ---- */

void reshard__redis_put_manifest(reshard_catalog *catalog,
                                 const char *manifest_key,
                                 const char *model_domain,
                                 const uint8_t *record, size_t length,
                                 reshard_catalog_put_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  redis_op *op = reshard__redis_op_new(r, OP_PUT, manifest_key, model_domain,
                                       record, length, NULL, 0);
  if (op == NULL) {
    reshard_error err;
    reshard__redis_out_of_memory(&err);
    cb(data, &err, false);
    return;
  }
  op->put_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}

void reshard__redis_get_manifests(reshard_catalog *catalog,
                                  const char *const *keys, size_t count,
                                  reshard_catalog_get_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  if (count == 0) {
    reshard_catalog_record none = {0};
    cb(data, &err, &none, 0);
    return;
  }
  if (r->cluster != NULL &&
      reshard__redis_cluster_split_get(
          r, OP_GET, RESHARD_CATALOG_OBJECT_PLACEMENT, keys, count, cb, data)) {
    return;
  }
  redis_op *op =
      reshard__redis_op_new(r, OP_GET, NULL, NULL, NULL, 0, keys, count);
  if (op == NULL) {
    reshard__redis_out_of_memory(&err);
    cb(data, &err, NULL, 0);
    return;
  }
  op->get_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}
