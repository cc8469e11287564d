"""End-to-end tests of the durable and shared catalogs (SPEC §3.2,
docs/catalog.md) with the real daemon and stock grpcio.

LMDB (``--catalog lmdb:PATH``, the default):
* a restart keeps every manifest and binding, and plans come out identical;
* ``kill -9`` during a stream of publishes and registrations loses nothing
  that was acknowledged;
* a corrupted or foreign catalog directory is refused at start (exit 2, a
  message naming the path) and not a byte of it changes;
* without ``--catalog`` the daemon uses ``./reshardd-data``.

Redis (``--catalog redis://HOST:PORT``, a redis-server started per test on a
free loopback port):
* two daemons registering and forgetting concurrently end with identical
  bindings and give identical plans;
* Redis stopped and restarted mid-test: calls that need it get UNAVAILABLE
  with a clear message, cached manifests still serve, PlanLoad of pages whose
  bindings the daemon has seen still plans identically from its cache, and
  the daemon recovers without a restart.

Run through ctest (tests/e2e/CMakeLists.txt sets the environment).
"""

import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import unittest

import grpc

import reshard_e2e as e
from reshard_e2e import pb
from reshard_redis import RedisServer

Code = grpc.StatusCode

DESC = e.make_descriptor(4, 4, 8, 8, 8)


def daemon_env():
    return {k: v for k, v in os.environ.items()
            if not k.startswith("RESHARDD_")}


