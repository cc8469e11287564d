/* Canonical identities (SPEC §1.6): golden vectors of the Mooncake
 * reference, the exact canonical JSON text behind them, escaping, integer
 * range and UTF-8 validation. The structs are built by hand, already in
 * normalized form, so these tests do not depend on the normalize functions.
 * Expected texts and digests not given by the spec were produced with
 * Python's json.dumps(v, sort_keys=True, separators=(",", ":")) and
 * hashlib.sha256, i.e. by the reference's own rules. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard/identity.h"

/* Internal header, reached relative to this file because the test targets
 * only see the public include directory. */
#include "identity/canonical_json.h"

/* ---- fixtures ---------------------------------------------------------- */

static uint64_t golden_layers[] = {0, 1, 2, 3};

static reshard_descriptor golden_descriptor(void) {
  return (reshard_descriptor){
      .global_layer_ids = golden_layers,
      .layer_count = 4,
      .dtype = "bf16",
      .itemsize = 2,
      .page_size = 16,
      .total_kv_heads = 4,
      .key_head_dim = 8,
      .value_head_dim = 8,
  };
}

/* SPEC §1.6, first vector: LPHD, heads 0+2 (suffix "0") and 2+2 ("1"). */
static reshard_shard golden_shards[] = {
    {.layer_ids = golden_layers,
     .layer_count = 4,
     .head_start = 0,
     .head_count = 2,
     .key_suffix = "0"},
    {.layer_ids = golden_layers,
     .layer_count = 4,
     .head_start = 2,
     .head_count = 2,
     .key_suffix = "1"},
};

static reshard_manifest golden_manifest(void) {
  return (reshard_manifest){
      .name_space = "ns",
      .model_id = "model",
      .model_revision = "rev",
      .semantic_fingerprint = "fp",
      .layout =
          {
              .descriptor = golden_descriptor(),
              .format = RESHARD_FORMAT_LPHD,
              .shards = golden_shards,
              .shard_count = 2,
          },
  };
}

/* SPEC §1.6, second vector: TP2 over 2 heads, layers [0,1]. */
static uint64_t placement_layers[] = {0, 1};
static reshard_placement_part golden_parts[] = {
    {.participant_id = "r-a",
     .rank = {.dp = 0, .pp = 0, .tp = 0},
     .layer_ids = placement_layers,
     .layer_count = 2,
     .head_start = 0,
     .head_count = 1,
     .replica_ordinal = 0,
     .replica_count = 1},
    {.participant_id = "r-b",
     .rank = {.dp = 0, .pp = 0, .tp = 1},
     .layer_ids = placement_layers,
     .layer_count = 2,
     .head_start = 1,
     .head_count = 1,
     .replica_ordinal = 0,
     .replica_count = 1},
};

static reshard_placement golden_placement(reshard_placement_part *parts) {
  return (reshard_placement){
      .resource_id = "res",
      .revision = "rev",
      .placement_set_id = "pset",
      .dp_size = 1,
      .pp_size = 1,
      .tp_size = 2,
      .descriptor =
          {
              .global_layer_ids = placement_layers,
              .layer_count = 2,
              .dtype = "bf16",
              .itemsize = 2,
              .page_size = 16,
              .total_kv_heads = 2,
              .key_head_dim = 8,
              .value_head_dim = 8,
          },
      .parts = parts,
      .part_count = 2,
  };
}

#define GOLDEN_LAYOUT_DIGEST                                                   \
  "5c41a9b1437c03b3e8e8f489ebfbf362a0c7c6a5afa8ba978a852f9dae5454c4"
#define GOLDEN_MODEL_DOMAIN                                                    \
  "db2449842bf6d7d200bb53eef28f716eede232fc4afb5e81b95fd9f7dedaca77"
#define GOLDEN_TOPOLOGY_ID                                                     \
  "sha256:473c45aa46b47cefbe0652f39b41d3710613b92d66c255ddfb3bf912525e4fc0"
#define GOLDEN_PLACEMENT_ID                                                    \
  "sha256:e6e8e9588d25352d1ba486007d487084c51760516c4a2096168d8f6d6c67df1f"

