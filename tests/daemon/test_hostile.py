#!/usr/bin/env python3
"""Hostile input against a live reshardd (issue 13, docs/security.md).

Each class of attack that once took the daemon down is sent again, on
loopback, to a freshly started daemon, while a prober measures the health
check's latency; the daemon's peak resident memory (VmHWM, reset through
/proc/PID/clear_refs before each attack) gives the growth the attack
caused. Bounds: peak growth under 64 MiB per hostile call, health answering
within 100 ms, the expected status, and the daemon alive afterwards.
Under sanitizers (--sanitized) memory and latency are printed, not bounded:
ASan's shadow and quarantine are not the daemon's.

Requests are built on the wire by hand (protobuf and HTTP/2 framing), as an
attacker would; grpcio sends the well-formed ones with identity
serializers, raw sockets the rest.

Usage: test_hostile.py --reshardd PATH [--sanitized] [--only NAME]

The harness (the daemon, the prober, requests on the wire) is
hostile_harness.py; the classes are grouped by family in hostile_payloads.py
(request contents), hostile_budget.py (the in-flight budget),
hostile_floods.py (HTTP/2 floods) and hostile_connections.py (streams,
connections and the process). Worker processes run this file with
--worker.
"""
import argparse
import os
import sys
import time

from hostile_budget import (calls_in_flight, concurrent_plans, forget_many,
                            plan_many, plan_request, unread_responses)
from hostile_connections import (cancelled, cancelled_while_waiting,
                                 descriptors, disk_full, half_headers,
                                 idle_streams, lmdb_files, signals)
from hostile_floods import (large_requests, rapid_reset,
                            rapid_reset_connections)
from hostile_harness import DAEMONS, SANITIZER_REPORT, Outcome
from hostile_payloads import (compression_bomb, distinct_region_ids,
                              identity_blowup, repeated_singular,
                              tiny_elements)


CLASSES = [repeated_singular, identity_blowup, tiny_elements,
           distinct_region_ids,
           compression_bomb, calls_in_flight, concurrent_plans,
           unread_responses, rapid_reset, rapid_reset_connections,
           large_requests,
           idle_streams,
           descriptors, half_headers, cancelled, cancelled_while_waiting,
           signals, lmdb_files, disk_full]


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--reshardd")
    parser.add_argument("--sanitized", action="store_true")
    parser.add_argument("--only")
    parser.add_argument("--worker")
    parser.add_argument("--address")
    parser.add_argument("--count", type=int)
    parser.add_argument("--method")
    parser.add_argument("--pygen", help="generated Python messages of the "
                        "e2e tests (build/tests/e2e/pygen)")
    parser.add_argument("--payload")
    args = parser.parse_args(argv)
    if args.worker == "plan_many":
        plan_many(args.address, args.count, args.pygen)
        return 0
    if args.worker == "plan_request":
        plan_request(args.address, args.payload, args.pygen)
        return 0
    if args.worker == "forget_many":
        forget_many(args.address, args.count)
        return 0
    if args.worker == "call":
        import grpc
        channel = grpc.insecure_channel(
            args.address, options=[("grpc.max_send_message_length", -1)])
        fn = channel.unary_unary(args.method, request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
        with open(args.payload, "rb") as f:
            payload = f.read()
        try:
            fn(payload, timeout=30)
            print("OK ")
        except grpc.RpcError as error:
            print(error.code().name, error.details())
        return 0
    out = Outcome(args.sanitized)
    for fn in CLASSES:
        if args.only and args.only != fn.__name__:
            continue
        try:
            if fn in (concurrent_plans, unread_responses):
                fn(out, args.reshardd, args.pygen)
            else:
                fn(out, args.reshardd)
        except Exception as error:  # noqa: BLE001 - report and go on
            out.check(fn.__name__, False, "raised %r" % (error,))
    codes = []
    for daemon in DAEMONS:
        if daemon.proc.poll() is None:  # a failed class left it running
            daemon.stop()
        time.sleep(0.1)  # the stderr pump takes the last lines
        codes.append(daemon.exit_code)
    reports = [line for daemon in DAEMONS for line in daemon.lines
               if SANITIZER_REPORT.search(line)]
    out.check("every daemon exited 0 after SIGTERM, no sanitizer report",
              all(code == 0 for code in codes) and not reports,
              "exit codes %s; %s" % (codes, reports[:3]))
    print("%d passed, %d failed" % (out.passed, out.failed))
    sys.stdout.flush()
    # grpcio's threads can hold a normal interpreter exit.
    os._exit(1 if out.failed else 0)


if __name__ == "__main__":
    main()
