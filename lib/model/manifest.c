#include "reshard/manifest.h"

static reshard_status require_text(const char *value, const char *field,
                                   reshard_error *err) {
  if (value == NULL || value[0] == '\0') {
    return reshard_error_set(err, RESHARD_INVALID_ARGUMENT,
                             "manifest.%s: must not be empty", field);
  }
  return RESHARD_OK;
}

reshard_status reshard_manifest_normalize(reshard_manifest *manifest,
                                          const reshard_limits *limits,
                                          reshard_arena *scratch,
                                          reshard_error *err) {
  reshard_status status;
  if ((status = require_text(manifest->name_space, "namespace", err)) ||
      (status = require_text(manifest->model_id, "model_id", err)) ||
      (status =
           require_text(manifest->model_revision, "model_revision", err)) ||
      (status = require_text(manifest->semantic_fingerprint,
                             "semantic_fingerprint", err))) {
    return status;
  }
  return reshard_layout_normalize(&manifest->layout, limits, "manifest.layout",
                                  scratch, err);
}
