/* Tests daemon/tls.c: the files are checked before gRPC sees them, with
 * messages naming the flag. Certificates are made here by the openssl
 * command (never committed). Serving, mutual TLS and rotation are proven
 * end to end in tests/e2e/test_security.py. */
#include <criterion/criterion.h>
#include <grpc/grpc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/tls.h"

static char dir[] = "/tmp/reshard-test-tls-XXXXXX";
static char path[8][256];

static const char *file(int i, const char *name) {
  snprintf(path[i], sizeof path[i], "%s/%s", dir, name);
  return path[i];
}

static void run(const char *command) {
  char line[2048];
  snprintf(line, sizeof line, "cd %s && %s >/dev/null 2>&1", dir, command);
  cr_assert_eq(system(line), 0, "%s", command);
}

static void make_certificates(void) {
  cr_assert_not_null(mkdtemp(dir));
  run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=ca");
  run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
      "-nodes -keyout other.key -out other.pem -days 1 -subj /CN=other");
  run("echo not a certificate > junk.pem");
}

static void remove_certificates(void) {
  run("rm -f ca.key ca.pem other.key other.pem junk.pem && cd / && rmdir "
      "\"$OLDPWD\"");
}

TestSuite(tls, .init = make_certificates, .fini = remove_certificates);

static void expect_refused(const reshard_tls_files *files, const char *flag,
                           const char *rule) {
  reshard_error err;
  reshard_tls *tls = reshard_tls_create(files, &err);
  cr_assert_null(tls);
  cr_assert_eq(err.code, RESHARD_INVALID_ARGUMENT);
  cr_assert(strstr(err.message, flag) != NULL, "%s", err.message);
  cr_assert(strstr(err.message, rule) != NULL, "%s", err.message);
  cr_assert(strstr(err.message, "PRIVATE KEY") == NULL);
}

Test(tls, good_files_make_credentials) {
  grpc_init();
  reshard_tls_files files = {file(0, "ca.pem"), file(1, "ca.key"),
                             file(2, "other.pem")};
  reshard_error err;
  reshard_tls *tls = reshard_tls_create(&files, &err);
  cr_assert_not_null(tls, "%s", err.message);
  grpc_server_credentials *creds = reshard_tls_server_credentials(tls);
  cr_assert_not_null(creds);
  grpc_server_credentials_release(creds);
  grpc_shutdown();
  reshard_tls_free(tls);
}

Test(tls, bad_files_name_their_flag) {
  reshard_tls_files missing = {file(0, "none.pem"), file(1, "ca.key"), NULL};
  expect_refused(&missing, "--tls-cert", "No such file");
  reshard_tls_files junk = {file(0, "junk.pem"), file(1, "ca.key"), NULL};
  expect_refused(&junk, "--tls-cert", "no PEM certificate");
  reshard_tls_files not_key = {file(0, "ca.pem"), file(1, "ca.pem"), NULL};
  expect_refused(&not_key, "--tls-key", "no PEM private key");
  reshard_tls_files mismatch = {file(0, "ca.pem"), file(1, "other.key"), NULL};
  expect_refused(&mismatch, "--tls-key", "does not match");
  reshard_tls_files bad_ca = {file(0, "ca.pem"), file(1, "ca.key"),
                              file(2, "junk.pem")};
  expect_refused(&bad_ca, "--tls-client-ca", "no PEM certificate");
}
