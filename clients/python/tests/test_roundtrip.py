"""The same logical KV values written by a TP4 writer and read by a TP2·PP2
reader whose memory is CPU torch tensors, through the daemon's plans and
reshard.execute: every format, vLLM's paged shape and the contiguous
shape, head replicas, reader blocks of another size than the store page,
an MLA latent cache. Parts come from reshard.part_views here;
test_plan_store.py makes them with PlanStore."""

import numpy as np
import pytest

import reshard
import kv

FORMATS = ["PLHD", "LPHD", "HPLD"]
MEMORIES = ["paged", "contiguous"]


class Published:
    def __init__(self, client, cfg, fmt, tag):
        self.desc = kv.descriptor(cfg)
        self.writer = reshard.placement(self.desc, tp=4, prefix="writer")
        self.reader = reshard.placement(self.desc, tp=2, pp=2,
                                        prefix="reader")
        up = client.plan_upload(self.writer, format=fmt)
        self.layout = up.layout
        self.part_writers = list(up.part_writers)
        pub = client.publish_manifest(
            layout=up.layout, namespace="pytest", model_id=tag,
            model_revision="r1", semantic_fingerprint="fp")
        self.manifest_key = pub.manifest_key
        self.model_domain = pub.model_domain
        self.page_keys = ["%s/page-%d" % (tag, i) for i in range(kv.PAGES)]
        assert client.register_pages(pub.manifest_key, self.page_keys) == \
            kv.PAGES
        self.values = kv.logical_values(self.desc, seed=len(tag))


def publish(client, cfg, fmt, tag):
    return Published(client, cfg, fmt, tag)


def load_and_check(client, pub, parts, memory, block, runs=False):
    """Plans every reader participant, executes the plan into its torch
    tensors and compares them with the writer's values. Returns the plans."""
    plans = []
    by_key = dict(zip(pub.page_keys, parts))
    for i, part in enumerate(pub.reader.parts):
        binding, tensors = kv.reader_memory(pub.desc, part, memory, block,
                                            seed=i)
        plan = client.plan_load(model_domain=pub.model_domain,
                                page_keys=pub.page_keys, binding=binding,
                                placement=pub.reader, runs=runs,
                                operation_id="pytest")
        assert plan.hit_pages == kv.PAGES
        assert [p.page_key for p in plan.pages] == pub.page_keys
        moved = reshard.execute(plan, by_key, binding)
        assert moved == plan.stats.bytes == plan.bytes
        h0, hn = part.head_start, part.head_count
        covered = 0
        for (layer, c), (held, rest) in kv.reader_values(
                pub.desc, memory, block, tensors).items():
            want = kv.bits(pub.values[(layer, c)][:, h0:h0 + hn, :])
            assert np.array_equal(held, want), (
                "%s: layer %d component %d differs" % (part.participant_id,
                                                       layer, c))
            assert not rest.any(), "%s: bytes outside the binding written" \
                % part.participant_id
            covered += held.nbytes
        assert covered == moved
        plans.append(plan)
    return plans


@pytest.mark.parametrize("memory", MEMORIES)
@pytest.mark.parametrize("cfg", kv.CONFIGS, ids=lambda c: c.name)
@pytest.mark.parametrize("fmt", FORMATS)
def test_tp4_writer_to_tp2pp2_reader(client, fmt, cfg, memory):
    pub = publish(client, cfg, fmt, "rt-%s-%s-%s" % (fmt, cfg.name, memory))
    assert len(pub.part_writers) == len(reshard.shards(pub.layout))
    parts = kv.parts_from_views(pub.layout, pub.writer, pub.part_writers,
                                pub.values)
    assert cfg.block != kv.PAGE
    load_and_check(client, pub, parts, memory, cfg.block)


def test_hnd_contiguous_reader(client):
    """HND tensors [heads, tokens, dim]: one binding range per head."""
    cfg = kv.CONFIGS[0]
    pub = publish(client, cfg, "LPHD", "rt-hnd")
    parts = kv.parts_from_views(pub.layout, pub.writer, pub.part_writers,
                                pub.values)
    part = pub.reader.parts[0]
    tokens = kv.PAGES * kv.PAGE
    b = reshard.BindingBuilder(pub.desc, part, num_tokens=tokens)
    tensors = {}
    for layer in part.layer_ids:
        for c in kv.components(pub.desc):
            t = kv.torch.zeros((part.head_count, tokens, cfg.key_dim),
                               dtype=kv.torch.bfloat16)
            b.add_contiguous(t, layer=layer, component=c, order="HND")
            tensors[(layer, c)] = t
    binding = b.build()
    assert all(r.head_count == 1 for r in binding.message.ranges)
    plan = client.plan_load(model_domain=pub.model_domain,
                            page_keys=pub.page_keys, binding=binding,
                            placement=pub.reader)
    reshard.execute(plan, parts, binding)
    h0, hn = part.head_start, part.head_count
    for (layer, c), t in tensors.items():
        want = kv.bits(pub.values[(layer, c)][:, h0:h0 + hn, :])
        assert np.array_equal(kv.bits(t.transpose(0, 1)), want)
