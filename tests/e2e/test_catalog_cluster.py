"""End-to-end tests of the Redis Cluster catalog (``--catalog
redis-cluster://SEEDS``, SPEC §3.2, docs/catalog.md) with the real daemon,
stock grpcio and a real cluster on loopback: three primaries and three
replicas (reshard_redis_cluster.py starts them per test and kills them in
its cleanup).

* Two daemons (one given two seeds, one all six) agree on publishes,
  registrations, placements, pools and plans; each domain's records sit
  on the one primary that owns its {hash tag}'s slot.
* A primary SIGKILLed under a registration load fails over; the daemons
  follow, and with ``--redis-wait-replicas 1`` not one acknowledged
  binding is missing afterwards.
* A slot range resharded (``redis-cli --cluster reshard``) while the
  daemons register and plan is followed through ASK and MOVED without an
  error reaching a client.
* A primary that never answers (SIGSTOP) costs its own domains their
  deadline, not the others theirs, and not the daemon its health.
* ``--redis-wait-replicas`` on one server (``redis://``): without a
  replica every write is UNAVAILABLE and says why; with one it is OK.

Run through ctest (tests/e2e/CMakeLists.txt sets the environment).
"""

import signal
import subprocess
import threading
import time
import unittest

import grpc

import reshard_e2e as e
from reshard_e2e import pb
from reshard_pools import World, expand, pooled, scattered
import reshard_pools as pools
from reshard_redis import RedisServer, free_port, page_bucket_key, port_open
from reshard_redis_cluster import RedisCluster, key_slot
from test_catalog_durability import DESC, CatalogCase

Code = grpc.StatusCode
# What a client may see while a shard fails over (never afterwards).
OUTAGE = (Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED)


def domain_slot(domain):
    return key_slot("reshard:{%s}:manifests" % domain)


