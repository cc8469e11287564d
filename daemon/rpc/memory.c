/* The memory RPCs (SPEC §1.5a, §3.3): RegisterMemory validates a pool
 * against its placement and stores it as a catalog record — the pool with
 * the placement it was registered for, so that any daemon of the fleet
 * resolves the memory id from that one record — and ForgetMemory removes
 * it. Also how a plan's `pooled` memory is resolved and its block table
 * bound (reshard__pooled_resolve), for PlanLoad and PlanStore alike. */
#include <stdio.h>
#include <string.h>

#include "observe/log.h"
#include "reshard/identity.h"
#include "reshard/pool.h"
#include "rpc/planner_internal.h"
#include "wire/wire.h"

/* "sha256:" and 64 lowercase hex digits: anything else names no record,
 * and is refused before it reaches the catalog as a key. */
reshard_status reshard__planner_check_id(const char *id, const char *path,
                                         reshard_error *err) {
  size_t length = id != NULL ? strlen(id) : 0;
  bool valid = length == RESHARD_ID_SIZE - 1 && strncmp(id, "sha256:", 7) == 0;
  for (size_t i = 7; valid && i < length; i++) {
    valid = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
  }
  if (!valid) {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "%s: must be \"sha256:\" and 64 lowercase hex "
                             "digits, as the Register calls answer",
                             path);
  }
  return RESHARD_OK;
}

/* A memory pool record: the pool and its placement, both canonical. */
static uint8_t *pool_record(const reshard_pool *pool,
                            const reshard_placement *placement,
                            reshard_arena *arena, size_t *length) {
  Reshard__V1__RegisterMemoryRequest record =
      RESHARD__V1__REGISTER_MEMORY_REQUEST__INIT;
  record.pool = reshard_wire_pool_to_pb(pool, arena);
  record.placement = reshard_wire_placement_to_pb(placement, arena);
  record.target_case = RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT;
  if (record.pool == NULL || record.placement == NULL) {
    return NULL;
  }
  return reshard_wire_pack(&record.base, arena, length);
}

/* A catalog record of memory pool `id`, decoded, validated and checked to
 * be that pool; the caller owns the reference. NULL with `err` (INTERNAL)
 * otherwise. */
reshard_shared_pool *reshard__planner_pool_from_record(reshard_planner *planner,
                                                       const char *id,
                                                       const uint8_t *data,
                                                       size_t length,
                                                       reshard_error *err) {
  reshard_arena scratch;
  reshard_arena_init(&scratch, 4096);
  reshard_shared_pool *shared = NULL;
  reshard_shared_placement *placement = NULL;
  reshard_pool pool;
  char what[RESHARD_ID_SIZE + 48];
  snprintf(what, sizeof what, "catalog record of memory pool %s", id);
  Reshard__V1__RegisterMemoryRequest *record =
      (Reshard__V1__RegisterMemoryRequest *)reshard_wire_unpack(
          &reshard__v1__register_memory_request__descriptor, data, length,
          &scratch, err);
  if (record == NULL ||
      (placement = reshard__planner_placement_from_pb(
           planner, record->placement, NULL, what, err)) == NULL ||
      reshard_wire_pool_from_pb(record->pool, "pool", &scratch, &pool, err) !=
          RESHARD_OK ||
      (shared = reshard_shared_pool_create(&pool, id, placement, &planner->caps,
                                           "pool", err)) == NULL) {
    reshard_error_prefix(err, "%s", what);
    goto done;
  }
  char found[RESHARD_ID_SIZE];
  if (reshard_memory_id(&shared->pool, placement->placement_id, found, err) !=
          RESHARD_OK ||
      strcmp(found, id) != 0) {
    reshard_error_set(err, RESHARD_INTERNAL, "%s: holds memory pool %s", what,
                      found);
    reshard_shared_unref(&shared->base);
    shared = NULL;
  }
done:
  if (shared == NULL && err != NULL) {
    err->code = RESHARD_INTERNAL;
  }
  reshard_shared_unref(placement ? &placement->base : NULL);
  reshard_arena_destroy(&scratch);
  return shared;
}

/* ---- RegisterMemory ---- */

typedef struct register_ctx {
  reshard_call *call;
  reshard_planner *planner;
  Reshard__V1__RegisterMemoryRequest *request;
  reshard__target target;
  reshard_shared_pool *pool;
  uint8_t *record; /* the pool's, stored after an inline placement's */
  size_t length;
} register_ctx;

static void register_finish(register_ctx *ctx, const reshard_error *err) {
  reshard__target_release(&ctx->target);
  reshard_shared_unref(ctx->pool ? &ctx->pool->base : NULL);
  ctx->pool = NULL;
  if (err != NULL) {
    reshard_call_fail(ctx->call, err);
  }
}

