#!/usr/bin/python3
"""Soak test: a bounded mixed workload against a live reshardd for a given
duration, with the daemon's resident memory, open descriptors and threads
read from /proc at the start and the end (docs/security.md "Soak").

    scripts/soak.py --daemon build/daemon/reshardd --duration 60
    scripts/soak.py --target 127.0.0.1:50051 --pid 1234 --duration 3600

Each worker loops until the time is up, choosing at random: PublishManifest
(the SPEC §6 scenarios S1-S5, republished: created=false), RegisterPages and
ForgetPages over a bounded pool of page keys (the catalog stays the same
size on average), PlanLoad of a scenario (checked: every page hits), a
PlanLoad cancelled while in flight, one with a deadline too short to meet,
and closing its channel to reconnect. Any status other than OK, CANCELLED
or DEADLINE_EXCEEDED (on the calls meant for them) fails the run.

The figures are taken after a warm-up (a tenth of the duration, at least
2 s: caches fill, thread pools start) and at the end; the run fails when
resident memory grows by more than --rss-growth-mib, descriptors by more
than --fd-growth or threads by more than --thread-growth. The start-up
figures (before any load) are printed too. Exit status 0 when the run
passed, 1 otherwise.
"""

import argparse
import os
import random
import shutil
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.join(HERE, "..", "tests", "e2e")


def proc_figures(pid):
    """(resident bytes, open descriptors, threads) of process ``pid``."""
    rss = threads = 0
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    fds = len(os.listdir("/proc/%d/fd" % pid))
    return rss, fds, threads


