"""PlanTransfer without a daemon (SPEC §2.6): the requests the sync and
asyncio clients build and send, TransferPlan's columns and checks on
hand-made responses, and the reference executor — its bounds checks, and
transfers between engine pools (vLLM NHD, FlashInfer HND) of numpy memory
planned by an in-process fake Planner that answers with the pure-Python
reference planner of transfer_ref.py (checked here against a plan computed
by hand), executed from source pools holding logical values into zeroed
targets and compared byte for byte."""

import asyncio

import grpc
import numpy as np
import pytest

import reshard
import reshard.aio
from reshard import _calls
import transfer_ref as ref

pb = reshard.planner_pb2
DESC = reshard.descriptor(4, dtype="bf16", itemsize=2, page_size=16,
                          total_kv_heads=4, key_head_dim=8)
HB = 8 * 2


@pytest.fixture
def fake():
    f = ref.FakePlanner()
    yield f
    f.stop()


# ------------------------------------------------------------- requests --

def test_plan_transfer_request():
    pool = ref.engine_pool(DESC, reshard.placement(DESC, tp=2).parts[1],
                           "vllm", 16, 4)
    src = reshard.placement(DESC, tp=1, prefix="p")
    call = _calls.plan_transfer(
        None, "sha256:src", 1, ["sha256:a", reshard.RegisteredMemory(
            "sha256:b", True)], np.array([5, 2, 7]), 40, src, None, 0,
        None, "sha256:m", [3, 1, 0], reshard.limits(max_batch_bytes=64),
        True, "op-1")
    req = call.request
    assert call.method == "PlanTransfer" and call.idempotent
    assert call.response_type is pb.PlanTransferResponse
    assert req.source_placement_id == "sha256:src" and \
        req.source_dp_rank.value == 1
    assert list(req.source_memory_ids) == ["sha256:a", "sha256:b"]
    assert list(req.source_block_ids) == [5, 2, 7] and req.token_count == 40
    assert req.target_placement == src and req.target_dp_rank.value == 0
    assert req.pooled == pb.PooledMemory(memory_id="sha256:m",
                                         block_ids=[3, 1, 0])
    assert not req.HasField("binding") and req.runs and \
        req.operation_id == "op-1" and req.limits.max_batch_bytes == 64
    # Defaults: no DP ranks, no limits; an inline pool checked against the
    # span (40 tokens of 16-token blocks need 3).
    call = _calls.plan_transfer(src, None, None, ["sha256:a"], [0], 40, None,
                                "sha256:t", None, None, pool, [2, 0, 1],
                                None, False, "")
    req = call.request
    assert req.source_placement == src and req.target_placement_id == \
        "sha256:t"
    assert not req.HasField("source_dp_rank") and \
        not req.HasField("target_dp_rank") and not req.HasField("limits")
    assert req.pooled.inline_pool == pool.message
    binding = pool.binding([2, 0, 1], num_tokens=40)
    call = _calls.plan_transfer(src, None, None, ["sha256:a"], [0], 40, None,
                                "sha256:t", None, binding, None, None, None,
                                False, "")
    assert call.request.binding == binding.message
    call = _calls.plan_transfer(src, None, None, ["sha256:a"], [0], 40, None,
                                "sha256:t", None, binding.message, None,
                                None, None, False, "")
    assert call.request.binding == binding.message

    def build(**kw):
        args = dict(source_placement=None, source_placement_id="s",
                    source_dp_rank=None, source_memory_ids=["sha256:a"],
                    source_block_ids=[0, 1, 2], token_count=40,
                    target_placement=None, target_placement_id="t",
                    target_dp_rank=None, binding=None, pooled="sha256:m",
                    block_ids=[0, 1, 2], limits=None, runs=False,
                    operation_id="")
        args.update(kw)
        return _calls.plan_transfer(**args)

    for kw, error, message in [
            (dict(source_placement=src), ValueError,
             "exactly one of source_placement and source_placement_id"),
            (dict(source_placement_id=None), ValueError,
             "exactly one of source_placement and source_placement_id"),
            (dict(target_placement=src), ValueError,
             "exactly one of target_placement and target_placement_id"),
            (dict(target_placement_id=None), ValueError,
             "exactly one of target_placement and target_placement_id"),
            (dict(pooled=None), ValueError,
             "exactly one of binding and pooled"),
            (dict(binding=binding), ValueError,
             "exactly one of binding and pooled"),
            (dict(pooled=None, binding=binding), ValueError,
             "block_ids goes with pooled"),
            (dict(pooled=None, block_ids=None, binding=pool.binding(
                [0, 1], num_tokens=32)), reshard.BindingError,
             r"the binding covers 32 tokens, the transfer 40"),
            (dict(pooled=pool, block_ids=[0, 1]), reshard.PoolError,
             r"block_ids has 2 blocks, tokens \[0, 40\) need 3"),
            (dict(pooled="sha256:m", block_ids=None), ValueError,
             "pooled memory needs block_ids"),
            (dict(token_count=0), ValueError, "token_count must be at least "
                                              "1, not 0"),
            (dict(token_count=2.5), TypeError, "integer"),
            (dict(source_memory_ids="sha256:a"), TypeError,
             "source_memory_ids is a list of memory ids"),
            (dict(source_memory_ids=[]), ValueError, "names no pool"),
            (dict(source_memory_ids=["sha256:a", ""]), ValueError,
             r"source_memory_ids\[1\] is empty"),
            (dict(source_memory_ids=["sha256:a", 7]), TypeError,
             r"source_memory_ids\[1\] must be a memory id"),
            (dict(source_block_ids=[1, 2, 1]), reshard.PoolError,
             r"source_block_ids: block 1 appears twice"),
            (dict(source_block_ids=[1, -2]), reshard.PoolError,
             r"source_block_ids: block_ids\[1\] = -2 is not a block")]:
        with pytest.raises(error, match=message):
            build(**kw)
    # numpy integers are integers.
    assert build(token_count=np.int64(7)).request.token_count == 7