static void on_pool_stored(void *data, const reshard_error *err, bool created) {
  register_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    register_finish(ctx, err);
    return;
  }
  reshard_shared_pool *pool = ctx->pool;
  reshard_cache_put(ctx->planner->cache, RESHARD_CACHE_MEMORY_POOL,
                    pool->memory_id, strlen(pool->memory_id), &pool->base);
  reshard_log_line line;
  if (created &&
      reshard_log_begin(&line, RESHARD_LOG_INFO, "memory registered")) {
    reshard_log_str(&line, "memory_id", pool->memory_id);
    reshard_log_str(&line, "placement_id", pool->placement->placement_id);
    reshard_log_str(&line, "participant", pool->pool.participant_id);
    reshard_log_u64(&line, "tensors", pool->pool.tensor_count);
    reshard_log_u64(&line, "num_blocks", pool->pool.num_blocks);
    reshard_log_end(&line);
  }
  /* The pool may go with its last reference below; the id stays here. */
  char id[RESHARD_ID_SIZE];
  snprintf(id, sizeof id, "%s", pool->memory_id);
  Reshard__V1__RegisterMemoryResponse response =
      RESHARD__V1__REGISTER_MEMORY_RESPONSE__INIT;
  response.memory_id = id;
  response.created = created;
  register_finish(ctx, NULL);
  reshard_call_reply(ctx->call, &response.base);
}

static void store_pool(register_ctx *ctx) {
  ctx->planner->catalog->vtable->put_object(
      ctx->planner->catalog, RESHARD_CATALOG_OBJECT_MEMORY_POOL,
      ctx->pool->memory_id, ctx->record, ctx->length, on_pool_stored, ctx);
}

static void on_placement_stored(void *data, const reshard_error *err,
                                bool created) {
  (void)created;
  register_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    register_finish(ctx, err);
    return;
  }
  store_pool(ctx);
}

