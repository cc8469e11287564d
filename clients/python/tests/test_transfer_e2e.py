"""PlanTransfer against a live daemon (SPEC §2.6): the KV of a request
moved from a prefill instance's registered pools into a decode
instance's memory, across TP, PP, DP, replica, block size and axis order
changes.

A llama-like model scaled down (4 layers, 8 KV heads of 16 dims, bf16;
MLA: one latent head of 32 dims): each instance's placement is registered,
every participant of its DP rank gets a zeroed engine pool of numpy memory
(vLLM NHD ``[2, blocks, block, heads, dim]`` per layer, FlashInfer HND
``[blocks, 2, heads, block, dim]``, MLA ``[blocks, block, dim]``)
registered against it, and the participants share one scattered block
table. The source pools hold the logical value of every (token < count,
layer, head, component, element) at its block position and never-zero
noise everywhere else. Every target participant plans with memory ids and
block tables; the plan is executed by the reference executor from the
source pools into the target's zeroed pool, and every byte of tokens
< token_count must hold its value and no other byte be written — for the
explicit plan and for the plan with runs (whose batches expand exactly to
the explicit ones). The same target memory given inline or as its explicit
binding gives the same response. Then the batch limits, the plans against
transfer_ref.reference_plan (SPEC §2.6 written out in Python), inline
placements and the asyncio client, and the refusals of §2.6 with their
codes (and the participant, memory id or field they name).

Nothing here skips: the daemon built beside these tests has PlanTransfer.
"""

import asyncio
from typing import NamedTuple

import grpc
import numpy as np
import pytest

import reshard
import reshard.aio
import transfer_ref as ref

pb = reshard.planner_pb2
DESC = reshard.descriptor(4, dtype="bf16", itemsize=2, page_size=16,
                          total_kv_heads=8, key_head_dim=16)
MLA = reshard.descriptor(4, dtype="bf16", itemsize=2, page_size=16,
                         total_kv_heads=1, key_head_dim=32,
                         value_head_dim=0)
TOKENS = 200  # 12.5 blocks of 16, 3.125 of 64: partial last blocks


class Case(NamedTuple):
    name: str
    desc: object
    src: dict  # Instance arguments of the prefill (source) instance
    dst: dict  # ... and of the decode (target) instance
    tokens: int = TOKENS


CASES = [
    # T1-like: TP1 → TP2, 16-token blocks, vLLM NHD on both sides.
    Case("t1", DESC, dict(tp=1), dict(tp=2)),
    Case("t1-one-token", DESC, dict(tp=1), dict(tp=2), tokens=1),
    # Block size 16 → 64 and FlashInfer HND into vLLM NHD, TP2 → TP4.
    Case("hnd16-nhd64", DESC, dict(tp=2, memory="flashinfer"),
         dict(tp=4, block=64)),
    # Target replicas: TP16 over 8 heads, two ranks per head, both filled
    # from the one TP4 owner.
    Case("replicas", DESC, dict(tp=4), dict(tp=16, block=32)),
    # Source replicas: target replica r reads source replica r; a target
    # without replicas reads ordinal 0 (the other pools, given, unread).
    Case("source-replicas", DESC, dict(tp=16), dict(tp=16)),
    Case("source-replicas-tp8", DESC, dict(tp=16), dict(tp=8, block=64)),
    # PP on the target: TP2 → TP1·PP2; and TP2·PP3 (stages [0, 1], [2],
    # [3]) → TP1·PP2 with 64-token blocks: stage 1 reads four sources.
    Case("pp", DESC, dict(tp=2), dict(tp=1, pp=2)),
    Case("pp3-pp2", DESC, dict(tp=2, pp=3), dict(tp=1, pp=2, block=64)),
    # DP: DP rank 1 of both instances, given explicitly.
    Case("dp", DESC, dict(tp=1, dp=2, dp_rank=1),
         dict(tp=2, dp=2, dp_rank=1)),
    # MLA latent pools: the one head replicated on TP4 → TP2·PP2 (target
    # replica r reads source replica r), 64-token blocks into 16.
    Case("mla", MLA, dict(tp=4, block=64), dict(tp=2, pp=2)),
]


