#!/usr/bin/env python3
"""The daemon's user-space instructions per call, counted, not timed.

Issue 26 item 4 splits the daemon's CPU per call under load into an empty
Check's, the planning, the kernel's send and a remainder; every term but
the planning is a difference of timings that move by 30 % from one run to
the next on this machine (docs/performance.md). Instructions do not move:
this script runs reshardd under callgrind (valgrind), loads it with a
fixed number of calls and prints the instructions its threads executed per
call, for an empty Health/Check and for the measured request, and splits
the request's into

* the Check's (what every call costs gRPC and the server),
* planning (reshard_plan_load or reshard_plan_transfer, inclusive),
* encoding the response (reshard_plan_response_measure or
  reshard_transfer_response_measure, then reshard__planner_pack_response,
  which writes and packs it),
* the rest: decoding, lookups, the hand-offs between threads, and gRPC's
  work beyond a Check's for a larger request and response.

What it does not see: the kernel (syscalls, scheduling, the send), which
only a timing can weigh (scripts/load.py --decompose), and time itself:
an instruction on a cold core costs more than on a warm one. And one
unit is off: valgrind counts each iteration of a rep movsb / rep stosb as
an instruction, and glibc copies and clears blocks of a few KB that way,
so a large memcpy weighs about a byte an instruction.

How: the daemon starts under ``valgrind --tool=callgrind`` on the memory
catalog; a warm-up (h2load, then scripts/load.py --target, which also
registers the pooled memory) runs uncounted; ``callgrind_control -z``
zeroes the counters, the counted calls run, ``callgrind_control -d``
dumps them. The metrics endpoint's thread, which load.py scrapes, is
subtracted (on_request, inclusive). Calls are 2 000 each by default, at 8
streams on one connection: under valgrind the daemon runs about 50 times
slower, and one connection keeps h2load's deadlines far away.

Needs valgrind (Debian package valgrind) and h2load (nghttp2-client).

    scripts/call_instructions.py --daemon build/daemon/reshardd --pooled --runs
"""

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Inclusive costs taken apart, by function name (callgrind_annotate's).
PLANNER = {"PlanLoad": "reshard_plan_load",
           "PlanTransfer": "reshard_plan_transfer"}
PLANNING = tuple(PLANNER.values())
ENCODING = ("reshard_plan_response_measure",
            "reshard_transfer_response_measure",
            "reshard__planner_pack_response")
METRICS = ("on_request",)  # libmicrohttpd's handler: load.py's scrapes

LINE_RE = re.compile(r"^\s*([\d,]+)\s+\([^)]*\)\s+\S*?:(\S+?)(?:\(.*\))? \[")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, process, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit("reshardd under valgrind exited with %s"
                             % process.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("reshardd under valgrind did not listen in %.0f s"
                     % timeout)


def run(command, what):
    result = subprocess.run(command, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise SystemExit("%s failed (%s):\n%s" % (what, result.returncode,
                                                  result.stdout[-3000:]))
    return result.stdout


def h2load_checks(port, count, check_body):
    out = run(["h2load", "-n", str(count), "-c", "1", "-m", "8",
               "-H", "content-type: application/grpc", "-H", "te: trailers",
               "-d", check_body,
               "http://127.0.0.1:%d/grpc.health.v1.Health/Check" % port],
              "h2load")
    if "%d succeeded" % count not in out:
        raise SystemExit("h2load: not every Check succeeded:\n" + out)


def load_calls(args, port, metrics_port, count, warmup):
    command = [sys.executable, os.path.join(HERE, "load.py"),
               "--target", "127.0.0.1:%d" % port,
               "--metrics", "127.0.0.1:%d" % metrics_port,
               "--method", args.method, "--no-ceiling",
               "--requests", str(count), "--warmup", str(warmup),
               "--clients", "1", "--streams", "8", "--time-limit", "600",
               "--rss-growth-mib", "0"]
    if args.scenario:
        command += ["--scenario", args.scenario]
    if args.pooled:
        command.append("--pooled")
    if args.runs:
        command.append("--runs")
    if args.pygen:
        command += ["--pygen", args.pygen]
    return run(command, "load.py")


def control(option, pid):
    run(["callgrind_control", option, str(pid)], "callgrind_control " + option)


def dumped_costs(directory, before):
    """Inclusive instructions per function of the newest dump not in
    `before`, and its total."""
    dumps = [os.path.join(directory, f) for f in os.listdir(directory)
             if f.startswith("callgrind.out") and f not in before]
    if not dumps:
        raise SystemExit("callgrind wrote no dump")
    path = max(dumps, key=os.path.getmtime)
    out = run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
               path], "callgrind_annotate")
    total = None
    costs = {}
    for line in out.splitlines():
        if total is None and line.rstrip().endswith("PROGRAM TOTALS"):
            total = int(line.split()[0].replace(",", ""))
            continue
        m = LINE_RE.match(line)
        if m:
            name = m.group(2)
            costs[name] = max(costs.get(name, 0),
                              int(m.group(1).replace(",", "")))
    if total is None:
        raise SystemExit("no total in %s" % path)
    return total, costs


def measure(args):
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate",
                 "h2load"):
        if shutil.which(tool) is None:
            raise SystemExit("%s not found (Debian: valgrind, nghttp2-client)"
                             % tool)
    directory = tempfile.mkdtemp(prefix="reshard-callgrind-")
    check_body = os.path.join(directory, "check.bin")
    with open(check_body, "wb") as f:
        f.write(b"\0\0\0\0\0")  # a gRPC frame of an empty HealthCheckRequest
    port, metrics_port = free_port(), free_port()
    daemon = subprocess.Popen(
        ["valgrind", "--tool=callgrind", "--dump-instr=no",
         "--callgrind-out-file=" + os.path.join(directory, "callgrind.out.%p"),
         args.daemon, "--listen", "127.0.0.1:%d" % port,
         "--metrics-listen", "127.0.0.1:%d" % metrics_port,
         "--catalog", "memory"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, daemon)
        figures = {}
        h2load_checks(port, 200, check_body)
        before = set(os.listdir(directory))
        control("-z", daemon.pid)
        h2load_checks(port, args.requests, check_body)
        control("-d", daemon.pid)
        total, costs = dumped_costs(directory, before)
        figures["check"] = (total - sum(costs.get(n, 0) for n in METRICS)) \
            / args.requests

        load_calls(args, port, metrics_port, 200, 50)
        before = set(os.listdir(directory))
        control("-z", daemon.pid)
        summary = load_calls(args, port, metrics_port, args.requests, 0)
        control("-d", daemon.pid)
        total, costs = dumped_costs(directory, before)
        per_call = lambda names: sum(costs.get(n, 0) for n in names) \
            / args.requests
        figures["call"] = (total - sum(costs.get(n, 0) for n in METRICS)) \
            / args.requests
        figures["planning"] = per_call(PLANNING)
        figures["encoding"] = per_call(ENCODING)
        figures["what"] = summary.splitlines()[0] if summary else ""
        figures["functions"] = {n: per_call((n,)) for n in args.function}
        return figures
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
        shutil.rmtree(directory, ignore_errors=True)


def report(args, f, out=sys.stdout):
    print("reshardd user-space instructions per call (callgrind, %d calls "
          "each, metrics thread excluded)" % args.requests, file=out)
    print("  %s" % f["what"], file=out)
    rows = [("empty Health/Check", f["check"], ""),
            ("%s" % args.method, f["call"], ""),
            ("- the Check's", f["check"], ""),
            ("- planning", f["planning"], PLANNER[args.method]),
            ("- encoding", f["encoding"], "measure and pack"),
            ("= the rest", f["rest"], "decoding, lookups, hand-offs, gRPC "
                                 "beyond a Check's")]
    for label, value, note in rows:
        print("  %-22s %9.0f  %s" % (label, value, note), file=out)
    for name, value in f["functions"].items():
        print("  %-22s %9.0f  inclusive, --function" % (name, value),
              file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--daemon", required=True, help="reshardd binary")
    parser.add_argument("--method", default="PlanLoad",
                        choices=("PlanLoad", "PlanTransfer"))
    parser.add_argument("--scenario", help="as scripts/load.py's (default "
                        "S1-8, or T1-128 for PlanTransfer)")
    parser.add_argument("--pooled", action="store_true",
                        help="the scenario's pooled reader (load.py)")
    parser.add_argument("--runs", action="store_true", help="ask for runs")
    parser.add_argument("--requests", type=int, default=2000,
                        help="counted calls of each kind")
    parser.add_argument("--function", action="append", default=[],
                        help="also print this function's inclusive "
                        "instructions per call (repeatable; callgrind's "
                        "names, e.g. decode_request)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--pygen", default=os.path.join(
        ROOT, "build", "tests", "e2e", "pygen"),
        help="the generated *_pb2.py modules (load.py's --pygen)")
    args = parser.parse_args(argv)
    if args.requests <= 0:
        parser.error("--requests must be positive")
    figures = measure(args)
    figures["rest"] = (figures["call"] - figures["check"] -
                       figures["planning"] - figures["encoding"])
    report(args, figures)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