# ------------------------------------------------------ plans as columns --

def transfer_response(batches, sources=(("a", 2), ("b", 1)),
                      regions=("t0", "t1")):
    resp = pb.PlanTransferResponse(region_ids=regions,
                                   source_placement_id="sha256:s",
                                   target_placement_id="sha256:t")
    for pid, n in sources:
        resp.sources.add(participant_id=pid, endpoint=pid + ":1",
                         memory_id="sha256:" + pid, regions=[
                             pb.Region(region_id="%s%d" % (pid, i),
                                       address=4096 * (i + 1), nbytes=64)
                             for i in range(n)])
    ops = total = entries = 0
    for source, cols in batches:
        tb = resp.batches.add(source_index=source)
        for name, values in cols.items():
            getattr(tb, name).extend(values)
        counts = cols.get("run_count") or [1] * len(cols["nbytes"])
        tb.bytes = sum(n * c for n, c in zip(cols["nbytes"], counts))
        ops += sum(counts)
        total += tb.bytes
        entries += len(counts) if "run_count" in cols else 0
    resp.stats.operations, resp.stats.bytes, resp.stats.runs = ops, total, \
        entries
    return resp


EXPLICIT = dict(source_region_index=[0, 1, 1], source_offset=[0, 8, 40],
                region_index=[0, 1, 0], region_offset=[16, 0, 32],
                nbytes=[4, 8, 2])
RUNS = dict(source_region_index=[0, 0], source_offset=[0, 2],
            region_index=[1, 0], region_offset=[8, 40], nbytes=[2, 3],
            run_count=[3, 2], source_stride=[4, 10], region_stride=[2, 5])


