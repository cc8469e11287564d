/* reshard-ucx-store: serves the Parts of published pages from UCX-registered
 * memory, for readers that execute PlanLoad plans over UCX
 * (reshard_ucx_execute_load).
 *
 * `--parts DIR` holds the Parts: DIR/index has one line per Part, `<page
 * key> <part index> <layout id> <file>`, the file (relative to DIR)
 * holding the Part's bytes as SPEC §1.3 lays them out. The store places
 * every Part, one after the other, in one region "parts" of memory it
 * registers with UCX — memory UCX allocates (ucp_mem_map ALLOCATE, so
 * UCX's shared-memory transports map it into readers) unless --user-memory
 * gives it an anonymous mapping of its own — and publishes its worker
 * address, the region's remote key and one `part` record per Part in the
 * peers file (reshard_ucx_peers.h), then serves until SIGTERM or SIGINT.
 * `--skip N` serves every Part but the N-th line's (a reader then meets a
 * Part that no peer serves).
 *
 *   reshard-ucx-store --parts DIR --peers FILE [--participant ID]
 *                     [--user-memory] [--skip N]
 *
 * Exit status: 0 after a clean stop, 1 on any failure (printed). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "example_serve.h"
#include "reshard_ucx.h"
#include "reshard_ucx_peers.h"

typedef struct part_file {
  char *page_key, *layout_id, *path;
  uint64_t part_index, nbytes, offset;
} part_file;

/* Reads DIR/index and the size of each Part; 0, or -1 with `msg`. */
static int read_index(const char *dir, part_file **out, size_t *count,
                      char *msg, size_t msg_size) {
  char path[4096];
  snprintf(path, sizeof path, "%s/index", dir);
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(msg, msg_size, "%.900s: cannot open", path);
    return -1;
  }
  char page[1024], layout[256], file[1024];
  unsigned long long part;
  int rc = 0;
  while (rc == 0 && fscanf(f, "%1023s %llu %255s %1023s", page, &part, layout,
                           file) == 4) {
    part_file *grown = realloc(*out, (*count + 1) * sizeof **out);
    if (grown == NULL) {
      snprintf(msg, msg_size, "no memory");
      rc = -1;
      break;
    }
    *out = grown;
    part_file *p = &(*out)[(*count)++];
    memset(p, 0, sizeof *p);
    p->part_index = part;
    p->page_key = strdup(page);
    p->layout_id = strdup(layout);
    if (asprintf(&p->path, "%s/%s", dir, file) < 0) {
      p->path = NULL;
    }
    FILE *g = p->path ? fopen(p->path, "rb") : NULL;
    if (p->page_key == NULL || p->layout_id == NULL || g == NULL) {
      snprintf(msg, msg_size, "%.900s: cannot read Part %.900s", path, file);
      rc = -1;
      if (g != NULL) {
        fclose(g);
      }
      break;
    }
    fseek(g, 0, SEEK_END);
    p->nbytes = (uint64_t)ftell(g);
    fclose(g);
  }
  fclose(f);
  if (rc == 0 && *count == 0) {
    snprintf(msg, msg_size, "%.900s: no Parts", path);
    rc = -1;
  }
  return rc;
}

static int load_bytes(const part_file *p, uint8_t *at, char *msg,
                      size_t msg_size) {
  FILE *g = fopen(p->path, "rb");
  size_t got = g ? fread(at, 1, p->nbytes, g) : 0;
  if (g != NULL) {
    fclose(g);
  }
  if (got != p->nbytes) {
    snprintf(msg, msg_size, "%.900s: short read", p->path);
    return -1;
  }
  return 0;
}

