"""The reference executor: runs a plan between numpy buffers on the CPU,
so a plan can be checked before a transfer engine runs it (SPEC §2.4)."""

from typing import Any, Dict, Mapping, Sequence, Union

import numpy as np

from .binding import Binding
from .plan import LoadPlan, StorePlan
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


def execute(plan: Union[LoadPlan, StorePlan], parts: Any,
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
    """
    if isinstance(regions, (Binding, Pool)):
        region_bytes: Dict[str, np.ndarray] = regions.host_regions()
    else:
        region_bytes = {rid: _bytes_of(buf) for rid, buf in regions.items()}
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


__all__: Sequence[str] = ["execute"]
