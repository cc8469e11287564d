/* Upload planning (SPEC §2.1): which shards a writer placement produces,
 * their suffixes, which participant writes each Part, the DP rank choice,
 * and the stability of the resulting layout_id. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reshard/arena.h"
#include "reshard/identity.h"
#include "reshard/upload.h"

#include "assert_error.h"

#define GOLDEN_LAYOUT_ID                                                       \
  "sha256:5c41a9b1437c03b3e8e8f489ebfbf362a0c7c6a5afa8ba978a852f9dae5454c4"

static reshard_arena arena;

static void setup(void) {
  reshard_arena_init(&arena, 0);
}

static void teardown(void) {
  reshard_arena_destroy(&arena);
}

TestSuite(upload, .init = setup, .fini = teardown);

/* One participant: layers [first_layer, first_layer + layer_count). */
typedef struct part_spec {
  const char *id;
  uint64_t dp, pp, tp;
  uint64_t first_layer, layer_count;
  uint64_t head_start, head_count;
  uint64_t ordinal, replicas;
} part_spec;

typedef struct geometry {
  uint64_t layers, heads, value_head_dim;
  uint64_t dp_size, pp_size, tp_size;
} geometry;

/* A normalized placement: bf16, page 16, K dim 8, layers 0..layers-1. */
static reshard_placement build(geometry g, const part_spec *specs, size_t n) {
  uint64_t *layers = RESHARD_ARENA_NEW(&arena, uint64_t, g.layers);
  for (uint64_t l = 0; l < g.layers; l++) {
    layers[l] = l;
  }
  reshard_placement_part *parts =
      RESHARD_ARENA_NEW(&arena, reshard_placement_part, n);
  for (size_t i = 0; i < n; i++) {
    const part_spec *s = &specs[i];
    uint64_t *ids = RESHARD_ARENA_NEW(&arena, uint64_t, s->layer_count + 1);
    for (uint64_t l = 0; l < s->layer_count; l++) {
      ids[l] = s->first_layer + l;
    }
    parts[i] = (reshard_placement_part){
        .participant_id = s->id,
        .rank = {s->dp, s->pp, s->tp},
        .layer_ids = ids,
        .layer_count = s->layer_count,
        .head_start = s->head_start,
        .head_count = s->head_count,
        .replica_ordinal = s->ordinal,
        .replica_count = s->replicas,
    };
  }
  reshard_placement p = {
      .resource_id = "res",
      .revision = "rev",
      .placement_set_id = "pset",
      .dp_size = g.dp_size,
      .pp_size = g.pp_size,
      .tp_size = g.tp_size,
      .descriptor =
          {
              .global_layer_ids = layers,
              .layer_count = g.layers,
              .dtype = "bf16",
              .itemsize = 2,
              .page_size = 16,
              .total_kv_heads = g.heads,
              .key_head_dim = g.value_head_dim ? 8 : 576,
              .value_head_dim = g.value_head_dim,
          },
      .parts = parts,
      .part_count = n,
  };
  reshard_error err = {0};
  cr_assert_eq(reshard_placement_normalize(&p, &arena, &err), RESHARD_OK, "%s",
               err.message);
  return p;
}

static reshard_status upload_with(const reshard_placement *p,
                                  reshard_format format, bool has_dp,
                                  uint64_t dp, const reshard_limits *limits,
                                  reshard_upload_plan *out,
                                  reshard_error *err) {
  return reshard_plan_upload(p, format, has_dp, dp, limits, &arena, out, err);
}

static reshard_status upload(const reshard_placement *p, reshard_format format,
                             bool has_dp, uint64_t dp, reshard_upload_plan *out,
                             reshard_error *err) {
  reshard_limits limits = reshard_limits_default();
  return upload_with(p, format, has_dp, dp, &limits, out, err);
}

/* Checks every Part against the part of its writer: same layers and
 * heads, replica ordinal 0, the expected DP rank, and the suffix "{tp}"
 * or "{tp}_{pp}"; and that the layout is in canonical order and its
 * layout_id is the digest of the returned layout. */