def instances(client, case, seed):
    src = ref.Instance(client, case.desc, "tx-%s-p" % case.name,
                       tokens=case.tokens, seed=seed, **case.src)
    dst = ref.Instance(client, case.desc, "tx-%s-d" % case.name,
                       tokens=case.tokens, seed=seed + 1, **case.dst)
    values = ref.logical_values(case.desc, case.tokens, seed=seed + 2)
    for i, pool in enumerate(src.pools.values()):
        ref.fill_source(pool, values, src.table, case.tokens,
                        seed=seed + 10 + i)
    return src, dst, values


def common(case, src, dst, **extra):
    """The request's arguments but the target memory: placements by id,
    DP ranks when the case selects one, the source pools in reverse
    order (any order is allowed)."""
    args = dict(source_placement_id=src.placement_id,
                source_memory_ids=list(reversed(list(
                    src.memory_ids.values()))),
                source_block_ids=src.table, token_count=case.tokens,
                target_placement_id=dst.placement_id,
                operation_id="pytest-transfer-" + case.name)
    if "dp_rank" in case.src:
        args["source_dp_rank"] = case.src["dp_rank"]
    if "dp_rank" in case.dst:
        args["target_dp_rank"] = case.dst["dp_rank"]
    args.update(extra)
    return args


def held_bytes(desc, part, tokens):
    """The bytes a target participant holds for tokens [0, tokens)."""
    row = sum(ref.head_bytes(desc, c) for c in ref.components(desc))
    return tokens * part.head_count * len(part.layer_ids) * row


def check_runs(runs, explicit):
    """A runs plan is the explicit plan folded: the same batches (source,
    bytes), each batch's entries expanded and sorted equal to the
    explicit batch, stats.runs the number of entries."""
    assert runs.has_runs and not explicit.has_runs
    assert len(runs.batches) == len(explicit.batches)
    for i, (a, b) in enumerate(zip(runs.response.batches,
                                   explicit.response.batches)):
        assert (a.source_index, a.bytes) == (b.source_index, b.bytes), i
        assert sorted(ref.batch_copies(runs, i)) == \
            ref.batch_copies(explicit, i), "batch %d" % i
    assert runs.stats.runs == len(runs.copies(expand_runs=False))
    assert (runs.stats.operations, runs.stats.bytes) == \
        (explicit.stats.operations, explicit.stats.bytes)
    assert list(runs.sources) == list(explicit.sources) and \
        runs.region_ids == explicit.region_ids


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_transfer_executes_exactly(client, case):
    seed = 1000 * CASES.index(case)
    src, dst, values = instances(client, case, seed)
    for part in dst.parts:
        pid = part.participant_id
        pool = dst.pools[pid]
        args = common(case, src, dst)
        plan = client.plan_transfer(pooled=dst.memory_ids[pid],
                                    block_ids=dst.table, **args)
        ref.check_shape(plan, src, pool)
        assert [s.participant_id for s in plan.sources] == \
            ref.expected_sources(src.parts, part), pid
        assert (plan.source_placement_id, plan.target_placement_id) == \
            (src.placement_id, dst.placement_id)
        want = held_bytes(case.desc, part, case.tokens)
        assert not plan.has_runs and plan.stats.runs == 0
        assert (plan.stats.bytes, plan.operations) == \
            (want, plan.stats.operations)
        moved = reshard.execute(plan, src.pools, pool)
        assert moved == want == ref.check_target(pool, values, dst.table,
                                                 case.tokens)
        # Runs: the explicit plan folded, executing to the same bytes.
        runs = client.plan_transfer(pooled=dst.memory_ids[pid],
                                    block_ids=dst.table, runs=True, **args)
        check_runs(runs, plan)
        ref.zero(pool)
        assert reshard.execute(runs, src.pools, pool) == want
        ref.check_target(pool, values, dst.table, case.tokens)
        # The same memory inline, and as its explicit binding: the same
        # response.
        inline = client.plan_transfer(pooled=pool, block_ids=dst.table,
                                      **args)
        assert inline.response == plan.response, pid
        binding = pool.binding(dst.table, num_tokens=case.tokens)
        explicit = client.plan_transfer(binding=binding, **args)
        assert explicit.response == plan.response, pid


