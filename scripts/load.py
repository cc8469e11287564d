#!/usr/bin/python3
"""Load-tests reshardd's PlanLoad with h2load, gRPC framed by hand.

ghz is not packaged for Debian; h2load (nghttp2-client) is. This script
sends exactly the requests of deploy/ghz (tests/e2e/reshard_scenarios.py)
as raw HTTP/2 POSTs: the serialized PlanLoadRequest behind gRPC's 5-byte
prefix (flag 0, big-endian length), with `content-type: application/grpc`
and `te: trailers`, to /reshard.v1.Planner/PlanLoad.

h2load sees HTTP status 200 for every gRPC call, failed or not, because the
gRPC status travels in trailers it does not read. So the daemon's own
counters decide: reshard_requests_total{method="PlanLoad"} is read from
the metrics endpoint before and after, and only code="OK" may grow, by
exactly the number of requests sent.

Memory: the daemon's resident set is read after a warm-up run and again
after the measured run; it may grow by at most --rss-growth-mib.

Only loopback targets are accepted. Every run is bounded in requests (-n)
and in time (--time-limit).

Usage:
  scripts/load.py --daemon build/daemon/reshardd           # start one, test, stop it
  scripts/load.py --target 127.0.0.1:50051 --metrics 127.0.0.1:9464
Options: --scenario S1-8 (default; any of S1..S5 or S1-N), --requests 5000,
--warmup 1000, --clients 4 --streams 16 (64 concurrent streams).
Exit status: 0 when every call succeeded and memory stayed flat, 1 otherwise,
2 on bad usage.
"""

import argparse
import glob
import ipaddress
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
E2E = os.path.join(REPO, "tests", "e2e")

PLAN_LOAD_PATH = "/reshard.v1.Planner/PlanLoad"
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
    """Load goes to this machine only (127.0.0.0/8, ::1, localhost)."""
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


def grpc_frame(message_bytes):
    return b"\x00" + struct.pack(">I", len(message_bytes)) + message_bytes


