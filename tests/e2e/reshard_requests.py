"""Requests of the end-to-end tests (reshard_e2e.py re-exports all of
it): ``canonical_*`` recompute the SPEC §1.6 identities;
``make_descriptor`` / ``make_placement`` / ``make_binding`` build requests
for standard TP/PP/DP layouts and paged or contiguous reader memory."""

import hashlib
import json
import random

from reshard_env import FORMAT_NAMES, KEY, VALUE, pb


# ------------------------------------------------------------- identities --

def canonical_json(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True)


def digest(obj):
    return hashlib.sha256(canonical_json(obj).encode("utf-8")).hexdigest()


def descriptor_obj(d):
    return {"dtype": d.dtype, "global_layer_ids": sorted(d.global_layer_ids),
            "itemsize": d.itemsize, "key_head_dim": d.key_head_dim,
            "layout": "nhd", "page_size": d.page_size,
            "total_kv_heads": d.total_kv_heads,
            "value_head_dim": d.value_head_dim}


def canonical_shards(layout):
    return sorted(layout.shards,
                  key=lambda s: (sorted(s.layer_ids), s.head_start))


def layout_digest(layout):
    return digest({
        "descriptor": descriptor_obj(layout.descriptor),
        "object_format": FORMAT_NAMES[layout.format],
        "shards": [{"head_count": s.head_count, "head_start": s.head_start,
                    "key_suffix": s.key_suffix,
                    "layer_ids": sorted(s.layer_ids)}
                   for s in canonical_shards(layout)]})


def canonical_layout_id(layout):
    return "sha256:" + layout_digest(layout)


def canonical_model_domain(manifest):
    return digest({"descriptor": descriptor_obj(manifest.layout.descriptor),
                   "model_id": manifest.model_id,
                   "model_revision": manifest.model_revision,
                   "namespace": manifest.namespace,
                   "object_format": "PLHD",
                   "semantic_fingerprint": manifest.semantic_fingerprint})


def canonical_manifest_key(manifest):
    return "kv/%s/manifests/%s" % (canonical_model_domain(manifest),
                                   layout_digest(manifest.layout))


def _rank_obj(r):
    return {"dp": r.dp, "pp": r.pp, "tp": r.tp}


def canonical_placement_id(pl):
    parts = sorted(pl.parts, key=lambda p: p.participant_id)
    participants = [{"participant_id": p.participant_id,
                     "rank": _rank_obj(p.rank)} for p in parts]
    topology_id = "sha256:" + digest({
        "schema": "kv-cache-topology", "dp_size": pl.dp_size,
        "pp_size": pl.pp_size, "tp_size": pl.tp_size,
        "participants": participants})
    d = descriptor_obj(pl.descriptor)
    return "sha256:" + digest({
        "schema": "complete-kv-cache-placement", "resource_kind": "kv_cache",
        "resource_id": pl.resource_id, "revision": pl.revision,
        "placement_set_id": pl.placement_set_id,
        "topology": {"dp_size": pl.dp_size, "pp_size": pl.pp_size,
                     "tp_size": pl.tp_size, "topology_id": topology_id,
                     "participants": participants},
        "descriptor": d,
        "parts": [{"resource_id": pl.resource_id, "revision": pl.revision,
                   "placement_set_id": pl.placement_set_id,
                   "topology_id": topology_id,
                   "participant_id": p.participant_id,
                   "rank": _rank_obj(p.rank), "descriptor": d,
                   "layer_ids": sorted(p.layer_ids),
                   "head_start": p.head_start, "head_count": p.head_count,
                   "replica_ordinal": p.replica_ordinal,
                   "replica_count": p.replica_count or 1}
                  for p in parts]})


# ------------------------------------------------------- request builders --

def make_descriptor(layers, heads, key_dim, value_dim, page_size,
                    dtype="bf16", itemsize=2):
    if isinstance(layers, int):
        layers = list(range(layers))
    return pb.Descriptor(global_layer_ids=list(layers), dtype=dtype,
                         itemsize=itemsize, page_size=page_size,
                         total_kv_heads=heads, key_head_dim=key_dim,
                         value_head_dim=value_dim)


def split_layers(layers, pp):
    """Contiguous pipeline stages; the first len % pp stages get one more."""
    layers = sorted(layers)
    base, extra = divmod(len(layers), pp)
    out, at = [], 0
    for stage in range(pp):
        n = base + (1 if stage < extra else 0)
        out.append(layers[at:at + n])
        at += n
    return out


def head_share(heads, tp, t):
    """(head_start, head_count, replica_ordinal, replica_count) of TP rank t:
    contiguous head blocks when tp <= heads, replicated heads otherwise."""
    if tp <= heads:
        assert heads % tp == 0, (heads, tp)
        per = heads // tp
        return t * per, per, 0, 1
    assert tp % heads == 0, (heads, tp)
    r = tp // heads
    return t // r, 1, t % r, r


