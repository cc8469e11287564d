"""The pooled reader of SPEC §6 as gRPC requests.

Beside the paged binding of tests/e2e/reshard_scenarios.py, each SPEC §6
scenario has a pooled reader: the reader participant's blocks as a
registered MemoryPool (SPEC §1.5a) and a block table of scattered block
ids. The pool is laid out as bench/scenario.c lays it out for
reshard-bench and reshard-roundtrip: one region per layer of twice the
blocks the request needs,

* vLLM's ``[2, blocks, block, heads, dim]`` per layer (NHD: S1, S2, S5);
* FlashInfer's HND ``[blocks, 2, heads, block, dim]``, K and V interleaved
  per block (S3);
* an MLA latent cache ``[blocks, block, 1, 576]``, K only (S4).

A client registers the reader's placement (RegisterPlacement) and the pool
against it (RegisterMemory), then sends PlanLoads that name both by id and
carry the block table: a few bytes per block instead of one binding range
per block, layer and component. The ids are computed here (SPEC §1.6,
§1.5a), so request files can name them before any daemon answered.

Used by deploy/ghz/generate.py (ghz request data) and scripts/load.py
(``--pooled``), so both send the same bytes.
"""

import random

import reshard_e2e as e
from reshard_e2e import pb

COMPONENT_NAMES = {e.KEY: "key", e.VALUE: "value"}


def memory_id(pool, placement_id):
    """SPEC §1.5a's memory id of ``pool`` registered against
    ``placement_id``."""
    return "sha256:" + e.digest({
        "schema": "kv-cache-memory-pool", "placement_id": placement_id,
        "participant_id": pool.participant_id, "endpoint": pool.endpoint,
        "block_size": pool.block_size, "num_blocks": pool.num_blocks,
        "regions": [{"address": r.address, "nbytes": r.nbytes,
                     "region_id": r.region_id}
                    for r in sorted(pool.regions, key=lambda r: r.region_id)],
        "tensors": [{"block_stride_bytes": t.block_stride_bytes,
                     "component": COMPONENT_NAMES[t.component],
                     "global_layer_id": t.global_layer_id,
                     "head_stride_bytes": t.head_stride_bytes,
                     "offset_bytes": t.offset_bytes, "region_id": t.region_id,
                     "token_stride_bytes": t.token_stride_bytes}
                    for t in sorted(pool.tensors, key=lambda t: (
                        t.global_layer_id, t.component))]})


