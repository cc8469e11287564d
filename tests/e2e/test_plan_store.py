"""End-to-end tests of PlanStore (SPEC §2.5) through a live reshardd.

Writers fill their memory with the values of the SPEC §2.4 oracle, ask
PlanStore where each byte goes, execute the plan into zeroed Part buffers
and compare them with the SPEC §1.3 Part bytes; then the pages are
registered and readers of another topology load them with PlanLoad from
the Parts the writers produced. Rejections come back with their codes.

Run through ctest, or by hand from this directory:
  RESHARD_E2E_DAEMON=.../reshardd RESHARD_E2E_PYGEN=.../pygen \\
      /usr/bin/python3 -m unittest -v test_plan_store
"""

import json
import os
import subprocess
import tempfile
import unittest

import grpc
from google.protobuf import json_format

import reshard_e2e as e
from reshard_e2e import pb
from reshard_testcase import DaemonTestCase

Code = grpc.StatusCode


class WrittenParts:
    """Parts as the writers' executed store plans produced them, served to
    readers in the shape reshard_e2e.execute_plan expects."""

    def __init__(self, layout, page_keys):
        self.layout = layout
        self.page_keys = page_keys
        self.count = len(e.canonical_shards(layout))
        self.data = {}  # (page_key, part) -> bytearray

    def parts(self, page_key, layout_id):
        return [bytes(self.data[(page_key, i)]) for i in range(self.count)]


def store_request(manifest_key, writer, binding, pages, **fields):
    req = pb.PlanStoreRequest(manifest_key=manifest_key,
                              binding=binding.message, page_count=pages,
                              operation_id="e2e-store", **fields)
    req.placement.CopyFrom(writer)
    return req


def execute_store(resp, memory, written, part_sizes):
    """Runs every copy (region bytes into Part bytes) and returns how many
    times each Part byte was written."""
    writes = {}
    # Runs, when the response has them, are expanded to their copies.
    for (_, page, part, po, region, ro, n) in e.plan_copies(resp):
        if part not in resp.part_indexes:
            raise AssertionError("copy into Part %d, not written by this "
                                 "participant" % part)
        src = memory[resp.region_ids[region]]
        key = (written.page_keys[page], part)
        dst = written.data.setdefault(key, bytearray(part_sizes[part]))
        count = writes.setdefault(key, bytearray(part_sizes[part]))
        if po + n > len(dst) or ro + n > len(src):
            raise AssertionError("copy leaves its Part or region")
        dst[po:po + n] = src[ro:ro + n]
        for b in range(po, po + n):
            count[b] += 1
    return writes


def check_runs(test, runs_resp, explicit_resp):
    """Each batch of a runs response is SPEC §2.2 step 7's fold of the
    same batch of the explicit response (reshard_e2e.reference_runs)."""
    test.assertEqual(len(runs_resp.batches), len(explicit_resp.batches))
    entries = 0
    for b, (folded, explicit) in enumerate(zip(runs_resp.batches,
                                               explicit_resp.batches)):
        copies = [c[:6] for c in e.batch_entries(explicit, b)]
        got = e.batch_entries(folded, b)
        test.assertEqual(got, e.reference_runs(copies), "batch %d" % b)
        test.assertEqual(folded.bytes, explicit.bytes)
        entries += len(got)
    test.assertEqual(runs_resp.stats.runs, entries)
    test.assertEqual(runs_resp.stats.operations,
                     explicit_resp.stats.operations)
    test.assertEqual(runs_resp.stats.bytes, explicit_resp.stats.bytes)


