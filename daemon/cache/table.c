#include "cache/table.h"

#include <stdlib.h>
#include <string.h>

static uint64_t read64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, sizeof v);
  return v;
}

static uint64_t mix(uint64_t a, uint64_t b) {
  __uint128_t product = (__uint128_t)a * b;
  return (uint64_t)product ^ (uint64_t)(product >> 64);
}

/* A multiply-xorshift hash in the spirit of wyhash: 16 bytes per step, a
 * final avalanche. Fast on short keys (page keys, digests); long keys (an
 * inline binding of 10 KB, hashed on the loop for every PlanLoad) go
 * through four independent lanes first, so the multiplications overlap
 * instead of waiting on each other. */
uint64_t reshard_hash(const void *data, size_t length, uint64_t seed) {
  static const uint64_t k0 = 0xa0761d6478bd642full;
  static const uint64_t k1 = 0xe7037ed1a0b428dbull;
  static const uint64_t k2 = 0x8ebc6af09c88c6e3ull;
  static const uint64_t k3 = 0x589965cc75374cc3ull;
  const unsigned char *p = data;
  uint64_t h = seed ^ mix(seed ^ k0, length ^ k1);
  if (length >= 256) {
    uint64_t lane[4] = {h, h ^ k2, h ^ k3, h ^ k0};
    while (length >= 64) {
      for (int l = 0; l < 4; l++) {
        lane[l] =
            mix(read64(p + 16 * l) ^ k1, read64(p + 16 * l + 8) ^ lane[l]);
      }
      p += 64;
      length -= 64;
    }
    h = mix(lane[0] ^ lane[1], lane[2] ^ lane[3] ^ k2);
  }
  while (length >= 16) {
    h = mix(read64(p) ^ k1, read64(p + 8) ^ h);
    p += 16;
    length -= 16;
  }
  uint64_t a = 0, b = 0;
  if (length >= 8) {
    a = read64(p);
    p += 8;
    length -= 8;
  }
  for (size_t i = 0; i < length; i++) {
    b |= (uint64_t)p[i] << (8 * i);
  }
  return mix(h ^ a ^ k0, b ^ k1 ^ length);
}

bool reshard_table_init(reshard_table *table, size_t initial_buckets) {
  size_t count = 16;
  while (count < initial_buckets) {
    count *= 2;
  }
  table->buckets = calloc(count, sizeof *table->buckets);
  table->bucket_count = table->buckets ? count : 0;
  table->count = 0;
  return table->buckets != NULL;
}

void reshard_table_destroy(reshard_table *table) {
  free(table->buckets);
  table->buckets = NULL;
  table->bucket_count = 0;
  table->count = 0;
}

reshard_table_node *reshard_table_find(const reshard_table *table,
                                       uint64_t hash,
                                       reshard_table_match_fn match,
                                       const void *key) {
  if (table->bucket_count == 0) {
    return NULL;
  }
  reshard_table_node *node = table->buckets[hash & (table->bucket_count - 1)];
  for (; node != NULL; node = node->next) {
    if (node->hash == hash && match(node, key)) {
      return node;
    }
  }
  return NULL;
}

static void grow(reshard_table *table) {
  size_t count = table->bucket_count * 2;
  reshard_table_node **buckets = calloc(count, sizeof *buckets);
  if (buckets == NULL) {
    return;
  }
  for (size_t i = 0; i < table->bucket_count; i++) {
    reshard_table_node *node = table->buckets[i];
    while (node != NULL) {
      reshard_table_node *next = node->next;
      size_t index = node->hash & (count - 1);
      node->next = buckets[index];
      buckets[index] = node;
      node = next;
    }
  }
  free(table->buckets);
  table->buckets = buckets;
  table->bucket_count = count;
}

void reshard_table_insert(reshard_table *table, reshard_table_node *node) {
  if (table->bucket_count == 0) {
    if (!reshard_table_init(table, 16)) {
      abort(); /* an entry cannot be linked anywhere */
    }
  }
  if (table->count >= table->bucket_count) {
    grow(table);
  }
  size_t index = node->hash & (table->bucket_count - 1);
  node->next = table->buckets[index];
  table->buckets[index] = node;
  table->count++;
}

void reshard_table_remove(reshard_table *table, reshard_table_node *node) {
  reshard_table_node **link =
      &table->buckets[node->hash & (table->bucket_count - 1)];
  while (*link != node) {
    link = &(*link)->next;
  }
  *link = node->next;
  node->next = NULL;
  table->count--;
}

reshard_table_node *reshard_table_next(const reshard_table *table,
                                       size_t *cursor,
                                       reshard_table_node *node) {
  if (node != NULL && node->next != NULL) {
    return node->next;
  }
  size_t i = node != NULL ? *cursor + 1 : *cursor;
  for (; i < table->bucket_count; i++) {
    if (table->buckets[i] != NULL) {
      *cursor = i;
      return table->buckets[i];
    }
  }
  *cursor = table->bucket_count;
  return NULL;
}

void reshard_table_clear(reshard_table *table,
                         void (*release)(reshard_table_node *node, void *data),
                         void *data) {
  for (size_t i = 0; i < table->bucket_count; i++) {
    reshard_table_node *node = table->buckets[i];
    table->buckets[i] = NULL;
    while (node != NULL) {
      reshard_table_node *next = node->next;
      node->next = NULL;
      release(node, data);
      node = next;
    }
  }
  table->count = 0;
}

size_t reshard_table_memory(const reshard_table *table) {
  return table->bucket_count * sizeof *table->buckets;
}
