/* What the two files of the PlanLoad RPC share: plan_load.c (decoding,
 * target, memory, planning and the response) and plan_load_pages.c (the
 * pages' bindings and the manifests they name). Internal to daemon/rpc/. */
#ifndef RESHARD_PLAN_LOAD_INTERNAL_H
#define RESHARD_PLAN_LOAD_INTERNAL_H

#include "cache/inline_cache.h"
#include "rpc/planner_internal.h"

typedef struct load_ctx {
  reshard_call *call;
  reshard_planner *planner;
  Reshard__V1__PlanLoadRequest *request;
  const char *operation_id;

  reshard__target target;
  const char *placement_id; /* target.id, the name encode_plan reads */
  bool has_dp_rank;
  uint64_t dp_rank;
  uint64_t effective_dp_rank;
  reshard_binding binding;
  uint64_t binding_values; /* sum of token_count * head_count, saturated */
  reshard_shared_binding *binding_ref; /* validated before, by content */
  reshard__pooled pooled;              /* the memory, when given as a pool */
  reshard_limits limits;

  /* Distinct manifests the bound pages name; refs held until the end. */
  size_t manifest_count;
  const char **manifest_keys;
  reshard_shared_manifest **manifests;
  size_t *page_manifest_start; /* page_count + 1 */
  size_t *page_manifests;      /* indices into manifests */

  /* What the planner sees: the manifests that resolved. */
  size_t source_count;
  reshard_plan_source *sources;
  const char **source_keys;
  reshard_shared_join **joins; /* cached templates per source, or NULL */
  size_t *page_source_start;
  size_t *page_sources;
  reshard_load_request load;

  unsigned manifest_hits, manifest_misses, join_hits, join_misses;
  reshard_work work;
  /* Planning scratch and the plan: freed as soon as the response is
   * encoded, so a call waiting to send holds its response, not its plan. */
  reshard_arena scratch;
  /* Without runs, the planner's varint columns go here and are sent from
   * here (response_memory.h); NULL when it could not be had. */
  reshard_response_memory *response_memory;
  reshard_load_plan plan;     /* only its counts outlive the scratch */
  reshard_join **built_joins; /* per source, what the planner built */
  bool planned; /* reshard_plan_load succeeded: built joins are ours */
  reshard_status status;
  reshard_error err;
  uint64_t plan_us;
  uint64_t response_bytes; /* the encoded response, once built */
  bool plan_ran;           /* reshard_plan_load was called */

  bool large; /* holds one of the planner's large places */
  /* The request's bytes still to decode, without what the inline cache
   * found (inline_cache.h). */
  const uint8_t *payload;
  size_t payload_length;
  reshard_inline_fields fields;
  bool by_content;
  /* The binding was left out of `payload`: decode fields.binding's bytes
   * with reshard_binding_decode. */
  bool binding_apart;

  /* The catalog was unreachable and the bindings came from the cache:
   * manifests must come from it too, or the call fails with `outage`. */
  bool from_cache;
  reshard_error outage;
} load_ctx;

/* Every manifest is resolved (or missing): build the sources and plan. */
void reshard__load_plan(load_ctx *ctx);

/* Fails the call, releasing what the context holds. */
void reshard__load_fail(load_ctx *ctx, const reshard_error *err);
void reshard__load_fail_code(load_ctx *ctx, reshard_status code,
                             const char *message);

/* The catalog's answer to the request's page lookup
 * (reshard_catalog_lookup_cb): resolves the manifests of the bound prefix,
 * or plans from the binding cache during an outage. */
void reshard__load_on_pages_found(void *data, const reshard_error *err,
                                  const reshard_catalog_pages *pages);

#endif
