"""Plans as numpy columns (SPEC §2.2, §2.5, §2.6).

``LoadPlan`` wraps a ``PlanLoadResponse``, ``StorePlan`` a
``PlanStoreResponse`` and ``TransferPlan`` a ``PlanTransferResponse``.
Every batch's columns become ``uint64`` arrays once, when the plan is made;
strided runs (SPEC §2.2 step 7) are kept as the daemon sent them and
expanded on request, with array arithmetic rather than a Python loop over
copies.
"""

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence, Tuple

import grpc
import numpy as np

from .errors import ReshardError

_U64 = np.uint64
_COLUMNS = ("page_index", "part_index", "part_offset", "region_index",
            "region_offset", "nbytes")
_RUN_COLUMNS = ("run_count", "part_stride", "region_stride")


def _array(values: Any) -> np.ndarray:
    return np.fromiter(values, dtype=_U64, count=len(values))


def _run_steps(run_count: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """For runs of ``run_count`` copies: each copy's entry and its step
    ``k`` within the run, in run order."""
    counts = run_count.astype(np.int64)
    entry = np.repeat(np.arange(len(counts)), counts)
    first = np.cumsum(counts) - counts
    k = (np.arange(int(counts.sum())) - np.repeat(first, counts))
    return entry, k.astype(_U64)


def _invalid(method: str, what: str) -> ReshardError:
    return ReshardError(grpc.StatusCode.INTERNAL,
                        "client: the server sent an invalid plan: " + what,
                        method)


@dataclass(frozen=True)
class Copies:
    """Entries of one or more batches as equal-length ``uint64`` columns.

    Entry ``i`` moves ``nbytes[i]`` bytes between Part ``part_index[i]``
    of page ``page_index[i]`` at ``part_offset[i]`` and region
    ``region_index[i]`` at ``region_offset[i]``. When runs are kept
    (``run_count`` is not None), entry ``i`` stands for ``run_count[i]``
    copies ``k`` at ``part_offset[i] + k·part_stride[i]`` and
    ``region_offset[i] + k·region_stride[i]``. ``batch`` gives each entry's
    batch index.
    """

    batch: np.ndarray
    page_index: np.ndarray
    part_index: np.ndarray
    part_offset: np.ndarray
    region_index: np.ndarray
    region_offset: np.ndarray
    nbytes: np.ndarray
    run_count: Optional[np.ndarray] = None
    part_stride: Optional[np.ndarray] = None
    region_stride: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.nbytes.shape[0])

    @property
    def bytes(self) -> int:
        """Bytes moved by all entries (runs counted in full)."""
        if self.run_count is None:
            return int(self.nbytes.sum(dtype=_U64))
        return int((self.nbytes * self.run_count).sum(dtype=_U64))

    def expanded(self) -> "Copies":
        """One entry per copy: every run of ``n`` becomes ``n`` copies, in
        run order. Without runs, the columns themselves."""
        if self.run_count is None:
            return self
        entry, k = _run_steps(self.run_count)
        return Copies(
            self.batch[entry], self.page_index[entry], self.part_index[entry],
            self.part_offset[entry] + k * self.part_stride[entry],
            self.region_index[entry],
            self.region_offset[entry] + k * self.region_stride[entry],
            self.nbytes[entry])


def _columns(index: int, rb: Any, columns: Sequence[str],
             run_columns: Sequence[str], method: str
             ) -> Tuple[List[np.ndarray], List[Optional[np.ndarray]]]:
    """A batch's copy columns (all of one length, the last being nbytes)
    and its run columns (None without runs), checked."""
    cols = [_array(getattr(rb, name)) for name in columns]
    n = cols[-1].shape[0]
    for name, col in zip(columns, cols):
        if col.shape[0] != n:
            raise _invalid(method, "batches[%d].%s has %d entries, nbytes %d"
                           % (index, name, col.shape[0], n))
    runs = [_array(getattr(rb, name)) for name in run_columns]
    if all(r.shape[0] == 0 for r in runs):
        return cols, [None] * len(run_columns)
    for name, col in zip(run_columns, runs):
        if col.shape[0] != n:
            raise _invalid(method, "batches[%d].%s has %d entries, "
                           "nbytes %d" % (index, name, col.shape[0], n))
    if n and int(runs[0].min()) == 0:
        raise _invalid(method, "batches[%d] has a run of 0 copies" % index)
    return cols, list(runs)


def _batch_copies(index: int, rb: Any, method: str) -> Copies:
    cols, run_cols = _columns(index, rb, _COLUMNS, _RUN_COLUMNS, method)
    batch = np.full(cols[-1].shape[0], index, dtype=_U64)
    copies = Copies(batch, *cols, *run_cols)
    if copies.bytes != rb.bytes:
        raise _invalid(method, "batches[%d].bytes is %d, its copies move %d"
                       % (index, rb.bytes, copies.bytes))
    return copies


