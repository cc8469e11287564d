/* The LMDB catalog: see catalog_lmdb.h for the contract and docs/catalog.md
 * for the record layout.
 *
 * Threads: the loop thread reads through one long-lived read-only
 * transaction that it renews per operation (MDB_NOTLS ties the reader slot
 * to the transaction, not the thread). One writer thread owns every write
 * transaction: it takes up to WRITE_BATCH queued requests, applies them in
 * one transaction, commits (a synchronous commit: the data and the meta
 * page are on disk when mdb_txn_commit returns) and hands the finished
 * requests back to the loop through a mutex-guarded list and uv_async_send,
 * sent only when the list goes from empty to non-empty. When a shared
 * transaction fails as a whole (the map is full, say), each request is
 * retried in a transaction of its own, so one request's failure is never
 * another's. A request's own errors (unknown manifest, a key LMDB cannot
 * hold) are found before it writes anything, so they never need a rollback.
 *
 * Handles: the uv_async_t is unreferenced while no write is pending, so an
 * idle catalog never keeps the loop alive. */
#include "catalog/catalog_lmdb.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "observe/log.h"

/* Write requests per transaction, at most. */
#define WRITE_BATCH 256

/* Named databases (docs/catalog.md):
 *   meta           "format" -> "reshardd-catalog 1"
 *   manifests      manifest key -> u32 id, u32 domain id, record
 *   manifest_keys  u32 id -> manifest key + NUL
 *   domains        model domain -> u32 id
 *   pages          u32 domain id (big-endian) + page key -> u32 manifest
 *                  ids (sorted duplicates) */
#define DB_META "meta"
#define DB_MANIFESTS "manifests"
#define DB_MANIFEST_KEYS "manifest_keys"
#define DB_DOMAINS "domains"
#define DB_PAGES "pages"
#define META_FORMAT_KEY "format"

/* A manifest value starts with its id and its domain's id. */
#define MANIFEST_HEADER 8

typedef enum write_kind { WRITE_PUT, WRITE_ADD, WRITE_FORGET } write_kind;

/* One queued write, allocated in one block with copies of its inputs. */
typedef struct write_op {
  struct write_op *next;
  write_kind kind;
  const char *manifest_key; /* NULL: forget every binding of the pages */
  const char *domain;
  const uint8_t *record;
  size_t length;
  const char **page_keys;
  size_t page_count;
  reshard_catalog_put_cb put_cb;
  reshard_catalog_count_cb count_cb;
  void *data;
  /* Results, filled by the writer. */
  reshard_error err;
  bool created;
  uint64_t count;
} write_op;

typedef struct lmdb_catalog {
  reshard_catalog base;
  MDB_env *env;
  MDB_dbi meta, manifests, manifest_keys, domains, pages;
  uint64_t map_size;
  int max_key;

  /* Loop thread only. */
  MDB_txn *read_txn;
  unsigned read_depth;
  size_t pending; /* writes handed to the writer and not yet called back */
  bool closing;
  bool writer_joined;
  reshard_catalog_close_cb close_cb;
  void *close_data;
  uint64_t writes_skipped;
  uv_async_t async;

  /* Shared with the writer thread, under `lock`. */
  uv_thread_t writer;
  uv_mutex_t lock;
  uv_cond_t wake;
  write_op *queue_head, *queue_tail;
  write_op *done_head, *done_tail;
  bool stopping;
  bool writer_done;
  uint64_t commits;
  uint64_t writes;
  int dir_fd; /* holds flock(LOCK_EX) on the directory: one daemon only */

  char path[];
} lmdb_catalog;

/* ---- Errors ---- */

/* LMDB reports a short write (what a full disk gives pwrite) as EIO; the
 * filesystem tells whether that is what happened. */
static bool disk_full(const char *path) {
  struct statvfs fs;
  return statvfs(path, &fs) == 0 &&
         (uint64_t)fs.f_bavail * fs.f_frsize < 1024 * 1024;
}

