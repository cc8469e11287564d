"""End-to-end plans with stock Python grpcio: the SPEC §6 scenarios and
every format x TP/PP/DP/replica change x paged/contiguous binding, each
plan executed byte for byte and checked with the SPEC §2.4 oracle
(reshard_e2e.py).

Run through ctest (tests/e2e/CMakeLists.txt sets the environment), or by
hand from this directory:
  RESHARD_E2E_DAEMON=.../reshardd RESHARD_E2E_PYGEN=.../pygen \
      /usr/bin/python3 -m unittest -v test_grpcio_plans
"""

import unittest

import reshard_e2e as e
from reshard_e2e import pb
from reshard_testcase import BINDINGS, TOPOLOGY_CHANGES, DaemonTestCase


class ScenarioTests(DaemonTestCase):
    """The SPEC §6 scenario shapes at reduced sizes, every reader
    participant planned, executed and checked."""

    def run_scenario(self, name, desc, writer_topo, reader_topo, fmt, pages,
                     block, order="NHD"):
        pub, _ = self.writer_manifest(name, desc, writer_topo, fmt)
        keys = ["%s-page-%d" % (name, i) for i in range(pages)]
        self.assertEqual(self.fleet.register(pub.manifest_key, keys), pages)
        reader = e.make_placement(desc, *reader_topo, prefix=name + "-r")
        n = self.load_all(name, desc, reader, pub.model_domain, keys,
                          binding_kwargs=dict(mode="paged", block=block,
                                              order=order))
        self.assertEqual(n, reader_topo[1] * reader_topo[2])
        # One contiguous (non-paged) reader too.
        part = reader.parts[-1]
        binding = e.make_binding(desc, part, pages, mode="contiguous")
        resp = self.fleet.plan(pub.model_domain, keys, reader, binding)
        self.verify(resp, desc, binding, keys)

    def test_s1_llama3_8b_tp1_to_tp2_plhd(self):
        desc = e.make_descriptor(32, 8, 128, 128, 16)
        self.run_scenario("s1", desc, (1, 1, 1), (1, 1, 2), pb.PLHD, 3, 16)

    def test_s2_llama3_70b_tp8_to_tp4pp2_lphd(self):
        desc = e.make_descriptor(8, 8, 128, 128, 64)
        self.run_scenario("s2", desc, (1, 1, 8), (1, 2, 4), pb.LPHD, 2, 64)

    def test_s3_qwen25_72b_tp4_to_tp16_replicas_hpld(self):
        desc = e.make_descriptor(4, 8, 128, 128, 32)
        self.run_scenario("s3", desc, (1, 1, 4), (1, 1, 16), pb.HPLD, 2, 16,
                          order="HND")

    def test_s4_deepseek_v3_mla_tp8_to_tp4pp2_plhd(self):
        desc = e.make_descriptor(61, 1, 576, 0, 64)
        self.run_scenario("s4", desc, (1, 1, 8), (1, 2, 4), pb.PLHD, 2, 64)

    def test_s5_llama3_405b_fp8_tp8pp2_to_tp8pp4_lphd(self):
        desc = e.make_descriptor(12, 8, 128, 128, 128, dtype="fp8",
                                 itemsize=1)
        self.run_scenario("s5", desc, (1, 2, 8), (1, 4, 8), pb.LPHD, 2, 128)


class PoolScenarioTests(ScenarioTests):
    """The same scenarios planned and decoded on the work pool: a lone
    call's work runs on the loop (docs/daemon.md, "Where plans run"), so
    without this flag the tests above never cross to the pool."""

    daemon_flags = ("--inline-plan-max-values", "0")


class MatrixTests(DaemonTestCase):
    """Every format x TP/PP/DP/replica change x paged/contiguous binding."""

    def run_matrix(self, tag, desc, changes, bindings, pages=3):
        for fmt_name, fmt in e.FORMATS.items():
            for ci, (wt, wdp, rt, rdp) in enumerate(changes):
                name = "%s-%s-%d" % (tag, fmt_name, ci)
                pub, _ = self.writer_manifest(name, desc, wt, fmt,
                                              dp_rank=wdp, model_id=tag)
                keys = ["%s-page-%d" % (name, i) for i in range(pages)]
                self.fleet.register(pub.manifest_key, keys)
                reader = e.make_placement(desc, *rt, prefix=name + "-r")
                for bi, bkw in enumerate(bindings):
                    self.load_all("%s-b%d" % (name, bi), desc, reader,
                                  pub.model_domain, keys, target_dp_rank=rdp,
                                  binding_kwargs=bkw)

    def test_mha_matrix(self):
        # Layer ids that do not start at 0; K and V of different widths.
        desc = e.make_descriptor([3, 4, 5, 6, 7, 8], 4, 8, 4, 8)
        self.run_matrix("mha", desc, TOPOLOGY_CHANGES, BINDINGS)

    def test_single_tensor_matrix(self):
        desc = e.make_descriptor(4, 1, 16, 0, 8)
        changes = [((1, 1, 2), None, (1, 2, 4), None),
                   ((1, 2, 1), None, (1, 1, 1), None)]
        self.run_matrix("mla", desc, changes, BINDINGS[:3])

    def test_fp8_odd_sizes(self):
        desc = e.make_descriptor([0, 2, 4], 2, 6, 10, 5, dtype="fp8",
                                 itemsize=1)
        changes = [((1, 1, 2), None, (1, 3, 1), None),
                   ((1, 3, 1), None, (1, 1, 4), None)]
        bindings = [dict(mode="paged", block=3), dict(mode="contiguous"),
                    dict(mode="paged", block=7, order="HND", pad=True)]
        self.run_matrix("fp8", desc, changes, bindings, pages=4)


if __name__ == "__main__":
    unittest.main()