def test_small_batches(client):
    case = CASES[2]  # hnd16-nhd64: 32-byte copies (one head row each)
    src, dst, values = instances(client, case, seed=50)
    limits = reshard.limits(max_batch_operations=7, max_batch_bytes=1000)
    for part in dst.parts[:2]:
        pid = part.participant_id
        pool = dst.pools[pid]
        args = common(case, src, dst, pooled=dst.memory_ids[pid],
                      block_ids=dst.table, limits=limits)
        plan = client.plan_transfer(**args)
        ref.check_shape(plan, src, pool, limits)
        assert len(plan.batches) > len(plan.sources)
        ref.zero(pool)
        reshard.execute(plan, src.pools, pool)
        ref.check_target(pool, values, dst.table, case.tokens)
        runs = client.plan_transfer(runs=True, **args)
        check_runs(runs, plan)
        ref.zero(pool)
        reshard.execute(runs, src.pools, pool)
        ref.check_target(pool, values, dst.table, case.tokens)
    # Byte budgets split copies: 100 bytes cut the 32-byte copies.
    limits = reshard.limits(max_batch_bytes=100)
    pool = dst.pools[dst.parts[0].participant_id]
    plan = client.plan_transfer(**common(
        case, src, dst, pooled=dst.memory_ids[dst.parts[0].participant_id],
        block_ids=dst.table, limits=limits))
    ref.check_shape(plan, src, pool, limits)
    assert any(int(b.nbytes.min()) < 32 for b in plan.batches)
    ref.zero(pool)
    reshard.execute(plan, src.pools, pool)
    ref.check_target(pool, values, dst.table, case.tokens)


REFERENCE = ["t1", "hnd16-nhd64", "source-replicas-tp8", "pp3-pp2", "mla"]


@pytest.mark.parametrize("name", REFERENCE)
def test_plans_equal_the_reference_planner(client, name):
    """The daemon's plans equal SPEC §2.6 written out in Python
    (transfer_ref.reference_plan): sources, region ids, every batch's
    columns, operations, bytes and runs — explicit, with runs, and with
    small batches. (copies_before_coalescing depends on how finely a
    planner lowers before coalescing, and is not compared.)"""
    case = next(c for c in CASES if c.name == name)
    src, dst, _ = instances(client, case, seed=70)
    pools = [(mid, src.pools[pid].message)
             for pid, mid in src.memory_ids.items()]
    for part in (dst.parts[0], dst.parts[-1]):
        pid = part.participant_id
        pool = dst.pools[pid]
        for runs, limits in ((False, None), (True, None),
                             (False, reshard.limits(max_batch_operations=5,
                                                    max_batch_bytes=200)),
                             (True, reshard.limits(max_batch_operations=5,
                                                   max_batch_bytes=200))):
            got = client.plan_transfer(**common(
                case, src, dst, pooled=dst.memory_ids[pid],
                block_ids=dst.table, runs=runs, limits=limits)).response
            want = ref.reference_plan(
                source_placement=src.placement,
                source_dp_rank=case.src.get("dp_rank"), pools=pools,
                source_block_ids=src.table, token_count=case.tokens,
                target_placement=dst.placement,
                target_dp_rank=case.dst.get("dp_rank"),
                target=pool.binding(dst.table,
                                    num_tokens=case.tokens).message,
                limits=limits, runs=runs)
            what = "%s runs=%s limits=%s" % (pid, runs, limits is not None)
            assert list(got.sources) == list(want.sources), what
            assert list(got.region_ids) == list(want.region_ids), what
            assert len(got.batches) == len(want.batches), what
            for i, (a, b) in enumerate(zip(got.batches, want.batches)):
                assert a == b, "%s: batch %d" % (what, i)
            assert (got.stats.operations, got.stats.bytes, got.stats.runs) \
                == (want.stats.operations, want.stats.bytes,
                    want.stats.runs), what