static reshard_status lmdb_error(const lmdb_catalog *c, reshard_error *err,
                                 int rc, const char *what) {
  if (rc == MDB_MAP_FULL) {
    return reshard_error_set(
        err, RESHARD_RESOURCE_EXHAUSTED,
        "catalog lmdb:%s: full: %s needs more than the LMDB map of %" PRIu64
        " bytes holds",
        c->path, what, c->map_size);
  }
  if (rc == ENOSPC || rc == EDQUOT || (rc == EIO && disk_full(c->path))) {
    /* The client can retry elsewhere or later; nothing of ours broke. */
    return reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                             "catalog lmdb:%s: %s: the disk is full (%s); "
                             "nothing of this request was stored",
                             c->path, what, mdb_strerror(rc));
  }
  return reshard_error_set(err, RESHARD_INTERNAL, "catalog lmdb:%s: %s: %s",
                           c->path, what, mdb_strerror(rc));
}

/* ---- Keys and values ---- */

static MDB_val str_val(const char *text) {
  MDB_val v = {strlen(text), (void *)text};
  return v;
}

/* The pages key: the domain id, big-endian so one domain's pages sort
 * together, then the page key bytes. `buffer` holds 4 + max_key bytes. */
static MDB_val page_val(uint8_t *buffer, uint32_t domain_id,
                        const char *page_key, size_t length) {
  buffer[0] = (uint8_t)(domain_id >> 24);
  buffer[1] = (uint8_t)(domain_id >> 16);
  buffer[2] = (uint8_t)(domain_id >> 8);
  buffer[3] = (uint8_t)domain_id;
  memcpy(buffer + 4, page_key, length);
  MDB_val v = {4 + length, buffer};
  return v;
}

static bool page_key_fits(const lmdb_catalog *c, size_t length) {
  return length + 4 <= (size_t)c->max_key;
}

static uint32_t read_u32(const void *at) {
  uint32_t value;
  memcpy(&value, at, sizeof value);
  return value;
}

/* Finds the id of `domain`: 0, MDB_NOTFOUND or an LMDB error. */
static int find_domain(lmdb_catalog *c, MDB_txn *txn, const char *domain,
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
  }
  return rc;
}

/* Finds a manifest's id and domain id (and its value when `out` is not
 * NULL): 0, MDB_NOTFOUND or an LMDB error. */
