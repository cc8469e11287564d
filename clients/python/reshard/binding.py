"""Runtime bindings built from tensors (SPEC §1.5).

An engine registers the tensors that hold its KV cache; the builder turns
them into the ``RuntimeBinding`` the daemon plans against. Every tensor is
described by its axes, one letter per dimension:

====  ==================================================================
``K`` K/V axis of a tensor holding both (size 2: index 0 key, 1 value)
``B`` block axis of a paged pool, addressed through a block table
``T`` token axis (the tokens of a block, or all tokens)
``H`` KV head axis (absent for a single-head MLA latent cache)
``D`` head dimension (contiguous)
====  ==================================================================

so ``"THD"`` is a contiguous NHD tensor per (layer, component), ``"HTD"``
an HND one, ``"BTHD"`` a paged pool per layer and component, ``"KBTHD"``
vLLM's ``[2, blocks, block_size, heads, dim]`` pool, ``"BKHTD"``
FlashInfer's ``[blocks, 2, heads, block_size, dim]`` and ``"BTD"`` or
``"TD"`` an MLA latent cache. The builder checks what the daemon will check
and names the tensor at fault; tensors whose memory overlaps (views of one
allocation) share one region.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ._proto import pb
from .errors import BindingError
from .messages import KEY, VALUE, ComponentLike, component as _component
from .tensor import TensorMemory, host_bytes, tensor_memory

_LETTERS = "KBTHD"
_NAMES = {KEY: "K", VALUE: "V"}


class _Range(NamedTuple):
    tensor: int  # index into the builder's tensors
    layer: int
    comp: int
    token_start: int
    token_count: int
    head_start: int
    head_count: int
    offset: int  # from the tensor's element 0
    token_stride: int
    head_stride: int


class Binding:
    """A built binding: ``message`` is the ``RuntimeBinding`` to send,
    ``tensors`` maps each region id to the tensors it spans (kept alive
    here), ``range_tensors[i]`` names the tensor behind
    ``message.ranges[i]`` (to read the daemon's ``binding.ranges[i]``
    errors), ``num_tokens`` the token span it covers."""

    def __init__(self, message: "pb.RuntimeBinding",
                 tensors: Dict[str, List[Any]], range_tensors: List[str],
                 num_tokens: int) -> None:
        self.message = message
        self.tensors = tensors
        self.range_tensors = range_tensors
        self.num_tokens = num_tokens

    @property
    def participant_id(self) -> str:
        return str(self.message.participant_id)

    def host_regions(self) -> Dict[str, np.ndarray]:
        """Each region as a writable uint8 numpy view of its memory. Only
        for tensors in CPU memory; the Binding keeps them alive."""
        return {r.region_id: host_bytes(r.address, r.nbytes)
                for r in self.message.regions}


class BindingBuilder:
    """Collects tensors of one participant and builds its binding.

    ``descriptor`` is the model's Descriptor, ``part`` the participant's
    PlacementPart (``reshard.find_part(placement, participant_id)``),
    ``num_tokens`` the token span the binding covers: ``pages ×
    page_size`` of the plan it is for (tokens ``[0, num_tokens)``, the
    span the daemon requires the binding to tile exactly).
    """

    def __init__(self, descriptor: "pb.Descriptor",
                 part: "pb.PlacementPart", *, num_tokens: int,
                 endpoint: str = "") -> None:
        if num_tokens < 1:
            raise BindingError("num_tokens must be at least 1")
        self.descriptor = descriptor
        self.part = part
        self.num_tokens = num_tokens
        self.endpoint = endpoint
        self._mem: List[TensorMemory] = []
        self._objs: List[Any] = []
        self._names: List[str] = []
        self._ranges: List[_Range] = []

    # -- adding tensors --
    def add(self, tensor: Any, *, layer: int, axes: str,
            component: Optional[ComponentLike] = None,
            block_table: Optional[Sequence[int]] = None,
            token_start: int = 0, head_start: Optional[int] = None,
            name: Optional[str] = None) -> "BindingBuilder":
        """Adds one tensor holding global layer ``layer``.

        ``axes`` names its dimensions (module docstring). Without a ``K``
        axis, ``component`` says which it holds (default: key). With a
        ``B`` axis, ``block_table[j]`` is the block holding tokens
        ``token_start + j·block_size …``; without one, the ``T`` axis holds
        tokens ``token_start …``. Tokens past ``num_tokens`` are left out.
        The ``H`` axis holds heads ``head_start …`` (default: the
        participant's first head). ``name`` labels the tensor in errors and
        region ids (default ``layer{L}.{K|V|KV}``).
        """
        mem = tensor_memory(tensor)
        desc, part = self.descriptor, self.part
        if name is None:
            name = "layer%d.%s" % (layer, "KV" if "K" in axes else _NAMES[
                KEY if component is None else _component(component)])
        if name in self._names:
            raise BindingError("%s: a tensor of that name was added already"
                               % name)

        def fail(rule: str) -> BindingError:
            return BindingError("%s: %s" % (name, rule))

        if (len(set(axes)) != len(axes) or any(a not in _LETTERS
                                               for a in axes)
                or "T" not in axes or "D" not in axes):
            raise fail("axes %r must use each of K, B, T, H, D at most once "
                       "and include T and D" % axes)
        if len(axes) != len(mem.shape):
            raise fail("axes %r for a tensor of shape %s"
                       % (axes, list(mem.shape)))
        shape = dict(zip(axes, mem.shape))
        stride = dict(zip(axes, mem.strides))
        if mem.itemsize != desc.itemsize:
            raise fail("element size %d, the descriptor's itemsize is %d"
                       % (mem.itemsize, desc.itemsize))
        if mem.address % mem.itemsize:
            raise fail("address %#x is not a multiple of the element size %d"
                       % (mem.address, mem.itemsize))
        for a in axes:
            if stride[a] < 0 or (stride[a] == 0 and shape[a] > 1):
                raise fail("axis %s has stride %d bytes: values would share "
                           "memory" % (a, stride[a]))
        if layer not in part.layer_ids:
            raise fail("layer %d is not owned by participant %s (layers %s)"
                       % (layer, part.participant_id,
                          list(part.layer_ids)))
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
        hn = shape.get("H", 1)
        h0 = part.head_start if head_start is None else head_start
        if h0 < part.head_start or \
                h0 + hn > part.head_start + part.head_count:
            raise fail("heads [%d, %d) lie outside the participant's heads "
                       "[%d, %d)" % (h0, h0 + hn, part.head_start,
                                     part.head_start + part.head_count))
        if not 0 <= token_start < self.num_tokens:
            raise fail("token_start %d is outside [0, %d)"
                       % (token_start, self.num_tokens))

        # (token start, token count, byte offset) of each block of tokens.
        span = self.num_tokens - token_start
        tokens = shape["T"]
        blocks: List[Tuple[int, int, int]] = []
        if "B" in axes:
            if block_table is None:
                raise fail("a B axis needs a block_table")
            table = np.asarray(block_table, dtype=np.int64).reshape(-1)
            needed = -(-span // tokens)
            if table.shape[0] < needed:
                raise fail("block_table has %d blocks, tokens [%d, %d) need "
                           "%d of %d tokens" % (table.shape[0], token_start,
                                                self.num_tokens, needed,
                                                tokens))
            table = table[:needed]
            bad = (table < 0) | (table >= shape["B"])
            if bad.any():
                j = int(np.argmax(bad))
                raise fail("block_table[%d] = %d is not a block of [0, %d)"
                           % (j, int(table[j]), shape["B"]))
            uniq, counts = np.unique(table, return_counts=True)
            if (counts > 1).any():
                raise fail("block %d appears twice in block_table"
                           % int(uniq[np.argmax(counts > 1)]))
            for j, blk in enumerate(table.tolist()):
                t0 = token_start + j * tokens
                blocks.append((t0, min(tokens, self.num_tokens - t0),
                               blk * stride["B"]))
        else:
            if block_table is not None:
                raise fail("block_table given for a tensor without a B axis")
            blocks.append((token_start, min(tokens, span), 0))

        index = len(self._mem)
        self._mem.append(mem)
        self._objs.append(tensor)
        self._names.append(name)
        hb_bytes = shape["D"] * mem.itemsize
        ts, hs = stride["T"], stride.get("H", hb_bytes)
        # One range for all heads when the daemon's row rule holds
        # (token stride spans the heads); one per head otherwise (HND).
        per_head = hn > 1 and (hs < hb_bytes or ts < (hn - 1) * hs + hb_bytes)
        for ci, c in enumerate(comps):
            base = ci * stride["K"] if "K" in axes else 0
            for t0, count, off in blocks:
                if per_head:
                    for k in range(hn):
                        self._ranges.append(_Range(
                            index, layer, c, t0, count, h0 + k, 1,
                            base + off + k * hs, ts, hb_bytes))
                else:
                    self._ranges.append(_Range(
                        index, layer, c, t0, count, h0, hn, base + off, ts,
                        hs if hn > 1 else hb_bytes))
        return self

    def add_contiguous(self, tensor: Any, *, layer: int,
                       component: Optional[ComponentLike] = None,
                       order: str = "NHD", token_start: int = 0,
                       head_start: Optional[int] = None,
                       name: Optional[str] = None) -> "BindingBuilder":
        """One tensor per (layer, component): ``[tokens, heads, dim]``
        (``order="NHD"``), ``[heads, tokens, dim]`` (``"HND"``) or, for an
        MLA latent cache, ``[tokens, dim]``."""
        axes = _order_axes(order, tensor, "", name or "layer%d" % layer)
        return self.add(tensor, layer=layer, axes=axes, component=component,
                        token_start=token_start, head_start=head_start,
                        name=name)

    def add_paged(self, tensor: Any, *, layer: int,
                  block_table: Sequence[int],
                  component: Optional[ComponentLike] = None,
                  order: str = "NHD", token_start: int = 0,
                  head_start: Optional[int] = None,
                  name: Optional[str] = None) -> "BindingBuilder":
        """A paged pool of one layer: ``[blocks, block_size, heads, dim]``
        for one component, ``[2, blocks, block_size, heads, dim]`` for K
        and V (vLLM's shape; ``component`` then stays None), ``[blocks,
        block_size, dim]`` for MLA; ``order="HND"`` puts heads before
        tokens within a block."""
        axes = _order_axes(order, tensor, "B", name or "layer%d" % layer)
        return self.add(tensor, layer=layer, axes=axes, component=component,
                        block_table=block_table, token_start=token_start,
                        head_start=head_start, name=name)

    # -- building --
    def build(self) -> Binding:
        """Checks that the tensors tile the participant's heads for every
        owned layer, component and token of the span, merges overlapping
        tensors into regions and returns the :class:`Binding`."""
        self._check_coverage()
        order = sorted(range(len(self._mem)),
                       key=lambda i: self._mem[i].address)
        region_of: Dict[int, int] = {}
        groups: List[List[int]] = []
        end = -1
        for i in order:
            m = self._mem[i]
            if groups and m.address < end:
                groups[-1].append(i)
                end = max(end, m.address + m.extent)
            else:
                groups.append([i])
                end = m.address + m.extent
            region_of[i] = len(groups) - 1
        regions, tensors = [], {}
        for g in groups:
            rid = "+".join(self._names[i] for i in sorted(g))
            start = min(self._mem[i].address for i in g)
            stop = max(self._mem[i].address + self._mem[i].extent for i in g)
            if start == 0:
                raise BindingError("%s: the tensor's address is 0" % rid)
            regions.append(pb.Region(region_id=rid, address=start,
                                     nbytes=stop - start))
            tensors[rid] = [self._objs[i] for i in sorted(g)]
        ranges, names = [], []
        for r in self._ranges:
            region = regions[region_of[r.tensor]]
            ranges.append(pb.BindingRange(
                global_layer_id=r.layer, component=r.comp,
                token_start=r.token_start, token_count=r.token_count,
                head_start=r.head_start, head_count=r.head_count,
                region_id=region.region_id,
                offset_bytes=self._mem[r.tensor].address - region.address
                + r.offset,
                token_stride_bytes=r.token_stride,
                head_stride_bytes=r.head_stride))
            names.append(self._names[r.tensor])
        message = pb.RuntimeBinding(participant_id=self.part.participant_id,
                                    endpoint=self.endpoint, regions=regions,
                                    ranges=ranges)
        return Binding(message, tensors, names, self.num_tokens)

    def _check_coverage(self) -> None:
        # Per (layer, component) and head, the token intervals of the
        # ranges holding that head must tile [0, num_tokens): sorted, each
        # starts where the previous ended. Memory and time follow the
        # number of ranges, never tokens × heads.
        part, desc = self.part, self.descriptor
        comps = [KEY] + ([VALUE] if desc.value_head_dim > 0 else [])
        by_key: Dict[Tuple[int, int], List[_Range]] = {
            (layer, c): [] for layer in sorted(part.layer_ids)
            for c in comps}
        for r in self._ranges:
            by_key[(r.layer, r.comp)].append(r)
        h0 = part.head_start
        for (layer, c), ranges in by_key.items():
            t0 = np.array([r.token_start for r in ranges], dtype=np.int64)
            t1 = t0 + np.array([r.token_count for r in ranges],
                               dtype=np.int64)
            a0 = np.array([r.head_start for r in ranges], dtype=np.int64)
            a1 = a0 + np.array([r.head_count for r in ranges],
                               dtype=np.int64)
            for head in range(h0, h0 + part.head_count):
                idx = np.flatnonzero((a0 <= head) & (head < a1))
                idx = idx[np.argsort(t0[idx], kind="stable")]
                starts, ends = t0[idx], t1[idx]
                expect = np.concatenate([[0], ends[:-1]])
                bad = np.flatnonzero(starts != expect)
                if bad.size:
                    i = int(bad[0])
                    if starts[i] < expect[i]:
                        prev = ranges[int(idx[i - 1])]
                        raise BindingError(
                            "%s: layer %d %s token %d head %d is already "
                            "bound by %s" % (
                                self._names[ranges[int(idx[i])].tensor],
                                layer, _NAMES[c], starts[i], head,
                                self._names[prev.tensor]))
                    self._uncovered(layer, c, int(expect[i]), head)
                if not idx.size or ends[-1] < self.num_tokens:
                    self._uncovered(layer, c,
                                    int(ends[-1]) if idx.size else 0, head)

    def _uncovered(self, layer: int, comp: int, token: int,
                   head: int) -> None:
        part = self.part
        raise BindingError(
            "participant %s: layer %d %s token %d head %d is bound by no "
            "tensor (the binding must cover tokens [0, %d) and heads "
            "[%d, %d))" % (part.participant_id, layer, _NAMES[comp], token,
                           head, self.num_tokens, part.head_start,
                           part.head_start + part.head_count))


def _order_axes(order: str, tensor: Any, prefix: str, name: str) -> str:
    ndim = len(tensor_memory(tensor).shape)
    if order not in ("NHD", "HND"):
        raise BindingError("%s: order must be NHD or HND, not %r"
                           % (name, order))
    inner = "THD" if order == "NHD" else "HTD"
    for axes in (prefix + inner, "K" + prefix + inner, prefix + "TD"):
        if len(axes) == ndim:
            return axes
    raise BindingError("%s: a %s tensor of %d dimensions is none of the "
                       "supported shapes" % (name, order, ndim))
