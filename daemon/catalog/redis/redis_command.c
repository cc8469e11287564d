/* What every operation of the Redis catalog shares (redis_internal.h): its
 * record, building and sending its commands (inside MULTI/EXEC but for
 * MGET), dispatching its reply, WAIT for --redis-wait-replicas, and
 * mapping Redis errors. */
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_internal.h"

/* ---- Records ---- */

redis_op *reshard__redis_op_new(redis_catalog *r, op_kind kind,
                                const char *manifest_key, const char *domain,
                                const uint8_t *record, size_t length,
                                const char *const *keys, size_t key_count) {
  reshard_catalog_args copy;
  reshard_catalog_args in = {manifest_key,        domain,   record, length,
                             (const char **)keys, key_count};
  redis_op *op = reshard_catalog_op_alloc(sizeof *op, &in, &copy);
  if (op == NULL) {
    return NULL;
  }
  op->r = r;
  op->kind = kind;
  r->live_ops++;
  op->manifest_key = copy.manifest_key;
  op->domain = copy.domain;
  op->record = copy.record;
  op->length = copy.length;
  op->keys = copy.keys;
  op->key_count = copy.key_count;
  return op;
}

void reshard__redis_out_of_memory(reshard_error *err) {
  reshard_error_set(err, RESHARD_INTERNAL, "catalog: out of memory");
}

void reshard__redis_op_complete(redis_op *op, const reshard_error *err) {
  switch (op->kind) {
  case OP_PUT:
    op->put_cb(op->data, err, false);
    break;
  case OP_GET:
    op->get_cb(op->data, err, NULL, 0);
    break;
  case OP_CHECK:
  case OP_ADD:
  case OP_FORGET:
    op->count_cb(op->data, err, 0);
    break;
  case OP_LOOKUP:
    op->lookup_cb(op->data, err, NULL);
    break;
  case OP_PUT_OBJECT:
    op->put_cb(op->data, err, false);
    break;
  case OP_GET_OBJECTS:
    op->get_cb(op->data, err, NULL, 0);
    break;
  case OP_FORGET_OBJECT:
    op->removed_cb(op->data, err, false);
    break;
  }
  reshard__redis_op_done(op);
}

static void reply_free(redisReply *reply);

void reshard__redis_op_done(redis_op *op) {
  redis_catalog *r = op->r;
  if (op->held != NULL) {
    reply_free(op->held);
  }
  r->live_ops--;
  free(op);
  reshard__redis_update_ref(r);
  reshard__redis_maybe_finish_close(r);
}

bool reshard__redis_op_writes(const redis_op *op) {
  switch (op->kind) {
  case OP_PUT:
  case OP_ADD:
  case OP_FORGET:
  case OP_PUT_OBJECT:
  case OP_FORGET_OBJECT:
    return true;
  default:
    return false;
  }
}

/* kv/<domain>/manifests/<digest>: the domain, or false. */
static bool manifest_key_domain(const char *key, const char **domain,
                                size_t *length) {
  if (strncmp(key, "kv/", 3) != 0) {
    return false;
  }
  const char *end = strstr(key + 3, "/manifests/");
  if (end == NULL || end == key + 3) {
    return false;
  }
  *domain = key + 3;
  *length = (size_t)(end - (key + 3));
  return true;
}

void reshard__redis_args_manifest_key(const redis_catalog *r, redis_args *a,
                                      const char *manifest_key) {
  const char *domain;
  size_t length;
  if (r->cluster == NULL ||
      !manifest_key_domain(manifest_key, &domain, &length) || length > 200) {
    reshard__redis_args_add(a, LIT("reshard:manifest:"), manifest_key,
                            strlen(manifest_key), NULL, 0);
    return;
  }
  char head[224];
  int n = snprintf(head, sizeof head, "reshard:{%.*s}:manifest:", (int)length,
                   domain);
  reshard__redis_args_add(a, head, (size_t)n, manifest_key,
                          strlen(manifest_key), NULL, 0);
}

/* ---- Errors ---- */

