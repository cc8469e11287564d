/* What the Redis catalog's files share (daemon/catalog/redis/): the
 * catalog's state, one operation, the command builder, and the functions
 * one file calls in another. Internal to the backend; catalog_redis.h is
 * its contract.
 *
 *   catalog_redis.c    the connection's life cycle (resolve, connect, AUTH,
 *                      SELECT, watchdog, reconnect with backoff), starting
 *                      operations, closing, opening, the vtable
 *   redis_command.c    what every operation shares: its record, building
 *                      and sending commands (MULTI/EXEC), reply dispatch
 *                      and error mapping
 *   redis_manifests.c  put_manifest / get_manifests: commands and replies
 *   redis_pages.c      add_pages / forget_pages / lookup_pages: commands,
 *                      replies, and the manifests a connection has verified
 *   redis_objects.c    put_object / get_objects / forget_object: commands
 *                      and replies
 *   redis_cluster.c    redis-cluster://: routing by slot, MOVED / ASK /
 *                      TRYAGAIN, the watchdog, seeds (its top lists the
 *                      protocol rules; redis_cluster.h what its files
 *                      share)
 *   redis_cluster_nodes.c  one connection per node, reconnect and backoff
 *   redis_cluster_slots.c  the slot map: CLUSTER SLOTS, re-discovery
 *   redis_cluster_split.c  reads split by slot, gathered
 *   redis_slot.c       CRC16 key slots with hash tags (pure)
 *
 * Keys ({D} is a model domain, braces included: a Redis Cluster hash tag,
 * so one domain's keys share a slot):
 *   reshard:manifest:<manifest key>   STRING, the record, written SET NX
 *                                     (redis://)
 *   reshard:{D}:manifest:<manifest key>  the same (redis-cluster://: D is
 *                                     the domain inside the manifest key)
 *   reshard:domains                   SET of domains with a manifest
 *                                     (redis:// only; a cluster asks
 *                                     EXISTS reshard:{D}:manifests)
 *   reshard:{D}:manifests             SET of the domain's manifest keys
 *   reshard:{D}:layout                STRING, the page layout's marker
 *                                     (written by the first publish)
 *   reshard:{D}:manifest-ids          HASH manifest key -> id (decimal)
 *   reshard:{D}:manifest-keys         HASH id -> manifest key
 *   reshard:{D}:pages:<n>             HASH packed page key -> ids ("3,7")
 *   reshard:{D}:pages-raw:<n>         HASH page key text -> ids
 *                                     (<n> a bucket, redis_pages.c)
 *   reshard:placement:<id>            STRING, a placement, written SET NX
 *   reshard:memory:<id>               STRING, a memory pool, written SET NX
 * Writes of more than one key are MULTI/EXEC transactions (page writes
 * one Lua script inside one), so no daemon ever sees half of one; an
 * object is one key and one command.
 *
 * Connection states: RESOLVING (host name on the thread pool), CONNECTING
 * (TCP, then SELECT), READY. Operations wait in `waiting` only until the
 * first attempt after a READY period ends; while the catalog is down they
 * fail at once. Operations sent wait in `inflight`, oldest first, so the
 * watchdog sees the oldest unanswered request. hiredis calls every
 * outstanding reply callback with a NULL reply when a connection ends, so
 * each operation completes exactly once: on its reply or on that NULL. */
#ifndef RESHARD_CATALOG_REDIS_INTERNAL_H
#define RESHARD_CATALOG_REDIS_INTERNAL_H

#include <hiredis/async.h>
#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "cache/table.h"
#include "catalog/redis/catalog_redis.h"
#include "catalog/redis/redis_reply.h"
#include "catalog/redis/redis_url.h"

typedef enum conn_state {
  CONN_DOWN,
  CONN_RESOLVING,
  CONN_CONNECTING,
  CONN_READY,
} conn_state;

typedef enum op_kind {
  OP_PUT,
  OP_GET,
  OP_CHECK, /* first half of add_pages: is the manifest published? */
  OP_ADD,
  OP_FORGET,
  OP_LOOKUP,
  OP_PUT_OBJECT,
  OP_GET_OBJECTS,
  OP_FORGET_OBJECT,
} op_kind;

typedef struct redis_catalog redis_catalog;

typedef struct op_list op_list;

