/* What a catalog operation reported to its callback, for the catalog
 * suites (memory, LMDB, Redis): each callback records its arguments in a
 * `catalog_result` so a test can run the loop and then assert on them.
 * The including suite defines CATALOG_TEST_RECORD (a string literal, may
 * hold NUL bytes): the bytes every manifest and object record it stores
 * holds. */
#ifndef RESHARD_TEST_CATALOG_RESULTS_H
#define RESHARD_TEST_CATALOG_RESULTS_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "catalog/catalog.h"

typedef struct catalog_result {
  int calls;
  reshard_error err;
  bool created;
  bool removed;
  uint64_t count;
  bool domain_known;
  size_t found;
  char keys[8][160];
  size_t page_start[9];
} catalog_result;

static inline void on_put(void *data, const reshard_error *err, bool created) {
  catalog_result *r = data;
  r->calls++;
  r->err = *err;
  r->created = created;
}

static inline void on_removed(void *data, const reshard_error *err,
                              bool removed) {
  catalog_result *r = data;
  r->calls++;
  r->err = *err;
  r->removed = removed;
}

static inline void on_count(void *data, const reshard_error *err,
                            uint64_t count) {
  catalog_result *r = data;
  r->calls++;
  r->err = *err;
  r->count = count;
}

static inline void on_get(void *data, const reshard_error *err,
                          const reshard_catalog_record *records, size_t count) {
  catalog_result *r = data;
  r->calls++;
  r->err = *err;
  r->found = 0;
  for (size_t i = 0; records != NULL && i < count; i++) {
    if (records[i].found) {
      r->found++;
      cr_assert_eq(records[i].length, sizeof CATALOG_TEST_RECORD - 1);
      cr_assert_eq(memcmp(records[i].data, CATALOG_TEST_RECORD,
                          sizeof CATALOG_TEST_RECORD - 1),
                   0);
    }
  }
}

static inline void on_lookup(void *data, const reshard_error *err,
                             const reshard_catalog_pages *pages) {
  catalog_result *r = data;
  r->calls++;
  r->err = *err;
  if (pages == NULL) {
    return;
  }
  r->domain_known = pages->domain_known;
  for (size_t i = 0; i <= pages->page_count && i < 9; i++) {
    r->page_start[i] = pages->start[i];
  }
  size_t total = pages->start[pages->page_count];
  for (size_t i = 0; i < total && i < 8; i++) {
    snprintf(r->keys[i], sizeof r->keys[i], "%s", pages->manifest_keys[i]);
  }
}

#endif
