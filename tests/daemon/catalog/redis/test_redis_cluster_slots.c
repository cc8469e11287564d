/* Tests daemon/catalog/redis/redis_cluster_slots.c: CLUSTER SLOTS replies
 * (built by hand as hiredis would hand them over) applied to the slot map:
 * good replies map every range to its primary and only to it, an empty ip
 * is the node asked, "?" and impossible ports are skipped, a later reply
 * replaces the map, and every malformed reply (not an array, a range past
 * 16383, an entry with no primary node...) is refused with the map left as
 * it was. No loop and no connection: nothing here connects. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_cluster.h"
#include "redis_reply_fixture.h"

static redis_catalog *r;

static void setup(void) {
  r = calloc(1, sizeof *r);
  cr_assert_not_null(r);
  bool oom = false;
  cr_assert(reshard__redis_cluster_open(
      r, "redis-cluster://127.0.0.1:7000,seed.invalid:7001", &oom));
  cr_assert_not(oom);
  cr_assert_eq(r->cluster->count, 2);
}

static void teardown(void) {
  reshard__redis_cluster_free(r);
  free(r);
}

TestSuite(redis_cluster_slots, .init = setup, .fini = teardown);

static redis_node *seed(size_t i) {
  return r->cluster->nodes[i];
}

/* The node a slot maps to, or NULL. */
static redis_node *owner(unsigned slot) {
  int16_t index = r->cluster->slots[slot];
  return index < 0 ? NULL : r->cluster->nodes[index];
}

static void assert_owner(unsigned slot, const char *host, int port) {
  redis_node *node = owner(slot);
  cr_assert_not_null(node, "slot %u has no owner", slot);
  cr_assert_str_eq(node->host, host, "slot %u", slot);
  cr_assert_eq(node->port, port, "slot %u", slot);
}

static bool apply(redisReply *reply) {
  bool ok = reshard__redis_slots_apply(r, seed(0), reply);
  freeReplyObject(reply);
  return ok;
}

/* Three primaries, each with one replica, as redis-cli --cluster create
 * lays them out. */
static redisReply *three_primaries(void) {
  return fx_arr(3,
                fx_arr(4, fx_int(0), fx_int(5460),
                       fx_endpoint("127.0.0.1", 7000, "id-a"),
                       fx_endpoint("127.0.0.1", 7004, "id-a-replica")),
                fx_arr(4, fx_int(5461), fx_int(10922),
                       fx_endpoint("127.0.0.1", 7001, "id-b"),
                       fx_endpoint("127.0.0.1", 7005, "id-b-replica")),
                fx_arr(4, fx_int(10923), fx_int(16383),
                       fx_endpoint("127.0.0.1", 7002, "id-c"),
                       fx_endpoint("127.0.0.1", 7003, "id-c-replica")));
}

Test(redis_cluster_slots, every_range_maps_to_its_primary) {
  cr_assert(apply(three_primaries()));
  /* The seed 127.0.0.1:7000 is the same node, not a new one. */
  assert_owner(0, "127.0.0.1", 7000);
  cr_assert_eq(owner(0), seed(0));
  assert_owner(5460, "127.0.0.1", 7000);
  assert_owner(5461, "127.0.0.1", 7001);
  assert_owner(10922, "127.0.0.1", 7001);
  assert_owner(10923, "127.0.0.1", 7002);
  assert_owner(16383, "127.0.0.1", 7002);
  for (unsigned s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    cr_assert_not_null(owner(s), "slot %u", s);
  }
  /* Two seeds and two new primaries; replicas are not nodes to use. */
  cr_assert_eq(r->cluster->count, 4);
  for (size_t i = 0; i < r->cluster->count; i++) {
    cr_assert_neq(r->cluster->nodes[i]->port, 7003);
    cr_assert_neq(r->cluster->nodes[i]->port, 7004);
    cr_assert_neq(r->cluster->nodes[i]->port, 7005);
  }
  /* A numeric host needs no resolving. */
  cr_assert(owner(5461)->numeric);
  cr_assert_str_eq(owner(5461)->ip, "127.0.0.1");
}

Test(redis_cluster_slots, entries_in_any_order_and_single_slots) {
  cr_assert(apply(fx_arr(
      3, fx_arr(3, fx_int(16383), fx_int(16383), fx_endpoint("::1", 7010, "x")),
      fx_arr(3, fx_int(100), fx_int(100), fx_endpoint("10.0.0.9", 7011, "y")),
      fx_arr(3, fx_int(0), fx_int(99),
             fx_endpoint("redis-0.redis.default.svc", 6379, "z")))));
  assert_owner(16383, "::1", 7010);
  cr_assert(owner(16383)->numeric);
  assert_owner(100, "10.0.0.9", 7011);
  assert_owner(0, "redis-0.redis.default.svc", 6379);
  assert_owner(99, "redis-0.redis.default.svc", 6379);
  /* A host name is resolved on first use. */
  cr_assert_not(owner(0)->numeric);
  cr_assert_str_eq(owner(0)->ip, "");
  cr_assert_null(owner(101));
  cr_assert_null(owner(16382));
}

