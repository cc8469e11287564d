#!/usr/bin/python3
"""Load-tests reshardd's PlanLoad with h2load, gRPC framed by hand.

ghz is not packaged for Debian; h2load (nghttp2-client) is. This script
sends exactly the requests of deploy/ghz (tests/e2e/reshard_scenarios.py)
as raw HTTP/2 POSTs: the serialized PlanLoadRequest behind gRPC's 5-byte
prefix (flag 0, big-endian length), with `content-type: application/grpc`
and `te: trailers`, to /reshard.v1.Planner/PlanLoad.

--pooled: the scenario's pooled reader of SPEC §6 (deploy/ghz/
pooled_scenarios.py, the requests of deploy/ghz's pooled steps): the set-up
registers the reader's placement (RegisterPlacement) and its memory pool
(RegisterMemory) once, and every PlanLoad then names both by id and carries
the block table, as SPEC §7's "S1 with 8 pages and a pooled reader" asks
(with --runs: the same with strided runs). --mix-pooled does the same for
the --mix scenario.

--method PlanTransfer: a P/D transfer scenario of SPEC §6 (deploy/ghz/
transfer_scenarios.py, the requests of deploy/ghz's transfer steps;
--scenario T1-128 by default: T1 with 128 tokens, SPEC §7's "PlanTransfer
T1 with 128 tokens"): the set-up registers both placements
(RegisterPlacement), every source pool and the target pool (RegisterMemory)
once, and every PlanTransfer then names them by id and carries the two
block tables (with --runs: the same with strided runs).

The ceiling (SPEC §7): in the same run, at the same concurrency, the
daemon's own grpc.health.v1.Health/Check is loaded the same way just
before each PlanLoad run; PlanLoad's share is its rate over the Check rate
of that pair. --repeat N measures N pairs and reports the median share.

The mixed run (--mix S5): a large scenario runs on its own connections
(--mix-clients x --mix-streams) while the main scenario is loaded again;
the small plans' latency is reported apart from the large ones', so a
stall of small plans behind large ones shows in their p99.

h2load sees HTTP status 200 for every gRPC call, failed or not, because the
gRPC status travels in trailers it does not read. So the daemon's own
counters decide: reshard_requests_total is read from the metrics endpoint
before and after, and only code="OK" of PlanLoad and Check may grow, by
exactly the number of requests sent.

CPU: with --daemon, the daemon's CPU time (its CPU clock, in nanoseconds:
load_daemon.cpu_seconds) is read around each run and printed per call;
unlike rates it barely moves when other work shares the machine.

Memory: the daemon's resident set is read after the set-up, after a
warm-up run and again after the measured runs, and sampled every 10 ms
while they run. It may grow by at most --rss-growth-mib after the warm-up
(flat); the peak above the set-up, over the calls in flight, is reported
per call (and without the response, which the call must hold anyway).

Only loopback targets and Unix sockets are accepted. Every run is bounded
in requests (-n) and in time (--time-limit).

--unix (with --daemon): the daemon listens on a Unix socket in a temporary
directory and every client (the set-up's grpcio, h2load with -B unix:PATH)
connects through it, as a client in the daemon's own pod can
(docs/operations.md).

Usage:
  scripts/load.py --daemon build/daemon/reshardd           # start one, test, stop it
  scripts/load.py --target 127.0.0.1:50051 --metrics 127.0.0.1:9464
  scripts/load.py --daemon build/daemon/reshardd --scenario S1-1 --mix S5
  scripts/load.py --daemon build/daemon/reshardd --pooled [--runs]  # S1-8
  scripts/load.py --daemon build/daemon/reshardd --scenario S5 --pooled
  scripts/load.py --daemon build/daemon/reshardd --method PlanTransfer --runs
Options: --scenario S1-8 (default; any of S1..S5 or S1-N; with --method
PlanTransfer T1-128, any of T1..T5 or T1-N tokens), --requests 5000,
--warmup 1000, --clients 4 --streams 16 (64 concurrent streams),
--repeat 1, --no-ceiling, --ceiling-requests 20000, --mix SCENARIO
(--mix-requests 200, --mix-clients 1, --mix-streams 4, --mix-method
PlanLoad or PlanStore), --short (a quick
smoke run for CI), --method PlanLoad (default), PlanStore (the scenario's
writer) or PlanTransfer (a T scenario), --runs (ask for strided runs, SPEC §2.2 step 7), --pooled and
--mix-pooled (the pooled reader: memory id + block table), --unix (over a
Unix socket), --decompose (the daemon's CPU per call split into an empty
Check, in-process planning, the kernel's send and the remainder: see
scripts/cpu_decompose.py; --bench, --bench-runs 200, --perf).
Exit status: 0 when every call succeeded and memory stayed flat, 1 otherwise,
2 on bad usage.

Files: this one (the runs, the report, the options), load_daemon.py (the
daemon under load, its set-up, its counters, CPU and memory) and
load_h2load.py (h2load runs, their logs, the mixed run).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile

import cpu_decompose  # --decompose (scripts/cpu_decompose.py)
from load_daemon import (LoadError, RssSampler, Target, client_cpu_seconds,
                         cpu_seconds, find_pygen, read_metrics, rss_bytes,
                         set_up, set_up_transfer, settled_counts)
from load_h2load import (h2load_counts, latencies_ms, latency_summary,
                         run_h2load, run_mixed, write_frame)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
E2E = os.path.join(REPO, "tests", "e2e")
GHZ = os.path.join(REPO, "deploy", "ghz")  # pooled_scenarios.py

HEALTH_CHECK_PATH = "/grpc.health.v1.Health/Check"
# --method: the RPC under load and the scenario request it sends.
METHODS = {"PlanLoad": "plan_load", "PlanStore": "plan_store",
           "PlanTransfer": "plan_transfer"}
HEALTH_CHECK_OK = "grpc.health.v1.Health/Check OK"


def run(args):
    h2load = shutil.which("h2load")
    if h2load is None:
        raise LoadError("h2load is missing (apt-get install nghttp2-client; "
                        "scripts/install-deps.sh installs it)")
    os.environ["RESHARD_E2E_PYGEN"] = os.path.abspath(find_pygen(args.pygen))
    if args.daemon:
        os.environ["RESHARD_E2E_DAEMON"] = os.path.abspath(args.daemon)
    for path in (E2E, GHZ):
        if path not in sys.path:
            sys.path.insert(0, path)
    import pooled_scenarios
    import reshard_scenarios as scenarios
    import transfer_scenarios as transfers

    transfer = args.method == "PlanTransfer"
    try:
        if transfer:
            requests = transfers.build(*transfers.parse_variant(
                args.scenario))
        else:
            requests = scenarios.build(*scenarios.parse_variant(
                args.scenario))
    except (KeyError, ValueError) as exc:
        raise LoadError("--scenario %s: %s" % (args.scenario, exc))
    mix = (scenarios.build(*scenarios.parse_variant(args.mix))
           if args.mix else None)
    if not transfer:
        requests.plan_load.runs = args.runs
        requests.plan_store.runs = args.runs
    pooled = pooled_scenarios.build(requests) if args.pooled else None
    mix_pooled = (pooled_scenarios.build(mix)
                  if mix is not None and args.mix_pooled else None)
    if transfer:
        message = (requests.plan_transfer_runs if args.runs
                   else requests.plan_transfer)
    elif pooled is not None:
        message = pooled.plan_load_runs if args.runs else pooled.plan_load
    else:
        message = getattr(requests, METHODS[args.method])
    path = "/reshard.v1.Planner/" + args.method
    method_ok = "reshard.v1.Planner/%s OK" % args.method
    target = Target(args)
    streams = args.clients * args.streams
    result = {"scenario": requests.name, "method": args.method,
              "runs": args.runs, "pooled": args.pooled,
              "transfer": transfer,
              "request_bytes": message.ByteSize(), "requests": args.requests,
              "warmup": args.warmup, "clients": args.clients,
              "streams_per_client": args.streams,
              "concurrent_streams": streams, "repeat": args.repeat,
              "transport": "unix" if args.unix else "tcp"}
    sent = {method_ok: 0, HEALTH_CHECK_OK: 0}
    mix_ok = "reshard.v1.Planner/%s OK" % args.mix_method
    # The pooled set-up's registrations, counted before the load starts.
    registered = {}
    for p in (pooled, mix_pooled):
        if p is not None:
            for m in ("RegisterPlacement", "RegisterMemory"):
                key = "reshard.v1.Planner/%s OK" % m
                registered[key] = registered.get(key, 0) + 1
    if transfer:
        for m, _ in requests.registrations():
            key = "reshard.v1.Planner/%s OK" % m
            registered[key] = registered.get(key, 0) + 1
    if mix is not None:
        sent[mix_ok] = 0
    try:
        if transfer:
            stats, response_bytes = set_up_transfer(
                target.grpc, requests, message, tls_ca=args.tls_ca)
        else:
            stats, response_bytes = set_up(
                target.grpc, requests, method=args.method,
                tls_ca=args.tls_ca, pooled=pooled,
                plan_load=message if pooled is not None else None)
        result["plan"] = {"copies": stats.operations, "bytes": stats.bytes,
                          "copies_before_coalescing":
                              stats.copies_before_coalescing,
                          "runs": stats.runs,
                          "response_bytes": response_bytes}
        if mix is not None:
            mix_stats, mix_bytes = set_up(
                target.grpc, mix, method=args.mix_method, tls_ca=args.tls_ca,
                pooled=mix_pooled, plan_load=mix_pooled.plan_load
                if mix_pooled is not None else None)
            result["mix_plan"] = {"scenario": mix.name,
                                  "method": args.mix_method,
                                  "pooled": mix_pooled is not None,
                                  "copies": mix_stats.operations,
                                  "response_bytes": mix_bytes}
        with tempfile.TemporaryDirectory(prefix="reshard-load-") as tmp:
            data_file = write_frame(tmp, "request.grpc",
                                    message.SerializeToString())
            # An empty HealthCheckRequest asks about the server as a whole.
            health_file = write_frame(tmp, "health.grpc", b"")
            # The set-up calls are counted a moment after they answered: wait
            # for them, or one of them would be counted as load.
            set_up_calls = {method_ok: 1}
            if mix is not None:
                set_up_calls[mix_ok] = set_up_calls.get(mix_ok, 0) + 1
            set_up_calls.update(registered)
            before_text, before = settled_counts(target.metrics, {},
                                                 set_up_calls)
            rss_start = rss_bytes(target.pid, before_text)
            if args.warmup > 0:
                warm, _ = run_h2load(h2load, target.grpc, data_file,
                                     args.warmup, args.clients, args.streams,
                                     args.threads, args.time_limit,
                                     path=path, tls=bool(args.tls_ca))
                sent[method_ok] += warm["done"]
            rss_warm = rss_bytes(target.pid, read_metrics(target.metrics))
            pairs = []
            raw = {"plan_timer": cpu_decompose.plan_timer(
                read_metrics(target.metrics), args.method)}
            with RssSampler(target) as sampler:
                for i in range(args.repeat):
                    pair = {}
                    if args.ceiling:
                        cpu = cpu_seconds(target.pid)
                        client_cpu = client_cpu_seconds()
                        ceiling, _ = run_h2load(
                            h2load, target.grpc, health_file,
                            args.ceiling_requests, args.clients,
                            args.streams, args.threads, args.time_limit,
                            path=HEALTH_CHECK_PATH, tls=bool(args.tls_ca))
                        sent[HEALTH_CHECK_OK] += ceiling["done"]
                        pair["ceiling"] = ceiling
                        pair["ceiling_client_cpu_us"] = 1e6 * (
                            client_cpu_seconds() - client_cpu) / ceiling["done"]
                        if cpu is not None:
                            pair["ceiling_cpu_us"] = 1e6 * (
                                cpu_seconds(target.pid) - cpu) / ceiling["done"]
                    log_file = os.path.join(tmp, "requests-%d.log" % i)
                    cpu = cpu_seconds(target.pid)
                    client_cpu = client_cpu_seconds()
                    main, _ = run_h2load(h2load, target.grpc, data_file,
                                         args.requests, args.clients,
                                         args.streams, args.threads,
                                         args.time_limit, log_file,
                                         path=path, tls=bool(args.tls_ca))
                    pair["client_cpu_us"] = 1e6 * (
                        client_cpu_seconds() - client_cpu) / main["done"]
                    if cpu is not None:
                        pair["cpu_us"] = 1e6 * (cpu_seconds(target.pid)
                                                - cpu) / main["done"]
                    sent[method_ok] += main["done"]
                    pair["main"] = main
                    pair["latency"] = latencies_ms(log_file)
                    if args.decompose:
                        pair["planning"] = cpu_decompose.pair_planning(args)
                    pairs.append(pair)
                rss_main_peak = sampler.peak
                if args.decompose:  # the plan timer, then perf apart
                    end = cpu_decompose.plan_timer(
                        read_metrics(target.metrics), args.method)
                    raw["plan_timer"] = tuple(
                        b - a for a, b in zip(raw["plan_timer"], end))
                    for key, f, n, p, ok in (
                            ("check", health_file, args.ceiling_requests,
                             HEALTH_CHECK_PATH, HEALTH_CHECK_OK),
                            ("main", data_file, args.requests, path,
                             method_ok)):
                        done, raw["profile_" + key] = cpu_decompose.profile(
                            args.perf, target.pid, tmp, key,
                            lambda: run_h2load(
                                h2load, target.grpc, f, n, args.clients,
                                args.streams, args.threads, args.time_limit,
                                path=p, tls=bool(args.tls_ca))[0])
                        sent[ok] += done["done"]
                mixed = None
                if mix is not None:
                    mix_message = (mix_pooled.plan_load
                                   if mix_pooled is not None
                                   else getattr(mix, METHODS[args.mix_method]))
                    mix_file = write_frame(tmp, "mix.grpc",
                                           mix_message.SerializeToString())
                    mixed = run_mixed(h2load, args, target, data_file,
                                      mix_file, tmp, small_path=path,
                                      big_path="/reshard.v1.Planner/"
                                      + args.mix_method)
                    sent[method_ok] += mixed["small"]["done"]
                    sent[mix_ok] += mixed["large"]["done"]
            after_text, after = settled_counts(target.metrics, before, sent)
            rss_end = rss_bytes(target.pid, after_text)
    finally:
        target.stop()

    # The figures of the pair with the median share (or the last pair).
    def share(pair):
        c = pair.get("ceiling", {}).get("requests_per_second", 0.0)
        return pair["main"].get("requests_per_second", 0.0) / c if c else 0.0

    ordered = sorted(pairs, key=share)
    chosen = ordered[len(ordered) // 2]
    main = chosen["main"]
    result.update({
        "requests_per_second": main.get("requests_per_second", 0.0),
        "seconds": main.get("seconds", 0.0),
        "h2load": h2load_counts(main),
        "latency_ms": latency_summary(chosen["latency"]),
        "rss_bytes": {"start": rss_start, "after_warmup": rss_warm,
                      "end": rss_end, "peak": sampler.peak,
                      "peak_main": rss_main_peak},
    })
    if args.ceiling:
        result["ceiling_requests_per_second"] = \
            chosen["ceiling"].get("requests_per_second", 0.0)
        result["share"] = share(chosen)
        result["shares"] = [share(p) for p in pairs]
    result["client_cpu_us_per_call"] = statistics.median(
        p["client_cpu_us"] for p in pairs)
    if args.ceiling:
        result["ceiling_client_cpu_us_per_call"] = statistics.median(
            p["ceiling_client_cpu_us"] for p in pairs)
    if "cpu_us" in pairs[0]:
        result["cpu_us_per_call"] = statistics.median(
            p["cpu_us"] for p in pairs)
        if args.ceiling:
            result["ceiling_cpu_us_per_call"] = statistics.median(
                p["ceiling_cpu_us"] for p in pairs)
    # What one call in flight costs: the peak of the measured PlanLoad runs
    # above the idle daemon after set-up, over the calls in flight.
    per_call = (rss_main_peak - rss_start) / float(streams)
    result["rss_per_call_bytes"] = per_call
    result["rss_per_call_without_response_bytes"] = \
        per_call - result["plan"]["response_bytes"]
    if mixed is not None:
        result["mixed"] = mixed
    if args.decompose:
        raw["pairs"] = [{"cpu_us": p.get("cpu_us"),
                         "check_us": p.get("ceiling_cpu_us"),
                         "planning": p["planning"]} for p in pairs]
        result["decomposition"] = cpu_decompose.decompose(args, result, raw)

    problems = []
    runs = [("", p["main"]) for p in pairs]
    runs += [("ceiling ", p["ceiling"]) for p in pairs if "ceiling" in p]
    if mixed is not None:
        runs += [("mixed small ", mixed["small"]["h2load"]),
                 ("mixed large ", mixed["large"]["h2load"])]
    for label, counts in runs:
        for key in ("failed", "errored", "timeout", "status_other"):
            if counts.get(key):
                problems.append("h2load %scounted %d %s"
                                % (label, counts[key], key))
    for p in pairs:
        if p["main"].get("succeeded") != args.requests:
            problems.append("h2load: %s of %d requests succeeded"
                            % (p["main"].get("succeeded"), args.requests))
    deltas = {}
    for key in set(before) | set(after):
        d = after.get(key, 0) - before.get(key, 0)
        if d:
            deltas["%s/%s %s" % key] = d
    result["daemon_counter_deltas"] = deltas
    for key, count in sent.items():
        if deltas.get(key, 0) != count:
            problems.append("the daemon counted %d %s, %d were sent"
                            % (deltas.get(key, 0), key, count))
    for key, d in sorted(deltas.items()):
        if key not in sent:
            problems.append("the daemon counted %d %s" % (d, key))
    growth = rss_end - rss_warm
    result["rss_growth_bytes"] = growth
    if args.rss_growth_mib > 0 and growth > args.rss_growth_mib << 20:
        problems.append("resident memory grew %.1f MiB after the warm-up "
                        "(bound %d MiB)" % (growth / 2**20, args.rss_growth_mib))
    result["problems"] = problems
    return result


def percent(part, whole):
    """`part` as a percentage of `whole`. Where the daemon's CPU can only
    be read in /proc's clock ticks (10 ms; load_daemon.cpu_seconds), a
    short run can measure none at all; that is said, not divided by."""
    if whole <= 0:
        return "n/a (under one clock tick)"
    return "%.1f %%" % (100.0 * part / whole)


def report(r, out=sys.stdout):
    mib = 1024.0 * 1024.0
    lat = r["latency_ms"]
    print("reshardd load test: %s %s%s%s (%d copies, %d bytes per plan, "
          "%d-byte response), h2load %d requests at %d concurrent streams "
          "(%d connections x %d%s)"
          % (r["scenario"], r["method"],
             ", pooled reader (memory id + block table, %d-byte request)"
             % r["request_bytes"] if r.get("pooled") else
             ", pooled source and target (memory ids + block tables, "
             "%d-byte request)" % r["request_bytes"]
             if r.get("transfer") else "",
             " with runs (%d runs)" % r["plan"]["runs"] if r["runs"] else "",
             r["plan"]["copies"], r["plan"]["bytes"],
             r["plan"]["response_bytes"], r["requests"],
             r["concurrent_streams"], r["clients"], r["streams_per_client"],
             ", over a Unix socket" if r.get("transport") == "unix" else ""),
          file=out)
    print("  throughput   %.1f requests/s over %.2f s"
          % (r["requests_per_second"], r["seconds"]), file=out)
    if "share" in r:
        print("  ceiling      Health/Check %.1f requests/s at the same "
              "concurrency; %s share %.1f %%%s"
              % (r["ceiling_requests_per_second"], r["method"],
                 100.0 * r["share"],
                 "" if r["repeat"] == 1 else
                 " (median of %d pairs: %s)" % (r["repeat"], ", ".join(
                     "%.1f" % (100.0 * s) for s in sorted(r["shares"])))),
              file=out)
    if "cpu_us_per_call" in r:
        line = "  daemon CPU   %.1f us per %s" % (r["cpu_us_per_call"],
                                                r["method"])
        if "ceiling_cpu_us_per_call" in r:
            line += (", %.1f us per Check: CPU share %s"
                     % (r["ceiling_cpu_us_per_call"],
                        percent(r["ceiling_cpu_us_per_call"],
                                r["cpu_us_per_call"])))
        print(line, file=out)
    line = "  client CPU   %.1f us per %s" % (r["client_cpu_us_per_call"],
                                            r["method"])
    if "ceiling_client_cpu_us_per_call" in r:
        line += (", %.1f us per Check (h2load, on the same cores)"
                 % r["ceiling_client_cpu_us_per_call"])
        if "ceiling_cpu_us_per_call" in r:
            # With the machine's cores busy, rates go as the inverse of the
            # CPU each call costs both processes; a PlanLoad whose daemon
            # side cost nothing would still cost h2load its share.
            check = (r["ceiling_cpu_us_per_call"]
                     + r["ceiling_client_cpu_us_per_call"])
            line += ("\n               both: CPU share %s; with a "
                     "daemon costing nothing per %s at most %s"
                     % (percent(check, r["cpu_us_per_call"]
                                + r["client_cpu_us_per_call"]),
                        r["method"],
                        percent(check, r["client_cpu_us_per_call"])))
    print(line, file=out)
    print("  latency      p50 %.2f ms  p90 %.2f ms  p99 %.2f ms  max %.2f ms"
          "  (%d samples)" % (lat["p50"], lat["p90"], lat["p99"], lat["max"],
                              lat["samples"]), file=out)
    h = r["h2load"]
    print("  h2load       %s succeeded, %s failed, %s errored, %s timeout, "
          "%s 2xx" % (h["succeeded"], h["failed"], h["errored"],
                      h["timeout"], h["status_2xx"]), file=out)
    m = r.get("mixed")
    if m is not None:
        small = r["scenario"] + (" (pooled)" if r.get("pooled") else "")
        for label, key, name in (("mixed small ", "small", small),
                                 ("mixed large ", "large",
                                  "%s %s%s" % (r["mix_plan"]["scenario"],
                                               r["mix_plan"]["method"],
                                               " (pooled)"
                                               if r["mix_plan"].get("pooled")
                                               else ""))):
            l = m[key]["latency_ms"]
            print("  %s %s: %.1f requests/s, p50 %.2f ms  p99 %.2f ms  "
                  "max %.2f ms  (%d samples)"
                  % (label, name, m[key]["requests_per_second"], l["p50"],
                     l["p99"], l["max"], l["samples"]), file=out)
        if not m["overlapped"]:
            print("  NOTE         the large plans finished before the small "
                  "run ended; raise --mix-requests", file=out)
    print("  daemon       " + ", ".join(
        "%s +%d" % kv for kv in sorted(r["daemon_counter_deltas"].items())),
          file=out)
    rss = r["rss_bytes"]
    print("  memory       RSS %.1f MiB at start, %.1f MiB after the warm-up, "
          "peak %.1f MiB, %.1f MiB after the run (growth %+.1f MiB)"
          % (rss["start"] / mib, rss["after_warmup"] / mib, rss["peak"] / mib,
             rss["end"] / mib, r["rss_growth_bytes"] / mib), file=out)
    print("  per call     %.2f MiB per call in flight (peak of the %s "
          "runs above the start, over %d streams); %.2f MiB without the "
          "response"
          % (r["rss_per_call_bytes"] / mib, r["method"],
             r["concurrent_streams"],
             r["rss_per_call_without_response_bytes"] / mib), file=out)
    cpu_decompose.report(r, out)
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
    parser.add_argument("--scenario", default=None,
                        help="S1-8 by default; with --method PlanTransfer "
                             "a T scenario, T1-128 by default")
    parser.add_argument("--method", default="PlanLoad", choices=sorted(METHODS),
                        help="the RPC under load: the scenario's reader "
                             "PlanLoad, its writer's PlanStore, or a T "
                             "scenario's PlanTransfer")
    parser.add_argument("--runs", action="store_true",
                        help="ask for strided runs (SPEC §2.2 step 7)")
    parser.add_argument("--pooled", action="store_true",
                        help="the scenario's pooled reader (SPEC §6): "
                             "register its placement and memory pool first, "
                             "then PlanLoad with the memory id and a block "
                             "table")
    parser.add_argument("--unix", action="store_true",
                        help="with --daemon: listen and load over a Unix "
                             "socket instead of 127.0.0.1")
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1,
                        help="ceiling + PlanLoad pairs to measure (the "
                             "median share is reported)")
    parser.add_argument("--no-ceiling", dest="ceiling", action="store_false",
                        help="do not measure the Health/Check ceiling")
    parser.add_argument("--ceiling-requests", type=int, default=20000,
                        help="Health/Check requests per ceiling run")
    parser.add_argument("--mix", help="a large scenario (e.g. S5) loaded "
                        "on its own connections during a second run of "
                        "--scenario")
    parser.add_argument("--mix-method", default="PlanLoad",
                        choices=["PlanLoad", "PlanStore"],
                        help="the RPC of the --mix scenario: its reader's "
                             "PlanLoad or its writer's PlanStore")
    parser.add_argument("--mix-pooled", action="store_true",
                        help="the --mix scenario's PlanLoad with its pooled "
                             "reader, registered first")
    parser.add_argument("--mix-requests", type=int, default=200)
    parser.add_argument("--mix-clients", type=int, default=1)
    parser.add_argument("--mix-streams", type=int, default=4)
    parser.add_argument("--short", action="store_true",
                        help="a quick smoke run (CI): 300 requests, 100 "
                             "warm-up, --mix S5 with 40 requests, no "
                             "memory bound")
    parser.add_argument("--rss-growth-mib", type=int, default=16,
                        help="bound on RSS growth after the warm-up (0: do "
                             "not check)")
    parser.add_argument("--time-limit", type=int, default=300,
                        help="seconds each h2load run may take")
    parser.add_argument("--pygen", help="directory of the generated "
                        "*_pb2.py modules")
    parser.add_argument("--json", help="also write the figures here")
    cpu_decompose.add_arguments(parser)
    parser.add_argument("--tls-ca", help="the daemon serves TLS (started "
                        "with --daemon-flag=--tls-cert=... and "
                        "--daemon-flag=--tls-key=...): verify it with this "
                        "CA and load it over https")
    args = parser.parse_args(argv)
    if args.short:
        args.requests, args.warmup, args.ceiling_requests = 300, 100, 1000
        args.mix = args.mix or "S5"
        args.mix_requests = 40
        args.rss_growth_mib = 0
    if args.scenario is None:
        args.scenario = "T1-128" if args.method == "PlanTransfer" else "S1-8"
    if args.target and not args.metrics:
        parser.error("--target needs --metrics (the daemon's counters decide "
                     "success)")
    if args.pooled and args.method != "PlanLoad":
        parser.error("--pooled goes with --method PlanLoad")
    if args.mix_pooled and (not args.mix or args.mix_method != "PlanLoad"):
        parser.error("--mix-pooled goes with --mix and --mix-method PlanLoad")
    if args.unix and not args.daemon:
        parser.error("--unix goes with --daemon (give a running daemon's "
                     "socket as --target unix:PATH)")
    cpu_decompose.check_arguments(parser, args)
    if (args.requests < 1 or args.clients < 1 or args.streams < 1
            or args.repeat < 1 or args.mix_requests < 1
            or args.ceiling_requests < 1
            or args.mix_clients < 1 or args.mix_streams < 1):
        parser.error("--requests, --clients, --streams, --repeat and the "
                     "--mix-* counts must be positive")
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
