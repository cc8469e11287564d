/* The LMDB catalog's page bindings (lmdb_internal.h): the pages key, raw
 * or packed, and its decoding; binding and forgetting on the writer thread,
 * and add_pages / forget_pages / lookup_pages on the loop. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/lmdb/lmdb_internal.h"

/* True for a page key that a catalog of format 2 stores packed: lowercase
 * hexadecimal of even length, the form of content-addressed keys (a sha256
 * digest is 64 such characters). Uppercase or odd-length hex stays raw: only
 * the one spelling whose bytes decode back to the same text packs. */
static bool packs(const char *page_key, size_t length) {
  if (length == 0 || length % 2 != 0) {
    return false;
  }
  for (size_t i = 0; i < length; i++) {
    char ch = page_key[i];
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) {
      return false;
    }
  }
  return true;
}

static uint8_t nibble(char ch) {
  return (uint8_t)(ch <= '9' ? ch - '0' : ch - 'a' + 10);
}

MDB_val reshard__lmdb_page_key(bool packed_format, uint8_t *buffer,
                               uint32_t domain_id, const char *page_key,
                               size_t length) {
  assert((domain_id & LMDB_PACKED_KEY) == 0); /* reshard__lmdb_find_domain */
  uint32_t prefix = domain_id;
  size_t stored = length;
  if (packed_format && packs(page_key, length)) {
    prefix |= LMDB_PACKED_KEY;
    stored = length / 2;
    for (size_t i = 0; i < stored; i++) {
      buffer[4 + i] =
          (uint8_t)(nibble(page_key[2 * i]) << 4 | nibble(page_key[2 * i + 1]));
    }
  } else {
    memcpy(buffer + 4, page_key, length);
  }
  buffer[0] = (uint8_t)(prefix >> 24);
  buffer[1] = (uint8_t)(prefix >> 16);
  buffer[2] = (uint8_t)(prefix >> 8);
  buffer[3] = (uint8_t)prefix;
  MDB_val v = {4 + stored, buffer};
  return v;
}

int reshard__lmdb_page_key_decode(bool packed_format, const MDB_val *key,
                                  uint32_t *domain_id, char *out,
                                  size_t capacity, size_t *length) {
  if (key->mv_size <= 4) {
    return MDB_CORRUPTED;
  }
  const uint8_t *at = key->mv_data;
  uint32_t prefix = (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 |
                    (uint32_t)at[2] << 8 | at[3];
  const uint8_t *bytes = at + 4;
  size_t stored = key->mv_size - 4;
  bool packed = (prefix & LMDB_PACKED_KEY) != 0;
  if (packed && !packed_format) {
    return MDB_CORRUPTED; /* a format 1 catalog never packs */
  }
  /* Room for the text and its NUL, checked without overflow. */
  if (capacity == 0 || stored > (packed ? (capacity - 1) / 2 : capacity - 1)) {
    return MDB_BAD_VALSIZE;
  }
  size_t text = packed ? 2 * stored : stored;
  if (packed) {
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < stored; i++) {
      out[2 * i] = hex[bytes[i] >> 4];
      out[2 * i + 1] = hex[bytes[i] & 15];
    }
  } else {
    memcpy(out, bytes, stored);
    /* A raw key holds no NUL (page keys are C strings), and in a catalog
     * that packs, never a key that packs: either would be a key no add
     * wrote. */
    if (memchr(bytes, 0, stored) != NULL ||
        (packed_format && packs(out, stored))) {
      return MDB_CORRUPTED;
    }
  }
  out[text] = '\0';
  *domain_id = prefix & ~LMDB_PACKED_KEY;
  *length = text;
  return 0;
}

static MDB_val page_val(const lmdb_catalog *c, uint8_t *buffer,
                        uint32_t domain_id, const char *page_key,
                        size_t length) {
  return reshard__lmdb_page_key(c->packed_keys, buffer, domain_id, page_key,
                                length);
}

/* The limit is on the page key as the client sends it, whatever its
 * stored form: a packed catalog could hold hex keys of up to 1 014
 * characters, but one limit for every key in every catalog format means a
 * key one catalog accepts, every other accepts too (re-registering in a
 * new catalog never meets a new refusal). */
