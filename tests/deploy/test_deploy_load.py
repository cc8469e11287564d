"""Tests of the load tools against the real binaries.

* GhzDataTests — deploy/ghz: the committed ghz configurations are what
  generate.py writes, every request file parses as the message its call
  takes (json_format.ParseDict, and the binary twin), and the set-up and
  PlanLoad requests work against a daemon; the pooled PlanLoads (S1-8, S5)
  plan what the explicit binding of the same pool and block table plans;
  the transfer sets (T1-128, T5) register their placements and pools and
  their PlanTransfers plan what the explicit target binding plans.
* ScenarioCommandTests — scripts/scenario.py prints a plan and its figures.
* LoadReportTests — scripts/load.py's report: a CPU share whose daemon
  CPU read as no clock tick is said, not divided by; a process's CPU is
  read to below a clock tick.
* LoadSmokeTests — scripts/load.py: thousands of h2load requests at 64
  concurrent streams, zero failures by the daemon's own counters, flat
  memory; the pooled reader (--pooled) and PlanTransfer of T1-128
  (--method PlanTransfer) too.

Environment (tests/deploy/CMakeLists.txt): RESHARD_E2E_DAEMON,
RESHARD_E2E_RESHARDCTL, RESHARD_E2E_PYGEN, RESHARD_SANITIZED (1 in the
ASan+UBSan build: the load test runs fewer requests and skips the memory
bound, which ASan's quarantine would break).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from google.protobuf import json_format

import reshard_e2e as e
from reshard_e2e import pb
from deploy_support import GHZ, REPO, SANITIZED, port_of


# ------------------------------------------------------------------ ghz --

GHZ_KEYS = {"proto", "protoset", "call", "cacert", "cert", "key", "skipTLS",
            "cname", "authority", "insecure", "total", "concurrency",
            "connections", "qps", "duration", "max-duration", "timeout",
            "data", "data-file", "binary-file", "metadata", "metadata-file",
            "stream-interval", "output", "format", "connect-timeout",
            "keepalive", "cpus", "import-paths", "name", "tags", "host",
            "reflect-metadata", "enable-compression", "skipFirst", "async",
            "duration-stop", "debug"}


def read_delimited(data, cls):
    """The messages of a length-delimited (count-prefixed) stream."""
    from google.protobuf.internal import decoder
    out, at = [], 0
    while at < len(data):
        length, at = decoder._DecodeVarint(data, at)
        out.append(cls.FromString(data[at:at + length]))
        at += length
    return out


# The planner's methods and message names; PlanTransfer added where the e2e
# helpers do not list it yet.
PLANNER_METHODS = dict(e.PLANNER_METHODS)
PLANNER_METHODS.setdefault("PlanTransfer", ("PlanTransferRequest",
                                            "PlanTransferResponse"))


def plan_transfer(planner, request, timeout=120):
    call = planner.channel.unary_unary(
        "/reshard.v1.Planner/PlanTransfer",
        request_serializer=pb.PlanTransferRequest.SerializeToString,
        response_deserializer=pb.PlanTransferResponse.FromString)
    return call(request, timeout=timeout)


TRANSFER_STEPS = ["register-source-placement", "register-target-placement",
                  "register-source-memory", "register-target-memory",
                  "plantransfer", "plantransfer-runs"]


class GhzDataTests(unittest.TestCase):
    """deploy/ghz: configurations and request data."""

    @classmethod
    def setUpClass(cls):
        import generate
        cls.tmp = tempfile.mkdtemp(prefix="reshard-ghz-")
        cls.data = os.path.join(cls.tmp, "data")
        cls.configs = os.path.join(cls.tmp, "configs")
        cls.index = generate.generate(cls.data, cls.configs)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def message_class(self, full_name):
        package, _, name = full_name.rpartition(".")
        self.assertEqual(package, "reshard.v1")
        return getattr(pb, name)

    def test_every_scenario_has_its_requests(self):
        variants = {x["variant"] for x in self.index}
        self.assertEqual(variants, {"S1-8", "S1", "S2", "S3", "S4", "S5",
                                    "T1-128", "T5"})
        pooled = ["register-placement", "register-memory",
                  "planload-pooled", "planload-pooled-runs"]
        for v in variants:
            steps = [x["step"] for x in self.index if x["variant"] == v]
            if v.startswith("T"):
                self.assertEqual(steps, TRANSFER_STEPS)
                continue
            self.assertEqual(steps, ["publish", "register", "planload",
                                     "planload-runs", "planstore"]
                             + (pooled if v in ("S1-8", "S5") else []))

    def test_committed_configs_are_generated(self):
        generated = sorted(os.listdir(self.configs))
        committed = sorted(n for n in os.listdir(GHZ)
                           if n.endswith(".ghz.json"))
        self.assertEqual(committed, generated,
                         "run deploy/ghz/generate.py --configs deploy/ghz")
        for n in generated:
            with open(os.path.join(self.configs, n)) as f:
                want = json.load(f)
            with open(os.path.join(GHZ, n)) as f:
                have = json.load(f)
            self.assertEqual(have, want, n)

    def test_configs_are_ghz_configs(self):
        service = pb.DESCRIPTOR.services_by_name["Planner"]
        files = {x["json"]: x for x in self.index}
        files.update({x["binary"]: x for x in self.index})
        for n in sorted(os.listdir(GHZ)):
            if not n.endswith(".ghz.json"):
                continue
            with self.subTest(config=n):
                with open(os.path.join(GHZ, n)) as f:
                    config = json.load(f)
                self.assertLessEqual(set(config), GHZ_KEYS)
                self.assertTrue(config["insecure"])
                for key in ("total", "concurrency"):
                    self.assertIsInstance(config[key], int)
                self.assertLessEqual(config["concurrency"], config["total"])
                # Paths are relative to deploy/ghz, where ghz runs.
                self.assertTrue(os.path.isfile(os.path.join(GHZ,
                                                            config["proto"])))
                for p in config["import-paths"]:
                    self.assertTrue(os.path.isdir(os.path.join(GHZ, p)))
                package_service, _, method = config["call"].rpartition(".")
                self.assertEqual(package_service, "reshard.v1.Planner")
                self.assertIn(method, service.methods_by_name)
                data = config.get("data-file") or config.get("binary-file")
                self.assertTrue(data.startswith("data/"), data)
                entry = files[os.path.basename(data)]
                self.assertEqual(entry["call"], config["call"])
                self.assertEqual(
                    service.methods_by_name[method].input_type.full_name,
                    entry["message"])
                self.assertTrue(port_of(config["host"]) > 0)

    def test_every_data_file_parses_as_its_message(self):
        service = pb.DESCRIPTOR.services_by_name["Planner"]
        for x in self.index:
            with self.subTest(file=x["json"]):
                method = x["call"].rpartition(".")[2]
                self.assertEqual(
                    service.methods_by_name[method].input_type.full_name,
                    x["message"])
                cls = self.message_class(x["message"])
                if "messages" in x:
                    # An array for ghz (round-robin), delimited binary.
                    with open(os.path.join(self.data, x["json"])) as f:
                        docs = json.load(f)
                    self.assertIsInstance(docs, list)
                    self.assertEqual(len(docs), x["messages"])
                    with open(os.path.join(self.data, x["binary"]),
                              "rb") as f:
                        binary = read_delimited(f.read(), cls)
                    self.assertEqual(
                        [json_format.ParseDict(d, cls()) for d in docs],
                        binary)
                    self.assertEqual(x["step"], "register-source-memory")
                    self.assertEqual(len(binary),
                                     len(x["source_memory_ids"]))
                    for m in binary:
                        self.assertEqual(m.placement_id,
                                         x["source_placement_id"])
                    continue
                with open(os.path.join(self.data, x["json"])) as f:
                    from_json = json_format.ParseDict(json.load(f), cls())
                with open(os.path.join(self.data, x["binary"]), "rb") as f:
                    from_binary = cls.FromString(f.read())
                self.assertEqual(from_json, from_binary)
                if x["step"].startswith("plantransfer"):
                    self.assertEqual(from_json.runs,
                                     x["step"].endswith("-runs"))
                    self.assertEqual(from_json.token_count, x["tokens"])
                    self.assertEqual(from_json.source_placement_id,
                                     x["source_placement_id"])
                    self.assertEqual(from_json.target_placement_id,
                                     x["target_placement_id"])
                    self.assertEqual(list(from_json.source_memory_ids),
                                     x["source_memory_ids"])
                    self.assertEqual(from_json.pooled.memory_id,
                                     x["target_memory_id"])
                    self.assertGreater(len(from_json.source_block_ids), 0)
                elif x["step"] == "register-target-memory":
                    self.assertEqual(from_json.placement_id,
                                     x["target_placement_id"])
                elif x["step"].startswith("planload"):
                    self.assertEqual(from_json.runs,
                                     x["step"].endswith("-runs"))
                    self.assertEqual(len(from_json.page_keys), x["pages"])
                    self.assertEqual(from_json.model_domain,
                                     x["model_domain"])
                    pooled = x["step"].startswith("planload-pooled")
                    self.assertEqual(from_json.HasField("pooled"), pooled)
                    self.assertEqual(from_json.HasField("binding"),
                                     not pooled)
                    if pooled:
                        self.assertEqual(from_json.placement_id,
                                         x["placement_id"])
                        self.assertEqual(from_json.pooled.memory_id,
                                         x["memory_id"])
                elif x["step"] == "register-memory":
                    self.assertEqual(from_json.placement_id,
                                     x["placement_id"])
                elif x["step"] == "register":
                    self.assertEqual(from_json.manifest_key,
                                     x["manifest_key"])

    def test_requests_work_against_the_daemon(self):
        """Raw bytes of every file, as ghz would send them: the daemon
        computes the same manifest keys and layouts, placement and memory
        ids, every PlanLoad hits all of its pages, and a pooled PlanLoad
        answers exactly what the explicit binding of its pool and block
        table gets."""
        import pooled_scenarios
        import reshard_scenarios as scenarios
        import transfer_scenarios as transfers
        with e.Daemon() as daemon:
            channel = daemon.channel()
            planner = e.Planner(channel)
            registered = {}  # manifest key -> page keys bound so far
            try:
                for x in self.index:
                    with self.subTest(file=x["binary"]):
                        with open(os.path.join(self.data, x["binary"]),
                                  "rb") as f:
                            raw = f.read()
                        method = x["call"].rpartition(".")[2]
                        resp_cls = getattr(pb, PLANNER_METHODS[method][1])
                        if "messages" in x:
                            # One call per message, as ghz sends them.
                            req_cls = self.message_class(x["message"])
                            ids = [resp_cls.FromString(planner.raw(method)(
                                m.SerializeToString(), timeout=120)).memory_id
                                for m in read_delimited(raw, req_cls)]
                            self.assertEqual(ids, x["source_memory_ids"])
                            continue
                        reply = planner.raw(method)(raw, timeout=120)
                        resp = resp_cls.FromString(reply)
                        if x["step"] == "register-source-placement":
                            self.assertEqual(resp.placement_id,
                                             x["source_placement_id"])
                        elif x["step"] == "register-target-placement":
                            self.assertEqual(resp.placement_id,
                                             x["target_placement_id"])
                        elif x["step"] == "register-target-memory":
                            self.assertEqual(resp.memory_id,
                                             x["target_memory_id"])
                        elif x["step"].startswith("plantransfer"):
                            runs = x["step"].endswith("-runs")
                            self.assertGreater(resp.stats.operations, 0)
                            self.assertEqual(resp.stats.runs > 0, runs)
                            self.assertEqual(resp.source_placement_id,
                                             x["source_placement_id"])
                            name, tokens = transfers.parse_variant(
                                x["variant"])
                            explicit = transfers.build(
                                name, tokens).explicit_plan_transfer(runs)
                            want = plan_transfer(planner, explicit)
                            self.assertEqual(resp, want)
                        elif x["step"] == "publish":
                            self.assertEqual(resp.manifest_key,
                                             x["manifest_key"])
                            self.assertEqual(resp.model_domain,
                                             x["model_domain"])
                        elif x["step"] == "register":
                            # S1-8's pages are S1's first eight.
                            keys = set(pb.RegisterPagesRequest.FromString(
                                raw).page_keys)
                            seen = registered.setdefault(x["manifest_key"],
                                                         set())
                            self.assertEqual(resp.added, len(keys - seen))
                            seen |= keys
                        elif x["step"] == "planstore":
                            self.assertEqual(len(resp.part_indexes), 1)
                            self.assertGreater(resp.stats.operations, 0)
                        elif x["step"] == "register-placement":
                            self.assertEqual(resp.placement_id,
                                             x["placement_id"])
                        elif x["step"] == "register-memory":
                            self.assertEqual(resp.memory_id, x["memory_id"])
                        else:
                            self.assertEqual(resp.hit_pages, x["pages"])
                            self.assertGreater(resp.stats.operations, 0)
                            runs = x["step"].endswith("-runs")
                            self.assertEqual(resp.stats.runs > 0, runs)
                            if runs:
                                self.assertLess(resp.stats.runs,
                                                resp.stats.operations)
                            if x["step"].startswith("planload-pooled"):
                                name, pages = scenarios.parse_variant(
                                    x["variant"])
                                explicit = pooled_scenarios.build(
                                    scenarios.build(name, pages)
                                ).explicit_plan_load(runs)
                                want = planner.PlanLoad(explicit,
                                                        timeout=120)
                                self.assertEqual(resp, want)
                # The offline upload plan equals the daemon's PlanUpload.
                for name in scenarios.SCENARIOS:
                    req = scenarios.build(name, 1)
                    up = planner.PlanUpload(pb.PlanUploadRequest(
                        placement=req.writer, format=req.layout.format),
                        timeout=30)
                    self.assertEqual(up.layout_id, req.layout_id, name)
            finally:
                channel.close()


# ------------------------------------------------------- scripts/*.py --

class ScenarioCommandTests(unittest.TestCase):
    def test_scenario_prints_a_plan(self):
        proc = subprocess.run(
            [sys.executable, os.path.join(REPO, "scripts", "scenario.py"),
             "S2", "--daemon", e.DAEMON, "--repeat", "3", "--copies", "5",
             "--pygen", e.PYGEN],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, timeout=300)
        out = proc.stdout.decode()
        self.assertEqual(proc.returncode, 0, proc.stderr.decode())
        self.assertIn("S2 llama3-70b", out)
        self.assertIn("writer DP1·PP1·TP8 stores LPHD", out)
        # One row per reader participant (TP4 x PP2), then the totals.
        self.assertEqual(len(re.findall(r"^S2-reader-d0p\dt\d ", out, re.M)),
                         8)
        self.assertIn("total: 8 participants", out)
        self.assertRegex(out, r"median [\d.]+ ms, p99 [\d.]+ ms")
        self.assertIn("first 5 of", out)
        self.assertEqual(len(re.findall(r"^\s+\d+  S2-page-0000\d ", out,
                                        re.M)), 5)


class LoadReportTests(unittest.TestCase):
    """scripts/load.py's report, without a daemon or h2load."""

    def test_cpu_share_under_one_clock_tick(self):
        # Where the daemon's CPU is read in 10 ms ticks, 500 fast calls can
        # read as none, and the report must say so rather than divide by it.
        import load
        self.assertEqual(load.percent(10.0, 0.0), "n/a (under one clock tick)")
        self.assertEqual(load.percent(10.0, 40.0), "25.0 %")

    def test_process_cpu_read_below_one_clock_tick(self):
        # A process's CPU is read to the nanosecond, not in /proc's 10 ms
        # ticks: 3 ms of work reads as 3 ms, where ticks read 0 or 10.
        import load_daemon
        pid = os.getpid()
        before, own = load_daemon.cpu_seconds(pid), time.process_time()
        while time.process_time() - own < 0.003:
            pass
        spent = load_daemon.cpu_seconds(pid) - before
        self.assertGreaterEqual(spent, 0.003)
        self.assertLess(spent, 0.009)
        self.assertIsNone(load_daemon.cpu_seconds(None))


