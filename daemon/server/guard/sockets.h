/* The process's own sockets, found among its open descriptors, for the
 * guards that must act on a connection gRPC owns (reset_guard.h,
 * read_guard.h): gRPC gives no handle on a connection's socket. */
#ifndef RESHARD_SOCKETS_H
#define RESHARD_SOCKETS_H

#include <stdbool.h>

/* Called with each open descriptor; returns false to stop the walk. */
typedef bool (*reshard_each_fd_fn)(int fd, void *data);

/* Walks the descriptors open in the process (/proc/self/fd), not every
 * number up to the limit; false when they cannot be listed. */
bool reshard_each_fd(reshard_each_fd_fn fn, void *data);

/* Whether `fd` is a TCP connection neither end has begun to close: one
 * the daemon shut down already is not (its descriptor stays open until
 * gRPC reads the end of the stream). */
bool reshard_socket_established(int fd);

#endif
