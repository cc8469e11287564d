#!/usr/bin/python3
"""Prints one SPEC §6 scenario's plan and figures for a person to read.

Publishes the writer's manifest, registers the scenario's pages and plans
the load for every reader participant of DP rank 0, against a running
daemon (--target) or one it starts (--daemon, memory catalog, 127.0.0.1:0).
Prints what was set up, one summary row per reader participant (ranges,
copies before and after coalescing, bytes, batches, plan round trip), the
round-trip latency of repeated plans, and the first copies of the first
participant's plan in reshardctl's table layout.

The requests are those of deploy/ghz and scripts/load.py
(tests/e2e/reshard_scenarios.py).

Usage:
  scripts/scenario.py S1 --daemon build/daemon/reshardd
  scripts/scenario.py S5 --target 127.0.0.1:50051 --copies 20
  scripts/scenario.py S1-8 --target 127.0.0.1:50051 --repeat 200
"""

import argparse
import glob
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
E2E = os.path.join(REPO, "tests", "e2e")


def find_pygen(explicit):
    if explicit:
        return explicit
    if os.environ.get("RESHARD_E2E_PYGEN"):
        return os.environ["RESHARD_E2E_PYGEN"]
    found = sorted(glob.glob(os.path.join(REPO, "build*", "tests", "e2e",
                                          "pygen")))
    if not found:
        sys.exit("scenario.py: no generated Python messages found; build "
                 "first (cmake --build build) or pass --pygen DIR")
    return found[0]


def human_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else \
                "%.1f %s" % (n, unit)
        n /= 1024.0
    return str(n)


