"""The standard scenarios of SPEC §6 as gRPC requests.

The same rows as bench/scenario.c (real model shapes, a paged reader
memory), built as the messages a client sends: the writer's
PublishManifest, the RegisterPages of the scenario's page keys and the
reader's PlanLoad, and a writer's PlanStore. Used by deploy/ghz/generate.py (ghz request data),
scripts/load.py (h2load) and scripts/scenario.py (a readable plan), so all
three send the same bytes.

Everything is built offline: the writer's layout is the SPEC §2.1 upload
plan computed here (the tests check it equals the daemon's PlanUpload), and
the manifest key is the SPEC §1.6 identity (reshard_e2e.canonical_*).
"""

import collections

import reshard_e2e as e
from reshard_e2e import pb

Scenario = collections.namedtuple("Scenario", [
    "name", "model", "layers", "heads", "key_dim", "value_dim", "dtype",
    "itemsize", "page_size", "writer", "reader", "format", "pages", "block",
    "order"])
# writer / reader: (dp, pp, tp)

SCENARIOS = collections.OrderedDict((s.name, s) for s in [
    Scenario("S1", "llama3-8b", 32, 8, 128, 128, "bf16", 2, 16, (1, 1, 1),
             (1, 1, 2), "PLHD", 128, 16, "NHD"),
    Scenario("S2", "llama3-70b", 80, 8, 128, 128, "bf16", 2, 64, (1, 1, 8),
             (1, 2, 4), "LPHD", 32, 64, "NHD"),
    Scenario("S3", "qwen2.5-72b", 80, 8, 128, 128, "bf16", 2, 32, (1, 1, 4),
             (1, 1, 16), "HPLD", 64, 16, "HND"),
    Scenario("S4", "deepseek-v3", 61, 1, 576, 0, "bf16", 2, 64, (1, 1, 8),
             (1, 2, 4), "PLHD", 64, 64, "NHD"),
    Scenario("S5", "llama3-405b", 126, 8, 128, 128, "fp8", 1, 128, (1, 2, 8),
             (1, 4, 8), "LPHD", 256, 128, "NHD"),
])

NAMESPACE = "reshard-scenarios"


def variant_name(name, pages=None):
    """"S1" for the SPEC's page count, "S1-8" for 8 pages."""
    spec = SCENARIOS[name]
    if pages is None or pages == spec.pages:
        return name
    return "%s-%d" % (name, pages)


def parse_variant(text):
    """"S1" -> ("S1", None); "S1-8" -> ("S1", 8). Raises KeyError/ValueError
    for anything else."""
    name, _, pages = text.upper().partition("-")
    if name not in SCENARIOS:
        raise KeyError("unknown scenario %r (one of %s)"
                       % (text, ", ".join(SCENARIOS)))
    return name, (int(pages) if pages else None)


def upload_layout(placement, fmt, dp_rank=None):
    """SPEC §2.1 offline: the layout a writer uploads in ``fmt``."""
    ranks = sorted({p.rank.dp for p in placement.parts})
    dp = ranks[0] if dp_rank is None else dp_rank
    parts = [p for p in placement.parts
             if p.rank.dp == dp and p.replica_ordinal == 0 and p.layer_ids]
    parts.sort(key=lambda p: (sorted(p.layer_ids), p.head_start))
    shards = []
    for p in parts:
        suffix = ("%d_%d" % (p.rank.tp, p.rank.pp) if placement.pp_size > 1
                  else "%d" % p.rank.tp)
        shards.append(pb.StoreShard(layer_ids=sorted(p.layer_ids),
                                    head_start=p.head_start,
                                    head_count=p.head_count,
                                    key_suffix=suffix))
    return pb.StoreLayout(descriptor=placement.descriptor,
                          format=e.FORMATS[fmt], shards=shards)