class RedisClusterTests(CatalogCase):

    def cluster(self, **kwargs):
        cluster = RedisCluster(**kwargs).start()
        self.addCleanup(cluster.cleanup)
        return cluster

    def domain(self, planner, name):
        """One writer (TP2, LPHD) published in domain `name`."""
        pubs, _, fleet = self.writers(planner, name,
                                      topologies=((1, 1, 2, pb.LPHD),))
        return pubs[0], fleet

    def domains_on(self, planner, cluster, prefix, want, limit=200):
        """Publishes domains prefix-0, prefix-1, ... until `want(slot,
        owner)` has held once for each predicate; returns their pubs."""
        found = [None] * len(want)
        for i in range(limit):
            pub, fleet = self.domain(planner, "%s-%d" % (prefix, i))
            slot = domain_slot(pub.model_domain)
            owner = cluster.owner(slot)
            for j, predicate in enumerate(want):
                if found[j] is None and predicate(slot, owner):
                    found[j] = (pub, fleet)
                    break
            if all(found):
                return found
        self.fail("no domain matched after %d publishes" % limit)

    def register_until_ok(self, planners, manifest_key, key, within=60):
        deadline = time.monotonic() + within
        for planner in planners:
            while True:
                err = e.rpc_error(planner.RegisterPages,
                                  pb.RegisterPagesRequest(
                                      manifest_key=manifest_key,
                                      page_keys=[key]), timeout=10)
                if err is None:
                    break
                self.assertIn(err.code(), OUTAGE, err.details())
                self.assertLess(time.monotonic(), deadline,
                                "no recovery: %s" % err.details())
                time.sleep(0.1)

    def assert_all_present(self, planners, acked):
        """Every acknowledged (manifest key, pages) batch is still bound:
        registering it again adds nothing, through every daemon."""
        total = sum(len(pages) for _, pages in acked)
        for planner in planners:
            missing = 0
            for manifest_key, pages in acked:
                missing += planner.RegisterPages(pb.RegisterPagesRequest(
                    manifest_key=manifest_key, page_keys=pages),
                    timeout=30).added
            self.assertEqual(missing, 0, "%d of %d acknowledged bindings "
                             "missing" % (missing, total))
        return total

    def test_two_daemons_agree(self):
        cluster = self.cluster()
        daemon_a, planner_a = self.start(cluster.seeds(2))
        daemon_b, planner_b = self.start(cluster.url)
        published = [self.domain(planner_a, "cl-%d" % i) for i in range(6)]
        # The same content through the other daemon is not new.
        for i, (pub, _) in enumerate(published):
            again, _ = self.domain(planner_b, "cl-%d" % i)
            self.assertEqual(again.manifest_key, pub.manifest_key)
            self.assertFalse(again.created)
            got = planner_b.GetManifest(pb.GetManifestRequest(
                manifest_key=pub.manifest_key), timeout=10)
            self.assertEqual(got.layout_id, pub.layout_id)
        owners = {cluster.owner(domain_slot(p.model_domain)).port
                  for p, _ in published}
        self.assertGreater(len(owners), 1, "every domain on one primary")

        reader = e.make_placement(DESC, 1, 2, 2, "cl-r")
        reader_id = planner_a.RegisterPlacement(pb.RegisterPlacementRequest(
            placement=reader), timeout=10).placement_id
        for i, (pub, fleet) in enumerate(published):
            keys = ["cl-%d-%d" % (i, j) for j in range(16)]
            self.assertEqual(fleet.register(pub.manifest_key, keys[:10]), 10)
            added = planner_b.RegisterPages(pb.RegisterPagesRequest(
                manifest_key=pub.manifest_key, page_keys=keys), timeout=10)
            self.assertEqual(added.added, 6)
            for n in range(4):
                a, binding = self.plan(planner_a, pub.model_domain, keys,
                                       reader, n)
                b, _ = self.plan(planner_b, pub.model_domain, keys, reader, n)
                self.assertEqual(a.hit_pages, 16)
                self.assertEqual(a.SerializeToString(), b.SerializeToString())
                e.verify_plan(a, fleet.store, DESC, binding, keys)
            # B plans by the placement A registered.
            binding = e.make_binding(DESC, reader.parts[0], len(keys),
                                     block=4)
            by_id = planner_b.PlanLoad(pb.PlanLoadRequest(
                model_domain=pub.model_domain, page_keys=keys,
                placement_id=reader_id, binding=binding.message,
                operation_id="cluster"), timeout=30)
            self.assertEqual(by_id.hit_pages, 16)
            e.verify_plan(by_id, fleet.store, DESC, binding, keys)
            # A forget through A is what B sees.
            removed = planner_a.ForgetPages(pb.ForgetPagesRequest(
                model_domain=pub.model_domain, page_keys=keys[12:]),
                timeout=10).removed
            self.assertEqual(removed, 4)
            b, _ = self.plan(planner_b, pub.model_domain, keys, reader)
            self.assertEqual(b.hit_pages, 12)
            # Every key of the domain is on the primary of its slot.
            owner = cluster.owner(domain_slot(pub.model_domain))
            pattern = "reshard:{%s}:*" % pub.model_domain
            for node in cluster.primaries():
                count = cluster.keys_on(node, pattern)
                if node is owner:
                    # manifest record and set, layout marker, the two
                    # manifest id hashes, the buckets of 12 pages
                    buckets = {page_bucket_key(pub.model_domain, k)
                               for k in keys[:12]}
                    self.assertEqual(count, 5 + len(buckets))
                else:
                    self.assertEqual(count, 0)

        # A memory pool registered on A resolves on B.
        world = World(planner_a, "cl-mem")
        part = world.reader.parts[2]
        pool = pools.vllm_pool(DESC, part, 4, 9)
        got = world.register(pool)
        self.assertTrue(got.created)
        table = scattered(9, seed=5)
        on_a = world.load(pooled=pooled(got.memory_id, table))
        on_b = world.load(planner=planner_b,
                          pooled=pooled(got.memory_id, table))
        self.assertEqual(on_a.SerializeToString(), on_b.SerializeToString())
        world.check(on_b, part, expand(pool, DESC, part, table, world.tokens))
        again = world.register(pool, planner=planner_b)
        self.assertEqual((again.memory_id, again.created),
                         (got.memory_id, False))
        self.assertTrue(planner_b.ForgetMemory(pb.ForgetMemoryRequest(
            memory_id=got.memory_id), timeout=10).removed)
        self.assertFalse(planner_a.ForgetMemory(pb.ForgetMemoryRequest(
            memory_id=got.memory_id), timeout=10).removed)
        # A clean exit closes every node connection (the sanitizer build
        # checks for leaks here).
        self.stop(daemon_a)
        self.stop(daemon_b)

    def test_primary_killed_mid_load_loses_nothing_acknowledged(self):
        cluster = self.cluster()
        flags = ("--redis-wait-replicas", "1")
        daemon_a, planner_a = self.start(cluster.url, *flags)
        daemon_b, planner_b = self.start(cluster.seeds(3), *flags)
        planners = [planner_a, planner_b]
        first = cluster.primaries()[0]
        # One domain on the primary to be killed, two elsewhere.
        chosen = self.domains_on(planner_a, cluster, "fo", [
            lambda s, o: o is first,
            lambda s, o: o is not first,
            lambda s, o: o is not first])
        keys = [pub.manifest_key for pub, _ in chosen]
        acked, failures = [], []
        lock = threading.Lock()
        stop = threading.Event()
        killed = threading.Event()

        def registrar(t):
            planner = planners[t % 2]
            i = 0
            while not stop.is_set():
                key = keys[(t + i) % len(keys)]
                batch = ["fo-%d-%d-%d" % (t, i, j) for j in range(4)]
                i += 1
                try:
                    planner.RegisterPages(pb.RegisterPagesRequest(
                        manifest_key=key, page_keys=batch), timeout=10)
                except grpc.RpcError as err:
                    failures.append((err.code(), err.details(),
                                     killed.is_set()))
                    time.sleep(0.05)
                    continue
                with lock:
                    acked.append((key, batch, killed.is_set()))

        threads = [threading.Thread(target=registrar, args=(t,))
                   for t in range(6)]
        for t in threads:
            t.start()
        try:
            deadline = time.monotonic() + 30
            while len(acked) < 300:
                self.assertLess(time.monotonic(), deadline,
                                "no load: %s" % failures[:3])
                time.sleep(0.02)
            killed.set()
            first.stop(signal.SIGKILL)
            # The replica takes over; the shard has no replica left, so its
            # writes are refused (not acknowledged) until the old primary
            # is back as a replica.
            slot = domain_slot(chosen[0][0].model_domain)
            deadline = time.monotonic() + 60
            while cluster.owner(slot) in (first, None):
                self.assertLess(time.monotonic(), deadline, "no failover")
                time.sleep(0.1)
            cluster.wait_ok(60)
            # Writes to the promoted primary find no replica to WAIT for.
            deadline = time.monotonic() + 30
            while not any("replicas" in f[1] for f in failures):
                self.assertLess(time.monotonic(), deadline,
                                "no write refused for want of a replica")
                time.sleep(0.05)
            first.start()
            cluster.wait_ok(60, replicas=1)
            self.register_until_ok(planners, keys[0], "fo-after")
            with lock:
                mark = len(acked)
            deadline = time.monotonic() + 30
            while True:
                with lock:
                    later = [k for k, _, _ in acked[mark:]]
                if all(later.count(k) >= 5 for k in keys):
                    break
                self.assertLess(time.monotonic(), deadline,
                                "the daemons did not follow the failover")
                time.sleep(0.05)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        before = [f for f in failures if not f[2]]
        self.assertEqual(before, [], "failures before the kill")
        wrong = [f for f in failures if f[0] not in OUTAGE]
        self.assertEqual(wrong, [], "failures other than an outage")
        refused = [f for f in failures if "replicas" in f[1]]
        self.assertIn("the write reached 0 of the 1 replicas", refused[0][1])
        total = self.assert_all_present(
            planners, [(k, b) for k, b, _ in acked])
        e.log("failover: %d acknowledged bindings (%d after the kill), all "
              "present; %d calls refused during the failover (%d by WAIT)"
              % (total, 4 * sum(1 for a in acked if a[2]), len(failures),
                 len(refused)))
        for daemon in (daemon_a, daemon_b):
            self.stop(daemon)

    def test_resharding_is_followed(self):
        cluster = self.cluster()
        daemon_a, planner_a = self.start(cluster.url, "--log-level", "debug")
        daemon_b, planner_b = self.start(cluster.url, "--log-level", "debug")
        planners = [planner_a, planner_b]
        source = cluster.primaries()[0]
        target = cluster.primaries()[1]
        moved = 300
        first_slot = cluster.ranges_of(source)[0][0]
        # A domain among the first slots the reshard moves.
        (pub, fleet), = self.domains_on(planner_a, cluster, "rs", [
            lambda s, o: o is source and first_slot <= s < first_slot + moved])
        slot = domain_slot(pub.model_domain)
        reader = e.make_placement(DESC, 1, 1, 2, "rs-r")
        acked, failures = [], []
        lock = threading.Lock()
        stop = threading.Event()
        # Many keys in the slot, so that its migration takes a while.
        seed = ["rs-seed-%d" % i for i in range(2000)]
        for start in range(0, len(seed), 500):
            fleet.register(pub.manifest_key, seed[start:start + 500])
        acked.append((pub.manifest_key, seed))

        def worker(t):
            planner = planners[t % 2]
            i = 0
            while not stop.is_set():
                batch = ["rs-%d-%d-%d" % (t, i, j) for j in range(4)]
                i += 1
                try:
                    planner.RegisterPages(pb.RegisterPagesRequest(
                        manifest_key=pub.manifest_key, page_keys=batch),
                        timeout=10)
                    with lock:
                        acked.append((pub.manifest_key, batch))
                    resp, _ = self.plan(planner, pub.model_domain,
                                        batch + seed[i % 100:i % 100 + 4],
                                        reader)
                    if resp.hit_pages != 8:
                        failures.append("hit_pages %d" % resp.hit_pages)
                except grpc.RpcError as err:
                    failures.append((err.code(), err.details()))

        threads = [threading.Thread(target=worker, args=(t,))
                   for t in range(4)]
        for t in threads:
            t.start()
        try:
            time.sleep(0.5)
            cluster.reshard(source, target, moved)
            time.sleep(0.5)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
        self.assertIs(cluster.owner(slot), target)
        self.assertEqual(failures, [])
        total = self.assert_all_present(planners, acked)
        lines = daemon_a.log_lines() + daemon_b.log_lines()
        redirects = [ln for ln in lines if "catalog redirect" in ln]
        moved_seen = sum("MOVED" in ln for ln in redirects)
        ask_seen = sum("ASK" in ln for ln in redirects)
        self.assertGreater(moved_seen, 0, "no MOVED followed")
        e.log("reshard of %d slots: %d bindings acknowledged, all present; "
              "%d MOVED and %d ASK followed, no client error"
              % (moved, total, moved_seen, ask_seen))
        for daemon in (daemon_a, daemon_b):
            self.stop(daemon)

    def test_silent_primary_costs_only_its_deadline(self):
        cluster = self.cluster(node_timeout_ms=3000)
        daemon, planner = self.start(cluster.url)
        first = cluster.primaries()[0]
        (stalled, _), (other, _) = self.domains_on(planner, cluster, "st", [
            lambda s, o: o is first, lambda s, o: o is not first])
        first.proc.send_signal(signal.SIGSTOP)
        self.addCleanup(lambda: first.proc and
                        first.proc.send_signal(signal.SIGCONT))
        # Another shard answers as before.
        self.assertEqual(planner.RegisterPages(pb.RegisterPagesRequest(
            manifest_key=other.manifest_key, page_keys=["st-other"]),
            timeout=2).added, 1)
        deadline_s = 2.0
        for attempt in range(2):
            began = time.monotonic()
            err = e.rpc_error(planner.RegisterPages, pb.RegisterPagesRequest(
                manifest_key=stalled.manifest_key,
                page_keys=["st-stalled-%d" % attempt]), timeout=deadline_s)
            elapsed = time.monotonic() - began
            self.assertIsNotNone(err, "a write succeeded on a stopped node")
            self.assertIn(err.code(), OUTAGE, err.details())
            self.assertLess(elapsed, deadline_s + 1.0)
            began = time.monotonic()
            self.assertEqual(planner.health(timeout=1.0), e.SERVING)
            self.assertLess(time.monotonic() - began, 1.0)
        first.proc.send_signal(signal.SIGCONT)
        self.register_until_ok([planner], stalled.manifest_key, "st-after")
        self.register_until_ok([planner], other.manifest_key, "st-after")
        self.stop(daemon)


