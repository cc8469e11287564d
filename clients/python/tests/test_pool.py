"""PoolBuilder without a daemon (SPEC §1.5a): the pool tensors, strides and
regions each engine layout gives; the expansion into an explicit binding
against BindingBuilder; the local errors, naming the tensor and the layer;
the reference executor on a pooled plan; the requests the clients send
(through an in-process fake Planner, sync and asyncio)."""

import asyncio
from concurrent import futures

import grpc
import numpy as np
import pytest
import torch

import reshard
import reshard.aio
from reshard import _calls

DESC = reshard.descriptor([0, 1, 2, 3], dtype="bf16", itemsize=2,
                          page_size=16, total_kv_heads=4, key_head_dim=8,
                          value_head_dim=8)
READER = reshard.placement(DESC, tp=2, pp=2, prefix="r")
PART = reshard.find_part(READER, "r-dp0-pp1-tp1")  # layers 2, 3; heads 2, 3
LAYERS = [2, 3]
HB = 8 * 2  # head bytes
BF16 = torch.bfloat16

MLA = reshard.descriptor([0, 1], dtype="bf16", itemsize=2, page_size=16,
                         total_kv_heads=1, key_head_dim=576,
                         value_head_dim=0)
MLA_PART = reshard.find_part(reshard.placement(MLA, tp=2, prefix="m"),
                             "m-dp0-pp0-tp1")  # layers 0, 1; head 0 replica


def fields(pool):
    """{(layer, "K"|"V"): (region, offset, block, token, head stride)}."""
    name = {reshard.KEY: "K", reshard.VALUE: "V"}
    return {(t.global_layer_id, name[t.component]): (
        t.region_id, t.offset_bytes, t.block_stride_bytes,
        t.token_stride_bytes, t.head_stride_bytes)
        for t in pool.message.tensors}


def regions(pool):
    return [(r.region_id, r.address, r.nbytes) for r in pool.message.regions]


def canonical(binding_msg):
    """Ranges with absolute addresses, sorted: two bindings that address
    the same bytes the same way compare equal whatever their regions."""
    at = {r.region_id: r.address for r in binding_msg.regions}
    return sorted((r.global_layer_id, r.component, r.token_start,
                   r.token_count, r.head_start, r.head_count,
                   at[r.region_id] + r.offset_bytes, r.token_stride_bytes,
                   r.head_stride_bytes) for r in binding_msg.ranges)


# ------------------------------------------------------------- layouts --

def test_vllm_kv_caches():
    nb, bs = 5, 8
    caches = [torch.zeros((2, nb, bs, 2, 8), dtype=BF16) for _ in LAYERS]
    pool = reshard.PoolBuilder.vllm(DESC, PART, caches,
                                    endpoint="r:1").build()
    m = pool.message
    assert (m.participant_id, m.endpoint, m.block_size, m.num_blocks) == \
        ("r-dp0-pp1-tp1", "r:1", bs, nb)
    assert regions(pool) == [("layer2.KV", caches[0].data_ptr(), 2 * nb * bs
                              * 2 * HB), ("layer3.KV", caches[1].data_ptr(),
                                          2 * nb * bs * 2 * HB)]
    block = bs * 2 * HB
    assert fields(pool) == {
        (2, "K"): ("layer2.KV", 0, block, 2 * HB, HB),
        (2, "V"): ("layer2.KV", nb * block, block, 2 * HB, HB),
        (3, "K"): ("layer3.KV", 0, block, 2 * HB, HB),
        (3, "V"): ("layer3.KV", nb * block, block, 2 * HB, HB)}
    # Sorted by (layer, key before value), as the memory id hashes them.
    assert [(t.global_layer_id, t.component) for t in m.tensors] == [
        (2, reshard.KEY), (2, reshard.VALUE), (3, reshard.KEY),
        (3, reshard.VALUE)]
    assert pool.tensor_names == ["layer2.KV", "layer2.KV", "layer3.KV",
                                 "layer3.KV"]
    assert pool.tensors["layer3.KV"][0] is caches[1]
    # A dict by layer id gives the same pool.
    by_dict = reshard.PoolBuilder.vllm(DESC, PART, dict(zip(LAYERS, caches)),
                                       endpoint="r:1").build()
    assert by_dict.message == m


