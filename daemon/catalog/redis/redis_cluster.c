/* The Redis Cluster client of the Redis catalog ("redis-cluster://SEEDS",
 * redis_internal.h). hiredis 0.14 has none, so this is the small one the
 * catalog needs: the operations, their commands and their replies are the
 * single-server ones (redis_manifests.c, redis_pages.c, redis_objects.c);
 * this file decides where each goes and what to do when a node sends it
 * elsewhere, with the nodes (redis_cluster_nodes.c), the slot map
 * (redis_cluster_slots.c) and reads split by slot (redis_cluster_split.c)
 * beside it; redis_cluster.h is what they share.
 *
 * The rules it follows (the Redis Cluster specification, "Keys
 * distribution model" and "Redirection and resharding"; the CLUSTER SLOTS,
 * ASKING and WAIT command references):
 *  1. A key's slot is CRC16(key or its {hash tag}) mod 16384
 *     (redis_slot.h). Each operation is one slot: a model domain's keys all
 *     carry the {D} tag, so its MULTI/EXEC touches one node; an object is
 *     one key; a read of keys of several slots (get_manifests of several
 *     domains, get_objects) is split into one read per slot
 *     (redis_cluster_split.c).
 *  2. The slot map comes from CLUSTER SLOTS, asked of one node at a time:
 *     the seeds and every node learnt since, in turn. A reply entry is
 *     [first slot, last slot, [ip, port, id, ...] of the primary, replicas
 *     ...]; an empty ip means the node asked; "?" an unknown endpoint (the
 *     entry is skipped). Only primaries are used, for reads and writes, so
 *     a read sees every acknowledged write (redis_cluster_slots.c).
 *  3. One asynchronous connection per node, made on first use on the
 *     daemon's loop, beginning with AUTH when the URL has a password;
 *     commands are pipelined behind the connect (redis_cluster_nodes.c).
 *  4. -MOVED <slot> <ip:port>: the slot has a new owner. The map takes it
 *     at once, the operation goes there again, and the whole map is asked
 *     again (at most one CLUSTER SLOTS per REFRESH_MIN_MS).
 *  5. -ASK <slot> <ip:port>: the slot is migrating and the key is at the
 *     target already. ASKING, then the operation, go to the target, once;
 *     the map is not changed. Inside MULTI the redirect is the reply to a
 *     queued command (EXEC then fails with EXECABORT), so queued commands
 *     have a callback that notes it; ASKING's flag lasts until EXEC.
 *  6. -TRYAGAIN (a multi-key command while its slot migrates), -CLUSTERDOWN,
 *     -LOADING, -MASTERDOWN, -READONLY (the node is a replica now): the
 *     operation is parked and sent again after RESHARD_REDIS_RETRY_MS (on the
 * next watchdog tick); all but TRYAGAIN also ask for the map again.
 *  7. A node connection that ends (refused, reset, the node killed) or
 *     leaves a request unanswered for RESHARD_CATALOG_REDIS_TIMEOUT_MS is
 *     dropped: its operations are parked, the map is asked again, and the
 *     node is not connected again before a backoff of 100 ms doubling to
 *     1 s (redis_cluster_nodes.c). That is how a failover is followed:
 *     once the cluster has promoted a replica, CLUSTER SLOTS (or a MOVED)
 *     names it.
 *  8. An operation is sent again only within
 *     RESHARD_CATALOG_REDIS_TIMEOUT_MS of its start and over at most
 *     RESHARD_REDIS_MAX_REDIRECTS redirects; then it fails with UNAVAILABLE
 * naming the last cause. With no slot map and no seed answering, operations
 * fail at once with UNAVAILABLE, like redis:// while Redis is down. Every write
 * of the catalog is idempotent (SET NX, SADD, SREM, DEL), so sending one again
 * after a lost reply is safe; its `created` or count may then read as if
 * another daemon had written it.
 *  9. WAIT (--redis-wait-replicas) is sent by redis_command.c on the
 *     connection that answered the write; it names no key, so it is never
 *     redirected. */
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_cluster.h"
#include "observe/log.h"