#define GOLDEN_DESCRIPTOR_TEXT                                                 \
  "{\"dtype\":\"bf16\",\"global_layer_ids\":[0,1,2,3],\"itemsize\":2,"         \
  "\"key_head_dim\":8,\"layout\":\"nhd\",\"page_size\":16,"                    \
  "\"total_kv_heads\":4,\"value_head_dim\":8}"

#define PLACEMENT_DESCRIPTOR_TEXT                                              \
  "{\"dtype\":\"bf16\",\"global_layer_ids\":[0,1],\"itemsize\":2,"             \
  "\"key_head_dim\":8,\"layout\":\"nhd\",\"page_size\":16,"                    \
  "\"total_kv_heads\":2,\"value_head_dim\":8}"

/* Renders one shape with `render` and checks the text, freeing the writer
 * on every path. */
typedef void (*render_fn)(reshard__json *w, const void *input);

static void expect_text(render_fn render, const void *input,
                        const char *expected) {
  reshard__json w;
  reshard_error err = {0};
  reshard__json_init(&w, &err);
  render(&w, input);
  const char *text = NULL;
  size_t length = 0;
  reshard_status status = reshard__json_finish(&w, &text, &length);
  cr_assert_eq(status, RESHARD_OK, "render failed: %s", err.message);
  cr_expect_str_eq(text, expected);
  cr_expect_eq(length, strlen(expected));
  reshard__json_free(&w);
}

static void render_layout(reshard__json *w, const void *input) {
  reshard__json_layout(w, input, "layout");
}

static void render_model_domain(reshard__json *w, const void *input) {
  reshard__json_model_domain(w, input, "manifest");
}

static void render_topology(reshard__json *w, const void *input) {
  reshard__json_topology(w, input, "placement");
}

static void render_placement(reshard__json *w, const void *input) {
  reshard__json_placement(w, input, GOLDEN_TOPOLOGY_ID, "placement");
}

/* Layout digest of `layout`, asserted to succeed. */
static void layout_digest_ok(const reshard_layout *layout,
                             char out[RESHARD_DIGEST_HEX_LEN + 1]) {
  reshard_error err = {0};
  cr_assert_eq(reshard_layout_digest(layout, out, &err), RESHARD_OK, "%s",
               err.message);
}

/* ---- golden vectors ---------------------------------------------------- */

Test(identity, golden_layout_vector) {
  reshard_manifest manifest = golden_manifest();
  reshard_error err = {0};
  char id[RESHARD_ID_SIZE];
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  char domain[RESHARD_DIGEST_HEX_LEN + 1];
  char key[RESHARD_MANIFEST_KEY_SIZE];

  cr_assert_eq(reshard_layout_id(&manifest.layout, id, &err), RESHARD_OK);
  cr_expect_str_eq(id, "sha256:" GOLDEN_LAYOUT_DIGEST);
  cr_assert_eq(reshard_layout_digest(&manifest.layout, digest, &err),
               RESHARD_OK);
  cr_expect_str_eq(digest, GOLDEN_LAYOUT_DIGEST);
  cr_assert_eq(reshard_model_domain(&manifest, domain, &err), RESHARD_OK);
  cr_expect_str_eq(domain, GOLDEN_MODEL_DOMAIN);
  cr_assert_eq(reshard_manifest_key(&manifest, key, &err), RESHARD_OK);
  cr_expect_str_eq(key, "kv/" GOLDEN_MODEL_DOMAIN
                        "/manifests/" GOLDEN_LAYOUT_DIGEST);
  /* The buffer sizes of identity.h are exact, not merely sufficient. */
  cr_expect_eq(strlen(id) + 1, RESHARD_ID_SIZE);
  cr_expect_eq(strlen(key) + 1, RESHARD_MANIFEST_KEY_SIZE);
}

Test(identity, golden_layout_canonical_text) {
  reshard_manifest manifest = golden_manifest();
  expect_text(render_layout, &manifest.layout,
              "{\"descriptor\":" GOLDEN_DESCRIPTOR_TEXT
              ",\"object_format\":\"LPHD\",\"shards\":["
              "{\"head_count\":2,\"head_start\":0,\"key_suffix\":\"0\","
              "\"layer_ids\":[0,1,2,3]},"
              "{\"head_count\":2,\"head_start\":2,\"key_suffix\":\"1\","
              "\"layer_ids\":[0,1,2,3]}]}");
  expect_text(render_model_domain, &manifest,
              "{\"descriptor\":" GOLDEN_DESCRIPTOR_TEXT
              ",\"model_id\":\"model\",\"model_revision\":\"rev\","
              "\"namespace\":\"ns\",\"object_format\":\"PLHD\","
              "\"semantic_fingerprint\":\"fp\"}");
}

