/* Canonical identities of SPEC §1.6. The shapes and key orders below must
 * stay byte-compatible with Mooncake's Python reference, which hashes
 * json.dumps(sort_keys=True, separators=(",", ":")) of the same objects;
 * docs/identity.md writes them down and tests/lib/identity/test_identity.c pins
 * the golden vectors. Every object's keys are written in ascending byte order
 * by hand (canonical_json asserts it), so each function reads like the
 * sorted JSON it produces. */
#include "reshard/identity.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "identity/canonical_json.h"

/* Field paths are short ("placement.parts[12].participant_id"); a message
 * buffer is ample and truncation only shortens an error message. */
typedef char path_buffer[RESHARD_ERROR_MESSAGE_MAX];

/* Local so the identities do not depend on model/layout.c; the names are part
 * of the hashed shape, so they must match the reference spelling exactly. */
static const char *format_name(reshard_format format) {
  switch (format) {
  case RESHARD_FORMAT_PLHD:
    return "PLHD";
  case RESHARD_FORMAT_LPHD:
    return "LPHD";
  case RESHARD_FORMAT_HPLD:
    return "HPLD";
  }
  return NULL;
}

static void json_uint_array(reshard__json *w, const uint64_t *values,
                            size_t count) {
  reshard__json_array_begin(w);
  for (size_t i = 0; i < count; i++) {
    reshard__json_uint(w, values[i]);
  }
  reshard__json_array_end(w);
}

static void json_rank(reshard__json *w, const reshard_rank *rank) {
  reshard__json_object_begin(w);
  reshard__json_key_uint(w, "dp", rank->dp);
  reshard__json_key_uint(w, "pp", rank->pp);
  reshard__json_key_uint(w, "tp", rank->tp);
  reshard__json_object_end(w);
}

void reshard__json_descriptor(reshard__json *w,
                              const reshard_descriptor *descriptor,
                              const char *path) {
  reshard__json_object_begin(w);
  reshard__json_key(w, "dtype");
  reshard__json_string(w, descriptor->dtype, "%s.dtype", path);
  reshard__json_key(w, "global_layer_ids");
  json_uint_array(w, descriptor->global_layer_ids, descriptor->layer_count);
  reshard__json_key_uint(w, "itemsize", descriptor->itemsize);
  reshard__json_key_uint(w, "key_head_dim", descriptor->key_head_dim);
  /* The reference only knows token-major ("nhd") descriptors; the store
   * formats live in object_format, so this is a constant of the shape. */
  reshard__json_key_literal(w, "layout", "nhd");
  reshard__json_key_uint(w, "page_size", descriptor->page_size);
  reshard__json_key_uint(w, "total_kv_heads", descriptor->total_kv_heads);
  /* 0 for single-tensor caches: same shape, no reference counterpart. */
  reshard__json_key_uint(w, "value_head_dim", descriptor->value_head_dim);
  reshard__json_object_end(w);
}

void reshard__json_layout(reshard__json *w, const reshard_layout *layout,
                          const char *path) {
  path_buffer field;
  const char *format = format_name(layout->format);
  if (format == NULL) {
    reshard__json_fail(w, RESHARD_INVALID_ARGUMENT,
                       "%s.format: unknown store format %d", path,
                       (int)layout->format);
    format = "";
  }
  reshard__json_object_begin(w);
  reshard__json_key(w, "descriptor");
  snprintf(field, sizeof field, "%s.descriptor", path);
  reshard__json_descriptor(w, &layout->descriptor, field);
  reshard__json_key_literal(w, "object_format", format);
  reshard__json_key(w, "shards");
  reshard__json_array_begin(w);
  /* Shards are hashed in the order given: normalization already sorted
   * them, and that order is also the Part numbering of every page. */
  for (size_t i = 0; i < layout->shard_count; i++) {
    const reshard_shard *shard = &layout->shards[i];
    reshard__json_object_begin(w);
    reshard__json_key_uint(w, "head_count", shard->head_count);
    reshard__json_key_uint(w, "head_start", shard->head_start);
    reshard__json_key(w, "key_suffix");
    reshard__json_string(w, shard->key_suffix, "%s.shards[%zu].key_suffix",
                         path, i);
    reshard__json_key(w, "layer_ids");
    json_uint_array(w, shard->layer_ids, shard->layer_count);
    reshard__json_object_end(w);
  }
  reshard__json_array_end(w);
  reshard__json_object_end(w);
}

