/* Tests daemon/catalog/catalog_open.c: a --catalog spec opens the backend
 * it names, and anything else is refused with a message naming the spec. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "catalog/catalog_open.h"

static void closed(void *data) {
  *(int *)data += 1;
}

static void close_on(uv_loop_t *loop, reshard_catalog *catalog) {
  int done = 0;
  catalog->vtable->close(catalog, closed, &done);
  uv_run(loop, UV_RUN_DEFAULT);
  cr_assert_eq(done, 1);
}

Test(catalog_open, memory_and_lmdb) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  reshard_catalog *catalog = NULL;
  reshard_error err;
  cr_assert_eq(reshard_catalog_open(&loop, "memory", &catalog, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(catalog->vtable->name, "memory");
  close_on(&loop, catalog);

  char dir[] = "/tmp/reshard-open-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char spec[64];
  snprintf(spec, sizeof spec, "lmdb:%s", dir);
  catalog = NULL;
  cr_assert_eq(reshard_catalog_open_with_password(&loop, spec, "ignored",
                                                  &catalog, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(catalog->vtable->name, "lmdb");
  close_on(&loop, catalog);
  char path[96];
  snprintf(path, sizeof path, "%s/data.mdb", dir);
  unlink(path);
  snprintf(path, sizeof path, "%s/lock.mdb", dir);
  unlink(path);
  rmdir(dir);
  cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(catalog_open, redis_opens_without_waiting) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  reshard_catalog *catalog = NULL;
  reshard_error err;
  /* Port 1 on loopback: nothing listens, and opening does not wait. */
  cr_assert_eq(
      reshard_catalog_open(&loop, "redis://127.0.0.1:1", &catalog, &err),
      RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(catalog->vtable->name, "redis");
  close_on(&loop, catalog);
  cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(catalog_open, unknown_specs_are_refused) {
  static const char *const specs[] = {"bogus", "", "Memory", "lmdb",
                                      "redis:/h:1"};
  for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
    reshard_catalog *catalog = NULL;
    reshard_error err;
    cr_assert_eq(reshard_catalog_open(NULL, specs[i], &catalog, &err),
                 RESHARD_INVALID_ARGUMENT, "%s", specs[i]);
    cr_assert_null(catalog);
    char quoted[32];
    snprintf(quoted, sizeof quoted, "\"%s\"", specs[i]);
    cr_assert(strstr(err.message, quoted) != NULL, "%s", err.message);
  }
  /* "lmdb:" with no directory is the LMDB backend's refusal. */
  reshard_catalog *catalog = NULL;
  reshard_error err;
  cr_assert_eq(reshard_catalog_open(NULL, "lmdb:", &catalog, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert_null(catalog);
}
