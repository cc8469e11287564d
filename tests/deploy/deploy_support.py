"""What the deploy, metrics and load tests share (test_deploy*.py): the
repository's paths, ``reshardd --check-config``, Kubernetes manifests and
quantities, the Containerfile parsed, the runtime package list, and the
daemon's metrics endpoint. Importing it puts scripts/ and deploy/ghz on
sys.path.

Environment (tests/deploy/CMakeLists.txt): RESHARD_E2E_DAEMON,
RESHARD_E2E_RESHARDCTL, RESHARD_E2E_PYGEN, RESHARD_SANITIZED (1 in the
ASan+UBSan build: the load test runs fewer requests and skips the memory
bound, which ASan's quarantine would break).
"""

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request

import yaml

import reshard_e2e as e

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