def table(headers, rows, right=None):
    """Plain text columns; numbers right-aligned."""
    right = right or [i > 0 for i in range(len(headers))]
    width = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            width[i] = max(width[i], len(cell))
    lines = []
    for row in [headers] + rows:
        cells = [(c.rjust(width[i]) if right[i] else c.ljust(width[i]))
                 for i, c in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("scenario", help="S1..S5, or S1-8 for 8 pages")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--target", help="HOST:PORT of a running reshardd")
    where.add_argument("--daemon", help="reshardd binary to start for the "
                       "run (memory catalog, 127.0.0.1:0)")
    parser.add_argument("--copies", type=int, default=12,
                        help="how many copies of the first plan to print")
    parser.add_argument("--repeat", type=int, default=50,
                        help="plans of the first participant to time")
    parser.add_argument("--pygen", help="directory of the generated "
                        "*_pb2.py modules")
    args = parser.parse_args(argv)

    os.environ["RESHARD_E2E_PYGEN"] = os.path.abspath(find_pygen(args.pygen))
    if args.daemon:
        os.environ["RESHARD_E2E_DAEMON"] = os.path.abspath(args.daemon)
    sys.path.insert(0, E2E)
    import reshard_e2e as e
    import reshard_scenarios as scenarios

    try:
        name, pages = scenarios.parse_variant(args.scenario)
    except (KeyError, ValueError) as exc:
        parser.error(str(exc))
    spec = scenarios.SCENARIOS[name]
    first = scenarios.build(name, pages)

    daemon = e.Daemon().start() if args.daemon else None
    target = daemon.target if daemon else args.target
    channel = grpc_channel(target)
    planner = e.Planner(channel)
    try:
        pub = planner.PublishManifest(first.publish, timeout=60)
        added = planner.RegisterPages(first.register, timeout=60).added
        print("%s %s — %d layers, %d KV heads, head dims %d/%d, %s, "
              "page %d tokens" % (first.name, spec.model, spec.layers,
                                  spec.heads, spec.key_dim, spec.value_dim,
                                  spec.dtype, spec.page_size))
        print("writer DP%d·PP%d·TP%d stores %s; reader DP%d·PP%d·TP%d loads "
              "%d pages into %d-token blocks (%s)"
              % (spec.writer + (spec.format,) + spec.reader
                 + (first.pages, spec.block, spec.order)))
        print("daemon %s: manifest %s (%s), %d Parts per page, %d of %d "
              "page keys newly registered"
              % (target, "created" if pub.created else "already published",
                 pub.manifest_key, len(first.layout.shards), added,
                 first.pages))
        print("layout_id %s  model_domain %s" % (pub.layout_id,
                                                pub.model_domain))
        print()

        # Request builders number participants in participant-id order;
        # rows go in rank order.
        by_id = sorted(first.reader.parts, key=lambda p: p.participant_id)
        parts = sorted(((i, p) for i, p in enumerate(by_id)
                        if p.rank.dp == 0 and p.layer_ids),
                       key=lambda ip: (ip[1].rank.pp, ip[1].rank.tp))
        rows = []
        total_copies = total_bytes = 0
        first_plan = None
        for index, part in parts:
            req = first if index == 0 else scenarios.build(
                name, pages, participant_index=index)
            start = time.perf_counter()
            resp = planner.PlanLoad(req.plan_load, timeout=120)
            elapsed_ms = (time.perf_counter() - start) * 1000.0
            if first_plan is None:
                first_plan = resp
            st = resp.stats
            total_copies += st.operations
            total_bytes += st.bytes
            rows.append([
                part.participant_id,
                "%d-%d" % (min(part.layer_ids), max(part.layer_ids)),
                "%d+%d%s" % (part.head_start, part.head_count,
                             (" r%d/%d" % (part.replica_ordinal,
                                           part.replica_count))
                             if part.replica_count > 1 else ""),
                str(len(req.binding.message.ranges)),
                str(st.copies_before_coalescing), str(st.operations),
                human_bytes(st.bytes), str(len(resp.batches)),
                "%d/%d" % (resp.hit_pages, req.pages),
                "%.2f" % elapsed_ms])
        print(table(["PARTICIPANT", "LAYERS", "HEADS", "RANGES",
                     "COPIES_BEFORE", "COPIES", "BYTES", "BATCHES",
                     "HIT_PAGES", "RTT_MS"], rows,
                    right=[False, False, False] + [True] * 7))
        print("total: %d participants, %d copies, %s"
              % (len(parts), total_copies, human_bytes(total_bytes)))

        if args.repeat > 0:
            times = []
            for _ in range(args.repeat):
                start = time.perf_counter()
                planner.PlanLoad(first.plan_load, timeout=120)
                times.append((time.perf_counter() - start) * 1000.0)
            times.sort()
            p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
            print("PlanLoad round trip for %s over %d sequential calls: "
                  "median %.2f ms, p99 %.2f ms, min %.2f ms"
                  % (first.participant.participant_id, len(times),
                     statistics.median(times), p99, times[0]))
        print()

        copies = e.plan_copies(first_plan)
        shown = copies[:max(0, args.copies)]
        print("first %d of %d copies of %s's plan (placement %s):"
              % (len(shown), len(copies), first.participant.participant_id,
                 first_plan.placement_id))
        rows = [[str(b), first_plan.pages[pi].page_key, str(part), str(po),
                 first_plan.region_ids[ri], str(ro), str(n)]
                for (b, pi, part, po, ri, ro, n) in shown]
        print(table(["BATCH", "PAGE_KEY", "PART", "PART_OFFSET", "REGION_ID",
                     "REGION_OFFSET", "NBYTES"], rows,
                    right=[True, False, True, True, False, True, True]))
    finally:
        channel.close()
        if daemon is not None:
            code = daemon.stop()
            if code != 0:
                print("reshardd exited with %s:\n%s"
                      % (code, daemon.log_text()), file=sys.stderr)
                return 1
    return 0


def grpc_channel(target):
    import grpc
    return grpc.insecure_channel(target, options=[
        ("grpc.max_receive_message_length", -1),
        ("grpc.max_send_message_length", -1)])


if __name__ == "__main__":
    sys.exit(main())
