/* The memory catalog: manifests, domains and page bindings in tables of
 * this process. Every operation completes synchronously.
 *
 * Bindings are stored compactly (SPEC §7: at most 64 bytes plus the key),
 * without a malloc per binding: manifest keys and domains are interned as
 * 32-bit ids, and each (model domain, page key) is one page record in one
 * byte arena, a 16-byte header and the key bytes, holding its one manifest
 * id inline (a page bound to several manifests keeps their ids in a list
 * of its own). An open-addressing table of 8-byte slots indexes the
 * records by offset, with 24 bits of the hash beside the offset so a probe
 * rarely reads a record that does not match. Forgotten records stay in the
 * arena, dead, until they are half of it; then the arena is compacted and
 * the table rebuilt. Objects (placements, memory pools) live in one chained
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

typedef struct object_entry {
  reshard_table_node node;
  const uint8_t *record; /* after the id, in the same block */
  size_t record_length;
  char id[];
} object_entry;

/* One (model domain, page key) in the arena, at an offset that is a
 * multiple of 4; the key follows without a NUL, then padding to 4 bytes.
 * `count` 0 marks a forgotten record awaiting compaction. */
typedef struct page_record {
  uint32_t domain_id;
  uint32_t key_length;
  uint32_t count; /* manifests bound */
  uint32_t id;    /* the manifest id when count is 1, else an index in lists */
  char key[];
} page_record;

/* The manifest ids of a page bound to more than one manifest. */
typedef struct id_list {
  uint32_t capacity;
  uint32_t ids[];
} id_list;

/* Slots: 0 is empty, 1 held a record that was forgotten (probes go on past
 * it); otherwise the high 24 bits are the top of the record's hash and the
 * low 40 bits its offset in 4-byte units plus 2 (4 TiB of arena). */
#define SLOT_EMPTY 0u
#define SLOT_DEAD 1u
#define SLOT_REF_BITS 40
#define SLOT_REF_MASK ((UINT64_C(1) << SLOT_REF_BITS) - 1)
#define SLOT_MIN 16u

typedef struct memory_catalog {
  reshard_catalog base;
  reshard_table domains;
  reshard_table manifests;
  domain_entry **domain_by_id;
  size_t domain_count, domain_capacity;
  manifest_entry **manifest_by_id;
  size_t manifest_count, manifest_capacity;

  /* Page records. */
  uint8_t *arena;
  size_t arena_used, arena_capacity;
  size_t dead_bytes; /* of forgotten records still in the arena */
  uint64_t *slots;
  size_t slot_count; /* a power of two, or 0 before the first page */
  size_t live_slots, dead_slots;
  id_list **lists; /* lists[i] NULL when free */
  uint32_t *free_lists;
  size_t list_count, list_capacity, free_count, free_capacity;
  uint64_t list_bytes;

  uint64_t bindings;
  uint64_t key_bytes; /* of the live records */
  reshard_table objects[RESHARD_CATALOG_OBJECT_KINDS];
} memory_catalog;

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

static domain_entry *find_domain(memory_catalog *m, const char *name) {
  return (domain_entry *)reshard_table_find(
      &m->domains, string_hash(name, strlen(name)), domain_matches, name);
}

static manifest_entry *find_manifest(memory_catalog *m, const char *key) {
  return (manifest_entry *)reshard_table_find(
      &m->manifests, string_hash(key, strlen(key)), manifest_matches, key);
}

/* ---- Page records ---- */

/* Bytes of a record with a key of `length` bytes, padded to 4; 0 when that
 * does not fit a size_t (callers bound `length` first). */
static size_t record_size(size_t length) {
  if (length > SIZE_MAX - sizeof(page_record) - 3) {
    return 0;
  }
  return (sizeof(page_record) + length + 3) & ~(size_t)3;
}

static page_record *record_at(const memory_catalog *m, size_t offset) {
  return (page_record *)(void *)(m->arena + offset);
}

static size_t slot_offset(uint64_t slot) {
  return (size_t)((slot & SLOT_REF_MASK) - 2) * 4;
}

static uint64_t slot_make(uint64_t hash, size_t offset) {
  return (hash >> SLOT_REF_BITS << SLOT_REF_BITS) | (uint64_t)(offset / 4 + 2);
}

static bool slot_tag_matches(uint64_t slot, uint64_t hash) {
  return (slot >> SLOT_REF_BITS) == (hash >> SLOT_REF_BITS);
}

