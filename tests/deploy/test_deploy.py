"""Tests of deploy/, the metrics endpoint and the load tools, against the
real binaries.

* ManifestTests — deploy/k8s/*.yaml parse, and each reshardd container's
  command, args and env go through `reshardd --check-config`; probe ports,
  container ports, the metrics annotation, the catalog volume or Redis
  Service, the security context and the resources agree with what the
  daemon reports.
* ContainerfileTests — deploy/Containerfile installs through
  scripts/install-deps.sh (full in the build stage, --runtime in the final
  one), runs as the user the manifests expect, keeps the LMDB catalog in its
  volume, and its ENV is a valid configuration.
* RuntimeDepsTests — the --runtime package list covers every shared library
  the built reshardd and reshardctl load, and is installed here.
* GhzDataTests — deploy/ghz: the committed ghz configurations are what
  generate.py writes, every request file parses as the message its call
  takes (json_format.ParseDict, and the binary twin), and the set-up and
  PlanLoad requests work against a daemon.
* PrometheusTests — Debian's real prometheus scrapes the daemon on loopback
  and a counter is queried back through its HTTP API; promtool accepts the
  exposition.
* ScenarioCommandTests — scripts/scenario.py prints a plan and its figures.
* LoadSmokeTests — scripts/load.py: thousands of h2load requests at 64
  concurrent streams, zero failures by the daemon's own counters, flat
  memory.

Environment (tests/deploy/CMakeLists.txt): RESHARD_E2E_DAEMON,
RESHARD_E2E_RESHARDCTL, RESHARD_E2E_PYGEN, RESHARD_SANITIZED (1 in the
ASan+UBSan build: the load test runs fewer requests and skips the memory
bound, which ASan's quarantine would break).
"""

import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import yaml
from google.protobuf import json_format

import reshard_e2e as e
from reshard_e2e import pb

REPO = e.REPO_DIR
DEPLOY = os.path.join(REPO, "deploy")
GHZ = os.path.join(DEPLOY, "ghz")
RESHARDCTL = os.environ.get("RESHARD_E2E_RESHARDCTL", "")
SANITIZED = os.environ.get("RESHARD_SANITIZED", "0") not in ("", "0", "OFF")

sys.path.insert(0, os.path.join(REPO, "scripts"))
sys.path.insert(0, GHZ)

PLANNER_SERVICE = "reshard.v1.Planner"
HEALTH_SERVICES = ("", PLANNER_SERVICE)


# ------------------------------------------------------------- helpers --

def check_config(argv, env):
    """Runs ``reshardd --check-config`` with ``argv`` (without argv[0]) and
    exactly ``env`` (plus PATH); returns (exit status, {name: value},
    stderr)."""
    clean = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    clean.update(env)
    proc = subprocess.run([e.DAEMON, "--check-config"] + list(argv),
                          env=clean, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          timeout=30)
    config = {}
    for line in proc.stdout.decode().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key] = value
    return proc.returncode, config, proc.stderr.decode()


def port_of(address):
    return int(address.rpartition(":")[2])


def host_of(address):
    host = address.rpartition(":")[0]
    return host[1:-1] if host.startswith("[") else host


QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
QUANTITY_SCALE = {None: 1, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9,
                  "T": 1e12, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30,
                  "Ti": 1 << 40}


def quantity(text):
    """A Kubernetes resource quantity as a number (bytes or cores)."""
    m = QUANTITY.match(str(text))
    if not m:
        raise ValueError("not a quantity: %r" % text)
    return float(m.group(1)) * QUANTITY_SCALE[m.group(2)]


def load_manifests():
    out = {}
    for name in sorted(os.listdir(os.path.join(DEPLOY, "k8s"))):
        if name.endswith(".yaml"):
            with open(os.path.join(DEPLOY, "k8s", name)) as f:
                out[name] = [d for d in yaml.safe_load_all(f) if d]
    return out


