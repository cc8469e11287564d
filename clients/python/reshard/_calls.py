"""Requests and response handling shared by the synchronous and the
asyncio client: each public method builds a ``_Call``, the client runs it
(deadline, retries, error mapping) and ``finish`` turns the response into
the method's result."""

import operator
import random
import time
from types import ModuleType
from typing import Any, Callable, Iterable, List, NamedTuple, Optional, \
    Sequence, Union

import grpc

from ._proto import pb
from .binding import Binding
from .errors import BindingError, PoolError, ReshardError
from .messages import FormatLike, store_format
from .plan import LoadPlan, StorePlan, TransferPlan
from .pool import BlockIds, Pool, check_block_table, pooled_memory

SERVICE = "/reshard.v1.Planner/"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
DEFAULT_TARGET = "127.0.0.1:50051"

BindingLike = Union[Binding, "pb.RuntimeBinding"]
PooledLike = Union["pb.PooledMemory", Pool, "pb.MemoryPool", str]
PoolLike = Union[Pool, "pb.MemoryPool"]


class RegisteredMemory(NamedTuple):
    """What ``register_memory`` returns: the pool's ``memory_id`` and
    whether this call stored it (False: the same pool was registered
    already)."""

    memory_id: str
    created: bool


class _Call(NamedTuple):
    method: str  # "PlanLoad", or a full path for other services
    request: Any
    response_type: Any
    idempotent: bool
    finish: Callable[[Any], Any]


def _same(resp: Any) -> Any:
    return resp


def path(method: str) -> str:
    return method if method.startswith("/") else SERVICE + method


