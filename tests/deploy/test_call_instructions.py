"""scripts/call_instructions.py on a few calls: reshardd under callgrind,
Checks and pooled PlanLoads with runs counted, the request's instructions
split into the Check's, planning, encoding and the rest.

Instructions, not time: the figures are the same on every run, so the
test checks their relations (every part present, the parts inside the
call's total), not a value that a change of the planner would move.

Environment (tests/deploy/CMakeLists.txt): RESHARD_E2E_DAEMON,
RESHARD_E2E_PYGEN. Needs valgrind and h2load (scripts/install-deps.sh);
registered for the plain build only (valgrind does not run ASan builds).
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import reshard_e2e as e
from deploy_support import REPO

LINES = ("reshardd user-space instructions per call", "empty Health/Check",
         "PlanLoad", "- the Check's", "- planning", "- encoding",
         "= the rest")


class CallInstructionsTests(unittest.TestCase):

    def test_pooled_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "figures.json")
            proc = subprocess.run([
                sys.executable, os.path.join(REPO, "scripts",
                                             "call_instructions.py"),
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--pooled",
                "--runs", "--requests", "60", "--json", out],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, timeout=500)
            printed = proc.stdout.decode("utf-8", "replace")
            sys.stdout.write(printed)
            self.assertEqual(proc.returncode, 0,
                             "scripts/call_instructions.py failed")
            with open(out) as f:
                figures = json.load(f)
        for line in LINES:
            self.assertIn(line, printed)
        self.assertIn("with runs", figures["what"])
        # gRPC's server path alone is tens of thousands of instructions.
        self.assertGreater(figures["check"], 10000)
        self.assertGreater(figures["planning"], 0)
        self.assertGreater(figures["encoding"], 0)
        # The parts lie inside the call: its planning and encoding are
        # counted within its total, beside at least a Check's worth.
        self.assertGreater(figures["rest"], 0)
        self.assertAlmostEqual(
            figures["call"], figures["check"] + figures["planning"] +
            figures["encoding"] + figures["rest"], places=3)


if __name__ == "__main__":
    unittest.main()