def pod_templates(docs):
    """(workload, pod spec, pod metadata) of every workload in ``docs``."""
    for doc in docs:
        if doc["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            tmpl = doc["spec"]["template"]
            yield doc, tmpl["spec"], tmpl.get("metadata", {})
        elif doc["kind"] == "Pod":
            yield doc, doc["spec"], doc.get("metadata", {})


def parse_containerfile():
    """[(stage index, instruction, argument text)] with continuations
    joined."""
    path = os.path.join(DEPLOY, "Containerfile")
    with open(path) as f:
        raw = f.read()
    logical, current = [], ""
    for line in raw.splitlines():
        stripped = line.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        logical.append(current + stripped)
        current = ""
    out, stage = [], -1
    for line in logical:
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stage += 1
        out.append((stage, instruction, rest.strip()))
    return out


def runtime_packages():
    with open(os.path.join(REPO, "scripts", "install-deps.sh")) as f:
        text = f.read()
    m = re.search(r'RUNTIME_PACKAGES="([^"]*)"', text)
    if not m:
        raise AssertionError("scripts/install-deps.sh has no "
                             "RUNTIME_PACKAGES list")
    return m.group(1).replace("\\\n", " ").split()


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics_address(daemon, timeout=10.0):
    pattern = re.compile(r"metrics_address=\"?(127\.0\.0\.1:\d+)")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in daemon.log_lines():
            m = pattern.search(line)
            if m:
                return m.group(1)
        time.sleep(0.05)
    raise AssertionError("no metrics address logged:\n" + daemon.log_text())


def http_get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.status, resp.headers, resp.read().decode("utf-8")


# ------------------------------------------------------------ manifests --

class ManifestTests(unittest.TestCase):
    """deploy/k8s agrees with what reshardd accepts and reports."""

    @classmethod
    def setUpClass(cls):
        cls.manifests = load_manifests()
        cls.image_uid = None
        cls.entrypoint = None
        for stage, instruction, rest in parse_containerfile():
            if instruction == "USER":
                cls.image_uid = int(rest.split(":")[0])
            if instruction == "ENTRYPOINT":
                cls.entrypoint = json.loads(rest)[0]

    def test_the_expected_manifests_exist(self):
        self.assertIn("sidecar.yaml", self.manifests)
        self.assertIn("redis-fleet.yaml", self.manifests)
        self.assertIn("sidecar-tls.yaml", self.manifests)

    def sidecars(self):
        found = []
        for name, docs in self.manifests.items():
            for workload, spec, meta in pod_templates(docs):
                for c in spec.get("initContainers", []):
                    if c["name"] == "reshardd":
                        found.append((name, docs, workload, spec, meta, c))
                for c in spec.get("containers", []):
                    self.assertNotEqual(
                        c["name"], "reshardd",
                        "%s: reshardd must be a native sidecar "
                        "(initContainers with restartPolicy: Always)" % name)
        return found

    def test_every_sidecar_agrees_with_the_daemon(self):
        sidecars = self.sidecars()
        self.assertEqual({s[0] for s in sidecars},
                         {"sidecar.yaml", "redis-fleet.yaml",
                          "sidecar-tls.yaml"})
        for name, docs, workload, spec, meta, c in sidecars:
            with self.subTest(manifest=name, workload=workload["metadata"]
                              ["name"]):
                self.check_sidecar(name, docs, spec, meta, c)

    def check_sidecar(self, name, docs, spec, meta, c):
        self.assertEqual(c.get("restartPolicy"), "Always",
                         "a native sidecar needs restartPolicy: Always")
        command = c["command"]
        self.assertEqual(command[0], self.entrypoint,
                         "the command is the image's binary")
        env = {}
        for var in c.get("env", []):
            self.assertIn("value", var, "%s: env %s must be a literal value "
                          "so it can be checked" % (name, var["name"]))
            env[var["name"]] = str(var["value"])
        code, config, err = check_config(command[1:] + c.get("args", []),
                                         env)
        self.assertEqual(code, 0, "reshardd --check-config refused %s: %s"
                         % (name, err))

        # gRPC: every probe hits the listen port on the health service.
        listen = config["listen"]
        self.assertIn(host_of(listen), ("0.0.0.0", "::"),
                      "kubelet probes the pod IP: listen on every interface")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports["grpc"], port_of(listen))
        tls = bool(config["tls-cert"])
        if tls:
            self.check_tls(name, docs, spec, c, config)
        else:
            self.assertEqual(config["allow-insecure-remote"], "true")
        for probe_name in ("startupProbe", "livenessProbe", "readinessProbe"):
            probe = c.get(probe_name)
            if probe is None:
                self.assertNotEqual(probe_name, "livenessProbe")
                self.assertNotEqual(probe_name, "readinessProbe")
                continue
            if tls:
                service = self.check_exec_probe(probe_name, probe, listen, c)
            else:
                self.assertIn("grpc", probe, "%s must be a gRPC probe"
                              % probe_name)
                self.assertEqual(probe["grpc"]["port"], port_of(listen),
                                 "%s port" % probe_name)
                service = probe["grpc"].get("service", "")
            self.assertIn(service, HEALTH_SERVICES)
            if probe_name == "readinessProbe":
                self.assertEqual(service, PLANNER_SERVICE,
                                 "readiness follows the planner "
                                 "(NOT_SERVING while draining)")

        # Metrics: the flag, the container port and the scrape annotation.
        metrics = config["metrics-listen"]
        self.assertTrue(metrics, "metrics are enabled in the manifests")
        self.assertEqual(ports["metrics"], port_of(metrics))
        annotations = meta.get("annotations", {})
        self.assertEqual(int(annotations["prometheus.io/port"]),
                         port_of(metrics))
        self.assertEqual(annotations.get("prometheus.io/path"), "/metrics")

        # Catalog: the LMDB directory is a writable volume, or the Redis
        # address names a Service of this file that reaches Redis.
        catalog = config["catalog"]
        if catalog.startswith("lmdb:"):
            path = catalog[len("lmdb:"):]
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
            self.assertIn(path, mounts, "the LMDB path %s is not a volume "
                          "mount" % path)
            self.assertFalse(mounts[path].get("readOnly", False))
            volumes = {v["name"] for v in spec.get("volumes", [])}
            self.assertIn(mounts[path]["name"], volumes)
            self.assertEqual(spec["securityContext"].get("fsGroup"),
                             self.image_uid,
                             "the volume must be writable by the image's "
                             "user")
        elif catalog.startswith("redis://"):
            self.check_redis(docs, catalog)
        else:
            self.fail("%s: a deployment must use lmdb: or redis://, not %s"
                      % (name, catalog))

        # Hardening and resources.
        security = c["securityContext"]
        self.assertIs(security.get("readOnlyRootFilesystem"), True)
        self.assertIs(security.get("allowPrivilegeEscalation"), False)
        self.assertEqual(security.get("runAsUser"), self.image_uid)
        self.assertIn("ALL", security.get("capabilities", {}).get("drop", []))
        self.assertIs(spec["securityContext"].get("runAsNonRoot"), True)
        resources = c["resources"]
        for kind in ("requests", "limits"):
            for res in ("cpu", "memory"):
                self.assertIn(res, resources[kind], "%s.%s" % (kind, res))
                quantity(resources[kind][res])
        self.assertLessEqual(quantity(resources["requests"]["memory"]),
                             quantity(resources["limits"]["memory"]))
        self.assertLess(int(config["cache-bytes"]),
                        quantity(resources["limits"]["memory"]) / 2,
                        "--cache-bytes must leave room under the memory "
                        "limit")
        drain_ms = int(config["drain-timeout"].rstrip("ms"))
        self.assertGreater(spec.get("terminationGracePeriodSeconds", 30) * 1000,
                           drain_ms, "the grace period must outlast the "
                           "drain timeout")

    def check_exec_probe(self, probe_name, probe, listen, c):
        """kubelet's gRPC probes cannot speak TLS: reshardctl health over
        mutual TLS with files the container mounts. Returns the service."""
        self.assertIn("exec", probe, "%s of a TLS sidecar runs reshardctl"
                      % probe_name)
        argv = probe["exec"]["command"]
        self.assertEqual(os.path.basename(argv[0]), "reshardctl")
        flags = dict(zip(argv[1::2], argv[2::2]))
        self.assertEqual(port_of(flags["--target"]), port_of(listen))
        self.assertIn(host_of(flags["--target"]), ("127.0.0.1", "localhost"))
        mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
        for flag in ("--tls-ca", "--tls-cert", "--tls-key"):
            self.assertTrue(any(flags[flag].startswith(m + "/")
                                for m in mounts),
                            "%s %s is not in a mounted volume"
                            % (flag, flags[flag]))
        health = argv.index("health")
        return argv[health + 1] if health + 1 < len(argv) else ""

    def check_tls(self, name, docs, spec, c, config):
        """Every TLS file comes from a Secret volume that a cert-manager
        Certificate of this file writes, under cert-manager's key names."""
        certificates = {d["spec"]["secretName"]: d for d in docs
                        if d["kind"] == "Certificate"}
        issuers = {d["metadata"]["name"] for d in docs
                   if d["kind"] in ("Issuer", "ClusterIssuer")}
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts", [])}
        expected = {"tls-cert": "tls.crt", "tls-key": "tls.key",
                    "tls-client-ca": "ca.crt"}
        self.assertTrue(config["tls-client-ca"], "%s: mutual TLS" % name)
        for flag, key in expected.items():
            path = config[flag]
            directory, base = os.path.split(path)
            self.assertEqual(base, key, "--%s reads cert-manager's %s"
                             % (flag, key))
            self.assertIn(directory, mounts, "--%s %s is not a mount"
                          % (flag, path))
            mount = mounts[directory]
            self.assertNotIn("subPath", mount, "a subPath mount never sees "
                             "a renewed certificate")
            secret = volumes[mount["name"]].get("secret")
            self.assertIsNotNone(secret, "--%s must come from a Secret"
                                 % flag)
            cert = certificates.get(secret["secretName"])
            self.assertIsNotNone(cert, "no Certificate writes Secret %s"
                                 % secret["secretName"])
            self.assertIn(cert["spec"]["issuerRef"]["name"], issuers)
            self.assertIn("server auth", cert["spec"].get("usages", []))
            self.assertIn("127.0.0.1", cert["spec"].get("ipAddresses", []),
                          "the probes and the inference container dial "
                          "127.0.0.1")

    def check_redis(self, docs, catalog):
        m = re.match(r"^redis://([^:/]+):(\d+)(?:/(\d+))?$", catalog)
        self.assertIsNotNone(m, catalog)
        host, port = m.group(1), int(m.group(2))
        services = {d["metadata"]["name"]: d for d in docs
                    if d["kind"] == "Service"}
        self.assertIn(host, services, "no Service %s in the file" % host)
        service = services[host]
        by_port = {p["port"]: p for p in service["spec"]["ports"]}
        self.assertIn(port, by_port, "Service %s has no port %d"
                      % (host, port))
        target = by_port[port].get("targetPort", port)
        selector = service["spec"]["selector"]
        reached = []
        for workload, spec, meta in pod_templates(docs):
            labels = meta.get("labels", {})
            if all(labels.get(k) == v for k, v in selector.items()):
                for c in spec.get("containers", []):
                    for p in c.get("ports", []):
                        if target in (p["containerPort"], p.get("name")):
                            reached.append(c)
        self.assertEqual(len(reached), 1, "Service %s:%d must reach one "
                         "Redis container" % (host, port))
        self.assertIn("redis", reached[0]["image"])

    def test_check_config_rejects_what_start_rejects(self):
        code, _, err = check_config(["--catalog", "lmdb:"], {})
        self.assertEqual(code, 2)
        self.assertIn("--catalog", err)
        code, _, err = check_config([], {"RESHARDD_METRICS_LISTEN": "nope"})
        self.assertEqual(code, 2)
        self.assertIn("RESHARDD_METRICS_LISTEN", err)

    def test_check_config_binds_nothing(self):
        port = free_port()
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
            s.listen(1)
            # The port is taken: a real start would fail, the check passes.
            code, config, err = check_config(
                ["--listen", "127.0.0.1:%d" % port], {})
        self.assertEqual(code, 0, err)
        self.assertEqual(config["listen"], "127.0.0.1:%d" % port)


