"""LoadPlan/StorePlan columns, run expansion, the reference executor and
the checks of a response, on hand-made responses (no daemon)."""

import grpc
import numpy as np
import pytest

import reshard

pb = reshard.planner_pb2


def response(batches, regions=("r0", "r1"), pages=("p0", "p1")):
    resp = pb.PlanLoadResponse(hit_pages=len(pages), region_ids=regions)
    for key in pages:
        resp.pages.add(page_key=key, manifest_key="m", layout_id="l")
    ops = total = runs = 0
    for cols in batches:
        rb = resp.batches.add()
        for name, values in cols.items():
            getattr(rb, name).extend(values)
        counts = cols.get("run_count") or [1] * len(cols["nbytes"])
        rb.bytes = sum(n * c for n, c in zip(cols["nbytes"], counts))
        ops += sum(counts)
        total += rb.bytes
        runs += len(cols["nbytes"]) if "run_count" in cols else 0
    resp.stats.operations, resp.stats.bytes, resp.stats.runs = ops, total, \
        runs
    return resp


EXPLICIT = dict(page_index=[0, 0, 1], part_index=[0, 1, 0],
                part_offset=[0, 8, 4], region_index=[0, 1, 0],
                region_offset=[16, 0, 32], nbytes=[4, 8, 2])
RUNS = dict(page_index=[0, 1], part_index=[1, 0], part_offset=[0, 2],
            region_index=[1, 0], region_offset=[8, 40], nbytes=[2, 3],
            run_count=[3, 2], part_stride=[4, 10], region_stride=[0, 5])


def test_columns_are_uint64_arrays():
    plan = reshard.LoadPlan(response([EXPLICIT]))
    b = plan.batches[0]
    assert b.part_offset.dtype == np.uint64
    assert b.part_offset.tolist() == [0, 8, 4] and b.run_count is None
    assert not plan.has_runs and plan.operations == 3 and plan.bytes == 14
    assert plan.copies().batch.tolist() == [0, 0, 0]


def test_runs_kept_and_expanded():
    plan = reshard.LoadPlan(response([EXPLICIT, RUNS]))
    assert plan.has_runs and plan.operations == 8
    kept = plan.copies(expand_runs=False)
    assert len(kept) == 5
    # The explicit batch reads as runs of one copy with strides 0.
    assert kept.run_count.tolist() == [1, 1, 1, 3, 2]
    assert kept.part_stride.tolist() == [0, 0, 0, 4, 10]
    full = plan.copies()
    assert full.run_count is None and len(full) == 8
    assert full.batch.tolist() == [0, 0, 0, 1, 1, 1, 1, 1]
    assert full.part_offset.tolist() == [0, 8, 4, 0, 4, 8, 2, 12]
    assert full.region_offset.tolist() == [16, 0, 32, 8, 8, 8, 40, 45]
    assert full.nbytes.tolist() == [4, 8, 2, 2, 2, 2, 3, 3]
    assert full.bytes == kept.bytes == plan.bytes == 14 + 12


def test_execute_load_and_store():
    plan = reshard.LoadPlan(response([EXPLICIT, RUNS]))
    parts = [[np.arange(16, dtype=np.uint8), np.arange(100, 116,
                                                      dtype=np.uint8)],
             [np.arange(200, 216, dtype=np.uint8), bytearray(16)]]
    regions = {"r0": np.zeros(48, np.uint8), "r1": bytearray(16)}
    assert reshard.execute(plan, parts, regions) == 26
    r0, r1 = regions["r0"], np.frombuffer(regions["r1"], np.uint8)
    assert r0[16:20].tolist() == [0, 1, 2, 3]
    assert r0[32:34].tolist() == [204, 205]
    assert r0[40:43].tolist() == [202, 203, 204]
    assert r0[45:48].tolist() == [212, 213, 214]
    assert r1[0:8].tolist() == list(range(108, 116))
    # The run with region stride 0 leaves its last copy.
    assert r1[8:10].tolist() == [108, 109]
    # Keyed by page key works the same.
    again = {"r0": np.zeros(48, np.uint8), "r1": np.zeros(16, np.uint8)}
    reshard.execute(plan, {"p0": parts[0], "p1": parts[1]}, again)
    assert np.array_equal(again["r0"], r0)
    # A store plan copies the other way.
    store = pb.PlanStoreResponse(region_ids=["r0"], part_indexes=[0])
    rb = store.batches.add(page_index=[1], part_index=[0], part_offset=[3],
                           region_index=[0], region_offset=[40], nbytes=[5],
                           bytes=5)
    assert rb.bytes == 5
    splan = reshard.StorePlan(store, page_count=2)
    out = [[np.zeros(8, np.uint8)], [np.zeros(8, np.uint8)]]
    assert reshard.execute(splan, out, {"r0": r0}) == 5
    assert out[1][0].tolist() == [0, 0, 0] + r0[40:45].tolist()
    assert not out[0][0].any()


