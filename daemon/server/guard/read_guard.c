#include "server/guard/read_guard.h"

#include <linux/tcp.h> /* tcpi_bytes_received: glibc's tcp_info lacks it */
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "server/guard/sockets.h"

enum {
  /* Looks in a row that close a thread's connection while other threads
   * still return completions. */
  LONG_LOOKS = 8,
  /* Looks after a closing during which the guard keeps sampling and one
   * look with every thread held is enough. */
  AFTER_CLOSE_LOOKS = 8,
  /* A connection a held thread reads: a flood's tiny frames cost the
   * thread its CPU at a few MB/s (3.5 measured), while requests are read
   * at hundreds; a TLS handshake sends a few kilobytes. */
  FLOOD_MIN_BYTES_PER_MS = 512,
  FLOOD_MAX_BYTES_PER_MS = 32 * 1024,
};

void reshard_read_guard_init(reshard_read_guard *guard, unsigned threads,
                             int port) {
  memset(guard, 0, sizeof *guard);
  guard->threads = threads < RESHARD_READ_GUARD_THREADS_MAX
                       ? threads
                       : RESHARD_READ_GUARD_THREADS_MAX;
  guard->port = port;
  guard->looks_since_close = AFTER_CLOSE_LOOKS;
}

void reshard_read_guard_free(reshard_read_guard *guard) {
  free(guard->samples);
  guard->samples = NULL;
  guard->sample_count = 0;
}

/* The local port of socket `fd`, or -1 when it is not an IP socket. */
static int local_port(int fd) {
  struct sockaddr_storage address;
  socklen_t length = sizeof address;
  if (getsockname(fd, (struct sockaddr *)&address, &length) != 0) {
    return -1;
  }
  if (address.ss_family == AF_INET) {
    return ntohs(((const struct sockaddr_in *)&address)->sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(((const struct sockaddr_in6 *)&address)->sin6_port);
  }
  return -1;
}

/* A sample being taken: the connections found so far. */
typedef struct sampling {
  int port;
  reshard_read_sample *samples;
  size_t count, room;
  bool failed;
} sampling;

static bool sample_fd(int fd, void *data) {
  sampling *s = data;
  /* The listener shares the port but is not established. */
  if (local_port(fd) != s->port || !reshard_socket_established(fd)) {
    return true;
  }
  struct tcp_info info;
  socklen_t length = sizeof info;
  struct stat status;
  int unread = 0;
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &length) != 0 ||
      length < offsetof(struct tcp_info, tcpi_bytes_received) +
                   sizeof info.tcpi_bytes_received ||
      ioctl(fd, FIONREAD, &unread) != 0 || unread < 0 ||
      fstat(fd, &status) != 0) {
    return true;
  }
  if (s->count == s->room) {
    size_t room = s->room != 0 ? 2 * s->room : 64;
    reshard_read_sample *grown = realloc(s->samples, room * sizeof *grown);
    if (grown == NULL) {
      s->failed = true;
      return false;
    }
    s->samples = grown;
    s->room = room;
  }
  s->samples[s->count++] = (reshard_read_sample){
      .inode = (uint64_t)status.st_ino,
      .fd = fd,
      .bytes_read = info.tcpi_bytes_received - (uint64_t)unread,
  };
  return true;
}

static int compare_inode(const void *a, const void *b) {
  uint64_t x = ((const reshard_read_sample *)a)->inode;
  uint64_t y = ((const reshard_read_sample *)b)->inode;
  return (x > y) - (x < y);
}

/* Bytes read from `now` since `before` (sorted by inode) counted them;
 * all of them for a connection opened since. */
static uint64_t read_since(const reshard_read_sample *before,
                           size_t before_count,
                           const reshard_read_sample *now) {
  const reshard_read_sample *then =
      before_count == 0
          ? NULL
          : bsearch(now, before, before_count, sizeof *before, compare_inode);
  if (then == NULL) {
    return now->bytes_read;
  }
  return now->bytes_read > then->bytes_read ? now->bytes_read - then->bytes_read
                                            : 0;
}

