/* The memory catalog: manifests, domains and page bindings in hash tables
 * of this process. Every operation completes synchronously.
 *
 * Bindings are stored compactly (SPEC §7: at most 64 bytes plus the key):
 * one page entry per (model domain, page key) holding the ids of its
 * manifests, inline when there is one. Manifest keys and domains are
 * interned as 32-bit ids. Objects (placements, memory pools) live in one
 * table per kind, each entry one block holding its id and its record. */
#include "catalog/memory/catalog_memory.h"

#include <stdlib.h>
#include <string.h>

#include "cache/table.h"

typedef struct domain_entry {
  reshard_table_node node;
  uint32_t id;
  uint32_t manifest_count;
  char name[];
} domain_entry;

typedef struct manifest_entry {
  reshard_table_node node;
  uint32_t id;
  uint32_t domain_id;
  uint8_t *record;
  size_t record_length;
  char key[];
} manifest_entry;

typedef struct page_entry {
  reshard_table_node node;
  uint32_t domain_id;
  uint32_t key_length;
  uint32_t count;    /* manifests bound */
  uint32_t capacity; /* of ids.many; 0 while the one id is inline */
  union {
    uint32_t one;
    uint32_t *many;
  } ids;
  char key[];
} page_entry;

typedef struct object_entry {
  reshard_table_node node;
  const uint8_t *record; /* after the id, in the same block */
  size_t record_length;
  char id[];
} object_entry;

typedef struct memory_catalog {
  reshard_catalog base;
  reshard_table domains;
  reshard_table manifests;
  reshard_table pages;
  domain_entry **domain_by_id;
  size_t domain_count, domain_capacity;
  manifest_entry **manifest_by_id;
  size_t manifest_count, manifest_capacity;
  uint64_t bindings;
  uint64_t page_entry_bytes; /* structs and manifest lists */
  uint64_t key_bytes;
  reshard_table objects[RESHARD_CATALOG_OBJECT_KINDS];
} memory_catalog;

typedef struct page_lookup {
  uint32_t domain_id;
  const char *key;
  size_t length;
} page_lookup;

static uint64_t string_hash(const char *text, size_t length) {
  return reshard_hash(text, length, 0x51ed270b27a3e1c5ull);
}

static uint64_t page_hash(uint32_t domain_id, const char *key, size_t length) {
  return reshard_hash(key, length, 0x2545f4914f6cdd1dull ^ domain_id);
}

static bool domain_matches(const reshard_table_node *node, const void *key) {
  return strcmp(((const domain_entry *)node)->name, key) == 0;
}

static bool manifest_matches(const reshard_table_node *node, const void *key) {
  return strcmp(((const manifest_entry *)node)->key, key) == 0;
}

static bool page_matches(const reshard_table_node *node, const void *key) {
  const page_entry *entry = (const page_entry *)node;
  const page_lookup *want = key;
  return entry->domain_id == want->domain_id &&
         entry->key_length == want->length &&
         memcmp(entry->key, want->key, want->length) == 0;
}

static domain_entry *find_domain(memory_catalog *m, const char *name) {
  return (domain_entry *)reshard_table_find(
      &m->domains, string_hash(name, strlen(name)), domain_matches, name);
}

static manifest_entry *find_manifest(memory_catalog *m, const char *key) {
  return (manifest_entry *)reshard_table_find(
      &m->manifests, string_hash(key, strlen(key)), manifest_matches, key);
}

static page_entry *find_page(memory_catalog *m, uint32_t domain_id,
                             const char *key) {
  page_lookup want = {domain_id, key, strlen(key)};
  return (page_entry *)reshard_table_find(
      &m->pages, page_hash(domain_id, key, want.length), page_matches, &want);
}

static const uint32_t *page_ids(const page_entry *entry) {
  return entry->capacity == 0 ? &entry->ids.one : entry->ids.many;
}