void reshard__json_model_domain(reshard__json *w,
                                const reshard_manifest *manifest,
                                const char *path) {
  path_buffer field;
  reshard__json_object_begin(w);
  reshard__json_key(w, "descriptor");
  snprintf(field, sizeof field, "%s.layout.descriptor", path);
  reshard__json_descriptor(w, &manifest->layout.descriptor, field);
  reshard__json_key(w, "model_id");
  reshard__json_string(w, manifest->model_id, "%s.model_id", path);
  reshard__json_key(w, "model_revision");
  reshard__json_string(w, manifest->model_revision, "%s.model_revision", path);
  reshard__json_key(w, "namespace");
  reshard__json_string(w, manifest->name_space, "%s.namespace", path);
  /* Always PLHD whatever the layout's format, so every axis order (and
   * every TP/PP geometry) of one model shares one discovery domain. */
  reshard__json_key_literal(w, "object_format", "PLHD");
  reshard__json_key(w, "semantic_fingerprint");
  reshard__json_string(w, manifest->semantic_fingerprint,
                       "%s.semantic_fingerprint", path);
  reshard__json_object_end(w);
}

/* The participant list shared by the topology and the placement. Parts are
 * sorted by participant_id after reshard_placement_normalize, and strcmp on
 * UTF-8 bytes orders like Python's str comparison of code points, so the
 * parts' order is the reference's "sorted by id" order. */
static void json_participants(reshard__json *w,
                              const reshard_placement *placement,
                              const char *path) {
  reshard__json_array_begin(w);
  for (size_t i = 0; i < placement->part_count; i++) {
    const reshard_placement_part *part = &placement->parts[i];
    assert((i == 0 || strcmp(placement->parts[i - 1].participant_id,
                             part->participant_id) < 0) &&
           "placement parts must be sorted by participant_id");
    reshard__json_object_begin(w);
    reshard__json_key(w, "participant_id");
    reshard__json_string(w, part->participant_id,
                         "%s.parts[%zu].participant_id", path, i);
    reshard__json_key(w, "rank");
    json_rank(w, &part->rank);
    reshard__json_object_end(w);
  }
  reshard__json_array_end(w);
}

void reshard__json_topology(reshard__json *w,
                            const reshard_placement *placement,
                            const char *path) {
  reshard__json_object_begin(w);
  reshard__json_key_uint(w, "dp_size", placement->dp_size);
  reshard__json_key(w, "participants");
  json_participants(w, placement, path);
  reshard__json_key_uint(w, "pp_size", placement->pp_size);
  reshard__json_key_literal(w, "schema", "kv-cache-topology");
  reshard__json_key_uint(w, "tp_size", placement->tp_size);
  reshard__json_object_end(w);
}

