#!/usr/bin/env python3
"""Publish, register, plan, execute, verify: one prefix of KV pages
written by a TP4 writer and loaded by one rank of a TP2·PP2 reader whose
KV cache is vLLM's paged shape, against a running reshardd.

    ./scripts/run.sh                                 # in another terminal
    python3 clients/python/examples/load_prefix.py   # --help for options

The Part bytes are made on the CPU: by PlanStore when the daemon has it
(the writer's own plan, executed), otherwise through reshard.part_views.
Then the reader's plan runs with reshard.execute and every value the
reader holds is compared with the writer's.
"""

import argparse
import sys

import numpy as np

import reshard

try:
    import torch
except ImportError:  # numpy arrays work the same way
    torch = None


def zeros(shape):
    if torch is not None:
        return torch.zeros(shape, dtype=torch.bfloat16)
    return np.zeros(shape, dtype=np.float16)


def as_bits(t):
    """Values as uint16 numpy, bit for bit."""
    if torch is not None:
        return t.contiguous().view(torch.int16).numpy().view(np.uint16)
    return np.ascontiguousarray(t).view(np.uint16)


def from_bits(bits):
    if torch is not None:
        return torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)
    return bits.view(np.float16)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="127.0.0.1:50051")
    ap.add_argument("--format", default="LPHD", choices=["PLHD", "LPHD",
                                                         "HPLD"])
    ap.add_argument("--pages", type=int, default=4)
    ap.add_argument("--block-size", type=int, default=32,
                    help="the reader's block size (the store page is 16)")
    ap.add_argument("--participant", default="reader-dp0-pp1-tp1")
    ap.add_argument("--runs", action="store_true",
                    help="ask for the reader's plan in strided runs")
    args = ap.parse_args()

    desc = reshard.descriptor(8, dtype="bf16", itemsize=2, page_size=16,
                              total_kv_heads=8, key_head_dim=64)
    writer = reshard.placement(desc, tp=4, prefix="writer")
    reader = reshard.placement(desc, tp=2, pp=2, prefix="reader")
    tokens = args.pages * desc.page_size
    comps = [reshard.KEY, reshard.VALUE]

    # The logical KV values of the prefix: (layer, component) ->
    # [tokens, heads, dim]. A writer rank holds its heads of them.
    rng = np.random.default_rng(7)
    values = {(layer, c): rng.integers(0, 1 << 16, (tokens, 8, 64),
                                       dtype=np.uint16)
              for layer in desc.global_layer_ids for c in comps}

    with reshard.Client(args.target) as client:
        print("health:", client.health())
        up = client.plan_upload(writer, format=args.format)
        pub = client.publish_manifest(
            layout=up.layout, namespace="example", model_id="tiny-llama",
            model_revision="1", semantic_fingerprint="load_prefix")
        print("published %s (created=%s)\n  layout %s, %d Parts per page"
              % (pub.manifest_key, pub.created, pub.layout_id,
                 len(up.part_writers)))
        keys = ["example/prefix/%d" % i for i in range(args.pages)]
        added = client.register_pages(pub.manifest_key, keys)
        print("registered %d page keys (%d new)" % (len(keys), added))

        parts = reshard.new_parts(up.layout, args.pages)
        how = "PlanStore"
        for part in writer.parts:
            mine = {}
            b = reshard.BindingBuilder(desc, part, num_tokens=tokens)
            for (layer, c), v in values.items():
                h0, hn = part.head_start, part.head_count
                mine[(layer, c)] = from_bits(v[:, h0:h0 + hn].copy())
                b.add_contiguous(mine[(layer, c)], layer=layer, component=c)
            try:
                splan = client.plan_store(
                    manifest_key=pub.manifest_key, binding=b.build(),
                    page_count=args.pages, placement=writer)
                reshard.execute(splan, parts, b.build())
            except reshard.ReshardError as err:
                if err.code_name != "UNIMPLEMENTED":
                    raise
                how = "part_views (the daemon has no PlanStore)"
                for i, w in enumerate(up.part_writers):
                    if w != part.participant_id:
                        continue
                    for p in range(args.pages):
                        rows = slice(p * 16, (p + 1) * 16)
                        for (layer, c), view in reshard.part_views(
                                up.layout, parts[p][i], i).items():
                            view[...] = as_bits(mine[(layer, c)][rows])
        print("filled %d Parts per page with %s" % (len(up.part_writers),
                                                    how))

        # The reader: one paged pool per layer, [2, blocks, block, heads,
        # dim], blocks taken from a shuffled free list.
        part = reshard.find_part(reader, args.participant)
        b = reshard.BindingBuilder(desc, part, num_tokens=tokens)
        needed = -(-tokens // args.block_size)
        pools = {}
        for layer in part.layer_ids:
            table = rng.permutation(needed * 2)[:needed]
            pool = zeros((2, needed * 2, args.block_size, part.head_count,
                          64))
            b.add_paged(pool, layer=layer, block_table=table)
            pools[layer] = (pool, table)
        binding = b.build()
        plan = client.plan_load(model_domain=pub.model_domain,
                                page_keys=keys, binding=binding,
                                placement=reader, runs=args.runs,
                                preferred_layout_ids=[pub.layout_id])
        # Pages stored in several layouts are planned from the preferred
        # one, the layout whose Parts were filled above.
        assert all(p.layout_id == pub.layout_id for p in plan.pages)
        entries = plan.copies(expand_runs=False)
        print("plan for %s: %d pages hit, %d copies in %d batches (%d "
              "entries%s), %d bytes" % (
                  args.participant, plan.hit_pages, plan.operations,
                  len(plan.batches), len(entries),
                  " as runs" if plan.has_runs else "", plan.bytes))
        moved = reshard.execute(plan, parts, binding)

    bad = 0
    tok = np.arange(tokens)
    h0, hn = part.head_start, part.head_count
    for layer, (pool, table) in pools.items():
        for c in comps:
            pool_c = as_bits(pool[c - reshard.KEY])
            held = pool_c[table[tok // args.block_size],
                          tok % args.block_size]
            want = values[(layer, c)][:, h0:h0 + hn]
            bad += int((held != want).sum())
    if bad:
        print("MISMATCH: %d values differ" % bad)
        return 1
    print("verified: %d bytes executed, layers %s heads [%d, %d) equal "
          "the writer's values" % (moved, list(part.layer_ids), h0,
                                   h0 + hn))
    return 0


if __name__ == "__main__":
    sys.exit(main())
