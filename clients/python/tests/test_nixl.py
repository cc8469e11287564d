"""reshard.nixl: NIXL descriptor lists from plans. Each list is compared
with the plan's expanded copies (addresses resolved by hand), and executed
here by a stand-in for NIXL — a memmove per (remote row, local row), a
strided row expanded to its ``count`` copies — between buffers of this
process, so every address and length is proven by the bytes it moves:
TransferPlans from the reference planner of transfer_ref.py (several
random shapes, explicit and runs) and LoadPlans from the daemon."""

import ctypes

import numpy as np
import pytest

import kv
import reshard
import reshard.nixl
import transfer_ref as ref
from test_roundtrip import publish

pb = reshard.planner_pb2
DESC = reshard.descriptor(4, dtype="bf16", itemsize=2, page_size=16,
                          total_kv_heads=4, key_head_dim=8)


@pytest.fixture
def fake():
    f = ref.FakePlanner()
    yield f
    f.stop()


def expand_rows(rows: np.ndarray) -> np.ndarray:
    """(addr, len, dev) rows of a descriptor list, strided rows expanded."""
    if rows.shape[1] == 3:
        return rows
    count = rows[:, 4].astype(np.int64)
    entry = np.repeat(np.arange(rows.shape[0]), count)
    k = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count,
                                                count)
    return np.stack([rows[entry, 0] + k.astype(np.uint64) * rows[entry, 3],
                     rows[entry, 1], rows[entry, 2]], axis=1)


def run_nixl(batches) -> int:
    """What a NIXL READ of each batch does, by memmove in this process."""
    moved = 0
    for b in batches:
        local, remote = expand_rows(b.local), expand_rows(b.remote)
        assert np.array_equal(local[:, 1], remote[:, 1])
        for (dst, n, _), (src, _, _) in zip(local.tolist(),
                                            remote.tolist()):
            ctypes.memmove(dst, src, n)
            moved += n
    return moved


def transfer_rows(plan, target):
    """Per batch, the (local, remote) rows the plan's expanded copies
    give, addresses resolved one copy at a time."""
    addr = {r.region_id: r.address for r in target.message.regions}
    out = []
    for i, b in enumerate(plan.batches):
        src = plan.batch_source(i)
        c = b.expanded()
        local, remote = [], []
        for si, so, ri, ro, n in zip(c.source_region_index.tolist(),
                                     c.source_offset.tolist(),
                                     c.region_index.tolist(),
                                     c.region_offset.tolist(),
                                     c.nbytes.tolist()):
            local.append([addr[plan.region_ids[ri]] + ro, n, 0])
            remote.append([src.regions[si].address + so, n, 1])
        out.append((local, remote))
    return out


# Random shapes: (source tp, pp, memory, block) -> (target tp, pp, memory,
# block), token count, limits; drawn from a seeded generator so the cases
# are fixed but not hand-picked.
def _cases(n: int, seed: int):
    g = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        src = (int(g.choice([1, 2, 4, 8])), int(g.choice([1, 2])),
               str(g.choice(["vllm", "flashinfer"])),
               int(g.choice([4, 16, 32])))
        dst = (int(g.choice([1, 2, 4])), int(g.choice([1, 2, 4])),
               str(g.choice(["vllm", "flashinfer"])),
               int(g.choice([8, 16, 64])))
        tokens = int(g.integers(1, 60))
        small = bool(g.integers(0, 2))
        out.append((src, dst, tokens, small))
    return out


CASES = _cases(6, seed=28)


@pytest.mark.parametrize("case", CASES, ids=[
    "src%s-dst%s-t%d%s" % ("x".join(map(str, s)), "x".join(map(str, d)), t,
                           "-small" if small else "")
    for s, d, t, small in CASES])
