/* Tests daemon/catalog/redis/redis_cluster.c without a cluster: the seed
 * list of redis-cluster:// URLs, the slot each kind of operation is routed
 * by, MOVED and ASK replies parsed (slot, node; IPv6 in brackets; every
 * malformed form refused) and followed: MOVED updates the slot map at that
 * one slot and asks for the whole map again, ASK sends only the next
 * attempt elsewhere. No loop and no connection: nothing here connects. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_cluster.h"

static redis_catalog *r;

static redis_catalog *open_cluster(const char *address, bool *ok) {
  redis_catalog *c = calloc(1, sizeof *c);
  cr_assert_not_null(c);
  bool oom = false;
  *ok = reshard__redis_cluster_open(c, address, &oom);
  cr_assert_not(oom);
  return c;
}

static void close_cluster(redis_catalog *c) {
  reshard__redis_cluster_free(c);
  free(c);
}

static void setup(void) {
  bool ok;
  r = open_cluster("redis-cluster://127.0.0.1:7000", &ok);
  cr_assert(ok);
  /* Slots 0..8191 on the seed. */
  for (unsigned s = 0; s < RESHARD_REDIS_SLOTS / 2; s++) {
    r->cluster->slots[s] = 0;
  }
  r->cluster->have_map = true;
}

static void teardown(void) {
  close_cluster(r);
}

TestSuite(redis_cluster, .init = setup, .fini = teardown);

/* ---- Seeds ---- */

Test(redis_cluster, seeds_are_parsed) {
  bool ok;
  redis_catalog *c = open_cluster(
      "redis-cluster://10.0.0.1:7000,[::1]:7001,redis-0.redis:6379,"
      "10.0.0.1:7000",
      &ok);
  cr_assert(ok);
  redis_cluster *cl = c->cluster;
  cr_assert_eq(cl->count, 3, "a repeated seed is one node");
  cr_assert_str_eq(cl->nodes[0]->host, "10.0.0.1");
  cr_assert_eq(cl->nodes[0]->port, 7000);
  cr_assert(cl->nodes[0]->numeric);
  cr_assert_str_eq(cl->nodes[1]->host, "::1");
  cr_assert_eq(cl->nodes[1]->port, 7001);
  cr_assert(cl->nodes[1]->numeric);
  cr_assert_str_eq(cl->nodes[2]->host, "redis-0.redis");
  cr_assert_not(cl->nodes[2]->numeric);
  cr_assert_eq(cl->nodes[2]->backoff_ms, RESHARD_REDIS_NODE_BACKOFF_MIN_MS);
  for (unsigned s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    cr_assert_eq(cl->slots[s], -1);
  }
  cr_assert_not(cl->have_map);
  close_cluster(c);
}

Test(redis_cluster, malformed_seeds_are_refused) {
  static const char *const bad[] = {
      "redis-cluster://",           "redis-cluster://host",
      "redis-cluster://host:",      "redis-cluster://:7000",
      "redis-cluster://host:0",     "redis-cluster://host:65536",
      "redis-cluster://host:70x",   "redis-cluster://host:7000,",
      "redis-cluster://,host:7000", "redis-cluster://host:7000,,host:7001",
      "redis-cluster://a/b:7000",   "redis-cluster://[]:7000",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    bool ok;
    redis_catalog *c = open_cluster(bad[i], &ok);
    cr_expect_not(ok, "%s accepted", bad[i]);
    close_cluster(c);
  }
  /* Not a cluster URL: nothing is allocated. */
  bool ok;
  redis_catalog *c = open_cluster("redis://host:6379", &ok);
  cr_assert_not(ok);
  cr_assert_null(c->cluster);
  close_cluster(c);
}

/* ---- The slot an operation goes to ---- */

