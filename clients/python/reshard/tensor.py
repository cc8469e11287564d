"""What the package needs from a tensor: where its memory is and how it is
laid out. Works for numpy arrays (``__array_interface__``), torch tensors
(``data_ptr()``, ``stride()``, ``element_size()``) and anything with
``__cuda_array_interface__`` (CuPy, Numba); no framework is imported."""

import ctypes
from typing import Any, NamedTuple, Tuple

import numpy as np


class TensorMemory(NamedTuple):
    """``address`` of element 0, ``shape``, ``strides`` in bytes,
    ``itemsize`` in bytes."""

    address: int
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]
    itemsize: int

    @property
    def extent(self) -> int:
        """Bytes from element 0 to the end of the last element (strides
        must be non-negative)."""
        if any(n == 0 for n in self.shape):
            return 0
        return sum((n - 1) * s for n, s in zip(self.shape, self.strides)) \
            + self.itemsize


def _interface(address: int, iface: dict) -> TensorMemory:
    shape = tuple(int(n) for n in iface["shape"])
    itemsize = np.dtype(iface["typestr"]).itemsize
    strides = iface.get("strides")
    if strides is None:  # C-contiguous
        acc, out = itemsize, []
        for n in reversed(shape):
            out.append(acc)
            acc *= n
        strides = tuple(reversed(out))
    return TensorMemory(address, shape, tuple(int(s) for s in strides),
                        itemsize)


def tensor_memory(tensor: Any) -> TensorMemory:
    """The memory description of ``tensor``; TypeError when it is none of
    the supported kinds."""
    if callable(getattr(tensor, "data_ptr", None)) and \
            callable(getattr(tensor, "element_size", None)):
        itemsize = int(tensor.element_size())
        return TensorMemory(int(tensor.data_ptr()),
                            tuple(int(n) for n in tensor.shape),
                            tuple(int(s) * itemsize
                                  for s in tensor.stride()), itemsize)
    for name in ("__array_interface__", "__cuda_array_interface__"):
        iface = getattr(tensor, name, None)
        if iface is not None:
            return _interface(int(iface["data"][0]), iface)
    raise TypeError("%s is not a tensor: expected a numpy array, a torch "
                    "tensor or an object with __cuda_array_interface__"
                    % type(tensor).__name__)


def host_bytes(address: int, nbytes: int) -> np.ndarray:
    """A writable uint8 view of ``nbytes`` of host memory at ``address``.
    The caller keeps the owner of that memory alive and guarantees it is
    CPU memory (a device pointer here would crash the process)."""
    if nbytes == 0:
        return np.zeros(0, dtype=np.uint8)
    raw = (ctypes.c_uint8 * nbytes).from_address(address)
    return np.frombuffer(raw, dtype=np.uint8)
