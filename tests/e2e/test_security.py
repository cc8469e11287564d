"""End-to-end tests of SPEC §3.5's transport security with the real daemon,
stock grpcio and reshardctl (docs/security.md):

* TlsTests — --tls-cert/--tls-key serve TLS and refuse plaintext; mutual TLS
  with --tls-client-ca refuses clients without a certificate of that CA;
  certificate files replaced on disk are served to new connections without
  a restart, and a broken replacement keeps the previous certificate; bad
  files refuse the start (exit 2, naming the flag). Certificates are made
  by openssl in a temporary directory (tests/e2e/reshard_certs.py).
* ExposureTests — plaintext gRPC or metrics on a non-loopback address
  refuse to start (exit 2 naming --tls-cert and --allow-insecure-remote)
  unless --allow-insecure-remote is given; TLS lifts the rule for gRPC.
* RedisAuthTests — a redis-server with requirepass: the password from the
  URL or --redis-password-file, AUTH again after the connection is killed,
  a wrong password fails calls with UNAVAILABLE naming AUTH, and the
  password appears in no log line, no --check-config output, no metric.

Run through ctest (tests/e2e/CMakeLists.txt sets the environment).
"""

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.request

import grpc

import reshard_e2e as e
from reshard_certs import CertAuthority, read
from reshard_e2e import pb
from reshard_redis import RedisServer

Code = grpc.StatusCode
DESC = e.make_descriptor(4, 4, 8, 8, 8)
ADDRESS_RE = re.compile(r"msg=\"?listening\b.*?\baddress=\"?[^ \"]*:(\d+)")


def daemon_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("RESHARDD_")}


class AnyAddressDaemon(e.Daemon):
    """A Daemon whose port is read from any listening address."""

    def _find_port(self):
        for line in self.lines:
            m = ADDRESS_RE.search(line)
            if m and int(m.group(1)) != 0:
                return int(m.group(1))
        return None


def run_daemon(*flags, timeout=20):
    """Runs reshardd expecting it to exit; returns (code, stderr)."""
    proc = subprocess.run([e.DAEMON, *flags], env=daemon_env(),
                          stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=timeout)
    return proc.returncode, proc.stderr.decode("utf-8", "replace")


def secure_channel(target, ca, cert=None, key=None):
    creds = grpc.ssl_channel_credentials(
        root_certificates=read(ca),
        private_key=read(key) if key else None,
        certificate_chain=read(cert) if cert else None)
    return grpc.secure_channel(target, creds,
                               options=[("grpc.enable_retries", 0)])


def health(channel, timeout=5):
    """Health status, or the grpc.StatusCode of the failure."""
    try:
        return e.Planner(channel).health(timeout=timeout)
    except grpc.RpcError as err:
        return err.code()
    finally:
        channel.close()


def reshardctl(*argv, env=None):
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("RESHARDCTL_")}
    full_env.update(env or {})
    proc = subprocess.run([e.RESHARDCTL, *argv], env=full_env,
                          stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=60)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def replace_file(path, source):
    """Swaps the file in one rename, as Kubernetes' secret volumes do."""
    tmp = path + ".new"
    shutil.copyfile(source, tmp)
    os.replace(tmp, path)


class SecurityCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="reshard-security-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def start(self, *flags, daemon_class=e.Daemon, listen="127.0.0.1:0",
              catalog="memory"):
        daemon = daemon_class(*flags, listen=listen, catalog=catalog)
        daemon.start()
        self.addCleanup(daemon.kill)
        return daemon

    def stop(self, daemon):
        code = daemon.stop()
        self.assertEqual(code, 0, daemon.log_text())


