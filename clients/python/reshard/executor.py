"""The reference executor: runs a plan between numpy buffers on the CPU,
so a plan can be checked before a transfer engine runs it (SPEC §2.4,
§2.6)."""

from typing import Any, Dict, List, Mapping, Sequence, Union

import numpy as np

from .binding import Binding
from .plan import (LoadPlan, StorePlan, TransferCopies, TransferPlan,
                   _run_steps)
from .pool import Pool
from .tensor import host_bytes, tensor_memory


def _bytes_of(buf: Any) -> np.ndarray:
    """A uint8 view of a buffer: numpy arrays and tensors through their
    memory (CPU only), everything else through the buffer protocol."""
    if isinstance(buf, np.ndarray) and buf.flags.c_contiguous:
        return buf.reshape(-1).view(np.uint8)
    try:
        mem = tensor_memory(buf)
    except TypeError:
        return np.frombuffer(buf, dtype=np.uint8)
    if any(s < 0 for s in mem.strides):
        raise ValueError("a buffer with negative strides")
    return host_bytes(mem.address, mem.extent)


def _part_buffer(parts: Any, plan: Any, page: int, part: int) -> Any:
    if isinstance(plan, LoadPlan) and isinstance(parts, Mapping):
        per_page = parts[plan.pages[page].page_key]
    else:
        per_page = parts[page]
    return per_page[part]


# Copies of at least this many elements run one numpy slice assignment
# each (the per-copy Python cost is small next to their size); shorter ones
# are gathered together, at most _CHUNK elements per gather so the index
# arrays stay bounded whatever the plan's size.
_LARGE = 1 << 12
_CHUNK = 1 << 22
_WORDS = ((8, np.uint64), (4, np.uint32), (2, np.uint16), (1, np.uint8))


def _copy_group(dst: np.ndarray, dst_off: np.ndarray, src: np.ndarray,
                src_off: np.ndarray, nbytes: np.ndarray, what: str) -> None:
    if int((src_off + nbytes).max()) > src.shape[0]:
        raise ValueError("%s: a copy reads past the end of its source (%d "
                         "bytes)" % (what, src.shape[0]))
    if int((dst_off + nbytes).max()) > dst.shape[0]:
        raise ValueError("%s: a copy writes past the end of its destination "
                         "(%d bytes)" % (what, dst.shape[0]))
    # Move whole words when every offset and size allows it.
    g = int(np.gcd.reduce(np.concatenate([dst_off, src_off, nbytes])))
    unit, word = next((u, w) for u, w in _WORDS if g % u == 0)
    dst = dst[:dst.shape[0] - dst.shape[0] % unit].view(word)
    src = src[:src.shape[0] - src.shape[0] % unit].view(word)
    d = (dst_off // unit).astype(np.int64)
    s = (src_off // unit).astype(np.int64)
    n = (nbytes // unit).astype(np.int64)
    large = n >= _LARGE
    for i in np.flatnonzero(large).tolist():
        dst[d[i]:d[i] + n[i]] = src[s[i]:s[i] + n[i]]
    d, s, n = d[~large], s[~large], n[~large]
    if n.shape[0] == 0:
        return
    ends = np.cumsum(n)
    cuts = np.searchsorted(ends, np.arange(_CHUNK, int(ends[-1]), _CHUNK),
                           side="right")
    for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), n.shape[0]]):
        if lo == hi:
            continue
        cn = n[lo:hi]
        within = np.arange(int(cn.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(cn) - cn, cn)
        dst[np.repeat(d[lo:hi], cn) + within] = \
            src[np.repeat(s[lo:hi], cn) + within]


def _region_buffers(regions: Union[Binding, Pool, Mapping[str, Any]]
                    ) -> Dict[str, np.ndarray]:
    if isinstance(regions, (Binding, Pool)):
        return regions.host_regions()
    return {rid: _bytes_of(buf) for rid, buf in regions.items()}


def execute(plan: Union[LoadPlan, StorePlan, TransferPlan], parts: Any,
            regions: Union[Binding, Pool, Mapping[str, Any]]) -> int:
    """Runs every copy of ``plan`` and returns the bytes copied.

    ``parts`` holds the Part bytes: ``parts[page][part_index]``, where
    ``page`` is the plan's page index (or, for a LoadPlan, a mapping keyed
    by page key) and each Part is a uint8 array, bytearray or other
    buffer. ``regions`` is the :class:`~reshard.Binding` or
    :class:`~reshard.Pool` the plan was made for (its tensors' memory is used:
    CPU tensors only) or a mapping from region id to a buffer: the executor
    only needs each region's bytes, so a pooled plan (whose region ids are the
    pool's) runs like an explicit one. A LoadPlan copies Part → region, a
    StorePlan region → Part (into writable Part buffers). Copies are grouped by
    (page, part, region); each group moves whole words when offsets and
    sizes allow, short copies through bounded numpy gathers, long ones as
    slice assignments. A copy outside its buffer raises ValueError before
    its group is written.

    A :class:`~reshard.TransferPlan` runs through :func:`execute_transfer`:
    ``parts`` is then the sources' memory and ``regions`` the target's.
    """
    if isinstance(plan, TransferPlan):
        return execute_transfer(plan, parts, regions)
    region_bytes = _region_buffers(regions)
    missing = [rid for rid in plan.region_ids if rid not in region_bytes]
    if missing:
        raise KeyError("no buffer for region %r" % missing[0])
    copies = plan.copies(expand_runs=True)
    if len(copies) == 0:
        return 0
    key = np.stack([copies.page_index, copies.part_index,
                    copies.region_index], axis=1)
    groups, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(groups) + 1))
    load = isinstance(plan, LoadPlan)
    for g, (page, part, region) in enumerate(groups.tolist()):
        sel = order[bounds[g]:bounds[g + 1]]
        part_buf = _bytes_of(_part_buffer(parts, plan, page, part))
        region_buf = region_bytes[plan.region_ids[region]]
        what = "page %d part %d region %s" % (page, part,
                                               plan.region_ids[region])
        if load:
            _copy_group(region_buf, copies.region_offset[sel], part_buf,
                        copies.part_offset[sel], copies.nbytes[sel], what)
        else:
            _copy_group(part_buf, copies.part_offset[sel], region_buf,
                        copies.region_offset[sel], copies.nbytes[sel], what)
    return copies.bytes


