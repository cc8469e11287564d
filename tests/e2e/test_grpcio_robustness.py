"""End-to-end robustness with stock Python grpcio: seeded random
mutations of valid requests and concurrent plans against one daemon.

Run through ctest (tests/e2e/CMakeLists.txt sets the environment), or by
hand from this directory:
  RESHARD_E2E_DAEMON=.../reshardd RESHARD_E2E_PYGEN=.../pygen \
      /usr/bin/python3 -m unittest -v test_grpcio_robustness
"""

import random
import threading
import unittest

import grpc

import reshard_e2e as e
from reshard_e2e import pb
from reshard_testcase import Code, DaemonTestCase, golden_manifest


EXTREMES = [0, 1, 2, 3, 7, 8, 15, 16, 17, 255, 2 ** 31 - 1, 2 ** 32 - 1,
            2 ** 32, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1]


class RobustnessTests(DaemonTestCase):
    """Seeded random mutations of valid requests: every answer is OK with a
    plan that passes the oracle, or one of the input errors of SPEC §3.4
    naming a field; the daemon never fails otherwise and keeps serving."""

    ALLOWED = (Code.INVALID_ARGUMENT, Code.RESOURCE_EXHAUSTED,
               Code.FAILED_PRECONDITION, Code.NOT_FOUND)
    desc = e.make_descriptor([1, 2, 3, 4], 4, 8, 4, 8)

    def mutate(self, rnd, msg, field, bits):
        old = getattr(msg, field)
        if field == "component":
            new = rnd.choice([0, 1, 2, 3, 7, 2 ** 31 - 1, -1])
        elif rnd.random() < 0.4:
            new = max(0, old + rnd.choice([-16, -8, -2, -1, 1, 2, 8, 16]))
        else:
            new = rnd.choice(EXTREMES) & ((1 << bits) - 1)
        setattr(msg, field, new)
        return "%s %d->%d" % (field, old, new)

    def test_mutated_plan_loads(self):
        pub, _ = self.writer_manifest("rb", self.desc, (1, 2, 2), pb.HPLD)
        keys = ["rb-%d" % i for i in range(3)]
        self.fleet.register(pub.manifest_key, keys)
        reader = e.make_placement(self.desc, 1, 1, 2, "rb-r")
        rnd = random.Random(20240501)
        bindings = [dict(mode="paged", block=4),
                    dict(mode="contiguous", pad=True),
                    dict(mode="paged", block=16, order="HND")]
        range_fields = [("global_layer_id", 32), ("component", 32),
                        ("token_start", 64), ("token_count", 64),
                        ("head_start", 32), ("head_count", 32),
                        ("offset_bytes", 64), ("token_stride_bytes", 64),
                        ("head_stride_bytes", 64)]
        outcomes = {}
        for it in range(300):
            part = reader.parts[it % 2]
            binding = e.make_binding(self.desc, part, 3, seed=it,
                                     **bindings[it % 3])
            req = pb.PlanLoadRequest(model_domain=pub.model_domain,
                                     page_keys=keys, placement=reader,
                                     binding=binding.message)
            what = []
            for _ in range(rnd.choice([1, 1, 2, 3])):
                kind = rnd.random()
                if kind < 0.55:
                    f, bits = rnd.choice(range_fields)
                    target = rnd.choice(req.binding.ranges)
                elif kind < 0.65:
                    f, bits = rnd.choice([("address", 64), ("nbytes", 64)])
                    target = rnd.choice(req.binding.regions)
                elif kind < 0.8:
                    f, bits = rnd.choice([
                        ("head_start", 32), ("head_count", 32),
                        ("replica_ordinal", 32), ("replica_count", 32)])
                    target = rnd.choice(req.placement.parts)
                elif kind < 0.9:
                    f, bits = rnd.choice([
                        ("itemsize", 32), ("page_size", 32),
                        ("total_kv_heads", 32), ("key_head_dim", 32),
                        ("value_head_dim", 32)])
                    target = req.placement.descriptor
                else:
                    f, bits = rnd.choice([
                        ("max_operations", 64), ("max_bytes", 64),
                        ("max_batch_operations", 64),
                        ("max_batch_bytes", 64), ("max_ranges", 64),
                        ("max_validation_work", 64)])
                    target = req.limits
                what.append(self.mutate(rnd, target, f, bits))
            with self.subTest(iteration=it, mutations=what):
                try:
                    resp = self.planner.PlanLoad(req, timeout=20)
                except grpc.RpcError as err:
                    outcomes[err.code()] = outcomes.get(err.code(), 0) + 1
                    self.assertIn(err.code(), self.ALLOWED, err.details())
                    self.assertRegex(err.details() or "",
                                     r"^[a-z_]+(\[\d+\])?[.:\[ ]")
                    continue
                outcomes[Code.OK] = outcomes.get(Code.OK, 0) + 1
                sizes = {g.region_id: g.nbytes for g in req.binding.regions}
                if max(sizes.values()) < (64 << 20):
                    limits = req.limits if req.HasField("limits") else None
                    self.verify(resp, req.placement.descriptor,
                                e.Binding(req.binding, sizes), keys, limits)
            self.assertTrue(self.daemon.alive(), self.daemon.log_text())
        e.log("mutation outcomes:", outcomes)
        self.assertGreater(outcomes.get(Code.OK, 0), 0)
        self.assertGreater(outcomes.get(Code.INVALID_ARGUMENT, 0), 0)
        self.assertServing()

    def test_mutated_manifests(self):
        rnd = random.Random(7)
        for it in range(200):
            m = golden_manifest()
            kind = rnd.random()
            if kind < 0.5:
                f = rnd.choice(["itemsize", "page_size", "total_kv_heads",
                                "key_head_dim", "value_head_dim"])
                what = self.mutate(rnd, m.layout.descriptor, f, 32)
            elif kind < 0.9:
                shard = rnd.choice(m.layout.shards)
                f = rnd.choice(["head_start", "head_count"])
                what = self.mutate(rnd, shard, f, 32)
            else:
                m.layout.shards[0].layer_ids.append(rnd.choice(EXTREMES)
                                                    & 0xffffffff)
                what = "layer_ids %r" % list(m.layout.shards[0].layer_ids)
            with self.subTest(iteration=it, mutation=what):
                err = e.rpc_error(self.planner.PublishManifest,
                                  pb.PublishManifestRequest(manifest=m),
                                  timeout=10)
                if err is not None:
                    self.assertIn(err.code(), self.ALLOWED, err.details())
                    self.assertIn("manifest", err.details() or "")
        self.assertServing()

    def test_concurrent_plans(self):
        """Clients on several connections plan different layouts, readers
        and bindings at once (shared caches and join templates); every plan
        passes the oracle."""
        desc = e.make_descriptor(8, 8, 16, 8, 16)
        sources = []
        for fmt_name, fmt in e.FORMATS.items():
            for wt in [(1, 1, 1), (1, 2, 4), (1, 1, 8)]:
                name = "conc-%s-%d%d%d" % ((fmt_name,) + wt)
                pub, _ = self.writer_manifest(name, desc, wt, fmt,
                                              model_id="concurrent")
                keys = ["%s-%d" % (name, i) for i in range(3)]
                self.fleet.register(pub.manifest_key, keys)
                sources.append((pub, keys))
        readers = [e.make_placement(desc, *rt, prefix="conc-r%d%d%d" % rt)
                   for rt in [(1, 1, 2), (1, 2, 2), (1, 4, 8), (1, 1, 16)]]
        failures, done = [], [0]
        lock = threading.Lock()

        def worker(seed):
            rnd = random.Random(seed)
            channel = self.daemon.channel()
            fleet = e.Fleet(e.Planner(channel))
            try:
                for it in range(40):
                    pub, keys = rnd.choice(sources)
                    reader = rnd.choice(readers)
                    part = rnd.choice(reader.parts)
                    kw = rnd.choice([dict(block=4), dict(mode="contiguous"),
                                     dict(block=8, order="HND", pad=True)])
                    binding = e.make_binding(desc, part, 3, seed=it, **kw)
                    try:
                        resp = fleet.plan(pub.model_domain, keys, reader,
                                          binding)
                        e.verify_plan(resp, self.fleet.store, desc, binding,
                                      keys)
                        with lock:
                            done[0] += 1
                    except (grpc.RpcError, e.PlanCheckError) as exc:
                        with lock:
                            failures.append("%s %s: %s" % (
                                pub.layout_id[:15], part.participant_id,
                                exc))
            finally:
                channel.close()

        threads = [threading.Thread(target=worker, args=(seed,))
                   for seed in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertEqual(failures, [])
        self.assertEqual(done[0], 4 * 40)
        self.assertServing()


if __name__ == "__main__":
    unittest.main()