class TlsTests(SecurityCase):

    def setUp(self):
        super().setUp()
        self.ca = CertAuthority(self.tmp, "ca")
        self.cert, self.key = self.ca.issue("server")
        self.client_cert, self.client_key = self.ca.issue("client",
                                                          server=False)

    def test_tls_serves_and_refuses_plaintext(self):
        daemon = self.start("--tls-cert", self.cert, "--tls-key", self.key)
        self.assertTrue(any("tls=on" in line for line in daemon.log_lines()))
        self.assertEqual(health(secure_channel(daemon.target, self.ca.pem)),
                         e.SERVING)
        self.assertEqual(health(daemon.channel()), Code.UNAVAILABLE)
        # The C client through reshardctl: flags and variables.
        code, out, err = reshardctl("--target", daemon.target, "--tls-ca",
                                    self.ca.pem, "health")
        self.assertEqual(code, 0, err)
        self.assertIn("SERVING", out)
        code, out, err = reshardctl("health", env={
            "RESHARDCTL_TARGET": daemon.target,
            "RESHARDCTL_TLS_CA": self.ca.pem})
        self.assertEqual(code, 0, err)
        code, _, err = reshardctl("--target", daemon.target, "health")
        self.assertEqual(code, 1, "plaintext must not reach a TLS port")
        self.assertIn("UNAVAILABLE", err)
        # A name the certificate does not carry fails verification...
        other = CertAuthority(self.tmp, "other-ca")
        code, _, _ = reshardctl("--target", daemon.target, "--tls-ca",
                                other.pem, "health")
        self.assertEqual(code, 1, "a server of another CA must be refused")
        code, _, _ = reshardctl("--target", daemon.target, "--tls-ca",
                                self.ca.pem, "--tls-server-name",
                                "reshardd.example", "health")
        self.assertEqual(code, 1, "a name the certificate lacks")
        # ... a missing file is a usage error naming the flag.
        code, _, err = reshardctl("--target", daemon.target, "--tls-ca",
                                  os.path.join(self.tmp, "nope.pem"),
                                  "health")
        self.assertEqual(code, 2)
        self.assertIn("--tls-ca", err)
        self.stop(daemon)

    def test_mutual_tls_requires_a_client_certificate_of_the_ca(self):
        daemon = self.start("--tls-cert", self.cert, "--tls-key", self.key,
                            "--tls-client-ca", self.ca.pem)
        self.assertTrue(any("tls=mutual" in line
                            for line in daemon.log_lines()))
        self.assertEqual(health(secure_channel(
            daemon.target, self.ca.pem, self.client_cert, self.client_key)),
            e.SERVING)
        self.assertEqual(health(secure_channel(daemon.target, self.ca.pem)),
                         Code.UNAVAILABLE)
        stranger = CertAuthority(self.tmp, "stranger-ca")
        cert, key = stranger.issue("stranger", server=False)
        self.assertEqual(health(secure_channel(daemon.target, self.ca.pem,
                                               cert, key)),
                         Code.UNAVAILABLE)
        # A real call, not only health, through the C client with mTLS.
        code, _, err = reshardctl(
            "--target", daemon.target, "--tls-ca", self.ca.pem,
            "--tls-cert", self.client_cert, "--tls-key", self.client_key,
            "get", "kv/%s/manifests/%s" % ("a" * 64, "b" * 64))
        self.assertEqual(code, 1, err)
        self.assertIn("NOT_FOUND", err)
        code, _, err = reshardctl("health", env={
            "RESHARDCTL_TARGET": daemon.target,
            "RESHARDCTL_TLS_CA": self.ca.pem,
            "RESHARDCTL_TLS_CERT": self.client_cert,
            "RESHARDCTL_TLS_KEY": self.client_key})
        self.assertEqual(code, 0, err)
        code, _, err = reshardctl("--target", daemon.target, "--tls-ca",
                                  self.ca.pem, "health")
        self.assertEqual(code, 1, "no client certificate")
        code, _, err = reshardctl("--target", daemon.target, "--tls-ca",
                                  self.ca.pem, "--tls-cert",
                                  self.client_cert, "health")
        self.assertEqual(code, 2, "a certificate without its key")
        self.assertIn("--tls-key", err)
        self.stop(daemon)

    def test_rotation_without_restart(self):
        live_cert = os.path.join(self.tmp, "live.pem")
        live_key = os.path.join(self.tmp, "live.key")
        shutil.copyfile(self.cert, live_cert)
        shutil.copyfile(self.key, live_key)
        daemon = self.start("--tls-cert", live_cert, "--tls-key", live_key)
        old = secure_channel(daemon.target, self.ca.pem)
        self.assertEqual(e.Planner(old).health(), e.SERVING)

        # cert-manager issues from a new CA: key first, then certificate.
        new_ca = CertAuthority(self.tmp, "new-ca")
        new_cert, new_key = new_ca.issue("server2")
        replace_file(live_key, new_key)
        # Half rotated (key and certificate disagree): the old pair stays.
        self.assertEqual(health(secure_channel(daemon.target, self.ca.pem)),
                         e.SERVING)
        replace_file(live_cert, new_cert)
        self.assertEqual(health(secure_channel(daemon.target, new_ca.pem)),
                         e.SERVING)
        self.assertEqual(health(secure_channel(daemon.target, self.ca.pem)),
                         Code.UNAVAILABLE,
                         "new connections must get the new certificate")
        # The connection made before the rotation keeps working.
        self.assertEqual(e.Planner(old).health(), e.SERVING)
        old.close()
        for message in ("tls certificate reloaded",
                        "keeping the previous certificate"):
            self.assertTrue(daemon.wait_log_lines(
                lambda line, m=message: m in line, 1), daemon.log_text(200))
        self.assertEqual(daemon.proc.poll(), None)
        self.stop(daemon)

    def test_bad_files_refuse_the_start(self):
        missing = os.path.join(self.tmp, "missing.pem")
        code, err = run_daemon("--catalog", "memory", "--tls-cert", missing,
                               "--tls-key", self.key)
        self.assertEqual(code, 2, err)
        self.assertIn("--tls-cert", err)
        self.assertIn(missing, err)
        _, other_key = self.ca.issue("other")
        code, err = run_daemon("--catalog", "memory", "--tls-cert",
                               self.cert, "--tls-key", other_key)
        self.assertEqual(code, 2, err)
        self.assertIn("does not match", err)
        code, err = run_daemon("--catalog", "memory", "--tls-cert",
                               self.cert, "--tls-key", self.key,
                               "--tls-client-ca", self.key)
        self.assertEqual(code, 2, err)
        self.assertIn("--tls-client-ca", err)
        # The key's content never reaches the output.
        self.assertNotIn("PRIVATE KEY", err)