Test(redis_cluster, operations_route_by_their_domain_or_key) {
  /* CLUSTER KEYSLOT on redis-server 7.0.15: {user1000}... is 3443,
   * reshard:memory:m1 is 14831. */
  cr_assert_eq(reshard__redis_cluster_key_slot(r, OP_ADD, 0, "user1000", NULL),
               3443);
  cr_assert_eq(
      reshard__redis_cluster_key_slot(r, OP_LOOKUP, 0, "user1000", NULL), 3443);
  cr_assert_eq(reshard__redis_cluster_key_slot(r, OP_GET, 0, NULL,
                                               "kv/user1000/manifests/d1"),
               3443);
  cr_assert_eq(
      reshard__redis_cluster_key_slot(
          r, OP_GET_OBJECTS, RESHARD_CATALOG_OBJECT_MEMORY_POOL, NULL, "m1"),
      14831);
  cr_assert_eq(
      reshard__redis_cluster_key_slot(
          r, OP_PUT_OBJECT, RESHARD_CATALOG_OBJECT_MEMORY_POOL, NULL, "m1"),
      14831);
  const char *placement = "reshard:placement:p1";
  cr_assert_eq(reshard__redis_cluster_key_slot(r, OP_FORGET_OBJECT,
                                               RESHARD_CATALOG_OBJECT_PLACEMENT,
                                               NULL, "p1"),
               reshard_redis_key_slot(placement, strlen(placement)));
}

/* ---- MOVED and ASK ---- */

Test(redis_cluster, redirects_are_parsed) {
  unsigned slot;
  int index;
  cr_assert(reshard__redis_cluster_parse_redirect(
      r, "MOVED 3999 127.0.0.1:6381", &slot, &index));
  cr_assert_eq(slot, 3999);
  cr_assert_str_eq(r->cluster->nodes[index]->host, "127.0.0.1");
  cr_assert_eq(r->cluster->nodes[index]->port, 6381);
  cr_assert_eq(r->cluster->count, 2);
  /* The same node again is the same index. */
  int again;
  cr_assert(reshard__redis_cluster_parse_redirect(r, "ASK 16383 127.0.0.1:6381",
                                                  &slot, &again));
  cr_assert_eq(slot, 16383);
  cr_assert_eq(again, index);
  /* The seed itself. */
  cr_assert(reshard__redis_cluster_parse_redirect(r, "MOVED 0 127.0.0.1:7000",
                                                  &slot, &index));
  cr_assert_eq(index, 0);
  /* IPv6, bracketed or not (the last colon ends the host). */
  cr_assert(reshard__redis_cluster_parse_redirect(r, "MOVED 7 [::1]:7002",
                                                  &slot, &index));
  cr_assert_str_eq(r->cluster->nodes[index]->host, "::1");
  cr_assert_eq(r->cluster->nodes[index]->port, 7002);
  cr_assert(reshard__redis_cluster_parse_redirect(r, "ASK 7 ::1:7002", &slot,
                                                  &again));
  cr_assert_eq(again, index);
  /* A host name (cluster-announce-hostname). */
  cr_assert(reshard__redis_cluster_parse_redirect(
      r, "MOVED 12 redis-2.redis:6379", &slot, &index));
  cr_assert_str_eq(r->cluster->nodes[index]->host, "redis-2.redis");
  cr_assert_not(r->cluster->nodes[index]->numeric);
}

Test(redis_cluster, malformed_redirects_are_refused) {
  static const char *const bad[] = {
      "MOVED",
      "MOVED ",
      "MOVED 3999",
      "MOVED 3999 ",
      "MOVED x 127.0.0.1:6381",
      "MOVED 16384 127.0.0.1:6381",
      "MOVED 99999999999999999999 127.0.0.1:6381",
      "MOVED 3999x 127.0.0.1:6381",
      "MOVED 3999 127.0.0.1",
      "MOVED 3999 127.0.0.1:",
      "MOVED 3999 127.0.0.1:0",
      "MOVED 3999 127.0.0.1:65536",
      "MOVED 3999 127.0.0.1:-1",
      "MOVED 3999 :6381",
      "MOVED 3999 []:6381",
      "ASK 12",
  };
  size_t count = r->cluster->count;
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    unsigned slot = 0;
    int index = 0;
    cr_expect_not(
        reshard__redis_cluster_parse_redirect(r, bad[i], &slot, &index),
        "\"%s\" accepted", bad[i]);
  }
  cr_assert_eq(r->cluster->count, count, "a malformed redirect added a node");
}