class Requests:
    """Every message one scenario needs, plus what a reader needs to make
    sense of the plan."""

    def __init__(self, spec, pages, participant_index, seed):
        self.spec = spec
        self.name = variant_name(spec.name, pages)
        self.pages = pages
        self.descriptor = e.make_descriptor(
            spec.layers, spec.heads, spec.key_dim, spec.value_dim,
            spec.page_size, dtype=spec.dtype, itemsize=spec.itemsize)
        self.writer = e.make_placement(self.descriptor, *spec.writer,
                                       prefix="%s-writer" % spec.name,
                                       resource_id=spec.model,
                                       revision="r1")
        self.reader = e.make_placement(self.descriptor, *spec.reader,
                                       prefix="%s-reader" % spec.name,
                                       resource_id=spec.model,
                                       revision="r1")
        self.layout = upload_layout(self.writer, spec.format)
        self.manifest = e.make_manifest(self.layout, namespace=NAMESPACE,
                                        model_id=spec.model,
                                        model_revision="r1",
                                        fingerprint="%s-kv" % spec.model)
        self.manifest_key = e.canonical_manifest_key(self.manifest)
        self.model_domain = e.canonical_model_domain(self.manifest)
        self.layout_id = e.canonical_layout_id(self.layout)
        self.page_keys = ["%s-page-%05d" % (spec.name, i)
                          for i in range(pages)]
        parts = sorted(self.reader.parts, key=lambda p: p.participant_id)
        self.participant = parts[participant_index]
        self.binding = e.make_binding(self.descriptor, self.participant,
                                      pages, mode="paged", block=spec.block,
                                      order=spec.order, seed=seed,
                                      endpoint="%s-reader-memory" % spec.name)
        self.publish = pb.PublishManifestRequest(manifest=self.manifest)
        self.register = pb.RegisterPagesRequest(
            manifest_key=self.manifest_key, page_keys=self.page_keys)
        self.plan_load = pb.PlanLoadRequest(
            model_domain=self.model_domain, page_keys=self.page_keys,
            placement=self.reader, binding=self.binding.message,
            operation_id="%s-load" % self.name)
        # The store side (SPEC §2.5): the first writer that writes a Part,
        # its memory in the reader's shape (blocks, axis order).
        self.store_participant = next(
            p for p in sorted(self.writer.parts,
                              key=lambda p: p.participant_id)
            if p.replica_ordinal == 0 and p.layer_ids)
        self.store_binding = e.make_binding(
            self.descriptor, self.store_participant, pages, mode="paged",
            block=spec.block, order=spec.order, seed=seed,
            endpoint="%s-writer-memory" % spec.name)
        self.plan_store = pb.PlanStoreRequest(
            manifest_key=self.manifest_key, placement=self.writer,
            binding=self.store_binding.message, page_count=pages,
            operation_id="%s-store" % self.name)
        # The same plan as strided runs (SPEC §2.2 step 7).
        self.plan_load_runs = pb.PlanLoadRequest()
        self.plan_load_runs.CopyFrom(self.plan_load)
        self.plan_load_runs.runs = True
        self.plan_load_runs.operation_id = "%s-load-runs" % self.name

    def steps(self):
        """[(step, method, request)] in the order a client sends them; the
        two PlanLoads plan the same copies, explicit and as runs."""
        return [("publish", "PublishManifest", self.publish),
                ("register", "RegisterPages", self.register),
                ("planload", "PlanLoad", self.plan_load),
                ("planload-runs", "PlanLoad", self.plan_load_runs),
                ("planstore", "PlanStore", self.plan_store)]


def build(name, pages=None, participant_index=0, seed=1):
    """The requests of scenario ``name`` ("S1".."S5") with ``pages`` pages
    (default: the SPEC's count), planned for the reader participant at
    ``participant_index`` in participant-id order."""
    spec = SCENARIOS[name]
    return Requests(spec, spec.pages if pages is None else pages,
                    participant_index, seed)


def variants():
    """The request sets deploy/ghz ships: every SPEC §6 row, plus S1 with 8
    pages (the SPEC §7 throughput goal)."""
    return [("S1", 8)] + [(name, None) for name in SCENARIOS]
