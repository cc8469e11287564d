/* Tests daemon/catalog/redis/redis_reply.c: an array reply's header cannot make
 * hiredis allocate past the bound, while replies within it parse as
 * hiredis parses them. */
#include <criterion/criterion.h>
#include <hiredis/hiredis.h>
#include <string.h>

#include "catalog/redis/redis_reply.h"

static redisReader *bounded_reader(reshard_redis_reply_bound *bound) {
  redisReader *reader = redisReaderCreate();
  cr_assert_not_null(reader);
  cr_assert(reshard_redis_reader_bound(reader, bound));
  return reader;
}

static int read_one(redisReader *reader, const char *wire, redisReply **out) {
  cr_assert_eq(redisReaderFeed(reader, wire, strlen(wire)), REDIS_OK);
  void *reply = NULL;
  int rc = redisReaderGetReply(reader, &reply);
  *out = reply;
  return rc;
}

Test(redis_reply, arrays_within_the_bound_parse_as_usual) {
  reshard_redis_reply_bound bound = {3};
  redisReader *reader = bounded_reader(&bound);
  redisReply *reply;
  /* EXEC-like: an array of a set's members and an integer. */
  cr_assert_eq(read_one(reader,
                        "*2\r\n*3\r\n$1\r\na\r\n$1\r\nb\r\n$0\r\n\r\n:7\r\n",
                        &reply),
               REDIS_OK);
  cr_assert_not_null(reply);
  cr_assert_eq(reply->type, REDIS_REPLY_ARRAY);
  cr_assert_eq(reply->elements, 2);
  cr_assert_eq(reply->element[0]->elements, 3);
  cr_assert_str_eq(reply->element[0]->element[1]->str, "b");
  cr_assert_eq(reply->element[1]->integer, 7);
  freeReplyObject(reply);
  redisReaderFree(reader);
}

Test(redis_reply, a_huge_array_header_is_refused_before_allocating) {
  reshard_redis_reply_bound bound = {65536};
  redisReader *reader = bounded_reader(&bound);
  redisReply *reply;
  /* Unbounded, hiredis 0.14 would ask for 8 GB here, before any element. */
  cr_assert_eq(read_one(reader, "*999999999\r\n", &reply), REDIS_ERR);
  cr_assert_null(reply);
  cr_assert_str_eq(reader->errstr, "Out of memory");
  redisReaderFree(reader);
}

Test(redis_reply, nested_arrays_are_bounded_each) {
  reshard_redis_reply_bound bound = {2};
  redisReader *reader = bounded_reader(&bound);
  redisReply *reply;
  cr_assert_eq(read_one(reader, "*2\r\n*3\r\n", &reply), REDIS_ERR);
  cr_assert_null(reply);
  redisReaderFree(reader);
}

Test(redis_reply, the_bound_can_be_raised_between_replies) {
  reshard_redis_reply_bound bound = {1};
  redisReader *reader = bounded_reader(&bound);
  redisReply *reply;
  cr_assert_eq(read_one(reader, "*1\r\n:1\r\n", &reply), REDIS_OK);
  freeReplyObject(reply);
  /* What a command with a larger reply does before it is sent. */
  bound.max_elements = 4;
  cr_assert_eq(read_one(reader, "*4\r\n:1\r\n:2\r\n:3\r\n:4\r\n", &reply),
               REDIS_OK);
  cr_assert_eq(reply->elements, 4);
  freeReplyObject(reply);
  redisReaderFree(reader);
}

Test(redis_reply, a_reader_with_functions_of_its_own_is_left_alone) {
  reshard_redis_reply_bound bound = {1};
  redisReader *reader = redisReaderCreateWithFunctions(NULL);
  cr_assert_not_null(reader);
  cr_assert_not(reshard_redis_reader_bound(reader, &bound));
  cr_assert_null(reader->fn);
  redisReaderFree(reader);
}
