/* Tests daemon/catalog/lmdb/ through the catalog interface on a real
 * libuv loop: manifests, idempotent bindings, lookups, forgetting, reopening,
 * batched commits, a full map, the refusal of foreign or corrupted
 * directories without touching a byte of them, and objects (placements and
 * memory pools): stored once, forgotten, durable across a reopen and a
 * kill -9, and added to a catalog written before they existed; page keys of
 * lowercase hex stored packed beside raw ones (format 2), and a format 1
 * catalog going on with raw keys. */
#define _XOPEN_SOURCE 700
#include <criterion/criterion.h>
#include <ftw.h>
#include <lmdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catalog/catalog_open.h"
#include "catalog/lmdb/catalog_lmdb.h"
#include "catalog/lmdb/lmdb_internal.h"

#define CATALOG_TEST_RECORD "rec"
#include "../catalog_results.h"

typedef catalog_result result;

static uv_loop_t loop;
static reshard_catalog *catalog;
static char dir[64];
static const char *const domain = "d0";

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

static void open_catalog(uint64_t map_size) {
  reshard_error err;
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, dir, map_size, &catalog, &err),
               RESHARD_OK, "%s", err.message);
}

static void closed(void *data) {
  *(int *)data += 1;
}

static void close_catalog(void) {
  int done = 0;
  catalog->vtable->close(catalog, closed, &done);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(done, 1);
  catalog = NULL;
}

