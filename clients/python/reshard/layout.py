"""Parts as numpy (SPEC §1.3): their sizes, zeroed buffers, and views of
the values of one (layer, component) inside a Part, in any axis order.

A writer without PlanStore fills its Parts through these views; tests and
the reference executor read Parts through them.
"""

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._proto import pb
from .messages import KEY, VALUE

_UINTS = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def shards(layout: "pb.StoreLayout") -> List["pb.StoreShard"]:
    """The shards in canonical order: shard ``i`` is Part ``i``."""
    return sorted(layout.shards,
                  key=lambda s: (sorted(s.layer_ids), s.head_start))


def part_sizes(layout: "pb.StoreLayout") -> List[int]:
    """Bytes of each Part of a page."""
    d = layout.descriptor
    row = (d.key_head_dim + d.value_head_dim) * d.itemsize
    return [len(s.layer_ids) * d.page_size * s.head_count * row
            for s in shards(layout)]


def new_parts(layout: "pb.StoreLayout", pages: int = 1
              ) -> List[List[np.ndarray]]:
    """Zeroed Part buffers: ``out[page][part]`` is a uint8 array."""
    sizes = part_sizes(layout)
    return [[np.zeros(n, dtype=np.uint8) for n in sizes]
            for _ in range(pages)]


def element_dtype(itemsize: int) -> np.dtype:
    """An unsigned integer dtype of ``itemsize`` bytes (bit-exact copies
    and comparisons of any element type, bf16 included)."""
    if itemsize in _UINTS:
        return np.dtype(_UINTS[itemsize])
    return np.dtype("V%d" % itemsize)


def part_views(layout: "pb.StoreLayout", part: Any, part_index: int, *,
               dtype: Optional[Any] = None
               ) -> Dict[Tuple[int, int], np.ndarray]:
    """Views into the bytes of Part ``part_index`` (``part`` is anything
    with the buffer protocol: a numpy array, a bytearray): ``{(layer,
    component): array[page_size, heads, dim]}`` indexed by token within
    the page, head (relative to the shard's first head) and element, with
    the strides of the layout's format. Writable when ``part`` is.
    ``dtype`` defaults to an unsigned integer of the descriptor's
    itemsize."""
    d = layout.descriptor
    shard = shards(layout)[part_index]
    dt = np.dtype(dtype) if dtype is not None else element_dtype(d.itemsize)
    if dt.itemsize != d.itemsize:
        raise ValueError("dtype %s has itemsize %d, the descriptor %d"
                         % (dt, dt.itemsize, d.itemsize))
    raw = np.frombuffer(part, dtype=np.uint8) if not isinstance(
        part, np.ndarray) else part.reshape(-1).view(np.uint8)
    size = part_sizes(layout)[part_index]
    if raw.shape[0] != size:
        raise ValueError("part %d has %d bytes, the layout says %d"
                         % (part_index, raw.shape[0], size))
    layers = sorted(shard.layer_ids)
    L, P, H = len(layers), d.page_size, shard.head_count
    out: Dict[Tuple[int, int], np.ndarray] = {}
    k_block = L * P * H * d.key_head_dim * d.itemsize
    comps = [(KEY, d.key_head_dim, 0)]
    if d.value_head_dim:
        comps.append((VALUE, d.value_head_dim, k_block))
    for comp, dim, base in comps:
        hb = dim * d.itemsize
        if layout.format == pb.PLHD:
            ls, ts, hs = H * hb, L * H * hb, hb
        elif layout.format == pb.LPHD:
            ls, ts, hs = P * H * hb, H * hb, hb
        elif layout.format == pb.HPLD:
            ls, ts, hs = hb, L * hb, P * L * hb
        else:
            raise ValueError("layout has no store format")
        for li, layer in enumerate(layers):
            start = base + li * ls
            block = raw[start:]
            out[(layer, comp)] = np.lib.stride_tricks.as_strided(
                block.view(np.uint8), shape=(P, H, dim * d.itemsize),
                strides=(ts, hs, 1),
                writeable=raw.flags.writeable).view(dt)
    return out