static void memory_put_manifest(reshard_catalog *catalog,
                                const char *manifest_key,
                                const char *model_domain, const uint8_t *record,
                                size_t length, reshard_catalog_put_cb cb,
                                void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  if (find_manifest(m, manifest_key) != NULL) {
    cb(data, &err, false);
    return;
  }
  domain_entry *domain = find_domain(m, model_domain);
  if (domain == NULL) {
    size_t name_length = strlen(model_domain);
    if (m->domain_count >= UINT32_MAX ||
        !reshard_catalog_grow((void **)&m->domain_by_id, &m->domain_capacity,
                              m->domain_count + 1, sizeof(domain_entry *)) ||
        (domain = malloc(sizeof *domain + name_length + 1)) == NULL) {
      reshard_error_set(&err, RESHARD_INTERNAL,
                        "catalog: out of memory storing model domain %s",
                        model_domain);
      cb(data, &err, false);
      return;
    }
    memcpy(domain->name, model_domain, name_length + 1);
    domain->id = (uint32_t)m->domain_count;
    domain->manifest_count = 0;
    domain->node.hash = string_hash(model_domain, name_length);
    m->domain_by_id[m->domain_count++] = domain;
    reshard_table_insert(&m->domains, &domain->node);
  }
  size_t key_length = strlen(manifest_key);
  manifest_entry *entry = NULL;
  uint8_t *copy = malloc(length ? length : 1);
  if (m->manifest_count >= UINT32_MAX || copy == NULL ||
      !reshard_catalog_grow((void **)&m->manifest_by_id, &m->manifest_capacity,
                            m->manifest_count + 1, sizeof(manifest_entry *)) ||
      (entry = malloc(sizeof *entry + key_length + 1)) == NULL) {
    free(copy);
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory storing manifest %s",
                      manifest_key);
    cb(data, &err, false);
    return;
  }
  if (length > 0) {
    memcpy(copy, record, length);
  }
  memcpy(entry->key, manifest_key, key_length + 1);
  entry->record = copy;
  entry->record_length = length;
  entry->id = (uint32_t)m->manifest_count;
  entry->domain_id = domain->id;
  entry->node.hash = string_hash(manifest_key, key_length);
  m->manifest_by_id[m->manifest_count++] = entry;
  reshard_table_insert(&m->manifests, &entry->node);
  domain->manifest_count++;
  cb(data, &err, true);
}

static void memory_get_manifests(reshard_catalog *catalog,
                                 const char *const *keys, size_t count,
                                 reshard_catalog_get_cb cb, void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  reshard_catalog_record *records = calloc(count ? count : 1, sizeof *records);
  if (records == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
    cb(data, &err, NULL, 0);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    const manifest_entry *entry = find_manifest(m, keys[i]);
    if (entry != NULL) {
      records[i].found = true;
      records[i].data = entry->record;
      records[i].length = entry->record_length;
    }
  }
  cb(data, &err, records, count);
  free(records);
}

/* Adds `id` to the page entry; returns false when memory runs out. */
static bool page_add_id(memory_catalog *m, page_entry *entry, uint32_t id) {
  if (entry->count == 0) {
    entry->ids.one = id;
    entry->count = 1;
    return true;
  }
  if (entry->capacity == 0) {
    uint32_t *many = malloc(4 * sizeof *many);
    if (many == NULL) {
      return false;
    }
    many[0] = entry->ids.one;
    entry->ids.many = many;
    entry->capacity = 4;
    m->page_entry_bytes += 4 * sizeof *many;
  } else if (entry->count == entry->capacity) {
    uint32_t *many =
        realloc(entry->ids.many, 2 * entry->capacity * sizeof *many);
    if (many == NULL) {
      return false;
    }
    entry->ids.many = many;
    m->page_entry_bytes += entry->capacity * sizeof *many;
    entry->capacity *= 2;
  }
  entry->ids.many[entry->count++] = id;
  return true;
}

static void page_free(memory_catalog *m, page_entry *entry) {
  m->page_entry_bytes -= sizeof *entry + 1;
  m->key_bytes -= entry->key_length;
  if (entry->capacity != 0) {
    m->page_entry_bytes -= entry->capacity * sizeof(uint32_t);
    free(entry->ids.many);
  }
  free(entry);
}