def test_flashinfer_hnd_and_nhd():
    nb, bs = 4, 16
    hnd = [torch.zeros((nb, 2, 2, bs, 8), dtype=BF16) for _ in LAYERS]
    pool = reshard.PoolBuilder.flashinfer(DESC, PART, hnd).build()
    block = 2 * 2 * bs * HB
    assert fields(pool)[(2, "K")] == ("layer2.KV", 0, block, HB, bs * HB)
    assert fields(pool)[(2, "V")] == ("layer2.KV", 2 * bs * HB, block, HB,
                                      bs * HB)
    assert regions(pool)[0] == ("layer2.KV", hnd[0].data_ptr(),
                                hnd[0].numel() * 2)
    nhd = [torch.zeros((nb, 2, bs, 2, 8), dtype=BF16) for _ in LAYERS]
    pool = reshard.PoolBuilder.flashinfer(DESC, PART, nhd,
                                          order="NHD").build()
    assert fields(pool)[(3, "V")] == ("layer3.KV", bs * 2 * HB, block,
                                      2 * HB, HB)


def test_sglang_layer_first():
    pages, page = 6, 4
    size = pages * page
    # MHATokenToKVPoolHost layer_first: [2, layers, size, heads, dim].
    kv = torch.zeros((2, 2, size, 2, 8), dtype=BF16)
    pool = reshard.PoolBuilder.sglang(DESC, PART, kv, page_size=page).build()
    layer = size * 2 * HB
    assert regions(pool) == [("layers.KV", kv.data_ptr(), kv.numel() * 2)]
    assert pool.block_size == page and pool.num_blocks == pages
    assert fields(pool) == {
        (2, "K"): ("layers.KV", 0, page * 2 * HB, 2 * HB, HB),
        (3, "K"): ("layers.KV", layer, page * 2 * HB, 2 * HB, HB),
        (2, "V"): ("layers.KV", 2 * layer, page * 2 * HB, 2 * HB, HB),
        (3, "V"): ("layers.KV", 3 * layer, page * 2 * HB, 2 * HB, HB)}
    # The K and V halves given separately are views of one allocation:
    # one region, the same tensors.
    split = reshard.PoolBuilder.sglang(DESC, PART, k_buffer=kv[0],
                                       v_buffer=kv[1], page_size=page).build()
    assert regions(split) == [("layers.K+layers.V", kv.data_ptr(),
                               kv.numel() * 2)]
    assert {k: v[1:] for k, v in fields(split).items()} == \
        {k: v[1:] for k, v in fields(pool).items()}
    # Two allocations: two regions.
    k, v = torch.zeros_like(kv[0]), torch.zeros_like(kv[1])
    two = reshard.PoolBuilder.sglang(DESC, PART, k_buffer=k, v_buffer=v,
                                     page_size=page).build()
    assert regions(two) == [("layers.K", k.data_ptr(), k.numel() * 2),
                            ("layers.V", v.data_ptr(), v.numel() * 2)]
    assert fields(two)[(3, "V")] == ("layers.V", layer, page * 2 * HB,
                                     2 * HB, HB)


def test_sglang_page_first_layouts():
    pages, page = 5, 4
    size = pages * page
    # page_first: [2, size, layers, heads, dim].
    kv = torch.zeros((2, size, 2, 2, 8), dtype=BF16)
    pool = reshard.PoolBuilder.sglang(DESC, PART, kv, layout="page_first",
                                      page_size=page).build()
    row = 2 * 2 * HB  # one token of every layer
    assert fields(pool) == {
        (2, "K"): ("layers.KV", 0, page * row, row, HB),
        (3, "K"): ("layers.KV", 2 * HB, page * row, row, HB),
        (2, "V"): ("layers.KV", size * row, page * row, row, HB),
        (3, "V"): ("layers.KV", size * row + 2 * HB, page * row, row, HB)}
    # page_first_direct, per K and V: [pages, layers, page, heads, dim];
    # the block size is the page axis, no page_size needed.
    k = torch.zeros((pages, 2, page, 2, 8), dtype=BF16)
    v = torch.zeros_like(k)
    pool = reshard.PoolBuilder.sglang(DESC, PART, k_buffer=k, v_buffer=v,
                                      layout="page_first_direct").build()
    block = 2 * page * 2 * HB
    assert pool.block_size == page and pool.num_blocks == pages
    assert fields(pool) == {
        (2, "K"): ("layers.K", 0, block, 2 * HB, HB),
        (3, "K"): ("layers.K", page * 2 * HB, block, 2 * HB, HB),
        (2, "V"): ("layers.V", 0, block, 2 * HB, HB),
        (3, "V"): ("layers.V", page * 2 * HB, block, 2 * HB, HB)}
    # ... and with K/V inside: [2, pages, layers, page, heads, dim].
    kv = torch.zeros((2, pages, 2, page, 2, 8), dtype=BF16)
    pool = reshard.PoolBuilder.sglang(DESC, PART, kv,
                                      layout="page_first_direct").build()
    assert fields(pool)[(3, "V")] == ("layers.KV", pages * block
                                      + page * 2 * HB, block, 2 * HB, HB)
    # page_head: [2, pages, heads, page, layers, dim] (HND within a page).
    kv = torch.zeros((2, pages, 2, page, 2, 8), dtype=BF16)
    pool = reshard.PoolBuilder.sglang(DESC, PART, kv,
                                      layout="page_head").build()
    assert fields(pool)[(3, "K")] == ("layers.KV", HB, block, 2 * HB,
                                      page * 2 * HB)


