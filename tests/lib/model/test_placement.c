/* Topology and placement rules (SPEC §1.2): one failing input per rule,
 * the head-tiling and replica-set proofs, and the valid shapes a fleet
 * uses (multi-DP, PP splits, TP beyond the head count, single-tensor
 * caches). Placements are generated as a DP x PP x TP grid and then one
 * field is broken per test. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/placement.h"

#include "assert_error.h"

static reshard_arena arena;

static void setup(void) {
  reshard_arena_init(&arena, 0);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(placement, .init = setup, .fini = teardown);

/* The geometry of a generated placement. */
typedef struct shape {
  uint64_t layers; /* descriptor layers 0..layers-1 */
  uint64_t heads;
  uint64_t value_head_dim;
  uint64_t dp, pp, tp;
} shape;

/* A complete DP x PP x TP placement: PP stages split the layers into
 * contiguous runs; TP ranks split the heads evenly, or, when tp > heads,
 * each head is replicated on tp / heads consecutive TP ranks. Participant
 * ids are "d{dp}-p{pp}-t{tp}"; parts are in (dp, pp, tp) order. */
static reshard_placement grid(shape s) {
  uint64_t *layers = RESHARD_ARENA_NEW(&arena, uint64_t, s.layers);
  for (uint64_t l = 0; l < s.layers; l++) {
    layers[l] = l;
  }
  size_t count = s.dp * s.pp * s.tp;
  reshard_placement_part *parts =
      RESHARD_ARENA_NEW(&arena, reshard_placement_part, count);
  size_t n = 0;
  for (uint64_t dp = 0; dp < s.dp; dp++) {
    for (uint64_t pp = 0; pp < s.pp; pp++) {
      uint64_t first = pp * s.layers / s.pp;
      uint64_t end = (pp + 1) * s.layers / s.pp;
      for (uint64_t tp = 0; tp < s.tp; tp++) {
        reshard_placement_part *part = &parts[n++];
        char id[72];
        snprintf(id, sizeof id, "d%llu-p%llu-t%llu", (unsigned long long)dp,
                 (unsigned long long)pp, (unsigned long long)tp);
        part->participant_id = reshard_arena_strdup(&arena, id);
        part->rank = (reshard_rank){dp, pp, tp};
        part->layer_count = end - first;
        part->layer_ids = RESHARD_ARENA_NEW(&arena, uint64_t, end - first + 1);
        for (uint64_t l = first; l < end; l++) {
          part->layer_ids[l - first] = l;
        }
        if (s.tp > s.heads) {
          uint64_t replicas = s.tp / s.heads;
          part->head_start = tp / replicas;
          part->head_count = 1;
          part->replica_ordinal = tp % replicas;
          part->replica_count = replicas;
        } else {
          part->head_count = s.heads / s.tp;
          part->head_start = tp * part->head_count;
          part->replica_ordinal = 0;
          part->replica_count = 1;
        }
      }
    }
  }
  return (reshard_placement){
      .resource_id = "res",
      .revision = "rev",
      .placement_set_id = "pset",
      .dp_size = s.dp,
      .pp_size = s.pp,
      .tp_size = s.tp,
      .descriptor =
          {
              .global_layer_ids = layers,
              .layer_count = s.layers,
              .dtype = "bf16",
              .itemsize = 2,
              .page_size = 16,
              .total_kv_heads = s.heads,
              .key_head_dim = s.value_head_dim ? 8 : 576,
              .value_head_dim = s.value_head_dim,
          },
      .parts = parts,
      .part_count = count,
  };
}

/* TP2 over 4 heads, 4 layers, one DP and PP rank: parts[0] owns heads
 * [0, 2) and parts[1] heads [2, 4). */
static reshard_placement tp2(void) {
  return grid((shape){.layers = 4, .heads = 4, .value_head_dim = 8, 1, 1, 2});
}

static reshard_status normalize(reshard_placement *p, reshard_error *err) {
  return reshard_placement_normalize(p, &arena, err);
}