/* One operation, allocated in one block with copies of its inputs. */
typedef struct redis_op {
  struct redis_op *prev, *next; /* in `list` */
  op_list *list;                /* `waiting`, `inflight`, a cluster list */
  redis_catalog *r;
  op_kind kind;
  bool listed;
  uint64_t sent_ms;
  /* The connection the commands go to (redis_command.c sends there). */
  redisAsyncContext *ac;
  /* --redis-wait-replicas: the reply kept while WAIT runs (a copy). */
  redisReply *held;
  /* Cluster routing (redis_cluster.c). */
  struct redis_node *node; /* where the current attempt went */
  struct redis_node *ask;  /* ASK target of the next attempt */
  uint16_t slot;
  unsigned redirects;
  uint64_t start_ms;  /* the first attempt: the deadline counts from it */
  uint64_t retry_ms;  /* parked: not before */
  char redirect[128]; /* MOVED/ASK seen on a queued command of this try */
  const char
      *manifest_key; /* the id of an object; NULL: forget every binding */
  const char *domain;
  reshard_catalog_object_kind object; /* object operations */
  const uint8_t *record;
  size_t length;
  const char **keys; /* page keys, manifest keys (OP_GET), ids (objects) */
  size_t key_count;
  reshard_catalog_put_cb put_cb;
  reshard_catalog_get_cb get_cb;
  reshard_catalog_count_cb count_cb;
  reshard_catalog_lookup_cb lookup_cb;
  reshard_catalog_removed_cb removed_cb;
  void *data;
} redis_op;

struct op_list {
  redis_op *head, *tail;
};

typedef struct redis_cluster redis_cluster;

struct redis_catalog {
  reshard_catalog base;
  char spec[300]; /* the address without credentials: what messages show */
  char host[256];
  int port;
  int db;
  reshard_redis_url credentials; /* sent with AUTH on every connection */
  /* The largest array reply the connection accepts: what the largest
   * command sent so far can answer, and never less than
   * MIN_REPLY_ELEMENTS (redis_reply.h says why replies need a bound). */
  reshard_redis_reply_bound reply_bound;

  conn_state state;
  redisAsyncContext *ac;
  bool failed_since_ready; /* fail at once instead of waiting */
  uint64_t attempt_ms;     /* when the current attempt started */
  uint64_t down_ms;        /* when the outage started */
  uint64_t backoff_ms;
  char last_error[160];
  bool ever_ready;

  op_list waiting, inflight;

  uv_getaddrinfo_t resolve;
  bool resolving;
  uv_timer_t retry;
  uv_timer_t watchdog;
  int open_timers;

  reshard_table verified; /* redis_pages.c */

  /* --redis-wait-replicas: writes are answered after WAIT confirms this
   * many replicas (0: no WAIT). */
  unsigned wait_replicas;
  size_t live_ops;        /* operations not completed yet */
  redis_cluster *cluster; /* NULL: one server (redis://) */

  bool closing, close_started;
  reshard_catalog_close_cb close_cb;
  void *close_data;
};

/* ---- Commands (redis_command.c) ---- */

/* Arguments of one command, built into one growing text buffer. */
typedef struct redis_args {
  redisAsyncContext *ac;      /* the connection (NULL: r->ac) */
  redisCallbackFn *queued_fn; /* for commands sent without a callback */
  void *queued_data;
  size_t count, capacity;
  size_t *offsets;
  size_t *lengths;
  const char **argv;
  char *text;
  size_t used, size;
  bool failed;
} redis_args;

/* Appends one argument, the concatenation of up to three parts. */
void reshard__redis_args_add(redis_args *a, const void *p1, size_t n1,
                             const void *p2, size_t n2, const void *p3,
                             size_t n3);

/* Sends the command in `a` (then empties it); false when it could not be
 * queued. */
bool reshard__redis_send_args(redis_catalog *r, redis_args *a,
                              redisCallbackFn *fn, void *privdata);

#define LIT(s) s, sizeof(s) - 1

static inline void args_word(redis_args *a, const char *word) {
  reshard__redis_args_add(a, word, strlen(word), NULL, 0, NULL, 0);
}

/* reshard:{D}:<suffix><tail> */
static inline void args_domain_key(redis_args *a, const char *domain,
                                   const char *suffix, const char *tail) {
  char head[128];
  int n = snprintf(head, sizeof head, "reshard:{%s}:", domain);
  if (n < 0 || (size_t)n >= sizeof head) {
    a->failed = true;
    return;
  }
  reshard__redis_args_add(a, head, (size_t)n, suffix, strlen(suffix), tail,
                          tail ? strlen(tail) : 0);
}

