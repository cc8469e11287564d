/* Tests daemon/catalog/redis/redis_cluster_nodes.c without a cluster: the
 * node table (one entry per host and port, bounded names, numeric hosts
 * needing no resolving) and what dropping a node does: the error it notes,
 * its backoff of 100 ms doubling to 1 s, no reconnect before it, a name
 * resolved again, and the slot map asked again. A real libuv loop gives
 * the clock; no connection is ever made. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "catalog/redis/redis_cluster.h"

static redis_catalog *r;
static uv_loop_t loop;

static void setup(void) {
  cr_assert_eq(uv_loop_init(&loop), 0);
  r = calloc(1, sizeof *r);
  cr_assert_not_null(r);
  r->base.loop = &loop;
  snprintf(r->spec, sizeof r->spec, "redis-cluster://127.0.0.1:7000");
  bool oom = false;
  cr_assert(
      reshard__redis_cluster_open(r, "redis-cluster://127.0.0.1:7000", &oom));
}

static void teardown(void) {
  reshard__redis_cluster_free(r);
  free(r);
  cr_assert_eq(uv_loop_close(&loop), 0);
}

TestSuite(redis_cluster_nodes, .init = setup, .fini = teardown);

static int get(const char *host, int port) {
  return reshard__redis_node_get(r, host, strlen(host), port);
}

Test(redis_cluster_nodes, one_entry_per_host_and_port) {
  cr_assert_eq(get("127.0.0.1", 7000), 0);
  cr_assert_eq(get("127.0.0.1", 7001), 1);
  cr_assert_eq(get("127.0.0.2", 7000), 2);
  cr_assert_eq(get("127.0.0.1", 7001), 1);
  /* Only `length` bytes are the host. */
  cr_assert_eq(reshard__redis_node_get(r, "127.0.0.2:7000", 9, 7000), 2);
  cr_assert_eq(r->cluster->count, 3);
}

Test(redis_cluster_nodes, names_are_bounded) {
  cr_assert_eq(reshard__redis_node_get(r, "", 0, 7000), -1);
  char host[300];
  memset(host, 'h', sizeof host);
  cr_assert_eq(reshard__redis_node_get(r, host, 256, 7000), -1);
  int index = reshard__redis_node_get(r, host, 255, 7000);
  cr_assert_geq(index, 0);
  cr_assert_eq(strlen(r->cluster->nodes[index]->host), 255);
  cr_assert_not(r->cluster->nodes[index]->numeric);
}

Test(redis_cluster_nodes, numeric_hosts_need_no_resolving) {
  redis_node *v4 = r->cluster->nodes[get("10.0.0.7", 6379)];
  cr_assert(v4->numeric);
  cr_assert_str_eq(v4->ip, "10.0.0.7");
  redis_node *v6 = r->cluster->nodes[get("fe80::1", 6379)];
  cr_assert(v6->numeric);
  cr_assert_str_eq(v6->ip, "fe80::1");
  redis_node *name = r->cluster->nodes[get("redis-1.redis", 6379)];
  cr_assert_not(name->numeric);
  cr_assert_str_eq(name->ip, "");
  redis_node *odd = r->cluster->nodes[get("10.0.0", 6379)];
  cr_assert_not(odd->numeric);
}

Test(redis_cluster_nodes, a_dropped_node_backs_off) {
  redis_node *node = r->cluster->nodes[0];
  uint64_t now = uv_now(&loop);
  cr_assert_eq(node->backoff_ms, RESHARD_REDIS_NODE_BACKOFF_MIN_MS);
  reshard__redis_node_drop(node, "Connection refused");
  cr_assert_str_eq(r->last_error, "node 127.0.0.1:7000: Connection refused");
  cr_assert(node->down);
  cr_assert(r->cluster->want_refresh);
  cr_assert_null(node->ac);
  cr_assert_eq(node->retry_after_ms, now + RESHARD_REDIS_NODE_BACKOFF_MIN_MS);
  /* Not connected again before the backoff ends. */
  cr_assert_not(reshard__redis_node_connect(node));
  cr_assert_null(node->ac);
  /* 100, 200, 400, 800, then 1000 ms at most. */
  uint64_t expected[] = {200, 400, 800, 1000, 1000, 1000};
  cr_assert_eq(node->backoff_ms, expected[0]);
  for (size_t i = 1; i < sizeof expected / sizeof expected[0]; i++) {
    reshard__redis_node_drop(node, NULL);
    cr_assert_eq(node->backoff_ms, expected[i], "drop %zu", i + 1);
  }
  cr_assert_eq(node->backoff_ms, RESHARD_REDIS_NODE_BACKOFF_MAX_MS);
  cr_assert_str_eq(r->last_error, "node 127.0.0.1:7000: connection closed");
  /* A numeric node keeps its address. */
  cr_assert_str_eq(node->ip, "127.0.0.1");
}

Test(redis_cluster_nodes, a_dropped_name_is_resolved_again) {
  redis_node *node = r->cluster->nodes[get("redis-1.redis", 6379)];
  snprintf(node->ip, sizeof node->ip, "10.0.0.3");
  reshard__redis_node_drop(node, "reset");
  cr_assert_str_eq(node->ip, "");
}

Test(redis_cluster_nodes, errors_fit_the_message_buffer) {
  char host[256];
  memset(host, 'h', 255);
  host[255] = '\0';
  redis_node *node = r->cluster->nodes[get(host, 65535)];
  char message[400];
  memset(message, 'm', sizeof message - 1);
  message[sizeof message - 1] = '\0';
  reshard__redis_node_note_error(r, node, message);
  cr_assert_lt(strlen(r->last_error), sizeof r->last_error);
  /* The host and the message are cut; the port is whole. */
  cr_assert_eq(strncmp(r->last_error, "node hhhh", 9), 0);
  cr_assert_not_null(strstr(r->last_error, ":65535: mmmm"));
}