Test(identity, golden_placement_vector) {
  reshard_placement placement = golden_placement(golden_parts);
  reshard_error err = {0};
  char topology_id[RESHARD_ID_SIZE];
  char placement_id[RESHARD_ID_SIZE];

  cr_assert_eq(reshard_topology_id(&placement, topology_id, &err), RESHARD_OK);
  cr_expect_str_eq(topology_id, GOLDEN_TOPOLOGY_ID);
  cr_assert_eq(reshard_placement_id(&placement, placement_id, &err),
               RESHARD_OK);
  cr_expect_str_eq(placement_id, GOLDEN_PLACEMENT_ID);
}

#define GOLDEN_PARTICIPANTS_TEXT                                               \
  "[{\"participant_id\":\"r-a\",\"rank\":{\"dp\":0,\"pp\":0,\"tp\":0}},"       \
  "{\"participant_id\":\"r-b\",\"rank\":{\"dp\":0,\"pp\":0,\"tp\":1}}]"

#define GOLDEN_PART_TEXT(participant, head_start, tp)                          \
  "{\"descriptor\":" PLACEMENT_DESCRIPTOR_TEXT ",\"head_count\":1,"            \
  "\"head_start\":" head_start ",\"layer_ids\":[0,1],"                         \
  "\"participant_id\":\"" participant "\",\"placement_set_id\":\"pset\","      \
  "\"rank\":{\"dp\":0,\"pp\":0,\"tp\":" tp "},\"replica_count\":1,"            \
  "\"replica_ordinal\":0,\"resource_id\":\"res\",\"revision\":\"rev\","        \
  "\"topology_id\":\"" GOLDEN_TOPOLOGY_ID "\"}"

#define GOLDEN_PART_A GOLDEN_PART_TEXT("r-a", "0", "0")
#define GOLDEN_PART_B GOLDEN_PART_TEXT("r-b", "1", "1")

Test(identity, golden_placement_canonical_text) {
  reshard_placement placement = golden_placement(golden_parts);
  expect_text(render_topology, &placement,
              "{\"dp_size\":1,\"participants\":" GOLDEN_PARTICIPANTS_TEXT
              ",\"pp_size\":1,\"schema\":\"kv-cache-topology\","
              "\"tp_size\":2}");
  static const char expected[] =
      "{\"descriptor\":" PLACEMENT_DESCRIPTOR_TEXT ",\"parts\":[" GOLDEN_PART_A
      "," GOLDEN_PART_B "],"
      "\"placement_set_id\":\"pset\",\"resource_id\":\"res\","
      "\"resource_kind\":\"kv_cache\",\"revision\":\"rev\","
      "\"schema\":\"complete-kv-cache-placement\","
      "\"topology\":{\"dp_size\":1,\"participants\":" GOLDEN_PARTICIPANTS_TEXT
      ",\"pp_size\":1,\"topology_id\":\"" GOLDEN_TOPOLOGY_ID "\","
      "\"tp_size\":2}}";
  expect_text(render_placement, &placement, expected);
}

Test(identity, replica_count_zero_hashes_as_one) {
  reshard_placement_part parts[2];
  memcpy(parts, golden_parts, sizeof parts);
  parts[0].replica_count = 0;
  parts[1].replica_count = 0;
  reshard_placement placement = golden_placement(parts);
  char placement_id[RESHARD_ID_SIZE];
  cr_assert_eq(reshard_placement_id(&placement, placement_id, NULL),
               RESHARD_OK);
  cr_expect_str_eq(placement_id, GOLDEN_PLACEMENT_ID);
}

/* ---- the model domain ignores geometry and axis order ------------------ */

static uint64_t low_layers[] = {0, 1};
static uint64_t high_layers[] = {2, 3};