def test_inline_placements_and_aio(client, daemon):
    case = CASES[0]
    src, dst, values = instances(client, case, seed=90)
    part = dst.parts[1]
    pid = part.participant_id
    pool = dst.pools[pid]
    by_id = client.plan_transfer(**common(case, src, dst,
                                          pooled=dst.memory_ids[pid],
                                          block_ids=dst.table))
    inline = client.plan_transfer(
        source_placement=src.placement,
        source_memory_ids=list(src.memory_ids.values()),
        source_block_ids=src.table, token_count=case.tokens,
        target_placement=dst.placement, pooled=dst.memory_ids[pid],
        block_ids=dst.table, operation_id="pytest-transfer-inline")
    assert inline.response == by_id.response

    async def aio():
        async with reshard.aio.Client(daemon.target, timeout=60) as c:
            return await c.plan_transfer(**common(
                case, src, dst, pooled=dst.memory_ids[pid],
                block_ids=dst.table, runs=True))

    runs = asyncio.run(aio())
    check_runs(runs, by_id)
    reshard.execute(runs, {src.memory_ids[k]: v.host_regions()
                           for k, v in src.pools.items()}, pool)
    ref.check_target(pool, values, dst.table, case.tokens)


def raw(client, request):
    call = client.channel.unary_unary(
        "/reshard.v1.Planner/PlanTransfer",
        request_serializer=pb.PlanTransferRequest.SerializeToString,
        response_deserializer=pb.PlanTransferResponse.FromString)
    return call(request, timeout=60)


def outcome(fn):
    """(code name, message) of a call."""
    try:
        fn()
    except reshard.ReshardError as err:
        return err.code_name, err.message
    except grpc.RpcError as err:
        return err.code().name, err.details() or ""
    return "OK", ""


