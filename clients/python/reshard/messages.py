"""Keyword-argument builders for the request messages (SPEC §1, §3.3).

The protobuf classes themselves are re-exported by the package
(``reshard.Descriptor``, ``reshard.Placement`` ...); these functions build
the common shapes with defaults, so a caller does not assemble a placement
part by part.
"""

from typing import Iterable, List, Optional, Sequence, Union

from ._proto import pb

FormatLike = Union[str, int]
ComponentLike = Union[str, int]

KEY: int = pb.KEY
VALUE: int = pb.VALUE


def store_format(fmt: FormatLike) -> int:
    """``"PLHD"``, ``"LPHD"``, ``"HPLD"`` (any case) or the enum value."""
    if isinstance(fmt, str):
        try:
            return int(pb.StoreFormat.Value(fmt.upper()))
        except ValueError:
            raise ValueError("unknown store format %r (PLHD, LPHD or HPLD)"
                             % fmt) from None
    if fmt not in (pb.PLHD, pb.LPHD, pb.HPLD):
        raise ValueError("unknown store format %r" % fmt)
    return int(fmt)


def component(comp: ComponentLike) -> int:
    """``"K"``/``"KEY"``, ``"V"``/``"VALUE"`` or the enum value."""
    if isinstance(comp, str):
        name = {"K": "KEY", "V": "VALUE"}.get(comp.upper(), comp.upper())
        if name not in ("KEY", "VALUE"):
            raise ValueError("unknown component %r (K or V)" % comp)
        return int(pb.Component.Value(name))
    if comp not in (pb.KEY, pb.VALUE):
        raise ValueError("unknown component %r" % comp)
    return int(comp)


def descriptor(layers: Union[int, Iterable[int]], *, dtype: str,
               itemsize: int, page_size: int, total_kv_heads: int,
               key_head_dim: int,
               value_head_dim: Optional[int] = None) -> "pb.Descriptor":
    """A Descriptor. ``layers`` is a count (layers ``0..n-1``) or the
    global layer ids; ``value_head_dim`` defaults to ``key_head_dim`` (pass
    0 for a single-tensor MLA cache)."""
    ids = list(range(layers)) if isinstance(layers, int) else list(layers)
    return pb.Descriptor(
        global_layer_ids=sorted(ids), dtype=dtype, itemsize=itemsize,
        page_size=page_size, total_kv_heads=total_kv_heads,
        key_head_dim=key_head_dim,
        value_head_dim=(key_head_dim if value_head_dim is None
                        else value_head_dim))


def pipeline_stages(layers: Sequence[int], pp: int) -> List[List[int]]:
    """Contiguous pipeline stages of ``layers``; the first ``len % pp``
    stages get one layer more."""
    ordered = sorted(layers)
    base, extra = divmod(len(ordered), pp)
    out, at = [], 0
    for stage in range(pp):
        n = base + (1 if stage < extra else 0)
        out.append(ordered[at:at + n])
        at += n
    return out


def head_share(total_kv_heads: int, tp: int, tp_rank: int) -> tuple:
    """``(head_start, head_count, replica_ordinal, replica_count)`` of a TP
    rank: contiguous blocks of heads when ``tp <= total_kv_heads``, each
    head replicated on ``tp / total_kv_heads`` ranks otherwise (how vLLM
    and SGLang shard KV heads)."""
    if tp <= total_kv_heads:
        if total_kv_heads % tp:
            raise ValueError("%d KV heads do not split over TP %d"
                             % (total_kv_heads, tp))
        per = total_kv_heads // tp
        return tp_rank * per, per, 0, 1
    if tp % total_kv_heads:
        raise ValueError("TP %d is not a multiple of %d KV heads"
                         % (tp, total_kv_heads))
    r = tp // total_kv_heads
    return tp_rank // r, 1, tp_rank % r, r


def participant_id(prefix: str, dp: int, pp: int, tp: int) -> str:
    """The participant id :func:`placement` gives rank (dp, pp, tp)."""
    return "%s-dp%d-pp%d-tp%d" % (prefix, dp, pp, tp)


def placement(desc: "pb.Descriptor", *, tp: int = 1, pp: int = 1,
              dp: int = 1, prefix: str = "rank",
              resource_id: str = "kv-cache", revision: str = "1",
              placement_set_id: Optional[str] = None,
              dp_ranks: Optional[Iterable[int]] = None) -> "pb.Placement":
    """The standard placement of a DP×PP×TP deployment: contiguous
    pipeline stages of the descriptor's layers, heads split (or replicated)
    over TP, participants named ``{prefix}-dp{d}-pp{p}-tp{t}``.
    ``dp_ranks`` selects some DP ranks only (default: all)."""
    stages = pipeline_stages(desc.global_layer_ids, pp)
    parts = []
    for d in (range(dp) if dp_ranks is None else dp_ranks):
        for p in range(pp):
            for t in range(tp):
                h0, hn, ordinal, count = head_share(desc.total_kv_heads, tp,
                                                    t)
                parts.append(pb.PlacementPart(
                    participant_id=participant_id(prefix, d, p, t),
                    rank=pb.Rank(dp=d, pp=p, tp=t), layer_ids=stages[p],
                    head_start=h0, head_count=hn, replica_ordinal=ordinal,
                    replica_count=count))
    return pb.Placement(resource_id=resource_id, revision=revision,
                        dp_size=dp, pp_size=pp, tp_size=tp, descriptor=desc,
                        parts=parts,
                        placement_set_id=placement_set_id or prefix + "-set")


def find_part(placement_msg: "pb.Placement",
              participant: str) -> "pb.PlacementPart":
    """The placement part of ``participant``; KeyError when absent."""
    for part in placement_msg.parts:
        if part.participant_id == participant:
            return part
    raise KeyError("participant %r is not in the placement" % participant)


def manifest(layout: "pb.StoreLayout", *, namespace: str, model_id: str,
             model_revision: str,
             semantic_fingerprint: str) -> "pb.StoreManifest":
    """A StoreManifest for ``layout`` (typically PlanUpload's)."""
    return pb.StoreManifest(namespace=namespace, model_id=model_id,
                            model_revision=model_revision,
                            semantic_fingerprint=semantic_fingerprint,
                            layout=layout)


def limits(*, max_operations: int = 0, max_bytes: int = 0,
           max_batch_operations: int = 0, max_batch_bytes: int = 0,
           max_ranges: int = 0, max_validation_work: int = 0
           ) -> "pb.Limits":
    """Per-request limits; 0 keeps the server default (SPEC §2.3)."""
    return pb.Limits(max_operations=max_operations, max_bytes=max_bytes,
                     max_batch_operations=max_batch_operations,
                     max_batch_bytes=max_batch_bytes, max_ranges=max_ranges,
                     max_validation_work=max_validation_work)
