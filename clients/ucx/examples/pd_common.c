/* The shared part of the P/D examples: see pd_common.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "oracle.h"
#include "pd_common.h"
#include "wire/wire.h"

bool pd_parse_option(int argc, char **argv, int *i, pd_options *o) {
  if (*i + 1 >= argc) {
    return false;
  }
  const char *a = argv[*i], *v = argv[*i + 1];
  if (strcmp(a, "--target") == 0) {
    o->target = v;
  } else if (strcmp(a, "--scenario") == 0) {
    o->scenario = v;
  } else if (strcmp(a, "--peers") == 0) {
    o->peers = v;
  } else if (strcmp(a, "--tokens") == 0) {
    o->tokens = strtoull(v, NULL, 10);
  } else if (strcmp(a, "--seed") == 0) {
    o->seed = strtoull(v, NULL, 10);
  } else {
    return false;
  }
  (*i)++;
  return true;
}

int pd_build(const char *name, uint64_t tokens, uint64_t seed,
             reshard_arena *arena, const transfer_spec **spec,
             transfer_scenario *out, char *msg, size_t msg_size) {
  *spec = NULL;
  for (size_t i = 0; i < sizeof transfer_specs / sizeof transfer_specs[0];
       i++) {
    if (transfer_selected(&transfer_specs[i], name)) {
      *spec = &transfer_specs[i];
      break;
    }
  }
  if (*spec == NULL) {
    snprintf(msg, msg_size, "no transfer scenario named %s (T1 .. T5)", name);
    return -1;
  }
  reshard_error err;
  if (transfer_scenario_build(*spec, tokens, seed, arena, out, &err) !=
      RESHARD_OK) {
    snprintf(msg, msg_size, "%s: %s", (*spec)->name, err.message);
    return -1;
  }
  return 0;
}

int pd_target_pool(const transfer_spec *spec, const transfer_scenario *t,
                   size_t index, uint64_t seed, reshard_arena *arena,
                   scenario_pool *out, char *msg, size_t msg_size) {
  if (index >= t->target.part_count) {
    snprintf(msg, msg_size, "target participant %zu: the placement has %zu",
             index, t->target.part_count);
    return -1;
  }
  /* scenario_build_pool reads the reader placement, the participant and
   * the page count of the scenario it is given (bench/scenario.c builds
   * every transfer side this way). */
  scenario_spec shape = scenario_specs[spec->shape];
  shape.block_tokens = spec->target_block;
  shape.memory = spec->target_memory;
  scenario s;
  memset(&s, 0, sizeof s);
  s.reader = t->target;
  s.binding.participant_id = t->target.parts[index].participant_id;
  s.request.page_count = t->tokens / shape.page_size;
  reshard_error err;
  if (scenario_build_pool(&shape, &s, seed, arena, out, &err) != RESHARD_OK) {
    snprintf(msg, msg_size, "%s: %s", s.binding.participant_id, err.message);
    return -1;
  }
  return 0;
}

int pd_memory_map(reshard_pool *pool, pd_memory *out, char *msg,
                  size_t msg_size) {
  memset(out, 0, sizeof *out);
  out->bytes = calloc(pool->region_count + 1, sizeof *out->bytes);
  out->nbytes = calloc(pool->region_count + 1, sizeof *out->nbytes);
  if (out->bytes == NULL || out->nbytes == NULL) {
    pd_memory_free(out);
    snprintf(msg, msg_size, "no memory");
    return -1;
  }
  for (size_t r = 0; r < pool->region_count; r++) {
    uint64_t n = pool->regions[r].nbytes;
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      snprintf(msg, msg_size, "%s region %s: mmap of %llu bytes failed",
               pool->participant_id, pool->regions[r].region_id,
               (unsigned long long)n);
      pd_memory_free(out);
      return -1;
    }
    out->bytes[r] = p;
    out->nbytes[r] = n;
    out->count = r + 1;
    pool->regions[r].address = (uint64_t)(uintptr_t)p;
  }
  return 0;
}

void pd_memory_free(pd_memory *memory) {
  for (size_t r = 0; r < memory->count; r++) {
    munmap(memory->bytes[r], memory->nbytes[r]);
  }
  free(memory->bytes);
  free(memory->nbytes);
  memset(memory, 0, sizeof *memory);
}

void pd_memory_zero(pd_memory *memory) {
  for (size_t r = 0; r < memory->count; r++) {
    memset(memory->bytes[r], 0, memory->nbytes[r]);
  }
}

void pd_memory_noise(pd_memory *memory, uint64_t seed) {
  uint64_t x = seed | 1;
  for (size_t r = 0; r < memory->count; r++) {
    for (uint64_t i = 0; i < memory->nbytes[r]; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      memory->bytes[r][i] = (uint8_t)(x % 255 + 1);
    }
  }
}

