/* reshardctl: the command line client of reshardd (docs/clients.md).
 *
 * Exit codes: 0 success; 1 the RPC failed ("error: CODE_NAME: message" on
 * stderr) or its output could not be written; 2 usage or input error (the
 * message names the file and the JSON path); 3 `health` answered with a
 * status other than SERVING.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "reshard_client.h"
#include "reshard_pbjson.h"
#include "reshard_plan_print.h"

enum {
  EXIT_OK = 0,
  EXIT_RPC = 1,
  EXIT_USAGE = 2,
  EXIT_NOT_SERVING = 3,
};

#define DEFAULT_TARGET "127.0.0.1:50051"

static const char usage_text[] =
    "usage: reshardctl [--target HOST:PORT] [--timeout SECONDS]\n"
    "                  [--tls-ca FILE] [--tls-cert FILE --tls-key FILE]\n"
    "                  [--tls-server-name NAME] COMMAND [ARGS]\n"
    "\n"
    "commands:\n"
    "  publish FILE.json                  publish a StoreManifest\n"
    "  get MANIFEST_KEY                   print a published manifest as JSON\n"
    "  register MANIFEST_KEY PAGE_KEY...  bind page keys to a manifest\n"
    "  forget MODEL_DOMAIN PAGE_KEY... [--manifest MANIFEST_KEY]\n"
    "                                     remove page bindings\n"
    "  register-placement FILE.json       register a Placement\n"
    "  plan-upload FILE.json              run a PlanUploadRequest\n"
    "  plan FILE.json [--format table|json] [--runs] [--pooled FILE.json]\n"
    "                                     run a PlanLoadRequest, print the "
    "plan\n"
    "                                     (--runs: as strided runs;\n"
    "                                     --pooled: a PooledMemory in place "
    "of\n"
    "                                     the request's binding)\n"
    "  plan-store FILE.json [--pooled FILE.json]\n"
    "                                     run a PlanStoreRequest, print the "
    "plan as JSON\n"
    "  transfer FILE.json [--format table|json] [--runs] [--pooled "
    "FILE.json]\n"
    "                                     run a PlanTransferRequest, print "
    "the\n"
    "                                     plan (each batch's source and "
    "copies)\n"
    "  register-memory FILE.json [--placement FILE.json | --placement-id "
    "ID]\n"
    "                                     register a MemoryPool (FILE is a\n"
    "                                     RegisterMemoryRequest without the "
    "flags)\n"
    "  forget-memory MEMORY_ID            forget a registered MemoryPool\n"
    "  health [SERVICE]                   grpc.health.v1 Check\n"
    "\n"
    "FILE may be - for standard input. The target defaults to "
    "$RESHARDCTL_TARGET,\n"
    "then " DEFAULT_TARGET "; the timeout (per call) to 10 seconds.\n"
    "TLS is used when --tls-ca or --tls-cert is given: --tls-ca verifies the\n"
    "server (default: the system's roots), --tls-cert/--tls-key present a\n"
    "client certificate (mutual TLS), --tls-server-name checks the server's\n"
    "certificate for that name instead of the target's host. Each reads\n"
    "$RESHARDCTL_TLS_CA, _CERT, _KEY, _SERVER_NAME when not given.\n"
    "Exit codes: 0 ok, 1 RPC error, 2 usage or JSON error, 3 not serving.\n";

static int usage_error(const char *fmt, ...) {
  va_list ap;
  fputs("error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n", stderr);
  fputs(usage_text, stderr);
  return EXIT_USAGE;
}

static int input_error(const char *fmt, ...) {
  va_list ap;
  fputs("error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\n", stderr);
  return EXIT_USAGE;
}

static int rpc_error(const reshard_client_status *st) {
  fprintf(stderr, "error: %s: %s\n", reshard_status_code_name(st->code),
          st->message);
  return EXIT_RPC;
}

static int output_done(void) {
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
    return EXIT_RPC;
  }
  return EXIT_OK;
}

/* Loads FILE (or standard input for "-") and converts it into a message of
 * type `desc`. Returns NULL after printing an error naming the file and the
 * JSON path. */
