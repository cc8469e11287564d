#include "base/keyed_sort.h"

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

/* LSD radix sort over bits [low, high) of the keys, 8 bits a pass; a pass
 * whose digit is the same for every key is skipped. When the bits fit one
 * digit as wide as the item count makes worthwhile (up to MAX_DIGIT_BITS,
 * no more buckets than items), one pass takes them all: a page of 1 024
 * copies whose keys differ in 10 bits is sorted in one pass, not two.
 * Wider digits over several passes measured slower (S3: pages of 5 120
 * copies lose the skipped passes of 8-bit digits). */
enum { DIGIT_BITS = 8, MAX_DIGIT_BITS = 11 };

static reshard__keyed *radix_sort(reshard__keyed *items, reshard__keyed *spare,
                                  size_t count, unsigned low, unsigned high) {
  unsigned widest = DIGIT_BITS;
  while (widest < MAX_DIGIT_BITS && ((size_t)2 << widest) <= count) {
    widest++;
  }
  unsigned digit_bits = high - low <= widest ? high - low : DIGIT_BITS;
  size_t buckets = (size_t)1 << digit_bits;
  uint64_t mask = buckets - 1;
  size_t histogram[(size_t)1 << MAX_DIGIT_BITS];
  for (unsigned shift = low; shift < high; shift += digit_bits) {
    memset(histogram, 0, buckets * sizeof histogram[0]);
    for (size_t i = 0; i < count; i++) {
      histogram[(items[i].key >> shift) & mask]++;
    }
    if (histogram[(items[0].key >> shift) & mask] == count) {
      continue;
    }
    size_t total = 0;
    for (size_t b = 0; b < buckets; b++) {
      size_t n = histogram[b];
      histogram[b] = total;
      total += n;
    }
    for (size_t i = 0; i < count; i++) {
      spare[histogram[(items[i].key >> shift) & mask]++] = items[i];
    }
    reshard__keyed *swap = items;
    items = spare;
    spare = swap;
  }
  return items;
}

/* Merges the ascending runs items[0, middle) and items[middle, count) into
 * `out`, stably. */
static reshard__keyed *merge_runs(const reshard__keyed *items, size_t middle,
                                  size_t count, reshard__keyed *out) {
  size_t a = 0, b = middle, n = 0;
  while (a < middle && b < count) {
    out[n++] = items[b].key < items[a].key ? items[b++] : items[a++];
  }
  while (a < middle) {
    out[n++] = items[a++];
  }
  while (b < count) {
    out[n++] = items[b++];
  }
  return out;
}

reshard__keyed *reshard__sort_keyed(reshard__keyed *items,
                                    reshard__keyed *spare, size_t count) {
  size_t descents = 0, last_descent = 0;
  uint64_t differing = 0;
  for (size_t i = 1; i < count; i++) {
    if (items[i].key < items[i - 1].key) {
      descents++;
      last_descent = i;
    }
    differing |= items[i].key ^ items[0].key;
  }
  if (descents == 0) {
    return items;
  }
  /* Two ascending runs, as a page's sequences are when the planner lists
   * the keys' component before the values' and the Part keeps them
   * interleaved by layer: one merge. */
  if (descents == 1) {
    return merge_runs(items, last_descent, count, spare);
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