static void setup(void) {
  cr_assert_eq(uv_loop_init(&loop), 0);
  snprintf(dir, sizeof dir, "/tmp/reshard-lmdb-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  open_catalog(0);
}

static void teardown(void) {
  if (catalog != NULL) {
    close_catalog();
  }
  cr_assert_eq(uv_loop_close(&loop), 0);
  nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

TestSuite(catalog_lmdb, .init = setup, .fini = teardown);

/* Runs the loop until every queued write has called back. */
static void settle(void) {
  uv_run(&loop, UV_RUN_DEFAULT);
}

static void publish(const char *key, const char *in_domain, result *r) {
  catalog->vtable->put_manifest(catalog, key, in_domain, (const uint8_t *)"rec",
                                3, on_put, r);
  settle();
}

static void add(const char *key, const char *const *pages, size_t n,
                result *r) {
  catalog->vtable->add_pages(catalog, domain, key, pages, n, on_count, r);
  settle();
}

static void forget(const char *key, const char *const *pages, size_t n,
                   result *r) {
  catalog->vtable->forget_pages(catalog, domain, key, pages, n, on_count, r);
  settle();
}

static void lookup(const char *in_domain, const char *const *pages, size_t n,
                   result *r) {
  catalog->vtable->lookup_pages(catalog, in_domain, pages, n, on_lookup, r);
  settle();
}

Test(catalog_lmdb, manifests_are_stored_once_and_survive_a_reopen) {
  result r = {0};
  publish("m1", domain, &r);
  cr_assert_eq(r.calls, 1);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
  publish("m1", domain, &r);
  cr_assert_eq(r.calls, 2);
  cr_assert(!r.created);
  const char *keys[] = {"m1", "m2"};
  catalog->vtable->get_manifests(catalog, keys, 2, on_get, &r);
  cr_assert_eq(r.calls, 3);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.found, 1);

  close_catalog();
  open_catalog(0);
  catalog->vtable->get_manifests(catalog, keys, 2, on_get, &r);
  cr_assert_eq(r.found, 1);
  publish("m1", domain, &r);
  cr_assert(!r.created);
}

Test(catalog_lmdb, bindings) {
  result r = {0};
  const char *pages[] = {"p0", "p1", "p2"};
  add("m1", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_NOT_FOUND);
  cr_assert(strstr(r.err.message, "m1") != NULL);

  publish("m1", domain, &r);
  publish("m2", domain, &r);
  publish("m3", "other", &r);
  add("m3", pages, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_INVALID_ARGUMENT);

  add("m1", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, 2);
  add("m1", pages, 2, &r);
  cr_assert_eq(r.count, 0); /* idempotent */
  add("m2", pages + 1, 1, &r);
  cr_assert_eq(r.count, 1);
  const char *twice[] = {"p2", "p2"};
  add("m2", twice, 2, &r);
  cr_assert_eq(r.count, 1);
  forget("m2", pages + 2, 1, &r);
  cr_assert_eq(r.count, 1);

  lookup(domain, pages, 3, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(r.domain_known);
  cr_assert_eq(r.page_start[0], 0);
  cr_assert_eq(r.page_start[1], 1);
  cr_assert_eq(r.page_start[2], 3);
  cr_assert_eq(r.page_start[3], 3);
  cr_assert_str_eq(r.keys[0], "m1");
  cr_assert_str_eq(r.keys[1], "m1");
  cr_assert_str_eq(r.keys[2], "m2");

  /* Forget one manifest's binding, then every binding of a page. */
  forget("m1", pages + 1, 1, &r);
  cr_assert_eq(r.count, 1);
  forget("m1", pages + 1, 1, &r);
  cr_assert_eq(r.count, 0);
  forget(NULL, pages, 3, &r);
  cr_assert_eq(r.count, 2);
  lookup(domain, pages, 3, &r);
  cr_assert(r.domain_known);
  cr_assert_eq(r.page_start[3], 0);

  lookup("unknown", pages, 3, &r);
  cr_assert(!r.domain_known);
  cr_assert_eq(r.page_start[3], 0);
  catalog->vtable->forget_pages(catalog, "unknown", NULL, pages, 3, on_count,
                                &r);
  settle();
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.count, 0);
}

Test(catalog_lmdb, bindings_survive_a_reopen) {
  result r = {0};
  publish("m1", domain, &r);
  const char *pages[] = {"a", "b"};
  add("m1", pages, 2, &r);
  cr_assert_eq(r.count, 2);
  close_catalog();
  open_catalog(0);
  lookup(domain, pages, 2, &r);
  cr_assert(r.domain_known);
  cr_assert_eq(r.page_start[2], 2);
  cr_assert_str_eq(r.keys[1], "m1");
}

Test(catalog_lmdb, long_page_keys_are_refused) {
  result r = {0};
  publish("m1", domain, &r);
  char long_key[600];
  memset(long_key, 'k', sizeof long_key - 1);
  long_key[sizeof long_key - 1] = '\0';
  const char *pages[] = {"fine", long_key};
  add("m1", pages, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(r.err.message, "page_keys[1]") != NULL, "%s", r.err.message);
  /* Nothing of the request was written. */
  lookup(domain, pages, 2, &r);
  cr_assert_eq(r.page_start[2], 0);
}

/* Many writes queued at once: each is answered exactly once, in fewer
 * transactions than writes. */
static int batch_calls;
static void on_batch(void *data, const reshard_error *err, uint64_t count) {
  (void)data;
  cr_assert_eq(err->code, RESHARD_OK, "%s", err->message);
  cr_assert_eq(count, 1);
  batch_calls++;
}

Test(catalog_lmdb, queued_writes_share_commits) {
  result r = {0};
  publish("m1", domain, &r);
  enum { N = 2000 };
  static char text[N][16];
  batch_calls = 0;
  for (int i = 0; i < N; i++) {
    snprintf(text[i], sizeof text[i], "page-%d", i);
    const char *page = text[i];
    catalog->vtable->add_pages(catalog, domain, "m1", &page, 1, on_batch, NULL);
  }
  settle();
  cr_assert_eq(batch_calls, N);
  reshard_catalog_lmdb_stats stats;
  reshard_catalog_lmdb_stats_get(catalog, &stats);
  cr_assert_geq(stats.writes, N);
  cr_assert_lt(stats.commits, stats.writes);
}

/* Reads nested in a read's callback share its snapshot. */
static void on_nested_lookup(void *data, const reshard_error *err,
                             const reshard_catalog_pages *pages) {
  result *r = data;
  cr_assert_eq(err->code, RESHARD_OK);
  const char *key = pages->manifest_keys[0];
  catalog->vtable->get_manifests(catalog, &key, 1, on_get, r);
  cr_assert_str_eq(pages->manifest_keys[0], "m1");
}

Test(catalog_lmdb, nested_reads) {
  result r = {0};
  publish("m1", domain, &r);
  const char *page = "p";
  add("m1", &page, 1, &r);
  int before = r.calls;
  catalog->vtable->lookup_pages(catalog, domain, &page, 1, on_nested_lookup,
                                &r);
  cr_assert_eq(r.calls, before + 1);
  cr_assert_eq(r.found, 1);
}

Test(catalog_lmdb, close_answers_pending_writes_first) {
  result r = {0};
  publish("m1", domain, &r);
  const char *page = "p";
  result pending = {0};
  catalog->vtable->add_pages(catalog, domain, "m1", &page, 1, on_count,
                             &pending);
  int done = 0;
  catalog->vtable->close(catalog, closed, &done);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(pending.calls, 1);
  cr_assert_eq(pending.count, 1);
  cr_assert_eq(done, 1);
  open_catalog(0);
  lookup(domain, &page, 1, &r);
  cr_assert_eq(r.page_start[1], 1);
}

Test(catalog_lmdb, a_full_map_is_resource_exhausted) {
  close_catalog();
  nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
  cr_assert_eq(mkdir(dir, 0755), 0);
  open_catalog(256 << 10);
  result r = {0};
  publish("m1", domain, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  char text[64][80];
  const char *pages[64];
  uint64_t acked = 0;
  for (int round = 0; round < 1000; round++) {
    for (int i = 0; i < 64; i++) {
      snprintf(text[i], sizeof text[i], "%070d", round * 64 + i);
      pages[i] = text[i];
    }
    add("m1", pages, 64, &r);
    if (r.err.code != RESHARD_OK) {
      break;
    }
    acked += r.count;
  }
  cr_assert_eq(r.err.code, RESHARD_RESOURCE_EXHAUSTED, "%s", r.err.message);
  cr_assert(strstr(r.err.message, "full") != NULL, "%s", r.err.message);
  cr_assert_gt(acked, 0);
  /* Reads still work, and what was acknowledged is there. */
  const char *first = "0000000000000000000000000000000000000000000000000000000"
                      "000000000000000";
  lookup(domain, &first, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.page_start[1], 1);
}

/* ---- Refusals: never a byte changed ---- */

static char *read_file(const char *path, size_t *length) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "%s", path);
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc((size_t)size + 1);
  cr_assert_eq(fread(data, 1, (size_t)size, f), (size_t)size);
  fclose(f);
  *length = (size_t)size;
  return data;
}

