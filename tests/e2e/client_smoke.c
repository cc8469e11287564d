/* client_smoke: exercises the reshard_client C API against a running
 * reshardd. Usage: client_smoke HOST:PORT. Driven by test_reshardctl.py,
 * which starts the daemon. Prints one line per failed check and exits 1 if
 * any failed, else prints "ok N checks" and exits 0. */
#include <stdio.h>
#include <string.h>

#include "reshard_client.h"

static int checks;
static int failures;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    checks++;                                                                  \
    if (!(cond)) {                                                             \
      failures++;                                                              \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                   \
      printf(__VA_ARGS__);                                                     \
      printf("\n");                                                            \
    }                                                                          \
  } while (0)

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: client_smoke HOST:PORT\n");
    return 2;
  }
  reshard_client *c = reshard_client_open(argv[1], 10000);
  CHECK(c != NULL, "open");
  if (c == NULL)
    return 1;
  reshard_client_status st;

  /* Health/Check. */
  Grpc__Health__V1__HealthCheckRequest hreq =
      GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
  Grpc__Health__V1__HealthCheckResponse *hresp = NULL;
  int code = reshard_client_health_check(c, &hreq, 0, &hresp, &st);
  CHECK(code == RESHARD_STATUS_OK, "%s: %s", reshard_status_code_name(code),
        st.message);
  CHECK(
      hresp != NULL &&
          hresp->status ==
              GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING,
      "health status");
  if (hresp != NULL)
    grpc__health__v1__health_check_response__free_unpacked(hresp, NULL);

  /* PlanUpload of a TP2 writer, then PublishManifest of its layout. */
  uint32_t layers[] = {0, 1, 2, 3};
  Reshard__V1__Descriptor desc = RESHARD__V1__DESCRIPTOR__INIT;
  desc.n_global_layer_ids = 4;
  desc.global_layer_ids = layers;
  desc.dtype = "bf16";
  desc.itemsize = 2;
  desc.page_size = 16;
  desc.total_kv_heads = 4;
  desc.key_head_dim = 8;
  desc.value_head_dim = 8;
  Reshard__V1__Rank ranks[2] = {RESHARD__V1__RANK__INIT,
                                RESHARD__V1__RANK__INIT};
  Reshard__V1__PlacementPart parts[2] = {RESHARD__V1__PLACEMENT_PART__INIT,
                                         RESHARD__V1__PLACEMENT_PART__INIT};
  Reshard__V1__PlacementPart *part_ptrs[2] = {&parts[0], &parts[1]};
  char *ids[2] = {"w-0", "w-1"};
  for (int i = 0; i < 2; i++) {
    ranks[i].tp = (uint32_t)i;
    parts[i].participant_id = ids[i];
    parts[i].rank = &ranks[i];
    parts[i].n_layer_ids = 4;
    parts[i].layer_ids = layers;
    parts[i].head_start = (uint32_t)(2 * i);
    parts[i].head_count = 2;
    parts[i].replica_count = 1;
  }
  Reshard__V1__Placement placement = RESHARD__V1__PLACEMENT__INIT;
  placement.resource_id = "res";
  placement.revision = "rev";
  placement.placement_set_id = "set";
  placement.dp_size = 1;
  placement.pp_size = 1;
  placement.tp_size = 2;
  placement.descriptor = &desc;
  placement.n_parts = 2;
  placement.parts = part_ptrs;
  Reshard__V1__PlanUploadRequest ureq = RESHARD__V1__PLAN_UPLOAD_REQUEST__INIT;
  ureq.placement = &placement;
  ureq.format = RESHARD__V1__STORE_FORMAT__LPHD;
  Reshard__V1__PlanUploadResponse *uresp = NULL;
  code = reshard_client_plan_upload(c, &ureq, 5000, &uresp, &st);
  CHECK(code == RESHARD_STATUS_OK, "%s: %s", reshard_status_code_name(code),
        st.message);
  if (uresp != NULL) {
    CHECK(uresp->n_part_writers == 2, "part writers %zu",
          uresp->n_part_writers);
    /* The SPEC §1.6 golden layout. */
    CHECK(strcmp(uresp->layout_id,
                 "sha256:5c41a9b1437c03b3e8e8f489ebfbf362a0c7c6a5afa8ba978a852f"
                 "9dae5454c4") == 0,
          "layout_id %s", uresp->layout_id);
    Reshard__V1__StoreManifest manifest = RESHARD__V1__STORE_MANIFEST__INIT;
    manifest.namespace_ = "ns";
    manifest.model_id = "model";
    manifest.model_revision = "rev";
    manifest.semantic_fingerprint = "fp";
    manifest.layout = uresp->layout;
    Reshard__V1__PublishManifestRequest preq =
        RESHARD__V1__PUBLISH_MANIFEST_REQUEST__INIT;
    preq.manifest = &manifest;
    Reshard__V1__PublishManifestResponse *presp = NULL;
    code = reshard_client_publish_manifest(c, &preq, 0, &presp, &st);
    CHECK(code == RESHARD_STATUS_OK, "%s: %s", reshard_status_code_name(code),
          st.message);
    if (presp != NULL) {
      CHECK(strcmp(presp->model_domain, "db2449842bf6d7d200bb53eef28f716eede23"
                                        "2fc4afb5e81b95fd9f7dedaca77") == 0,
            "model_domain %s", presp->model_domain);
      Reshard__V1__GetManifestRequest greq =
          RESHARD__V1__GET_MANIFEST_REQUEST__INIT;
      greq.manifest_key = presp->manifest_key;
      Reshard__V1__GetManifestResponse *gresp = NULL;
      code = reshard_client_get_manifest(c, &greq, 0, &gresp, &st);
      CHECK(code == RESHARD_STATUS_OK, "%s: %s", reshard_status_code_name(code),
            st.message);
      if (gresp != NULL) {
        CHECK(strcmp(gresp->layout_id, uresp->layout_id) == 0, "get layout");
        reshard__v1__get_manifest_response__free_unpacked(gresp, NULL);
      }
      reshard__v1__publish_manifest_response__free_unpacked(presp, NULL);
    }
    reshard__v1__plan_upload_response__free_unpacked(uresp, NULL);
  }

  /* NOT_FOUND with the server's message. */
  Reshard__V1__GetManifestRequest missing =
      RESHARD__V1__GET_MANIFEST_REQUEST__INIT;
  missing.manifest_key = "kv/000000000000000000000000000000000000000000000000"
                         "0000000000000000/manifests/1111111111111111111111111"
                         "111111111111111111111111111111111111111";
  Reshard__V1__GetManifestResponse *none = NULL;
  code = reshard_client_get_manifest(c, &missing, 0, &none, &st);
  CHECK(code == RESHARD_STATUS_NOT_FOUND, "%s: %s",
        reshard_status_code_name(code), st.message);
  CHECK(none == NULL, "no response on error");
  CHECK(st.message[0] != '\0', "error message present");

  /* Malformed bytes through the raw call: INVALID_ARGUMENT. */
  const uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff};
  uint8_t *raw = NULL;
  size_t raw_len = 0;
  code = reshard_client_call_raw(c, "/reshard.v1.Planner/PlanLoad", junk,
                                 sizeof junk, 0, &raw, &raw_len, &st);
  CHECK(code == RESHARD_STATUS_INVALID_ARGUMENT, "%s: %s",
        reshard_status_code_name(code), st.message);
  CHECK(raw == NULL, "no raw response on error");

  /* An unknown method: UNIMPLEMENTED. */
  code = reshard_client_call_raw(c, "/reshard.v1.Planner/Nope", junk, 0, 0,
                                 &raw, &raw_len, &st);
  CHECK(code == RESHARD_STATUS_UNIMPLEMENTED, "%s: %s",
        reshard_status_code_name(code), st.message);

  /* Status names. */
  CHECK(strcmp(reshard_status_code_name(RESHARD_STATUS_RESOURCE_EXHAUSTED),
               "RESOURCE_EXHAUSTED") == 0,
        "name");
  CHECK(strcmp(reshard_status_code_name(99), "UNKNOWN_CODE") == 0, "name");
  reshard_client_close(c);

  /* A target nobody listens on: UNAVAILABLE, reported by the call. */
  c = reshard_client_open("127.0.0.1:1", 3000);
  code = reshard_client_health_check(c, &hreq, 0, &hresp, &st);
  CHECK(code == RESHARD_STATUS_UNAVAILABLE, "%s: %s",
        reshard_status_code_name(code), st.message);
  reshard_client_close(c);

  if (failures > 0) {
    printf("%d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("ok %d checks\n", checks);
  return 0;
}
