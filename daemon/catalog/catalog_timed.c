#include "catalog/catalog_timed.h"

#include <stdlib.h>
#include <uv.h>

typedef struct timed_catalog {
  reshard_catalog base;
  reshard_catalog_vtable vtable; /* name and flags copied from inner */
  reshard_catalog *inner;
  reshard_metrics *metrics;
  reshard_catalog_close_cb close_cb;
  void *close_data;
} timed_catalog;

/* One operation in flight: the caller's callback and when it started. */
typedef struct timed_op {
  timed_catalog *catalog;
  reshard_metrics_catalog_op op;
  uint64_t start_ns;
  union {
    reshard_catalog_put_cb put;
    reshard_catalog_get_cb get;
    reshard_catalog_count_cb count;
    reshard_catalog_lookup_cb lookup;
    reshard_catalog_removed_cb removed;
  } cb;
  void *data;
} timed_op;

static timed_op *op_new(reshard_catalog *catalog, reshard_metrics_catalog_op op,
                        void *data) {
  timed_op *t = malloc(sizeof *t);
  if (t != NULL) {
    t->catalog = (timed_catalog *)catalog;
    t->op = op;
    t->start_ns = uv_hrtime();
    t->data = data;
  }
  return t;
}

/* Records the operation and frees the record; returns the caller's data. */
static void *op_done(timed_op *t, const reshard_error *err) {
  uint64_t us = (uv_hrtime() - t->start_ns) / 1000;
  reshard_metrics_catalog_done(t->catalog->metrics, t->op, us,
                               err == NULL || err->code == RESHARD_OK);
  void *data = t->data;
  free(t);
  return data;
}

static void out_of_memory(reshard_error *err) {
  reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
}

static void on_put(void *arg, const reshard_error *err, bool created) {
  timed_op *t = arg;
  reshard_catalog_put_cb cb = t->cb.put;
  cb(op_done(t, err), err, created);
}

static void put_manifest(reshard_catalog *catalog, const char *manifest_key,
                         const char *model_domain, const uint8_t *record,
                         size_t length, reshard_catalog_put_cb cb, void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_PUT_MANIFEST, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, false);
    return;
  }
  t->cb.put = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->put_manifest(inner, manifest_key, model_domain, record, length,
                              on_put, t);
}

static void on_get(void *arg, const reshard_error *err,
                   const reshard_catalog_record *records, size_t count) {
  timed_op *t = arg;
  reshard_catalog_get_cb cb = t->cb.get;
  cb(op_done(t, err), err, records, count);
}

static void get_manifests(reshard_catalog *catalog, const char *const *keys,
                          size_t count, reshard_catalog_get_cb cb, void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_GET_MANIFESTS, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, NULL, 0);
    return;
  }
  t->cb.get = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->get_manifests(inner, keys, count, on_get, t);
}

static void on_count(void *arg, const reshard_error *err, uint64_t count) {
  timed_op *t = arg;
  reshard_catalog_count_cb cb = t->cb.count;
  cb(op_done(t, err), err, count);
}

static void add_pages(reshard_catalog *catalog, const char *model_domain,
                      const char *manifest_key, const char *const *page_keys,
                      size_t page_count, reshard_catalog_count_cb cb,
                      void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_ADD_PAGES, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, 0);
    return;
  }
  t->cb.count = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->add_pages(inner, model_domain, manifest_key, page_keys,
                           page_count, on_count, t);
}

static void forget_pages(reshard_catalog *catalog, const char *model_domain,
                         const char *manifest_key, const char *const *page_keys,
                         size_t page_count, reshard_catalog_count_cb cb,
                         void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_FORGET_PAGES, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, 0);
    return;
  }
  t->cb.count = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->forget_pages(inner, model_domain, manifest_key, page_keys,
                              page_count, on_count, t);
}

static void on_lookup(void *arg, const reshard_error *err,
                      const reshard_catalog_pages *pages) {
  timed_op *t = arg;
  reshard_catalog_lookup_cb cb = t->cb.lookup;
  cb(op_done(t, err), err, pages);
}

static void lookup_pages(reshard_catalog *catalog, const char *model_domain,
                         const char *const *page_keys, size_t page_count,
                         reshard_catalog_lookup_cb cb, void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_LOOKUP_PAGES, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, NULL);
    return;
  }
  t->cb.lookup = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->lookup_pages(inner, model_domain, page_keys, page_count,
                              on_lookup, t);
}

static void put_object(reshard_catalog *catalog,
                       reshard_catalog_object_kind kind, const char *id,
                       const uint8_t *record, size_t length,
                       reshard_catalog_put_cb cb, void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_PUT_OBJECT, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, false);
    return;
  }
  t->cb.put = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->put_object(inner, kind, id, record, length, on_put, t);
}

static void get_objects(reshard_catalog *catalog,
                        reshard_catalog_object_kind kind,
                        const char *const *ids, size_t count,
                        reshard_catalog_get_cb cb, void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_GET_OBJECTS, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, NULL, 0);
    return;
  }
  t->cb.get = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->get_objects(inner, kind, ids, count, on_get, t);
}

static void on_removed(void *arg, const reshard_error *err, bool removed) {
  timed_op *t = arg;
  reshard_catalog_removed_cb cb = t->cb.removed;
  cb(op_done(t, err), err, removed);
}

static void forget_object(reshard_catalog *catalog,
                          reshard_catalog_object_kind kind, const char *id,
                          reshard_catalog_removed_cb cb, void *data) {
  timed_op *t = op_new(catalog, RESHARD_METRICS_CATALOG_FORGET_OBJECT, data);
  if (t == NULL) {
    reshard_error err;
    out_of_memory(&err);
    cb(data, &err, false);
    return;
  }
  t->cb.removed = cb;
  reshard_catalog *inner = t->catalog->inner;
  inner->vtable->forget_object(inner, kind, id, on_removed, t);
}

static void on_inner_closed(void *data) {
  timed_catalog *catalog = data;
  reshard_catalog_close_cb cb = catalog->close_cb;
  void *cb_data = catalog->close_data;
  free(catalog);
  if (cb != NULL) {
    cb(cb_data);
  }
}

static void close_catalog(reshard_catalog *base, reshard_catalog_close_cb cb,
                          void *data) {
  timed_catalog *catalog = (timed_catalog *)base;
  catalog->close_cb = cb;
  catalog->close_data = data;
  catalog->inner->vtable->close(catalog->inner, on_inner_closed, catalog);
}

reshard_catalog *reshard_catalog_timed_wrap(reshard_catalog *inner,
                                            reshard_metrics *metrics) {
  timed_catalog *catalog = calloc(1, sizeof *catalog);
  if (catalog == NULL) {
    return NULL;
  }
  catalog->vtable = (reshard_catalog_vtable){
      .name = inner->vtable->name,
      .lookups_are_local = inner->vtable->lookups_are_local,
      .put_manifest = put_manifest,
      .get_manifests = get_manifests,
      .add_pages = add_pages,
      .forget_pages = forget_pages,
      .lookup_pages = lookup_pages,
      .put_object = put_object,
      .get_objects = get_objects,
      .forget_object = forget_object,
      .close = close_catalog,
  };
  catalog->base.vtable = &catalog->vtable;
  catalog->base.loop = inner->loop;
  catalog->inner = inner;
  catalog->metrics = metrics;
  return &catalog->base;
}
