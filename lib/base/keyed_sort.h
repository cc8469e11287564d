/* Sorting (key, index) pairs by key: the one sort the planner's hot paths
 * use (copies by position in a page, binding spans by address). Internal. */
#ifndef RESHARD_KEYED_SORT_H
#define RESHARD_KEYED_SORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct reshard__keyed {
  uint64_t key;
  uint64_t index;
} reshard__keyed;

/* Sorts `count` items by key, stably. `spare` is scratch of the same size.
 * Returns whichever of the two buffers holds the result. Already sorted
 * input costs one pass, two ascending runs one merge; small inputs use
 * insertion sort; the rest a radix sort over only the key bits that
 * differ. */
reshard__keyed *reshard__sort_keyed(reshard__keyed *items,
                                    reshard__keyed *spare, size_t count);

#endif