/* Maps a Redis error reply to a status. */
void reshard__redis_reply_error(redis_catalog *r, reshard_error *err,
                                const char *what, const char *message) {
  static const char *const busy[] = {"LOADING",   "READONLY", "MASTERDOWN",
                                     "BUSY",      "TRYAGAIN", "CLUSTERDOWN",
                                     "NOREPLICAS"};
  reshard_status code = RESHARD_INTERNAL;
  if (strncmp(message, "OOM", 3) == 0) {
    code = RESHARD_RESOURCE_EXHAUSTED;
  }
  for (size_t i = 0; i < sizeof busy / sizeof busy[0]; i++) {
    if (strncmp(message, busy[i], strlen(busy[i])) == 0) {
      code = RESHARD_UNAVAILABLE;
    }
  }
  reshard_error_set(err, code, "catalog %s: %s: %s", r->spec, what, message);
}

/* Checks an EXEC reply: an array of `expected` elements, none an error. */
bool reshard__redis_exec_ok(redis_catalog *r, const redisReply *reply,
                            size_t expected, const char *what,
                            reshard_error *err) {
  if (reply->type == REDIS_REPLY_ERROR) {
    reshard__redis_reply_error(r, err, what, reply->str);
    return false;
  }
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != expected) {
    reshard_error_set(err, RESHARD_INTERNAL,
                      "catalog %s: %s: unexpected reply (type %d)", r->spec,
                      what, reply->type);
    return false;
  }
  for (size_t i = 0; i < expected; i++) {
    if (reply->element[i]->type == REDIS_REPLY_ERROR) {
      reshard__redis_reply_error(r, err, what, reply->element[i]->str);
      return false;
    }
  }
  return true;
}

/* ---- Commands ---- */

static void args_reset(redis_args *a) {
  a->count = 0;
  a->used = 0;
}

static void args_free(redis_args *a) {
  free(a->offsets);
  free(a->lengths);
  free(a->argv);
  free(a->text);
}

/* Appends one argument, the concatenation of up to three parts. */
void reshard__redis_args_add(redis_args *a, const void *p1, size_t n1,
                             const void *p2, size_t n2, const void *p3,
                             size_t n3) {
  if (a->failed) {
    return;
  }
  if (a->count == a->capacity) {
    size_t next = a->capacity ? a->capacity * 2 : 16;
    size_t *offsets = realloc(a->offsets, next * sizeof *offsets);
    if (offsets != NULL) {
      a->offsets = offsets;
    }
    size_t *lengths = realloc(a->lengths, next * sizeof *lengths);
    if (lengths != NULL) {
      a->lengths = lengths;
    }
    const char **argv = realloc(a->argv, next * sizeof *argv);
    if (argv != NULL) {
      a->argv = argv;
    }
    if (offsets == NULL || lengths == NULL || argv == NULL) {
      a->failed = true;
      return;
    }
    a->capacity = next;
  }
  size_t n = n1 + n2 + n3;
  if (a->used + n > a->size) {
    size_t next = a->size ? a->size * 2 : 256;
    while (next < a->used + n) {
      next *= 2;
    }
    char *text = realloc(a->text, next);
    if (text == NULL) {
      a->failed = true;
      return;
    }
    a->text = text;
    a->size = next;
  }
  char *at = a->text + a->used;
  if (n1) {
    memcpy(at, p1, n1);
  }
  if (n2) {
    memcpy(at + n1, p2, n2);
  }
  if (n3) {
    memcpy(at + n1 + n2, p3, n3);
  }
  a->offsets[a->count] = a->used;
  a->lengths[a->count] = n;
  a->count++;
  a->used += n;
}

/* Sends the command in `a`; false when it could not be queued. */
bool reshard__redis_send_args(redis_catalog *r, redis_args *a,
                              redisCallbackFn *fn, void *privdata) {
  redisAsyncContext *ac = a->ac != NULL ? a->ac : r->ac;
  if (a->failed || ac == NULL) {
    return false;
  }
  for (size_t i = 0; i < a->count; i++) {
    a->argv[i] = a->text + a->offsets[i];
  }
  if (fn == NULL && a->queued_fn != NULL) {
    fn = a->queued_fn;
    privdata = a->queued_data;
  }
  bool ok = redisAsyncCommandArgv(ac, fn, privdata, (int)a->count, a->argv,
                                  a->lengths) == REDIS_OK;
  args_reset(a);
  return ok;
}