static void check_plan(const reshard_placement *p, const reshard_upload_plan *u,
                       uint64_t dp) {
  char id[RESHARD_ID_SIZE];
  reshard_error err = {0};
  cr_assert_eq(reshard_layout_id(&u->layout, id, &err), RESHARD_OK);
  cr_assert_str_eq(u->layout_id, id);
  for (size_t i = 0; i < u->layout.shard_count; i++) {
    const reshard_shard *shard = &u->layout.shards[i];
    const reshard_placement_part *part =
        reshard_placement_find_part(p, u->part_writers[i]);
    cr_assert_not_null(part, "writer %s", u->part_writers[i]);
    cr_assert_eq(part->rank.dp, dp);
    cr_assert_eq(part->replica_ordinal, 0);
    cr_assert_eq(shard->head_start, part->head_start);
    cr_assert_eq(shard->head_count, part->head_count);
    cr_assert_eq(shard->layer_count, part->layer_count);
    cr_assert_arr_eq(shard->layer_ids, part->layer_ids,
                     part->layer_count * sizeof(uint64_t));
    char suffix[48];
    if (p->pp_size > 1) {
      snprintf(suffix, sizeof suffix, "%llu_%llu",
               (unsigned long long)part->rank.tp,
               (unsigned long long)part->rank.pp);
    } else {
      snprintf(suffix, sizeof suffix, "%llu",
               (unsigned long long)part->rank.tp);
    }
    cr_assert_str_eq(shard->key_suffix, suffix);
    if (i > 0) {
      const reshard_shard *prev = &u->layout.shards[i - 1];
      cr_assert(prev->layer_ids[0] < shard->layer_ids[0] ||
                    (prev->layer_ids[0] == shard->layer_ids[0] &&
                     prev->head_start < shard->head_start),
                "shards %zu and %zu out of order", i - 1, i);
    }
  }
}

static void expect_writers(const reshard_upload_plan *u, const char **writers,
                           size_t n) {
  cr_assert_eq(u->layout.shard_count, n);
  for (size_t i = 0; i < n; i++) {
    cr_assert_str_eq(u->part_writers[i], writers[i], "Part %zu", i);
  }
}

/* The SPEC §1.6 golden geometry written by TP2: layers [0..3], 4 heads. */
static const part_spec tp2_specs[] = {
    {"w-b", 0, 0, 1, 0, 4, 2, 2, 0, 1},
    {"w-a", 0, 0, 0, 0, 4, 0, 2, 0, 1},
};
static const geometry tp2_geometry = {4, 4, 8, 1, 1, 2};

/* ---- shards and suffixes ---------------------------------------------- */

Test(upload, tp_writer_gives_tp_suffixes_and_the_golden_layout_id) {
  reshard_placement p = build(tp2_geometry, tp2_specs, 2);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_LPHD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  const char *writers[] = {"w-a", "w-b"};
  expect_writers(&u, writers, 2);
  cr_assert_str_eq(u.layout.shards[0].key_suffix, "0");
  cr_assert_str_eq(u.layout.shards[1].key_suffix, "1");
  cr_assert_eq(u.layout.format, RESHARD_FORMAT_LPHD);
  check_plan(&p, &u, 0);
  /* The same layout as SPEC §1.6's first golden vector. */
  cr_assert_str_eq(u.layout_id, GOLDEN_LAYOUT_ID);
}

Test(upload, pp_writer_gives_tp_pp_suffixes_in_canonical_order) {
  /* Ids sort in the reverse of the canonical shard order. */
  static const part_spec specs[] = {
      {"a", 0, 1, 1, 2, 2, 2, 2, 0, 1},
      {"b", 0, 1, 0, 2, 2, 0, 2, 0, 1},
      {"c", 0, 0, 1, 0, 2, 2, 2, 0, 1},
      {"d", 0, 0, 0, 0, 2, 0, 2, 0, 1},
  };
  reshard_placement p = build((geometry){4, 4, 8, 1, 2, 2}, specs, 4);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_HPLD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  const char *writers[] = {"d", "c", "b", "a"};
  expect_writers(&u, writers, 4);
  const char *suffixes[] = {"0_0", "1_0", "0_1", "1_1"};
  for (size_t i = 0; i < 4; i++) {
    cr_assert_str_eq(u.layout.shards[i].key_suffix, suffixes[i]);
  }
  check_plan(&p, &u, 0);
}

