/* Packing a call's response into its send buffer (reshard_call_pack,
 * _pack_encoded, _pack_pieces): a protobuf-c message, bytes a caller
 * encodes, or pieces sent from the response memory where they lie. These
 * touch only the call's own fields and the thread-safe chunk pool, so the
 * thread that owns the call at the time (a worker while planning) may
 * call them. */
#include <assert.h>
#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <stddef.h>
#include <stdint.h>

#include "server/server_internal.h"

static size_t pack_message(void *context, uint8_t *out) {
  return protobuf_c_message_pack(context, out);
}

reshard_status reshard_call_pack(reshard_call *call,
                                 const ProtobufCMessage *message) {
  return reshard_call_pack_encoded(call,
                                   protobuf_c_message_get_packed_size(message),
                                   pack_message, (void *)message);
}

/* A response buffer from the call pool: gRPC frees the slice on whichever
 * thread sends it last, maybe after the server is gone, so the buffer
 * keeps the pool alive. Reusing these blocks spares a mid-size response
 * the page faults of fresh memory (S1x8's 90 KB response cost the
 * planner's thread ~4 % of the daemon's CPU in faults). Larger responses
 * are malloc'd as before: S5's 278 KB ones, pooled, crowded the arenas'
 * blocks out of the pool's 16 MiB and resident memory grew by 19.5 MiB
 * under load (scripts/load.py --scenario S5 fails past 16). */
enum { POOLED_RESPONSE_MAX_BYTES = 128 * 1024 };
typedef struct pooled_response {
  reshard_chunk_pool *pool;
  size_t capacity;
  max_align_t align; /* the bytes start after this header, aligned */
} pooled_response;

static void give_response(void *block) {
  pooled_response *header = block;
  reshard_chunk_pool *pool = header->pool;
  reshard_chunk_pool_give(pool, block, header->capacity);
  reshard_chunk_pool_free(pool);
}

static bool pooled_slice(reshard_chunk_pool *pool, size_t size,
                         grpc_slice *out) {
  size_t capacity;
  size_t offset = offsetof(pooled_response, align);
  if (size > SIZE_MAX - offset) {
    return false;
  }
  pooled_response *header =
      reshard_chunk_pool_take(pool, offset + size, &capacity);
  if (header == NULL) {
    return false;
  }
  header->pool = pool;
  header->capacity = capacity;
  reshard_chunk_pool_retain(pool);
  *out = grpc_slice_new_with_user_data((uint8_t *)header + offset, size,
                                       give_response, header);
  return true;
}

/* The packed response replaces any packed before; NULL is out of
 * memory. */
static reshard_status set_send_buffer(reshard_call *call,
                                      grpc_byte_buffer *buffer) {
  if (buffer == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  if (call->send_buffer != NULL) {
    grpc_byte_buffer_destroy(call->send_buffer);
  }
  call->send_buffer = buffer;
  return RESHARD_OK;
}

reshard_status reshard_call_pack_encoded(reshard_call *call, size_t size,
                                         size_t (*write)(void *context,
                                                         uint8_t *out),
                                         void *context) {
  grpc_slice slice;
  if (size > POOLED_RESPONSE_MAX_BYTES) {
    slice = grpc_slice_malloc(size);
  } else if (!pooled_slice(call->server->pool, size, &slice)) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  size_t written = write(context, GRPC_SLICE_START_PTR(slice));
  assert(written == size);
  (void)written;
  grpc_byte_buffer *buffer = grpc_raw_byte_buffer_create(&slice, 1);
  grpc_slice_unref(slice);
  return set_send_buffer(call, buffer);
}

reshard_response_memory *reshard_call_response_memory(reshard_call *call) {
  return reshard_response_memory_create(call->server->pool);
}

reshard_status reshard_call_pack_pieces(reshard_call *call,
                                        reshard_response_memory *memory,
                                        const reshard_response_piece *pieces,
                                        size_t count) {
  grpc_slice *slices = RESHARD_ARENA_ARRAY(&call->arena, grpc_slice, count);
  if (slices == NULL) {
    return RESHARD_RESOURCE_EXHAUSTED;
  }
  reshard_response_memory_slices(memory, pieces, count, slices);
  grpc_byte_buffer *buffer = grpc_raw_byte_buffer_create(slices, count);
  for (size_t i = 0; i < count; i++) {
    grpc_slice_unref(slices[i]);
  }
  return set_send_buffer(call, buffer);
}
