"""End-to-end tests of reshardd with stock Python grpcio: identities, the
catalog, errors and the server's caps.

Every test talks to a real daemon started on 127.0.0.1:0 with the memory
catalog. Plans are executed byte for byte against Parts built from the SPEC
§1.3 formulas and checked with the SPEC §2.4 oracle (reshard_e2e.py). The
other grpcio tests are test_grpcio_plans.py (the SPEC §6 scenarios and the
format x topology x binding matrix), test_grpcio_robustness.py (mutated
requests, concurrent plans) and test_grpcio_lifecycle.py (configuration
errors, drain and exit); what they share is reshard_testcase.py.

Run through ctest (tests/e2e/CMakeLists.txt sets the environment), or by
hand from this directory:
  RESHARD_E2E_DAEMON=.../reshardd RESHARD_E2E_PYGEN=.../pygen \
      /usr/bin/python3 -m unittest -v test_grpcio
"""

import unittest

import reshard_e2e as e
from reshard_e2e import pb
from reshard_testcase import (GOLDEN_LAYOUT_ID, GOLDEN_MODEL_DOMAIN,
                              GOLDEN_PLACEMENT_ID, Code, DaemonTestCase,
                              big_plan_request, golden_manifest,
                              golden_placement)


class IdentityTests(DaemonTestCase):
    """SPEC §1.6: the daemon's identities equal the reference's."""

    def test_golden_manifest(self):
        m = golden_manifest()
        pub = self.planner.PublishManifest(
            pb.PublishManifestRequest(manifest=m), timeout=10)
        self.assertEqual(pub.layout_id, GOLDEN_LAYOUT_ID)
        self.assertEqual(pub.model_domain, GOLDEN_MODEL_DOMAIN)
        self.assertEqual(pub.manifest_key, e.canonical_manifest_key(m))
        self.assertEqual(pub.manifest_key,
                         "kv/%s/manifests/%s" % (GOLDEN_MODEL_DOMAIN,
                                                 GOLDEN_LAYOUT_ID[7:]))
        again = self.planner.PublishManifest(
            pb.PublishManifestRequest(manifest=m), timeout=10)
        self.assertFalse(again.created)
        self.assertEqual(again.manifest_key, pub.manifest_key)
        got = self.planner.GetManifest(
            pb.GetManifestRequest(manifest_key=pub.manifest_key), timeout=10)
        self.assertEqual(got.layout_id, GOLDEN_LAYOUT_ID)
        self.assertEqual(got.model_domain, GOLDEN_MODEL_DOMAIN)
        self.assertEqual(e.canonical_layout_id(got.manifest.layout),
                         GOLDEN_LAYOUT_ID)
        self.assertEqual(got.manifest.namespace, "ns")

    def test_golden_placement(self):
        resp = self.planner.RegisterPlacement(
            pb.RegisterPlacementRequest(placement=golden_placement()),
            timeout=10)
        self.assertEqual(resp.placement_id, GOLDEN_PLACEMENT_ID)
        self.assertEqual(e.canonical_placement_id(golden_placement()),
                         GOLDEN_PLACEMENT_ID)

    def test_plan_upload_reproduces_the_golden_layout(self):
        desc = golden_manifest().layout.descriptor
        writer = e.make_placement(desc, 1, 1, 2, "golden-w")
        resp = self.planner.PlanUpload(
            pb.PlanUploadRequest(placement=writer, format=pb.LPHD),
            timeout=10)
        self.assertEqual(resp.layout_id, GOLDEN_LAYOUT_ID)
        self.assertEqual(list(resp.part_writers),
                         ["golden-w-d0p0t0", "golden-w-d0p0t1"])
        self.assertEqual([s.key_suffix for s in resp.layout.shards],
                         ["0", "1"])

    def test_plan_upload_pp_suffixes(self):
        desc = e.make_descriptor(4, 4, 8, 8, 16)
        writer = e.make_placement(desc, 1, 2, 2, "pp-w")
        resp = self.planner.PlanUpload(
            pb.PlanUploadRequest(placement=writer, format=pb.HPLD),
            timeout=10)
        self.assertEqual(sorted(s.key_suffix for s in resp.layout.shards),
                         ["0_0", "0_1", "1_0", "1_1"])
        self.assertEqual(resp.layout_id, e.canonical_layout_id(resp.layout))

    def test_many_placement_ids(self):
        desc = e.make_descriptor([5, 6, 7, 9], 4, 8, 4, 8)
        for topo in [(1, 1, 1), (1, 2, 2), (2, 1, 8), (1, 4, 4), (3, 1, 2)]:
            pl = e.make_placement(desc, *topo, prefix="ids")
            with self.subTest(topology=topo):
                resp = self.planner.RegisterPlacement(
                    pb.RegisterPlacementRequest(placement=pl), timeout=10)
                self.assertEqual(resp.placement_id,
                                 e.canonical_placement_id(pl))