_U64_MAX = np.uint64(2 ** 64 - 1)


def _source_buffers(plan: TransferPlan, sources: Mapping[str, Any]
                    ) -> List[List[np.ndarray]]:
    """Each source's region buffers, in its ``regions`` order."""
    out = []
    for s in plan.sources:
        if s.participant_id in sources:
            given = sources[s.participant_id]
        elif s.memory_id and s.memory_id in sources:
            given = sources[s.memory_id]
        else:
            raise KeyError("no buffers for source %s (memory id %s)"
                           % (s.participant_id, s.memory_id))
        buffers = _region_buffers(given)
        regions = []
        for r in s.regions:
            if r.region_id not in buffers:
                raise KeyError("no buffer for region %r of source %s"
                               % (r.region_id, s.participant_id))
            regions.append(buffers[r.region_id])
        out.append(regions)
    return out


def _copy_name(plan: TransferPlan, kept: TransferCopies, entry: int,
               step: int) -> str:
    """``batches[b] copy i`` (or ``run i copy k of n``) of an entry of
    ``plan.copies(expand_runs=False)``."""
    b = int(kept.batch[entry])
    first = sum(len(plan.batches[j]) for j in range(b))
    i = entry - first
    if kept.run_count is None or plan.batches[b].run_count is None:
        return "batches[%d] copy %d" % (b, i)
    return "batches[%d] run %d copy %d of %d" % (
        b, i, step, int(kept.run_count[entry]))


