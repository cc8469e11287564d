"""Memory pools against a live daemon (SPEC §1.5a): RegisterMemory,
ForgetMemory, and PlanLoad / PlanStore with ``pooled``.

Engine-shaped pools (vLLM, FlashInfer HND, SGLang page-first; GQA, head
replicas, MLA) are registered against a TP2·PP2 reader (and a TP4 writer)
and planned with their memory id and a scattered block table. Each pooled
plan is compared with the plan for the equivalent explicit binding
(``Pool.binding``, checked against BindingBuilder in test_pool.py): the
responses must be equal, field for field. The pooled plans are executed
with the reference executor into the pool's tensors (or, for PlanStore,
from them into Parts) and give exactly the logical values, writing no
other byte. Then the registry: created False on a second registration, the
memory id of SPEC §1.5a, ForgetMemory True then False, and the input
errors (INVALID_ARGUMENT, NOT_FOUND).

Every test needs the daemon side of these RPCs. The tests skip, with the
reason, only when the daemon answers UNIMPLEMENTED for RegisterMemory;
any other answer runs them.
"""

import asyncio
import hashlib
import json

import grpc
import numpy as np
import pytest
import torch

import reshard
import reshard.aio
import kv

pb = reshard.planner_pb2
FORMATS = {"vllm": "LPHD", "flashinfer": "HPLD", "sglang": "PLHD"}


@pytest.fixture(scope="module")
def pool_rpcs(daemon):
    """Skips the module when (and only when) the daemon does not know
    RegisterMemory."""
    with reshard.Client(daemon.target, timeout=60) as c:
        try:
            c.register_memory(pb.MemoryPool(),
                              placement_id="sha256:" + "0" * 64)
        except reshard.ReshardError as err:
            if err.code == grpc.StatusCode.UNIMPLEMENTED:
                pytest.skip("reshardd lacks RegisterMemory (UNIMPLEMENTED: "
                            "%s)" % err.message)
        else:
            raise AssertionError("RegisterMemory accepted an empty pool")


@pytest.fixture
def pc(pool_rpcs, client):
    return client


def memory_id(pool, placement_id):
    """SPEC §1.5a's memory id, computed here."""
    name = {pb.KEY: "key", pb.VALUE: "value"}
    obj = {
        "schema": "kv-cache-memory-pool", "placement_id": placement_id,
        "participant_id": pool.participant_id, "endpoint": pool.endpoint,
        "block_size": pool.block_size, "num_blocks": pool.num_blocks,
        "regions": [{"address": r.address, "nbytes": r.nbytes,
                     "region_id": r.region_id}
                    for r in sorted(pool.regions, key=lambda r: r.region_id)],
        "tensors": [{"block_stride_bytes": t.block_stride_bytes,
                     "component": name[t.component],
                     "global_layer_id": t.global_layer_id,
                     "head_stride_bytes": t.head_stride_bytes,
                     "offset_bytes": t.offset_bytes, "region_id": t.region_id,
                     "token_stride_bytes": t.token_stride_bytes}
                    for t in sorted(pool.tensors, key=lambda t: (
                        t.global_layer_id, t.component))]}
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class World:
    """A TP4 writer's manifest and Parts, and a registered TP2·PP2 reader
    placement."""

    def __init__(self, client, cfg, fmt, tag):
        self.cfg = cfg
        self.desc = kv.descriptor(cfg)
        self.writer = reshard.placement(self.desc, tp=4, prefix="w-" + tag)
        self.reader = reshard.placement(self.desc, tp=2, pp=2,
                                        prefix="r-" + tag)
        up = client.plan_upload(self.writer, format=fmt)
        self.layout = up.layout
        self.part_writers = list(up.part_writers)
        pub = client.publish_manifest(
            layout=up.layout, namespace="pytest-pool", model_id=tag,
            model_revision="r1", semantic_fingerprint="fp")
        self.manifest_key = pub.manifest_key
        self.model_domain = pub.model_domain
        self.page_keys = ["%s/page-%d" % (tag, i) for i in range(kv.PAGES)]
        client.register_pages(pub.manifest_key, self.page_keys)
        self.values = kv.logical_values(self.desc, seed=len(tag))
        self.parts = kv.parts_from_views(self.layout, self.writer,
                                         self.part_writers, self.values)
        self.by_key = dict(zip(self.page_keys, self.parts))
        self.reader_id = client.register_placement(self.reader)
        self.writer_id = client.register_placement(self.writer)
        self.tokens = kv.PAGES * self.desc.page_size


