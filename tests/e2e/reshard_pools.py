"""Memory pools of the end-to-end tests (SPEC §1.5a), built from the
generated messages like every other e2e request (no dependency on the
``reshard`` client package):

* ``vllm_pool`` / ``flashinfer_pool`` / ``mla_pool`` lay out one
  participant's pool the way those engines do (a region per layer);
* ``expand`` gives the explicit ``RuntimeBinding`` a pool and a block table
  stand for (one range per block, layer and component; per head too where
  the heads of a token are not one row), as an ``e.Binding`` whose region
  sizes the SPEC §2.4 oracle executes into — a plan for it equals the
  pooled plan byte for byte;
* ``memory_id`` recomputes SPEC §1.5a's identity of a pool;
* ``World`` is a published writer with registered pages and a registered
  reader placement, the setting every pooled test plans in.
"""

import hashlib
import json
import random

import reshard_e2e as e
from reshard_e2e import KEY, VALUE, pb

# 4 layers, 4 KV heads, K and V of 8 dims, pages of 8 tokens, bf16.
DESC = e.make_descriptor(4, 4, 8, 8, 8)
# The same with a single latent tensor (MLA: no V).
MLA_DESC = e.make_descriptor(4, 1, 16, 0, 8)
PAGES = 3


def memory_id(pool, placement_id):
    """SPEC §1.5a: "sha256:" + digest of the canonical pool document."""
    name = {KEY: "key", VALUE: "value"}
    doc = {
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
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def head_bytes(desc, component):
    dim = desc.key_head_dim if component == KEY else desc.value_head_dim
    return dim * desc.itemsize


def _pool(part, regions, tensors, block, num_blocks, endpoint):
    return pb.MemoryPool(participant_id=part.participant_id,
                         endpoint=endpoint, regions=regions,
                         block_size=block, num_blocks=num_blocks,
                         tensors=tensors)


def vllm_pool(desc, part, block, num_blocks, endpoint="e2e-pool:1",
              address=0x20000000):
    """vLLM: per layer one tensor [2, num_blocks, block, heads, dim] (K
    then V; [num_blocks, block, dim] for MLA), each its own region."""
    hn = part.head_count
    regions, tensors = [], []
    for layer in sorted(part.layer_ids):
        rid = "%s/L%d" % (part.participant_id, layer)
        offset = 0
        for comp, hb in e.component_widths(desc):
            tensors.append(pb.PoolTensor(
                global_layer_id=layer, component=comp, region_id=rid,
                offset_bytes=offset, block_stride_bytes=block * hn * hb,
                token_stride_bytes=hn * hb, head_stride_bytes=hb))
            offset += num_blocks * block * hn * hb
        nbytes = offset + 64  # a tail nothing may write
        regions.append(pb.Region(region_id=rid, address=address,
                                 nbytes=nbytes))
        address = e._round_up(address + nbytes + 4096, 1 << 20)
    return _pool(part, regions, tensors, block, num_blocks, endpoint)


def flashinfer_pool(desc, part, block, num_blocks, endpoint="e2e-pool:1",
                    address=0x40000000):
    """FlashInfer HND: per layer [num_blocks, 2, heads, block, dim], K and
    V interleaved in every block (their spans overlap; their per-block
    arcs do not)."""
    hn = part.head_count
    hb = head_bytes(desc, KEY)
    assert hb == head_bytes(desc, VALUE)
    regions, tensors = [], []
    for layer in sorted(part.layer_ids):
        rid = "%s/L%d" % (part.participant_id, layer)
        for i, comp in enumerate((KEY, VALUE)):
            tensors.append(pb.PoolTensor(
                global_layer_id=layer, component=comp, region_id=rid,
                offset_bytes=i * hn * block * hb,
                block_stride_bytes=2 * hn * block * hb,
                token_stride_bytes=hb, head_stride_bytes=block * hb))
        nbytes = num_blocks * 2 * hn * block * hb
        regions.append(pb.Region(region_id=rid, address=address,
                                 nbytes=nbytes))
        address = e._round_up(address + nbytes + 4096, 1 << 20)
    return _pool(part, regions, tensors, block, num_blocks, endpoint)


def page_first_pool(desc, part, block, num_blocks, endpoint="e2e-pool:1",
                    address=0x60000000):
    """SGLang page-first: one region [num_blocks, layers, 2, block, heads,
    dim], every tensor interleaved with all the others in each block."""
    layers = sorted(part.layer_ids)
    hn = part.head_count
    widths = e.component_widths(desc)
    per_block = sum(len(layers) * block * hn * hb for _, hb in widths)
    rid = "%s/pages" % part.participant_id
    tensors, offset = [], 0
    for layer in layers:
        for comp, hb in widths:
            tensors.append(pb.PoolTensor(
                global_layer_id=layer, component=comp, region_id=rid,
                offset_bytes=offset, block_stride_bytes=per_block,
                token_stride_bytes=hn * hb, head_stride_bytes=hb))
            offset += block * hn * hb
    regions = [pb.Region(region_id=rid, address=address,
                         nbytes=num_blocks * per_block)]
    return _pool(part, regions, tensors, block, num_blocks, endpoint)


def expand(pool, desc, part, block_ids, num_tokens):
    """The explicit binding ``pool`` and ``block_ids`` stand for over tokens
    [0, num_tokens), with the pool's regions in the pool's order."""
    bs = pool.block_size
    needed = -(-num_tokens // bs)
    h0, hn = part.head_start, part.head_count
    ranges = []
    for t in pool.tensors:
        hb = head_bytes(desc, t.component)
        ts, hs = t.token_stride_bytes, t.head_stride_bytes
        per_head = hn > 1 and ts < (hn - 1) * hs + hb
        for j in range(needed):
            t0 = j * bs
            count = min(bs, num_tokens - t0)
            off = t.offset_bytes + block_ids[j] * t.block_stride_bytes
            common = dict(global_layer_id=t.global_layer_id,
                          component=t.component, token_start=t0,
                          token_count=count, region_id=t.region_id,
                          token_stride_bytes=ts)
            if per_head:
                ranges.extend(pb.BindingRange(
                    head_start=h0 + k, head_count=1, offset_bytes=off + k * hs,
                    head_stride_bytes=hb, **common) for k in range(hn))
            else:
                ranges.append(pb.BindingRange(
                    head_start=h0, head_count=hn, offset_bytes=off,
                    head_stride_bytes=hs if hn > 1 else hb, **common))
    message = pb.RuntimeBinding(participant_id=pool.participant_id,
                                endpoint=pool.endpoint,
                                regions=list(pool.regions), ranges=ranges)
    return e.Binding(message, {r.region_id: r.nbytes for r in pool.regions})


def scattered(num_blocks, seed):
    """Every block of the pool in a random order: the span's blocks
    scattered, the entries past the span validated and unused."""
    table = list(range(num_blocks))
    random.Random(seed).shuffle(table)
    return table


class World:
    """A writer's manifest with ``pages`` registered pages, and a reader
    placement registered with RegisterPlacement. ``load(pooled=...)`` or
    ``load(binding=...)`` is the reader's PlanLoad by placement id."""

    def __init__(self, planner, tag, desc=DESC, writer=(1, 1, 2),
                 reader=(1, 2, 2), fmt=pb.LPHD, pages=PAGES):
        self.planner = planner
        self.desc = desc
        self.fleet = e.Fleet(planner)
        self.writer = e.make_placement(desc, *writer, prefix=tag + "-w")
        self.reader = e.make_placement(desc, *reader, prefix=tag + "-r")
        self.pub, self.up = self.fleet.publish_writer(self.writer, fmt,
                                                      model_id=tag)
        self.keys = ["%s-%d" % (tag, i) for i in range(pages)]
        self.fleet.register(self.pub.manifest_key, self.keys)
        self.reader_id = self.register_placement(self.reader)
        self.tokens = pages * desc.page_size

    def register_placement(self, placement):
        pid = self.planner.RegisterPlacement(pb.RegisterPlacementRequest(
            placement=placement), timeout=30).placement_id
        assert pid == e.canonical_placement_id(placement), pid
        return pid

    def register(self, pool, placement_id=None, planner=None):
        """RegisterMemory by placement id; returns the response."""
        return (planner or self.planner).RegisterMemory(
            pb.RegisterMemoryRequest(
                pool=pool, placement_id=placement_id or self.reader_id),
            timeout=30)

    def load_request(self, pooled=None, binding=None, runs=False):
        req = pb.PlanLoadRequest(model_domain=self.pub.model_domain,
                                 page_keys=self.keys,
                                 placement_id=self.reader_id,
                                 operation_id="e2e-memory", runs=runs)
        if pooled is not None:
            req.pooled.CopyFrom(pooled)
        if binding is not None:
            req.binding.CopyFrom(binding.message)
        return req

    def load(self, planner=None, **kwargs):
        return (planner or self.planner).PlanLoad(self.load_request(**kwargs),
                                                  timeout=60)

    def check(self, resp, part, binding):
        """The SPEC §2.4 oracle on a reader plan: every value lands where
        the binding says, and nothing else is written."""
        return e.verify_plan(resp, self.fleet.store, self.desc, binding,
                             self.keys)


def pooled(memory_id=None, block_ids=(), inline_pool=None):
    msg = pb.PooledMemory(block_ids=list(block_ids))
    if memory_id is not None:
        msg.memory_id = memory_id
    if inline_pool is not None:
        msg.inline_pool.CopyFrom(inline_pool)
    return msg
