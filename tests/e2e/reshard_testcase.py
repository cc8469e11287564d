"""What the grpcio end-to-end tests share (test_grpcio*.py, test_runs.py,
test_plan_store.py): ``DaemonTestCase``, one daemon per test class with the
assertions the tests use; the golden identities of SPEC §1.6; a large plan
request; the topology changes and reader bindings of the matrix."""

import unittest

import grpc

import reshard_e2e as e
from reshard_e2e import pb

Code = grpc.StatusCode


GOLDEN_LAYOUT_ID = ("sha256:5c41a9b1437c03b3e8e8f489ebfbf362"
                    "a0c7c6a5afa8ba978a852f9dae5454c4")
GOLDEN_MODEL_DOMAIN = ("db2449842bf6d7d200bb53eef28f716e"
                       "ede232fc4afb5e81b95fd9f7dedaca77")
GOLDEN_PLACEMENT_ID = ("sha256:e6e8e9588d25352d1ba486007d487084"
                       "c51760516c4a2096168d8f6d6c67df1f")


def golden_manifest():
    desc = e.make_descriptor(4, 4, 8, 8, 16)
    layout = pb.StoreLayout(descriptor=desc, format=pb.LPHD, shards=[
        # Given out of canonical order on purpose: the server sorts.
        pb.StoreShard(layer_ids=[3, 2, 1, 0], head_start=2, head_count=2,
                      key_suffix="1"),
        pb.StoreShard(layer_ids=[0, 1, 2, 3], head_start=0, head_count=2,
                      key_suffix="0"),
    ])
    return pb.StoreManifest(namespace="ns", model_id="model",
                            model_revision="rev", semantic_fingerprint="fp",
                            layout=layout)


def golden_placement():
    desc = e.make_descriptor(2, 2, 8, 8, 16)
    return pb.Placement(
        resource_id="res", revision="rev", placement_set_id="pset",
        dp_size=1, pp_size=1, tp_size=2, descriptor=desc, parts=[
            pb.PlacementPart(participant_id="r-b", rank=pb.Rank(tp=1),
                             layer_ids=[0, 1], head_start=1, head_count=1,
                             replica_count=1),
            pb.PlacementPart(participant_id="r-a", rank=pb.Rank(tp=0),
                             layer_ids=[0, 1], head_start=0, head_count=1),
        ])


def big_plan_request(fleet, prefix, pages=64):
    """A PlanLoad of 64 S1-shaped pages into a padded binding: 262 144
    copies, tens of milliseconds of work."""
    desc = e.make_descriptor(32, 8, 128, 128, 16)
    pub, _ = fleet.publish_writer(
        e.make_placement(desc, 1, 1, 1, prefix + "-w"), pb.PLHD,
        model_id=prefix)
    keys = ["%s-%d" % (prefix, i) for i in range(pages)]
    fleet.register(pub.manifest_key, keys)
    reader = e.make_placement(desc, 1, 1, 2, prefix + "-r")
    binding = e.make_binding(desc, reader.parts[0], len(keys), pad=True)
    return pb.PlanLoadRequest(model_domain=pub.model_domain, page_keys=keys,
                              placement=reader, binding=binding.message)