def test_transfer_plan_columns():
    plan = reshard.TransferPlan(transfer_response([(0, EXPLICIT),
                                                   (1, RUNS)]))
    assert plan.source_placement_id == "sha256:s" and \
        plan.target_placement_id == "sha256:t"
    assert [s.participant_id for s in plan.sources] == ["a", "b"]
    assert plan.batch_source(1).endpoint == "b:1"
    assert plan.source_region_ids(0) == ["a0", "a1"]
    b = plan.batches[0]
    assert b.source_offset.dtype == np.uint64 and b.run_count is None
    assert b.source_index.tolist() == [0, 0, 0]
    assert plan.batches[1].source_index.tolist() == [1, 1]
    assert plan.has_runs and plan.operations == 8 and plan.bytes == 26
    kept = plan.copies(expand_runs=False)
    assert len(kept) == 5 and kept.run_count.tolist() == [1, 1, 1, 3, 2]
    assert kept.source_stride.tolist() == [0, 0, 0, 4, 10]
    full = plan.copies()
    assert full.run_count is None and len(full) == 8
    assert full.batch.tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert full.source_index.tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert full.source_offset.tolist() == [0, 8, 40, 0, 4, 8, 2, 12]
    assert full.region_offset.tolist() == [16, 0, 32, 8, 10, 12, 40, 45]
    assert full.bytes == kept.bytes == plan.bytes
    assert not reshard.TransferPlan(transfer_response([(0, EXPLICIT)]))\
        .has_runs
    empty = reshard.TransferPlan(transfer_response([]))
    assert len(empty.copies()) == 0 and empty.operations == 0


@pytest.mark.parametrize("edit, message", [
    (lambda r: setattr(r.batches[0], "source_index", 2),
     r"batches\[0\].source_index 2 is not below 2 sources"),
    (lambda r: r.batches[1].source_region_index.__setitem__(0, 1),
     r"batches\[1\] names region 1 of source b, which has 1"),
    (lambda r: r.batches[0].region_index.__setitem__(2, 2),
     r"batches\[0\] names region 2 of 2"),
    (lambda r: r.batches[0].source_offset.pop(),
     r"batches\[0\].source_offset has 2 entries, nbytes 3"),
    (lambda r: r.batches[1].source_stride.pop(),
     r"batches\[1\].source_stride has 1 entries, nbytes 2"),
    (lambda r: r.batches[1].run_count.__setitem__(1, 0),
     r"batches\[1\] has a run of 0 copies"),
    (lambda r: setattr(r.batches[1], "bytes", 11),
     r"batches\[1\].bytes is 11, its copies move 12"),
])
def test_invalid_transfer_responses(edit, message):
    resp = transfer_response([(0, EXPLICIT), (1, RUNS)])
    edit(resp)
    with pytest.raises(reshard.ReshardError,
                       match="client: the server sent an invalid plan: "
                       + message) as err:
        reshard.TransferPlan(resp)
    assert err.value.code == grpc.StatusCode.INTERNAL
    assert err.value.method == "PlanTransfer"


# -------------------------------------------------------------- executor --

def buffers():
    src = {"a": {"a0": np.arange(64, dtype=np.uint8),
                 "a1": np.arange(100, 164, dtype=np.uint8)},
           "sha256:b": {"b0": bytearray(range(200, 255)) + bytearray(9)}}
    dst = {"t0": np.zeros(48, np.uint8), "t1": bytearray(16)}
    return src, dst


def test_execute_transfer_explicit_and_runs():
    plan = reshard.TransferPlan(transfer_response([(0, EXPLICIT),
                                                   (1, RUNS)]))
    src, dst = buffers()
    # Sources by participant id ("a") or by memory id ("sha256:b").
    assert reshard.execute(plan, src, dst) == 26
    t0, t1 = dst["t0"], np.frombuffer(dst["t1"], np.uint8)
    assert t0[16:20].tolist() == [0, 1, 2, 3]
    assert t1[0:8].tolist() == list(range(108, 116))
    assert t0[32:34].tolist() == [140, 141]
    assert t1[8:14].tolist() == [200, 201, 204, 205, 208, 209]
    assert t0[40:43].tolist() == [202, 203, 204]
    assert t0[45:48].tolist() == [212, 213, 214]
    written = np.zeros(48, bool)
    for a, n in ((16, 4), (32, 2), (40, 3), (45, 3)):
        written[a:a + n] = True
    assert not t0[~written].any() and not t1[14:].any()
    # execute_transfer is the same.
    src2, dst2 = buffers()
    assert reshard.execute_transfer(plan, src2, dst2) == 26
    assert np.array_equal(dst2["t0"], t0)


