/* What the LMDB catalog's files share (daemon/catalog/lmdb/): the catalog's
 * state, a queued write, and the functions one file calls in another.
 * Internal to the backend; catalog_lmdb.h is its contract.
 *
 *   catalog_lmdb.c    opening (directory, lock, format, databases), errors,
 *                     closing, the vtable
 *   lmdb_txn.c        the writer thread and its batches; the loop's queue,
 *                     deliveries and read snapshot
 *   lmdb_manifests.c  manifests and model domains
 *   lmdb_pages.c      page bindings
 *   lmdb_objects.c    objects: placements and memory pools
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
 * idle catalog never keeps the loop alive.
 *
 * Named databases (docs/catalog.md):
 *   meta           "format" -> "reshardd-catalog 2" (or 1, see below)
 *   manifests      manifest key -> u32 id, u32 domain id, record
 *   manifest_keys  u32 id -> manifest key + NUL
 *   domains        model domain -> u32 id
 *   pages          u32 domain id (big-endian) + page key -> u32 manifest
 *                  ids (sorted duplicates); in format 2 a page key of
 *                  lowercase hex of even length is stored as the bytes it
 *                  spells, and the top bit of the domain id says so
 *   placements     placement id -> record
 *   memory_pools   memory pool id -> record
 * The object databases are created when missing, so a catalog written
 * before they existed opens and gains them.
 *
 * Page keys, format 2: content-addressed keys are hex digests, and storing
 * 64 hex characters as their 32 bytes is what brings a binding under SPEC
 * §7's 64 bytes beyond the key (docs/catalog.md "Memory per binding at ten
 * million"). The marker that a key is packed is the top bit of its
 * big-endian domain id rather than a tag byte: it costs no byte, keeps the
 * page-key limit at 511 - 4 = 507, and is free because domain ids are dense
 * (the count of domains when one is created) and are refused from 2^31 on
 * (lmdb_manifests.c), so no real id has that bit. Only the lowercase even-
 * length spelling packs, so each packed key decodes to exactly one text;
 * a raw key that happens to be the same bytes has the bit clear, so the two
 * never meet. One domain's pages are two ranges of the B-tree (raw keys,
 * then packed); nothing scans a domain, and a scan would walk both.
 * A catalog of format 1 (written before format 2) keeps every key raw: the
 * format is read at open and decides for the catalog's whole life. An
 * older reshardd reads "reshardd-catalog 1" only, so it refuses a format 2
 * catalog instead of misreading its packed keys; a separate meta key would
 * have been ignored by it, hence the version in the format record. */
#ifndef RESHARD_CATALOG_LMDB_INTERNAL_H
#define RESHARD_CATALOG_LMDB_INTERNAL_H

#include <lmdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <uv.h>

#include "catalog/lmdb/catalog_lmdb.h"

typedef enum write_kind {
  WRITE_PUT,
  WRITE_ADD,
  WRITE_FORGET,
  WRITE_PUT_OBJECT,
  WRITE_FORGET_OBJECT,
} write_kind;

/* One queued write, allocated in one block with copies of its inputs. */
typedef struct write_op {
  struct write_op *next;
  write_kind kind;
  /* The object's id for object writes; NULL: forget every binding of the
   * pages. */
  const char *manifest_key;
  const char *domain;
  reshard_catalog_object_kind object; /* object writes */
  const uint8_t *record;
  size_t length;
  const char **page_keys;
  size_t page_count;
  reshard_catalog_put_cb put_cb;
  reshard_catalog_count_cb count_cb;
  reshard_catalog_removed_cb removed_cb;
  void *data;
  /* Results, filled by the writer. */
  reshard_error err;
  bool created;
  uint64_t count; /* for WRITE_FORGET_OBJECT: 1 when removed */
} write_op;

