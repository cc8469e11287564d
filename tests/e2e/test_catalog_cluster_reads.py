"""End-to-end test of the Redis Cluster catalog's reads over several slots
(rule 1 of daemon/catalog/redis/redis_cluster.c, redis_cluster_split.c):
a get_objects whose keys live in different slots is split into one MGET
per slot and gathered back in order. A PlanTransfer is what reaches it:
its source pools (``reshard:memory:<id>``, one key each, spread over the
slots) are read in one catalog call for every pool the daemon has not
cached.

With three primaries (no replicas; reshard_redis_cluster.py starts them
and kills them in its cleanup), T2 of SPEC §6 (TP8 prefill into TP4·PP2
decode, eight source pools) is registered through daemon A, and planned
through daemons that never saw the pools, so each reads all of them from
the cluster at once:

* the plan, with and without runs and with the pools named in any order,
  is byte for byte the plan of a daemon on the memory catalog;
* an unregistered id among them is NOT_FOUND naming its position, so the
  gathered records stay in the caller's order.

A read not split would be answered ``CROSSSLOT`` by Redis: the plan would
fail. Run through ctest (tests/e2e/CMakeLists.txt sets the environment).
"""

import os
import sys
import unittest

import grpc

import reshard_e2e as e
from reshard_e2e import pb
from reshard_redis_cluster import RedisCluster, key_slot
from test_catalog_durability import CatalogCase

sys.path.insert(0, os.path.join(e.REPO_DIR, "deploy", "ghz"))
import transfer_scenarios  # noqa: E402 (deploy/ghz, as tests/deploy does)

UNKNOWN_ID = "sha256:" + "0" * 64


def plan_transfer(planner, request, timeout=60):
    call = planner.channel.unary_unary(
        "/reshard.v1.Planner/PlanTransfer",
        request_serializer=pb.PlanTransferRequest.SerializeToString,
        response_deserializer=pb.PlanTransferResponse.FromString)
    return call(request, timeout=timeout)


def memory_slot(memory_id):
    return key_slot("reshard:memory:" + memory_id)


def with_ids(request, ids):
    out = pb.PlanTransferRequest()
    out.CopyFrom(request)
    del out.source_memory_ids[:]
    out.source_memory_ids.extend(ids)
    return out


class RedisClusterSplitReadTests(CatalogCase):

    def setUp(self):
        super().setUp()
        self.t = transfer_scenarios.build("T2", tokens=256)
        self.cluster = RedisCluster(primaries=3, replicas=0).start()
        self.addCleanup(self.cluster.cleanup)

    def register(self, planner):
        for method, request in self.t.registrations():
            getattr(planner, method)(request, timeout=10)

    def fresh(self):
        """A daemon on the cluster with nothing cached."""
        return self.start(self.cluster.url)[1]

    def test_transfer_reads_pools_of_several_slots(self):
        t = self.t
        ids = list(t.source_memory_ids)
        self.assertEqual(len(ids), 8)
        slots = {memory_slot(m) for m in ids}
        owners = {self.cluster.owner(s).port for s in slots}
        self.assertGreater(len(slots), 1, "every pool in one slot")
        self.assertGreater(len(owners), 1, "every pool on one primary")

        _, reference = self.start("memory")
        self.register(reference)
        self.register(self.fresh())
        shuffled = ids[1::2] + ids[0::2][::-1]
        cases = [("in order", t.plan_transfer),
                 ("with runs", t.plan_transfer_runs),
                 ("shuffled", with_ids(t.plan_transfer, shuffled))]
        for name, request in cases:
            with self.subTest(name):
                want = plan_transfer(reference, request)
                got = plan_transfer(self.fresh(), request)
                self.assertGreater(len(got.batches), 0)
                self.assertEqual(got.SerializeToString(),
                                 want.SerializeToString())
        e.log("PlanTransfer T2: 8 pools over %d slots on %d primaries read "
              "in one split get_objects; plans equal the memory catalog's"
              % (len(slots), len(owners)))

    def test_a_missing_pool_is_named_at_its_position(self):
        t = self.t
        self.register(self.fresh())
        for position in (0, 3, 8):
            ids = list(t.source_memory_ids)
            ids.insert(position, UNKNOWN_ID)
            with self.subTest(position=position):
                err = e.rpc_error(plan_transfer, self.fresh(),
                                  with_ids(t.plan_transfer, ids))
                self.assertIsNotNone(err, "an unknown pool was planned")
                self.assertEqual(err.code(), grpc.StatusCode.NOT_FOUND,
                                 err.details())
                self.assertIn("source_memory_ids[%d] %s: not registered"
                              % (position, UNKNOWN_ID), err.details())


if __name__ == "__main__":
    unittest.main()
