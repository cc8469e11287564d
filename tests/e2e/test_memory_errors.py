"""Refusals of the memory RPCs and of pooled plans (SPEC §1.5a, §2.3, §3.4)
against a live reshardd with stock grpcio.

Each refusal is checked for its status and for a message naming the field
and the rule. After every refused RegisterMemory nothing was stored: the
id the pool would have had (SPEC §1.5a's digest, reshard_pools.memory_id)
plans NOT_FOUND and ForgetMemory of it says removed=false — both of which
would fail had the daemon kept the refused pool, in its cache or its
catalog. The daemon runs with small --max-block-ids and --max-pool-tensors
so that the decoder's pre-scan refuses longer tables and larger pools with
RESOURCE_EXHAUSTED naming the flag. After the batch the daemon still
serves, and the good pool still plans.
"""

import unittest

import reshard_e2e as e
import reshard_pools as pools
from reshard_e2e import VALUE, pb
from reshard_pools import MLA_DESC, World, expand, pooled
from reshard_testcase import Code, DaemonTestCase

MAX_BLOCK_IDS = 64
MAX_POOL_TENSORS = 8
NUM_BLOCKS = 9  # blocks of 4 tokens; the span of 3 pages needs 6


def edited(pool, edit):
    copy = pb.MemoryPool()
    copy.CopyFrom(pool)
    edit(copy)
    return copy


