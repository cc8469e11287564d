"""Plans executed by a real transport (docs/clients.md, "Executing plans
over UCX"): a prefill process (clients/ucx/examples/pd_prefill.c) registers
its pools with reshardd and with UCX, fills them with the logical value of
every (layer, component, token, head, byte) and publishes its worker
address and remote keys in a peers file; a decode process
(pd_decode.c) asks reshardd for each of its participants' PlanTransfer
plans, explicit and with runs, executes them over UCX and checks every byte
of its pools. Scenarios T1 (TP1 → TP2) and T3 (TP4 FlashInfer HND,
16-token blocks → TP16 with two replicas per head, vLLM NHD, 32-token
blocks) of SPEC §6, built by bench/scenario.c — the same request builders
as the benchmarks — with fewer tokens, over UCX's shared-memory transports
(UCX_TLS=sm,self: CMA for the gets) and over TCP on loopback
(UCX_TLS=tcp,self, UCX_NET_DEVICES=lo).

Faults, each a non-zero exit with an error naming the batch and copy, and
the decode's pool forgotten by reshardd afterwards (nothing left
registered): a remote key that covers only half a region, a plan into a
region the executor did not register, and the prefill killed in the middle
of a batch (TCP detects the dead peer; the shared-memory transports of UCX
1.13 cannot, so there the batch times out)."""

import os
import re
import subprocess
import time
import unittest

from reshard_e2e import pb
from reshard_ucx import UcxMixin

PREFILL = os.environ.get("RESHARD_E2E_PD_PREFILL", "")
DECODE = os.environ.get("RESHARD_E2E_PD_DECODE", "")
# T1 and T3 with fewer tokens than SPEC §6's (whole 16-token pages): the
# same shapes and layouts, memory a test machine has.
TOKENS = {"T1": 256, "T3": 128}
MEMORY_RE = re.compile(r"registered memory (sha256:[0-9a-f]{64})")


