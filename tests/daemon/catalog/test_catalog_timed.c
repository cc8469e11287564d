/* Tests daemon/catalog/catalog_timed.c: the decorator forwards every operation
 * to the catalog it wraps (the memory backend here), keeps its name and flags,
 * and records each operation's latency and failures. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "catalog/catalog_timed.h"
#include "catalog/memory/catalog_memory.h"

typedef struct result {
  int calls;
  reshard_status code;
  bool created;
  uint64_t count;
  size_t found;
  size_t bound;
  bool removed;
} result;

static void on_put(void *data, const reshard_error *err, bool created) {
  result *r = data;
  r->calls++;
  r->code = err->code;
  r->created = created;
}

static void on_count(void *data, const reshard_error *err, uint64_t count) {
  result *r = data;
  r->calls++;
  r->code = err->code;
  r->count = count;
}

static void on_get(void *data, const reshard_error *err,
                   const reshard_catalog_record *records, size_t count) {
  result *r = data;
  r->calls++;
  r->code = err->code;
  for (size_t i = 0; i < count; i++) {
    r->found += records[i].found;
  }
}

static void on_lookup(void *data, const reshard_error *err,
                      const reshard_catalog_pages *pages) {
  result *r = data;
  r->calls++;
  r->code = err->code;
  r->bound = pages->start[pages->page_count];
}

static void on_removed(void *data, const reshard_error *err, bool removed) {
  result *r = data;
  r->calls++;
  r->code = err->code;
  r->removed = removed;
}

static void on_closed(void *data) {
  (*(int *)data)++;
}

static uint64_t sample(const char *text, const char *series) {
  const char *at = strstr(text, series);
  cr_assert_not_null(at, "no %s", series);
  return strtoull(at + strlen(series) + 1, NULL, 10);
}

Test(catalog_timed, forwards_and_records) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  reshard_catalog *inner;
  reshard_error err;
  cr_assert_eq(reshard_catalog_memory_open(&loop, &inner, &err), RESHARD_OK);
  reshard_metrics *m = reshard_metrics_create("v", "memory");
  reshard_catalog *c = reshard_catalog_timed_wrap(inner, m);
  cr_assert_not_null(c);
  cr_assert_str_eq(c->vtable->name, inner->vtable->name);
  cr_assert_eq(c->vtable->lookups_are_local, inner->vtable->lookups_are_local);

  const char *domain =
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
  const char *key =
      "kv/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
      "aaaaaaaa/manifests/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
      "bbbbbbbbbbbbbbbbbbbbbbbb";
  result put = {0}, put_again = {0}, get = {0}, add = {0}, add_missing = {0},
         lookup = {0}, forget = {0};
  c->vtable->put_manifest(c, key, domain, (const uint8_t *)"rec", 3, on_put,
                          &put);
  c->vtable->put_manifest(c, key, domain, (const uint8_t *)"rec", 3, on_put,
                          &put_again);
  const char *pages[] = {"p0", "p1"};
  c->vtable->add_pages(c, domain, key, pages, 2, on_count, &add);
  const char *missing =
      "kv/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/"
      "manifests/cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
      "cccc";
  c->vtable->add_pages(c, domain, missing, pages, 2, on_count, &add_missing);
  c->vtable->get_manifests(c, &key, 1, on_get, &get);
  c->vtable->lookup_pages(c, domain, pages, 2, on_lookup, &lookup);
  c->vtable->forget_pages(c, domain, NULL, pages, 1, on_count, &forget);
  result put_object = {0}, get_objects = {0}, forget_object = {0},
         forget_again = {0};
  const char *id = "sha256:p1";
  c->vtable->put_object(c, RESHARD_CATALOG_OBJECT_PLACEMENT, id,
                        (const uint8_t *)"rec", 3, on_put, &put_object);
  c->vtable->get_objects(c, RESHARD_CATALOG_OBJECT_PLACEMENT, &id, 1, on_get,
                         &get_objects);
  c->vtable->forget_object(c, RESHARD_CATALOG_OBJECT_PLACEMENT, id, on_removed,
                           &forget_object);
  c->vtable->forget_object(c, RESHARD_CATALOG_OBJECT_PLACEMENT, id, on_removed,
                           &forget_again);
  uv_run(&loop, UV_RUN_DEFAULT);

  cr_assert_eq(put.calls, 1);
  cr_assert(put.created);
  cr_assert_not(put_again.created);
  cr_assert_eq(add.count, 2);
  cr_assert_eq(add_missing.code, RESHARD_NOT_FOUND);
  cr_assert_eq(get.found, 1);
  cr_assert_eq(lookup.bound, 2);
  cr_assert_eq(forget.count, 1);
  cr_assert_eq(put_object.calls, 1);
  cr_assert(put_object.created);
  cr_assert_eq(get_objects.found, 1);
  cr_assert(forget_object.removed);
  cr_assert_eq(forget_again.calls, 1);
  cr_assert_not(forget_again.removed);

  reshard_metrics_text text = {0};
  cr_assert(reshard_metrics_format(m, NULL, &text));
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"put_manifest\"}"),
               2);
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"add_pages\"}"),
               2);
  cr_assert_eq(sample(text.data,
                      "reshard_catalog_errors_total{operation=\"add_pages\"}"),
               1);
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"lookup_pages\"}"),
               1);
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"forget_pages\"}"),
               1);
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"get_manifests\"}"),
               1);
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"put_object\"}"),
               1);
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"get_objects\"}"),
               1);
  cr_assert_eq(sample(text.data, "reshard_catalog_operation_duration_seconds_"
                                 "count{operation=\"forget_object\"}"),
               2);
  cr_assert_eq(
      sample(text.data,
             "reshard_catalog_errors_total{operation=\"forget_object\"}"),
      0);
  reshard_metrics_text_free(&text);

  int closed = 0;
  c->vtable->close(c, on_closed, &closed);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(closed, 1);
  cr_assert_eq(uv_loop_close(&loop), 0);
  reshard_metrics_free(m);
}