def test_transfer_descs_are_the_expanded_copies(fake, case):
    (stp, spp, smem, sblock), (dtp, dpp, dmem, dblock), tokens, small = case
    limits = reshard.limits(max_batch_operations=7, max_batch_bytes=300) \
        if small else None
    with reshard.Client(fake.target, timeout=10) as c:
        src = ref.Instance(c, DESC, "s", tp=stp, pp=spp, memory=smem,
                           block=sblock, tokens=tokens, seed=1)
        dst = ref.Instance(c, DESC, "d", tp=dtp, pp=dpp, memory=dmem,
                           block=dblock, tokens=tokens, seed=2)
        values = ref.logical_values(DESC, tokens, seed=3)
        for i, pool in enumerate(src.pools.values()):
            ref.fill_source(pool, values, src.table, tokens, seed=10 + i)
        for part in dst.parts:
            pool = dst.pools[part.participant_id]
            for runs in (False, True):
                plan = c.plan_transfer(
                    source_placement=src.placement,
                    source_memory_ids=list(src.memory_ids.values()),
                    source_block_ids=src.table, token_count=tokens,
                    target_placement=dst.placement, pooled=pool,
                    block_ids=dst.table, limits=limits, runs=runs)
                want = transfer_rows(plan, pool)
                for strided in (False, True):
                    got = reshard.nixl.transfer_descs(
                        plan, pool, strided=strided, remote_dev=1)
                    assert [b.batch for b in got] == \
                        list(range(len(plan.batches)))
                    for i, b in enumerate(got):
                        assert b.local.dtype == np.uint64
                        assert b.local.shape == b.remote.shape
                        assert b.local.shape[1] == (5 if strided else 3)
                        assert b.peer == plan.batch_source(i).participant_id
                        assert b.source is plan.batch_source(i)
                        assert b.bytes == plan.batches[i].bytes
                        if strided:
                            assert len(b) == len(plan.batches[i])
                        local, remote = want[i]
                        assert expand_rows(b.local).tolist() == local
                        assert expand_rows(b.remote).tolist() == remote
                    # The rows move exactly the plan's bytes.
                    ref.zero(pool)
                    assert run_nixl(got) == plan.bytes
                    ref.check_target(pool, values, dst.table, tokens)


def test_strided_rows_keep_the_runs(fake):
    """A TP2 FlashInfer source read by a TP1 vLLM target: runs fold, and
    the strided lists have one row per run."""
    tokens = 48
    with reshard.Client(fake.target, timeout=10) as c:
        src = ref.Instance(c, DESC, "fi", tp=2, memory="flashinfer",
                           block=16, tokens=tokens, seed=5)
        dst = ref.Instance(c, DESC, "vl", tp=1, block=16, tokens=tokens,
                           seed=6)
        pool = dst.pools[dst.parts[0].participant_id]
        plan = c.plan_transfer(
            source_placement=src.placement,
            source_memory_ids=list(src.memory_ids.values()),
            source_block_ids=src.table, token_count=tokens,
            target_placement=dst.placement, pooled=pool,
            block_ids=dst.table, runs=True)
        strided = reshard.nixl.descs(plan, pool, strided=True)
        flat = reshard.nixl.descs(plan, pool)
        rows = sum(len(b) for b in strided)
        assert rows == plan.stats.runs < sum(len(b) for b in flat) == \
            plan.operations
        assert any(int(b.local[:, 4].max()) > 1 for b in strided)


def hand_plan(regions=(("a0", 4096, 64),), target=(("t0", 8192, 64),)):
    resp = pb.PlanTransferResponse(region_ids=[t[0] for t in target])
    resp.sources.add(participant_id="a", endpoint="a:1", memory_id="m",
                     regions=[pb.Region(region_id=r, address=a, nbytes=n)
                              for r, a, n in regions])
    return resp


@pytest.mark.parametrize("cols, message", [
    (dict(source_offset=[0, 60], region_offset=[0, 8], nbytes=[4, 8]),
     r"batches\[0\] copy 1: the source side \[60, \+8\) x 1"),
    (dict(source_offset=[0], region_offset=[60], nbytes=[8]),
     r"batches\[0\] copy 0: the target side"),
    (dict(source_offset=[0, 0], region_offset=[0, 0], nbytes=[4, 4],
          run_count=[1, 5], source_stride=[0, 16], region_stride=[0, 4]),
     r"batches\[0\] run 1: the source side \[0, \+4\) x 5 \(stride 16\)"),
    (dict(source_offset=[0], region_offset=[0], nbytes=[4], run_count=[3],
          source_stride=[2 ** 63], region_stride=[4]),
     r"batches\[0\] run 0: the source side"),
])
def test_copies_outside_their_memory_are_refused(cols, message):
    resp = hand_plan()
    tb = resp.batches.add(source_index=0)
    n = len(cols["nbytes"])
    tb.source_region_index.extend([0] * n)
    tb.region_index.extend([0] * n)
    for name, values in cols.items():
        getattr(tb, name).extend(values)
    counts = cols.get("run_count") or [1] * n
    tb.bytes = sum(a * b for a, b in zip(cols["nbytes"], counts))
    plan = reshard.TransferPlan(resp)
    with pytest.raises(ValueError, match=message):
        reshard.nixl.transfer_descs(plan, {"t0": (8192, 64)})


def test_regions_without_an_address():
    resp = hand_plan()
    tb = resp.batches.add(source_index=0, bytes=4)
    for name, v in (("source_region_index", 0), ("source_offset", 0),
                    ("region_index", 0), ("region_offset", 0),
                    ("nbytes", 4)):
        getattr(tb, name).append(v)
    plan = reshard.TransferPlan(resp)
    with pytest.raises(KeyError, match="t0"):
        reshard.nixl.transfer_descs(plan, {"t1": 1})
    # Addresses alone (no size) are accepted; Region messages too.
    got = reshard.nixl.transfer_descs(plan, {"t0": 8192})
    assert got[0].local.tolist() == [[8192, 4, 0]]
    assert got[0].remote.tolist() == [[4096, 4, 0]]
    got = reshard.nixl.transfer_descs(
        plan, [pb.Region(region_id="t0", address=100, nbytes=4)],
        strided=True)
    assert got[0].local.tolist() == [[100, 4, 0, 0, 1]]


