/* The peers file of reshard_ucx_peers.h: writing and parsing. */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reshard_ucx_peers.h"

static void put_hex(FILE *f, const void *bytes, size_t n) {
  const uint8_t *p = bytes;
  for (size_t i = 0; i < n; i++) {
    fprintf(f, "%02x", p[i]);
  }
}

int reshard_ucx_peer_file_write(const char *path,
                                const reshard_ucx_peer_file *file, char *msg,
                                size_t msg_size) {
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (f == NULL) {
    snprintf(msg, msg_size, "%s: %s", tmp, strerror(errno));
    return -1;
  }
  fputs("reshard-ucx-peers 1\n", f);
  if (file->placement_id != NULL) {
    fprintf(f, "placement %s\nblocks %zu", file->placement_id,
            file->block_count);
    for (size_t i = 0; i < file->block_count; i++) {
      fprintf(f, " %" PRIu32, file->block_ids[i]);
    }
    fputc('\n', f);
  }
  for (size_t p = 0; p < file->peer_count; p++) {
    const reshard_ucx_peer_record *r = &file->peers[p];
    fprintf(f, "peer %s %s ", r->participant_id, r->memory_id);
    put_hex(f, r->worker_address, r->worker_address_length);
    fputc('\n', f);
    for (size_t i = 0; i < r->region_count; i++) {
      const reshard_ucx_remote_region *g = &r->regions[i];
      fprintf(f, "region %s %s %" PRIu64 " %" PRIu64 " ", r->participant_id,
              g->region_id, g->address, g->nbytes);
      put_hex(f, g->rkey, g->rkey_length);
      fputc('\n', f);
    }
  }
  for (size_t i = 0; i < file->part_count; i++) {
    const reshard_ucx_part_record *t = &file->parts[i];
    fprintf(f, "part %s %" PRIu64 " %s %s %s %" PRIu64 " %" PRIu64 "\n",
            t->page_key, t->part_index, t->layout_id, t->participant_id,
            t->region_id, t->offset, t->nbytes);
  }
  fputs("end\n", f);
  if (fclose(f) != 0 || rename(tmp, path) != 0) {
    snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
    remove(tmp);
    return -1;
  }
  return 0;
}

void reshard_ucx_peer_file_free(reshard_ucx_peer_file *file) {
  for (size_t p = 0; p < file->peer_count; p++) {
    reshard_ucx_peer_record *r = &file->peers[p];
    for (size_t i = 0; i < r->region_count; i++) {
      free((char *)r->regions[i].region_id);
      free((void *)r->regions[i].rkey);
    }
    free(r->regions);
    free(r->participant_id);
    free(r->memory_id);
    free(r->worker_address);
  }
  for (size_t i = 0; i < file->part_count; i++) {
    reshard_ucx_part_record *t = &file->parts[i];
    free(t->page_key);
    free(t->layout_id);
    free(t->participant_id);
    free(t->region_id);
  }
  free(file->parts);
  free(file->peers);
  free(file->block_ids);
  free(file->placement_id);
  memset(file, 0, sizeof *file);
}

/* Decodes hex `text` into a malloc'd buffer; NULL when it is not hex. */
static uint8_t *get_hex(const char *text, size_t *n) {
  size_t len = strlen(text);
  if (len == 0 || len % 2 != 0) {
    return NULL;
  }
  uint8_t *out = malloc(len / 2);
  for (size_t i = 0; out != NULL && i < len / 2; i++) {
    unsigned v;
    if (sscanf(text + 2 * i, "%2x", &v) != 1) {
      free(out);
      return NULL;
    }
    out[i] = (uint8_t)v;
  }
  *n = len / 2;
  return out;
}

static reshard_ucx_peer_record *find_peer(reshard_ucx_peer_file *f,
                                          const char *id) {
  for (size_t p = 0; p < f->peer_count; p++) {
    if (strcmp(f->peers[p].participant_id, id) == 0) {
      return &f->peers[p];
    }
  }
  return NULL;
}

