/* The PlanLoad RPC's pages (SPEC §2.2 step 1): the bindings the catalog
 * holds for the request's page keys, remembered in the binding cache in
 * front of a remote catalog so that an outage can still be planned from
 * it, and the distinct manifests the bound prefix names (cache, else
 * catalog). Then reshard__load_plan (plan_load.c). */
#include <string.h>

#include "cache/table.h"
#include "observe/log.h"
#include "rpc/plan_load_internal.h"

static void on_manifests_fetched(void *data, const reshard_error *err,
                                 const reshard_catalog_record *records,
                                 size_t count) {
  load_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    reshard__load_fail(ctx, err);
    return;
  }
  /* records answer the missing manifests in order. */
  size_t r = 0;
  for (size_t m = 0; m < ctx->manifest_count && r < count; m++) {
    if (ctx->manifests[m] != NULL) {
      continue;
    }
    const reshard_catalog_record *record = &records[r++];
    if (!record->found) {
      /* A binding names a manifest the catalog does not have: skip that
       * candidate rather than fail the page. */
      reshard_log_line line;
      if (reshard_log_begin(&line, RESHARD_LOG_WARN,
                            "binding names a missing manifest")) {
        reshard_log_str(&line, "manifest_key", ctx->manifest_keys[m]);
        reshard_log_end(&line);
      }
      continue;
    }
    reshard_error failure;
    ctx->manifests[m] = reshard__planner_manifest_from_record(
        ctx->planner, ctx->manifest_keys[m], record->data, record->length,
        &failure);
    if (ctx->manifests[m] == NULL) {
      reshard__load_fail(ctx, &failure);
      return;
    }
    reshard__planner_cache_manifest(ctx->planner, ctx->manifests[m]);
  }
  reshard__load_plan(ctx);
}

typedef struct key_node {
  reshard_table_node node;
  const char *key;
  size_t index;
} key_node;

static bool key_matches(const reshard_table_node *node, const void *key) {
  return strcmp(((const key_node *)node)->key, key) == 0;
}

/* Bindings found: resolve the distinct manifests of the bound prefix (from
 * the cache, else the catalog) and plan. */