/* The slot index of the live record for (domain, key), or SIZE_MAX. */
static size_t find_slot(const memory_catalog *m, uint32_t domain_id,
                        const char *key, size_t length, uint64_t hash) {
  if (m->slot_count == 0) {
    return SIZE_MAX;
  }
  size_t mask = m->slot_count - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    uint64_t slot = m->slots[i];
    if (slot == SLOT_EMPTY) {
      return SIZE_MAX;
    }
    if (slot != SLOT_DEAD && slot_tag_matches(slot, hash)) {
      const page_record *r = record_at(m, slot_offset(slot));
      if (r->domain_id == domain_id && r->key_length == length &&
          memcmp(r->key, key, length) == 0) {
        return i;
      }
    }
  }
}

static page_record *find_page(const memory_catalog *m, uint32_t domain_id,
                              const char *key) {
  size_t length = strlen(key);
  size_t i =
      find_slot(m, domain_id, key, length, page_hash(domain_id, key, length));
  return i == SIZE_MAX ? NULL : record_at(m, slot_offset(m->slots[i]));
}

/* Puts a reference to the record at `offset` in the first free slot of its
 * probe sequence; the table has one (the load stays under 3/4). */
static void slot_put(memory_catalog *m, uint64_t hash, size_t offset) {
  size_t mask = m->slot_count - 1;
  size_t i = hash & mask;
  while (m->slots[i] != SLOT_EMPTY && m->slots[i] != SLOT_DEAD) {
    i = (i + 1) & mask;
  }
  if (m->slots[i] == SLOT_DEAD) {
    m->dead_slots--;
  }
  m->slots[i] = slot_make(hash, offset);
  m->live_slots++;
}

/* Replaces the slot table by one of `count` slots indexing every live
 * record, which drops the forgotten ones; false (table unchanged) when out
 * of memory. Hashes every key again: slots keep only 24 bits of a hash. */
static bool slots_rebuild(memory_catalog *m, size_t count) {
  uint64_t *slots = calloc(count, sizeof *slots);
  if (slots == NULL) {
    return false;
  }
  free(m->slots);
  m->slots = slots;
  m->slot_count = count;
  m->live_slots = 0;
  m->dead_slots = 0;
  for (size_t at = 0; at < m->arena_used;) {
    const page_record *r = record_at(m, at);
    if (r->count > 0) {
      slot_put(m, page_hash(r->domain_id, r->key, r->key_length), at);
    }
    at += record_size(r->key_length);
  }
  return true;
}

/* Makes room for one more slot: live and dead slots stay under 3/4 of the
 * table, and a rebuilt table is at most half full, so rebuilds are spaced
 * by at least a quarter of the table's inserts. */
static bool slots_reserve(memory_catalog *m) {
  size_t used = m->live_slots + m->dead_slots + 1;
  if (m->slot_count != 0 && used <= m->slot_count / 4 * 3) {
    return true;
  }
  size_t count = SLOT_MIN;
  while (count / 2 < m->live_slots + 1) {
    if (count > SIZE_MAX / 2 / sizeof(uint64_t)) {
      return false;
    }
    count *= 2;
  }
  if (slots_rebuild(m, count)) {
    return true;
  }
  /* Keep the current table while it still has a free slot. */
  return m->slot_count != 0 && used < m->slot_count;
}

/* Appends a record for (domain, key) bound to `manifest_id`; returns its
 * offset, or SIZE_MAX when out of memory or past the slots' 4 TiB. */
static size_t record_append(memory_catalog *m, uint32_t domain_id,
                            const char *key, size_t length,
                            uint32_t manifest_id) {
  size_t size = record_size(length);
  if (size == 0 || m->arena_used > SIZE_MAX - size ||
      (m->arena_used + size) / 4 + 2 > SLOT_REF_MASK) {
    return SIZE_MAX;
  }
  size_t need = m->arena_used + size;
  if (need > m->arena_capacity) {
    /* Growing by half: realloc of a large block moves its pages (mremap on
     * Linux), and what is reserved but not yet written is never touched. */
    size_t capacity = m->arena_capacity < 65536 ? 65536 : m->arena_capacity;
    while (capacity < need) {
      capacity = capacity > SIZE_MAX / 3 * 2 ? need : capacity / 2 * 3;
    }
    uint8_t *arena = realloc(m->arena, capacity);
    if (arena == NULL) {
      return SIZE_MAX;
    }
    m->arena = arena;
    m->arena_capacity = capacity;
  }
  size_t offset = m->arena_used;
  page_record *r = record_at(m, offset);
  r->domain_id = domain_id;
  r->key_length = (uint32_t)length;
  r->count = 1;
  r->id = manifest_id;
  memcpy(r->key, key, length);
  memset(r->key + length, 0, size - sizeof *r - length);
  m->arena_used = need;
  m->key_bytes += length;
  return offset;
}

