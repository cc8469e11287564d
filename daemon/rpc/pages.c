/* The page RPCs (SPEC §3.3): RegisterPages binds page keys to a manifest
 * in the catalog, ForgetPages unbinds them; both drop what the binding
 * cache holds for those pages. */
#include <string.h>

#include "rpc/planner_internal.h"

typedef struct pages_ctx {
  reshard_call *call;
  reshard_planner *planner;
  const char *domain;
  char *const *page_keys;
  size_t page_count;
  bool forget;
} pages_ctx;

/* The binding cache's key for a page: "domain|page key" into `out`
 * (capacity `size`); 0 when it does not fit (such pages are never cached).
 * The model domain alone (no '|') marks the domain as known. */
size_t reshard__planner_bindings_key(char *out, size_t size, const char *domain,
                                     const char *page_key) {
  const char *parts[] = {domain, page_key};
  return reshard_cache_key(out, size, parts, 2);
}

/* Bindings changed: drop what a binding cache holds for these pages. */
static void invalidate_bindings(pages_ctx *ctx) {
  if (!ctx->planner->cache_bindings) {
    return;
  }
  for (size_t i = 0; i < ctx->page_count; i++) {
    char key[512];
    size_t n = reshard__planner_bindings_key(key, sizeof key, ctx->domain,
                                             ctx->page_keys[i]);
    if (n > 0) {
      reshard_cache_remove(ctx->planner->cache, RESHARD_CACHE_BINDINGS, key, n);
    }
  }
}

static void on_pages_changed(void *data, const reshard_error *err,
                             uint64_t count) {
  pages_ctx *ctx = data;
  invalidate_bindings(ctx);
  if (err->code != RESHARD_OK) {
    reshard_call_fail(ctx->call, err);
    return;
  }
  uint32_t narrowed = count > UINT32_MAX ? UINT32_MAX : (uint32_t)count;
  if (ctx->forget) {
    Reshard__V1__ForgetPagesResponse response =
        RESHARD__V1__FORGET_PAGES_RESPONSE__INIT;
    response.removed = narrowed;
    reshard_call_reply(ctx->call, &response.base);
  } else {
    Reshard__V1__RegisterPagesResponse response =
        RESHARD__V1__REGISTER_PAGES_RESPONSE__INIT;
    response.added = narrowed;
    reshard_call_reply(ctx->call, &response.base);
  }
}

static pages_ctx *pages_ctx_new(reshard_call *call, reshard_planner *planner) {
  pages_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx != NULL) {
    ctx->call = call;
    ctx->planner = planner;
  }
  return ctx;
}

void reshard__handle_register_pages(reshard_planner *planner,
                                    reshard_call *call, void *message) {
  Reshard__V1__RegisterPagesRequest *request = message;
  reshard_error err;
  pages_ctx *ctx = pages_ctx_new(call, planner);
  if (ctx == NULL) {
    return;
  }
  char *domain = reshard__planner_call_alloc(call, RESHARD_DIGEST_HEX_LEN + 1);
  if (domain == NULL) {
    return;
  }
  if (reshard__planner_parse_manifest_key(request->manifest_key, "manifest_key",
                                          domain, &err) != RESHARD_OK ||
      reshard__planner_check_page_keys(request->page_keys, request->n_page_keys,
                                       &planner->caps, &err) != RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  ctx->domain = domain;
  ctx->page_keys = request->page_keys;
  ctx->page_count = request->n_page_keys;
  planner->catalog->vtable->add_pages(
      planner->catalog, domain, request->manifest_key,
      (const char *const *)request->page_keys, request->n_page_keys,
      on_pages_changed, ctx);
}

void reshard__handle_forget_pages(reshard_planner *planner, reshard_call *call,
                                  void *message) {
  Reshard__V1__ForgetPagesRequest *request = message;
  reshard_error err;
  pages_ctx *ctx = pages_ctx_new(call, planner);
  if (ctx == NULL) {
    return;
  }
  if (reshard__planner_check_domain(request->model_domain, "model_domain",
                                    &err) != RESHARD_OK ||
      reshard__planner_check_page_keys(request->page_keys, request->n_page_keys,
                                       &planner->caps, &err) != RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  const char *manifest_key = NULL;
  if (request->manifest_key[0] != '\0') {
    char domain[RESHARD_DIGEST_HEX_LEN + 1];
    if (reshard__planner_parse_manifest_key(request->manifest_key,
                                            "manifest_key", domain,
                                            &err) != RESHARD_OK) {
      reshard_call_fail(call, &err);
      return;
    }
    if (strcmp(domain, request->model_domain) != 0) {
      reshard_error_set(&err, RESHARD_INVALID_ARGUMENT,
                        "manifest_key: belongs to model domain %s, not "
                        "model_domain %s",
                        domain, request->model_domain);
      reshard_call_fail(call, &err);
      return;
    }
    manifest_key = request->manifest_key;
  }
  ctx->forget = true;
  ctx->domain = request->model_domain;
  ctx->page_keys = request->page_keys;
  ctx->page_count = request->n_page_keys;
  planner->catalog->vtable->forget_pages(
      planner->catalog, request->model_domain, manifest_key,
      (const char *const *)request->page_keys, request->n_page_keys,
      on_pages_changed, ctx);
}
