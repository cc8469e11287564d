/* redisReply trees built by hand for the cluster tests, as hiredis 0.14's
 * reader builds them (calloc'd nodes, NUL-terminated strings, malloc'd
 * element arrays), so freeReplyObject frees them. */
#ifndef RESHARD_TEST_REDIS_REPLY_FIXTURE_H
#define RESHARD_TEST_REDIS_REPLY_FIXTURE_H

#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static inline redisReply *fx_node(int type) {
  redisReply *reply = calloc(1, sizeof *reply);
  cr_assert_not_null(reply);
  reply->type = type;
  return reply;
}

static inline redisReply *fx_int(long long value) {
  redisReply *reply = fx_node(REDIS_REPLY_INTEGER);
  reply->integer = value;
  return reply;
}

static inline redisReply *fx_text(int type, const char *text) {
  redisReply *reply = fx_node(type);
  reply->len = strlen(text);
  reply->str = strdup(text);
  cr_assert_not_null(reply->str);
  return reply;
}

static inline redisReply *fx_str(const char *text) {
  return fx_text(REDIS_REPLY_STRING, text);
}

static inline redisReply *fx_err(const char *text) {
  return fx_text(REDIS_REPLY_ERROR, text);
}

/* An array of `count` elements, taken over. */
static inline redisReply *fx_arr(size_t count, ...) {
  redisReply *reply = fx_node(REDIS_REPLY_ARRAY);
  reply->elements = count;
  if (count > 0) {
    reply->element = calloc(count, sizeof *reply->element);
    cr_assert_not_null(reply->element);
  }
  va_list ap;
  va_start(ap, count);
  for (size_t i = 0; i < count; i++) {
    reply->element[i] = va_arg(ap, redisReply *);
  }
  va_end(ap);
  return reply;
}

/* [ip, port, id] as CLUSTER SLOTS names a node. */
static inline redisReply *fx_endpoint(const char *ip, long long port,
                                      const char *id) {
  return fx_arr(3, fx_str(ip), fx_int(port), fx_str(id));
}

#endif
