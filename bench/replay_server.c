/* The replay server (see replay_server.h): one thread serves one call at
 * a time, which is all a benchmark with one client in a loop needs. */
#include "replay_server.h"

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Completion-queue tags: the server has one call in flight at a time, so
 * the kind of event is the whole tag. */
enum { TAG_CALL = 1, TAG_RECEIVED, TAG_ANSWERED, TAG_SHUTDOWN };

struct replay_server {
  grpc_server *server;
  grpc_completion_queue *queue;
  pthread_t thread;
  bool serving; /* `thread` was started */
  grpc_slice response;
  bool shut_down; /* TAG_SHUTDOWN seen; by the serving thread, if any */
};

static void *tag_of(int kind) {
  return (void *)(intptr_t)kind;
}

/* Waits for the completion of `kind`; false when it failed. */
static bool wait_for(replay_server *rs, int kind) {
  for (;;) {
    grpc_event event = grpc_completion_queue_next(
        rs->queue, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (event.type != GRPC_OP_COMPLETE) {
      return false;
    }
    if (event.tag == tag_of(TAG_SHUTDOWN)) {
      rs->shut_down = true;
      if (kind == TAG_SHUTDOWN) {
        return true;
      }
      continue;
    }
    if (event.tag == tag_of(kind)) {
      return event.success != 0;
    }
  }
}

/* Receives the call's request and answers it with the stored response. */
static void answer(replay_server *rs, grpc_call *call) {
  grpc_byte_buffer *request = NULL;
  grpc_op receive[2];
  memset(receive, 0, sizeof receive);
  receive[0].op = GRPC_OP_SEND_INITIAL_METADATA;
  receive[1].op = GRPC_OP_RECV_MESSAGE;
  receive[1].data.recv_message.recv_message = &request;
  if (grpc_call_start_batch(call, receive, 2, tag_of(TAG_RECEIVED), NULL) !=
          GRPC_CALL_OK ||
      !wait_for(rs, TAG_RECEIVED)) {
    grpc_byte_buffer_destroy(request);
    return;
  }
  grpc_byte_buffer_destroy(request);
  /* The stored slice is shared, not copied: the daemon's own copy of its
   * response into a slice is part of what the benchmark compares with. */
  grpc_slice message = grpc_slice_ref(rs->response);
  grpc_byte_buffer *response = grpc_raw_byte_buffer_create(&message, 1);
  grpc_slice_unref(message);
  int cancelled = 0;
  grpc_op send[3];
  memset(send, 0, sizeof send);
  send[0].op = GRPC_OP_SEND_MESSAGE;
  send[0].data.send_message.send_message = response;
  send[1].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
  send[1].data.send_status_from_server.status = GRPC_STATUS_OK;
  send[2].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
  send[2].data.recv_close_on_server.cancelled = &cancelled;
  if (grpc_call_start_batch(call, send, 3, tag_of(TAG_ANSWERED), NULL) ==
      GRPC_CALL_OK) {
    wait_for(rs, TAG_ANSWERED);
  }
  grpc_byte_buffer_destroy(response);
}

static void *serve(void *arg) {
  replay_server *rs = arg;
  for (;;) {
    grpc_call *call = NULL;
    grpc_call_details details;
    grpc_metadata_array metadata;
    grpc_call_details_init(&details);
    grpc_metadata_array_init(&metadata);
    bool matched = grpc_server_request_call(rs->server, &call, &details,
                                            &metadata, rs->queue, rs->queue,
                                            tag_of(TAG_CALL)) == GRPC_CALL_OK &&
                   wait_for(rs, TAG_CALL);
    if (matched) {
      answer(rs, call);
    }
    if (call != NULL) {
      grpc_call_unref(call);
    }
    grpc_call_details_destroy(&details);
    grpc_metadata_array_destroy(&metadata);
    if (!matched) {
      break; /* the server is shutting down */
    }
  }
  if (!rs->shut_down) {
    wait_for(rs, TAG_SHUTDOWN);
  }
  return NULL;
}

replay_server *replay_server_start(const char *listen, char *target,
                                   size_t target_size) {
  replay_server *rs = calloc(1, sizeof *rs);
  if (rs == NULL) {
    return NULL;
  }
  grpc_init();
  rs->response = grpc_empty_slice();
  grpc_arg args[3];
  memset(args, 0, sizeof args);
  args[0].type = args[1].type = args[2].type = GRPC_ARG_INTEGER;
  args[0].key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH;
  args[0].value.integer = -1;
  args[1].key = GRPC_ARG_MAX_SEND_MESSAGE_LENGTH;
  args[1].value.integer = -1;
  args[2].key = GRPC_ARG_HTTP2_BDP_PROBE;
  args[2].value.integer = 0;
  grpc_channel_args channel_args = {3, args};
  rs->server = grpc_server_create(&channel_args, NULL);
  rs->queue = grpc_completion_queue_create_for_next(NULL);
  grpc_server_register_completion_queue(rs->server, rs->queue, NULL);
  grpc_server_credentials *credentials =
      grpc_insecure_server_credentials_create();
  int port = grpc_server_add_http2_port(rs->server, listen, credentials);
  grpc_server_credentials_release(credentials);
  if (port <= 0) {
    grpc_server_destroy(rs->server);
    grpc_completion_queue_shutdown(rs->queue);
    grpc_completion_queue_destroy(rs->queue);
    grpc_shutdown();
    free(rs);
    return NULL;
  }
  if (strncmp(listen, "unix:", 5) == 0) {
    snprintf(target, target_size, "%s", listen);
  } else {
    snprintf(target, target_size, "127.0.0.1:%d", port);
  }
  grpc_server_start(rs->server);
  rs->serving = pthread_create(&rs->thread, NULL, serve, rs) == 0;
  if (!rs->serving) {
    replay_server_stop(rs);
    return NULL;
  }
  return rs;
}

void replay_server_set_response(replay_server *rs, const uint8_t *bytes,
                                size_t length) {
  grpc_slice copy = grpc_slice_from_copied_buffer((const char *)bytes, length);
  grpc_slice_unref(rs->response);
  rs->response = copy;
}

void replay_server_stop(replay_server *rs) {
  if (rs == NULL) {
    return;
  }
  grpc_server_shutdown_and_notify(rs->server, rs->queue, tag_of(TAG_SHUTDOWN));
  grpc_server_cancel_all_calls(rs->server);
  if (rs->serving) {
    pthread_join(rs->thread, NULL);
  } else {
    wait_for(rs, TAG_SHUTDOWN); /* no thread to take it */
  }
  grpc_server_destroy(rs->server);
  grpc_completion_queue_shutdown(rs->queue);
  while (grpc_completion_queue_next(rs->queue,
                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL)
             .type != GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(rs->queue);
  grpc_slice_unref(rs->response);
  grpc_shutdown();
  free(rs);
}
