/* Seeded pseudo-random numbers (splitmix64) and the per-case seeds of
 * the oracle (oracle.h). */
#include "oracle_internal.h"

/* ------------------------------------------------------------------ */
/* PRNG                                                                */
/* ------------------------------------------------------------------ */

void oracle_rng_seed(oracle_rng *rng, uint64_t seed) {
  rng->state = seed;
}

uint64_t oracle_rng_next(oracle_rng *rng) {
  rng->state += 0x9e3779b97f4a7c15ull;
  return mix64(rng->state);
}

uint64_t oracle_rng_between(oracle_rng *rng, uint64_t lo, uint64_t hi) {
  uint64_t span = hi - lo + 1;
  if (span == 0) {
    return oracle_rng_next(rng);
  }
  return lo + oracle_rng_next(rng) % span;
}

bool oracle_rng_chance(oracle_rng *rng, unsigned percent) {
  return oracle_rng_next(rng) % 100 < percent;
}

void oracle_rng_shuffle(oracle_rng *rng, void *base, size_t count,
                        size_t size) {
  unsigned char *bytes = base;
  for (size_t i = count; i > 1; i--) {
    size_t j = (size_t)oracle_rng_between(rng, 0, i - 1);
    if (j == i - 1) {
      continue;
    }
    unsigned char *a = bytes + (i - 1) * size, *b = bytes + j * size;
    for (size_t k = 0; k < size; k++) {
      unsigned char t = a[k];
      a[k] = b[k];
      b[k] = t;
    }
  }
}

uint64_t oracle_base_seed(void) {
  const char *text = getenv("RESHARD_ORACLE_SEED");
  if (text != NULL && *text != '\0') {
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 0);
    if (end != NULL && *end == '\0') {
      return (uint64_t)v;
    }
    fprintf(stderr, "oracle: ignoring malformed RESHARD_ORACLE_SEED=%s\n",
            text);
  }
  return ORACLE_DEFAULT_SEED;
}

uint64_t oracle_case_seed(uint64_t base, uint64_t stream, uint64_t index) {
  return mix64(base ^ mix64(stream * 0x2545f4914f6cdd1dull + 1) ^
               mix64(index + 0x9e3779b97f4a7c15ull));
}

void oracle_rng_shuffle_in_runs(oracle_rng *rng, void *base, size_t count,
                                size_t size) {
  size_t *starts = xmalloc((count + 1) * sizeof *starts);
  size_t runs = 0;
  for (size_t i = 0; i < count; runs++) {
    starts[runs] = i;
    uint64_t length = oracle_rng_between(rng, 1, 3);
    i += length < count - i ? (size_t)length : count - i;
  }
  starts[runs] = count;
  size_t *order = xmalloc((runs + 1) * sizeof *order);
  for (size_t r = 0; r < runs; r++) {
    order[r] = r;
  }
  oracle_rng_shuffle(rng, order, runs, sizeof *order);
  unsigned char *shuffled = xmalloc(count * size + 1);
  size_t n = 0;
  for (size_t r = 0; r < runs; r++) {
    size_t length = starts[order[r] + 1] - starts[order[r]];
    memcpy(shuffled + n * size, (unsigned char *)base + starts[order[r]] * size,
           length * size);
    n += length;
  }
  memcpy(base, shuffled, count * size);
  free(shuffled);
  free(order);
  free(starts);
}
