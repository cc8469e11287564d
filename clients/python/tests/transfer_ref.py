"""PlanTransfer (SPEC §2.6) for the tests, written out independently of the
daemon: a pure-Python reference planner, an in-process fake Planner that
answers RegisterPlacement, RegisterMemory and PlanTransfer with it, and the
oracle's helpers (engine pools of numpy memory, source pools filled with
logical values at their block positions, the target checked byte for
byte).

The reference lowers one copy per (token, head), coalesces in the order
(source, source region, source offset, target region, target offset),
batches per source (``max_batch_operations`` / ``max_batch_bytes``, a copy
split at the byte budget, every batch of a source full but its last) and
folds runs within each batch in classes of equal (source region, target
region, nbytes) taken in increasing source offset. It is slow (a Python
loop per value) and meant for small shapes.
"""

import hashlib
from concurrent import futures
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import grpc
import numpy as np

import reshard

pb = reshard.planner_pb2
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
BATCH_OPERATIONS = 4096
BATCH_BYTES = 64 << 20
DESCRIPTOR_FIELDS = ("global_layer_ids", "dtype", "itemsize", "page_size",
                     "total_kv_heads", "key_head_dim", "value_head_dim")


class RefError(Exception):
    """A refusal of the reference: the gRPC code and the message."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__("%s: %s" % (code.name, message))
        self.code = code
        self.message = message


class Copy(NamedTuple):
    source: int         # ordinal in the plan's sources
    source_region: int  # index in that source's pool regions
    source_offset: int
    region: int         # index in the target's region ids
    region_offset: int
    nbytes: int


def head_bytes(desc, comp: int) -> int:
    dim = desc.key_head_dim if comp == reshard.KEY else desc.value_head_dim
    return int(dim) * int(desc.itemsize)


def components(desc) -> List[int]:
    return [reshard.KEY] + ([reshard.VALUE] if desc.value_head_dim else [])


def dp_parts(placement, dp_rank: Optional[int]):
    """The parts of ``dp_rank`` (default: the lowest present)."""
    if dp_rank is None:
        dp_rank = min(p.rank.dp for p in placement.parts)
    return [p for p in placement.parts if p.rank.dp == dp_rank], dp_rank


def owner(parts, layer: int, head: int, replica_ordinal: int):
    """SPEC §2.6's source choice: among the owners of (layer, head) sorted
    by (replica_ordinal, participant_id), the one at position
    ``replica_ordinal mod n``."""
    owners = sorted((p for p in parts if layer in p.layer_ids
                     and p.head_start <= head < p.head_start + p.head_count),
                    key=lambda p: (p.replica_ordinal, p.participant_id))
    return owners[replica_ordinal % len(owners)]


def expected_sources(source_parts, target_part) -> List[str]:
    """The participant ids a plan for ``target_part`` reads, sorted."""
    return sorted({owner(source_parts, layer, h,
                         target_part.replica_ordinal).participant_id
                   for layer in target_part.layer_ids
                   for h in range(target_part.head_start,
                                  target_part.head_start +
                                  target_part.head_count)})


def coalesce(copies: Sequence[Copy]) -> List[Copy]:
    out: List[Copy] = []
    for c in sorted(copies):
        if out:
            p = out[-1]
            if (p.source, p.source_region, p.region) == \
                    (c.source, c.source_region, c.region) and \
                    p.source_offset + p.nbytes == c.source_offset and \
                    p.region_offset + p.nbytes == c.region_offset:
                out[-1] = p._replace(nbytes=p.nbytes + c.nbytes)
                continue
        out.append(c)
    return out


def batch(copies: Sequence[Copy], max_ops: int,
          max_bytes: int) -> List[List[Copy]]:
    """Batches of one source each: at most ``max_ops`` copies and
    ``max_bytes`` bytes, a copy split at the byte budget."""
    batches: List[List[Copy]] = []
    cur: List[Copy] = []
    used = 0
    for c in copies:
        if cur and cur[0].source != c.source:
            batches.append(cur)
            cur, used = [], 0
        piece = c
        while True:
            take = min(piece.nbytes, max_bytes - used)
            cur.append(piece._replace(nbytes=take))
            used += take
            if len(cur) == max_ops or used == max_bytes:
                batches.append(cur)
                cur, used = [], 0
            if take == piece.nbytes:
                break
            piece = piece._replace(source_offset=piece.source_offset + take,
                                   region_offset=piece.region_offset + take,
                                   nbytes=piece.nbytes - take)
    if cur:
        batches.append(cur)
    return batches


def fold_runs(copies: Sequence[Copy]) -> List[Tuple[Copy, int, int, int]]:
    """SPEC §2.6 runs of one batch: (first copy, count, source stride,
    region stride), ordered by their first copy's explicit key."""
    classes: Dict[Tuple[int, int, int], List[Copy]] = {}
    for c in sorted(copies, key=lambda c: c.source_offset):
        classes.setdefault((c.source_region, c.region, c.nbytes),
                           []).append(c)
    runs = []
    for members in classes.values():
        run = None
        for c in members:
            if run is not None:
                first, count, ss, rs = run
                if count == 1 and c.region_offset >= first.region_offset:
                    run = [first, 2, c.source_offset - first.source_offset,
                           c.region_offset - first.region_offset]
                    continue
                if count > 1 and \
                        c.source_offset == first.source_offset + count * ss \
                        and c.region_offset == \
                        first.region_offset + count * rs:
                    run[1] += 1
                    continue
                runs.append(tuple(run))
            run = [c, 1, 0, 0]
        runs.append(tuple(run))
    runs.sort(key=lambda r: r[0])
    return runs


