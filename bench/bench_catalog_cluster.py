#!/usr/bin/env python3
"""Redis catalog benchmark: one redis-server against a Redis Cluster of
three primaries (each with a replica), through the real daemon
(docs/catalog.md, "Redis Cluster").

For each catalog it measures what bench/bench_catalog.py does (publishes/s;
registrations/s, one page per call from 16 client threads; pages/s, 64 per
call from 8 threads; PlanLoad latency of SPEC §6 S1 with 8 pages, cold after
a daemon restart and warm) and then the memory one binding costs Redis:
BINDINGS page keys bound over 64 model domains, `used_memory` of INFO memory
summed over the primaries before and after, divided by the count. Rows:

* redis    — one redis-server, `--catalog redis://…`;
* cluster  — `--catalog redis-cluster://…` (six seeds);
* cluster+wait — the same with `--redis-wait-replicas 1`.

The cluster and the server run on the same 2 cores as the daemon and the
Python client, so the figures compare the layouts and the client's work,
not what three machines would do. Nothing here asserts a time.

Usage:
  RESHARD_E2E_DAEMON=build/daemon/reshardd \\
  RESHARD_E2E_PYGEN=build/tests/e2e/pygen \\
      /usr/bin/python3 bench/bench_catalog_cluster.py [--bindings 102400]
"""

import argparse
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))

import bench_catalog as bc  # noqa: E402
import reshard_e2e as e  # noqa: E402
from reshard_e2e import pb  # noqa: E402
from reshard_redis import RedisServer  # noqa: E402
from reshard_redis_cluster import RedisCluster  # noqa: E402


class FlagBench(bc.Bench):
    def __init__(self, catalog, flags):
        super().__init__(catalog, True)
        self.flags = flags

    def start(self):
        self.daemon = e.Daemon(*self.flags, catalog=self.catalog).start()
        self.channel = self.daemon.channel()
        self.planner = e.Planner(self.channel)

    def bind_many(self, count, domains=64, per_call=64):
        """Binds `count` page keys spread over `domains` model domains."""
        pubs = []
        for d in range(domains):
            base = self.base_manifest("mem-%d" % d)
            pubs.append(self.planner.PublishManifest(
                pb.PublishManifestRequest(manifest=base), timeout=30))
        calls = count // per_call

        def work(i):
            for c in range(i, calls, 8):
                pub = pubs[c % domains]
                keys = ["mem-%d-%d" % (c, k) for k in range(per_call)]
                self.planner.RegisterPages(pb.RegisterPagesRequest(
                    manifest_key=pub.manifest_key, page_keys=keys),
                    timeout=60)

        bc.run_threads(8, work)
        return calls * per_call


def used_memory(nodes):
    return sum(int(n.info("memory")["used_memory"]) for n in nodes)


class ServerNode:
    """INFO through redis-cli for the single server."""

    def __init__(self, server):
        self.server = server

    def info(self, section):
        import subprocess
        out = subprocess.run(["redis-cli", "-p", str(self.server.port),
                              "INFO", section], capture_output=True,
                             text=True, check=True).stdout
        return dict(line.strip().split(":", 1) for line in out.splitlines()
                    if ":" in line)


def measure(name, catalog, flags, nodes, bindings):
    bench = FlagBench(catalog, flags)
    bench.start()
    try:
        row = {"catalog": name}
        row["publishes"] = bench.publishes()
        row["registrations"] = bench.registrations(16, 200, 1)
        row["pages"] = bench.registrations(8, 40, 64)
        cold, warm = bench.plan_latency()
        row["cold"], row["warm"] = cold, warm
        before = used_memory(nodes())
        bound = bench.bind_many(bindings)
        row["bytes"] = (used_memory(nodes()) - before) / bound
    finally:
        bench.stop()
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindings", type=int, default=102400)
    parser.add_argument("--rows", default="redis,cluster,cluster+wait")
    args = parser.parse_args()
    rows = []
    for name in args.rows.split(","):
        if name == "redis":
            server = RedisServer().start()
            try:
                node = ServerNode(server)
                rows.append(measure(name, server.url, (), lambda: [node],
                                    args.bindings))
            finally:
                server.cleanup()
        elif name in ("cluster", "cluster+wait"):
            cluster = RedisCluster().start()
            try:
                flags = (("--redis-wait-replicas", "1")
                         if name == "cluster+wait" else ())
                rows.append(measure(name, cluster.url, flags,
                                    cluster.primaries, args.bindings))
            finally:
                cluster.cleanup()
        else:
            parser.error("unknown row %r" % name)

    print("redis catalog benchmark: one server against three primaries "
          "(+3 replicas), Python grpcio client, all on this machine")
    print("plan: SPEC §6 S1, 8 pages; latency in ms, median / p99; memory: "
          "%d bindings over 64 domains, INFO used_memory of the primaries"
          % args.bindings)
    header = ("catalog", "publishes/s", "registrations/s", "pages/s (64)",
              "plan cold", "plan warm", "bytes/binding")
    print("%-13s %11s %15s %13s %14s %14s %13s" % header)
    for row in rows:
        print("%-13s %11.0f %15.0f %13.0f %14s %14s %13.0f" % (
            row["catalog"], row["publishes"], row["registrations"],
            row["pages"], bc.fmt_latency(row["cold"]),
            bc.fmt_latency(row["warm"]), row["bytes"]))


if __name__ == "__main__":
    main()
