"""The client side of scripts/load.py: h2load runs of framed gRPC
requests (ghz is not packaged for Debian; h2load is), their output and
latency logs, and the mixed run of a large and a small scenario at once.
"""

import os
import re
import struct
import subprocess
import threading
import time

from load_daemon import LoadError, split_host_port

PLAN_LOAD_PATH = "/reshard.v1.Planner/PlanLoad"


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
               threads, time_limit, log_file=None, path=PLAN_LOAD_PATH,
               tls=False):
    argv = [h2load, "-n", str(requests), "-c", str(clients), "-m",
            str(streams), "-t", str(threads), "-d", data_file,
            "-H", "content-type: application/grpc", "-H", "te: trailers",
            "-H", "grpc-timeout: 30S"]
    scheme = "https" if tls else "http"
    if target.startswith("unix:"):
        # h2load connects through the socket; the URL gives the path only.
        argv += ["-B", target]
        url = "%s://localhost%s" % (scheme, path)
    else:
        host, port = split_host_port(target)
        # Over TLS h2load negotiates h2 by ALPN; it does not verify the
        # server (set_up did, with --tls-ca) and cannot present a client
        # certificate.
        url = "%s://%s:%d%s" % (scheme,
                                ("[%s]" % host) if ":" in host else host,
                                port, path)
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


def latency_summary(values):
    return {"p50": percentile(values, 50), "p90": percentile(values, 90),
            "p99": percentile(values, 99),
            "max": values[-1] if values else 0.0, "samples": len(values)}


def h2load_counts(result):
    return {k: result.get(k) for k in
            ("total", "succeeded", "failed", "errored", "timeout",
             "status_2xx", "status_other")}


def write_frame(directory, name, message_bytes):
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(grpc_frame(message_bytes))
    return path


def run_mixed(h2load, args, target, small_file, big_file, tmp,
              small_path=PLAN_LOAD_PATH, big_path=PLAN_LOAD_PATH):
    """The large scenario on its own connections, started first, and the
    small one loaded meanwhile; each with its own latency log."""
    small_log = os.path.join(tmp, "mixed-small.log")
    big_log = os.path.join(tmp, "mixed-big.log")
    big = {}

    def load_big():
        try:
            big["result"], _ = run_h2load(
                h2load, target.grpc, big_file, args.mix_requests,
                args.mix_clients, args.mix_streams, 1, args.time_limit,
                big_log, path=big_path, tls=bool(args.tls_ca))
            big["finished"] = time.monotonic()
        except LoadError as exc:
            big["error"] = exc

    thread = threading.Thread(target=load_big)
    thread.start()
    # Let the large plans occupy the daemon before the small ones start.
    time.sleep(0.2)
    try:
        small, _ = run_h2load(h2load, target.grpc, small_file, args.requests,
                              args.clients, args.streams, args.threads,
                              args.time_limit, small_log, path=small_path, tls=bool(args.tls_ca))
        small_finished = time.monotonic()
    finally:
        thread.join()
    if "error" in big:
        raise big["error"]
    return {
        "small": {"requests_per_second": small.get("requests_per_second", 0),
                  "h2load": h2load_counts(small), "done": small["done"],
                  "latency_ms": latency_summary(latencies_ms(small_log))},
        "large": {"requests_per_second":
                      big["result"].get("requests_per_second", 0),
                  "h2load": h2load_counts(big["result"]),
                  "done": big["result"]["done"],
                  "latency_ms": latency_summary(latencies_ms(big_log))},
        # The small run is only measured against large plans when these
        # were still running when it ended.
        "overlapped": big["finished"] >= small_finished,
    }