Test(upload, pp_suffix_follows_pp_size_not_the_present_stages) {
  /* pp_size 2 but every selected participant is on stage 0. */
  reshard_placement p = build((geometry){4, 4, 8, 1, 2, 2}, tp2_specs, 2);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_PLHD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  cr_assert_str_eq(u.layout.shards[0].key_suffix, "0_0");
  cr_assert_str_eq(u.layout.shards[1].key_suffix, "1_0");
  check_plan(&p, &u, 0);
}

Test(upload, only_replica_ordinal_zero_writes) {
  /* TP4 over 2 heads; on head 0 the ordinal-0 replica is TP rank 1. */
  static const part_spec specs[] = {
      {"r0", 0, 0, 0, 0, 2, 0, 1, 1, 2},
      {"r1", 0, 0, 1, 0, 2, 0, 1, 0, 2},
      {"r2", 0, 0, 2, 0, 2, 1, 1, 0, 2},
      {"r3", 0, 0, 3, 0, 2, 1, 1, 1, 2},
  };
  reshard_placement p = build((geometry){2, 2, 8, 1, 1, 4}, specs, 4);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_PLHD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  const char *writers[] = {"r1", "r2"};
  expect_writers(&u, writers, 2);
  cr_assert_str_eq(u.layout.shards[0].key_suffix, "1");
  cr_assert_str_eq(u.layout.shards[1].key_suffix, "2");
  check_plan(&p, &u, 0);
}

Test(upload, parts_without_layers_are_skipped) {
  /* PP3 over 2 layers: stage 0 holds none. */
  static const part_spec specs[] = {
      {"s0", 0, 0, 0, 0, 0, 0, 2, 0, 1},
      {"s1", 0, 1, 0, 0, 1, 0, 2, 0, 1},
      {"s2", 0, 2, 0, 1, 1, 0, 2, 0, 1},
  };
  reshard_placement p = build((geometry){2, 2, 8, 1, 3, 1}, specs, 3);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_LPHD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  const char *writers[] = {"s1", "s2"};
  expect_writers(&u, writers, 2);
  cr_assert_str_eq(u.layout.shards[0].key_suffix, "0_1");
  cr_assert_str_eq(u.layout.shards[1].key_suffix, "0_2");
  check_plan(&p, &u, 0);
}

Test(upload, single_tensor_cache_is_written_once) {
  /* DeepSeek-style: 1 latent head replicated on TP4 x PP2. */
  static const part_spec specs[] = {
      {"p0t0", 0, 0, 0, 0, 3, 0, 1, 0, 4}, {"p0t1", 0, 0, 1, 0, 3, 0, 1, 1, 4},
      {"p0t2", 0, 0, 2, 0, 3, 0, 1, 2, 4}, {"p0t3", 0, 0, 3, 0, 3, 0, 1, 3, 4},
      {"p1t0", 0, 1, 0, 3, 3, 0, 1, 3, 4}, {"p1t1", 0, 1, 1, 3, 3, 0, 1, 2, 4},
      {"p1t2", 0, 1, 2, 3, 3, 0, 1, 1, 4}, {"p1t3", 0, 1, 3, 3, 3, 0, 1, 0, 4},
  };
  reshard_placement p = build((geometry){6, 1, 0, 1, 2, 4}, specs, 8);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_PLHD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  const char *writers[] = {"p0t0", "p1t3"};
  expect_writers(&u, writers, 2);
  cr_assert_str_eq(u.layout.shards[1].key_suffix, "3_1");
  cr_assert_eq(reshard_layout_part_bytes(&u.layout, 0), 3 * 16 * 1 * 1152);
  check_plan(&p, &u, 0);
}

