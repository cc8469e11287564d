/* Coalescing (SPEC §2.2 step 4): order one page's copies by source and
 * merge each copy into the previous one when both its source and its
 * destination continue exactly where the previous ended. */

#include "plan/plan_internal.h"

size_t reshard__coalesce_page(const reshard_copy *copies, size_t count,
                              const uint64_t *part_base, reshard__keyed *keyed,
                              reshard__keyed *spare, reshard_copy *out) {
  if (count == 0) {
    return 0;
  }
  for (size_t i = 0; i < count; i++) {
    keyed[i] = (reshard__keyed){
        part_base[copies[i].part_index] + copies[i].part_offset, i};
  }
  const reshard__keyed *order = reshard__sort_keyed(keyed, spare, count);
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