static int find_manifest(lmdb_catalog *c, MDB_txn *txn, const char *key,
                         uint32_t *id, uint32_t *domain_id, MDB_val *out) {
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

static int apply_put(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  uint32_t id, domain_id;
  int rc = find_manifest(c, txn, op->manifest_key, &id, &domain_id, NULL);
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
  rc = find_domain(c, txn, op->domain, &domain_id);
  if (rc == MDB_NOTFOUND) {
    if ((rc = mdb_stat(txn, c->domains, &stat)) != 0) {
      return rc;
    }
    if (stat.ms_entries >= UINT32_MAX) {
      return MDB_MAP_FULL;
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

/* Checks an add_pages request against the snapshot `txn` sees; fills
 * op->err for the request's own errors and returns 0 with the manifest's
 * id, or an LMDB error. */
static int check_add(lmdb_catalog *c, MDB_txn *txn, write_op *op,
                     uint32_t *manifest_id, uint32_t *domain_id) {
  uint32_t manifest_domain;
  int rc = find_manifest(c, txn, op->manifest_key, manifest_id,
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
  rc = find_domain(c, txn, op->domain, domain_id);
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

static int apply_add(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  uint32_t manifest_id = 0, domain_id = 0;
  int rc = check_add(c, txn, op, &manifest_id, &domain_id);
  if (rc != 0 || op->err.code != RESHARD_OK) {
    return rc;
  }
  uint8_t buffer[4 + 512];
  for (size_t i = 0; i < op->page_count; i++) {
    MDB_val key =
        page_val(buffer, domain_id, op->page_keys[i], strlen(op->page_keys[i]));
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

static int apply_forget(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  uint32_t domain_id, manifest_id = 0, manifest_domain;
  int rc = find_domain(c, txn, op->domain, &domain_id);
  if (rc == MDB_NOTFOUND) {
    return 0;
  }
  if (rc != 0) {
    return rc;
  }
  if (op->manifest_key != NULL) {
    rc = find_manifest(c, txn, op->manifest_key, &manifest_id, &manifest_domain,
                       NULL);
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
    MDB_val key = page_val(buffer, domain_id, op->page_keys[i], length);
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

static int apply_op(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  switch (op->kind) {
  case WRITE_PUT:
    return apply_put(c, txn, op);
  case WRITE_ADD:
    return apply_add(c, txn, op);
  case WRITE_FORGET:
    return apply_forget(c, txn, op);
  }
  return EINVAL;
}

static void reset_result(write_op *op) {
  reshard_error_clear(&op->err);
  op->created = false;
  op->count = 0;
}

/* Applies the requests [first, end) in one transaction and commits it. */
static int run_txn(lmdb_catalog *c, write_op *first, write_op *end) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(c->env, NULL, 0, &txn);
  if (rc != 0) {
    return rc;
  }
  for (write_op *op = first; op != end && rc == 0; op = op->next) {
    rc = apply_op(c, txn, op);
  }
  if (rc != 0) {
    mdb_txn_abort(txn);
    return rc;
  }
  return mdb_txn_commit(txn);
}

static const char *write_what(const write_op *op) {
  switch (op->kind) {
  case WRITE_PUT:
    return "storing the manifest";
  case WRITE_ADD:
    return "binding the pages";
  case WRITE_FORGET:
    return "forgetting the pages";
  }
  return "writing";
}

/* Commits a batch; returns the number of transactions committed. */
static uint64_t commit_batch(lmdb_catalog *c, write_op *batch) {
  int rc = run_txn(c, batch, NULL);
  if (rc == 0) {
    return 1;
  }
  uint64_t commits = 0;
  for (write_op *op = batch; op != NULL; op = op->next) {
    reset_result(op);
    if (batch->next != NULL) {
      rc = run_txn(c, op, op->next);
    }
    if (rc == 0) {
      commits++;
    } else {
      reset_result(op);
      lmdb_error(c, &op->err, rc, write_what(op));
    }
  }
  return commits;
}

static void writer_main(void *arg) {
  lmdb_catalog *c = arg;
  uv_mutex_lock(&c->lock);
  for (;;) {
    while (c->queue_head == NULL && !c->stopping) {
      uv_cond_wait(&c->wake, &c->lock);
    }
    if (c->queue_head == NULL) {
      break;
    }
    write_op *batch = c->queue_head, *last = batch;
    uint64_t count = 1;
    while (last->next != NULL && count < WRITE_BATCH) {
      last = last->next;
      count++;
    }
    c->queue_head = last->next;
    if (c->queue_head == NULL) {
      c->queue_tail = NULL;
    }
    last->next = NULL;
    uv_mutex_unlock(&c->lock);

    uint64_t commits = commit_batch(c, batch);

    uv_mutex_lock(&c->lock);
    c->commits += commits;
    c->writes += count;
    bool was_empty = c->done_head == NULL;
    if (was_empty) {
      c->done_head = batch;
    } else {
      c->done_tail->next = batch;
    }
    c->done_tail = last;
    if (was_empty) {
      uv_async_send(&c->async);
    }
  }
  c->writer_done = true;
  uv_mutex_unlock(&c->lock);
  uv_async_send(&c->async);
}

/* ---- Loop thread: queueing writes and delivering results ---- */

/* Closes the environment, then lets the directory go to another daemon. */
static void close_env(lmdb_catalog *c) {
  mdb_env_close(c->env);
  close(c->dir_fd);
}

static void finish_close(uv_handle_t *handle) {
  lmdb_catalog *c = handle->data;
  if (c->read_txn != NULL) {
    mdb_txn_abort(c->read_txn);
  }
  close_env(c);
  uv_cond_destroy(&c->wake);
  uv_mutex_destroy(&c->lock);
  reshard_catalog_close_cb cb = c->close_cb;
  void *data = c->close_data;
  free(c);
  if (cb != NULL) {
    cb(data);
  }
}

static void on_async(uv_async_t *handle) {
  lmdb_catalog *c = handle->data;
  uv_mutex_lock(&c->lock);
  write_op *done = c->done_head;
  c->done_head = c->done_tail = NULL;
  bool writer_done = c->writer_done;
  uv_mutex_unlock(&c->lock);
  while (done != NULL) {
    write_op *op = done;
    done = op->next;
    c->pending--;
    if (op->kind == WRITE_PUT) {
      op->put_cb(op->data, &op->err, op->created);
    } else {
      op->count_cb(op->data, &op->err, op->count);
    }
    free(op);
  }
  if (c->pending == 0 && !c->closing) {
    uv_unref((uv_handle_t *)&c->async);
  }
  if (writer_done && c->closing && !c->writer_joined) {
    c->writer_joined = true;
    uv_thread_join(&c->writer);
    uv_close((uv_handle_t *)&c->async, finish_close);
  }
}

/* Allocates a request with copies of its inputs. */
static write_op *op_new(write_kind kind, const char *manifest_key,
                        const char *domain, const uint8_t *record,
                        size_t length, const char *const *page_keys,
                        size_t page_count) {
  reshard_catalog_args copy;
  reshard_catalog_args in = {
      manifest_key, domain, record, length, (const char **)page_keys,
      page_count};
  write_op *op = reshard_catalog_op_alloc(sizeof *op, &in, &copy);
  if (op == NULL) {
    return NULL;
  }
  op->kind = kind;
  op->manifest_key = copy.manifest_key;
  op->domain = copy.domain;
  op->record = copy.record;
  op->length = copy.length;
  op->page_keys = copy.keys;
  op->page_count = copy.key_count;
  return op;
}

static void enqueue(lmdb_catalog *c, write_op *op) {
  if (c->pending++ == 0) {
    uv_ref((uv_handle_t *)&c->async);
  }
  uv_mutex_lock(&c->lock);
  if (c->queue_tail == NULL) {
    c->queue_head = op;
  } else {
    c->queue_tail->next = op;
  }
  c->queue_tail = op;
  uv_cond_signal(&c->wake);
  uv_mutex_unlock(&c->lock);
}

/* ---- Loop thread: reads ---- */

/* Starts (or joins, when nested in a callback) the loop's read snapshot. */
static int read_begin(lmdb_catalog *c, MDB_txn **txn) {
  if (c->read_depth == 0) {
    int rc;
    if (c->read_txn == NULL) {
      rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &c->read_txn);
      if (rc != 0) {
        c->read_txn = NULL;
      }
    } else {
      rc = mdb_txn_renew(c->read_txn);
    }
    if (rc != 0) {
      return rc;
    }
  }
  c->read_depth++;
  *txn = c->read_txn;
  return 0;
}

static void read_end(lmdb_catalog *c) {
  if (--c->read_depth == 0) {
    mdb_txn_reset(c->read_txn);
  }
}

static void lmdb_put_manifest(reshard_catalog *catalog,
                              const char *manifest_key,
                              const char *model_domain, const uint8_t *record,
                              size_t length, reshard_catalog_put_cb cb,
                              void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  MDB_txn *txn;
  int rc = read_begin(c, &txn);
  if (rc != 0) {
    lmdb_error(c, &err, rc, "reading");
    cb(data, &err, false);
    return;
  }
  uint32_t id, domain_id;
  rc = find_manifest(c, txn, manifest_key, &id, &domain_id, NULL);
  read_end(c);
  if (rc == 0) {
    c->writes_skipped++;
    cb(data, &err, false);
    return;
  }
  write_op *op =
      op_new(WRITE_PUT, manifest_key, model_domain, record, length, NULL, 0);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory storing manifest %s",
                      manifest_key);
    cb(data, &err, false);
    return;
  }
  op->put_cb = cb;
  op->data = data;
  enqueue(c, op);
}

static void lmdb_get_manifests(reshard_catalog *catalog,
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
  int rc = read_begin(c, &txn);
  if (rc != 0) {
    free(records);
    lmdb_error(c, &err, rc, "reading manifests");
    cb(data, &err, NULL, 0);
    return;
  }
  for (size_t i = 0; i < count && rc == 0; i++) {
    uint32_t id, domain_id;
    MDB_val value;
    rc = find_manifest(c, txn, keys[i], &id, &domain_id, &value);
    if (rc == 0) {
      records[i].found = true;
      records[i].data = (const uint8_t *)value.mv_data + MANIFEST_HEADER;
      records[i].length = value.mv_size - MANIFEST_HEADER;
    } else if (rc == MDB_NOTFOUND) {
      rc = 0;
    } else {
      lmdb_error(c, &err, rc, keys[i]);
    }
  }
  if (rc != 0) {
    cb(data, &err, NULL, 0);
  } else {
    cb(data, &err, records, count);
  }
  read_end(c);
  free(records);
}

/* True when every page of an add_pages request is bound to the manifest
 * already, in the loop's snapshot; such a request needs no commit. */
static bool all_bound(lmdb_catalog *c, MDB_txn *txn, const char *model_domain,
                      const char *manifest_key, const char *const *page_keys,
                      size_t page_count) {
  uint32_t manifest_id, manifest_domain, domain_id;
  if (find_manifest(c, txn, manifest_key, &manifest_id, &manifest_domain,
                    NULL) != 0 ||
      find_domain(c, txn, model_domain, &domain_id) != 0 ||
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
    MDB_val key = page_val(buffer, domain_id, page_keys[i], length);
    MDB_val value = {sizeof manifest_id, &manifest_id};
    bound = mdb_cursor_get(cursor, &key, &value, MDB_GET_BOTH) == 0;
  }
  mdb_cursor_close(cursor);
  return bound;
}

static void lmdb_add_pages(reshard_catalog *catalog, const char *model_domain,
                           const char *manifest_key,
                           const char *const *page_keys, size_t page_count,
                           reshard_catalog_count_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  MDB_txn *txn;
  if (read_begin(c, &txn) == 0) {
    bool skip =
        all_bound(c, txn, model_domain, manifest_key, page_keys, page_count);
    read_end(c);
    if (skip) {
      c->writes_skipped++;
      cb(data, &err, 0);
      return;
    }
  }
  write_op *op = op_new(WRITE_ADD, manifest_key, model_domain, NULL, 0,
                        page_keys, page_count);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory binding pages to %s",
                      manifest_key);
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  enqueue(c, op);
}

/* True when a forget_pages request would remove nothing, in the loop's
 * snapshot. */
static bool nothing_bound(lmdb_catalog *c, MDB_txn *txn,
                          const char *model_domain, const char *manifest_key,
                          const char *const *page_keys, size_t page_count) {
  uint32_t domain_id, manifest_id = 0, manifest_domain;
  int rc = find_domain(c, txn, model_domain, &domain_id);
  if (rc != 0) {
    return rc == MDB_NOTFOUND;
  }
  if (manifest_key != NULL) {
    rc = find_manifest(c, txn, manifest_key, &manifest_id, &manifest_domain,
                       NULL);
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
    MDB_val key = page_val(buffer, domain_id, page_keys[i], length);
    MDB_val value = {sizeof manifest_id, &manifest_id};
    rc = mdb_cursor_get(cursor, &key, &value,
                        manifest_key ? MDB_GET_BOTH : MDB_SET);
    none = rc == MDB_NOTFOUND;
  }
  mdb_cursor_close(cursor);
  return none;
}

static void lmdb_forget_pages(reshard_catalog *catalog,
                              const char *model_domain,
                              const char *manifest_key,
                              const char *const *page_keys, size_t page_count,
                              reshard_catalog_count_cb cb, void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  MDB_txn *txn;
  if (read_begin(c, &txn) == 0) {
    bool skip = nothing_bound(c, txn, model_domain, manifest_key, page_keys,
                              page_count);
    read_end(c);
    if (skip) {
      c->writes_skipped++;
      cb(data, &err, 0);
      return;
    }
  }
  write_op *op = op_new(WRITE_FORGET, manifest_key, model_domain, NULL, 0,
                        page_keys, page_count);
  if (op == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory forgetting pages");
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  enqueue(c, op);
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

static void lmdb_lookup_pages(reshard_catalog *catalog,
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
  int rc = start == NULL ? ENOMEM : read_begin(c, &txn);
  if (start != NULL && rc != 0) {
    txn = NULL;
  }
  uint32_t domain_id = 0;
  if (rc == 0) {
    rc = find_domain(c, txn, model_domain, &domain_id);
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
    MDB_val key = page_val(buffer, domain_id, page_keys[i], length);
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
    lmdb_error(c, &err, rc, "looking up pages");
    cb(data, &err, NULL);
  }
  if (txn != NULL) {
    read_end(c);
  }
  free(keys);
  free(start);
}

static void lmdb_close(reshard_catalog *catalog, reshard_catalog_close_cb cb,
                       void *data) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  c->closing = true;
  c->close_cb = cb;
  c->close_data = data;
  /* Keep the loop alive until the writer has drained its queue. */
  uv_ref((uv_handle_t *)&c->async);
  uv_mutex_lock(&c->lock);
  c->stopping = true;
  uv_cond_signal(&c->wake);
  uv_mutex_unlock(&c->lock);
}

static const reshard_catalog_vtable lmdb_vtable = {
    .name = "lmdb",
    .lookups_are_local = true,
    .put_manifest = lmdb_put_manifest,
    .get_manifests = lmdb_get_manifests,
    .add_pages = lmdb_add_pages,
    .forget_pages = lmdb_forget_pages,
    .lookup_pages = lmdb_lookup_pages,
    .close = lmdb_close,
};

void reshard_catalog_lmdb_stats_get(const reshard_catalog *catalog,
                                    reshard_catalog_lmdb_stats *out) {
  lmdb_catalog *c = (lmdb_catalog *)catalog;
  uv_mutex_lock(&c->lock);
  out->commits = c->commits;
  out->writes = c->writes;
  uv_mutex_unlock(&c->lock);
  out->writes_skipped = c->writes_skipped;
}

/* ---- Opening ---- */

/* Creates `path` and its missing parents (mkdir -p). */
static int make_dirs(const char *path) {
  size_t length = strlen(path);
  char *copy = malloc(length + 1);
  if (copy == NULL) {
    return ENOMEM;
  }
  memcpy(copy, path, length + 1);
  for (char *p = copy + 1; *p; p++) {
    if (*p == '/') {
      *p = '\0';
      if (mkdir(copy, 0700) != 0 && errno != EEXIST) {
        int saved = errno;
        free(copy);
        return saved;
      }
      *p = '/';
    }
  }
  /* The catalog is readable by the daemon's user only (SPEC §3.5). */
  int rc = mkdir(copy, 0700) != 0 && errno != EEXIST ? errno : 0;
  free(copy);
  return rc;
}

/* Makes sure `path` is a directory that holds nothing but LMDB's files. */
static reshard_status prepare_dir(const char *path, reshard_error *err) {
  struct stat st;
  if (stat(path, &st) != 0) {
    if (errno != ENOENT) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: %s", path, strerror(errno));
    }
    int rc = make_dirs(path);
    if (rc != 0) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: cannot create the directory: "
                               "%s",
                               path, strerror(rc));
    }
    return RESHARD_OK;
  }
  if (!S_ISDIR(st.st_mode)) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: not a directory (the LMDB "
                             "catalog is a directory holding data.mdb and "
                             "lock.mdb); refusing to use it",
                             path);
  }
  DIR *dir = opendir(path);
  if (dir == NULL) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: %s", path, strerror(errno));
  }
  reshard_status status = RESHARD_OK;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    const char *name = entry->d_name;
    if (strcmp(name, ".") != 0 && strcmp(name, "..") != 0 &&
        strcmp(name, "data.mdb") != 0 && strcmp(name, "lock.mdb") != 0) {
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: the directory holds \"%s\", which is not part of "
          "a reshardd catalog; refusing to use it",
          path, name);
      break;
    }
  }
  closedir(dir);
  return status;
}