/* Four geometries of the golden model: TP1, TP2 (the golden one), TP4, and
 * TP2·PP2 split by layers. Each is already in canonical shard order. */
static reshard_shard tp1_shards[] = {
    {golden_layers, 4, 0, 4, "0"},
};
static reshard_shard tp4_shards[] = {
    {golden_layers, 4, 0, 1, "0"},
    {golden_layers, 4, 1, 1, "1"},
    {golden_layers, 4, 2, 1, "2"},
    {golden_layers, 4, 3, 1, "3"},
};
static reshard_shard tp2_pp2_shards[] = {
    {low_layers, 2, 0, 2, "0_0"},
    {low_layers, 2, 2, 2, "1_0"},
    {high_layers, 2, 0, 2, "0_1"},
    {high_layers, 2, 2, 2, "1_1"},
};

Test(identity, model_domain_ignores_format_and_geometry) {
  struct {
    reshard_shard *shards;
    size_t count;
  } geometries[] = {
      {tp1_shards, 1},
      {golden_shards, 2},
      {tp4_shards, 4},
      {tp2_pp2_shards, 4},
  };
  const reshard_format formats[] = {RESHARD_FORMAT_PLHD, RESHARD_FORMAT_LPHD,
                                    RESHARD_FORMAT_HPLD};
  enum { N = 4 * 3 };
  char layout_ids[N][RESHARD_ID_SIZE];
  char keys[N][RESHARD_MANIFEST_KEY_SIZE];
  size_t n = 0;
  for (size_t g = 0; g < 4; g++) {
    for (size_t f = 0; f < 3; f++, n++) {
      reshard_manifest manifest = golden_manifest();
      manifest.layout.format = formats[f];
      manifest.layout.shards = geometries[g].shards;
      manifest.layout.shard_count = geometries[g].count;
      reshard_error err = {0};
      char domain[RESHARD_DIGEST_HEX_LEN + 1];
      cr_assert_eq(reshard_model_domain(&manifest, domain, &err), RESHARD_OK);
      cr_expect_str_eq(domain, GOLDEN_MODEL_DOMAIN,
                       "geometry %zu format %zu changed the domain", g, f);
      cr_assert_eq(reshard_layout_id(&manifest.layout, layout_ids[n], &err),
                   RESHARD_OK);
      cr_assert_eq(reshard_manifest_key(&manifest, keys[n], &err), RESHARD_OK);
      cr_expect_eq(strncmp(keys[n], "kv/" GOLDEN_MODEL_DOMAIN "/manifests/",
                           3 + 64 + 11),
                   0);
      cr_expect_str_eq(keys[n] + 3 + 64 + 11, layout_ids[n] + 7);
    }
  }
  /* Every (geometry, format) pair is its own layout. */
  for (size_t i = 0; i < N; i++) {
    for (size_t j = i + 1; j < N; j++) {
      cr_expect_str_neq(layout_ids[i], layout_ids[j], "layouts %zu and %zu", i,
                        j);
    }
  }
}

Test(identity, layout_id_depends_on_format) {
  static const struct {
    reshard_format format;
    const char *digest;
  } cases[] = {
      {RESHARD_FORMAT_PLHD,
       "fa7c48b62ecb15b828b879d58801c58e3ef39bf0f217ebf31adf5eb9c21d7762"},
      {RESHARD_FORMAT_LPHD, GOLDEN_LAYOUT_DIGEST},
      {RESHARD_FORMAT_HPLD,
       "499ce856d13ab550016bcb9eee0fa4552a78779ffbe956910e95f07f4ff2a358"},
  };
  for (size_t i = 0; i < 3; i++) {
    reshard_manifest manifest = golden_manifest();
    manifest.layout.format = cases[i].format;
    char digest[RESHARD_DIGEST_HEX_LEN + 1];
    layout_digest_ok(&manifest.layout, digest);
    cr_expect_str_eq(digest, cases[i].digest);
  }
}

/* ---- single-tensor caches and the integer range ------------------------ */