typedef struct lmdb_catalog {
  reshard_catalog base;
  MDB_env *env;
  MDB_dbi meta, manifests, manifest_keys, domains, pages;
  MDB_dbi objects[RESHARD_CATALOG_OBJECT_KINDS]; /* by kind */
  uint64_t map_size;
  int max_key;
  bool packed_keys; /* format 2: hex page keys are stored packed */

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

/* ---- Keys and values ---- */

static inline MDB_val str_val(const char *text) {
  MDB_val v = {strlen(text), (void *)text};
  return v;
}

static inline uint32_t read_u32(const void *at) {
  uint32_t value;
  memcpy(&value, at, sizeof value);
  return value;
}

/* The top bit of a pages key's domain id: the page key is stored packed.
 * Domain ids stay below it in every catalog. */
#define LMDB_PACKED_KEY 0x80000000u
#define LMDB_MAX_DOMAINS LMDB_PACKED_KEY

/* ---- catalog_lmdb.c ---- */

/* Sets `err` for LMDB error `rc` met while doing `what`: RESOURCE_EXHAUSTED
 * for a full map or disk, INTERNAL otherwise; returns the code. */
reshard_status reshard__lmdb_error(const lmdb_catalog *c, reshard_error *err,
                                   int rc, const char *what);

/* The async handle's close callback: frees the catalog, then calls the
 * close callback. */
void reshard__lmdb_finish_close(uv_handle_t *handle);

/* ---- lmdb_txn.c ---- */

/* The writer thread's body; `arg` is the catalog. */
void reshard__lmdb_writer_main(void *arg);

/* The async handle's callback: delivers finished writes on the loop. */
void reshard__lmdb_on_async(uv_async_t *handle);

/* Allocates a request with copies of its inputs; NULL when out of memory. */
write_op *reshard__lmdb_op_new(write_kind kind, const char *manifest_key,
                               const char *domain, const uint8_t *record,
                               size_t length, const char *const *page_keys,
                               size_t page_count);

/* Hands `op` to the writer thread. */
void reshard__lmdb_enqueue(lmdb_catalog *c, write_op *op);

/* Starts (or joins, when nested in a callback) the loop's read snapshot:
 * 0 or an LMDB error. Every success is paired with reshard__lmdb_read_end. */
int reshard__lmdb_read_begin(lmdb_catalog *c, MDB_txn **txn);
void reshard__lmdb_read_end(lmdb_catalog *c);

/* ---- lmdb_manifests.c ---- */

/* Finds the id of `domain`: 0, MDB_NOTFOUND or an LMDB error. */
int reshard__lmdb_find_domain(lmdb_catalog *c, MDB_txn *txn, const char *domain,
                              uint32_t *id);

/* Finds a manifest's id and domain id (and its value when `out` is not
 * NULL): 0, MDB_NOTFOUND or an LMDB error. */
int reshard__lmdb_find_manifest(lmdb_catalog *c, MDB_txn *txn, const char *key,
                                uint32_t *id, uint32_t *domain_id,
                                MDB_val *out);

/* Writer thread: applies a WRITE_PUT in `txn`. */
int reshard__lmdb_apply_put(lmdb_catalog *c, MDB_txn *txn, write_op *op);

void reshard__lmdb_put_manifest(reshard_catalog *catalog,
                                const char *manifest_key,
                                const char *model_domain, const uint8_t *record,
                                size_t length, reshard_catalog_put_cb cb,
                                void *data);
void reshard__lmdb_get_manifests(reshard_catalog *catalog,
                                 const char *const *keys, size_t count,
                                 reshard_catalog_get_cb cb, void *data);

/* ---- lmdb_pages.c ---- */

/* Writes into `buffer` (4 + `length` bytes at least) the pages key of
 * `page_key` (`length` bytes, no NUL) in domain `domain_id` (below
 * LMDB_PACKED_KEY), packed when `packed_format` and the key is lowercase
 * hex of even length, and returns it. Every operation on a binding (add,
 * lookup, forget by manifest, forget of every binding of a page) builds its
 * key here, so all see the same key. */
MDB_val reshard__lmdb_page_key(bool packed_format, uint8_t *buffer,
                               uint32_t domain_id, const char *page_key,
                               size_t length);

/* The inverse, for whatever reads page keys back out of the database:
 * writes the page key with a NUL into `out` (`capacity` bytes; twice
 * key->mv_size always suffice), its length into *length and its domain id
 * into *domain_id. 0; MDB_BAD_VALSIZE when `capacity` is too small;
 * MDB_CORRUPTED for a key reshard__lmdb_page_key never writes in a catalog
 * of that format. */
int reshard__lmdb_page_key_decode(bool packed_format, const MDB_val *key,
                                  uint32_t *domain_id, char *out,
                                  size_t capacity, size_t *length);

/* Writer thread: applies a WRITE_ADD or a WRITE_FORGET in `txn`. */
int reshard__lmdb_apply_add(lmdb_catalog *c, MDB_txn *txn, write_op *op);
int reshard__lmdb_apply_forget(lmdb_catalog *c, MDB_txn *txn, write_op *op);

void reshard__lmdb_add_pages(reshard_catalog *catalog, const char *model_domain,
                             const char *manifest_key,
                             const char *const *page_keys, size_t page_count,
                             reshard_catalog_count_cb cb, void *data);
void reshard__lmdb_forget_pages(reshard_catalog *catalog,
                                const char *model_domain,
                                const char *manifest_key,
                                const char *const *page_keys, size_t page_count,
                                reshard_catalog_count_cb cb, void *data);
void reshard__lmdb_lookup_pages(reshard_catalog *catalog,
                                const char *model_domain,
                                const char *const *page_keys, size_t page_count,
                                reshard_catalog_lookup_cb cb, void *data);

/* ---- lmdb_objects.c ---- */

/* Writer thread: applies a WRITE_PUT_OBJECT or a WRITE_FORGET_OBJECT in
 * `txn`. */
int reshard__lmdb_apply_put_object(lmdb_catalog *c, MDB_txn *txn, write_op *op);
int reshard__lmdb_apply_forget_object(lmdb_catalog *c, MDB_txn *txn,
                                      write_op *op);

void reshard__lmdb_put_object(reshard_catalog *catalog,
                              reshard_catalog_object_kind kind, const char *id,
                              const uint8_t *record, size_t length,
                              reshard_catalog_put_cb cb, void *data);
void reshard__lmdb_get_objects(reshard_catalog *catalog,
                               reshard_catalog_object_kind kind,
                               const char *const *ids, size_t count,
                               reshard_catalog_get_cb cb, void *data);
void reshard__lmdb_forget_object(reshard_catalog *catalog,
                                 reshard_catalog_object_kind kind,
                                 const char *id, reshard_catalog_removed_cb cb,
                                 void *data);

#endif