reshard_ucx_region *pd_ucx_regions(const reshard_pool *pool,
                                   const pd_memory *memory) {
  reshard_ucx_region *out = calloc(pool->region_count + 1, sizeof *out);
  for (size_t r = 0; out != NULL && r < pool->region_count; r++) {
    out[r] = (reshard_ucx_region){pool->regions[r].region_id, memory->bytes[r],
                                  memory->nbytes[r]};
  }
  return out;
}

static size_t region_of(const reshard_pool *pool, const char *region_id) {
  for (size_t r = 0; r < pool->region_count; r++) {
    if (strcmp(pool->regions[r].region_id, region_id) == 0) {
      return r;
    }
  }
  return SIZE_MAX; /* a validated pool names only its regions */
}

/* Where value (tensor, token, head) starts in its region. */
static uint64_t value_at(const reshard_pool *pool, const reshard_pool_tensor *t,
                         const uint32_t *table, uint64_t token,
                         uint64_t head_index) {
  uint64_t bs = pool->block_size;
  return t->offset_bytes + table[token / bs] * t->block_stride_bytes +
         (token % bs) * t->token_stride_bytes +
         head_index * t->head_stride_bytes;
}

void pd_fill(const reshard_descriptor *desc, const reshard_placement_part *part,
             const reshard_pool *pool, const uint32_t *table, uint64_t tokens,
             uint8_t *const *bytes) {
  uint64_t w = desc->itemsize;
  for (size_t i = 0; i < pool->tensor_count; i++) {
    const reshard_pool_tensor *t = &pool->tensors[i];
    uint8_t *region = bytes[region_of(pool, t->region_id)];
    uint64_t elements = reshard_head_bytes(desc, t->component) / w;
    for (uint64_t tok = 0; tok < tokens; tok++) {
      for (uint64_t h = 0; h < part->head_count; h++) {
        uint8_t *v = region + value_at(pool, t, table, tok, h);
        for (uint64_t e = 0; e < elements; e++) {
          uint64_t hash =
              oracle_element_hash(0, tok, t->global_layer_id,
                                  part->head_start + h, t->component, e);
          for (uint64_t k = 0; k < w; k++) {
            v[e * w + k] = (uint8_t)(hash >> (8 * (k % 8)));
          }
        }
      }
    }
  }
}

/* Names the value that lives at byte `at` of region `r`, if any. */
static void locate(const reshard_descriptor *desc,
                   const reshard_placement_part *part, const reshard_pool *pool,
                   const uint32_t *table, uint64_t tokens, size_t r,
                   uint64_t at, char *out, size_t size) {
  for (size_t i = 0; i < pool->tensor_count; i++) {
    const reshard_pool_tensor *t = &pool->tensors[i];
    uint64_t hb = reshard_head_bytes(desc, t->component);
    if (region_of(pool, t->region_id) != r) {
      continue;
    }
    for (uint64_t tok = 0; tok < tokens; tok++) {
      for (uint64_t h = 0; h < part->head_count; h++) {
        uint64_t v = value_at(pool, t, table, tok, h);
        if (at >= v && at < v + hb) {
          snprintf(out, size, "layer %llu %s token %llu head %llu byte %llu",
                   (unsigned long long)t->global_layer_id,
                   t->component == RESHARD_COMPONENT_KEY ? "key" : "value",
                   (unsigned long long)tok,
                   (unsigned long long)(part->head_start + h),
                   (unsigned long long)(at - v));
          return;
        }
      }
    }
  }
  snprintf(out, size, "no value of tokens < %llu lives there",
           (unsigned long long)tokens);
}

int64_t pd_verify(const reshard_descriptor *desc,
                  const reshard_placement_part *part, const reshard_pool *pool,
                  const uint32_t *table, uint64_t tokens,
                  const pd_memory *memory, char *msg, size_t msg_size) {
  uint8_t **want = calloc(memory->count + 1, sizeof *want);
  int64_t checked = -1;
  if (want == NULL) {
    snprintf(msg, msg_size, "no memory");
    return -1;
  }
  size_t r = 0;
  for (; r < memory->count; r++) {
    if ((want[r] = calloc(1, memory->nbytes[r])) == NULL) {
      snprintf(msg, msg_size, "no memory for the expected image");
      goto done;
    }
  }
  pd_fill(desc, part, pool, table, tokens, want);
  for (r = 0; r < memory->count; r++) {
    if (memcmp(want[r], memory->bytes[r], memory->nbytes[r]) == 0) {
      continue;
    }
    uint64_t at = 0;
    while (want[r][at] == memory->bytes[r][at]) {
      at++;
    }
    char where[160];
    locate(desc, part, pool, table, tokens, r, at, where, sizeof where);
    snprintf(msg, msg_size,
             "%s region %s byte %llu is 0x%02x, want 0x%02x (%s)",
             pool->participant_id, pool->regions[r].region_id,
             (unsigned long long)at, memory->bytes[r][at], want[r][at], where);
    goto done;
  }
  checked = 0;
  for (size_t i = 0; i < pool->tensor_count; i++) {
    checked += (int64_t)(tokens * part->head_count *
                         reshard_head_bytes(desc, pool->tensors[i].component));
  }
done:
  for (size_t k = 0; k < memory->count; k++) {
    free(want[k]);
  }
  free(want);
  return checked;
}

