"""examples/load_prefix.py runs against a daemon and verifies its load."""

import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "examples", "load_prefix.py")


def test_load_prefix_example(daemon):
    for extra in ([], ["--format", "HPLD", "--block-size", "8", "--runs"]):
        out = subprocess.run([sys.executable, EXAMPLE, "--target",
                              daemon.target, *extra], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "health: SERVING" in out.stdout
        assert "registered 4 page keys" in out.stdout
        assert "verified: 262144 bytes executed" in out.stdout