class CatalogTests(DaemonTestCase):
    """Page bindings, source selection, placement ids, batching."""

    desc = e.make_descriptor(4, 4, 8, 8, 8)

    def setUp(self):
        self.pub, self.up = self.writer_manifest(
            "cat-" + self._testMethodName, self.desc, (1, 1, 2), pb.LPHD,
            model_id="catalog")
        self.reader = e.make_placement(self.desc, 1, 2, 2, "cat-r")
        self.part = self.reader.parts[3]

    def keys(self, n, tag=None):
        return ["%s-%d" % (tag or self._testMethodName, i) for i in range(n)]

    def test_register_is_idempotent(self):
        keys = self.keys(3)
        self.assertEqual(self.fleet.register(self.pub.manifest_key, keys), 3)
        self.assertEqual(self.fleet.register(self.pub.manifest_key, keys), 0)
        self.assertEqual(
            self.fleet.register(self.pub.manifest_key, keys + ["x-new"]), 1)

    def test_hit_prefix(self):
        keys = self.keys(4)
        self.fleet.register(self.pub.manifest_key, keys[:2] + keys[3:])
        binding = e.make_binding(self.desc, self.part, 4, block=4)
        resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                               binding)
        self.assertEqual(resp.hit_pages, 2)
        self.assertEqual([p.page_key for p in resp.pages], keys[:2])
        self.assertEqual({p.manifest_key for p in resp.pages},
                         {self.pub.manifest_key})
        self.verify(resp, self.desc, binding, keys)

    def test_first_page_miss_plans_nothing(self):
        keys = self.keys(2)
        self.fleet.register(self.pub.manifest_key, keys[1:])
        binding = e.make_binding(self.desc, self.part, 2)
        resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                               binding)
        self.assertEqual(resp.hit_pages, 0)
        self.assertEqual(len(resp.batches), 0)
        self.assertEqual(resp.stats.operations, 0)

    def test_forget_pages(self):
        keys = self.keys(3)
        self.fleet.register(self.pub.manifest_key, keys)
        removed = self.planner.ForgetPages(pb.ForgetPagesRequest(
            model_domain=self.pub.model_domain, page_keys=keys[1:2]),
            timeout=10).removed
        self.assertEqual(removed, 1)
        again = self.planner.ForgetPages(pb.ForgetPagesRequest(
            model_domain=self.pub.model_domain, page_keys=keys[1:2]),
            timeout=10).removed
        self.assertEqual(again, 0)
        binding = e.make_binding(self.desc, self.part, 3)
        resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                               binding)
        self.assertEqual(resp.hit_pages, 1)
        self.verify(resp, self.desc, binding, keys)
        # Forgetting one manifest's binding only.
        removed = self.planner.ForgetPages(pb.ForgetPagesRequest(
            model_domain=self.pub.model_domain, page_keys=keys[:1],
            manifest_key=self.pub.manifest_key), timeout=10).removed
        self.assertEqual(removed, 1)
        resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                               binding)
        self.assertEqual(resp.hit_pages, 0)

    def test_layout_choice_and_preference(self):
        other, _ = self.writer_manifest("cat-other", self.desc, (1, 1, 1),
                                        pb.HPLD, model_id="catalog")
        self.assertEqual(other.model_domain, self.pub.model_domain)
        keys = self.keys(2)
        self.fleet.register(self.pub.manifest_key, keys)
        self.fleet.register(other.manifest_key, keys)
        binding = e.make_binding(self.desc, self.part, 2, block=8)
        ops = {}
        for lid in (self.pub.layout_id, other.layout_id):
            resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                                   binding, preferred=[lid])
            self.assertEqual([p.layout_id for p in resp.pages], [lid, lid])
            self.verify(resp, self.desc, binding, keys)
            ops[lid] = resp.stats.operations
        best = min(ops, key=lambda lid: (ops[lid], lid))
        resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                               binding)
        self.assertEqual([p.layout_id for p in resp.pages], [best, best],
                         "operations per layout: %r" % ops)
        self.verify(resp, self.desc, binding, keys)

    def test_pages_of_alternating_manifests(self):
        """Each page is planned from its own manifest when consecutive
        pages name different ones (daemon/rpc/plan_load_pages.c compares
        a page's manifest keys with the page before it): pages bound to
        two writers of other formats, in turn, and a page bound to both
        between them."""
        other, _ = self.writer_manifest("alt-other", self.desc, (2, 1, 1),
                                        pb.HPLD, model_id="catalog")
        self.assertEqual(other.model_domain, self.pub.model_domain)
        keys = self.keys(5)
        self.fleet.register(self.pub.manifest_key, keys[0::2])
        self.fleet.register(other.manifest_key, keys[1::2])
        binding = e.make_binding(self.desc, self.part, 5, block=8)
        resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                               binding)
        self.assertEqual(resp.hit_pages, 5)
        self.assertEqual([p.layout_id for p in resp.pages],
                         [self.pub.layout_id, other.layout_id] * 2 +
                         [self.pub.layout_id])
        self.verify(resp, self.desc, binding, keys)
        # Page 2 bound to both: its keys differ in count from its
        # neighbours'; the plan takes one of them and stays exact.
        self.fleet.register(other.manifest_key, keys[2:3])
        resp = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                               binding)
        self.assertEqual(resp.hit_pages, 5)
        self.assertEqual([p.layout_id for i, p in enumerate(resp.pages)
                          if i != 2],
                         [self.pub.layout_id, other.layout_id,
                          other.layout_id, self.pub.layout_id])
        self.verify(resp, self.desc, binding, keys)

    def test_placement_id_equals_inline(self):
        keys = self.keys(2)
        self.fleet.register(self.pub.manifest_key, keys)
        pid = self.planner.RegisterPlacement(
            pb.RegisterPlacementRequest(placement=self.reader),
            timeout=10).placement_id
        self.assertEqual(pid, e.canonical_placement_id(self.reader))
        binding = e.make_binding(self.desc, self.part, 2, block=4)
        inline = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                                 binding)
        by_id = self.fleet.plan(self.pub.model_domain, keys, None, binding,
                                placement_id=pid)
        self.assertEqual(by_id.placement_id, pid)
        self.assertEqual(inline.placement_id, pid)
        self.assertEqual(list(by_id.batches), list(inline.batches))
        self.verify(by_id, self.desc, binding, keys)

    def test_repeated_inline_targets_plan_the_same(self):
        """The daemon keeps inline placements and bindings by their bytes
        (docs/performance.md): repeats, new page keys with the same memory,
        another page count and other limits all plan as from scratch, and a
        binding broken after its good twin was kept is still refused."""
        keys = self.keys(4)
        self.fleet.register(self.pub.manifest_key, keys)
        binding = e.make_binding(self.desc, self.part, 2, mode="contiguous")
        first = self.fleet.plan(self.pub.model_domain, keys[:2], self.reader,
                                binding)
        for _ in range(3):
            again = self.fleet.plan(self.pub.model_domain, keys[:2],
                                    self.reader, binding)
            self.assertEqual(again.SerializeToString(),
                             first.SerializeToString())
        self.verify(first, self.desc, binding, keys[:2])
        moved = self.fleet.plan(self.pub.model_domain, keys[2:], self.reader,
                                binding)
        self.verify(moved, self.desc, binding, keys[2:])
        limits = pb.Limits(max_batch_operations=3)
        small = self.fleet.plan(self.pub.model_domain, keys[:2], self.reader,
                                binding, limits=limits)
        self.verify(small, self.desc, binding, keys[:2], limits)
        self.assertGreater(len(small.batches), len(first.batches))
        longer = e.make_binding(self.desc, self.part, 4, mode="contiguous")
        for _ in range(2):
            whole = self.fleet.plan(self.pub.model_domain, keys, self.reader,
                                    longer)
            self.verify(whole, self.desc, longer, keys)
        # Two pages' memory for four pages: the span is not tiled.
        self.assertRpcError(Code.INVALID_ARGUMENT, self.fleet.plan,
                            self.pub.model_domain, keys, self.reader, binding)
        broken = e.make_binding(self.desc, self.part, 2, mode="contiguous")
        broken.message.ranges[0].token_stride_bytes = 1
        details = self.assertRpcError(Code.INVALID_ARGUMENT, self.fleet.plan,
                                      self.pub.model_domain, keys[:2],
                                      self.reader, broken)
        self.assertIn("binding.ranges[0]", details)

    def test_small_batches(self):
        keys = self.keys(3)
        self.fleet.register(self.pub.manifest_key, keys)
        binding = e.make_binding(self.desc, self.part, 3, block=4, pad=True)
        for ops, nbytes in [(5, 0), (0, 200), (7, 100), (1, 16), (3, 48)]:
            limits = pb.Limits(max_batch_operations=ops,
                               max_batch_bytes=nbytes)
            with self.subTest(max_batch_operations=ops,
                              max_batch_bytes=nbytes):
                resp = self.fleet.plan(self.pub.model_domain, keys,
                                       self.reader, binding, limits=limits)
                self.assertGreater(len(resp.batches), 1)
                self.verify(resp, self.desc, binding, keys, limits)

    def test_health_services(self):
        self.assertEqual(self.planner.health(""), e.SERVING)
        self.assertEqual(self.planner.health(e.PLANNER_SERVICE), e.SERVING)
        self.assertRpcError(Code.NOT_FOUND, self.planner.health,
                            "no.such.Service")


