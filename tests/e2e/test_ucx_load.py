"""PlanLoad plans executed over UCX (docs/clients.md, "Executing plans over
UCX"): a SPEC §6 scenario's manifest is published with reshardd and its
pages registered (the requests of reshard_scenarios.py, the ones the
benchmarks send); a store process (clients/ucx/examples/ucx_store.c)
places the bytes of every Part (reshard_oracle.build_parts, SPEC §1.3) in
memory registered with UCX and publishes its worker address, remote key
and Parts in a peers file; the reader's PlanLoad (explicit and with runs)
is executed by a loader process (ucx_load.c, reshard_ucx_execute_load)
into zeroed memory, and every byte of every region is compared with the
SPEC §2.4 oracle (reshard_oracle.expected_regions). S1 (PLHD, TP1 → TP2,
NHD) and S3 (HPLD, TP4 → TP16 with head replicas, HND readers, 16-token
blocks for 32-token pages) with two pages, over UCX's shared-memory
transports and over TCP on loopback. Faults: a Part no peer serves and a
plan into unregistered memory, each a non-zero exit naming the batch and
copy."""

import os
import re
import subprocess
import unittest

import reshard_e2e as e
import reshard_scenarios as scenarios
from reshard_ucx import UcxMixin

STORE = os.environ.get("RESHARD_E2E_UCX_STORE", "")
LOAD = os.environ.get("RESHARD_E2E_UCX_LOAD", "")
PAGES = 2


