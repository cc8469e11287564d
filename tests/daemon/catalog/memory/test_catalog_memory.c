/* Tests daemon/catalog/memory/catalog_memory.c through the catalog interface:
 * manifests, idempotent bindings, lookups, forgetting, and SPEC §7's binding
 * cost. */
#include <criterion/criterion.h>
#include <inttypes.h>
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

/* A page bound to many manifests keeps them in binding order through
 * forgets, down to one (held inline again) and none. */
Test(catalog_memory, many_manifests_per_page) {
  result r = {0};
  enum { MANIFESTS = 8 };
  char names[MANIFESTS][8];
  for (int i = 0; i < MANIFESTS; i++) {
    snprintf(names[i], sizeof names[i], "m%d", i);
    publish(names[i], domain, &r);
  }
  const char *pages[] = {"p0", "p1"};
  for (int i = 0; i < MANIFESTS; i++) {
    add(names[i], pages, 1, &r);
    cr_assert_eq(r.count, 1);
  }
  add(names[5], pages, 2, &r);
  cr_assert_eq(r.count, 1); /* p0 had it already */
  catalog->vtable->lookup_pages(catalog, domain, pages, 2, on_lookup, &r);
  cr_assert_eq(r.page_start[1], MANIFESTS);
  cr_assert_eq(r.page_start[2], MANIFESTS + 1);
  for (int i = 0; i < MANIFESTS && i < 8; i++) {
    cr_assert_str_eq(r.keys[i], names[i]);
  }
  /* Forget all but m6 of p0, one at a time. */
  for (int i = 0; i < MANIFESTS; i++) {
    if (i != 6) {
      catalog->vtable->forget_pages(catalog, domain, names[i], pages, 1,
                                    on_count, &r);
      cr_assert_eq(r.count, 1);
    }
  }
  catalog->vtable->lookup_pages(catalog, domain, pages, 2, on_lookup, &r);
  cr_assert_eq(r.page_start[1], 1);
  cr_assert_str_eq(r.keys[0], "m6");
  cr_assert_str_eq(r.keys[1], "m5");
  reshard_catalog_memory_usage usage;
  reshard_catalog_memory_usage_get(catalog, &usage);
  cr_assert_eq(usage.bindings, 2);
  cr_assert_eq(usage.page_entries, 2);
  /* And bound again: a list is made anew. */
  add(names[1], pages, 2, &r);
  cr_assert_eq(r.count, 2);
  catalog->vtable->lookup_pages(catalog, domain, pages, 2, on_lookup, &r);
  cr_assert_eq(r.page_start[1], 2);
  cr_assert_eq(r.page_start[2], 4);
  cr_assert_str_eq(r.keys[1], "m1");
  catalog->vtable->forget_pages(catalog, domain, NULL, pages, 2, on_count, &r);
  cr_assert_eq(r.count, 4);
  reshard_catalog_memory_usage_get(catalog, &usage);
  cr_assert_eq(usage.bindings, 0);
  cr_assert_eq(usage.page_entries, 0);
  cr_assert_eq(usage.key_bytes, 0);
}

/* Forgetting most of many pages compacts the records; what stays is found,
 * what went is not, and every page can be bound again. Two domains share
 * the page keys without seeing each other's bindings. */
Test(catalog_memory, forget_compacts) {
  result r = {0};
  publish("m1", domain, &r);
  publish("m2", "d1", &r);
  enum { PAGES = 20000 };
  static char text[PAGES][72];
  static const char *pages[PAGES];
  for (size_t i = 0; i < PAGES; i++) {
    snprintf(text[i], sizeof text[i], "%064zx", i * 0x9e3779b97f4a7c15u);
    pages[i] = text[i];
  }
  add("m1", pages, PAGES, &r);
  cr_assert_eq(r.count, PAGES);
  catalog->vtable->add_pages(catalog, "d1", "m2", pages, PAGES / 2, on_count,
                             &r);
  cr_assert_eq(r.count, PAGES / 2);
  /* Forget three quarters of d0's pages, one call per page for some. */
  catalog->vtable->forget_pages(catalog, domain, NULL, pages, PAGES / 2,
                                on_count, &r);
  cr_assert_eq(r.count, PAGES / 2);
  for (size_t i = PAGES / 2; i < PAGES * 3 / 4; i++) {
    catalog->vtable->forget_pages(catalog, domain, "m1", &pages[i], 1, on_count,
                                  &r);
    cr_assert_eq(r.count, 1);
  }
  reshard_catalog_memory_usage usage;
  reshard_catalog_memory_usage_get(catalog, &usage);
  cr_assert_eq(usage.bindings, PAGES / 4 + PAGES / 2);
  cr_assert_eq(usage.key_bytes, (uint64_t)(PAGES / 4 + PAGES / 2) * 64);
  cr_assert_leq(usage.binding_bytes, (uint64_t)usage.page_entries * 64,
                "%.1f bytes per binding",
                (double)usage.binding_bytes / (double)usage.page_entries);
  for (size_t i = 0; i < PAGES; i++) {
    catalog->vtable->lookup_pages(catalog, domain, &pages[i], 1, on_lookup, &r);
    cr_assert_eq(r.page_start[1], i >= PAGES * 3 / 4 ? 1u : 0u, "page %zu", i);
    catalog->vtable->lookup_pages(catalog, "d1", &pages[i], 1, on_lookup, &r);
    cr_assert_eq(r.page_start[1], i < PAGES / 2 ? 1u : 0u, "page %zu", i);
    if (r.page_start[1] == 1) {
      cr_assert_str_eq(r.keys[0], "m2");
    }
  }
  add("m1", pages, PAGES, &r);
  cr_assert_eq(r.count, PAGES * 3 / 4);
  reshard_catalog_memory_usage_get(catalog, &usage);
  cr_assert_eq(usage.bindings, PAGES + PAGES / 2);
  cr_assert_eq(usage.page_entries, PAGES + PAGES / 2);
}

/* Binding and forgetting the same pages over and over leaves forgotten
 * slots and records behind; rebuilds and compactions keep them bounded. */
Test(catalog_memory, churn_stays_bounded) {
  result r = {0};
  publish("m1", domain, &r);
  publish("m2", domain, &r);
  const char *pages[] = {"page-a", "page-b", "page-c"};
  for (int round = 0; round < 5000; round++) {
    add("m1", pages, 3, &r);
    cr_assert_eq(r.count, 3);
    add("m2", pages + round % 3, 1, &r);
    cr_assert_eq(r.count, 1);
    catalog->vtable->forget_pages(catalog, domain, round % 2 ? NULL : "m1",
                                  pages, 3, on_count, &r);
    cr_assert_eq(r.count, round % 2 ? 4u : 3u);
    if (round % 2 == 0) {
      catalog->vtable->forget_pages(catalog, domain, "m2", pages, 3, on_count,
                                    &r);
      cr_assert_eq(r.count, 1);
    }
  }
  add("m2", pages, 2, &r);
  catalog->vtable->lookup_pages(catalog, domain, pages, 3, on_lookup, &r);
  cr_assert_eq(r.page_start[3], 2);
  cr_assert_str_eq(r.keys[0], "m2");
  reshard_catalog_memory_usage usage;
  reshard_catalog_memory_usage_get(catalog, &usage);
  cr_assert_eq(usage.bindings, 2);
  cr_assert_eq(usage.page_entries, 2);
  cr_assert_leq(usage.binding_bytes, 256 * 1024, "%" PRIu64 " bytes",
                usage.binding_bytes);
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
