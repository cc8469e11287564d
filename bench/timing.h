/* Wall-clock samples for the benchmarks: one monotonic clock and the order
 * statistics every table prints, over arrays the caller owns. */
#ifndef RESHARD_BENCH_TIMING_H
#define RESHARD_BENCH_TIMING_H

#include <stddef.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
double bench_now_ns(void);

/* Sorts samples[0 .. count) in increasing order, in place. */
void bench_sort_samples(double *samples, size_t count);

/* The median and the 99th percentile of samples sorted by
 * bench_sort_samples; count >= 1. */
static inline double bench_median(const double *sorted, size_t count) {
  return sorted[count / 2];
}

static inline double bench_p99(const double *sorted, size_t count) {
  return sorted[(size_t)((double)count * 0.99)];
}

#endif