static void load_pages(load_ctx *ctx, const reshard_catalog_pages *pages) {
  reshard_planner *planner = ctx->planner;
  reshard_arena *arena = reshard_call_arena(ctx->call);
  size_t page_count = ctx->request->n_page_keys;
  /* The plan covers the bound prefix only; later pages stay empty. */
  size_t prefix = 0;
  while (prefix < page_count &&
         pages->start[prefix + 1] > pages->start[prefix]) {
    prefix++;
  }
  size_t bound = pages->start[prefix];
  ctx->page_manifest_start = RESHARD_ARENA_NEW(arena, size_t, page_count + 1);
  ctx->page_manifests = RESHARD_ARENA_NEW(arena, size_t, bound);
  ctx->manifest_keys = RESHARD_ARENA_NEW(arena, const char *, bound);
  key_node *nodes = RESHARD_ARENA_NEW(arena, key_node, bound);
  reshard_table distinct;
  if (ctx->page_manifest_start == NULL || ctx->page_manifests == NULL ||
      ctx->manifest_keys == NULL || nodes == NULL ||
      !reshard_table_init(&distinct, bound)) {
    reshard__load_fail_code(ctx, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  size_t at = 0;
  for (size_t p = 0; p < page_count; p++) {
    ctx->page_manifest_start[p] = at;
    if (p >= prefix) {
      continue;
    }
    /* Pages of one writer name the manifests the page before them named,
     * in the same order (S5: 256 pages, one manifest): compared with
     * that page's, a key is one string compare, not a hash and a probe
     * of the distinct keys (S5 pooled: 64 000 fewer instructions a
     * call, callgrind; docs/performance.md, Round 34). A catalog that
     * keeps each manifest key once (the memory catalog) hands both pages
     * the same pointer, which spares even that compare (Round 44). */
    size_t before = p > 0 ? ctx->page_manifest_start[p - 1] : 0;
    size_t before_count = p > 0 ? at - before : 0;
    for (size_t i = pages->start[p]; i < pages->start[p + 1]; i++) {
      const char *key = pages->manifest_keys[i];
      size_t j = i - pages->start[p];
      if (j < before_count) {
        size_t index = ctx->page_manifests[before + j];
        if (key == pages->manifest_keys[pages->start[p - 1] + j] ||
            strcmp(key, ctx->manifest_keys[index]) == 0) {
          ctx->page_manifests[at++] = index;
          continue;
        }
      }
      uint64_t hash = reshard_hash(key, strlen(key), 0);
      key_node *found =
          (key_node *)reshard_table_find(&distinct, hash, key_matches, key);
      if (found == NULL) {
        found = &nodes[ctx->manifest_count];
        found->key = reshard_arena_strdup(arena, key);
        if (found->key == NULL) {
          reshard_table_destroy(&distinct);
          reshard__load_fail_code(ctx, RESHARD_RESOURCE_EXHAUSTED,
                                  "out of memory");
          return;
        }
        found->index = ctx->manifest_count;
        found->node.hash = hash;
        reshard_table_insert(&distinct, &found->node);
        ctx->manifest_keys[ctx->manifest_count++] = found->key;
      }
      ctx->page_manifests[at++] = found->index;
    }
  }
  ctx->page_manifest_start[page_count] = at;
  reshard_table_destroy(&distinct);

  ctx->manifests =
      RESHARD_ARENA_NEW(arena, reshard_shared_manifest *, ctx->manifest_count);
  const char **missing =
      RESHARD_ARENA_NEW(arena, const char *, ctx->manifest_count);
  if (ctx->manifests == NULL || missing == NULL) {
    reshard__load_fail_code(ctx, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  size_t missing_count = 0;
  for (size_t m = 0; m < ctx->manifest_count; m++) {
    const char *key = ctx->manifest_keys[m];
    reshard_shared *hit = reshard_cache_get(
        planner->cache, RESHARD_CACHE_MANIFEST, key, strlen(key));
    ctx->manifests[m] = (reshard_shared_manifest *)hit;
    if (hit != NULL) {
      ctx->manifest_hits++;
    } else {
      ctx->manifest_misses++;
      missing[missing_count++] = key;
    }
  }
  if (ctx->from_cache) {
    if (missing_count > 0) {
      reshard__load_fail(ctx, &ctx->outage);
      return;
    }
    reshard_log_line line;
    if (reshard_log_begin(&line, RESHARD_LOG_WARN,
                          "catalog unavailable; planning from cache")) {
      reshard_log_u64(&line, "pages", prefix);
      reshard_log_end(&line);
    }
  }
  if (missing_count == 0) {
    reshard__load_plan(ctx);
    return;
  }
  planner->catalog->vtable->get_manifests(
      planner->catalog, missing, missing_count, on_manifests_fetched, ctx);
}

static bool keys_equal(const reshard_shared_keys *cached,
                       const char *const *keys, size_t count) {
  if (cached->count != count) {
    return false;
  }
  for (size_t i = 0; i < count; i++) {
    if (strcmp(cached->keys[i], keys[i]) != 0) {
      return false;
    }
  }
  return true;
}

/* A lookup answered: remember what the catalog said, for planning during
 * an outage. The catalog stays the source of truth; these entries are read
 * only when it cannot be reached. A page found unbound drops its entry. */
static void remember_bindings(reshard_planner *planner, const char *domain,
                              char *const *page_keys,
                              const reshard_catalog_pages *pages) {
  size_t domain_length = strlen(domain);
  reshard_shared *known = reshard_cache_get(
      planner->cache, RESHARD_CACHE_BINDINGS, domain, domain_length);
  if (known == NULL) {
    reshard_shared_keys *marker = reshard_shared_keys_create(NULL, 0);
    if (marker != NULL) {
      reshard_cache_put(planner->cache, RESHARD_CACHE_BINDINGS, domain,
                        domain_length, &marker->base);
      reshard_shared_unref(&marker->base);
    }
  }
  reshard_shared_unref(known);
  for (size_t p = 0; p < pages->page_count; p++) {
    char key[512];
    size_t length =
        reshard__planner_bindings_key(key, sizeof key, domain, page_keys[p]);
    if (length == 0) {
      continue;
    }
    size_t count = pages->start[p + 1] - pages->start[p];
    const char *const *keys = pages->manifest_keys + pages->start[p];
    if (count == 0) {
      reshard_cache_remove(planner->cache, RESHARD_CACHE_BINDINGS, key, length);
      continue;
    }
    reshard_shared *hit =
        reshard_cache_get(planner->cache, RESHARD_CACHE_BINDINGS, key, length);
    bool same = hit != NULL &&
                keys_equal((const reshard_shared_keys *)hit, keys, count);
    reshard_shared_unref(hit);
    if (same) {
      continue;
    }
    reshard_shared_keys *value = reshard_shared_keys_create(keys, count);
    if (value != NULL) {
      reshard_cache_put(planner->cache, RESHARD_CACHE_BINDINGS, key, length,
                        &value->base);
      reshard_shared_unref(&value->base);
    }
  }
}

/* The catalog is unreachable: plan the pages whose bindings are cached, in
 * order up to the first that is not. When even the first is not (or the
 * domain was never seen), the call fails with the catalog's error. */
static void load_from_cache(load_ctx *ctx, const reshard_error *outage) {
  reshard_planner *planner = ctx->planner;
  reshard_arena *arena = reshard_call_arena(ctx->call);
  const char *domain = ctx->request->model_domain;
  size_t page_count = ctx->request->n_page_keys;
  reshard_shared *known = reshard_cache_get(
      planner->cache, RESHARD_CACHE_BINDINGS, domain, strlen(domain));
  if (known == NULL || page_count == 0) {
    reshard_shared_unref(known);
    reshard__load_fail(ctx, outage);
    return;
  }
  reshard_shared_unref(known);
  size_t *start = RESHARD_ARENA_NEW(arena, size_t, page_count + 1);
  reshard_shared_keys **hits =
      RESHARD_ARENA_NEW(arena, reshard_shared_keys *, page_count);
  if (start == NULL || hits == NULL) {
    reshard__load_fail_code(ctx, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  size_t prefix = 0;
  size_t total = 0;
  for (; prefix < page_count; prefix++) {
    char key[512];
    size_t length = reshard__planner_bindings_key(
        key, sizeof key, domain, ctx->request->page_keys[prefix]);
    reshard_shared *hit =
        length > 0 ? reshard_cache_get(planner->cache, RESHARD_CACHE_BINDINGS,
                                       key, length)
                   : NULL;
    if (hit == NULL) {
      break;
    }
    hits[prefix] = (reshard_shared_keys *)hit;
    total += hits[prefix]->count;
  }
  /* Request-local copies, so the cached entries can go now. */
  const char **keys =
      prefix > 0 ? RESHARD_ARENA_NEW(arena, const char *, total) : NULL;
  bool ok = keys != NULL;
  size_t at = 0;
  for (size_t p = 0; p < prefix; p++) {
    start[p] = at;
    for (size_t i = 0; ok && i < hits[p]->count; i++) {
      keys[at] = reshard_arena_strdup(arena, hits[p]->keys[i]);
      ok = keys[at++] != NULL;
    }
    reshard_shared_unref(&hits[p]->base);
  }
  if (prefix == 0) {
    reshard__load_fail(ctx, outage);
    return;
  }
  if (!ok) {
    reshard__load_fail_code(ctx, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  for (size_t p = prefix; p <= page_count; p++) {
    start[p] = at;
  }
  ctx->from_cache = true;
  ctx->outage = *outage;
  reshard_catalog_pages pages = {
      .domain_known = true,
      .page_count = page_count,
      .start = start,
      .manifest_keys = keys,
  };
  load_pages(ctx, &pages);
}

void reshard__load_on_pages_found(void *data, const reshard_error *err,
                                  const reshard_catalog_pages *pages) {
  load_ctx *ctx = data;
  reshard_planner *planner = ctx->planner;
  if (err->code == RESHARD_UNAVAILABLE && planner->cache_bindings) {
    load_from_cache(ctx, err);
    return;
  }
  if (err->code != RESHARD_OK) {
    reshard__load_fail(ctx, err);
    return;
  }
  if (!pages->domain_known) {
    reshard_error not_found;
    reshard_error_set(&not_found, RESHARD_NOT_FOUND,
                      "model_domain %s: no manifest published",
                      ctx->request->model_domain);
    reshard__load_fail(ctx, &not_found);
    return;
  }
  if (planner->cache_bindings) {
    remember_bindings(planner, ctx->request->model_domain,
                      ctx->request->page_keys, pages);
  }
  load_pages(ctx, pages);
}
