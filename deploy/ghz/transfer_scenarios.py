"""The P/D transfer scenarios of SPEC §6 (PlanTransfer, §2.6) as gRPC
requests.

Each T row takes an S shape (tests/e2e/reshard_scenarios.py), a prefill
(source) layout and a decode (target) layout with their block sizes and
memory styles, and a token count. Both sides are pooled as
pooled_scenarios.make_pool lays pools out (bench/scenario.c's layout for
reshard-bench and reshard-roundtrip): one region per layer of twice the
blocks the span needs, vLLM NHD ``[2, blocks, block, heads, dim]``,
FlashInfer HND ``[blocks, 2, heads, block, dim]`` (T3's source), or an MLA
latent cache K only (T4). Every source participant has a pool; they share
one scattered block table (engines share one block table across a
replica's TP and PP ranks). The target is the decode placement's first
participant (participant-id order) with its own scattered table.

A client registers both placements (RegisterPlacement), every source pool
against the source placement and the target pool against the target
placement (RegisterMemory), then sends PlanTransfers that name all of them
by id and carry the two block tables. The ids are computed here (SPEC
§1.6, §1.5a), so request files can name them before any daemon answered.

Used by deploy/ghz/generate.py (ghz request data) and scripts/load.py
(``--method PlanTransfer``), so both send the same bytes.
"""

import collections
import random

import pooled_scenarios
import reshard_e2e as e
import reshard_scenarios as scenarios
from reshard_e2e import pb

Transfer = collections.namedtuple("Transfer", [
    "name", "shape", "source", "source_block", "source_order", "target",
    "target_block", "target_order", "tokens"])
# source / target: (dp, pp, tp)

TRANSFERS = collections.OrderedDict((t.name, t) for t in [
    Transfer("T1", "S1", (1, 1, 1), 16, "NHD", (1, 1, 2), 16, "NHD", 2048),
    Transfer("T2", "S2", (1, 1, 8), 16, "NHD", (1, 2, 4), 64, "NHD", 4096),
    Transfer("T3", "S3", (1, 1, 4), 16, "HND", (1, 1, 16), 32, "NHD", 4096),
    Transfer("T4", "S4", (1, 1, 8), 64, "NHD", (1, 2, 4), 64, "NHD", 4096),
    Transfer("T5", "S5", (1, 2, 8), 128, "NHD", (1, 4, 8), 128, "NHD",
             32768),
])


def variant_name(name, tokens=None):
    """"T5" for the SPEC's token count, "T1-128" for 128 tokens."""
    spec = TRANSFERS[name]
    if tokens is None or tokens == spec.tokens:
        return name
    return "%s-%d" % (name, tokens)


def parse_variant(text):
    """"T5" -> ("T5", None); "T1-128" -> ("T1", 128). Raises KeyError or
    ValueError for anything else."""
    name, _, tokens = text.upper().partition("-")
    if name not in TRANSFERS:
        raise KeyError("unknown transfer scenario %r (one of %s)"
                       % (text, ", ".join(TRANSFERS)))
    return name, (int(tokens) if tokens else None)


def is_transfer(text):
    return text.upper().partition("-")[0] in TRANSFERS


def scattered(num_blocks, needed, seed):
    ids = list(range(num_blocks))
    random.Random(seed).shuffle(ids)
    return ids[:needed]