class MemoryRefusalTests(DaemonTestCase):

    daemon_flags = ("--max-block-ids", str(MAX_BLOCK_IDS),
                    "--max-pool-tensors", str(MAX_POOL_TENSORS))

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.world = World(cls.planner, "err")
        cls.part = cls.world.reader.parts[0]  # layers 0-1, heads 0-1
        cls.good = pools.vllm_pool(cls.world.desc, cls.part, 4, NUM_BLOCKS)
        got = cls.world.register(cls.good)
        assert got.created
        cls.mid = got.memory_id
        cls.table = list(range(NUM_BLOCKS))
        cls.mla = World(cls.planner, "err-mla", desc=MLA_DESC,
                        writer=(1, 1, 1))
        # Another placement with the same participants: Q to the pools' P.
        cls.other = e.make_placement(cls.world.desc, 1, 2, 2, "err-r",
                                     resource_id="other")
        cls.other_id = cls.world.register_placement(cls.other)

    def tearDown(self):
        self.assertEqual(self.planner.health(), e.SERVING)
        resp = self.world.load(pooled=pooled(self.mid, self.table))
        self.assertEqual(resp.hit_pages, len(self.world.keys))

    # -- helpers --
    def refused(self, code, fn, *parts):
        details = self.assertRpcError(code, fn)
        for part in parts:
            self.assertIn(part, details)
        return details

    def not_stored(self, pool, placement_id=None):
        """The id `pool` would have had names no pool."""
        pid = placement_id or self.world.reader_id
        would_be = pools.memory_id(pool, pid)
        self.refused(Code.NOT_FOUND, lambda: self.world.load(
            pooled=pooled(would_be, self.table)),
            "pooled.memory_id %s: not registered" % would_be)
        self.assertFalse(self.planner.ForgetMemory(pb.ForgetMemoryRequest(
            memory_id=would_be), timeout=10).removed)

    def refuse_pool(self, edit, *parts, code=Code.INVALID_ARGUMENT,
                    world=None, good=None):
        world = world or self.world
        bad = edited(good or self.good, edit)
        self.refused(code, lambda: world.register(bad), *parts)
        self.not_stored(bad, world.reader_id)
        return bad

    def plan_refused(self, code, request, *parts, store=False):
        call = self.planner.PlanStore if store else self.planner.PlanLoad
        return self.refused(code, lambda: call(request, timeout=30), *parts)

    def store_request(self, **fields):
        return pb.PlanStoreRequest(
            manifest_key=self.world.pub.manifest_key,
            placement_id=self.world.reader_id, page_count=len(self.world.keys),
            **fields)

    # -- the §1.5a pool rules, on RegisterMemory --
    def test_tensor_rules(self):
        pid = self.part.participant_id
        self.refuse_pool(lambda p: p.tensors.pop(),
                         "pool.tensors: no tensor for layer 1 VALUE",
                         'which participant "%s" owns' % pid)

        def duplicate(p):
            extra = p.tensors.add()
            extra.CopyFrom(p.tensors[0])
            extra.offset_bytes += 64
        self.refuse_pool(duplicate, "pool.tensors[4]: layer 0 KEY has a "
                         "tensor already (pool.tensors[0]); one per layer and "
                         "component")
        self.refuse_pool(lambda p: setattr(p.tensors[2], "global_layer_id", 3),
                         "pool.tensors[2].global_layer_id: layer 3 is not "
                         'owned by participant "%s"' % pid)
        self.refuse_pool(lambda p: setattr(p.tensors[0], "region_id",
                                           "nowhere"),
                         'pool.tensors[0].region_id: "nowhere" names no '
                         "region")
        # Component unset: no would-be id to compute (the digest names it).
        bad = edited(self.good, lambda p: setattr(p.tensors[0], "component",
                                                  pb.COMPONENT_UNSPECIFIED))
        self.refused(Code.INVALID_ARGUMENT, lambda: self.world.register(bad),
                     "pool.tensors[0].component: must be KEY or VALUE")

    def test_value_tensor_of_a_single_tensor_cache(self):
        mla_part = self.mla.reader.parts[0]
        good = pools.vllm_pool(MLA_DESC, mla_part, 4, NUM_BLOCKS)

        def add_value(p):
            extra = p.tensors.add()
            extra.CopyFrom(p.tensors[0])
            extra.component = VALUE
            extra.offset_bytes = p.regions[0].nbytes - 64
        self.refuse_pool(add_value, "pool.tensors[2].component: VALUE, but "
                         "the descriptor has value_head_dim 0",
                         world=self.mla, good=good)
        self.assertTrue(self.mla.register(good).created)

    def test_stride_and_extent_rules(self):
        # Row of 2 heads x 16 bytes = 32: a token stride of 24 folds it.
        self.refuse_pool(lambda p: setattr(p.tensors[0], "token_stride_bytes",
                                           24),
                         "pool.tensors[0].token_stride_bytes: 24 is below 32, "
                         "the extent of the axes below it")
        # A block of 4 tokens spans 128 bytes.
        self.refuse_pool(lambda p: setattr(p.tensors[1], "block_stride_bytes",
                                           64),
                         "pool.tensors[1].block_stride_bytes: 64 is below 128")
        # V of layer 0 ends at 2304; the region is cut to 2300 bytes.
        self.refuse_pool(lambda p: setattr(p.regions[0], "nbytes", 2300),
                         "pool.tensors[1]: the last byte of block 8 lies past "
                         'the end of region "%s/L0"'
                         % self.part.participant_id,
                         "offset_bytes 1152 + extent 1152 > nbytes 2300")
        self.refuse_pool(lambda p: setattr(p.tensors[0], "offset_bytes", 1),
                         "pool.tensors[0]: region address + offset_bytes "
                         "0x20000001 is not a multiple of itemsize 2")
        self.refuse_pool(lambda p: setattr(p.tensors[0], "block_stride_bytes",
                                           129),
                         "pool.tensors[0].block_stride_bytes: 129 is not a "
                         "multiple of itemsize 2")

    def test_disjointness_rules(self):
        # K and V of layer 0 at one offset.
        self.refuse_pool(lambda p: setattr(p.tensors[1], "offset_bytes", 0),
                         "pool.tensors[0] and pool.tensors[1] share bytes")
        # V starting inside K's span, its per-block arc inside K's.
        self.refuse_pool(lambda p: setattr(p.tensors[1], "offset_bytes", 1000),
                         "pool.tensors[0] and pool.tensors[1] share bytes")
        # Layer 1's region aliasing layer 0's addresses.
        self.refuse_pool(lambda p: setattr(p.regions[1], "address",
                                           p.regions[0].address),
                         "pool.tensors[0] and pool.tensors[2] share bytes: "
                         "their spans overlap and they do not interleave in "
                         "one region with one block stride")
        # FlashInfer: K and V interleaved in each block of 1024 bytes, K's
        # arc [0, 512); V moved to 510 overlaps it by one value.
        fi = pools.flashinfer_pool(self.world.desc, self.part, 16, 4)
        self.refuse_pool(lambda p: setattr(p.tensors[1], "offset_bytes", 510),
                         "pool.tensors[0] and pool.tensors[1] share bytes",
                         good=fi)
        self.assertTrue(self.world.register(fi).created)

    def test_pool_header_rules(self):
        self.refuse_pool(lambda p: setattr(p, "participant_id", "nobody"),
                         'pool.participant_id: "nobody" is not a participant')
        self.refuse_pool(lambda p: setattr(p, "num_blocks", 0),
                         "pool.num_blocks: must be at least 1")
        self.refuse_pool(lambda p: setattr(p, "block_size", 0),
                         "pool.block_size: must be at least 1")
        self.refuse_pool(lambda p: setattr(p.regions[1], "region_id",
                                           p.regions[0].region_id),
                         "pool.regions[1].region_id:", "more than once")
        register = self.planner.RegisterMemory
        self.refused(Code.INVALID_ARGUMENT, lambda: register(
            pb.RegisterMemoryRequest(placement_id=self.world.reader_id),
            timeout=10), "pool: required")
        self.refused(Code.INVALID_ARGUMENT, lambda: register(
            pb.RegisterMemoryRequest(pool=self.good), timeout=10),
            "target: set placement or placement_id")
        unknown = "sha256:" + "1" * 64
        self.refused(Code.NOT_FOUND, lambda: self.world.register(
            self.good, placement_id=unknown), unknown)
        self.not_stored(self.good, unknown)

    def test_max_pool_tensors(self):
        def grow(p):
            for _ in range(MAX_POOL_TENSORS + 1 - len(p.tensors)):
                extra = p.tensors.add()
                extra.CopyFrom(p.tensors[0])
        message = ("MemoryPool.tensors: more than %d entries exceed the "
                   "limit max_pool_tensors (--max-pool-tensors)"
                   % MAX_POOL_TENSORS)
        big = self.refuse_pool(grow, message, code=Code.RESOURCE_EXHAUSTED)
        # The same pool inline in a plan: refused while decoding too.
        self.plan_refused(Code.RESOURCE_EXHAUSTED, self.world.load_request(
            pooled=pooled(inline_pool=big, block_ids=self.table)), message)

    # -- the request's form --
    def test_binding_and_pooled(self):
        binding = expand(self.good, self.world.desc, self.part, self.table,
                         self.world.tokens)
        both = self.world.load_request(pooled=pooled(self.mid, self.table),
                                       binding=binding)
        self.plan_refused(Code.INVALID_ARGUMENT, both,
                          "binding, pooled: set exactly one of the two, not "
                          "both")
        self.plan_refused(Code.INVALID_ARGUMENT, self.world.load_request(),
                          "binding, pooled: set exactly one of the two")
        self.plan_refused(Code.INVALID_ARGUMENT, self.world.load_request(
            pooled=pooled(block_ids=self.table)),
            "pooled: set memory_id or inline_pool")
        self.plan_refused(Code.INVALID_ARGUMENT, self.store_request(
            binding=binding.message, pooled=pooled(self.mid, self.table)),
            "binding, pooled: set exactly one of the two, not both",
            store=True)
        self.plan_refused(Code.INVALID_ARGUMENT, self.store_request(
            pooled=pooled(block_ids=self.table)),
            "pooled: set memory_id or inline_pool", store=True)

    def test_memory_ids(self):
        for bad in ("", "nope", "sha256:" + "A" * 64, "sha256:" + "0" * 63,
                    "sha256:" + "0" * 65, "sha512:" + "0" * 64,
                    self.mid[7:]):
            with self.subTest(memory_id=bad):
                self.plan_refused(Code.INVALID_ARGUMENT,
                                  self.world.load_request(
                                      pooled=pooled(bad, self.table)),
                                  "pooled.memory_id: must be \"sha256:\" and "
                                  "64 lowercase hex digits")
                self.refused(Code.INVALID_ARGUMENT,
                             lambda: self.planner.ForgetMemory(
                                 pb.ForgetMemoryRequest(memory_id=bad),
                                 timeout=10),
                             "memory_id: must be \"sha256:\"")
        unknown = "sha256:" + "2" * 64
        self.plan_refused(Code.NOT_FOUND, self.world.load_request(
            pooled=pooled(unknown, self.table)),
            "pooled.memory_id %s: not registered" % unknown)
        self.plan_refused(Code.NOT_FOUND, self.store_request(
            pooled=pooled(unknown, self.table)),
            "pooled.memory_id %s: not registered" % unknown, store=True)

    def test_pool_of_another_placement(self):
        why = ("pooled.memory_id %s: registered for placement %s, not the "
               "request's placement %s" % (self.mid, self.world.reader_id,
                                           self.other_id))
        req = self.world.load_request(pooled=pooled(self.mid, self.table))
        req.placement_id = self.other_id
        self.plan_refused(Code.INVALID_ARGUMENT, req, why)
        req.placement.CopyFrom(self.other)  # inline: the same placement id
        self.plan_refused(Code.INVALID_ARGUMENT, req, why)
        store = self.store_request(pooled=pooled(self.mid, self.table))
        store.placement_id = self.other_id
        self.plan_refused(Code.INVALID_ARGUMENT, store, why, store=True)

    def test_inline_pools(self):
        nobody = edited(self.good, lambda p: setattr(p, "participant_id",
                                                     "nobody"))
        self.plan_refused(Code.INVALID_ARGUMENT, self.world.load_request(
            pooled=pooled(inline_pool=nobody, block_ids=self.table)),
            'pooled.inline_pool.participant_id: "nobody" is not a '
            "participant of the target placement")
        shared = edited(self.good, lambda p: setattr(p.tensors[1],
                                                     "offset_bytes", 0))
        self.plan_refused(Code.INVALID_ARGUMENT, self.world.load_request(
            pooled=pooled(inline_pool=shared, block_ids=self.table)),
            "pooled.inline_pool.tensors[0] and pooled.inline_pool.tensors[1] "
            "share bytes")
        # Validated per call, never stored.
        self.not_stored(shared)

    def test_participant_of_another_dp_rank(self):
        # As for an explicit binding: the pool's participant must be of the
        # target DP rank (the lowest when none is given).
        world = World(self.planner, "err-dp", reader=(2, 1, 2))
        part = next(p for p in world.reader.parts if p.rank.dp == 1)
        pool = pools.vllm_pool(world.desc, part, 4, NUM_BLOCKS)
        mid = world.register(pool).memory_id
        binding = expand(pool, world.desc, part, self.table, world.tokens)
        why = ('participant "%s" has dp rank 1, not the target dp rank 0'
               % part.participant_id)
        # Each form names its own field for the participant.
        for memory, field in (
                (dict(binding=binding), "binding.participant_id: "),
                (dict(pooled=pooled(mid, self.table)),
                 "pooled.memory_id (its pool's participant_id): "),
                (dict(pooled=pooled(inline_pool=pool, block_ids=self.table)),
                 "pooled.inline_pool.participant_id: ")):
            for dp in (None, 0):
                req = world.load_request(**memory)
                if dp is not None:
                    req.target_dp_rank.value = dp
                self.plan_refused(Code.INVALID_ARGUMENT, req, field + why)
            req.target_dp_rank.value = 1
            self.assertEqual(self.planner.PlanLoad(req, timeout=30).hit_pages,
                             len(world.keys))

    # -- block tables --
    def test_block_tables(self):
        def load(table):
            return self.world.load_request(pooled=pooled(self.mid, table))
        past = [0, 1, 2, 3, 9, 4, 5, 6, 7]
        self.plan_refused(Code.INVALID_ARGUMENT, load(past),
                          "pooled.block_ids[4]: block 9 is not below "
                          "num_blocks %d" % NUM_BLOCKS)
        # Entries past the span (6 blocks) are validated too.
        self.plan_refused(Code.INVALID_ARGUMENT, load(list(range(6)) + [5000]),
                          "pooled.block_ids[6]: block 5000 is not below "
                          "num_blocks %d" % NUM_BLOCKS)
        self.plan_refused(Code.INVALID_ARGUMENT, load([0, 7, 2, 7, 4, 5]),
                          "pooled.block_ids[3]: block 7 appears already at "
                          "pooled.block_ids[1]")
        self.plan_refused(Code.INVALID_ARGUMENT, load([3, 4, 5, 6, 7, 8, 3]),
                          "pooled.block_ids[6]: block 3 appears already at "
                          "pooled.block_ids[0]")
        self.plan_refused(Code.INVALID_ARGUMENT, load([0, 1]),
                          "pooled.block_ids: 2 blocks of 4 tokens do not "
                          "cover the request's 24 tokens (6 blocks needed)")
        self.plan_refused(Code.INVALID_ARGUMENT, load([]),
                          "pooled.block_ids: 0 blocks of 4 tokens")
        self.plan_refused(Code.INVALID_ARGUMENT, self.store_request(
            pooled=pooled(self.mid, [0, 1, 2])),
            "pooled.block_ids: 3 blocks of 4 tokens do not cover the "
            "request's 24 tokens", store=True)
        # Longer than --max-block-ids: refused by the decoder's pre-scan,
        # before anything else is looked at (these ids are not even below
        # num_blocks).
        message = ("PooledMemory.block_ids: more than %d entries exceed the "
                   "limit max_block_ids (--max-block-ids)" % MAX_BLOCK_IDS)
        long_table = list(range(MAX_BLOCK_IDS + 1))
        self.plan_refused(Code.RESOURCE_EXHAUSTED, load(long_table), message)
        self.plan_refused(Code.RESOURCE_EXHAUSTED, self.store_request(
            pooled=pooled(self.mid, long_table)), message, store=True)
        # At the cap the table is decoded, then checked against the pool.
        self.plan_refused(Code.INVALID_ARGUMENT,
                          load(list(range(MAX_BLOCK_IDS))),
                          "pooled.block_ids[%d]: block %d is not below "
                          % (NUM_BLOCKS, NUM_BLOCKS))

    def test_good_pool_is_still_registered(self):
        again = self.world.register(self.good)
        self.assertEqual((again.memory_id, again.created), (self.mid, False))
        self.assertEqual(self.mid, pools.memory_id(self.good,
                                                   self.world.reader_id))


if __name__ == "__main__":
    unittest.main()