const reshard_placement_part *pd_find_part(const reshard_placement *placement,
                                           const char *participant_id) {
  for (size_t i = 0; i < placement->part_count; i++) {
    if (strcmp(placement->parts[i].participant_id, participant_id) == 0) {
      return &placement->parts[i];
    }
  }
  return NULL;
}

int pd_register_placement(reshard_client *client,
                          const reshard_placement *placement, const char *want,
                          reshard_arena *arena, char *msg, size_t msg_size) {
  Reshard__V1__RegisterPlacementRequest req =
      RESHARD__V1__REGISTER_PLACEMENT_REQUEST__INIT;
  req.placement = reshard_wire_placement_to_pb(placement, arena);
  reshard_client_status st = {0};
  Reshard__V1__RegisterPlacementResponse *resp = NULL;
  if (req.placement == NULL ||
      reshard_client_register_placement(client, &req, 0, &resp, &st) !=
          RESHARD_STATUS_OK) {
    snprintf(msg, msg_size, "RegisterPlacement: %s: %s",
             reshard_status_code_name(st.code), st.message);
    return -1;
  }
  int rc = strcmp(resp->placement_id, want) == 0 ? 0 : -1;
  if (rc != 0) {
    snprintf(msg, msg_size, "RegisterPlacement: id %s, want %s",
             resp->placement_id, want);
  }
  reshard__v1__register_placement_response__free_unpacked(resp, NULL);
  return rc;
}

int pd_register_pool(reshard_client *client, const reshard_pool *pool,
                     const char *placement_id, char *memory_id,
                     reshard_arena *arena, char *msg, size_t msg_size) {
  Reshard__V1__RegisterMemoryRequest req =
      RESHARD__V1__REGISTER_MEMORY_REQUEST__INIT;
  req.pool = reshard_wire_pool_to_pb(pool, arena);
  req.target_case = RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT_ID;
  req.placement_id = (char *)placement_id;
  reshard_client_status st = {0};
  Reshard__V1__RegisterMemoryResponse *resp = NULL;
  if (req.pool == NULL ||
      reshard_client_register_memory(client, &req, 0, &resp, &st) !=
          RESHARD_STATUS_OK) {
    snprintf(msg, msg_size, "RegisterMemory %s: %s: %s", pool->participant_id,
             reshard_status_code_name(st.code), st.message);
    return -1;
  }
  snprintf(memory_id, RESHARD_ID_SIZE, "%s", resp->memory_id);
  reshard__v1__register_memory_response__free_unpacked(resp, NULL);
  return 0;
}

void pd_forget_pool(reshard_client *client, const char *memory_id) {
  Reshard__V1__ForgetMemoryRequest req =
      RESHARD__V1__FORGET_MEMORY_REQUEST__INIT;
  req.memory_id = (char *)memory_id;
  reshard_client_status st;
  Reshard__V1__ForgetMemoryResponse *resp = NULL;
  if (reshard_client_forget_memory(client, &req, 0, &resp, &st) ==
      RESHARD_STATUS_OK) {
    reshard__v1__forget_memory_response__free_unpacked(resp, NULL);
  }
}

char **pd_transfer_request(const reshard_ucx_peer_file *file,
                           const transfer_scenario *t, const scenario_pool *sp,
                           const char *memory_id, int runs,
                           Reshard__V1__PooledMemory *pooled,
                           Reshard__V1__PlanTransferRequest *req) {
  char **ids = calloc(file->peer_count + 1, sizeof *ids);
  if (ids == NULL) {
    return NULL;
  }
  for (size_t p = 0; p < file->peer_count; p++) {
    ids[p] = file->peers[p].memory_id;
  }
  *pooled = (Reshard__V1__PooledMemory)RESHARD__V1__POOLED_MEMORY__INIT;
  pooled->pool_case = RESHARD__V1__POOLED_MEMORY__POOL_MEMORY_ID;
  pooled->memory_id = (char *)memory_id;
  pooled->n_block_ids = sp->block_count;
  pooled->block_ids = sp->block_ids;
  *req = (Reshard__V1__PlanTransferRequest)
      RESHARD__V1__PLAN_TRANSFER_REQUEST__INIT;
  req->source_case =
      RESHARD__V1__PLAN_TRANSFER_REQUEST__SOURCE_SOURCE_PLACEMENT_ID;
  req->source_placement_id = file->placement_id;
  req->n_source_memory_ids = file->peer_count;
  req->source_memory_ids = ids;
  req->n_source_block_ids = file->block_count;
  req->source_block_ids = file->block_ids;
  req->token_count = t->tokens;
  req->target_case =
      RESHARD__V1__PLAN_TRANSFER_REQUEST__TARGET_TARGET_PLACEMENT_ID;
  req->target_placement_id = (char *)t->target_placement_id;
  req->pooled = pooled;
  req->runs = runs;
  return ids;
}