class RedisWaitTests(CatalogCase):

    def test_single_server_waits_for_its_replica(self):
        primary = RedisServer().start()
        self.addCleanup(primary.cleanup)
        _, planner = self.start(primary.url, "--redis-wait-replicas", "1")
        message = self.rpc_error(Code.UNAVAILABLE, self.domain_pub, planner)
        self.assertIn("the write reached 0 of the 1 replicas", message)
        self.assertIn(primary.url, message)
        # A replica joins: writes are acknowledged once it has them.
        port = free_port()
        replica = subprocess.Popen(
            [primary.binary, "--port", str(port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--replicaof", "127.0.0.1",
             str(primary.port), "--dir", primary.dir,
             "--dbfilename", "replica.rdb", "--logfile", ""],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        self.addCleanup(replica.wait, 10)
        self.addCleanup(replica.kill)
        deadline = time.monotonic() + 30
        while True:
            err = e.rpc_error(self.domain_pub, planner)
            if err is None:
                break
            self.assertEqual(err.code(), Code.UNAVAILABLE, err.details())
            self.assertLess(time.monotonic(), deadline, err.details())
            time.sleep(0.1)
        self.assertTrue(port_open(port))
        pub = self.domain_pub(planner)
        self.assertEqual(planner.RegisterPages(pb.RegisterPagesRequest(
            manifest_key=pub.manifest_key, page_keys=["w-0", "w-1"]),
            timeout=10).added, 2)

    def domain_pub(self, planner):
        pubs, _, _ = self.writers(planner, "wait",
                                  topologies=((1, 1, 2, pb.LPHD),))
        return pubs[0]


if __name__ == "__main__":
    unittest.main()