static bool page_key_fits(const lmdb_catalog *c, size_t length) {
  return length + 4 <= (size_t)c->max_key;
}

/* ---- Writer thread: applying requests ---- */

/* Checks an add_pages request against the snapshot `txn` sees; fills
 * op->err for the request's own errors and returns 0 with the manifest's
 * id, or an LMDB error. */
static int check_add(lmdb_catalog *c, MDB_txn *txn, write_op *op,
                     uint32_t *manifest_id, uint32_t *domain_id) {
  uint32_t manifest_domain;
  int rc = reshard__lmdb_find_manifest(c, txn, op->manifest_key, manifest_id,
                                       &manifest_domain, NULL);
  if (rc == MDB_NOTFOUND) {
    reshard_error_set(&op->err, RESHARD_NOT_FOUND,
                      "manifest_key %s: no such manifest is published",
                      op->manifest_key);
    return 0;
  }
  if (rc != 0) {
    return rc;
  }
  rc = reshard__lmdb_find_domain(c, txn, op->domain, domain_id);
  if (rc != 0 && rc != MDB_NOTFOUND) {
    return rc;
  }
  if (rc == MDB_NOTFOUND || *domain_id != manifest_domain) {
    reshard_error_set(&op->err, RESHARD_INVALID_ARGUMENT,
                      "manifest_key %s: belongs to another model domain than "
                      "%s",
                      op->manifest_key, op->domain);
    return 0;
  }
  for (size_t i = 0; i < op->page_count; i++) {
    size_t length = strlen(op->page_keys[i]);
    if (length == 0 || !page_key_fits(c, length)) {
      reshard_error_set(&op->err, RESHARD_INVALID_ARGUMENT,
                        "page_keys[%zu]: %zu bytes; the LMDB catalog holds "
                        "page keys of 1 to %d bytes",
                        i, length, c->max_key - 4);
      return 0;
    }
  }
  return 0;
}

int reshard__lmdb_apply_add(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  uint32_t manifest_id = 0, domain_id = 0;
  int rc = check_add(c, txn, op, &manifest_id, &domain_id);
  if (rc != 0 || op->err.code != RESHARD_OK) {
    return rc;
  }
  uint8_t buffer[4 + 512];
  for (size_t i = 0; i < op->page_count; i++) {
    MDB_val key = page_val(c, buffer, domain_id, op->page_keys[i],
                           strlen(op->page_keys[i]));
    MDB_val value = {sizeof manifest_id, &manifest_id};
    rc = mdb_put(txn, c->pages, &key, &value, MDB_NODUPDATA);
    if (rc == 0) {
      op->count++;
    } else if (rc != MDB_KEYEXIST) {
      return rc;
    }
  }
  return 0;
}

int reshard__lmdb_apply_forget(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  uint32_t domain_id, manifest_id = 0, manifest_domain;
  int rc = reshard__lmdb_find_domain(c, txn, op->domain, &domain_id);
  if (rc == MDB_NOTFOUND) {
    return 0;
  }
  if (rc != 0) {
    return rc;
  }
  if (op->manifest_key != NULL) {
    rc = reshard__lmdb_find_manifest(c, txn, op->manifest_key, &manifest_id,
                                     &manifest_domain, NULL);
    if (rc == MDB_NOTFOUND) {
      return 0;
    }
    if (rc != 0) {
      return rc;
    }
  }
  MDB_cursor *cursor;
  if ((rc = mdb_cursor_open(txn, c->pages, &cursor)) != 0) {
    return rc;
  }
  uint8_t buffer[4 + 512];
  for (size_t i = 0; i < op->page_count && rc == 0; i++) {
    size_t length = strlen(op->page_keys[i]);
    if (length == 0 || !page_key_fits(c, length)) {
      continue;
    }
    MDB_val key = page_val(c, buffer, domain_id, op->page_keys[i], length);
    MDB_val value = {sizeof manifest_id, &manifest_id};
    if (op->manifest_key != NULL) {
      rc = mdb_cursor_get(cursor, &key, &value, MDB_GET_BOTH);
      if (rc == 0 && (rc = mdb_cursor_del(cursor, 0)) == 0) {
        op->count++;
      }
    } else {
      rc = mdb_cursor_get(cursor, &key, &value, MDB_SET);
      size_t dups = 0;
      if (rc == 0 && (rc = mdb_cursor_count(cursor, &dups)) == 0 &&
          (rc = mdb_cursor_del(cursor, MDB_NODUPDATA)) == 0) {
        op->count += dups;
      }
    }
    if (rc == MDB_NOTFOUND) {
      rc = 0;
    }
  }
  mdb_cursor_close(cursor);
  return rc;
}