@pytest.mark.parametrize("batches, sizes, message", [
    # A copy past the region as the plan's sources declare it (64 bytes).
    ([(0, dict(EXPLICIT, source_offset=[0, 8, 63]))], {},
     r"batches\[0\] copy 2 reads bytes \[63, 65\) of source a region a1, "
     r"outside the region's 64 bytes"),
    # Inside the region, past the buffer given for it.
    ([(0, EXPLICIT)], {"a1": 41},
     r"batches\[0\] copy 2 reads bytes \[40, 42\) of source a region a1, "
     r"outside the 41 bytes of the buffer given for it"),
    # A run whose copy 4 of 5 writes past the target buffer (48 bytes).
    ([(0, EXPLICIT), (1, dict(RUNS, run_count=[3, 5]))], {},
     r"batches\[1\] run 1 copy 2 of 5 writes bytes \[50, 53\) of target "
     r"region t0, outside the 48 bytes of the buffer given for it"),
    ([(1, dict(RUNS, source_offset=[2 ** 64 - 8, 2]))], {},
     r"batches\[0\] run 0 copy 0 of 3: its source offsets pass 2\^64"),
    ([(0, dict(EXPLICIT, nbytes=[4, 8, 2 ** 63]))], {},
     r"batches\[0\] copy 2 reads bytes .* outside the region's 64 bytes"),
])
def test_execute_transfer_bounds(batches, sizes, message):
    plan = reshard.TransferPlan(transfer_response(batches))
    src, dst = buffers()
    for rid, n in sizes.items():
        src["a"][rid] = src["a"][rid][:n]
    before = {k: bytes(v) for k, v in dst.items()}
    with pytest.raises(ValueError, match=message):
        reshard.execute(plan, src, dst)
    # Every copy is checked before any is made: nothing was written.
    assert {k: bytes(v) for k, v in dst.items()} == before


def test_execute_transfer_missing_buffers():
    plan = reshard.TransferPlan(transfer_response([(0, EXPLICIT),
                                                   (1, RUNS)]))
    src, dst = buffers()
    with pytest.raises(KeyError, match=r"no buffers for source b "
                                       r"\(memory id sha256:b\)"):
        reshard.execute(plan, {"a": src["a"]}, dst)
    with pytest.raises(KeyError, match="no buffer for region 'a1' of source "
                                       "a"):
        reshard.execute(plan, {"a": {"a0": src["a"]["a0"]},
                               "b": src["sha256:b"]}, dst)
    with pytest.raises(KeyError, match="no buffer for target region 't1'"):
        reshard.execute(plan, src, {"t0": dst["t0"]})


# ------------------------------------------- transfers between pools --

