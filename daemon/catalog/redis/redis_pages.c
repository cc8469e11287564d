/* The Redis catalog's page bindings (redis_internal.h): add_pages,
 * forget_pages and lookup_pages, their commands and their replies, and the
 * manifests this connection saw published. Bindings live in listpack
 * hashes, one of 32 768 buckets a domain per page key, written and read by
 * one Lua script per operation ("The page layout" below). */
#include <limits.h>
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

/* ---- The page layout (docs/catalog.md "Page bindings on Redis") ---- */

/* A domain's bindings are fields of PAGE_BUCKETS hashes, each small enough
 * for Redis to keep it a listpack (hash-max-listpack-entries is 512 by
 * default; 32 768 buckets hold ten million bindings of one domain at about
 * 305 a bucket). A page key of lowercase hex of even length is stored as
 * the bytes it spells in reshard:{D}:pages:<n>, any other as its text in
 * reshard:{D}:pages-raw:<n>: the two names keep a raw "AB" and the packed
 * "4142" apart at no byte's cost. A field's value is the page's manifests
 * as per-domain ids, decimal and comma-separated ("3", "3,7"); Redis keeps
 * a lone id as an integer. */
#define PAGE_BUCKETS 32768u
#define PACK_MAX 1024 /* the longest hex key stored packed */

/* The domain's layout marker (reshard:{D}:layout); every page script
 * refuses a domain holding another value. */
static const char layout_value[] = "reshard-redis-pages 2 32768";

/* FNV-1a of the key's text, folded: part of the stored format, as
 * changing it would move every binding. */
static uint32_t page_bucket(const char *page_key) {
  uint32_t h = 2166136261u;
  for (const unsigned char *p = (const unsigned char *)page_key; *p; p++) {
    h = (h ^ *p) * 16777619u;
  }
  return (h ^ (h >> 15)) % PAGE_BUCKETS;
}