/* ---- Loop thread ---- */

/* True when every page of an add_pages request is bound to the manifest
 * already, in the loop's snapshot; such a request needs no commit. */
static bool all_bound(lmdb_catalog *c, MDB_txn *txn, const char *model_domain,
                      const char *manifest_key, const char *const *page_keys,
                      size_t page_count) {
  uint32_t manifest_id, manifest_domain, domain_id;
  if (reshard__lmdb_find_manifest(c, txn, manifest_key, &manifest_id,
                                  &manifest_domain, NULL) != 0 ||
      reshard__lmdb_find_domain(c, txn, model_domain, &domain_id) != 0 ||
      domain_id != manifest_domain) {
    return false;
  }
  uint8_t buffer[4 + 512];
  MDB_cursor *cursor;
  if (mdb_cursor_open(txn, c->pages, &cursor) != 0) {
    return false;
  }
  bool bound = true;
  for (size_t i = 0; i < page_count && bound; i++) {
    size_t length = strlen(page_keys[i]);
    if (length == 0 || !page_key_fits(c, length)) {
      bound = false;
      break;
    }
    MDB_val key = page_val(c, buffer, domain_id, page_keys[i], length);
    MDB_val value = {sizeof manifest_id, &manifest_id};
    bound = mdb_cursor_get(cursor, &key, &value, MDB_GET_BOTH) == 0;
  }
  mdb_cursor_close(cursor);
  return bound;
}

void reshard__lmdb_add_pages(reshard_catalog *catalog, const char *model_domain,
                             const char *manifest_key,
                             const char *const *page_keys, size_t page_count,
                             reshard_catalog_count_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  MDB_txn *txn;
  if (reshard__lmdb_read_begin(c, &txn) == 0) {
    bool skip =
        all_bound(c, txn, model_domain, manifest_key, page_keys, page_count);
    reshard__lmdb_read_end(c);
    if (skip) {
      c->writes_skipped++;
      cb(data, &err, 0);
      return;
    }
  }
  write_op *op = reshard__lmdb_op_new(WRITE_ADD, manifest_key, model_domain,
                                      NULL, 0, page_keys, page_count);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory binding pages to %s",
                      manifest_key);
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  reshard__lmdb_enqueue(c, op);
}

/* True when a forget_pages request would remove nothing, in the loop's
 * snapshot. */
static bool nothing_bound(lmdb_catalog *c, MDB_txn *txn,
                          const char *model_domain, const char *manifest_key,
                          const char *const *page_keys, size_t page_count) {
  uint32_t domain_id, manifest_id = 0, manifest_domain;
  int rc = reshard__lmdb_find_domain(c, txn, model_domain, &domain_id);
  if (rc != 0) {
    return rc == MDB_NOTFOUND;
  }
  if (manifest_key != NULL) {
    rc = reshard__lmdb_find_manifest(c, txn, manifest_key, &manifest_id,
                                     &manifest_domain, NULL);
    if (rc != 0) {
      return rc == MDB_NOTFOUND;
    }
  }
  uint8_t buffer[4 + 512];
  MDB_cursor *cursor;
  if (mdb_cursor_open(txn, c->pages, &cursor) != 0) {
    return false;
  }
  bool none = true;
  for (size_t i = 0; i < page_count && none; i++) {
    size_t length = strlen(page_keys[i]);
    if (length == 0 || !page_key_fits(c, length)) {
      continue;
    }
    MDB_val key = page_val(c, buffer, domain_id, page_keys[i], length);
    MDB_val value = {sizeof manifest_id, &manifest_id};
    rc = mdb_cursor_get(cursor, &key, &value,
                        manifest_key ? MDB_GET_BOTH : MDB_SET);
    none = rc == MDB_NOTFOUND;
  }
  mdb_cursor_close(cursor);
  return none;
}