/* Queues the operation's commands on the connection. */
bool reshard__redis_send_commands(redis_op *op) {
  redis_catalog *r = op->r;
  redis_args a = {0};
  bool ok = true;
  a.ac = op->ac != NULL ? op->ac : r->ac;
  if (r->cluster != NULL) {
    a.queued_fn = reshard__redis_cluster_on_queued;
    a.queued_data = op;
  }
  /* A single command needs no transaction. */
  bool multi = op->kind != OP_GET && op->kind != OP_PUT_OBJECT &&
               op->kind != OP_GET_OBJECTS && op->kind != OP_FORGET_OBJECT;
  /* The largest array this operation's reply holds: MGET's values, or
   * EXEC's results (at most two commands a key, plus two). */
  size_t reply_elements =
      op->key_count <= (SIZE_MAX - 4) / 2 ? 2 * op->key_count + 4 : SIZE_MAX;
  if (reply_elements > r->reply_bound.max_elements) {
    r->reply_bound.max_elements = reply_elements;
  }
  if (multi) {
    args_word(&a, "MULTI");
    ok = reshard__redis_send_args(r, &a, NULL, NULL);
    if (!ok) {
      args_free(&a);
      return false;
    }
  }
  switch (op->kind) {
  case OP_PUT:
    ok = reshard__redis_put_commands(r, &a, op);
    break;
  case OP_GET:
    ok = reshard__redis_get_commands(r, &a, op);
    break;
  case OP_CHECK:
    ok = reshard__redis_check_commands(r, &a, op);
    break;
  case OP_ADD:
  case OP_FORGET:
    ok = reshard__redis_binding_commands(r, &a, op);
    break;
  case OP_LOOKUP:
    ok = reshard__redis_lookup_commands(r, &a, op);
    break;
  case OP_PUT_OBJECT:
  case OP_GET_OBJECTS:
  case OP_FORGET_OBJECT:
    ok = reshard__redis_object_commands(r, &a, op);
    break;
  }
  if (multi) {
    if (ok) {
      args_word(&a, "EXEC");
      ok = reshard__redis_send_args(r, &a, reshard__redis_on_reply, op);
    }
    if (!ok) {
      /* The connection is inside an unfinished MULTI: drop it. */
      reshard__redis_set_error(r, "cannot queue a command (out of memory)");
      args_free(&a);
      if (r->cluster != NULL) {
        reshard__redis_cluster_lost(r, a.ac);
        redisAsyncFree(a.ac);
      } else {
        reshard__redis_drop_connection(r);
      }
      return false;
    }
  }
  args_free(&a);
  return ok;
}

/* ---- Replies ---- */

/* Copies of replies kept while WAIT runs: hiredis 0.14 frees a reply when
 * its callback returns. */
static void reply_free(redisReply *reply) {
  for (size_t i = 0; i < reply->elements; i++) {
    if (reply->element[i] != NULL) {
      reply_free(reply->element[i]);
    }
  }
  free(reply->element);
  free(reply->str);
  free(reply);
}

static redisReply *reply_copy(const redisReply *in) {
  redisReply *out = calloc(1, sizeof *out);
  if (out == NULL) {
    return NULL;
  }
  out->type = in->type;
  out->integer = in->integer;
  if (in->str != NULL) {
    out->str = malloc(in->len + 1);
    if (out->str == NULL) {
      free(out);
      return NULL;
    }
    memcpy(out->str, in->str, in->len);
    out->str[in->len] = '\0';
    out->len = in->len;
  }
  if (in->elements > 0) {
    out->element = calloc(in->elements, sizeof *out->element);
    if (out->element == NULL) {
      reply_free(out);
      return NULL;
    }
    out->elements = in->elements;
    for (size_t i = 0; i < in->elements; i++) {
      if (in->element[i] != NULL &&
          (out->element[i] = reply_copy(in->element[i])) == NULL) {
        reply_free(out);
        return NULL;
      }
    }
  }
  return out;
}