def _check_table(table: Sequence[int], pools, token_count: int) -> None:
    bs = pools[0][1].block_size
    seen = set()
    for i, b in enumerate(table):
        for mid, pool in pools:
            if b >= pool.num_blocks:
                raise RefError(INVALID, "source_block_ids[%d] = %d is not a "
                               "block of pool %s (%d blocks)"
                               % (i, b, mid, pool.num_blocks))
        if b in seen:
            raise RefError(INVALID, "source_block_ids[%d] = %d repeats" %
                           (i, b))
        seen.add(b)
    need = -(-token_count // bs)
    if len(table) < need:
        raise RefError(INVALID, "source_block_ids has %d blocks, tokens "
                       "[0, %d) need %d of %d" % (len(table), token_count,
                                                  need, bs))


def reference_plan(*, source_placement, source_dp_rank: Optional[int],
                   pools: Sequence[Tuple[str, "pb.MemoryPool"]],
                   source_block_ids: Sequence[int], token_count: int,
                   target_placement, target_dp_rank: Optional[int],
                   target: "pb.RuntimeBinding", limits=None,
                   runs: bool = False) -> "pb.PlanTransferResponse":
    """The PlanTransferResponse SPEC §2.6 defines (placement ids left
    empty, ``copies_before_coalescing`` counting one copy per token and
    head). ``pools`` are (memory id, MemoryPool) of source participants
    (their placement checked by the caller); ``target`` is the target's
    memory as a binding over ``[0, token_count)`` (a pool expanded with
    ``reshard.expand_pool``). Raises RefError for the refusals of §2.6."""
    sd, td = source_placement.descriptor, target_placement.descriptor
    for name in DESCRIPTOR_FIELDS:
        if getattr(sd, name) != getattr(td, name):
            raise RefError(PRECONDITION, "descriptor.%s differs: source %s, "
                           "target %s" % (name, getattr(sd, name),
                                          getattr(td, name)))
    src_parts, _ = dp_parts(source_placement, source_dp_rank)
    every = {p.participant_id for p in source_placement.parts}
    by_participant: Dict[str, Tuple[str, "pb.MemoryPool"]] = {}
    for mid, pool in pools:
        if pool.participant_id not in every:
            raise RefError(INVALID, "pool %s: participant %s is not in the "
                           "source placement" % (mid, pool.participant_id))
        if pool.participant_id in by_participant:
            raise RefError(INVALID, "pools %s and %s are both participant "
                           "%s's" % (by_participant[pool.participant_id][0],
                                     mid, pool.participant_id))
        by_participant[pool.participant_id] = (mid, pool)
    tgt_parts, _ = dp_parts(target_placement, target_dp_rank)
    tpart = next((p for p in target_placement.parts
                  if p.participant_id == target.participant_id), None)
    if tpart is None:
        raise RefError(INVALID, "participant %s is not in the target "
                       "placement" % target.participant_id)
    if tpart not in tgt_parts:
        raise RefError(INVALID, "participant %s is not in the target DP "
                       "rank" % target.participant_id)
    region_index = {r.region_id: i for i, r in enumerate(target.regions)}
    # Lowering: one copy per (token, head) of the target's binding.
    raw = []
    read: Dict[str, Tuple[str, "pb.MemoryPool"]] = {}
    cache: Dict[Tuple[int, int, int], object] = {}
    for r in target.ranges:
        hb = head_bytes(td, r.component)
        for h in range(r.head_start, r.head_start + r.head_count):
            key = (r.global_layer_id, r.component, h)
            if key not in cache:
                src = owner(src_parts, r.global_layer_id, h,
                            tpart.replica_ordinal)
                if src.participant_id not in by_participant:
                    raise RefError(PRECONDITION, "source participant %s has "
                                   "no pool among source_memory_ids"
                                   % src.participant_id)
                read[src.participant_id] = by_participant[src.participant_id]
                pool = by_participant[src.participant_id][1]
                tensor = next(t for t in pool.tensors
                              if t.global_layer_id == r.global_layer_id
                              and t.component == r.component)
                cache[key] = (src, pool, tensor)
            src, pool, tensor = cache[key]
            for t in range(r.token_start, r.token_start + r.token_count):
                raw.append((src.participant_id, tensor.region_id,
                            tensor.offset_bytes + (t % pool.block_size) *
                            tensor.token_stride_bytes + (h - src.head_start)
                            * tensor.head_stride_bytes, t // pool.block_size,
                            tensor.block_stride_bytes, region_index[
                                r.region_id], r.offset_bytes +
                            (t - r.token_start) * r.token_stride_bytes +
                            (h - r.head_start) * r.head_stride_bytes, hb))
    used = sorted(read.items())
    sizes = {p.block_size for _, (_, p) in used}
    if len(sizes) > 1:
        mid = next(m for _, (m, p) in used
                   if p.block_size != used[0][1][1].block_size)
        raise RefError(INVALID, "pool %s has another block size than the "
                       "pools it shares the block table with" % mid)
    _check_table(source_block_ids, [v for _, v in used], token_count)
    ordinal = {pid: i for i, (pid, _) in enumerate(used)}
    copies = []
    for pid, rid, off, j, bstride, region, roff, n in raw:
        pool = read[pid][1]
        sreg = [x.region_id for x in pool.regions].index(rid)
        copies.append(Copy(ordinal[pid], sreg,
                           off + source_block_ids[j] * bstride, region, roff,
                           n))
    lim = limits or pb.Limits()
    ops = lim.max_batch_operations or BATCH_OPERATIONS
    nbytes = lim.max_batch_bytes or BATCH_BYTES
    batches = batch(coalesce(copies), min(ops, BATCH_OPERATIONS),
                    min(nbytes, BATCH_BYTES))
    resp = pb.PlanTransferResponse(region_ids=[r.region_id
                                               for r in target.regions])
    for pid, (mid, pool) in used:
        resp.sources.add(participant_id=pid, endpoint=pool.endpoint,
                         memory_id=mid, regions=list(pool.regions))
    entries = 0
    for b in batches:
        tb = resp.batches.add(source_index=b[0].source,
                              bytes=sum(c.nbytes for c in b))
        if runs:
            for first, count, ss, rs in fold_runs(b):
                tb.source_region_index.append(first.source_region)
                tb.source_offset.append(first.source_offset)
                tb.region_index.append(first.region)
                tb.region_offset.append(first.region_offset)
                tb.nbytes.append(first.nbytes)
                tb.run_count.append(count)
                tb.source_stride.append(ss)
                tb.region_stride.append(rs)
                entries += 1
        else:
            for c in b:
                tb.source_region_index.append(c.source_region)
                tb.source_offset.append(c.source_offset)
                tb.region_index.append(c.region)
                tb.region_offset.append(c.region_offset)
                tb.nbytes.append(c.nbytes)
    resp.stats.operations = sum(len(b) for b in batches)
    resp.stats.bytes = sum(c.nbytes for c in copies)
    resp.stats.copies_before_coalescing = len(copies)
    resp.stats.runs = entries
    return resp


# ------------------------------------------------------------ fake server --

def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p)
    return "sha256:" + h.hexdigest()