class PlanStoreTests(DaemonTestCase):
    daemon_flags = ("--log-level", "debug")  # the "store plan" lines

    def write_all(self, desc, writer, fmt, keys, mode="paged", order="NHD",
                  runs=False):
        """Every writer of the lowest DP rank stores its Parts (as strided
        runs when `runs`, each checked against the explicit plan); returns
        the publish response and the written Parts."""
        pub, up = self.fleet.publish_writer(writer, fmt)
        written = WrittenParts(up.layout, keys)
        expected = {k: e.build_parts(up.layout, k) for k in keys}
        sizes = [len(p) for p in expected[keys[0]]]
        dp = min(p.rank.dp for p in writer.parts)
        writers = 0
        for part in writer.parts:
            if part.rank.dp != dp:
                continue
            binding = e.make_binding(desc, part, len(keys), mode=mode,
                                     order=order, seed=writers)
            memory, _ = e.expected_regions(desc, binding, keys, len(keys))
            resp = self.planner.PlanStore(
                store_request(pub.manifest_key, writer, binding, len(keys),
                              runs=runs), timeout=60)
            self.assertEqual(resp.layout_id, pub.layout_id)
            if runs:
                explicit = self.planner.PlanStore(
                    store_request(pub.manifest_key, writer, binding,
                                  len(keys)), timeout=60)
                self.assertFalse(e.has_runs(explicit))
                self.assertEqual(e.has_runs(resp), len(resp.batches) > 0)
                check_runs(self, resp, explicit)
            writes = execute_store(resp, memory, written, sizes)
            if part.replica_ordinal != 0 or not part.layer_ids:
                self.assertEqual(list(resp.part_indexes), [])
                self.assertEqual(len(resp.batches), 0)
                continue
            self.assertEqual(len(resp.part_indexes), 1)
            index = resp.part_indexes[0]
            self.assertEqual(up.part_writers[index], part.participant_id)
            for k in keys:
                self.assertEqual(bytes(written.data[(k, index)]),
                                 expected[k][index],
                                 "page %s Part %d of %s" %
                                 (k, index, part.participant_id))
                self.assertTrue(all(c == 1 for c in writes[(k, index)]))
            writers += 1
        self.assertEqual(writers, len(up.layout.shards))
        return pub, written

    def read_all(self, desc, reader, pub, written, keys):
        self.fleet.register(pub.manifest_key, keys)
        for part in reader.parts:
            if not part.layer_ids:
                continue
            binding = e.make_binding(desc, part, len(keys), mode="paged")
            resp = self.fleet.plan(pub.model_domain, keys, reader, binding)
            self.assertEqual(resp.hit_pages, len(keys))
            actual = e.execute_plan(resp, written, binding.region_sizes)
            want, _ = e.expected_regions(desc, binding, keys, len(keys))
            self.assertIsNone(e.describe_mismatch(actual, want, binding,
                                                  desc), part.participant_id)

    def test_write_then_read_every_format(self):
        desc = e.make_descriptor(6, 4, 8, 8, 8)
        cases = [(pb.PLHD, (1, 1, 1), (1, 1, 2)),
                 (pb.LPHD, (1, 2, 4), (1, 3, 2)),
                 (pb.HPLD, (2, 1, 8), (1, 2, 1))]
        for fmt, (wd, wp, wt), (rd, rp, rt) in cases:
            with self.subTest(format=fmt):
                model = "store-%d" % fmt
                writer = e.make_placement(desc, wd, wp, wt, model + "-w")
                keys = ["%s-%d" % (model, i) for i in range(3)]
                pub, written = self.write_all(desc, writer, fmt, keys)
                reader = e.make_placement(desc, rd, rp, rt, model + "-r")
                self.read_all(desc, reader, pub, written, keys)

    def test_contiguous_and_hnd_writer_memory(self):
        desc = e.make_descriptor(4, 2, 8, 0, 4)  # single tensor too
        writer = e.make_placement(desc, 1, 2, 2, "store-mem-w")
        keys = ["store-mem-%d" % i for i in range(2)]
        self.write_all(desc, writer, pb.LPHD, keys, mode="contiguous")
        self.write_all(desc, writer, pb.HPLD, keys, order="HND")

    def test_runs_write_the_same_parts(self):
        # SPEC §2.5: PlanStore folds into runs on request, like PlanLoad;
        # the Parts written from the runs are the §1.3 Parts and a reader
        # of another topology loads them.
        desc = e.make_descriptor(4, 4, 8, 8, 8)
        cases = [(pb.PLHD, "paged", "NHD"), (pb.LPHD, "contiguous", "NHD"),
                 (pb.HPLD, "paged", "HND")]
        for fmt, mode, order in cases:
            with self.subTest(format=fmt, mode=mode, order=order):
                model = "store-runs-%d" % fmt
                writer = e.make_placement(desc, 1, 2, 2, model + "-w")
                keys = ["%s-%d" % (model, i) for i in range(3)]
                pub, written = self.write_all(desc, writer, fmt, keys,
                                              mode=mode, order=order,
                                              runs=True)
                reader = e.make_placement(desc, 1, 1, 4, model + "-r")
                self.read_all(desc, reader, pub, written, keys)

    def test_placement_by_id_and_join_reuse(self):
        desc = e.make_descriptor(2, 2, 4, 4, 4)
        writer = e.make_placement(desc, 1, 1, 2, "store-id-w")
        pub, _ = self.fleet.publish_writer(writer, pb.PLHD)
        pid = self.planner.RegisterPlacement(
            pb.RegisterPlacementRequest(placement=writer)).placement_id
        binding = e.make_binding(desc, writer.parts[0], 2)
        inline = self.planner.PlanStore(
            store_request(pub.manifest_key, writer, binding, 2))
        req = pb.PlanStoreRequest(manifest_key=pub.manifest_key,
                                  placement_id=pid, binding=binding.message,
                                  page_count=2)
        for _ in range(2):
            by_id = self.planner.PlanStore(req)
            self.assertEqual(by_id, inline)
        # Inline and by id share the placement_id, so the join built by the
        # first call serves the other two.
        lines = self.daemon.wait_log_lines(
            lambda l: "store plan" in l and "store-id-w" in l, 3)
        self.assertEqual(len(lines), 3, lines)
        self.assertIn("join_hits=0", lines[0])
        self.assertIn("join_hits=1", lines[1])
        self.assertIn("join_hits=1", lines[2])
        self.assertIn("code=OK", lines[2])

    def test_rejections(self):
        desc = e.make_descriptor(2, 2, 4, 4, 4)
        writer = e.make_placement(desc, 1, 1, 2, "store-bad-w")
        pub, _ = self.fleet.publish_writer(writer, pb.PLHD)
        part = writer.parts[0]
        good = e.make_binding(desc, part, 2)

        def call(binding=good, key=pub.manifest_key, **fields):
            return self.planner.PlanStore(
                store_request(key, writer, binding, 2, **fields))

        hole = e.make_binding(desc, part, 2)
        hole.message.ranges[0].token_count -= 1
        msg = self.assertRpcError(Code.INVALID_ARGUMENT, call, hole)
        self.assertIn("is not bound", msg)

        overlap = e.make_binding(desc, part, 2)
        overlap.message.ranges[1].offset_bytes = \
            overlap.message.ranges[0].offset_bytes
        overlap.message.ranges[1].region_id = \
            overlap.message.ranges[0].region_id
        self.assertRpcError(Code.INVALID_ARGUMENT, call, overlap)

        unowned = e.make_binding(desc, part, 2)
        extra = unowned.message.ranges.add()
        extra.CopyFrom(unowned.message.ranges[0])
        extra.global_layer_id = 9
        msg = self.assertRpcError(Code.INVALID_ARGUMENT, call, unowned)
        self.assertIn("binding.ranges", msg)

        unknown = pub.manifest_key[:-4] + "0000"
        msg = self.assertRpcError(Code.NOT_FOUND, call, key=unknown)
        self.assertIn("manifest_key", msg)
        self.assertRpcError(Code.INVALID_ARGUMENT, call, key="kv/nope")

        req = store_request(pub.manifest_key, writer, good, 0)
        self.assertRpcError(Code.INVALID_ARGUMENT, self.planner.PlanStore, req)

        req = pb.PlanStoreRequest(manifest_key=pub.manifest_key,
                                  placement_id="sha256:" + "0" * 64,
                                  binding=good.message, page_count=1)
        self.assertRpcError(Code.NOT_FOUND, self.planner.PlanStore, req)

        other = e.make_placement(e.make_descriptor(2, 2, 4, 4, 8), 1, 1, 2,
                                 "store-bad-w")
        binding = e.make_binding(other.descriptor, other.parts[0], 1)
        req = store_request(pub.manifest_key, other, binding, 1)
        self.assertRpcError(Code.FAILED_PRECONDITION, self.planner.PlanStore,
                            req)
        self.assertServing()

    def test_participant_that_writes_nothing_gets_an_empty_plan(self):
        desc = e.make_descriptor(2, 2, 4, 4, 4)
        writer = e.make_placement(desc, 1, 1, 4, "store-rep-w")  # 2 replicas
        pub, _ = self.fleet.publish_writer(writer, pb.PLHD)
        replica = next(p for p in writer.parts if p.replica_ordinal == 1)
        binding = e.make_binding(desc, replica, 2)
        resp = self.planner.PlanStore(
            store_request(pub.manifest_key, writer, binding, 2))
        self.assertEqual(list(resp.part_indexes), [])
        self.assertEqual(len(resp.batches), 0)
        self.assertEqual(resp.stats.operations, 0)
        self.assertEqual(resp.layout_id, pub.layout_id)

    def test_reshardctl_plan_store(self):
        if not e.RESHARDCTL or not os.access(e.RESHARDCTL, os.X_OK):
            self.skipTest("RESHARD_E2E_RESHARDCTL is not set")
        desc = e.make_descriptor(2, 2, 4, 4, 4)
        writer = e.make_placement(desc, 1, 1, 2, "store-ctl-w")
        pub, _ = self.fleet.publish_writer(writer, pb.LPHD)
        binding = e.make_binding(desc, writer.parts[1], 2, mode="contiguous")
        req = store_request(pub.manifest_key, writer, binding, 2)
        want = self.planner.PlanStore(req)
        with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
            json.dump(json_format.MessageToDict(
                req, preserving_proto_field_name=True), f)
            f.flush()
            proc = subprocess.run(
                [e.RESHARDCTL, "--target", self.daemon.target, "plan-store",
                 f.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        doc = json.loads(proc.stdout)
        self.assertEqual(doc["layout_id"], pub.layout_id)
        self.assertEqual(doc["part_indexes"], list(want.part_indexes))
        got = [[int(v) for v in b["nbytes"]] for b in doc["batches"]]
        self.assertEqual(got, [list(b.nbytes) for b in want.batches])
        got = [[int(v) for v in b["part_offset"]] for b in doc["batches"]]
        self.assertEqual(got, [list(b.part_offset) for b in want.batches])


class PlanStoreCatalogTests(unittest.TestCase):
    """A manifest the daemon has not cached comes from the catalog: publish
    on one daemon, PlanStore on the next one over the same LMDB file."""

    def test_manifest_from_the_catalog(self):
        desc = e.make_descriptor(2, 2, 4, 4, 4)
        writer = e.make_placement(desc, 1, 1, 2, "store-cat-w")
        binding = e.make_binding(desc, writer.parts[0], 2)
        with tempfile.TemporaryDirectory(prefix="reshard-store-") as tmp:
            catalog = "lmdb:" + os.path.join(tmp, "catalog")
            with e.Daemon(catalog=catalog) as daemon:
                channel = daemon.channel()
                pub, _ = e.Fleet(e.Planner(channel)).publish_writer(
                    writer, pb.HPLD)
                first = e.Planner(channel).PlanStore(
                    store_request(pub.manifest_key, writer, binding, 2))
                channel.close()
            with e.Daemon(catalog=catalog) as daemon:
                channel = daemon.channel()
                again = e.Planner(channel).PlanStore(
                    store_request(pub.manifest_key, writer, binding, 2))
                channel.close()
        self.assertEqual(again, first)
        self.assertEqual(list(again.part_indexes), [0])


if __name__ == "__main__":
    unittest.main()
