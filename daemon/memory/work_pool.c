#define _GNU_SOURCE /* SCHED_BATCH */
#include "memory/work_pool.h"

#include <errno.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

struct reshard_work_pool {
  uv_poll_t poll; /* the eventfd, readable when work finished */
  int eventfd;
  int nice;
  uv_mutex_t lock;
  uv_cond_t ready;
  reshard_work *queue_head, *queue_tail; /* submitted, not started */
  reshard_work *done_head, *done_tail;   /* finished, `after` not run */
  bool stopping;
  size_t outstanding; /* loop only: submitted, `after` not run */
  unsigned thread_count;
  uv_thread_t *threads;
};

static void append(reshard_work **head, reshard_work **tail,
                   reshard_work *work) {
  work->next = NULL;
  if (*tail != NULL) {
    (*tail)->next = work;
  } else {
    *head = work;
  }
  *tail = work;
}

static void worker(void *arg) {
  reshard_work_pool *pool = arg;
  /* An unprivileged thread cannot raise its priority back; these threads
   * only ever run pool work. */
  pid_t self = (pid_t)syscall(SYS_gettid);
  (void)setpriority(PRIO_PROCESS, (id_t)self,
                    getpriority(PRIO_PROCESS, (id_t)self) + pool->nice);
  /* Under SCHED_BATCH (which keeps the nice value), a worker woken for new
   * work does not preempt the loop that woke it. Best effort. */
  struct sched_param param = {0};
  (void)sched_setscheduler(0, SCHED_BATCH, &param);
  for (;;) {
    uv_mutex_lock(&pool->lock);
    while (!pool->stopping && pool->queue_head == NULL) {
      uv_cond_wait(&pool->ready, &pool->lock);
    }
    reshard_work *work = pool->queue_head;
    if (work == NULL) {
      uv_mutex_unlock(&pool->lock);
      return; /* stopping, nothing left */
    }
    pool->queue_head = work->next;
    if (pool->queue_head == NULL) {
      pool->queue_tail = NULL;
    }
    uv_mutex_unlock(&pool->lock);

    work->work(work);

    uv_mutex_lock(&pool->lock);
    bool first = pool->done_head == NULL;
    append(&pool->done_head, &pool->done_tail, work);
    uv_mutex_unlock(&pool->lock);
    /* One wake-up per batch of completions the loop has not seen yet. */
    if (first) {
      uint64_t one = 1;
      while (write(pool->eventfd, &one, sizeof one) < 0 && errno == EINTR) {
      }
    }
  }
}

static void on_done(uv_poll_t *poll, int status, int events) {
  (void)status;
  (void)events;
  reshard_work_pool *pool = poll->data;
  uint64_t count;
  while (read(pool->eventfd, &count, sizeof count) < 0 && errno == EINTR) {
  }
  uv_mutex_lock(&pool->lock);
  reshard_work *done = pool->done_head;
  pool->done_head = pool->done_tail = NULL;
  uv_mutex_unlock(&pool->lock);
  while (done != NULL) {
    reshard_work *next = done->next;
    if (--pool->outstanding == 0) {
      uv_unref((uv_handle_t *)&pool->poll);
    }
    done->after(done); /* may submit more, or free `done` */
    done = next;
  }
}

reshard_work_pool *reshard_work_pool_create(uv_loop_t *loop, unsigned threads,
                                            int nice) {
  if (threads == 0) {
    threads = 1;
  }
  reshard_work_pool *pool = calloc(1, sizeof *pool);
  if (pool == NULL) {
    return NULL;
  }

  pool->nice = nice;
  pool->threads = calloc(threads, sizeof *pool->threads);
  pool->eventfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  bool locked = false, conditioned = false;
  if (pool->threads == NULL || pool->eventfd < 0 ||
      !(locked = uv_mutex_init(&pool->lock) == 0) ||
      !(conditioned = uv_cond_init(&pool->ready) == 0) ||
      uv_poll_init(loop, &pool->poll, pool->eventfd) != 0) {
    if (conditioned) {
      uv_cond_destroy(&pool->ready);
    }
    if (locked) {
      uv_mutex_destroy(&pool->lock);
    }
    if (pool->eventfd >= 0) {
      close(pool->eventfd);
    }
    free(pool->threads);
    free(pool);
    return NULL;
  }
  /* From here on the handle exists: failures close it, which frees. */
  pool->poll.data = pool;
  uv_unref((uv_handle_t *)&pool->poll);
  if (uv_poll_start(&pool->poll, UV_READABLE, on_done) != 0) {
    reshard_work_pool_close(pool);
    return NULL;
  }
  for (unsigned t = 0; t < threads; t++) {
    if (uv_thread_create(&pool->threads[t], worker, pool) != 0) {
      break;
    }
    pool->thread_count++;
  }
  if (pool->thread_count == 0) {
    reshard_work_pool_close(pool);
    return NULL;
  }
  return pool;
}

int reshard_work_pool_submit(reshard_work_pool *pool, reshard_work *work,
                             reshard_work_fn fn, reshard_after_work_fn after) {
  if (pool->stopping) {
    return -ECANCELED;
  }
  work->work = fn;
  work->after = after;
  if (pool->outstanding++ == 0) {
    uv_ref((uv_handle_t *)&pool->poll);
  }
  uv_mutex_lock(&pool->lock);
  append(&pool->queue_head, &pool->queue_tail, work);
  uv_mutex_unlock(&pool->lock);
  /* Signalled after the unlock: a worker woken while the loop still held
   * the lock only blocked on it again, a second futex sleep and wake-up
   * per plan (perf, sys_enter_futex on the daemon). The workers check the
   * queue under the lock, so none misses the work. */
  uv_cond_signal(&pool->ready);
  return 0;
}

static void on_closed(uv_handle_t *handle) {
  reshard_work_pool *pool = handle->data;
  close(pool->eventfd);
  uv_cond_destroy(&pool->ready);
  uv_mutex_destroy(&pool->lock);
  free(pool->threads);
  free(pool);
}

void reshard_work_pool_close(reshard_work_pool *pool) {
  if (pool == NULL) {
    return;
  }
  uv_mutex_lock(&pool->lock);
  pool->stopping = true;
  uv_cond_broadcast(&pool->ready);
  uv_mutex_unlock(&pool->lock);
  for (unsigned t = 0; t < pool->thread_count; t++) {
    uv_thread_join(&pool->threads[t]);
  }
  uv_close((uv_handle_t *)&pool->poll, on_closed);
}
