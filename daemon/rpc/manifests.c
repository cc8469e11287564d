/* The manifest RPCs (SPEC §3.3): PublishManifest stores a manifest's
 * canonical record in the catalog, GetManifest reads it back (cache, else
 * catalog). Also how every handler turns a catalog record into a cached,
 * shared manifest. */
#include <string.h>

#include "observe/log.h"
#include "reshard/identity.h"
#include "rpc/planner_internal.h"
#include "wire/wire.h"

typedef struct manifest_ids {
  char key[RESHARD_MANIFEST_KEY_SIZE];
  char layout_id[RESHARD_ID_SIZE];
  char domain[RESHARD_DIGEST_HEX_LEN + 1];
} manifest_ids;

static reshard_status compute_ids(const reshard_manifest *manifest,
                                  manifest_ids *ids, reshard_error *err) {
  reshard_status status =
      reshard_layout_id(&manifest->layout, ids->layout_id, err);
  if (status == RESHARD_OK) {
    status = reshard_model_domain(manifest, ids->domain, err);
  }
  if (status == RESHARD_OK) {
    status = reshard_manifest_key(manifest, ids->key, err);
  }
  return status;
}

/* Decodes and normalizes a catalog record into a shared manifest, checking
 * that it is the manifest `key` names. */
reshard_shared_manifest *
reshard__planner_manifest_from_record(const reshard_planner *planner,
                                      const char *key, const uint8_t *data,
                                      size_t length, reshard_error *err) {
  reshard_arena scratch;
  reshard_arena_init(&scratch, 4096);
  reshard_shared_manifest *shared = NULL;
  reshard_manifest manifest;
  manifest_ids ids;
  ProtobufCMessage *message = reshard_wire_unpack(
      &reshard__v1__store_manifest__descriptor, data, length, &scratch, err);
  if (message == NULL ||
      reshard_wire_manifest_from_pb((Reshard__V1__StoreManifest *)message,
                                    "manifest", &scratch, &manifest,
                                    err) != RESHARD_OK ||
      reshard_manifest_normalize(&manifest, &planner->caps, &scratch, err) !=
          RESHARD_OK ||
      compute_ids(&manifest, &ids, err) != RESHARD_OK) {
    reshard_error_prefix(err, "catalog record %s", key);
    if (err != NULL) {
      err->code = RESHARD_INTERNAL;
    }
    goto done;
  }
  if (strcmp(ids.key, key) != 0) {
    reshard_error_set(err, RESHARD_INTERNAL,
                      "catalog record %s: holds manifest %s", key, ids.key);
    goto done;
  }
  shared = reshard_shared_manifest_create(&manifest, ids.key, ids.layout_id,
                                          ids.domain);
  if (shared == NULL) {
    reshard_error_set(err, RESHARD_RESOURCE_EXHAUSTED,
                      "out of memory caching manifest %s", key);
  }
done:
  reshard_arena_destroy(&scratch);
  return shared;
}

void reshard__planner_cache_manifest(reshard_planner *planner,
                                     reshard_shared_manifest *manifest) {
  reshard_cache_put(planner->cache, RESHARD_CACHE_MANIFEST,
                    manifest->manifest_key, strlen(manifest->manifest_key),
                    &manifest->base);
}

reshard_shared_manifest *
reshard__planner_manifest_found(reshard_planner *planner, const char *key,
                                const reshard_catalog_record *records,
                                size_t count, reshard_error *err) {
  if (count != 1 || !records[0].found) {
    reshard_error_set(err, RESHARD_NOT_FOUND,
                      "manifest_key %s: no such manifest is published", key);
    return NULL;
  }
  reshard_shared_manifest *shared = reshard__planner_manifest_from_record(
      planner, key, records[0].data, records[0].length, err);
  if (shared != NULL) {
    reshard__planner_cache_manifest(planner, shared);
  }
  return shared;
}

/* ---- PublishManifest ---- */

typedef struct publish_ctx {
  reshard_call *call;
  reshard_planner *planner;
  reshard_manifest manifest;
  manifest_ids ids;
} publish_ctx;

