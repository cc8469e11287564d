/* Debian builds abseil without NDEBUG, and abseil's default for such a
 * build is OnDeadlockCycle::kAbort: every absl::Mutex that gRPC takes and
 * releases updates a process-wide graph of lock orders (GraphCycles, under
 * one global lock), and a cycle found in it aborts the process with
 * "dying due to potential deadlock". For a daemon that is the wrong trade
 * twice: a lock-order inversion inside gRPC that never deadlocks would end
 * every call in flight, and the bookkeeping costs every call: 5 400 of an
 * empty Check's 59 500 instructions, 7 700 of a pooled PlanLoad's
 * (scripts/call_instructions.py; docs/performance.md, Round 34).
 *
 * The setting is abseil's public absl::SetMutexDeadlockDetectionMode, a C++
 * function: C reaches it by its mangled name, which carries abseil's inline
 * namespace (absl/base/options.h: Debian 12 names it "debian3"; a build without
 * one has none). The name is looked up rather than linked so that reshardd
 * needs neither a C++ compiler nor abseil's packages beyond what gRPC
 * already loads, and so that an abseil of another namespace leaves the
 * daemon running, only with detection as it was built. */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include "server/abseil.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

/* absl::OnDeadlockCycle::kIgnore, the enum's first value (mutex.h). */
enum { ABSEIL_ON_DEADLOCK_CYCLE_IGNORE = 0 };

static const char *const set_mode_names[] = {
    /* absl::debian3::SetMutexDeadlockDetectionMode(OnDeadlockCycle) */
    "_ZN4absl7debian329SetMutexDeadlockDetectionModeENS0_15OnDeadlockCycleE",
    /* absl::SetMutexDeadlockDetectionMode(OnDeadlockCycle) */
    "_ZN4absl29SetMutexDeadlockDetectionModeENS_15OnDeadlockCycleE",
};

bool reshard_abseil_ignore_lock_cycles(void) {
  for (size_t i = 0; i < sizeof set_mode_names / sizeof set_mode_names[0];
       i++) {
    void *symbol = dlsym(RTLD_DEFAULT, set_mode_names[i]);
    if (symbol == NULL) {
      continue;
    }
    /* An enum class of int's underlying type is passed as an int. */
    void (*set_mode)(int);
    memcpy(&set_mode, &symbol, sizeof set_mode);
    set_mode(ABSEIL_ON_DEADLOCK_CYCLE_IGNORE);
    return true;
  }
  return false;
}