Test(identity, single_tensor_cache_uses_the_same_shape) {
  /* An MLA latent cache: one head of width 576, no V; PP2 over 4 layers. */
  reshard_layout layout = {
      .descriptor = {.global_layer_ids = golden_layers,
                     .layer_count = 4,
                     .dtype = "bf16",
                     .itemsize = 2,
                     .page_size = 64,
                     .total_kv_heads = 1,
                     .key_head_dim = 576,
                     .value_head_dim = 0},
      .format = RESHARD_FORMAT_PLHD,
      .shards = (reshard_shard[]){{low_layers, 2, 0, 1, "0"},
                                  {high_layers, 2, 0, 1, "0_1"}},
      .shard_count = 2,
  };
  expect_text(render_layout, &layout,
              "{\"descriptor\":{\"dtype\":\"bf16\",\"global_layer_ids\":"
              "[0,1,2,3],\"itemsize\":2,\"key_head_dim\":576,\"layout\":"
              "\"nhd\",\"page_size\":64,\"total_kv_heads\":1,"
              "\"value_head_dim\":0},\"object_format\":\"PLHD\",\"shards\":"
              "[{\"head_count\":1,\"head_start\":0,\"key_suffix\":\"0\","
              "\"layer_ids\":[0,1]},{\"head_count\":1,\"head_start\":0,"
              "\"key_suffix\":\"0_1\",\"layer_ids\":[2,3]}]}");
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  layout_digest_ok(&layout, digest);
  cr_expect_str_eq(
      digest,
      "19bc36f6a452583c61cb86edb0645938c1f1253a2068ac522e866f4e0bf62c03");
}

Test(identity, integers_above_2_pow_63_are_written_in_full) {
  uint64_t layers[] = {5, (UINT64_C(1) << 63) + 1, UINT64_MAX};
  reshard_layout layout = {
      .descriptor = {.global_layer_ids = layers,
                     .layer_count = 3,
                     .dtype = "fp8",
                     .itemsize = 1,
                     .page_size = UINT64_MAX,
                     .total_kv_heads = 1,
                     .key_head_dim = 576,
                     .value_head_dim = 0},
      .format = RESHARD_FORMAT_HPLD,
      .shards = (reshard_shard[]){{layers, 3, 0, 1, "0"}},
      .shard_count = 1,
  };
  expect_text(render_layout, &layout,
              "{\"descriptor\":{\"dtype\":\"fp8\",\"global_layer_ids\":"
              "[5,9223372036854775809,18446744073709551615],\"itemsize\":1,"
              "\"key_head_dim\":576,\"layout\":\"nhd\",\"page_size\":"
              "18446744073709551615,\"total_kv_heads\":1,\"value_head_dim\":"
              "0},\"object_format\":\"HPLD\",\"shards\":[{\"head_count\":1,"
              "\"head_start\":0,\"key_suffix\":\"0\",\"layer_ids\":"
              "[5,9223372036854775809,18446744073709551615]}]}");
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  layout_digest_ok(&layout, digest);
  cr_expect_str_eq(
      digest,
      "06b83be123ae56caa7138efd2b3fb224dee00dd30675cfd45d7aa28c4b8381f6");
}

Test(canonical_json, unsigned_decimal) {
  reshard__json w;
  reshard__json_init(&w, NULL);
  reshard__json_array_begin(&w);
  const uint64_t values[] = {0,         1, 9, 10, 99, 100, UINT64_C(1) << 63,
                             UINT64_MAX};
  for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
    reshard__json_uint(&w, values[i]);
  }
  reshard__json_array_end(&w);
  const char *text;
  cr_assert_eq(reshard__json_finish(&w, &text, NULL), RESHARD_OK);
  cr_expect_str_eq(
      text, "[0,1,9,10,99,100,9223372036854775808,18446744073709551615]");
  reshard__json_free(&w);
}

/* ---- strings ----------------------------------------------------------- */

