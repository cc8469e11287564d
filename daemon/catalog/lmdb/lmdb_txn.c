/* The LMDB catalog's transactions (lmdb_internal.h): the writer thread,
 * which applies queued writes in batches and commits them, and on the loop
 * the queue, the delivery of results and the read snapshot. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog/lmdb/lmdb_internal.h"

/* Write requests per transaction, at most. */
#define WRITE_BATCH 256

/* ---- Writer thread: applying requests ---- */

static int apply_op(lmdb_catalog *c, MDB_txn *txn, write_op *op) {
  switch (op->kind) {
  case WRITE_PUT:
    return reshard__lmdb_apply_put(c, txn, op);
  case WRITE_ADD:
    return reshard__lmdb_apply_add(c, txn, op);
  case WRITE_FORGET:
    return reshard__lmdb_apply_forget(c, txn, op);
  case WRITE_PUT_OBJECT:
    return reshard__lmdb_apply_put_object(c, txn, op);
  case WRITE_FORGET_OBJECT:
    return reshard__lmdb_apply_forget_object(c, txn, op);
  }
  return EINVAL;
}

static void reset_result(write_op *op) {
  reshard_error_clear(&op->err);
  op->created = false;
  op->count = 0;
}

/* Applies the requests [first, end) in one transaction and commits it. */
static int run_txn(lmdb_catalog *c, write_op *first, write_op *end) {
  MDB_txn *txn;
  int rc = mdb_txn_begin(c->env, NULL, 0, &txn);
  if (rc != 0) {
    return rc;
  }
  for (write_op *op = first; op != end && rc == 0; op = op->next) {
    rc = apply_op(c, txn, op);
  }
  if (rc != 0) {
    mdb_txn_abort(txn);
    return rc;
  }
  return mdb_txn_commit(txn);
}

/* What the request was doing, for its error message; object writes name
 * the object, in `buffer`. */
static const char *write_what(const write_op *op, char *buffer, size_t size) {
  switch (op->kind) {
  case WRITE_PUT:
    return "storing the manifest";
  case WRITE_ADD:
    return "binding the pages";
  case WRITE_FORGET:
    return "forgetting the pages";
  case WRITE_PUT_OBJECT:
  case WRITE_FORGET_OBJECT:
    snprintf(buffer, size, "%s %s %s",
             op->kind == WRITE_PUT_OBJECT ? "storing" : "forgetting",
             reshard_catalog_object_kind_name(op->object), op->manifest_key);
    return buffer;
  }
  return "writing";
}

/* Commits a batch; returns the number of transactions committed. */
static uint64_t commit_batch(lmdb_catalog *c, write_op *batch) {
  int rc = run_txn(c, batch, NULL);
  if (rc == 0) {
    return 1;
  }
  uint64_t commits = 0;
  for (write_op *op = batch; op != NULL; op = op->next) {
    reset_result(op);
    if (batch->next != NULL) {
      rc = run_txn(c, op, op->next);
    }
    if (rc == 0) {
      commits++;
    } else {
      reset_result(op);
      char what[640];
      reshard__lmdb_error(c, &op->err, rc, write_what(op, what, sizeof what));
    }
  }
  return commits;
}

void reshard__lmdb_writer_main(void *arg) {
  lmdb_catalog *c = arg;
  uv_mutex_lock(&c->lock);
  for (;;) {
    while (c->queue_head == NULL && !c->stopping) {
      uv_cond_wait(&c->wake, &c->lock);
    }
    if (c->queue_head == NULL) {
      break;
    }
    write_op *batch = c->queue_head, *last = batch;
    uint64_t count = 1;
    while (last->next != NULL && count < WRITE_BATCH) {
      last = last->next;
      count++;
    }
    c->queue_head = last->next;
    if (c->queue_head == NULL) {
      c->queue_tail = NULL;
    }
    last->next = NULL;
    uv_mutex_unlock(&c->lock);

    uint64_t commits = commit_batch(c, batch);

    uv_mutex_lock(&c->lock);
    c->commits += commits;
    c->writes += count;
    bool was_empty = c->done_head == NULL;
    if (was_empty) {
      c->done_head = batch;
    } else {
      c->done_tail->next = batch;
    }
    c->done_tail = last;
    if (was_empty) {
      uv_async_send(&c->async);
    }
  }
  c->writer_done = true;
  uv_mutex_unlock(&c->lock);
  uv_async_send(&c->async);
}

