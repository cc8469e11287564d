"""NIXL descriptor lists from plans (issue 28, SPEC §2.2, §2.6).

A NIXL transfer is two descriptor lists of equal length — the local
buffers and the remote ones, row ``i`` of one paired with row ``i`` of the
other — and one remote agent. :func:`transfer_descs` turns a
:class:`~reshard.TransferPlan` and :func:`load_descs` a
:class:`~reshard.LoadPlan` into those lists, per batch, as ``uint64`` numpy
arrays built from the plan's columns (no Python loop per copy):

* ``strided=False``: rows ``(addr, len, dev)``, one per copy; runs are
  expanded (``nixl_agent.get_xfer_descs`` takes such an ``[n, 3]`` array);
* ``strided=True``: rows ``(addr, len, dev, stride, count)``, one per
  entry as the daemon sent it — a run of ``count`` copies of ``len`` bytes
  at ``addr + k·stride`` — and an explicit copy as ``stride 0, count 1``.

Every row is checked against the memory it names before it is returned: a
copy (or a run's last copy) outside its region or Part raises ValueError
naming the batch and the entry.
"""

from dataclasses import dataclass
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Union)

import numpy as np

from .binding import Binding
from .plan import LoadPlan, TransferPlan, _run_steps
from .pool import Pool
from .tensor import tensor_memory

_U64 = np.uint64
_U64_MAX = (1 << 64) - 1


@dataclass(frozen=True)
class NixlBatch:
    """The descriptor lists of one batch (or, for a LoadPlan, of the part of
    a batch one peer serves).

    ``local`` and ``remote`` are ``uint64`` arrays of equal shape, ``[n,
    3]`` rows ``(addr, len, dev)`` or, strided, ``[n, 5]`` rows ``(addr,
    len, dev, stride, count)``; row ``i`` of ``remote`` is read into row
    ``i`` of ``local`` (the pull direction; a push swaps them). ``peer`` is
    the remote agent: for a TransferPlan the batch's source participant id
    (``source`` is its ``TransferSource``, with the endpoint), for a
    LoadPlan the peer the caller named for the Parts read (``""`` when it
    named none). ``page_index`` / ``part_index`` (LoadPlan only) give each
    row's page and Part.
    """

    batch: int
    peer: str
    local: np.ndarray
    remote: np.ndarray
    source: Optional[Any] = None
    page_index: Optional[np.ndarray] = None
    part_index: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.local.shape[0])

    @property
    def strided(self) -> bool:
        return self.local.shape[1] == 5

    @property
    def bytes(self) -> int:
        """Bytes the rows move (runs counted in full)."""
        if not self.strided:
            return int(self.local[:, 1].sum(dtype=_U64))
        return int((self.local[:, 1] * self.local[:, 4]).sum(dtype=_U64))


RegionsLike = Union[Binding, Pool, Any, Sequence[Any], Mapping[str, Any]]


def _memory(value: Any, what: str) -> Tuple[int, int]:
    """(address, nbytes) of an ``int`` address (size unknown: unbounded),
    an ``(address, nbytes)`` pair, a ``Region`` message or a host buffer."""
    if isinstance(value, int):
        return value, _U64_MAX - value
    if isinstance(value, tuple) and len(value) >= 2:
        return int(value[0]), int(value[1])
    if hasattr(value, "address") and hasattr(value, "nbytes") and \
            not isinstance(value, np.ndarray):
        return int(value.address), int(value.nbytes)
    if isinstance(value, np.ndarray):
        if not value.flags.c_contiguous:
            raise ValueError("%s: a non-contiguous array" % what)
        return int(value.ctypes.data), int(value.nbytes)
    try:
        mem = tensor_memory(value)
    except TypeError:
        raise TypeError("%s: not an address, (address, nbytes), Region or "
                        "buffer: %r" % (what, type(value))) from None
    return int(mem.address), int(mem.extent)


def _regions(regions: RegionsLike) -> Dict[str, Tuple[int, int]]:
    """Region id -> (address, nbytes) from a Binding, a Pool, their
    messages, a list of ``Region`` messages or a mapping."""
    if isinstance(regions, (Binding, Pool)):
        regions = regions.message
    if hasattr(regions, "regions") and not isinstance(regions, Mapping):
        regions = regions.regions
    if isinstance(regions, Mapping):
        return {rid: _memory(v, "region %s" % rid)
                for rid, v in regions.items()}
    return {r.region_id: (int(r.address), int(r.nbytes)) for r in regions}


