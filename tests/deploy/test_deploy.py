"""Tests of deploy/ against the real binaries.

* ManifestTests — deploy/k8s/*.yaml parse, and each reshardd container's
  command, args and env go through `reshardd --check-config`; probe ports,
  container ports, the metrics annotation, the catalog volume, Redis
  Service or Redis Cluster seeds, the security context and the resources
  agree with what the daemon reports.
* ContainerfileTests — deploy/Containerfile installs through
  scripts/install-deps.sh (full in the build stage, --runtime in the final
  one), runs as the user the manifests expect, keeps the LMDB catalog in its
  volume, and its ENV is a valid configuration.
* RuntimeDepsTests — the --runtime package list covers every shared library
  the built reshardd and reshardctl load, and is installed here.

The metrics endpoint and the load tools are tested by test_deploy_metrics.py
and test_deploy_load.py; deploy_support.py holds what they share.

Environment (tests/deploy/CMakeLists.txt): RESHARD_E2E_DAEMON,
RESHARD_E2E_RESHARDCTL, RESHARD_E2E_PYGEN, RESHARD_SANITIZED (1 in the
ASan+UBSan build: the load test runs fewer requests and skips the memory
bound, which ASan's quarantine would break).
"""

import json
import os
import re
import shlex
import socket
import subprocess
import unittest

import reshard_e2e as e
from deploy_support import (HEALTH_SERVICES, PLANNER_SERVICE, REPO,
                            RESHARDCTL, SANITIZED, check_config, free_port,
                            host_of, load_manifests, parse_containerfile,
                            pod_templates, port_of, quantity,
                            runtime_packages)


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
        self.assertIn("redis-cluster-fleet.yaml", self.manifests)

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
        # One file per way to run a fleet: its own LMDB, one Redis, TLS,
        # a Redis Cluster. A new file is added here on purpose.
        self.assertEqual({s[0] for s in sidecars},
                         {"sidecar.yaml", "redis-fleet.yaml",
                          "sidecar-tls.yaml", "redis-cluster-fleet.yaml"})
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

        # Catalog: the LMDB directory is a writable volume, the Redis
        # address names a Service of this file that reaches Redis, or the
        # Redis Cluster seeds are nodes of this file's cluster.
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
        elif catalog.startswith("redis-cluster://"):
            self.check_redis_cluster(docs, config)
        else:
            self.fail("%s: a deployment must use lmdb:, redis:// or "
                      "redis-cluster://, not %s" % (name, catalog))

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
        reached = self.reached(docs, service, port)
        self.assertEqual(len(reached), 1, "Service %s:%d must reach one "
                         "Redis container" % (host, port))

    @staticmethod
    def reached(docs, service, port):
        """The containers of this file's pods that `service`:`port`
        reaches."""
        by_port = {p["port"]: p for p in service["spec"]["ports"]}
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
        return reached

    def check_redis_cluster(self, docs, config):
        """Every seed of a redis-cluster:// catalog is a node of this
        file's cluster: a StatefulSet pod's stable name
        (<set>-<ordinal>.<headless Service>) whose port reaches a Redis
        container run with --cluster-enabled yes. The cluster this file
        creates (redis-cli --cluster create) has at least three primaries,
        the StatefulSet exactly the nodes it joins, and each primary at
        least the replicas --redis-wait-replicas waits for (fewer, and every
        write would be UNAVAILABLE)."""
        catalog = config["catalog"]
        seeds = catalog[len("redis-cluster://"):]
        self.assertNotIn("@", seeds, "a password belongs in "
                         "--redis-password-file, not in the manifest")
        services = {d["metadata"]["name"]: d for d in docs
                    if d["kind"] == "Service"}
        sets = {d["metadata"]["name"]: d for d in docs
                if d["kind"] == "StatefulSet"}
        nodes = set()
        for seed in seeds.split(","):
            m = re.match(r"^([a-z0-9-]+)-(\d+)\.([a-z0-9-]+):(\d+)$", seed)
            self.assertIsNotNone(m, "seed %r is not <statefulset>-<n>."
                                 "<service>:<port>" % seed)
            name, ordinal, host = m.group(1), int(m.group(2)), m.group(3)
            port = int(m.group(4))
            self.assertIn(name, sets, "no StatefulSet %s in the file" % name)
            workload = sets[name]
            self.assertEqual(workload["spec"]["serviceName"], host,
                             "pod names of %s are under Service %s"
                             % (name, workload["spec"]["serviceName"]))
            self.assertLess(ordinal, workload["spec"]["replicas"],
                            "%s has no pod %d" % (name, ordinal))
            self.assertIn(host, services, "no Service %s in the file" % host)
            service = services[host]
            self.assertEqual(service["spec"].get("clusterIP"), "None",
                             "Service %s must be headless: pod names "
                             "resolve only then" % host)
            self.assertIn(port, [p["port"] for p in service["spec"]["ports"]],
                          "Service %s has no port %d" % (host, port))
            reached = self.reached(docs, service, port)
            self.assertEqual(len(reached), 1, "%s must reach one Redis "
                             "container" % seed)
            args = reached[0].get("command", []) + reached[0].get("args", [])
            self.assertIn(["--cluster-enabled", "yes"],
                          [args[i:i + 2] for i in range(len(args))],
                          "%s is not a cluster node" % seed)
            nodes.add(name)
        self.assertEqual(len(nodes), 1, "every seed is a node of one cluster")
        size = sets[nodes.pop()]["spec"]["replicas"]
        creates = []
        for workload, spec, meta in pod_templates(docs):
            for c in spec.get("containers", []):
                text = " ".join(c.get("command", []) + c.get("args", []))
                m = re.search(r"--cluster create .*--cluster-replicas (\d+)",
                              text)
                if m:
                    creates.append(int(m.group(1)))
        self.assertEqual(len(creates), 1, "one redis-cli --cluster create "
                         "--cluster-replicas N forms the cluster")
        replicas = creates[0]
        self.assertEqual(size % (1 + replicas), 0,
                         "%d nodes do not split into primaries with %d "
                         "replicas each" % (size, replicas))
        self.assertGreaterEqual(size // (1 + replicas), 3,
                                "a Redis Cluster needs three primaries")
        self.assertGreaterEqual(replicas, int(config["redis-wait-replicas"]),
                                "--redis-wait-replicas waits for more "
                                "replicas than a primary has")
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


if __name__ == "__main__":
    unittest.main()