def percentile(sorted_values, q):
    if not sorted_values:
        return 0.0
    k = max(0, min(len(sorted_values) - 1,
                   int(round(q / 100.0 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[k]


def parse_h2load(stdout):
    out = {}
    m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", stdout)
    if m:
        scale = 1e-3 if m.group(2) == "ms" else 1.0
        out["seconds"] = float(m.group(1)) * scale
        out["requests_per_second"] = float(m.group(3))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                  r"(\d+) succeeded, (\d+) failed, (\d+) errored, "
                  r"(\d+) timeout", stdout)
    if m:
        keys = ["total", "started", "done", "succeeded", "failed", "errored",
                "timeout"]
        out.update({k: int(v) for k, v in zip(keys, m.groups())})
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx",
                  stdout)
    if m:
        out["status_2xx"] = int(m.group(1))
        out["status_other"] = sum(int(x) for x in m.groups()[1:])
    return out


def run_h2load(h2load, target, data_file, requests, clients, streams,
               threads, time_limit, log_file=None, tls=False):
    host, port = split_host_port(target)
    # Over TLS h2load negotiates h2 by ALPN; it does not verify the server
    # (set_up did, with --tls-ca) and cannot present a client certificate.
    url = "%s://%s:%d%s" % ("https" if tls else "http",
                            ("[%s]" % host) if ":" in host else host, port,
                            PLAN_LOAD_PATH)
    argv = [h2load, "-n", str(requests), "-c", str(clients), "-m",
            str(streams), "-t", str(threads), "-d", data_file,
            "-H", "content-type: application/grpc", "-H", "te: trailers",
            "-H", "grpc-timeout: 30S"]
    if log_file:
        argv += ["--log-file", log_file]
    argv.append(url)
    try:
        proc = subprocess.run(argv, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=time_limit,
                              check=False)
    except subprocess.TimeoutExpired:
        raise LoadError("h2load did not finish within %ds" % time_limit)
    text = proc.stdout.decode("utf-8", "replace")
    result = parse_h2load(text)
    if proc.returncode != 0 or "succeeded" not in result:
        raise LoadError("h2load failed (exit %d):\n%s" % (proc.returncode,
                                                           text[-3000:]))
    return result, text


def latencies_ms(log_file):
    values = []
    with open(log_file) as f:
        for line in f:
            cols = line.split("\t")
            if len(cols) >= 3 and cols[1].strip() == "200":
                values.append(int(cols[2]) / 1000.0)
    values.sort()
    return values


class Target:
    """The daemon under load: one we start (--daemon) or one running."""

    def __init__(self, args):
        self.daemon = None
        self.pid = None
        if args.daemon:
            import reshard_e2e as e
            self.daemon = e.Daemon("--metrics-listen", "127.0.0.1:0",
                                   *args.daemon_flag).start()
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
        if self.daemon is not None:
            code = self.daemon.stop()
            if code != 0:
                raise LoadError("reshardd exited with %s after SIGTERM:\n%s"
                                % (code, self.daemon.log_text()))


def set_up(target, requests, timeout=120, tls_ca=None):
    """PublishManifest and RegisterPages with grpcio, then one PlanLoad to
    check the request plans every page."""
    import grpc
    import reshard_e2e as e
    options = [("grpc.max_receive_message_length", -1),
               ("grpc.max_send_message_length", -1)]
    if tls_ca:
        with open(tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        channel = grpc.secure_channel(target, creds, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    try:
        planner = e.Planner(channel)
        pub = planner.PublishManifest(requests.publish, timeout=timeout)
        if pub.manifest_key != requests.manifest_key:
            raise LoadError("the daemon's manifest key %s differs from %s"
                            % (pub.manifest_key, requests.manifest_key))
        planner.RegisterPages(requests.register, timeout=timeout)
        resp = planner.PlanLoad(requests.plan_load, timeout=timeout)
        if resp.hit_pages != requests.pages:
            raise LoadError("the PlanLoad hits %d of %d pages"
                            % (resp.hit_pages, requests.pages))
        return resp.stats
    finally:
        channel.close()


def run(args):
    h2load = shutil.which("h2load")
    if h2load is None:
        raise LoadError("h2load is missing (apt-get install nghttp2-client; "
                        "scripts/install-deps.sh installs it)")
    os.environ["RESHARD_E2E_PYGEN"] = os.path.abspath(find_pygen(args.pygen))
    if args.daemon:
        os.environ["RESHARD_E2E_DAEMON"] = os.path.abspath(args.daemon)
    if E2E not in sys.path:
        sys.path.insert(0, E2E)
    import reshard_scenarios as scenarios

    name, pages = scenarios.parse_variant(args.scenario)
    requests = scenarios.build(name, pages)
    target = Target(args)
    result = {"scenario": requests.name, "requests": args.requests,
              "warmup": args.warmup, "clients": args.clients,
              "streams_per_client": args.streams,
              "concurrent_streams": args.clients * args.streams}
    try:
        stats = set_up(target.grpc, requests, tls_ca=args.tls_ca)
        result["plan"] = {"copies": stats.operations, "bytes": stats.bytes,
                          "copies_before_coalescing":
                              stats.copies_before_coalescing}
        with tempfile.TemporaryDirectory(prefix="reshard-load-") as tmp:
            data_file = os.path.join(tmp, "planload.grpc")
            with open(data_file, "wb") as f:
                f.write(grpc_frame(requests.plan_load.SerializeToString()))
            log_file = os.path.join(tmp, "requests.log")

            before_text = read_metrics(target.metrics)
            before = request_counts(before_text)
            rss_start = rss_bytes(target.pid, before_text)
            sent = 0
            if args.warmup > 0:
                warm, _ = run_h2load(h2load, target.grpc, data_file,
                                     args.warmup, args.clients, args.streams,
                                     args.threads, args.time_limit,
                                     tls=bool(args.tls_ca))
                sent += warm["done"]
            rss_warm = rss_bytes(target.pid, read_metrics(target.metrics))
            main, text = run_h2load(h2load, target.grpc, data_file,
                                    args.requests, args.clients, args.streams,
                                    args.threads, args.time_limit, log_file,
                                    tls=bool(args.tls_ca))
            sent += main["done"]
            after_text = read_metrics(target.metrics)
            after = request_counts(after_text)
            rss_end = rss_bytes(target.pid, after_text)
            lat = latencies_ms(log_file)
    finally:
        target.stop()

    result.update({
        "requests_per_second": main.get("requests_per_second", 0.0),
        "seconds": main.get("seconds", 0.0),
        "h2load": {k: main.get(k) for k in
                   ("total", "succeeded", "failed", "errored", "timeout",
                    "status_2xx", "status_other")},
        "latency_ms": {"p50": percentile(lat, 50), "p90": percentile(lat, 90),
                       "p99": percentile(lat, 99),
                       "max": lat[-1] if lat else 0.0,
                       "samples": len(lat)},
        "rss_bytes": {"start": rss_start, "after_warmup": rss_warm,
                      "end": rss_end},
    })

    problems = []
    for key in ("failed", "errored", "timeout", "status_other"):
        if main.get(key):
            problems.append("h2load counted %d %s" % (main[key], key))
    if main.get("succeeded") != args.requests:
        problems.append("h2load: %s of %d requests succeeded"
                        % (main.get("succeeded"), args.requests))
    deltas = {}
    for key in set(before) | set(after):
        d = after.get(key, 0) - before.get(key, 0)
        if d:
            deltas["%s/%s %s" % key] = d
    ok_key = "reshard.v1.Planner/PlanLoad OK"
    result["daemon_counter_deltas"] = deltas
    if deltas.get(ok_key, 0) != sent:
        problems.append("the daemon counted %d PlanLoad OK, %d were sent"
                        % (deltas.get(ok_key, 0), sent))
    for key, d in sorted(deltas.items()):
        if key != ok_key:
            problems.append("the daemon counted %d %s" % (d, key))
    growth = rss_end - rss_warm
    result["rss_growth_bytes"] = growth
    if args.rss_growth_mib > 0 and growth > args.rss_growth_mib << 20:
        problems.append("resident memory grew %.1f MiB after the warm-up "
                        "(bound %d MiB)" % (growth / 2**20, args.rss_growth_mib))
    result["problems"] = problems
    return result


def report(r, out=sys.stdout):
    mib = 1024.0 * 1024.0
    lat = r["latency_ms"]
    print("reshardd load test: %s PlanLoad (%d copies, %d bytes per plan), "
          "h2load %d requests at %d concurrent streams (%d connections x %d)"
          % (r["scenario"], r["plan"]["copies"], r["plan"]["bytes"],
             r["requests"], r["concurrent_streams"], r["clients"],
             r["streams_per_client"]), file=out)
    print("  throughput   %.1f requests/s over %.2f s"
          % (r["requests_per_second"], r["seconds"]), file=out)
    print("  latency      p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms"
          "  (%d samples)" % (lat["p50"], lat["p90"], lat["p99"], lat["max"],
                              lat["samples"]), file=out)
    h = r["h2load"]
    print("  h2load       %s succeeded, %s failed, %s errored, %s timeout, "
          "%s 2xx" % (h["succeeded"], h["failed"], h["errored"],
                      h["timeout"], h["status_2xx"]), file=out)
    print("  daemon       " + ", ".join(
        "%s +%d" % kv for kv in sorted(r["daemon_counter_deltas"].items())),
          file=out)
    rss = r["rss_bytes"]
    print("  memory       RSS %.1f MiB at start, %.1f MiB after the warm-up, "
          "%.1f MiB after the run (growth %+.1f MiB)"
          % (rss["start"] / mib, rss["after_warmup"] / mib, rss["end"] / mib,
             r["rss_growth_bytes"] / mib), file=out)
    for p in r["problems"]:
        print("  FAIL         " + p, file=out)
    print("PASS" if not r["problems"] else "FAIL", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="h2load load test of reshardd PlanLoad (see the module "
                    "docstring)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--daemon", help="reshardd binary to start on "
                       "127.0.0.1:0 with the memory catalog")
    where.add_argument("--target", help="gRPC address of a running daemon "
                       "(loopback only)")
    parser.add_argument("--metrics", help="its --metrics-listen address "
                        "(with --target)")
    parser.add_argument("--daemon-flag", action="append", default=[],
                        help="extra flag for the started daemon (repeat)")
    parser.add_argument("--scenario", default="S1-8")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rss-growth-mib", type=int, default=16,
                        help="bound on RSS growth after the warm-up (0: do "
                             "not check)")
    parser.add_argument("--time-limit", type=int, default=300,
                        help="seconds each h2load run may take")
    parser.add_argument("--pygen", help="directory of the generated "
                        "*_pb2.py modules")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--tls-ca", help="the daemon serves TLS (started "
                        "with --daemon-flag=--tls-cert=... and "
                        "--daemon-flag=--tls-key=...): verify it with this "
                        "CA and load it over https")
    args = parser.parse_args(argv)
    if args.target and not args.metrics:
        parser.error("--target needs --metrics (the daemon's counters decide "
                     "success)")
    if args.requests < 1 or args.clients < 1 or args.streams < 1:
        parser.error("--requests, --clients and --streams must be positive")
    try:
        result = run(args)
    except LoadError as exc:
        print("load.py: %s" % exc, file=sys.stderr)
        return 1
    report(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2, sort_keys=True)
    return 0 if not result["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