/* Checks the format record in a read-only transaction, so a foreign
 * environment is never written. Sets *fresh for an empty environment. */
static reshard_status check_format(lmdb_catalog *c, bool *fresh,
                                   reshard_error *err) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn);
  if (rc != 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: cannot read: %s", c->path,
                             mdb_strerror(rc));
  }
  reshard_status status = RESHARD_OK;
  MDB_dbi dbi;
  rc = mdb_dbi_open(txn, DB_META, 0, &dbi);
  *fresh = false;
  if (rc == MDB_NOTFOUND) {
    MDB_dbi main_db;
    MDB_stat stat;
    rc = mdb_dbi_open(txn, NULL, 0, &main_db);
    if (rc == 0) {
      rc = mdb_stat(txn, main_db, &stat);
    }
    if (rc == 0 && stat.ms_entries == 0) {
      *fresh = true;
    } else if (rc == 0) {
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: holds an LMDB environment that is not a reshardd "
          "catalog (no meta record); refusing to use it",
          c->path);
    }
  } else if (rc == 0) {
    MDB_val key = str_val(META_FORMAT_KEY), value;
    rc = mdb_get(txn, dbi, &key, &value);
    char expected[64];
    snprintf(expected, sizeof expected, "%s %u", RESHARD_CATALOG_LMDB_FORMAT,
             RESHARD_CATALOG_LMDB_VERSION);
    size_t prefix = strlen(RESHARD_CATALOG_LMDB_FORMAT) + 1;
    if (rc == MDB_NOTFOUND ||
        (rc == 0 && (value.mv_size < prefix ||
                     memcmp(value.mv_data, expected, prefix) != 0))) {
      rc = 0;
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: holds an LMDB environment whose meta record is "
          "not reshardd's; refusing to use it",
          c->path);
    } else if (rc == 0 &&
               (value.mv_size != strlen(expected) ||
                memcmp(value.mv_data, expected, value.mv_size) != 0)) {
      status = reshard_error_set(
          err, RESHARD_INVALID_ARGUMENT,
          "catalog lmdb:%s: catalog format \"%.*s\"; this reshardd reads "
          "\"%s\" only; refusing to use it",
          c->path, (int)(value.mv_size > 40 ? 40 : value.mv_size),
          (const char *)value.mv_data, expected);
    }
  }
  if (rc != 0 && status == RESHARD_OK) {
    status = reshard_error_set(
        err, RESHARD_INVALID_ARGUMENT,
        "catalog lmdb:%s: not a readable reshardd catalog (%s); refusing to "
        "use it",
        c->path, mdb_strerror(rc));
  }
  mdb_txn_abort(txn);
  return status;
}