Test(canonical_json, escapes_like_python_ensure_ascii) {
  /* Every escape class: the two-character escapes, other controls, DEL,
   * 2/3/4-byte UTF-8 (é € 😀 U+10FFFF) and the boundaries of each length. */
  static const char input[] =
      "q\"b\\n\nr\rt\tb\bf\f\x01\x1f\x7f~ "
      "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf"
      "\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf";
  reshard__json w;
  reshard_error err = {0};
  reshard__json_init(&w, &err);
  reshard__json_string(&w, input, "test.value");
  const char *text;
  cr_assert_eq(reshard__json_finish(&w, &text, NULL), RESHARD_OK, "%s",
               err.message);
  cr_expect_str_eq(text, "\"q\\\"b\\\\n\\nr\\rt\\tb\\bf\\f\\u0001\\u001f"
                         "\\u007f~ \\u00e9\\u20ac\\ud83d\\ude00\\udbff\\udfff"
                         "\\u0080\\u07ff\\u0800\\uffff\"");
  reshard__json_free(&w);
}

Test(identity, non_ascii_model_domain) {
  reshard_manifest manifest = golden_manifest();
  manifest.layout.descriptor.dtype = "bf16-\xc3\xa9";   /* é */
  manifest.model_id = "mod\xc3\xa8le-\xf0\x9f\x98\x80"; /* è, 😀 */
  expect_text(render_model_domain, &manifest,
              "{\"descriptor\":{\"dtype\":\"bf16-\\u00e9\","
              "\"global_layer_ids\":[0,1,2,3],\"itemsize\":2,"
              "\"key_head_dim\":8,\"layout\":\"nhd\",\"page_size\":16,"
              "\"total_kv_heads\":4,\"value_head_dim\":8},"
              "\"model_id\":\"mod\\u00e8le-\\ud83d\\ude00\","
              "\"model_revision\":\"rev\",\"namespace\":\"ns\","
              "\"object_format\":\"PLHD\",\"semantic_fingerprint\":\"fp\"}");
  char domain[RESHARD_DIGEST_HEX_LEN + 1];
  cr_assert_eq(reshard_model_domain(&manifest, domain, NULL), RESHARD_OK);
  cr_expect_str_eq(
      domain,
      "c3cada2d78aad61c83273e17f2f898169cbba47b181f4dd2528fbefbcc1de87e");
}

/* Byte sequences Python's strict UTF-8 decoder rejects. Arrays, not
 * pointers, so Criterion can copy the parameters into its workers. */
struct invalid_utf8 {
  char bytes[8];
  size_t bad_at;
};