def _placement_id(placement) -> str:
    return _digest(placement.SerializeToString(deterministic=True))


class FakePlanner:
    """An in-process Planner for RegisterPlacement, RegisterMemory and
    PlanTransfer (through :func:`reference_plan`), recording the requests.
    Its ids are digests of the messages, not SPEC §1.6's."""

    def __init__(self) -> None:
        self.requests: List[object] = []
        self.placements: Dict[str, object] = {}
        self.pools: Dict[str, Tuple["pb.MemoryPool", str]] = {}

        def unary(fn, req_type, resp_type):
            def handle(req, ctx):
                self.requests.append(req)
                try:
                    return fn(req)
                except RefError as err:
                    ctx.abort(err.code, err.message)
            return grpc.unary_unary_rpc_method_handler(
                handle, request_deserializer=req_type.FromString,
                response_serializer=resp_type.SerializeToString)

        handler = grpc.method_handlers_generic_handler("reshard.v1.Planner", {
            "RegisterPlacement": unary(self._register_placement,
                                       pb.RegisterPlacementRequest,
                                       pb.RegisterPlacementResponse),
            "RegisterMemory": unary(self._register_memory,
                                    pb.RegisterMemoryRequest,
                                    pb.RegisterMemoryResponse),
            "PlanTransfer": unary(self._plan_transfer,
                                  pb.PlanTransferRequest,
                                  pb.PlanTransferResponse)})
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self.server.add_generic_rpc_handlers((handler,))
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def target(self) -> str:
        return "127.0.0.1:%d" % self.port

    def stop(self) -> None:
        self.server.stop(None)

    def _placement(self, inline, pid: str, field: str):
        if inline is not None:
            return inline, _placement_id(inline)
        if pid not in self.placements:
            raise RefError(NOT_FOUND, "%s: placement %s is not registered"
                           % (field, pid))
        return self.placements[pid], pid

    def _register_placement(self, req):
        pid = _placement_id(req.placement)
        self.placements[pid] = req.placement
        return pb.RegisterPlacementResponse(placement_id=pid)

    def _register_memory(self, req):
        which = req.WhichOneof("target")
        placement, pid = self._placement(
            req.placement if which == "placement" else None,
            req.placement_id, "placement_id")
        if not any(p.participant_id == req.pool.participant_id
                   for p in placement.parts):
            raise RefError(INVALID, "pool.participant_id %s is not in the "
                           "placement" % req.pool.participant_id)
        mid = _digest(req.pool.SerializeToString(deterministic=True),
                      pid.encode())
        created = mid not in self.pools
        self.pools[mid] = (req.pool, pid)
        return pb.RegisterMemoryResponse(memory_id=mid, created=created)

    def _plan_transfer(self, req):
        src, src_id = self._placement(
            req.source_placement
            if req.WhichOneof("source") == "source_placement" else None,
            req.source_placement_id, "source_placement_id")
        dst, dst_id = self._placement(
            req.target_placement
            if req.WhichOneof("target") == "target_placement" else None,
            req.target_placement_id, "target_placement_id")
        if req.token_count < 1:
            raise RefError(INVALID, "token_count must be at least 1")
        pools = []
        for i, mid in enumerate(req.source_memory_ids):
            if mid not in self.pools:
                raise RefError(NOT_FOUND, "source_memory_ids[%d]: memory %s "
                               "is not registered" % (i, mid))
            pool, pid = self.pools[mid]
            if pid != src_id:
                raise RefError(INVALID, "source_memory_ids[%d]: pool %s is "
                               "not the source placement's" % (i, mid))
            pools.append((mid, pool))
        if req.HasField("binding") == req.HasField("pooled"):
            raise RefError(INVALID, "give exactly one of binding and pooled")
        if req.HasField("binding"):
            target = req.binding
        else:
            if req.pooled.WhichOneof("pool") == "memory_id":
                if req.pooled.memory_id not in self.pools:
                    raise RefError(NOT_FOUND, "pooled.memory_id %s is not "
                                   "registered" % req.pooled.memory_id)
                pool, pid = self.pools[req.pooled.memory_id]
                if pid != dst_id:
                    raise RefError(INVALID, "pooled: pool %s is not the "
                                   "target placement's"
                                   % req.pooled.memory_id)
            else:
                pool = req.pooled.inline_pool
            part = next((p for p in dst.parts
                         if p.participant_id == pool.participant_id), None)
            if part is None:
                raise RefError(INVALID, "pooled: participant %s is not in "
                               "the target placement" % pool.participant_id)
            try:
                target = reshard.expand_pool(
                    pool, list(req.pooled.block_ids),
                    num_tokens=req.token_count, descriptor=dst.descriptor,
                    part=part)
            except reshard.PoolError as err:
                raise RefError(INVALID, "pooled: %s" % err) from None
        resp = reference_plan(
            source_placement=src,
            source_dp_rank=(req.source_dp_rank.value
                            if req.HasField("source_dp_rank") else None),
            pools=pools, source_block_ids=list(req.source_block_ids),
            token_count=req.token_count, target_placement=dst,
            target_dp_rank=(req.target_dp_rank.value
                            if req.HasField("target_dp_rank") else None),
            target=target, limits=req.limits, runs=req.runs)
        resp.source_placement_id = src_id
        resp.target_placement_id = dst_id
        return resp