static void memory_add_pages(reshard_catalog *catalog, const char *model_domain,
                             const char *manifest_key,
                             const char *const *page_keys, size_t page_count,
                             reshard_catalog_count_cb cb, void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  const manifest_entry *manifest = find_manifest(m, manifest_key);
  if (manifest == NULL) {
    reshard_error_set(&err, RESHARD_NOT_FOUND,
                      "manifest_key %s: no such manifest is published",
                      manifest_key);
    cb(data, &err, 0);
    return;
  }
  const domain_entry *domain = m->domain_by_id[manifest->domain_id];
  if (strcmp(domain->name, model_domain) != 0) {
    reshard_error_set(&err, RESHARD_INVALID_ARGUMENT,
                      "manifest_key %s: belongs to model domain %s, not %s",
                      manifest_key, domain->name, model_domain);
    cb(data, &err, 0);
    return;
  }
  uint64_t added = 0;
  for (size_t i = 0; i < page_count; i++) {
    page_entry *entry = find_page(m, domain->id, page_keys[i]);
    if (entry == NULL) {
      size_t length = strlen(page_keys[i]);
      if (length > UINT32_MAX ||
          (entry = malloc(sizeof *entry + length + 1)) == NULL) {
        reshard_error_set(&err, RESHARD_INTERNAL,
                          "catalog: out of memory binding page_keys[%zu]", i);
        break;
      }
      entry->domain_id = domain->id;
      entry->key_length = (uint32_t)length;
      entry->count = 0;
      entry->capacity = 0;
      memcpy(entry->key, page_keys[i], length + 1);
      entry->node.hash = page_hash(domain->id, page_keys[i], length);
      reshard_table_insert(&m->pages, &entry->node);
      m->page_entry_bytes += sizeof *entry + 1;
      m->key_bytes += length;
    }
    const uint32_t *ids = page_ids(entry);
    bool present = false;
    for (uint32_t j = 0; j < entry->count && !present; j++) {
      present = ids[j] == manifest->id;
    }
    if (present) {
      continue;
    }
    if (!page_add_id(m, entry, manifest->id)) {
      reshard_error_set(&err, RESHARD_INTERNAL,
                        "catalog: out of memory binding page_keys[%zu]", i);
      break;
    }
    added++;
    m->bindings++;
  }
  cb(data, &err, added);
}

static void memory_forget_pages(reshard_catalog *catalog,
                                const char *model_domain,
                                const char *manifest_key,
                                const char *const *page_keys, size_t page_count,
                                reshard_catalog_count_cb cb, void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  const domain_entry *domain = find_domain(m, model_domain);
  const manifest_entry *manifest = NULL;
  if (manifest_key != NULL) {
    manifest = find_manifest(m, manifest_key);
  }
  if (domain == NULL || (manifest_key != NULL && manifest == NULL)) {
    cb(data, &err, 0);
    return;
  }
  uint64_t removed = 0;
  for (size_t i = 0; i < page_count; i++) {
    page_entry *entry = find_page(m, domain->id, page_keys[i]);
    if (entry == NULL) {
      continue;
    }
    if (manifest == NULL) {
      removed += entry->count;
      m->bindings -= entry->count;
      entry->count = 0;
    } else {
      uint32_t *ids = entry->capacity == 0 ? &entry->ids.one : entry->ids.many;
      for (uint32_t j = 0; j < entry->count; j++) {
        if (ids[j] == manifest->id) {
          memmove(&ids[j], &ids[j + 1], (entry->count - j - 1) * sizeof *ids);
          entry->count--;
          removed++;
          m->bindings--;
          break;
        }
      }
    }
    if (entry->count == 0) {
      reshard_table_remove(&m->pages, &entry->node);
      page_free(m, entry);
    }
  }
  cb(data, &err, removed);
}