void reshard__json_placement(reshard__json *w,
                             const reshard_placement *placement,
                             const char *topology_id, const char *path) {
  path_buffer field;

  /* D appears once at the top and once in every part: render and validate
   * it once, then splice the text. Its failure goes to a private record and
   * is handed to `w` through reshard__json_fail, which keeps an earlier
   * failure of `w` as the one reported. */
  reshard_error descriptor_error;
  reshard__json descriptor;
  reshard__json_init(&descriptor, &descriptor_error);
  snprintf(field, sizeof field, "%s.descriptor", path);
  reshard__json_descriptor(&descriptor, &placement->descriptor, field);
  const char *descriptor_text = "";
  size_t descriptor_length = 0;
  reshard_status status =
      reshard__json_finish(&descriptor, &descriptor_text, &descriptor_length);
  if (status != RESHARD_OK) {
    reshard__json_fail(w, status, "%s", descriptor_error.message);
  }

  reshard__json_object_begin(w);
  reshard__json_key(w, "descriptor");
  reshard__json_raw(w, descriptor_text, descriptor_length);
  reshard__json_key(w, "parts");
  reshard__json_array_begin(w);
  for (size_t i = 0; i < placement->part_count; i++) {
    const reshard_placement_part *part = &placement->parts[i];
    reshard__json_object_begin(w);
    reshard__json_key(w, "descriptor");
    reshard__json_raw(w, descriptor_text, descriptor_length);
    reshard__json_key_uint(w, "head_count", part->head_count);
    reshard__json_key_uint(w, "head_start", part->head_start);
    reshard__json_key(w, "layer_ids");
    json_uint_array(w, part->layer_ids, part->layer_count);
    reshard__json_key(w, "participant_id");
    reshard__json_string(w, part->participant_id,
                         "%s.parts[%zu].participant_id", path, i);
    /* Each part repeats the placement's own strings; a bad byte there is
     * reported at the placement's field, where the client wrote it. */
    reshard__json_key(w, "placement_set_id");
    reshard__json_string(w, placement->placement_set_id, "%s.placement_set_id",
                         path);
    reshard__json_key(w, "rank");
    json_rank(w, &part->rank);
    /* Normalization already turned 0 into 1; repeating the rule here keeps
     * the identity right for a caller that hashes a raw wire placement. */
    reshard__json_key_uint(w, "replica_count",
                           part->replica_count ? part->replica_count : 1);
    reshard__json_key_uint(w, "replica_ordinal", part->replica_ordinal);
    reshard__json_key(w, "resource_id");
    reshard__json_string(w, placement->resource_id, "%s.resource_id", path);
    reshard__json_key(w, "revision");
    reshard__json_string(w, placement->revision, "%s.revision", path);
    reshard__json_key_literal(w, "topology_id", topology_id);
    reshard__json_object_end(w);
  }
  reshard__json_array_end(w);
  reshard__json_key(w, "placement_set_id");
  reshard__json_string(w, placement->placement_set_id, "%s.placement_set_id",
                       path);
  reshard__json_key(w, "resource_id");
  reshard__json_string(w, placement->resource_id, "%s.resource_id", path);
  reshard__json_key_literal(w, "resource_kind", "kv_cache");
  reshard__json_key(w, "revision");
  reshard__json_string(w, placement->revision, "%s.revision", path);
  reshard__json_key_literal(w, "schema", "complete-kv-cache-placement");
  reshard__json_key(w, "topology");
  reshard__json_object_begin(w);
  reshard__json_key_uint(w, "dp_size", placement->dp_size);
  reshard__json_key(w, "participants");
  json_participants(w, placement, path);
  reshard__json_key_uint(w, "pp_size", placement->pp_size);
  reshard__json_key_literal(w, "topology_id", topology_id);
  reshard__json_key_uint(w, "tp_size", placement->tp_size);
  reshard__json_object_end(w);
  reshard__json_object_end(w);

  reshard__json_free(&descriptor);
}

/* Hashes canonical JSON as it is written: the writer hands its text to
 * SHA-256 every RESHARD__JSON_FLUSH bytes, so no identity's text is ever
 * held whole (a placement repeats its descriptor in every part). */
typedef struct digest_writer {
  reshard__json w;
  EVP_MD_CTX *ctx;
  bool failed;
} digest_writer;

static void digest_sink(void *context, const char *bytes, size_t length) {
  digest_writer *d = context;
  if (EVP_DigestUpdate(d->ctx, bytes, length) != 1) {
    d->failed = true;
  }
}

static void digest_begin(digest_writer *d, reshard_error *err) {
  reshard__json_init(&d->w, err);
  d->failed = false;
  d->ctx = EVP_MD_CTX_new();
  if (d->ctx == NULL || EVP_DigestInit_ex(d->ctx, EVP_sha256(), NULL) != 1) {
    reshard__json_fail(&d->w, RESHARD_INTERNAL, "SHA-256 is unavailable");
    return;
  }
  reshard__json_set_sink(&d->w, digest_sink, d);
}

/* Finishes the text, hashes what is left and writes the lowercase hex
 * digest. Frees the writer on every path. */
static reshard_status finish_digest(digest_writer *d,
                                    char out[RESHARD_DIGEST_HEX_LEN + 1]) {
  static const char hex[] = "0123456789abcdef";
  const char *text;
  size_t length;
  out[0] = '\0';
  reshard_status status = reshard__json_finish(&d->w, &text, &length);
  if (status == RESHARD_OK) {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_length = 0;
    if (d->failed || EVP_DigestUpdate(d->ctx, text, length) != 1 ||
        EVP_DigestFinal_ex(d->ctx, digest, &digest_length) != 1 ||
        digest_length * 2 != RESHARD_DIGEST_HEX_LEN) {
      status = reshard_error_set(d->w.err, RESHARD_INTERNAL,
                                 "SHA-256 of the canonical JSON failed");
    } else {
      for (unsigned int i = 0; i < digest_length; i++) {
        out[2 * i] = hex[digest[i] >> 4];
        out[2 * i + 1] = hex[digest[i] & 0xf];
      }
      out[RESHARD_DIGEST_HEX_LEN] = '\0';
    }
  }
  EVP_MD_CTX_free(d->ctx);
  reshard__json_free(&d->w);
  return status;
}

