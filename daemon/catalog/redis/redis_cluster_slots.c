/* The slot map of the Redis Cluster client (redis_cluster.h; rules 2 and
 * 4 of redis_cluster.c): CLUSTER SLOTS asked of one node at a time, the
 * seeds and every node learnt since in turn, and its reply applied. A
 * reply entry is [first slot, last slot, [ip, port, id, ...] of the
 * primary, replicas ...]; only primaries are mapped. */
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_cluster.h"
#include "observe/log.h"

static void on_slots(redisAsyncContext *ac, void *reply_ptr, void *privdata);

void reshard__redis_slots_refresh(redis_catalog *r) {
  redis_cluster *c = r->cluster;
  if (c->refreshing || r->closing || c->count == 0) {
    return;
  }
  uint64_t now = reshard__redis_now_ms(r);
  c->last_refresh_ms = now;
  bool pending = false;
  for (size_t i = 0; i < c->count; i++) {
    size_t at = (c->cursor + i) % c->count;
    redis_node *node = c->nodes[at];
    if (!reshard__redis_node_connect(node)) {
      pending = pending || node->resolving;
      continue;
    }
    if (redisAsyncCommand(node->ac, on_slots, node, "CLUSTER SLOTS") !=
        REDIS_OK) {
      reshard__redis_node_drop(node, "cannot send CLUSTER SLOTS");
      continue;
    }
    c->cursor = at;
    c->refreshing = true;
    c->refresh_node = node;
    c->refresh_ms = now;
    c->want_refresh = false;
    return;
  }
  /* Nobody to ask now: without a map, operations fail at once. */
  if (!c->have_map && !pending) {
    c->map_failed = true;
    reshard__redis_cluster_run_parked(r, true);
  }
}

/* An integer element, or -1. */
static long long integer_at(const redisReply *reply, size_t i) {
  return i < reply->elements && reply->element[i]->type == REDIS_REPLY_INTEGER
             ? reply->element[i]->integer
             : -1;
}

bool reshard__redis_slots_apply(redis_catalog *r, redis_node *from,
                                const redisReply *reply) {
  redis_cluster *c = r->cluster;
  if (reply->type != REDIS_REPLY_ARRAY) {
    return false;
  }
  for (size_t i = 0; i < reply->elements; i++) {
    const redisReply *entry = reply->element[i];
    long long first =
        entry->type == REDIS_REPLY_ARRAY ? integer_at(entry, 0) : -1;
    long long last =
        entry->type == REDIS_REPLY_ARRAY ? integer_at(entry, 1) : -1;
    if (first < 0 || last < first || last >= RESHARD_REDIS_SLOTS ||
        entry->elements < 3 || entry->element[2]->type != REDIS_REPLY_ARRAY ||
        entry->element[2]->elements < 2 ||
        entry->element[2]->element[0]->type != REDIS_REPLY_STRING) {
      return false;
    }
  }
  for (size_t s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    c->slots[s] = -1;
  }
  for (size_t i = 0; i < reply->elements; i++) {
    const redisReply *entry = reply->element[i];
    const redisReply *primary = entry->element[2];
    const char *host = primary->element[0]->str;
    size_t length = primary->element[0]->len;
    long long port = integer_at(primary, 1);
    if (length == 0) {
      host = from->host;
      length = strlen(from->host);
    }
    if (port <= 0 || port > 65535 || (length == 1 && host[0] == '?')) {
      continue;
    }
    int index = reshard__redis_node_get(r, host, length, (int)port);
    if (index < 0) {
      return false;
    }
    for (long long s = integer_at(entry, 0); s <= integer_at(entry, 1); s++) {
      c->slots[s] = (int16_t)index;
    }
  }
  return true;
}

static void on_slots(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
  redis_node *node = privdata;
  redis_catalog *r = node->r;
  redis_cluster *c = r->cluster;
  redisReply *reply = reply_ptr;
  if (c == NULL || !c->refreshing || c->refresh_node != node) {
    return; /* a refresh given up on */
  }
  c->refreshing = false;
  if (reply == NULL || reply->type == REDIS_REPLY_ERROR ||
      !reshard__redis_slots_apply(r, node, reply)) {
    if (reply == NULL) {
      reshard__redis_cluster_lost(r, ac);
    } else {
      char message[160];
      snprintf(message, sizeof message, "CLUSTER SLOTS: %s",
               reply->type == REDIS_REPLY_ERROR ? reply->str
                                                : "unexpected reply");
      reshard__redis_node_note_error(r, node, message);
    }
    c->cursor++;
    c->want_refresh = true;
    return;
  }
  node->backoff_ms = RESHARD_REDIS_NODE_BACKOFF_MIN_MS;
  bool first = !c->have_map;
  c->have_map = true;
  c->map_failed = false;
  reshard_log_line line;
  if (reshard_log_begin(&line, first ? RESHARD_LOG_INFO : RESHARD_LOG_DEBUG,
                        first ? "catalog connected" : "catalog slot map")) {
    size_t primaries = 0;
    for (size_t i = 0; i < c->count; i++) {
      for (size_t s = 0; s < RESHARD_REDIS_SLOTS; s++) {
        if (c->slots[s] == (int16_t)i) {
          primaries++;
          break;
        }
      }
    }
    reshard_log_str(&line, "catalog", r->spec);
    reshard_log_u64(&line, "primaries", primaries);
    reshard_log_end(&line);
  }
  reshard__redis_cluster_run_parked(r, false);
}

void reshard__redis_slots_tick(redis_catalog *r, uint64_t now) {
  redis_cluster *c = r->cluster;
  if (c->refreshing && now - c->refresh_ms > RESHARD_REDIS_REFRESH_TIMEOUT_MS) {
    reshard__redis_node_note_error(r, c->refresh_node,
                                   "CLUSTER SLOTS: no reply");
    c->refreshing = false;
    c->cursor++;
    c->want_refresh = true;
  }
  if (c->want_refresh && !c->refreshing &&
      now - c->last_refresh_ms >= RESHARD_REDIS_REFRESH_MIN_MS) {
    reshard__redis_slots_refresh(r);
  }
}

bool reshard__redis_cluster_connected(const redis_catalog *r) {
  const redis_cluster *c = r->cluster;
  if (!c->have_map) {
    return false;
  }
  for (size_t s = 0; s < RESHARD_REDIS_SLOTS; s++) {
    if (c->slots[s] >= 0 && c->nodes[c->slots[s]]->down) {
      return false;
    }
  }
  return true;
}
