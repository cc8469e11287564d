/* The LMDB catalog's manifests and model domains (lmdb_internal.h): the
 * lookups every operation uses, storing a manifest on the writer thread, and
 * put_manifest / get_manifests on the loop. */
#include <stdlib.h>
#include <string.h>

#include "catalog/lmdb/lmdb_internal.h"

/* A manifest value starts with its id and its domain's id. */
#define MANIFEST_HEADER 8

/* Finds the id of `domain`: 0, MDB_NOTFOUND or an LMDB error. */
int reshard__lmdb_find_domain(lmdb_catalog *c, MDB_txn *txn, const char *domain,
                              uint32_t *id) {
  MDB_val key = str_val(domain), value;
  if (key.mv_size == 0 || key.mv_size > (size_t)c->max_key) {
    return MDB_NOTFOUND;
  }
  int rc = mdb_get(txn, c->domains, &key, &value);
  if (rc == 0) {
    if (value.mv_size != sizeof(uint32_t)) {
      return MDB_CORRUPTED;
    }
    *id = read_u32(value.mv_data);
    /* No id reaches the packed-key bit (reshard__lmdb_apply_put); one that
     * did would make its raw keys read as another domain's packed ones. */
    if (*id >= LMDB_MAX_DOMAINS) {
      return MDB_CORRUPTED;
    }
  }
  return rc;
}

/* Finds a manifest's id and domain id (and its value when `out` is not
 * NULL): 0, MDB_NOTFOUND or an LMDB error. */
int reshard__lmdb_find_manifest(lmdb_catalog *c, MDB_txn *txn, const char *key,
                                uint32_t *id, uint32_t *domain_id,
                                MDB_val *out) {
  MDB_val k = str_val(key), value;
  if (k.mv_size == 0 || k.mv_size > (size_t)c->max_key) {
    return MDB_NOTFOUND;
  }
  int rc = mdb_get(txn, c->manifests, &k, &value);
  if (rc == 0) {
    if (value.mv_size < MANIFEST_HEADER) {
      return MDB_CORRUPTED;
    }
    *id = read_u32(value.mv_data);
    *domain_id = read_u32((const uint8_t *)value.mv_data + 4);
    if (out != NULL) {
      *out = value;
    }
  }
  return rc;
}

/* ---- Writer thread: applying requests ---- */

int reshard__lmdb_apply_put(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  uint32_t id, domain_id;
  int rc = reshard__lmdb_find_manifest(c, txn, op->manifest_key, &id,
                                       &domain_id, NULL);
  if (rc == 0) {
    op->created = false;
    return 0;
  }
  if (rc != MDB_NOTFOUND) {
    return rc;
  }
  size_t key_length = strlen(op->manifest_key);
  size_t domain_length = strlen(op->domain);
  if (key_length == 0 || key_length > (size_t)c->max_key ||
      domain_length == 0 || domain_length > (size_t)c->max_key) {
    reshard_error_set(&op->err, RESHARD_INVALID_ARGUMENT,
                      "manifest_key %s: the LMDB catalog holds keys of 1 to "
                      "%d bytes",
                      op->manifest_key, c->max_key);
    return 0;
  }
  MDB_stat stat;
  rc = reshard__lmdb_find_domain(c, txn, op->domain, &domain_id);
  if (rc == MDB_NOTFOUND) {
    if ((rc = mdb_stat(txn, c->domains, &stat)) != 0) {
      return rc;
    }
    /* The top bit of a domain id marks packed page keys (lmdb_internal.h),
     * in a catalog of either format, so the formats accept the same. */
    if (stat.ms_entries >= LMDB_MAX_DOMAINS) {
      reshard_error_set(&op->err, RESHARD_RESOURCE_EXHAUSTED,
                        "model_domain %s: the LMDB catalog holds at most "
                        "2^31 model domains and has that many",
                        op->domain);
      return 0;
    }
    domain_id = (uint32_t)stat.ms_entries;
    MDB_val dk = str_val(op->domain), dv = {sizeof domain_id, &domain_id};
    rc = mdb_put(txn, c->domains, &dk, &dv, MDB_NOOVERWRITE);
  }
  if (rc != 0) {
    return rc;
  }
  if ((rc = mdb_stat(txn, c->manifests, &stat)) != 0) {
    return rc;
  }
  if (stat.ms_entries >= UINT32_MAX) {
    return MDB_MAP_FULL;
  }
  id = (uint32_t)stat.ms_entries;
  MDB_val mk = str_val(op->manifest_key);
  MDB_val mv = {MANIFEST_HEADER + op->length, NULL};
  if ((rc = mdb_put(txn, c->manifests, &mk, &mv, MDB_RESERVE)) != 0) {
    return rc;
  }
  uint8_t *at = mv.mv_data;
  memcpy(at, &id, 4);
  memcpy(at + 4, &domain_id, 4);
  if (op->length > 0) {
    memcpy(at + MANIFEST_HEADER, op->record, op->length);
  }
  MDB_val ik = {sizeof id, &id};
  MDB_val iv = {key_length + 1, (void *)op->manifest_key};
  if ((rc = mdb_put(txn, c->manifest_keys, &ik, &iv, MDB_NOOVERWRITE)) != 0) {
    return rc;
  }
  op->created = true;
  return 0;
}

/* ---- Loop thread ---- */

void reshard__lmdb_put_manifest(reshard_catalog *catalog,
                                const char *manifest_key,
                                const char *model_domain, const uint8_t *record,
                                size_t length, reshard_catalog_put_cb cb,
                                void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  MDB_txn *txn;
  int rc = reshard__lmdb_read_begin(c, &txn);
  if (rc != 0) {
    reshard__lmdb_error(c, &err, rc, "reading");
    cb(data, &err, false);
    return;
  }
  uint32_t id, domain_id;
  rc = reshard__lmdb_find_manifest(c, txn, manifest_key, &id, &domain_id, NULL);
  reshard__lmdb_read_end(c);
  if (rc == 0) {
    c->writes_skipped++;
    cb(data, &err, false);
    return;
  }
  write_op *op = reshard__lmdb_op_new(WRITE_PUT, manifest_key, model_domain,
                                      record, length, NULL, 0);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory storing manifest %s",
                      manifest_key);
    cb(data, &err, false);
    return;
  }
  op->put_cb = cb;
  op->data = data;
  reshard__lmdb_enqueue(c, op);
}

void reshard__lmdb_get_manifests(reshard_catalog *catalog,
                                 const char *const *keys, size_t count,
                                 reshard_catalog_get_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
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
    reshard__lmdb_error(c, &err, rc, "reading manifests");
    cb(data, &err, NULL, 0);
    return;
  }
  for (size_t i = 0; i < count && rc == 0; i++) {
    uint32_t id, domain_id;
    MDB_val value;
    rc = reshard__lmdb_find_manifest(c, txn, keys[i], &id, &domain_id, &value);
    if (rc == 0) {
      records[i].found = true;
      records[i].data = (const uint8_t *)value.mv_data + MANIFEST_HEADER;
      records[i].length = value.mv_size - MANIFEST_HEADER;
    } else if (rc == MDB_NOTFOUND) {
      rc = 0;
    } else {
      reshard__lmdb_error(c, &err, rc, keys[i]);
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
