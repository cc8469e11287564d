/* Tests daemon/catalog/redis/redis_url.c: splitting credentials off a Redis
 * URL. */
#include <criterion/criterion.h>
#include <string.h>

#include "catalog/redis/redis_url.h"

Test(redis_url, without_credentials_the_spec_is_the_address) {
  reshard_redis_url url;
  cr_assert(reshard_redis_url_split("redis://db:6379/2", &url));
  cr_assert_str_eq(url.address, "redis://db:6379/2");
  cr_assert_str_eq(url.user, "");
  cr_assert_str_eq(url.password, "");
}

Test(redis_url, password_and_user) {
  reshard_redis_url url;
  cr_assert(reshard_redis_url_split("redis://:s3cret@db:6379", &url));
  cr_assert_str_eq(url.address, "redis://db:6379");
  cr_assert_str_eq(url.user, "");
  cr_assert_str_eq(url.password, "s3cret");
  /* The last '@' ends the credentials; the first ':' ends the user. */
  cr_assert(reshard_redis_url_split("redis://app:p@ss:w@db:1/0", &url));
  cr_assert_str_eq(url.user, "app");
  cr_assert_str_eq(url.password, "p@ss:w");
  cr_assert_str_eq(url.address, "redis://db:1/0");
  reshard_redis_url_wipe(&url);
  cr_assert_str_eq(url.password, "");
  cr_assert_str_eq(url.address, "");
}

Test(redis_url, malformed_credentials) {
  reshard_redis_url url;
  cr_assert(!reshard_redis_url_split("redis://s3cret@db:1", &url),
            "no ':' before the password");
  cr_assert(!reshard_redis_url_split("redis://user:@db:1", &url),
            "an empty password");
  char long_url[1200] = "redis://:";
  memset(long_url + 9, 'p', 600);
  strcpy(long_url + 609, "@db:1");
  cr_assert(!reshard_redis_url_split(long_url, &url), "a 600-byte password");
  cr_assert_str_eq(url.password, "", "nothing is left behind on failure");
}