/* Opens (creating them in a fresh environment) the named databases. */
static reshard_status open_dbs(lmdb_catalog *c, bool fresh,
                               reshard_error *err) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(c->env, NULL, 0, &txn);
  if (rc != 0) {
    return lmdb_error(c, err, rc, "opening");
  }
  unsigned create = fresh ? MDB_CREATE : 0;
  if ((rc = mdb_dbi_open(txn, DB_META, create, &c->meta)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_MANIFESTS, create, &c->manifests)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_MANIFEST_KEYS, create | MDB_INTEGERKEY,
                         &c->manifest_keys)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_DOMAINS, create, &c->domains)) == 0 &&
      (rc = mdb_dbi_open(txn, DB_PAGES,
                         create | MDB_DUPSORT | MDB_DUPFIXED | MDB_INTEGERDUP,
                         &c->pages)) == 0 &&
      fresh) {
    char format[64];
    int n = snprintf(format, sizeof format, "%s %u",
                     RESHARD_CATALOG_LMDB_FORMAT, RESHARD_CATALOG_LMDB_VERSION);
    MDB_val key = str_val(META_FORMAT_KEY), value = {(size_t)n, format};
    /* Another daemon may have initialised it in the meantime. */
    rc = mdb_put(txn, c->meta, &key, &value, MDB_NOOVERWRITE);
    if (rc == MDB_KEYEXIST) {
      rc = 0;
    }
  }
  if (rc != 0) {
    mdb_txn_abort(txn);
    if (rc == MDB_NOTFOUND || rc == MDB_INCOMPATIBLE) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: a database of the catalog is "
                               "missing or of another kind (%s); refusing to "
                               "use it",
                               c->path, mdb_strerror(rc));
    }
    return lmdb_error(c, err, rc, "opening");
  }
  rc = mdb_txn_commit(txn);
  if (rc != 0) {
    return lmdb_error(c, err, rc, "initialising");
  }
  return RESHARD_OK;
}