static uint32_t *record_ids(const memory_catalog *m, page_record *r) {
  return r->count == 1 ? &r->id : m->lists[r->id]->ids;
}

/* Frees the id list at `index` for reuse. */
static void list_release(memory_catalog *m, uint32_t index) {
  m->list_bytes -= sizeof(id_list) + m->lists[index]->capacity * 4u;
  free(m->lists[index]);
  m->lists[index] = NULL;
  /* free_lists has room for every list (grown with lists). */
  m->free_lists[m->free_count++] = index;
}

/* Binds `id` to the record's page as well; false when out of memory. */
static bool record_add_id(memory_catalog *m, page_record *r, uint32_t id) {
  if (r->count == 1) {
    uint32_t index;
    if (m->free_count > 0) {
      index = m->free_lists[m->free_count - 1];
    } else {
      if (m->list_count >= UINT32_MAX ||
          !reshard_catalog_grow((void **)&m->lists, &m->list_capacity,
                                m->list_count + 1, sizeof *m->lists) ||
          !reshard_catalog_grow((void **)&m->free_lists, &m->free_capacity,
                                m->list_count + 1, sizeof *m->free_lists)) {
        return false;
      }
      index = (uint32_t)m->list_count;
    }
    id_list *list = malloc(sizeof *list + 4 * sizeof(uint32_t));
    if (list == NULL) {
      return false;
    }
    if (index == m->list_count) {
      m->list_count++;
    } else {
      m->free_count--;
    }
    list->capacity = 4;
    list->ids[0] = r->id;
    list->ids[1] = id;
    m->lists[index] = list;
    m->list_bytes += sizeof *list + 4 * sizeof(uint32_t);
    r->id = index;
    r->count = 2;
    return true;
  }
  id_list *list = m->lists[r->id];
  if (r->count == list->capacity) {
    if (list->capacity > (UINT32_MAX - sizeof *list) / 8) {
      return false;
    }
    id_list *grown =
        realloc(list, sizeof *list + 2 * list->capacity * sizeof(uint32_t));
    if (grown == NULL) {
      return false;
    }
    m->list_bytes += grown->capacity * sizeof(uint32_t);
    grown->capacity *= 2;
    m->lists[r->id] = list = grown;
  }
  list->ids[r->count++] = id;
  return true;
}

/* Unbinds the page's manifest at position `j` of its ids. */
static void record_remove_id(memory_catalog *m, page_record *r, uint32_t j) {
  if (r->count == 1) {
    r->count = 0;
    return;
  }
  id_list *list = m->lists[r->id];
  memmove(&list->ids[j], &list->ids[j + 1],
          (r->count - j - 1) * sizeof(uint32_t));
  if (--r->count == 1) {
    uint32_t index = r->id;
    r->id = list->ids[0];
    list_release(m, index);
  }
}

/* Marks the record in slot `i` forgotten, once its count is 0. */
static void record_forget(memory_catalog *m, size_t i) {
  const page_record *r = record_at(m, slot_offset(m->slots[i]));
  m->slots[i] = SLOT_DEAD;
  m->live_slots--;
  m->dead_slots++;
  m->dead_bytes += record_size(r->key_length);
  m->key_bytes -= r->key_length;
}

/* Moves the live records down over the forgotten ones and rebuilds the
 * slots, once the forgotten are half the arena. The table's size stays;
 * when no table can be had the dead records stay too (nothing is lost). */