static void write_file(const char *path, const void *data, size_t length) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s", path);
  cr_assert_eq(fwrite(data, 1, length, f), length);
  fclose(f);
}

/* Opening must fail with INVALID_ARGUMENT naming the path and `what`, and
 * leave `file` byte for byte as it was. */
static void expect_refused(const char *path, const char *file,
                           const char *what) {
  size_t before_length, after_length;
  char *before = read_file(file, &before_length);
  reshard_catalog *other = NULL;
  reshard_error err;
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &other, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert_null(other);
  cr_assert(strstr(err.message, path) != NULL, "%s", err.message);
  cr_assert(strstr(err.message, what) != NULL, "%s", err.message);
  char *after = read_file(file, &after_length);
  cr_assert_eq(before_length, after_length);
  cr_assert_eq(memcmp(before, after, before_length), 0,
               "%s changed while being refused", file);
  free(before);
  free(after);
}

static void make_dir(const char *path) {
  cr_assert_eq(mkdir(path, 0755), 0, "%s", path);
}

Test(catalog_lmdb, refuses_a_file_and_a_directory_of_other_files) {
  char path[128], file[160];
  snprintf(path, sizeof path, "%s/plain-file", dir);
  write_file(path, "hello", 5);
  expect_refused(path, path, "not a directory");

  snprintf(path, sizeof path, "%s/other", dir);
  make_dir(path);
  snprintf(file, sizeof file, "%s/notes.txt", path);
  write_file(file, "mine", 4);
  expect_refused(path, file, "notes.txt");
}

Test(catalog_lmdb, refuses_a_corrupted_data_file) {
  char path[128], file[160];
  snprintf(path, sizeof path, "%s/garbage", dir);
  make_dir(path);
  snprintf(file, sizeof file, "%s/data.mdb", path);
  static unsigned char junk[16384];
  for (size_t i = 0; i < sizeof junk; i++) {
    junk[i] = (unsigned char)(i * 2654435761u >> 13);
  }
  write_file(file, junk, sizeof junk);
  expect_refused(path, file, "not an LMDB file");

  /* A real catalog whose header pages were overwritten. */
  snprintf(path, sizeof path, "%s/real", dir);
  reshard_catalog *real = NULL;
  reshard_error err;
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &real, &err),
               RESHARD_OK, "%s", err.message);
  int done = 0;
  real->vtable->close(real, closed, &done);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(done, 1);
  snprintf(file, sizeof file, "%s/data.mdb", path);
  size_t length;
  char *data = read_file(file, &length);
  cr_assert_geq(length, 8192);
  memset(data, 0x5a, 8192);
  write_file(file, data, length);
  free(data);
  expect_refused(path, file, "not an LMDB file");
}

/* Creates an LMDB environment at `path` the way another program would. */
static void foreign_env(const char *path, const char *db_name, const char *key,
                        const char *value) {
  make_dir(path);
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi dbi;
  cr_assert_eq(mdb_env_create(&env), 0);
  cr_assert_eq(mdb_env_set_maxdbs(env, 4), 0);
  cr_assert_eq(mdb_env_open(env, path, 0, 0644), 0);
  cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
  cr_assert_eq(mdb_dbi_open(txn, db_name, MDB_CREATE, &dbi), 0);
  MDB_val k = {strlen(key), (void *)key}, v = {strlen(value), (void *)value};
  cr_assert_eq(mdb_put(txn, dbi, &k, &v, 0), 0);
  cr_assert_eq(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

Test(catalog_lmdb, refuses_foreign_and_other_version_environments) {
  char path[128], file[160];
  snprintf(path, sizeof path, "%s/foreign", dir);
  foreign_env(path, NULL, "hello", "world");
  snprintf(file, sizeof file, "%s/data.mdb", path);
  expect_refused(path, file, "not a reshardd catalog");

  snprintf(path, sizeof path, "%s/other-meta", dir);
  foreign_env(path, "meta", "format", "somebody-else 1");
  snprintf(file, sizeof file, "%s/data.mdb", path);
  expect_refused(path, file, "not reshardd's");

  snprintf(path, sizeof path, "%s/newer", dir);
  foreign_env(path, "meta", "format", "reshardd-catalog 3");
  snprintf(file, sizeof file, "%s/data.mdb", path);
  expect_refused(path, file,
                 "catalog format \"reshardd-catalog 3\"; this reshardd reads "
                 "\"reshardd-catalog 1\" and \"reshardd-catalog 2\" only");
}

Test(catalog_lmdb, creates_missing_directories) {
  close_catalog();
  char path[128];
  snprintf(path, sizeof path, "%s/a/b/c", dir);
  reshard_error err;
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &catalog, &err),
               RESHARD_OK, "%s", err.message);
  struct stat st;
  char file[160];
  snprintf(file, sizeof file, "%s/data.mdb", path);
  cr_assert_eq(stat(file, &st), 0);
}

Test(catalog_lmdb, the_dispatcher_opens_lmdb) {
  close_catalog();
  char spec[96];
  snprintf(spec, sizeof spec, "lmdb:%s", dir);
  reshard_error err;
  cr_assert_eq(reshard_catalog_open(&loop, spec, &catalog, &err), RESHARD_OK,
               "%s", err.message);
  cr_assert_str_eq(catalog->vtable->name, "lmdb");
}