class ContainerfileTests(unittest.TestCase):
    """deploy/Containerfile: same install script as CI, non-root, volume."""

    @classmethod
    def setUpClass(cls):
        cls.steps = parse_containerfile()

    def stage(self, n):
        return [(i, r) for s, i, r in self.steps if s == n]

    def test_two_bookworm_slim_stages(self):
        froms = [r for s, i, r in self.steps if i == "FROM"]
        self.assertEqual(len(froms), 2)
        for f in froms:
            self.assertTrue(f.startswith("debian:bookworm-slim"), f)

    def test_build_stage_uses_the_ci_install_script(self):
        runs = [r for i, r in self.stage(0) if i == "RUN"]
        self.assertTrue(any(re.search(r"(^|\s)\./scripts/install-deps\.sh"
                                      r"(\s|$)", r) and "--runtime" not in r
                            for r in runs), runs)

    def test_final_stage_has_runtime_libraries_only(self):
        runs = " ".join(r for i, r in self.stage(1) if i == "RUN")
        self.assertIn("install-deps.sh --runtime", runs)
        self.assertNotIn("apt-get install", runs)
        copies = [r for i, r in self.stage(1) if i == "COPY"]
        self.assertTrue(all("--from=build" in c or "install-deps.sh" in c
                            for c in copies), copies)

    def test_non_root_user_and_catalog_volume(self):
        final = self.stage(1)
        users = [r for i, r in final if i == "USER"]
        self.assertEqual(len(users), 1)
        uid = int(users[0].split(":")[0])
        self.assertNotEqual(uid, 0)
        volumes = [json.loads(r) for i, r in final if i == "VOLUME"]
        self.assertEqual(len(volumes), 1)
        env = {}
        for i, r in final:
            if i == "ENV":
                for item in shlex.split(r):
                    k, _, v = item.partition("=")
                    env[k] = v
        code, config, err = check_config([], env)
        self.assertEqual(code, 0, err)
        self.assertTrue(config["catalog"].startswith("lmdb:"))
        self.assertIn(config["catalog"][len("lmdb:"):], volumes[0])
        # Safe by default: plaintext on loopback (SPEC §3.5); the
        # manifests choose TLS or --allow-insecure-remote.
        self.assertEqual(host_of(config["listen"]), "127.0.0.1")
        health = [r for i, r in final if i == "HEALTHCHECK"]
        self.assertEqual(len(health), 1)
        self.assertIn("127.0.0.1:%d" % port_of(config["listen"]), health[0])
        exposed = [int(p) for i, r in final if i == "EXPOSE"
                   for p in r.split()]
        self.assertIn(port_of(config["listen"]), exposed)
        self.assertIn(9464, exposed)
        entry = [json.loads(r) for i, r in final if i == "ENTRYPOINT"]
        self.assertEqual(entry[0][0], "/usr/local/bin/reshardd")
        copied = [r.split()[-1] for i, r in final if i == "COPY"]
        self.assertIn(entry[0][0], copied)

    def test_context_excludes_build_trees(self):
        with open(os.path.join(REPO, ".dockerignore")) as f:
            patterns = f.read().split()
        self.assertIn("/build*", patterns)
        self.assertIn(".git", patterns)


