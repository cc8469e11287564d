#include "catalog/redis/redis_reply.h"

#include <hiredis/hiredis.h>
#include <pthread.h>

/* hiredis' own reply functions with the array constructor wrapped. They
 * are the same for every reader, so one table serves all. */
static redisReplyObjectFunctions bounded_functions;
static redisReplyObjectFunctions *default_functions;
static pthread_once_t functions_once = PTHREAD_ONCE_INIT;

static void *create_bounded_array(const redisReadTask *task, int elements) {
  /* hiredis copies the reader's private data into every task. */
  const reshard_redis_reply_bound *bound = task->privdata;
  if (elements < 0 || bound == NULL || (size_t)elements > bound->max_elements) {
    return NULL;
  }
  return default_functions->createArray(task, elements);
}

static void init_functions(void) {
  redisReader *probe = redisReaderCreate();
  if (probe == NULL) {
    return;
  }
  default_functions = probe->fn;
  bounded_functions = *default_functions;
  bounded_functions.createArray = create_bounded_array;
  redisReaderFree(probe);
}

bool reshard_redis_reader_bound(redisReader *reader,
                                reshard_redis_reply_bound *bound) {
  pthread_once(&functions_once, init_functions);
  if (default_functions == NULL || reader->fn != default_functions) {
    return false;
  }
  reader->fn = &bounded_functions;
  redisReaderSetPrivdata(reader, bound);
  return true;
}