static void on_register_target(void *data, const reshard_error *err) {
  register_ctx *ctx = data;
  if (err != NULL) {
    register_finish(ctx, err);
    return;
  }
  reshard_planner *planner = ctx->planner;
  reshard_arena *arena = reshard_call_arena(ctx->call);
  reshard_error failure;
  reshard_pool pool;
  if (reshard_wire_pool_from_pb(ctx->request->pool, "pool", arena, &pool,
                                &failure) != RESHARD_OK) {
    register_finish(ctx, &failure);
    return;
  }
  reshard_shared_placement *placement =
      ctx->target.ref != NULL
          ? (reshard_shared_placement *)reshard_shared_ref(
                &ctx->target.ref->base)
          : reshard__planner_cache_placement(planner, ctx->target.placement,
                                             ctx->target.id, &failure);
  if (placement == NULL) {
    register_finish(ctx, &failure);
    return;
  }
  ctx->pool = reshard_shared_pool_create(&pool, "", placement, &planner->caps,
                                         "pool", &failure);
  reshard_shared_unref(&placement->base);
  size_t length = 0;
  uint8_t *record = NULL;
  if (ctx->pool == NULL ||
      reshard_memory_id(&ctx->pool->pool, ctx->target.id, ctx->pool->memory_id,
                        &failure) != RESHARD_OK) {
    register_finish(ctx, &failure);
    return;
  }
  /* The record is the canonical form, so every daemon stores the same
   * bytes for the same pool: nothing is stored unless it was valid. */
  record = pool_record(&ctx->pool->pool, &ctx->pool->placement->placement,
                       arena, &length);
  if (record == NULL) {
    reshard_error_set(&failure, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    register_finish(ctx, &failure);
    return;
  }
  ctx->record = record;
  ctx->length = length;
  if (ctx->request->target_case !=
      RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT) {
    store_pool(ctx);
    return;
  }
  /* An inline placement is stored too, so that plans naming it by id
   * resolve on every daemon, as if it had been registered. */
  size_t placement_length = 0;
  uint8_t *placement_record = reshard__planner_placement_record(
      &ctx->pool->placement->placement, arena, &placement_length);
  if (placement_record == NULL) {
    reshard_error_set(&failure, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    register_finish(ctx, &failure);
    return;
  }
  planner->catalog->vtable->put_object(
      planner->catalog, RESHARD_CATALOG_OBJECT_PLACEMENT, ctx->target.id,
      placement_record, placement_length, on_placement_stored, ctx);
}

void reshard__handle_register_memory(reshard_planner *planner,
                                     reshard_call *call, void *message) {
  register_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx == NULL) {
    return;
  }
  ctx->call = call;
  ctx->planner = planner;
  ctx->request = message;
  const Reshard__V1__RegisterMemoryRequest *request = ctx->request;
  if (request->pool == NULL) {
    reshard_call_fail_code(call, RESHARD_INVALID_ARGUMENT, "pool: required");
    return;
  }
  reshard__target_resolve(
      &ctx->target, planner, call,
      request->target_case ==
          RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT,
      request->placement,
      request->target_case ==
              RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT_ID
          ? request->placement_id
          : NULL,
      on_register_target, ctx);
}

/* ---- ForgetMemory ---- */

typedef struct forget_ctx {
  reshard_call *call;
  reshard_planner *planner;
  const char *id;
} forget_ctx;

static void on_pool_forgotten(void *data, const reshard_error *err,
                              bool removed) {
  forget_ctx *ctx = data;
  if (err->code != RESHARD_OK) {
    reshard_call_fail(ctx->call, err);
    return;
  }
  /* Plans in flight keep their reference; new ones miss. */
  reshard_cache_remove(ctx->planner->cache, RESHARD_CACHE_MEMORY_POOL, ctx->id,
                       strlen(ctx->id));
  reshard_log_line line;
  if (removed &&
      reshard_log_begin(&line, RESHARD_LOG_INFO, "memory forgotten")) {
    reshard_log_str(&line, "memory_id", ctx->id);
    reshard_log_end(&line);
  }
  Reshard__V1__ForgetMemoryResponse response =
      RESHARD__V1__FORGET_MEMORY_RESPONSE__INIT;
  response.removed = removed;
  reshard_call_reply(ctx->call, &response.base);
}

void reshard__handle_forget_memory(reshard_planner *planner, reshard_call *call,
                                   void *message) {
  Reshard__V1__ForgetMemoryRequest *request = message;
  reshard_error err;
  if (reshard__planner_check_id(request->memory_id, "memory_id", &err) !=
      RESHARD_OK) {
    reshard_call_fail(call, &err);
    return;
  }
  forget_ctx *ctx = reshard__planner_call_alloc(call, sizeof *ctx);
  if (ctx == NULL) {
    return;
  }
  *ctx = (forget_ctx){call, planner, request->memory_id};
  planner->catalog->vtable->forget_object(planner->catalog,
                                          RESHARD_CATALOG_OBJECT_MEMORY_POOL,
                                          ctx->id, on_pool_forgotten, ctx);
}

/* ---- A plan's pooled memory ---- */

/* A pool cached in front of a catalog that other daemons share is read
 * again this long after it was last read, so a ForgetMemory through
 * another daemon reaches this one's plans within it: an engine that
 * restarted may have given the forgotten pool's memory to something
 * else. One read a second per pool in use costs the fleet's catalog
 * little. A catalog of this machine only is this daemon's own, and its
 * ForgetMemory drops the cache entry at once. */
enum { POOL_RECHECK_NS = 1000 * 1000 * 1000 };

bool reshard__planner_pool_current(const reshard_planner *planner,
                                   const reshard_shared_pool *pool) {
  return planner->catalog->vtable->lookups_are_local ||
         uv_hrtime() - pool->read_ns < POOL_RECHECK_NS;
}

reshard_status reshard__pooled_check(const Reshard__V1__PooledMemory *pb,
                                     reshard_error *err) {
  switch (pb->pool_case) {
  case RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID:
    return reshard__planner_check_id(pb->memory_id, "pooled.memory_id", err);
  case RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL:
    return RESHARD_OK;
  default:
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "pooled: set memory_id or inline_pool");
  }
}

const char *
reshard__pooled_participant_field(const Reshard__V1__PooledMemory *pb) {
  if (pb == NULL) {
    return NULL; /* an explicit binding: the library's default */
  }
  return pb->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL
             ? "pooled.inline_pool.participant_id"
             : "pooled.memory_id (its pool's participant_id)";
}

/* What a resolution waiting on the catalog needs afterwards. */
typedef struct pooled_resolution {
  reshard_planner *planner;
  reshard_call *call;
  const Reshard__V1__PooledMemory *pb;
  const reshard__target *target;
  uint64_t token_span;
  const reshard_limits *limits;
  reshard__pooled *out;
  reshard__pooled_done *done;
  void *data;
} pooled_resolution;

/* Hands the validated pool and the request's block table to the plan,
 * which checks the table and reads each page's ranges from it: the pool
 * is never expanded into one range per block. */
static void use_table(const pooled_resolution *r, const reshard_pool *pool,
                      const reshard_bound_pool *bound) {
  reshard__pooled *out = r->out;
  out->memory = (reshard_pooled_memory){
      .pool = bound,
      .block_ids = r->pb->block_ids,
      .block_count = r->pb->n_block_ids,
  };
  out->ready = true;
  out->binding = (reshard_binding){
      .participant_id = pool->participant_id,
      .endpoint = pool->endpoint,
      .regions = pool->regions,
      .region_count = pool->region_count,
  };
  out->values = reshard_pool_values(bound, r->token_span);
  r->done(r->data, NULL);
}