Test(upload, large_writer_matches_its_placement) {
  /* SPEC §6 S5 writer: 126 layers, 8 heads, TP8 x PP2. */
  part_spec specs[16];
  char names[16][16];
  for (uint64_t i = 0; i < 16; i++) {
    uint64_t pp = i / 8, tp = i % 8;
    snprintf(names[i], sizeof names[i], "w%02llu",
             (unsigned long long)(15 - i));
    specs[i] = (part_spec){names[i], 0, pp, tp, pp * 63, 63, tp, 1, 0, 1};
  }
  reshard_placement p = build((geometry){126, 8, 8, 1, 2, 8}, specs, 16);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_LPHD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  cr_assert_eq(u.layout.shard_count, 16);
  cr_assert_str_eq(u.part_writers[0], "w15");
  cr_assert_str_eq(u.layout.shards[15].key_suffix, "7_1");
  check_plan(&p, &u, 0);
}

/* ---- DP rank ---------------------------------------------------------- */

/* dp_size 4; DP ranks 3 and 1 are present, with different TP geometry:
 * DP 3 is TP1 ("x3"), DP 1 is TP2 ("y1a", "y1b"). */
static const part_spec dp_specs[] = {
    {"x3", 3, 0, 0, 0, 4, 0, 4, 0, 1},
    {"y1b", 1, 0, 1, 0, 4, 2, 2, 0, 1},
    {"y1a", 1, 0, 0, 0, 4, 0, 2, 0, 1},
};
static const geometry dp_geometry = {4, 4, 8, 4, 1, 2};

Test(upload, default_dp_rank_is_the_lowest_present) {
  reshard_placement p = build(dp_geometry, dp_specs, 3);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_PLHD, false, 0, &u, &err), RESHARD_OK,
               "%s", err.message);
  const char *writers[] = {"y1a", "y1b"};
  expect_writers(&u, writers, 2);
  check_plan(&p, &u, 1);
}

Test(upload, explicit_dp_rank_selects_its_parts) {
  reshard_placement p = build(dp_geometry, dp_specs, 3);
  reshard_upload_plan u;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_PLHD, true, 3, &u, &err), RESHARD_OK,
               "%s", err.message);
  const char *writers[] = {"x3"};
  expect_writers(&u, writers, 1);
  cr_assert_eq(u.layout.shards[0].head_count, 4);
  check_plan(&p, &u, 3);

  cr_assert_eq(upload(&p, RESHARD_FORMAT_PLHD, true, 1, &u, &err), RESHARD_OK,
               "%s", err.message);
  cr_assert_eq(u.layout.shard_count, 2);
  check_plan(&p, &u, 1);
}

ParameterizedTestParameters(upload, rejects_absent_dp_rank) {
  /* 0 and 2 are below dp_size but unselected; 4 and 2^64-1 are beyond. */
  static uint64_t ranks[] = {0, 2, 4, UINT64_MAX};
  return cr_make_param_array(uint64_t, ranks, sizeof ranks / sizeof ranks[0]);
}

ParameterizedTest(uint64_t *rank, upload, rejects_absent_dp_rank) {
  reshard_placement p = build(dp_geometry, dp_specs, 3);
  reshard_upload_plan u;
  reshard_error err = {0};
  char expected[64];
  snprintf(expected, sizeof expected, "dp rank %llu",
           (unsigned long long)*rank);
  ASSERT_FAILS(upload(&p, RESHARD_FORMAT_PLHD, true, *rank, &u, &err), err,
               RESHARD_INVALID_ARGUMENT, "dp_rank:", expected);
}

/* ---- format and limits ------------------------------------------------ */

ParameterizedTestParameters(upload, rejects_invalid_format) {
  static int formats[] = {0, 4, 1000};
  return cr_make_param_array(int, formats, sizeof formats / sizeof formats[0]);
}

ParameterizedTest(int *format, upload, rejects_invalid_format) {
  reshard_placement p = build(tp2_geometry, tp2_specs, 2);
  reshard_upload_plan u;
  reshard_error err = {0};
  ASSERT_FAILS(upload(&p, (reshard_format)*format, false, 0, &u, &err), err,
               RESHARD_INVALID_ARGUMENT,
               "format:", "must be PLHD, LPHD or HPLD");
}