class CatalogCase(unittest.TestCase):
    """Helpers shared by the LMDB and Redis tests."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="reshard-catalog-e2e-")
        self.daemons = []

    def tearDown(self):
        for daemon in self.daemons:
            daemon.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, catalog, *flags):
        daemon = e.Daemon(*flags, catalog=catalog).start()
        self.daemons.append(daemon)
        daemon.test_channel = daemon.channel()
        self.addCleanup(daemon.test_channel.close)
        return daemon, e.Planner(daemon.test_channel)

    def stop(self, daemon):
        # An open client connection holds the drain up; close ours first.
        channel = getattr(daemon, "test_channel", None)
        if channel is not None:
            channel.close()
        code = daemon.stop()
        self.assertEqual(code, 0, "reshardd exited with %s after SIGTERM:\n%s"
                         % (code, daemon.log_text()))

    def rpc_error(self, code, fn, *args, **kwargs):
        err = e.rpc_error(fn, *args, **kwargs)
        self.assertIsNotNone(err, "expected %s, the call succeeded" % code)
        self.assertEqual(err.code(), code, "expected %s, got %s: %s"
                         % (code, err.code(), err.details()))
        return err.details() or ""

    @staticmethod
    def writers(planner, name, topologies=((1, 1, 2, pb.LPHD),
                                           (1, 1, 1, pb.HPLD))):
        """Publishes one writer layout per topology in one model domain;
        returns [PublishManifestResponse] and the manifests."""
        fleet = e.Fleet(planner)
        pubs, manifests = [], []
        for i, (dp, pp, tp, fmt) in enumerate(topologies):
            writer = e.make_placement(DESC, dp, pp, tp, "%s-w%d" % (name, i))
            pub, up = fleet.publish_writer(writer, fmt, model_id=name)
            pubs.append(pub)
            manifests.append(e.make_manifest(up.layout, model_id=name))
        return pubs, manifests, fleet

    @staticmethod
    def plan(planner, model_domain, keys, reader, part_index=0):
        binding = e.make_binding(DESC, reader.parts[part_index], len(keys),
                                 block=4)
        return planner.PlanLoad(pb.PlanLoadRequest(
            model_domain=model_domain, page_keys=keys, placement=reader,
            binding=binding.message, operation_id="catalog"), timeout=30), \
            binding


class LmdbDurabilityTests(CatalogCase):

    def catalog(self, name="data"):
        return "lmdb:" + os.path.join(self.tmp, name)

    def test_restart_keeps_everything(self):
        daemon, planner = self.start(self.catalog())
        pubs, _, fleet = self.writers(planner, "restart")
        keys = ["restart-%d" % i for i in range(12)]
        self.assertEqual(fleet.register(pubs[0].manifest_key, keys), 12)
        self.assertEqual(fleet.register(pubs[1].manifest_key, keys[:6]), 6)
        # Forget one binding, so forgetting is shown durable too.
        removed = planner.ForgetPages(pb.ForgetPagesRequest(
            model_domain=pubs[0].model_domain, page_keys=keys[11:],
            manifest_key=pubs[0].manifest_key), timeout=10).removed
        self.assertEqual(removed, 1)
        reader = e.make_placement(DESC, 1, 2, 2, "restart-r")
        before_plans = [self.plan(planner, pubs[0].model_domain, keys,
                                  reader, i)[0] for i in range(4)]
        self.assertEqual(before_plans[0].hit_pages, 11)
        before_manifests = [planner.GetManifest(pb.GetManifestRequest(
            manifest_key=p.manifest_key), timeout=10) for p in pubs]
        self.stop(daemon)

        daemon, planner = self.start(self.catalog())
        fleet.planner = planner
        opened = [line for line in daemon.log_lines()
                  if "catalog opened" in line]
        self.assertTrue(opened and "manifests=2" in opened[0]
                        and "bindings=17" in opened[0], opened)
        for pub, before in zip(pubs, before_manifests):
            after = planner.GetManifest(pb.GetManifestRequest(
                manifest_key=pub.manifest_key), timeout=10)
            self.assertEqual(after.SerializeToString(),
                             before.SerializeToString())
        for i, before in enumerate(before_plans):
            after, binding = self.plan(planner, pubs[0].model_domain, keys,
                                       reader, i)
            self.assertEqual(after.SerializeToString(),
                             before.SerializeToString())
            e.verify_plan(after, fleet.store, DESC, binding, keys)
        # Everything is still there: repeating it changes nothing.
        self.assertEqual(fleet.register(pubs[0].manifest_key, keys[:11]), 0)
        self.assertEqual(fleet.register(pubs[1].manifest_key, keys[:6]), 0)
        self.stop(daemon)

    def test_kill_9_loses_nothing_acknowledged(self):
        daemon, planner = self.start(self.catalog())
        pubs, manifests, _ = self.writers(planner, "crash",
                                          topologies=((1, 1, 2, pb.PLHD),))
        base = manifests[0]
        acked_manifests, acked_pages = [], []
        lock = threading.Lock()
        stop = threading.Event()
        failures = []

        def publisher():
            i = 0
            while not stop.is_set():
                m = pb.StoreManifest()
                m.CopyFrom(base)
                m.model_revision = "crash-%d" % i
                i += 1
                try:
                    resp = planner.PublishManifest(
                        pb.PublishManifestRequest(manifest=m), timeout=10)
                except grpc.RpcError as err:
                    failures.append(err.code())
                    return
                with lock:
                    acked_manifests.append((m, resp.manifest_key))

        def registrar(tag):
            i = 0
            while not stop.is_set():
                batch = ["crash-%s-%d-%d" % (tag, i, j) for j in range(8)]
                i += 1
                try:
                    added = planner.RegisterPages(pb.RegisterPagesRequest(
                        manifest_key=pubs[0].manifest_key, page_keys=batch),
                        timeout=10).added
                except grpc.RpcError as err:
                    failures.append(err.code())
                    return
                if added != len(batch):
                    failures.append("added %d of %d" % (added, len(batch)))
                with lock:
                    acked_pages.extend(batch)

        threads = [threading.Thread(target=publisher)] + [
            threading.Thread(target=registrar, args=(t,)) for t in "abc"]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if len(acked_manifests) >= 200 and len(acked_pages) >= 2400:
                    break
            time.sleep(0.01)
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.wait(10)
        stop.set()
        for t in threads:
            t.join(30)
        with lock:
            manifests_seen, pages_seen = list(acked_manifests), list(
                acked_pages)
        self.assertEqual([f for f in failures if isinstance(f, str)], [])
        self.assertGreater(len(manifests_seen), 0)
        self.assertGreater(len(pages_seen), 0)
        e.log("kill -9 after %d acknowledged publishes and %d acknowledged "
              "bindings" % (len(manifests_seen), len(pages_seen)))

        daemon, planner = self.start(self.catalog())
        for m, key in manifests_seen:
            pub = planner.PublishManifest(
                pb.PublishManifestRequest(manifest=m), timeout=10)
            self.assertEqual(pub.manifest_key, key)
            self.assertFalse(pub.created, "acknowledged manifest %s was lost"
                             % key)
        for start in range(0, len(pages_seen), 4096):
            chunk = pages_seen[start:start + 4096]
            added = planner.RegisterPages(pb.RegisterPagesRequest(
                manifest_key=pubs[0].manifest_key, page_keys=chunk),
                timeout=30).added
            self.assertEqual(added, 0, "acknowledged bindings were lost")
        # And they plan.
        reader = e.make_placement(DESC, 1, 1, 1, "crash-r")
        resp, _ = self.plan(planner, pubs[0].model_domain, pages_seen[:32],
                            reader)
        self.assertEqual(resp.hit_pages, 32)
        self.stop(daemon)

    def refused(self, path, file_to_check):
        """Starts the daemon on `path` and expects exit 2 naming the path,
        with `file_to_check` unchanged."""
        with open(file_to_check, "rb") as f:
            before = f.read()
        proc = subprocess.run(
            [e.DAEMON, "--listen", "127.0.0.1:0", "--catalog", "lmdb:" + path],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, env=daemon_env(), timeout=30)
        stderr = proc.stderr.decode("utf-8", "replace")
        self.assertEqual(proc.returncode, 2, stderr)
        self.assertIn(path, stderr)
        self.assertIn("refusing", stderr)
        with open(file_to_check, "rb") as f:
            self.assertEqual(f.read(), before, "%s was modified"
                             % file_to_check)
        return stderr

    def test_corrupted_or_foreign_catalog_is_refused(self):
        # Random bytes where data.mdb should be.
        garbage = os.path.join(self.tmp, "garbage")
        os.mkdir(garbage)
        data = os.path.join(garbage, "data.mdb")
        with open(data, "wb") as f:
            f.write(random.Random(7).randbytes(3 * 4096 + 17))
        self.assertIn("not an LMDB file", self.refused(garbage, data))

        # A real catalog whose header pages were overwritten.
        real = os.path.join(self.tmp, "real")
        daemon, planner = self.start("lmdb:" + real)
        self.writers(planner, "corrupt")
        self.stop(daemon)
        data = os.path.join(real, "data.mdb")
        with open(data, "r+b") as f:
            f.write(b"\x5a" * 8192)
        self.assertIn("not an LMDB file", self.refused(real, data))

        # A plain file, and a directory of someone else's files.
        plain = os.path.join(self.tmp, "plain")
        with open(plain, "wb") as f:
            f.write(b"not a catalog\n")
        self.assertIn("not a directory", self.refused(plain, plain))
        other = os.path.join(self.tmp, "other")
        os.mkdir(other)
        notes = os.path.join(other, "notes.txt")
        with open(notes, "wb") as f:
            f.write(b"mine\n")
        self.assertIn("notes.txt", self.refused(other, notes))

    def test_default_catalog_is_lmdb_in_the_working_directory(self):
        work = os.path.join(self.tmp, "cwd")
        os.mkdir(work)
        daemon = e.Daemon()
        at = daemon.argv.index("--catalog")
        del daemon.argv[at:at + 2]
        old = os.getcwd()
        os.chdir(work)
        try:
            daemon.start()
        finally:
            os.chdir(old)
        self.daemons.append(daemon)
        self.assertTrue(os.path.exists(os.path.join(work, "reshardd-data",
                                                    "data.mdb")),
                        daemon.log_text())
        self.stop(daemon)


class RedisFleetTests(CatalogCase):

    def redis(self, durable=False):
        server = RedisServer(durable=durable).start()
        self.addCleanup(server.cleanup)
        return server

    def test_two_daemons_converge(self):
        redis = self.redis()
        _, planner_a = self.start(redis.url)
        _, planner_b = self.start(redis.url)
        pubs, _, _ = self.writers(planner_a, "fleet")
        # The same content published through the other daemon is not new.
        _, manifests_b, _ = self.writers(planner_b, "fleet")
        self.assertEqual(len(manifests_b), 2)
        domain = pubs[0].model_domain
        shared = ["fleet-shared-%d" % i for i in range(32)]
        planners = [planner_a, planner_b]
        expected = {}
        errors = []

        def worker(n):
            rng = random.Random(n)
            planner = planners[n % 2]
            own = ["fleet-own-%d-%d" % (n, i) for i in range(24)]
            bound = {}
            try:
                # Everyone binds the shared pages to both manifests.
                for pub in pubs:
                    planner.RegisterPages(pb.RegisterPagesRequest(
                        manifest_key=pub.manifest_key, page_keys=shared),
                        timeout=10)
                for _ in range(60):
                    keys = rng.sample(own, 4)
                    pub = rng.choice(pubs)
                    if rng.random() < 0.6:
                        planner.RegisterPages(pb.RegisterPagesRequest(
                            manifest_key=pub.manifest_key, page_keys=keys),
                            timeout=10)
                        for k in keys:
                            bound.setdefault(k, set()).add(pub.manifest_key)
                    elif rng.random() < 0.5:
                        planner.ForgetPages(pb.ForgetPagesRequest(
                            model_domain=domain, page_keys=keys,
                            manifest_key=pub.manifest_key), timeout=10)
                        for k in keys:
                            bound.get(k, set()).discard(pub.manifest_key)
                    else:
                        planner.ForgetPages(pb.ForgetPagesRequest(
                            model_domain=domain, page_keys=keys), timeout=10)
                        for k in keys:
                            bound.pop(k, None)
                    # Another daemon forgetting a shared page races the
                    # registrations of everyone else; bind it back.
                    if rng.random() < 0.2:
                        k = rng.choice(shared)
                        planners[(n + 1) % 2].ForgetPages(
                            pb.ForgetPagesRequest(model_domain=domain,
                                                  page_keys=[k]), timeout=10)
                        for p in pubs:
                            planner.RegisterPages(pb.RegisterPagesRequest(
                                manifest_key=p.manifest_key, page_keys=[k]),
                                timeout=10)
                expected[n] = (own, bound)
            except Exception as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,))
                   for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(errors, [])
        # Re-bind the shared pages once more: a forget of one worker may
        # have come after another's re-registration.
        for pub in pubs:
            planner_a.RegisterPages(pb.RegisterPagesRequest(
                manifest_key=pub.manifest_key, page_keys=shared), timeout=10)

        # Every worker's own pages hold exactly what it left there, seen the
        # same through either daemon.
        for n, (own, bound) in expected.items():
            for planner in planners:
                for pub in pubs:
                    want = [k for k in own if pub.manifest_key in
                            bound.get(k, ())]
                    added = planner.RegisterPages(pb.RegisterPagesRequest(
                        manifest_key=pub.manifest_key, page_keys=want),
                        timeout=10).added
                    self.assertEqual(added, 0, "worker %d lost bindings" % n)
            gone = [k for k in own if not bound.get(k)]
            for k in gone:
                for planner in planners:
                    resp, _ = self.plan(planner, domain, [k],
                                        e.make_placement(DESC, 1, 1, 1, "q"))
                    self.assertEqual(resp.hit_pages, 0, k)

        # Identical plans from both daemons, with a layout choice per page.
        reader = e.make_placement(DESC, 1, 2, 2, "fleet-r")
        keys = shared[:16]
        for i in range(4):
            a, _ = self.plan(planner_a, domain, keys, reader, i)
            b, _ = self.plan(planner_b, domain, keys, reader, i)
            self.assertEqual(a.hit_pages, len(keys))
            self.assertEqual(a.SerializeToString(), b.SerializeToString())
        # And the bindings of every page: forgetting all of them removes
        # the same number whichever daemon asks first.
        removed = planner_b.ForgetPages(pb.ForgetPagesRequest(
            model_domain=domain, page_keys=shared), timeout=10).removed
        self.assertEqual(removed, 2 * len(shared))
        removed = planner_a.ForgetPages(pb.ForgetPagesRequest(
            model_domain=domain, page_keys=shared), timeout=10).removed
        self.assertEqual(removed, 0)

    def test_redis_restart_mid_test(self):
        redis = self.redis(durable=True)
        daemon, planner = self.start(redis.url)
        pubs, _, fleet = self.writers(planner, "outage",
                                      topologies=((1, 1, 2, pb.LPHD),))
        keys = ["outage-%d" % i for i in range(8)]
        self.assertEqual(fleet.register(pubs[0].manifest_key, keys), 8)
        reader = e.make_placement(DESC, 1, 1, 2, "outage-r")
        before, binding = self.plan(planner, pubs[0].model_domain, keys,
                                    reader)
        self.assertEqual(before.hit_pages, 8)

        redis.stop()
        # The first call after the loss may still be the one that finds it.
        message = None
        for _ in range(3):
            err = e.rpc_error(planner.RegisterPages, pb.RegisterPagesRequest(
                manifest_key=pubs[0].manifest_key, page_keys=["x"]),
                timeout=10)
            self.assertIsNotNone(err)
            if err.code() == Code.UNAVAILABLE:
                message = err.details()
                break
        self.assertIsNotNone(message, "no UNAVAILABLE while Redis is down")
        self.assertIn(redis.url, message)
        self.assertIn("unreachable", message)
        # Pages whose bindings this daemon has seen plan from its cache,
        # identically; the log says so.
        during, _ = self.plan(planner, pubs[0].model_domain, keys, reader)
        self.assertEqual(during.SerializeToString(), before.SerializeToString())
        e.verify_plan(during, fleet.store, DESC, binding, keys)
        deadline = time.monotonic() + 10
        while not any("planning from cache" in line and "pages=8" in line
                      and "level=warn" in line
                      for line in daemon.log_lines()):
            self.assertLess(time.monotonic(), deadline, daemon.log_text())
            time.sleep(0.02)
        # The hit prefix ends at the first page not cached.
        mixed = keys[:3] + ["outage-never"] + keys[3:]
        part, _ = self.plan(planner, pubs[0].model_domain, mixed, reader)
        self.assertEqual(part.hit_pages, 3)
        # Pages never seen (and domains never seen) need Redis.
        message = self.rpc_error(Code.UNAVAILABLE, self.plan, planner,
                                 pubs[0].model_domain,
                                 ["outage-never-%d" % i for i in range(4)],
                                 reader)
        self.assertIn(redis.url, message)
        self.assertIn("unreachable", message)
        message = self.rpc_error(Code.UNAVAILABLE, self.plan, planner,
                                 "ab" * 32, keys, reader)
        self.assertIn("unreachable", message)
        # Writes need Redis, still.
        message = self.rpc_error(
            Code.UNAVAILABLE, planner.RegisterPages, pb.RegisterPagesRequest(
                manifest_key=pubs[0].manifest_key, page_keys=keys[:1]),
            timeout=10)
        self.assertIn("unreachable", message)
        # Publishing needs Redis too.
        self.rpc_error(Code.UNAVAILABLE, fleet.publish_writer,
                       e.make_placement(DESC, 1, 1, 4, "outage-w2"), pb.PLHD,
                       model_id="outage")
        # A manifest in the daemon's cache still serves.
        got = planner.GetManifest(pb.GetManifestRequest(
            manifest_key=pubs[0].manifest_key), timeout=10)
        self.assertEqual(got.layout_id, pubs[0].layout_id)
        # The daemon itself stays up and healthy.
        self.assertEqual(planner.health(), e.SERVING)

        redis.start()
        deadline = time.monotonic() + 20
        while True:
            # PlanLoad of seen pages works during the outage too; a lookup
            # of unseen pages shows that Redis is back.
            err = e.rpc_error(self.plan, planner, pubs[0].model_domain,
                              ["outage-never-0"], reader)
            if err is None:
                break
            self.assertEqual(err.code(), Code.UNAVAILABLE, err.details())
            self.assertLess(time.monotonic(), deadline,
                            "no recovery:\n" + daemon.log_text())
            time.sleep(0.05)
        after, _ = self.plan(planner, pubs[0].model_domain, keys, reader)
        self.assertEqual(after.SerializeToString(), before.SerializeToString())
        e.verify_plan(after, fleet.store, DESC, binding, keys)
        self.assertEqual(fleet.register(pubs[0].manifest_key, keys + ["new"]),
                         1)
        self.assertTrue(daemon.wait_log_lines(
            lambda line: "catalog reconnected" in line, 1), daemon.log_text())
        # With Redis reachable the catalog is the source of truth again: a
        # forget through another daemon of the fleet is honoured at once,
        # and a later outage no longer plans the forgotten page.
        _, other = self.start(redis.url)
        other.ForgetPages(pb.ForgetPagesRequest(
            model_domain=pubs[0].model_domain, page_keys=keys[2:3]),
            timeout=10)
        forgot, _ = self.plan(planner, pubs[0].model_domain, keys, reader)
        self.assertEqual(forgot.hit_pages, 2)
        redis.stop()
        deadline = time.monotonic() + 20
        while True:
            err = e.rpc_error(planner.RegisterPages, pb.RegisterPagesRequest(
                manifest_key=pubs[0].manifest_key, page_keys=["x"]),
                timeout=10)
            if err is not None and err.code() == Code.UNAVAILABLE:
                break
            self.assertLess(time.monotonic(), deadline, "no outage seen")
            time.sleep(0.05)
        cached, _ = self.plan(planner, pubs[0].model_domain, keys, reader)
        self.assertEqual(cached.SerializeToString(), forgot.SerializeToString())
        redis.start()
        self.stop(daemon)


if __name__ == "__main__":
    unittest.main()
