"""End-to-end lifecycle of reshardd with stock Python grpcio:
configuration errors, the SIGTERM/SIGINT drain under load and the exit
status, health watched through the drain.

Run through ctest (tests/e2e/CMakeLists.txt sets the environment), or by
hand from this directory:
  RESHARD_E2E_DAEMON=.../reshardd RESHARD_E2E_PYGEN=.../pygen \
      /usr/bin/python3 -m unittest -v test_grpcio_lifecycle
"""

import re
import signal
import subprocess
import threading
import time
import unittest
import urllib.request

import grpc

import reshard_e2e as e
from reshard_e2e import pb
from reshard_testcase import Code, big_plan_request


class BackgroundLoad:
    """Clients looping on one PlanLoad until a call fails or finish()."""

    def __init__(self, daemon, request, clients=4):
        self.daemon = daemon
        self.request = request
        self.codes = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run)
                         for _ in range(clients)]

    def _run(self):
        channel = self.daemon.channel()
        stub = e.Planner(channel)
        try:
            while not self._stop.is_set():
                err = e.rpc_error(stub.PlanLoad, self.request, timeout=30)
                with self._lock:
                    self.codes.append(err.code() if err else Code.OK)
                if err is not None:
                    break
        finally:
            channel.close()

    def start(self):
        for t in self._threads:
            t.start()

    def finish(self):
        self._stop.set()
        for t in self._threads:
            t.join(60)
        return list(self.codes)


