"""reshard: the Python client of reshardd (SPEC §4).

* :class:`Client` (and :class:`reshard.aio.Client`): every Planner RPC as a
  method with keyword arguments, deadlines, retries of idempotent calls,
  errors raised as :class:`ReshardError`.
* :class:`BindingBuilder`: a runtime binding from tensors (numpy, torch,
  anything with ``__cuda_array_interface__``) in NHD, HND, paged and MLA
  shapes, checked before it is sent.
* :class:`PoolBuilder`: a memory pool (SPEC §1.5a) from the tensors an
  engine holds (vLLM, FlashInfer, SGLang host pools, MLA), registered once
  with ``register_memory``; plans then take its ``memory_id`` and a block
  table. :meth:`Pool.binding` expands it into the explicit binding.
* :class:`LoadPlan` / :class:`StorePlan` / :class:`TransferPlan`: plans as
  ``uint64`` numpy columns, strided runs kept or expanded.
  ``Client.plan_transfer`` plans a P/D transfer from a live instance's
  registered pools into another's memory (SPEC §2.6).
* :func:`execute`: the reference executor between numpy buffers (a
  TransferPlan from the source pools' buffers into the target's);
  :func:`part_views`: numpy views of the values in a Part.
* :mod:`reshard.nixl`: a plan's columns as NIXL descriptor lists
  (``(addr, len, dev)`` rows, or strided ``(addr, len, dev, stride,
  count)`` rows for runs), per batch and peer.

The protobuf messages are re-exported (``reshard.Descriptor`` ...) and the
generated module is ``reshard.v1.planner_pb2``. See docs/python.md.
"""

from ._proto import pb as planner_pb2
from .binding import Binding, BindingBuilder
from .client import Client
from ._calls import RegisteredMemory
from .errors import BindingError, PoolError, ReshardError
from .executor import execute, execute_transfer
from .layout import element_dtype, new_parts, part_sizes, part_views, shards
from .messages import (KEY, VALUE, component, descriptor, find_part,
                       head_share, limits, manifest, participant_id,
                       pipeline_stages, placement, store_format)
from .plan import Copies, LoadPlan, StorePlan, TransferCopies, TransferPlan
from .pool import (Pool, PoolBuilder, check_block_table, expand_pool,
                   pooled_memory)
from .tensor import TensorMemory, tensor_memory
from . import nixl

Descriptor = planner_pb2.Descriptor
Rank = planner_pb2.Rank
PlacementPart = planner_pb2.PlacementPart
Placement = planner_pb2.Placement
StoreShard = planner_pb2.StoreShard
StoreLayout = planner_pb2.StoreLayout
StoreManifest = planner_pb2.StoreManifest
Region = planner_pb2.Region
BindingRange = planner_pb2.BindingRange
RuntimeBinding = planner_pb2.RuntimeBinding
Limits = planner_pb2.Limits
PoolTensor = planner_pb2.PoolTensor
MemoryPool = planner_pb2.MemoryPool
PooledMemory = planner_pb2.PooledMemory
TransferSource = planner_pb2.TransferSource
TransferBatch = planner_pb2.TransferBatch
PLHD: int = planner_pb2.PLHD
LPHD: int = planner_pb2.LPHD
HPLD: int = planner_pb2.HPLD

__version__ = "0.1.0"

__all__ = [
    "Binding", "BindingBuilder", "BindingError", "BindingRange", "Client",
    "Copies", "Descriptor", "HPLD", "KEY", "LPHD", "Limits", "LoadPlan",
    "MemoryPool", "PLHD", "Placement", "PlacementPart", "Pool",
    "PoolBuilder", "PoolError", "PoolTensor", "PooledMemory", "Rank",
    "Region", "RegisteredMemory", "ReshardError", "RuntimeBinding",
    "StoreLayout", "StoreManifest", "StorePlan", "StoreShard",
    "TensorMemory", "TransferBatch", "TransferCopies", "TransferPlan",
    "TransferSource", "VALUE", "check_block_table", "component",
    "descriptor", "element_dtype", "execute", "execute_transfer",
    "expand_pool", "find_part", "head_share",
    "limits", "manifest", "new_parts", "nixl", "part_sizes", "part_views",
    "participant_id", "pipeline_stages", "placement", "planner_pb2",
    "pooled_memory", "shards", "store_format", "tensor_memory",
]
