/* reshard-ucx-load: executes a PlanLoad plan over UCX from the stores that
 * serve its Parts (reshard-ucx-store), into memory of its own.
 *
 * `--plan FILE` is a serialized PlanLoadResponse (as reshardd sent it);
 * `--regions FILE` lists the reader's regions, one `<region id> <nbytes>`
 * per line (the binding the plan was made for). The loader gives each
 * region zeroed memory, registers it with UCX, connects to every peer of
 * every `--peers FILE` (a store's peers file with its `part` records),
 * executes the plan (reshard_ucx_execute_load) and writes every region's
 * bytes, in the regions file's order, to `--out FILE` for the caller to
 * check. --skip-register leaves the regions unregistered (the executor
 * then refuses the plan).
 *
 *   reshard-ucx-load --plan FILE --regions FILE --peers FILE [--peers ...]
 *                    --out FILE [--skip-register] [--batch-timeout-ms N]
 *
 * Prints `load: <bytes> bytes, <gets> gets, <batches> batches, <entries>
 * entries`. Exit status: 0 when the plan completed, 1 on any failure
 * (printed as `load: error: ...`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "reshard_ucx.h"
#include "reshard_ucx_peers.h"

#define MAX_PEER_FILES 8

static uint8_t *read_all(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(size > 0 ? (size_t)size : 1);
  if (buf != NULL && fread(buf, 1, (size_t)size, f) != (size_t)size) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  *n = (size_t)size;
  return buf;
}

int main(int argc, char **argv) {
  const char *plan_path = NULL, *regions_path = NULL, *out_path = NULL;
  const char *peer_paths[MAX_PEER_FILES];
  size_t peer_files = 0;
  int skip_register = 0;
  reshard_ucx_options opts = {0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--skip-register") == 0) {
      skip_register = 1;
    } else if (v != NULL && strcmp(a, "--plan") == 0) {
      plan_path = argv[++i];
    } else if (v != NULL && strcmp(a, "--regions") == 0) {
      regions_path = argv[++i];
    } else if (v != NULL && strcmp(a, "--out") == 0) {
      out_path = argv[++i];
    } else if (v != NULL && strcmp(a, "--peers") == 0 &&
               peer_files < MAX_PEER_FILES) {
      peer_paths[peer_files++] = argv[++i];
    } else if (v != NULL && strcmp(a, "--batch-timeout-ms") == 0) {
      opts.batch_timeout_ms = strtoll(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "load: unknown or incomplete option %s\n", a);
      return 2;
    }
  }
  if (plan_path == NULL || regions_path == NULL || out_path == NULL ||
      peer_files == 0) {
    fprintf(stderr, "usage: reshard-ucx-load --plan FILE --regions FILE "
                    "--peers FILE [--peers FILE ...] --out FILE "
                    "[--skip-register] [--batch-timeout-ms N]\n");
    return 2;
  }
  char msg[2048] = "";
  int rc = 1;
  uint8_t *raw = NULL;
  size_t raw_size = 0;
  Reshard__V1__PlanLoadResponse *plan = NULL;
  reshard_ucx *ux = NULL;
  reshard_ucx_memory *memory = NULL;
  reshard_ucx_region *regions = NULL;
  size_t region_count = 0;
  reshard_ucx_peer_file files[MAX_PEER_FILES];
  memset(files, 0, sizeof files);
  reshard_ucx_peer **peers = NULL;
  size_t peer_count = 0;
  reshard_ucx_part *parts = NULL;
  size_t part_count = 0;
  reshard_ucx_error uerr = {0};

  raw = read_all(plan_path, &raw_size);
  plan =
      raw ? reshard__v1__plan_load_response__unpack(NULL, raw_size, raw) : NULL;
  if (plan == NULL) {
    snprintf(msg, sizeof msg, "%s: not a PlanLoadResponse", plan_path);
    goto out;
  }
  FILE *rf = fopen(regions_path, "r");
  if (rf == NULL) {
    snprintf(msg, sizeof msg, "%s: cannot open", regions_path);
    goto out;
  }
  char id[512];
  unsigned long long nbytes;
  while (fscanf(rf, "%511s %llu", id, &nbytes) == 2) {
    reshard_ucx_region *grown =
        realloc(regions, (region_count + 1) * sizeof *regions);
    char *copy = strdup(id);
    void *mem = nbytes ? calloc(1, nbytes) : NULL;
    if (grown != NULL) {
      regions = grown;
    }
    if (grown == NULL || copy == NULL || mem == NULL) {
      free(copy);
      free(mem);
      fclose(rf);
      snprintf(msg, sizeof msg, "no memory for region %s", id);
      goto out;
    }
    regions[region_count++] = (reshard_ucx_region){
        .region_id = copy, .address = mem, .nbytes = nbytes};
  }
  fclose(rf);
  if (reshard_ucx_open(&ux, &uerr) != 0) {
    snprintf(msg, sizeof msg, "%s", uerr.message);
    goto out;
  }
  if (!skip_register && reshard_ucx_memory_register(ux, regions, region_count,
                                                    &memory, &uerr) != 0) {
    snprintf(msg, sizeof msg, "%s", uerr.message);
    goto out;
  }
  for (size_t f = 0; f < peer_files; f++) {
    for (int i = 0; i < 600 && access(peer_paths[f], F_OK) != 0; i++) {
      usleep(100 * 1000);
    }
    if (reshard_ucx_peer_file_read(peer_paths[f], &files[f], msg, sizeof msg) !=
        0) {
      goto out;
    }
    reshard_ucx_peer **grown =
        realloc(peers, (peer_count + files[f].peer_count + 1) * sizeof *peers);
    reshard_ucx_part *more =
        realloc(parts, (part_count + files[f].part_count + 1) * sizeof *parts);
    if (grown != NULL) {
      peers = grown;
    }
    if (more != NULL) {
      parts = more;
    }
    if (grown == NULL || more == NULL) {
      snprintf(msg, sizeof msg, "no memory");
      goto out;
    }
    size_t first = peer_count;
    for (size_t p = 0; p < files[f].peer_count; p++) {
      const reshard_ucx_peer_record *r = &files[f].peers[p];
      if (reshard_ucx_peer_connect(ux, r->participant_id, r->worker_address,
                                   r->worker_address_length, r->regions,
                                   r->region_count, &peers[peer_count],
                                   &uerr) != 0) {
        snprintf(msg, sizeof msg, "%s", uerr.message);
        goto out;
      }
      peer_count++;
    }
    for (size_t k = 0; k < files[f].part_count; k++) {
      const reshard_ucx_part_record *t = &files[f].parts[k];
      reshard_ucx_peer *peer = NULL;
      for (size_t p = first; p < peer_count && peer == NULL; p++) {
        if (strcmp(files[f].peers[p - first].participant_id,
                   t->participant_id) == 0) {
          peer = peers[p];
        }
      }
      parts[part_count++] = (reshard_ucx_part){
          .page_key = t->page_key,
          .part_index = t->part_index,
          .layout_id = t->layout_id,
          .peer = peer,
          .region_id = t->region_id,
          .offset = t->offset,
          .nbytes = t->nbytes,
      };
    }
  }
  reshard_ucx_result result = {0};
  if (reshard_ucx_execute_load(ux, plan, parts, part_count, memory, &opts,
                               &result, &uerr) != 0) {
    snprintf(msg, sizeof msg, "%s", uerr.message);
    goto out;
  }
  uint64_t entries = 0;
  for (size_t b = 0; b < plan->n_batches; b++) {
    entries += plan->batches[b]->n_nbytes;
  }
  FILE *of = fopen(out_path, "wb");
  for (size_t r = 0; of != NULL && r < region_count; r++) {
    fwrite(regions[r].address, 1, regions[r].nbytes, of);
  }
  if (of == NULL || fclose(of) != 0) {
    snprintf(msg, sizeof msg, "%s: cannot write", out_path);
    goto out;
  }
  printf("load: %llu bytes, %llu gets, %llu batches, %llu entries\n",
         (unsigned long long)result.bytes, (unsigned long long)result.gets,
         (unsigned long long)result.batches, (unsigned long long)entries);
  rc = 0;
out:
  if (rc != 0) {
    fprintf(stderr, "load: error: %s\n", msg);
  }
  for (size_t p = 0; p < peer_count; p++) {
    reshard_ucx_peer_close(peers[p]);
  }
  free(peers);
  free(parts);
  for (size_t f = 0; f < peer_files; f++) {
    reshard_ucx_peer_file_free(&files[f]);
  }
  reshard_ucx_memory_release(memory);
  reshard_ucx_close(ux);
  for (size_t r = 0; r < region_count; r++) {
    free((char *)regions[r].region_id);
    free(regions[r].address);
  }
  free(regions);
  if (plan != NULL) {
    reshard__v1__plan_load_response__free_unpacked(plan, NULL);
  }
  free(raw);
  return rc;
}