# ------------------------------------------------------------- the oracle --

class Instance:
    """One instance: its placement registered through ``client`` (the fake
    or a daemon) and, for each participant of DP rank ``dp_rank``, a zeroed
    engine pool (``memory`` layout, ``block``-token blocks, room for
    ``tokens`` plus ``extra`` blocks) registered against it. The
    participants share one scattered block table (``table``), as an
    engine's DP replica does."""

    def __init__(self, client, desc, prefix, *, tp, pp=1, dp=1, dp_rank=0,
                 memory="vllm", block=16, tokens=100, extra=2, seed=0):
        self.placement = reshard.placement(desc, tp=tp, pp=pp, dp=dp,
                                           prefix=prefix)
        self.placement_id = client.register_placement(self.placement)
        self.parts = [p for p in self.placement.parts
                      if p.rank.dp == dp_rank]
        nb = -(-tokens // block) + extra
        self.table = scattered(nb, seed)
        self.pools = {p.participant_id: engine_pool(
            desc, p, memory, block, nb, endpoint="%s:%d" % (prefix, i))
            for i, p in enumerate(self.parts)}
        self.memory_ids = {pid: client.register_memory(
            pool, placement_id=self.placement_id).memory_id
            for pid, pool in self.pools.items()}


def check_shape(plan, src, target_pool, limits=None):
    """What SPEC §2.6 fixes about any plan: sources sorted, each as its
    pool; the target's region ids; one source per batch; batch limits."""
    ids = [s.participant_id for s in plan.sources]
    assert ids == sorted(set(ids))
    for s in plan.sources:
        pool = src.pools[s.participant_id].message
        assert (s.endpoint, s.memory_id, list(s.regions)) == (
            pool.endpoint, src.memory_ids[s.participant_id],
            list(pool.regions))
    assert plan.region_ids == [r.region_id
                               for r in target_pool.message.regions]
    ops = (limits.max_batch_operations if limits else 0) or 4096
    nbytes = (limits.max_batch_bytes if limits else 0) or 64 << 20
    for i, tb in enumerate(plan.response.batches):
        explicit = plan.batches[i].expanded()
        assert 0 < len(explicit) <= ops and explicit.bytes <= nbytes
        assert set(explicit.source_index.tolist()) == {tb.source_index}
        last = i + 1 == len(plan.batches) or \
            plan.response.batches[i + 1].source_index != tb.source_index
        assert last or len(explicit) == ops or explicit.bytes == nbytes, \
            "batch %d is short" % i
    assert plan.bytes == plan.stats.bytes



def engine_pool(desc, part, memory: str, block: int, num_blocks: int,
                endpoint: str = "") -> reshard.Pool:
    """A zeroed pool of numpy memory in an engine's shape: ``"vllm"``
    (``[2, blocks, block, heads, dim]`` per layer, NHD; MLA ``[blocks,
    block, dim]``) or ``"flashinfer"`` (``[blocks, 2, heads, block, dim]``
    per layer, HND)."""
    hn, dim = part.head_count, desc.key_head_dim
    layers = sorted(part.layer_ids)
    dt = np.dtype("u%d" % desc.itemsize)
    if memory == "vllm":
        shape = (num_blocks, block, dim) if desc.value_head_dim == 0 else \
            (2, num_blocks, block, hn, dim)
        caches = [np.zeros(shape, dtype=dt) for _ in layers]
        return reshard.PoolBuilder.vllm(desc, part, caches,
                                        endpoint=endpoint).build()
    if memory == "flashinfer":
        caches = [np.zeros((num_blocks, 2, hn, block, dim), dtype=dt)
                  for _ in layers]
        return reshard.PoolBuilder.flashinfer(desc, part, caches,
                                              endpoint=endpoint).build()
    raise ValueError(memory)


def logical_values(desc, tokens: int, seed: int
                   ) -> Dict[Tuple[int, int], np.ndarray]:
    """(layer, component) -> [tokens, total heads, dim] of never-zero
    element bit patterns (unsigned, of the itemsize)."""
    g = np.random.default_rng(seed)
    dt = np.dtype("u%d" % desc.itemsize)
    hi = 1 << (8 * desc.itemsize)
    out = {}
    for layer in desc.global_layer_ids:
        for c in components(desc):
            dim = desc.key_head_dim if c == reshard.KEY else \
                desc.value_head_dim
            out[(layer, c)] = g.integers(1, hi, (tokens, desc.total_kv_heads,
                                                 dim)).astype(dt)
    return out


def positions(pool: reshard.Pool, tensor, block_ids: Sequence[int],
              tokens: int) -> np.ndarray:
    """Byte offsets [tokens, heads, hb] in its region of every value of a
    pool tensor for tokens ``[0, tokens)``."""
    bs = pool.block_size
    hb = head_bytes(pool.descriptor, tensor.component)
    t = np.arange(tokens)
    table = np.asarray(block_ids, dtype=np.int64)
    at = (tensor.offset_bytes + table[t // bs] * tensor.block_stride_bytes
          + (t % bs) * tensor.token_stride_bytes)
    h = np.arange(pool.part.head_count) * tensor.head_stride_bytes
    return at[:, None, None] + h[None, :, None] + np.arange(hb)[None, None, :]


def fill_source(pool: reshard.Pool, values, block_ids: Sequence[int],
                tokens: int, seed: int) -> None:
    """Fills a source pool: never-zero noise everywhere, then the logical
    value of every (token < tokens, layer, head, component) at its block
    position. A plan that reads anything else writes noise."""
    mem = pool.host_regions()
    g = np.random.default_rng(seed)
    for buf in mem.values():
        buf[:] = g.integers(1, 256, buf.shape[0], dtype=np.uint8)
    h0, hn = pool.part.head_start, pool.part.head_count
    for t in pool.message.tensors:
        v = values[(t.global_layer_id, t.component)][:tokens, h0:h0 + hn]
        mem[t.region_id][positions(pool, t, block_ids, tokens)] = \
            np.ascontiguousarray(v).view(np.uint8).reshape(
                tokens, hn, -1)


def zero(pool: reshard.Pool) -> None:
    for buf in pool.host_regions().values():
        buf[:] = 0


def check_target(pool: reshard.Pool, values, block_ids: Sequence[int],
                 tokens: int) -> int:
    """Asserts that the target pool holds exactly the logical values of
    tokens ``[0, tokens)`` of its heads at their block positions and zero
    in every other byte. Returns the bytes checked."""
    mem = pool.host_regions()
    covered = {rid: np.zeros(b.shape[0], dtype=bool) for rid, b in
               mem.items()}
    h0, hn = pool.part.head_start, pool.part.head_count
    who = pool.participant_id
    total = 0
    for t in pool.message.tensors:
        at = positions(pool, t, block_ids, tokens)
        got = mem[t.region_id][at]
        want = np.ascontiguousarray(
            values[(t.global_layer_id, t.component)][:tokens, h0:h0 + hn]
        ).view(np.uint8).reshape(got.shape)
        bad = np.argwhere(got != want)
        if bad.size:
            tok, head, byte = (int(x) for x in bad[0])
            raise AssertionError(
                "%s: layer %d %s token %d head %d byte %d is %d, want %d "
                "(%d bytes differ)" % (
                    who, t.global_layer_id, "KV"[t.component - reshard.KEY],
                    tok, h0 + head, byte, int(got[tok, head, byte]),
                    int(want[tok, head, byte]), len(bad)))
        covered[t.region_id][at.reshape(-1)] = True
        total += got.size
    for rid, buf in mem.items():
        stray = np.flatnonzero(buf[~covered[rid]])
        if stray.size:
            where = np.flatnonzero(~covered[rid])[stray[0]]
            raise AssertionError("%s: %d bytes outside the values written, "
                                 "the first at region %s offset %d"
                                 % (who, stray.size, rid, int(where)))
    return total


def scattered(num_blocks: int, seed: int) -> List[int]:
    """Every block of a pool in a random order (the span's blocks
    scattered, the entries past it validated and unused)."""
    return np.random.default_rng(seed).permutation(num_blocks).tolist()


def batch_copies(plan: reshard.TransferPlan, b: int) -> List[tuple]:
    """Batch ``b`` expanded into (source_region, source_offset, region,
    region_offset, nbytes) tuples, in entry order."""
    c = plan.batches[b].expanded()
    return list(zip(c.source_region_index.tolist(), c.source_offset.tolist(),
                    c.region_index.tolist(), c.region_offset.tolist(),
                    c.nbytes.tolist()))