static ProtobufCMessage *load_message(const char *file,
                                      const ProtobufCMessageDescriptor *desc) {
  json_error_t jerr;
  json_t *doc;
  if (strcmp(file, "-") == 0)
    doc = json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr);
  else
    doc = json_load_file(file, JSON_REJECT_DUPLICATES, &jerr);
  if (doc == NULL) {
    if (jerr.line > 0)
      input_error("%s:%d:%d: %s", file, jerr.line, jerr.column, jerr.text);
    else
      input_error("%s: %s", file, jerr.text);
    return NULL;
  }
  char err[1024];
  ProtobufCMessage *msg = reshard_pbjson_to_message(doc, desc, err, sizeof err);
  json_decref(doc);
  if (msg == NULL)
    input_error("%s: %s", file, err);
  return msg;
}

/* Prints a message as indented JSON in field-number order. */
static int print_message_json(const ProtobufCMessage *msg) {
  json_t *j = reshard_pbjson_from_message(msg);
  if (j == NULL) {
    fputs("error: out of memory\n", stderr);
    return EXIT_RPC;
  }
  int rc = json_dumpf(j, stdout, JSON_INDENT(2));
  json_decref(j);
  if (rc != 0 || fputc('\n', stdout) == EOF) {
    fprintf(stderr, "error: cannot write the output: %s\n", strerror(errno));
    return EXIT_RPC;
  }
  return output_done();
}

typedef struct options {
  const char *target;
  int64_t timeout_ms;
  reshard_client_tls tls;
} options;

static int cmd_publish(reshard_client *c, int argc, char **argv) {
  if (argc != 1)
    return usage_error("publish takes exactly one FILE.json");
  ProtobufCMessage *m =
      load_message(argv[0], &reshard__v1__store_manifest__descriptor);
  if (m == NULL)
    return EXIT_USAGE;
  Reshard__V1__PublishManifestRequest req =
      RESHARD__V1__PUBLISH_MANIFEST_REQUEST__INIT;
  req.manifest = (Reshard__V1__StoreManifest *)m;
  Reshard__V1__PublishManifestResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_publish_manifest(c, &req, 0, &resp, &st);
  protobuf_c_message_free_unpacked(m, NULL);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  printf("manifest_key=%s\nlayout_id=%s\nmodel_domain=%s\ncreated=%s\n",
         resp->manifest_key, resp->layout_id, resp->model_domain,
         resp->created ? "true" : "false");
  reshard__v1__publish_manifest_response__free_unpacked(resp, NULL);
  return output_done();
}

static int cmd_get(reshard_client *c, int argc, char **argv) {
  if (argc != 1)
    return usage_error("get takes exactly one MANIFEST_KEY");
  Reshard__V1__GetManifestRequest req = RESHARD__V1__GET_MANIFEST_REQUEST__INIT;
  req.manifest_key = argv[0];
  Reshard__V1__GetManifestResponse *resp = NULL;
  reshard_client_status st;
  if (reshard_client_get_manifest(c, &req, 0, &resp, &st) != RESHARD_STATUS_OK)
    return rpc_error(&st);
  int rc = print_message_json(&resp->base);
  reshard__v1__get_manifest_response__free_unpacked(resp, NULL);
  return rc;
}

static int cmd_register(reshard_client *c, int argc, char **argv) {
  if (argc < 2)
    return usage_error("register takes MANIFEST_KEY and at least one PAGE_KEY");
  Reshard__V1__RegisterPagesRequest req =
      RESHARD__V1__REGISTER_PAGES_REQUEST__INIT;
  req.manifest_key = argv[0];
  req.n_page_keys = (size_t)(argc - 1);
  req.page_keys = argv + 1;
  Reshard__V1__RegisterPagesResponse *resp = NULL;
  reshard_client_status st;
  if (reshard_client_register_pages(c, &req, 0, &resp, &st) !=
      RESHARD_STATUS_OK)
    return rpc_error(&st);
  printf("added=%u\n", (unsigned)resp->added);
  reshard__v1__register_pages_response__free_unpacked(resp, NULL);
  return output_done();
}

