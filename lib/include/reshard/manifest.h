/* Store manifests: the immutable record of how a model's pages were stored
 * (SPEC §1.4). */
#ifndef RESHARD_MANIFEST_H
#define RESHARD_MANIFEST_H

#include "reshard/error.h"
#include "reshard/layout.h"

typedef struct reshard_manifest {
  const char *name_space; /* "namespace" on the wire */
  const char *model_id;
  const char *model_revision;
  const char *semantic_fingerprint;
  reshard_layout layout;
} reshard_manifest;

/* Checks the four strings are non-empty and normalizes the layout (see
 * reshard_layout_normalize). Messages start with "manifest". */
typedef struct reshard_arena reshard_arena;
reshard_status reshard_manifest_normalize(reshard_manifest *manifest,
                                          const reshard_limits *limits,
                                          reshard_arena *scratch,
                                          reshard_error *err);

#endif
