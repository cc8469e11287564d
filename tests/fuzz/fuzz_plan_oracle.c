/* libFuzzer target: the planning core as a differential test (SPEC §2.4).
 * The input chooses a random valid shape — descriptor, writer and reader
 * topologies, store formats, reader memory style, selection twists, batch
 * limits — the library plans it, and the oracle (tests/support/oracle.c)
 * executes the plan byte by byte and checks selection; any disagreement
 * aborts, which libFuzzer reports as a crash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "oracle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint64_t take(const uint8_t **data, size_t *size, size_t bytes) {
  uint64_t value = 0;
  for (size_t i = 0; i<bytes && * size> 0; i++, (*data)++, (*size)--) {
    value |= (uint64_t) * *data << (8 * i);
  }
  return value;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint64_t seed = take(&data, &size, 8);
  uint64_t knobs = take(&data, &size, 4);
  oracle_case_opts opts = {
      .format = (reshard_format)(1 + knobs % 3),
      .random_style = true,
      .max_sources = 1 + (unsigned)((knobs >> 2) % 4),
      .selection_twists = (knobs >> 4) & 1,
      .single_tensor = ((knobs >> 5) & 7) == 0,
      .max_batch_operations = (knobs >> 8) & 1 ? 1 + ((knobs >> 9) & 63) : 0,
      .max_batch_bytes = (knobs >> 15) & 1 ? 1 + ((knobs >> 16) & 4095) : 0,
  };
  /* A batch byte limit splits copies; past max_operations the library
   * rightly refuses the plan (SPEC §2.3), which is no disagreement. */
  static const char refused[] =
      "reshard_plan_load failed: RESOURCE_EXHAUSTED: plan: ";
  oracle_case c;
  char msg[4096];
  if (!oracle_case_build(&c, seed, &opts, msg, sizeof msg)) {
    fprintf(stderr, "oracle_case_build: %s\n", msg);
    abort();
  }
  reshard_arena plan_arena;
  reshard_load_plan plan;
  oracle_exec_stats stats;
  bool ok = oracle_case_run(&c, &plan_arena, &plan, &stats, msg, sizeof msg);
  oracle_plan_release(&c, &plan_arena, &plan);
  oracle_case_destroy(&c);
  if (!ok && opts.max_batch_bytes != 0 &&
      strncmp(msg, refused, sizeof refused - 1) == 0 &&
      strstr(msg, "copies after batching exceed the limit max_operations") !=
          NULL) {
    ok = true;
  }
  if (!ok) {
    fprintf(stderr, "plan disagrees with the oracle: %s\n", msg);
    abort();
  }
  return 0;
}
