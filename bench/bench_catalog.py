#!/usr/bin/env python3
"""Catalog benchmark: publishes and registrations per second, and PlanLoad
latency with a cold and a warm cache, against the real daemon on each
catalog backend (docs/catalog.md).

For each catalog (lmdb on a fresh directory, redis on a redis-server this
script starts on a free loopback port, memory for reference):
* publishes/s — 8 client threads publishing distinct manifests;
* registrations/s — 16 client threads, one page per RegisterPages call;
* pages/s — 8 client threads, 64 pages per RegisterPages call;
* plan latency — SPEC §6 S1 (llama3-8b, TP1 writer, TP2 reader, 8 pages):
  one model domain per sample; the daemon is restarted on the same catalog
  so the first PlanLoad of each domain finds nothing in the cache (cold:
  manifest from the catalog, join computed), then the same request again
  (warm: bindings from the catalog, manifest and join template cached).

The client is Python grpcio on the same machine, so the figures include its
overhead (a few hundred microseconds per call) and the GIL caps client-side
concurrency; they are for comparing backends, not SPEC §7's load targets
(deploy/ has the ghz configuration for that). Nothing here asserts a time.

Usage (scripts/test.sh runs it after the build):
  RESHARD_E2E_DAEMON=build/daemon/reshardd \\
  RESHARD_E2E_PYGEN=build/tests/e2e/pygen \\
      /usr/bin/python3 bench/bench_catalog.py [--catalogs lmdb,redis,memory]
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "e2e"))

import reshard_e2e as e  # noqa: E402
from reshard_e2e import pb  # noqa: E402
from reshard_redis import RedisServer  # noqa: E402

S1 = e.make_descriptor(32, 8, 128, 128, 16)


def run_threads(count, fn):
    """Runs fn(thread_index) on `count` threads; returns seconds taken."""
    errors = []

    def wrap(i):
        try:
            fn(i)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(count)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, catalog, restartable):
        self.catalog = catalog
        self.restartable = restartable
        self.daemon = None

    def start(self):
        self.daemon = e.Daemon(catalog=self.catalog).start()
        self.channel = self.daemon.channel()
        self.planner = e.Planner(self.channel)

    def stop(self):
        self.channel.close()
        self.daemon.stop()

    def base_manifest(self, tag):
        writer = e.make_placement(S1, 1, 1, 1, "bench-w-" + tag)
        up = self.planner.PlanUpload(pb.PlanUploadRequest(
            placement=writer, format=pb.PLHD), timeout=30)
        return e.make_manifest(up.layout, model_id="bench-" + tag)

    def publishes(self, threads=8, per_thread=150):
        base = self.base_manifest("publish")

        def work(i):
            for j in range(per_thread):
                m = pb.StoreManifest()
                m.CopyFrom(base)
                m.model_revision = "p-%d-%d" % (i, j)
                self.planner.PublishManifest(
                    pb.PublishManifestRequest(manifest=m), timeout=30)

        return threads * per_thread / run_threads(threads, work)

    def registrations(self, threads, calls, pages_per_call):
        base = self.base_manifest("register")
        pub = self.planner.PublishManifest(
            pb.PublishManifestRequest(manifest=base), timeout=30)

        def work(i):
            for j in range(calls):
                keys = ["r-%d-%d-%d-%d" % (pages_per_call, i, j, k)
                        for k in range(pages_per_call)]
                self.planner.RegisterPages(pb.RegisterPagesRequest(
                    manifest_key=pub.manifest_key, page_keys=keys),
                    timeout=30)

        return threads * calls * pages_per_call / run_threads(threads, work)

    def plan_latency(self, domains=40, pages=8):
        reader = e.make_placement(S1, 1, 1, 2, "bench-r")
        binding = e.make_binding(S1, reader.parts[0], pages)
        requests = []
        for d in range(domains):
            base = self.base_manifest("plan-%d" % d)
            pub = self.planner.PublishManifest(
                pb.PublishManifestRequest(manifest=base), timeout=30)
            keys = ["plan-%d-%d" % (d, i) for i in range(pages)]
            self.planner.RegisterPages(pb.RegisterPagesRequest(
                manifest_key=pub.manifest_key, page_keys=keys), timeout=30)
            requests.append(pb.PlanLoadRequest(
                model_domain=pub.model_domain, page_keys=keys,
                placement=reader, binding=binding.message))
        if self.restartable:
            self.stop()
            self.start()
        # Requests go out pre-serialized and responses stay bytes, so the
        # client's protobuf work stays out of the figure.
        raw = self.planner.raw("PlanLoad")
        encoded = [r.SerializeToString() for r in requests]
        cold, warm = [], []
        for request in encoded:
            for samples in (cold, warm):
                start = time.perf_counter()
                reply = raw(request, timeout=30)
                samples.append((time.perf_counter() - start) * 1000)
                hits = pb.PlanLoadResponse.FromString(reply).hit_pages
                assert hits == pages, hits
        for _ in range(4):  # more warm samples
            for request in encoded:
                start = time.perf_counter()
                raw(request, timeout=30)
                warm.append((time.perf_counter() - start) * 1000)
        return cold, warm


def measure(name, catalog, restartable):
    bench = Bench(catalog, restartable)
    bench.start()
    try:
        row = {"catalog": name}
        row["publishes"] = bench.publishes()
        row["registrations"] = bench.registrations(16, 200, 1)
        row["pages"] = bench.registrations(8, 40, 64)
        cold, warm = bench.plan_latency()
        row["cold"] = cold if restartable else None
        row["warm"] = warm
    finally:
        bench.stop()
    return row


def fmt_latency(samples):
    if not samples:
        return "-"
    return "%.2f / %.2f" % (statistics.median(samples),
                            percentile(samples, 0.99))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--catalogs", default="lmdb,redis,memory")
    args = parser.parse_args()
    rows = []
    tmp = tempfile.mkdtemp(prefix="reshard-bench-catalog-")
    redis = None
    try:
        for name in args.catalogs.split(","):
            if name == "lmdb":
                rows.append(measure("lmdb", "lmdb:" + os.path.join(tmp, "db"),
                                    True))
            elif name == "redis":
                redis = RedisServer().start()
                rows.append(measure("redis", redis.url, True))
                redis.cleanup()
                redis = None
            elif name == "memory":
                rows.append(measure("memory", "memory", False))
            else:
                parser.error("unknown catalog %r" % name)
    finally:
        if redis is not None:
            redis.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)

    print("catalog benchmark: reshardd with each catalog, Python grpcio "
          "client on this machine")
    print("plan: SPEC §6 S1 (32 layers, 8 heads, TP1 -> TP2), 8 pages; "
          "latency in ms, median / p99, client-side")
    header = ("catalog", "publishes/s", "registrations/s", "pages/s (64/call)",
              "plan cold", "plan warm")
    print("%-8s %12s %16s %18s %14s %14s" % header)
    for row in rows:
        print("%-8s %12.0f %16.0f %18.0f %14s %14s" % (
            row["catalog"], row["publishes"], row["registrations"],
            row["pages"], fmt_latency(row["cold"]), fmt_latency(row["warm"])))
    print("(lmdb commits durably before acknowledging, several requests per "
          "fsync; redis runs without persistence here; memory keeps nothing)")


if __name__ == "__main__":
    main()
