/* client_runs: the C library's run iterator (clients/reshard_copies.h)
 * against a running reshardd. Usage: client_runs HOST:PORT REQUEST.pb,
 * REQUEST.pb a serialised PlanLoadRequest whose pages are registered.
 * Plans it without and with runs and checks that, batch by batch, the
 * iterator expands the runs into exactly the explicit batch (sorted by the
 * explicit key), that reshard_batch_copy_count agrees, and that malformed
 * batches are refused. Driven by test_runs.py. Prints "ok ..." and exits 0,
 * or prints the failures and exits 1. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard_client.h"
#include "reshard_copies.h"

static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

static int by_explicit_key(const void *pa, const void *pb) {
  const uint64_t *a = pa, *b = pb;
  /* page, part, part_offset, region, region_offset, nbytes */
  for (int f = 0; f < 6; f++)
    if (a[f] != b[f])
      return a[f] < b[f] ? -1 : 1;
  return 0;
}

static void copy_words(const reshard_plan_copy *c, uint64_t out[6]) {
  uint64_t words[6] = {c->page_index,   c->part_index,    c->part_offset,
                       c->region_index, c->region_offset, c->nbytes};
  memcpy(out, words, sizeof words);
}

/* All copies of a batch as rows of six words, sorted; NULL on a bad batch. */
static uint64_t *expand(const Reshard__V1__RangeBatch *batch, size_t *count) {
  uint64_t n;
  if (reshard_batch_copy_count(batch, &n) != 0)
    return NULL;
  uint64_t *rows = malloc((n + 1) * 6 * sizeof *rows);
  reshard_copy_iter it;
  reshard_copy_iter_init(&it, batch);
  reshard_plan_copy copy;
  size_t k = 0;
  int rc;
  while ((rc = reshard_copy_iter_next(&it, &copy)) == 1 && k < n)
    copy_words(&copy, rows + 6 * k++);
  if (rc != 0 || k != n) {
    free(rows);
    return NULL;
  }
  qsort(rows, k, 6 * sizeof *rows, by_explicit_key);
  *count = k;
  return rows;
}

static void malformed_batches(void) {
  uint64_t one[1] = {1}, zero[1] = {0}, two[2] = {1, 2};
  Reshard__V1__RangeBatch b = RESHARD__V1__RANGE_BATCH__INIT;
  b.n_page_index = b.n_part_index = b.n_part_offset = b.n_region_index =
      b.n_region_offset = b.n_nbytes = 1;
  b.page_index = b.part_index = b.part_offset = b.region_index =
      b.region_offset = b.nbytes = one;
  uint64_t n;
  CHECK(reshard_batch_copy_count(&b, &n) == 0 && n == 1, "explicit entry");
  b.n_run_count = b.n_part_stride = b.n_region_stride = 1;
  b.run_count = zero;
  b.part_stride = b.region_stride = one;
  reshard_copy_iter it;
  reshard_plan_copy copy;
  reshard_copy_iter_init(&it, &b);
  CHECK(reshard_copy_iter_next(&it, &copy) == -1, "run_count 0 is refused");
  CHECK(reshard_batch_copy_count(&b, &n) == -1, "run_count 0 is refused");
  b.run_count = one;
  b.n_part_stride = 2;
  b.part_stride = two;
  reshard_copy_iter_init(&it, &b);
  CHECK(reshard_copy_iter_next(&it, &copy) == -1, "uneven run columns");
  uint64_t huge[1] = {UINT64_MAX};
  uint64_t three[1] = {3};
  b.n_part_stride = 1;
  b.part_stride = huge;
  b.run_count = three;
  reshard_copy_iter_init(&it, &b);
  CHECK(reshard_copy_iter_next(&it, &copy) == 1, "first copy of the run");
  CHECK(reshard_copy_iter_next(&it, &copy) == -1, "offset past 2^64");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: client_runs HOST:PORT REQUEST.pb\n");
    return 2;
  }
  FILE *f = fopen(argv[2], "rb");
  if (f == NULL) {
    perror(argv[2]);
    return 2;
  }
  static uint8_t bytes[1 << 24];
  size_t length = fread(bytes, 1, sizeof bytes, f);
  fclose(f);
  Reshard__V1__PlanLoadRequest *req =
      reshard__v1__plan_load_request__unpack(NULL, length, bytes);
  if (req == NULL) {
    fprintf(stderr, "%s: not a PlanLoadRequest\n", argv[2]);
    return 2;
  }
  malformed_batches();
  reshard_client *c = reshard_client_open(argv[1], 30000);
  reshard_client_status st;
  Reshard__V1__PlanLoadResponse *plain = NULL, *runs = NULL;
  req->runs = false;
  int code = reshard_client_plan_load(c, req, 0, &plain, &st);
  CHECK(code == RESHARD_STATUS_OK, "explicit: %s", st.message);
  req->runs = true;
  code = reshard_client_plan_load(c, req, 0, &runs, &st);
  CHECK(code == RESHARD_STATUS_OK, "runs: %s", st.message);
  uint64_t copies = 0, entries = 0;
  if (plain != NULL && runs != NULL) {
    CHECK(plain->n_batches == runs->n_batches, "batch counts %zu %zu",
          plain->n_batches, runs->n_batches);
    for (size_t b = 0; b < plain->n_batches && b < runs->n_batches; b++) {
      size_t want_n = 0, got_n = 0;
      uint64_t *want = expand(plain->batches[b], &want_n);
      uint64_t *got = expand(runs->batches[b], &got_n);
      CHECK(want != NULL && got != NULL, "batch %zu does not expand", b);
      CHECK(runs->batches[b]->n_run_count == runs->batches[b]->n_nbytes,
            "batch %zu has no run columns", b);
      if (want != NULL && got != NULL) {
        CHECK(want_n == got_n && memcmp(want, got, 6 * 8 * want_n) == 0,
              "batch %zu: runs expand to other copies", b);
        copies += got_n;
        entries += runs->batches[b]->n_nbytes;
      }
      free(want);
      free(got);
    }
    CHECK(runs->stats != NULL && runs->stats->runs == entries,
          "stats.runs %llu, %llu entries",
          runs->stats ? (unsigned long long)runs->stats->runs : 0ull,
          (unsigned long long)entries);
    CHECK(entries < copies, "runs folded nothing");
  }
  if (plain != NULL)
    reshard__v1__plan_load_response__free_unpacked(plain, NULL);
  if (runs != NULL)
    reshard__v1__plan_load_response__free_unpacked(runs, NULL);
  reshard__v1__plan_load_request__free_unpacked(req, NULL);
  reshard_client_close(c);
  if (failures > 0) {
    printf("%d checks failed\n", failures);
    return 1;
  }
  printf("ok %llu copies in %llu runs\n", (unsigned long long)copies,
         (unsigned long long)entries);
  return 0;
}
