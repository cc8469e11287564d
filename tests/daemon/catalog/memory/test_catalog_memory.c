/* Tests daemon/catalog/memory/catalog_memory.c through the catalog interface:
 * manifests, idempotent bindings, lookups, forgetting, and SPEC §7's binding
 * cost. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "catalog/catalog_open.h"
#include "catalog/memory/catalog_memory.h"

#define CATALOG_TEST_RECORD "rec"
#include "../catalog_results.h"

typedef catalog_result result;

static reshard_catalog *catalog;
static const char *const domain = "d0";

static void setup(void) {
  reshard_error err;
  cr_assert_eq(reshard_catalog_open(NULL, "memory", &catalog, &err),
               RESHARD_OK);
}

static void teardown(void) {
  catalog->vtable->close(catalog, NULL, NULL);
}

TestSuite(catalog_memory, .init = setup, .fini = teardown);

static void publish(const char *key, const char *in_domain, result *r) {
  catalog->vtable->put_manifest(catalog, key, in_domain, (const uint8_t *)"rec",
                                3, on_put, r);
}

static void add(const char *key, const char *const *pages, size_t n,
                result *r) {
  catalog->vtable->add_pages(catalog, domain, key, pages, n, on_count, r);
}

Test(catalog_memory, manifests_are_stored_once) {
  result r = {0};
  publish("m1", domain, &r);
  cr_assert_eq(r.calls, 1);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(r.created);
  publish("m1", domain, &r);
  cr_assert(!r.created);
  const char *keys[] = {"m1", "m2"};
  catalog->vtable->get_manifests(catalog, keys, 2, on_get, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.found, 1);
}

Test(catalog_memory, bindings) {
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
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.count, 2);
  add("m1", pages, 2, &r);
  cr_assert_eq(r.count, 0); /* idempotent */
  add("m2", pages + 1, 1, &r);
  cr_assert_eq(r.count, 1);

  catalog->vtable->lookup_pages(catalog, domain, pages, 3, on_lookup, &r);
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
  catalog->vtable->forget_pages(catalog, domain, "m1", pages + 1, 1, on_count,
                                &r);
  cr_assert_eq(r.count, 1);
  catalog->vtable->forget_pages(catalog, domain, NULL, pages, 3, on_count, &r);
  cr_assert_eq(r.count, 2);
  catalog->vtable->lookup_pages(catalog, domain, pages, 3, on_lookup, &r);
  cr_assert(r.domain_known);
  cr_assert_eq(r.page_start[3], 0);

  catalog->vtable->lookup_pages(catalog, "unknown", pages, 3, on_lookup, &r);
  cr_assert(!r.domain_known);
  cr_assert_eq(r.page_start[3], 0);
  catalog->vtable->forget_pages(catalog, "unknown", NULL, pages, 3, on_count,
                                &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.count, 0);
}

/* SPEC §7: a registered page binding costs at most 64 bytes plus its key. */
Test(catalog_memory, binding_cost) {
  result r = {0};
  publish("m1", domain, &r);
  enum { PAGES = 100000 };
  static char text[PAGES][48];
  static const char *pages[PAGES];
  for (size_t i = 0; i < PAGES; i++) {
    snprintf(text[i], sizeof text[i], "%040zx", i * 2654435761u);
    pages[i] = text[i];
  }
  add("m1", pages, PAGES, &r);
  cr_assert_eq(r.count, PAGES);
  reshard_catalog_memory_usage usage;
  reshard_catalog_memory_usage_get(catalog, &usage);
  cr_assert_eq(usage.bindings, PAGES);
  cr_assert_eq(usage.key_bytes, (uint64_t)PAGES * 40);
  cr_assert_leq(usage.binding_bytes, (uint64_t)PAGES * 64,
                "%.1f bytes per binding", (double)usage.binding_bytes / PAGES);
}

/* lmdb: and redis:// open real backends (test_catalog_lmdb.c,
 * test_catalog_redis.c); anything else is refused. */
Test(catalog_memory, open_rejects_unknown_backends) {
  reshard_catalog *other = NULL;
  reshard_error err;
  cr_assert_eq(reshard_catalog_open(NULL, "bogus", &other, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_assert_null(other);
}

/* Placements and memory pools: stored once per id, found, forgotten once,
 * and kept apart by kind. */
Test(catalog_memory, objects) {
  const reshard_catalog_vtable *v = catalog->vtable;
  const reshard_catalog_object_kind placement =
      RESHARD_CATALOG_OBJECT_PLACEMENT;
  const reshard_catalog_object_kind pool = RESHARD_CATALOG_OBJECT_MEMORY_POOL;
  result r = {0};
  v->put_object(catalog, placement, "sha256:p1", (const uint8_t *)"rec", 3,
                on_put, &r);
  cr_assert_eq(r.calls, 1);
  cr_assert_eq(r.err.code, RESHARD_OK, "%s", r.err.message);
  cr_assert(r.created);
  v->put_object(catalog, placement, "sha256:p1", (const uint8_t *)"rec", 3,
                on_put, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(!r.created);

  const char *ids[] = {"sha256:p1", "sha256:unknown"};
  v->get_objects(catalog, placement, ids, 2, on_get, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert_eq(r.found, 1);
  /* The same id of another kind is another record. */
  v->get_objects(catalog, pool, ids, 1, on_get, &r);
  cr_assert_eq(r.found, 0);
  v->put_object(catalog, pool, "sha256:p1", (const uint8_t *)"rec", 3, on_put,
                &r);
  cr_assert(r.created);

  v->forget_object(catalog, placement, "sha256:p1", on_removed, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(r.removed);
  v->forget_object(catalog, placement, "sha256:p1", on_removed, &r);
  cr_assert_eq(r.err.code, RESHARD_OK);
  cr_assert(!r.removed);
  v->get_objects(catalog, placement, ids, 2, on_get, &r);
  cr_assert_eq(r.found, 0);
  v->get_objects(catalog, pool, ids, 2, on_get, &r);
  cr_assert_eq(r.found, 1);
  /* Forgotten, it can be stored again. */
  v->put_object(catalog, placement, "sha256:p1", (const uint8_t *)"rec", 3,
                on_put, &r);
  cr_assert(r.created);
  cr_assert_eq(r.calls, 10);
}
