/* A bound on what one Redis reply may make hiredis allocate before the
 * reply's bytes have arrived. hiredis 0.14 (Debian's) allocates an array
 * reply's element vector from the count in its header, so the 12 bytes
 * "*999999999\r\n" alone ask for 8 GB; a strings' bytes, by contrast, are
 * only allocated once they have been received. */
#ifndef RESHARD_REDIS_REPLY_H
#define RESHARD_REDIS_REPLY_H

#include <hiredis/read.h>
#include <stdbool.h>
#include <stddef.h>

/* Owned by the caller; must outlive every reader it is attached to. The
 * caller may raise max_elements between replies, on the reader's thread
 * (it does so before sending a command whose reply is larger). */
typedef struct reshard_redis_reply_bound {
  size_t max_elements; /* per array reply, nested arrays each counted alone */
} reshard_redis_reply_bound;

/* Makes `reader` refuse any array reply of more than bound->max_elements
 * elements; hiredis then fails the reply as out of memory ("Out of memory"
 * in reader->errstr), which ends the connection like any protocol error.
 * Replaces the reader's private data, which hiredis leaves to its user.
 * Returns false, changing nothing, when the reader does not use hiredis'
 * own reply functions or memory ran out: the caller must not use it then. */
bool reshard_redis_reader_bound(redisReader *reader,
                                reshard_redis_reply_bound *bound);

#endif