class LoadMixin(UcxMixin):
    """Each test publishes a scenario and runs a store and the loader with
    the class's UCX transports."""

    PROGRAMS = (STORE, LOAD)
    SKIP_REASON = "RESHARD_E2E_UCX_STORE/LOAD unset"
    TEMP_PREFIX = "reshard-ucx-load-"

    def publish(self, name, participant_index):
        """The scenario's requests, its manifest published, its pages
        registered, and its Parts written for the store."""
        req = scenarios.build(name, pages=PAGES,
                              participant_index=participant_index)
        pub = self.planner.PublishManifest(req.publish, timeout=30)
        self.assertEqual(pub.manifest_key, req.manifest_key)
        self.planner.RegisterPages(req.register, timeout=30)
        parts_dir = self.path("parts")
        os.makedirs(parts_dir, exist_ok=True)
        with open(os.path.join(parts_dir, "index"), "w") as index:
            for key in req.page_keys:
                for i, data in enumerate(e.build_parts(req.layout, key)):
                    fname = "%s.%d" % (key, i)
                    with open(os.path.join(parts_dir, fname), "wb") as f:
                        f.write(data)
                    index.write("%s %d %s %s\n" % (key, i, req.layout_id,
                                                   fname))
        return req, parts_dir

    def start_store(self, parts_dir, *flags):
        peers = self.path("store.peers")
        self.store = self.start_server(
            "store", [STORE, "--parts", parts_dir, "--peers", peers, *flags],
            peers)
        return peers

    def stop_store(self):
        return self.stop_server(self.store)

    def load(self, req, plan, peers, *flags):
        """Runs the loader on ``plan``; (exit code, stdout, stderr,
        {region_id: bytes})."""
        plan_path, regions_path = self.path("plan"), self.path("regions")
        out_path = self.path("out")
        with open(plan_path, "wb") as f:
            f.write(plan.SerializeToString())
        order = list(req.binding.region_sizes.items())
        with open(regions_path, "w") as f:
            for rid, n in order:
                f.write("%s %d\n" % (rid, n))
        if os.path.exists(out_path):
            os.remove(out_path)
        proc = subprocess.run(
            [LOAD, "--plan", plan_path, "--regions", regions_path, "--peers",
             peers, "--out", out_path, "--batch-timeout-ms", "20000",
             *flags], env=self.env(), capture_output=True, text=True,
            timeout=600)
        self.assert_no_sanitizer_report(proc.stderr)
        regions = {}
        if proc.returncode == 0:
            with open(out_path, "rb") as f:
                data = f.read()
            at = 0
            for rid, n in order:
                regions[rid] = data[at:at + n]
                at += n
            self.assertEqual(at, len(data))
        return proc.returncode, proc.stdout, proc.stderr, regions

    def check_scenario(self, name, participant_index, *store_flags):
        req, parts_dir = self.publish(name, participant_index)
        peers = self.start_store(parts_dir, *store_flags)
        want, covered = e.expected_regions(req.descriptor, req.binding,
                                           req.page_keys, PAGES)
        stats = {}
        for label, request in (("explicit", req.plan_load),
                               ("runs", req.plan_load_runs)):
            plan = self.planner.PlanLoad(request, timeout=60)
            self.assertEqual(plan.hit_pages, PAGES)
            self.assertEqual(plan.stats.bytes, covered)
            code, out, err, got = self.load(req, plan, peers)
            self.assertEqual(code, 0, err)
            m = re.search(r"load: (\d+) bytes, (\d+) gets, (\d+) batches, "
                          r"(\d+) entries", out)
            self.assertIsNotNone(m, out)
            nbytes, gets, batches, entries = (int(x) for x in m.groups())
            self.assertEqual(nbytes, covered)
            self.assertEqual(gets, plan.stats.operations)
            self.assertEqual(batches, len(plan.batches))
            for rid, data in want.items():
                self.assertEqual(len(got[rid]), len(data), rid)
                if got[rid] != bytes(data):
                    diff = next(i for i, (a, b) in enumerate(
                        zip(got[rid], data)) if a != b)
                    self.fail("%s %s: region %s differs first at byte %d "
                              "(%d, want %d)" % (name, label, rid, diff,
                                                 got[rid][diff], data[diff]))
            stats[label] = entries
        # Runs fold the explicit copies: fewer entries, the same gets.
        self.assertLess(stats["runs"], stats["explicit"])
        out = self.stop_store()
        self.assertIn("UCX-allocated" if "--user-memory" not in store_flags
                      else "its own", out)

    def test_s1_tp1_writer_to_tp2_reader(self):
        self.check_scenario("S1", 1)

    def test_s3_hpld_replicas_hnd(self):
        self.check_scenario("S3", 5)

    def test_store_in_its_own_memory(self):
        self.check_scenario("S1", 0, "--user-memory")

    # -- faults --
    def expect_failure(self, code, err, *patterns):
        self.assertNotEqual(code, 0, err)
        message = [l for l in err.splitlines() if "load: error:" in l]
        self.assertEqual(len(message), 1, err)
        for pattern in patterns:
            self.assertRegex(message[0], pattern)

    def test_part_served_by_no_peer(self):
        req, parts_dir = self.publish("S1", 0)
        peers = self.start_store(parts_dir, "--skip", "1")
        plan = self.planner.PlanLoad(req.plan_load, timeout=60)
        code, out, err, _ = self.load(req, plan, peers)
        self.expect_failure(
            code, err, r"batches\[\d+\] copy \d+: part 0 of page "
            r"S1-page-00001 \(layout sha256:[0-9a-f]+\) is served by no "
            r"peer")
        self.stop_store()

    def test_plan_for_unregistered_memory(self):
        req, parts_dir = self.publish("S1", 0)
        peers = self.start_store(parts_dir)
        plan = self.planner.PlanLoad(req.plan_load_runs, timeout=60)
        code, out, err, _ = self.load(req, plan, peers, "--skip-register")
        self.expect_failure(
            code, err, r"batches\[0\] (copy 0|entry 0 \(a run of \d+ "
            r"copies\)): target region \S+ is not registered with this "
            r"executor")
        self.stop_store()


class UcxLoadSharedMemoryTests(LoadMixin, unittest.TestCase):
    UCX_ENV = {"UCX_TLS": "sm,self"}


class UcxLoadTcpTests(LoadMixin, unittest.TestCase):
    UCX_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}


if __name__ == "__main__":
    unittest.main()
