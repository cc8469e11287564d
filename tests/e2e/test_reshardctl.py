"""End-to-end tests of reshardctl against a real reshardd.

The sample files in clients/examples/ are published, registered and planned
through the CLI; plans printed by reshardctl are compared byte for byte with
the same plan fetched by Python grpcio and printed by reshard_e2e (so "plans
print the same from any client"), and the printed JSON plan is executed and
checked with the SPEC §2.4 oracle. The memory-pool files (pool.json,
pooled.json, pooled-inline.json) register, plan the same as plan.json's
binding and are forgotten through the CLI.
"""

import json
import os
import subprocess
import tempfile
import unittest

from google.protobuf import json_format

import reshard_e2e as e
import reshard_pools as pools
from reshard_e2e import pb

EXAMPLES = os.path.join(e.REPO_DIR, "clients", "examples")
GOLDEN_LAYOUT_ID = ("sha256:5c41a9b1437c03b3e8e8f489ebfbf362"
                    "a0c7c6a5afa8ba978a852f9dae5454c4")
GOLDEN_MODEL_DOMAIN = ("db2449842bf6d7d200bb53eef28f716e"
                       "ede232fc4afb5e81b95fd9f7dedaca77")


def example(name):
    return os.path.join(EXAMPLES, name)


def load_example(name, message):
    with open(example(name)) as f:
        return json_format.ParseDict(json.load(f), message)


def parse_kv(text):
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        out[key] = value
    return out


