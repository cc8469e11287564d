"""BindingBuilder without a daemon: the ranges it builds from numpy and
torch tensors, and the errors that name the tensor at fault."""

import numpy as np
import pytest
import torch

import reshard

DESC = reshard.descriptor([0, 1, 2, 3], dtype="bf16", itemsize=2,
                          page_size=16, total_kv_heads=4, key_head_dim=8,
                          value_head_dim=8)
READER = reshard.placement(DESC, tp=2, pp=2, prefix="r")
PART = reshard.find_part(READER, "r-dp0-pp1-tp1")  # layers 2, 3; heads 2, 3


def builder(tokens=32):
    return reshard.BindingBuilder(DESC, PART, num_tokens=tokens)


def full_paged(b, skip=None, table=(2, 0), **kw):
    for layer in PART.layer_ids:
        if layer != skip:
            b.add_paged(torch.zeros((2, 3, 16, 2, 8), dtype=torch.bfloat16),
                        layer=layer, block_table=list(table), **kw)
    return b


def test_vllm_paged_ranges():
    pool = torch.zeros((2, 3, 16, 2, 8), dtype=torch.bfloat16)
    b = builder()
    b.add_paged(pool, layer=2, block_table=[2, 0])
    b.add_paged(torch.zeros_like(pool), layer=3, block_table=[1, 2])
    binding = b.build()
    msg = binding.message
    assert msg.participant_id == "r-dp0-pp1-tp1"
    assert sorted(r.region_id for r in msg.regions) == ["layer2.KV",
                                                        "layer3.KV"]
    region = {r.region_id: r for r in msg.regions}["layer2.KV"]
    assert region.address == pool.data_ptr()
    assert region.nbytes == pool.numel() * 2
    ranges = [r for r in msg.ranges if r.global_layer_id == 2]
    # Two blocks × K and V, all heads in one range (NHD rows).
    assert len(ranges) == 4
    block = 16 * 2 * 8 * 2
    k = [(r.token_start, r.token_count, r.offset_bytes)
         for r in ranges if r.component == reshard.KEY]
    v = [(r.token_start, r.token_count, r.offset_bytes)
         for r in ranges if r.component == reshard.VALUE]
    assert k == [(0, 16, 2 * block), (16, 16, 0)]
    assert v == [(0, 16, 3 * block + 2 * block), (16, 16, 3 * block)]
    assert all(r.head_start == 2 and r.head_count == 2
               and r.token_stride_bytes == 32 and r.head_stride_bytes == 16
               for r in ranges)
    assert binding.range_tensors[0] in ("layer2.KV", "layer3.KV")


def test_numpy_contiguous_and_partial_blocks():
    b = builder(tokens=20)
    for layer in PART.layer_ids:
        for c in ("K", "V"):
            b.add_contiguous(np.zeros((24, 2, 8), dtype=np.float16),
                             layer=layer, component=c)
    msg = b.build().message
    assert len(msg.ranges) == 4
    assert all(r.token_count == 20 for r in msg.ranges)
    # Paged with a block larger than the span: the last block is cut.
    b = builder(tokens=20)
    full_paged(b, table=(1, 0))
    counts = sorted({(r.token_start, r.token_count)
                     for r in b.build().message.ranges})
    assert counts == [(0, 16), (16, 4)]


def test_hnd_gives_one_range_per_head():
    b = builder()
    for layer in PART.layer_ids:
        b.add_paged(torch.zeros((2, 4, 2, 16, 8), dtype=torch.bfloat16),
                    layer=layer, block_table=[3, 1], order="HND")
    msg = b.build().message
    assert len(msg.ranges) == 2 * 2 * 2 * 2  # layers × K/V × blocks × heads
    assert all(r.head_count == 1 and r.token_stride_bytes == 16
               for r in msg.ranges)
    heads = sorted({(r.head_start, r.offset_bytes % (2 * 16 * 8 * 2))
                    for r in msg.ranges})
    assert heads == [(2, 0), (3, 16 * 8 * 2)]


def test_views_of_one_allocation_share_a_region():
    # FlashInfer's [blocks, 2, heads, block, dim]: K and V interleave.
    pool = torch.zeros((3, 2, 2, 16, 8), dtype=torch.bfloat16)
    b = builder()
    b.add(pool[:, 0], layer=2, axes="BHTD", component="K",
          block_table=[0, 2], name="k2")
    b.add(pool[:, 1], layer=2, axes="BHTD", component="V",
          block_table=[0, 2], name="v2")
    b.add(torch.zeros((3, 2, 2, 16, 8), dtype=torch.bfloat16), layer=3,
          axes="BKHTD", block_table=[1, 0])
    msg = b.build().message
    ids = sorted(r.region_id for r in msg.regions)
    assert ids == ["k2+v2", "layer3.KV"]
    shared = {r.region_id: r for r in msg.regions}["k2+v2"]
    assert shared.address == pool.data_ptr()
    assert shared.nbytes == pool.numel() * 2
    v = [r for r in msg.ranges
         if r.global_layer_id == 2 and r.component == reshard.VALUE]
    assert min(r.offset_bytes for r in v) == 2 * 16 * 8 * 2