/* ---- Routing ---- */

static void release_args(redis_args *a) {
  free(a->offsets);
  free(a->lengths);
  free(a->argv);
  free(a->text);
}

uint16_t reshard__redis_cluster_key_slot(const redis_catalog *r, op_kind kind,
                                         reshard_catalog_object_kind object,
                                         const char *domain, const char *key) {
  redis_args a = {0};
  switch (kind) {
  case OP_GET:
    reshard__redis_args_manifest_key(r, &a, key);
    break;
  case OP_GET_OBJECTS:
  case OP_PUT_OBJECT:
  case OP_FORGET_OBJECT:
    reshard__redis_args_object_key(&a, object, key);
    break;
  default:
    args_domain_key(&a, domain, "manifests", NULL);
    break;
  }
  uint16_t slot = 0;
  if (!a.failed && a.count > 0) {
    slot = reshard_redis_key_slot(a.text + a.offsets[0], a.lengths[0]);
  }
  release_args(&a);
  return slot;
}

static uint16_t op_slot(const redis_op *op) {
  const char *key = op->kind == OP_GET || op->kind == OP_GET_OBJECTS
                        ? op->keys[0]
                        : op->manifest_key;
  return reshard__redis_cluster_key_slot(op->r, op->kind, op->object,
                                         op->domain, key);
}

static void park(redis_op *op, uint64_t when) {
  redis_catalog *r = op->r;
  op->retry_ms = when;
  reshard__redis_list_push(&r->cluster->parked, op);
  reshard__redis_update_ref(r);
}