class LifecycleTests(unittest.TestCase):
    """Configuration errors, SIGTERM/SIGINT drain and exit status."""

    def test_bad_configuration_exits_2(self):
        base = [e.DAEMON, "--listen", "127.0.0.1:0", "--catalog", "memory"]
        for flags in (["--max-page-keys", "lots"], ["--no-such-flag"],
                      ["--catalog", "floppy:/dev/fd0"],
                      ["--listen", "not-an-address"],
                      ["--drain-timeout", "soon"]):
            with self.subTest(flags=flags):
                # Later flags win, so the bad value replaces the good one.
                proc = subprocess.run(base + flags,
                                      stdin=subprocess.DEVNULL,
                                      stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, timeout=20)
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertIn(flags[0].lstrip("-"), proc.stderr.decode())

    def drain(self, signum):
        """Four clients loop on a large PlanLoad while the daemon gets
        ``signum``: calls in flight finish with OK, later ones get
        UNAVAILABLE, health turns NOT_SERVING, and the exit status is 0."""
        daemon = e.Daemon("--drain-timeout", "20s").start()
        channel = daemon.channel()
        planner = e.Planner(channel)
        try:
            self.assertEqual(planner.health(), e.SERVING)
            self.assertEqual(planner.health(e.PLANNER_SERVICE), e.SERVING)
            load = BackgroundLoad(daemon, big_plan_request(e.Fleet(planner),
                                                           "drain"))
            load.start()
            time.sleep(0.3)
            daemon.signal(signum)
            health, calls = [], []
            missing = pb.GetManifestRequest(
                manifest_key="kv/%s/manifests/%s" % ("0" * 64, "1" * 64))
            deadline = time.monotonic() + 30
            while daemon.alive() and time.monotonic() < deadline:
                err = e.rpc_error(lambda: health.append(
                    planner.health(timeout=2)))
                if err is not None:
                    health.append(err.code())
                err = e.rpc_error(planner.GetManifest, missing, timeout=2)
                calls.append((len(health), err.code() if err else Code.OK))
                time.sleep(0.002)
            codes = load.finish()
            code = daemon.wait(30)
            e.log("in-flight codes:", codes, "health:", health, "calls:",
                  calls)
            self.assertEqual(code, 0, daemon.log_text())
            self.assertGreater(codes.count(Code.OK), 0)
            # A call racing with the final server shutdown may be cancelled
            # by gRPC core itself (see docs/clients.md, end-to-end tests);
            # nothing else may fail.
            allowed = (Code.OK, Code.UNAVAILABLE, Code.CANCELLED)
            self.assertTrue(all(c in allowed for c in codes), codes)
            allowed = (e.SERVING, e.NOT_SERVING, Code.UNAVAILABLE,
                       Code.CANCELLED)
            self.assertTrue(all(h in allowed for h in health), health)
            # Once health left SERVING, no new call is served any more.
            for seen, call in calls:
                if health[seen - 1] != e.SERVING:
                    self.assertIn(call, (Code.UNAVAILABLE, Code.CANCELLED),
                                  calls)
                else:
                    self.assertIn(call, (Code.NOT_FOUND, Code.UNAVAILABLE,
                                         Code.CANCELLED), calls)
            drained = [line for line in daemon.log_lines()
                       if "msg=draining" in line]
            self.assertEqual(len(drained), 1, daemon.log_text())
            # After exit nothing answers.
            err = e.rpc_error(planner.health, timeout=2)
            self.assertIsNotNone(err)
            self.assertIn(err.code(), (Code.UNAVAILABLE,
                                       Code.DEADLINE_EXCEEDED))
        finally:
            channel.close()
            daemon.kill()

    def test_sigterm_drains_and_exits_0(self):
        self.drain(signal.SIGTERM)

    def test_sigint_drains_and_exits_0(self):
        self.drain(signal.SIGINT)

    def test_health_watch_reports_not_serving(self):
        daemon = e.Daemon("--drain-timeout", "5s").start()
        channel = daemon.channel()
        try:
            watch = channel.unary_stream(
                "/grpc.health.v1.Health/Watch",
                request_serializer=e.health_pb2.HealthCheckRequest
                .SerializeToString,
                response_deserializer=e.health_pb2.HealthCheckResponse
                .FromString)
            stream = watch(e.health_pb2.HealthCheckRequest(service=""),
                           timeout=30)
            self.assertEqual(next(stream).status, e.SERVING)
            # Calls in flight keep the drain open long enough for the
            # NOT_SERVING update to be written (see the report in
            # docs/clients.md about a drain without calls in flight).
            load = BackgroundLoad(daemon, big_plan_request(
                e.Fleet(e.Planner(channel)), "watch"))
            load.start()
            time.sleep(0.3)
            daemon.signal(signal.SIGTERM)
            statuses, end = [], None
            try:
                for msg in stream:
                    statuses.append(msg.status)
            except grpc.RpcError as err:
                end = err.code()
            load.finish()
            self.assertEqual(daemon.wait(20), 0, daemon.log_text())
            self.assertIn(e.NOT_SERVING, statuses,
                          "Watch ended with %s after %r" % (end, statuses))
            self.assertIn(end, (None, Code.UNAVAILABLE, Code.CANCELLED))
        finally:
            channel.close()
            daemon.kill()

    def test_call_completions_taken_by_the_loop(self):
        """Every completion of a call's batches reaches the loop once, and
        those that complete as the loop starts them (a request that came
        with its headers, the final batch with the close of a call that
        never waited) are taken by the loop itself, without the
        completion thread (daemon/server/queue.c, call.c's watch_close)."""
        daemon = e.Daemon("--metrics-listen", "127.0.0.1:0").start()
        channel = daemon.channel()
        try:
            # Logged after the listening line the start waited for.
            address = re.compile(r"metrics_address=\"?(127\.0\.0\.1:\d+)")
            lines = daemon.wait_log_lines(address.search, 1)
            self.assertTrue(lines, daemon.log_text(200))
            m = address.search(lines[0])

            def events():
                with urllib.request.urlopen("http://%s/metrics" % m.group(1),
                                            timeout=10) as resp:
                    text = resp.read().decode()
                found = re.findall(r'^reshard_call_events_total\{taken_by='
                                   r'"(loop|thread)"\} (\d+)$', text, re.M)
                return {by: int(n) for by, n in found}

            def settled(want):
                # The sweep publishes the counts every 100 ms.
                deadline = time.monotonic() + 10
                while True:
                    now = events()
                    if sum(now.values()) >= want or \
                            time.monotonic() > deadline:
                        return now
                    time.sleep(0.05)

            before = settled(0)
            self.assertEqual(set(before), {"loop", "thread"})
            calls = 50
            planner = e.Planner(channel)
            for _ in range(calls):
                self.assertEqual(planner.health(), e.SERVING)
            # A unary call that never waits has two batches: the request,
            # and the reply with the close.
            after = settled(sum(before.values()) + 2 * calls)
            self.assertEqual(sum(after.values()) - sum(before.values()),
                             2 * calls, (before, after))
            self.assertGreaterEqual(after["loop"] - before["loop"], calls,
                                    (before, after))
        finally:
            channel.close()
            daemon.kill()


if __name__ == "__main__":
    unittest.main()