def _check_transfer(plan: TransferPlan, kept: TransferCopies,
                    entry: np.ndarray, step: np.ndarray,
                    copies: TransferCopies, src: List[List[np.ndarray]],
                    dst: List[np.ndarray]) -> None:
    """Every copy inside its source region (as the plan declares it and as
    the buffer given holds it) and inside its target buffer; ValueError
    naming the first copy that is not."""
    if kept.run_count is not None and len(kept):
        # Runs whose last copy's offsets pass 2^64.
        last = kept.run_count - np.uint64(1)
        for off, stride, side in ((kept.source_offset, kept.source_stride,
                                   "source"),
                                  (kept.region_offset, kept.region_stride,
                                   "target")):
            room = (_U64_MAX - off) // np.maximum(stride, np.uint64(1))
            bad = np.flatnonzero((stride > 0) & (last > room))
            if bad.size:
                e = int(bad[0])
                raise ValueError("%s: its %s offsets pass 2^64"
                                 % (_copy_name(plan, kept, e, 0), side))
    # Sizes per copy: each source region's as the plan declares it and as
    # its buffer holds it (looked up by a flat index over every source's
    # regions), and each target buffer's.
    base = np.cumsum([0] + [len(x.regions) for x in plan.sources])
    flat = base[copies.source_index.astype(np.int64)] + \
        copies.source_region_index.astype(np.int64)
    declared = np.array([r.nbytes for x in plan.sources for r in x.regions],
                        dtype=np.uint64)[flat]
    held = np.array([b.shape[0] for regions in src for b in regions],
                    dtype=np.uint64)[flat]
    target = np.array([b.shape[0] for b in dst],
                      dtype=np.uint64)[copies.region_index.astype(np.int64)]
    n = copies.nbytes
    checks = [(copies.source_offset, declared, "reads", "the region's %d "
               "bytes (as the plan's sources list it)"),
              (copies.source_offset, held, "reads", "the %d bytes of the "
               "buffer given for it"),
              (copies.region_offset, target, "writes", "the %d bytes of the "
               "buffer given for it")]
    for off, size, verb, where in checks:
        # n > size first, so that size - n cannot wrap.
        bad = np.flatnonzero((n > size) | (off > size - np.minimum(n, size)))
        if not bad.size:
            continue
        c = int(bad[0])
        e, k = int(entry[c]), int(step[c])
        source = plan.sources[int(copies.source_index[c])]
        if verb == "reads":
            what = "source %s region %s" % (
                source.participant_id,
                source.regions[int(copies.source_region_index[c])].region_id)
        else:
            what = "target region %s" % plan.region_ids[
                int(copies.region_index[c])]
        start = int(off[c])
        raise ValueError("%s %s bytes [%d, %d) of %s, outside %s" % (
            _copy_name(plan, kept, e, k), verb, start, start + int(n[c]),
            what, where % int(size[c])))


def execute_transfer(plan: TransferPlan, sources: Mapping[str, Any],
                     target: Union[Binding, Pool, Mapping[str, Any]]) -> int:
    """Runs every copy of a transfer plan (SPEC §2.6) and returns the bytes
    copied.

    ``sources`` maps each source the plan reads — by participant id or by
    memory id — to its memory: a :class:`~reshard.Pool` (its tensors'
    memory, CPU only) or a mapping from region id to a buffer (numpy uint8
    arrays, bytearrays, any buffer; the pool's host buffers). ``target``
    is the target's :class:`~reshard.Pool` or :class:`~reshard.Binding`,
    or a mapping from its region ids to buffers. Explicit plans and plans
    with runs run alike (runs expanded). Every copy is bounds-checked
    before any byte is written: inside its source region as the plan's
    ``sources`` declare it, inside the source buffer given and inside the
    target buffer; a copy that is not raises ValueError naming the batch
    and the copy (``batches[3] copy 17``, ``batches[0] run 2 copy 5 of
    16``). A source or region without a buffer is a KeyError.
    """
    src = _source_buffers(plan, sources)
    target_bytes = _region_buffers(target)
    missing = [rid for rid in plan.region_ids if rid not in target_bytes]
    if missing:
        raise KeyError("no buffer for target region %r" % missing[0])
    dst = [target_bytes[rid] for rid in plan.region_ids]
    kept = plan.copies(expand_runs=False)
    if len(kept) == 0:
        return 0
    if kept.run_count is None:
        entry = np.arange(len(kept))
        step = np.zeros(len(kept), dtype=np.int64)
    else:
        entry, step64 = _run_steps(kept.run_count)
        step = step64.astype(np.int64)
    copies = kept.expanded()
    _check_transfer(plan, kept, entry, step, copies, src, dst)
    key = np.stack([copies.source_index, copies.source_region_index,
                    copies.region_index], axis=1)
    groups, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(groups) + 1))
    for g, (s, r, region) in enumerate(groups.tolist()):
        sel = order[bounds[g]:bounds[g + 1]]
        what = "source %s region %s to region %s" % (
            plan.sources[s].participant_id, plan.sources[s].regions[r]
            .region_id, plan.region_ids[region])
        _copy_group(dst[region], copies.region_offset[sel], src[s][r],
                    copies.source_offset[sel], copies.nbytes[sel], what)
    return copies.bytes


__all__: Sequence[str] = ["execute", "execute_transfer"]