static void arena_compact(memory_catalog *m) {
  if (m->dead_bytes < 65536 || m->dead_bytes < m->arena_used / 2) {
    return;
  }
  uint64_t *slots = calloc(m->slot_count, sizeof *slots);
  if (slots == NULL) {
    return;
  }
  size_t to = 0;
  for (size_t at = 0; at < m->arena_used;) {
    const page_record *r = record_at(m, at);
    size_t size = record_size(r->key_length);
    if (r->count > 0) {
      memmove(m->arena + to, r, size);
      to += size;
    }
    at += size;
  }
  m->arena_used = to;
  m->dead_bytes = 0;
  /* Give back what is no longer needed (the pages were written once). */
  size_t keep = to / 2 * 3 < 65536 ? 65536 : to / 2 * 3;
  if (to < SIZE_MAX / 4 && m->arena_capacity / 2 > keep) {
    uint8_t *arena = realloc(m->arena, keep);
    if (arena != NULL) {
      m->arena = arena;
      m->arena_capacity = keep;
    }
  }
  free(m->slots);
  m->slots = slots;
  m->live_slots = 0;
  m->dead_slots = 0;
  for (size_t at = 0; at < m->arena_used;) {
    const page_record *r = record_at(m, at);
    slot_put(m, page_hash(r->domain_id, r->key, r->key_length), at);
    at += record_size(r->key_length);
  }
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
    size_t length = strlen(page_keys[i]);
    uint64_t hash = page_hash(domain->id, page_keys[i], length);
    size_t slot = find_slot(m, domain->id, page_keys[i], length, hash);
    if (slot == SIZE_MAX) {
      size_t offset = SIZE_MAX;
      if (length <= UINT32_MAX && slots_reserve(m)) {
        offset =
            record_append(m, domain->id, page_keys[i], length, manifest->id);
      }
      if (offset == SIZE_MAX) {
        reshard_error_set(&err, RESHARD_INTERNAL,
                          "catalog: out of memory binding page_keys[%zu]", i);
        break;
      }
      slot_put(m, hash, offset);
      added++;
      m->bindings++;
      continue;
    }
    page_record *r = record_at(m, slot_offset(m->slots[slot]));
    const uint32_t *ids = record_ids(m, r);
    bool present = false;
    for (uint32_t j = 0; j < r->count && !present; j++) {
      present = ids[j] == manifest->id;
    }
    if (present) {
      continue;
    }
    if (!record_add_id(m, r, manifest->id)) {
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
    size_t length = strlen(page_keys[i]);
    size_t slot = find_slot(m, domain->id, page_keys[i], length,
                            page_hash(domain->id, page_keys[i], length));
    if (slot == SIZE_MAX) {
      continue;
    }
    page_record *r = record_at(m, slot_offset(m->slots[slot]));
    if (manifest == NULL) {
      removed += r->count;
      m->bindings -= r->count;
      if (r->count > 1) {
        list_release(m, r->id);
      }
      r->count = 0;
    } else {
      const uint32_t *ids = record_ids(m, r);
      for (uint32_t j = 0; j < r->count; j++) {
        if (ids[j] == manifest->id) {
          record_remove_id(m, r, j);
          removed++;
          m->bindings--;
          break;
        }
      }
    }
    if (r->count == 0) {
      record_forget(m, slot);
    }
  }
  /* Records move only here, after the last one was used. */
  arena_compact(m);
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
  size_t *start = NULL;
  page_record **records = NULL;
  const char **keys = NULL;
  if (page_count < SIZE_MAX / sizeof *start) {
    start = malloc((page_count + 1) * sizeof *start);
    records = malloc((page_count ? page_count : 1) * sizeof *records);
  }
  if (start == NULL || records == NULL) {
    goto oom;
  }
  size_t total = 0;
  for (size_t i = 0; i < page_count; i++) {
    records[i] = domain ? find_page(m, domain->id, page_keys[i]) : NULL;
    total += records[i] ? records[i]->count : 0;
  }
  if (total >= SIZE_MAX / sizeof *keys ||
      (keys = malloc((total ? total : 1) * sizeof *keys)) == NULL) {
    goto oom;
  }
  size_t at = 0;
  for (size_t i = 0; i < page_count; i++) {
    start[i] = at;
    if (records[i] != NULL) {
      const uint32_t *ids = record_ids(m, records[i]);
      for (uint32_t j = 0; j < records[i]->count; j++) {
        keys[at++] = m->manifest_by_id[ids[j]]->key;
      }
    }
  }
  start[page_count] = at;
  result.start = start;
  result.manifest_keys = keys;
  cb(data, &err, &result);
  free(keys);
  free(records);
  free(start);
  return;
oom:
  free(keys);
  free(records);
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

static void memory_close(reshard_catalog *catalog, reshard_catalog_close_cb cb,
                         void *data) {
  memory_catalog *m = (memory_catalog *)catalog;
  for (size_t i = 0; i < m->list_count; i++) {
    free(m->lists[i]);
  }
  free(m->lists);
  free(m->free_lists);
  free(m->slots);
  free(m->arena);
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
            reshard_table_init(&m->manifests, 64);
  for (size_t i = 0; ok && i < RESHARD_CATALOG_OBJECT_KINDS; i++) {
    ok = reshard_table_init(&m->objects[i], 16);
  }
  if (!ok) {
    if (m != NULL) {
      reshard_table_destroy(&m->domains);
      reshard_table_destroy(&m->manifests);
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
  out->page_entries = m->live_slots;
  /* Everything written for the pages but their keys: record headers and
   * padding, forgotten records not yet compacted, the slots, the id lists
   * and the table of lists. */
  out->binding_bytes = m->arena_used - m->key_bytes +
                       m->slot_count * sizeof *m->slots + m->list_bytes +
                       m->list_capacity * sizeof *m->lists +
                       m->free_capacity * sizeof *m->free_lists;
  out->key_bytes = m->key_bytes;
  out->arena_bytes = m->arena_capacity;
}