static void prefix_id(const char digest[RESHARD_DIGEST_HEX_LEN + 1],
                      char out[RESHARD_ID_SIZE]) {
  snprintf(out, RESHARD_ID_SIZE, "sha256:%s", digest);
}

static reshard_status layout_digest(const reshard_layout *layout,
                                    const char *path,
                                    char out[RESHARD_DIGEST_HEX_LEN + 1],
                                    reshard_error *err) {
  digest_writer d;
  digest_begin(&d, err);
  reshard__json_layout(&d.w, layout, path);
  return finish_digest(&d, out);
}

reshard_status reshard_layout_digest(const reshard_layout *layout,
                                     char out[RESHARD_DIGEST_HEX_LEN + 1],
                                     reshard_error *err) {
  return layout_digest(layout, "layout", out, err);
}

reshard_status reshard_layout_id(const reshard_layout *layout,
                                 char out[RESHARD_ID_SIZE],
                                 reshard_error *err) {
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  out[0] = '\0';
  reshard_status status = layout_digest(layout, "layout", digest, err);
  if (status == RESHARD_OK) {
    prefix_id(digest, out);
  }
  return status;
}

reshard_status reshard_model_domain(const reshard_manifest *manifest,
                                    char out[RESHARD_DIGEST_HEX_LEN + 1],
                                    reshard_error *err) {
  digest_writer d;
  digest_begin(&d, err);
  reshard__json_model_domain(&d.w, manifest, "manifest");
  return finish_digest(&d, out);
}

reshard_status reshard_manifest_key(const reshard_manifest *manifest,
                                    char out[RESHARD_MANIFEST_KEY_SIZE],
                                    reshard_error *err) {
  char domain[RESHARD_DIGEST_HEX_LEN + 1];
  char layout[RESHARD_DIGEST_HEX_LEN + 1];
  out[0] = '\0';
  reshard_status status = reshard_model_domain(manifest, domain, err);
  if (status == RESHARD_OK) {
    status = layout_digest(&manifest->layout, "manifest.layout", layout, err);
  }
  if (status == RESHARD_OK) {
    snprintf(out, RESHARD_MANIFEST_KEY_SIZE, "kv/%s/manifests/%s", domain,
             layout);
  }
  return status;
}

reshard_status reshard_topology_id(const reshard_placement *placement,
                                   char out[RESHARD_ID_SIZE],
                                   reshard_error *err) {
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  digest_writer d;
  out[0] = '\0';
  digest_begin(&d, err);
  reshard__json_topology(&d.w, placement, "placement");
  reshard_status status = finish_digest(&d, digest);
  if (status == RESHARD_OK) {
    prefix_id(digest, out);
  }
  return status;
}

reshard_status reshard_placement_id(const reshard_placement *placement,
                                    char out[RESHARD_ID_SIZE],
                                    reshard_error *err) {
  char topology_id[RESHARD_ID_SIZE];
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  out[0] = '\0';
  reshard_status status = reshard_topology_id(placement, topology_id, err);
  if (status != RESHARD_OK) {
    return status;
  }
  digest_writer d;
  digest_begin(&d, err);
  reshard__json_placement(&d.w, placement, topology_id, "placement");
  status = finish_digest(&d, digest);
  if (status == RESHARD_OK) {
    prefix_id(digest, out);
  }
  return status;
}

/* ---- Memory pools (SPEC §1.5a) ---- */

static int compare_regions_by_id(const void *a, const void *b) {
  const reshard_region *x = *(const reshard_region *const *)a;
  const reshard_region *y = *(const reshard_region *const *)b;
  return strcmp(x->region_id, y->region_id);
}