def engine_pool(desc, part, memory, block, extra=3):
    """Zeroed torch tensors in an engine's shape for ``part`` and their
    Pool; ``num_blocks`` leaves ``extra`` blocks beyond the span."""
    tokens = kv.PAGES * desc.page_size
    nb = -(-tokens // block) + extra
    hn, dim = part.head_count, desc.key_head_dim
    mla = desc.value_head_dim == 0
    layers = sorted(part.layer_ids)
    if memory == "vllm":
        shape = (nb, block, dim) if mla else (2, nb, block, hn, dim)
        caches = [torch.zeros(shape, dtype=torch.bfloat16) for _ in layers]
        return reshard.PoolBuilder.vllm(desc, part, caches,
                                        endpoint="e2e:1").build()
    if memory == "flashinfer":
        caches = [torch.zeros((nb, 2, hn, block, dim), dtype=torch.bfloat16)
                  for _ in layers]
        return reshard.PoolBuilder.flashinfer(desc, part, caches,
                                              endpoint="e2e:1").build()
    if memory == "sglang":
        shape = (nb, len(layers), block, hn, dim)
        buf = torch.zeros(shape if mla else (2,) + shape,
                          dtype=torch.bfloat16)
        return reshard.PoolBuilder.sglang(desc, part, buf,
                                          layout="page_first_direct",
                                          endpoint="e2e:1").build()
    raise ValueError(memory)


def read_back(pool, binding, desc):
    """(layer, component) -> [tokens, heads, dim] uint16 of what the pool
    holds at the binding's addresses, and the bytes no range covers."""
    mem = pool.host_regions()
    masks = {rid: np.zeros(b.shape[0], dtype=bool) for rid, b in mem.items()}
    out = {}
    hn = pool.part.head_count
    for r in binding.message.ranges:
        dim = desc.key_head_dim if r.component == pb.KEY else \
            desc.value_head_dim
        hb = dim * desc.itemsize
        arr = out.setdefault((r.global_layer_id, r.component), np.zeros(
            (binding.num_tokens, hn, dim), dtype=np.uint16))
        buf = mem[r.region_id]
        for t in range(r.token_start, r.token_start + r.token_count):
            for h in range(r.head_start, r.head_start + r.head_count):
                at = r.offset_bytes + (t - r.token_start) * \
                    r.token_stride_bytes + (h - r.head_start) * \
                    r.head_stride_bytes
                arr[t, h - pool.part.head_start] = \
                    buf[at:at + hb].view(np.uint16)
                masks[r.region_id][at:at + hb] = True
    rest = np.concatenate([mem[rid][~m] for rid, m in masks.items()])
    return out, rest


def write_values(pool, binding, desc, values):
    """Fills the pool's memory with the logical values at the binding's
    addresses (the writer's tensors)."""
    mem = pool.host_regions()
    for r in binding.message.ranges:
        dim = desc.key_head_dim if r.component == pb.KEY else \
            desc.value_head_dim
        hb = dim * desc.itemsize
        src = kv.bits(values[(r.global_layer_id, r.component)])
        buf = mem[r.region_id]
        for t in range(r.token_start, r.token_start + r.token_count):
            for h in range(r.head_start, r.head_start + r.head_count):
                at = r.offset_bytes + (t - r.token_start) * \
                    r.token_stride_bytes + (h - r.head_start) * \
                    r.head_stride_bytes
                buf[at:at + hb] = src[t, h].view(np.uint8)


def scattered(pool, seed):
    """Every block of the pool in a random order: the span's blocks are
    scattered, the entries past the span validated and unused."""
    return np.random.default_rng(seed).permutation(pool.num_blocks).tolist()


CASES = [(cfg, memory) for cfg in kv.CONFIGS for memory in FORMATS
         if not (cfg.value_dim == 0 and memory == "flashinfer")]


@pytest.mark.parametrize("cfg, memory", CASES,
                         ids=["%s-%s" % (c.name, m) for c, m in CASES])
def test_pooled_load_equals_explicit_and_executes(pc, cfg, memory):
    w = World(pc, cfg, FORMATS[memory], "pl-%s-%s" % (cfg.name, memory))
    for i, part in enumerate(w.reader.parts):
        pool = engine_pool(w.desc, part, memory, cfg.block)
        mid, created = pc.register_memory(pool, placement_id=w.reader_id)
        assert created and mid == memory_id(pool.message, w.reader_id)
        assert pc.register_memory(pool, placement_id=w.reader_id) == \
            (mid, False)
        table = scattered(pool, seed=i)
        common = dict(model_domain=w.model_domain, page_keys=w.page_keys,
                      placement_id=w.reader_id, operation_id="pytest-pool")
        pooled = pc.plan_load(pooled=mid, block_ids=table, **common)
        binding = pool.binding(table, num_tokens=w.tokens)
        explicit = pc.plan_load(binding=binding, **common)
        assert pooled.response == explicit.response, part.participant_id
        assert pooled.hit_pages == kv.PAGES
        inline = pc.plan_load(pooled=pool, block_ids=table, **common)
        assert inline.response == explicit.response
        runs_p = pc.plan_load(pooled=mid, block_ids=table, runs=True,
                              **common)
        runs_e = pc.plan_load(binding=binding, runs=True, **common)
        assert runs_p.response == runs_e.response
        moved = reshard.execute(pooled, w.by_key, pool)
        assert moved == pooled.stats.bytes
        held, rest = read_back(pool, binding, w.desc)
        h0, hn = part.head_start, part.head_count
        for (layer, c), got in held.items():
            want = kv.bits(w.values[(layer, c)][:, h0:h0 + hn, :])
            assert np.array_equal(got, want), (
                "%s: layer %d component %d differs" % (part.participant_id,
                                                       layer, c))
        assert not rest.any(), "%s: bytes outside the span written" \
            % part.participant_id
        assert sum(v.nbytes for v in held.values()) == moved
        assert pc.forget_memory(mid)


@pytest.mark.parametrize("cfg", [kv.CONFIGS[0], kv.CONFIGS[2]],
                         ids=lambda c: c.name)
def test_pooled_store_equals_explicit_and_executes(pc, cfg):
    w = World(pc, cfg, "LPHD", "ps-%s" % cfg.name)
    out = reshard.new_parts(w.layout, kv.PAGES)
    for i, part in enumerate(w.writer.parts):
        pool = engine_pool(w.desc, part, "vllm", cfg.block)
        table = scattered(pool, seed=10 + i)
        binding = pool.binding(table, num_tokens=w.tokens)
        write_values(pool, binding, w.desc, w.values)
        mid, created = pc.register_memory(pool, placement_id=w.writer_id)
        assert created
        common = dict(manifest_key=w.manifest_key, page_count=kv.PAGES,
                      placement_id=w.writer_id)
        pooled = pc.plan_store(pooled=mid, block_ids=table, **common)
        explicit = pc.plan_store(binding=binding, **common)
        assert pooled.response == explicit.response, part.participant_id
        runs_p = pc.plan_store(pooled=mid, block_ids=table, runs=True,
                               **common)
        runs_e = pc.plan_store(binding=binding, runs=True, **common)
        assert runs_p.response == runs_e.response
        reshard.execute(pooled, out, pool)
        pc.forget_memory(mid)
    for p in range(kv.PAGES):
        for a, b in zip(out[p], w.parts[p]):
            assert np.array_equal(a, b), "page %d differs" % p


def test_register_and_forget(pc, daemon):
    w = World(pc, kv.CONFIGS[0], "LPHD", "reg")
    part = w.reader.parts[1]
    pool = engine_pool(w.desc, part, "vllm", 16)
    mid, created = pc.register_memory(pool, placement_id=w.reader_id)
    assert created and mid == memory_id(pool.message, w.reader_id)
    # The same pool against the same placement given inline: the same id.
    assert pc.register_memory(pool.message, placement=w.reader) == (mid,
                                                                   False)
    # Another endpoint is another pool.
    other = pb.MemoryPool()
    other.CopyFrom(pool.message)
    other.endpoint = "elsewhere:2"
    mid2, created2 = pc.register_memory(other, placement_id=w.reader_id)
    assert created2 and mid2 != mid
    assert pc.forget_memory(mid2) is True
    assert pc.forget_memory(mid2) is False
    table = list(range(pool.num_blocks))
    plan = pc.plan_load(model_domain=w.model_domain, page_keys=w.page_keys,
                        placement_id=w.reader_id, pooled=mid,
                        block_ids=table)
    assert plan.hit_pages == kv.PAGES
    assert pc.forget_memory(mid) is True
    assert pc.forget_memory(mid) is False
    with pytest.raises(reshard.ReshardError) as err:
        pc.plan_load(model_domain=w.model_domain, page_keys=w.page_keys,
                     placement_id=w.reader_id, pooled=mid, block_ids=table)
    assert err.value.code_name == "NOT_FOUND", err.value

    async def aio():
        async with reshard.aio.Client(daemon.target, timeout=60) as c:
            got = await c.register_memory(pool, placement_id=w.reader_id)
            return got, await c.forget_memory(got.memory_id)

    (amid, acreated), removed = asyncio.run(aio())
    assert amid == mid and acreated and removed


def raw(pc, method, request, response_type):
    call = pc.channel.unary_unary(
        "/reshard.v1.Planner/" + method,
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_type.FromString)
    return call(request, timeout=60)


def code_of(fn):
    try:
        fn()
    except reshard.ReshardError as err:
        assert err.message, "an error without a message"
        return err.code_name
    except grpc.RpcError as err:
        assert err.details(), "an error without a message"
        return err.code().name
    return "OK"


def test_bad_inputs(pc):
    w = World(pc, kv.CONFIGS[0], "LPHD", "bad")
    part = w.reader.parts[0]
    pool = engine_pool(w.desc, part, "vllm", 16)
    mid, _ = pc.register_memory(pool, placement_id=w.reader_id)
    load = dict(model_domain=w.model_domain, page_keys=w.page_keys,
                placement_id=w.reader_id)
    nb = pool.num_blocks

    def edited(edit):
        m = pb.MemoryPool()
        m.CopyFrom(pool.message)
        edit(m)
        return m

    def reg(m, **target):
        return lambda: pc.register_memory(m, **(target or dict(
            placement_id=w.reader_id)))

    cases = {
        "a tensor missing": (reg(edited(lambda m: m.tensors.pop())),
                             "INVALID_ARGUMENT"),
        "two tensors sharing bytes": (reg(edited(lambda m: setattr(
            m.tensors[1], "offset_bytes", m.tensors[0].offset_bytes))),
            "INVALID_ARGUMENT"),
        "a tensor past its region": (reg(edited(lambda m: setattr(
            m.regions[0], "nbytes", m.regions[0].nbytes - 2))),
            "INVALID_ARGUMENT"),
        "num_blocks 0": (reg(edited(lambda m: setattr(m, "num_blocks", 0))),
                         "INVALID_ARGUMENT"),
        "a participant not in the placement": (reg(edited(lambda m: setattr(
            m, "participant_id", "nobody"))), "INVALID_ARGUMENT"),
        "an unknown placement id": (reg(pool.message,
                                        placement_id="sha256:" + "1" * 64),
                                    "NOT_FOUND"),
        "a block id past num_blocks": (lambda: pc.plan_load(
            pooled=mid, block_ids=list(range(1, nb + 1)), **load),
            "INVALID_ARGUMENT"),
        "a short block table": (lambda: pc.plan_load(
            pooled=mid, block_ids=[0], **load), "INVALID_ARGUMENT"),
        "a repeated block id": (lambda: pc.plan_load(
            pooled=pb.PooledMemory(memory_id=mid,
                                   block_ids=[0, 1, 2, 0]), **load),
            "INVALID_ARGUMENT"),
        "an unknown memory id": (lambda: pc.plan_load(
            pooled="sha256:" + "2" * 64, block_ids=[0, 1, 2], **load),
            "NOT_FOUND"),
        "another placement's pool": (lambda: pc.plan_load(
            pooled=mid, block_ids=list(range(nb)),
            model_domain=w.model_domain, page_keys=w.page_keys,
            placement=reshard.placement(w.desc, tp=2, pp=2,
                                        prefix="r-bad",
                                        resource_id="other")),
            "INVALID_ARGUMENT"),
        "binding and pooled both": (lambda: raw(pc, "PlanLoad",
                                                pb.PlanLoadRequest(
            model_domain=w.model_domain, page_keys=w.page_keys,
            placement_id=w.reader_id,
            binding=pool.binding(list(range(nb)),
                                 num_tokens=w.tokens).message,
            pooled=pb.PooledMemory(memory_id=mid,
                                   block_ids=list(range(nb)))),
            pb.PlanLoadResponse), "INVALID_ARGUMENT"),
        "a store plan with an unknown memory id": (lambda: pc.plan_store(
            manifest_key=w.manifest_key, page_count=kv.PAGES,
            placement_id=w.writer_id, pooled="sha256:" + "3" * 64,
            block_ids=[0, 1, 2]), "NOT_FOUND"),
    }
    got = {what: code_of(fn) for what, (fn, _) in cases.items()}
    assert got == {what: want for what, (_, want) in cases.items()}
    # The daemon still serves, and the pool still plans.
    plan = pc.plan_load(pooled=mid, block_ids=list(range(nb)), **load)
    assert plan.hit_pages == kv.PAGES
    assert pc.forget_memory(mid)