def test_mla_latent():
    desc = reshard.descriptor(2, dtype="bf16", itemsize=2, page_size=16,
                              total_kv_heads=1, key_head_dim=36,
                              value_head_dim=0)
    reader = reshard.placement(desc, tp=2)
    b = reshard.BindingBuilder(desc, reader.parts[1], num_tokens=16)
    for layer in (0, 1):
        b.add_paged(torch.zeros((4, 8, 36), dtype=torch.bfloat16),
                    layer=layer, block_table=[3, 0])
    msg = b.build().message
    assert len(msg.ranges) == 4
    assert all(r.component == reshard.KEY and r.head_count == 1
               and r.head_stride_bytes == 72 for r in msg.ranges)
    with pytest.raises(reshard.BindingError, match="value_head_dim is 0"):
        b.add_contiguous(torch.zeros((16, 36), dtype=torch.bfloat16),
                         layer=0, component="V", name="latent-v")


@pytest.mark.parametrize("mutate, message", [
    (lambda b: b.add_contiguous(np.zeros((32, 2, 8), np.float32), layer=2,
                                component="K", name="wide"),
     "wide: element size 4, the descriptor's itemsize is 2"),
    (lambda b: b.add_contiguous(np.zeros((32, 2, 8), np.float16), layer=0,
                                component="K", name="other"),
     "other: layer 0 is not owned by participant r-dp0-pp1-tp1"),
    (lambda b: b.add_contiguous(np.zeros((32, 2, 4), np.float16), layer=2,
                                component="K", name="narrow"),
     "narrow: the D axis has 4 elements, K heads have 8"),
    (lambda b: b.add_contiguous(np.zeros((32, 3, 8), np.float16), layer=2,
                                component="K", name="heads"),
     r"heads: heads \[2, 5\) lie outside the participant's heads \[2, 4\)"),
    (lambda b: b.add_contiguous(np.zeros((32, 8, 2), np.float16)
                                .transpose(0, 2, 1), layer=2,
                                component="K", name="strided"),
     "strided: the D axis is not contiguous"),
    (lambda b: b.add_paged(torch.zeros((2, 3, 16, 2, 8)), layer=2,
                           block_table=[1, 1], name="dup"),
     "dup: element size 4"),
    (lambda b: b.add_paged(torch.zeros((2, 3, 16, 2, 8),
                                       dtype=torch.bfloat16),
                           layer=2, block_table=[1, 1], name="dup"),
     "dup: block 1 appears twice in block_table"),
    (lambda b: b.add_paged(torch.zeros((2, 3, 16, 2, 8),
                                       dtype=torch.bfloat16),
                           layer=2, block_table=[0, 3], name="far"),
     r"far: block_table\[1\] = 3 is not a block of \[0, 3\)"),
    (lambda b: b.add_paged(torch.zeros((2, 3, 16, 2, 8),
                                       dtype=torch.bfloat16),
                           layer=2, block_table=[0], name="short"),
     "short: block_table has 1 blocks"),
    (lambda b: b.add(torch.zeros((16, 2, 8), dtype=torch.bfloat16).expand(
        2, 16, 2, 8), layer=2, axes="KTHD", name="bcast"),
     "bcast: axis K has stride 0 bytes"),
    (lambda b: b.add_contiguous(np.zeros(32 * 2 * 8 + 1, np.float16).view(
        np.uint8)[1:-1].view(np.float16).reshape(32, 2, 8), layer=2,
        component="K", name="odd"),
     "odd: address 0x[0-9a-f]+ is not a multiple of the element size 2"),
    (lambda b: b.add(np.zeros((16, 2, 8), np.float16), layer=2, axes="TXD"),
     "must use each of K, B, T, H, D"),
])
def test_errors_name_the_tensor(mutate, message):
    with pytest.raises(reshard.BindingError, match=message):
        mutate(builder())


def test_coverage_is_checked_at_build():
    b = full_paged(builder(), skip=3)
    with pytest.raises(reshard.BindingError,
                       match="layer 3 K token 0 head 2 is bound by no "
                             "tensor"):
        b.build()
    b = full_paged(builder())
    b.add_contiguous(torch.zeros((32, 1, 8), dtype=torch.bfloat16), layer=2,
                     component="V", head_start=3, name="again")
    with pytest.raises(reshard.BindingError,
                       match="again: layer 2 V token 0 head 3 is already "
                             "bound by layer2.KV"):
        b.build()
    # A hole in the middle of the span.
    b = full_paged(builder(), skip=2)
    for c in ("K", "V"):
        b.add_contiguous(torch.zeros((16, 2, 8), dtype=torch.bfloat16),
                         layer=2, component=c, name="first" + c)
        b.add_contiguous(torch.zeros((16, 2, 8), dtype=torch.bfloat16),
                         layer=2, component=c, token_start=20,
                         name="second" + c)
    with pytest.raises(reshard.BindingError,
                       match="layer 2 K token 16 head 2 is bound by no"):
        b.build()
    # Heads split over two tensors tile the interval.
    b = full_paged(builder(), skip=2)
    for h in (2, 3):
        for c in ("K", "V"):
            b.add_contiguous(torch.zeros((32, 1, 8), dtype=torch.bfloat16),
                             layer=2, component=c, head_start=h,
                             name="h%d%s" % (h, c))
    assert len(b.build().message.regions) == 5