_BASE = ("batch",) + _COLUMNS


def _concat(batches: Sequence[Any], cls: Any = None,
            base_fields: Sequence[str] = _BASE,
            run_fields: Sequence[str] = _RUN_COLUMNS) -> Any:
    cls = Copies if cls is None else cls
    if not batches:
        empty = np.zeros(0, dtype=_U64)
        return cls(*([empty] * len(base_fields)))
    base = [np.concatenate([getattr(b, f) for b in batches])
            for f in base_fields]
    if all(b.run_count is None for b in batches):
        return cls(*base)
    # Batches without runs among batches with runs: runs of 1, strides 0.
    runs = []
    for name, fill in zip(run_fields, (1, 0, 0)):
        runs.append(np.concatenate([
            getattr(b, name) if b.run_count is not None
            else np.full(len(b), fill, dtype=_U64) for b in batches]))
    return cls(*base, *runs)


class _Plan:
    method = ""

    def __init__(self, response: Any, region_ids: Sequence[str],
                 page_count: int) -> None:
        self.response = response
        self.region_ids: List[str] = list(region_ids)
        self.batches: List[Copies] = [
            _batch_copies(i, rb, self.method)
            for i, rb in enumerate(response.batches)]
        self.stats = response.stats
        for i, b in enumerate(self.batches):
            if len(b) and int(b.page_index.max()) >= page_count:
                raise _invalid(self.method, "batches[%d] names page %d of %d"
                               % (i, int(b.page_index.max()), page_count))
            if len(b) and int(b.region_index.max()) >= len(self.region_ids):
                raise _invalid(self.method, "batches[%d] names region %d of "
                               "%d" % (i, int(b.region_index.max()),
                                       len(self.region_ids)))

    @property
    def has_runs(self) -> bool:
        """True when the daemon folded copies into strided runs."""
        return any(b.run_count is not None for b in self.batches)

    def copies(self, *, expand_runs: bool = True) -> Copies:
        """All batches' entries, concatenated in response order; with
        ``expand_runs`` (the default) one entry per copy."""
        cat = _concat(self.batches)
        return cat.expanded() if expand_runs else cat

    @property
    def operations(self) -> int:
        """Copies in the plan (runs counted in full)."""
        return sum(int(b.run_count.sum()) if b.run_count is not None
                   else len(b) for b in self.batches)

    @property
    def bytes(self) -> int:
        return sum(b.bytes for b in self.batches)


class LoadPlan(_Plan):
    """A reader's plan: copies from stored Parts into registered memory.

    ``pages`` are the ``PageSource`` of each hit page (``hit_pages`` of
    them), ``region_ids`` name the regions ``region_index`` refers to,
    ``batches`` hold each batch's :class:`Copies`, ``response`` is the
    ``PlanLoadResponse`` itself.
    """

    method = "PlanLoad"

    def __init__(self, response: Any) -> None:
        if response.hit_pages != len(response.pages):
            raise _invalid(self.method, "hit_pages %d but %d pages"
                           % (response.hit_pages, len(response.pages)))
        super().__init__(response, response.region_ids, len(response.pages))
        self.pages = list(response.pages)
        self.hit_pages: int = response.hit_pages
        self.placement_id: str = response.placement_id


class StorePlan(_Plan):
    """A writer's plan: copies from its registered memory into the Parts
    it writes (``part_indexes``), for pages ``0 .. page_count-1``. The
    columns keep their names; the direction is region → Part."""

    method = "PlanStore"

    def __init__(self, response: Any, page_count: int) -> None:
        super().__init__(response, response.region_ids, page_count)
        self.page_count = page_count
        self.part_indexes: List[int] = list(response.part_indexes)
        self.layout_id: str = response.layout_id


_TRANSFER_COLUMNS = ("source_region_index", "source_offset", "region_index",
                     "region_offset", "nbytes")
_TRANSFER_RUN_COLUMNS = ("run_count", "source_stride", "region_stride")
_TRANSFER_BASE = ("batch", "source_index") + _TRANSFER_COLUMNS