void reshard__lmdb_forget_pages(reshard_catalog *catalog,
                                const char *model_domain,
                                const char *manifest_key,
                                const char *const *page_keys, size_t page_count,
                                reshard_catalog_count_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  MDB_txn *txn;
  if (reshard__lmdb_read_begin(c, &txn) == 0) {
    bool skip = nothing_bound(c, txn, model_domain, manifest_key, page_keys,
                              page_count);
    reshard__lmdb_read_end(c);
    if (skip) {
      c->writes_skipped++;
      cb(data, &err, 0);
      return;
    }
  }
  write_op *op = reshard__lmdb_op_new(WRITE_FORGET, manifest_key, model_domain,
                                      NULL, 0, page_keys, page_count);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory forgetting pages");
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  reshard__lmdb_enqueue(c, op);
}

/* Appends the manifest keys bound to one page; returns 0 or an LMDB error
 * (ENOMEM when memory runs out). */
static int collect_page(lmdb_catalog *c, MDB_txn *txn, MDB_cursor *cursor,
                        MDB_val *key, const char ***keys, size_t *count,
                        size_t *capacity) {
  MDB_val value;
  int rc = mdb_cursor_get(cursor, key, &value, MDB_SET_KEY);
  while (rc == 0) {
    if (value.mv_size != sizeof(uint32_t)) {
      return MDB_CORRUPTED;
    }
    uint32_t id = read_u32(value.mv_data);
    MDB_val ik = {sizeof id, &id}, iv;
    if ((rc = mdb_get(txn, c->manifest_keys, &ik, &iv)) != 0) {
      return rc == MDB_NOTFOUND ? MDB_CORRUPTED : rc;
    }
    if (iv.mv_size == 0 || ((const char *)iv.mv_data)[iv.mv_size - 1] != 0) {
      return MDB_CORRUPTED;
    }
    if (!reshard_catalog_grow((void **)keys, capacity, *count + 1,
                              sizeof **keys)) {
      return ENOMEM;
    }
    (*keys)[(*count)++] = iv.mv_data;
    rc = mdb_cursor_get(cursor, key, &value, MDB_NEXT_DUP);
  }
  return rc == MDB_NOTFOUND ? 0 : rc;
}

void reshard__lmdb_lookup_pages(reshard_catalog *catalog,
                                const char *model_domain,
                                const char *const *page_keys, size_t page_count,
                                reshard_catalog_lookup_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  reshard_catalog_pages result = {0};
  result.page_count = page_count;
  size_t *start = calloc(page_count + 1, sizeof *start);
  const char **keys = NULL;
  size_t count = 0, capacity = 0;
  MDB_txn *txn = NULL;
  MDB_cursor *cursor = NULL;
  int rc = start == NULL ? ENOMEM : reshard__lmdb_read_begin(c, &txn);
  if (start != NULL && rc != 0) {
    txn = NULL;
  }
  uint32_t domain_id = 0;
  if (rc == 0) {
    rc = reshard__lmdb_find_domain(c, txn, model_domain, &domain_id);
    result.domain_known = rc == 0;
    if (rc == MDB_NOTFOUND) {
      rc = 0;
    } else if (rc == 0) {
      rc = mdb_cursor_open(txn, c->pages, &cursor);
    }
  }
  uint8_t buffer[4 + 512];
  for (size_t i = 0; i < page_count && rc == 0; i++) {
    start[i] = count;
    size_t length = strlen(page_keys[i]);
    if (cursor == NULL || length == 0 || !page_key_fits(c, length)) {
      continue;
    }
    MDB_val key = page_val(c, buffer, domain_id, page_keys[i], length);
    rc = collect_page(c, txn, cursor, &key, &keys, &count, &capacity);
  }
  if (cursor != NULL) {
    mdb_cursor_close(cursor);
  }
  if (rc == 0) {
    start[page_count] = count;
    result.start = start;
    result.manifest_keys = keys;
    cb(data, &err, &result);
  } else if (rc == ENOMEM) {
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
    cb(data, &err, NULL);
  } else {
    reshard__lmdb_error(c, &err, rc, "looking up pages");
    cb(data, &err, NULL);
  }
  if (txn != NULL) {
    reshard__lmdb_read_end(c);
  }
  free(keys);
  free(start);
}
