/* Tests daemon/server/abseil.c against the abseil that gRPC loads here. */
#include <criterion/criterion.h>
#include <grpc/grpc.h>

#include "server/abseil.h"

/* Linked with gRPC, the process holds abseil; the setting must be found
 * under one of the names abseil.c knows. When an abseil with another
 * inline namespace fails this, add its mangled name there. */
Test(abseil, finds_the_deadlock_detection_setting) {
  cr_assert(reshard_abseil_ignore_lock_cycles(),
            "absl::SetMutexDeadlockDetectionMode not found in this process");
  /* gRPC runs with the setting applied. */
  grpc_init();
  grpc_shutdown();
}
