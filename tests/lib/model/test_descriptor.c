/* Descriptor rules (SPEC §1.1): every validation rule with one failing
 * input each, the head-byte overflow checks near 2^64, canonical sorting,
 * equality naming the differing field, and the layer index lookup. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "reshard/descriptor.h"

/* Asserts that `call` fails with `want` and that the message contains every
 * following fragment (the field path and the rule). */
#include "assert_error.h"

#define PATH "manifest.layout.descriptor"

/* A valid descriptor over `layers` (caller storage, deliberately unsorted
 * in most tests): bf16, page 16, 4 heads, K 8 / V 4. */
static reshard_descriptor base_descriptor(uint64_t *layers, size_t count) {
  return (reshard_descriptor){
      .global_layer_ids = layers,
      .layer_count = count,
      .dtype = "bf16",
      .itemsize = 2,
      .page_size = 16,
      .total_kv_heads = 4,
      .key_head_dim = 8,
      .value_head_dim = 4,
  };
}

static void normalize_ok(reshard_descriptor *d) {
  reshard_error err = {0};
  cr_assert_eq(reshard_descriptor_normalize(d, PATH, &err), RESHARD_OK, "%s",
               err.message);
}

/* ---- success and canonical form --------------------------------------- */

Test(descriptor, valid_descriptor_sorts_layers) {
  uint64_t layers[] = {7, 3, 0, 12, 5};
  reshard_descriptor d = base_descriptor(layers, 5);
  normalize_ok(&d);
  uint64_t sorted[] = {0, 3, 5, 7, 12};
  cr_assert_arr_eq(d.global_layer_ids, sorted, sizeof sorted);
  cr_assert_eq(d.layer_count, 5);
}

Test(descriptor, single_layer_and_extreme_layer_ids_are_valid) {
  uint64_t layers[] = {UINT64_MAX, 0, UINT64_MAX - 1};
  reshard_descriptor d = base_descriptor(layers, 3);
  normalize_ok(&d);
  cr_assert_eq(d.global_layer_ids[0], 0);
  cr_assert_eq(d.global_layer_ids[2], UINT64_MAX);

  uint64_t one[] = {42};
  reshard_descriptor single = base_descriptor(one, 1);
  normalize_ok(&single);
}

Test(descriptor, value_head_dim_zero_is_a_single_tensor_cache) {
  uint64_t layers[] = {0, 1};
  reshard_descriptor d = base_descriptor(layers, 2);
  d.total_kv_heads = 1;
  d.key_head_dim = 576;
  d.value_head_dim = 0;
  normalize_ok(&d);
  cr_assert_eq(reshard_component_count(&d), 1);
  cr_assert_eq(reshard_head_bytes(&d, RESHARD_COMPONENT_KEY), 1152);
  cr_assert_eq(reshard_head_bytes(&d, RESHARD_COMPONENT_VALUE), 0);
}

Test(descriptor, head_bytes_differ_for_k_and_v) {
  uint64_t layers[] = {0};
  reshard_descriptor d = base_descriptor(layers, 1);
  normalize_ok(&d);
  cr_assert_eq(reshard_component_count(&d), 2);
  cr_assert_eq(reshard_head_bytes(&d, RESHARD_COMPONENT_KEY), 16);
  cr_assert_eq(reshard_head_bytes(&d, RESHARD_COMPONENT_VALUE), 8);
}

Test(descriptor, largest_head_bytes_that_fit_are_accepted) {
  uint64_t layers[] = {0};
  reshard_descriptor d = base_descriptor(layers, 1);
  /* (K + V) * itemsize = (2^62 - 1 + 2^62) * 2 = 2^64 - 2: fits. */
  d.itemsize = 2;
  d.key_head_dim = (UINT64_C(1) << 62) - 1;
  d.value_head_dim = UINT64_C(1) << 62;
  normalize_ok(&d);
  cr_assert_eq(reshard_head_bytes(&d, RESHARD_COMPONENT_VALUE), UINT64_C(1)
                                                                    << 63);
}

Test(descriptor, null_error_record_is_allowed) {
  uint64_t layers[] = {0};
  reshard_descriptor d = base_descriptor(layers, 1);
  d.itemsize = 0;
  cr_assert_eq(reshard_descriptor_normalize(&d, PATH, NULL),
               RESHARD_INVALID_ARGUMENT);
}

/* ---- one failing input per rule --------------------------------------- */

Test(descriptor, rejects_empty_layers) {
  reshard_descriptor d = base_descriptor(NULL, 0);
  reshard_error err = {0};
  ASSERT_FAILS(reshard_descriptor_normalize(&d, PATH, &err), err,
               RESHARD_INVALID_ARGUMENT,
               PATH ".global_layer_ids:", "must not be empty");
}

