/* Keeps gRPC's listener alive when file descriptors run out.
 *
 * gRPC 1.51's TCP listener stops accepting for good when accept4 fails
 * with anything but EAGAIN/ECONNABORTED/EINTR: after one burst of
 * connections past RLIMIT_NOFILE (EMFILE), the daemon never serves a new
 * connection again, even once every socket is closed. The executable
 * therefore defines accept4 itself (daemon/guard/accept_guard.c; libgrpc's
 * call binds to it, as the executable comes first in symbol lookup): on
 * EMFILE or ENFILE it frees a reserved descriptor, accepts and closes the
 * pending connections (those clients see their connection closed, at
 * once, instead of hanging), takes the reserve back and reports EAGAIN,
 * which gRPC answers by waiting for the next connection. */
#ifndef RESHARD_ACCEPT_GUARD_H
#define RESHARD_ACCEPT_GUARD_H

#include <stdint.h>

/* Reserves the spare descriptor; call once at start, before serving. */
void reshard_accept_guard_init(void);

/* Connections closed unserved because descriptors ran out. */
uint64_t reshard_accept_guard_refused(void);

#endif
