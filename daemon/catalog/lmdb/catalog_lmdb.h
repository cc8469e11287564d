/* The LMDB catalog (catalog_lmdb.c): embedded and durable, the daemon's
 * default (SPEC §3.2). Records live in named databases of one LMDB
 * environment under a directory; docs/catalog.md describes the layout.
 *
 * Writes (put_manifest, add_pages, forget_pages, put_object, forget_object)
 * run on a dedicated writer thread that commits them, several requests per
 * transaction, with LMDB's default synchronous commits; a callback reports
 * success only after the commit reached the disk. Reads (get_manifests,
 * lookup_pages, get_objects) run on the loop thread against LMDB's memory
 * map and complete before they return. Writes that would change nothing (a
 * manifest already published, bindings that all exist already, forgetting
 * what is not bound; for objects, only while no write is pending) are
 * answered from a read on the loop thread without a commit. */
#ifndef RESHARD_CATALOG_LMDB_H
#define RESHARD_CATALOG_LMDB_H

#include <stdint.h>
#include <uv.h>

#include "catalog/catalog.h"

/* 64 GiB of address space: the map only reserves it; the file grows with
 * the data. */
#define RESHARD_CATALOG_LMDB_DEFAULT_MAP_SIZE (64ull << 30)

/* The catalog format (the `meta` record, "reshardd-catalog N"). This build
 * creates version 2 (page keys of lowercase hex stored packed) and opens
 * versions 1 (every page key raw) and 2, each going on as it was written;
 * a build that knows version 1 only refuses version 2. */
#define RESHARD_CATALOG_LMDB_FORMAT "reshardd-catalog"
#define RESHARD_CATALOG_LMDB_VERSION 2u
#define RESHARD_CATALOG_LMDB_OLDEST_VERSION 1u

/* Opens (creating it when missing) the catalog in directory `path` on
 * `loop`, with a memory map of `map_size` bytes (0: the default above).
 * Refuses, touching no byte of it, a directory holding files other than
 * LMDB's data.mdb and lock.mdb, a data.mdb that is not an LMDB environment,
 * and an LMDB environment that is not a reshardd catalog of a version this
 * build reads: INVALID_ARGUMENT with a message naming `path`. INTERNAL when
 * memory or a thread cannot be had. */
reshard_status reshard_catalog_lmdb_open(uv_loop_t *loop, const char *path,
                                         uint64_t map_size,
                                         reshard_catalog **out,
                                         reshard_error *err);

/* Counters of the writer, for tests and logs: transactions committed and
 * write requests they carried. Loop thread only. */
typedef struct reshard_catalog_lmdb_stats {
  uint64_t commits;
  uint64_t writes;
  uint64_t writes_skipped; /* answered from a read, no commit needed */
} reshard_catalog_lmdb_stats;
void reshard_catalog_lmdb_stats_get(const reshard_catalog *catalog,
                                    reshard_catalog_lmdb_stats *out);

#endif