class ErrorTests(DaemonTestCase):
    """SPEC §3.4: every provokable status, and the daemon keeps serving."""

    desc = e.make_descriptor(4, 4, 8, 8, 8)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        writer = e.make_placement(cls.desc, 1, 1, 2, "err-w")
        cls.pub, _ = cls.fleet.publish_writer(writer, pb.PLHD,
                                              model_id="errors")
        cls.keys = ["err-%d" % i for i in range(3)]
        cls.fleet.register(cls.pub.manifest_key, cls.keys)
        cls.reader = e.make_placement(cls.desc, 1, 1, 2, "err-r")
        cls.part = cls.reader.parts[1]

    def tearDown(self):
        self.assertServing()

    def good_request(self, **binding_kwargs):
        binding = e.make_binding(self.desc, self.part, len(self.keys),
                                 **binding_kwargs)
        req = pb.PlanLoadRequest(model_domain=self.pub.model_domain,
                                 page_keys=self.keys, placement=self.reader,
                                 binding=binding.message)
        return req, binding

    def test_good_request_works(self):
        req, binding = self.good_request()
        resp = self.planner.PlanLoad(req, timeout=10)
        self.verify(resp, self.desc, binding, self.keys)

    def test_malformed_bytes(self):
        for name in e.PLANNER_METHODS:
            for junk in (b"\xff\xff\xff\xff\xff", b"\x0a\x05ab",
                         b"\x12\x80"):
                with self.subTest(method=name, junk=junk):
                    self.assertRpcError(Code.INVALID_ARGUMENT,
                                        self.planner.raw(name), junk,
                                        timeout=10)

    def test_bad_manifest_field_is_named(self):
        m = golden_manifest()
        m.layout.descriptor.itemsize = 0
        details = self.assertRpcError(
            Code.INVALID_ARGUMENT, self.planner.PublishManifest,
            pb.PublishManifestRequest(manifest=m), timeout=10)
        self.assertIn("itemsize", details)
        m = golden_manifest()
        m.layout.shards[0].head_count = 1  # heads 3 uncovered
        details = self.assertRpcError(
            Code.INVALID_ARGUMENT, self.planner.PublishManifest,
            pb.PublishManifestRequest(manifest=m), timeout=10)
        self.assertIn("shards", details)
        m = golden_manifest()
        m.namespace = ""
        details = self.assertRpcError(
            Code.INVALID_ARGUMENT, self.planner.PublishManifest,
            pb.PublishManifestRequest(manifest=m), timeout=10)
        self.assertIn("namespace", details)
        self.assertRpcError(Code.INVALID_ARGUMENT,
                            self.planner.PublishManifest,
                            pb.PublishManifestRequest(), timeout=10)

    def test_bad_binding_field_is_named(self):
        req, _ = self.good_request(mode="contiguous")
        req.binding.ranges[3].token_stride_bytes = 2
        details = self.assertRpcError(Code.INVALID_ARGUMENT,
                                      self.planner.PlanLoad, req, timeout=10)
        self.assertIn("binding.ranges[3]", details)
        self.assertIn("token_stride_bytes", details)

        req, _ = self.good_request()
        del req.binding.ranges[0]  # a hole in the coverage
        details = self.assertRpcError(Code.INVALID_ARGUMENT,
                                      self.planner.PlanLoad, req, timeout=10)
        self.assertIn("binding", details)

        req, _ = self.good_request()
        req.binding.ranges[0].region_id = "nowhere"
        details = self.assertRpcError(Code.INVALID_ARGUMENT,
                                      self.planner.PlanLoad, req, timeout=10)
        self.assertIn("binding.ranges", details)

        req, _ = self.good_request()
        first = req.binding.ranges[0]
        other = next(r for r in req.binding.ranges[1:]
                     if r.region_id == first.region_id
                     and r.component == first.component)
        other.offset_bytes = first.offset_bytes  # two values share bytes
        self.assertRpcError(Code.INVALID_ARGUMENT, self.planner.PlanLoad,
                            req, timeout=10)

        req, _ = self.good_request()
        req.binding.participant_id = "not-a-participant"
        self.assertRpcError(Code.INVALID_ARGUMENT, self.planner.PlanLoad,
                            req, timeout=10)

    def test_bad_placement_field_is_named(self):
        pl = e.make_placement(self.desc, 1, 1, 2, "bad")
        pl.parts[1].rank.tp = 5
        details = self.assertRpcError(
            Code.INVALID_ARGUMENT, self.planner.RegisterPlacement,
            pb.RegisterPlacementRequest(placement=pl), timeout=10)
        self.assertIn("parts", details)
        pl = e.make_placement(self.desc, 1, 1, 2, "bad")
        pl.parts[1].head_start = 1  # overlapping, not a replica set
        self.assertRpcError(Code.INVALID_ARGUMENT,
                            self.planner.RegisterPlacement,
                            pb.RegisterPlacementRequest(placement=pl),
                            timeout=10)
        self.assertRpcError(Code.INVALID_ARGUMENT, self.planner.PlanUpload,
                            pb.PlanUploadRequest(placement=pl,
                                                 format=pb.LPHD), timeout=10)

    def test_dp_rank_outside_the_placement(self):
        req, _ = self.good_request()
        req.target_dp_rank.value = 1  # the reader has DP rank 0 only
        self.assertRpcError(Code.INVALID_ARGUMENT, self.planner.PlanLoad,
                            req, timeout=10)
        writer = e.make_placement(self.desc, 2, 1, 2, "dp-w", dp_ranks=[1])
        up = pb.PlanUploadRequest(placement=writer, format=pb.LPHD)
        up.dp_rank.value = 0
        self.assertRpcError(Code.INVALID_ARGUMENT, self.planner.PlanUpload,
                            up, timeout=10)
        up.dp_rank.value = 1
        self.assertEqual(len(self.planner.PlanUpload(up, timeout=10)
                             .layout.shards), 2)

    def test_missing_target(self):
        req, _ = self.good_request()
        req.ClearField("placement")
        self.assertRpcError(Code.INVALID_ARGUMENT, self.planner.PlanLoad,
                            req, timeout=10)

    def test_not_found(self):
        missing = "kv/%s/manifests/%s" % ("0" * 64, "1" * 64)
        self.assertRpcError(Code.NOT_FOUND, self.planner.GetManifest,
                            pb.GetManifestRequest(manifest_key=missing),
                            timeout=10)
        self.assertRpcError(Code.NOT_FOUND, self.planner.RegisterPages,
                            pb.RegisterPagesRequest(manifest_key=missing,
                                                    page_keys=["a"]),
                            timeout=10)
        req, _ = self.good_request()
        req.placement_id = "sha256:" + "2" * 64
        self.assertRpcError(Code.NOT_FOUND, self.planner.PlanLoad, req,
                            timeout=10)
        req, _ = self.good_request()
        req.model_domain = "3" * 64
        self.assertRpcError(Code.NOT_FOUND, self.planner.PlanLoad, req,
                            timeout=10)

    def test_descriptor_mismatch(self):
        cases = [
            ("dtype", dict(dtype="fp8", itemsize=1)),
            ("page_size", dict(page_size=16)),
            ("key_head_dim", dict(key_dim=16)),
            ("value_head_dim", dict(value_dim=4)),
        ]
        for field, change in cases:
            kw = dict(layers=4, heads=4, key_dim=8, value_dim=8, page_size=8)
            kw.update(change)
            desc = e.make_descriptor(**kw)
            reader = e.make_placement(desc, 1, 1, 2, "mismatch")
            binding = e.make_binding(desc, reader.parts[0], len(self.keys))
            req = pb.PlanLoadRequest(model_domain=self.pub.model_domain,
                                     page_keys=self.keys, placement=reader,
                                     binding=binding.message)
            with self.subTest(field=field):
                details = self.assertRpcError(Code.FAILED_PRECONDITION,
                                              self.planner.PlanLoad, req,
                                              timeout=10)
                self.assertIn(field, details)

    def test_request_limits(self):
        cases = [
            ("max_operations", pb.Limits(max_operations=1)),
            ("max_bytes", pb.Limits(max_bytes=1)),
            ("max_ranges", pb.Limits(max_ranges=1)),
            ("max_validation_work", pb.Limits(max_validation_work=1)),
        ]
        for name, limits in cases:
            req, _ = self.good_request(block=4)
            req.limits.CopyFrom(limits)
            with self.subTest(limit=name):
                details = self.assertRpcError(Code.RESOURCE_EXHAUSTED,
                                              self.planner.PlanLoad, req,
                                              timeout=10)
                word = name[len("max_"):]
                self.assertIn(word, details.replace(" ", "_"))

    def test_deadline(self):
        # Tiny deadlines on a large plan: the deadline wins at least once
        # (the plan takes tens of milliseconds); a plan that wins the race
        # is fine; any other status is not.
        big = big_plan_request(self.fleet, "deadline")
        codes = []
        for timeout in (1e-6, 1e-5, 1e-4, 1e-3, 2e-3):
            err = e.rpc_error(self.planner.PlanLoad, big, timeout=timeout)
            codes.append(err.code() if err is not None else Code.OK)
            if err is not None:
                self.assertEqual(err.code(), Code.DEADLINE_EXCEEDED,
                                 err.details())
        self.assertIn(Code.DEADLINE_EXCEEDED, codes)
        resp = self.planner.PlanLoad(big, timeout=60)
        self.assertEqual(resp.hit_pages, 64)
        self.assertEqual(resp.stats.operations, 64 * 16 * 32 * 2 * 4)

    def test_unknown_method(self):
        call = self.channel.unary_unary("/reshard.v1.Planner/NoSuchMethod")
        self.assertRpcError(Code.UNIMPLEMENTED, call, b"", timeout=10)


