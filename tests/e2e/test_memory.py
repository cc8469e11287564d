"""End-to-end tests of memory pools (SPEC §1.5a, §3.2, §3.3) against a live
reshardd with stock grpcio: RegisterMemory, ForgetMemory, and PlanLoad /
PlanStore with ``pooled`` in place of ``binding``.

* PooledPlanTests: engine-shaped pools (vLLM, FlashInfer HND with K and V
  interleaved per block, SGLang page-first, MLA) of every reader
  participant, registered by placement id and planned with a scattered
  block table: the pooled plan (by id, inline, and with runs) equals the
  plan of the equivalent explicit binding byte for byte, and executes
  into exactly the oracle's bytes; the memory id is SPEC §1.5a's digest;
  a second RegisterMemory says created=false; ForgetMemory true, then false.
* PooledStoreTests: a writer's pool; PlanStore by id and inline equals the
  explicit binding's plan, and executing it into zeroed Parts gives the
  SPEC §1.3 Parts.
* MemoryLmdbTests: ``kill -9`` right after a RegisterMemory OK, and a
  graceful restart, on one LMDB directory: plans by ids (pool and
  placement, both resolved from the catalog) are byte-identical, a second
  RegisterMemory says created=false, a forgotten pool stays forgotten, and
  a refused pool left no record.
* MemoryRedisTests: two daemons on one redis-server — a pool registered on
  A plans identically by id on B; ForgetMemory on B; then what A (which
  cached the pool) and a fresh daemon C answer.

The refusals (every rule, with its status and message) are in
test_memory_errors.py. Run through ctest (tests/e2e/CMakeLists.txt).
"""

import os
import signal
import threading
import time
import unittest

import grpc

import reshard_e2e as e
import reshard_pools as pools
from reshard_e2e import pb
from reshard_pools import DESC, MLA_DESC, World, expand, pooled, scattered
from reshard_testcase import DaemonTestCase
from reshard_redis import RedisServer
from test_catalog_durability import CatalogCase
from test_plan_store import WrittenParts, execute_store

Code = grpc.StatusCode

# (builder, block size, blocks in the pool)
ENGINES = {
    "vllm": (pools.vllm_pool, 4, 9),
    "flashinfer": (pools.flashinfer_pool, 16, 4),
    "page_first": (pools.page_first_pool, 8, 5),
}


def same(test, a, b, what):
    test.assertEqual(a.SerializeToString(), b.SerializeToString(), what)


