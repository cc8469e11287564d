#include "keyed_sort.h"

#include <stdbool.h>
#include <string.h>

/* Below this, insertion sort beats the radix sort's histogram passes. */
enum { INSERTION_SORT_MAX = 48 };

static void insertion_sort(reshard__keyed *items, size_t count) {
  for (size_t i = 1; i < count; i++) {
    reshard__keyed item = items[i];
    size_t j = i;
    while (j > 0 && items[j - 1].key > item.key) {
      items[j] = items[j - 1];
      j--;
    }
    items[j] = item;
  }
}

/* LSD radix sort, 8 bits a pass, over bits [low, high) of the keys; a pass
 * whose digit is the same for every key is skipped. */
static reshard__keyed *radix_sort(reshard__keyed *items, reshard__keyed *spare,
                                  size_t count, unsigned low, unsigned high) {
  enum { DIGIT_BITS = 8, BUCKETS = 1 << DIGIT_BITS };
  size_t histogram[BUCKETS];
  for (unsigned shift = low; shift < high; shift += DIGIT_BITS) {
    memset(histogram, 0, sizeof histogram);
    for (size_t i = 0; i < count; i++) {
      histogram[(items[i].key >> shift) & (BUCKETS - 1)]++;
    }
    if (histogram[(items[0].key >> shift) & (BUCKETS - 1)] == count) {
      continue;
    }
    size_t total = 0;
    for (size_t b = 0; b < BUCKETS; b++) {
      size_t n = histogram[b];
      histogram[b] = total;
      total += n;
    }
    for (size_t i = 0; i < count; i++) {
      spare[histogram[(items[i].key >> shift) & (BUCKETS - 1)]++] = items[i];
    }
    reshard__keyed *swap = items;
    items = spare;
    spare = swap;
  }
  return items;
}

reshard__keyed *reshard__sort_keyed(reshard__keyed *items,
                                    reshard__keyed *spare, size_t count) {
  bool sorted = true;
  uint64_t differing = 0;
  for (size_t i = 1; i < count; i++) {
    sorted &= items[i].key >= items[i - 1].key;
    differing |= items[i].key ^ items[0].key;
  }
  if (sorted) {
    return items;
  }
  if (count <= INSERTION_SORT_MAX) {
    insertion_sort(items, count);
    return items;
  }
  /* Bits that are equal in every key cannot change the order: copies start
   * at multiples of a head's bytes and all keys of a page share high bits. */
  unsigned low = (unsigned)__builtin_ctzll(differing);
  unsigned high = 64 - (unsigned)__builtin_clzll(differing);
  return radix_sort(items, spare, count, low, high);
}
