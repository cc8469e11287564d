/* Overflow-checked unsigned 64-bit arithmetic. Every size computation that
 * a client can influence goes through these, so an overflow becomes an
 * error message instead of a wrapped value. */
#ifndef RESHARD_CHECKED_H
#define RESHARD_CHECKED_H

#include <stdbool.h>
#include <stdint.h>

/* Each returns true and stores the result when it fits in 64 bits, false
 * (leaving *out unspecified) when it would overflow. */
static inline bool reshard_add(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_add_overflow(a, b, out);
}

static inline bool reshard_mul(uint64_t a, uint64_t b, uint64_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}

static inline bool reshard_mul3(uint64_t a, uint64_t b, uint64_t c,
                                uint64_t *out) {
  uint64_t ab;
  return reshard_mul(a, b, &ab) && reshard_mul(ab, c, out);
}

/* a * b + c */
static inline bool reshard_mul_add(uint64_t a, uint64_t b, uint64_t c,
                                   uint64_t *out) {
  uint64_t ab;
  return reshard_mul(a, b, &ab) && reshard_add(ab, c, out);
}

#endif