def make_placement(desc, dp, pp, tp, prefix, dp_ranks=None,
                   resource_id="res", revision="rev", placement_set_id=None):
    stages = split_layers(desc.global_layer_ids, pp)
    parts = []
    for d in (range(dp) if dp_ranks is None else dp_ranks):
        for p in range(pp):
            for t in range(tp):
                h0, hn, ordinal, count = head_share(desc.total_kv_heads, tp,
                                                    t)
                parts.append(pb.PlacementPart(
                    participant_id="%s-d%dp%dt%d" % (prefix, d, p, t),
                    rank=pb.Rank(dp=d, pp=p, tp=t), layer_ids=stages[p],
                    head_start=h0, head_count=hn, replica_ordinal=ordinal,
                    replica_count=count))
    return pb.Placement(resource_id=resource_id, revision=revision,
                        dp_size=dp, pp_size=pp, tp_size=tp, descriptor=desc,
                        parts=parts,
                        placement_set_id=placement_set_id or prefix + "-set")


def make_manifest(layout, namespace="e2e", model_id="model",
                  model_revision="rev", fingerprint="fp"):
    return pb.StoreManifest(namespace=namespace, model_id=model_id,
                            model_revision=model_revision,
                            semantic_fingerprint=fingerprint, layout=layout)


def component_widths(desc):
    """[(component, head bytes)]: K always, V only when value_head_dim > 0."""
    out = [(KEY, desc.key_head_dim * desc.itemsize)]
    if desc.value_head_dim > 0:
        out.append((VALUE, desc.value_head_dim * desc.itemsize))
    return out


def _round_up(n, a):
    return (n + a - 1) // a * a


class Binding:
    """A RuntimeBinding plus the sizes of its regions."""

    def __init__(self, message, region_sizes):
        self.message = message
        self.region_sizes = region_sizes  # region_id -> nbytes


def make_binding(desc, part, pages, mode="paged", block=None, order="NHD",
                 pad=False, seed=0, endpoint="e2e-endpoint"):
    """Reader memory for one participant over ``pages`` store pages.

    mode "paged": a block pool per layer (K pool then V pool), blocks of
    ``block`` tokens (default: the page size) placed at shuffled slots with
    spare slots left unused; one range per block per layer and component
    (per head too for order "HND"). mode "contiguous": one range per layer
    and component covering the whole token span. ``pad`` adds gaps between
    heads and tokens so copies cannot merge across them.
    """
    rnd = random.Random(seed)
    isz = desc.itemsize
    span = pages * desc.page_size
    block = block or desc.page_size
    h0, hn = part.head_start, part.head_count
    if mode == "contiguous":
        block = span
    nblocks = -(-span // block)
    slots = nblocks + (2 if mode == "paged" else 0)
    regions, ranges, sizes = [], [], {}
    address = 0x10000000  # regions are laid out apart in the address space
    for layer in sorted(part.layer_ids):
        rid = "%s/L%d" % (part.participant_id, layer)
        base = 0
        for comp, hb in component_widths(desc):
            head_pad = 2 * isz if pad else 0
            tok_pad = 3 * isz if pad else 0
            if order == "NHD":
                hs = hb + head_pad
                ts = hn * hs + tok_pad
                block_bytes = block * ts
            elif order == "HND":
                ts = hb + tok_pad
                hs = hb
                head_block = block * ts + head_pad
                block_bytes = hn * head_block
            else:
                raise ValueError(order)
            perm = list(range(slots))
            if mode == "paged":
                rnd.shuffle(perm)
            for j in range(nblocks):
                t0 = j * block
                count = min(block, span - t0)
                off = base + perm[j] * block_bytes
                if order == "NHD":
                    ranges.append(pb.BindingRange(
                        global_layer_id=layer, component=comp,
                        token_start=t0, token_count=count, head_start=h0,
                        head_count=hn, region_id=rid, offset_bytes=off,
                        token_stride_bytes=ts, head_stride_bytes=hs))
                else:
                    for k in range(hn):
                        ranges.append(pb.BindingRange(
                            global_layer_id=layer, component=comp,
                            token_start=t0, token_count=count,
                            head_start=h0 + k, head_count=1, region_id=rid,
                            offset_bytes=off + k * head_block,
                            token_stride_bytes=ts, head_stride_bytes=hs))
            base = _round_up(base + slots * block_bytes, 64)
        nbytes = base + 64  # a tail nothing may write
        sizes[rid] = nbytes
        regions.append(pb.Region(region_id=rid, address=address,
                                 nbytes=nbytes))
        address = _round_up(address + nbytes + 4096, 1 << 20)
    rnd.shuffle(ranges)
    msg = pb.RuntimeBinding(participant_id=part.participant_id,
                            endpoint=endpoint, regions=regions, ranges=ranges)
    return Binding(msg, sizes)
