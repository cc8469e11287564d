/* Field-by-field equality of two decoded bindings, for the tests and the
 * fuzz target that hold daemon/binding_decode.c to the protobuf-c path. */
#ifndef RESHARD_TEST_BINDING_COMPARE_H
#define RESHARD_TEST_BINDING_COMPARE_H

#include <stdbool.h>
#include <stddef.h>

#include "reshard/binding.h"

/* True when `a` and `b` hold the same strings and values. Otherwise false,
 * with the first difference described in `why` (`why_size` bytes). */
bool reshard_test_bindings_equal(const reshard_binding *a,
                                 const reshard_binding *b, char *why,
                                 size_t why_size);

#endif
