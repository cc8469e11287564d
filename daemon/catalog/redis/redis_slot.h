/* Redis Cluster key slots (the Redis Cluster specification, "Keys
 * distribution model"): a key's slot is CRC16(key) mod 16384, where CRC16
 * is the XMODEM variant (polynomial 0x1021, initial value 0, no reflection,
 * no final XOR) and "key" is only the hash tag when the key has one: the
 * bytes between the first '{' and the first '}' after it, when there is at
 * least one byte between them. Pure; no allocation. */
#ifndef RESHARD_REDIS_SLOT_H
#define RESHARD_REDIS_SLOT_H

#include <stddef.h>
#include <stdint.h>

#define RESHARD_REDIS_SLOTS 16384

/* CRC16/XMODEM of `length` bytes ("123456789" gives 0x31C3). */
uint16_t reshard_redis_crc16(const void *bytes, size_t length);

/* The cluster slot of `key` (0 .. 16383), hash tags honoured. */
uint16_t reshard_redis_key_slot(const char *key, size_t length);

#endif
