"""Memory pools from tensors (SPEC §1.5a).

An engine allocates its KV memory once, as pools of fixed-size blocks, and
gives each request a block table. :class:`PoolBuilder` describes those
pools once, as the ``MemoryPool`` the daemon registers (``RegisterMemory``);
from then on a plan request names the pool (its ``memory_id``) and lists
the request's block ids, a few bytes per block instead of one binding range
per block, layer and component.

Tensors are described by their axes, one letter per dimension, as for
:class:`reshard.BindingBuilder`, plus ``L``:

====  ==================================================================
``K`` K/V axis of a tensor holding both (size 2: index 0 key, 1 value)
``L`` layer axis: index ``i`` holds ``layers[i]`` (default: the
      participant's layers in increasing order)
``B`` block axis
``T`` token slot within a block; without a ``B`` axis, every token of
      the pool (blocks of ``block_size`` consecutive slots)
``H`` KV head axis, the participant's whole head interval (absent: one head)
``D`` head dimension (contiguous)
====  ==================================================================

The engines' shapes have shortcuts: :meth:`PoolBuilder.add_vllm` (``[2, blocks,
block, heads, dim]`` per layer), :meth:`~PoolBuilder.add_flashinfer`
(``[blocks, 2, heads, block, dim]``), :meth:`~PoolBuilder.add_sglang`
(layer-first and page-first host pools) and :meth:`~PoolBuilder.add_mla`
(``[blocks, block, 1, 576]``). Strides come from the tensors, in bytes.
Regions are the tensors' allocations: tensors that are views of one
allocation (the same torch storage, the same numpy base array) share one
region, or the caller names the region.
"""

from typing import (Any, Dict, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple, Union)

import numpy as np

from ._proto import pb
from .binding import Binding
from .errors import PoolError
from .messages import KEY, VALUE, ComponentLike, component as _component
from .tensor import TensorMemory, host_bytes, tensor_memory

_LETTERS = "KLBTHD"
_NAMES = {KEY: "K", VALUE: "V"}
_U32 = (1 << 32) - 1

RegionLike = Union[str, "pb.Region"]
BlockIds = Union[Sequence[int], np.ndarray]


class _Entry(NamedTuple):
    """One PoolTensor in the making."""
    tensor: int  # index into the builder's added tensors
    layer: int
    comp: int
    offset: int  # bytes from the added tensor's element 0
    block_stride: int
    token_stride: int
    head_stride: int
    blocks: int  # blocks the tensor holds