static int cmd_forget(reshard_client *c, int argc, char **argv) {
  const char *manifest = "";
  char **keys = calloc((size_t)argc + 1, sizeof *keys);
  if (keys == NULL)
    return input_error("out of memory");
  size_t nkeys = 0;
  const char *domain = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--manifest") == 0) {
      if (i + 1 >= argc) {
        free(keys);
        return usage_error("--manifest needs a MANIFEST_KEY");
      }
      manifest = argv[++i];
    } else if (strncmp(argv[i], "--manifest=", 11) == 0) {
      manifest = argv[i] + 11;
    } else if (domain == NULL) {
      domain = argv[i];
    } else {
      keys[nkeys++] = argv[i];
    }
  }
  if (domain == NULL || nkeys == 0) {
    free(keys);
    return usage_error("forget takes MODEL_DOMAIN and at least one PAGE_KEY");
  }
  Reshard__V1__ForgetPagesRequest req = RESHARD__V1__FORGET_PAGES_REQUEST__INIT;
  req.model_domain = (char *)domain;
  req.n_page_keys = nkeys;
  req.page_keys = keys;
  req.manifest_key = (char *)manifest;
  Reshard__V1__ForgetPagesResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_forget_pages(c, &req, 0, &resp, &st);
  free(keys);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  printf("removed=%u\n", (unsigned)resp->removed);
  reshard__v1__forget_pages_response__free_unpacked(resp, NULL);
  return output_done();
}

static int cmd_register_placement(reshard_client *c, int argc, char **argv) {
  if (argc != 1)
    return usage_error("register-placement takes exactly one FILE.json");
  ProtobufCMessage *m =
      load_message(argv[0], &reshard__v1__placement__descriptor);
  if (m == NULL)
    return EXIT_USAGE;
  Reshard__V1__RegisterPlacementRequest req =
      RESHARD__V1__REGISTER_PLACEMENT_REQUEST__INIT;
  req.placement = (Reshard__V1__Placement *)m;
  Reshard__V1__RegisterPlacementResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_register_placement(c, &req, 0, &resp, &st);
  protobuf_c_message_free_unpacked(m, NULL);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  printf("placement_id=%s\n", resp->placement_id);
  reshard__v1__register_placement_response__free_unpacked(resp, NULL);
  return output_done();
}

static int cmd_plan_upload(reshard_client *c, int argc, char **argv) {
  if (argc != 1)
    return usage_error("plan-upload takes exactly one FILE.json");
  ProtobufCMessage *m =
      load_message(argv[0], &reshard__v1__plan_upload_request__descriptor);
  if (m == NULL)
    return EXIT_USAGE;
  Reshard__V1__PlanUploadResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_plan_upload(c, (Reshard__V1__PlanUploadRequest *)m,
                                        0, &resp, &st);
  protobuf_c_message_free_unpacked(m, NULL);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  int rc = print_message_json(&resp->base);
  reshard__v1__plan_upload_response__free_unpacked(resp, NULL);
  return rc;
}

/* Loads a PooledMemory from `file` into *pooled, dropping *binding (the
 * memory the request names is then the pool and its block table). Both
 * fields belong to a request built by load_message(), so whatever they
 * held is freed here and the new message is freed with the request.
 * Returns false after printing an error. */
static bool replace_memory(const char *file,
                           Reshard__V1__RuntimeBinding **binding,
                           Reshard__V1__PooledMemory **pooled) {
  ProtobufCMessage *p =
      load_message(file, &reshard__v1__pooled_memory__descriptor);
  if (p == NULL)
    return false;
  Reshard__V1__PooledMemory *pm = (Reshard__V1__PooledMemory *)p;
  if (pm->pool_case == RESHARD__V1__POOLED_MEMORY__POOL__NOT_SET) {
    input_error("%s: names no pool: set memory_id or inline_pool", file);
    protobuf_c_message_free_unpacked(p, NULL);
    return false;
  }
  if (*binding != NULL)
    protobuf_c_message_free_unpacked(&(*binding)->base, NULL);
  *binding = NULL;
  if (*pooled != NULL)
    protobuf_c_message_free_unpacked(&(*pooled)->base, NULL);
  *pooled = pm;
  return true;
}