class Soak:
    def __init__(self, args, e, scenarios, grpc):
        self.args = args
        self.e = e
        self.grpc = grpc
        self.requests = [scenarios.build(name, pages=args.pages)
                         for name in ("S1", "S2", "S3", "S4", "S5")]
        self.counts = {}
        self.errors = []
        self.lock = threading.Lock()

    def channel(self):
        return self.grpc.insecure_channel(self.args.target, options=[
            ("grpc.max_receive_message_length", -1),
            ("grpc.enable_retries", 0)])

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def fail(self, what, err):
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append("%s: %s %s" % (what, err.code(),
                                                  err.details()))

    def set_up(self):
        channel = self.channel()
        planner = self.e.Planner(channel)
        for r in self.requests:
            planner.PublishManifest(r.publish, timeout=60)
            planner.RegisterPages(r.register, timeout=60)
        channel.close()

    def one(self, planner, rng, worker):
        g = self.grpc
        r = rng.choice(self.requests)
        choice = rng.random()
        pool = ["soak-%d-%d" % (worker, i) for i in rng.sample(range(512), 16)]
        if choice < 0.10:
            planner.PublishManifest(r.publish, timeout=30)
            return "publish"
        if choice < 0.30:
            planner.RegisterPages(self.e.pb.RegisterPagesRequest(
                manifest_key=r.manifest_key, page_keys=pool), timeout=30)
            return "register"
        if choice < 0.45:
            planner.ForgetPages(self.e.pb.ForgetPagesRequest(
                model_domain=r.model_domain, page_keys=pool), timeout=30)
            return "forget"
        if choice < 0.85:
            resp = planner.PlanLoad(r.plan_load, timeout=60)
            if resp.hit_pages != r.pages:
                raise AssertionError("%s: %d of %d pages hit"
                                     % (r.name, resp.hit_pages, r.pages))
            return "plan " + r.spec.name
        if choice < 0.92:
            future = planner.PlanLoad.future(r.plan_load, timeout=60)
            future.cancel()
            try:
                future.result()
            except g.FutureCancelledError:
                pass
            except g.RpcError as err:
                if err.code() != g.StatusCode.CANCELLED:
                    raise
            return "cancelled"
        try:
            planner.PlanLoad(r.plan_load, timeout=0.0005)
        except g.RpcError as err:
            if err.code() != g.StatusCode.DEADLINE_EXCEEDED:
                raise
        return "deadline"

    def worker(self, index, until):
        rng = random.Random(index)
        channel = self.channel()
        planner = self.e.Planner(channel)
        while time.monotonic() < until:
            if rng.random() < 0.03:
                channel.close()
                channel = self.channel()
                planner = self.e.Planner(channel)
                self.count("reconnect")
                continue
            try:
                self.count(self.one(planner, rng, index))
            except self.grpc.RpcError as err:
                self.fail("worker %d" % index, err)
            except AssertionError as err:
                with self.lock:
                    self.errors.append(str(err))
        channel.close()

    def run(self, seconds):
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=self.worker, args=(i, until))
                   for i in range(self.args.workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--daemon", help="reshardd binary to start on "
                       "127.0.0.1:0 with an LMDB catalog in a temporary "
                       "directory")
    where.add_argument("--target", help="address of a running daemon "
                       "(with --pid)")
    parser.add_argument("--pid", type=int, help="its process id")
    parser.add_argument("--duration", type=float, default=60.0,
                        help="seconds of load (default 60)")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pages", type=int, default=4,
                        help="pages per scenario request")
    parser.add_argument("--rss-growth-mib", type=float, default=32.0,
                        help="bound on resident memory growth (0: report "
                             "only, e.g. under sanitizers)")
    parser.add_argument("--fd-growth", type=int, default=8)
    parser.add_argument("--thread-growth", type=int, default=2)
    parser.add_argument("--pygen", default=os.environ.get(
        "RESHARD_E2E_PYGEN", os.path.join(HERE, "..", "build", "tests", "e2e",
                                          "pygen")))
    args = parser.parse_args(argv)
    if args.target and not args.pid:
        parser.error("--target needs --pid (the figures come from /proc)")

    os.environ["RESHARD_E2E_PYGEN"] = os.path.abspath(args.pygen)
    if args.daemon:
        os.environ["RESHARD_E2E_DAEMON"] = os.path.abspath(args.daemon)
    sys.path.insert(0, E2E)
    import grpc
    import reshard_e2e as e
    import reshard_scenarios as scenarios

    tmp = daemon = None
    if args.daemon:
        tmp = tempfile.mkdtemp(prefix="reshard-soak-")
        daemon = e.Daemon(catalog="lmdb:" + os.path.join(tmp, "data"))
        daemon.start()
        args.target, args.pid = daemon.target, daemon.proc.pid
    problems = []
    try:
        soak = Soak(args, e, scenarios, grpc)
        started = proc_figures(args.pid)
        soak.set_up()
        warmup = max(2.0, args.duration / 10)
        soak.run(warmup)
        before = proc_figures(args.pid)
        soak.run(args.duration)
        after = proc_figures(args.pid)
        problems += soak.errors
        if daemon is not None and not daemon.alive():
            problems.append("reshardd exited during the run:\n"
                            + daemon.log_text())
    finally:
        if daemon is not None:
            code = daemon.stop()
            if code != 0:
                problems.append("reshardd exited with %s after SIGTERM"
                                % code)
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)

    mib = 1 << 20
    print("reshardd soak: %.0f s after a %.0f s warm-up, %d workers, %d calls "
          "in all (%s)"
          % (args.duration, warmup, args.workers, sum(soak.counts.values()),
             ", ".join("%s %d" % kv for kv in sorted(soak.counts.items()))))
    print("  %-10s %12s %12s %12s" % ("", "at start", "after warm-up",
                                       "at the end"))
    print("  %-10s %10.1f M %10.1f M %10.1f M" % (
        "RSS", started[0] / mib, before[0] / mib, after[0] / mib))
    print("  %-10s %12d %12d %12d" % ("fds", started[1], before[1],
                                       after[1]))
    print("  %-10s %12d %12d %12d" % ("threads", started[2], before[2],
                                       after[2]))
    growth = (after[0] - before[0]) / mib
    if args.rss_growth_mib > 0 and growth > args.rss_growth_mib:
        problems.append("RSS grew %.1f MiB (bound %.1f)"
                        % (growth, args.rss_growth_mib))
    if after[1] - before[1] > args.fd_growth:
        problems.append("descriptors grew by %d (bound %d)"
                        % (after[1] - before[1], args.fd_growth))
    if after[2] - before[2] > args.thread_growth:
        problems.append("threads grew by %d (bound %d)"
                        % (after[2] - before[2], args.thread_growth))
    for p in problems:
        print("  PROBLEM: %s" % p)
    print("PASS" if not problems else "FAIL")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
