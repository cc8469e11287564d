/* The Redis catalog's page bindings (redis_internal.h): add_pages,
 * forget_pages and lookup_pages, their commands and their replies, and the
 * manifests this connection saw published. */
#include <stdlib.h>
#include <string.h>

#include "catalog/redis/redis_internal.h"

#define VERIFIED_MAX 4096

/* ---- Manifests verified on this connection ---- */

/* A manifest this connection saw published in a domain. */
typedef struct verified_entry {
  reshard_table_node node;
  char key[]; /* domain '\n' manifest key */
} verified_entry;

void reshard__redis_free_verified(reshard_table_node *node, void *data) {
  (void)data;
  free(node);
}

static bool verified_matches(const reshard_table_node *node, const void *key) {
  return strcmp(((const verified_entry *)node)->key, key) == 0;
}

/* "domain\nmanifest key" into a new buffer. */
static char *verified_key(const char *domain, const char *manifest_key,
                          size_t *length) {
  size_t d = strlen(domain), m = strlen(manifest_key);
  char *key = malloc(d + m + 2);
  if (key != NULL) {
    memcpy(key, domain, d);
    key[d] = '\n';
    memcpy(key + d + 1, manifest_key, m + 1);
    *length = d + m + 1;
  }
  return key;
}

static verified_entry *find_verified(redis_catalog *r, const char *key,
                                     uint64_t hash) {
  return (verified_entry *)reshard_table_find(&r->verified, hash,
                                              verified_matches, key);
}

static bool is_verified(redis_catalog *r, const char *domain,
                        const char *manifest_key) {
  size_t length;
  char *key = verified_key(domain, manifest_key, &length);
  if (key == NULL) {
    return false;
  }
  bool found = find_verified(r, key, reshard_hash(key, length, 7)) != NULL;
  free(key);
  return found;
}

static void remember_verified(redis_catalog *r, const char *domain,
                              const char *manifest_key) {
  if (r->verified.count >= VERIFIED_MAX) {
    return;
  }
  size_t length;
  char *key = verified_key(domain, manifest_key, &length);
  if (key == NULL) {
    return;
  }
  uint64_t hash = reshard_hash(key, length, 7);
  verified_entry *entry = NULL;
  if (find_verified(r, key, hash) == NULL &&
      (entry = malloc(sizeof *entry + length + 1)) != NULL) {
    memcpy(entry->key, key, length + 1);
    entry->node.hash = hash;
    reshard_table_insert(&r->verified, &entry->node);
  }
  free(key);
}

/* ---- Commands ---- */

/* Is the manifest published in the domain, or elsewhere? */
bool reshard__redis_check_commands(redis_catalog *r, redis_args *a,
                                   const redis_op *op) {
  args_word(a, "SISMEMBER");
  args_domain_key(a, op->domain, "manifests", NULL);
  args_word(a, op->manifest_key);
  bool ok = reshard__redis_send_args(r, a, NULL, NULL);
  args_word(a, "EXISTS");
  reshard__redis_args_manifest_key(r, a, op->manifest_key);
  ok = ok && reshard__redis_send_args(r, a, NULL, NULL);
  return ok;
}

/* SADD or SREM per page, or SCARD + DEL per page to forget every binding. */
bool reshard__redis_binding_commands(redis_catalog *r, redis_args *a,
                                     const redis_op *op) {
  bool ok = true;
  for (size_t i = 0; i < op->key_count && ok; i++) {
    if (op->kind == OP_ADD || op->manifest_key != NULL) {
      args_word(a, op->kind == OP_ADD ? "SADD" : "SREM");
      args_domain_key(a, op->domain, "page:", op->keys[i]);
      args_word(a, op->manifest_key);
      ok = reshard__redis_send_args(r, a, NULL, NULL);
    } else {
      args_word(a, "SCARD");
      args_domain_key(a, op->domain, "page:", op->keys[i]);
      ok = reshard__redis_send_args(r, a, NULL, NULL);
      args_word(a, "DEL");
      args_domain_key(a, op->domain, "page:", op->keys[i]);
      ok = ok && reshard__redis_send_args(r, a, NULL, NULL);
    }
  }
  return ok;
}

/* Is the domain known, and SMEMBERS per page. A cluster asks whether the
 * domain's manifest set exists, in the domain's slot. */
bool reshard__redis_lookup_commands(redis_catalog *r, redis_args *a,
                                    const redis_op *op) {
  if (r->cluster != NULL) {
    args_word(a, "EXISTS");
    args_domain_key(a, op->domain, "manifests", NULL);
  } else {
    args_word(a, "SISMEMBER");
    args_word(a, "reshard:domains");
    args_word(a, op->domain);
  }
  bool ok = reshard__redis_send_args(r, a, NULL, NULL);
  for (size_t i = 0; i < op->key_count && ok; i++) {
    args_word(a, "SMEMBERS");
    args_domain_key(a, op->domain, "page:", op->keys[i]);
    ok = reshard__redis_send_args(r, a, NULL, NULL);
  }
  return ok;
}

/* ---- Replies ---- */