static void dispatch(redis_op *op, const redisReply *reply) {
  switch (op->kind) {
  case OP_PUT:
    reshard__redis_reply_put(op, reply);
    break;
  case OP_GET:
    reshard__redis_reply_get(op, reply);
    break;
  case OP_CHECK:
    reshard__redis_reply_check(op, reply);
    break;
  case OP_ADD:
  case OP_FORGET:
    reshard__redis_reply_count(op, reply);
    break;
  case OP_LOOKUP:
    reshard__redis_reply_lookup(op, reply);
    break;
  case OP_PUT_OBJECT:
  case OP_GET_OBJECTS:
  case OP_FORGET_OBJECT:
    reshard__redis_reply_object(op, reply);
    break;
  }
}

/* Puts the operation back among those awaiting a reply. */
static void track(redis_op *op) {
  redis_catalog *r = op->r;
  op->sent_ms = uv_now(r->base.loop);
  if (r->cluster != NULL) {
    reshard__redis_cluster_track(op);
  } else {
    reshard__redis_list_push(&r->inflight, op);
    reshard__redis_update_ref(r);
  }
}

static void on_wait(redisAsyncContext *ac, void *reply_ptr, void *privdata) {
  redis_op *op = privdata;
  redis_catalog *r = op->r;
  redisReply *reply = reply_ptr;
  if (op->listed) {
    reshard__redis_list_remove(op->list, op);
  }
  redisReply *held = op->held;
  op->held = NULL;
  if (reply == NULL) {
    reply_free(held);
    if (r->cluster != NULL) {
      reshard__redis_cluster_lost(r, ac);
    } else {
      reshard__redis_connection_lost(r, ac);
    }
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  if (reply->type == REDIS_REPLY_INTEGER &&
      reply->integer >= (long long)r->wait_replicas) {
    dispatch(op, held);
    reply_free(held);
    return;
  }
  reshard_error err;
  if (reply->type == REDIS_REPLY_INTEGER) {
    reshard_error_set(&err, RESHARD_UNAVAILABLE,
                      "catalog %s: the write reached %lld of the %u replicas "
                      "--redis-wait-replicas asks for within %d ms; not "
                      "acknowledged (retry once the shard has its replicas)",
                      r->spec, reply->integer, r->wait_replicas,
                      RESHARD_CATALOG_REDIS_WAIT_TIMEOUT_MS);
  } else {
    reshard_error_set(
        &err, RESHARD_UNAVAILABLE, "catalog %s: WAIT %u: %s; not acknowledged",
        r->spec, r->wait_replicas,
        reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
  }
  reply_free(held);
  reshard__redis_op_complete(op, &err);
}

/* The write's reply arrived: keep it and ask, on the same connection,
 * that N replicas have it before it is answered. */
static void start_wait(redis_op *op, redisAsyncContext *ac,
                       const redisReply *reply) {
  redis_catalog *r = op->r;
  reshard_error err;
  op->held = reply_copy(reply);
  if (op->held == NULL) {
    reshard__redis_out_of_memory(&err);
    reshard__redis_op_complete(op, &err);
    return;
  }
  char replicas[16], timeout[16];
  int n = snprintf(replicas, sizeof replicas, "%u", r->wait_replicas);
  int m = snprintf(timeout, sizeof timeout, "%d",
                   RESHARD_CATALOG_REDIS_WAIT_TIMEOUT_MS);
  const char *argv[] = {"WAIT", replicas, timeout};
  size_t lengths[] = {4, (size_t)n, (size_t)m};
  if (redisAsyncCommandArgv(ac, on_wait, op, 3, argv, lengths) != REDIS_OK) {
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  track(op);
}

void reshard__redis_on_reply(redisAsyncContext *ac, void *reply_ptr,
                             void *privdata) {
  redis_op *op = privdata;
  redis_catalog *r = op->r;
  redisReply *reply = reply_ptr;
  if (op->listed) {
    reshard__redis_list_remove(op->list, op);
  }
  if (r->cluster != NULL && reshard__redis_cluster_reply(op, ac, reply)) {
    return;
  }
  if (reply == NULL) {
    reshard__redis_connection_lost(r, ac);
    reshard__redis_op_fail_unavailable(op);
    return;
  }
  if (r->wait_replicas > 0 && reshard__redis_op_writes(op) &&
      reply->type != REDIS_REPLY_ERROR) {
    start_wait(op, ac, reply);
    return;
  }
  dispatch(op, reply);
}
