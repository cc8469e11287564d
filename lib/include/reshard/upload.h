/* Upload planning: the store layout a writer placement produces (SPEC §2.1). */
#ifndef RESHARD_UPLOAD_H
#define RESHARD_UPLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "reshard/error.h"
#include "reshard/layout.h"
#include "reshard/placement.h"

typedef struct reshard_upload_plan {
  reshard_layout layout;     /* normalized; shards[i] is Part i */
  const char **part_writers; /* participant_id writing Part i */
  char layout_id[72];        /* "sha256:..." */
} reshard_upload_plan;

/* Plans the upload of a normalized `placement` in `format` for DP rank
 * `dp_rank` (the lowest present when has_dp_rank is false). Memory comes
 * from `arena`; strings point into the placement, which must outlive the
 * plan. */
typedef struct reshard_arena reshard_arena;
reshard_status
reshard_plan_upload(const reshard_placement *placement, reshard_format format,
                    bool has_dp_rank, uint64_t dp_rank,
                    const reshard_limits *limits, reshard_arena *arena,
                    reshard_upload_plan *out, reshard_error *err);

#endif