def test_mla_latent_pools():
    nb, bs = 3, 16
    four = [torch.zeros((nb, bs, 1, 576), dtype=BF16) for _ in range(2)]
    pool = reshard.PoolBuilder.vllm(MLA, MLA_PART, four).build()
    row = 576 * 2
    assert fields(pool) == {(0, "K"): ("layer0.K", 0, bs * row, row, row),
                            (1, "K"): ("layer1.K", 0, bs * row, row, row)}
    three = [torch.zeros((nb, bs, 576), dtype=BF16) for _ in range(2)]
    pool3 = reshard.PoolBuilder(MLA, MLA_PART)
    for layer, t in enumerate(three):
        pool3.add_mla(t, layer=layer)
    assert {k: v[1:] for k, v in fields(pool3.build()).items()} == \
        {k: v[1:] for k, v in fields(pool).items()}
    # SGLang's MLA host pool, layer first: [layers, size, 1, 576].
    host = torch.zeros((2, nb * bs, 1, 576), dtype=BF16)
    pool = reshard.PoolBuilder.sglang(MLA, MLA_PART, host,
                                      page_size=bs).build()
    assert fields(pool) == {
        (0, "K"): ("layers.K", 0, bs * row, row, row),
        (1, "K"): ("layers.K", nb * bs * row, bs * row, row, row)}