static void log_opened(lmdb_catalog *c, bool fresh, int dead_readers) {
  reshard_log_line line;
  if (!reshard_log_begin(&line, RESHARD_LOG_INFO, "catalog opened")) {
    return;
  }
  MDB_txn *txn;
  MDB_stat manifests = {0}, pages = {0}, domains = {0};
  if (mdb_txn_begin(c->env, NULL, MDB_RDONLY, &txn) == 0) {
    mdb_stat(txn, c->manifests, &manifests);
    mdb_stat(txn, c->pages, &pages);
    mdb_stat(txn, c->domains, &domains);
    mdb_txn_abort(txn);
  }
  reshard_log_str(&line, "catalog", "lmdb");
  reshard_log_str(&line, "path", c->path);
  reshard_log_bool(&line, "created", fresh);
  reshard_log_u64(&line, "domains", domains.ms_entries);
  reshard_log_u64(&line, "manifests", manifests.ms_entries);
  reshard_log_u64(&line, "bindings", pages.ms_entries);
  reshard_log_u64(&line, "map_size", c->map_size);
  if (dead_readers > 0) {
    reshard_log_u64(&line, "stale_readers_cleared", (uint64_t)dead_readers);
  }
  reshard_log_end(&line);
}

/* LMDB lets processes share an environment, but a daemon's caches assume
 * that only it writes the catalog: a second reshardd on the same directory
 * is refused. flock on the directory itself leaves LMDB's own fcntl locks
 * on lock.mdb alone, and the kernel drops it when the holder dies. */
