/* Tests daemon/inflight.c: admission within the limit, strict arrival
 * order, cancellation of a waiter, charges and releases. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "memory/inflight.h"

enum { WAITERS = 4 };

static reshard_inflight_waiter waiters[WAITERS];
static int admitted_order[WAITERS];
static int admitted_count;

static void on_admit(reshard_inflight_waiter *waiter) {
  admitted_order[admitted_count++] = (int)(waiter - waiters);
}

static void setup(void) {
  memset(waiters, 0, sizeof waiters);
  admitted_count = 0;
}

TestSuite(inflight, .init = setup);

Test(inflight, admits_while_there_is_room) {
  reshard_inflight f;
  reshard_inflight_init(&f, 100);
  cr_assert(reshard_inflight_acquire(&f, &waiters[0], 60, 0, on_admit));
  cr_assert(reshard_inflight_acquire(&f, &waiters[1], 40, 0, on_admit));
  cr_assert_eq(f.used, 100);
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[2], 1, 0, on_admit));
  cr_assert_eq(f.waiting, 1);
  cr_assert_eq(admitted_count, 0);
  reshard_inflight_release(&f, 60);
  cr_assert_eq(admitted_count, 1);
  cr_assert_eq(admitted_order[0], 2);
  cr_assert_eq(f.used, 41);
  cr_assert_eq(f.waiting, 0);
}

Test(inflight, a_small_call_never_overtakes_a_large_one) {
  reshard_inflight f;
  reshard_inflight_init(&f, 100);
  cr_assert(reshard_inflight_acquire(&f, &waiters[0], 90, 0, on_admit));
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[1], 50, 0, on_admit));
  /* 5 would fit now, but 50 arrived first. */
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[2], 5, 0, on_admit));
  cr_assert_eq(f.waiting, 2);
  reshard_inflight_release(&f, 90);
  cr_assert_eq(admitted_count, 2);
  cr_assert_eq(admitted_order[0], 1);
  cr_assert_eq(admitted_order[1], 2);
  cr_assert_eq(f.used, 55);
}

Test(inflight, a_cancelled_head_lets_the_next_in) {
  reshard_inflight f;
  reshard_inflight_init(&f, 100);
  cr_assert(reshard_inflight_acquire(&f, &waiters[0], 70, 0, on_admit));
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[1], 50, 0, on_admit));
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[2], 30, 0, on_admit));
  reshard_inflight_cancel(&f, &waiters[1]); /* its deadline passed */
  cr_assert_eq(admitted_count, 1);
  cr_assert_eq(admitted_order[0], 2);
  cr_assert_eq(f.used, 100);
  cr_assert_eq(f.waiting, 0);
  reshard_inflight_cancel(&f, &waiters[1]); /* not queued: no effect */
  cr_assert_eq(f.used, 100);
}

Test(inflight, a_call_larger_than_the_limit_runs_alone) {
  reshard_inflight f;
  reshard_inflight_init(&f, 100);
  cr_assert(reshard_inflight_acquire(&f, &waiters[0], 10, 0, on_admit));
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[1], 500, 0, on_admit));
  reshard_inflight_release(&f, 10);
  cr_assert_eq(admitted_count, 1);
  cr_assert_eq(f.used, 500);
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[2], 1, 0, on_admit));
}

Test(inflight, charges_grow_without_waiting_and_release_saturates) {
  reshard_inflight f;
  reshard_inflight_init(&f, 100);
  cr_assert(reshard_inflight_acquire(&f, &waiters[0], 50, 0, on_admit));
  reshard_inflight_charge(&f, 80); /* the response exists already */
  cr_assert_eq(f.used, 130);
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[1], 10, 0, on_admit));
  reshard_inflight_release(&f, 130);
  cr_assert_eq(f.used, 10);
  reshard_inflight_release(&f, 1000);
  cr_assert_eq(f.used, 0);
}

Test(inflight, zero_means_unlimited) {
  reshard_inflight f;
  reshard_inflight_init(&f, 0);
  cr_assert(
      reshard_inflight_acquire(&f, &waiters[0], UINT64_MAX / 2, 0, on_admit));
  cr_assert(
      reshard_inflight_acquire(&f, &waiters[1], UINT64_MAX / 2, 0, on_admit));
}

Test(inflight, calls_holding_and_waiting_never_block_each_other) {
  /* Two calls hold 40 each and both want 60 more: once every byte in use
   * is held by waiters, the head goes ahead past the limit. */
  reshard_inflight f;
  reshard_inflight_init(&f, 100);
  cr_assert(reshard_inflight_acquire(&f, &waiters[0], 40, 0, on_admit));
  cr_assert(reshard_inflight_acquire(&f, &waiters[1], 40, 0, on_admit));
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[2], 60, 40, on_admit));
  cr_assert_eq(admitted_count, 0, "the other call still runs");
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[3], 60, 40, on_admit));
  cr_assert_eq(admitted_count, 1);
  cr_assert_eq(admitted_order[0], 2);
  cr_assert_eq(f.used, 140);
  cr_assert_eq(f.held_waiting, 40);
  reshard_inflight_release(&f, 100); /* the first is done */
  cr_assert_eq(admitted_count, 2);
  cr_assert_eq(admitted_order[1], 3);
  cr_assert_eq(f.held_waiting, 0);
}

Test(inflight, calls_holding_bytes_go_before_new_calls) {
  reshard_inflight f;
  reshard_inflight_init(&f, 100);
  cr_assert(reshard_inflight_acquire(&f, &waiters[0], 90, 0, on_admit));
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[1], 20, 0, on_admit));
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[2], 20, 0, on_admit));
  /* waiters[3] already holds 5 of the 90 and wants 15 more. */
  cr_assert_not(reshard_inflight_acquire(&f, &waiters[3], 15, 5, on_admit));
  cr_assert_eq(f.head, &waiters[3]);
  cr_assert_eq(f.tail, &waiters[2]);
  reshard_inflight_release(&f, 85); /* 5 left: waiters[3]'s */
  cr_assert_eq(admitted_count, 3);
  cr_assert_eq(admitted_order[0], 3);
  cr_assert_eq(admitted_order[1], 1);
  cr_assert_eq(admitted_order[2], 2);
  cr_assert_null(f.last_holding);
}