/* ---- Objects: placements and memory pools ---- */

static void put_object(reshard_catalog_object_kind kind, const char *id,
                       result *r) {
  catalog->vtable->put_object(catalog, kind, id, (const uint8_t *)"rec", 3,
                              on_put, r);
  settle();
}

static void get_objects(reshard_catalog_object_kind kind,
                        const char *const *ids, size_t n, result *r) {
  catalog->vtable->get_objects(catalog, kind, ids, n, on_get, r);
  settle();
}

static void forget_object(reshard_catalog_object_kind kind, const char *id,
                          result *r) {
  catalog->vtable->forget_object(catalog, kind, id, on_removed, r);
  settle();
}

#define PLACEMENT RESHARD_CATALOG_OBJECT_PLACEMENT
#define POOL RESHARD_CATALOG_OBJECT_MEMORY_POOL

Test(catalog_lmdb, objects) {
  result r = {0};
  put_object(PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.calls, 1);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
  put_object(PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.calls, 2);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(!r.created);

  const char *ids[] = {"sha256:p1", "sha256:unknown"};
  get_objects(PLACEMENT, ids, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.found, 1);
  get_objects(POOL, ids, 2, &r);
  cr_assert_eq(r.found, 0, "kinds are kept apart");
  put_object(POOL, "sha256:p1", &r);
  cr_assert(r.created);

  forget_object(PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.removed);
  forget_object(PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(!r.removed);
  get_objects(PLACEMENT, ids, 2, &r);
  cr_assert_eq(r.found, 0);
  get_objects(POOL, ids, 1, &r);
  cr_assert_eq(r.found, 1);
  cr_assert_eq(r.calls, 9);

  /* An id LMDB cannot hold as a key: refused, naming it; never found. */
  char long_id[600];
  memset(long_id, 'i', sizeof long_id - 1);
  long_id[sizeof long_id - 1] = '\0';
  put_object(PLACEMENT, long_id, &r);
  cr_assert_eq(r.err.code, RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(r.err.message, "placement iiii") != NULL, "%s",
            r.err.message);
  const char *long_ids[] = {long_id};
  get_objects(PLACEMENT, long_ids, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.found, 0);
  forget_object(PLACEMENT, long_id, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(!r.removed);
}

/* A put and a forget of one id queued back to back are applied in order,
 * though the first has not committed when the second is asked. */
Test(catalog_lmdb, queued_object_writes_keep_their_order) {
  result put = {0}, forget = {0}, again = {0}, r = {0};
  catalog->vtable->put_object(catalog, PLACEMENT, "p", (const uint8_t *)"rec",
                              3, on_put, &put);
  catalog->vtable->forget_object(catalog, PLACEMENT, "p", on_removed, &forget);
  catalog->vtable->put_object(catalog, PLACEMENT, "p", (const uint8_t *)"rec",
                              3, on_put, &again);
  settle();
  cr_assert(put.created);
  cr_assert(forget.removed);
  cr_assert(again.created);
  const char *id = "p";
  get_objects(PLACEMENT, &id, 1, &r);
  cr_assert_eq(r.found, 1);
}

Test(catalog_lmdb, objects_survive_a_reopen) {
  result r = {0};
  put_object(PLACEMENT, "sha256:p1", &r);
  put_object(POOL, "sha256:m1", &r);
  put_object(POOL, "sha256:m2", &r);
  forget_object(POOL, "sha256:m2", &r);
  cr_assert(r.removed);
  close_catalog();
  open_catalog(0);
  const char *placements[] = {"sha256:p1"};
  get_objects(PLACEMENT, placements, 1, &r);
  cr_assert_eq(r.found, 1);
  const char *pools[] = {"sha256:m1", "sha256:m2"};
  get_objects(POOL, pools, 2, &r);
  cr_assert_eq(r.found, 1);
  put_object(PLACEMENT, "sha256:p1", &r);
  cr_assert(!r.created);
}

/* An acknowledged put survives kill -9 of the process right after the
 * acknowledgement: the commit reached the disk before the callback. */
static int ack_fd;
static void on_put_ack(void *data, const reshard_error *err, bool created) {
  (void)data;
  char byte = err->code == RESHARD_OK && created ? 'y' : 'n';
  cr_assert_eq(write(ack_fd, &byte, 1), 1);
  pause(); /* killed here */
}

Test(catalog_lmdb, an_acknowledged_object_survives_kill_9) {
  close_catalog();
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0) {
    close(fds[0]);
    ack_fd = fds[1];
    uv_loop_t child_loop;
    reshard_catalog *c;
    reshard_error err;
    if (uv_loop_init(&child_loop) != 0 ||
        reshard_catalog_lmdb_open(&child_loop, dir, 0, &c, &err) !=
            RESHARD_OK) {
      _exit(2);
    }
    c->vtable->put_object(c, POOL, "sha256:durable", (const uint8_t *)"rec", 3,
                          on_put_ack, NULL);
    uv_run(&child_loop, UV_RUN_DEFAULT);
    _exit(3);
  }
  close(fds[1]);
  char byte = 0;
  cr_assert_eq(read(fds[0], &byte, 1), 1);
  cr_assert_eq(kill(child, SIGKILL), 0);
  int status;
  cr_assert_eq(waitpid(child, &status, 0), child);
  cr_assert(WIFSIGNALED(status));
  close(fds[0]);
  cr_assert_eq(byte, 'y');
  open_catalog(0);
  result r = {0};
  const char *id = "sha256:durable";
  get_objects(POOL, &id, 1, &r);
  cr_assert_eq(r.found, 1);
}

/* Writes, with the LMDB API, a catalog as an older build would: the five
 * databases of catalog format 1 only (no object databases), meta "format"
 * -> `format`, manifest "m1" (id 0) in domain "d0" (id `domain_id`), and
 * "m1" bound to each of `pages` stored raw, as format 1 stores every key. */
static void write_old_catalog(const char *path, const char *format,
                              uint32_t domain_id, const char *const *pages,
                              size_t page_count) {
  make_dir(path);
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi meta, manifests, manifest_keys, domains, pages_db;
  cr_assert_eq(mdb_env_create(&env), 0);
  cr_assert_eq(mdb_env_set_maxdbs(env, 8), 0);
  cr_assert_eq(mdb_env_open(env, path, 0, 0600), 0);
  cr_assert_eq(mdb_txn_begin(env, NULL, 0, &txn), 0);
  cr_assert_eq(mdb_dbi_open(txn, "meta", MDB_CREATE, &meta), 0);
  cr_assert_eq(mdb_dbi_open(txn, "manifests", MDB_CREATE, &manifests), 0);
  cr_assert_eq(mdb_dbi_open(txn, "manifest_keys", MDB_CREATE | MDB_INTEGERKEY,
                            &manifest_keys),
               0);
  cr_assert_eq(mdb_dbi_open(txn, "domains", MDB_CREATE, &domains), 0);
  cr_assert_eq(
      mdb_dbi_open(txn, "pages",
                   MDB_CREATE | MDB_DUPSORT | MDB_DUPFIXED | MDB_INTEGERDUP,
                   &pages_db),
      0);
  MDB_val k = {6, (void *)"format"}, v = {strlen(format), (void *)format};
  cr_assert_eq(mdb_put(txn, meta, &k, &v, 0), 0);
  /* Manifest "m1" (id 0) in the domain, record "rec". */
  uint32_t zero = 0;
  uint8_t value[11] = {0, 0, 0, 0, 0, 0, 0, 0, 'r', 'e', 'c'};
  memcpy(value + 4, &domain_id, 4);
  MDB_val mk = {2, (void *)"m1"}, mv = {sizeof value, value};
  cr_assert_eq(mdb_put(txn, manifests, &mk, &mv, 0), 0);
  MDB_val ik = {4, &zero}, iv = {3, (void *)"m1"};
  cr_assert_eq(mdb_put(txn, manifest_keys, &ik, &iv, 0), 0);
  MDB_val dk = {2, (void *)"d0"}, dv = {4, &domain_id};
  cr_assert_eq(mdb_put(txn, domains, &dk, &dv, 0), 0);
  for (size_t i = 0; i < page_count; i++) {
    uint8_t key[4 + 512];
    size_t length = strlen(pages[i]);
    cr_assert_leq(length, 507);
    key[0] = (uint8_t)(domain_id >> 24);
    key[1] = (uint8_t)(domain_id >> 16);
    key[2] = (uint8_t)(domain_id >> 8);
    key[3] = (uint8_t)domain_id;
    memcpy(key + 4, pages[i], length);
    MDB_val pk = {4 + length, key}, pv = {4, &zero};
    cr_assert_eq(mdb_put(txn, pages_db, &pk, &pv, 0), 0);
  }
  cr_assert_eq(mdb_txn_commit(txn), 0);
  mdb_env_close(env);
}

/* A catalog written by a build without objects (the five databases of
 * catalog format 1 only) opens, keeps its records and gains objects. */
Test(catalog_lmdb, a_catalog_from_before_objects_opens_and_works) {
  close_catalog();
  char path[128];
  snprintf(path, sizeof path, "%s/old", dir);
  write_old_catalog(path, "reshardd-catalog 1", 0, NULL, 0);

  reshard_error err;
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &catalog, &err),
               RESHARD_OK, "%s", err.message);
  result r = {0};
  const char *keys[] = {"m1"};
  catalog->vtable->get_manifests(catalog, keys, 1, on_get, &r);
  cr_assert_eq(r.found, 1);
  const char *page = "p";
  add("m1", &page, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, 1);
  put_object(PLACEMENT, "sha256:p1", &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
  close_catalog();
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &catalog, &err),
               RESHARD_OK, "%s", err.message);
  const char *ids[] = {"sha256:p1"};
  get_objects(PLACEMENT, ids, 1, &r);
  cr_assert_eq(r.found, 1);
  lookup(domain, &page, 1, &r);
  cr_assert_eq(r.page_start[1], 1);
  cr_assert_str_eq(r.keys[0], "m1");
}

