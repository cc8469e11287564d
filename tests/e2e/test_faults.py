"""End-to-end fault tests (SPEC §3.2, §3.4; docs/security.md "Faults"):

* LmdbFaultTests — the LMDB catalog on a small tmpfs that fills up: writes
  fail with a clear status, reads and plans go on, and a restart finds every
  acknowledged record; a read-only data directory refuses the start with a
  clear message; a second daemon on the same directory is refused (exit 1,
  "in use by another reshardd process") until the first one is gone, even
  after kill -9. The tmpfs mounts need root (CI runs as root); without
  mount(2) the test fails, it is not skipped.
* RedisStallTests — redis-server stopped with SIGSTOP: calls that need it
  fail within their deadline with DEADLINE_EXCEEDED or UNAVAILABLE, health
  still answers at once, and everything works again after SIGCONT.

Run through ctest (tests/e2e/CMakeLists.txt sets the environment).
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import grpc

import reshard_e2e as e
from reshard_e2e import pb
from reshard_redis import RedisServer

Code = grpc.StatusCode
DESC = e.make_descriptor(4, 4, 8, 8, 8)


def mount_tmpfs(path, size, options=""):
    os.makedirs(path, exist_ok=True)
    opts = "size=%s,mode=0700" % size + ("," + options if options else "")
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", path],
                          capture_output=True)
    if proc.returncode != 0:
        raise AssertionError(
            "mount -t tmpfs failed (%s): the fault tests need root or "
            "CAP_SYS_ADMIN" % proc.stderr.decode().strip())


def umount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


class FaultCase(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="reshard-faults-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.daemons = []
        self.addCleanup(self.kill_all)

    def kill_all(self):
        for daemon in self.daemons:
            daemon.kill()

    def start(self, catalog, *flags):
        daemon = e.Daemon(*flags, catalog=catalog).start()
        self.daemons.append(daemon)
        channel = daemon.channel()
        self.addCleanup(channel.close)
        daemon.test_channel = channel
        return daemon, e.Planner(channel)

    def stop(self, daemon):
        daemon.test_channel.close()
        code = daemon.stop()
        self.assertEqual(code, 0, daemon.log_text())

    def writer(self, planner, name):
        writer = e.make_placement(DESC, 1, 1, 2, name)
        fleet = e.Fleet(planner)
        pub, _ = fleet.publish_writer(writer, pb.LPHD, model_id=name)
        return fleet, pub

    def plan_hits(self, planner, pub, keys):
        reader = e.make_placement(DESC, 1, 1, 1, "reader")
        binding = e.make_binding(DESC, reader.parts[0], len(keys), block=4)
        return planner.PlanLoad(pb.PlanLoadRequest(
            model_domain=pub.model_domain, page_keys=keys, placement=reader,
            binding=binding.message), timeout=30).hit_pages


class LmdbFaultTests(FaultCase):

    def test_full_filesystem(self):
        mnt = os.path.join(self.tmp, "small")
        mount_tmpfs(mnt, "512k")
        self.addCleanup(umount, mnt)
        catalog = "lmdb:" + os.path.join(mnt, "data")
        daemon, planner = self.start(catalog)
        fleet, pub = self.writer(planner, "full")
        acknowledged = []
        failure = None
        for batch in range(400):
            keys = ["full-%04d-%03d-%s" % (batch, i, "x" * 150)
                    for i in range(64)]
            try:
                added = planner.RegisterPages(pb.RegisterPagesRequest(
                    manifest_key=pub.manifest_key, page_keys=keys),
                    timeout=30).added
            except grpc.RpcError as err:
                failure = err
                break
            self.assertEqual(added, len(keys))
            acknowledged += keys
        self.assertIsNotNone(failure, "512 KiB never filled up")
        self.assertGreater(len(acknowledged), 0)
        # A clear status: the catalog's filesystem is full.
        self.assertEqual(failure.code(), Code.RESOURCE_EXHAUSTED,
                         failure.details())
        self.assertIn("the disk is full", failure.details())
        # Still full: a second write fails the same way, nothing crashes.
        err = e.rpc_error(planner.RegisterPages, pb.RegisterPagesRequest(
            manifest_key=pub.manifest_key,
            page_keys=["more-%d-%s" % (i, "y" * 150) for i in range(64)]),
            timeout=30)
        self.assertIsNotNone(err)
        # Reads and plans go on.
        self.assertEqual(planner.health(), e.SERVING)
        got = planner.GetManifest(pb.GetManifestRequest(
            manifest_key=pub.manifest_key), timeout=10)
        self.assertEqual(got.layout_id, pub.layout_id)
        sample = acknowledged[:8] + acknowledged[-8:]
        self.assertEqual(self.plan_hits(planner, pub, sample), len(sample))
        self.stop(daemon)

        # A restart finds every acknowledged binding.
        daemon, planner = self.start(catalog)
        for i in range(0, len(acknowledged), 256):
            chunk = acknowledged[i:i + 256]
            self.assertEqual(self.plan_hits(planner, pub, chunk), len(chunk),
                             "acknowledged bindings lost at %d" % i)
        self.stop(daemon)

    def test_read_only_directory_is_refused(self):
        mnt = os.path.join(self.tmp, "ro")
        mount_tmpfs(mnt, "4m")
        self.addCleanup(umount, mnt)
        catalog = "lmdb:" + os.path.join(mnt, "data")
        daemon, planner = self.start(catalog)
        self.writer(planner, "ro")
        self.stop(daemon)
        subprocess.run(["mount", "-o", "remount,ro", mnt], check=True)
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("RESHARDD_")}
        proc = subprocess.run([e.DAEMON, "--listen", "127.0.0.1:0",
                               "--catalog", catalog], env=env,
                              capture_output=True, timeout=30)
        err = proc.stderr.decode()
        self.assertEqual(proc.returncode, 2, err)
        self.assertIn(catalog, err)
        self.assertIn("not writable", err)

    def test_second_daemon_on_the_same_directory_is_refused(self):
        catalog = "lmdb:" + os.path.join(self.tmp, "shared")
        first, planner = self.start(catalog)
        _, pub = self.writer(planner, "second")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("RESHARDD_")}
        argv = [e.DAEMON, "--listen", "127.0.0.1:0", "--catalog", catalog]
        proc = subprocess.run(argv, env=env, capture_output=True, timeout=30)
        err = proc.stderr.decode()
        self.assertEqual(proc.returncode, 1, err)
        self.assertIn("in use by another reshardd process", err)
        # The first one is untouched.
        self.assertEqual(planner.GetManifest(pb.GetManifestRequest(
            manifest_key=pub.manifest_key), timeout=10).layout_id,
            pub.layout_id)
        # kill -9 releases the directory: the next daemon takes over.
        first.proc.kill()
        first.proc.wait()
        second, planner = self.start(catalog)
        self.assertEqual(planner.GetManifest(pb.GetManifestRequest(
            manifest_key=pub.manifest_key), timeout=10).layout_id,
            pub.layout_id)
        self.stop(second)


class RedisStallTests(FaultCase):

    def test_sigstop_then_sigcont(self):
        redis = RedisServer().start()
        self.addCleanup(redis.cleanup)
        daemon, planner = self.start(redis.url)
        _, pub = self.writer(planner, "stall")
        self.assertEqual(e.Fleet(planner).register(pub.manifest_key,
                                                   ["a", "b"]), 2)
        redis.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: redis.proc and
                        redis.proc.send_signal(signal.SIGCONT))
        deadline_s = 2.0
        for attempt in range(3):
            began = time.monotonic()
            err = e.rpc_error(planner.RegisterPages, pb.RegisterPagesRequest(
                manifest_key=pub.manifest_key,
                page_keys=["stalled-%d" % attempt]), timeout=deadline_s)
            elapsed = time.monotonic() - began
            self.assertIsNotNone(err, "a write succeeded with Redis stopped")
            self.assertIn(err.code(), (Code.DEADLINE_EXCEEDED,
                                       Code.UNAVAILABLE), err.details())
            self.assertLess(elapsed, deadline_s + 1.0)
            # The loop is not blocked: health answers at once.
            began = time.monotonic()
            self.assertEqual(planner.health(timeout=1.0), e.SERVING)
            self.assertLess(time.monotonic() - began, 1.0)
        redis.proc.send_signal(signal.SIGCONT)
        recover_by = time.monotonic() + 20
        while True:
            try:
                added = planner.RegisterPages(pb.RegisterPagesRequest(
                    manifest_key=pub.manifest_key, page_keys=["after"]),
                    timeout=5).added
                break
            except grpc.RpcError as err:
                self.assertIn(err.code(), (Code.DEADLINE_EXCEEDED,
                                           Code.UNAVAILABLE), err.details())
                self.assertLess(time.monotonic(), recover_by,
                                "no recovery after SIGCONT: %s"
                                % err.details())
                time.sleep(0.2)
        self.assertEqual(added, 1)
        self.assertEqual(self.plan_hits(planner, pub, ["a", "b", "after"]),
                         3)
        self.stop(daemon)


if __name__ == "__main__":
    unittest.main()