void reshard__redis_reply_check(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  if (!reshard__redis_exec_ok(r, reply, 2, "checking the manifest", &err)) {
    reshard__redis_op_complete(op, &err);
    return;
  }
  if (reply->element[0]->integer == 1) {
    remember_verified(r, op->domain, op->manifest_key);
    op->kind = OP_ADD;
    reshard__redis_start_op(op);
    return;
  }
  if (reply->element[1]->integer == 1) {
    reshard_error_set(&err, RESHARD_INVALID_ARGUMENT,
                      "manifest_key %s: belongs to another model domain than "
                      "%s",
                      op->manifest_key, op->domain);
  } else {
    reshard_error_set(&err, RESHARD_NOT_FOUND,
                      "manifest_key %s: no such manifest is published",
                      op->manifest_key);
  }
  reshard__redis_op_complete(op, &err);
}

void reshard__redis_reply_count(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  bool forget_all = op->kind == OP_FORGET && op->manifest_key == NULL;
  size_t expected = forget_all ? 2 * op->key_count : op->key_count;
  if (!reshard__redis_exec_ok(
          r, reply, expected,
          op->kind == OP_ADD ? "binding pages" : "forgetting pages", &err)) {
    reshard__redis_op_complete(op, &err);
    return;
  }
  uint64_t count = 0;
  for (size_t i = 0; i < expected; i += forget_all ? 2 : 1) {
    if (reply->element[i]->type == REDIS_REPLY_INTEGER &&
        reply->element[i]->integer > 0) {
      count += (uint64_t)reply->element[i]->integer;
    }
  }
  op->count_cb(op->data, &err, count);
  reshard__redis_op_done(op);
}

static int compare_keys(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void reshard__redis_reply_lookup(redis_op *op, const redisReply *reply) {
  reshard_error err;
  reshard_error_clear(&err);
  redis_catalog *r = op->r;
  size_t pages = op->key_count;
  if (!reshard__redis_exec_ok(r, reply, pages + 1, "looking up pages", &err)) {
    reshard__redis_op_complete(op, &err);
    return;
  }
  size_t total = 0;
  for (size_t i = 0; i < pages; i++) {
    const redisReply *set = reply->element[i + 1];
    if (set->type != REDIS_REPLY_ARRAY) {
      reshard_error_set(&err, RESHARD_INTERNAL,
                        "catalog %s: looking up page_keys[%zu]: not a set",
                        r->spec, i);
      reshard__redis_op_complete(op, &err);
      return;
    }
    total += set->elements;
  }
  size_t *start = malloc((pages + 1) * sizeof *start);
  const char **keys = malloc((total ? total : 1) * sizeof *keys);
  if (start == NULL || keys == NULL) {
    free(start);
    free(keys);
    reshard_error_set(&err, RESHARD_INTERNAL, "catalog: out of memory");
    reshard__redis_op_complete(op, &err);
    return;
  }
  size_t at = 0;
  for (size_t i = 0; i < pages; i++) {
    const redisReply *set = reply->element[i + 1];
    start[i] = at;
    for (size_t j = 0; j < set->elements; j++) {
      if (set->element[j]->type == REDIS_REPLY_STRING) {
        keys[at++] = set->element[j]->str;
      }
    }
    /* SMEMBERS has no order; sort so every daemon reports the same. */
    qsort(keys + start[i], at - start[i], sizeof *keys, compare_keys);
  }
  start[pages] = at;
  reshard_catalog_pages result = {
      .domain_known = reply->element[0]->integer == 1,
      .page_count = pages,
      .start = start,
      .manifest_keys = keys,
  };
  op->lookup_cb(op->data, &err, &result);
  free(start);
  free(keys);
  reshard__redis_op_done(op);
}

/* ---- Operations ---- */

void reshard__redis_add_pages(reshard_catalog *catalog,
                              const char *model_domain,
                              const char *manifest_key,
                              const char *const *page_keys, size_t page_count,
                              reshard_catalog_count_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  bool known = is_verified(r, model_domain, manifest_key);
  redis_op *op =
      reshard__redis_op_new(r, known ? OP_ADD : OP_CHECK, manifest_key,
                            model_domain, NULL, 0, page_keys, page_count);
  if (op == NULL) {
    reshard_error err;
    reshard__redis_out_of_memory(&err);
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}

void reshard__redis_forget_pages(reshard_catalog *catalog,
                                 const char *model_domain,
                                 const char *manifest_key,
                                 const char *const *page_keys,
                                 size_t page_count, reshard_catalog_count_cb cb,
                                 void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  redis_op *op = reshard__redis_op_new(r, OP_FORGET, manifest_key, model_domain,
                                       NULL, 0, page_keys, page_count);
  if (op == NULL) {
    reshard_error err;
    reshard__redis_out_of_memory(&err);
    cb(data, &err, 0);
    return;
  }
  op->count_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}

void reshard__redis_lookup_pages(reshard_catalog *catalog,
                                 const char *model_domain,
                                 const char *const *page_keys,
                                 size_t page_count,
                                 reshard_catalog_lookup_cb cb, void *data) {
  redis_catalog *r = (redis_catalog *)catalog;
  redis_op *op = reshard__redis_op_new(r, OP_LOOKUP, NULL, model_domain, NULL,
                                       0, page_keys, page_count);
  if (op == NULL) {
    reshard_error err;
    reshard__redis_out_of_memory(&err);
    cb(data, &err, NULL);
    return;
  }
  op->lookup_cb = cb;
  op->data = data;
  reshard__redis_start_op(op);
}