static void memory_lookup_pages(reshard_catalog *catalog,
                                const char *model_domain,
                                const char *const *page_keys, size_t page_count,
                                reshard_catalog_lookup_cb cb, void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  reshard_catalog_pages result = {0};
  const domain_entry *domain = find_domain(m, model_domain);
  result.domain_known = domain != NULL && domain->manifest_count > 0;
  result.page_count = page_count;
  size_t *start = malloc((page_count + 1) * sizeof *start);
  page_entry **entries =
      malloc((page_count ? page_count : 1) * sizeof *entries);
  const char **keys = NULL;
  if (start == NULL || entries == NULL) {
    goto oom;
  }
  size_t total = 0;
  for (size_t i = 0; i < page_count; i++) {
    entries[i] = domain ? find_page(m, domain->id, page_keys[i]) : NULL;
    total += entries[i] ? entries[i]->count : 0;
  }
  keys = malloc((total ? total : 1) * sizeof *keys);
  if (keys == NULL) {
    goto oom;
  }
  size_t at = 0;
  for (size_t i = 0; i < page_count; i++) {
    start[i] = at;
    if (entries[i] != NULL) {
      const uint32_t *ids = page_ids(entries[i]);
      for (uint32_t j = 0; j < entries[i]->count; j++) {
        keys[at++] = m->manifest_by_id[ids[j]]->key;
      }
    }
  }
  start[page_count] = at;
  result.start = start;
  result.manifest_keys = keys;
  cb(data, &err, &result);
  free(keys);
  free(entries);
  free(start);
  return;
oom:
  free(keys);
  free(entries);
  free(start);
  reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
  cb(data, &err, NULL);
}

/* ---- Objects ---- */

static bool object_matches(const reshard_table_node *node, const void *key) {
  return strcmp(((const object_entry *)node)->id, key) == 0;
}

/* The kind's table, or NULL for a kind outside the enum. */
static reshard_table *object_table(memory_catalog *m,
                                   reshard_catalog_object_kind kind) {
  return (unsigned)kind < RESHARD_CATALOG_OBJECT_KINDS ? &m->objects[kind]
                                                       : NULL;
}

static object_entry *find_object(reshard_table *table, const char *id) {
  return (object_entry *)reshard_table_find(table, string_hash(id, strlen(id)),
                                            object_matches, id);
}

static void bad_kind(reshard_error *err, reshard_catalog_object_kind kind) {
  reshard_error_set(err, RESHARD_INTERNAL, "catalog: no object kind %d",
                    (int)kind);
}

static void memory_put_object(reshard_catalog *catalog,
                              reshard_catalog_object_kind kind, const char *id,
                              const uint8_t *record, size_t length,
                              reshard_catalog_put_cb cb, void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  reshard_table *table = object_table(m, kind);
  if (table == NULL) {
    bad_kind(&err, kind);
    cb(data, &err, false);
    return;
  }
  if (find_object(table, id) != NULL) {
    cb(data, &err, false);
    return;
  }
  size_t id_length = strlen(id);
  object_entry *entry = malloc(sizeof *entry + id_length + 1 + length);
  if (entry == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog: out of memory storing %s %s",
                      reshard_catalog_object_kind_name(kind), id);
    cb(data, &err, false);
    return;
  }
  memcpy(entry->id, id, id_length + 1);
  uint8_t *copy = (uint8_t *)entry->id + id_length + 1;
  if (length > 0) {
    memcpy(copy, record, length);
  }
  entry->record = copy;
  entry->record_length = length;
  entry->node.hash = string_hash(id, id_length);
  reshard_table_insert(table, &entry->node);
  cb(data, &err, true);
}

static void memory_get_objects(reshard_catalog *catalog,
                               reshard_catalog_object_kind kind,
                               const char *const *ids, size_t count,
                               reshard_catalog_get_cb cb, void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  reshard_table *table = object_table(m, kind);
  if (table == NULL) {
    bad_kind(&err, kind);
    cb(data, &err, NULL, 0);
    return;
  }
  reshard_catalog_record *records = calloc(count ? count : 1, sizeof *records);
  if (records == NULL) {
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
    cb(data, &err, NULL, 0);
    return;
  }
  for (size_t i = 0; i < count; i++) {
    const object_entry *entry = find_object(table, ids[i]);
    if (entry != NULL) {
      records[i].found = true;
      records[i].data = entry->record;
      records[i].length = entry->record_length;
    }
  }
  cb(data, &err, records, count);
  free(records);
}

