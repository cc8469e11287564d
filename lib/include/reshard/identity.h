/* Canonical identities, byte-compatible with Mooncake's reference shapes
 * (SPEC §1.6, docs/identity.md): lowercase hex SHA-256 of canonical JSON. */
#ifndef RESHARD_IDENTITY_H
#define RESHARD_IDENTITY_H

#include "reshard/error.h"
#include "reshard/layout.h"
#include "reshard/manifest.h"
#include "reshard/placement.h"
#include "reshard/pool.h"

#define RESHARD_DIGEST_HEX_LEN 64
/* "sha256:" + 64 hex digits + NUL */
#define RESHARD_ID_SIZE 72
/* "kv/" + 64 + "/manifests/" + 64 + NUL */
#define RESHARD_MANIFEST_KEY_SIZE 143

/* All functions take normalized inputs, write NUL-terminated text into the
 * caller's fixed-size buffer and return INVALID_ARGUMENT only when a string
 * is not valid UTF-8 (RESHARD_INTERNAL when memory runs out). */

/* digest(layout) and "sha256:" + digest(layout). */
reshard_status reshard_layout_digest(const reshard_layout *layout,
                                     char out[RESHARD_DIGEST_HEX_LEN + 1],
                                     reshard_error *err);
reshard_status reshard_layout_id(const reshard_layout *layout,
                                 char out[RESHARD_ID_SIZE], reshard_error *err);

/* digest of the model-domain shape; independent of geometry and format. */
reshard_status reshard_model_domain(const reshard_manifest *manifest,
                                    char out[RESHARD_DIGEST_HEX_LEN + 1],
                                    reshard_error *err);

/* "kv/{model_domain}/manifests/{layout digest}". */
reshard_status reshard_manifest_key(const reshard_manifest *manifest,
                                    char out[RESHARD_MANIFEST_KEY_SIZE],
                                    reshard_error *err);

/* "sha256:" + digest of the topology / complete placement shapes. */
reshard_status reshard_topology_id(const reshard_placement *placement,
                                   char out[RESHARD_ID_SIZE],
                                   reshard_error *err);
reshard_status reshard_placement_id(const reshard_placement *placement,
                                    char out[RESHARD_ID_SIZE],
                                    reshard_error *err);

/* "sha256:" + digest of the memory pool shape (SPEC §1.5a) of a pool
 * validated by reshard_pool_validate, registered against `placement_id`:
 * regions listed by id and tensors by (layer, key before value), whatever
 * their order in `pool`. */
reshard_status reshard_memory_id(const reshard_pool *pool,
                                 const char *placement_id,
                                 char out[RESHARD_ID_SIZE], reshard_error *err);

#endif