class ExposureTests(SecurityCase):

    def test_plaintext_remote_listen_is_refused(self):
        code, err = run_daemon("--catalog", "memory", "--listen",
                               "0.0.0.0:0")
        self.assertEqual(code, 2, err)
        for word in ("--tls-cert", "--allow-insecure-remote", "0.0.0.0:0"):
            self.assertIn(word, err)
        env = dict(daemon_env(), RESHARDD_LISTEN="[::]:0")
        proc = subprocess.run([e.DAEMON, "--catalog", "memory"], env=env,
                              capture_output=True, timeout=20)
        self.assertEqual(proc.returncode, 2)
        self.assertIn(b"--allow-insecure-remote", proc.stderr)

    def test_plaintext_remote_metrics_are_refused(self):
        code, err = run_daemon("--catalog", "memory", "--metrics-listen",
                               "0.0.0.0:0")
        self.assertEqual(code, 2, err)
        self.assertIn("--metrics-listen", err)
        self.assertIn("--allow-insecure-remote", err)

    def test_allow_insecure_remote_and_tls_open_the_door(self):
        daemon = self.start("--allow-insecure-remote", "--metrics-listen",
                            "0.0.0.0:0", listen="0.0.0.0:0",
                            daemon_class=AnyAddressDaemon)
        self.assertEqual(health(daemon.channel()), e.SERVING)
        self.stop(daemon)
        ca = CertAuthority(self.tmp)
        cert, key = ca.issue("server")
        daemon = self.start("--tls-cert", cert, "--tls-key", key,
                            listen="0.0.0.0:0", daemon_class=AnyAddressDaemon)
        self.assertEqual(health(secure_channel(daemon.target, ca.pem)),
                         e.SERVING)
        self.stop(daemon)