class ReshardctlTests(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not e.RESHARDCTL or not os.access(e.RESHARDCTL, os.X_OK):
            raise unittest.SkipTest("RESHARD_E2E_RESHARDCTL is not set")
        cls.daemon = e.Daemon().start()
        cls.channel = cls.daemon.channel()
        cls.planner = e.Planner(cls.channel)
        cls.tmp = tempfile.TemporaryDirectory()

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.tmp.cleanup()
        code = cls.daemon.stop()
        if code != 0:
            raise AssertionError("reshardd exited with %s:\n%s"
                                 % (code, cls.daemon.log_text()))

    def ctl(self, *args, target=None, stdin=None, timeout="10"):
        argv = [e.RESHARDCTL, "--target", target or self.daemon.target]
        if timeout is not None:
            argv += ["--timeout", timeout]
        proc = subprocess.run(argv + list(args), input=stdin,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=60)
        return (proc.returncode, proc.stdout.decode("utf-8"),
                proc.stderr.decode("utf-8"))

    def ok(self, *args, **kwargs):
        rc, out, err = self.ctl(*args, **kwargs)
        self.assertEqual(rc, 0, "reshardctl %s: %s" % (" ".join(args), err))
        return out

    def fails(self, rc_expected, *args, **kwargs):
        rc, out, err = self.ctl(*args, **kwargs)
        self.assertEqual(rc, rc_expected,
                         "reshardctl %s: rc %d, stdout %r, stderr %r"
                         % (" ".join(args), rc, out, err))
        self.assertTrue(err.startswith("error: "), err)
        return err

    def write(self, name, obj):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            if isinstance(obj, str):
                f.write(obj)
            else:
                json.dump(obj, f)
        return path

    def publish_example(self):
        return parse_kv(self.ok("publish", example("manifest.json")))

    # -- usage --
    def test_usage(self):
        rc, out, _ = self.ctl("--help")
        self.assertEqual(rc, 0)
        self.assertIn("usage: reshardctl", out)
        self.assertIn("no command", self.fails(2))
        self.assertIn("frobnicate", self.fails(2, "frobnicate"))
        self.assertIn("--format", self.fails(2, "plan", example("plan.json"),
                                             "--format", "yaml"))
        self.assertIn("--timeout", self.fails(2, "health", timeout="never"))
        self.fails(2, "register", "only-a-manifest-key")
        self.fails(2, "forget", "domain-only")
        self.fails(2, "publish")
        self.fails(2, "--bogus", "health")

    # -- publish / get --
    def test_publish_example(self):
        out = self.publish_example()
        self.assertEqual(out["layout_id"], GOLDEN_LAYOUT_ID)
        self.assertEqual(out["model_domain"], GOLDEN_MODEL_DOMAIN)
        self.assertEqual(out["manifest_key"],
                         "kv/%s/manifests/%s" % (GOLDEN_MODEL_DOMAIN,
                                                 GOLDEN_LAYOUT_ID[7:]))
        self.assertIn(out["created"], ("true", "false"))
        again = self.publish_example()
        self.assertEqual(again["created"], "false")
        self.assertEqual(again["manifest_key"], out["manifest_key"])

    def test_publish_from_stdin(self):
        with open(example("manifest.json"), "rb") as f:
            out = parse_kv(self.ok("publish", "-", stdin=f.read()))
        self.assertEqual(out["layout_id"], GOLDEN_LAYOUT_ID)

    def test_get_round_trips(self):
        key = self.publish_example()["manifest_key"]
        doc = json.loads(self.ok("get", key))
        self.assertEqual(doc["layout_id"], GOLDEN_LAYOUT_ID)
        self.assertEqual(doc["model_domain"], GOLDEN_MODEL_DOMAIN)
        self.assertEqual(doc["manifest"]["layout"]["format"], "LPHD")
        # The printed manifest is valid input for publish.
        path = self.write("roundtrip.json", doc["manifest"])
        again = parse_kv(self.ok("publish", path))
        self.assertEqual(again["manifest_key"], key)
        self.assertEqual(again["created"], "false")

    # -- placements and upload plans --
    def test_register_placement_example(self):
        out = parse_kv(self.ok("register-placement",
                               example("placement.json")))
        placement = load_example("placement.json", pb.Placement())
        self.assertEqual(out["placement_id"],
                         e.canonical_placement_id(placement))

    def test_plan_upload_example(self):
        doc = json.loads(self.ok("plan-upload", example("plan-upload.json")))
        self.assertEqual(doc["layout_id"], GOLDEN_LAYOUT_ID)
        self.assertEqual(doc["part_writers"], ["writer-tp0", "writer-tp1"])
        self.assertEqual(doc["layout"]["format"], "LPHD")

    # -- the plan, printed the same from every client --
    def plan_example(self):
        key = self.publish_example()["manifest_key"]
        self.ok("register", key, "page-0", "page-1")
        request = load_example("plan.json", pb.PlanLoadRequest())
        resp = self.planner.PlanLoad(request, timeout=10)
        return key, request, resp

    def test_register_prints_added(self):
        key = self.publish_example()["manifest_key"]
        out = parse_kv(self.ok("register", key, "reg-0", "reg-1"))
        self.assertEqual(out["added"], "2")
        out = parse_kv(self.ok("register", key, "reg-0", "reg-1", "reg-2"))
        self.assertEqual(out["added"], "1")

    def test_plan_table_matches_python(self):
        _, _, resp = self.plan_example()
        self.assertEqual(resp.hit_pages, 2)
        table = self.ok("plan", example("plan.json"))
        self.assertEqual(table, e.plan_table_text(resp))
        table2 = self.ok("plan", "--format", "table", example("plan.json"))
        self.assertEqual(table2, table)
        lines = table.splitlines()
        self.assertTrue(lines[0].startswith("# hit_pages=2 placement_id="))
        self.assertTrue(lines[-1].startswith("# batches="))
        header = lines[3].split()
        self.assertEqual(header, ["BATCH", "PAGE_KEY", "PART", "PART_OFFSET",
                                  "REGION_ID", "REGION_OFFSET", "NBYTES"])
        self.assertEqual(len(lines), 3 + 1 + resp.stats.operations + 1)

    def test_plan_json_matches_python_and_executes(self):
        _, request, resp = self.plan_example()
        text = self.ok("plan", example("plan.json"), "--format", "json")
        self.assertEqual(text, e.plan_json_text(resp))
        doc = json.loads(text)
        self.assertEqual(doc["hit_pages"], 2)
        self.assertEqual(doc["placement_id"],
                         e.canonical_placement_id(request.placement))
        copied = self.execute_printed(request, doc)
        # 2 pages x 2 layers x 2 components x 16 tokens x 2 heads x 16 B.
        self.assertEqual(copied, 2 * 2 * 2 * 16 * 2 * 16)

    def execute_printed(self, request, doc):
        """Executes a printed plan against Parts of the example layout and
        checks it with the oracle; returns the bytes copied."""
        manifest = load_example("manifest.json", pb.StoreManifest())
        store = e.PartStore()
        store.add_layout(GOLDEN_LAYOUT_ID, manifest.layout)
        binding = e.Binding(request.binding,
                            {r.region_id: r.nbytes
                             for r in request.binding.regions})
        return e.verify_plan(e.plan_from_document(doc), store,
                             manifest.layout.descriptor, binding,
                             list(request.page_keys), request.limits)

    def test_plan_runs_match_python_and_execute(self):
        _, request, explicit = self.plan_example()
        request.runs = True
        resp = self.planner.PlanLoad(request, timeout=10)
        self.assertTrue(e.has_runs(resp))
        table = self.ok("plan", example("plan.json"), "--runs")
        self.assertEqual(table, e.plan_table_text(resp))
        lines = table.splitlines()
        self.assertEqual(lines[3].split(), [
            "BATCH", "PAGE_KEY", "PART", "PART_OFFSET", "PART_STRIDE",
            "REGION_ID", "REGION_OFFSET", "REGION_STRIDE", "NBYTES",
            "COUNT"])
        self.assertEqual(len(lines), 3 + 1 + resp.stats.runs + 1)
        self.assertTrue(lines[-1].endswith(" runs=%d" % resp.stats.runs))
        text = self.ok("plan", "--runs", "--format", "json",
                       example("plan.json"))
        self.assertEqual(text, e.plan_json_text(resp))
        doc = json.loads(text)
        self.assertEqual(doc["stats"]["runs"], resp.stats.runs)
        # The printed runs are the explicit plan's copies, and execute.
        self.assertEqual(e.plan_copies(e.plan_from_document(doc)),
                         e.plan_copies(explicit))
        self.assertEqual(self.execute_printed(request, doc),
                         explicit.stats.bytes)

    def test_plan_by_placement_id(self):
        self.plan_example()
        pid = parse_kv(self.ok("register-placement",
                               example("placement.json")))["placement_id"]
        with open(example("plan.json")) as f:
            doc = json.load(f)
        del doc["placement"]
        doc["placement_id"] = pid
        by_id = self.ok("plan", self.write("by-id.json", doc))
        inline = self.ok("plan", example("plan.json"))
        self.assertEqual(by_id, inline)

    # -- memory pools (SPEC §1.5a) --
    def example_memory_id(self):
        with open(example("pooled.json")) as f:
            return json.load(f)["memory_id"]

    def register_example_pool(self, *target):
        return parse_kv(self.ok("register-memory", example("pool.json"),
                                *(target or ("--placement",
                                             example("placement.json")))))

    def test_register_memory_example(self):
        mid = self.example_memory_id()
        self.ok("forget-memory", mid)  # whatever another test left
        out = self.register_example_pool()
        self.assertEqual(out, {"memory_id": mid, "created": "true"})
        self.assertEqual(self.register_example_pool(),
                         {"memory_id": mid, "created": "false"})
        # The id is SPEC §1.5a's digest with placement.json's id; by that
        # id the registration is the same one.
        pid = e.canonical_placement_id(load_example("placement.json",
                                                    pb.Placement()))
        pool = load_example("pool.json", pb.MemoryPool())
        self.assertEqual(pools.memory_id(pool, pid), mid)
        self.ok("register-placement", example("placement.json"))
        self.assertEqual(self.register_example_pool("--placement-id", pid),
                         {"memory_id": mid, "created": "false"})
        # A whole RegisterMemoryRequest as the file.
        path = self.write("register-memory.json", {
            "pool": json_format.MessageToDict(
                pool, preserving_proto_field_name=True),
            "placement_id": pid})
        self.assertEqual(parse_kv(self.ok("register-memory", path)),
                         {"memory_id": mid, "created": "false"})

    def test_plan_pooled_prints_the_same(self):
        self.plan_example()
        self.register_example_pool()
        for args in ((), ("--format", "json"), ("--runs",),
                     ("--runs", "--format", "json")):
            with self.subTest(args=args):
                want = self.ok("plan", example("plan.json"), *args)
                for name in ("pooled.json", "pooled-inline.json"):
                    got = self.ok("plan", example("plan.json"), *args,
                                  "--pooled", example(name))
                    self.assertEqual(got, want, name)

    def test_transfer_example(self):
        # docs/clients.md's P/D example: the prefill rank's pool and the
        # reader's, then the transfer printed exactly as the docs show it.
        self.register_example_pool()
        registered = parse_kv(self.ok("register-memory",
                                      example("transfer-pool.json")))
        self.assertIn(registered["created"], ("true", "false"))
        table = self.ok("transfer", example("transfer.json"))
        with open(os.path.join(os.path.dirname(example("transfer.json")),
                               "..", "..", "docs", "clients.md")) as f:
            docs = f.read()
        start = docs.index("Table, `reshardctl transfer "
                           "clients/examples/transfer.json`:")
        block = docs[docs.index("```\n", start) + 4:]
        self.assertEqual(table, block[:block.index("```")])
        self.assertIn("memory_id=" + registered["memory_id"], table)
        # Runs and the same target given inline plan the same bytes.
        runs = self.ok("transfer", example("transfer.json"), "--runs")
        self.assertIn("runs=2", runs)
        self.assertEqual(
            self.ok("transfer", example("transfer.json"), "--pooled",
                    example("pooled-inline.json")), table)

    def test_forget_memory_example(self):
        mid = self.example_memory_id()
        self.plan_example()
        self.register_example_pool()
        self.assertEqual(self.ok("forget-memory", mid), "removed=true\n")
        self.assertEqual(self.ok("forget-memory", mid), "removed=false\n")
        err = self.fails(1, "plan", example("plan.json"), "--pooled",
                         example("pooled.json"))
        self.assertTrue(err.startswith("error: NOT_FOUND: pooled.memory_id "
                                       + mid + ": not registered"), err)
        # The inline pool needs no registration.
        self.assertEqual(self.ok("plan", example("plan.json"), "--pooled",
                                 example("pooled-inline.json")),
                         self.ok("plan", example("plan.json")))
        err = self.fails(1, "forget-memory", "sha256:nope")
        self.assertTrue(err.startswith("error: INVALID_ARGUMENT: memory_id: "),
                        err)
        self.fails(2, "forget-memory")
        self.fails(2, "forget-memory", mid, mid)

    # -- forget --
    def test_forget(self):
        key = self.publish_example()["manifest_key"]
        self.ok("register", key, "fg-0", "fg-1", "fg-2")
        out = parse_kv(self.ok("forget", GOLDEN_MODEL_DOMAIN, "fg-0"))
        self.assertEqual(out["removed"], "1")
        out = parse_kv(self.ok("forget", GOLDEN_MODEL_DOMAIN, "fg-1",
                               "--manifest", key, "fg-2"))
        self.assertEqual(out["removed"], "2")
        out = parse_kv(self.ok("forget", GOLDEN_MODEL_DOMAIN, "fg-1"))
        self.assertEqual(out["removed"], "0")

    # -- health --
    def test_health(self):
        self.assertEqual(self.ok("health"), "SERVING\n")
        self.assertEqual(self.ok("health", "reshard.v1.Planner"),
                         "SERVING\n")
        err = self.fails(1, "health", "no.such.Service")
        self.assertTrue(err.startswith("error: NOT_FOUND: "), err)

    # -- errors --
    def test_rpc_errors_exit_1(self):
        missing = "kv/%s/manifests/%s" % ("0" * 64, "1" * 64)
        err = self.fails(1, "get", missing)
        self.assertTrue(err.startswith("error: NOT_FOUND: "), err)
        err = self.fails(1, "register", missing, "p")
        self.assertTrue(err.startswith("error: NOT_FOUND: "), err)
        with open(example("manifest.json")) as f:
            doc = json.load(f)
        doc["layout"]["descriptor"]["itemsize"] = 0
        err = self.fails(1, "publish", self.write("bad.json", doc))
        self.assertTrue(err.startswith("error: INVALID_ARGUMENT: "), err)
        self.assertIn("itemsize", err)
        with open(example("plan.json")) as f:
            doc = json.load(f)
        doc["model_domain"] = "f" * 64
        err = self.fails(1, "plan", self.write("unknown-domain.json", doc))
        self.assertTrue(err.startswith("error: NOT_FOUND: "), err)
        self.assertEqual(self.ok("health"), "SERVING\n")

    def test_json_errors_exit_2_and_name_the_path(self):
        path = self.write("syntax.json", '{"namespace": "ns",\n  "layout": ')
        err = self.fails(2, "publish", path)
        self.assertIn(path + ":", err)
        with open(example("manifest.json")) as f:
            doc = json.load(f)
        doc["layout"]["descriptor"]["itemsize"] = "two"
        err = self.fails(2, "publish", self.write("type.json", doc))
        self.assertIn("layout.descriptor.itemsize", err)
        with open(example("plan.json")) as f:
            doc = json.load(f)
        doc["binding"]["ranges"][3]["token_count"] = -16
        err = self.fails(2, "plan", self.write("neg.json", doc))
        self.assertIn("binding.ranges[3].token_count", err)
        doc["binding"]["ranges"][3]["token_count"] = 16
        doc["binding"]["ranges"][5]["component"] = "QUERY"
        err = self.fails(2, "plan", self.write("enum.json", doc))
        self.assertIn("binding.ranges[5].component", err)
        del doc["binding"]["ranges"][5]["component"]
        doc["binding"]["ranges"][5]["stride"] = 1
        err = self.fails(2, "plan", self.write("unknown.json", doc))
        self.assertIn("binding.ranges[5].stride", err)
        self.assertIn("unknown field", err)
        with open(example("plan.json")) as f:
            doc = json.load(f)
        doc["placement_id"] = "sha256:x"
        err = self.fails(2, "plan", self.write("oneof.json", doc))
        self.assertIn("placement", err)
        err = self.fails(2, "publish", os.path.join(self.tmp.name, "nope"))
        self.assertIn("nope", err)

    def test_deadline_exceeded(self):
        # A 64-page plan of 262 144 copies, written as JSON the way
        # protobuf's json_format writes it (64-bit values as strings).
        desc = e.make_descriptor(32, 8, 128, 128, 16)
        fleet = e.Fleet(self.planner)
        pub, _ = fleet.publish_writer(
            e.make_placement(desc, 1, 1, 1, "ctl-big-w"), pb.PLHD,
            model_id="ctl-big")
        keys = ["ctl-big-%d" % i for i in range(64)]
        fleet.register(pub.manifest_key, keys)
        reader = e.make_placement(desc, 1, 1, 2, "ctl-big-r")
        binding = e.make_binding(desc, reader.parts[0], 64, pad=True)
        req = pb.PlanLoadRequest(model_domain=pub.model_domain,
                                 page_keys=keys, placement=reader,
                                 binding=binding.message)
        path = self.write("big.json", json_format.MessageToDict(
            req, preserving_proto_field_name=True))
        # Deadlines are raced, not guaranteed: at least one of these tiny
        # ones must win, and a lost race must print the plan.
        outcomes = []
        for timeout in ("0.000001", "0.0001", "0.001", "0.002"):
            rc, out, err = self.ctl("plan", path, "--format", "json",
                                    timeout=timeout)
            outcomes.append(rc)
            if rc != 0:
                self.assertEqual(rc, 1, err)
                self.assertTrue(err.startswith("error: DEADLINE_EXCEEDED: "),
                                err)
        self.assertIn(1, outcomes)
        doc = json.loads(self.ok("plan", path, "--format", "json",
                                 timeout="60"))
        self.assertEqual(doc["stats"]["operations"], 64 * 16 * 32 * 2 * 4)

    def test_c_client_library(self):
        smoke = os.environ.get("RESHARD_E2E_CLIENT_SMOKE", "")
        if not smoke:
            self.skipTest("RESHARD_E2E_CLIENT_SMOKE is not set")
        proc = subprocess.run([smoke, self.daemon.target],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=60)
        out = proc.stdout.decode()
        self.assertEqual(proc.returncode, 0, out + proc.stderr.decode())
        self.assertTrue(out.startswith("ok "), out)

    def test_unreachable_daemon(self):
        daemon = e.Daemon().start()
        target = daemon.target
        self.assertEqual(self.ok("health", target=target), "SERVING\n")
        self.assertEqual(daemon.stop(), 0)
        err = self.fails(1, "health", target=target, timeout="3")
        self.assertTrue(err.startswith("error: UNAVAILABLE: "), err)


if __name__ == "__main__":
    unittest.main()
