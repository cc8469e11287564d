/* daemon/work_pool.c: work runs on the workers at the lower priority,
 * every `after` runs on the loop thread exactly once, after callbacks may
 * submit more, the loop stays alive exactly while work is outstanding, and
 * close joins the workers and frees the pool through the loop. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "memory/work_pool.h"

enum { ITEMS = 200, NICE = 5 };

typedef struct item {
  reshard_work work;
  uv_thread_t loop_thread;
  uv_thread_t ran_on;
  int priority;  /* the worker's nice value while it ran */
  int after_ran; /* times `after` ran */
  bool after_on_loop;
  unsigned value;
} item;

typedef struct context {
  reshard_work_pool *pool;
  item items[ITEMS + 1];
  unsigned done;
  atomic_uint ran;
} context;

static context ctx;

static void work(reshard_work *w) {
  item *it = w->data;
  it->ran_on = uv_thread_self();
  pid_t self = (pid_t)syscall(SYS_gettid);
  it->priority = getpriority(PRIO_PROCESS, (id_t)self);
  it->value = it->value * 2 + 1;
  atomic_fetch_add(&ctx.ran, 1);
}

static void after(reshard_work *w) {
  item *it = w->data;
  it->after_ran++;
  uv_thread_t self = uv_thread_self();
  it->after_on_loop = uv_thread_equal(&self, &it->loop_thread) != 0;
  ctx.done++;
  /* The last item submits one more from its `after`. */
  if (it == &ctx.items[ITEMS - 1]) {
    item *extra = &ctx.items[ITEMS];
    extra->work.data = extra;
    extra->loop_thread = it->loop_thread;
    extra->value = 7;
    cr_assert_eq(reshard_work_pool_submit(ctx.pool, &extra->work, work, after),
                 0);
  }
}

Test(work_pool, runs_work_on_workers_and_after_on_the_loop) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  memset(&ctx, 0, sizeof ctx);
  int base = getpriority(PRIO_PROCESS, 0);
  ctx.pool = reshard_work_pool_create(&loop, 3, NICE);
  cr_assert_not_null(ctx.pool);
  /* Idle, the pool does not keep the loop alive. */
  cr_assert_eq(uv_run(&loop, UV_RUN_NOWAIT), 0);
  uv_thread_t self = uv_thread_self();
  for (unsigned i = 0; i < ITEMS; i++) {
    item *it = &ctx.items[i];
    it->work.data = it;
    it->loop_thread = self;
    it->value = i;
    cr_assert_eq(reshard_work_pool_submit(ctx.pool, &it->work, work, after), 0);
  }
  /* Outstanding work keeps it running until the last `after`. */
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(ctx.done, ITEMS + 1);
  cr_assert_eq(atomic_load(&ctx.ran), ITEMS + 1);
  for (unsigned i = 0; i <= ITEMS; i++) {
    item *it = &ctx.items[i];
    cr_assert_eq(it->after_ran, 1, "item %u: after ran %d times", i,
                 it->after_ran);
    cr_assert(it->after_on_loop, "item %u: after ran off the loop", i);
    cr_assert(!uv_thread_equal(&it->ran_on, &self),
              "item %u ran on the loop thread", i);
    cr_assert_eq(it->priority, base + NICE < 19 ? base + NICE : 19,
                 "item %u ran at nice %d", i, it->priority);
    unsigned start = i < ITEMS ? i : 7;
    cr_assert_eq(it->value, start * 2 + 1);
  }
  reshard_work_pool_close(ctx.pool);
  uv_run(&loop, UV_RUN_DEFAULT); /* the close callback frees the pool */
  cr_assert_eq(uv_loop_close(&loop), 0);
}

/* Work submitted once every worker waits wakes one: nothing else would
 * (no close, no other work). Fails by the timeout if none wakes. */
Test(work_pool, wakes_an_idle_worker, .timeout = 20) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  memset(&ctx, 0, sizeof ctx);
  ctx.pool = reshard_work_pool_create(&loop, 2, NICE);
  cr_assert_not_null(ctx.pool);
  uv_thread_t self = uv_thread_self();
  for (unsigned round = 0; round < 3; round++) {
    /* Long enough for both workers to reach their wait. */
    usleep(50 * 1000);
    item *it = &ctx.items[round];
    it->work.data = it;
    it->loop_thread = self;
    it->value = round;
    cr_assert_eq(reshard_work_pool_submit(ctx.pool, &it->work, work, after), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(ctx.done, round + 1);
    cr_assert_eq(it->value, round * 2 + 1);
  }
  reshard_work_pool_close(ctx.pool);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&loop), 0);
}

Test(work_pool, closes_without_work) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  reshard_work_pool *pool = reshard_work_pool_create(&loop, 2, 0);
  cr_assert_not_null(pool);
  reshard_work_pool_close(pool);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&loop), 0);
}

static void never(reshard_work *w) {
  (void)w;
  cr_assert_fail("work submitted to a closing pool ran");
}

Test(work_pool, refuses_work_once_closing) {
  uv_loop_t loop;
  cr_assert_eq(uv_loop_init(&loop), 0);
  reshard_work_pool *pool = reshard_work_pool_create(&loop, 1, 0);
  cr_assert_not_null(pool);
  reshard_work_pool_close(pool);
  reshard_work late;
  cr_assert_lt(reshard_work_pool_submit(pool, &late, never, never), 0);
  uv_run(&loop, UV_RUN_DEFAULT);
  cr_assert_eq(uv_loop_close(&loop), 0);
}
