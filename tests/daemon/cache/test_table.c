/* Tests daemon/table.c: insert, find, remove and growth. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "cache/table.h"

typedef struct item {
  reshard_table_node node;
  char key[16];
} item;

static bool matches(const reshard_table_node *node, const void *key) {
  return strcmp(((const item *)node)->key, key) == 0;
}

static uint64_t hash(const char *key) {
  return reshard_hash(key, strlen(key), 1);
}

static void count_release(reshard_table_node *node, void *data) {
  (void)node;
  (*(size_t *)data)++;
}

Test(table, insert_find_remove_grow) {
  enum { N = 5000 };
  static item items[N];
  reshard_table table;
  cr_assert(reshard_table_init(&table, 4));
  for (size_t i = 0; i < N; i++) {
    snprintf(items[i].key, sizeof items[i].key, "key-%zu", i);
    items[i].node.hash = hash(items[i].key);
    reshard_table_insert(&table, &items[i].node);
  }
  cr_assert_eq(table.count, N);
  cr_assert_geq(table.bucket_count, N);
  for (size_t i = 0; i < N; i++) {
    cr_assert_eq(
        reshard_table_find(&table, hash(items[i].key), matches, items[i].key),
        &items[i].node);
  }
  cr_assert_null(reshard_table_find(&table, hash("nope"), matches, "nope"));
  for (size_t i = 0; i < N; i += 2) {
    reshard_table_remove(&table, &items[i].node);
  }
  cr_assert_eq(table.count, N / 2);
  cr_assert_null(reshard_table_find(&table, hash("key-0"), matches, "key-0"));
  cr_assert_not_null(
      reshard_table_find(&table, hash("key-1"), matches, "key-1"));
  size_t seen = 0, cursor = 0;
  for (reshard_table_node *node = reshard_table_next(&table, &cursor, NULL);
       node != NULL; node = reshard_table_next(&table, &cursor, node)) {
    seen++;
  }
  cr_assert_eq(seen, N / 2);
  size_t released = 0;
  reshard_table_clear(&table, count_release, &released);
  cr_assert_eq(released, N / 2);
  cr_assert_eq(table.count, 0);
  reshard_table_destroy(&table);
}

Test(table, hash_spreads_short_keys) {
  cr_assert_neq(reshard_hash("a", 1, 0), reshard_hash("b", 1, 0));
  cr_assert_neq(reshard_hash("abc", 3, 0), reshard_hash("abc", 3, 1));
  cr_assert_neq(reshard_hash("0123456789abcdef0", 17, 0),
                reshard_hash("0123456789abcdef1", 17, 0));
  cr_assert_eq(reshard_hash("same", 4, 7), reshard_hash("same", 4, 7));
}

/* Long keys (an inline binding) go through four lanes first: a change of
 * one byte anywhere, in any lane or in the tail, changes the hash, and so
 * do the length and the seed. */
Test(table, hash_sees_every_byte_of_long_keys) {
  enum { LENGTH = 1000 };
  unsigned char key[LENGTH];
  for (size_t i = 0; i < LENGTH; i++) {
    key[i] = (unsigned char)(i * 31);
  }
  uint64_t base = reshard_hash(key, LENGTH, 0);
  cr_assert_eq(reshard_hash(key, LENGTH, 0), base);
  cr_assert_neq(reshard_hash(key, LENGTH, 1), base);
  cr_assert_neq(reshard_hash(key, LENGTH - 1, 0), base);
  for (size_t i = 0; i < LENGTH; i++) {
    key[i] ^= 1;
    cr_assert_neq(reshard_hash(key, LENGTH, 0), base, "byte %zu unseen", i);
    key[i] ^= 1;
  }
}