class LoadSmokeTests(unittest.TestCase):
    """scripts/load.py with h2load: thousands of requests at 64 concurrent
    streams, zero failures, memory flat (plain build)."""

    def test_h2load_smoke(self):
        import load
        requests = 2000 if SANITIZED else 5000
        warmup = 500 if SANITIZED else 1000
        argv = ["--daemon", e.DAEMON, "--pygen", e.PYGEN,
                "--scenario", "S1-8", "--requests", str(requests),
                "--warmup", str(warmup), "--clients", "4", "--streams", "16",
                "--time-limit", "240",
                "--rss-growth-mib", "0" if SANITIZED else "24"]
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main(argv + ["--json", out])
            self.assertEqual(code, 0, "scripts/load.py failed (see above)")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["concurrent_streams"], 64)
        self.assertEqual(result["h2load"]["succeeded"], requests)
        self.assertEqual(result["problems"], [])
        # The ceiling run loads Health/Check as many times, same run.
        self.assertEqual(
            result["daemon_counter_deltas"],
            {"reshard.v1.Planner/PlanLoad OK": requests + warmup,
             "grpc.health.v1.Health/Check OK": 20000})
        self.assertGreater(result["ceiling_requests_per_second"], 0)
        self.assertGreater(result["share"], 0)

    def test_h2load_short_mixed(self):
        """The quick mode CI runs: ceiling, share and the mixed S1-8 + S5
        run, every call OK."""
        import load
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main(["--daemon", e.DAEMON, "--pygen", e.PYGEN,
                              "--short", "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --short failed")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["problems"], [])
        self.assertEqual(result["mixed"]["large"]["h2load"]["succeeded"], 40)
        self.assertEqual(result["mixed"]["small"]["h2load"]["succeeded"], 300)
        self.assertGreater(result["mixed"]["small"]["latency_ms"]["samples"],
                           0)

    def test_h2load_pooled_smoke(self):
        """--pooled: the reader's placement and pool registered first,
        then PlanLoad by memory id and block table (with runs), and S5
        pooled beside it; every call OK."""
        import load
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main([
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--pooled",
                "--runs", "--scenario", "S1-8", "--requests", "500",
                "--warmup", "100", "--ceiling-requests", "1000",
                "--mix", "S5", "--mix-pooled", "--mix-requests", "20",
                "--time-limit", "240", "--rss-growth-mib", "0",
                "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --pooled failed")
            with open(out) as f:
                result = json.load(f)
        self.assertTrue(result["pooled"])
        self.assertTrue(result["mix_plan"]["pooled"])
        self.assertEqual(result["problems"], [])
        self.assertGreater(result["plan"]["runs"], 0)
        # Page keys, a few bytes per block id, O(1) besides (SPEC §7).
        self.assertLess(result["request_bytes"], 1024)
        self.assertEqual(
            result["daemon_counter_deltas"],
            {"reshard.v1.Planner/PlanLoad OK": 500 + 100 + 500 + 20,
             "grpc.health.v1.Health/Check OK": 1000})
        self.assertGreater(result["share"], 0)

    def test_h2load_transfer_smoke(self):
        """--method PlanTransfer: T1-128's placements and pools registered
        first, then PlanTransfer by memory ids and block tables, with
        runs; every call OK."""
        import load
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main([
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--method",
                "PlanTransfer", "--runs", "--requests", "500", "--warmup",
                "100", "--ceiling-requests", "1000", "--time-limit", "240",
                "--rss-growth-mib", "0", "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --method PlanTransfer "
                             "failed")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["scenario"], "T1-128")
        self.assertTrue(result["transfer"])
        self.assertEqual(result["problems"], [])
        self.assertGreater(result["plan"]["runs"], 0)
        self.assertEqual(
            result["daemon_counter_deltas"],
            {"reshard.v1.Planner/PlanTransfer OK": 600,
             "grpc.health.v1.Health/Check OK": 1000})
        self.assertGreater(result["share"], 0)

    def test_h2load_unix_socket(self):
        """--unix: the daemon listens on a Unix socket, the set-up and
        h2load go through it, every call OK, and the socket's directory
        is gone afterwards."""
        import load
        before = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                            "reshard-load-*")))
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "load.json")
            code = load.main([
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--unix",
                "--scenario", "S1-8", "--requests", "500", "--warmup", "100",
                "--ceiling-requests", "1000", "--time-limit", "240",
                "--rss-growth-mib", "0", "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --unix failed")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["transport"], "unix")
        self.assertEqual(result["problems"], [])
        self.assertEqual(result["h2load"]["succeeded"], 500)
        self.assertEqual(
            result["daemon_counter_deltas"],
            {"reshard.v1.Planner/PlanLoad OK": 600,
             "grpc.health.v1.Health/Check OK": 1000})
        after = set(glob.glob(os.path.join(tempfile.gettempdir(),
                                           "reshard-load-*")))
        self.assertEqual(after - before, set(), "socket directory left")

    def test_h2load_tls_smoke(self):
        """The TLS variant: h2load over https against --tls-cert."""
        import load
        from reshard_certs import CertAuthority
        with tempfile.TemporaryDirectory() as tmp:
            ca = CertAuthority(tmp)
            cert, key = ca.issue("server")
            out = os.path.join(tmp, "load.json")
            code = load.main([
                "--daemon", e.DAEMON, "--pygen", e.PYGEN, "--scenario",
                "S1-8", "--requests", "500", "--warmup", "100", "--clients",
                "2", "--streams", "8", "--time-limit", "240",
                "--rss-growth-mib", "0", "--no-ceiling", "--tls-ca", ca.pem,
                "--daemon-flag=--tls-cert=" + cert,
                "--daemon-flag=--tls-key=" + key, "--json", out])
            self.assertEqual(code, 0, "scripts/load.py --tls-ca failed")
            with open(out) as f:
                result = json.load(f)
        self.assertEqual(result["h2load"]["succeeded"], 500)
        self.assertEqual(result["problems"], [])
        self.assertEqual(result["daemon_counter_deltas"],
                         {"reshard.v1.Planner/PlanLoad OK": 600})


if __name__ == "__main__":
    unittest.main()