static bool page_packs(const char *key, size_t length) {
  if (length == 0 || length % 2 != 0 || length > PACK_MAX) {
    return false;
  }
  for (size_t i = 0; i < length; i++) {
    char c = key[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

static unsigned hex_value(char c) {
  return c <= '9' ? (unsigned)(c - '0') : (unsigned)(c - 'a' + 10);
}

bool reshard_catalog_redis_page_bucket(const char *page_key, char *out,
                                       size_t size) {
  bool packed = page_packs(page_key, strlen(page_key));
  int n = snprintf(out, size, "%s%u", packed ? "pages:" : "pages-raw:",
                   (unsigned)page_bucket(page_key));
  return n > 0 && (size_t)n < size;
}

/* The page's bucket key, then (second pass) its field. */
static void args_bucket(redis_args *a, const char *domain,
                        const char *page_key) {
  char bucket[32];
  if (!reshard_catalog_redis_page_bucket(page_key, bucket, sizeof bucket)) {
    a->failed = true;
    return;
  }
  args_domain_key(a, domain, bucket, NULL);
}

static void args_field(redis_args *a, const char *page_key) {
  size_t length = strlen(page_key);
  if (!page_packs(page_key, length)) {
    reshard__redis_args_add(a, page_key, length, NULL, 0, NULL, 0);
    return;
  }
  uint8_t bytes[PACK_MAX / 2];
  for (size_t i = 0; i < length / 2; i++) {
    bytes[i] = (uint8_t)(hex_value(page_key[2 * i]) << 4 |
                         hex_value(page_key[2 * i + 1]));
  }
  reshard__redis_args_add(a, bytes, length / 2, NULL, 0, NULL, 0);
}

/* ---- Scripts ---- */

/* Every page script gets KEYS = the domain's layout marker, its manifest
 * set, its manifest ids (manifest key -> id), its manifest keys (id ->
 * manifest key), then one bucket per page; ARGV = layout_value, the
 * manifest key ("" when none), then one field per page. Each is one EVAL,
 * atomic, and all its keys carry {D}: one slot on a cluster. EVAL (not
 * EVALSHA) so a new primary after a failover, whose script cache is empty,
 * needs no NOSCRIPT round. A domain with a manifest set but no marker was
 * written by a reshardd keeping a key per page (layout 1): refused. */
/* The scripts are kept as written, a line of Lua a line of C. */
/* clang-format off */
#define SCRIPT_LAYOUT(unknown)                                                \
  "local layout = redis.call('GET', KEYS[1])\n"                               \
  "if layout ~= ARGV[1] then\n"                                               \
  "  if layout then\n"                                                        \
  "    return redis.error_reply('RESHARDLAYOUT ' .. layout)\n"                \
  "  end\n"                                                                   \
  "  if redis.call('EXISTS', KEYS[2]) == 1 then\n"                            \
  "    return redis.error_reply('RESHARDLAYOUT 1')\n"                         \
  "  end\n"                                                                   \
  unknown                                                                     \
  "end\n"

/* Binds: the manifest's id (assigned on its first binding: ids are dense,
 * never reused, as manifests are never deleted), then each page's field
 * gains it unless it holds it (HSETNX first: one call for a page not bound
 * yet, the common case); returns how many bindings were added. */
static const char add_script[] =
    SCRIPT_LAYOUT("  redis.call('SET', KEYS[1], ARGV[1])\n")
    "local id = redis.call('HGET', KEYS[3], ARGV[2])\n"
    "if not id then\n"
    "  id = tostring(redis.call('HLEN', KEYS[3]) + 1)\n"
    "  redis.call('HSET', KEYS[3], ARGV[2], id)\n"
    "  redis.call('HSET', KEYS[4], id, ARGV[2])\n"
    "end\n"
    "local added = 0\n"
    "for i = 5, #KEYS do\n"
    "  local f = ARGV[i - 2]\n"
    "  if redis.call('HSETNX', KEYS[i], f, id) == 1 then\n"
    "    added = added + 1\n"
    "  else\n"
    "    local v = redis.call('HGET', KEYS[i], f)\n"
    "    if v ~= id and\n"
    "       not string.find(',' .. v .. ',', ',' .. id .. ',', 1, true) then\n"
    "      redis.call('HSET', KEYS[i], f, v .. ',' .. id)\n"
    "      added = added + 1\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return added\n";

/* Forgets one manifest's bindings: its id leaves each page's list, and a
 * page left with none loses its field (an empty bucket is deleted by
 * Redis). The id itself stays: it names a manifest that still exists. */
static const char forget_script[] =
    SCRIPT_LAYOUT("  return 0\n")
    "local id = redis.call('HGET', KEYS[3], ARGV[2])\n"
    "if not id then return 0 end\n"
    "local removed = 0\n"
    "for i = 5, #KEYS do\n"
    "  local f = ARGV[i - 2]\n"
    "  local v = redis.call('HGET', KEYS[i], f)\n"
    "  if v then\n"
    "    local rest, found = {}, false\n"
    "    for m in string.gmatch(v, '%d+') do\n"
    "      if m == id then found = true else rest[#rest + 1] = m end\n"
    "    end\n"
    "    if found then\n"
    "      removed = removed + 1\n"
    "      if #rest == 0 then redis.call('HDEL', KEYS[i], f)\n"
    "      else redis.call('HSET', KEYS[i], f, table.concat(rest, ',')) end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "return removed\n";

/* Forgets every binding of each page; returns how many there were. */
static const char forget_all_script[] =
    SCRIPT_LAYOUT("  return 0\n")
    "local removed = 0\n"
    "for i = 5, #KEYS do\n"
    "  local v = redis.call('HGET', KEYS[i], ARGV[i - 2])\n"
    "  if v then\n"
    "    for m in string.gmatch(v, '%d+') do removed = removed + 1 end\n"
    "    redis.call('HDEL', KEYS[i], ARGV[i - 2])\n"
    "  end\n"
    "end\n"
    "return removed\n";

/* Each page's manifest keys (an array per page, empty when unbound). */
static const char lookup_script[] =
    SCRIPT_LAYOUT("  local none = {}\n"
                  "  for i = 5, #KEYS do none[#none + 1] = {} end\n"
                  "  return none\n")
    "local names, out = {}, {}\n"
    "for i = 5, #KEYS do\n"
    "  local page = {}\n"
    "  local v = redis.call('HGET', KEYS[i], ARGV[i - 2])\n"
    "  if v then\n"
    "    for m in string.gmatch(v, '%d+') do\n"
    "      local name = names[m]\n"
    "      if name == nil then\n"
    "        name = redis.call('HGET', KEYS[4], m)\n"
    "        names[m] = name\n"
    "      end\n"
    "      if name then page[#page + 1] = name end\n"
    "    end\n"
    "  end\n"
    "  out[#out + 1] = page\n"
    "end\n"
    "return out\n";

/* Publishing marks a domain that has no manifest yet (redis_manifests.c
 * sends it before the SADD that creates the set): KEYS = marker, set. */
static const char mark_script[] =
    "if redis.call('EXISTS', KEYS[2]) == 0 then\n"
    "  redis.call('SET', KEYS[1], ARGV[1])\n"
    "end\n"
    "return 0\n";
/* clang-format on */

void reshard__redis_args_mark(redis_args *a, const char *domain) {
  args_word(a, "EVAL");
  reshard__redis_args_add(a, LIT(mark_script), NULL, 0, NULL, 0);
  args_word(a, "2");
  args_domain_key(a, domain, "layout", NULL);
  args_domain_key(a, domain, "manifests", NULL);
  reshard__redis_args_add(a, LIT(layout_value), NULL, 0, NULL, 0);
}

/* One EVAL of `script` over the operation's pages. */
static bool page_script(redis_catalog *r, redis_args *a, const redis_op *op,
                        const char *script, size_t length) {
  if (op->key_count > (INT_MAX - 16) / 2) {
    return false; /* redisAsyncCommandArgv counts arguments in an int */
  }
  char keys[32];
  snprintf(keys, sizeof keys, "%zu", op->key_count + 4);
  args_word(a, "EVAL");
  reshard__redis_args_add(a, script, length, NULL, 0, NULL, 0);
  args_word(a, keys);
  args_domain_key(a, op->domain, "layout", NULL);
  args_domain_key(a, op->domain, "manifests", NULL);
  args_domain_key(a, op->domain, "manifest-ids", NULL);
  args_domain_key(a, op->domain, "manifest-keys", NULL);
  for (size_t i = 0; i < op->key_count; i++) {
    args_bucket(a, op->domain, op->keys[i]);
  }
  reshard__redis_args_add(a, LIT(layout_value), NULL, 0, NULL, 0);
  const char *manifest = op->manifest_key != NULL ? op->manifest_key : "";
  reshard__redis_args_add(a, manifest, strlen(manifest), NULL, 0, NULL, 0);
  for (size_t i = 0; i < op->key_count; i++) {
    args_field(a, op->keys[i]);
  }
  return reshard__redis_send_args(r, a, NULL, NULL);
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

/* One script: bind, forget one manifest, or forget every binding. */
bool reshard__redis_binding_commands(redis_catalog *r, redis_args *a,
                                     const redis_op *op) {
  if (op->kind == OP_ADD) {
    return page_script(r, a, op, LIT(add_script));
  }
  if (op->manifest_key != NULL) {
    return page_script(r, a, op, LIT(forget_script));
  }
  return page_script(r, a, op, LIT(forget_all_script));
}

/* Is the domain known, then the lookup script. A cluster asks whether the
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
  return ok && page_script(r, a, op, LIT(lookup_script));
}

/* ---- Replies ---- */

/* A page script's refusal of the domain's layout, as FAILED_PRECONDITION
 * naming what to do; false when the reply holds none. */
static bool layout_refused(redis_op *op, const redisReply *reply,
                           reshard_error *err) {
  static const char tag[] = "RESHARDLAYOUT ";
  if (reply->type != REDIS_REPLY_ARRAY) {
    return false;
  }
  for (size_t i = 0; i < reply->elements; i++) {
    const redisReply *e = reply->element[i];
    if (e->type != REDIS_REPLY_ERROR ||
        strncmp(e->str, tag, sizeof tag - 1) != 0) {
      continue;
    }
    const char *found = e->str + sizeof tag - 1;
    if (strcmp(found, "1") == 0) {
      reshard_error_set(
          err, RESHARD_FAILED_PRECONDITION,
          "catalog %s: model domain %s holds page bindings in the layout "
          "of an older reshardd (a key per page, reshard:{D}:page:<page "
          "key>), which this reshardd does not read; point --catalog at an "
          "empty Redis database and have the writers publish and register "
          "again, or keep the older reshardd for this catalog "
          "(docs/catalog.md \"Page bindings on Redis\")",
          op->r->spec, op->domain);
    } else {
      reshard_error_set(err, RESHARD_FAILED_PRECONDITION,
                        "catalog %s: model domain %s has the page layout "
                        "\"%.60s\"; this reshardd reads \"%s\" only",
                        op->r->spec, op->domain, found, layout_value);
    }
    return true;
  }
  return false;
}

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
  if (layout_refused(op, reply, &err) ||
      !reshard__redis_exec_ok(
          r, reply, 1,
          op->kind == OP_ADD ? "binding pages" : "forgetting pages", &err)) {
    reshard__redis_op_complete(op, &err);
    return;
  }
  const redisReply *count = reply->element[0];
  if (count->type != REDIS_REPLY_INTEGER || count->integer < 0) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog %s: %s: unexpected reply (type %d)", r->spec,
                      op->kind == OP_ADD ? "binding pages" : "forgetting pages",
                      count->type);
    reshard__redis_op_complete(op, &err);
    return;
  }
  op->count_cb(op->data, &err, (uint64_t)count->integer);
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
  if (layout_refused(op, reply, &err) ||
      !reshard__redis_exec_ok(r, reply, 2, "looking up pages", &err)) {
    reshard__redis_op_complete(op, &err);
    return;
  }
  const redisReply *found = reply->element[1];
  /* Lua turns an empty table into an empty array, so 0 pages is one. */
  if (found->type != REDIS_REPLY_ARRAY || found->elements != pages) {
    reshard_error_set(&err, RESHARD_INTERNAL,
                      "catalog %s: looking up pages: unexpected reply (type "
                      "%d, %zu elements for %zu pages)",
                      r->spec, found->type, found->elements, pages);
    reshard__redis_op_complete(op, &err);
    return;
  }
  size_t total = 0;
  for (size_t i = 0; i < pages; i++) {
    const redisReply *set = found->element[i];
    if (set->type != REDIS_REPLY_ARRAY) {
      reshard_error_set(&err, RESHARD_INTERNAL,
                        "catalog %s: looking up page_keys[%zu]: not a list",
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
    const redisReply *set = found->element[i];
    start[i] = at;
    for (size_t j = 0; j < set->elements; j++) {
      if (set->element[j]->type == REDIS_REPLY_STRING) {
        keys[at++] = set->element[j]->str;
      }
    }
    /* Ids are in binding order; sort so every daemon reports the same. */
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