# ------------------------------------------------------------ load plans --

def part_address(arr: np.ndarray) -> int:
    return int(arr.ctypes.data)


@pytest.mark.parametrize("cfg", kv.CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("fmt", ["PLHD", "HPLD"])
def test_load_descs_are_the_expanded_copies(client, fmt, cfg):
    pub = publish(client, cfg, fmt, "nixl-%s-%s" % (fmt, cfg.name))
    parts = kv.parts_from_views(pub.layout, pub.writer, pub.part_writers,
                                pub.values)
    by_key = dict(zip(pub.page_keys, parts))
    # Two stores: even Parts at one, odd Parts at the other.
    served = {key: [(part_address(p), p.nbytes, 0, "store%d" % (j % 2))
                    for j, p in enumerate(page)]
              for key, page in by_key.items()}
    for i, part in enumerate(pub.reader.parts):
        for runs in (False, True):
            binding, tensors = kv.reader_memory(pub.desc, part, "paged",
                                                cfg.block, seed=i)
            plan = client.plan_load(model_domain=pub.model_domain,
                                    page_keys=pub.page_keys, binding=binding,
                                    placement=pub.reader, runs=runs)
            addr = {r.region_id: r.address for r in binding.message.regions}
            for strided in (False, True):
                got = reshard.nixl.load_descs(plan, served, binding,
                                              strided=strided)
                for b in got:
                    assert b.peer in ("store0", "store1")
                    assert set((b.part_index % 2).tolist()) == \
                        {int(b.peer[-1])}
                    assert len(b.page_index) == len(b)
                # Per batch, the rows of its peers together are its
                # expanded copies.
                for j, batch in enumerate(plan.batches):
                    c = batch.expanded()
                    want = sorted(
                        ((addr[plan.region_ids[ri]] + ro, n, 0),
                         (part_address(by_key[plan.pages[pg].page_key][pt])
                          + po, n, 0))
                        for pg, pt, po, ri, ro, n in zip(
                            c.page_index.tolist(), c.part_index.tolist(),
                            c.part_offset.tolist(), c.region_index.tolist(),
                            c.region_offset.tolist(), c.nbytes.tolist()))
                    mine = [b for b in got if b.batch == j]
                    rows = sorted(
                        (tuple(lr), tuple(rr)) for b in mine
                        for lr, rr in zip(expand_rows(b.local).tolist(),
                                          expand_rows(b.remote).tolist()))
                    assert rows == want
                    assert len({b.peer for b in mine}) == len(mine)
            # Executed, the rows give the writer's values, nothing else.
            assert run_nixl(reshard.nixl.load_descs(
                plan, served, binding, strided=runs)) == plan.bytes
            h0, hn = part.head_start, part.head_count
            for (layer, comp), (held, rest) in kv.reader_values(
                    pub.desc, "paged", cfg.block, tensors).items():
                want = kv.bits(pub.values[(layer, comp)][:, h0:h0 + hn, :])
                assert np.array_equal(held, want)
                assert not rest.any()


def test_load_descs_from_buffers_and_callables(client):
    cfg = kv.CONFIGS[0]
    pub = publish(client, cfg, "LPHD", "nixl-callable")
    parts = kv.parts_from_views(pub.layout, pub.writer, pub.part_writers,
                                pub.values)
    by_key = dict(zip(pub.page_keys, parts))
    part = pub.reader.parts[0]
    binding, _ = kv.reader_memory(pub.desc, part, "contiguous", cfg.block,
                                  seed=0)
    plan = client.plan_load(model_domain=pub.model_domain,
                            page_keys=pub.page_keys, binding=binding,
                            placement=pub.reader, runs=True)
    a = reshard.nixl.load_descs(plan, by_key, binding, strided=True)
    b = reshard.nixl.descs(plan, lambda page, j: by_key[page.page_key][j],
                           binding, strided=True)
    assert len(a) == len(b) == len(plan.batches)
    for x, y in zip(a, b):
        assert np.array_equal(x.local, y.local)
        assert np.array_equal(x.remote, y.remote) and x.peer == y.peer == ""
    # A Part shorter than the plan reads is refused, naming the batch.
    short = {k: [(part_address(p), 8) for p in v] for k, v in by_key.items()}
    with pytest.raises(ValueError, match=r"batches\[0\] run \d+: the Part "
                       r"side"):
        reshard.nixl.load_descs(plan, short, binding)