/* One line; 0, or -1 with the reason in msg. */
static int parse_line(reshard_ucx_peer_file *f, char *line, char *msg,
                      size_t msg_size) {
  char *save = NULL;
  char *word = strtok_r(line, " \n", &save);
  if (word == NULL) {
    return 0;
  }
  if (strcmp(word, "placement") == 0) {
    char *id = strtok_r(NULL, " \n", &save);
    free(f->placement_id);
    f->placement_id = id ? strdup(id) : NULL;
    return f->placement_id ? 0
                           : (snprintf(msg, msg_size, "no placement id"), -1);
  }
  if (strcmp(word, "blocks") == 0) {
    char *n = strtok_r(NULL, " \n", &save);
    size_t count = n ? strtoull(n, NULL, 10) : 0;
    free(f->block_ids);
    f->block_ids = calloc(count + 1, sizeof *f->block_ids);
    f->block_count = 0;
    for (char *v; f->block_ids && (v = strtok_r(NULL, " \n", &save));) {
      if (f->block_count == count) {
        break;
      }
      f->block_ids[f->block_count++] = (uint32_t)strtoul(v, NULL, 10);
    }
    if (f->block_ids == NULL || f->block_count != count) {
      snprintf(msg, msg_size, "blocks: %zu ids for a count of %zu",
               f->block_count, count);
      return -1;
    }
    return 0;
  }
  if (strcmp(word, "peer") == 0) {
    char *id = strtok_r(NULL, " \n", &save);
    char *mid = strtok_r(NULL, " \n", &save);
    char *hex = strtok_r(NULL, " \n", &save);
    reshard_ucx_peer_record *grown =
        realloc(f->peers, (f->peer_count + 1) * sizeof *f->peers);
    if (grown == NULL) {
      snprintf(msg, msg_size, "no memory");
      return -1;
    }
    f->peers = grown;
    reshard_ucx_peer_record *r = &f->peers[f->peer_count++];
    memset(r, 0, sizeof *r);
    if (id == NULL || mid == NULL || hex == NULL ||
        (r->participant_id = strdup(id)) == NULL ||
        (r->memory_id = strdup(mid)) == NULL ||
        (r->worker_address = get_hex(hex, &r->worker_address_length)) == NULL) {
      snprintf(msg, msg_size, "peer: want <participant> <memory id> <hex>");
      return -1;
    }
    return 0;
  }
  if (strcmp(word, "region") == 0) {
    char *id = strtok_r(NULL, " \n", &save);
    char *rid = strtok_r(NULL, " \n", &save);
    char *addr = strtok_r(NULL, " \n", &save);
    char *size = strtok_r(NULL, " \n", &save);
    char *hex = strtok_r(NULL, " \n", &save);
    reshard_ucx_peer_record *r = id ? find_peer(f, id) : NULL;
    if (r == NULL || rid == NULL || addr == NULL || size == NULL ||
        hex == NULL) {
      snprintf(msg, msg_size,
               "region: want <known participant> <region> <address> "
               "<nbytes> <hex>");
      return -1;
    }
    reshard_ucx_remote_region *grown =
        realloc(r->regions, (r->region_count + 1) * sizeof *r->regions);
    if (grown == NULL) {
      snprintf(msg, msg_size, "no memory");
      return -1;
    }
    r->regions = grown;
    reshard_ucx_remote_region *g = &r->regions[r->region_count++];
    memset(g, 0, sizeof *g);
    g->address = strtoull(addr, NULL, 10);
    g->nbytes = strtoull(size, NULL, 10);
    g->region_id = strdup(rid);
    g->rkey = get_hex(hex, &g->rkey_length);
    if (g->region_id == NULL || g->rkey == NULL) {
      snprintf(msg, msg_size, "region %s: a bad remote key", rid);
      return -1;
    }
    return 0;
  }
  if (strcmp(word, "part") == 0) {
    char *f_[7];
    for (int k = 0; k < 7; k++) {
      f_[k] = strtok_r(NULL, " \n", &save);
      if (f_[k] == NULL) {
        snprintf(msg, msg_size,
                 "part: want <page key> <part index> <layout id> "
                 "<participant> <region> <offset> <nbytes>");
        return -1;
      }
    }
    if (find_peer(f, f_[3]) == NULL) {
      snprintf(msg, msg_size, "part: peer %s has no peer record", f_[3]);
      return -1;
    }
    reshard_ucx_part_record *grown =
        realloc(f->parts, (f->part_count + 1) * sizeof *f->parts);
    if (grown == NULL) {
      snprintf(msg, msg_size, "no memory");
      return -1;
    }
    f->parts = grown;
    reshard_ucx_part_record *t = &f->parts[f->part_count++];
    *t = (reshard_ucx_part_record){
        .page_key = strdup(f_[0]),
        .part_index = strtoull(f_[1], NULL, 10),
        .layout_id = strdup(f_[2]),
        .participant_id = strdup(f_[3]),
        .region_id = strdup(f_[4]),
        .offset = strtoull(f_[5], NULL, 10),
        .nbytes = strtoull(f_[6], NULL, 10),
    };
    if (t->page_key == NULL || t->layout_id == NULL ||
        t->participant_id == NULL || t->region_id == NULL) {
      snprintf(msg, msg_size, "no memory");
      return -1;
    }
    return 0;
  }
  if (strcmp(word, "end") == 0 || strcmp(word, "reshard-ucx-peers") == 0) {
    return 0;
  }
  snprintf(msg, msg_size, "unknown record %s", word);
  return -1;
}

int reshard_ucx_peer_file_read(const char *path, reshard_ucx_peer_file *out,
                               char *msg, size_t msg_size) {
  memset(out, 0, sizeof *out);
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(msg, msg_size, "%s: %s", path, strerror(errno));
    return -1;
  }
  char *line = NULL;
  size_t cap = 0;
  int rc = 0;
  bool ended = false;
  for (size_t n = 1; rc == 0 && getline(&line, &cap, f) > 0; n++) {
    char why[512] = "";
    ended = strncmp(line, "end", 3) == 0;
    if (n == 1 && strncmp(line, "reshard-ucx-peers 1", 19) != 0) {
      snprintf(msg, msg_size, "%s: not a reshard-ucx-peers 1 file", path);
      rc = -1;
    } else if (parse_line(out, line, why, sizeof why) != 0) {
      snprintf(msg, msg_size, "%s:%zu: %s", path, n, why);
      rc = -1;
    }
  }
  free(line);
  fclose(f);
  if (rc == 0 &&
      (!ended || (out->placement_id == NULL && out->part_count == 0))) {
    snprintf(msg, msg_size,
             "%s: truncated (no end record, or neither a placement nor "
             "parts)",
             path);
    rc = -1;
  }
  return rc;
}