Test(descriptor, rejects_duplicate_layer) {
  uint64_t layers[] = {4, 1, 9, 1};
  reshard_descriptor d = base_descriptor(layers, 4);
  reshard_error err = {0};
  ASSERT_FAILS(reshard_descriptor_normalize(&d, PATH, &err), err,
               RESHARD_INVALID_ARGUMENT,
               PATH ".global_layer_ids:", "layer id 1 appears more than once");
}

Test(descriptor, rejects_empty_dtype) {
  uint64_t layers[] = {0};
  reshard_descriptor d = base_descriptor(layers, 1);
  d.dtype = "";
  reshard_error err = {0};
  ASSERT_FAILS(reshard_descriptor_normalize(&d, PATH, &err), err,
               RESHARD_INVALID_ARGUMENT, PATH ".dtype:", "must not be empty");
}

Test(descriptor, rejects_missing_dtype) {
  uint64_t layers[] = {0};
  reshard_descriptor d = base_descriptor(layers, 1);
  d.dtype = NULL;
  reshard_error err = {0};
  ASSERT_FAILS(reshard_descriptor_normalize(&d, PATH, &err), err,
               RESHARD_INVALID_ARGUMENT, PATH ".dtype:", "must not be empty");
}

/* Fields that must be at least 1. Parameter structs hold no pointers:
 * Criterion re-executes the binary for each test, so addresses differ. */
struct zero_field {
  char name[32];
  size_t offset;
};

