/* Tests daemon/catalog/lmdb/ through the catalog interface on a real
 * libuv loop: manifests, idempotent bindings, lookups, forgetting, reopening,
 * batched commits, a full map, the refusal of foreign or corrupted
 * directories without touching a byte of them, and objects (placements and
 * memory pools): stored once, forgotten, durable across a reopen and a
 * kill -9, and added to a catalog written before they existed. */
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
  foreign_env(path, "meta", "format", "reshardd-catalog 2");
  snprintf(file, sizeof file, "%s/data.mdb", path);
  expect_refused(path, file, "reshardd-catalog 2");
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

/* A catalog written by a build without objects (the five databases of
 * catalog format 1 only) opens, keeps its records and gains objects. */
Test(catalog_lmdb, a_catalog_from_before_objects_opens_and_works) {
  close_catalog();
  char path[128];
  snprintf(path, sizeof path, "%s/old", dir);
  make_dir(path);
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi meta, manifests, manifest_keys, domains, pages;
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
                   &pages),
      0);
  MDB_val k = {6, (void *)"format"}, v = {18, (void *)"reshardd-catalog 1"};
  cr_assert_eq(mdb_put(txn, meta, &k, &v, 0), 0);
  /* Manifest "m1" (id 0) in domain "d0" (id 0), record "rec". */
  uint32_t zero = 0;
  uint8_t value[11] = {0, 0, 0, 0, 0, 0, 0, 0, 'r', 'e', 'c'};
  MDB_val mk = {2, (void *)"m1"}, mv = {sizeof value, value};
  cr_assert_eq(mdb_put(txn, manifests, &mk, &mv, 0), 0);
  MDB_val ik = {4, &zero}, iv = {3, (void *)"m1"};
  cr_assert_eq(mdb_put(txn, manifest_keys, &ik, &iv, 0), 0);
  MDB_val dk = {2, (void *)"d0"}, dv = {4, &zero};
  cr_assert_eq(mdb_put(txn, domains, &dk, &dv, 0), 0);
  cr_assert_eq(mdb_txn_commit(txn), 0);
  mdb_env_close(env);

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