/* ---- Page keys: lowercase hex of even length stored packed (format 2) ---- */

/* Which of "m1" (bit 0) and "m2" (bit 1) each page is bound to. */
typedef struct page_sets {
  int calls;
  reshard_error err;
  bool domain_known;
  unsigned mask[32];
} page_sets;

static void on_page_sets(void *data, const reshard_error *err,
                         const reshard_catalog_pages *pages) {
  page_sets *r = data;
  r->calls++;
  r->err = *err;
  memset(r->mask, 0, sizeof r->mask);
  if (pages == NULL) {
    return;
  }
  r->domain_known = pages->domain_known;
  cr_assert_leq(pages->page_count, 32);
  for (size_t i = 0; i < pages->page_count; i++) {
    for (size_t k = pages->start[i]; k < pages->start[i + 1]; k++) {
      const char *key = pages->manifest_keys[k];
      cr_assert(strcmp(key, "m1") == 0 || strcmp(key, "m2") == 0, "%s", key);
      unsigned bit = key[1] == '1' ? 1u : 2u;
      cr_assert_eq(r->mask[i] & bit, 0, "page %zu lists %s twice", i, key);
      r->mask[i] |= bit;
    }
  }
}

static void lookup_sets(const char *const *pages, size_t n, page_sets *r) {
  catalog->vtable->lookup_pages(catalog, domain, pages, n, on_page_sets, r);
  settle();
  cr_assert_eq(r->err.code, RESHARD_OK, "%s", r->err.message);
}

