"""scripts/load.py --decompose (scripts/cpu_decompose.py) on a tiny load.

The daemon's CPU per call split into an empty Check, in-process planning
(reshard-bench), the kernel's send (perf) and the remainder: the lines are
printed, the figures are finite and add up. Figures only: no assertion on
any time, which a shared machine would make flaky. ProfileTests feed the
profile classifier a canned `perf script` instead (no daemon, no perf).

Environment (tests/deploy/CMakeLists.txt): RESHARD_E2E_DAEMON,
RESHARD_E2E_PYGEN, RESHARD_BENCH (reshard-bench; load.py finds it beside
the daemon's build without it). perf (linux-perf) is not among
scripts/install-deps.sh's packages: where it is missing, the run must still
pass and print the send as skipped, which is what is checked then.
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import reshard_e2e as e
from deploy_support import REPO

LINES = ("decomposed   the daemon's CPU per PlanLoad",
         "daemon CPU per PlanLoad", "- empty Check",
         "- in-process planning", "- kernel send beyond the Check's",
         "= remainder")


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


class LoadDecomposeTests(unittest.TestCase):

    def run_load(self, *extra, pairs=1):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            proc = subprocess.run([
                sys.executable, os.path.join(REPO, "scripts", "load.py"),
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--pooled",
                "--scenario", "S1-8", "--requests", "300", "--warmup", "50",
                "--ceiling-requests", "600", "--clients", "2", "--streams",
                "4", "--time-limit", "240", "--rss-growth-mib", "0",
                "--decompose", "--bench-runs", "5", "--repeat", str(pairs),
                "--json", out] + list(extra), stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                timeout=500)
            printed = proc.stdout.decode("utf-8", "replace")
            sys.stdout.write(printed)
            self.assertEqual(proc.returncode, 0,
                             "scripts/load.py --decompose failed")
            with open(out) as f:
                result = json.load(f)
        for line in LINES:
            self.assertIn(line, printed)
        self.assertEqual(result["problems"], [])
        # The profiled runs are counted as calls too.
        self.assertEqual(
            result["daemon_counter_deltas"],
            {"reshard.v1.Planner/PlanLoad OK": 300 * pairs + 50 + 300,
             "grpc.health.v1.Health/Check OK": 600 * pairs + 600})
        d = result["decomposition"]
        for key in ("cpu_us", "check_us"):
            self.assertTrue(finite(d[key]), key)
        plan = d["planning"]
        self.assertNotIn("error", plan)
        self.assertTrue(finite(plan["us"]))
        self.assertAlmostEqual(plan["us"], sum(plan["parts"].values()),
                               places=6)
        self.assertIn("reshard-bench", plan["command"])
        return printed, d

    def test_decompose(self):
        """With perf: every figure finite, the parts add up to the daemon's
        CPU per call, and each profile's split adds up to its call's CPU;
        each of two pairs has its own reshard-bench run and remainder."""
        printed, d = self.run_load(pairs=2)
        if shutil.which("perf") is None:
            self.assertIn("skipped", printed)
            self.assertNotIn("remainder_us", d)
            return
        # A profile perf could not take (no samples, perf refused) names
        # why in send_error: say that rather than a missing key.
        self.assertNotIn("send_error", d, d.get("send_error"))
        for key in ("send_us", "check_send_us", "send_beyond_check_us",
                    "remainder_us", "remainder_planning_us",
                    "daemon_planning_us", "remainder_kernel_us",
                    "remainder_user_us"):
            self.assertTrue(finite(d[key]), key)
        self.assertAlmostEqual(
            d["check_us"] + d["planning"]["us"] + d["send_beyond_check_us"]
            + d["remainder_us"], d["cpu_us"], places=6)
        self.assertAlmostEqual(
            d["remainder_planning_us"] + d["remainder_kernel_us"]
            + d["remainder_user_us"], d["remainder_us"], places=6)
        # reshardd keeps its frame pointers, so perf finds the planner
        # under the PlanLoads and never under the Checks.
        self.assertGreater(d["profile"]["main"]["planning"], 0)
        self.assertEqual(d["profile"]["check"]["planning"], 0)
        for name, per_call in (("main", d["cpu_us"]),
                               ("check", d["check_us"])):
            split = d["split_us"][name]
            self.assertAlmostEqual(sum(split.values()), per_call, places=6)
            prof = d["profile"][name]
            self.assertGreater(prof["samples"], 0)
            self.assertEqual(prof["send"] + prof["planning"]
                             + prof["kernel_other"] + prof["user"],
                             prof["samples"])
        self.assertAlmostEqual(sum(d["remainder_user_by_object_us"].values()),
                               d["remainder_user_us"], places=6)
        self.assertAlmostEqual(sum(d["remainder_kernel_by_path_us"].values()),
                               d["remainder_kernel_us"], places=6)
        for name in ("main", "check"):
            prof = d["profile"][name]
            self.assertEqual(sum(prof["kernel_by_path"].values()),
                             prof["kernel_other"])
        self.assertIsInstance(d["remainder_ok"], bool)
        # Pair by pair: reshard-bench ran after each pair, the headline's
        # planning is one of those runs, and each pair's parts add up.
        self.assertEqual(len(d["pairs"]), 2)
        self.assertIn(d["planning"]["us"],
                      [p["planning_us"] for p in d["pairs"]])
        for p in d["pairs"]:
            self.assertAlmostEqual(
                p["check_us"] + p["planning_us"] + p["send_beyond_check_us"]
                + p["remainder_us"], p["cpu_us"], places=6)
        self.assertAlmostEqual(
            d["pair_remainder_us"],
            sum(p["remainder_us"] for p in d["pairs"]) / 2, places=6)
        self.assertIsInstance(d["pair_remainder_ok"], bool)
        self.assertIn("pair by pair (reshard-bench right after each)",
                      printed)

    def test_decompose_without_perf(self):
        """A perf that is not there skips the send and the remainder and
        says so; the run still passes."""
        printed, d = self.run_load("--perf", "/nonexistent/perf")
        self.assertIn("not found", d["send_error"])
        self.assertNotIn("remainder_us", d)
        self.assertRegex(printed, r"kernel send beyond the Check's\s+skipped")
        self.assertRegex(printed, r"= remainder\s+skipped")


class TransferPlanningTests(unittest.TestCase):
    """The in-process planning a PlanTransfer's decomposition subtracts is
    what the daemon does per call, its response's encoding included: the
    transfer table's plan with runs and its runs response, or the columns
    plan with its response (reshard-bench run for real, a few plans)."""

    def planning(self, with_runs):
        import cpu_decompose  # scripts/, on the path by deploy_support
        bench = cpu_decompose.default_bench(e.DAEMON)
        plan = cpu_decompose.bench_planning(bench, 3, "T1-128",
                                            "PlanTransfer", False, with_runs)
        self.assertNotIn("error", plan)
        self.assertAlmostEqual(plan["us"], sum(plan["parts"].values()),
                               places=6)
        for name, us in plan["parts"].items():
            self.assertTrue(finite(us) and us > 0, name)
        return plan

    def test_with_runs_counts_the_runs_response(self):
        plan = self.planning(True)
        self.assertEqual(sorted(plan["parts"]),
                         ["encode its runs", "plan with runs (warm)"])
        self.assertEqual(plan["entries"], 512)  # T1 at 128 tokens

    def test_explicit_is_the_columns_plan_and_response(self):
        plan = self.planning(False)
        self.assertEqual(list(plan["parts"]),
                         ["plan and response (varint columns)"])


# `perf script -F ip,sym,dso` as perf prints it: one frame a line, leaf
# first, a blank line after each sample.
K, U = "[kernel.kallsyms]", "/work/build/daemon/reshardd"
SAMPLES = {
    # the send of a response: the kernel under sendmsg
    "send": [("ffffffff81000001", "_copy_from_iter", K),
             ("ffffffff81000002", "tcp_sendmsg_locked", K),
             ("ffffffff81000003", "__sys_sendmsg", K),
             ("7f0000000001", "__libc_sendmsg", "/lib/libc.so.6")],
    # a fault in the planner is planning, kernel or not
    "planning": [("ffffffff81000004", "clear_page_erms", K),
                 ("55000000001", "pack_batch", U),
                 ("55000000002", "reshard_plan_load", U),
                 ("55000000003", "load_work", U)],
    # a response with runs written after the tail call (no frame of
    # reshard__planner_pack_response): encoding, under a work function
    "tail call": [("7f0000000002", "__memmove_avx_unaligned_erms",
                   "/lib/libc.so.6"),
                  ("55000000004", "reshard_plan_response_write", U),
                  ("55000000005", "reshard_call_pack_encoded", U),
                  ("55000000003", "load_work", U)],
    # the same function packing the Check's reply is not planning
    "check reply": [("55000000005", "reshard_call_pack_encoded", U),
                    ("55000000006", "reshard_call_reply", U),
                    ("55000000007", "reshard__on_events", U)],
    # the hand-offs, by the syscall under way
    "futex": [("ffffffff81000005", "finish_task_switch", K),
              ("ffffffff81000006", "futex_wait", K),
              ("ffffffff81000007", "__x64_sys_futex", K),
              ("7f0000000003", "syscall", "/lib/libc.so.6")],
    "eventfd": [("ffffffff81000008", "_raw_spin_unlock_irq", K),
                ("ffffffff81000009", "eventfd_write", K),
                ("ffffffff8100000a", "ksys_write", K),
                ("55000000008", "worker", U)],
    "other": [("ffffffff8100000b", "clear_page_erms", K),
              ("ffffffff8100000c", "asm_exc_page_fault", K),
              ("7f0000000004", "_int_malloc", "/lib/libc.so.6")],
}


class ProfileTests(unittest.TestCase):
    """cpu_decompose.parse_profile on a canned `perf script` (no daemon,
    no perf): each sample lands where the decomposition says."""

    def parse(self, samples):
        import cpu_decompose  # scripts/, on the path by deploy_support
        with tempfile.TemporaryDirectory() as tmp:
            text = os.path.join(tmp, "script.txt")
            with open(text, "w") as f:
                for frames in samples:
                    for ip, sym, dso in frames:
                        f.write("\t%16s %s+0x10 (%s)\n" % (ip, sym, dso))
                    f.write("\n")
            perf = os.path.join(tmp, "perf")
            with open(perf, "w") as f:
                f.write("#!/bin/sh\ncat %s\n" % text)
            os.chmod(perf, 0o755)
            return cpu_decompose.parse_profile(perf, "perf.data")

    def test_each_sample_where_it_belongs(self):
        prof = self.parse(SAMPLES.values())
        self.assertEqual(prof["samples"], len(SAMPLES))
        self.assertEqual(prof["send"], 1)
        self.assertEqual(prof["planning"], 2)  # the fault, the tail call
        self.assertEqual(prof["kernel_other"], 3)
        self.assertEqual(prof["kernel_by_path"]["futex"], 1)
        self.assertEqual(prof["kernel_by_path"]["eventfd"], 1)
        self.assertEqual(prof["kernel_by_path"]["other"], 1)
        self.assertEqual(prof["user"], 1)  # the Check's reply
        self.assertEqual(prof["user_by_object"]["reshardd"], 1)

    def test_tail_called_packing_alone(self):
        # Under a work function the packer is encoding; under the
        # generic reply it is the daemon's own code.
        self.assertEqual(self.parse([SAMPLES["tail call"]])["planning"], 1)
        prof = self.parse([SAMPLES["check reply"]])
        self.assertEqual((prof["planning"], prof["user"]), (0, 1))


if __name__ == "__main__":
    unittest.main()