/* The manifest record's key: reshard:manifest:<key> on one server;
 * reshard:{D}:manifest:<key> on a cluster, D the domain inside the key
 * (kv/D/manifests/...), so it shares the domain's slot. */
void reshard__redis_args_manifest_key(const redis_catalog *r, redis_args *a,
                                      const char *manifest_key);

/* reshard:placement:<id> or reshard:memory:<id> (redis_objects.c). */
void reshard__redis_args_object_key(redis_args *a,
                                    reshard_catalog_object_kind kind,
                                    const char *id);

/* True for the operations that write (they WAIT when asked to). */
bool reshard__redis_op_writes(const redis_op *op);

/* Allocates an operation with copies of its inputs; NULL when out of
 * memory. */
redis_op *reshard__redis_op_new(redis_catalog *r, op_kind kind,
                                const char *manifest_key, const char *domain,
                                const uint8_t *record, size_t length,
                                const char *const *keys, size_t key_count);

/* Sets `err` to the out-of-memory error of an operation. */
void reshard__redis_out_of_memory(reshard_error *err);

/* Completes `op` with the failure `err` and frees it. */
void reshard__redis_op_complete(redis_op *op, const reshard_error *err);

/* Frees an operation whose callback ran, then lets the catalog unref the
 * loop and finish closing. */
void reshard__redis_op_done(redis_op *op);

/* Maps a Redis error reply to a status. */
void reshard__redis_reply_error(redis_catalog *r, reshard_error *err,
                                const char *what, const char *message);

/* Checks an EXEC reply: an array of `expected` elements, none an error. */
bool reshard__redis_exec_ok(redis_catalog *r, const redisReply *reply,
                            size_t expected, const char *what,
                            reshard_error *err);

/* Queues the operation's commands on the connection. */
bool reshard__redis_send_commands(redis_op *op);

/* The reply callback of every operation. */
void reshard__redis_on_reply(redisAsyncContext *ac, void *reply,
                             void *privdata);

/* ---- The connection (catalog_redis.c) ---- */

void reshard__redis_list_push(op_list *list, redis_op *op);
void reshard__redis_list_remove(op_list *list, redis_op *op);
void reshard__redis_update_ref(redis_catalog *r);
void reshard__redis_maybe_finish_close(redis_catalog *r);
void reshard__redis_op_fail_unavailable(redis_op *op);
void reshard__redis_set_error(redis_catalog *r, const char *message);
void reshard__redis_drop_connection(redis_catalog *r);
void reshard__redis_connection_lost(redis_catalog *r,
                                    const redisAsyncContext *ac);

/* Starts an operation: now when connected, after the first connection
 * attempt when one is under way, or not at all while Redis is down. */
void reshard__redis_start_op(redis_op *op);

/* ---- The cluster (redis_cluster*.c) ---- */

/* Parses the seeds of `address` ("redis-cluster://HOST:PORT[,...]") into
 * a new r->cluster; false for a malformed list or no memory (`oom`). */
bool reshard__redis_cluster_open(redis_catalog *r, const char *address,
                                 bool *oom);
/* Starts the first discovery (after the vtable is set). */
void reshard__redis_cluster_start(redis_catalog *r);
/* Routes and sends a new operation. */
void reshard__redis_cluster_start_op(redis_op *op);
/* Called first with every final reply of a cluster operation (the op is
 * off its list): true when it took the operation over (a redirect, a
 * retry, a lost connection). */
bool reshard__redis_cluster_reply(redis_op *op, redisAsyncContext *ac,
                                  const redisReply *reply);
/* The callback of commands queued inside MULTI: notes MOVED and ASK. */
void reshard__redis_cluster_on_queued(redisAsyncContext *ac, void *reply,
                                      void *privdata);
/* Every WATCHDOG_MS: silent nodes, discovery, parked operations. */
void reshard__redis_cluster_tick(redis_catalog *r);
/* Puts `op` back on its node's list of operations awaiting a reply. */
void reshard__redis_cluster_track(redis_op *op);
/* The node connection `ac` ended (NULL reply). */
void reshard__redis_cluster_lost(redis_catalog *r, redisAsyncContext *ac);
/* Keeps the loop referenced while cluster work is pending. */
void reshard__redis_cluster_update_ref(redis_catalog *r);
/* Closing: fails parked operations; true once nothing of the cluster is
 * pending (name resolutions). */