/* True for the keys format 2 packs. */
static bool is_packable(const char *key) {
  size_t length = strlen(key);
  if (length == 0 || length % 2 != 0) {
    return false;
  }
  return strspn(key, "0123456789abcdef") == length;
}

/* Reads the closed catalog at `path` with the LMDB API: its format record
 * must be `format`, and its pages keys, decoded, exactly `expected` (each
 * once, in domain 0), each stored packed (the top bit of the domain id set,
 * half the length) when `packed_format` and the key packs, raw otherwise. */
static void expect_stored(const char *path, const char *format,
                          bool packed_format, const char *const *expected,
                          size_t count) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi meta, pages;
  MDB_cursor *cursor;
  cr_assert_eq(mdb_env_create(&env), 0);
  cr_assert_eq(mdb_env_set_maxdbs(env, 8), 0);
  cr_assert_eq(mdb_env_open(env, path, MDB_RDONLY, 0600), 0);
  cr_assert_eq(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn), 0);
  cr_assert_eq(mdb_dbi_open(txn, "meta", 0, &meta), 0);
  MDB_val k = {6, (void *)"format"}, v;
  cr_assert_eq(mdb_get(txn, meta, &k, &v), 0);
  cr_assert_eq(v.mv_size, strlen(format));
  cr_assert_eq(memcmp(v.mv_data, format, v.mv_size), 0);
  cr_assert_eq(mdb_dbi_open(txn, "pages", 0, &pages), 0);
  cr_assert_eq(mdb_cursor_open(txn, pages, &cursor), 0);
  bool seen[32] = {false};
  cr_assert_leq(count, 32);
  size_t found = 0;
  int rc = mdb_cursor_get(cursor, &k, &v, MDB_FIRST);
  for (; rc == 0; rc = mdb_cursor_get(cursor, &k, &v, MDB_NEXT_NODUP)) {
    char text[1100];
    size_t length = 0;
    uint32_t domain_id = 1;
    cr_assert_eq(reshard__lmdb_page_key_decode(packed_format, &k, &domain_id,
                                               text, sizeof text, &length),
                 0);
    cr_assert_eq(domain_id, 0);
    cr_assert_eq(strlen(text), length);
    size_t i = 0;
    while (i < count && strcmp(expected[i], text) != 0) {
      i++;
    }
    cr_assert_lt(i, count, "stored key %s was never added", text);
    cr_assert(!seen[i], "key %s stored twice", text);
    seen[i] = true;
    found++;
    bool packed = packed_format && is_packable(text);
    const uint8_t *at = k.mv_data;
    cr_assert_eq((at[0] & 0x80) != 0, packed, "%s", text);
    cr_assert_eq(k.mv_size, 4 + (packed ? length / 2 : length), "%s", text);
  }
  cr_assert_eq(rc, MDB_NOTFOUND);
  cr_assert_eq(found, count);
  mdb_cursor_close(cursor);
  mdb_txn_abort(txn);
  mdb_env_close(env);
}

/* 506 lowercase hex digits (the longest even length within 507), 507 (odd:
 * raw) and 508 (over the limit). */
static char hex506[507], hex507[508], hex508[509], raw507[508];

static void fill_long_keys(void) {
  for (size_t i = 0; i < 508; i++) {
    hex508[i] = "0123456789abcdef"[(i * 7 + 3) % 16];
  }
  hex508[508] = '\0';
  memcpy(hex507, hex508, 507);
  hex507[507] = '\0';
  memcpy(hex506, hex508, 506);
  hex506[506] = '\0';
  memset(raw507, 'k', 507);
  raw507[507] = '\0';
}

/* Packed and raw keys in one domain: keys whose stored bytes would be the
 * same ("4142" packs to the bytes of "AB", "30" to those of "0") stay apart,
 * and every operation finds the key the add stored. */