def test_refusals(client):
    tokens = 40
    src = ref.Instance(client, DESC, "txr-p", tp=2, tokens=tokens)
    dst = ref.Instance(client, DESC, "txr-d", tp=1, dp=2, tokens=tokens,
                       seed=1)
    target = dst.parts[0]  # reads both source ranks
    tid = target.participant_id
    tpool = dst.pools[tid]
    p0, p1 = sorted(src.memory_ids)
    ids = [src.memory_ids[p0], src.memory_ids[p1]]
    nb = src.pools[p0].num_blocks

    def plan(**kw):
        args = dict(source_placement_id=src.placement_id,
                    source_memory_ids=ids, source_block_ids=src.table,
                    token_count=tokens, target_placement_id=dst.placement_id,
                    pooled=dst.memory_ids[tid], block_ids=dst.table)
        args.update(kw)
        return lambda: client.plan_transfer(**args)

    def request(**kw):
        req = pb.PlanTransferRequest(
            source_placement_id=src.placement_id, source_memory_ids=ids,
            source_block_ids=src.table, token_count=tokens,
            target_placement_id=dst.placement_id,
            pooled=pb.PooledMemory(memory_id=dst.memory_ids[tid],
                                   block_ids=dst.table))
        for k, v in kw.items():
            field = getattr(req, k)
            if hasattr(field, "CopyFrom"):
                field.CopyFrom(v)
            elif isinstance(v, list):
                del field[:]
                field.extend(v)
            else:
                setattr(req, k, v)
        return lambda: raw(client, req)

    # Another descriptor (dtype fp16, the same itemsize): its own placement
    # and an inline pool for it.
    other_desc = reshard.descriptor(4, dtype="fp16", itemsize=2,
                                    page_size=16, total_kv_heads=8,
                                    key_head_dim=16)
    other = reshard.placement(other_desc, tp=1, prefix="txr-o")
    opool = ref.engine_pool(other_desc, other.parts[0], "vllm", 16, 5)
    # A pool registered against another placement (the target's).
    foreign = dst.memory_ids[tid]
    # A second pool of source participant p1 (another endpoint).
    twin = ref.engine_pool(DESC, reshard.find_part(src.placement, p1),
                           "vllm", 16, nb, endpoint="elsewhere:9")
    twin_id = client.register_memory(
        twin, placement_id=src.placement_id).memory_id
    # A pool of p1 with 32-token blocks.
    wide = ref.engine_pool(DESC, reshard.find_part(src.placement, p1),
                           "vllm", 32, nb, endpoint="wide:9")
    wide_id = client.register_memory(
        wide, placement_id=src.placement_id).memory_id
    # A pool of DP rank 1 of the target placement.
    dp1 = reshard.find_part(dst.placement, "txr-d-dp1-pp0-tp0")
    dp1_pool = ref.engine_pool(DESC, dp1, "vllm", 16, 5)
    dp1_id = client.register_memory(
        dp1_pool, placement_id=dst.placement_id).memory_id
    unknown = "sha256:" + "4" * 64

    cases = {
        "another descriptor": (plan(
            target_placement_id=None, target_placement=other, pooled=opool,
            block_ids=list(range(5))), "FAILED_PRECONDITION", "dtype"),
        "a source participant without a pool": (plan(
            source_memory_ids=[src.memory_ids[p0]]), "FAILED_PRECONDITION",
            p1),
        "a pool of another placement": (plan(
            source_memory_ids=ids + [foreign]), "INVALID_ARGUMENT",
            foreign),
        "an unknown memory id": (plan(source_memory_ids=ids + [unknown]),
                                 "NOT_FOUND", None),
        "a short source block table": (plan(
            source_block_ids=src.table[:2]), "INVALID_ARGUMENT", None),
        "a source block id past num_blocks": (plan(
            source_block_ids=[nb] + src.table[1:]), "INVALID_ARGUMENT",
            None),
        "a repeated source block id": (request(
            source_block_ids=[src.table[0]] * 3), "INVALID_ARGUMENT", None),
        "two pools of one participant": (plan(
            source_memory_ids=ids + [twin_id]), "INVALID_ARGUMENT", None),
        "pools of different block sizes": (plan(
            source_memory_ids=[src.memory_ids[p0], wide_id]),
            "INVALID_ARGUMENT", None),
        "a target outside the target DP rank": (plan(
            target_dp_rank=0, pooled=dp1_id, block_ids=list(range(5))),
            "INVALID_ARGUMENT", None),
        "a target pool of another placement": (plan(
            pooled=src.memory_ids[p0], block_ids=src.table),
            "INVALID_ARGUMENT", None),
        "an unknown target memory id": (plan(pooled=unknown),
                                        "NOT_FOUND", None),
        "an unknown source placement id": (plan(
            source_placement_id="sha256:" + "5" * 64), "NOT_FOUND", None),
        "a short target block table": (request(pooled=pb.PooledMemory(
            memory_id=dst.memory_ids[tid], block_ids=dst.table[:2])),
            "INVALID_ARGUMENT", None),
        "token_count 0": (request(token_count=0), "INVALID_ARGUMENT", None),
        "binding and pooled both": (request(
            binding=tpool.binding(dst.table, num_tokens=tokens).message),
            "INVALID_ARGUMENT", None),
    }
    got = {what: outcome(fn) for what, (fn, _, _) in cases.items()}
    assert {k: v[0] for k, v in got.items()} == \
        {k: v[1] for k, v in cases.items()}
    for what, (_, _, named) in cases.items():
        assert got[what][1], "%s: an error without a message" % what
        if named is not None:
            assert named in got[what][1], (what, got[what][1])
    # The daemon still serves, and the same request plans.
    plan_ = plan()()
    assert [s.participant_id for s in plan_.sources] == [p0, p1]
    assert plan_.stats.bytes == held_bytes(DESC, target, tokens)
    assert np.all(plan_.copies().source_index < 2)