/* The store plan prints as its message: the copies go region to Part, so
 * the load plan's document (pages by key) does not describe it. */
static int cmd_plan_store(reshard_client *c, int argc, char **argv) {
  const char *file = NULL, *pooled = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--pooled") == 0) {
      if (i + 1 >= argc)
        return usage_error("--pooled needs a FILE.json");
      pooled = argv[++i];
    } else if (strncmp(argv[i], "--pooled=", 9) == 0) {
      pooled = argv[i] + 9;
    } else if (file == NULL) {
      file = argv[i];
    } else {
      return usage_error("plan-store takes exactly one FILE.json");
    }
  }
  if (file == NULL)
    return usage_error("plan-store takes exactly one FILE.json");
  ProtobufCMessage *m =
      load_message(file, &reshard__v1__plan_store_request__descriptor);
  if (m == NULL)
    return EXIT_USAGE;
  Reshard__V1__PlanStoreRequest *sreq = (Reshard__V1__PlanStoreRequest *)m;
  if (pooled != NULL &&
      !replace_memory(pooled, &sreq->binding, &sreq->pooled)) {
    protobuf_c_message_free_unpacked(m, NULL);
    return EXIT_USAGE;
  }
  Reshard__V1__PlanStoreResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_plan_store(c, sreq, 0, &resp, &st);
  protobuf_c_message_free_unpacked(m, NULL);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  int rc = print_message_json(&resp->base);
  reshard__v1__plan_store_response__free_unpacked(resp, NULL);
  return rc;
}

static int cmd_plan(reshard_client *c, int argc, char **argv) {
  const char *file = NULL, *pooled = NULL;
  const char *format = "table";
  bool runs = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0) {
      runs = true;
    } else if (strcmp(argv[i], "--pooled") == 0) {
      if (i + 1 >= argc)
        return usage_error("--pooled needs a FILE.json");
      pooled = argv[++i];
    } else if (strncmp(argv[i], "--pooled=", 9) == 0) {
      pooled = argv[i] + 9;
    } else if (strcmp(argv[i], "--format") == 0) {
      if (i + 1 >= argc)
        return usage_error("--format needs table or json");
      format = argv[++i];
    } else if (strncmp(argv[i], "--format=", 9) == 0) {
      format = argv[i] + 9;
    } else if (file == NULL) {
      file = argv[i];
    } else {
      return usage_error("plan takes exactly one FILE.json");
    }
  }
  if (file == NULL)
    return usage_error("plan takes exactly one FILE.json");
  bool json = strcmp(format, "json") == 0;
  if (!json && strcmp(format, "table") != 0)
    return usage_error("--format must be table or json, not \"%s\"", format);
  ProtobufCMessage *m =
      load_message(file, &reshard__v1__plan_load_request__descriptor);
  if (m == NULL)
    return EXIT_USAGE;
  Reshard__V1__PlanLoadRequest *lreq = (Reshard__V1__PlanLoadRequest *)m;
  /* --runs asks for them whatever the file says; without it the file's
   * own `runs` field stands. */
  if (runs)
    lreq->runs = true;
  if (pooled != NULL &&
      !replace_memory(pooled, &lreq->binding, &lreq->pooled)) {
    protobuf_c_message_free_unpacked(m, NULL);
    return EXIT_USAGE;
  }
  Reshard__V1__PlanLoadResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_plan_load(c, lreq, 0, &resp, &st);
  protobuf_c_message_free_unpacked(m, NULL);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  char err[512];
  if (reshard_plan_check(resp, err, sizeof err) != 0) {
    fprintf(stderr, "error: INTERNAL: the server sent an invalid plan: %s\n",
            err);
    reshard__v1__plan_load_response__free_unpacked(resp, NULL);
    return EXIT_RPC;
  }
  int rc = json ? reshard_plan_print_json(stdout, resp)
                : reshard_plan_print_table(stdout, resp);
  reshard__v1__plan_load_response__free_unpacked(resp, NULL);
  if (rc != 0) {
    fprintf(stderr, "error: cannot write the plan: %s\n", strerror(errno));
    return EXIT_RPC;
  }
  return output_done();
}

