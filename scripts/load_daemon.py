"""The daemon side of scripts/load.py: the daemon under load (one it
starts or one running), the set-up of its catalog with grpcio, and what it
reports about itself (request counters and resident set from its metrics
endpoint, CPU time and VmRSS from /proc).
"""

import glob
import ipaddress
import os
import re
import resource
import shutil
import tempfile
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_RE = re.compile(r'^reshard_requests_total\{service="([^"]*)",'
                       r'method="([^"]*)",code="([^"]*)"\} (\d+)$')
RSS_RE = re.compile(r"^process_resident_memory_bytes (\d+)$", re.M)
METRICS_LINE_RE = re.compile(r"metrics_address=\"?([0-9.]+|\[[0-9a-f:]+\]):"
                             r"(\d+)")


class LoadError(RuntimeError):
    pass


def find_pygen(explicit):
    if explicit:
        return explicit
    if os.environ.get("RESHARD_E2E_PYGEN"):
        return os.environ["RESHARD_E2E_PYGEN"]
    found = sorted(glob.glob(os.path.join(REPO, "build*", "tests", "e2e",
                                          "pygen")))
    if not found:
        raise LoadError("no generated Python messages found; build first or "
                        "pass --pygen DIR")
    return found[0]


def split_host_port(text):
    if text.startswith("["):
        host, _, port = text[1:].partition("]:")
    else:
        host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise LoadError("%r is not HOST:PORT" % text)
    return host, int(port)


def require_loopback(text):
    """Load goes to this machine only (127.0.0.0/8, ::1, localhost, a Unix
    socket)."""
    if text.startswith("unix:"):
        return text, None
    host, port = split_host_port(text)
    if host == "localhost":
        return host, port
    try:
        if ipaddress.ip_address(host).is_loopback:
            return host, port
    except ValueError:
        pass
    raise LoadError("%s is not a loopback address; this script only loads "
                    "daemons on this machine" % text)


def read_metrics(address, timeout=10):
    with urllib.request.urlopen("http://%s/metrics" % address,
                                timeout=timeout) as resp:
        return resp.read().decode("utf-8")


def request_counts(text):
    """{(service, method, code): count} from an exposition."""
    out = {}
    for line in text.splitlines():
        m = SAMPLE_RE.match(line)
        if m:
            out[(m.group(1), m.group(2), m.group(3))] = int(m.group(4))
    return out


def rss_bytes(pid, metrics_text):
    """The daemon's resident set: /proc when it runs here under our eyes,
    else what it reports itself."""
    if pid is not None:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    m = RSS_RE.search(metrics_text)
    if not m:
        raise LoadError("the metrics carry no process_resident_memory_bytes")
    return int(m.group(1))


def cpu_seconds(pid):
    """User + system CPU time of every thread of `pid` so far, in seconds
    (None when the daemon is not ours to read). Unlike rates, CPU per call
    barely moves when other work shares the machine.

    Read from the process's CPU clock, which the kernel keeps in
    nanoseconds (Linux's clock id for a process: ((~pid) << 3) | 2,
    CPUCLOCK_SCHED); /proc/PID/stat's clock ticks (10 ms) are the fallback
    where that clock cannot be read. In ticks, 5 000 PlanLoads of 40 us
    read 20 of them, so each call's CPU was known to within 2 us: almost
    half of issue 26 item 4's 5 us remainder."""
    if pid is None:
        return None
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        pass
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf(
        "SC_CLK_TCK"))