def hand_plan(src_pool, src_table, dst_pool, dst_table, tokens):
    """The explicit copies of a TP1 → TP2 transfer between vLLM NHD pools
    of one block size, by hand: the target's heads of a token are half of
    the source's row, so one copy per (layer, component, token), never
    coalesced (the source's next token is a row further on)."""
    d = src_pool.descriptor
    h0, hn = dst_pool.part.head_start, dst_pool.part.head_count
    src_regions = [r.region_id for r in src_pool.message.regions]
    dst_regions = [r.region_id for r in dst_pool.message.regions]
    copies = []
    for layer in sorted(dst_pool.part.layer_ids):
        li = layer  # one region per layer, in layer order, on both sides
        for c in ref.components(d):
            k = c - reshard.KEY
            nb_s, nb_d = src_pool.num_blocks, dst_pool.num_blocks
            bs = src_pool.block_size
            row_s = d.total_kv_heads * HB
            for t in range(tokens):
                s_off = (k * nb_s * bs * row_s + src_table[t // bs] * bs *
                         row_s + (t % bs) * row_s + h0 * HB)
                d_off = (k * nb_d * bs * hn * HB + dst_table[t // bs] * bs
                         * hn * HB + (t % bs) * hn * HB)
                copies.append((0, src_regions.index("layer%d.KV" % li),
                               s_off, dst_regions.index("layer%d.KV" % li),
                               d_off, hn * HB))
    return sorted(copies)


def test_tp1_to_tp2_vllm_by_hand(fake):
    tokens = 40
    with reshard.Client(fake.target, timeout=10) as c:
        src = ref.Instance(c, DESC, "prefill", tp=1, tokens=tokens, seed=1)
        dst = ref.Instance(c, DESC, "decode", tp=2, tokens=tokens, seed=2)
        (sid, spool), = src.pools.items()
        values = ref.logical_values(DESC, tokens, seed=3)
        ref.fill_source(spool, values, src.table, tokens, seed=4)
        for part in dst.parts:
            pid = part.participant_id
            pool = dst.pools[pid]
            common = dict(source_placement_id=src.placement_id,
                          source_memory_ids=list(src.memory_ids.values()),
                          source_block_ids=src.table, token_count=tokens,
                          target_placement_id=dst.placement_id,
                          pooled=dst.memory_ids[pid], block_ids=dst.table)
            plan = c.plan_transfer(**common)
            ref.check_shape(plan, src, pool)
            assert [s.participant_id for s in plan.sources] == [sid]
            got = plan.copies()
            assert len(plan.batches) == 1
            assert list(zip(got.source_index.tolist(),
                            got.source_region_index.tolist(),
                            got.source_offset.tolist(),
                            got.region_index.tolist(),
                            got.region_offset.tolist(),
                            got.nbytes.tolist())) == hand_plan(
                spool, src.table, pool, dst.table, tokens)
            assert plan.stats.bytes == tokens * 4 * 2 * 2 * HB
            assert reshard.execute(plan, {sid: spool}, pool) == \
                plan.stats.bytes
            assert ref.check_target(pool, values, dst.table, tokens) == \
                plan.stats.bytes
            # With runs: one run per (layer, component, block); the same
            # bytes.
            runs = c.plan_transfer(runs=True, **common)
            # At most one run per (layer, component, block): a block's
            # tokens are one arithmetic progression on both sides.
            assert runs.has_runs and runs.stats.runs == \
                len(runs.copies(expand_runs=False)) <= 4 * 2 * 3
            assert sorted(ref.batch_copies(runs, 0)) == \
                ref.batch_copies(plan, 0)
            ref.zero(pool)
            reshard.execute(runs, {sid: spool.host_regions()},
                            pool.host_regions())
            ref.check_target(pool, values, dst.table, tokens)
            # The explicit binding of the same memory: the same plan.
            binding = pool.binding(dst.table, num_tokens=tokens)
            explicit = c.plan_transfer(
                binding=binding, **{k: v for k, v in common.items()
                                    if k not in ("pooled", "block_ids")})
            assert list(explicit.response.batches) == \
                list(plan.response.batches)
    req = fake.requests[-1]
    assert isinstance(req, pb.PlanTransferRequest) and \
        req.HasField("binding")


@pytest.mark.parametrize("limits", [None, reshard.limits(
    max_batch_operations=5, max_batch_bytes=100)], ids=["default", "small"])
def test_hnd_16_into_nhd_64_with_pp(fake, limits):
    """TP2 FlashInfer HND 16-token blocks into TP1·PP2 vLLM NHD 64-token
    blocks: each target stage reads both source ranks."""
    tokens = 100
    with reshard.Client(fake.target, timeout=10) as c:
        src = ref.Instance(c, DESC, "fi", tp=2, memory="flashinfer", block=16,
                       tokens=tokens, seed=5)
        dst = ref.Instance(c, DESC, "vl", tp=1, pp=2, block=64, tokens=tokens,
                       seed=6)
        values = ref.logical_values(DESC, tokens, seed=7)
        for i, pool in enumerate(src.pools.values()):
            ref.fill_source(pool, values, src.table, tokens, seed=10 + i)
        for part in dst.parts:
            pid = part.participant_id
            pool = dst.pools[pid]
            for runs in (False, True):
                plan = c.plan_transfer(
                    source_placement=src.placement,
                    source_memory_ids=list(src.memory_ids.values()),
                    source_block_ids=src.table, token_count=tokens,
                    target_placement=dst.placement, pooled=pool,
                    block_ids=dst.table, limits=limits, runs=runs)
                ref.check_shape(plan, src, pool, limits)
                assert [s.participant_id for s in plan.sources] == \
                    ref.expected_sources(src.parts, part) == \
                    sorted(src.pools)
                assert plan.has_runs == runs
                if limits is not None:
                    assert len(plan.batches) > 2
                ref.zero(pool)
                moved = reshard.execute(plan, src.pools, pool)
                assert moved == ref.check_target(pool, values, dst.table,
                                                 tokens)


def test_replicas_choose_sources(fake):
    tokens = 20
    with reshard.Client(fake.target, timeout=10) as c:
        # TP8 over 4 heads: every head on two ranks (replica ordinals 0,
        # 1) on both sides.
        src = ref.Instance(c, DESC, "sr", tp=8, tokens=tokens, seed=8)
        dst = ref.Instance(c, DESC, "dr", tp=8, tokens=tokens, seed=9)
        narrow = ref.Instance(c, DESC, "nr", tp=4, tokens=tokens, seed=10)
        values = ref.logical_values(DESC, tokens, seed=11)
        for i, pool in enumerate(src.pools.values()):
            ref.fill_source(pool, values, src.table, tokens, seed=20 + i)
        for inst in (dst, narrow):
            for part in inst.parts:
                pool = inst.pools[part.participant_id]
                plan = c.plan_transfer(
                    source_placement_id=src.placement_id,
                    source_memory_ids=sorted(src.memory_ids.values()),
                    source_block_ids=src.table, token_count=tokens,
                    target_placement_id=inst.placement_id,
                    pooled=inst.memory_ids[part.participant_id],
                    block_ids=inst.table)
                want = [p for p in src.parts
                        if p.head_start == part.head_start
                        and p.replica_ordinal == part.replica_ordinal]
                assert [s.participant_id for s in plan.sources] == \
                    [want[0].participant_id]
                reshard.execute(plan, src.pools, pool)
                ref.check_target(pool, values, inst.table, tokens)


def test_aio_plan_transfer(fake):
    tokens = 24
    with reshard.Client(fake.target, timeout=10) as c:
        src = ref.Instance(c, DESC, "ap", tp=1, tokens=tokens, seed=12)
        dst = ref.Instance(c, DESC, "ad", tp=2, tokens=tokens, seed=13)
    part = dst.parts[1]

    async def main():
        async with reshard.aio.Client(fake.target, timeout=10) as ac:
            return await ac.plan_transfer(
                source_placement_id=src.placement_id,
                source_memory_ids=list(src.memory_ids.values()),
                source_block_ids=src.table, token_count=tokens,
                target_placement_id=dst.placement_id,
                target_dp_rank=0, source_dp_rank=0,
                pooled=dst.memory_ids[part.participant_id],
                block_ids=dst.table, runs=True, operation_id="aio")

    plan = asyncio.run(main())
    assert isinstance(plan, reshard.TransferPlan) and plan.has_runs
    req = fake.requests[-1]
    assert req.operation_id == "aio" and req.runs and \
        req.source_dp_rank.value == 0 and req.target_dp_rank.value == 0
    values = ref.logical_values(DESC, tokens, seed=14)
    (spool,) = src.pools.values()
    ref.fill_source(spool, values, src.table, tokens, seed=15)
    reshard.execute(plan, {spool.participant_id: spool},
                    dst.pools[part.participant_id])
    ref.check_target(dst.pools[part.participant_id], values, dst.table,
                     tokens)


def test_refusals_reach_the_caller(fake):
    with reshard.Client(fake.target, timeout=10) as c:
        src = ref.Instance(c, DESC, "rp", tp=2, tokens=32)
        dst = ref.Instance(c, DESC, "rd", tp=1, tokens=32)
        pid = dst.parts[0].participant_id
        common = dict(source_placement_id=src.placement_id,
                      source_block_ids=src.table, token_count=32,
                      target_placement_id=dst.placement_id,
                      pooled=dst.memory_ids[pid], block_ids=dst.table)
        missing = sorted(src.memory_ids)[1]
        with pytest.raises(reshard.ReshardError) as err:
            c.plan_transfer(source_memory_ids=[src.memory_ids[sorted(
                src.memory_ids)[0]]], **common)
        assert err.value.code_name == "FAILED_PRECONDITION" and \
            missing in err.value.message and \
            err.value.method == "PlanTransfer"
        with pytest.raises(reshard.ReshardError) as err:
            c.plan_transfer(source_memory_ids=["sha256:" + "9" * 64],
                            **common)
        assert err.value.code_name == "NOT_FOUND"
