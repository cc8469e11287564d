"""Tests of the metrics endpoint against the real binary.

* PrometheusTests — Debian's real prometheus scrapes the daemon on loopback
  and a counter is queried back through its HTTP API; promtool accepts the
  exposition, and a PlanLoad, a PlanStore and two PlanTransfers (T1 with
  128 tokens, with and without runs) move the plan families' series of
  their own method label and no other.

Environment (tests/deploy/CMakeLists.txt): RESHARD_E2E_DAEMON,
RESHARD_E2E_RESHARDCTL, RESHARD_E2E_PYGEN, RESHARD_SANITIZED (1 in the
ASan+UBSan build: the load test runs fewer requests and skips the memory
bound, which ASan's quarantine would break).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest
import urllib.parse

import yaml

import reshard_e2e as e
from reshard_e2e import pb
from deploy_support import free_port, http_get, metrics_address


# ----------------------------------------------------------- prometheus --

class PrometheusTests(unittest.TestCase):
    """The metrics endpoint, scraped by Debian's real prometheus."""

    def test_prometheus_scrapes_and_queries_a_counter(self):
        prometheus = shutil.which("prometheus")
        self.assertIsNotNone(prometheus, "prometheus is not installed "
                             "(scripts/install-deps.sh installs it)")
        with e.Daemon("--metrics-listen", "127.0.0.1:0") as daemon, \
                tempfile.TemporaryDirectory(prefix="reshard-prom-") as tmp:
            metrics = metrics_address(daemon)
            channel = daemon.channel()
            planner = e.Planner(channel)
            checks = 7
            for _ in range(checks):
                self.assertEqual(planner.health(), e.SERVING)
            err = e.rpc_error(planner.GetManifest, pb.GetManifestRequest(
                manifest_key="kv/%s/manifests/%s" % ("0" * 64, "1" * 64)),
                timeout=10)
            self.assertEqual(err.code().name, "NOT_FOUND")
            channel.close()

            config = os.path.join(tmp, "prometheus.yml")
            with open(config, "w") as f:
                yaml.safe_dump({
                    "global": {"scrape_interval": "1s",
                               "evaluation_interval": "1s"},
                    "scrape_configs": [{
                        "job_name": "reshardd",
                        "scrape_interval": "1s",
                        "scrape_timeout": "1s",
                        "static_configs": [{"targets": [metrics]}]}]}, f)
            port = free_port()
            web = "127.0.0.1:%d" % port
            log = open(os.path.join(tmp, "prometheus.log"), "w+")
            proc = subprocess.Popen(
                [prometheus, "--config.file=" + config,
                 "--storage.tsdb.path=" + os.path.join(tmp, "data"),
                 "--web.listen-address=" + web, "--log.level=warn"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log)
            try:
                series = self.wait_for_series(proc, web, log, checks)
            finally:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                log.close()
            labels = {(s["metric"]["method"], s["metric"]["code"]):
                      float(s["value"][1]) for s in series}
            self.assertEqual(labels[("Check", "OK")], checks)
            self.assertEqual(labels[("GetManifest", "NOT_FOUND")], 1)

    def wait_for_series(self, proc, web, log, checks, timeout=90):
        """Polls the HTTP API until the scraped counter shows every health
        check; returns the query's result vector."""
        query = urllib.parse.urlencode({"query": "reshard_requests_total"})
        url = "http://%s/api/v1/query?%s" % (web, query)
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                self.fail("prometheus exited with %s:\n%s"
                          % (proc.returncode, log.read()[-4000:]))
            try:
                _, _, body = http_get(url, timeout=5)
                doc = json.loads(body)
                last = doc
                if doc.get("status") == "success":
                    for s in doc["data"]["result"]:
                        m = s["metric"]
                        if (m.get("method") == "Check"
                                and m.get("code") == "OK"
                                and float(s["value"][1]) >= checks
                                and m.get("job") == "reshardd"):
                            return doc["data"]["result"]
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        log.seek(0)
        self.fail("prometheus never returned reshard_requests_total "
                  "(last answer %r):\n%s" % (last, log.read()[-4000:]))
        return None

    def test_exposition_passes_promtool_and_counts_calls(self):
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool is missing (package "
                             "prometheus)")
        with e.Daemon("--metrics-listen", "127.0.0.1:0") as daemon:
            metrics = metrics_address(daemon)
            channel = daemon.channel()
            planner = e.Planner(channel)
            fleet = e.Fleet(planner)
            desc = e.make_descriptor(4, 2, 8, 8, 16)
            writer = e.make_placement(desc, 1, 1, 1, "m-w")
            pub, _ = fleet.publish_writer(writer, pb.PLHD)
            keys = ["m-%d" % i for i in range(3)]
            fleet.register(pub.manifest_key, keys)
            reader = e.make_placement(desc, 1, 1, 2, "m-r")
            binding = e.make_binding(desc, reader.parts[0], 3)
            resp = fleet.plan(pub.model_domain, keys, reader, binding)
            self.assertEqual(resp.hit_pages, 3)
            # The writer's PlanStore, as the raw bytes the daemon wrote.
            store_request = pb.PlanStoreRequest(
                manifest_key=pub.manifest_key, placement=writer,
                binding=e.make_binding(desc, writer.parts[0], 3).message,
                page_count=3, operation_id="metrics-store")
            store_bytes = planner.raw("PlanStore")(
                store_request.SerializeToString(), timeout=60)
            store = pb.PlanStoreResponse.FromString(store_bytes)
            self.assertGreater(store.stats.operations, 0)
            # PlanTransfer, as the raw bytes the daemon wrote (their length
            # is what reshard_plan_response_bytes_total counts).
            import transfer_scenarios as transfers
            t1 = transfers.build("T1", 128)
            for method, request in t1.registrations():
                getattr(planner, method)(request, timeout=30)
            transfer_bytes = [
                planner.raw("PlanTransfer")(request.SerializeToString(),
                                            timeout=60)
                for request in (t1.plan_transfer, t1.plan_transfer_runs)]
            transfer, transfer_runs = [
                pb.PlanTransferResponse.FromString(b) for b in transfer_bytes]
            self.assertGreater(transfer.stats.operations, 0)
            self.assertEqual(transfer.stats.runs, 0)
            self.assertGreater(transfer_runs.stats.runs, 0)
            channel.close()
            # The cache figures are published once a second.
            time.sleep(1.2)
            status, headers, text = http_get("http://%s/metrics" % metrics)
            self.assertEqual(status, 200)
            self.assertIn("version=0.0.4", headers["Content-Type"])
            check = subprocess.run([promtool, "check", "metrics"],
                                   input=text.encode(),
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, timeout=30)
            self.assertEqual(check.returncode, 0, check.stdout.decode())

            def value(series):
                m = re.search(r"^%s (\S+)$" % re.escape(series), text, re.M)
                self.assertIsNotNone(m, series)
                return float(m.group(1))

            self.assertEqual(value('reshard_requests_total{service="reshard.'
                                   'v1.Planner",method="PlanLoad",'
                                   'code="OK"}'), 1)
            load = '{method="PlanLoad"}'
            self.assertEqual(value("reshard_plan_copies_total" + load),
                             resp.stats.operations)
            self.assertEqual(value("reshard_plan_bytes_total" + load),
                             resp.stats.bytes)
            self.assertEqual(value("reshard_plan_duration_seconds_count"
                                   + load), 1)
            self.assertEqual(value('reshard_plans_total{method="PlanLoad",'
                                   'result="ok"}'), 1)
            self.assertEqual(value("reshard_plan_pages_total" + load), 3)
            # The two PlanTransfers, under their own label.
            self.assertEqual(value('reshard_requests_total{service="reshard.'
                                   'v1.Planner",method="PlanTransfer",'
                                   'code="OK"}'), 2)
            moved = '{method="PlanTransfer"}'
            self.assertEqual(value('reshard_plans_total{method='
                                   '"PlanTransfer",result="ok"}'), 2)
            self.assertEqual(value('reshard_plans_total{method='
                                   '"PlanTransfer",result="error"}'), 0)
            self.assertEqual(value("reshard_plan_duration_seconds_count"
                                   + moved), 2)
            self.assertEqual(value("reshard_plan_copies_total" + moved),
                             transfer.stats.operations
                             + transfer_runs.stats.operations)
            self.assertEqual(
                value("reshard_plan_copies_before_coalescing_total" + moved),
                transfer.stats.copies_before_coalescing
                + transfer_runs.stats.copies_before_coalescing)
            self.assertEqual(value("reshard_plan_bytes_total" + moved),
                             transfer.stats.bytes + transfer_runs.stats.bytes)
            self.assertEqual(value("reshard_plan_runs_requested_total"
                                   + moved), 1)
            self.assertEqual(value("reshard_plan_runs_total" + moved),
                             transfer_runs.stats.runs)
            self.assertEqual(value("reshard_plan_response_bytes_total"
                                   + moved),
                             sum(len(b) for b in transfer_bytes))
            self.assertNotIn("reshard_plan_pages_total" + moved, text)
            # The PlanStore, under its own label.
            kept = '{method="PlanStore"}'
            self.assertEqual(value('reshard_plans_total{method='
                                   '"PlanStore",result="ok"}'), 1)
            self.assertEqual(value("reshard_plan_copies_total" + kept),
                             store.stats.operations)
            self.assertEqual(value("reshard_plan_bytes_total" + kept),
                             store.stats.bytes)
            self.assertEqual(value("reshard_plan_response_bytes_total"
                                   + kept), len(store_bytes))
            self.assertNotIn("reshard_plan_pages_total" + kept, text)
            self.assertEqual(value('reshard_catalog_operation_duration_'
                                   'seconds_count{operation="add_pages"}'), 1)
            self.assertGreaterEqual(value('reshard_cache_hits_total{kind='
                                          '"manifest"}') +
                                    value('reshard_cache_misses_total{kind='
                                          '"manifest"}'), 0)
            self.assertGreater(value('reshard_cache_entries{kind='
                                     '"manifest"}'), 0)
            self.assertEqual(value("reshard_draining"), 0)
            self.assertGreater(value("process_resident_memory_bytes"), 0)


if __name__ == "__main__":
    unittest.main()
