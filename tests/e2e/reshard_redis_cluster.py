"""A throwaway Redis Cluster on loopback, for the cluster catalog tests and
the catalog benchmark (docs/catalog.md).

``RedisCluster(primaries=3, replicas=1).start()`` runs ``primaries * (1 +
replicas)`` Debian ``redis-server`` processes with ``--cluster-enabled yes``
on free loopback ports (each with its bus port, port + 10000, free too),
joins them with ``redis-cli --cluster create ... --cluster-replicas 1
--cluster-yes`` and waits until every node reports ``cluster_state:ok``.
Nodes keep no data on disk (``--save '' --appendonly no``); their
``nodes.conf`` lives in a directory of their own, so a node killed and
started again rejoins the cluster it knew.

``kill(node)`` (SIGKILL), ``pause(node)`` / ``resume(node)`` (SIGSTOP /
SIGCONT), ``restart(node)`` and ``reshard(...)`` are what the tests do to
it; ``cleanup()`` kills every process it started and removes their
directories. Nothing but these processes is touched.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from reshard_redis import port_open


def free_cluster_port():
    """A free port whose cluster bus port (port + 10000) is free too."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def key_slot(key):
    """The Redis Cluster slot of `key` (CRC16/XMODEM, hash tags)."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1:end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % 16384


class Node:
    def __init__(self, cluster, port):
        self.cluster = cluster
        self.port = port
        self.dir = os.path.join(cluster.dir, str(port))
        os.makedirs(self.dir)
        self.proc = None

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def start(self, timeout=10.0):
        argv = [self.cluster.server, "--port", str(self.port),
                "--bind", "127.0.0.1", "--dir", self.dir,
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(self.cluster.node_timeout_ms),
                "--save", "", "--appendonly", "no",
                "--repl-diskless-sync-delay", "0", "--logfile", "",
                "--loglevel", "warning"]
        if self.cluster.password is not None:
            argv += ["--requirepass", self.cluster.password,
                     "--masterauth", self.cluster.password]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited with %s on port %d"
                                   % (self.proc.returncode, self.port))
            if time.monotonic() > deadline:
                raise RuntimeError("redis-server did not listen on %d"
                                   % self.port)
            time.sleep(0.02)

    def cli(self, *args, timeout=10):
        """redis-cli against this node; returns stdout (raises on exit
        status or an error reply)."""
        argv = [self.cluster.client, "-h", "127.0.0.1", "-p", str(self.port)]
        if self.cluster.password is not None:
            argv += ["--no-auth-warning", "-a", self.cluster.password]
        out = subprocess.run(argv + [str(a) for a in args],
                             stdin=subprocess.DEVNULL, capture_output=True,
                             timeout=timeout, check=True, text=True).stdout
        if out.startswith("ERR") or out.startswith("(error)"):
            raise RuntimeError("%s: %s" % (" ".join(map(str, args)), out))
        return out

    def info(self, section):
        fields = {}
        for line in self.cli("INFO", section).splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                fields[k] = v.strip()
        return fields

    def node_id(self):
        return self.cli("CLUSTER", "MYID").strip()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig=signal.SIGKILL):
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(sig)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class RedisCluster:
    def __init__(self, primaries=3, replicas=1, node_timeout_ms=2000,
                 password=None):
        self.server = shutil.which("redis-server")
        self.client = shutil.which("redis-cli")
        if self.server is None or self.client is None:
            raise RuntimeError(
                "redis-server/redis-cli are not installed: apt-get install "
                "redis-server (scripts/install-deps.sh does)")
        self.primary_count = primaries
        self.replica_count = replicas
        self.node_timeout_ms = node_timeout_ms
        self.password = password
        self.dir = tempfile.mkdtemp(prefix="reshard-cluster-")
        self.nodes = []

    @property
    def url(self):
        """The --catalog URL naming every node as a seed."""
        return "redis-cluster://" + ",".join(n.address for n in self.nodes)

    def seeds(self, count):
        return "redis-cluster://" + ",".join(
            n.address for n in self.nodes[:count])

    def start(self, timeout=60.0):
        try:
            for _ in range(self.primary_count * (1 + self.replica_count)):
                node = Node(self, free_cluster_port())
                self.nodes.append(node)
                node.start()
            argv = [self.client, "--cluster", "create"]
            argv += [n.address for n in self.nodes]
            argv += ["--cluster-replicas", str(self.replica_count),
                     "--cluster-yes"]
            if self.password is not None:
                argv += ["--no-auth-warning", "-a", self.password]
            subprocess.run(argv, stdin=subprocess.DEVNULL,
                           capture_output=True, check=True, timeout=timeout)
            self.wait_ok(timeout, replicas=self.replica_count)
        except BaseException:
            self.cleanup()
            raise
        return self

    def live(self):
        return [n for n in self.nodes if n.alive()]

    def wait_ok(self, timeout=60.0, replicas=None):
        """Until every live node says cluster_state:ok, knows every slot
        and sees the same primaries (and, when given, until each primary
        has `replicas` connected replicas)."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                states = [n.cli("CLUSTER", "INFO") for n in self.live()]
                ok = all("cluster_state:ok" in s and
                         "cluster_slots_ok:16384" in s for s in states)
                maps = {self.slot_owners(n) for n in self.live()}
                ok = ok and len(maps) == 1
                if ok and replicas is not None:
                    ok = all(self.online_replicas(p) >= replicas
                             for p in self.primaries())
                if ok:
                    return
                last = states
            except (subprocess.SubprocessError, RuntimeError, OSError) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise RuntimeError("cluster not ok: %s" % (last,))
            time.sleep(0.1)

    def online_replicas(self, primary):
        info = primary.info("replication")
        return sum(1 for k, v in info.items()
                   if k.startswith("slave") and k[5:].isdigit() and
                   "state=online" in v)

    def slot_owners(self, via=None):
        """((first, last, port) ...) of the primaries, as `via` sees it."""
        via = via or self.live()[0]
        ranges = []
        for line in via.cli("CLUSTER", "NODES").splitlines():
            fields = line.split()
            if len(fields) < 8 or "master" not in fields[2] or \
                    "fail" in fields[2]:
                continue
            port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
            for part in fields[8:]:
                if part.startswith("["):
                    continue  # a slot being migrated
                first, _, last = part.partition("-")
                ranges.append((int(first), int(last or first), port))
        return tuple(sorted(ranges))

    def node(self, port):
        return next(n for n in self.nodes if n.port == port)

    def owner(self, slot):
        """The primary serving `slot`; None while no live primary does
        (a failover under way)."""
        for first, last, port in self.slot_owners():
            if first <= slot <= last:
                return self.node(port)
        return None

    def primaries(self):
        ports = sorted({port for _, _, port in self.slot_owners()})
        return [self.node(p) for p in ports]

    def ranges_of(self, node):
        return [(f, l) for f, l, p in self.slot_owners() if p == node.port]

    def reshard(self, source, target, slots, timeout=120):
        """redis-cli --cluster reshard: moves `slots` slots (from the start
        of the source's ranges) from `source` to `target`."""
        argv = [self.client, "--cluster", "reshard", self.live()[0].address,
                "--cluster-from", source.node_id(),
                "--cluster-to", target.node_id(),
                "--cluster-slots", str(slots), "--cluster-yes"]
        if self.password is not None:
            argv += ["--no-auth-warning", "-a", self.password]
        return subprocess.run(argv, stdin=subprocess.DEVNULL,
                              capture_output=True, check=True, text=True,
                              timeout=timeout).stdout

    def keys_on(self, node, pattern="reshard:*"):
        """How many keys `node` holds that match `pattern` (SCAN)."""
        count, cursor = 0, "0"
        while True:
            out = node.cli("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            lines = [line for line in out.splitlines() if line]
            cursor, count = lines[0], count + len(lines) - 1
            if cursor == "0":
                return count

    def cleanup(self):
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.cleanup()