static void route(redis_op *op) {
  redis_catalog *r = op->r;
  redis_cluster *c = r->cluster;
  uint64_t now = reshard__redis_now_ms(r);
  if (r->closing || now - op->start_ms >= RESHARD_CATALOG_REDIS_TIMEOUT_MS ||
      op->redirects > RESHARD_REDIS_MAX_REDIRECTS) {
    if (op->redirects > RESHARD_REDIS_MAX_REDIRECTS) {
      snprintf(r->last_error, sizeof r->last_error,
               "more than %d redirects for slot %u",
               RESHARD_REDIS_MAX_REDIRECTS, (unsigned)op->slot);
    }
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  redis_node *node = op->ask;
  if (node == NULL && c->slots[op->slot] >= 0) {
    node = c->nodes[c->slots[op->slot]];
  }
  if (node == NULL) {
    if (!c->have_map && c->map_failed) {
      reshard__redis_op_fail_unavailable(op);
      return;
    }
    if (c->have_map) {
      snprintf(r->last_error, sizeof r->last_error,
               "slot %u has no primary in the slot map", (unsigned)op->slot);
    }
    c->want_refresh = true;
    park(op, now + RESHARD_REDIS_RETRY_MS);
    return;
  }
  if (!reshard__redis_node_connect(node)) {
    c->want_refresh = true;
    park(op, now + RESHARD_REDIS_RETRY_MS);
    return;
  }
  bool asking = op->ask != NULL;
  op->ask = NULL;
  op->node = node;
  op->ac = node->ac;
  op->redirect[0] = '\0';
  if (asking && redisAsyncCommand(node->ac, NULL, NULL, "ASKING") != REDIS_OK) {
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  if (!reshard__redis_send_commands(op)) {
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  op->sent_ms = now;
  reshard__redis_list_push(&node->inflight, op);
  reshard__redis_update_ref(r);
}

void reshard__redis_cluster_start_op(redis_op *op) {
  redis_catalog *r = op->r;
  if (r->closing) {
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  op->start_ms = reshard__redis_now_ms(r);
  op->redirects = 0;
  op->ask = NULL;
  op->slot = op_slot(op);
  route(op);
}

void reshard__redis_cluster_track(redis_op *op) {
  reshard__redis_list_push(&op->node->inflight, op);
  reshard__redis_update_ref(op->r);
}

void reshard__redis_cluster_run_parked(redis_catalog *r, bool all) {
  redis_cluster *c = r->cluster;
  op_list due = {0};
  uint64_t now = reshard__redis_now_ms(r);
  redis_op *op = c->parked.head;
  while (op != NULL) {
    redis_op *next = op->next;
    if (all || op->retry_ms <= now) {
      reshard__redis_list_remove(&c->parked, op);
      reshard__redis_list_push(&due, op);
    }
    op = next;
  }
  while (due.head != NULL) {
    op = due.head;
    reshard__redis_list_remove(&due, op);
    route(op);
  }
  reshard__redis_update_ref(r);
}

/* ---- Replies ---- */

static bool starts(const char *text, const char *prefix) {
  return strncmp(text, prefix, strlen(prefix)) == 0;
}

static bool retryable(const char *error) {
  return starts(error, "MOVED ") || starts(error, "ASK ") ||
         starts(error, "TRYAGAIN") || starts(error, "CLUSTERDOWN") ||
         starts(error, "LOADING") || starts(error, "MASTERDOWN") ||
         starts(error, "READONLY");
}

void reshard__redis_cluster_on_queued(redisAsyncContext *ac, void *reply_ptr,
                                      void *privdata) {
  (void)ac;
  redis_op *op = privdata;
  redisReply *reply = reply_ptr;
  if (reply != NULL && reply->type == REDIS_REPLY_ERROR &&
      op->redirect[0] == '\0' && retryable(reply->str)) {
    snprintf(op->redirect, sizeof op->redirect, "%s", reply->str);
  }
}

bool reshard__redis_cluster_parse_redirect(redis_catalog *r, const char *error,
                                           unsigned *slot, int *index) {
  const char *p = strchr(error, ' ');
  if (p == NULL) {
    return false;
  }
  char *end;
  unsigned long value = strtoul(p + 1, &end, 10);
  if (end == p + 1 || *end != ' ' || value >= RESHARD_REDIS_SLOTS) {
    return false;
  }
  const char *address = end + 1;
  const char *colon = strrchr(address, ':');
  if (colon == NULL) {
    return false;
  }
  long port = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || port <= 0 || port > 65535) {
    return false;
  }
  size_t length = (size_t)(colon - address);
  if (length >= 2 && address[0] == '[' && address[length - 1] == ']') {
    address++;
    length -= 2;
  }
  *slot = (unsigned)value;
  *index = reshard__redis_node_get(r, address, length, (int)port);
  return *index >= 0;
}

bool reshard__redis_cluster_redirect(redis_catalog *r, redis_op *op,
                                     const char *error) {
  redis_cluster *c = r->cluster;
  unsigned slot;
  int index;
  if (!reshard__redis_cluster_parse_redirect(r, error, &slot, &index)) {
    snprintf(r->last_error, sizeof r->last_error, "cannot follow \"%.100s\"",
             error);
    return false;
  }
  if (starts(error, "MOVED ")) {
    c->slots[slot] = (int16_t)index;
    c->want_refresh = true;
  } else {
    op->ask = c->nodes[index];
  }
  return true;
}

bool reshard__redis_cluster_reply(redis_op *op, redisAsyncContext *ac,
                                  const redisReply *reply) {
  redis_catalog *r = op->r;
  redis_cluster *c = r->cluster;
  uint64_t now = reshard__redis_now_ms(r);
  if (reply == NULL) {
    reshard__redis_cluster_lost(r, ac);
    park(op, now + RESHARD_REDIS_RETRY_MS);
    return true;
  }
  if (op->node != NULL && op->node->ac == ac) {
    op->node->backoff_ms = RESHARD_REDIS_NODE_BACKOFF_MIN_MS;
    op->node->down = false;
  }
  const char *error = op->redirect[0] != '\0'            ? op->redirect
                      : reply->type == REDIS_REPLY_ERROR ? reply->str
                                                         : NULL;
  if (error == NULL || !retryable(error)) {
    return false;
  }
  op->redirects++;
  if (starts(error, "MOVED ") || starts(error, "ASK ")) {
    if (!reshard__redis_cluster_redirect(r, op, error)) {
      reshard__redis_op_fail_unavailable(op);
      return true;
    }
    reshard_log_line line;
    if (reshard_log_begin(&line, RESHARD_LOG_DEBUG, "catalog redirect")) {
      reshard_log_str(&line, "catalog", r->spec);
      reshard_log_str(&line, "reply", error);
      reshard_log_end(&line);
    }
    route(op);
    return true;
  }
  snprintf(r->last_error, sizeof r->last_error, "%.150s", error);
  if (!starts(error, "TRYAGAIN")) {
    c->want_refresh = true;
  }
  park(op, now + RESHARD_REDIS_RETRY_MS);
  return true;
}

/* ---- The watchdog ---- */

void reshard__redis_cluster_tick(redis_catalog *r) {
  uint64_t now = reshard__redis_now_ms(r);
  reshard__redis_nodes_tick(r, now);
  reshard__redis_slots_tick(r, now);
  reshard__redis_cluster_run_parked(r, false);
}

/* ---- Life cycle ---- */

/* "HOST:PORT" or "[IPV6]:PORT" in [start, end): adds the seed. */
static bool add_seed(redis_catalog *r, const char *start, const char *end) {
  const char *colon = NULL;
  for (const char *p = start; p < end; p++) {
    if (*p == ':') {
      colon = p;
    }
  }
  if (colon == NULL || colon + 1 == end) {
    return false;
  }
  long port = 0;
  for (const char *p = colon + 1; p < end; p++) {
    if (*p < '0' || *p > '9' || (port = port * 10 + (*p - '0')) > 65535) {
      return false;
    }
  }
  const char *host = start;
  size_t length = (size_t)(colon - start);
  if (length >= 2 && host[0] == '[' && host[length - 1] == ']') {
    host++;
    length -= 2;
  }
  if (port == 0 || length == 0 || memchr(host, '/', length) != NULL) {
    return false;
  }
  return reshard__redis_node_get(r, host, length, (int)port) >= 0;
}

bool reshard__redis_cluster_open(redis_catalog *r, const char *address,
                                 bool *oom) {
  if (strncmp(address, "redis-cluster://", 16) != 0) {
    return false;
  }
  r->cluster = calloc(1, sizeof *r->cluster);
  if (r->cluster == NULL) {
    *oom = true;
    return false;
  }
  for (size_t s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    r->cluster->slots[s] = -1;
  }
  const char *p = address + 16;
  if (*p == '\0') {
    return false;
  }
  while (true) {
    const char *comma = strchr(p, ',');
    const char *end = comma ? comma : p + strlen(p);
    if (!add_seed(r, p, end)) {
      return false;
    }
    if (comma == NULL) {
      return true;
    }
    p = comma + 1;
  }
}

void reshard__redis_cluster_start(redis_catalog *r) {
  r->cluster->want_refresh = true;
  reshard__redis_slots_refresh(r);
}

bool reshard__redis_cluster_idle(redis_catalog *r) {
  redis_cluster *c = r->cluster;
  while (c->parked.head != NULL) {
    redis_op *op = c->parked.head;
    reshard__redis_list_remove(&c->parked, op);
    reshard__redis_op_fail_unavailable(op);
  }
  for (size_t i = 0; i < c->count; i++) {
    if (c->nodes[i]->resolving) {
      uv_cancel((uv_req_t *)&c->nodes[i]->resolve);
    }
  }
  return c->resolving == 0;
}

void reshard__redis_cluster_free(redis_catalog *r) {
  redis_cluster *c = r->cluster;
  if (c == NULL) {
    return;
  }
  for (size_t i = 0; i < c->count; i++) {
    redisAsyncContext *ac = c->nodes[i]->ac;
    if (ac != NULL) {
      c->nodes[i]->ac = NULL;
      ac->data = NULL;
      redisAsyncFree(ac);
    }
  }
  for (size_t i = 0; i < c->count; i++) {
    free(c->nodes[i]);
  }
  free(c->nodes);
  free(c);
  r->cluster = NULL;
}