static void on_published(void *data, const reshard_error *err, bool created) {
  publish_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    reshard_call_fail(ctx->call, err);
    return;
  }
  reshard_shared_manifest *shared = reshard_shared_manifest_create(
      &ctx->manifest, ctx->ids.key, ctx->ids.layout_id, ctx->ids.domain);
  if (shared != NULL) {
    reshard__planner_cache_manifest(ctx->planner, shared);
    reshard_shared_unref(&shared->base);
  }
  reshard_log_line line;
  if (created &&
      reshard_log_begin(&line, RESHARD_LOG_INFO, "manifest published")) {
    reshard_log_str(&line, "manifest_key", ctx->ids.key);
    reshard_log_str(&line, "layout_id", ctx->ids.layout_id);
    reshard_log_end(&line);
  }
  Reshard__V1__PublishManifestResponse response =
      RESHARD__V1__PUBLISH_MANIFEST_RESPONSE__INIT;
  response.manifest_key = ctx->ids.key;
  response.layout_id = ctx->ids.layout_id;
  response.model_domain = ctx->ids.domain;
  response.created = created;
  reshard_call_reply(ctx->call, &response.base);
}

void reshard__handle_publish_manifest(reshard_planner *planner,
                                      reshard_call *call, void *message) {
  Reshard__V1__PublishManifestRequest *request = message;
  reshard_arena *arena = reshard_call_arena(call);
  publish_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  reshard_error err;
  if (ctx == NULL) {
    return;
  }
  ctx->call = call;
  ctx->planner = planner;
  if (reshard_wire_manifest_from_pb(request->manifest, "manifest", arena,
                                    &ctx->manifest, &err) != RESHARD_OK ||
      reshard_manifest_normalize(&ctx->manifest, &planner->caps, arena, &err) !=
          RESHARD_OK ||
      compute_ids(&ctx->manifest, &ctx->ids, &err) != RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  /* The record is the canonical form: normalized, so every daemon stores
   * the same bytes for the same manifest. */
  Reshard__V1__StoreManifest *canonical =
      reshard_wire_manifest_to_pb(&ctx->manifest, arena);
  size_t length = 0;
  uint8_t *record =
      canonical ? reshard_wire_pack(&canonical->base, arena, &length) : NULL;
  if (record == NULL) {
    reshard_call_fail_code(call, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  planner->catalog->vtable->put_manifest(planner->catalog, ctx->ids.key,
                                         ctx->ids.domain, record, length,
                                         on_published, ctx);
}

/* ---- GetManifest ---- */

typedef struct get_ctx {
  reshard_call *call;
  reshard_planner *planner;
  const char *key;
} get_ctx;

static void reply_manifest(reshard_call *call,
                           const reshard_shared_manifest *shared) {
  Reshard__V1__GetManifestResponse response =
      RESHARD__V1__GET_MANIFEST_RESPONSE__INIT;
  response.manifest =
      reshard_wire_manifest_to_pb(&shared->manifest, reshard_call_arena(call));
  if (response.manifest == NULL) {
    reshard_call_fail_code(call, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    return;
  }
  response.layout_id = (char *)shared->layout_id;
  response.model_domain = (char *)shared->model_domain;
  reshard_call_reply(call, &response.base);
}

static void on_got_manifest(void *data, const reshard_error *err,
                            const reshard_catalog_record *records,
                            size_t count) {
  get_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    reshard_call_fail(ctx->call, err);
    return;
  }
  reshard_error failure;
  reshard_shared_manifest *shared = reshard__planner_manifest_found(
      ctx->planner, ctx->key, records, count, &failure);
  if (shared == NULL) {
    reshard_call_fail(ctx->call, &failure);
    return;
  }
  reply_manifest(ctx->call, shared);
  reshard_shared_unref(&shared->base);
}

void reshard__handle_get_manifest(reshard_planner *planner, reshard_call *call,
                                  void *message) {
  Reshard__V1__GetManifestRequest *request = message;
  reshard_error err;
  char domain[RESHARD_DIGEST_HEX_LEN + 1];
  if (reshard__planner_parse_manifest_key(request->manifest_key, "manifest_key",
                                          domain, &err) != RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  reshard_shared *hit =
      reshard_cache_get(planner->cache, RESHARD_CACHE_MANIFEST,
                        request->manifest_key, strlen(request->manifest_key));
  if (hit != NULL) {
    reply_manifest(call, (reshard_shared_manifest *)hit);
    reshard_shared_unref(hit);
    return;
  }
  get_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx == NULL) {
    return;
  }
  ctx->call = call;
  ctx->planner = planner;
  ctx->key = request->manifest_key;
  planner->catalog->vtable->get_manifests(planner->catalog, &ctx->key, 1,
                                          on_got_manifest, ctx);
}