class PooledPlanTests(DaemonTestCase):

    def plan_every_participant(self, world, engine):
        build, block, nb = ENGINES[engine]
        for i, part in enumerate(world.reader.parts):
            with self.subTest(engine=engine, participant=part.participant_id):
                pool = build(world.desc, part, block, nb)
                got = world.register(pool)
                self.assertTrue(got.created)
                self.assertEqual(got.memory_id,
                                 pools.memory_id(pool, world.reader_id))
                again = world.register(pool)
                self.assertEqual((again.memory_id, again.created),
                                 (got.memory_id, False))
                table = scattered(nb, seed=i)
                binding = expand(pool, world.desc, part, table, world.tokens)
                explicit = world.load(binding=binding)
                by_id = world.load(pooled=pooled(got.memory_id, table))
                same(self, by_id, explicit, "by id")
                inline = world.load(pooled=pooled(inline_pool=pool,
                                                  block_ids=table))
                same(self, inline, explicit, "inline")
                runs_e = world.load(binding=binding, runs=True)
                runs_p = world.load(pooled=pooled(got.memory_id, table),
                                    runs=True)
                same(self, runs_p, runs_e, "runs")
                self.assertEqual(by_id.hit_pages, len(world.keys))
                self.assertEqual(by_id.placement_id, world.reader_id)
                moved = world.check(by_id, part, binding)
                self.assertEqual(moved, by_id.stats.bytes)
                self.assertGreater(moved, 0)
                forget = pb.ForgetMemoryRequest(memory_id=got.memory_id)
                self.assertTrue(self.planner.ForgetMemory(forget).removed)
                self.assertFalse(self.planner.ForgetMemory(forget).removed)

    def test_engine_pools_plan_like_their_bindings(self):
        for engine in ENGINES:
            world = World(self.planner, "pp-" + engine)
            self.plan_every_participant(world, engine)

    def test_mla_pool(self):
        # One latent tensor per layer; the TP2 reader replicates the head.
        world = World(self.planner, "pp-mla", desc=MLA_DESC, writer=(1, 1, 1))
        self.plan_every_participant(world, "vllm")
        self.plan_every_participant(world, "page_first")

    def test_last_block_partly_past_the_span(self):
        # 24 tokens in blocks of 5: the fifth block holds 4 of its 5 slots,
        # and the slot past the span is never written.
        world = World(self.planner, "pp-ragged")
        part = world.reader.parts[2]
        pool = pools.vllm_pool(world.desc, part, 5, 7)
        mid = world.register(pool).memory_id
        table = [6, 0, 3, 5, 1]
        binding = expand(pool, world.desc, part, table, world.tokens)
        by_id = world.load(pooled=pooled(mid, table))
        same(self, by_id, world.load(binding=binding), "ragged")
        world.check(by_id, part, binding)

    def test_same_pool_other_endpoint_is_another_pool(self):
        world = World(self.planner, "pp-endpoint")
        part = world.reader.parts[0]
        pool = pools.vllm_pool(world.desc, part, 4, 6)
        first = world.register(pool)
        other = pb.MemoryPool()
        other.CopyFrom(pool)
        other.endpoint = "elsewhere:2"
        second = world.register(other)
        self.assertTrue(second.created)
        self.assertNotEqual(second.memory_id, first.memory_id)
        self.assertEqual(second.memory_id,
                         pools.memory_id(other, world.reader_id))
        # The same pool against the inline placement: the same id.
        inline = self.planner.RegisterMemory(pb.RegisterMemoryRequest(
            pool=pool, placement=world.reader), timeout=30)
        self.assertEqual((inline.memory_id, inline.created),
                         (first.memory_id, False))


class PooledStoreTests(DaemonTestCase):

    def store_all(self, desc, writer_topo, fmt, engine, tag):
        build, block, nb = ENGINES[engine]
        writer = e.make_placement(desc, *writer_topo, prefix=tag + "-w")
        pub, up = self.fleet.publish_writer(writer, fmt, model_id=tag)
        writer_id = self.planner.RegisterPlacement(pb.RegisterPlacementRequest(
            placement=writer), timeout=30).placement_id
        keys = ["%s-%d" % (tag, i) for i in range(pools.PAGES)]
        tokens = len(keys) * desc.page_size
        expected = {k: e.build_parts(up.layout, k) for k in keys}
        sizes = [len(p) for p in expected[keys[0]]]
        written = WrittenParts(up.layout, keys)
        writers = 0
        for i, part in enumerate(writer.parts):
            pool = build(desc, part, block, nb)
            table = scattered(nb, seed=20 + i)
            binding = expand(pool, desc, part, table, tokens)
            # The writer's memory holds the logical values of every page.
            memory, _ = e.expected_regions(desc, binding, keys, len(keys))
            got = self.planner.RegisterMemory(pb.RegisterMemoryRequest(
                pool=pool, placement_id=writer_id), timeout=30)
            common = dict(manifest_key=pub.manifest_key,
                          placement_id=writer_id,
                          page_count=len(keys), operation_id="e2e-memory")
            explicit = self.planner.PlanStore(pb.PlanStoreRequest(
                binding=binding.message, **common), timeout=60)
            by_id = self.planner.PlanStore(pb.PlanStoreRequest(
                pooled=pooled(got.memory_id, table), **common), timeout=60)
            same(self, by_id, explicit, part.participant_id)
            inline = self.planner.PlanStore(pb.PlanStoreRequest(
                pooled=pooled(inline_pool=pool, block_ids=table), **common),
                timeout=60)
            same(self, inline, explicit, part.participant_id + " inline")
            runs_e = self.planner.PlanStore(pb.PlanStoreRequest(
                binding=binding.message, runs=True, **common), timeout=60)
            runs_p = self.planner.PlanStore(pb.PlanStoreRequest(
                pooled=pooled(got.memory_id, table), runs=True, **common),
                timeout=60)
            same(self, runs_p, runs_e, part.participant_id + " runs")
            writes = execute_store(by_id, memory, written, sizes)
            if part.replica_ordinal != 0:
                self.assertEqual(list(by_id.part_indexes), [])
                continue
            self.assertEqual(len(by_id.part_indexes), 1)
            index = by_id.part_indexes[0]
            for k in keys:
                self.assertEqual(bytes(written.data[(k, index)]),
                                 expected[k][index],
                                 "page %s Part %d" % (k, index))
                self.assertTrue(all(c == 1 for c in writes[(k, index)]))
            writers += 1
        self.assertEqual(writers, len(up.layout.shards))
        return pub, written, keys

    def test_writer_pools_store_the_parts(self):
        cases = [(DESC, (1, 1, 2), pb.LPHD, "vllm"),
                 (DESC, (1, 2, 2), pb.PLHD, "flashinfer"),
                 (DESC, (1, 1, 4), pb.HPLD, "page_first"),
                 (MLA_DESC, (1, 1, 2), pb.LPHD, "vllm")]
        for n, (desc, topo, fmt, engine) in enumerate(cases):
            with self.subTest(engine=engine, writer=topo):
                pub, written, keys = self.store_all(
                    desc, topo, fmt, engine, "ps-%d-%s" % (n, engine))
                # A reader loads the Parts the pooled store plans wrote.
                self.fleet.register(pub.manifest_key, keys)
                reader = e.make_placement(desc, 1, 2, 1, "ps-%d-r" % n)
                binding = e.make_binding(desc, reader.parts[1], len(keys))
                resp = self.fleet.plan(pub.model_domain, keys, reader,
                                       binding)
                actual = e.execute_plan(resp, written, binding.region_sizes)
                want, _ = e.expected_regions(desc, binding, keys, len(keys))
                self.assertIsNone(e.describe_mismatch(actual, want, binding,
                                                      desc))