int main(int argc, char **argv) {
  const char *dir = NULL, *peers = NULL, *participant = "store0";
  int user_memory = 0;
  long long skip = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--user-memory") == 0) {
      user_memory = 1;
    } else if (v != NULL && strcmp(a, "--parts") == 0) {
      dir = argv[++i];
    } else if (v != NULL && strcmp(a, "--peers") == 0) {
      peers = argv[++i];
    } else if (v != NULL && strcmp(a, "--participant") == 0) {
      participant = argv[++i];
    } else if (v != NULL && strcmp(a, "--skip") == 0) {
      skip = strtoll(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "store: unknown or incomplete option %s\n", a);
      return 2;
    }
  }
  if (dir == NULL || peers == NULL) {
    fprintf(stderr, "usage: reshard-ucx-store --parts DIR --peers FILE "
                    "[--participant ID] [--user-memory] [--skip N]\n");
    return 2;
  }
  example_catch_stop_signals();
  char msg[2048] = "";
  int rc = 1;
  part_file *parts = NULL;
  size_t count = 0;
  reshard_ucx *ux = NULL;
  reshard_ucx_memory *memory = NULL;
  void *mapped = MAP_FAILED;
  uint64_t total = 0;
  reshard_ucx_error uerr = {0};
  reshard_ucx_peer_file file = {0};
  reshard_ucx_peer_record rec = {0};
  reshard_ucx_remote_region region = {0};

  if (read_index(dir, &parts, &count, msg, sizeof msg) != 0) {
    goto out;
  }
  for (size_t i = 0; i < count; i++) {
    parts[i].offset = total;
    total += (parts[i].nbytes + 63) / 64 * 64; /* Parts 64-byte aligned */
  }
  if (reshard_ucx_open(&ux, &uerr) != 0) {
    snprintf(msg, sizeof msg, "%s", uerr.message);
    goto out;
  }
  reshard_ucx_region want = {.region_id = "parts", .nbytes = total};
  int ok;
  if (user_memory) {
    mapped = mmap(NULL, total, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == MAP_FAILED) {
      snprintf(msg, sizeof msg, "mmap of %llu bytes failed",
               (unsigned long long)total);
      goto out;
    }
    want.address = mapped;
    ok = reshard_ucx_memory_register(ux, &want, 1, &memory, &uerr);
  } else {
    ok = reshard_ucx_memory_allocate(ux, &want, 1, &memory, &uerr);
  }
  if (ok != 0) {
    snprintf(msg, sizeof msg, "%s", uerr.message);
    goto out;
  }
  const void *rkey;
  size_t rkey_length;
  const reshard_ucx_region *reg =
      reshard_ucx_memory_region(memory, 0, &rkey, &rkey_length);
  uint8_t *base = reg->address;
  file.parts = calloc(count, sizeof *file.parts);
  if (file.parts == NULL) {
    snprintf(msg, sizeof msg, "no memory");
    goto out;
  }
  for (size_t i = 0; i < count; i++) {
    if (load_bytes(&parts[i], base + parts[i].offset, msg, sizeof msg) != 0) {
      goto out;
    }
    if ((long long)i == skip) {
      continue;
    }
    file.parts[file.part_count++] = (reshard_ucx_part_record){
        .page_key = parts[i].page_key,
        .part_index = parts[i].part_index,
        .layout_id = parts[i].layout_id,
        .participant_id = (char *)participant,
        .region_id = "parts",
        .offset = parts[i].offset,
        .nbytes = parts[i].nbytes,
    };
  }
  const void *address;
  size_t address_length;
  reshard_ucx_worker_address(ux, &address, &address_length);
  region = (reshard_ucx_remote_region){"parts", (uint64_t)(uintptr_t)base,
                                       total, rkey, rkey_length};
  rec = (reshard_ucx_peer_record){
      .participant_id = (char *)participant,
      .memory_id = "-",
      .worker_address = (uint8_t *)address,
      .worker_address_length = address_length,
      .regions = &region,
      .region_count = 1,
  };
  file.peers = &rec;
  file.peer_count = 1;
  if (reshard_ucx_peer_file_write(peers, &file, msg, sizeof msg) != 0) {
    goto out;
  }
  printf("store: %zu Parts, %llu bytes in %s memory, served by %s from pid "
         "%d\n",
         file.part_count, (unsigned long long)total,
         user_memory ? "its own" : "UCX-allocated", participant, (int)getpid());
  if (example_serve_until_stopped(ux, msg, sizeof msg) != 0) {
    goto out;
  }
  rc = 0;
out:
  if (rc != 0) {
    fprintf(stderr, "store: error: %s\n", msg);
  }
  remove(peers);
  free(file.parts);
  reshard_ucx_memory_release(memory);
  if (mapped != MAP_FAILED) {
    munmap(mapped, total);
  }
  reshard_ucx_close(ux);
  for (size_t i = 0; i < count; i++) {
    free(parts[i].page_key);
    free(parts[i].layout_id);
    free(parts[i].path);
  }
  free(parts);
  return rc;
}
