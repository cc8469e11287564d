/* Tests daemon/cache.c (and the shared objects it holds): hits and misses,
 * LRU eviction under an exact byte budget, and values outliving eviction
 * while a reader holds them. */
#include <criterion/criterion.h>
#include <string.h>

#include "cache/cache.h"

static reshard_shared *value(const char *text) {
  const char *keys[] = {text};
  reshard_shared_keys *v = reshard_shared_keys_create(keys, 1);
  cr_assert_not_null(v);
  return &v->base;
}

static bool put(reshard_cache *cache, const char *key, reshard_shared *v) {
  bool ok =
      reshard_cache_put(cache, RESHARD_CACHE_MANIFEST, key, strlen(key), v);
  reshard_shared_unref(v); /* the cache holds its own reference */
  return ok;
}

static reshard_shared *get(reshard_cache *cache, const char *key) {
  return reshard_cache_get(cache, RESHARD_CACHE_MANIFEST, key, strlen(key));
}

Test(cache, hit_miss_and_kinds) {
  reshard_cache *cache = reshard_cache_create(1 << 20);
  cr_assert(put(cache, "a", value("manifest-a")));
  reshard_shared *hit = get(cache, "a");
  cr_assert_not_null(hit);
  cr_assert_str_eq(((reshard_shared_keys *)hit)->keys[0], "manifest-a");
  reshard_shared_unref(hit);
  cr_assert_null(get(cache, "b"));
  /* The same key under another kind is another entry. */
  cr_assert_null(reshard_cache_get(cache, RESHARD_CACHE_JOIN, "a", 1));
  reshard_cache_stats stats;
  reshard_cache_get_stats(cache, &stats);
  cr_assert_eq(stats.hits[RESHARD_CACHE_MANIFEST], 1);
  cr_assert_eq(stats.misses[RESHARD_CACHE_MANIFEST], 1);
  cr_assert_eq(stats.misses[RESHARD_CACHE_JOIN], 1);
  cr_assert_eq(stats.entries[RESHARD_CACHE_MANIFEST], 1);
  cr_assert_gt(stats.total_bytes, 0);
  reshard_cache_remove(cache, RESHARD_CACHE_MANIFEST, "a", 1);
  cr_assert_null(get(cache, "a"));
  reshard_cache_get_stats(cache, &stats);
  cr_assert_eq(stats.total_bytes, 0);
  reshard_cache_destroy(cache);
}

Test(cache, evicts_least_recently_used_within_budget) {
  /* Measure one entry, then allow exactly three. */
  reshard_cache *probe = reshard_cache_create(1 << 20);
  put(probe, "k0", value("v0"));
  reshard_cache_stats stats;
  reshard_cache_get_stats(probe, &stats);
  uint64_t entry = stats.total_bytes;
  reshard_cache_destroy(probe);

  reshard_cache *cache = reshard_cache_create(3 * entry);
  cr_assert(put(cache, "k0", value("v0")));
  cr_assert(put(cache, "k1", value("v1")));
  cr_assert(put(cache, "k2", value("v2")));
  reshard_shared_unref(get(cache, "k0")); /* k1 is now the oldest */
  cr_assert(put(cache, "k3", value("v3")));
  cr_assert_null(get(cache, "k1"));
  reshard_shared *k0 = get(cache, "k0");
  cr_assert_not_null(k0);
  reshard_shared_unref(k0);
  reshard_cache_get_stats(cache, &stats);
  cr_assert_leq(stats.total_bytes, stats.budget);
  cr_assert_eq(stats.entries[RESHARD_CACHE_MANIFEST], 3);
  cr_assert_eq(stats.evictions[RESHARD_CACHE_MANIFEST], 1);
  reshard_cache_destroy(cache);
}

Test(cache, rejects_an_entry_larger_than_the_budget) {
  reshard_cache *cache = reshard_cache_create(64);
  cr_assert(!put(cache, "big",
                 value("a value that cannot fit in 64 bytes "
                       "together with its entry")));
  cr_assert_null(get(cache, "big"));
  reshard_cache_destroy(cache);
}