class RuntimeDepsTests(unittest.TestCase):
    """The final image's package list covers what the binaries load."""

    def needed(self, binary):
        out = subprocess.run(["readelf", "-d", binary], check=True,
                             stdout=subprocess.PIPE).stdout.decode()
        return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)

    def package_of(self, soname, binary):
        out = subprocess.run(["ldd", binary], check=True,
                             stdout=subprocess.PIPE).stdout.decode()
        for line in out.splitlines():
            parts = line.split()
            if parts and parts[0] == soname and "=>" in parts:
                path = os.path.realpath(parts[parts.index("=>") + 1])
                owner = subprocess.run(["dpkg", "-S", path],
                                       stdout=subprocess.PIPE,
                                       stderr=subprocess.DEVNULL)
                if owner.returncode != 0:
                    # usrmerge: dpkg knows /lib/... for /usr/lib/...
                    alt = re.sub(r"^/usr/lib/", "/lib/", path)
                    owner = subprocess.run(["dpkg", "-S", alt],
                                           stdout=subprocess.PIPE)
                return owner.stdout.decode().split(":")[0]
        self.fail("%s: ldd does not resolve %s" % (binary, soname))
        return None

    def closure(self, packages):
        """The packages apt installs for ``packages``: the list and its
        recursive Depends/Pre-Depends (what the final image holds)."""
        out = subprocess.run(
            ["apt-cache", "depends", "--recurse", "--no-recommends",
             "--no-suggests", "--no-conflicts", "--no-breaks",
             "--no-replaces", "--no-enhances"] + list(packages),
            check=True, stdout=subprocess.PIPE).stdout.decode()
        return {line.strip() for line in out.splitlines()
                if line and not line.startswith(" ")
                and not line.startswith("<")}

    def test_runtime_list_covers_every_needed_library(self):
        # The plain build records only the libraries it calls (NEEDED);
        # the sanitizer build links more, which the list's dependencies
        # must then provide.
        packages = self.closure(runtime_packages())
        self.assertTrue(set(runtime_packages()) <= packages)
        binaries = [e.DAEMON] + ([RESHARDCTL] if RESHARDCTL else [])
        for binary in binaries:
            for soname in self.needed(binary):
                # The sanitizer runtimes (and the libatomic they pull in)
                # are not in the shipped Release binary.
                if SANITIZED and soname.startswith(("libasan", "libubsan",
                                                    "libatomic")):
                    continue
                with self.subTest(binary=os.path.basename(binary),
                                  library=soname):
                    self.assertIn(self.package_of(soname, binary), packages)

    def test_runtime_packages_are_installed(self):
        for package in runtime_packages():
            with self.subTest(package=package):
                out = subprocess.run(
                    ["dpkg-query", "-W", "-f", "${Status}", package],
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                self.assertEqual(out.stdout.decode(),
                                 "install ok installed", package)


# ------------------------------------------------------------------ ghz --

GHZ_KEYS = {"proto", "protoset", "call", "cacert", "cert", "key", "skipTLS",
            "cname", "authority", "insecure", "total", "concurrency",
            "connections", "qps", "duration", "max-duration", "timeout",
            "data", "data-file", "binary-file", "metadata", "metadata-file",
            "stream-interval", "output", "format", "connect-timeout",
            "keepalive", "cpus", "import-paths", "name", "tags", "host",
            "reflect-metadata", "enable-compression", "skipFirst", "async",
            "duration-stop", "debug"}


class GhzDataTests(unittest.TestCase):
    """deploy/ghz: configurations and request data."""

    @classmethod
    def setUpClass(cls):
        import generate
        cls.tmp = tempfile.mkdtemp(prefix="reshard-ghz-")
        cls.data = os.path.join(cls.tmp, "data")
        cls.configs = os.path.join(cls.tmp, "configs")
        cls.index = generate.generate(cls.data, cls.configs)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def message_class(self, full_name):
        package, _, name = full_name.rpartition(".")
        self.assertEqual(package, "reshard.v1")
        return getattr(pb, name)

    def test_every_scenario_has_its_requests(self):
        variants = {x["variant"] for x in self.index}
        self.assertEqual(variants, {"S1-8", "S1", "S2", "S3", "S4", "S5"})
        for v in variants:
            steps = [x["step"] for x in self.index if x["variant"] == v]
            self.assertEqual(steps, ["publish", "register", "planload",
                                     "planload-runs", "planstore"])

    def test_committed_configs_are_generated(self):
        generated = sorted(os.listdir(self.configs))
        committed = sorted(n for n in os.listdir(GHZ)
                           if n.endswith(".ghz.json"))
        self.assertEqual(committed, generated,
                         "run deploy/ghz/generate.py --configs deploy/ghz")
        for n in generated:
            with open(os.path.join(self.configs, n)) as f:
                want = json.load(f)
            with open(os.path.join(GHZ, n)) as f:
                have = json.load(f)
            self.assertEqual(have, want, n)

    def test_configs_are_ghz_configs(self):
        service = pb.DESCRIPTOR.services_by_name["Planner"]
        files = {x["json"]: x for x in self.index}
        files.update({x["binary"]: x for x in self.index})
        for n in sorted(os.listdir(GHZ)):
            if not n.endswith(".ghz.json"):
                continue
            with self.subTest(config=n):
                with open(os.path.join(GHZ, n)) as f:
                    config = json.load(f)
                self.assertLessEqual(set(config), GHZ_KEYS)
                self.assertTrue(config["insecure"])
                for key in ("total", "concurrency"):
                    self.assertIsInstance(config[key], int)
                self.assertLessEqual(config["concurrency"], config["total"])
                # Paths are relative to deploy/ghz, where ghz runs.
                self.assertTrue(os.path.isfile(os.path.join(GHZ,
                                                            config["proto"])))
                for p in config["import-paths"]:
                    self.assertTrue(os.path.isdir(os.path.join(GHZ, p)))
                package_service, _, method = config["call"].rpartition(".")
                self.assertEqual(package_service, "reshard.v1.Planner")
                self.assertIn(method, service.methods_by_name)
                data = config.get("data-file") or config.get("binary-file")
                self.assertTrue(data.startswith("data/"), data)
                entry = files[os.path.basename(data)]
                self.assertEqual(entry["call"], config["call"])
                self.assertEqual(
                    service.methods_by_name[method].input_type.full_name,
                    entry["message"])
                self.assertTrue(port_of(config["host"]) > 0)

    def test_every_data_file_parses_as_its_message(self):
        service = pb.DESCRIPTOR.services_by_name["Planner"]
        for x in self.index:
            with self.subTest(file=x["json"]):
                method = x["call"].rpartition(".")[2]
                self.assertEqual(
                    service.methods_by_name[method].input_type.full_name,
                    x["message"])
                cls = self.message_class(x["message"])
                with open(os.path.join(self.data, x["json"])) as f:
                    from_json = json_format.ParseDict(json.load(f), cls())
                with open(os.path.join(self.data, x["binary"]), "rb") as f:
                    from_binary = cls.FromString(f.read())
                self.assertEqual(from_json, from_binary)
                if x["step"].startswith("planload"):
                    self.assertEqual(from_json.runs,
                                     x["step"] == "planload-runs")
                    self.assertEqual(len(from_json.page_keys), x["pages"])
                    self.assertEqual(from_json.model_domain,
                                     x["model_domain"])
                elif x["step"] == "register":
                    self.assertEqual(from_json.manifest_key,
                                     x["manifest_key"])

    def test_requests_work_against_the_daemon(self):
        """Raw bytes of every file, as ghz would send them: the daemon
        computes the same manifest keys and layouts, and every PlanLoad
        hits all of its pages."""
        import reshard_scenarios as scenarios
        with e.Daemon() as daemon:
            channel = daemon.channel()
            planner = e.Planner(channel)
            registered = {}  # manifest key -> page keys bound so far
            try:
                for x in self.index:
                    with self.subTest(file=x["binary"]):
                        with open(os.path.join(self.data, x["binary"]),
                                  "rb") as f:
                            raw = f.read()
                        method = x["call"].rpartition(".")[2]
                        reply = planner.raw(method)(raw, timeout=120)
                        resp_cls = getattr(pb, e.PLANNER_METHODS[method][1])
                        resp = resp_cls.FromString(reply)
                        if x["step"] == "publish":
                            self.assertEqual(resp.manifest_key,
                                             x["manifest_key"])
                            self.assertEqual(resp.model_domain,
                                             x["model_domain"])
                        elif x["step"] == "register":
                            # S1-8's pages are S1's first eight.
                            keys = set(pb.RegisterPagesRequest.FromString(
                                raw).page_keys)
                            seen = registered.setdefault(x["manifest_key"],
                                                         set())
                            self.assertEqual(resp.added, len(keys - seen))
                            seen |= keys
                        elif x["step"] == "planstore":
                            self.assertEqual(len(resp.part_indexes), 1)
                            self.assertGreater(resp.stats.operations, 0)
                        else:
                            self.assertEqual(resp.hit_pages, x["pages"])
                            self.assertGreater(resp.stats.operations, 0)
                            runs = x["step"] == "planload-runs"
                            self.assertEqual(resp.stats.runs > 0, runs)
                            if runs:
                                self.assertLess(resp.stats.runs,
                                                resp.stats.operations)
                # The offline upload plan equals the daemon's PlanUpload.
                for name in scenarios.SCENARIOS:
                    req = scenarios.build(name, 1)
                    up = planner.PlanUpload(pb.PlanUploadRequest(
                        placement=req.writer, format=req.layout.format),
                        timeout=30)
                    self.assertEqual(up.layout_id, req.layout_id, name)
            finally:
                channel.close()


# ----------------------------------------------------------- prometheus --

class PrometheusTests(unittest.TestCase):
    """The metrics endpoint, scraped by Debian's real prometheus."""

    def test_prometheus_scrapes_and_queries_a_counter(self):
        prometheus = shutil.which("prometheus")
        self.assertIsNotNone(prometheus, "prometheus is not installed "
                             "(scripts/install-deps.sh installs it)")
        with e.Daemon("--metrics-listen", "127.0.0.1:0") as daemon, \
                tempfile.TemporaryDirectory(prefix="reshard-prom-") as tmp:
            metrics = metrics_address(daemon)
            channel = daemon.channel()
            planner = e.Planner(channel)
            checks = 7
            for _ in range(checks):
                self.assertEqual(planner.health(), e.SERVING)
            err = e.rpc_error(planner.GetManifest, pb.GetManifestRequest(
                manifest_key="kv/%s/manifests/%s" % ("0" * 64, "1" * 64)),
                timeout=10)
            self.assertEqual(err.code().name, "NOT_FOUND")
            channel.close()

            config = os.path.join(tmp, "prometheus.yml")
            with open(config, "w") as f:
                yaml.safe_dump({
                    "global": {"scrape_interval": "1s",
                               "evaluation_interval": "1s"},
                    "scrape_configs": [{
                        "job_name": "reshardd",
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "static_configs": [{"targets": [metrics]}]}]}, f)
            port = free_port()
            web = "127.0.0.1:%d" % port
            log = open(os.path.join(tmp, "prometheus.log"), "w+")
            proc = subprocess.Popen(
                [prometheus, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(tmp, "data"),
                 "--web.listen-address=" + web, "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            try:
                series = self.wait_for_series(proc, web, log, checks)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                log.close()
            labels = {(s["metric"]["method"], s["metric"]["code"]):
                      float(s["value"][1]) for s in series}
            self.assertEqual(labels[("Check", "OK")], checks)
            self.assertEqual(labels[("GetManifest", "NOT_FOUND")], 1)

    def wait_for_series(self, proc, web, log, checks, timeout=90):
        """Polls the HTTP API until the scraped counter shows every health
        check; returns the query's result vector."""
        query = urllib.parse.urlencode({"query": "reshard_requests_total"})
        url = "http://%s/api/v1/query?%s" % (web, query)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                self.fail("prometheus exited with %s:\n%s"
                          % (proc.returncode, log.read()[-4000:]))
            try:
                _, _, body = http_get(url, timeout=5)
                doc = json.loads(body)
                last = doc
                if doc.get("status") == "success":
                    for s in doc["data"]["result"]:
                        m = s["metric"]
                        if (m.get("method") == "Check"
                                and m.get("code") == "OK"
                                and float(s["value"][1]) >= checks
                                and m.get("job") == "reshardd"):
                            return doc["data"]["result"]
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        log.seek(0)
        self.fail("prometheus never returned reshard_requests_total "
                  "(last answer %r):\n%s" % (last, log.read()[-4000:]))
        return None

    def test_exposition_passes_promtool_and_counts_calls(self):
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool is missing (package "
                             "prometheus)")
        with e.Daemon("--metrics-listen", "127.0.0.1:0") as daemon:
            metrics = metrics_address(daemon)
            channel = daemon.channel()
            planner = e.Planner(channel)
            fleet = e.Fleet(planner)
            desc = e.make_descriptor(4, 2, 8, 8, 16)
            pub, _ = fleet.publish_writer(
                e.make_placement(desc, 1, 1, 1, "m-w"), pb.PLHD)
            keys = ["m-%d" % i for i in range(3)]
            fleet.register(pub.manifest_key, keys)
            reader = e.make_placement(desc, 1, 1, 2, "m-r")
            binding = e.make_binding(desc, reader.parts[0], 3)
            resp = fleet.plan(pub.model_domain, keys, reader, binding)
            self.assertEqual(resp.hit_pages, 3)
            channel.close()
            # The cache figures are published once a second.
            time.sleep(1.2)
            status, headers, text = http_get("http://%s/metrics" % metrics)
            self.assertEqual(status, 200)
            self.assertIn("version=0.0.4", headers["Content-Type"])
            check = subprocess.run([promtool, "check", "metrics"],
                                   input=text.encode(),
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=30)
            self.assertEqual(check.returncode, 0, check.stdout.decode())

            def value(series):
                m = re.search(r"^%s (\S+)$" % re.escape(series), text, re.M)
                self.assertIsNotNone(m, series)
                return float(m.group(1))

            self.assertEqual(value('reshard_requests_total{service="reshard.'
                                   'v1.Planner",method="PlanLoad",'
                                   'code="OK"}'), 1)
            self.assertEqual(value("reshard_plan_copies_total"),
                             resp.stats.operations)
            self.assertEqual(value("reshard_plan_bytes_total"),
                             resp.stats.bytes)
            self.assertEqual(value("reshard_plan_duration_seconds_count"), 1)
            self.assertEqual(value('reshard_catalog_operation_duration_'
                                   'seconds_count{operation="add_pages"}'), 1)
            self.assertGreaterEqual(value('reshard_cache_hits_total{kind='
                                          '"manifest"}') +
                                    value('reshard_cache_misses_total{kind='
                                          '"manifest"}'), 0)
            self.assertGreater(value('reshard_cache_entries{kind='
                                     '"manifest"}'), 0)
            self.assertEqual(value("reshard_draining"), 0)
            self.assertGreater(value("process_resident_memory_bytes"), 0)


# ------------------------------------------------------- scripts/*.py --

class ScenarioCommandTests(unittest.TestCase):
    def test_scenario_prints_a_plan(self):
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO, "scripts", "scenario.py"),
             "S2", "--daemon", e.DAEMON, "--repeat", "3", "--copies", "5",
             "--pygen", e.PYGEN],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, timeout=300)
        out = proc.stdout.decode()
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        self.assertIn("S2 llama3-70b", out)
        self.assertIn("writer DP1·PP1·TP8 stores LPHD", out)
        # One row per reader participant (TP4 x PP2), then the totals.
        self.assertEqual(len(re.findall(r"^S2-reader-d0p\dt\d ", out, re.M)),
                         8)
        self.assertIn("total: 8 participants", out)
        self.assertRegex(out, r"median [\d.]+ ms, p99 [\d.]+ ms")
        self.assertIn("first 5 of", out)
        self.assertEqual(len(re.findall(r"^\s+\d+  S2-page-0000\d ", out,
                                        re.M)), 5)