static void normalize_ok(reshard_placement *p) {
  reshard_error err = {0};
  cr_assert_eq(normalize(p, &err), RESHARD_OK, "%s", err.message);
}

/* ---- valid placements ------------------------------------------------- */

Test(placement, tp2_is_valid) {
  reshard_placement p = tp2();
  normalize_ok(&p);
  cr_assert_eq(p.part_count, 2);
  cr_assert_str_eq(p.placement_set_id, "pset");
}

Test(placement, multi_dp_placements_are_valid) {
  reshard_placement p =
      grid((shape){.layers = 6, .heads = 8, .value_head_dim = 8, 3, 2, 4});
  normalize_ok(&p);
  cr_assert_eq(p.part_count, 24);
  cr_assert_eq(reshard_placement_lowest_dp(&p), 0);
  for (uint64_t dp = 0; dp < 3; dp++) {
    cr_assert(reshard_placement_has_dp(&p, dp));
  }
  cr_assert_not(reshard_placement_has_dp(&p, 3));
}

Test(placement, only_the_selected_dp_ranks_need_to_be_present) {
  /* dp_size 4, but only DP ranks 3 and 1 are selected. */
  reshard_placement p =
      grid((shape){.layers = 2, .heads = 2, .value_head_dim = 8, 2, 1, 2});
  p.dp_size = 4;
  for (size_t i = 0; i < p.part_count; i++) {
    p.parts[i].rank.dp = p.parts[i].rank.dp == 0 ? 3 : 1;
  }
  normalize_ok(&p);
  cr_assert_eq(reshard_placement_lowest_dp(&p), 1);
  cr_assert(reshard_placement_has_dp(&p, 1));
  cr_assert(reshard_placement_has_dp(&p, 3));
  cr_assert_not(reshard_placement_has_dp(&p, 0));
  cr_assert_not(reshard_placement_has_dp(&p, 2));
}

Test(placement, normalize_sorts_parts_layers_and_descriptor) {
  reshard_placement p =
      grid((shape){.layers = 4, .heads = 4, .value_head_dim = 8, 1, 2, 2});
  /* Reverse the parts, each part's layers and the descriptor's layers. */
  for (size_t i = 0; i < p.part_count / 2; i++) {
    reshard_placement_part swap = p.parts[i];
    p.parts[i] = p.parts[p.part_count - 1 - i];
    p.parts[p.part_count - 1 - i] = swap;
  }
  for (size_t i = 0; i < p.part_count; i++) {
    uint64_t *ids = p.parts[i].layer_ids;
    uint64_t first = ids[0];
    ids[0] = ids[1];
    ids[1] = first;
  }
  uint64_t *d = p.descriptor.global_layer_ids;
  d[0] = 3, d[1] = 2, d[2] = 1, d[3] = 0;
  normalize_ok(&p);

  const char *expected[] = {"d0-p0-t0", "d0-p0-t1", "d0-p1-t0", "d0-p1-t1"};
  for (size_t i = 0; i < 4; i++) {
    cr_assert_str_eq(p.parts[i].participant_id, expected[i]);
    cr_assert_lt(p.parts[i].layer_ids[0], p.parts[i].layer_ids[1]);
    cr_assert_eq(p.descriptor.global_layer_ids[i], i);
  }
  const reshard_placement_part *found =
      reshard_placement_find_part(&p, "d0-p1-t0");
  cr_assert_not_null(found);
  cr_assert_eq(found->rank.pp, 1);
  cr_assert_eq(found->rank.tp, 0);
  cr_assert_null(reshard_placement_find_part(&p, "d0-p1-t2"));
  cr_assert_null(reshard_placement_find_part(&p, ""));
}

Test(placement, sorting_is_by_participant_id_not_rank) {
  reshard_placement p = tp2();
  p.parts[0].participant_id = "zeta";  /* tp 0 */
  p.parts[1].participant_id = "alpha"; /* tp 1 */
  normalize_ok(&p);
  cr_assert_str_eq(p.parts[0].participant_id, "alpha");
  cr_assert_eq(p.parts[0].rank.tp, 1);
  cr_assert_eq(p.parts[0].head_start, 2);
  cr_assert_str_eq(p.parts[1].participant_id, "zeta");
}