/* A registered pool found: it must be the target placement's. */
static void use_shared(const pooled_resolution *r, reshard_shared_pool *pool) {
  r->out->ref = pool;
  if (strcmp(pool->placement->placement_id, r->target->id) != 0) {
    reshard_error err;
    reshard_error_set(&err, RESHARD_INVALID_ARGUMENT,
                      "pooled.memory_id %s: registered for placement %s, not "
                      "the request's placement %s",
                      pool->memory_id, pool->placement->placement_id,
                      r->target->id);
    r->done(r->data, &err);
    return;
  }
  use_table(r, &pool->pool, &pool->bound);
}

static void on_pool_fetched(void *data, const reshard_error *err,
                            const reshard_catalog_record *records,
                            size_t count) {
  pooled_resolution *r = data;
  if (err->code != RESHARD_OK) {
    r->done(r->data, err);
    return;
  }
  reshard_error failure;
  const char *id = r->pb->memory_id;
  if (count != 1 || !records[0].found) {
    reshard_cache_remove(r->planner->cache, RESHARD_CACHE_MEMORY_POOL, id,
                         strlen(id));
    reshard_error_set(&failure, RESHARD_NOT_FOUND,
                      "pooled.memory_id %s: not registered (call "
                      "RegisterMemory first, again after ForgetMemory)",
                      id);
    r->done(r->data, &failure);
    return;
  }
  reshard_shared_pool *pool = reshard__planner_pool_from_record(
      r->planner, id, records[0].data, records[0].length, &failure);
  if (pool == NULL) {
    r->done(r->data, &failure);
    return;
  }
  reshard_cache_put(r->planner->cache, RESHARD_CACHE_MEMORY_POOL, id,
                    strlen(id), &pool->base);
  use_shared(r, pool);
}

void reshard__pooled_resolve(reshard_planner *planner, reshard_call *call,
                             const Reshard__V1__PooledMemory *pb,
                             const reshard__target *target, uint64_t token_span,
                             const reshard_limits *limits, reshard__pooled *out,
                             reshard__pooled_done *done, void *data) {
  reshard_arena *arena = reshard_call_arena(call);
  pooled_resolution *r =
      reshard_arena_alloc(arena, sizeof *r, _Alignof(pooled_resolution));
  reshard_error err;
  if (r == NULL) {
    reshard_error_set(&err, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
    done(data, &err);
    return;
  }
  *r = (pooled_resolution){planner, call, pb,   target, token_span,
                           limits,  out,  done, data};
  if (pb->pool_case == RESHARD__V1__POOLED_MEMORY__POOL_INLINE_POOL) {
    /* Validated per call, into the call's arena. */
    reshard_pool *pool = RESHARD_ARENA_NEW(arena, reshard_pool, 1);
    reshard_bound_pool *bound = RESHARD_ARENA_NEW(arena, reshard_bound_pool, 1);
    if (pool == NULL || bound == NULL) {
      reshard_error_set(&err, RESHARD_RESOURCE_EXHAUSTED, "out of memory");
      done(data, &err);
      return;
    }
    const reshard_placement_part *part = NULL;
    if (reshard_wire_pool_from_pb(pb->inline_pool, "pooled.inline_pool", arena,
                                  pool, &err) != RESHARD_OK) {
      done(data, &err);
      return;
    }
    part = reshard_placement_find_part(target->placement, pool->participant_id);
    if (part == NULL) {
      reshard_error_set(&err, RESHARD_INVALID_ARGUMENT,
                        "pooled.inline_pool.participant_id: \"%.200s\" is not "
                        "a participant of the target placement",
                        pool->participant_id ? pool->participant_id : "");
      done(data, &err);
      return;
    }
    if (reshard_pool_validate(pool, &target->placement->descriptor, part,
                              limits, "pooled.inline_pool", arena, bound,
                              &err) != RESHARD_OK) {
      done(data, &err);
      return;
    }
    use_table(r, pool, bound);
    return;
  }
  const char *id = pb->memory_id;
  reshard_shared *hit = reshard_cache_get(
      planner->cache, RESHARD_CACHE_MEMORY_POOL, id, strlen(id));
  if (hit != NULL &&
      reshard__planner_pool_current(planner, (reshard_shared_pool *)hit)) {
    use_shared(r, (reshard_shared_pool *)hit);
    return;
  }
  reshard_shared_unref(hit); /* read again: it may have been forgotten */
  const char *ids[1] = {id};
  planner->catalog->vtable->get_objects(planner->catalog,
                                        RESHARD_CATALOG_OBJECT_MEMORY_POOL, ids,
                                        1, on_pool_fetched, r);
}

void reshard__pooled_release(reshard__pooled *pooled) {
  reshard_shared_unref(pooled->ref ? &pooled->ref->base : NULL);
  pooled->ref = NULL;
}
