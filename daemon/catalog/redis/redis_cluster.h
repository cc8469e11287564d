/* What the files of the Redis Cluster client share (redis-cluster://,
 * redis_internal.h lists the functions the rest of the catalog calls):
 *
 *   redis_cluster.c        the protocol rules it follows (its top comment),
 *                          routing an operation to its slot's primary,
 *                          MOVED / ASK / TRYAGAIN and the rest, parked
 *                          operations, the watchdog, seeds and life cycle
 *   redis_cluster_nodes.c  the node table, one connection per node (AUTH),
 *                          name resolution, dropping a node and its backoff
 *   redis_cluster_slots.c  the slot map: CLUSTER SLOTS asked and applied
 *   redis_cluster_split.c  reads of keys of several slots: one per slot,
 *                          gathered
 *
 * Only the loop thread touches any of it. Internal to the backend; the
 * unit tests (tests/daemon/catalog/redis/test_redis_cluster*.c) call the
 * pure parts directly. */
#ifndef RESHARD_CATALOG_REDIS_CLUSTER_H
#define RESHARD_CATALOG_REDIS_CLUSTER_H

#include <arpa/inet.h>

#include "catalog/redis/redis_internal.h"
#include "catalog/redis/redis_slot.h"

#define RESHARD_REDIS_MAX_NODES 1024
#define RESHARD_REDIS_MAX_REDIRECTS 16
#define RESHARD_REDIS_RETRY_MS 20
#define RESHARD_REDIS_REFRESH_MIN_MS 100
#define RESHARD_REDIS_REFRESH_TIMEOUT_MS 1000
#define RESHARD_REDIS_NODE_BACKOFF_MIN_MS 100
#define RESHARD_REDIS_NODE_BACKOFF_MAX_MS 1000

typedef struct redis_node {
  redis_catalog *r;
  char host[256];            /* as the seed list or the cluster names it */
  char ip[INET6_ADDRSTRLEN]; /* empty until resolved */
  int port;
  bool numeric;
  redisAsyncContext *ac;
  op_list inflight; /* operations sent here, oldest first */
  uint64_t retry_after_ms;
  uint64_t backoff_ms;
  bool down; /* logged as unreachable */
  uv_getaddrinfo_t resolve;
  bool resolving;
} redis_node;

struct redis_cluster {
  redis_node **nodes;
  size_t count, capacity;
  int16_t slots[RESHARD_REDIS_SLOTS]; /* index in nodes; -1: unknown */
  bool have_map;
  bool map_failed; /* no map, and no node answered the last attempt */
  bool want_refresh, refreshing;
  redis_node *refresh_node;
  uint64_t refresh_ms, last_refresh_ms;
  size_t cursor; /* the node asked for the map next */
  int resolving;
  op_list parked;
};

static inline uint64_t reshard__redis_now_ms(const redis_catalog *r) {
  return uv_now(r->base.loop);
}

/* ---- Nodes (redis_cluster_nodes.c) ---- */

/* The index of the node `host` (`length` bytes, no brackets) : `port`,
 * added when new; -1 when the table is full, the name is empty or too
 * long, or memory ran out. */
int reshard__redis_node_get(redis_catalog *r, const char *host, size_t length,
                            int port);
/* Sets r->last_error to `message` (or "connection closed") naming the
 * node. */
void reshard__redis_node_note_error(redis_catalog *r, const redis_node *node,
                                    const char *message);
/* Drops the node's connection on our initiative: it backs off, the map is
 * asked again, and its reply callbacks run with NULL (now, or when the
 * hiredis callback we are in returns). */
void reshard__redis_node_drop(redis_node *node, const char *message);
/* True when the node has a connection (perhaps still connecting); false
 * while it backs off or its name is being resolved (it connects later). */
bool reshard__redis_node_connect(redis_node *node);
/* The watchdog's part for the nodes: drops a connection whose socket
 * failed or whose oldest request went unanswered too long. */
void reshard__redis_nodes_tick(redis_catalog *r, uint64_t now);

/* ---- The slot map (redis_cluster_slots.c) ---- */

/* Asks the next node that can be asked for CLUSTER SLOTS (rule 2); with
 * nobody to ask and no map yet, fails the parked operations. */
void reshard__redis_slots_refresh(redis_catalog *r);
/* Applies a CLUSTER SLOTS reply asked of `from`: every slot it names maps
 * to its primary (added to the node table), every other slot to -1. False,
 * with the map unchanged, when the reply is malformed; false too when a
 * node cannot be added (the map is then partly updated). */
bool reshard__redis_slots_apply(redis_catalog *r, redis_node *from,
                                const redisReply *reply);
/* The watchdog's part for the map: a refresh given up on after
 * REFRESH_TIMEOUT_MS, a wanted one started (at most one per
 * REFRESH_MIN_MS). */
void reshard__redis_slots_tick(redis_catalog *r, uint64_t now);

/* ---- Routing (redis_cluster.c) ---- */

/* The slot of the key an operation of `kind` on `key` is routed by (the
 * domain's for the page operations, which pass `domain`). */
uint16_t reshard__redis_cluster_key_slot(const redis_catalog *r, op_kind kind,
                                         reshard_catalog_object_kind object,
                                         const char *domain, const char *key);
/* Sends again the parked operations that are due (`all`: every one). */
void reshard__redis_cluster_run_parked(redis_catalog *r, bool all);
/* "MOVED 3999 127.0.0.1:6381" or "ASK ...": the slot and the index of the
 * node (added when new). False when malformed. */
bool reshard__redis_cluster_parse_redirect(redis_catalog *r, const char *error,
                                           unsigned *slot, int *index);
/* Follows a MOVED or ASK reply for `op` (rules 4 and 5): MOVED maps the
 * slot to the named node and wants a refresh; ASK makes the node `op`'s
 * next target and leaves the map alone. False, with r->last_error set,
 * when the reply cannot be followed. The caller routes `op` again. */
bool reshard__redis_cluster_redirect(redis_catalog *r, redis_op *op,
                                     const char *error);

#endif