Test(placement, tp_beyond_heads_is_replicated) {
  /* 8 ranks over 2 heads: 4 replicas of each head. */
  reshard_placement p =
      grid((shape){.layers = 2, .heads = 2, .value_head_dim = 8, 1, 1, 8});
  normalize_ok(&p);
  uint64_t ordinals_seen[2] = {0, 0};
  for (size_t i = 0; i < p.part_count; i++) {
    const reshard_placement_part *part = &p.parts[i];
    cr_assert_eq(part->head_count, 1);
    cr_assert_eq(part->replica_count, 4);
    ordinals_seen[part->head_start] |= UINT64_C(1) << part->replica_ordinal;
  }
  cr_assert_eq(ordinals_seen[0], 0xf);
  cr_assert_eq(ordinals_seen[1], 0xf);
}

Test(placement, replicas_of_multi_head_intervals_are_valid) {
  /* 4 heads, TP4, two replica sets of [0, 2) and [2, 4). */
  reshard_placement q =
      grid((shape){.layers = 4, .heads = 4, .value_head_dim = 8, 1, 1, 4});
  for (size_t i = 0; i < 4; i++) {
    q.parts[i].head_start = (i / 2) * 2;
    q.parts[i].head_count = 2;
    q.parts[i].replica_ordinal = i % 2;
    q.parts[i].replica_count = 2;
  }
  normalize_ok(&q);
}

Test(placement, pp_splits_are_valid) {
  reshard_placement p =
      grid((shape){.layers = 8, .heads = 8, .value_head_dim = 8, 1, 4, 2});
  normalize_ok(&p);
  for (size_t i = 0; i < p.part_count; i++) {
    cr_assert_eq(p.parts[i].layer_count, 2);
    cr_assert_eq(p.parts[i].layer_ids[0], p.parts[i].rank.pp * 2);
  }
}

Test(placement, a_pp_stage_without_layers_is_valid) {
  /* PP3 over 2 layers: stage 0 gets no layers. */
  reshard_placement p =
      grid((shape){.layers = 2, .heads = 2, .value_head_dim = 8, 1, 3, 2});
  cr_assert_eq(p.parts[0].layer_count, 0);
  normalize_ok(&p);
}

Test(placement, single_tensor_cache_replicated_on_every_rank) {
  /* DeepSeek-style MLA latent cache: 1 head of 576, V absent, TP4 x PP2. */
  reshard_placement p =
      grid((shape){.layers = 61, .heads = 1, .value_head_dim = 0, 1, 2, 4});
  normalize_ok(&p);
  for (size_t i = 0; i < p.part_count; i++) {
    cr_assert_eq(p.parts[i].head_start, 0);
    cr_assert_eq(p.parts[i].replica_count, 4);
  }
}

Test(placement, replica_count_zero_reads_as_one) {
  reshard_placement p = tp2();
  p.parts[0].replica_count = 0;
  p.parts[1].replica_count = 0;
  normalize_ok(&p);
  cr_assert_eq(p.parts[0].replica_count, 1);
  cr_assert_eq(p.parts[1].replica_count, 1);
}

Test(placement, missing_placement_set_id_reads_as_empty) {
  reshard_placement p = tp2();
  p.placement_set_id = NULL;
  normalize_ok(&p);
  cr_assert_str_eq(p.placement_set_id, "");
}

Test(placement, large_fleet_shape_is_valid) {
  /* SPEC §6 S3 reader: 80 layers, 8 heads, TP16 with 2 head replicas,
   * and 4 DP ranks. */
  reshard_placement p =
      grid((shape){.layers = 80, .heads = 8, .value_head_dim = 8, 4, 1, 16});
  normalize_ok(&p);
  cr_assert_eq(p.part_count, 64);
}

/* ---- one failing input per rule --------------------------------------- */

Test(placement, rejects_an_invalid_descriptor_with_its_path) {
  reshard_placement p = tp2();
  p.descriptor.page_size = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.descriptor.page_size:", "must be at least 1");
}

