/* The Redis catalog (catalog_redis.c): one catalog shared by many daemons
 * (SPEC §3.2), through hiredis's asynchronous API on the daemon's libuv
 * loop. docs/catalog.md describes the keys.
 *
 * Every operation is one round trip (a MULTI/EXEC transaction or a single
 * command), except the first registration against a manifest this
 * connection has not seen, which first checks that the manifest is
 * published. Callbacks run on the loop thread when the reply arrives.
 *
 * Availability: the connection is opened in the background; operations
 * issued before the first connection attempt finishes wait for it. When
 * Redis cannot be reached (refused, closed, or silent for longer than the
 * request timeout) every operation fails at once with UNAVAILABLE and a
 * message naming the catalog and the cause, and the catalog reconnects with
 * a backoff of 100 ms doubling to 5 s; it never blocks the loop, and host
 * names are resolved on libuv's thread pool. */
#ifndef RESHARD_CATALOG_REDIS_H
#define RESHARD_CATALOG_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "catalog/catalog.h"

#define RESHARD_CATALOG_REDIS_BACKOFF_MIN_MS 100
#define RESHARD_CATALOG_REDIS_BACKOFF_MAX_MS 5000
/* A request (or a connection attempt) unanswered for this long drops the
 * connection: its operations fail with UNAVAILABLE and it reconnects. On a
 * cluster it is also each operation's deadline: redirects and retries stop
 * when it has passed since the operation started. */
#define RESHARD_CATALOG_REDIS_TIMEOUT_MS 5000
/* --redis-wait-replicas: how long WAIT waits for the replicas. */
#define RESHARD_CATALOG_REDIS_WAIT_TIMEOUT_MS 1000

/* Opens the catalog named by `spec`
 * ("redis://[[USER]:PASSWORD@]HOST:PORT[/DB]") on `loop` and starts
 * connecting; never waits for Redis. `password` (may be NULL) replaces the
 * URL's. With a password every connection, first or reconnect, begins with
 * AUTH; an AUTH refusal fails operations with UNAVAILABLE like any other
 * connection failure. Messages and logs name the catalog by its address
 * without credentials. INVALID_ARGUMENT for a malformed spec (the message
 * does not repeat a spec holding credentials), INTERNAL when memory runs
 * out. */
reshard_status reshard_catalog_redis_open(uv_loop_t *loop, const char *spec,
                                          const char *password,
                                          reshard_catalog **out,
                                          reshard_error *err);

/* The same, for "redis://..." and for
 * "redis-cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]" (seed
 * nodes; redis_cluster.c says what the cluster client follows). With
 * `wait_replicas` > 0 every write is answered only after
 * WAIT wait_replicas RESHARD_CATALOG_REDIS_WAIT_TIMEOUT_MS, on the
 * write's own connection, counted that many replicas; otherwise the write
 * fails with UNAVAILABLE saying how many it reached. */
reshard_status
reshard_catalog_redis_open_options(uv_loop_t *loop, const char *spec,
                                   const char *password, unsigned wait_replicas,
                                   reshard_catalog **out, reshard_error *err);

/* True while the catalog has a ready connection (a cluster: a slot map and
 * no known primary down). Loop thread only. */
bool reshard_catalog_redis_connected(const reshard_catalog *catalog);

/* Where a page's binding is stored, after "reshard:{D}:": "pages:<n>" for
 * a page key of lowercase hex of even length (stored as its bytes),
 * "pages-raw:<n>" for any other (stored as its text); docs/catalog.md
 * "Page bindings on Redis". False when `size` is too small. For tests and
 * benchmarks that read the keys. */
bool reshard_catalog_redis_page_bucket(const char *page_key, char *out,
                                       size_t size);

#endif
