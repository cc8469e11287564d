/* The LMDB catalog's objects (lmdb_internal.h): placements and memory
 * pools, one named database per kind, the id as the key and the record as
 * the value. Stored and forgotten on the writer thread; read, and answered
 * without a commit when nothing would change, on the loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/lmdb/lmdb_internal.h"

static bool id_fits(const lmdb_catalog *c, const char *id) {
  size_t length = strlen(id);
  return length > 0 && length <= (size_t)c->max_key;
}

static bool kind_known(reshard_catalog_object_kind kind) {
  return (unsigned)kind < RESHARD_CATALOG_OBJECT_KINDS;
}

static void bad_kind(reshard_error *err, reshard_catalog_object_kind kind) {
  reshard_error_set(err, RESHARD_INTERNAL, "catalog: no object kind %d",
                    (int)kind);
}

/* Finds the object: 0 (with its value), MDB_NOTFOUND or an LMDB error. */
static int find_object(lmdb_catalog *c, MDB_txn *txn,
                       reshard_catalog_object_kind kind, const char *id,
                       MDB_val *value) {
  if (!id_fits(c, id)) {
    return MDB_NOTFOUND;
  }
  MDB_val key = str_val(id);
  return mdb_get(txn, c->objects[kind], &key, value);
}

/* ---- Writer thread: applying requests ---- */

int reshard__lmdb_apply_put_object(lmdb_catalog *c, MDB_txn *txn,
                                   write_op *op) {
  if (!id_fits(c, op->manifest_key)) {
    reshard_error_set(&op->err, RESHARD_INVALID_ARGUMENT,
                      "%s %s: the LMDB catalog holds ids of 1 to %d bytes",
                      reshard_catalog_object_kind_name(op->object),
                      op->manifest_key, c->max_key);
    return 0;
  }
  MDB_val key = str_val(op->manifest_key);
  MDB_val value = {op->length, NULL};
  int rc = mdb_put(txn, c->objects[op->object], &key, &value,
                   MDB_NOOVERWRITE | MDB_RESERVE);
  if (rc == MDB_KEYEXIST) {
    op->created = false;
    return 0;
  }
  if (rc != 0) {
    return rc;
  }
  if (op->length > 0) {
    memcpy(value.mv_data, op->record, op->length);
  }
  op->created = true;
  return 0;
}

int reshard__lmdb_apply_forget_object(lmdb_catalog *c, MDB_txn *txn,
                                      write_op *op) {
  if (!id_fits(c, op->manifest_key)) {
    return 0;
  }
  MDB_val key = str_val(op->manifest_key);
  int rc = mdb_del(txn, c->objects[op->object], &key, NULL);
  if (rc == 0) {
    op->count = 1;
  }
  return rc == MDB_NOTFOUND ? 0 : rc;
}

/* ---- Loop thread ---- */

/* Whether the object exists, from the loop's snapshot: 0 (yes),
 * MDB_NOTFOUND, or anything else when the writer must decide. The snapshot
 * is asked only while no write is pending: then it holds every write this
 * catalog accepted, so a put or a forget answered from it is ordered after
 * all of them (a forget right behind the put of the same id is never
 * answered "not there"). */
static int snapshot_has(lmdb_catalog *c, reshard_catalog_object_kind kind,
                        const char *id) {
  if (c->pending > 0) {
    return EAGAIN;
  }
  MDB_txn *txn;
  int rc = reshard__lmdb_read_begin(c, &txn);
  if (rc != 0) {
    return rc;
  }
  MDB_val value;
  rc = find_object(c, txn, kind, id, &value);
  reshard__lmdb_read_end(c);
  return rc;
}

void reshard__lmdb_put_object(reshard_catalog *catalog,
                              reshard_catalog_object_kind kind, const char *id,
                              const uint8_t *record, size_t length,
                              reshard_catalog_put_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  if (!kind_known(kind)) {
    bad_kind(&err, kind);
    cb(data, &err, false);
    return;
  }
  if (snapshot_has(c, kind, id) == 0) {
    c->writes_skipped++;
    cb(data, &err, false);
    return;
  }
  write_op *op =
      reshard__lmdb_op_new(WRITE_PUT_OBJECT, id, NULL, record, length, NULL, 0);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory storing %s %s",
                      reshard_catalog_object_kind_name(kind), id);
    cb(data, &err, false);
    return;
  }
  op->object = kind;
  op->put_cb = cb;
  op->data = data;
  reshard__lmdb_enqueue(c, op);
}

void reshard__lmdb_get_objects(reshard_catalog *catalog,
                               reshard_catalog_object_kind kind,
                               const char *const *ids, size_t count,
                               reshard_catalog_get_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  if (!kind_known(kind)) {
    bad_kind(&err, kind);
    cb(data, &err, NULL, 0);
    return;
  }
  reshard_catalog_record *records = calloc(count ? count : 1, sizeof *records);
  if (records == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
    cb(data, &err, NULL, 0);
    return;
  }
  MDB_txn *txn;
  int rc = reshard__lmdb_read_begin(c, &txn);
  if (rc != 0) {
    free(records);
    char what[64];
    snprintf(what, sizeof what, "reading %ss",
             reshard_catalog_object_kind_name(kind));
    reshard__lmdb_error(c, &err, rc, what);
    cb(data, &err, NULL, 0);
    return;
  }
  for (size_t i = 0; i < count && rc == 0; i++) {
    MDB_val value;
    rc = find_object(c, txn, kind, ids[i], &value);
    if (rc == 0) {
      records[i].found = true;
      records[i].data = value.mv_data;
      records[i].length = value.mv_size;
    } else if (rc == MDB_NOTFOUND) {
      rc = 0;
    } else {
      reshard__lmdb_error(c, &err, rc, ids[i]);
    }
  }
  if (rc != 0) {
    cb(data, &err, NULL, 0);
  } else {
    cb(data, &err, records, count);
  }
  reshard__lmdb_read_end(c);
  free(records);
}

void reshard__lmdb_forget_object(reshard_catalog *catalog,
                                 reshard_catalog_object_kind kind,
                                 const char *id, reshard_catalog_removed_cb cb,
                                 void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  if (!kind_known(kind)) {
    bad_kind(&err, kind);
    cb(data, &err, false);
    return;
  }
  if (snapshot_has(c, kind, id) == MDB_NOTFOUND) {
    c->writes_skipped++;
    cb(data, &err, false);
    return;
  }
  write_op *op =
      reshard__lmdb_op_new(WRITE_FORGET_OBJECT, id, NULL, NULL, 0, NULL, 0);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory forgetting %s %s",
                      reshard_catalog_object_kind_name(kind), id);
    cb(data, &err, false);
    return;
  }
  op->object = kind;
  op->removed_cb = cb;
  op->data = data;
  reshard__lmdb_enqueue(c, op);
}