class Pool:
    """A built pool: ``message`` is the ``MemoryPool`` to register (or to
    send inline), ``descriptor`` and ``part`` what it was built for,
    ``tensors`` maps each region id to the tensors it holds (kept alive
    here), ``tensor_names[i]`` names the tensor behind
    ``message.tensors[i]`` (to read the daemon's ``pool.tensors[i]``
    errors)."""

    def __init__(self, message: "pb.MemoryPool", descriptor: "pb.Descriptor",
                 part: "pb.PlacementPart", tensors: Dict[str, List[Any]],
                 tensor_names: List[str]) -> None:
        self.message = message
        self.descriptor = descriptor
        self.part = part
        self.tensors = tensors
        self.tensor_names = tensor_names

    @property
    def participant_id(self) -> str:
        return str(self.message.participant_id)

    @property
    def block_size(self) -> int:
        return int(self.message.block_size)

    @property
    def num_blocks(self) -> int:
        return int(self.message.num_blocks)

    def blocks_needed(self, num_tokens: int) -> int:
        """Blocks a request of ``num_tokens`` tokens needs."""
        return -(-num_tokens // self.block_size)

    def check_block_table(self, block_ids: BlockIds,
                          num_tokens: Optional[int] = None) -> List[int]:
        """The block table as a list, checked as the daemon checks it
        (every id below ``num_blocks``, none twice, enough blocks for
        ``num_tokens`` when given); PoolError naming the entry otherwise."""
        return check_block_table(block_ids, num_blocks=self.num_blocks,
                                 block_size=self.block_size,
                                 num_tokens=num_tokens)

    def pooled(self, block_ids: BlockIds, *,
               memory_id: Optional[str] = None) -> "pb.PooledMemory":
        """A ``PooledMemory``: the registered ``memory_id`` when given,
        else this pool inline, with the block table."""
        ids = self.check_block_table(block_ids)
        if memory_id is not None:
            return pb.PooledMemory(memory_id=memory_id, block_ids=ids)
        return pb.PooledMemory(inline_pool=self.message, block_ids=ids)

    def binding(self, block_ids: BlockIds, *, num_tokens: int) -> Binding:
        """The explicit :class:`reshard.Binding` equivalent to this pool
        with ``block_ids`` over tokens ``[0, num_tokens)``: one range per
        block, layer and component (per head too where the heads of a
        token are not one row, as in HND), the participant's whole head
        interval, the last block's tokens clipped to the span; the
        pool's regions, in the pool's order. A plan made for it equals the
        pooled plan byte for byte (SPEC §1.5a)."""
        message, owners = _expand(self.message, self.descriptor, self.part,
                                  block_ids, num_tokens)
        return Binding(message, self.tensors,
                       [self.tensor_names[i] for i in owners], num_tokens)

    def host_regions(self) -> Dict[str, np.ndarray]:
        """Each region as a writable uint8 numpy view of its memory. Only
        for tensors in CPU memory; the Pool keeps them alive."""
        return {r.region_id: host_bytes(r.address, r.nbytes)
                for r in self.message.regions}


def check_block_table(block_ids: BlockIds, *,
                      num_blocks: Optional[int] = None,
                      block_size: Optional[int] = None,
                      num_tokens: Optional[int] = None) -> List[int]:
    """A block table as a list of ints, checked as far as the arguments
    allow: ids are integers in ``[0, num_blocks)`` (below 2^32 without
    ``num_blocks``), none repeats, and there are at least
    ``ceil(num_tokens / block_size)`` of them. PoolError otherwise."""
    table = np.asarray(block_ids)
    if table.ndim != 1:
        table = table.reshape(-1)
    if table.size and table.dtype.kind not in "iu":
        raise PoolError("block_ids must be integers, not %s" % table.dtype)
    table = table.astype(np.int64)
    limit = _U32 + 1 if num_blocks is None else num_blocks
    bad = (table < 0) | (table >= limit)
    if bad.any():
        j = int(np.argmax(bad))
        raise PoolError("block_ids[%d] = %d is not a block of [0, %d)"
                        % (j, int(table[j]), limit))
    if table.size:
        order = np.argsort(table, kind="stable")
        same = np.flatnonzero(table[order][1:] == table[order][:-1])
        if same.size:
            a, b = int(order[same[0]]), int(order[same[0] + 1])
            raise PoolError("block %d appears twice in block_ids (entries "
                            "%d and %d)" % (int(table[a]), a, b))
    if num_tokens is not None and block_size is not None:
        needed = -(-num_tokens // block_size)
        if table.size < needed:
            raise PoolError("block_ids has %d blocks, tokens [0, %d) need "
                            "%d of %d tokens" % (table.size, num_tokens,
                                                 needed, block_size))
    return [int(b) for b in table.tolist()]


def _head_bytes(desc: "pb.Descriptor", comp: int) -> int:
    dim = desc.key_head_dim if comp == KEY else desc.value_head_dim
    return int(dim) * int(desc.itemsize)


def _expand(pool: "pb.MemoryPool", desc: "pb.Descriptor",
            part: "pb.PlacementPart", block_ids: BlockIds,
            num_tokens: int) -> Tuple["pb.RuntimeBinding", List[int]]:
    if num_tokens < 1:
        raise PoolError("num_tokens must be at least 1")
    if pool.block_size < 1:
        raise PoolError("the pool's block_size must be at least 1")
    table = check_block_table(block_ids, num_blocks=pool.num_blocks,
                              block_size=pool.block_size,
                              num_tokens=num_tokens)
    bs = int(pool.block_size)
    needed = -(-num_tokens // bs)
    h0, hn = int(part.head_start), int(part.head_count)
    ranges, owners = [], []
    for i, t in enumerate(pool.tensors):
        hb = _head_bytes(desc, t.component)
        ts, hs = int(t.token_stride_bytes), int(t.head_stride_bytes)
        # One range for all heads when the heads of a token are one row
        # (the daemon's row rule); one per head otherwise (HND).
        per_head = hn > 1 and (hs < hb or ts < (hn - 1) * hs + hb)
        for j in range(needed):
            t0 = j * bs
            count = min(bs, num_tokens - t0)
            off = int(t.offset_bytes) + table[j] * int(t.block_stride_bytes)
            if per_head:
                for k in range(hn):
                    ranges.append(pb.BindingRange(
                        global_layer_id=t.global_layer_id,
                        component=t.component, token_start=t0,
                        token_count=count, head_start=h0 + k, head_count=1,
                        region_id=t.region_id, offset_bytes=off + k * hs,
                        token_stride_bytes=ts, head_stride_bytes=hb))
                    owners.append(i)
            else:
                ranges.append(pb.BindingRange(
                    global_layer_id=t.global_layer_id, component=t.component,
                    token_start=t0, token_count=count, head_start=h0,
                    head_count=hn, region_id=t.region_id, offset_bytes=off,
                    token_stride_bytes=ts,
                    head_stride_bytes=hs if hn > 1 else hb))
                owners.append(i)
    message = pb.RuntimeBinding(participant_id=pool.participant_id,
                                endpoint=pool.endpoint,
                                regions=list(pool.regions), ranges=ranges)
    return message, owners


def expand_pool(pool: Union[Pool, "pb.MemoryPool"], block_ids: BlockIds, *,
                num_tokens: int,
                descriptor: Optional["pb.Descriptor"] = None,
                part: Optional["pb.PlacementPart"] = None
                ) -> "pb.RuntimeBinding":
    """The explicit ``RuntimeBinding`` a pool and a block table stand for
    over tokens ``[0, num_tokens)`` (see :meth:`Pool.binding`). A raw
    ``MemoryPool`` needs the ``descriptor`` and the participant's
    ``part`` (its head interval)."""
    if isinstance(pool, Pool):
        return pool.binding(block_ids, num_tokens=num_tokens).message
    if descriptor is None or part is None:
        raise ValueError("expanding a MemoryPool message needs descriptor "
                         "and part")
    return _expand(pool, descriptor, part, block_ids, num_tokens)[0]


def _allocation(obj: Any, mem: TensorMemory) -> Tuple[int, int]:
    """``(start, end)`` of the allocation ``obj`` is a view of: its torch
    storage, or the numpy array owning its data; its own span when neither
    is known."""
    span = (mem.address, mem.address + mem.extent)
    start = n = None
    try:
        if callable(getattr(obj, "untyped_storage", None)):
            s = obj.untyped_storage()
            start, n = int(s.data_ptr()), int(s.nbytes())
        elif callable(getattr(obj, "storage", None)) and \
                callable(getattr(obj, "data_ptr", None)):
            s = obj.storage()
            start, n = int(s.data_ptr()), int(s.nbytes())
        elif isinstance(obj, np.ndarray):
            root = obj
            while isinstance(root.base, np.ndarray):
                root = root.base
            rm = tensor_memory(root)
            if all(x >= 0 for x in rm.strides):
                start, n = rm.address, rm.extent
    except Exception:  # noqa: BLE001 - an exotic tensor: use its span
        start = None
    if start is None or n is None or start <= 0 or \
            not (start <= span[0] and span[1] <= start + n):
        return span
    return (start, start + n)


class PoolBuilder:
    """Collects the tensors of one participant's pool and builds it.

    ``descriptor`` is the model's Descriptor, ``part`` the participant's
    PlacementPart (``reshard.find_part(placement, participant_id)``).
    ``block_size`` (tokens per block) is needed only for tensors without a
    ``B`` axis (their token axis is cut into blocks of that size); with a
    ``B`` axis it is the ``T`` axis's size, and when given it must match.
    ``num_blocks`` defaults to the blocks every tensor holds (they must
    agree); when given, each tensor must hold at least that many and the
    first ``num_blocks`` are the pool's. ``endpoint`` is the transfer
    engine's address of this participant.
    """

    def __init__(self, descriptor: "pb.Descriptor",
                 part: "pb.PlacementPart", *,
                 block_size: Optional[int] = None,
                 num_blocks: Optional[int] = None,
                 endpoint: str = "") -> None:
        if block_size is not None and not 1 <= block_size <= _U32:
            raise PoolError("block_size must be in [1, 2^32), not %d"
                            % block_size)
        if num_blocks is not None and not 1 <= num_blocks <= _U32:
            raise PoolError("num_blocks must be in [1, 2^32), not %d"
                            % num_blocks)
        self.descriptor = descriptor
        self.part = part
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.endpoint = endpoint
        self._mem: List[TensorMemory] = []
        self._objs: List[Any] = []
        self._names: List[str] = []
        self._regions: List[Optional[RegionLike]] = []
        self._sizes: List[int] = []  # block size each tensor implies
        self._entries: List[_Entry] = []

    # -- constructors for whole engines --
    @classmethod
    def vllm(cls, descriptor: "pb.Descriptor", part: "pb.PlacementPart",
             kv_caches: Union[Sequence[Any], Mapping[int, Any]], *,
             layers: Optional[Sequence[int]] = None,
             num_blocks: Optional[int] = None,
             endpoint: str = "") -> "PoolBuilder":
        """A builder holding vLLM's ``kv_caches``: a list with one tensor
        per layer of this worker (``kv_caches[i]`` holds ``layers[i]``,
        default the participant's layers in increasing order) or a dict
        ``{global layer id: tensor}``. Each tensor is ``[2, num_blocks,
        block_size, heads, dim]`` (or an MLA cache, see
        :meth:`add_vllm`). ``.build()`` it (or add more first)."""
        b = cls(descriptor, part, num_blocks=num_blocks, endpoint=endpoint)
        for layer, t in _per_layer(part, kv_caches, layers):
            b.add_vllm(t, layer=layer)
        return b

    @classmethod
    def flashinfer(cls, descriptor: "pb.Descriptor",
                   part: "pb.PlacementPart",
                   kv_caches: Union[Sequence[Any], Mapping[int, Any]], *,
                   order: str = "HND", layers: Optional[Sequence[int]] = None,
                   num_blocks: Optional[int] = None,
                   endpoint: str = "") -> "PoolBuilder":
        """A builder holding FlashInfer paged caches, one per layer, as
        :meth:`vllm` takes them; see :meth:`add_flashinfer`."""
        b = cls(descriptor, part, num_blocks=num_blocks, endpoint=endpoint)
        for layer, t in _per_layer(part, kv_caches, layers):
            b.add_flashinfer(t, layer=layer, order=order)
        return b

    @classmethod
    def sglang(cls, descriptor: "pb.Descriptor", part: "pb.PlacementPart",
               kv_buffer: Any = None, *, k_buffer: Any = None,
               v_buffer: Any = None, layout: str = "layer_first",
               page_size: Optional[int] = None,
               layers: Optional[Sequence[int]] = None,
               num_blocks: Optional[int] = None,
               endpoint: str = "") -> "PoolBuilder":
        """A builder holding an SGLang host pool: ``kv_buffer`` with K and
        V inside (MHA: its first axis; MLA: the one latent buffer), or
        ``k_buffer`` and ``v_buffer``; see :meth:`add_sglang`.
        ``page_size`` is the pool's page (SGLang's ``page_size``), needed
        by the layouts whose token axis holds every token."""
        b = cls(descriptor, part, block_size=page_size,
                num_blocks=num_blocks, endpoint=endpoint)
        if kv_buffer is not None:
            if k_buffer is not None or v_buffer is not None:
                raise PoolError("give kv_buffer or k_buffer/v_buffer, not "
                                "both")
            b.add_sglang(kv_buffer, layout=layout, layers=layers)
        else:
            if k_buffer is None:
                raise PoolError("an SGLang pool needs kv_buffer or k_buffer")
            b.add_sglang(k_buffer, layout=layout, component=KEY,
                         layers=layers)
            if v_buffer is not None:
                b.add_sglang(v_buffer, layout=layout, component=VALUE,
                             layers=layers)
        return b

    # -- adding tensors --
    def add(self, tensor: Any, *, axes: str, layer: Optional[int] = None,
            layers: Optional[Sequence[int]] = None,
            component: Optional[ComponentLike] = None,
            region: Optional[RegionLike] = None,
            name: Optional[str] = None) -> "PoolBuilder":
        """Adds one tensor: one pool tensor per (layer, component) it
        holds.

        ``axes`` names its dimensions (module docstring). Without an ``L``
        axis it holds global layer ``layer``; with one, ``layers[i]`` at
        index ``i`` (default: the participant's layers in increasing
        order). Without a ``K`` axis, ``component`` says which it holds
        (default: key). ``region`` is a region id shared by the tensors
        given the same one (the region spans their allocations), or a
        ``Region`` message used as it is; by default tensors that are
        views of one allocation share a region. ``name`` labels the
        tensor in errors and region ids (default ``layer{L}.{K|V|KV}``,
        ``layers.{…}`` with an ``L`` axis).
        """
        mem = tensor_memory(tensor)
        desc, part = self.descriptor, self.part
        if name is None:
            what = "KV" if "K" in axes else _NAMES[
                KEY if component is None else _component(component)]
            name = ("layers.%s" % what if "L" in axes
                    else "layer%s.%s" % (layer, what))
        if name in self._names:
            raise PoolError("%s: a tensor of that name was added already"
                            % name)

        def fail(rule: str) -> PoolError:
            return PoolError("%s: %s" % (name, rule))

        if (len(set(axes)) != len(axes) or any(a not in _LETTERS
                                               for a in axes)
                or "T" not in axes or "D" not in axes):
            raise fail("axes %r must use each of K, L, B, T, H, D at most "
                       "once and include T and D" % axes)
        if len(axes) != len(mem.shape):
            raise fail("axes %r for a tensor of shape %s"
                       % (axes, list(mem.shape)))
        shape = dict(zip(axes, mem.shape))
        stride = dict(zip(axes, mem.strides))
        if mem.itemsize != desc.itemsize:
            raise fail("element size %d, the descriptor's itemsize is %d"
                       % (mem.itemsize, desc.itemsize))
        if mem.address <= 0:
            raise fail("the tensor's address is 0")
        if mem.address % mem.itemsize:
            raise fail("address %#x is not a multiple of the element size %d"
                       % (mem.address, mem.itemsize))
        for a in axes:
            if stride[a] < 0 or (stride[a] == 0 and shape[a] > 1):
                raise fail("axis %s has stride %d bytes: values would share "
                           "memory" % (a, stride[a]))
            if stride[a] % mem.itemsize:
                raise fail("axis %s has stride %d bytes, not a multiple of "
                           "the element size %d" % (a, stride[a],
                                                    mem.itemsize))
        # Layers.
        if "L" in axes:
            if layer is not None:
                raise fail("layer is given by the L axis (pass layers=)")
            ids = (sorted(part.layer_ids) if layers is None
                   else [int(x) for x in layers])
            if len(ids) != shape["L"]:
                raise fail("the L axis has %d layers, %s %s" % (
                    shape["L"], "layers= names" if layers is not None
                    else "participant %s owns" % part.participant_id,
                    ids))
        else:
            if layers is not None:
                raise fail("layers= needs an L axis (pass layer=)")
            if layer is None:
                raise fail("layer is required without an L axis")
            ids = [int(layer)]
        owned = set(part.layer_ids)
        for x in ids:
            if x not in owned:
                raise fail("layer %d is not owned by participant %s "
                           "(layers %s)" % (x, part.participant_id,
                                            sorted(owned)))
        if len(set(ids)) != len(ids):
            raise fail("layers %s name a layer twice" % ids)
        # Components.
        if "K" in axes:
            if component is not None:
                raise fail("component is given by the K axis")
            if shape["K"] != 2 or desc.value_head_dim == 0:
                raise fail("the K axis has size %d; it needs 2 and a "
                           "descriptor with value_head_dim > 0"
                           % shape["K"])
            comps = [KEY, VALUE]
        else:
            comps = [KEY if component is None else _component(component)]
        dims = {KEY: desc.key_head_dim, VALUE: desc.value_head_dim}
        for c in comps:
            if dims[c] == 0:
                raise fail("component V does not exist: value_head_dim is 0")
            if shape["D"] != dims[c]:
                raise fail("the D axis has %d elements, %s heads have %d"
                           % (shape["D"], _NAMES[c], dims[c]))
        if shape["D"] > 1 and stride["D"] != mem.itemsize:
            raise fail("the D axis is not contiguous (stride %d bytes)"
                       % stride["D"])
        # Heads: the participant's whole interval.
        hn = shape.get("H", 1)
        if hn != part.head_count:
            raise fail("%s, participant %s holds %d (heads [%d, %d)); a "
                       "pool tensor holds the whole interval" % (
                           "the H axis has %d heads" % hn if "H" in axes
                           else "no H axis (one head)",
                           part.participant_id, part.head_count,
                           part.head_start,
                           part.head_start + part.head_count))
        # Blocks.
        if "B" in axes:
            bs, blocks = shape["T"], shape["B"]
            if self.block_size is not None and bs != self.block_size:
                raise fail("blocks of %d tokens (the T axis), the pool's "
                           "block_size is %d" % (bs, self.block_size))
            block_stride = stride["B"]
        else:
            if self.block_size is None:
                raise fail("a tensor without a B axis needs the builder's "
                           "block_size (its T axis holds every token)")
            bs = self.block_size
            blocks = shape["T"] // bs
            if blocks < 1:
                raise fail("the T axis has %d tokens, fewer than one block "
                           "of %d" % (shape["T"], bs))
            block_stride = bs * stride["T"]
        if blocks < 1:
            raise fail("the B axis is empty")
        hb = int(shape["D"]) * mem.itemsize
        # Axes of count 1 are free (SPEC §1.5a); give them the extent of
        # the axes below, so the strides stay valid binding strides too.
        hs = stride["H"] if hn > 1 else hb
        ts = stride["T"] if bs > 1 else (hn - 1) * hs + hb
        if blocks == 1 and block_stride == 0:
            block_stride = (bs - 1) * ts + (hn - 1) * hs + hb

        index = len(self._mem)
        self._mem.append(mem)
        self._objs.append(tensor)
        self._names.append(name)
        self._regions.append(region)
        self._sizes.append(bs)
        for li, lid in enumerate(ids):
            base = li * stride["L"] if "L" in axes else 0
            for ci, c in enumerate(comps):
                off = base + (ci * stride["K"] if "K" in axes else 0)
                self._entries.append(_Entry(index, lid, c, off, block_stride,
                                            ts, hs, blocks))
        return self

    def add_vllm(self, kv_cache: Any, *, layer: int,
                 region: Optional[RegionLike] = None,
                 name: Optional[str] = None) -> "PoolBuilder":
        """vLLM's cache of one layer: ``[2, num_blocks, block_size, heads,
        dim]`` (K = ``[0]``, V = ``[1]``, NHD); with an MLA descriptor
        (``value_head_dim`` 0) ``[num_blocks, block_size, dim]`` or
        ``[num_blocks, block_size, 1, dim]``."""
        ndim = len(tensor_memory(kv_cache).shape)
        if self.descriptor.value_head_dim == 0:
            return self.add_mla(kv_cache, layer=layer, region=region,
                                name=name)
        if ndim != 5:
            raise PoolError("%s: a vLLM cache is [2, num_blocks, block_size, "
                            "heads, dim], not %d-dimensional"
                            % (name or "layer%d" % layer, ndim))
        return self.add(kv_cache, axes="KBTHD", layer=layer, region=region,
                        name=name)

    def add_flashinfer(self, kv_cache: Any, *, layer: int,
                       order: str = "HND",
                       region: Optional[RegionLike] = None,
                       name: Optional[str] = None) -> "PoolBuilder":
        """FlashInfer's paged cache of one layer: ``[num_blocks, 2, heads,
        block_size, dim]`` (``order="HND"``, K and V interleaved per
        block) or ``[num_blocks, 2, block_size, heads, dim]``
        (``"NHD"``)."""
        if order not in ("HND", "NHD"):
            raise PoolError("%s: order must be HND or NHD, not %r"
                            % (name or "layer%d" % layer, order))
        return self.add(kv_cache, axes="BKHTD" if order == "HND" else "BKTHD",
                        layer=layer, region=region, name=name)

    _SGLANG = {"layer_first": "LTHD", "page_first": "TLHD",
               "page_first_direct": "BLTHD", "page_head": "BHTLD"}

    def add_sglang(self, buffer: Any, *, layout: str = "layer_first",
                   component: Optional[ComponentLike] = None,
                   layers: Optional[Sequence[int]] = None,
                   region: Optional[RegionLike] = None,
                   name: Optional[str] = None) -> "PoolBuilder":
        """An SGLang host pool buffer (``MHATokenToKVPoolHost`` /
        ``MLATokenToKVPoolHost``), every layer of this participant:

        =====================  ================================  ==========
        ``layout``             one component (``component=``)    K/V inside
        =====================  ================================  ==========
        ``layer_first``        ``[layers, tokens, heads, dim]``  ``[2, …]``
        ``page_first``         ``[tokens, layers, heads, dim]``  ``[2, …]``
        ``page_first_direct``  ``[pages, layers, page, heads,    ``[2, …]``
                               dim]``
        ``page_head``          ``[pages, heads, page, layers,    ``[2, …]``
                               dim]``
        =====================  ================================  ==========

        ``tokens`` is ``pages × page`` (blocks of the builder's
        ``block_size``). MLA buffers have one head (``heads`` = 1) and no
        K/V axis."""
        if layout not in self._SGLANG:
            raise PoolError("%s: layout must be one of %s, not %r"
                            % (name or "sglang", ", ".join(self._SGLANG),
                               layout))
        axes = self._SGLANG[layout]
        ndim = len(tensor_memory(buffer).shape)
        if ndim == len(axes) + 1:
            axes = "K" + axes
        elif ndim != len(axes):
            raise PoolError("%s: an SGLang %s buffer is %s (or with a K/V "
                            "axis first), not %d-dimensional"
                            % (name or "sglang", layout, axes, ndim))
        return self.add(buffer, axes=axes, layers=layers,
                        component=component if "K" not in axes else None,
                        region=region, name=name)

    def add_mla(self, cache: Any, *, layer: int,
                region: Optional[RegionLike] = None,
                name: Optional[str] = None) -> "PoolBuilder":
        """An MLA latent cache of one layer (``value_head_dim`` 0: key
        tensors only): ``[num_blocks, block_size, 1, dim]`` or
        ``[num_blocks, block_size, dim]``."""
        ndim = len(tensor_memory(cache).shape)
        if ndim not in (3, 4):
            raise PoolError("%s: an MLA cache is [num_blocks, block_size, "
                            "1, dim] or [num_blocks, block_size, dim], not "
                            "%d-dimensional" % (name or "layer%d" % layer,
                                                ndim))
        return self.add(cache, axes="BTHD" if ndim == 4 else "BTD",
                        layer=layer, component=KEY, region=region, name=name)

    # -- building --
    def build(self) -> Pool:
        """Checks the pool (one tensor per owned layer and component, one
        block size and block count, strides that keep values apart,
        tensors inside their regions, no two tensors starting at one byte)
        and returns the :class:`Pool`."""
        desc, part = self.descriptor, self.part
        if not self._entries:
            raise PoolError("participant %s: the pool has no tensors"
                            % part.participant_id)
        block_size = self._sizes[0]
        for i, bs in enumerate(self._sizes):
            if bs != block_size:
                raise PoolError("%s has blocks of %d tokens, %s of %d: a pool "
                                "has one block size" % (
                                    self._names[0], block_size,
                                    self._names[i], bs))
        num_blocks = self._num_blocks()
        self._check_coverage()
        regions, region_of, tensors = self._build_regions()
        by_id = {r.region_id: r for r in regions}
        order = sorted(range(len(self._entries)),
                       key=lambda i: (self._entries[i].layer,
                                      self._entries[i].comp))
        out, labels, names = [], [], []
        starts: Dict[Tuple[str, int], int] = {}
        for i in order:
            e = self._entries[i]
            label = "%s (layer %d %s)" % (self._names[e.tensor], e.layer,
                                          _NAMES[e.comp])
            rid = region_of[e.tensor]
            region = by_id[rid]
            offset = self._mem[e.tensor].address - region.address + e.offset
            hb = _head_bytes(desc, e.comp)
            self._check_nesting(label, e, hb, num_blocks, block_size)
            end = offset + (num_blocks - 1) * e.block_stride + \
                (block_size - 1) * e.token_stride + \
                (part.head_count - 1) * e.head_stride + hb
            if offset < 0 or end > region.nbytes:
                raise PoolError("%s: bytes [%d, %d) of region %s lie outside "
                                "its %d bytes" % (label, offset, end, rid,
                                                  region.nbytes))
            other = starts.get((rid, offset))
            if other is not None:
                raise PoolError("%s and %s start at the same byte (region %s "
                                "offset %d): they share memory" % (
                                    labels[other], label, rid, offset))
            starts[(rid, offset)] = len(out)
            out.append(pb.PoolTensor(
                global_layer_id=e.layer, component=e.comp, region_id=rid,
                offset_bytes=offset, block_stride_bytes=e.block_stride,
                token_stride_bytes=e.token_stride,
                head_stride_bytes=e.head_stride))
            labels.append(label)
            names.append(self._names[e.tensor])
        message = pb.MemoryPool(participant_id=part.participant_id,
                                endpoint=self.endpoint, regions=regions,
                                block_size=block_size, num_blocks=num_blocks,
                                tensors=out)
        return Pool(message, desc, part, tensors, names)

    def _num_blocks(self) -> int:
        counts = [(e.blocks, self._names[e.tensor]) for e in self._entries]
        if self.num_blocks is not None:
            for n, name in counts:
                if n < self.num_blocks:
                    raise PoolError("%s holds %d blocks, the pool has %d"
                                    % (name, n, self.num_blocks))
            return self.num_blocks
        first = counts[0]
        for n, name in counts:
            if n != first[0]:
                raise PoolError("%s holds %d blocks, %s %d: pass num_blocks= "
                                "to use the first N of each"
                                % (first[1], first[0], name, n))
        if first[0] > _U32:
            raise PoolError("%s holds %d blocks, more than 2^32 - 1"
                            % (first[1], first[0]))
        return first[0]

    def _check_coverage(self) -> None:
        part, desc = self.part, self.descriptor
        comps = [KEY] + ([VALUE] if desc.value_head_dim > 0 else [])
        held: Dict[Tuple[int, int], int] = {}
        for e in self._entries:
            key = (e.layer, e.comp)
            if key in held:
                raise PoolError("layer %d %s is held by both %s and %s: a "
                                "pool has one tensor per layer and "
                                "component" % (e.layer, _NAMES[e.comp],
                                               self._names[held[key]],
                                               self._names[e.tensor]))
            held[key] = e.tensor
        for layer in sorted(part.layer_ids):
            for c in comps:
                if (layer, c) not in held:
                    raise PoolError(
                        "participant %s: layer %d %s is held by no tensor "
                        "(a pool holds every owned layer's %s)" % (
                            part.participant_id, layer, _NAMES[c],
                            " and ".join(_NAMES[x] for x in comps)))

    def _check_nesting(self, label: str, e: _Entry, hb: int,
                       num_blocks: int, block_size: int) -> None:
        # SPEC §1.5a: ordered by size, each stride is at least the extent
        # of the axes below it; axes of count 1 take no part.
        axes = [(s, n, what) for s, n, what in (
            (e.block_stride, num_blocks, "block"),
            (e.token_stride, block_size, "token"),
            (e.head_stride, self.part.head_count, "head"))
            if n > 1]
        extent = hb
        below = "a head row of %d bytes" % hb
        for s, n, what in sorted(axes):
            if s < extent:
                raise PoolError("%s: the %s stride %d is below the %d bytes "
                                "of %s: values would share memory"
                                % (label, what, s, extent, below))
            extent = (n - 1) * s + extent
            below = "the %ss below it" % what

    def _build_regions(self) -> Tuple[List["pb.Region"], Dict[int, str],
                                      Dict[str, List[Any]]]:
        """Regions in the order their first tensor was added."""
        spans = [_allocation(obj, mem) if not isinstance(r, pb.Region)
                 else None
                 for obj, mem, r in zip(self._objs, self._mem, self._regions)]
        group: Dict[int, int] = {}  # tensor -> group
        groups: List[List[int]] = []
        fixed: Dict[int, "pb.Region"] = {}
        named: Dict[str, int] = {}
        auto = [i for i, r in enumerate(self._regions) if r is None]
        for i, r in enumerate(self._regions):
            if isinstance(r, pb.Region):
                key = "region:" + r.region_id
            elif isinstance(r, str):
                key = "name:" + r
            else:
                continue
            if key not in named:
                named[key] = len(groups)
                groups.append([])
            g = named[key]
            groups[g].append(i)
            group[i] = g
            if isinstance(r, pb.Region):
                if g in fixed and fixed[g] != r:
                    raise PoolError("%s: region %s is given twice with "
                                    "different addresses or sizes"
                                    % (self._names[i], r.region_id))
                fixed[g] = r
        # Tensors without a region: views of one allocation share one.
        end = -1
        current = -1
        for i in sorted(auto, key=lambda k: spans[k][0]):  # type: ignore
            s0, s1 = spans[i]  # type: ignore
            if current >= 0 and s0 < end:
                groups[current].append(i)
                end = max(end, s1)
            else:
                current = len(groups)
                groups.append([i])
                end = s1
            group[i] = current
        ids: Dict[int, str] = {}
        used = set()
        for g, members in enumerate(groups):
            members.sort()
            if g in fixed:
                rid = fixed[g].region_id
            elif any(isinstance(self._regions[i], str) for i in members):
                rid = str(self._regions[members[0]])
            else:
                names = [self._names[i] for i in members]
                rid = "+".join(names) if len(names) <= 3 else \
                    "%s..%s" % (names[0], names[-1])
            if rid in used:
                raise PoolError("region id %s is used twice" % rid)
            used.add(rid)
            ids[g] = rid
        regions, tensors = [], {}
        for g in sorted(range(len(groups)), key=lambda k: groups[k][0]):
            members = groups[g]
            rid = ids[g]
            if g in fixed:
                r = fixed[g]
                region = pb.Region(region_id=rid, address=r.address,
                                   nbytes=r.nbytes)
            else:
                start = min(spans[i][0] for i in members)  # type: ignore
                stop = max(spans[i][1] for i in members)  # type: ignore
                region = pb.Region(region_id=rid, address=start,
                                   nbytes=stop - start)
            if region.address == 0 or region.nbytes == 0:
                raise PoolError("region %s: address and nbytes must be at "
                                "least 1" % rid)
            for i in members:
                a = self._mem[i].address
                if not region.address <= a < region.address + region.nbytes:
                    raise PoolError("%s: the tensor at %#x lies outside "
                                    "region %s [%#x, %#x)" % (
                                        self._names[i], a, rid,
                                        region.address,
                                        region.address + region.nbytes))
            regions.append(region)
            tensors[rid] = [self._objs[i] for i in members]
        region_of = {i: ids[g] for i, g in group.items()}
        return regions, region_of, tensors


def _per_layer(part: "pb.PlacementPart",
               kv_caches: Union[Sequence[Any], Mapping[int, Any]],
               layers: Optional[Sequence[int]]) -> List[Tuple[int, Any]]:
    if isinstance(kv_caches, Mapping):
        if layers is not None:
            raise PoolError("kv_caches is a dict of layers: layers= is not "
                            "needed")
        return [(int(k), v) for k, v in sorted(kv_caches.items())]
    caches = list(kv_caches)
    ids = sorted(part.layer_ids) if layers is None else list(layers)
    if len(ids) != len(caches):
        raise PoolError("%d kv_caches for %d layers %s of participant %s "
                        "(pass layers=)" % (len(caches), len(ids), ids,
                                            part.participant_id))
    return list(zip(ids, caches))


def pooled_memory(pooled: Union["pb.PooledMemory", Pool, "pb.MemoryPool",
                                str],
                  block_ids: Optional[BlockIds] = None, *,
                  num_tokens: Optional[int] = None) -> "pb.PooledMemory":
    """The ``PooledMemory`` of a plan request: ``pooled`` is a registered
    memory id (``str``), a :class:`Pool` or ``MemoryPool`` sent inline, or
    a ``PooledMemory`` sent as it is (then without ``block_ids``). The
    block table is checked as far as the client knows the pool (ids,
    repeats, and coverage of ``num_tokens`` when the pool is at hand)."""
    if isinstance(pooled, pb.PooledMemory):
        if block_ids is not None:
            raise ValueError("block_ids is given by the PooledMemory")
        if pooled.WhichOneof("pool") is None:
            raise ValueError("the PooledMemory names no pool: set memory_id "
                             "or inline_pool")
        return pooled
    if block_ids is None:
        raise ValueError("pooled memory needs block_ids")
    if isinstance(pooled, str):
        if not pooled:
            raise ValueError("memory_id must not be empty")
        return pb.PooledMemory(memory_id=pooled,
                               block_ids=check_block_table(block_ids))
    if isinstance(pooled, Pool):
        pooled = pooled.message
    if isinstance(pooled, pb.MemoryPool):
        ids = check_block_table(
            block_ids, num_blocks=pooled.num_blocks or None,
            block_size=pooled.block_size or None, num_tokens=num_tokens)
        return pb.PooledMemory(inline_pool=pooled, block_ids=ids)
    raise TypeError("pooled must be a memory id, a Pool, a MemoryPool or a "
                    "PooledMemory, not %s" % type(pooled).__name__)


__all__: Sequence[str] = ["Pool", "PoolBuilder", "check_block_table",
                          "expand_pool", "pooled_memory"]