class DaemonTestCase(unittest.TestCase):
    """One daemon per test class, stopped with SIGTERM at the end (which
    must exit 0)."""

    daemon_flags = ()

    @classmethod
    def setUpClass(cls):
        cls.daemon = e.Daemon(*cls.daemon_flags).start()
        cls.channel = cls.daemon.channel()
        cls.planner = e.Planner(cls.channel)
        cls.fleet = e.Fleet(cls.planner)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        code = cls.daemon.stop()
        if code != 0:
            raise AssertionError("reshardd exited with %s after SIGTERM:\n%s"
                                 % (code, cls.daemon.log_text()))

    def assertServing(self):
        """The daemon is alive and answers both health and a real call."""
        self.assertTrue(self.daemon.alive(),
                        "reshardd died:\n" + self.daemon.log_text())
        self.assertEqual(self.planner.health(), e.SERVING)
        resp = self.planner.PlanUpload(pb.PlanUploadRequest(
            placement=e.make_placement(e.make_descriptor(2, 2, 4, 4, 4), 1, 1,
                                       2, "alive"), format=pb.PLHD),
            timeout=10)
        self.assertEqual(len(resp.layout.shards), 2)

    def assertRpcError(self, code, fn, *args, **kwargs):
        err = e.rpc_error(fn, *args, **kwargs)
        self.assertIsNotNone(err, "expected %s, the call succeeded" % code)
        self.assertEqual(err.code(), code,
                         "expected %s, got %s: %s" % (code, err.code(),
                                                      err.details()))
        return err.details() or ""

    def verify(self, resp, desc, binding, keys, limits=None):
        try:
            return e.verify_plan(resp, self.fleet.store, desc, binding, keys,
                                 limits)
        except e.PlanCheckError as exc:
            self.fail("%s (participant %s)" % (exc,
                                              binding.message.participant_id))

    def load_all(self, name, desc, reader, model_domain, keys,
                 target_dp_rank=None, binding_kwargs=None, expect_hits=None):
        """Plans and verifies every reader participant of the target DP
        rank. Returns the number of participants planned."""
        dp = target_dp_rank if target_dp_rank is not None else min(
            p.rank.dp for p in reader.parts)
        placement_id = e.canonical_placement_id(reader)
        planned = 0
        for i, part in enumerate(reader.parts):
            if part.rank.dp != dp or not part.layer_ids:
                continue
            binding = e.make_binding(desc, part, len(keys), seed=i,
                                     **(binding_kwargs or {}))
            with self.subTest(scenario=name, participant=part.participant_id):
                resp = self.fleet.plan(model_domain, keys, reader, binding,
                                       target_dp_rank=target_dp_rank)
                self.assertEqual(resp.hit_pages,
                                 len(keys) if expect_hits is None
                                 else expect_hits)
                self.assertEqual(resp.placement_id, placement_id)
                self.verify(resp, desc, binding, keys)
                planned += 1
        return planned

    def writer_manifest(self, name, desc, writer_topo, fmt, dp_rank=None,
                        model_id=None):
        writer = e.make_placement(desc, *writer_topo, prefix=name + "-w")
        pub, up = self.fleet.publish_writer(writer, fmt, dp_rank=dp_rank,
                                            model_id=model_id or name)
        self.assertEqual(up.layout_id, pub.layout_id)
        self.assertEqual(pub.layout_id, e.canonical_layout_id(up.layout))
        self.assertEqual(len(up.part_writers), len(up.layout.shards))
        writers = {p.participant_id: p for p in writer.parts}
        for pid in up.part_writers:
            self.assertIn(pid, writers)
            self.assertEqual(writers[pid].replica_ordinal, 0)
        return pub, up


# (writer dp, pp, tp), writer dp_rank, (reader dp, pp, tp), target dp rank
TOPOLOGY_CHANGES = [
    ((1, 1, 1), None, (1, 1, 2), None),   # TP split
    ((1, 1, 4), None, (1, 1, 1), None),   # TP merge
    ((1, 2, 2), None, (1, 3, 1), None),   # PP regrouping
    ((1, 3, 4), None, (1, 2, 2), None),   # PP and TP merge
    ((1, 1, 2), None, (1, 2, 8), None),   # reader head replicas x2
    ((1, 1, 8), None, (1, 1, 4), None),   # replicated writer
    ((2, 1, 2), 1, (2, 1, 4), 1),         # DP: explicit ranks
    ((2, 2, 1), None, (3, 1, 2), None),   # DP: default lowest ranks
]

BINDINGS = [
    dict(mode="paged", block=4),                 # blocks smaller than pages
    dict(mode="paged", block=8, pad=True),       # page-sized, padded
    dict(mode="paged", block=16, order="HND"),   # blocks span two pages
    dict(mode="contiguous", pad=True),
    dict(mode="contiguous"),
]