Test(redis_cluster, moved_updates_one_slot_and_asks_for_the_map) {
  redis_op op = {.r = r};
  int16_t before[RESHARD_REDIS_SLOTS];
  memcpy(before, r->cluster->slots, sizeof before);
  cr_assert_not(r->cluster->want_refresh);
  cr_assert(reshard__redis_cluster_redirect(r, &op, "MOVED 42 127.0.0.1:7001"));
  cr_assert_null(op.ask);
  cr_assert(r->cluster->want_refresh);
  cr_assert_eq(r->cluster->count, 2);
  redis_node *target = r->cluster->nodes[r->cluster->slots[42]];
  cr_assert_str_eq(target->host, "127.0.0.1");
  cr_assert_eq(target->port, 7001);
  for (unsigned s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    if (s != 42) {
      cr_assert_eq(r->cluster->slots[s], before[s], "slot %u changed", s);
    }
  }
  /* A slot nobody owned gets its owner too. */
  cr_assert(
      reshard__redis_cluster_redirect(r, &op, "MOVED 16000 127.0.0.1:7000"));
  cr_assert_eq(r->cluster->slots[16000], 0);
}

Test(redis_cluster, ask_redirects_one_attempt_and_leaves_the_map) {
  redis_op op = {.r = r};
  int16_t before[RESHARD_REDIS_SLOTS];
  memcpy(before, r->cluster->slots, sizeof before);
  cr_assert(reshard__redis_cluster_redirect(r, &op, "ASK 42 127.0.0.1:7002"));
  cr_assert_not_null(op.ask);
  cr_assert_str_eq(op.ask->host, "127.0.0.1");
  cr_assert_eq(op.ask->port, 7002);
  cr_assert_eq(memcmp(before, r->cluster->slots, sizeof before), 0);
  cr_assert_not(r->cluster->want_refresh);
}

Test(redis_cluster, a_redirect_that_cannot_be_followed_says_so) {
  redis_op op = {.r = r};
  int16_t before[RESHARD_REDIS_SLOTS];
  memcpy(before, r->cluster->slots, sizeof before);
  cr_assert_not(reshard__redis_cluster_redirect(r, &op, "MOVED 42 nowhere"));
  cr_assert_str_eq(r->last_error, "cannot follow \"MOVED 42 nowhere\"");
  cr_assert_null(op.ask);
  cr_assert_eq(memcmp(before, r->cluster->slots, sizeof before), 0);
  cr_assert_not(r->cluster->want_refresh);
}

Test(redis_cluster, the_node_table_is_bounded) {
  char host[32];
  for (int i = (int)r->cluster->count; i < RESHARD_REDIS_MAX_NODES; i++) {
    int n = snprintf(host, sizeof host, "10.1.%d.%d", i / 256, i % 256);
    cr_assert_eq(reshard__redis_node_get(r, host, (size_t)n, 6379), i);
  }
  cr_assert_eq(r->cluster->count, RESHARD_REDIS_MAX_NODES);
  unsigned slot;
  int index;
  cr_assert_not(reshard__redis_cluster_parse_redirect(
      r, "MOVED 1 10.9.9.9:6379", &slot, &index));
  /* Known nodes are still found. */
  cr_assert(reshard__redis_cluster_parse_redirect(r, "MOVED 1 10.1.0.5:6379",
                                                  &slot, &index));
  cr_assert_eq(index, 5);
}