ParameterizedTestParameters(descriptor, rejects_zero_field) {
  static struct zero_field cases[] = {
      {"itemsize", offsetof(reshard_descriptor, itemsize)},
      {"page_size", offsetof(reshard_descriptor, page_size)},
      {"total_kv_heads", offsetof(reshard_descriptor, total_kv_heads)},
      {"key_head_dim", offsetof(reshard_descriptor, key_head_dim)},
  };
  return cr_make_param_array(struct zero_field, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct zero_field *c, descriptor, rejects_zero_field) {
  uint64_t layers[] = {0, 1};
  reshard_descriptor d = base_descriptor(layers, 2);
  *(uint64_t *)((char *)&d + c->offset) = 0;
  reshard_error err = {0};
  char path[128];
  snprintf(path, sizeof path, PATH ".%s:", c->name);
  ASSERT_FAILS(reshard_descriptor_normalize(&d, PATH, &err), err,
               RESHARD_INVALID_ARGUMENT, path, "must be at least 1");
}

/* dims x itemsize near 2^64: each of the three products/sums overflows on
 * its own. */
struct overflow_case {
  uint64_t key_head_dim;
  uint64_t value_head_dim;
  uint64_t itemsize;
};

ParameterizedTestParameters(descriptor, rejects_head_bytes_overflow) {
  static struct overflow_case cases[] = {
      /* key_head_dim * itemsize */
      {UINT64_C(1) << 63, 0, 2},
      /* value_head_dim * itemsize */
      {1, UINT64_C(1) << 63, 2},
      /* key + value overflows with itemsize 1 */
      {UINT64_MAX, 1, 1},
      /* each product fits, (key + value) * itemsize does not */
      {UINT64_C(1) << 62, UINT64_C(1) << 62, 2},
      /* the largest itemsize with dims 1 + 1 */
      {1, 1, UINT64_MAX},
  };
  return cr_make_param_array(struct overflow_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct overflow_case *c, descriptor,
                  rejects_head_bytes_overflow) {
  uint64_t layers[] = {0};
  reshard_descriptor d = base_descriptor(layers, 1);
  d.key_head_dim = c->key_head_dim;
  d.value_head_dim = c->value_head_dim;
  d.itemsize = c->itemsize;
  reshard_error err = {0};
  ASSERT_FAILS(reshard_descriptor_normalize(&d, PATH, &err), err,
               RESHARD_INVALID_ARGUMENT, PATH ":", "itemsize", "overflow");
}

/* ---- reshard_sort_unique_ids ------------------------------------------ */

Test(descriptor, sort_unique_ids_sorts_and_names_the_path) {
  uint64_t ids[] = {5, 2, 8};
  reshard_error err = {0};
  cr_assert_eq(reshard_sort_unique_ids(ids, 3, "x.layer_ids", &err),
               RESHARD_OK);
  uint64_t sorted[] = {2, 5, 8};
  cr_assert_arr_eq(ids, sorted, sizeof sorted);
  cr_assert_eq(reshard_sort_unique_ids(NULL, 0, "x.layer_ids", &err),
               RESHARD_OK);

  uint64_t dup[] = {UINT64_MAX, 3, UINT64_MAX};
  ASSERT_FAILS(reshard_sort_unique_ids(dup, 3, "x.layer_ids", &err), err,
               RESHARD_INVALID_ARGUMENT, "x.layer_ids:",
               "layer id 18446744073709551615 appears more than once");
}

/* ---- equality --------------------------------------------------------- */

struct equal_case {
  char field[32];
  size_t change; /* index into `changes` */
};

static uint64_t other_layers[] = {0, 1, 3};
static void change_dtype(reshard_descriptor *d) {
  d->dtype = "fp16";
}
static void change_itemsize(reshard_descriptor *d) {
  d->itemsize = 4;
}
static void change_page_size(reshard_descriptor *d) {
  d->page_size = 64;
}
static void change_heads(reshard_descriptor *d) {
  d->total_kv_heads = 8;
}
static void change_key_dim(reshard_descriptor *d) {
  d->key_head_dim = 16;
}
static void change_value_dim(reshard_descriptor *d) {
  d->value_head_dim = 0;
}
static void change_layer_id(reshard_descriptor *d) {
  d->global_layer_ids = other_layers;
}
static void change_layer_count(reshard_descriptor *d) {
  d->layer_count = 2;
}

static void (*const changes[])(reshard_descriptor *d) = {
    change_dtype,   change_itemsize,  change_page_size, change_heads,
    change_key_dim, change_value_dim, change_layer_id,  change_layer_count,
};

ParameterizedTestParameters(descriptor, equal_names_the_differing_field) {
  static struct equal_case cases[] = {
      {"dtype", 0},
      {"itemsize", 1},
      {"page_size", 2},
      {"total_kv_heads", 3},
      {"key_head_dim", 4},
      {"value_head_dim", 5},
      {"global_layer_ids", 6},
      {"global_layer_ids", 7},
  };
  return cr_make_param_array(struct equal_case, cases,
                             sizeof cases / sizeof cases[0]);
}

ParameterizedTest(struct equal_case *c, descriptor,
                  equal_names_the_differing_field) {
  uint64_t layers_a[] = {0, 1, 2};
  uint64_t layers_b[] = {0, 1, 2};
  reshard_descriptor a = base_descriptor(layers_a, 3);
  reshard_descriptor b = base_descriptor(layers_b, 3);
  const char *field = "unset";
  cr_assert(reshard_descriptor_equal(&a, &b, &field));
  cr_assert_null(field);

  changes[c->change](&b);
  field = NULL;
  cr_assert_not(reshard_descriptor_equal(&a, &b, &field));
  cr_assert_str_eq(field, c->field);
  cr_assert_not(reshard_descriptor_equal(&b, &a, &field));
  cr_assert_str_eq(field, c->field);
  /* NULL is allowed for the field name. */
  cr_assert_not(reshard_descriptor_equal(&a, &b, NULL));
}

Test(descriptor, equal_compares_dtype_by_content) {
  uint64_t layers[] = {0};
  char dtype[] = "bf16";
  reshard_descriptor a = base_descriptor(layers, 1);
  reshard_descriptor b = base_descriptor(layers, 1);
  b.dtype = dtype;
  cr_assert(reshard_descriptor_equal(&a, &b, NULL));
}

Test(descriptor, equal_names_the_first_differing_field) {
  uint64_t layers[] = {0};
  reshard_descriptor a = base_descriptor(layers, 1);
  reshard_descriptor b = base_descriptor(layers, 1);
  b.page_size = 1;
  b.value_head_dim = 1;
  const char *field = NULL;
  cr_assert_not(reshard_descriptor_equal(&a, &b, &field));
  cr_assert_str_eq(field, "page_size");
}

/* ---- layer index ------------------------------------------------------ */

Test(descriptor, layer_index_finds_every_layer_and_only_those) {
  uint64_t layers[] = {40, 10, 30, 20, UINT64_MAX};
  reshard_descriptor d = base_descriptor(layers, 5);
  normalize_ok(&d);
  cr_assert_eq(reshard_descriptor_layer_index(&d, 10), 0);
  cr_assert_eq(reshard_descriptor_layer_index(&d, 20), 1);
  cr_assert_eq(reshard_descriptor_layer_index(&d, 30), 2);
  cr_assert_eq(reshard_descriptor_layer_index(&d, 40), 3);
  cr_assert_eq(reshard_descriptor_layer_index(&d, UINT64_MAX), 4);
  cr_assert_eq(reshard_descriptor_layer_index(&d, 0), -1);
  cr_assert_eq(reshard_descriptor_layer_index(&d, 25), -1);
  cr_assert_eq(reshard_descriptor_layer_index(&d, 41), -1);
  cr_assert_eq(reshard_descriptor_layer_index(&d, UINT64_MAX - 1), -1);
}

Test(descriptor, layer_index_on_many_layers) {
  enum { N = 1000 };
  uint64_t layers[N];
  for (size_t i = 0; i < N; i++) {
    layers[i] = (N - 1 - i) * 3; /* descending, gaps of 3 */
  }
  reshard_descriptor d = base_descriptor(layers, N);
  normalize_ok(&d);
  for (uint64_t id = 0; id < N * 3; id++) {
    ptrdiff_t expected = id % 3 == 0 ? (ptrdiff_t)(id / 3) : -1;
    cr_assert_eq(reshard_descriptor_layer_index(&d, id), expected, "id %llu",
                 (unsigned long long)id);
  }
}
