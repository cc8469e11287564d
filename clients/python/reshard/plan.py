"""Plans as numpy columns (SPEC §2.2, §2.5).

``LoadPlan`` wraps a ``PlanLoadResponse`` and ``StorePlan`` a
``PlanStoreResponse``. Every batch's columns become ``uint64`` arrays once,
when the plan is made; strided runs (SPEC §2.2 step 7) are kept as the
daemon sent them and expanded on request, with array arithmetic rather than
a Python loop over copies.
"""

from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

import grpc
import numpy as np

from .errors import ReshardError

_U64 = np.uint64
_COLUMNS = ("page_index", "part_index", "part_offset", "region_index",
            "region_offset", "nbytes")
_RUN_COLUMNS = ("run_count", "part_stride", "region_stride")


def _array(values: Any) -> np.ndarray:
    return np.fromiter(values, dtype=_U64, count=len(values))


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
        counts = self.run_count.astype(np.int64)
        entry = np.repeat(np.arange(len(counts)), counts)
        first = np.cumsum(counts) - counts
        k = (np.arange(int(counts.sum())) - np.repeat(first, counts))
        k = k.astype(_U64)
        return Copies(
            self.batch[entry], self.page_index[entry], self.part_index[entry],
            self.part_offset[entry] + k * self.part_stride[entry],
            self.region_index[entry],
            self.region_offset[entry] + k * self.region_stride[entry],
            self.nbytes[entry])


def _batch_copies(index: int, rb: Any, method: str) -> Copies:
    cols = [_array(getattr(rb, name)) for name in _COLUMNS]
    n = cols[-1].shape[0]
    for name, col in zip(_COLUMNS, cols):
        if col.shape[0] != n:
            raise _invalid(method, "batches[%d].%s has %d entries, nbytes %d"
                           % (index, name, col.shape[0], n))
    runs = [_array(getattr(rb, name)) for name in _RUN_COLUMNS]
    if all(r.shape[0] == 0 for r in runs):
        run_cols: List[Optional[np.ndarray]] = [None, None, None]
    else:
        for name, col in zip(_RUN_COLUMNS, runs):
            if col.shape[0] != n:
                raise _invalid(method, "batches[%d].%s has %d entries, "
                               "nbytes %d" % (index, name, col.shape[0], n))
        if n and int(runs[0].min()) == 0:
            raise _invalid(method, "batches[%d] has a run of 0 copies"
                           % index)
        run_cols = list(runs)
    batch = np.full(n, index, dtype=_U64)
    copies = Copies(batch, *cols, *run_cols)
    if copies.bytes != rb.bytes:
        raise _invalid(method, "batches[%d].bytes is %d, its copies move %d"
                       % (index, rb.bytes, copies.bytes))
    return copies


_BASE = ("batch",) + _COLUMNS


def _concat(batches: Sequence[Copies]) -> Copies:
    if not batches:
        empty = np.zeros(0, dtype=_U64)
        return Copies(*([empty] * len(_BASE)))
    base = [np.concatenate([getattr(b, f) for b in batches]) for f in _BASE]
    if all(b.run_count is None for b in batches):
        return Copies(*base)
    # Batches without runs among batches with runs: runs of 1, strides 0.
    runs = []
    for name, fill in zip(_RUN_COLUMNS, (1, 0, 0)):
        runs.append(np.concatenate([
            getattr(b, name) if b.run_count is not None
            else np.full(len(b), fill, dtype=_U64) for b in batches]))
    return Copies(*base, *runs)


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
