#include "catalog/redis/redis_slot.h"

#include <string.h>

uint16_t reshard_redis_crc16(const void *bytes, size_t length) {
  const unsigned char *p = bytes;
  uint16_t crc = 0;
  for (size_t i = 0; i < length; i++) {
    crc ^= (uint16_t)(p[i] << 8);
    for (int bit = 0; bit < 8; bit++) {
      crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021)
                           : (uint16_t)(crc << 1);
    }
  }
  return crc;
}

uint16_t reshard_redis_key_slot(const char *key, size_t length) {
  const char *open = memchr(key, '{', length);
  if (open != NULL) {
    size_t rest = length - (size_t)(open - key) - 1;
    const char *close = memchr(open + 1, '}', rest);
    if (close != NULL && close > open + 1) {
      return reshard_redis_crc16(open + 1, (size_t)(close - open - 1)) &
             (RESHARD_REDIS_SLOTS - 1);
    }
  }
  return reshard_redis_crc16(key, length) & (RESHARD_REDIS_SLOTS - 1);
}