/* Shuts down the connection of `now` if its descriptor still holds it. */
static bool shut_down(const reshard_read_sample *now) {
  struct stat status;
  /* gRPC sees the end of the stream, closes the transport and ends its
   * calls; the descriptor stays gRPC's to close. */
  return fstat(now->fd, &status) == 0 &&
         (uint64_t)status.st_ino == now->inode &&
         shutdown(now->fd, SHUT_RDWR) == 0;
}

/* Samples the connections to the port at `now_ns` and, when the previous
 * look sampled too and no connection was read at the rate of requests
 * since (which would explain the threads' work), shuts down up to `due` of
 * those read at a flood's rate, the busiest first. */
static unsigned sample_and_close(reshard_read_guard *guard, uint64_t now_ns,
                                 unsigned due) {
  sampling s = {.port = guard->port};
  if (!reshard_each_fd(sample_fd, &s) || s.failed) {
    free(s.samples);
    guard->sampled = false;
    return 0;
  }
  if (s.count > 1) {
    qsort(s.samples, s.count, sizeof *s.samples, compare_inode);
  }
  uint64_t ms = (now_ns - guard->sampled_ns) / 1000000 + 1;
  uint64_t *read = guard->sampled ? calloc(s.count + 1, sizeof *read) : NULL;
  bool explained = read == NULL;
  for (size_t i = 0; i < s.count && !explained; i++) {
    read[i] = read_since(guard->samples, guard->sample_count, &s.samples[i]);
    explained = read[i] > ms * FLOOD_MAX_BYTES_PER_MS;
  }
  unsigned closed = 0;
  /* One at a time: at most as many as queue threads, a handful. */
  for (unsigned round = 0; !explained && round < due; round++) {
    size_t busiest = s.count;
    for (size_t i = 0; i < s.count; i++) {
      if (read[i] >= ms * FLOOD_MIN_BYTES_PER_MS &&
          (busiest == s.count || read[i] > read[busiest])) {
        busiest = i;
      }
    }
    if (busiest == s.count) {
      break;
    }
    if (shut_down(&s.samples[busiest])) {
      closed++;
    }
    read[busiest] = 0; /* not chosen twice */
  }
  free(read);
  free(guard->samples);
  guard->samples = s.samples;
  guard->sample_count = s.count;
  guard->sampled = true;
  guard->sampled_ns = now_ns;
  guard->closed += closed;
  return closed;
}

unsigned reshard_read_guard_look(reshard_read_guard *guard, uint64_t now_ns,
                                 const uint64_t *events,
                                 const uint64_t *cpu_ns) {
  unsigned held = 0, twice = 0, long_held = 0;
  bool nearly_long = false;
  if (guard->seen_ns != 0 && now_ns > guard->seen_ns) {
    uint64_t elapsed = now_ns - guard->seen_ns;
    for (unsigned t = 0; t < guard->threads; t++) {
      uint64_t ran = cpu_ns[t] - guard->cpu_ns[t];
      if (events[t] != guard->events[t] || ran < elapsed / 4) {
        guard->held_looks[t] = 0;
        continue;
      }
      unsigned looks = ++guard->held_looks[t];
      held++;
      twice += looks >= 2;
      long_held += looks >= LONG_LOOKS;
      nearly_long |= looks + 1 >= LONG_LOOKS;
    }
  }
  guard->seen_ns = now_ns;
  memcpy(guard->events, events, guard->threads * sizeof *events);
  memcpy(guard->cpu_ns, cpu_ns, guard->threads * sizeof *cpu_ns);
  /* Right after a closing the threads move on to the flood's other
   * connections, which are readable already: one look finds them. */
  bool after_close = guard->looks_since_close < AFTER_CLOSE_LOOKS;
  guard->looks_since_close += after_close;
  bool all = guard->threads > 0 && held == guard->threads;
  if (guard->port == 0 || !(all || nearly_long || after_close)) {
    guard->sampled = false;
    return 0;
  }
  unsigned due = all && (twice == guard->threads || after_close)
                     ? guard->threads
                     : long_held;
  unsigned closed = sample_and_close(guard, now_ns, due);
  if (closed > 0) {
    guard->looks_since_close = 0;
  }
  return closed;
}
