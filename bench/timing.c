#include "timing.h"

#include <stdlib.h>
#include <time.h>

double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int compare_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bench_sort_samples(double *samples, size_t count) {
  qsort(samples, count, sizeof *samples, compare_double);
}