def test_regions_numpy_views_names_and_messages():
    # [layers, 2, blocks, block, heads, dim], one layer per view
    base = np.zeros((2, 2, 4, 8, 2, 8), dtype=np.float16)
    b = reshard.PoolBuilder(DESC, PART)
    for li, layer in enumerate(LAYERS):
        b.add(base[li], axes="KBTHD", layer=layer)
    pool = b.build()
    addr = base.__array_interface__["data"][0]
    assert regions(pool) == [("layer2.KV+layer3.KV", addr, base.nbytes)]
    assert fields(pool)[(3, "V")][:2] == ("layer2.KV+layer3.KV",
                                          base.nbytes // 2 + 4 * 8 * 2 * HB)
    # A named region: tensors naming it share it, spanning their memory.
    a = [np.zeros((2, 4, 8, 2, 8), dtype=np.float16) for _ in LAYERS]
    b = reshard.PoolBuilder(DESC, PART)
    for layer, t in zip(LAYERS, a):
        b.add_vllm(t, layer=layer, region="kv")
    pool = b.build()
    starts = [t.__array_interface__["data"][0] for t in a]
    lo, hi = min(starts), max(starts) + a[0].nbytes
    assert regions(pool) == [("kv", lo, hi - lo)]
    assert sorted(v[1] for k, v in fields(pool).items() if k[1] == "K") == \
        sorted(s - lo for s in starts)
    # A Region message is used as it is, and must hold the tensor.
    t = np.zeros((2, 4, 8, 2, 8), dtype=np.float16)
    addr = t.__array_interface__["data"][0]
    b = reshard.PoolBuilder(DESC, PART)
    b.add_vllm(t, layer=2, region=reshard.Region(
        region_id="mr", address=addr - 64, nbytes=t.nbytes + 64))
    b.add_vllm(np.zeros_like(t), layer=3)
    pool = b.build()
    assert regions(pool)[0] == ("mr", addr - 64, t.nbytes + 64)
    assert fields(pool)[(2, "K")][1] == 64
    b = reshard.PoolBuilder(DESC, PART)
    b.add_vllm(t, layer=2, region=reshard.Region(
        region_id="mr", address=addr, nbytes=t.nbytes - 2))
    b.add_vllm(np.zeros_like(t), layer=3)
    with pytest.raises(reshard.PoolError,
                       match=r"layer2.KV \(layer 2 V\): bytes .* of region "
                             r"mr lie outside"):
        b.build()


# -------------------------------------------------------------- errors --

def vllm_pool(layers=LAYERS, nb=3, bs=16, heads=2, dim=8, dtype=BF16,
              **kw):
    b = reshard.PoolBuilder(DESC, PART, **kw)
    for layer in layers:
        b.add_vllm(torch.zeros((2, nb, bs, heads, dim), dtype=dtype),
                   layer=layer)
    return b


@pytest.mark.parametrize("make, message", [
    (lambda: vllm_pool(layers=[2]),
     r"participant r-dp0-pp1-tp1: layer 3 K is held by no tensor"),
    (lambda: vllm_pool(layers=[2, 3]).add(
        torch.zeros((3, 16, 2, 8), dtype=BF16), axes="BTHD", layer=3,
        component="V", name="extra"),
     r"layer 3 V is held by both layer3.KV and extra"),
    (lambda: vllm_pool(layers=[2, 3, 0]),
     r"layer0.KV: layer 0 is not owned by participant r-dp0-pp1-tp1"),
    (lambda: vllm_pool(dim=16),
     r"layer2.KV: the D axis has 16 elements, K heads have 8"),
    (lambda: vllm_pool(heads=4),
     r"layer2.KV: the H axis has 4 heads, participant r-dp0-pp1-tp1 holds "
     r"2 \(heads \[2, 4\)\)"),
    (lambda: vllm_pool(dtype=torch.float32),
     r"layer2.KV: element size 4, the descriptor's itemsize is 2"),
    (lambda: vllm_pool(block_size=8),
     r"layer2.KV: blocks of 16 tokens \(the T axis\), the pool's "
     r"block_size is 8"),
    (lambda: vllm_pool(layers=[2]).add_vllm(
        torch.zeros((2, 3, 8, 2, 8), dtype=BF16), layer=3),
     r"layer2.KV has blocks of 16 tokens, layer3.KV of 8: a pool has one "
     r"block size"),
    (lambda: vllm_pool(layers=[2]).add_vllm(
        torch.zeros((2, 5, 16, 2, 8), dtype=BF16), layer=3),
     r"layer2.KV holds 3 blocks, layer3.KV 5: pass num_blocks="),
    (lambda: vllm_pool(layers=[2], num_blocks=4).add_vllm(
        torch.zeros((2, 5, 16, 2, 8), dtype=BF16), layer=3),
     r"layer2.KV holds 3 blocks, the pool has 4"),
    (lambda: reshard.PoolBuilder(DESC, PART).add_sglang(
        torch.zeros((2, 2, 32, 2, 8), dtype=BF16)),
     r"layers.KV: a tensor without a B axis needs the builder's "
     r"block_size"),
    (lambda: reshard.PoolBuilder(DESC, PART, block_size=4).add_sglang(
        torch.zeros((2, 3, 32, 2, 8), dtype=BF16)),
     r"layers.KV: the L axis has 3 layers, participant r-dp0-pp1-tp1 "
     r"owns \[2, 3\]"),
    (lambda: reshard.PoolBuilder(MLA, MLA_PART).add(
        torch.zeros((2, 3, 16, 576), dtype=BF16), axes="KBTD", layer=0),
     r"layer0.KV: the K axis has size 2; it needs 2 and a descriptor with "
     r"value_head_dim > 0"),
    (lambda: reshard.PoolBuilder(MLA, MLA_PART).add(
        torch.zeros((3, 16, 576), dtype=BF16), axes="BTD", layer=0,
        component="V"),
     r"layer0.V: component V does not exist"),
    (lambda: reshard.PoolBuilder(DESC, PART).add_vllm(
        torch.zeros((3, 16, 2, 8), dtype=BF16), layer=2),
     r"layer2: a vLLM cache is \[2, num_blocks, block_size, heads, dim\]"),
    (lambda: reshard.PoolBuilder(DESC, PART).add(
        torch.zeros((3, 16, 2, 8), dtype=BF16), axes="BTH", layer=2),
     r"axes 'BTH' must use each of K, L, B, T, H, D at most once and "
     r"include T and D"),
    (lambda: reshard.PoolBuilder(DESC, PART).add(
        torch.zeros((2, 1, 16, 2, 8), dtype=BF16).expand(2, 3, 16, 2, 8),
        axes="KBTHD", layer=2),
     r"layer2.KV: axis B has stride 0 bytes: values would share memory"),
    (lambda: reshard.PoolBuilder(DESC, PART).add(
        torch.zeros((2, 3, 16, 8, 2), dtype=BF16).transpose(3, 4),
        axes="KBTHD", layer=2),
     r"layer2.KV: the D axis is not contiguous"),
    (lambda: reshard.PoolBuilder.vllm(DESC, PART, [torch.zeros(
        (2, 3, 16, 2, 8), dtype=BF16)]),
     r"1 kv_caches for 2 layers \[2, 3\] of participant r-dp0-pp1-tp1 "
     r"\(pass layers=\)"),
])
def test_builder_errors_name_the_tensor_and_layer(make, message):
    with pytest.raises(reshard.PoolError, match=message):
        make().build()


def test_overlapping_tensors_are_refused():
    # The same tensor added for two layers: both start at one byte.
    t = torch.zeros((2, 3, 16, 2, 8), dtype=BF16)
    b = reshard.PoolBuilder(DESC, PART)
    b.add_vllm(t, layer=2).add_vllm(t, layer=3, name="again")
    with pytest.raises(reshard.PoolError,
                       match=r"layer2.KV \(layer 2 K\) and again \(layer 3 "
                             r"K\) start at the same byte"):
        b.build()
    # Strides that do not nest: blocks closer than a block's extent.
    base = torch.zeros(4096, dtype=BF16)
    bad = base.as_strided((2, 3, 16, 2, 8), (2048, 128, 16, 8, 1))
    b = reshard.PoolBuilder(DESC, PART).add(bad, axes="KBTHD", layer=2)
    b.add_vllm(torch.zeros((2, 3, 16, 2, 8), dtype=BF16), layer=3)
    with pytest.raises(reshard.PoolError,
                       match=r"layer2.KV \(layer 2 K\): the block stride 256 "
                             r"is below the 512 bytes of the tokens below "
                             r"it: values would share memory"):
        b.build()


def test_block_tables():
    pool = vllm_pool().build()  # 3 blocks of 16
    assert pool.check_block_table(np.array([2, 0, 1]), 40) == [2, 0, 1]
    assert pool.blocks_needed(33) == 3
    for table, message in [
            ([2, 0], r"block_ids has 2 blocks, tokens \[0, 40\) need 3 of 16 "
                     r"tokens"),
            ([2, 0, 3], r"block_ids\[2\] = 3 is not a block of \[0, 3\)"),
            ([2, -1, 0], r"block_ids\[1\] = -1 is not a block"),
            ([1, 0, 1], r"block 1 appears twice in block_ids \(entries 0 "
                        r"and 2\)"),
            ([0.5, 1, 2], r"block_ids must be integers")]:
        with pytest.raises(reshard.PoolError, match=message):
            pool.check_block_table(table, 40)
    # Entries past the span are checked too (SPEC §1.5a), then unused.
    with pytest.raises(reshard.PoolError, match=r"block_ids\[2\] = 7"):
        pool.binding([0, 1, 7], num_tokens=20)
    assert pool.pooled([1, 0]) == reshard.PooledMemory(
        inline_pool=pool.message, block_ids=[1, 0])
    assert pool.pooled([1, 0], memory_id="sha256:x") == \
        reshard.PooledMemory(memory_id="sha256:x", block_ids=[1, 0])
    assert reshard.pooled_memory("sha256:x", torch.tensor([4, 9])) == \
        reshard.PooledMemory(memory_id="sha256:x", block_ids=[4, 9])
    with pytest.raises(reshard.PoolError, match="block 4 appears twice"):
        reshard.pooled_memory("sha256:x", [4, 4])
    raw = reshard.PooledMemory(memory_id="sha256:x", block_ids=[4, 4])
    assert reshard.pooled_memory(raw) is raw  # sent as it is
    with pytest.raises(ValueError, match="block_ids is given by"):
        reshard.pooled_memory(raw, [1])
    with pytest.raises(ValueError, match="needs block_ids"):
        reshard.pooled_memory("sha256:x")
    with pytest.raises(ValueError, match="names no pool"):
        reshard.pooled_memory(reshard.PooledMemory(block_ids=[1]))


# ----------------------------------------------------------- expansion --

def test_expansion_equals_binding_builder_vllm():
    nb, bs, tokens = 6, 8, 30
    table = [4, 0, 5, 2, 1]  # 4 blocks cover 30 tokens; the 5th is spare
    caches = [torch.zeros((2, nb, bs, 2, 8), dtype=BF16) for _ in LAYERS]
    pool = reshard.PoolBuilder.vllm(DESC, PART, caches).build()
    binding = pool.binding(table, num_tokens=tokens)
    b = reshard.BindingBuilder(DESC, PART, num_tokens=tokens)
    for layer, t in zip(LAYERS, caches):
        b.add_paged(t, layer=layer, block_table=table)
    explicit = b.build()
    assert canonical(binding.message) == canonical(explicit.message)
    assert sorted(regions(pool)) == sorted(
        (r.region_id, r.address, r.nbytes) for r in explicit.message.regions)
    # The pool's regions, in the pool's order; one range per block, layer
    # and component, all heads; the last block clipped to the span.
    msg = binding.message
    assert list(msg.regions) == list(pool.message.regions)
    assert len(msg.ranges) == 4 * 2 * 2
    assert sorted({(r.token_start, r.token_count) for r in msg.ranges}) == \
        [(0, 8), (8, 8), (16, 8), (24, 6)]
    assert all(r.head_start == 2 and r.head_count == 2 for r in msg.ranges)
    assert binding.num_tokens == tokens and binding.range_tensors[0] == \
        "layer2.KV"
    assert reshard.expand_pool(pool, table, num_tokens=tokens) == msg
    assert reshard.expand_pool(pool.message, table, num_tokens=tokens,
                               descriptor=DESC, part=PART) == msg


def test_expansion_equals_binding_builder_hnd_and_mla():
    nb, bs, tokens = 4, 16, 48
    table = [3, 1, 0]
    hnd = [torch.zeros((nb, 2, 2, bs, 8), dtype=BF16) for _ in LAYERS]
    pool = reshard.PoolBuilder.flashinfer(DESC, PART, hnd).build()
    b = reshard.BindingBuilder(DESC, PART, num_tokens=tokens)
    for layer, t in zip(LAYERS, hnd):
        b.add(t, layer=layer, axes="BKHTD", block_table=table)
    expanded = pool.binding(table, num_tokens=tokens).message
    assert canonical(expanded) == canonical(b.build().message)
    assert all(r.head_count == 1 for r in expanded.ranges)  # HND: per head
    mla = [torch.zeros((nb, bs, 576), dtype=BF16) for _ in range(2)]
    pool = reshard.PoolBuilder.vllm(MLA, MLA_PART, mla).build()
    b = reshard.BindingBuilder(MLA, MLA_PART, num_tokens=tokens)
    for layer, t in enumerate(mla):
        b.add_paged(t, layer=layer, block_table=table)
    expanded = pool.binding(table, num_tokens=tokens).message
    assert canonical(expanded) == canonical(b.build().message)
    assert {r.component for r in expanded.ranges} == {reshard.KEY}


def test_expansion_equals_per_layer_views_sglang():
    pages, page, tokens = 5, 4, 18
    table = [3, 0, 4, 1, 2]
    kv = torch.zeros((2, pages, 2, page, 2, 8), dtype=BF16)
    pool = reshard.PoolBuilder.sglang(DESC, PART, kv,
                                      layout="page_first_direct").build()
    b = reshard.BindingBuilder(DESC, PART, num_tokens=tokens)
    for c in (0, 1):
        for li, layer in enumerate(LAYERS):
            b.add(kv[c, :, li], axes="BTHD", layer=layer, component=c + 1,
                  block_table=table)
    assert canonical(pool.binding(table, num_tokens=tokens).message) == \
        canonical(b.build().message)


# ------------------------------------------------------------ executor --

WRITER = reshard.placement(DESC, prefix="w")  # one Part: every layer, head


def layout():
    shard = reshard.StoreShard(layer_ids=[0, 1, 2, 3], head_start=0,
                               head_count=4, key_suffix="0")
    return reshard.StoreLayout(descriptor=DESC, format=reshard.LPHD,
                               shards=[shard])


def values(pages):
    g = torch.Generator().manual_seed(7)
    return {(layer, c): torch.randint(-2 ** 15, 2 ** 15,
                                      (pages * 16, 4, 8), dtype=torch.int16,
                                      generator=g).view(BF16)
            for layer in range(4) for c in (reshard.KEY, reshard.VALUE)}


def reference_copies(lay, binding_msg):
    """The copies a load plan for ``binding_msg`` has (one per token and
    head, uncoalesced): Part bytes by the SPEC §1.3 LPHD formulas."""
    d = lay.descriptor
    P, H, L = d.page_size, 4, 4
    index = {r.region_id: i for i, r in enumerate(binding_msg.regions)}
    cols = {k: [] for k in ("page_index", "part_index", "part_offset",
                            "region_index", "region_offset", "nbytes")}
    for r in binding_msg.ranges:
        k_block = L * P * H * HB
        base = (r.global_layer_id * P * H * HB
                + (k_block if r.component == reshard.VALUE else 0))
        for t in range(r.token_start, r.token_start + r.token_count):
            for h in range(r.head_start, r.head_start + r.head_count):
                cols["page_index"].append(t // P)
                cols["part_index"].append(0)
                cols["part_offset"].append(base + (t % P) * H * HB + h * HB)
                cols["region_index"].append(index[r.region_id])
                cols["region_offset"].append(
                    r.offset_bytes + (t - r.token_start)
                    * r.token_stride_bytes + (h - r.head_start)
                    * r.head_stride_bytes)
                cols["nbytes"].append(HB)
    return reshard.planner_pb2.RangeBatch(bytes=sum(cols["nbytes"]), **cols)


def test_executor_runs_pooled_plans_on_region_buffers():
    pages, nb, bs = 2, 7, 8
    lay = layout()
    vals = values(pages)
    parts = reshard.new_parts(lay, pages)
    for p in range(pages):
        for (layer, c), view in reshard.part_views(lay, parts[p][0],
                                                   0).items():
            view[...] = vals[(layer, c)][p * 16:(p + 1) * 16].view(
                torch.int16).numpy().view(np.uint16)
    table = [6, 2, 0, 5]
    caches = [torch.zeros((2, nb, bs, 2, 8), dtype=BF16) for _ in LAYERS]
    pool = reshard.PoolBuilder.vllm(DESC, PART, caches).build()
    binding = pool.binding(table, num_tokens=pages * 16)
    batch = reference_copies(lay, binding.message)
    keys = ["p0", "p1"]
    resp = reshard.planner_pb2.PlanLoadResponse(
        hit_pages=pages, pages=[reshard.planner_pb2.PageSource(page_key=k)
                                for k in keys],
        region_ids=[r.region_id for r in pool.message.regions],
        batches=[batch])
    plan = reshard.LoadPlan(resp)
    # The executor needs only each region's bytes: the pool itself, or
    # its host buffers by region id.
    assert reshard.execute(plan, parts, pool) == batch.bytes
    for li, layer in enumerate(LAYERS):
        for c in (reshard.KEY, reshard.VALUE):
            tok = torch.arange(pages * 16)
            held = caches[li][c - 1][torch.tensor(table)[tok // bs],
                                     tok % bs]
            assert torch.equal(held.view(torch.int16),
                               vals[(layer, c)][:, 2:4].view(torch.int16))
    unused = [b for b in range(nb) if b not in table]
    assert not any(caches[li][:, unused].view(torch.int16).any()
                   for li in range(2))
    again = [torch.zeros_like(t) for t in caches]
    pool2 = reshard.PoolBuilder.vllm(DESC, PART, again).build()
    assert pool2.message.regions[0].region_id == plan.region_ids[0]
    reshard.execute(plan, dict(zip(keys, parts)), pool2.host_regions())
    assert all(torch.equal(a.view(torch.int16), b.view(torch.int16))
               for a, b in zip(caches, again))
    # A store plan (the same copies, region -> Part) from the pool.
    store = reshard.StorePlan(reshard.planner_pb2.PlanStoreResponse(
        part_indexes=[0], region_ids=resp.region_ids, batches=[batch]),
        pages)
    out = reshard.new_parts(lay, pages)
    assert reshard.execute(store, out, pool) == batch.bytes
    for p in range(pages):
        got = reshard.part_views(lay, out[p][0], 0)
        want = reshard.part_views(lay, parts[p][0], 0)
        for key in got:
            if key[0] in LAYERS:
                assert np.array_equal(got[key][:, 2:4], want[key][:, 2:4])
                assert not got[key][:, :2].any()
            else:
                assert not got[key].any()


# ------------------------------------------------------------- requests --

def test_plan_requests_carry_pooled_memory():
    pool = vllm_pool().build()  # 3 blocks of 16
    call = _calls.plan_load("dom", ["a", "b"], None, None, "sha256:p", None,
                            None, (), "", False, "sha256:m", [2, 0])
    req = call.request
    assert not req.HasField("binding")
    assert req.pooled == reshard.PooledMemory(memory_id="sha256:m",
                                              block_ids=[2, 0])
    call = _calls.plan_load("dom", ["a", "b"], None, READER, None, None,
                            None, (), "", False, pool, [2, 0])
    assert call.request.pooled.inline_pool == pool.message
    # The span is known (inline placement or the Pool's descriptor):
    # 2 pages of 16 need 2 blocks of 16.
    with pytest.raises(reshard.PoolError, match="block_ids has 1 blocks"):
        _calls.plan_load("dom", ["a", "b"], None, None, "sha256:p", None,
                         None, (), "", False, pool, [2])
    with pytest.raises(reshard.PoolError, match="is not a block of"):
        _calls.plan_store("key", None, 2, READER, None, None, None, False,
                          "", pool.message, [0, 3])
    call = _calls.plan_store("key", None, 2, None, "sha256:p", 0, None, True,
                             "op", "sha256:m", np.array([1, 2]))
    assert call.request.pooled.block_ids == [1, 2] and \
        call.request.dp_rank.value == 0 and \
        not call.request.HasField("binding")
    binding = pool.binding([0, 1], num_tokens=32)
    for binding_arg, pooled, ids, message in [
            (binding, "sha256:m", [0, 1], "exactly one of binding and "
                                          "pooled"),
            (None, None, None, "exactly one of binding and pooled"),
            (binding, None, [0, 1], "block_ids goes with pooled")]:
        with pytest.raises(ValueError, match=message):
            _calls.plan_load("dom", ["a", "b"], binding_arg, None, "p", None,
                             None, (), "", False, pooled, ids)
    call = _calls.register_memory(pool, None, "sha256:p")
    assert call.request == reshard.planner_pb2.RegisterMemoryRequest(
        pool=pool.message, placement_id="sha256:p")
    assert call.idempotent
    assert call.finish(reshard.planner_pb2.RegisterMemoryResponse(
        memory_id="sha256:m", created=True)) == ("sha256:m", True)
    call = _calls.register_memory(pool.message, READER, None)
    assert call.request.placement == READER
    with pytest.raises(ValueError, match="exactly one of placement"):
        _calls.register_memory(pool, READER, "sha256:p")
    call = _calls.forget_memory("sha256:m")
    assert not call.idempotent and call.request.memory_id == "sha256:m"
    assert call.finish(reshard.planner_pb2.ForgetMemoryResponse(
        removed=True)) is True


class FakePlanner:
    """An in-process Planner answering RegisterMemory, ForgetMemory and
    PlanLoad/PlanStore (empty plans), recording the requests."""

    def __init__(self):
        pb = reshard.planner_pb2
        self.requests = []
        self.known = set()

        def register(req, ctx):
            self.requests.append(req)
            mid = "sha256:%064d" % len(req.pool.tensors)
            created = mid not in self.known
            self.known.add(mid)
            return pb.RegisterMemoryResponse(memory_id=mid, created=created)

        def forget(req, ctx):
            self.requests.append(req)
            removed = req.memory_id in self.known
            self.known.discard(req.memory_id)
            return pb.ForgetMemoryResponse(removed=removed)

        def plan_load(req, ctx):
            self.requests.append(req)
            return pb.PlanLoadResponse(placement_id="sha256:p")

        def plan_store(req, ctx):
            self.requests.append(req)
            return pb.PlanStoreResponse()

        def unary(fn, req_type, resp_type):
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=req_type.FromString,
                response_serializer=resp_type.SerializeToString)

        handler = grpc.method_handlers_generic_handler("reshard.v1.Planner", {
            "RegisterMemory": unary(register, pb.RegisterMemoryRequest,
                                    pb.RegisterMemoryResponse),
            "ForgetMemory": unary(forget, pb.ForgetMemoryRequest,
                                  pb.ForgetMemoryResponse),
            "PlanLoad": unary(plan_load, pb.PlanLoadRequest,
                              pb.PlanLoadResponse),
            "PlanStore": unary(plan_store, pb.PlanStoreRequest,
                               pb.PlanStoreResponse)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def target(self):
        return "127.0.0.1:%d" % self.port


@pytest.fixture
def fake():
    f = FakePlanner()
    yield f
    f.server.stop(None)


def test_client_pool_calls(fake):
    pool = vllm_pool().build()
    with reshard.Client(fake.target, timeout=10) as c:
        mid, created = c.register_memory(pool, placement_id="sha256:p")
        assert created and mid.startswith("sha256:")
        assert c.register_memory(pool.message, placement=READER) == (mid,
                                                                     False)
        plan = c.plan_load(model_domain="dom", page_keys=["a", "b"],
                           placement_id="sha256:p", pooled=mid,
                           block_ids=[2, 1], runs=True)
        assert plan.placement_id == "sha256:p"
        c.plan_store(manifest_key="key", page_count=1, placement=READER,
                     pooled=pool.pooled([0]))
        assert c.forget_memory(mid) is True
        assert c.forget_memory(mid) is False
        with pytest.raises(ValueError, match="exactly one of binding"):
            c.plan_load(model_domain="dom", page_keys=["a"],
                        placement_id="p")
    reg, reg2, load, store, forget, forget2 = fake.requests
    assert reg.pool == pool.message and reg.placement_id == "sha256:p"
    assert reg2.placement == READER
    assert load.pooled == reshard.PooledMemory(memory_id=mid,
                                               block_ids=[2, 1])
    assert load.runs and not load.HasField("binding")
    assert store.pooled.inline_pool == pool.message and \
        list(store.pooled.block_ids) == [0]
    assert forget.memory_id == mid


def test_aio_client_pool_calls(fake):
    pool = vllm_pool().build()

    async def main():
        async with reshard.aio.Client(fake.target, timeout=10) as c:
            mid, created = await c.register_memory(pool,
                                                   placement_id="sha256:p")
            again = await c.register_memory(pool, placement_id="sha256:p")
            plan = await c.plan_load(model_domain="dom", page_keys=["a"],
                                     placement_id="sha256:p", pooled=mid,
                                     block_ids=[1])
            await c.plan_store(manifest_key="key", page_count=1,
                               placement_id="sha256:p", pooled=mid,
                               block_ids=[0])
            removed = await c.forget_memory(mid)
            return mid, created, again, plan, removed

    mid, created, again, plan, removed = asyncio.run(main())
    assert created and again == (mid, False) and removed
    assert plan.placement_id == "sha256:p"
    assert fake.requests[2].pooled.memory_id == mid
    assert fake.requests[3].pooled.block_ids == [0]