def _check(what: Callable[[int], str], off: np.ndarray, nbytes: np.ndarray,
           count: np.ndarray, stride: np.ndarray, size: np.ndarray,
           side: str) -> None:
    """Each entry's last copy inside ``size`` bytes: ``off + (count-1) ·
    stride + nbytes <= size``, without wrapping."""
    last = count - _U64(1)
    room = (_U64(_U64_MAX) - off) // np.maximum(stride, _U64(1))
    wraps = (stride > 0) & (last > room)
    end = off + np.where(wraps, _U64(0), last * stride)
    bad = wraps | (nbytes > size) | (end > size - np.minimum(nbytes, size))
    hit = np.flatnonzero(bad)
    if hit.size:
        i = int(hit[0])
        raise ValueError("%s: the %s side [%d, +%d) x %d (stride %d) is "
                         "outside its %d bytes" % (
                             what(i), side, int(off[i]), int(nbytes[i]),
                             int(count[i]), int(stride[i]), int(size[i])))


def _rows(addr: np.ndarray, nbytes: np.ndarray, dev: np.ndarray,
          stride: np.ndarray, count: np.ndarray, strided: bool
          ) -> np.ndarray:
    if strided:
        return np.stack([addr, nbytes, dev, stride, count], axis=1)
    entry, k = _run_steps(count)
    return np.stack([addr[entry] + k * stride[entry], nbytes[entry],
                     dev[entry]], axis=1)


def _dev(value: Union[int, Mapping[str, int]], key: str) -> int:
    if isinstance(value, Mapping):
        return int(value.get(key, 0))
    return int(value)


def _entry_name(batch: int, has_runs: bool) -> Callable[[int], str]:
    word = "run" if has_runs else "copy"
    return lambda i: "batches[%d] %s %d" % (batch, word, i)


def _local(plan: Any, regions: RegionsLike) -> Tuple[np.ndarray, np.ndarray]:
    """Addresses and sizes of the plan's target regions, in ``region_ids``
    order."""
    table = _regions(regions)
    missing = [rid for rid in plan.region_ids if rid not in table]
    if missing:
        raise KeyError("no address for region %r" % missing[0])
    return (np.array([table[r][0] for r in plan.region_ids], dtype=_U64),
            np.array([table[r][1] for r in plan.region_ids], dtype=_U64))


def _runs_of(b: Any, stride_name: str) -> Tuple[np.ndarray, np.ndarray,
                                               np.ndarray]:
    n = len(b)
    if b.run_count is None:
        zero = np.zeros(n, dtype=_U64)
        return np.ones(n, dtype=_U64), zero, zero
    return b.run_count, getattr(b, stride_name), b.region_stride


def transfer_descs(plan: TransferPlan, regions: RegionsLike, *,
                   strided: bool = False, local_dev: int = 0,
                   remote_dev: Union[int, Mapping[str, int]] = 0
                   ) -> List[NixlBatch]:
    """The NIXL descriptor lists of every batch of a transfer plan (SPEC
    §2.6), in batch order: the remote side from the batch's source pool
    regions (``plan.sources[...].regions``, addresses as the source
    registered them), the local side from the target's ``regions`` — the
    target's ``Pool`` or ``Binding`` (or their messages), a list of
    ``Region`` messages, or a mapping ``region_id →`` address, ``(address,
    nbytes)`` or host buffer. ``local_dev`` is the local device id (0 for
    host memory, the GPU index for VRAM); ``remote_dev`` the sources', one
    for all or a mapping by participant id. Each batch's ``peer`` is its
    source's participant id; one batch is one NIXL transfer to one agent.
    """
    laddr, lsize = _local(plan, regions)
    out = []
    for i, b in enumerate(plan.batches):
        src = plan.batch_source(i)
        saddr = np.array([r.address for r in src.regions], dtype=_U64)
        ssize = np.array([r.nbytes for r in src.regions], dtype=_U64)
        count, sstride, rstride = _runs_of(b, "source_stride")
        si = b.source_region_index.astype(np.int64)
        ri = b.region_index.astype(np.int64)
        name = _entry_name(i, b.run_count is not None)
        _check(name, b.source_offset, b.nbytes, count, sstride, ssize[si],
               "source")
        _check(name, b.region_offset, b.nbytes, count, rstride, lsize[ri],
               "target")
        ldev = np.full(len(b), local_dev, dtype=_U64)
        rdev = np.full(len(b), _dev(remote_dev, src.participant_id),
                       dtype=_U64)
        out.append(NixlBatch(
            i, src.participant_id,
            _rows(laddr[ri] + b.region_offset, b.nbytes, ldev, rstride,
                  count, strided),
            _rows(saddr[si] + b.source_offset, b.nbytes, rdev, sstride,
                  count, strided),
            source=src))
    return out


