"""Strided runs (SPEC §2.2 step 7) through the package: kept as the daemon
sends them, expanded on request to exactly the explicit plan, and executed
to the same bytes. Skips only while the daemon leaves the run columns
empty."""

import numpy as np
import pytest

import kv
from test_roundtrip import FORMATS, load_and_check, publish


def sorted_copies(plan):
    """The plan's copies as rows, sorted; regions by id, since the two
    plans compared are made for bindings of different tensors whose
    regions may be listed in another order."""
    c = plan.copies()
    names = sorted(plan.region_ids)
    rank = np.array([names.index(r) for r in plan.region_ids],
                    dtype=np.uint64)
    cols = np.stack([c.batch, c.page_index, c.part_index, c.part_offset,
                     rank[c.region_index.astype(np.int64)], c.region_offset,
                     c.nbytes], axis=1)
    return cols[np.lexsort(cols.T[::-1])]


@pytest.mark.parametrize("memory", ["paged", "contiguous"])
@pytest.mark.parametrize("fmt", FORMATS)
def test_runs_expand_to_the_explicit_plan(client, fmt, memory):
    cfg = kv.CONFIGS[0]
    pub = publish(client, cfg, fmt, "runs-%s-%s" % (fmt, memory))
    parts = kv.parts_from_views(pub.layout, pub.writer, pub.part_writers,
                                pub.values)
    explicit = load_and_check(client, pub, parts, memory, cfg.block)
    folded = load_and_check(client, pub, parts, memory, cfg.block, runs=True)
    for plain, runs in zip(explicit, folded):
        assert runs.has_runs
        kept = runs.copies(expand_runs=False)
        assert kept.run_count is not None
        assert runs.stats.runs == len(kept)
        assert len(kept) <= len(plain.copies())
        assert runs.operations == plain.stats.operations
        assert np.array_equal(sorted_copies(runs), sorted_copies(plain))
