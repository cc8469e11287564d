/* Criterion assertion for failing calls: the status must be `want` and the
 * error message must contain every given fragment (the field path and the
 * rule), so each validation test pins both. */
#ifndef RESHARD_TEST_ASSERT_ERROR_H
#define RESHARD_TEST_ASSERT_ERROR_H

#include <criterion/criterion.h>
#include <string.h>

#include "reshard/error.h"

#define ASSERT_FAILS(call, err, want, ...)                                     \
  do {                                                                         \
    reshard_status got_ = (call);                                              \
    cr_assert_eq(got_, (want), "status %s, want %s: %s",                       \
                 reshard_status_name(got_), reshard_status_name(want),         \
                 (err).message);                                               \
    cr_assert_eq((err).code, (want));                                          \
    const char *fragments_[] = {__VA_ARGS__};                                  \
    for (size_t f_ = 0; f_ < sizeof fragments_ / sizeof *fragments_; f_++) {   \
      cr_assert(strstr((err).message, fragments_[f_]) != NULL,                 \
                "message lacks \"%s\": %s", fragments_[f_], (err).message);    \
    }                                                                          \
  } while (0)

#endif
