/* Coalescing (SPEC §2.2 step 4): order one page's copies by source and
 * merge each copy into the previous one when both its source and its
 * destination continue exactly where the previous ended. */
#include <string.h>

#include "plan_internal.h"

/* Small pages are sorted by insertion; radix sort pays off above this. */
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

/* LSD radix sort, 8 bits a pass, on keys already shifted so that their
 * common trailing zero bits are gone. Keys are positions within one page
 * and copies start at multiples of a head's bytes, so a page usually
 * sorts in two passes; a pass whose digit is the same for every key is
 * skipped. Returns the buffer holding the sorted items. */
static reshard__keyed *radix_sort(reshard__keyed *items, reshard__keyed *spare,
                                  size_t count, unsigned shift_base,
                                  unsigned bits) {
  enum { DIGIT_BITS = 8, BUCKETS = 1 << DIGIT_BITS };
  size_t histogram[BUCKETS];
  for (unsigned shift = shift_base; shift < shift_base + bits;
       shift += DIGIT_BITS) {
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

size_t reshard__coalesce_page(const reshard_copy *copies, size_t count,
                              const uint64_t *part_base, reshard__keyed *keyed,
                              reshard__keyed *spare, reshard_copy *out) {
  if (count == 0) {
    return 0;
  }
  bool sorted = true;
  uint64_t max_key = 0;
  uint64_t any_bits = 0;
  uint64_t previous = 0;
  for (size_t i = 0; i < count; i++) {
    uint64_t key = part_base[copies[i].part_index] + copies[i].part_offset;
    keyed[i] = (reshard__keyed){key, i};
    sorted &= key >= previous;
    previous = key;
    max_key = key > max_key ? key : max_key;
    any_bits |= key;
  }
  reshard__keyed *order = keyed;
  if (!sorted) {
    if (count <= INSERTION_SORT_MAX) {
      insertion_sort(keyed, count);
    } else {
      unsigned low = (unsigned)__builtin_ctzll(any_bits | (1ull << 63));
      unsigned high = 64 - (unsigned)__builtin_clzll(max_key | 1);
      order = radix_sort(keyed, spare, count, low, high - low);
    }
  }
  /* Source intervals of one page never overlap (each Part byte holds one
   * value and the binding binds each value once), so ordering by source
   * position alone is the order (page, part, part_offset, region,
   * region_offset) of the SPEC. */
  size_t n = 0;
  out[0] = copies[order[0].index];
  for (size_t i = 1; i < count; i++) {
    const reshard_copy *copy = &copies[order[i].index];
    reshard_copy *last = &out[n];
    if (copy->part_index == last->part_index &&
        copy->part_offset == last->part_offset + last->nbytes &&
        copy->region_index == last->region_index &&
        copy->region_offset == last->region_offset + last->nbytes) {
      last->nbytes += copy->nbytes;
    } else {
      out[++n] = *copy;
    }
  }
  return n + 1;
}