Test(upload, layout_limits_apply) {
  reshard_placement p = build(tp2_geometry, tp2_specs, 2);
  reshard_limits limits = reshard_limits_default();
  limits.max_layout_parts = 1;
  reshard_upload_plan u;
  reshard_error err = {0};
  ASSERT_FAILS(
      upload_with(&p, RESHARD_FORMAT_PLHD, false, 0, &limits, &u, &err), err,
      RESHARD_RESOURCE_EXHAUSTED, "max_layout_parts 1");
}

/* ---- layout_id stability ---------------------------------------------- */

Test(upload, layout_id_is_stable) {
  /* The same geometry under other participant ids, in another input
   * order, and on another DP rank gives the same layout and layout_id. */
  static const part_spec renamed[] = {
      {"zz-0", 2, 0, 0, 0, 4, 0, 2, 0, 1},
      {"aa-1", 2, 0, 1, 0, 4, 2, 2, 0, 1},
  };
  reshard_placement p = build(tp2_geometry, tp2_specs, 2);
  reshard_placement q = build((geometry){4, 4, 8, 3, 1, 2}, renamed, 2);
  reshard_upload_plan first, again, other;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_LPHD, false, 0, &first, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_eq(upload(&p, RESHARD_FORMAT_LPHD, true, 0, &again, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_eq(upload(&q, RESHARD_FORMAT_LPHD, false, 0, &other, &err),
               RESHARD_OK, "%s", err.message);
  cr_assert_str_eq(first.layout_id, again.layout_id);
  cr_assert_str_eq(first.layout_id, other.layout_id);
  const char *writers[] = {"zz-0", "aa-1"};
  expect_writers(&other, writers, 2);
  check_plan(&q, &other, 2);
}

Test(upload, layout_id_depends_on_the_format) {
  reshard_placement p = build(tp2_geometry, tp2_specs, 2);
  char ids[3][RESHARD_ID_SIZE];
  reshard_format formats[] = {RESHARD_FORMAT_PLHD, RESHARD_FORMAT_LPHD,
                              RESHARD_FORMAT_HPLD};
  for (size_t f = 0; f < 3; f++) {
    reshard_upload_plan u;
    reshard_error err = {0};
    cr_assert_eq(upload(&p, formats[f], false, 0, &u, &err), RESHARD_OK, "%s",
                 err.message);
    memcpy(ids[f], u.layout_id, RESHARD_ID_SIZE);
    cr_assert_eq(strncmp(ids[f], "sha256:", 7), 0);
    cr_assert_eq(strlen(ids[f]), RESHARD_ID_SIZE - 1);
  }
  cr_assert_str_neq(ids[0], ids[1]);
  cr_assert_str_neq(ids[1], ids[2]);
  cr_assert_str_neq(ids[0], ids[2]);
  cr_assert_str_eq(ids[1], GOLDEN_LAYOUT_ID);
}

Test(upload, layout_id_depends_on_the_geometry) {
  /* TP2 vs TP4 of the same model: different shards, different ids. */
  static const part_spec tp4[] = {
      {"a", 0, 0, 0, 0, 4, 0, 1, 0, 1},
      {"b", 0, 0, 1, 0, 4, 1, 1, 0, 1},
      {"c", 0, 0, 2, 0, 4, 2, 1, 0, 1},
      {"d", 0, 0, 3, 0, 4, 3, 1, 0, 1},
  };
  reshard_placement p = build(tp2_geometry, tp2_specs, 2);
  reshard_placement q = build((geometry){4, 4, 8, 1, 1, 4}, tp4, 4);
  reshard_upload_plan u, v;
  reshard_error err = {0};
  cr_assert_eq(upload(&p, RESHARD_FORMAT_LPHD, false, 0, &u, &err), RESHARD_OK);
  cr_assert_eq(upload(&q, RESHARD_FORMAT_LPHD, false, 0, &v, &err), RESHARD_OK);
  cr_assert_str_neq(u.layout_id, v.layout_id);
  check_plan(&q, &v, 0);
}