class ServerCapTests(DaemonTestCase):
    """Caps set by daemon flags: requests may lower them, never raise them."""

    daemon_flags = ("--max-page-keys", "4", "--max-operations", "40",
                    "--max-ranges", "20", "--max-request-bytes", "64K")
    desc = e.make_descriptor(4, 4, 8, 8, 8)

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        # One writer shard holding every head: a contiguous NHD reader
        # needs one copy per page, layer and component.
        writer = e.make_placement(cls.desc, 1, 1, 1, "cap-w")
        cls.pub, _ = cls.fleet.publish_writer(writer, pb.LPHD,
                                              model_id="caps")
        cls.keys = ["cap-%d" % i for i in range(5)]
        # RegisterPages is bound by --max-page-keys too.
        cls.fleet.register(cls.pub.manifest_key, cls.keys[:4])
        cls.fleet.register(cls.pub.manifest_key, cls.keys[4:])
        cls.reader = e.make_placement(cls.desc, 1, 1, 1, "cap-r")

    def tearDown(self):
        self.assertServing()

    def plan(self, pages, limits=None, **binding_kwargs):
        keys = self.keys[:pages]
        binding = e.make_binding(self.desc, self.reader.parts[0], pages,
                                 **binding_kwargs)
        return keys, binding, (lambda: self.fleet.plan(
            self.pub.model_domain, keys, self.reader, binding,
            limits=limits))

    def test_within_caps(self):
        # 4 pages x 4 layers x 2 components: 32 copies, 8 ranges.
        keys, binding, call = self.plan(4, mode="contiguous")
        resp = call()
        self.assertEqual(resp.stats.operations, 32)
        self.verify(resp, self.desc, binding, keys)

    def test_page_keys_cap(self):
        _, _, call = self.plan(5, mode="contiguous")
        details = self.assertRpcError(Code.RESOURCE_EXHAUSTED, call)
        self.assertIn("page", details)
        details = self.assertRpcError(
            Code.RESOURCE_EXHAUSTED, self.planner.RegisterPages,
            pb.RegisterPagesRequest(manifest_key=self.pub.manifest_key,
                                    page_keys=self.keys), timeout=10)
        self.assertIn("page", details)

    def test_operations_cap_clamps_the_request(self):
        # Padding forces one copy per token: 8 x 4 x 2 = 64 > 40 copies.
        _, _, call = self.plan(1, pb.Limits(max_operations=10 ** 12),
                               mode="contiguous", pad=True)
        details = self.assertRpcError(Code.RESOURCE_EXHAUSTED, call)
        self.assertIn("operations", details)

    def test_ranges_cap(self):
        # 3 pages x 4 layers x 2 components = 24 ranges > 20 (24 copies).
        _, _, call = self.plan(3, mode="paged", block=8)
        details = self.assertRpcError(Code.RESOURCE_EXHAUSTED, call)
        self.assertIn("ranges", details)

    def test_request_bytes_cap(self):
        keys = ["big-key-%d-%s" % (i, "x" * 40000) for i in range(2)]
        self.assertRpcError(
            Code.RESOURCE_EXHAUSTED, self.planner.RegisterPages,
            pb.RegisterPagesRequest(manifest_key=self.pub.manifest_key,
                                    page_keys=keys), timeout=10)

    def test_request_may_lower_a_cap(self):
        _, _, call = self.plan(4, pb.Limits(max_operations=31),
                               mode="contiguous")
        details = self.assertRpcError(Code.RESOURCE_EXHAUSTED, call)
        self.assertIn("operations", details)


if __name__ == "__main__":
    unittest.main()