/* ---- Loop thread: queueing writes and delivering results ---- */

void reshard__lmdb_on_async(uv_async_t *handle) {
  lmdb_catalog *c = handle->data;
  uv_mutex_lock(&c->lock);
  write_op *done = c->done_head;
  c->done_head = c->done_tail = NULL;
  bool writer_done = c->writer_done;
  uv_mutex_unlock(&c->lock);
  while (done != NULL) {
    write_op *op = done;
    done = op->next;
    c->pending--;
    switch (op->kind) {
    case WRITE_PUT:
    case WRITE_PUT_OBJECT:
      op->put_cb(op->data, &op->err, op->created);
      break;
    case WRITE_ADD:
    case WRITE_FORGET:
      op->count_cb(op->data, &op->err, op->count);
      break;
    case WRITE_FORGET_OBJECT:
      op->removed_cb(op->data, &op->err, op->count > 0);
      break;
    }
    free(op);
  }
  if (c->pending == 0 && !c->closing) {
    uv_unref((uv_handle_t *)&c->async);
  }
  if (writer_done && c->closing && !c->writer_joined) {
    c->writer_joined = true;
    uv_thread_join(&c->writer);
    uv_close((uv_handle_t *)&c->async, reshard__lmdb_finish_close);
  }
}

/* Allocates a request with copies of its inputs. */
write_op *reshard__lmdb_op_new(write_kind kind, const char *manifest_key,
                               const char *domain, const uint8_t *record,
                               size_t length, const char *const *page_keys,
                               size_t page_count) {
  reshard_catalog_args copy;
  reshard_catalog_args in = {
      manifest_key, domain, record, length, (const char **)page_keys,
      page_count};
  write_op *op = reshard_catalog_op_alloc(sizeof *op, &in, &copy);
  if (op == NULL) {
    return NULL;
  }
  op->kind = kind;
  op->manifest_key = copy.manifest_key;
  op->domain = copy.domain;
  op->record = copy.record;
  op->length = copy.length;
  op->page_keys = copy.keys;
  op->page_count = copy.key_count;
  return op;
}

void reshard__lmdb_enqueue(lmdb_catalog *c, write_op *op) {
  if (c->pending++ == 0) {
    uv_ref((uv_handle_t *)&c->async);
  }
  uv_mutex_lock(&c->lock);
  if (c->queue_tail == NULL) {
    c->queue_head = op;
  } else {
    c->queue_tail->next = op;
  }
  c->queue_tail = op;
  uv_cond_signal(&c->wake);
  uv_mutex_unlock(&c->lock);
}

/* ---- Loop thread: reads ---- */

/* Starts (or joins, when nested in a callback) the loop's read snapshot. */
int reshard__lmdb_read_begin(lmdb_catalog *c, MDB_txn **txn) {
  if (c->read_depth == 0) {
    int rc;
    if (c->read_txn == NULL) {
      rc = mdb_txn_begin(c->env, NULL, MDB_RDONLY, &c->read_txn);
      if (rc != 0) {
        c->read_txn = NULL;
      }
    } else {
      rc = mdb_txn_renew(c->read_txn);
    }
    if (rc != 0) {
      return rc;
    }
  }
  c->read_depth++;
  *txn = c->read_txn;
  return 0;
}

void reshard__lmdb_read_end(lmdb_catalog *c) {
  if (--c->read_depth == 0) {
    mdb_txn_reset(c->read_txn);
  }
}