static void memory_forget_object(reshard_catalog *catalog,
                                 reshard_catalog_object_kind kind,
                                 const char *id, reshard_catalog_removed_cb cb,
                                 void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_error err;
  reshard_error_clear(&err);
  reshard_table *table = object_table(m, kind);
  if (table == NULL) {
    bad_kind(&err, kind);
    cb(data, &err, false);
    return;
  }
  object_entry *entry = find_object(table, id);
  if (entry != NULL) {
    reshard_table_remove(table, &entry->node);
    free(entry);
  }
  cb(data, &err, entry != NULL);
}

/* ---- Closing ---- */

static void release_object(reshard_table_node *node, void *data) {
  (void)data;
  free(node);
}

static void release_page(reshard_table_node *node, void *data) {
  page_free(data, (page_entry *)node);
}

static void memory_close(reshard_catalog *catalog, reshard_catalog_close_cb cb,
                         void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  reshard_table_clear(&m->pages, release_page, m);
  for (size_t i = 0; i < RESHARD_CATALOG_OBJECT_KINDS; i++) {
    reshard_table_clear(&m->objects[i], release_object, NULL);
    reshard_table_destroy(&m->objects[i]);
  }
  for (size_t i = 0; i < m->manifest_count; i++) {
    free(m->manifest_by_id[i]->record);
    free(m->manifest_by_id[i]);
  }
  for (size_t i = 0; i < m->domain_count; i++) {
    free(m->domain_by_id[i]);
  }
  free(m->manifest_by_id);
  free(m->domain_by_id);
  reshard_table_destroy(&m->pages);
  reshard_table_destroy(&m->manifests);
  reshard_table_destroy(&m->domains);
  free(m);
  if (cb != NULL) {
    cb(data);
  }
}

static const reshard_catalog_vtable memory_vtable = {
    .name = "memory",
    .lookups_are_local = true,
    .put_manifest = memory_put_manifest,
    .get_manifests = memory_get_manifests,
    .add_pages = memory_add_pages,
    .forget_pages = memory_forget_pages,
    .lookup_pages = memory_lookup_pages,
    .put_object = memory_put_object,
    .get_objects = memory_get_objects,
    .forget_object = memory_forget_object,
    .close = memory_close,
};

reshard_status reshard_catalog_memory_open(uv_loop_t *loop,
                                           reshard_catalog **out,
                                           reshard_error *err) {
  memory_catalog *m = calloc(1, sizeof *m);
  bool ok = m != NULL && reshard_table_init(&m->domains, 16) &&
            reshard_table_init(&m->manifests, 64) &&
            reshard_table_init(&m->pages, 1024);
  for (size_t i = 0; ok && i < RESHARD_CATALOG_OBJECT_KINDS; i++) {
    ok = reshard_table_init(&m->objects[i], 16);
  }
  if (!ok) {
    if (m != NULL) {
      reshard_table_destroy(&m->domains);
      reshard_table_destroy(&m->manifests);
      reshard_table_destroy(&m->pages);
      for (size_t i = 0; i < RESHARD_CATALOG_OBJECT_KINDS; i++) {
        reshard_table_destroy(&m->objects[i]);
      }
      free(m);
    }
    return reshard_error_set(err, RESHARD_INTERNAL,
                             "catalog memory: out of memory");
  }
  m->base.vtable = &memory_vtable;
  m->base.loop = loop;
  *out = &m->base;
  return RESHARD_OK;
}

void reshard_catalog_memory_usage_get(const reshard_catalog *catalog,
                                      reshard_catalog_memory_usage *out) {
  const memory_catalog *m = (const memory_catalog *)catalog;
  out->bindings = m->bindings;
  out->page_entries = m->pages.count;
  out->binding_bytes = m->page_entry_bytes + reshard_table_memory(&m->pages);
  out->key_bytes = m->key_bytes;
}