bool reshard__redis_cluster_idle(redis_catalog *r);
/* Frees every node connection and the cluster. */
void reshard__redis_cluster_free(redis_catalog *r);
/* True when the slot map is known and no known primary is down. */
bool reshard__redis_cluster_connected(const redis_catalog *r);
/* get_manifests / get_objects over more than one slot: one read per slot,
 * gathered. False when the keys share one slot (the caller reads them in
 * one command). */
bool reshard__redis_cluster_split_get(redis_catalog *r, op_kind kind,
                                      reshard_catalog_object_kind object,
                                      const char *const *keys, size_t count,
                                      reshard_catalog_get_cb cb, void *data);

/* ---- Manifests (redis_manifests.c) ---- */

/* Each *_commands sends the operation's commands but EXEC (or, for OP_GET,
 * its one command with the reply callback); false when one could not be
 * queued. */
bool reshard__redis_put_commands(redis_catalog *r, redis_args *a,
                                 const redis_op *op);
bool reshard__redis_get_commands(redis_catalog *r, redis_args *a, redis_op *op);
void reshard__redis_reply_put(redis_op *op, const redisReply *reply);
void reshard__redis_reply_get(redis_op *op, const redisReply *reply);

void reshard__redis_put_manifest(reshard_catalog *catalog,
                                 const char *manifest_key,
                                 const char *model_domain,
                                 const uint8_t *record, size_t length,
                                 reshard_catalog_put_cb cb, void *data);
void reshard__redis_get_manifests(reshard_catalog *catalog,
                                  const char *const *keys, size_t count,
                                  reshard_catalog_get_cb cb, void *data);

/* ---- Pages (redis_pages.c) ---- */

/* Frees an entry of r->verified (reshard_table_clear's release). */
void reshard__redis_free_verified(reshard_table_node *node, void *data);

bool reshard__redis_check_commands(redis_catalog *r, redis_args *a,
                                   const redis_op *op);
bool reshard__redis_binding_commands(redis_catalog *r, redis_args *a,
                                     const redis_op *op);
bool reshard__redis_lookup_commands(redis_catalog *r, redis_args *a,
                                    const redis_op *op);
/* EVAL of the script that marks a domain with no manifest yet as holding
 * the bucketed page layout (sent by publishing, before its SADD). */
void reshard__redis_args_mark(redis_args *a, const char *domain);
void reshard__redis_reply_check(redis_op *op, const redisReply *reply);
void reshard__redis_reply_count(redis_op *op, const redisReply *reply);
void reshard__redis_reply_lookup(redis_op *op, const redisReply *reply);

void reshard__redis_add_pages(reshard_catalog *catalog,
                              const char *model_domain,
                              const char *manifest_key,
                              const char *const *page_keys, size_t page_count,
                              reshard_catalog_count_cb cb, void *data);
void reshard__redis_forget_pages(reshard_catalog *catalog,
                                 const char *model_domain,
                                 const char *manifest_key,
                                 const char *const *page_keys,
                                 size_t page_count, reshard_catalog_count_cb cb,
                                 void *data);
void reshard__redis_lookup_pages(reshard_catalog *catalog,
                                 const char *model_domain,
                                 const char *const *page_keys,
                                 size_t page_count,
                                 reshard_catalog_lookup_cb cb, void *data);

/* ---- Objects (redis_objects.c) ---- */

/* One command each, outside MULTI, sent with the reply callback. */
bool reshard__redis_object_commands(redis_catalog *r, redis_args *a,
                                    redis_op *op);
void reshard__redis_reply_object(redis_op *op, const redisReply *reply);

void reshard__redis_put_object(reshard_catalog *catalog,
                               reshard_catalog_object_kind kind, const char *id,
                               const uint8_t *record, size_t length,
                               reshard_catalog_put_cb cb, void *data);
void reshard__redis_get_objects(reshard_catalog *catalog,
                                reshard_catalog_object_kind kind,
                                const char *const *ids, size_t count,
                                reshard_catalog_get_cb cb, void *data);
void reshard__redis_forget_object(reshard_catalog *catalog,
                                  reshard_catalog_object_kind kind,
                                  const char *id, reshard_catalog_removed_cb cb,
                                  void *data);

#endif