Test(catalog_lmdb, packed_and_raw_page_keys_share_a_domain) {
  fill_long_keys();
  const char *pages[] = {
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
      "ab",   /* 1: packs to one byte */
      "abc",  /* 2: odd: raw */
      "AB",   /* 3: uppercase: raw, the bytes "4142" packs to */
      "aB",   /* 4: mixed case: raw */
      "4142", /* 5: packs to "AB" */
      "30",   /* 6: packs to "0" */
      "0",    /* 7: raw */
      "00",   /* 8: packs to a NUL byte */
      "ff",   /* 9 */
      "g0",   /* 10: not hex: raw */
      raw507, /* 11: the longest raw key */
      hex506, /* 12: the longest packed key */
      hex507, /* 13: odd: raw, 507 bytes */
  };
  enum { N = sizeof pages / sizeof *pages };
  result r = {0};
  publish("m1", domain, &r);
  publish("m2", domain, &r);
  add("m1", pages, N, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, N);
  const char *odd[N / 2];
  for (size_t i = 0; i < N / 2; i++) {
    odd[i] = pages[2 * i + 1];
  }
  add("m2", odd, N / 2, &r);
  cr_assert_eq(r.count, N / 2);
  add("m2", odd, N / 2, &r);
  cr_assert_eq(r.count, 0); /* idempotent */

  page_sets s = {0};
  lookup_sets(pages, N, &s);
  cr_assert(s.domain_known);
  for (size_t i = 0; i < N; i++) {
    cr_assert_eq(s.mask[i], i % 2 ? 3u : 1u, "page %zu", i);
  }

  /* The empty key and one over the limit are refused, naming the key. */
  const char *refused[] = {"ab", ""};
  add("m1", refused, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(r.err.message, "page_keys[1]: 0 bytes") != NULL, "%s",
            r.err.message);
  cr_assert(strstr(r.err.message, "1 to 507 bytes") != NULL, "%s",
            r.err.message);
  refused[1] = hex508;
  add("m1", refused, 2, &r);
  cr_assert_eq(r.err.code, RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(r.err.message, "page_keys[1]: 508 bytes") != NULL, "%s",
            r.err.message);
  lookup_sets(refused, 2, &s);
  cr_assert_eq(s.mask[0], 3);
  cr_assert_eq(s.mask[1], 0);
  refused[1] = "";
  lookup_sets(refused, 2, &s);
  cr_assert_eq(s.mask[1], 0);

  /* Forgetting a packed key leaves the raw key of the same bytes, and the
   * other way round. */
  forget("m1", pages + 5, 1, &r); /* "4142" */
  cr_assert_eq(r.count, 1);
  forget("m2", pages + 3, 1, &r); /* "AB" */
  cr_assert_eq(r.count, 1);
  forget(NULL, pages + 6, 1, &r); /* "30": every binding (m1 only) */
  cr_assert_eq(r.count, 1);
  lookup_sets(pages, N, &s);
  cr_assert_eq(s.mask[6], 0);
  forget(NULL, pages + 7, 1, &r); /* "0" */
  cr_assert_eq(r.count, 2);
  forget(NULL, pages + 12, 1, &r); /* the longest packed key */
  cr_assert_eq(r.count, 1);
  unsigned after[N];
  lookup_sets(pages, N, &s);
  for (size_t i = 0; i < N; i++) {
    after[i] = i % 2 ? 3u : 1u;
  }
  after[3] = 1;
  after[5] = 2;
  after[6] = 0;
  after[7] = 0;
  after[12] = 0;
  for (size_t i = 0; i < N; i++) {
    cr_assert_eq(s.mask[i], after[i], "page %zu: %u", i, s.mask[i]);
  }

  /* A reopened catalog finds the same, and stores what it was given. */
  close_catalog();
  open_catalog(0);
  lookup_sets(pages, N, &s);
  for (size_t i = 0; i < N; i++) {
    cr_assert_eq(s.mask[i], after[i], "page %zu after a reopen", i);
  }
  close_catalog();
  const char *left[N];
  size_t kept = 0;
  for (size_t i = 0; i < N; i++) {
    if (after[i] != 0) {
      left[kept++] = pages[i];
    }
  }
  expect_stored(dir, "reshardd-catalog 2", true, left, kept);

  /* Every binding of every page forgotten. */
  open_catalog(0);
  forget(NULL, pages, N, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  uint64_t bindings = 0;
  for (size_t i = 0; i < N; i++) {
    bindings += (after[i] & 1) + (after[i] >> 1);
  }
  cr_assert_eq(r.count, bindings);
  lookup_sets(pages, N, &s);
  for (size_t i = 0; i < N; i++) {
    cr_assert_eq(s.mask[i], 0, "page %zu", i);
  }
}

/* The stored bytes, exactly: "4142" in domain 0 is 0x80 0 0 0 'A' 'B', "AB"
 * is 0 0 0 0 'A' 'B'. */
Test(catalog_lmdb, packed_keys_are_the_bytes_they_spell) {
  uint8_t buffer[4 + 512];
  MDB_val key = reshard__lmdb_page_key(true, buffer, 0, "4142", 4);
  const uint8_t packed[] = {0x80, 0, 0, 0, 'A', 'B'};
  cr_assert_eq(key.mv_size, sizeof packed);
  cr_assert_eq(memcmp(key.mv_data, packed, sizeof packed), 0);
  key = reshard__lmdb_page_key(true, buffer, 0x01020304, "AB", 2);
  const uint8_t raw[] = {1, 2, 3, 4, 'A', 'B'};
  cr_assert_eq(key.mv_size, sizeof raw);
  cr_assert_eq(memcmp(key.mv_data, raw, sizeof raw), 0);
  key = reshard__lmdb_page_key(false, buffer, 7, "4142", 4);
  const uint8_t old[] = {0, 0, 0, 7, '4', '1', '4', '2'};
  cr_assert_eq(key.mv_size, sizeof old);
  cr_assert_eq(memcmp(key.mv_data, old, sizeof old), 0);

  char text[16];
  size_t length;
  uint32_t domain_id;
  MDB_val k = {sizeof packed, (void *)packed};
  cr_assert_eq(reshard__lmdb_page_key_decode(true, &k, &domain_id, text,
                                             sizeof text, &length),
               0);
  cr_assert_str_eq(text, "4142");
  cr_assert_eq(domain_id, 0);
  cr_assert_eq(length, 4);
  /* Too small for the text and its NUL. */
  cr_assert_eq(
      reshard__lmdb_page_key_decode(true, &k, &domain_id, text, 4, &length),
      MDB_BAD_VALSIZE);
  /* Keys no add writes: packed in format 1, a raw key that packs in format
   * 2, a raw NUL, no page key at all. */
  cr_assert_eq(reshard__lmdb_page_key_decode(false, &k, &domain_id, text,
                                             sizeof text, &length),
               MDB_CORRUPTED);
  MDB_val o = {sizeof old, (void *)old};
  cr_assert_eq(reshard__lmdb_page_key_decode(true, &o, &domain_id, text,
                                             sizeof text, &length),
               MDB_CORRUPTED);
  cr_assert_eq(reshard__lmdb_page_key_decode(false, &o, &domain_id, text,
                                             sizeof text, &length),
               0);
  cr_assert_str_eq(text, "4142");
  cr_assert_eq(domain_id, 7);
  const uint8_t nul[] = {0, 0, 0, 0, 'a', 0};
  MDB_val z = {sizeof nul, (void *)nul};
  cr_assert_eq(reshard__lmdb_page_key_decode(false, &z, &domain_id, text,
                                             sizeof text, &length),
               MDB_CORRUPTED);
  MDB_val e = {4, (void *)nul};
  cr_assert_eq(reshard__lmdb_page_key_decode(true, &e, &domain_id, text,
                                             sizeof text, &length),
               MDB_CORRUPTED);
}

/* A catalog of format 1 goes on as it was written: its raw hex keys are
 * found, new ones are stored raw too, and its format record stays. */
Test(catalog_lmdb, a_format_1_catalog_keeps_its_keys_raw) {
  close_catalog();
  fill_long_keys();
  char path[128];
  snprintf(path, sizeof path, "%s/format1", dir);
  const char *old_pages[] = {
      "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", "AB",
      raw507};
  write_old_catalog(path, "reshardd-catalog 1", 0, old_pages, 3);
  reshard_error err;
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &catalog, &err),
               RESHARD_OK, "%s", err.message);
  const char *pages[] = {
      old_pages[0],
      old_pages[1],
      old_pages[2],
      "4142",
      "30",
      "0",
      hex507,
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
  };
  enum { N = sizeof pages / sizeof *pages };
  page_sets s = {0};
  lookup_sets(pages, N, &s);
  cr_assert(s.domain_known);
  for (size_t i = 0; i < N; i++) {
    cr_assert_eq(s.mask[i], i < 3 ? 1u : 0u, "page %zu", i);
  }
  result r = {0};
  publish("m2", domain, &r);
  cr_assert(r.created);
  add("m1", pages, N, &r);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert_eq(r.count, N - 3);
  add("m2", pages, 2, &r);
  cr_assert_eq(r.count, 2);
  forget("m1", pages + 1, 1, &r); /* "AB" */
  cr_assert_eq(r.count, 1);
  close_catalog();
  expect_stored(path, "reshardd-catalog 1", false, pages, N);

  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &catalog, &err),
               RESHARD_OK, "%s", err.message);
  lookup_sets(pages, N, &s);
  for (size_t i = 0; i < N; i++) {
    cr_assert_eq(s.mask[i], i == 0 ? 3u : i == 1 ? 2u : 1u, "page %zu", i);
  }
  forget(NULL, pages, N, &r);
  cr_assert_eq(r.count, N + 1);
}

/* A domain id with the packed-key bit, which no catalog allocates, is
 * refused as corruption rather than read as another domain's packed keys. */
Test(catalog_lmdb, a_domain_id_with_the_packed_bit_is_corruption) {
  close_catalog();
  char path[128];
  snprintf(path, sizeof path, "%s/bad-domain", dir);
  write_old_catalog(path, "reshardd-catalog 2", 0x80000000u, NULL, 0);
  reshard_error err;
  cr_assert_eq(reshard_catalog_lmdb_open(&loop, path, 0, &catalog, &err),
               RESHARD_OK, "%s", err.message);
  const char *page = "ab";
  result r = {0};
  lookup(domain, &page, 1, &r);
  cr_assert_eq(r.err.code, RESHARD_INTERNAL);
  cr_assert(strstr(r.err.message, "MDB_CORRUPTED") != NULL, "%s",
            r.err.message);
  add("m1", &page, 1, &r);
  cr_assert_neq(r.err.code, RESHARD_OK);
}