Test(redis_cluster_slots, an_empty_ip_is_the_node_asked) {
  /* Redis answers "" for its own address when it does not know it. */
  redisReply *reply = fx_arr(
      1, fx_arr(3, fx_int(0), fx_int(16383), fx_endpoint("", 7001, "me")));
  cr_assert(reshard__redis_slots_apply(r, seed(1), reply));
  freeReplyObject(reply);
  assert_owner(0, "seed.invalid", 7001);
  cr_assert_eq(owner(16383), seed(1));
  cr_assert_eq(r->cluster->count, 2);
}

Test(redis_cluster_slots, unknown_endpoints_are_skipped) {
  cr_assert(apply(fx_arr(
      3, fx_arr(3, fx_int(0), fx_int(99), fx_endpoint("?", 7000, "lost")),
      fx_arr(3, fx_int(100), fx_int(199), fx_endpoint("127.0.0.1", 0, "p0")),
      fx_arr(3, fx_int(200), fx_int(16383),
             fx_endpoint("127.0.0.1", 65536, "big")))));
  for (unsigned s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    cr_assert_null(owner(s), "slot %u", s);
  }
  cr_assert_eq(r->cluster->count, 2);
}

Test(redis_cluster_slots, a_later_reply_replaces_the_map) {
  cr_assert(apply(three_primaries()));
  /* After a reshard and a failover: 7001 took slots 0..99, 7002 lost its
   * range to its replica 7003, and nobody serves the rest (yet). */
  cr_assert(apply(fx_arr(
      2, fx_arr(3, fx_int(0), fx_int(99), fx_endpoint("127.0.0.1", 7001, "b")),
      fx_arr(3, fx_int(10923), fx_int(16383),
             fx_endpoint("127.0.0.1", 7003, "c2")))));
  assert_owner(0, "127.0.0.1", 7001);
  assert_owner(99, "127.0.0.1", 7001);
  cr_assert_null(owner(100));
  cr_assert_null(owner(5461));
  cr_assert_null(owner(10922));
  assert_owner(10923, "127.0.0.1", 7003);
  /* Nodes are never forgotten: a MOVED may name them again. */
  cr_assert_eq(r->cluster->count, 5);
}

Test(redis_cluster_slots, an_empty_reply_unmaps_every_slot) {
  cr_assert(apply(three_primaries()));
  cr_assert(apply(fx_arr(0)));
  for (unsigned s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    cr_assert_null(owner(s), "slot %u", s);
  }
}

/* Each of these is refused, and leaves the map the good reply made. */
static redisReply *malformed(int which) {
  switch (which) {
  case 0:
    return fx_int(3); /* not an array */
  case 1:
    return fx_err("ERR This instance has cluster support disabled");
  case 2:
    return fx_str("slots");
  case 3: /* an entry not an array */
    return fx_arr(1, fx_int(0));
  case 4: /* an entry with no node at all */
    return fx_arr(1, fx_arr(2, fx_int(0), fx_int(16383)));
  case 5: /* an entry with only its first slot */
    return fx_arr(1, fx_arr(1, fx_int(0)));
  case 6: /* the primary not an array */
    return fx_arr(1, fx_arr(3, fx_int(0), fx_int(16383), fx_str("127.0.0.1")));
  case 7: /* the primary with no port */
    return fx_arr(
        1, fx_arr(3, fx_int(0), fx_int(16383), fx_arr(1, fx_str("127.0.0.1"))));
  case 8: /* the primary's ip not a string */
    return fx_arr(1, fx_arr(3, fx_int(0), fx_int(16383),
                            fx_arr(2, fx_int(127), fx_int(7000))));
  case 9: /* the first slot past the last */
    return fx_arr(1, fx_arr(3, fx_int(200), fx_int(100),
                            fx_endpoint("127.0.0.1", 7000, "a")));
  case 10: /* past the last slot */
    return fx_arr(1, fx_arr(3, fx_int(0), fx_int(16384),
                            fx_endpoint("127.0.0.1", 7000, "a")));
  case 11: /* a negative slot */
    return fx_arr(1, fx_arr(3, fx_int(-1), fx_int(5),
                            fx_endpoint("127.0.0.1", 7000, "a")));
  case 12: /* slots as strings */
    return fx_arr(1, fx_arr(3, fx_str("0"), fx_str("16383"),
                            fx_endpoint("127.0.0.1", 7000, "a")));
  default: /* one bad entry after good ones: nothing of it is applied */
    return fx_arr(2,
                  fx_arr(3, fx_int(0), fx_int(16383),
                         fx_endpoint("127.0.0.1", 7009, "new")),
                  fx_arr(2, fx_int(0), fx_int(1)));
  }
}

Test(redis_cluster_slots, malformed_replies_leave_the_map_alone) {
  cr_assert(apply(three_primaries()));
  int16_t before[RESHARD_REDIS_SLOTS];
  memcpy(before, r->cluster->slots, sizeof before);
  size_t count = r->cluster->count;
  for (int which = 0; which <= 13; which++) {
    cr_expect_not(apply(malformed(which)), "malformed reply %d accepted",
                  which);
    cr_assert_eq(memcmp(before, r->cluster->slots, sizeof before), 0,
                 "malformed reply %d changed the map", which);
    cr_assert_eq(r->cluster->count, count, "malformed reply %d added a node",
                 which);
  }
}