def test_execute_refuses_copies_outside_buffers():
    plan = reshard.LoadPlan(response([EXPLICIT]))
    parts = [[np.zeros(16, np.uint8)] * 2] * 2
    with pytest.raises(ValueError, match="writes past the end"):
        reshard.execute(plan, parts, {"r0": np.zeros(20, np.uint8),
                                      "r1": np.zeros(16, np.uint8)})
    with pytest.raises(KeyError, match="r1"):
        reshard.execute(plan, parts, {"r0": np.zeros(64, np.uint8)})


@pytest.mark.parametrize("edit, message", [
    (lambda r: r.batches[0].nbytes.append(1),
     "page_index has 3 entries, nbytes 4"),
    (lambda r: setattr(r.batches[0], "bytes", 1), "bytes is 1"),
    (lambda r: r.batches[0].page_index.__setitem__(0, 2), "names page 2"),
    (lambda r: r.batches[0].region_index.__setitem__(0, 5),
     "names region 5"),
    (lambda r: setattr(r, "hit_pages", 3), "hit_pages 3 but 2 pages"),
    (lambda r: r.batches[0].run_count.extend([1, 1]),
     "run_count has 2 entries"),
])
def test_invalid_responses_are_internal_errors(edit, message):
    resp = response([EXPLICIT])
    edit(resp)
    with pytest.raises(reshard.ReshardError, match=message) as err:
        reshard.LoadPlan(resp)
    assert err.value.code == grpc.StatusCode.INTERNAL
    assert err.value.message.startswith("client: ")


def test_part_views_follow_the_formats():
    desc = reshard.descriptor([5, 7], dtype="bf16", itemsize=2, page_size=4,
                              total_kv_heads=2, key_head_dim=3,
                              value_head_dim=2)
    layout = pb.StoreLayout(descriptor=desc, format=reshard.HPLD, shards=[
        pb.StoreShard(layer_ids=[7, 5], head_start=0, head_count=2,
                      key_suffix="0")])
    assert reshard.part_sizes(layout) == [2 * 4 * 2 * (3 + 2) * 2]
    part = reshard.new_parts(layout)[0][0]
    views = reshard.part_views(layout, part, 0)
    assert sorted(views) == [(5, reshard.KEY), (5, reshard.VALUE),
                             (7, reshard.KEY), (7, reshard.VALUE)]
    assert views[(7, reshard.KEY)].shape == (4, 2, 3)
    assert views[(7, reshard.KEY)].dtype == np.uint16
    views[(7, reshard.KEY)][2, 1, 0] = 0xABCD
    # HPLD: layer stride hb, token stride L·hb, head stride P·L·hb.
    hb = 3 * 2
    at = 1 * hb + 2 * (2 * hb) + 1 * (4 * 2 * hb)
    assert part[at:at + 2].tolist() == [0xCD, 0xAB]
    views[(5, reshard.VALUE)][0, 0, 1] = 0x1234
    k_block = 2 * 4 * 2 * hb
    assert part[k_block + 2:k_block + 4].tolist() == [0x34, 0x12]


@pytest.mark.parametrize("unit", [1, 2, 8])
def test_execute_matches_a_copy_loop(monkeypatch, unit):
    """Random copies (short and long, several gathers) against memcpy in a
    Python loop."""
    import reshard.executor as ex
    monkeypatch.setattr(ex, "_CHUNK", 64)
    monkeypatch.setattr(ex, "_LARGE", 40)
    rng = np.random.default_rng(unit)
    n = 300
    nbytes = rng.integers(1, 60, n) * unit
    nbytes[::37] = 50 * unit + unit  # long copies
    dst_off = np.cumsum(nbytes) - nbytes  # disjoint destinations
    src_off = rng.integers(0, 400, n) * unit
    rb = pb.RangeBatch(page_index=[0] * n, part_index=[0] * n,
                       part_offset=src_off.tolist(), region_index=[0] * n,
                       region_offset=dst_off.tolist(),
                       nbytes=nbytes.tolist(), bytes=int(nbytes.sum()))
    resp = pb.PlanLoadResponse(hit_pages=1, region_ids=["r"],
                               batches=[rb])
    resp.pages.add(page_key="p")
    src = rng.integers(1, 256, 400 * unit + 60 * unit, dtype=np.uint8)
    got = np.zeros(int(nbytes.sum()) + 5, np.uint8)
    want = got.copy()
    for so, do, nb in zip(src_off, dst_off, nbytes):
        want[do:do + nb] = src[so:so + nb]
    moved = reshard.execute(reshard.LoadPlan(resp), [[src]], {"r": got})
    assert moved == int(nbytes.sum())
    assert np.array_equal(got, want)
