/* An intrusive chained hash table: the owner embeds a reshard_table_node in
 * its entries, and the table only links them. It never allocates entries
 * and never frees them; it allocates only its bucket array. Loop-thread
 * only, like everything it indexes. */
#ifndef RESHARD_TABLE_H
#define RESHARD_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct reshard_table_node {
  struct reshard_table_node *next;
  uint64_t hash;
} reshard_table_node;

typedef struct reshard_table {
  reshard_table_node **buckets;
  size_t bucket_count; /* a power of two */
  size_t count;
} reshard_table;

/* 64-bit hash of `length` bytes, seeded. Not cryptographic. */
uint64_t reshard_hash(const void *data, size_t length, uint64_t seed);

/* Prepares an empty table. Returns false when the bucket array cannot be
 * allocated. */
bool reshard_table_init(reshard_table *table, size_t initial_buckets);

/* Frees the bucket array; the entries are the owner's to free first. */
void reshard_table_destroy(reshard_table *table);

/* Returns true when `node` is the entry for `key`. */
typedef bool (*reshard_table_match_fn)(const reshard_table_node *node,
                                       const void *key);

/* The entry with `hash` that `match` accepts, or NULL. */
reshard_table_node *reshard_table_find(const reshard_table *table,
                                       uint64_t hash,
                                       reshard_table_match_fn match,
                                       const void *key);

/* Links `node` (node->hash already set). Never fails: when the table cannot
 * grow it keeps longer chains. Does not check for duplicates. */
void reshard_table_insert(reshard_table *table, reshard_table_node *node);

/* Unlinks `node`, which must be in the table. */
void reshard_table_remove(reshard_table *table, reshard_table_node *node);

/* Iteration: start with *cursor = 0 and node = NULL; returns the next node
 * or NULL at the end. The current node may be removed before the next call
 * only through reshard_table_clear. */
reshard_table_node *reshard_table_next(const reshard_table *table,
                                       size_t *cursor,
                                       reshard_table_node *node);

/* Unlinks every entry, calling `release` (which may free it) on each. */
void reshard_table_clear(reshard_table *table,
                         void (*release)(reshard_table_node *node, void *data),
                         void *data);

/* Bytes of the bucket array, for memory accounting. */
size_t reshard_table_memory(const reshard_table *table);

#endif