def client_cpu_seconds():
    """User + system CPU time of this script's finished children: the
    h2load runs waited for so far (the daemon we start is still running,
    so it is not in it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Target:
    """The daemon under load: one we start (--daemon) or one running."""

    def __init__(self, args):
        self.daemon = None
        self.pid = None
        self.socket_dir = None
        if args.daemon:
            import reshard_e2e as e
            listen = "127.0.0.1:0"
            if args.unix:
                self.socket_dir = tempfile.mkdtemp(prefix="reshard-load-")
                listen = "unix:" + os.path.join(self.socket_dir, "grpc.sock")
            self.daemon = e.Daemon("--metrics-listen", "127.0.0.1:0",
                                   *args.daemon_flag, listen=listen).start()
            self.pid = self.daemon.proc.pid
            self.grpc = self.daemon.target
            self.metrics = self._wait_metrics_address()
        else:
            self.grpc = args.target
            self.metrics = args.metrics
        require_loopback(self.grpc)
        require_loopback(self.metrics)

    def _wait_metrics_address(self, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.daemon.log_lines():
                m = METRICS_LINE_RE.search(line)
                if m and int(m.group(2)) != 0:
                    return "%s:%s" % (m.group(1), m.group(2))
            time.sleep(0.05)
        raise LoadError("reshardd logged no metrics address:\n%s"
                        % self.daemon.log_text())

    def stop(self):
        try:
            if self.daemon is not None:
                code = self.daemon.stop()
                if code != 0:
                    raise LoadError("reshardd exited with %s after SIGTERM:"
                                    "\n%s" % (code, self.daemon.log_text()))
        finally:
            if self.socket_dir is not None:
                shutil.rmtree(self.socket_dir, ignore_errors=True)


def open_channel(target, tls_ca=None):
    """A grpcio channel to the daemon without message size limits, over
    TLS verified against `tls_ca` when given."""
    import grpc
    options = [("grpc.max_receive_message_length", -1),
               ("grpc.max_send_message_length", -1)]
    if tls_ca:
        with open(tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        return grpc.secure_channel(target, creds, options=options)
    return grpc.insecure_channel(target, options=options)


def set_up(target, requests, timeout=120, method="PlanLoad", tls_ca=None,
           pooled=None, plan_load=None):
    """PublishManifest and RegisterPages with grpcio, then one call of
    `method` to check the request plans every page (PlanLoad) or writes one
    Part (PlanStore). With `pooled` (pooled_scenarios.PooledRequests), the
    reader's placement and pool are registered first and the daemon's ids
    checked against the computed ones. `plan_load`: the PlanLoad to check
    (default requests.plan_load). Returns its stats and response size."""
    import reshard_e2e as e
    channel = open_channel(target, tls_ca)
    try:
        planner = e.Planner(channel)
        pub = planner.PublishManifest(requests.publish, timeout=timeout)
        if pub.manifest_key != requests.manifest_key:
            raise LoadError("the daemon's manifest key %s differs from %s"
                            % (pub.manifest_key, requests.manifest_key))
        planner.RegisterPages(requests.register, timeout=timeout)
        if pooled is not None:
            placed = planner.RegisterPlacement(pooled.register_placement,
                                               timeout=timeout)
            if placed.placement_id != pooled.placement_id:
                raise LoadError("the daemon's placement id %s differs from %s"
                                % (placed.placement_id, pooled.placement_id))
            memory = planner.RegisterMemory(pooled.register_memory,
                                            timeout=timeout)
            if memory.memory_id != pooled.memory_id:
                raise LoadError("the daemon's memory id %s differs from %s"
                                % (memory.memory_id, pooled.memory_id))
        if method == "PlanStore":
            resp = planner.PlanStore(requests.plan_store, timeout=timeout)
            if len(resp.part_indexes) != 1:
                raise LoadError("the PlanStore writes %d Parts, not 1"
                                % len(resp.part_indexes))
            return resp.stats, resp.ByteSize()
        resp = planner.PlanLoad(plan_load or requests.plan_load,
                                timeout=timeout)
        if resp.hit_pages != requests.pages:
            raise LoadError("the PlanLoad hits %d of %d pages"
                            % (resp.hit_pages, requests.pages))
        return resp.stats, resp.ByteSize()
    finally:
        channel.close()


def set_up_transfer(target, requests, message, timeout=120, tls_ca=None):
    """The transfer set-up with grpcio: both placements and every pool
    registered (the daemon's ids checked against the computed ones), then
    one `message` (a PlanTransfer) to check it plans. Returns its stats
    and response size."""
    import reshard_e2e as e
    from reshard_e2e import pb
    channel = open_channel(target, tls_ca)
    try:
        planner = e.Planner(channel)
        for want, request in (
                (requests.source_placement_id,
                 requests.register_source_placement),
                (requests.target_placement_id,
                 requests.register_target_placement)):
            placed = planner.RegisterPlacement(request, timeout=timeout)
            if placed.placement_id != want:
                raise LoadError("the daemon's placement id %s differs from %s"
                                % (placed.placement_id, want))
        pools = list(zip(requests.source_memory_ids,
                         requests.register_source_memory))
        pools.append((requests.target_memory_id,
                      requests.register_target_memory))
        for want, request in pools:
            memory = planner.RegisterMemory(request, timeout=timeout)
            if memory.memory_id != want:
                raise LoadError("the daemon's memory id %s differs from %s"
                                % (memory.memory_id, want))
        plan_transfer = channel.unary_unary(
            "/reshard.v1.Planner/PlanTransfer",
            request_serializer=pb.PlanTransferRequest.SerializeToString,
            response_deserializer=pb.PlanTransferResponse.FromString)
        resp = plan_transfer(message, timeout=timeout)
        if resp.stats.operations == 0:
            raise LoadError("the PlanTransfer plans no copies")
        return resp.stats, resp.ByteSize()
    finally:
        channel.close()


class RssSampler:
    """Samples the daemon's resident set every 10 ms while runs go on and
    keeps the peak."""

    def __init__(self, target):
        self.target = target
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self):
        try:
            if self.target.pid is not None:
                value = rss_bytes(self.target.pid, "")
            else:
                value = rss_bytes(None, read_metrics(self.target.metrics))
        except (OSError, LoadError):
            return
        self.peak = max(self.peak, value)

    def _loop(self):
        while not self._stop.wait(0.01):
            self._sample()

    def __enter__(self):
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self._sample()


def settled_counts(metrics, before, sent, timeout=5.0):
    """The daemon counts a call when it frees it, a moment after the client
    has its answer: read the counters until they reach what was sent (or
    the timeout passes)."""
    deadline = time.monotonic() + timeout
    while True:
        text = read_metrics(metrics)
        after = request_counts(text)
        counted = {"%s/%s %s" % k: after.get(k, 0) - before.get(k, 0)
                   for k in after}
        if (all(counted.get(k, 0) >= n for k, n in sent.items())
                or time.monotonic() > deadline):
            return text, after
        time.sleep(0.05)
