/* Closes connections that open streams only to reset them (HTTP/2 rapid
 * reset, CVE-2023-44487).
 *
 * gRPC 1.51 has none of the later releases' defences: a stream the client
 * resets before the daemon has taken the call stays a server call, tens
 * of kilobytes, in gRPC's queue of calls not yet requested, and the thread
 * that reads the connection keeps reading as long as bytes arrive. One
 * connection sending HEADERS and RST_STREAM pairs grew the daemon by
 * 2.6 GiB in six seconds (docs/security.md). The stream limit does not
 * bind: a reset stream no longer counts.
 *
 * The server notes every call that its client cancelled before its request
 * was read, with gRPC's peer string ("ipv4:10.0.0.7:51234"), which names
 * one connection. A connection past the limit in one second is closed:
 * the daemon finds its socket among its descriptors by the peer address
 * and shuts it down, and gRPC then ends its calls. No client that means
 * its calls resets a thousand of them a second on one connection, before
 * sending their requests: the concurrent-stream cap is 100.
 *
 * Unix-socket peers all share one name and are not closed. Loop thread. */
#ifndef RESHARD_RESET_GUARD_H
#define RESHARD_RESET_GUARD_H

#include <stdint.h>

enum {
  RESHARD_RESET_GUARD_PEERS = 64,   /* connections followed at once */
  RESHARD_RESET_GUARD_PEER_MAX = 96 /* bytes of a peer string kept */
};

typedef struct reshard_reset_peer {
  char peer[RESHARD_RESET_GUARD_PEER_MAX]; /* "" when the entry is free */
  uint64_t window_start_ns;
  uint32_t count; /* resets in the window that started then */
} reshard_reset_peer;

typedef struct reshard_reset_guard {
  uint32_t limit; /* resets a second that close the connection */
  reshard_reset_peer peers[RESHARD_RESET_GUARD_PEERS];
  uint64_t closed; /* connections closed so far */
} reshard_reset_guard;

/* A guard closing connections past `limit` resets in one second. */
void reshard_reset_guard_init(reshard_reset_guard *guard, uint32_t limit);

/* A call from `peer` ended cancelled by its client before its request was
 * read, at `now_ns` (a monotonic clock). When this takes the peer past the
 * limit, its connection is looked for and shut down and the count starts
 * again; returns the sockets shut down (0 otherwise). */
unsigned reshard_reset_guard_note(reshard_reset_guard *guard, const char *peer,
                                  uint64_t now_ns);

/* Shuts down the daemon's sockets connected to `peer` (gRPC's peer
 * string, "ipv4:ADDR:PORT" or "ipv6:[ADDR]:PORT") that were not shut down
 * already; returns how many. */
unsigned reshard_reset_guard_close_peer(const char *peer);

#endif
