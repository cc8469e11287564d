/* reshard_ucx_peers: the file a serving process publishes so executors can
 * reach its memory — its UCX worker address, and for each participant it
 * serves the memory id reshardd gave the pool and every region with its
 * address, size and packed remote key — plus the source placement id and
 * the DP replica's block table, which a decode instance needs to ask
 * reshardd for the transfer plan (SPEC §2.6).
 *
 * The format is text, one record per line, written to PATH.tmp and renamed
 * to PATH, so a reader that sees the file sees all of it:
 *
 *   reshard-ucx-peers 1
 *   placement <source placement id>
 *   blocks <count> <id> <id> ...
 *   peer <participant id> <memory id> <worker address, hex>
 *   region <participant id> <region id> <address> <nbytes> <rkey, hex>
 *   part <page key> <part index> <layout id> <participant id> <region id>
 *        <offset> <nbytes>
 *   end
 *
 * A process that serves stored Parts (a store, SPEC §2.2) publishes its
 * peer and regions the same way, and one `part` line per Part it serves:
 * Part <part index> of page <page key> in layout <layout id> is <nbytes>
 * bytes at <offset> within region <region id> of peer <participant id>
 * (what reshard_ucx_part holds). A store has no pool placement or block
 * table: its file may omit the `placement` and `blocks` lines, which are
 * otherwise required.
 *
 * Ids never hold blanks (reshardd's ids do not). A real deployment passes
 * the same records through its own control plane; the file is what the
 * examples and tests on one machine use. */
#ifndef RESHARD_UCX_PEERS_H
#define RESHARD_UCX_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "reshard_ucx.h"

typedef struct reshard_ucx_peer_record {
  char *participant_id;
  char *memory_id;
  uint8_t *worker_address;
  size_t worker_address_length;
  reshard_ucx_remote_region *regions; /* strings and keys owned here */
  size_t region_count;
} reshard_ucx_peer_record;

/* One `part` line. */
typedef struct reshard_ucx_part_record {
  char *page_key;
  uint64_t part_index;
  char *layout_id;
  char *participant_id;
  char *region_id;
  uint64_t offset;
  uint64_t nbytes;
} reshard_ucx_part_record;

typedef struct reshard_ucx_peer_file {
  char *placement_id; /* NULL: none (a store's file) */
  uint32_t *block_ids;
  size_t block_count;
  reshard_ucx_peer_record *peers;
  size_t peer_count;
  reshard_ucx_part_record *parts;
  size_t part_count;
} reshard_ucx_peer_file;

/* Writes `file` to `path` (through `path`.tmp and a rename). Returns 0, or
 * -1 with the reason in `msg`. */
int reshard_ucx_peer_file_write(const char *path,
                                const reshard_ucx_peer_file *file, char *msg,
                                size_t msg_size);

/* Reads `path` into `out` (caller-owned; free with
 * reshard_ucx_peer_file_free, also after a failure). Returns 0, or -1 with
 * the line and the reason in `msg`. */
int reshard_ucx_peer_file_read(const char *path, reshard_ucx_peer_file *out,
                               char *msg, size_t msg_size);

void reshard_ucx_peer_file_free(reshard_ucx_peer_file *file);

#endif /* RESHARD_UCX_PEERS_H */
