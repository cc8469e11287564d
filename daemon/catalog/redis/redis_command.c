/* What every operation of the Redis catalog shares (redis_internal.h): its
 * record, building and sending its commands (inside MULTI/EXEC but for
 * MGET), dispatching its reply, and mapping Redis errors. */
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

void reshard__redis_op_done(redis_op *op) {
  redis_catalog *r = op->r;
  free(op);
  reshard__redis_update_ref(r);
  reshard__redis_maybe_finish_close(r);
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
  if (a->failed || r->ac == NULL) {
    return false;
  }
  for (size_t i = 0; i < a->count; i++) {
    a->argv[i] = a->text + a->offsets[i];
  }
  bool ok = redisAsyncCommandArgv(r->ac, fn, privdata, (int)a->count, a->argv,
                                  a->lengths) == REDIS_OK;
  args_reset(a);
  return ok;
}

/* Queues the operation's commands on the connection. */
bool reshard__redis_send_commands(redis_op *op) {
  redis_catalog *r = op->r;
  redis_args a = {0};
  bool ok = true;
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
      reshard__redis_drop_connection(r);
      return false;
    }
  }
  args_free(&a);
  return ok;
}

/* ---- Replies ---- */

void reshard__redis_on_reply(redisAsyncContext *ac, void *reply_ptr,
                             void *privdata) {
  redis_op *op = privdata;
  redis_catalog *r = op->r;
  redisReply *reply = reply_ptr;
  if (op->listed) {
    reshard__redis_list_remove(&r->inflight, op);
  }
  if (reply == NULL) {
    reshard__redis_connection_lost(r, ac);
    reshard__redis_op_fail_unavailable(op);
    return;
  }
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
