/* Closes the connections that keep the completion-queue threads reading
 * without end.
 *
 * gRPC 1.51's thread that reads a connection keeps reading it for as long
 * as its bytes arrive, without returning a completion (reset_guard.h). A
 * rapid-reset flood makes streams that gRPC keeps as calls and never
 * reports, so a thread reading one returns nothing, and a flood on as many
 * connections as there are queue threads holds all of them: no event
 * reaches the loop and nothing that counts calls can act (four connections
 * grew the daemon by 5.8 GiB in 10 s, docs/security.md). What still shows
 * is the threads: one that returned no completion since the last look,
 * while it ran for at least a quarter of that time, is held.
 *
 * Which connection holds it shows in the bytes read from each (received,
 * TCP_INFO, less those still queued): a flood's tiny frames take a
 * thread's CPU at a few MB/s, while a thread reading requests reads
 * hundreds; a handshake sends a few kilobytes. When every thread is held
 * at two looks in a row, the guard shuts down, one per thread, the
 * connections read at a flood's rate since the first, the busiest first; right
 * after a closing one such look is enough, as the threads move on to the
 * flood's other connections. A thread held while others still return
 * completions is left to the reset guard (the others deliver the flood's
 * calls), unless it stays held for 200 ms: they may be busy with a backlog for
 * seconds.
 *
 * A flood of larger frames is read at the rate of requests and is not
 * closed here; it costs memory in proportion to its bytes, not thousands
 * of times more (docs/security.md). Loop thread. TCP listeners only: a
 * Unix socket keeps no count of bytes received. */
#ifndef RESHARD_READ_GUARD_H
#define RESHARD_READ_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum { RESHARD_READ_GUARD_THREADS_MAX = 8 };

/* One connection's count at a sample. */
typedef struct reshard_read_sample {
  uint64_t inode; /* the socket: a descriptor number may be reused */
  int fd;
  uint64_t bytes_read; /* received (TCP_INFO) less those not yet read */
} reshard_read_sample;

typedef struct reshard_read_guard {
  unsigned threads;
  int port;         /* the gRPC listener's port; 0: none */
  uint64_t seen_ns; /* the last look; 0 before the first */
  uint64_t events[RESHARD_READ_GUARD_THREADS_MAX]; /* completions returned */
  uint64_t cpu_ns[RESHARD_READ_GUARD_THREADS_MAX]; /* CPU time, as seen */
  unsigned held_looks[RESHARD_READ_GUARD_THREADS_MAX]; /* in a row */
  reshard_read_sample *samples; /* the last sample, sorted by inode */
  size_t sample_count;
  bool sampled;        /* the last look sampled */
  uint64_t sampled_ns; /* when */
  unsigned looks_since_close;
  uint64_t closed; /* connections shut down so far */
} reshard_read_guard;

/* A guard for `threads` queue threads (at most the maximum) serving TCP
 * `port` (0: none; the guard never acts). Allocates nothing. */
void reshard_read_guard_init(reshard_read_guard *guard, unsigned threads,
                             int port);

/* Frees the last sample. */
void reshard_read_guard_free(reshard_read_guard *guard);

/* Looks at the threads at `now_ns` (a monotonic clock), given each one's
 * completions returned so far and its CPU time in ns, and acts as above.
 * Returns the connections shut down. */
unsigned reshard_read_guard_look(reshard_read_guard *guard, uint64_t now_ns,
                                 const uint64_t *events,
                                 const uint64_t *cpu_ns);

#endif