class RedisAuthTests(SecurityCase):
    PASSWORD = "s3cret-Pa55word"

    def redis(self):
        server = RedisServer(password=self.PASSWORD).start()
        self.addCleanup(server.cleanup)
        return server

    def url(self, redis, password=None):
        return "redis://:%s@127.0.0.1:%d/0" % (password or self.PASSWORD,
                                               redis.port)

    def publish(self, daemon, name):
        channel = daemon.channel()
        self.addCleanup(channel.close)
        planner = e.Planner(channel)
        writer = e.make_placement(DESC, 1, 1, 2, name)
        pub, _ = e.Fleet(planner).publish_writer(writer, pb.LPHD,
                                                 model_id=name)
        return planner, pub

    def redis_cli(self, redis, *argv):
        return subprocess.run(
            ["redis-cli", "-p", str(redis.port), "--no-auth-warning", "-a",
             self.PASSWORD, *argv], capture_output=True, timeout=10,
            check=True).stdout.decode()

    def assert_secret_absent(self, daemon, *texts):
        for text in (daemon.log_text(10000), *texts):
            self.assertNotIn(self.PASSWORD, text)

    def test_password_in_the_url_and_auth_on_reconnect(self):
        redis = self.redis()
        daemon = self.start("--metrics-listen", "127.0.0.1:0",
                            catalog=self.url(redis))
        planner, pub = self.publish(daemon, "auth-url")
        self.assertGreater(int(self.redis_cli(redis, "DBSIZE")), 0)
        # Drop every client connection: the daemon must AUTH again.
        self.redis_cli(redis, "CLIENT", "KILL", "TYPE", "normal")
        deadline = time.monotonic() + 15
        while True:
            try:
                added = planner.RegisterPages(pb.RegisterPagesRequest(
                    manifest_key=pub.manifest_key, page_keys=["p-1"]),
                    timeout=5).added
                break
            except grpc.RpcError as err:
                self.assertEqual(err.code(), Code.UNAVAILABLE, err.details())
                self.assertLess(time.monotonic(), deadline, err.details())
                time.sleep(0.1)
        self.assertEqual(added, 1)
        # The daemon logs the reconnection before it answers, but the
        # reader thread may not have read that line yet.
        self.assertTrue(daemon.wait_log_lines(
            lambda line: "catalog reconnected" in line, 1),
            daemon.log_text(200))
        m = re.search(r"metrics_address=\"?(127\.0\.0\.1:\d+)",
                      daemon.log_text(200))
        with urllib.request.urlopen("http://%s/metrics" % m.group(1),
                                    timeout=10) as resp:
            metrics = resp.read().decode()
        self.assertIn("reshard_requests_total", metrics)
        code, err = run_daemon("--check-config", "--catalog",
                               self.url(redis))
        self.assertEqual(code, 0)
        proc = subprocess.run([e.DAEMON, "--check-config", "--catalog",
                               self.url(redis)], env=daemon_env(),
                              capture_output=True, timeout=20)
        self.assertIn(b"catalog=redis://:***@127.0.0.1", proc.stdout)
        self.stop(daemon)
        self.assert_secret_absent(daemon, metrics, proc.stdout.decode(),
                                  proc.stderr.decode())

    def test_password_file(self):
        redis = self.redis()
        secret = os.path.join(self.tmp, "redis-password")
        with open(secret, "w") as f:
            f.write(self.PASSWORD + "\n")
        os.chmod(secret, 0o600)
        daemon = self.start("--redis-password-file", secret,
                            catalog="redis://127.0.0.1:%d" % redis.port)
        self.publish(daemon, "auth-file")
        self.stop(daemon)
        self.assert_secret_absent(daemon)
        code, err = run_daemon("--catalog", "redis://127.0.0.1:1",
                               "--redis-password-file",
                               os.path.join(self.tmp, "none"))
        self.assertEqual(code, 2, err)
        self.assertIn("--redis-password-file", err)

    def test_wrong_password_fails_calls_naming_auth(self):
        redis = self.redis()
        daemon = self.start(catalog=self.url(redis, "wrong-one"))
        channel = daemon.channel()
        self.addCleanup(channel.close)
        planner = e.Planner(channel)
        err = e.rpc_error(planner.GetManifest, pb.GetManifestRequest(
            manifest_key="kv/%s/manifests/%s" % ("a" * 64, "b" * 64)),
            timeout=15)
        self.assertIsNotNone(err)
        self.assertEqual(err.code(), Code.UNAVAILABLE, err.details())
        self.assertIn("AUTH", err.details())
        self.assertNotIn("wrong-one", err.details())
        self.stop(daemon)
        self.assertNotIn("wrong-one", daemon.log_text(10000))


if __name__ == "__main__":
    unittest.main()
