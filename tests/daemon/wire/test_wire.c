/* Tests daemon/wire.c: round trips between protobuf-c messages and the
 * library's types, field paths in errors, and the packed-column plan
 * responses of PlanLoad and PlanStore. */
#include <criterion/criterion.h>
#include <string.h>

#include "wire/wire.h"

static reshard_arena arena;

static void setup(void) {
  reshard_arena_init(&arena, 0);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(wire, .init = setup, .fini = teardown);

static uint64_t layers[] = {0, 1, 2, 3};
static uint64_t shard_layers[] = {0, 1, 2, 3};

static reshard_manifest sample_manifest(void) {
  static reshard_shard shards[2];
  shards[0] = (reshard_shard){shard_layers, 4, 0, 2, "0"};
  shards[1] = (reshard_shard){shard_layers, 4, 2, 2, "1"};
  reshard_manifest manifest = {
      .name_space = "ns",
      .model_id = "model",
      .model_revision = "rev",
      .semantic_fingerprint = "fp",
      .layout =
          {
              .descriptor = {layers, 4, "bf16", 2, 16, 4, 8, 8},
              .format = RESHARD_FORMAT_LPHD,
              .shards = shards,
              .shard_count = 2,
          },
  };
  return manifest;
}

/* Packs `message`, decodes it again as `type`, and returns the copy. */
static ProtobufCMessage *reencode(const ProtobufCMessage *message,
                                  size_t *length) {
  uint8_t *bytes = reshard_wire_pack(message, &arena, length);
  cr_assert_not_null(bytes);
  reshard_error err;
  ProtobufCMessage *copy =
      reshard_wire_unpack(message->descriptor, bytes, *length, &arena, &err);
  cr_assert_not_null(copy, "%s", err.message);
  return copy;
}

Test(wire, manifest_round_trip) {
  reshard_manifest manifest = sample_manifest();
  Reshard__V1__StoreManifest *pb =
      reshard_wire_manifest_to_pb(&manifest, &arena);
  cr_assert_not_null(pb);
  size_t length;
  Reshard__V1__StoreManifest *copy =
      (Reshard__V1__StoreManifest *)reencode(&pb->base, &length);
  reshard_manifest decoded;
  reshard_error err;
  cr_assert_eq(
      reshard_wire_manifest_from_pb(copy, "manifest", &arena, &decoded, &err),
      RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(decoded.name_space, "ns");
  cr_assert_str_eq(decoded.semantic_fingerprint, "fp");
  const reshard_layout *layout = &decoded.layout;
  cr_assert_eq(layout->format, RESHARD_FORMAT_LPHD);
  cr_assert_eq(layout->descriptor.layer_count, 4);
  cr_assert_eq(layout->descriptor.global_layer_ids[3], 3);
  cr_assert_str_eq(layout->descriptor.dtype, "bf16");
  cr_assert_eq(layout->descriptor.value_head_dim, 8);
  cr_assert_eq(layout->shard_count, 2);
  cr_assert_eq(layout->shards[1].head_start, 2);
  cr_assert_str_eq(layout->shards[1].key_suffix, "1");

  /* Encoding the decoded struct gives the same bytes. */
  Reshard__V1__StoreManifest *again =
      reshard_wire_manifest_to_pb(&decoded, &arena);
  size_t again_length;
  uint8_t *first = reshard_wire_pack(&pb->base, &arena, &length);
  uint8_t *second = reshard_wire_pack(&again->base, &arena, &again_length);
  cr_assert_eq(length, again_length);
  cr_assert_eq(memcmp(first, second, length), 0);
}

Test(wire, placement_round_trip_and_default_rank) {
  static uint64_t part_layers[] = {0, 1};
  reshard_placement_part parts[2] = {
      {"r-a", {0, 0, 0}, part_layers, 2, 0, 1, 0, 1},
      {"r-b", {1, 2, 3}, part_layers, 2, 1, 1, 0, 0},
  };
  reshard_placement placement = {
      .resource_id = "res",
      .revision = "rev",
      .placement_set_id = "pset",
      .dp_size = 2,
      .pp_size = 3,
      .tp_size = 4,
      .descriptor = {layers, 2, "bf16", 2, 16, 2, 8, 8},
      .parts = parts,
      .part_count = 2,
  };
  Reshard__V1__Placement *pb = reshard_wire_placement_to_pb(&placement, &arena);
  cr_assert_not_null(pb);
  pb->parts[0]->rank = NULL; /* proto3: absent reads as (0, 0, 0) */
  size_t length;
  Reshard__V1__Placement *copy =
      (Reshard__V1__Placement *)reencode(&pb->base, &length);
  reshard_placement decoded;
  reshard_error err;
  cr_assert_eq(
      reshard_wire_placement_from_pb(copy, "placement", &arena, &decoded, &err),
      RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(decoded.placement_set_id, "pset");
  cr_assert_eq(decoded.tp_size, 4);
  cr_assert_eq(decoded.part_count, 2);
  cr_assert_eq(decoded.parts[0].rank.dp, 0);
  cr_assert_eq(decoded.parts[0].rank.tp, 0);
  cr_assert_eq(decoded.parts[1].rank.pp, 2);
  cr_assert_eq(decoded.parts[1].rank.tp, 3);
  cr_assert_str_eq(decoded.parts[1].participant_id, "r-b");
  cr_assert_eq(decoded.parts[1].head_start, 1);
  /* replica_count 0 stays 0 here; normalisation reads it as 1. */
  cr_assert_eq(decoded.parts[1].replica_count, 0);
}

Test(wire, missing_messages_name_their_path) {
  reshard_error err;
  reshard_manifest manifest;
  cr_assert_eq(
      reshard_wire_manifest_from_pb(NULL, "manifest", &arena, &manifest, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message, "manifest: required");

  Reshard__V1__StoreManifest pb = RESHARD__V1__STORE_MANIFEST__INIT;
  cr_assert_eq(
      reshard_wire_manifest_from_pb(&pb, "manifest", &arena, &manifest, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message, "manifest.layout: required");

  Reshard__V1__StoreLayout layout = RESHARD__V1__STORE_LAYOUT__INIT;
  pb.layout = &layout;
  cr_assert_eq(
      reshard_wire_manifest_from_pb(&pb, "manifest", &arena, &manifest, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message, "manifest.layout.descriptor: required");

  reshard_binding binding;
  cr_assert_eq(
      reshard_wire_binding_from_pb(NULL, "binding", &arena, &binding, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message, "binding: required");
}

Test(wire, unspecified_and_unknown_format) {
  reshard_error err;
  reshard_manifest manifest;
  Reshard__V1__Descriptor descriptor = RESHARD__V1__DESCRIPTOR__INIT;
  Reshard__V1__StoreLayout layout = RESHARD__V1__STORE_LAYOUT__INIT;
  Reshard__V1__StoreManifest pb = RESHARD__V1__STORE_MANIFEST__INIT;
  layout.descriptor = &descriptor;
  pb.layout = &layout;
  cr_assert_eq(
      reshard_wire_manifest_from_pb(&pb, "manifest", &arena, &manifest, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message,
                   "manifest.layout.format: must be set (PLHD, LPHD or HPLD)");
  layout.format = (Reshard__V1__StoreFormat)9;
  cr_assert_eq(
      reshard_wire_manifest_from_pb(&pb, "manifest", &arena, &manifest, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message, "manifest.layout.format: unknown value 9 "
                                "(must be PLHD, LPHD or HPLD)");
  reshard_format format;
  cr_assert_eq(reshard_wire_format_from_pb(RESHARD__V1__STORE_FORMAT__HPLD,
                                           "format", &format, &err),
               RESHARD_OK);
  cr_assert_eq(format, RESHARD_FORMAT_HPLD);
}

static Reshard__V1__RuntimeBinding *
sample_binding(Reshard__V1__Component second) {
  static Reshard__V1__Region region = RESHARD__V1__REGION__INIT;
  static Reshard__V1__Region *regions[] = {&region};
  static Reshard__V1__BindingRange ranges[2] = {
      RESHARD__V1__BINDING_RANGE__INIT, RESHARD__V1__BINDING_RANGE__INIT};
  static Reshard__V1__BindingRange *range_ptrs[] = {&ranges[0], &ranges[1]};
  static Reshard__V1__RuntimeBinding binding =
      RESHARD__V1__RUNTIME_BINDING__INIT;
  region.region_id = "kv";
  region.address = 4096;
  region.nbytes = 1 << 20;
  for (int i = 0; i < 2; i++) {
    ranges[i].global_layer_id = 7;
    ranges[i].token_start = 16;
    ranges[i].token_count = 32;
    ranges[i].head_start = 1;
    ranges[i].head_count = 2;
    ranges[i].region_id = "kv";
    ranges[i].offset_bytes = 100 + (uint64_t)i;
    ranges[i].token_stride_bytes = 64;
    ranges[i].head_stride_bytes = 32;
  }
  ranges[0].component = RESHARD__V1__COMPONENT__KEY;
  ranges[1].component = second;
  binding.participant_id = "r-0";
  binding.endpoint = "ep";
  binding.n_regions = 1;
  binding.regions = regions;
  binding.n_ranges = 2;
  binding.ranges = range_ptrs;
  return &binding;
}

Test(wire, binding_fields) {
  reshard_error err;
  reshard_binding binding;
  Reshard__V1__RuntimeBinding *pb =
      sample_binding(RESHARD__V1__COMPONENT__VALUE);
  size_t length;
  Reshard__V1__RuntimeBinding *copy =
      (Reshard__V1__RuntimeBinding *)reencode(&pb->base, &length);
  cr_assert_eq(
      reshard_wire_binding_from_pb(copy, "binding", &arena, &binding, &err),
      RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(binding.participant_id, "r-0");
  cr_assert_eq(binding.region_count, 1);
  cr_assert_eq(binding.regions[0].address, 4096);
  cr_assert_eq(binding.range_count, 2);
  cr_assert_eq(binding.ranges[0].component, RESHARD_COMPONENT_KEY);
  cr_assert_eq(binding.ranges[1].component, RESHARD_COMPONENT_VALUE);
  cr_assert_eq(binding.ranges[1].global_layer_id, 7);
  cr_assert_eq(binding.ranges[1].token_start, 16);
  cr_assert_eq(binding.ranges[1].token_count, 32);
  cr_assert_eq(binding.ranges[1].offset_bytes, 101);
  cr_assert_eq(binding.ranges[1].token_stride_bytes, 64);
  cr_assert_eq(binding.ranges[1].head_stride_bytes, 32);
  cr_assert_str_eq(binding.ranges[1].region_id, "kv");
}

Test(wire, binding_component_errors) {
  reshard_error err;
  reshard_binding binding;
  cr_assert_eq(
      reshard_wire_binding_from_pb(
          sample_binding(RESHARD__V1__COMPONENT__COMPONENT_UNSPECIFIED),
          "binding", &arena, &binding, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message,
                   "binding.ranges[1].component: must be KEY or VALUE");
  cr_assert_eq(
      reshard_wire_binding_from_pb(sample_binding((Reshard__V1__Component)7),
                                   "binding", &arena, &binding, &err),
      RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message, "binding.ranges[1].component: unknown value 7 "
                                "(must be KEY or VALUE)");
}

Test(wire, malformed_bytes) {
  static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff};
  reshard_error err;
  cr_assert_null(
      reshard_wire_unpack(&reshard__v1__plan_load_request__descriptor, garbage,
                          sizeof garbage, &arena, &err));
  cr_assert_eq(err.code, RESHARD_INVALID_ARGUMENT);
  cr_assert_str_eq(err.message,
                   "request: malformed reshard.v1.PlanLoadRequest message (4 "
                   "bytes)");
  /* A truncated length-delimited field. */
  static const uint8_t truncated[] = {0x0a, 0x10, 'a'};
  cr_assert_null(
      reshard_wire_unpack(&reshard__v1__plan_load_request__descriptor,
                          truncated, sizeof truncated, &arena, &err));
  cr_assert_eq(err.code, RESHARD_INVALID_ARGUMENT);
}

Test(wire, decoding_draws_from_the_arena) {
  reshard_manifest manifest = sample_manifest();
  Reshard__V1__StoreManifest *pb =
      reshard_wire_manifest_to_pb(&manifest, &arena);
  size_t length;
  uint8_t *bytes = reshard_wire_pack(&pb->base, &arena, &length);
  reshard_arena fresh;
  reshard_arena_init(&fresh, 0);
  reshard_error err;
  cr_assert_not_null(reshard_wire_unpack(
      &reshard__v1__store_manifest__descriptor, bytes, length, &fresh, &err));
  cr_assert_gt(fresh.total_bytes, 0);
  /* No free: the arena owns it all (ASan would report a leak otherwise). */
  reshard_arena_destroy(&fresh);
}

Test(wire, limits) {
  reshard_limits limits;
  reshard_wire_limits_from_pb(NULL, &limits);
  cr_assert_eq(limits.max_operations, 0);
  cr_assert_eq(limits.max_page_keys, 0);
  Reshard__V1__Limits pb = RESHARD__V1__LIMITS__INIT;
  pb.max_operations = 1;
  pb.max_bytes = 2;
  pb.max_batch_operations = 3;
  pb.max_batch_bytes = 4;
  pb.max_ranges = 5;
  pb.max_validation_work = 6;
  reshard_wire_limits_from_pb(&pb, &limits);
  cr_assert_eq(limits.max_operations, 1);
  cr_assert_eq(limits.max_bytes, 2);
  cr_assert_eq(limits.max_batch_operations, 3);
  cr_assert_eq(limits.max_batch_bytes, 4);
  cr_assert_eq(limits.max_ranges, 5);
  cr_assert_eq(limits.max_validation_work, 6);
  cr_assert_eq(limits.max_layout_parts, 0);
}

Test(wire, plan_response_columns) {
  reshard_copy copies[3] = {
      {0, 1, 100, 0, 1000, 16},
      {1, 0, 200, 1, 2000, 32},
      {1, 1, 300, 0, 3000, 8},
  };
  reshard_batch batches[2] = {{0, 2, 48}, {2, 1, 8}};
  size_t page_source[2] = {1, 0};
  reshard_load_plan plan = {
      .hit_pages = 2,
      .page_source = page_source,
      .copies = copies,
      .copy_count = 3,
      .batches = batches,
      .batch_count = 2,
      .operations = 3,
      .bytes = 56,
      .copies_before_coalescing = 9,
  };
  reshard_plan_source sources[2] = {{NULL, "sha256:aa", NULL},
                                    {NULL, "sha256:bb", NULL}};
  const char *manifest_keys[] = {"kv/a/manifests/aa", "kv/b/manifests/bb"};
  const char *page_keys[] = {"p0", "p1", "p2"};
  reshard_region regions[2] = {{"r0", 4096, 8192}, {"r1", 65536, 8192}};
  reshard_binding binding = {.regions = regions, .region_count = 2};
  reshard_wire_plan_names names = {page_keys, manifest_keys, sources, &binding,
                                   "sha256:pp"};
  Reshard__V1__PlanLoadResponse *pb =
      reshard_wire_plan_to_pb(&plan, &names, &arena);
  cr_assert_not_null(pb);
  size_t length;
  Reshard__V1__PlanLoadResponse *r =
      (Reshard__V1__PlanLoadResponse *)reencode(&pb->base, &length);
  cr_assert_eq(r->hit_pages, 2);
  cr_assert_str_eq(r->placement_id, "sha256:pp");
  cr_assert_eq(r->n_pages, 2);
  cr_assert_str_eq(r->pages[0]->page_key, "p0");
  cr_assert_str_eq(r->pages[0]->manifest_key, "kv/b/manifests/bb");
  cr_assert_str_eq(r->pages[0]->layout_id, "sha256:bb");
  cr_assert_str_eq(r->pages[1]->layout_id, "sha256:aa");
  cr_assert_eq(r->n_region_ids, 2);
  cr_assert_str_eq(r->region_ids[1], "r1");
  cr_assert_eq(r->n_batches, 2);
  const Reshard__V1__RangeBatch *b0 = r->batches[0];
  const Reshard__V1__RangeBatch *b1 = r->batches[1];
  cr_assert_eq(b0->n_nbytes, 2);
  cr_assert_eq(b0->n_page_index, 2);
  cr_assert_eq(b0->page_index[1], 1);
  cr_assert_eq(b0->part_offset[1], 200);
  cr_assert_eq(b0->region_index[1], 1);
  cr_assert_eq(b0->region_offset[0], 1000);
  cr_assert_eq(b0->nbytes[1], 32);
  cr_assert_eq(b0->bytes, 48);
  cr_assert_eq(b1->n_part_index, 1);
  cr_assert_eq(b1->part_index[0], 1);
  cr_assert_eq(b1->region_offset[0], 3000);
  cr_assert_eq(b1->bytes, 8);
  cr_assert_eq(r->stats->operations, 3);
  cr_assert_eq(r->stats->bytes, 56);
  cr_assert_eq(r->stats->copies_before_coalescing, 9);
}

Test(wire, store_plan_response_columns) {
  reshard_copy copies[3] = {
      {0, 2, 100, 1, 1000, 16},
      {0, 2, 116, 0, 64, 16},
      {1, 2, 100, 1, 3000, 8},
  };
  reshard_batch batches[2] = {{0, 2, 32}, {2, 1, 8}};
  uint64_t parts[1] = {2};
  reshard_store_plan plan = {
      .part_indexes = parts,
      .part_count = 1,
      .copies = copies,
      .copy_count = 3,
      .batches = batches,
      .batch_count = 2,
      .operations = 3,
      .bytes = 40,
      .copies_before_coalescing = 5,
  };
  reshard_region regions[2] = {{"w0", 4096, 8192}, {"w1", 65536, 8192}};
  reshard_binding binding = {.regions = regions, .region_count = 2};
  Reshard__V1__PlanStoreResponse *pb =
      reshard_wire_store_plan_to_pb(&plan, &binding, "sha256:ll", &arena);
  cr_assert_not_null(pb);
  size_t length;
  Reshard__V1__PlanStoreResponse *r =
      (Reshard__V1__PlanStoreResponse *)reencode(&pb->base, &length);
  cr_assert_str_eq(r->layout_id, "sha256:ll");
  cr_assert_eq(r->n_part_indexes, 1);
  cr_assert_eq(r->part_indexes[0], 2);
  cr_assert_eq(r->n_region_ids, 2);
  cr_assert_str_eq(r->region_ids[0], "w0");
  cr_assert_eq(r->n_batches, 2);
  const Reshard__V1__RangeBatch *b0 = r->batches[0];
  cr_assert_eq(b0->n_nbytes, 2);
  cr_assert_eq(b0->part_offset[1], 116);
  cr_assert_eq(b0->region_index[0], 1);
  cr_assert_eq(b0->region_offset[1], 64);
  cr_assert_eq(b0->bytes, 32);
  cr_assert_eq(r->batches[1]->page_index[0], 1);
  cr_assert_eq(r->batches[1]->region_offset[0], 3000);
  cr_assert_eq(r->stats->operations, 3);
  cr_assert_eq(r->stats->bytes, 40);
  cr_assert_eq(r->stats->copies_before_coalescing, 5);
}

Test(wire, empty_store_plan_response) {
  reshard_store_plan plan = {0};
  reshard_binding binding = {0};
  Reshard__V1__PlanStoreResponse *pb =
      reshard_wire_store_plan_to_pb(&plan, &binding, "sha256:ll", &arena);
  cr_assert_not_null(pb);
  size_t length;
  Reshard__V1__PlanStoreResponse *r =
      (Reshard__V1__PlanStoreResponse *)reencode(&pb->base, &length);
  cr_assert_eq(r->n_part_indexes, 0);
  cr_assert_eq(r->n_batches, 0);
  cr_assert_not_null(r->stats);
  cr_assert_eq(r->stats->operations, 0);
}

Test(wire, empty_plan_response) {
  reshard_load_plan plan = {0};
  reshard_binding binding = {0};
  reshard_wire_plan_names names = {NULL, NULL, NULL, &binding, "sha256:pp"};
  Reshard__V1__PlanLoadResponse *pb =
      reshard_wire_plan_to_pb(&plan, &names, &arena);
  cr_assert_not_null(pb);
  size_t length;
  Reshard__V1__PlanLoadResponse *r =
      (Reshard__V1__PlanLoadResponse *)reencode(&pb->base, &length);
  cr_assert_eq(r->hit_pages, 0);
  cr_assert_eq(r->n_batches, 0);
  cr_assert_not_null(r->stats);
}