@dataclass(frozen=True)
class TransferCopies:
    """Entries of one or more transfer batches as equal-length ``uint64``
    columns (SPEC §2.6).

    Entry ``i`` moves ``nbytes[i]`` bytes from region
    ``source_region_index[i]`` of source ``source_index[i]`` (an index into
    :attr:`TransferPlan.sources`; every entry of one batch has the batch's
    source) at ``source_offset[i]`` to the target's region
    ``region_index[i]`` (into :attr:`TransferPlan.region_ids`) at
    ``region_offset[i]``. When runs are kept (``run_count`` is not None),
    entry ``i`` stands for ``run_count[i]`` copies ``k`` at
    ``source_offset[i] + k·source_stride[i]`` and ``region_offset[i] +
    k·region_stride[i]``. ``batch`` gives each entry's batch index.
    """

    batch: np.ndarray
    source_index: np.ndarray
    source_region_index: np.ndarray
    source_offset: np.ndarray
    region_index: np.ndarray
    region_offset: np.ndarray
    nbytes: np.ndarray
    run_count: Optional[np.ndarray] = None
    source_stride: Optional[np.ndarray] = None
    region_stride: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return int(self.nbytes.shape[0])

    @property
    def bytes(self) -> int:
        """Bytes moved by all entries (runs counted in full)."""
        if self.run_count is None:
            return int(self.nbytes.sum(dtype=_U64))
        return int((self.nbytes * self.run_count).sum(dtype=_U64))

    def expanded(self) -> "TransferCopies":
        """One entry per copy: every run of ``n`` becomes ``n`` copies, in
        run order. Without runs, the columns themselves."""
        if self.run_count is None:
            return self
        entry, k = _run_steps(self.run_count)
        return TransferCopies(
            self.batch[entry], self.source_index[entry],
            self.source_region_index[entry],
            self.source_offset[entry] + k * self.source_stride[entry],
            self.region_index[entry],
            self.region_offset[entry] + k * self.region_stride[entry],
            self.nbytes[entry])


def _transfer_batch(index: int, tb: Any, sources: Sequence[Any],
                    region_count: int, method: str) -> TransferCopies:
    cols, run_cols = _columns(index, tb, _TRANSFER_COLUMNS,
                              _TRANSFER_RUN_COLUMNS, method)
    n = cols[-1].shape[0]
    if tb.source_index >= len(sources):
        raise _invalid(method, "batches[%d].source_index %d is not below "
                       "%d sources" % (index, tb.source_index, len(sources)))
    source = sources[tb.source_index]
    if n and int(cols[0].max()) >= len(source.regions):
        raise _invalid(method, "batches[%d] names region %d of source %s, "
                       "which has %d" % (index, int(cols[0].max()),
                                         source.participant_id,
                                         len(source.regions)))
    if n and int(cols[2].max()) >= region_count:
        raise _invalid(method, "batches[%d] names region %d of %d"
                       % (index, int(cols[2].max()), region_count))
    batch = np.full(n, index, dtype=_U64)
    which = np.full(n, tb.source_index, dtype=_U64)
    copies = TransferCopies(batch, which, *cols, *run_cols)
    if copies.bytes != tb.bytes:
        raise _invalid(method, "batches[%d].bytes is %d, its copies move %d"
                       % (index, tb.bytes, copies.bytes))
    return copies


class TransferPlan:
    """A transfer plan (SPEC §2.6): copies from the live source instance's
    registered pools into one target participant's memory.

    ``sources`` are the ``TransferSource`` messages of the participants it
    reads (``participant_id``, ``endpoint``, ``memory_id`` and the pool's
    ``regions`` with their addresses, in the pool's order), sorted by
    participant id; ``region_ids`` name the target's regions, in the order
    its binding or pool lists them; ``batches`` hold each batch's
    :class:`TransferCopies` — every batch reads one source
    (:meth:`batch_source`), so it is one call of a transfer engine to one
    peer; ``response`` is the ``PlanTransferResponse`` itself.
    """

    method = "PlanTransfer"

    def __init__(self, response: Any) -> None:
        self.response = response
        self.sources = list(response.sources)
        self.region_ids: List[str] = list(response.region_ids)
        self.batches: List[TransferCopies] = [
            _transfer_batch(i, tb, self.sources, len(self.region_ids),
                            self.method)
            for i, tb in enumerate(response.batches)]
        self.stats = response.stats
        self.source_placement_id: str = response.source_placement_id
        self.target_placement_id: str = response.target_placement_id

    def batch_source(self, batch: int) -> Any:
        """The ``TransferSource`` every copy of batch ``batch`` reads."""
        return self.sources[self.response.batches[batch].source_index]

    def source_region_ids(self, source: int) -> List[str]:
        """The region ids of source ``source`` (what
        ``source_region_index`` indexes), in the pool's order."""
        return [r.region_id for r in self.sources[source].regions]

    @property
    def has_runs(self) -> bool:
        """True when the daemon folded copies into strided runs."""
        return any(b.run_count is not None for b in self.batches)

    def copies(self, *, expand_runs: bool = True) -> TransferCopies:
        """All batches' entries, concatenated in response order; with
        ``expand_runs`` (the default) one entry per copy."""
        cat = _concat(self.batches, TransferCopies, _TRANSFER_BASE,
                      _TRANSFER_RUN_COLUMNS)
        return cat.expanded() if expand_runs else cat

    @property
    def operations(self) -> int:
        """Copies in the plan (runs counted in full)."""
        return sum(int(b.run_count.sum()) if b.run_count is not None
                   else len(b) for b in self.batches)

    @property
    def bytes(self) -> int:
        return sum(b.bytes for b in self.batches)