ParameterizedTestParameters(canonical_json, rejects_invalid_utf8) {
  static struct invalid_utf8 cases[] = {
      {"\x80", 0},             /* lone continuation byte */
      {"ab\xbf", 2},           /* continuation after ASCII */
      {"\xc0\xaf", 0},         /* overlong '/' */
      {"\xc1\xbf", 0},         /* overlong, C1 lead */
      {"\xe0\x80\xaf", 0},     /* overlong 3-byte */
      {"\xf0\x80\x80\xaf", 0}, /* overlong 4-byte */
      {"\xed\xa0\x80", 0},     /* surrogate U+D800 */
      {"\xed\xbf\xbf", 0},     /* surrogate U+DFFF */
      {"\xf4\x90\x80\x80", 0}, /* above U+10FFFF */
      {"\xf5\x80\x80\x80", 0}, /* lead byte F5 */
      {"\xff", 0},             /* never valid */
      {"x\xe2\x82", 1},        /* truncated at the end */
      {"\xe2\x82x", 0},        /* truncated by ASCII */
      {"\xc3\xa9\xc3", 2},     /* valid, then truncated */
      {"\xf0\x9f\x98", 0},     /* truncated 4-byte */
  };
  return cr_make_param_array(struct invalid_utf8, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct invalid_utf8 *c, canonical_json,
                  rejects_invalid_utf8) {
  reshard__json w;
  reshard_error err = {0};
  reshard__json_init(&w, &err);
  reshard__json_object_begin(&w);
  reshard__json_key(&w, "a");
  reshard__json_string(&w, c->bytes, "thing[%d].name", 7);
  /* Later writes are ignored and do not replace the first failure. */
  reshard__json_key_uint(&w, "b", 1);
  reshard__json_key(&w, "c");
  reshard__json_string(&w, "\xff", "other");
  reshard__json_object_end(&w);
  cr_expect_eq(reshard__json_finish(&w, NULL, NULL), RESHARD_INVALID_ARGUMENT);
  cr_expect_eq(err.code, RESHARD_INVALID_ARGUMENT);
  char expected[128];
  snprintf(expected, sizeof expected,
           "thing[7].name: not valid UTF-8 at byte %zu", c->bad_at);
  cr_expect_str_eq(err.message, expected);
  reshard__json_free(&w);
}

Test(identity, invalid_utf8_is_rejected_naming_the_field) {
  reshard_error err = {0};
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  char id[RESHARD_ID_SIZE];
  char key[RESHARD_MANIFEST_KEY_SIZE];

  reshard_manifest manifest = golden_manifest();
  manifest.model_id = "mod\xff";
  cr_expect_eq(reshard_model_domain(&manifest, digest, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(err.message, "manifest.model_id: not valid UTF-8 at byte 3");
  cr_expect_str_eq(digest, "");

  manifest = golden_manifest();
  manifest.layout.descriptor.dtype = "bf\xc3";
  cr_expect_eq(reshard_manifest_key(&manifest, key, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(err.message,
                   "manifest.layout.descriptor.dtype: not valid UTF-8 at "
                   "byte 2");
  cr_expect_str_eq(key, "");

  reshard_shard shards[2];
  memcpy(shards, golden_shards, sizeof shards);
  shards[1].key_suffix = "\xed\xa0\x80";
  manifest = golden_manifest();
  manifest.layout.shards = shards;
  cr_expect_eq(reshard_layout_id(&manifest.layout, id, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(err.message,
                   "layout.shards[1].key_suffix: not valid UTF-8 at byte 0");
  cr_expect_str_eq(id, "");
  /* Through the manifest the same shard is named by its full path. */
  cr_expect_eq(reshard_manifest_key(&manifest, key, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(err.message, "manifest.layout.shards[1].key_suffix: not "
                                "valid UTF-8 at byte 0");

  reshard_placement_part parts[2];
  memcpy(parts, golden_parts, sizeof parts);
  parts[1].participant_id = "r-\x80";
  reshard_placement placement = golden_placement(parts);
  cr_expect_eq(reshard_topology_id(&placement, id, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(err.message,
                   "placement.parts[1].participant_id: not valid UTF-8 at "
                   "byte 2");
  cr_expect_eq(reshard_placement_id(&placement, id, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(id, "");

  placement = golden_placement(golden_parts);
  placement.revision = "r\xe2\x82";
  cr_expect_eq(reshard_placement_id(&placement, id, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(err.message,
                   "placement.revision: not valid UTF-8 at byte 1");

  placement = golden_placement(golden_parts);
  placement.descriptor.dtype = "\xc0\x80";
  cr_expect_eq(reshard_placement_id(&placement, id, &err),
               RESHARD_INVALID_ARGUMENT);
  cr_expect_str_eq(err.message,
                   "placement.descriptor.dtype: not valid UTF-8 at byte 0");
}

/* ---- writer structure -------------------------------------------------- */

Test(canonical_json, nesting_separators_and_raw_values) {
  reshard__json w;
  reshard__json_init(&w, NULL);
  reshard__json_object_begin(&w);
  reshard__json_key(&w, "a");
  reshard__json_array_begin(&w);
  reshard__json_array_end(&w);
  reshard__json_key(&w, "b");
  reshard__json_object_begin(&w);
  reshard__json_object_end(&w);
  reshard__json_key(&w, "c");
  reshard__json_array_begin(&w);
  reshard__json_raw(&w, "{\"x\":1}", 7);
  reshard__json_array_begin(&w);
  reshard__json_uint(&w, 2);
  reshard__json_array_end(&w);
  reshard__json_string(&w, "", "c[2]");
  reshard__json_array_end(&w);
  reshard__json_key_literal(&w, "d", "e");
  reshard__json_object_end(&w);
  const char *text;
  size_t length;
  cr_assert_eq(reshard__json_finish(&w, &text, &length), RESHARD_OK);
  cr_expect_str_eq(text, "{\"a\":[],\"b\":{},\"c\":[{\"x\":1},[2],\"\"],"
                         "\"d\":\"e\"}");
  cr_expect_eq(length, strlen(text));
  reshard__json_free(&w);
}

Test(canonical_json, grows_past_the_first_buffer) {
  /* Long enough to force several reallocations. */
  enum { COUNT = 5000 };
  reshard__json w;
  reshard__json_init(&w, NULL);
  reshard__json_array_begin(&w);
  for (uint64_t i = 0; i < COUNT; i++) {
    reshard__json_uint(&w, UINT64_MAX - i);
  }
  reshard__json_array_end(&w);
  const char *text;
  size_t length;
  cr_assert_eq(reshard__json_finish(&w, &text, &length), RESHARD_OK);
  /* 20 digits per value, COUNT-1 commas, two brackets. */
  cr_expect_eq(length, (size_t)COUNT * 20 + (COUNT - 1) + 2);
  cr_expect_eq(strncmp(text, "[18446744073709551615,18446744073709551614,", 43),
               0);
  cr_expect_eq(text[length - 1], ']');
  reshard__json_free(&w);
}

Test(canonical_json, empty_writer_finishes_as_empty_text) {
  reshard__json w;
  reshard__json_init(&w, NULL);
  const char *text = NULL;
  size_t length = 1;
  cr_assert_eq(reshard__json_finish(&w, &text, &length), RESHARD_OK);
  cr_expect_str_eq(text, "");
  cr_expect_eq(length, 0);
  reshard__json_free(&w);
  reshard__json_free(&w); /* freeing twice is harmless */
}

#ifndef NDEBUG
/* Key order is the caller's duty; debug builds stop a shape that breaks it
 * before it can produce a digest no reference would reproduce. */
Test(canonical_json, unsorted_keys_abort_in_debug_builds, .signal = SIGABRT) {
  reshard__json w;
  reshard__json_init(&w, NULL);
  reshard__json_object_begin(&w);
  reshard__json_key_uint(&w, "b", 1);
  reshard__json_key_uint(&w, "a", 2);
  reshard__json_object_end(&w);
  reshard__json_free(&w);
}
#endif

/* Collects what a streaming writer hands over. */
typedef struct collected {
  char *text;
  size_t length;
  size_t pieces;
} collected;

static void collect(void *context, const char *bytes, size_t length) {
  collected *c = context;
  c->text = realloc(c->text, c->length + length + 1);
  cr_assert_not_null(c->text);
  memcpy(c->text + c->length, bytes, length);
  c->length += length;
  c->text[c->length] = '\0';
  c->pieces++;
}

Test(canonical_json, a_sink_gets_the_same_text_in_bounded_pieces) {
  /* A placement of 2 000 parts: ~600 KB of text, the descriptor repeated
   * in every part. */
  enum { PARTS = 2000 };
  static reshard_placement_part parts[PARTS];
  static char ids[PARTS][8];
  for (int i = 0; i < PARTS; i++) {
    snprintf(ids[i], sizeof ids[i], "p%04d", i);
    parts[i] = golden_parts[0];
    parts[i].participant_id = ids[i];
  }
  reshard_placement placement = golden_placement(parts);
  placement.part_count = PARTS;

  reshard__json whole;
  reshard__json_init(&whole, NULL);
  reshard__json_placement(&whole, &placement, GOLDEN_TOPOLOGY_ID, "p");
  const char *expected;
  size_t expected_length;
  cr_assert_eq(reshard__json_finish(&whole, &expected, &expected_length),
               RESHARD_OK);

  collected c = {NULL, 0, 0};
  reshard__json streamed;
  reshard__json_init(&streamed, NULL);
  reshard__json_set_sink(&streamed, collect, &c);
  reshard__json_placement(&streamed, &placement, GOLDEN_TOPOLOGY_ID, "p");
  const char *tail;
  size_t tail_length;
  cr_assert_eq(reshard__json_finish(&streamed, &tail, &tail_length),
               RESHARD_OK);
  collect(&c, tail, tail_length);

  cr_assert_gt(expected_length, 8 * RESHARD__JSON_FLUSH);
  cr_assert_eq(c.length, expected_length);
  cr_assert(memcmp(c.text, expected, expected_length) == 0);
  /* Handed over in pieces; never more than a piece and a value held. */
  cr_assert_gt(c.pieces, 8);
  cr_assert_leq(streamed.capacity, 2 * RESHARD__JSON_FLUSH);
  free(c.text);
  reshard__json_free(&streamed);
  reshard__json_free(&whole);
}