Test(cache, value_outlives_eviction_while_referenced) {
  reshard_cache *cache = reshard_cache_create(1 << 20);
  put(cache, "a", value("still here"));
  reshard_shared *held = get(cache, "a");
  reshard_cache_remove(cache, RESHARD_CACHE_MANIFEST, "a", 1);
  reshard_cache_destroy(cache);
  cr_assert_str_eq(((reshard_shared_keys *)held)->keys[0], "still here");
  reshard_shared_unref(held); /* the last reference frees it */
}

Test(cache, replacing_a_key_keeps_one_entry) {
  reshard_cache *cache = reshard_cache_create(1 << 20);
  put(cache, "a", value("one"));
  put(cache, "a", value("two"));
  reshard_shared *hit = get(cache, "a");
  cr_assert_str_eq(((reshard_shared_keys *)hit)->keys[0], "two");
  reshard_shared_unref(hit);
  reshard_cache_stats stats;
  reshard_cache_get_stats(cache, &stats);
  cr_assert_eq(stats.entries[RESHARD_CACHE_MANIFEST], 1);
  reshard_cache_destroy(cache);
}

Test(cache, join_key) {
  char key[256];
  size_t n =
      reshard_cache_join_key(key, sizeof key, "sha256:l", "sha256:p", 3, "r-0");
  cr_assert_eq(n, strlen("sha256:l|sha256:p|3|r-0"));
  cr_assert_str_eq(key, "sha256:l|sha256:p|3|r-0");
  cr_assert_eq(reshard_cache_join_key(key, 8, "sha256:l", "sha256:p", 3, "r"),
               0);
}

Test(cache, join_key_prints_every_dp_rank) {
  char key[256];
  cr_assert_eq(reshard_cache_join_key(key, sizeof key, "l", "p", 0, "r"),
               strlen("l|p|0|r"));
  cr_assert_str_eq(key, "l|p|0|r");
  reshard_cache_join_key(key, sizeof key, "l", "p", UINT64_MAX, "r");
  cr_assert_str_eq(key, "l|p|18446744073709551615|r");
}

Test(cache, key_fits_with_its_terminator_or_is_refused) {
  const char *parts[] = {"ab", "", "cd"};
  char key[8];
  memset(key, 'x', sizeof key);
  /* "ab||cd" is 6 bytes and its NUL the 7th. */
  cr_assert_eq(reshard_cache_key(key, 7, parts, 3), 6);
  cr_assert_str_eq(key, "ab||cd");
  cr_assert_eq(key[7], 'x', "nothing written past the capacity");
  cr_assert_eq(reshard_cache_key(key, 6, parts, 3), 0);
  cr_assert_eq(reshard_cache_key(key, 0, parts, 3), 0);
  cr_assert_eq(reshard_cache_key(key, 1, parts, 0), 0);
  cr_assert_str_eq(key, "", "no parts: an empty key");
  cr_assert_eq(reshard_cache_key(key, 0, parts, 0), 0);
}

Test(cache, shared_manifest_is_a_deep_copy) {
  uint64_t layers[] = {0, 1};
  char suffix[] = "0";
  reshard_shard shard = {layers, 2, 0, 2, suffix};
  reshard_manifest manifest = {
      "ns",
      "model",
      "rev",
      "fp",
      {{layers, 2, "bf16", 2, 16, 2, 8, 8}, RESHARD_FORMAT_PLHD, &shard, 1}};
  reshard_shared_manifest *m =
      reshard_shared_manifest_create(&manifest, "kv/key", "sha256:id", "dom");
  cr_assert_not_null(m);
  layers[1] = 99;
  suffix[0] = 'x';
  cr_assert_eq(m->manifest.layout.shards[0].layer_ids[1], 1);
  cr_assert_str_eq(m->manifest.layout.shards[0].key_suffix, "0");
  cr_assert_eq(m->manifest.layout.descriptor.global_layer_ids[1], 1);
  cr_assert_str_eq(m->manifest_key, "kv/key");
  cr_assert_gt(m->base.bytes, sizeof *m);
  reshard_shared_unref(&m->base);
}