class PdMixin(UcxMixin):
    """Each test runs a prefill and a decode with the class's UCX
    transports."""

    PROGRAMS = (PREFILL, DECODE)
    SKIP_REASON = "RESHARD_E2E_PD_PREFILL/DECODE unset"
    TEMP_PREFIX = "reshard-pd-"

    def setUp(self):
        super().setUp()
        self.peers = self.path("peers")
        self.prefill = None

    def start_prefill(self, scenario, *flags):
        argv = [PREFILL, "--target", self.daemon.target, "--scenario",
                scenario, "--tokens", str(TOKENS[scenario]), "--peers",
                self.peers, *flags]
        self.prefill = self.start_server("prefill", argv, self.peers)

    def stop_prefill(self):
        self.stop_server(self.prefill)

    def decode(self, scenario, *flags, timeout=600):
        argv = [DECODE, "--target", self.daemon.target, "--scenario",
                scenario, "--tokens", str(TOKENS[scenario]), "--peers",
                self.peers, *flags]
        return subprocess.Popen(argv, env=self.env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def finish(self, proc, timeout=600):
        out, err = proc.communicate(timeout=timeout)
        self.assert_no_sanitizer_report(err)
        return proc.returncode, out, err

    def assert_forgotten(self, err):
        """Every pool the decode registered is gone from reshardd."""
        ids = MEMORY_RE.findall(err)
        self.assertTrue(ids, err)
        for memory_id in ids:
            self.assertFalse(self.planner.ForgetMemory(
                pb.ForgetMemoryRequest(memory_id=memory_id),
                timeout=30).removed, memory_id)

    # -- every byte of every decode participant --
    def run_scenario(self, scenario, participants, *prefill_flags):
        self.start_prefill(scenario, *prefill_flags)
        code, out, err = self.finish(self.decode(scenario))
        self.assertEqual(code, 0, err)
        lines = [l for l in out.splitlines() if "every byte verified" in l]
        self.assertEqual(len(lines), 2 * participants, out)
        self.assertEqual(sum(" explicit:" in l for l in lines), participants)
        self.assertEqual(sum(" runs:" in l for l in lines), participants)
        self.assert_forgotten(err)
        self.stop_prefill()
        return lines

    def test_t1_tp_change(self):
        lines = self.run_scenario("T1", 2)
        # Runs fold the explicit copies: fewer entries, the same gets.
        explicit = [l for l in lines if " explicit:" in l][0]
        runs = [l for l in lines if " runs:" in l][0]
        entries = lambda l: int(re.search(r"(\d+) entries", l).group(1))
        gets = lambda l: int(re.search(r"(\d+) gets", l).group(1))
        self.assertLess(entries(runs), entries(explicit))
        self.assertEqual(gets(runs), gets(explicit))

    def test_t3_replicas_hnd_into_nhd_block_change(self):
        self.run_scenario("T3", 16)

    def test_t1_from_pools_ucx_allocated(self):
        # The pools the benchmark's fast path reads (ucp_mem_map ALLOCATE),
        # filled and verified byte for byte like the process's own.
        self.run_scenario("T1", 2, "--ucx-allocate")

    # -- faults --
    def expect_failure(self, proc, *patterns):
        code, out, err = self.finish(proc)
        self.assertNotEqual(code, 0, out + err)
        message = [l for l in err.splitlines() if "decode: error:" in l]
        self.assertEqual(len(message), 1, err)
        for pattern in patterns:
            self.assertRegex(message[0], pattern)
        self.assert_forgotten(err)
        return message[0]

    def test_remote_key_that_does_not_cover_a_copy(self):
        self.start_prefill("T1", "--short-rkey")
        self.expect_failure(
            self.decode("T1", "--participant", "0"),
            r"batches\[\d+\] copy \d+: source region L0 of participant "
            r"pp00-tp00: bytes \[0x[0-9a-f]+, 0x[0-9a-f]+\) are not covered "
            r"by its remote key")
        self.stop_prefill()

    def test_plan_for_unregistered_memory(self):
        self.start_prefill("T1")
        self.expect_failure(
            self.decode("T1", "--participant", "1", "--skip-register"),
            r"batches\[\d+\] copy \d+: target region L0 is not registered "
            r"with this executor")
        self.stop_prefill()

    def test_peer_killed_mid_batch(self):
        self.start_prefill("T1")
        pause = os.path.join(self.dir.name, "paused")
        proc = self.decode("T1", "--participant", "0", "--mode", "explicit",
                           "--pause-at", "1:100", "--pause-file", pause,
                           "--batch-timeout-ms", "3000")
        deadline = time.monotonic() + 120
        while not os.path.exists(pause):
            self.assertIsNone(proc.poll(), proc.stderr.read() if proc.poll()
                              is not None else "")
            self.assertLess(time.monotonic(), deadline, "decode never paused")
            time.sleep(0.02)
        self.prefill.kill()
        self.prefill.wait()
        os.remove(pause)
        message = self.expect_failure(
            proc, r"batches\[1\]( copy \d+)? \(source participant pp00-tp00\)",
            self.KILLED, r"\d+ of the plan's \d+ bytes completed")
        done = int(re.search(r"(\d+) of the plan's", message).group(1))
        self.assertGreaterEqual(done, 4 << 20)  # batch 0 completed


class UcxSharedMemoryTests(PdMixin, unittest.TestCase):
    UCX_ENV = {"UCX_TLS": "sm,self"}
    # UCX 1.13's sysv and posix transports have no peer failure handler:
    # the executor sees the dead peer as gets that stop completing.
    KILLED = r"UCS_ERR_TIMED_OUT"


class UcxTcpTests(PdMixin, unittest.TestCase):
    UCX_ENV = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}
    KILLED = r"UCS_ERR_(ENDPOINT_TIMEOUT|CONNECTION_RESET|UNREACHABLE|" \
             r"IO_ERROR|NOT_CONNECTED|CANCELED)"


if __name__ == "__main__":
    unittest.main()