static reshard_status lock_dir(const char *path, int *fd, reshard_error *err) {
  *fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (*fd < 0) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: %s", path, strerror(errno));
  }
  if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    close(*fd);
    return reshard_error_set(
        err, RESHARD_UNAVAILABLE,
        "catalog lmdb:%s: %s; one reshardd per catalog directory", path,
        error == EWOULDBLOCK ? "in use by another reshardd process"
                             : strerror(error));
  }
  return RESHARD_OK;
}

reshard_status reshard_catalog_lmdb_open(uv_loop_t *loop, const char *path,
                                         uint64_t map_size,
                                         reshard_catalog **out,
                                         reshard_error *err) {
  *out = NULL;
  if (path == NULL || path[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb: needs a directory (lmdb:PATH)");
  }
  if (map_size == 0) {
    map_size = RESHARD_CATALOG_LMDB_DEFAULT_MAP_SIZE;
  }
  reshard_status status = prepare_dir(path, err);
  if (status != RESHARD_OK) {
    return status;
  }
  size_t path_length = strlen(path);
  lmdb_catalog *c = calloc(1, sizeof *c + path_length + 1);
  if (c == NULL) {
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: out of memory", path);
  }
  memcpy(c->path, path, path_length + 1);
  c->map_size = map_size;
  status = lock_dir(path, &c->dir_fd, err);
  if (status != RESHARD_OK) {
    free(c);
    return status;
  }
  int rc = mdb_env_create(&c->env);
  if (rc != 0) {
    close(c->dir_fd);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL, "catalog lmdb:%s: %s", path,
                             mdb_strerror(rc));
  }
  if ((rc = mdb_env_set_maxdbs(c->env, 8)) == 0) {
    rc = mdb_env_set_mapsize(c->env, (size_t)map_size);
  }
  if (rc == 0) {
    rc = mdb_env_open(c->env, path, MDB_NOTLS, 0600);
  }
  if (rc != 0) {
    close_env(c);
    free(c);
    if (rc == MDB_INVALID) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: data.mdb is not an LMDB "
                               "file (corrupted or foreign); refusing to use "
                               "it",
                               path);
    }
    if (rc == MDB_VERSION_MISMATCH) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: written by another LMDB "
                               "version (%s); refusing to use it",
                               path, mdb_strerror(rc));
    }
    if (rc == EROFS || rc == EACCES) {
      return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                               "catalog lmdb:%s: the directory is not "
                               "writable (%s); reshardd writes its catalog "
                               "there: make it writable or choose another "
                               "--catalog",
                               path, mdb_strerror(rc));
    }
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "catalog lmdb:%s: cannot open: %s", path,
                             mdb_strerror(rc));
  }
  /* Reader slots of a process that died (kill -9) are freed here. */
  int dead = 0;
  mdb_reader_check(c->env, &dead);
  c->max_key = mdb_env_get_maxkeysize(c->env);
  if (c->max_key > 512) {
    c->max_key = 512;
  }
  /* The env's map may be larger than asked for when the file is. */
  MDB_envinfo info;
  if (mdb_env_info(c->env, &info) == 0) {
    c->map_size = info.me_mapsize;
  }
  bool fresh = false;
  status = check_format(c, &fresh, err);
  if (status == RESHARD_OK) {
    status = open_dbs(c, fresh, err);
  }
  if (status != RESHARD_OK) {
    close_env(c);
    free(c);
    return status;
  }
  c->base.vtable = &lmdb_vtable;
  c->base.loop = loop;
  c->async.data = c;
  if (uv_mutex_init(&c->lock) != 0) {
    close_env(c);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot create a mutex", path);
  }
  if (uv_cond_init(&c->wake) != 0) {
    uv_mutex_destroy(&c->lock);
    close_env(c);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot create a condition",
                             path);
  }
  if (uv_async_init(loop, &c->async, on_async) != 0) {
    uv_cond_destroy(&c->wake);
    uv_mutex_destroy(&c->lock);
    close_env(c);
    free(c);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot create an async handle",
                             path);
  }
  uv_unref((uv_handle_t *)&c->async);
  if (uv_thread_create(&c->writer, writer_main, c) != 0) {
    /* Close the handle; finish_close frees the rest (the writer is not
     * running, so nothing else refers to the catalog). */
    c->writer_joined = true;
    uv_close((uv_handle_t *)&c->async, finish_close);
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog lmdb:%s: cannot start the writer thread",
                             path);
  }
  log_opened(c, fresh, dead);
  *out = &c->base;
  return RESHARD_OK;
}