Test(placement, rejects_empty_resource_id) {
  reshard_placement p = tp2();
  p.resource_id = "";
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.resource_id:", "must not be empty");
}

Test(placement, rejects_empty_revision) {
  reshard_placement p = tp2();
  p.revision = NULL;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.revision:", "must not be empty");
}

struct size_case {
  char name[16];
  size_t offset;
};

ParameterizedTestParameters(placement, rejects_zero_size) {
  static struct size_case cases[] = {
      {"dp_size", offsetof(reshard_placement, dp_size)},
      {"pp_size", offsetof(reshard_placement, pp_size)},
      {"tp_size", offsetof(reshard_placement, tp_size)},
  };
  return cr_make_param_array(struct size_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct size_case *c, placement, rejects_zero_size) {
  reshard_placement p = tp2();
  *(uint64_t *)((char *)&p + c->offset) = 0;
  reshard_error err = {0};
  char path[48];
  snprintf(path, sizeof path, "placement.%s:", c->name);
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT, path,
               "must be at least 1");
}

Test(placement, rejects_empty_parts) {
  reshard_placement p = tp2();
  p.part_count = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "must not be empty");
}

Test(placement, rejects_empty_participant_id) {
  reshard_placement p = tp2();
  p.parts[1].participant_id = "";
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts[1].participant_id:", "must not be empty");
}

Test(placement, rejects_missing_participant_id) {
  reshard_placement p = tp2();
  p.parts[0].participant_id = NULL;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts[0].participant_id:", "must not be empty");
}

Test(placement, rejects_duplicate_participant_id) {
  reshard_placement p =
      grid((shape){.layers = 2, .heads = 4, .value_head_dim = 8, 1, 1, 4});
  p.parts[3].participant_id = "d0-p0-t1";
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "participant_id \"d0-p0-t1\"",
               "appears more than once");
}

Test(placement, rejects_duplicate_rank) {
  reshard_placement p =
      grid((shape){.layers = 2, .heads = 4, .value_head_dim = 8, 2, 2, 2});
  p.parts[7].rank = p.parts[2].rank; /* (0, 1, 0) twice */
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "rank (dp 0, pp 1, tp 0)",
               "more than one participant");
}

struct rank_case {
  char coordinate[4];
  uint64_t value;
  char expected[64];
};

ParameterizedTestParameters(placement, rejects_rank_coordinate_not_below_size) {
  static struct rank_case cases[] = {
      {"dp", 1, "placement.parts[1].rank.dp: 1 is not below dp_size 1"},
      {"pp", 2, "placement.parts[1].rank.pp: 2 is not below pp_size 1"},
      {"tp", 2, "placement.parts[1].rank.tp: 2 is not below tp_size 2"},
      {"tp", UINT64_MAX,
       "placement.parts[1].rank.tp: 18446744073709551615 is not below"},
  };
  return cr_make_param_array(struct rank_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct rank_case *c, placement,
                  rejects_rank_coordinate_not_below_size) {
  reshard_placement p = tp2();
  reshard_rank *rank = &p.parts[1].rank;
  uint64_t *field = c->coordinate[0] == 'd'   ? &rank->dp
                    : c->coordinate[0] == 'p' ? &rank->pp
                                              : &rank->tp;
  *field = c->value;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT, c->expected);
}

Test(placement, rejects_layer_not_in_descriptor) {
  reshard_placement p = tp2();
  p.parts[1].layer_ids[2] = 99;
  reshard_error err = {0};
  ASSERT_FAILS(
      normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
      "placement.parts[1].layer_ids:", "layer 99 is not in the descriptor");
}

Test(placement, rejects_duplicate_layer_in_part) {
  reshard_placement p = tp2();
  p.parts[0].layer_ids[3] = 1;
  reshard_error err = {0};
  ASSERT_FAILS(
      normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
      "placement.parts[0].layer_ids:", "layer id 1 appears more than once");
}