/* PlanTransfer (SPEC §2.6): the plan of tokens [0, token_count) from the
 * source instance's pools into the target's memory, printed like `plan`
 * prints a load plan (docs/clients.md). */
static int cmd_transfer(reshard_client *c, int argc, char **argv) {
  const char *file = NULL, *pooled = NULL;
  const char *format = "table";
  bool runs = false;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--runs") == 0) {
      runs = true;
    } else if (strcmp(argv[i], "--pooled") == 0) {
      if (i + 1 >= argc)
        return usage_error("--pooled needs a FILE.json");
      pooled = argv[++i];
    } else if (strncmp(argv[i], "--pooled=", 9) == 0) {
      pooled = argv[i] + 9;
    } else if (strcmp(argv[i], "--format") == 0) {
      if (i + 1 >= argc)
        return usage_error("--format needs table or json");
      format = argv[++i];
    } else if (strncmp(argv[i], "--format=", 9) == 0) {
      format = argv[i] + 9;
    } else if (file == NULL) {
      file = argv[i];
    } else {
      return usage_error("transfer takes exactly one FILE.json");
    }
  }
  if (file == NULL)
    return usage_error("transfer takes exactly one FILE.json");
  bool json = strcmp(format, "json") == 0;
  if (!json && strcmp(format, "table") != 0)
    return usage_error("--format must be table or json, not \"%s\"", format);
  ProtobufCMessage *m =
      load_message(file, &reshard__v1__plan_transfer_request__descriptor);
  if (m == NULL)
    return EXIT_USAGE;
  Reshard__V1__PlanTransferRequest *treq =
      (Reshard__V1__PlanTransferRequest *)m;
  if (runs)
    treq->runs = true;
  if (pooled != NULL &&
      !replace_memory(pooled, &treq->binding, &treq->pooled)) {
    protobuf_c_message_free_unpacked(m, NULL);
    return EXIT_USAGE;
  }
  Reshard__V1__PlanTransferResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_plan_transfer(c, treq, 0, &resp, &st);
  protobuf_c_message_free_unpacked(m, NULL);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  char err[512];
  if (reshard_transfer_plan_check(resp, err, sizeof err) != 0) {
    fprintf(stderr, "error: INTERNAL: the server sent an invalid plan: %s\n",
            err);
    reshard__v1__plan_transfer_response__free_unpacked(resp, NULL);
    return EXIT_RPC;
  }
  int rc = json ? reshard_transfer_plan_print_json(stdout, resp)
                : reshard_transfer_plan_print_table(stdout, resp);
  reshard__v1__plan_transfer_response__free_unpacked(resp, NULL);
  if (rc != 0) {
    fprintf(stderr, "error: cannot write the plan: %s\n", strerror(errno));
    return EXIT_RPC;
  }
  return output_done();
}