class TransferRequests:
    """Every message one transfer scenario needs."""

    def __init__(self, spec, tokens, seed):
        shape = scenarios.SCENARIOS[spec.shape]
        self.spec = spec
        self.name = variant_name(spec.name, tokens)
        self.tokens = tokens
        self.descriptor = e.make_descriptor(
            shape.layers, shape.heads, shape.key_dim, shape.value_dim,
            shape.page_size, dtype=shape.dtype, itemsize=shape.itemsize)
        self.source = e.make_placement(self.descriptor, *spec.source,
                                       prefix="%s-prefill" % spec.name,
                                       resource_id=shape.model,
                                       revision="r1")
        self.target = e.make_placement(self.descriptor, *spec.target,
                                       prefix="%s-decode" % spec.name,
                                       resource_id=shape.model,
                                       revision="r1")
        self.source_placement_id = e.canonical_placement_id(self.source)
        self.target_placement_id = e.canonical_placement_id(self.target)
        self.source_pools = []
        needed = 0
        for part in sorted(self.source.parts,
                           key=lambda p: p.participant_id):
            pool, needed = pooled_scenarios.make_pool(
                self.descriptor, part, spec.source_block, spec.source_order,
                tokens, "%s-memory" % part.participant_id)
            self.source_pools.append(pool)
        self.source_block_ids = scattered(
            self.source_pools[0].num_blocks, needed, seed)
        self.participant = sorted(self.target.parts,
                                  key=lambda p: p.participant_id)[0]
        self.target_pool, target_needed = pooled_scenarios.make_pool(
            self.descriptor, self.participant, spec.target_block,
            spec.target_order, tokens,
            "%s-memory" % self.participant.participant_id)
        self.target_block_ids = scattered(self.target_pool.num_blocks,
                                          target_needed, seed + 1)
        self.source_memory_ids = [
            pooled_scenarios.memory_id(p, self.source_placement_id)
            for p in self.source_pools]
        self.target_memory_id = pooled_scenarios.memory_id(
            self.target_pool, self.target_placement_id)
        self.register_source_placement = pb.RegisterPlacementRequest(
            placement=self.source)
        self.register_target_placement = pb.RegisterPlacementRequest(
            placement=self.target)
        self.register_source_memory = [
            pb.RegisterMemoryRequest(pool=p,
                                     placement_id=self.source_placement_id)
            for p in self.source_pools]
        self.register_target_memory = pb.RegisterMemoryRequest(
            pool=self.target_pool, placement_id=self.target_placement_id)
        self.plan_transfer = pb.PlanTransferRequest(
            source_placement_id=self.source_placement_id,
            source_memory_ids=self.source_memory_ids,
            source_block_ids=self.source_block_ids, token_count=tokens,
            target_placement_id=self.target_placement_id,
            pooled=pb.PooledMemory(memory_id=self.target_memory_id,
                                   block_ids=self.target_block_ids),
            operation_id="%s-transfer" % self.name)
        self.plan_transfer_runs = pb.PlanTransferRequest()
        self.plan_transfer_runs.CopyFrom(self.plan_transfer)
        self.plan_transfer_runs.runs = True
        self.plan_transfer_runs.operation_id = "%s-transfer-runs" % self.name

    def registrations(self):
        """[(method, request)] of the set-up, in order."""
        return ([("RegisterPlacement", self.register_source_placement),
                 ("RegisterPlacement", self.register_target_placement)]
                + [("RegisterMemory", m) for m in self.register_source_memory]
                + [("RegisterMemory", self.register_target_memory)])

    def explicit_plan_transfer(self, runs=False):
        """The same PlanTransfer with the target pool and table expanded
        into the explicit binding: the daemon must answer the same plan."""
        out = pb.PlanTransferRequest()
        out.CopyFrom(self.plan_transfer_runs if runs else self.plan_transfer)
        out.ClearField("pooled")
        out.binding.CopyFrom(pooled_scenarios.expand(
            self.target_pool, self.descriptor, self.participant,
            self.target_block_ids, self.tokens))
        return out

    def steps(self):
        """[(step, method, request or [requests])] in the order a client
        sends them; register-source-memory is one RegisterMemory per
        source pool."""
        return [("register-source-placement", "RegisterPlacement",
                 self.register_source_placement),
                ("register-target-placement", "RegisterPlacement",
                 self.register_target_placement),
                ("register-source-memory", "RegisterMemory",
                 self.register_source_memory),
                ("register-target-memory", "RegisterMemory",
                 self.register_target_memory),
                ("plantransfer", "PlanTransfer", self.plan_transfer),
                ("plantransfer-runs", "PlanTransfer",
                 self.plan_transfer_runs)]


def build(name, tokens=None, seed=7):
    """The requests of transfer scenario ``name`` ("T1".."T5") moving
    ``tokens`` tokens (default: the SPEC's count)."""
    spec = TRANSFERS[name]
    return TransferRequests(spec, spec.tokens if tokens is None else tokens,
                            seed)


def variants():
    """The transfer request sets deploy/ghz ships: T1 with 128 tokens (the
    SPEC §7 throughput goal) and T5 (the large transfer)."""
    return [("T1", 128), ("T5", None)]