Test(placement, rejects_zero_head_count) {
  reshard_placement p = tp2();
  p.parts[1].head_count = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts[1].head_count:", "must be at least 1");
}

struct heads_case {
  uint64_t head_start;
  uint64_t head_count;
  char expected[96];
};

ParameterizedTestParameters(placement, rejects_heads_past_total) {
  static struct heads_case cases[] = {
      {2, 3, "placement.parts[1]: heads [2, +3) exceed total_kv_heads 4"},
      {4, 1, "placement.parts[1]: heads [4, +1) exceed total_kv_heads 4"},
      /* head_start + head_count wraps around 2^64 */
      {UINT64_MAX - 1, 4,
       "placement.parts[1]: heads [18446744073709551614, +4) exceed "
       "total_kv_heads 4"},
      {UINT64_MAX, 1, "heads [18446744073709551615, +1) exceed"},
      {0, UINT64_MAX, "heads [0, +18446744073709551615) exceed"},
  };
  return cr_make_param_array(struct heads_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct heads_case *c, placement, rejects_heads_past_total) {
  reshard_placement p = tp2();
  p.parts[1].head_start = c->head_start;
  p.parts[1].head_count = c->head_count;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT, c->expected);
}

Test(placement, rejects_replica_ordinal_not_below_count) {
  reshard_placement p = tp2();
  p.parts[0].replica_ordinal = 1;
  p.parts[0].replica_count = 1;
  reshard_error err = {0};
  ASSERT_FAILS(
      normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
      "placement.parts[0].replica_ordinal:", "1 is not below replica_count 1");
}

Test(placement, rejects_replica_ordinal_with_count_zero_read_as_one) {
  reshard_placement p = tp2();
  p.parts[1].replica_ordinal = 5;
  p.parts[1].replica_count = 0;
  reshard_error err = {0};
  ASSERT_FAILS(
      normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
      "placement.parts[1].replica_ordinal:", "5 is not below replica_count 1");
}

/* ---- tiling ----------------------------------------------------------- */

struct gap_case {
  size_t part;
  uint64_t head_start;
  uint64_t head_count;
  char expected[64];
};

ParameterizedTestParameters(placement, rejects_tiling_gap) {
  static struct gap_case cases[] = {
      /* gap before the first part */
      {0, 1, 1, "layer 0: heads [0, 1) are owned by no participant"},
      /* gap in the middle */
      {1, 3, 1, "layer 0: heads [2, 3) are owned by no participant"},
      /* gap at the end */
      {1, 2, 1, "layer 0: heads [3, 4) are owned by no participant"},
  };
  return cr_make_param_array(struct gap_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct gap_case *c, placement, rejects_tiling_gap) {
  reshard_placement p = tp2();
  p.parts[c->part].head_start = c->head_start;
  p.parts[c->part].head_count = c->head_count;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "dp rank 0", c->expected);
}

Test(placement, rejects_overlap_without_replica) {
  reshard_placement p = tp2();
  p.parts[1].head_start = 1; /* [1, 4) overlaps [0, 2) */
  p.parts[1].head_count = 3;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "dp rank 0 layer 0", "\"d0-p0-t1\"",
               "without being an exact replica");
}

Test(placement, rejects_overlap_from_the_same_start) {
  reshard_placement p = tp2();
  p.parts[1].head_start = 0; /* [0, 4) and [0, 2) */
  p.parts[1].head_count = 4;
  reshard_error err = {0};
  /* The rule broken is "overlapping parts have the identical interval";
   * the message must show the differing interval [0, +4) and say overlap,
   * not blame the replica count of a set that does not exist. */
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "dp rank 0 layer 0", "heads [0, +4)",
               "overlap");
}

Test(placement, rejects_identical_intervals_that_are_not_a_replica_set) {
  reshard_placement p = tp2();
  p.parts[1].head_start = 0;
  p.parts[1].head_count = 4;
  p.parts[0].head_count = 4; /* both [0, 4), each replica_count 1 */
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "dp rank 0 layer 0 heads [0, +4)",
               "replica_count must be 2");
}