static int cmd_register_memory(reshard_client *c, int argc, char **argv) {
  const char *file = NULL, *placement = NULL, *placement_id = NULL;
  for (int i = 0; i < argc; i++) {
    if (strcmp(argv[i], "--placement") == 0 ||
        strcmp(argv[i], "--placement-id") == 0) {
      if (i + 1 >= argc)
        return usage_error("%s needs a value", argv[i]);
      if (strcmp(argv[i], "--placement") == 0)
        placement = argv[i + 1];
      else
        placement_id = argv[i + 1];
      i++;
    } else if (strncmp(argv[i], "--placement=", 12) == 0) {
      placement = argv[i] + 12;
    } else if (strncmp(argv[i], "--placement-id=", 15) == 0) {
      placement_id = argv[i] + 15;
    } else if (file == NULL) {
      file = argv[i];
    } else {
      return usage_error("register-memory takes exactly one FILE.json");
    }
  }
  if (file == NULL)
    return usage_error("register-memory takes exactly one FILE.json");
  if (placement != NULL && placement_id != NULL)
    return usage_error("give --placement or --placement-id, not both");
  if (placement_id != NULL && *placement_id == '\0')
    return usage_error("--placement-id must not be empty");
  /* Without a target flag FILE is the whole request; with one, FILE is the
   * MemoryPool and the flag names its placement. */
  ProtobufCMessage *whole = NULL, *pool = NULL, *target = NULL;
  Reshard__V1__RegisterMemoryRequest local =
      RESHARD__V1__REGISTER_MEMORY_REQUEST__INIT;
  Reshard__V1__RegisterMemoryRequest *req = &local;
  if (placement == NULL && placement_id == NULL) {
    whole =
        load_message(file, &reshard__v1__register_memory_request__descriptor);
    if (whole == NULL)
      return EXIT_USAGE;
    req = (Reshard__V1__RegisterMemoryRequest *)whole;
  } else {
    pool = load_message(file, &reshard__v1__memory_pool__descriptor);
    if (pool == NULL)
      return EXIT_USAGE;
    local.pool = (Reshard__V1__MemoryPool *)pool;
    if (placement != NULL) {
      target = load_message(placement, &reshard__v1__placement__descriptor);
      if (target == NULL) {
        protobuf_c_message_free_unpacked(pool, NULL);
        return EXIT_USAGE;
      }
      local.target_case =
          RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT;
      local.placement = (Reshard__V1__Placement *)target;
    } else {
      local.target_case =
          RESHARD__V1__REGISTER_MEMORY_REQUEST__TARGET_PLACEMENT_ID;
      local.placement_id = (char *)placement_id;
    }
  }
  Reshard__V1__RegisterMemoryResponse *resp = NULL;
  reshard_client_status st;
  int code = reshard_client_register_memory(c, req, 0, &resp, &st);
  if (whole != NULL)
    protobuf_c_message_free_unpacked(whole, NULL);
  if (pool != NULL)
    protobuf_c_message_free_unpacked(pool, NULL);
  if (target != NULL)
    protobuf_c_message_free_unpacked(target, NULL);
  if (code != RESHARD_STATUS_OK)
    return rpc_error(&st);
  printf("memory_id=%s\ncreated=%s\n", resp->memory_id,
         resp->created ? "true" : "false");
  reshard__v1__register_memory_response__free_unpacked(resp, NULL);
  return output_done();
}

static int cmd_forget_memory(reshard_client *c, int argc, char **argv) {
  if (argc != 1)
    return usage_error("forget-memory takes exactly one MEMORY_ID");
  Reshard__V1__ForgetMemoryRequest req =
      RESHARD__V1__FORGET_MEMORY_REQUEST__INIT;
  req.memory_id = argv[0];
  Reshard__V1__ForgetMemoryResponse *resp = NULL;
  reshard_client_status st;
  if (reshard_client_forget_memory(c, &req, 0, &resp, &st) != RESHARD_STATUS_OK)
    return rpc_error(&st);
  printf("removed=%s\n", resp->removed ? "true" : "false");
  reshard__v1__forget_memory_response__free_unpacked(resp, NULL);
  return output_done();
}

static int cmd_health(reshard_client *c, int argc, char **argv) {
  if (argc > 1)
    return usage_error("health takes at most one SERVICE");
  Grpc__Health__V1__HealthCheckRequest req =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  if (argc == 1)
    req.service = argv[0];
  Grpc__Health__V1__HealthCheckResponse *resp = NULL;
  reshard_client_status st;
  if (reshard_client_health_check(c, &req, 0, &resp, &st) != RESHARD_STATUS_OK)
    return rpc_error(&st);
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
      &grpc__health__v1__health_check_response__serving_status__descriptor,
      (int)resp->status);
  printf("%s\n", v != NULL ? v->name : "UNKNOWN");
  bool serving =
      resp->status ==
      GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING;
  grpc__health__v1__health_check_response__free_unpacked(resp, NULL);
  int rc = output_done();
  if (rc != EXIT_OK)
    return rc;
  return serving ? EXIT_OK : EXIT_NOT_SERVING;
}

typedef struct command {
  const char *name;
  int (*run)(reshard_client *c, int argc, char **argv);
} command;

