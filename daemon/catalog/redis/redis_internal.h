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
 *
 * Keys ({D} is a model domain, braces included: a Redis Cluster hash tag,
 * so one domain's keys share a slot):
 *   reshard:manifest:<manifest key>   STRING, the record, written SET NX
 *   reshard:domains                   SET of domains with a manifest
 *   reshard:{D}:manifests             SET of the domain's manifest keys
 *   reshard:{D}:page:<page key>       SET of the manifest keys bound
 *   reshard:placement:<id>            STRING, a placement, written SET NX
 *   reshard:memory:<id>               STRING, a memory pool, written SET NX
 * Writes of more than one key are MULTI/EXEC transactions, so no daemon
 * ever sees half of one; an object is one key and one command.
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

/* One operation, allocated in one block with copies of its inputs. */
typedef struct redis_op {
  struct redis_op *prev, *next; /* in `waiting` or `inflight` */
  redis_catalog *r;
  op_kind kind;
  bool listed;
  uint64_t sent_ms;
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

typedef struct op_list {
  redis_op *head, *tail;
} op_list;

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

  bool closing, close_started;
  reshard_catalog_close_cb close_cb;
  void *close_data;
};

/* ---- Commands (redis_command.c) ---- */

/* Arguments of one command, built into one growing text buffer. */
typedef struct redis_args {
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

static inline void args_manifest_key(redis_args *a, const char *manifest_key) {
  reshard__redis_args_add(a, LIT("reshard:manifest:"), manifest_key,
                          strlen(manifest_key), NULL, 0);
}

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