PartsLike = Union[Mapping[str, Sequence[Any]],
                  Callable[[Any, int], Any]]


def load_descs(plan: LoadPlan, parts: PartsLike, regions: RegionsLike, *,
               strided: bool = False, local_dev: int = 0,
               remote_dev: int = 0) -> List[NixlBatch]:
    """The NIXL descriptor lists of a load plan (SPEC §2.2): the remote
    side from the Parts' memory at the store that serves them, the local
    side from the reader's ``regions`` (as :func:`transfer_descs`).

    ``parts`` maps each hit page's key to its Parts in Part order, or is a
    callable ``(page_source, part_index)`` (``page_source`` a
    ``plan.pages`` entry); each Part is an address, ``(address, nbytes)``,
    ``(address, nbytes, dev)``, ``(address, nbytes, dev, peer)``, a
    ``Region``-like object or a host buffer. A batch of a load plan may read
    Parts served by several peers; its rows are split per peer (in the
    order the batch first reads them), so each returned NixlBatch is one
    NIXL transfer to one agent, ``peer`` naming it.
    """
    laddr, lsize = _local(plan, regions)
    # Every (page, part) the plan reads, looked up once.
    cache: Dict[Tuple[int, int], Tuple[int, int, int, str]] = {}

    def part_memory(page: int, part: int) -> Tuple[int, int, int, str]:
        key = (page, part)
        if key not in cache:
            source = plan.pages[page]
            what = "page %s part %d" % (source.page_key, part)
            if callable(parts):
                value = parts(source, part)
            else:
                per_page = parts[source.page_key]
                if part >= len(per_page):
                    raise KeyError("%s: no such Part given" % what)
                value = per_page[part]
            addr, size = _memory(value, what)
            dev = remote_dev
            peer = ""
            if isinstance(value, tuple) and len(value) >= 3:
                dev = int(value[2])
            if isinstance(value, tuple) and len(value) >= 4:
                peer = str(value[3])
            cache[key] = (addr, size, dev, peer)
        return cache[key]

    out = []
    for i, b in enumerate(plan.batches):
        if len(b) == 0:
            continue
        pairs = np.stack([b.page_index, b.part_index], axis=1)
        keys, inverse = np.unique(pairs, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        mem = [part_memory(int(p), int(q)) for p, q in keys.tolist()]
        paddr = np.array([m[0] for m in mem], dtype=_U64)[inverse]
        psize = np.array([m[1] for m in mem], dtype=_U64)[inverse]
        pdev = np.array([m[2] for m in mem], dtype=_U64)[inverse]
        peers = [m[3] for m in mem]
        count, pstride, rstride = _runs_of(b, "part_stride")
        ri = b.region_index.astype(np.int64)
        name = _entry_name(i, b.run_count is not None)
        _check(name, b.part_offset, b.nbytes, count, pstride, psize, "Part")
        _check(name, b.region_offset, b.nbytes, count, rstride, lsize[ri],
               "target")
        ldev = np.full(len(b), local_dev, dtype=_U64)
        row_peer = np.array([peers[j] for j in inverse.tolist()],
                            dtype=object)
        order: List[str] = []
        for p in row_peer.tolist():
            if p not in order:
                order.append(p)
        for peer in order:
            sel = np.flatnonzero(row_peer == peer)
            page = b.page_index[sel]
            part = b.part_index[sel]
            if not strided:
                entry, _ = _run_steps(count[sel])
                page, part = page[entry], part[entry]
            out.append(NixlBatch(
                i, peer,
                _rows(laddr[ri[sel]] + b.region_offset[sel], b.nbytes[sel],
                      ldev[sel], rstride[sel], count[sel], strided),
                _rows(paddr[sel] + b.part_offset[sel], b.nbytes[sel],
                      pdev[sel], pstride[sel], count[sel], strided),
                page_index=page, part_index=part))
    return out


def descs(plan: Union[LoadPlan, TransferPlan], *args: Any, **kwargs: Any
          ) -> List[NixlBatch]:
    """:func:`transfer_descs` for a TransferPlan (``descs(plan, regions,
    ...)``), :func:`load_descs` for a LoadPlan (``descs(plan, parts,
    regions, ...)``)."""
    if isinstance(plan, TransferPlan):
        return transfer_descs(plan, *args, **kwargs)
    if isinstance(plan, LoadPlan):
        return load_descs(plan, *args, **kwargs)
    raise TypeError("descs: a LoadPlan or TransferPlan, not %r"
                    % type(plan))


__all__: Sequence[str] = ["NixlBatch", "descs", "load_descs",
                          "transfer_descs"]