static const command commands[] = {
    {"publish", cmd_publish},
    {"get", cmd_get},
    {"register", cmd_register},
    {"forget", cmd_forget},
    {"register-placement", cmd_register_placement},
    {"plan-upload", cmd_plan_upload},
    {"plan", cmd_plan},
    {"plan-store", cmd_plan_store},
    {"transfer", cmd_transfer},
    {"register-memory", cmd_register_memory},
    {"forget-memory", cmd_forget_memory},
    {"health", cmd_health},
};

static bool parse_timeout(const char *s, int64_t *ms) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno != 0 || end == s || *end != '\0' || !(v > 0) || v > 86400.0 * 365)
    return false;
  *ms = (int64_t)(v * 1000.0);
  if (*ms < 1)
    *ms = 1;
  return true;
}

#define TIMEOUT SIZE_MAX

/* A global option with a value, and the variable it defaults from. */
typedef struct global_option {
  const char *flag;
  const char *env;
  size_t offset; /* of the const char * in `options`; TIMEOUT for
                    --timeout */
} global_option;

static const global_option global_options[] = {
    {"--target", "RESHARDCTL_TARGET", offsetof(options, target)},
    {"--timeout", NULL, TIMEOUT},
    {"--tls-ca", "RESHARDCTL_TLS_CA", offsetof(options, tls.ca_file)},
    {"--tls-cert", "RESHARDCTL_TLS_CERT", offsetof(options, tls.cert_file)},
    {"--tls-key", "RESHARDCTL_TLS_KEY", offsetof(options, tls.key_file)},
    {"--tls-server-name", "RESHARDCTL_TLS_SERVER_NAME",
     offsetof(options, tls.server_name)},
};

int main(int argc, char **argv) {
  options opt;
  memset(&opt, 0, sizeof opt);
  opt.timeout_ms = 10000;
  for (size_t k = 0; k < sizeof global_options / sizeof *global_options; k++) {
    const global_option *g = &global_options[k];
    const char *value = g->offset != TIMEOUT ? getenv(g->env) : NULL;
    if (value != NULL && *value != '\0')
      *(const char **)((char *)&opt + g->offset) = value;
  }
  if (opt.target == NULL)
    opt.target = DEFAULT_TARGET;

  int i = 1;
  for (; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
    const char *a = argv[i];
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      fputs(usage_text, stdout);
      return EXIT_OK;
    }
    const global_option *g = NULL;
    const char *value = NULL;
    for (size_t k = 0; k < sizeof global_options / sizeof *global_options;
         k++) {
      size_t n = strlen(global_options[k].flag);
      if (strncmp(a, global_options[k].flag, n) == 0 &&
          (a[n] == '\0' || a[n] == '=')) {
        g = &global_options[k];
        value = a[n] == '=' ? a + n + 1 : NULL;
      }
    }
    if (g == NULL)
      return usage_error("unknown option %s", a);
    if (value == NULL) {
      if (i + 1 >= argc)
        return usage_error("%s needs a value", g->flag);
      value = argv[++i];
    }
    if (g->offset == TIMEOUT) {
      if (!parse_timeout(value, &opt.timeout_ms))
        return usage_error("--timeout must be a positive number of seconds, "
                           "not \"%s\"",
                           value);
    } else if (*value == '\0') {
      return usage_error("%s must not be empty", g->flag);
    } else {
      *(const char **)((char *)&opt + g->offset) = value;
    }
  }
  if (i >= argc)
    return usage_error("no command given");
  const command *cmd = NULL;
  for (size_t k = 0; k < sizeof commands / sizeof *commands; k++)
    if (strcmp(commands[k].name, argv[i]) == 0)
      cmd = &commands[k];
  if (cmd == NULL)
    return usage_error("unknown command \"%s\"", argv[i]);

  bool tls = opt.tls.ca_file != NULL || opt.tls.cert_file != NULL ||
             opt.tls.key_file != NULL;
  reshard_client_status st;
  reshard_client *client = reshard_client_open_tls(opt.target, opt.timeout_ms,
                                                   tls ? &opt.tls : NULL, &st);
  if (client == NULL) {
    fprintf(stderr, "error: %s\n", st.message);
    return st.code == 3 ? EXIT_USAGE : EXIT_RPC;
  }
  int rc = cmd->run(client, argc - i - 1, argv + i + 1);
  reshard_client_close(client);
  return rc;
}
