/* Tests daemon/catalog/redis/redis_slot.c: CRC16/XMODEM and the key slot
 * with hash tags, against the values a real redis-server 7.0.15
 * (--cluster-enabled yes) answers to CLUSTER KEYSLOT for the same keys,
 * and the hash tag rules of the Redis Cluster specification ("Hash tags":
 * the bytes between the first '{' and the first '}' after it, when at
 * least one byte lies between them). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "catalog/redis/redis_slot.h"

static uint16_t slot_of(const char *key) {
  return reshard_redis_key_slot(key, strlen(key));
}

Test(redis_slot, crc16_check_value) {
  /* The CRC-16/XMODEM check value, and the specification's example. */
  cr_assert_eq(reshard_redis_crc16("123456789", 9), 0x31C3);
  cr_assert_eq(reshard_redis_crc16("", 0), 0);
  cr_assert_eq(reshard_redis_crc16("A", 1), 0x58E5);
}

typedef struct known_slot {
  const char *key;
  uint16_t slot;
} known_slot;

/* redis-cli CLUSTER KEYSLOT <key> on redis-server 7.0.15. */
static const known_slot known[] = {
    {"", 0},
    {"123456789", 12739}, /* 0x31C3 */
    {"foo", 12182},
    {"bar", 5061},
    {"a", 15495},
    {"{a}", 15495},
    {"{a}b", 15495},         /* the tag is "a" */
    {"a{b}", 3300},          /* the tag is "b" */
    {"a{b}c", 3300},         /* the tag is "b" */
    {"{b}x{c}", 3300},       /* only the first tag counts */
    {"}{a}", 15495},         /* a '}' before the first '{' is no tag's end */
    {"{}", 15257},           /* empty tag: the whole key */
    {"{}a", 10875},          /* empty tag: the whole key */
    {"a{}b", 13694},         /* empty tag: the whole key */
    {"foo{}{bar}", 8363},    /* the first '{' opens an empty tag */
    {"{{a}}", 10276},        /* the tag is "{a" */
    {"{a", 10276},           /* ... the same bytes as this key */
    {"foo{{bar}}zap", 4015}, /* the tag is "{bar" */
    {"foo{bar}{zap}", 5061}, /* the tag is "bar" */
    {"a{", 14311},           /* no '}': the whole key */
    {"a}", 5921},            /* no '{': the whole key */
    {"{user1000}.following", 3443},
    {"{user1000}.followers", 3443},
    /* The catalog's own keys (redis_internal.h). */
    {"reshard:{kv/llama}:manifests", 10213},
    {"reshard:memory:m1", 14831},
};

Test(redis_slot, matches_cluster_keyslot) {
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    cr_expect_eq(slot_of(known[i].key), known[i].slot,
                 "slot of \"%s\": %u, CLUSTER KEYSLOT says %u", known[i].key,
                 (unsigned)slot_of(known[i].key), (unsigned)known[i].slot);
  }
}

Test(redis_slot, a_tag_hashes_as_its_bytes_alone) {
  cr_assert_eq(slot_of("{user1000}.following"), slot_of("user1000"));
  cr_assert_eq(slot_of("reshard:{D}:manifests"), slot_of("reshard:{D}:page:k"));
  cr_assert_eq(slot_of("reshard:{D}:manifests"), slot_of("D"));
  cr_assert_eq(slot_of("x{{a}}"), slot_of("{a"));
}

Test(redis_slot, only_length_bytes_are_read) {
  /* "a{b}c" cut after "a{b": no closing brace within the key, so the
   * whole three bytes are hashed, and nothing past them. */
  const char *key = "a{b}c";
  cr_assert_eq(reshard_redis_key_slot(key, 3),
               reshard_redis_crc16("a{b", 3) & (RESHARD_REDIS_SLOTS - 1));
  cr_assert_neq(reshard_redis_key_slot(key, 3), slot_of("a{b}c"));
  /* Bytes past a NUL count: keys are binary. */
  const char with_nul[] = {'x', '\0', 'y'};
  cr_assert_eq(reshard_redis_key_slot(with_nul, 3),
               reshard_redis_crc16(with_nul, 3) & (RESHARD_REDIS_SLOTS - 1));
  cr_assert_eq(reshard_redis_key_slot("{", 1), slot_of("{"));
}

Test(redis_slot, every_slot_is_below_16384) {
  char key[16];
  for (int i = 0; i < 100000; i++) {
    int n = snprintf(key, sizeof key, "k%d", i);
    cr_assert_lt(reshard_redis_key_slot(key, (size_t)n), RESHARD_REDIS_SLOTS);
  }
}
