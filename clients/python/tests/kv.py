"""The workload the round-trip tests share: a TP4 writer holding logical KV
values in torch tensors, its Parts, and TP2·PP2 readers in vLLM's paged
shape or the contiguous shape.

Values are random bf16 bit patterns; everything is compared bit for bit
through int16 views.
"""

from typing import Dict, List, NamedTuple, Tuple

import numpy as np
import torch

import reshard

PAGES = 3


class Config(NamedTuple):
    name: str
    heads: int
    key_dim: int
    value_dim: int
    block: int  # reader block size; the page size is 16


CONFIGS = [
    # GQA: the writer's TP4 ranks hold one head each, readers two.
    Config("gqa", heads=4, key_dim=16, value_dim=16, block=8),
    # Two KV heads over TP4: each head on two writer ranks (replicas).
    Config("replicas", heads=2, key_dim=8, value_dim=8, block=32),
    # MLA: one latent head, no V, replicated on every rank of both sides.
    Config("mla", heads=1, key_dim=36, value_dim=0, block=32),
]
PAGE = 16


def descriptor(cfg: Config) -> reshard.Descriptor:
    return reshard.descriptor(4, dtype="bf16", itemsize=2, page_size=PAGE,
                              total_kv_heads=cfg.heads,
                              key_head_dim=cfg.key_dim,
                              value_head_dim=cfg.value_dim)


def components(desc) -> List[int]:
    return [reshard.KEY] + ([reshard.VALUE] if desc.value_head_dim else [])


def logical_values(desc, seed: int) -> Dict[Tuple[int, int], torch.Tensor]:
    """(layer, component) -> bf16 tensor [tokens, total heads, dim]."""
    g = torch.Generator().manual_seed(seed)
    tokens = PAGES * desc.page_size
    out = {}
    for layer in desc.global_layer_ids:
        for c in components(desc):
            dim = desc.key_head_dim if c == reshard.KEY else \
                desc.value_head_dim
            bits = torch.randint(-2 ** 15, 2 ** 15, (tokens,
                                                     desc.total_kv_heads,
                                                     dim),
                                 dtype=torch.int16, generator=g)
            out[(layer, c)] = bits.view(torch.bfloat16)
    return out


def bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def writer_tensors(desc, part, values) -> Dict[Tuple[int, int], torch.Tensor]:
    """The writer participant's own contiguous NHD tensors (a copy of its
    heads of its layers)."""
    h0, hn = part.head_start, part.head_count
    return {(layer, c): values[(layer, c)][:, h0:h0 + hn, :].clone()
            for layer in part.layer_ids for c in components(desc)}


def parts_from_views(layout, writer, part_writers, values
                     ) -> List[List[np.ndarray]]:
    """Every Part of every page, filled by the participant that writes it
    from its own tensors through reshard.part_views."""
    desc = layout.descriptor
    parts = reshard.new_parts(layout, PAGES)
    for i, shard in enumerate(reshard.shards(layout)):
        who = reshard.find_part(writer, part_writers[i])
        mine = writer_tensors(desc, who, values)
        assert who.head_start == shard.head_start
        for p in range(PAGES):
            views = reshard.part_views(layout, parts[p][i], i)
            for (layer, c), view in views.items():
                rows = mine[(layer, c)][p * PAGE:(p + 1) * PAGE]
                view[...] = bits(rows)
    return parts


def reader_memory(desc, part, memory: str, block: int, seed: int):
    """Zeroed torch tensors for one reader participant, in ``memory``
    ("paged": vLLM's [2, blocks, block, heads, dim] per layer, or
    [blocks, block, dim] for MLA; "contiguous": [tokens, heads, dim] per
    layer and component, or [tokens, dim] for MLA, with spare tokens at the
    end) and the binding built from them."""
    tokens = PAGES * desc.page_size
    hn = part.head_count
    mla = desc.value_head_dim == 0
    g = np.random.default_rng(seed)
    b = reshard.BindingBuilder(desc, part, num_tokens=tokens)
    tensors = {}
    if memory == "paged":
        needed = -(-tokens // block)
        nblocks = needed + 3
        for layer in part.layer_ids:
            table = g.permutation(nblocks)[:needed]
            shape = (nblocks, block, desc.key_head_dim) if mla else \
                (2, nblocks, block, hn, desc.key_head_dim)
            t = torch.zeros(shape, dtype=torch.bfloat16)
            b.add_paged(t, layer=layer, block_table=table)
            tensors[layer] = (t, table)
    elif memory == "contiguous":
        for layer in part.layer_ids:
            for c in components(desc):
                dim = desc.key_head_dim if c == reshard.KEY else \
                    desc.value_head_dim
                shape = (tokens + 5, dim) if mla else (tokens + 5, hn, dim)
                t = torch.zeros(shape, dtype=torch.bfloat16)
                b.add_contiguous(t, layer=layer, component=c)
                tensors[(layer, c)] = t
    else:
        raise ValueError(memory)
    return b.build(), tensors


def reader_values(desc, memory: str, block: int, tensors):
    """(layer, component) -> (values held for tokens [0, tokens) as
    [tokens, heads, dim] uint16, the bytes outside them as uint16)."""
    tokens = PAGES * desc.page_size
    mla = desc.value_head_dim == 0
    out = {}
    if memory == "paged":
        for layer, (t, table) in tensors.items():
            for c in components(desc):
                pool = t if mla else t[c - reshard.KEY]
                tok = np.arange(tokens)
                held = pool[torch.from_numpy(table[tok // block]),
                            torch.from_numpy(tok % block)]
                if mla:
                    held = held[:, None, :]
                unused = np.ones(pool.shape[0], dtype=bool)
                unused[table] = False
                rest = bits(pool[torch.from_numpy(unused)])
                # The unused tail of the last block stays zero too.
                last = int(table[(tokens - 1) // block])
                tail = bits(pool[last, (tokens - 1) % block + 1:])
                out[(layer, c)] = (bits(held), np.concatenate(
                    [rest.reshape(-1), tail.reshape(-1)]))
    else:
        for (layer, c), t in tensors.items():
            held = t[:tokens] if not mla else t[:tokens, None, :]
            out[(layer, c)] = (bits(held), bits(t[tokens:]).reshape(-1))
    return out
