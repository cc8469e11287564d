/* Settings of abseil, the C++ library under gRPC's mutexes, that gRPC's C
 * API does not reach. */
#ifndef RESHARD_ABSEIL_H
#define RESHARD_ABSEIL_H

#include <stdbool.h>

/* Turns off abseil's lock-order ("deadlock") detection for every
 * absl::Mutex in the process, as an NDEBUG build of abseil has it. Call
 * once, before grpc_init, so before any thread takes one. Returns false when
 * the abseil loaded here exports the setting under none of the names this
 * file knows (detection then stays as abseil was built). */
bool reshard_abseil_ignore_lock_cycles(void);

#endif