class LoadSmokeTests(unittest.TestCase):
    """scripts/load.py with h2load: thousands of requests at 64 concurrent
    streams, zero failures, memory flat (plain build)."""

    def test_h2load_smoke(self):
        import load
        requests = 2000 if SANITIZED else 5000
        warmup = 500 if SANITIZED else 1000
        argv = ["--daemon", e.DAEMON, "--pygen", e.PYGEN,
                "--scenario", "S1-8", "--requests", str(requests),
                "--warmup", str(warmup), "--clients", "4", "--streams", "16",
                "--time-limit", "240",
                "--rss-growth-mib", "0" if SANITIZED else "24"]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main(argv + ["--json", out])
            self.assertEqual(code, 0, "scripts/load.py failed (see above)")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["concurrent_streams"], 64)
        self.assertEqual(result["h2load"]["succeeded"], requests)
        self.assertEqual(result["problems"], [])
        # The ceiling run loads Health/Check as many times, same run.
        self.assertEqual(
            result["daemon_counter_deltas"],
            {"reshard.v1.Planner/PlanLoad OK": requests + warmup,
             "grpc.health.v1.Health/Check OK": 20000})
        self.assertGreater(result["ceiling_requests_per_second"], 0)
        self.assertGreater(result["share"], 0)

    def test_h2load_short_mixed(self):
        """The quick mode CI runs: ceiling, share and the mixed S1-8 + S5
        run, every call OK."""
        import load
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main(["--daemon", e.DAEMON, "--pygen", e.PYGEN,
                              "--short", "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --short failed")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["problems"], [])
        self.assertEqual(result["mixed"]["large"]["h2load"]["succeeded"], 40)
        self.assertEqual(result["mixed"]["small"]["h2load"]["succeeded"], 300)
        self.assertGreater(result["mixed"]["small"]["latency_ms"]["samples"],
                           0)

    def test_h2load_unix_socket(self):
        """--unix: the daemon listens on a Unix socket, the set-up and
        h2load go through it, every call OK, and the socket's directory
        is gone afterwards."""
        import load
        before = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                            "reshard-load-*")))
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main([
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--unix",
                "--scenario", "S1-8", "--requests", "500", "--warmup", "100",
                "--ceiling-requests", "1000", "--time-limit", "240",
                "--rss-growth-mib", "0", "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --unix failed")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["transport"], "unix")
        self.assertEqual(result["problems"], [])
        self.assertEqual(result["h2load"]["succeeded"], 500)
        self.assertEqual(
            result["daemon_counter_deltas"],
            {"reshard.v1.Planner/PlanLoad OK": 600,
             "grpc.health.v1.Health/Check OK": 1000})
        after = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                           "reshard-load-*")))
        self.assertEqual(after - before, set(), "socket directory left")

    def test_h2load_tls_smoke(self):
        """The TLS variant: h2load over https against --tls-cert."""
        import load
        from reshard_certs import CertAuthority
        with tempfile.TemporaryDirectory() as tmp:
            ca = CertAuthority(tmp)
            cert, key = ca.issue("server")
            out = os.path.join(tmp, "load.json")
            code = load.main([
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--scenario",
                "S1-8", "--requests", "500", "--warmup", "100", "--clients",
                "2", "--streams", "8", "--time-limit", "240",
                "--rss-growth-mib", "0", "--no-ceiling", "--tls-ca", ca.pem,
                "--daemon-flag=--tls-cert=" + cert,
                "--daemon-flag=--tls-key=" + key, "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --tls-ca failed")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["h2load"]["succeeded"], 500)
        self.assertEqual(result["problems"], [])
        self.assertEqual(result["daemon_counter_deltas"],
                         {"reshard.v1.Planner/PlanLoad OK": 600})


if __name__ == "__main__":
    unittest.main()
