"""Parts produced by PlanStore from the writer's torch tensors, executed
with reshard.execute, are byte for byte the Parts reshard.part_views
builds, and readers load them (SPEC §2.5). Skips only while the daemon
answers UNIMPLEMENTED."""

import numpy as np
import pytest

import reshard
import kv
from test_roundtrip import FORMATS, load_and_check, publish


def store_plan(client, pub, part, runs):
    tokens = kv.PAGES * kv.PAGE
    tensors = kv.writer_tensors(pub.desc, part, pub.values)
    b = reshard.BindingBuilder(pub.desc, part, num_tokens=tokens)
    for (layer, c), t in tensors.items():
        b.add_contiguous(t, layer=layer, component=c)
    binding = b.build()
    plan = client.plan_store(manifest_key=pub.manifest_key, binding=binding,
                             page_count=kv.PAGES, placement=pub.writer,
                             runs=runs)
    return plan, binding


@pytest.mark.parametrize("runs", [False, True], ids=["copies", "runs"])
@pytest.mark.parametrize("cfg", kv.CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("fmt", FORMATS)
def test_plan_store_fills_parts(client, fmt, cfg, runs):
    pub = publish(client, cfg, fmt, "ps-%s-%s-%d" % (fmt, cfg.name, runs))
    expected = kv.parts_from_views(pub.layout, pub.writer, pub.part_writers,
                                   pub.values)
    parts = reshard.new_parts(pub.layout, kv.PAGES)
    written = set()
    for part in pub.writer.parts:
        plan, binding = store_plan(client, pub, part, runs)
        mine = [i for i, w in enumerate(pub.part_writers)
                if w == part.participant_id]
        assert plan.part_indexes == mine
        assert plan.layout_id.startswith("sha256:")
        if runs and mine:
            assert plan.has_runs
            assert plan.stats.runs == sum(len(b) for b in plan.batches)
        moved = reshard.execute(plan, parts, binding)
        assert moved == plan.stats.bytes
        written.update(mine)
    assert written == set(range(len(pub.part_writers)))
    for p in range(kv.PAGES):
        for i, want in enumerate(expected[p]):
            assert np.array_equal(parts[p][i], want), \
                "page %d part %d differs from part_views" % (p, i)
    load_and_check(client, pub, parts, "paged", cfg.block)