/* TP4 over 2 heads: parts[0..1] replicate head 0, parts[2..3] head 1. */
static reshard_placement replicated(void) {
  return grid((shape){.layers = 2, .heads = 2, .value_head_dim = 8, 1, 1, 4});
}

Test(placement, rejects_replica_set_with_wrong_count) {
  reshard_placement p = replicated();
  p.parts[3].replica_count = 3;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "heads [1, +1)",
               "2 participants share the interval", "replica_count must be 2",
               "\"d0-p0-t3\" has ordinal 1 of 3");
}

Test(placement, rejects_replica_set_with_duplicate_ordinal) {
  reshard_placement p = replicated();
  p.parts[1].replica_ordinal = 0;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "heads [0, +1)", "ordinals 0..1 each once");
}

Test(placement, rejects_replica_set_with_a_missing_member) {
  /* Three replicas announced, two present. */
  reshard_placement p = replicated();
  p.parts[0].replica_count = 3;
  p.parts[1].replica_count = 3;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "heads [0, +1)", "replica_count must be 2");
}

Test(placement, rejects_sole_owner_claiming_replicas) {
  reshard_placement p = tp2();
  p.parts[0].replica_count = 2;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "heads [0, +2)",
               "1 participants share the interval", "replica_count must be 1");
}

Test(placement, rejects_dp_rank_missing_a_layer) {
  reshard_placement p =
      grid((shape){.layers = 4, .heads = 4, .value_head_dim = 8, 2, 1, 2});
  /* Both DP-1 parts drop layer 3 (the last of their sorted lists). */
  p.parts[2].layer_count = 3;
  p.parts[3].layer_count = 3;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "dp rank 1 layer 3",
               "heads [0, 4) are owned by no participant");
}

Test(placement, rejects_one_tp_rank_missing_a_layer) {
  reshard_placement p =
      grid((shape){.layers = 4, .heads = 4, .value_head_dim = 8, 2, 1, 2});
  p.parts[3].layer_ids[0] = 3; /* layers [3, 1, 2] after dropping 3 */
  p.parts[3].layer_count = 3;
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "dp rank 1 layer 0",
               "heads [2, 4) are owned by no participant");
}

Test(placement, rejects_a_layer_owned_by_two_pp_stages) {
  reshard_placement p =
      grid((shape){.layers = 4, .heads = 2, .value_head_dim = 8, 1, 2, 1});
  p.parts[1].layer_ids[0] = 1; /* stage 1 claims layers [1, 3] */
  reshard_error err = {0};
  ASSERT_FAILS(normalize(&p, &err), err, RESHARD_INVALID_ARGUMENT,
               "placement.parts:", "dp rank 0 layer 1");
}

/* ---- layout caps ------------------------------------------------------- */

Test(placement, layout_caps_bound_parts_layer_ids_and_their_product) {
  /* TP2 over 4 layers: 2 parts, 8 layer ids, 2 × 4 descriptor layers. */
  reshard_placement p = tp2();
  reshard_limits caps = reshard_limits_default();
  reshard_error err = {0};
  cr_assert_eq(reshard_placement_check_limits(&p, &caps, &err), RESHARD_OK,
               "%s", err.message);

  caps.max_layout_parts = 1;
  ASSERT_FAILS(reshard_placement_check_limits(&p, &caps, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, "placement.parts",
               "max_layout_parts of 1");

  caps = reshard_limits_default();
  caps.max_layout_fragments = 7;
  ASSERT_FAILS(reshard_placement_check_limits(&p, &caps, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, "2 parts × 4 descriptor layers",
               "max_layout_fragments of 7");

  /* The product fits, the layer ids of the parts do not. */
  p.parts[0].layer_count = 4;
  p.parts[1].layer_count = 4;
  p.descriptor.layer_count = 3;
  caps.max_layout_fragments = 7;
  ASSERT_FAILS(reshard_placement_check_limits(&p, &caps, &err), err,
               RESHARD_RESOURCE_EXHAUSTED, "more than 7 layer ids");
}