class MemoryLmdbTests(CatalogCase):
    """Pools are durable before OK on LMDB (SPEC §3.2)."""

    def catalog(self):
        return "lmdb:" + os.path.join(self.tmp, "data")

    @staticmethod
    def reopen(world, planner):
        world.planner = planner
        world.fleet.planner = planner

    def opened(self, daemon):
        lines = [l for l in daemon.log_lines() if "catalog opened" in l]
        self.assertEqual(len(lines), 1, daemon.log_text())
        return lines[0]

    def test_kill_9_right_after_register_memory(self):
        daemon, planner = self.start(self.catalog())
        world = World(planner, "mem-crash")
        parts = world.reader.parts
        first = pools.vllm_pool(DESC, parts[0], 4, 9)
        late = pools.flashinfer_pool(DESC, parts[3], 16, 4)
        first_id = world.register(first).memory_id
        tables = [scattered(9, seed=1), scattered(4, seed=2)]
        before = world.load(pooled=pooled(first_id, tables[0]))
        got = world.register(late)
        self.assertTrue(got.created)
        # Nothing else after the OK: the daemon dies at once.
        daemon.proc.send_signal(signal.SIGKILL)
        self.assertEqual(daemon.wait(10), -signal.SIGKILL)

        daemon, planner = self.start(self.catalog())
        self.reopen(world, planner)
        self.assertIn("memory_pools=2", self.opened(daemon))
        self.assertIn("placements=1", self.opened(daemon))
        # The placement id and both memory ids resolve from the catalog.
        after = world.load(pooled=pooled(first_id, tables[0]))
        same(self, after, before, "the pool planned before the crash")
        binding = expand(late, DESC, parts[3], tables[1], world.tokens)
        by_id = world.load(pooled=pooled(got.memory_id, tables[1]))
        same(self, by_id, world.load(binding=binding),
             "the pool registered right before the kill")
        world.check(by_id, parts[3], binding)
        for pool, mid in ((first, first_id), (late, got.memory_id)):
            again = world.register(pool)
            self.assertEqual((again.memory_id, again.created), (mid, False))
        self.stop(daemon)

    def test_kill_9_during_registrations(self):
        """A stream of RegisterMemory calls from three threads, killed
        mid-stream: every acknowledged pool is there after the restart."""
        daemon, planner = self.start(self.catalog())
        world = World(planner, "mem-stream")
        acked, failures = [], []
        lock = threading.Lock()
        stop = threading.Event()

        def registrar(n):
            part = world.reader.parts[n]
            i = 0
            while not stop.is_set():
                pool = pools.vllm_pool(DESC, part, 4, 9,
                                       endpoint="stream-%d:%d" % (n, i))
                i += 1
                try:
                    got = world.register(pool)
                except grpc.RpcError as err:
                    failures.append(err.code())
                    return
                if not got.created:
                    failures.append("created=false for a new pool")
                with lock:
                    acked.append((pool, got.memory_id))

        threads = [threading.Thread(target=registrar, args=(n,))
                   for n in range(3)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with lock:
                if len(acked) >= 150:
                    break
            time.sleep(0.01)
        daemon.proc.send_signal(signal.SIGKILL)
        daemon.wait(10)
        stop.set()
        for t in threads:
            t.join(30)
        self.assertEqual([f for f in failures if isinstance(f, str)], [])
        with lock:
            seen = list(acked)
        self.assertGreater(len(seen), 0)
        e.log("kill -9 after %d acknowledged RegisterMemory" % len(seen))
        daemon, planner = self.start(self.catalog())
        self.reopen(world, planner)
        for pool, mid in seen:
            again = world.register(pool)
            self.assertEqual((again.memory_id, again.created), (mid, False),
                             "acknowledged pool %s was lost" % mid)
        self.stop(daemon)

    def test_graceful_restart(self):
        daemon, planner = self.start(self.catalog())
        world = World(planner, "mem-restart")
        registered, before = [], []
        for i, part in enumerate(world.reader.parts):
            pool = pools.page_first_pool(DESC, part, 8, 5)
            mid = world.register(pool).memory_id
            table = scattered(5, seed=i)
            registered.append((pool, mid, table))
            before.append(world.load(pooled=pooled(mid, table)))
        gone_pool, gone, gone_table = registered.pop()
        before.pop()
        self.assertTrue(planner.ForgetMemory(pb.ForgetMemoryRequest(
            memory_id=gone), timeout=10).removed)
        self.stop(daemon)

        daemon, planner = self.start(self.catalog())
        self.reopen(world, planner)
        self.assertIn("memory_pools=3", self.opened(daemon))
        for (pool, mid, table), plan in zip(registered, before):
            same(self, world.load(pooled=pooled(mid, table)), plan, mid)
            again = world.register(pool)
            self.assertEqual((again.memory_id, again.created), (mid, False))
        # Forgotten before the restart: still forgotten.
        message = self.rpc_error(Code.NOT_FOUND, world.load,
                                 pooled=pooled(gone, gone_table))
        self.assertIn("pooled.memory_id %s: not registered" % gone, message)
        self.assertFalse(planner.ForgetMemory(pb.ForgetMemoryRequest(
            memory_id=gone), timeout=10).removed)
        # The engine registers it again: a new record, the same id.
        again = world.register(gone_pool)
        self.assertEqual((again.memory_id, again.created), (gone, True))
        self.stop(daemon)

    def test_refused_pools_leave_no_record(self):
        daemon, planner = self.start(self.catalog())
        world = World(planner, "mem-refused")
        part = world.reader.parts[1]
        good = pools.vllm_pool(DESC, part, 4, 9)
        for edit in (lambda p: p.tensors.pop(),
                     lambda p: setattr(p.tensors[1], "offset_bytes", 0),
                     lambda p: setattr(p.regions[0], "nbytes", 100),
                     lambda p: setattr(p, "participant_id", "nobody")):
            bad = pb.MemoryPool()
            bad.CopyFrom(good)
            edit(bad)
            self.rpc_error(Code.INVALID_ARGUMENT, world.register, bad)
        self.assertTrue(world.register(good).created)
        self.stop(daemon)
        daemon, _ = self.start(self.catalog())
        self.assertIn("memory_pools=1", self.opened(daemon))
        self.stop(daemon)


class MemoryRedisTests(CatalogCase):
    """A pool is a catalog record: every daemon of the fleet resolves it."""

    def test_two_daemons_share_a_pool(self):
        redis = RedisServer().start()
        self.addCleanup(redis.cleanup)
        daemon_a, planner_a = self.start(redis.url)
        daemon_b, planner_b = self.start(redis.url)
        world = World(planner_a, "mem-fleet")
        part = world.reader.parts[2]
        pool = pools.vllm_pool(DESC, part, 4, 9)
        got = world.register(pool)
        self.assertTrue(got.created)
        table = scattered(9, seed=5)
        on_a = world.load(pooled=pooled(got.memory_id, table))
        # B never saw the placement nor the pool: both come from Redis.
        on_b = world.load(planner=planner_b,
                          pooled=pooled(got.memory_id, table))
        same(self, on_b, on_a, "daemon B's plan")
        binding = expand(pool, DESC, part, table, world.tokens)
        world.check(on_b, part, binding)
        # Registering on B finds A's record.
        again = world.register(pool, planner=planner_b)
        self.assertEqual((again.memory_id, again.created),
                         (got.memory_id, False))

        forget = pb.ForgetMemoryRequest(memory_id=got.memory_id)
        self.assertTrue(planner_b.ForgetMemory(forget, timeout=10).removed)
        # B dropped it from its own cache with the record.
        self.rpc_error(Code.NOT_FOUND, world.load, planner=planner_b,
                       pooled=pooled(got.memory_id, table))
        # A fresh daemon resolves ids from the catalog only: NOT_FOUND.
        daemon_c, planner_c = self.start(redis.url)
        message = self.rpc_error(Code.NOT_FOUND, world.load,
                                 planner=planner_c,
                                 pooled=pooled(got.memory_id, table))
        self.assertIn("pooled.memory_id %s: not registered" % got.memory_id,
                      message)
        self.assertIn("RegisterMemory", message)
        # A cached the pool when it registered it. A forget through another
        # daemon reaches A's plans within a second: a pool cached in front
        # of a shared catalog is read again a second after it was last
        # read (docs/daemon.md), and then A answers NOT_FOUND too.
        time.sleep(1.2)
        self.rpc_error(Code.NOT_FOUND, world.load,
                       pooled=pooled(got.memory_id, table))
        self.assertFalse(planner_a.ForgetMemory(forget, timeout=10).removed)
        # Registered again (the engine restarts with the same memory): a
        # new record, and C plans with it.
        again = world.register(pool, planner=planner_c)
        self.assertEqual((again.memory_id, again.created),
                         (got.memory_id, True))
        same(self, world.load(planner=planner_c,
                              pooled=pooled(got.memory_id, table)), on_a,
             "daemon C's plan")
        for daemon in (daemon_a, daemon_b, daemon_c):
            self.stop(daemon)


    def test_concurrent_registrations_create_once(self):
        """Eight clients over two daemons register one pool at once: one
        record is created (SET NX), every answer names it; then eight
        forget it at once: one removes it."""
        redis = RedisServer().start()
        self.addCleanup(redis.cleanup)
        started = [self.start(redis.url) for _ in range(2)]
        planners = [planner for _, planner in started]
        world = World(planners[0], "mem-race")
        pool = pools.vllm_pool(DESC, world.reader.parts[1], 4, 9)
        want = pools.memory_id(pool, world.reader_id)
        barrier = threading.Barrier(8)
        results, errors = [], []

        def call(n, fn):
            try:
                barrier.wait(10)
                results.append(fn(planners[n % 2]))
            except Exception as exc:  # reported below
                errors.append(exc)

        def run(fn):
            results.clear()
            threads = [threading.Thread(target=call, args=(n, fn))
                       for n in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(errors, [])
            return list(results)

        got = run(lambda planner: world.register(pool, planner=planner))
        self.assertEqual(sorted((g.memory_id, g.created) for g in got),
                         [(want, False)] * 7 + [(want, True)])
        forget = pb.ForgetMemoryRequest(memory_id=want)
        got = run(lambda planner: planner.ForgetMemory(forget, timeout=10))
        self.assertEqual(sorted(g.removed for g in got), [False] * 7 + [True])
        for daemon, _ in started:
            self.stop(daemon)


if __name__ == "__main__":
    unittest.main()