static int compare_tensors_by_layer(const void *a, const void *b) {
  const reshard_pool_tensor *x = *(const reshard_pool_tensor *const *)a;
  const reshard_pool_tensor *y = *(const reshard_pool_tensor *const *)b;
  if (x->global_layer_id != y->global_layer_id) {
    return x->global_layer_id < y->global_layer_id ? -1 : 1;
  }
  return (int)x->component - (int)y->component; /* key before value */
}

void reshard__json_memory_pool(reshard__json *w, const reshard_pool *pool,
                               const char *placement_id, const char *path) {
  /* The shape lists regions by id and tensors by (layer, component),
   * whatever order the pool gives them in. */
  const reshard_region **regions =
      malloc((pool->region_count + 1) * sizeof *regions);
  const reshard_pool_tensor **tensors =
      malloc((pool->tensor_count + 1) * sizeof *tensors);
  if (regions == NULL || tensors == NULL) {
    free(regions);
    free(tensors);
    reshard__json_fail(w, RESHARD_INTERNAL, "%s: out of memory", path);
    return;
  }
  for (size_t i = 0; i < pool->region_count; i++) {
    regions[i] = &pool->regions[i];
  }
  for (size_t i = 0; i < pool->tensor_count; i++) {
    tensors[i] = &pool->tensors[i];
  }
  qsort(regions, pool->region_count, sizeof *regions, compare_regions_by_id);
  qsort(tensors, pool->tensor_count, sizeof *tensors, compare_tensors_by_layer);
  reshard__json_object_begin(w);
  reshard__json_key_uint(w, "block_size", pool->block_size);
  reshard__json_key(w, "endpoint");
  reshard__json_string(w, pool->endpoint ? pool->endpoint : "", "%s.endpoint",
                       path);
  reshard__json_key_uint(w, "num_blocks", pool->num_blocks);
  reshard__json_key(w, "participant_id");
  reshard__json_string(w, pool->participant_id, "%s.participant_id", path);
  reshard__json_key(w, "placement_id");
  reshard__json_string(w, placement_id, "placement_id");
  reshard__json_key(w, "regions");
  reshard__json_array_begin(w);
  for (size_t i = 0; i < pool->region_count; i++) {
    reshard__json_object_begin(w);
    reshard__json_key_uint(w, "address", regions[i]->address);
    reshard__json_key_uint(w, "nbytes", regions[i]->nbytes);
    reshard__json_key(w, "region_id");
    reshard__json_string(w, regions[i]->region_id, "%s.regions[%zu].region_id",
                         path, (size_t)(regions[i] - pool->regions));
    reshard__json_object_end(w);
  }
  reshard__json_array_end(w);
  reshard__json_key_literal(w, "schema", "kv-cache-memory-pool");
  reshard__json_key(w, "tensors");
  reshard__json_array_begin(w);
  for (size_t i = 0; i < pool->tensor_count; i++) {
    const reshard_pool_tensor *tensor = tensors[i];
    reshard__json_object_begin(w);
    reshard__json_key_uint(w, "block_stride_bytes", tensor->block_stride_bytes);
    reshard__json_key_literal(
        w, "component",
        tensor->component == RESHARD_COMPONENT_KEY ? "key" : "value");
    reshard__json_key_uint(w, "global_layer_id", tensor->global_layer_id);
    reshard__json_key_uint(w, "head_stride_bytes", tensor->head_stride_bytes);
    reshard__json_key_uint(w, "offset_bytes", tensor->offset_bytes);
    reshard__json_key(w, "region_id");
    reshard__json_string(w, tensor->region_id, "%s.tensors[%zu].region_id",
                         path, (size_t)(tensor - pool->tensors));
    reshard__json_key_uint(w, "token_stride_bytes", tensor->token_stride_bytes);
    reshard__json_object_end(w);
  }
  reshard__json_array_end(w);
  reshard__json_object_end(w);
  free(regions);
  free(tensors);
}

reshard_status reshard_memory_id(const reshard_pool *pool,
                                 const char *placement_id,
                                 char out[RESHARD_ID_SIZE],
                                 reshard_error *err) {
  char digest[RESHARD_DIGEST_HEX_LEN + 1];
  digest_writer d;
  out[0] = '\0';
  digest_begin(&d, err);
  reshard__json_memory_pool(&d.w, pool, placement_id, "pool");
  reshard_status status = finish_digest(&d, digest);
  if (status == RESHARD_OK) {
    prefix_id(digest, out);
  }
  return status;
}
