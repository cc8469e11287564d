/* lib/base/keyed_sort.c against a stable reference sort, on every shape the
 * sort treats apart: sorted, two ascending runs (merged), small (insertion
 * sort), large (radix over the differing bits), with equal keys. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "base/keyed_sort.h"
#include "oracle.h"

/* Stable by construction: ties go to the smaller original index. */
static int by_key_then_index(const void *pa, const void *pb) {
  const reshard__keyed *a = pa, *b = pb;
  if (a->key != b->key) {
    return a->key < b->key ? -1 : 1;
  }
  return (a->index > b->index) - (a->index < b->index);
}

enum { SHAPES = 5 };

/* Keys of shape `shape`: 0 sorted, 1 two ascending runs, 2 random small
 * range (many ties), 3 random wide, 4 many runs. */
static void fill(oracle_rng *rng, reshard__keyed *items, size_t count,
                 unsigned shape) {
  size_t middle = count / 2 + (size_t)oracle_rng_between(rng, 0, count / 4);
  uint64_t at = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t key;
    switch (shape) {
    case 0:
      key = at += oracle_rng_between(rng, 0, 3);
      break;
    case 1:
      if (i == middle) {
        at = oracle_rng_between(rng, 0, 8);
      }
      key = at += oracle_rng_between(rng, 0, 5);
      break;
    case 2:
      key = oracle_rng_between(rng, 0, 7) << 10;
      break;
    case 3:
      key = oracle_rng_next(rng);
      break;
    default:
      key = (i % 7) * 1000 + i;
      break;
    }
    items[i] = (reshard__keyed){key, i};
  }
}

Test(keyed_sort, matches_a_stable_sort_on_every_shape) {
  static const size_t counts[] = {0, 1, 2, 3, 47, 48, 49, 64, 300, 5000};
  oracle_rng rng;
  oracle_rng_seed(&rng, oracle_case_seed(oracle_base_seed(), 9200, 0));
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t count = counts[c];
    reshard__keyed *items = malloc((count + 1) * sizeof *items);
    reshard__keyed *spare = malloc((count + 1) * sizeof *spare);
    reshard__keyed *want = malloc((count + 1) * sizeof *want);
    cr_assert(items && spare && want);
    for (unsigned shape = 0; shape < SHAPES; shape++) {
      for (int round = 0; round < 4; round++) {
        fill(&rng, items, count, shape);
        memcpy(want, items, count * sizeof *items);
        qsort(want, count, sizeof *want, by_key_then_index);
        const reshard__keyed *got = reshard__sort_keyed(items, spare, count);
        cr_assert(got == items || got == spare);
        for (size_t i = 0; i < count; i++) {
          cr_assert(got[i].key == want[i].key && got[i].index == want[i].index,
                    "count %zu shape %u: item %zu is (%llu, %llu), want "
                    "(%llu, %llu)",
                    count, shape, i, (unsigned long long)got[i].key,
                    (unsigned long long)got[i].index,
                    (unsigned long long)want[i].key,
                    (unsigned long long)want[i].index);
        }
      }
    }
    free(items);
    free(spare);
    free(want);
  }
}