def make_pool(desc, part, block, order, span, endpoint):
    """A MemoryPool of ``block``-token blocks for ``part`` laid out as the
    module docstring says (``order`` "HND": FlashInfer, else vLLM or, for
    MLA, K only), twice the blocks a span of ``span`` tokens needs, and
    that number of blocks."""
    needed = -(-span // block)
    num_blocks = 2 * needed
    heads = part.head_count
    widths = e.component_widths(desc)  # [(component, head bytes)]
    slot = max(hb for _, hb in widths)
    component_block = block * heads * slot
    layer_bytes = num_blocks * len(widths) * component_block
    regions, tensors = [], []
    address = 1 << 32  # one allocation per layer, 1 MiB apart
    for layer in sorted(part.layer_ids):
        rid = "L%d" % layer
        regions.append(pb.Region(region_id=rid, address=address,
                                 nbytes=layer_bytes))
        address += e._round_up(layer_bytes + (1 << 20), 1 << 20)
        for c, (comp, _) in enumerate(widths):
            if order == "HND":  # FlashInfer [blocks, 2, heads, block, dim]
                strides = dict(offset_bytes=c * component_block,
                               block_stride_bytes=len(widths)
                               * component_block,
                               token_stride_bytes=slot,
                               head_stride_bytes=block * slot)
            else:  # vLLM [2, blocks, block, heads, dim]; MLA without the 2
                strides = dict(offset_bytes=c * num_blocks * component_block,
                               block_stride_bytes=component_block,
                               token_stride_bytes=heads * slot,
                               head_stride_bytes=slot)
            tensors.append(pb.PoolTensor(global_layer_id=layer,
                                         component=comp, region_id=rid,
                                         **strides))
    pool = pb.MemoryPool(
        participant_id=part.participant_id, endpoint=endpoint,
        regions=regions, block_size=block, num_blocks=num_blocks,
        tensors=tensors)
    return pool, needed


def build_pool(req, endpoint=None):
    """The MemoryPool of scenario requests ``req``'s reader participant
    (see the module docstring) and the blocks its span needs."""
    spec = req.spec
    return make_pool(req.descriptor, req.participant, spec.block, spec.order,
                     req.pages * req.descriptor.page_size,
                     endpoint or "%s-reader-memory" % spec.name)


def expand(pool, desc, part, block_ids, span):
    """The explicit RuntimeBinding SPEC §1.5 writes for ``pool`` and
    ``block_ids`` over tokens ``[0, span)``: per tensor one range per block
    (per head too where a head's tokens are not one row, as in HND). The
    daemon must plan it exactly as the pooled request."""
    widths = dict(e.component_widths(desc))
    heads = part.head_count
    ranges = []
    blocks = -(-span // pool.block_size)
    for t in pool.tensors:
        hb = widths[t.component]
        hs = t.head_stride_bytes if heads > 1 else hb
        row = (heads - 1) * hs + hb
        ts = t.token_stride_bytes if pool.block_size > 1 else row
        per_head = ts < row
        for i in range(blocks):
            start = i * pool.block_size
            count = min(pool.block_size, span - start)
            for h in range(heads if per_head else 1):
                ranges.append(pb.BindingRange(
                    global_layer_id=t.global_layer_id, component=t.component,
                    token_start=start, token_count=count,
                    head_start=part.head_start + h,
                    head_count=1 if per_head else heads,
                    region_id=t.region_id,
                    offset_bytes=(t.offset_bytes
                                  + block_ids[i] * t.block_stride_bytes
                                  + h * hs),
                    token_stride_bytes=ts,
                    head_stride_bytes=hb if per_head else hs))
    return pb.RuntimeBinding(participant_id=pool.participant_id,
                             endpoint=pool.endpoint, regions=pool.regions,
                             ranges=ranges)


class PooledRequests:
    """The pooled reader's messages for scenario requests ``req``
    (tests/e2e/reshard_scenarios.py): RegisterPlacement, RegisterMemory,
    and the pooled PlanLoad without and with runs."""

    def __init__(self, req, seed=7):
        self.req = req
        self.name = req.name
        self.pages = req.pages
        self.pool, needed = build_pool(req)
        ids = list(range(self.pool.num_blocks))
        random.Random(seed).shuffle(ids)
        self.block_ids = ids[:needed]
        self.placement_id = e.canonical_placement_id(req.reader)
        self.memory_id = memory_id(self.pool, self.placement_id)
        self.register_placement = pb.RegisterPlacementRequest(
            placement=req.reader)
        self.register_memory = pb.RegisterMemoryRequest(
            pool=self.pool, placement_id=self.placement_id)
        self.plan_load = pb.PlanLoadRequest(
            model_domain=req.model_domain, page_keys=req.page_keys,
            placement_id=self.placement_id,
            pooled=pb.PooledMemory(memory_id=self.memory_id,
                                   block_ids=self.block_ids),
            operation_id="%s-load-pooled" % req.name)
        self.plan_load_runs = pb.PlanLoadRequest()
        self.plan_load_runs.CopyFrom(self.plan_load)
        self.plan_load_runs.runs = True
        self.plan_load_runs.operation_id = "%s-load-pooled-runs" % req.name

    def explicit_plan_load(self, runs=False):
        """The same PlanLoad with the pool and table expanded into the
        explicit binding: the daemon must answer it with the same plan."""
        out = pb.PlanLoadRequest()
        out.CopyFrom(self.plan_load_runs if runs else self.plan_load)
        out.ClearField("pooled")
        out.binding.CopyFrom(expand(
            self.pool, self.req.descriptor, self.req.participant,
            self.block_ids, self.req.pages * self.req.descriptor.page_size))
        return out

    def steps(self):
        """[(step, method, request)] in the order a client sends them,
        after the scenario's publish and register."""
        return [("register-placement", "RegisterPlacement",
                 self.register_placement),
                ("register-memory", "RegisterMemory", self.register_memory),
                ("planload-pooled", "PlanLoad", self.plan_load),
                ("planload-pooled-runs", "PlanLoad", self.plan_load_runs)]


def build(req, seed=7):
    return PooledRequests(req, seed)