def channel_options(options: Iterable[Any]) -> list:
    # Plans can exceed gRPC's 4 MiB default; gRPC's own retries are off
    # because the client retries itself, only the idempotent calls.
    return [("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
            ("grpc.enable_retries", 0), *options]


def credentials(root_certificates: Optional[bytes],
                private_key: Optional[bytes],
                certificate_chain: Optional[bytes],
                secure: Optional[bool]) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials when asked for (``secure=True`` or any PEM given;
    ``root_certificates=None`` uses the system's roots), else None."""
    if secure is None:
        secure = any(x is not None for x in (root_certificates, private_key,
                                             certificate_chain))
    if not secure:
        return None
    if (private_key is None) != (certificate_chain is None):
        raise ValueError("a client certificate needs both private_key and "
                         "certificate_chain")
    return grpc.ssl_channel_credentials(
        root_certificates=root_certificates, private_key=private_key,
        certificate_chain=certificate_chain)


def backoff(attempt: int) -> float:
    """Seconds before retry ``attempt`` (1, 2, ...): exponential from 50 ms,
    capped at 1 s, with full jitter."""
    return random.uniform(0, min(1.0, 0.05 * (2 ** (attempt - 1))))


def error(method: str, err: grpc.RpcError) -> ReshardError:
    code = err.code() if callable(getattr(err, "code", None)) else None
    details = err.details() if callable(getattr(err, "details", None)) \
        else None
    return ReshardError(code or grpc.StatusCode.UNKNOWN, details or str(err),
                        method.rsplit("/", 1)[-1])


class ClientBase:
    """What both clients share: the channel (grpc's or grpc.aio's, named
    by the subclass's ``_grpc``), the deadline and the retry policy. The
    arguments are documented on :class:`reshard.Client`."""

    _grpc: ModuleType = grpc

    def __init__(self, target: str = DEFAULT_TARGET, *,
                 timeout: float = 10.0, retries: int = 3,
                 root_certificates: Optional[bytes] = None,
                 private_key: Optional[bytes] = None,
                 certificate_chain: Optional[bytes] = None,
                 secure: Optional[bool] = None,
                 options: Iterable[Any] = ()) -> None:
        self.target = target
        self.timeout = timeout
        self.retries = retries
        creds = credentials(root_certificates, private_key,
                            certificate_chain, secure)
        opts = channel_options(options)
        self.channel = (
            self._grpc.secure_channel(target, creds, options=opts)
            if creds is not None else
            self._grpc.insecure_channel(target, options=opts))

    def _stub(self, call: _Call) -> Any:
        return self.channel.unary_unary(
            path(call.method),
            request_serializer=call.request.SerializeToString,
            response_deserializer=call.response_type.FromString)

    def _deadline(self, timeout: Optional[float]) -> float:
        return time.monotonic() + (self.timeout if timeout is None
                                   else timeout)

    def _retry_pause(self, call: _Call, err: grpc.RpcError, attempt: int,
                     deadline: float) -> float:
        """Seconds to wait before retrying after failed attempt number
        ``attempt``; raises the call's ReshardError when it is not
        retried."""
        pause = backoff(attempt)
        if (call.idempotent and attempt <= self.retries
                and err.code() == grpc.StatusCode.UNAVAILABLE
                and time.monotonic() + pause < deadline):
            return pause
        raise error(path(call.method), err) from None


def _binding_message(binding: BindingLike, page_count: int,
                     desc: Optional[Any]) -> Any:
    if isinstance(binding, Binding):
        if desc is not None and \
                binding.num_tokens != page_count * desc.page_size:
            raise BindingError(
                "the binding covers %d tokens, the plan %d pages of %d"
                % (binding.num_tokens, page_count, desc.page_size))
        return binding.message
    return binding


def _memory(req: Any, binding: Optional[BindingLike],
            pooled: Optional[PooledLike], block_ids: Optional[BlockIds],
            page_count: int, desc: Optional[Any]) -> None:
    """Sets exactly one of the request's ``binding`` and ``pooled``."""
    if (binding is None) == (pooled is None):
        raise ValueError("give exactly one of binding and pooled")
    if binding is not None:
        if block_ids is not None:
            raise ValueError("block_ids goes with pooled, not with binding")
        req.binding.CopyFrom(_binding_message(binding, page_count, desc))
        return
    if desc is None and isinstance(pooled, Pool):
        desc = pooled.descriptor
    tokens = page_count * desc.page_size if desc is not None else None
    req.pooled.CopyFrom(pooled_memory(pooled, block_ids, num_tokens=tokens))


def _target(req: Any, placement: Any, placement_id: Optional[str]) -> None:
    if (placement is None) == (placement_id is None):
        raise ValueError("give exactly one of placement and placement_id")
    if placement is not None:
        req.placement.CopyFrom(placement)
    else:
        req.placement_id = placement_id


def publish_manifest(manifest: Any) -> _Call:
    return _Call("PublishManifest",
                 pb.PublishManifestRequest(manifest=manifest),
                 pb.PublishManifestResponse, True, _same)


def get_manifest(manifest_key: str) -> _Call:
    return _Call("GetManifest",
                 pb.GetManifestRequest(manifest_key=manifest_key),
                 pb.GetManifestResponse, True, _same)


def register_pages(manifest_key: str, page_keys: Sequence[str]) -> _Call:
    # Not retried: a replay after a lost response reports added=0.
    return _Call("RegisterPages",
                 pb.RegisterPagesRequest(manifest_key=manifest_key,
                                         page_keys=list(page_keys)),
                 pb.RegisterPagesResponse, False, lambda r: int(r.added))


def forget_pages(model_domain: str, page_keys: Sequence[str],
                 manifest_key: str) -> _Call:
    return _Call("ForgetPages",
                 pb.ForgetPagesRequest(model_domain=model_domain,
                                       page_keys=list(page_keys),
                                       manifest_key=manifest_key),
                 pb.ForgetPagesResponse, False, lambda r: int(r.removed))


def register_placement(placement: Any) -> _Call:
    return _Call("RegisterPlacement",
                 pb.RegisterPlacementRequest(placement=placement),
                 pb.RegisterPlacementResponse, True,
                 lambda r: str(r.placement_id))


def plan_upload(placement: Any, fmt: FormatLike,
                dp_rank: Optional[int]) -> _Call:
    req = pb.PlanUploadRequest(placement=placement, format=store_format(fmt))
    if dp_rank is not None:
        req.dp_rank.value = dp_rank
    return _Call("PlanUpload", req, pb.PlanUploadResponse, True, _same)


def plan_load(model_domain: str, page_keys: Sequence[str],
              binding: Optional[BindingLike], placement: Any,
              placement_id: Optional[str], target_dp_rank: Optional[int],
              limits: Any, preferred_layout_ids: Sequence[str],
              operation_id: str, runs: bool,
              pooled: Optional[PooledLike] = None,
              block_ids: Optional[BlockIds] = None) -> _Call:
    keys = list(page_keys)
    desc = placement.descriptor if placement is not None else None
    req = pb.PlanLoadRequest(
        model_domain=model_domain, page_keys=keys,
        preferred_layout_ids=list(preferred_layout_ids),
        operation_id=operation_id, runs=runs)
    _memory(req, binding, pooled, block_ids, len(keys), desc)
    _target(req, placement, placement_id)
    if target_dp_rank is not None:
        req.target_dp_rank.value = target_dp_rank
    if limits is not None:
        req.limits.CopyFrom(limits)
    return _Call("PlanLoad", req, pb.PlanLoadResponse, True, LoadPlan)


def plan_store(manifest_key: str, binding: Optional[BindingLike],
               page_count: int, placement: Any, placement_id: Optional[str],
               dp_rank: Optional[int], limits: Any, runs: bool,
               operation_id: str, pooled: Optional[PooledLike] = None,
               block_ids: Optional[BlockIds] = None) -> _Call:
    desc = placement.descriptor if placement is not None else None
    req = pb.PlanStoreRequest(
        manifest_key=manifest_key, page_count=page_count, runs=runs,
        operation_id=operation_id)
    _memory(req, binding, pooled, block_ids, page_count, desc)
    _target(req, placement, placement_id)
    if dp_rank is not None:
        req.dp_rank.value = dp_rank
    if limits is not None:
        req.limits.CopyFrom(limits)
    return _Call("PlanStore", req, pb.PlanStoreResponse, True,
                 lambda r: StorePlan(r, page_count))


def register_memory(pool: PoolLike, placement: Any,
                    placement_id: Optional[str]) -> _Call:
    if isinstance(pool, Pool):
        pool = pool.message
    if not isinstance(pool, pb.MemoryPool):
        raise TypeError("pool must be a reshard.Pool or a MemoryPool, not %s"
                        % type(pool).__name__)
    req = pb.RegisterMemoryRequest(pool=pool)
    _target(req, placement, placement_id)
    # Retried: registering the same pool again is a no-op (a replay after
    # a lost answer reports created=False, like PublishManifest).
    return _Call("RegisterMemory", req, pb.RegisterMemoryResponse, True,
                 lambda r: RegisteredMemory(str(r.memory_id),
                                            bool(r.created)))


def _memory_ids(ids: Any) -> List[str]:
    """The source pools of a transfer: memory ids, or what
    ``register_memory`` returned."""
    if isinstance(ids, (str, bytes)) or isinstance(ids, RegisteredMemory):
        raise TypeError("source_memory_ids is a list of memory ids, not one "
                        "%s" % type(ids).__name__)
    out = []
    for i, mid in enumerate(ids):
        if isinstance(mid, RegisteredMemory):
            mid = mid.memory_id
        if not isinstance(mid, str):
            raise TypeError("source_memory_ids[%d] must be a memory id "
                            "(str), not %s" % (i, type(mid).__name__))
        if not mid:
            raise ValueError("source_memory_ids[%d] is empty" % i)
        out.append(mid)
    if not out:
        raise ValueError("source_memory_ids names no pool: give the source "
                         "participants' registered memory ids")
    return out


def plan_transfer(source_placement: Any, source_placement_id: Optional[str],
                  source_dp_rank: Optional[int], source_memory_ids: Any,
                  source_block_ids: BlockIds, token_count: int,
                  target_placement: Any, target_placement_id: Optional[str],
                  target_dp_rank: Optional[int],
                  binding: Optional[BindingLike],
                  pooled: Optional[PooledLike],
                  block_ids: Optional[BlockIds], limits: Any, runs: bool,
                  operation_id: str) -> _Call:
    tokens = operator.index(token_count)
    if tokens < 1:
        raise ValueError("token_count must be at least 1, not %d" % tokens)
    try:
        # The source pools are remote: only the ids themselves are checked
        # here (integers, below 2^32, none twice); the daemon checks them
        # against the pools' block counts and the span.
        source_table = check_block_table(source_block_ids)
    except PoolError as err:
        raise PoolError("source_block_ids: %s" % err) from None
    req = pb.PlanTransferRequest(
        source_memory_ids=_memory_ids(source_memory_ids),
        source_block_ids=source_table, token_count=tokens, runs=runs,
        operation_id=operation_id)
    if (source_placement is None) == (source_placement_id is None):
        raise ValueError("give exactly one of source_placement and "
                         "source_placement_id")
    if source_placement is not None:
        req.source_placement.CopyFrom(source_placement)
    else:
        req.source_placement_id = source_placement_id
    if (target_placement is None) == (target_placement_id is None):
        raise ValueError("give exactly one of target_placement and "
                         "target_placement_id")
    if target_placement is not None:
        req.target_placement.CopyFrom(target_placement)
    else:
        req.target_placement_id = target_placement_id
    if source_dp_rank is not None:
        req.source_dp_rank.value = source_dp_rank
    if target_dp_rank is not None:
        req.target_dp_rank.value = target_dp_rank
    # The target's memory covers the span [0, token_count).
    if (binding is None) == (pooled is None):
        raise ValueError("give exactly one of binding and pooled")
    if binding is not None:
        if block_ids is not None:
            raise ValueError("block_ids goes with pooled, not with binding")
        if isinstance(binding, Binding):
            if binding.num_tokens != tokens:
                raise BindingError(
                    "the binding covers %d tokens, the transfer %d "
                    "(token_count)" % (binding.num_tokens, tokens))
            binding = binding.message
        req.binding.CopyFrom(binding)
    else:
        req.pooled.CopyFrom(pooled_memory(pooled, block_ids,
                                          num_tokens=tokens))
    if limits is not None:
        req.limits.CopyFrom(limits)
    return _Call("PlanTransfer", req, pb.PlanTransferResponse, True,
                 TransferPlan)


def forget_memory(memory_id: str) -> _Call:
    # Not retried: a replay after a lost answer reports removed=False.
    return _Call("ForgetMemory", pb.ForgetMemoryRequest(memory_id=memory_id),
                 pb.ForgetMemoryResponse, False, lambda r: bool(r.removed))


def health(service: str) -> _Call:
    from ._proto import health_pb2
    h = health_pb2()
    return _Call(HEALTH_CHECK, h.HealthCheckRequest(service=service),
                 h.HealthCheckResponse, True,
                 lambda r: h.HealthCheckResponse.ServingStatus.Name(r.status))


def manifest_of(manifest: Any, layout: Any, fields: dict) -> Any:
    if manifest is not None:
        if layout is not None or any(v is not None for v in fields.values()):
            raise ValueError("give a manifest or its fields, not both")
        return manifest
    missing = [k for k, v in fields.items() if v is None]
    if layout is None or missing:
        raise ValueError("a manifest needs layout, namespace, model_id, "
                         "model_revision and semantic_fingerprint")
    return pb.StoreManifest(layout=layout, **fields)
