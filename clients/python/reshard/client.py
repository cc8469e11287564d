"""The synchronous client (``reshard.Client``)."""

import time
from typing import Any, Optional, Sequence

import grpc

from . import _calls
from ._calls import (BindingLike, PooledLike, PoolLike,
                     RegisteredMemory, _Call)
from ._proto import pb
from .messages import FormatLike
from .plan import LoadPlan, StorePlan, TransferPlan
from .pool import BlockIds


class Client(_calls.ClientBase):
    """A connection to one reshardd.

    ``target`` is ``host:port`` (or ``unix:PATH``). ``timeout`` is the
    default deadline of a call in seconds, retries included; every method
    takes its own ``timeout`` too. Idempotent calls (all but
    ``register_pages``, ``forget_pages`` and ``forget_memory``, whose answers a
    replay would change) are retried up to ``retries`` times on UNAVAILABLE,
    with jittered exponential backoff, within the deadline; a retry waits for
    the connection to come back (gRPC's wait-for-ready) rather than
    failing while the channel is still backing off from a refused
    connect. TLS is used when ``secure`` is true or any of
    ``root_certificates``, ``private_key``, ``certificate_chain`` (PEM
    bytes) is given; a client certificate (mutual TLS) needs both of the
    last two. ``options`` are extra gRPC
    channel options. Failed calls raise :class:`reshard.ReshardError`.
    Use one client from any number of threads; close it (or use it as a
    context manager) when done.
    """

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _run(self, call: _Call, timeout: Optional[float]) -> Any:
        stub = self._stub(call)
        deadline = self._deadline(timeout)
        attempt = 0
        while True:
            remaining = max(deadline - time.monotonic(), 0.0)
            try:
                return call.finish(stub(
                    call.request, timeout=remaining,
                    wait_for_ready=attempt > 0 or None))
            except grpc.RpcError as err:
                attempt += 1
                pause = self._retry_pause(call, err, attempt, deadline)
            time.sleep(pause)

    # -- the RPCs --
    def publish_manifest(self, manifest: Optional["pb.StoreManifest"] = None,
                         *, layout: Optional["pb.StoreLayout"] = None,
                         namespace: Optional[str] = None,
                         model_id: Optional[str] = None,
                         model_revision: Optional[str] = None,
                         semantic_fingerprint: Optional[str] = None,
                         timeout: Optional[float] = None
                         ) -> "pb.PublishManifestResponse":
        """Publishes a manifest (given whole, or as ``layout`` plus the
        four naming fields). Publishing the same content again succeeds
        with ``created=False``."""
        m = _calls.manifest_of(manifest, layout, dict(
            namespace=namespace, model_id=model_id,
            model_revision=model_revision,
            semantic_fingerprint=semantic_fingerprint))
        return self._run(_calls.publish_manifest(m), timeout)

    def get_manifest(self, manifest_key: str, *,
                     timeout: Optional[float] = None
                     ) -> "pb.GetManifestResponse":
        """The published manifest; NOT_FOUND when unknown."""
        return self._run(_calls.get_manifest(manifest_key), timeout)

    def register_pages(self, manifest_key: str, page_keys: Sequence[str], *,
                       timeout: Optional[float] = None) -> int:
        """Binds page keys to a published manifest; returns how many
        bindings are new."""
        return self._run(_calls.register_pages(manifest_key, page_keys),
                         timeout)

    def forget_pages(self, model_domain: str, page_keys: Sequence[str], *,
                     manifest_key: str = "",
                     timeout: Optional[float] = None) -> int:
        """Forgets page bindings (of one manifest, or all when
        ``manifest_key`` is empty); returns how many were removed."""
        return self._run(_calls.forget_pages(model_domain, page_keys,
                                             manifest_key), timeout)

    def register_placement(self, placement: "pb.Placement", *,
                           timeout: Optional[float] = None) -> str:
        """Validates and caches a placement; returns its placement id."""
        return self._run(_calls.register_placement(placement), timeout)

    def plan_upload(self, placement: "pb.Placement", *,
                    format: FormatLike = "PLHD",
                    dp_rank: Optional[int] = None,
                    timeout: Optional[float] = None
                    ) -> "pb.PlanUploadResponse":
        """The layout a writer placement stores (SPEC §2.1) and which
        participant writes each Part."""
        return self._run(_calls.plan_upload(placement, format, dp_rank),
                         timeout)

    def plan_load(self, *, model_domain: str, page_keys: Sequence[str],
                  binding: Optional[BindingLike] = None,
                  pooled: Optional[PooledLike] = None,
                  block_ids: Optional[BlockIds] = None,
                  placement: Optional["pb.Placement"] = None,
                  placement_id: Optional[str] = None,
                  target_dp_rank: Optional[int] = None,
                  limits: Optional["pb.Limits"] = None,
                  preferred_layout_ids: Sequence[str] = (),
                  operation_id: str = "", runs: bool = False,
                  timeout: Optional[float] = None) -> LoadPlan:
        """Plans the reader's copies for the hit prefix of ``page_keys``
        (SPEC §2.2) into its memory: ``binding`` (a :class:`reshard.Binding`
        or a ``RuntimeBinding``) or ``pooled`` (SPEC §1.5a: a registered
        memory id, a :class:`reshard.Pool` or ``MemoryPool`` sent inline,
        each with ``block_ids``, or a whole ``PooledMemory``), exactly one
        of them. The target is ``placement`` or a registered
        ``placement_id``; ``runs`` asks for strided runs."""
        return self._run(_calls.plan_load(
            model_domain, page_keys, binding, placement, placement_id,
            target_dp_rank, limits, preferred_layout_ids, operation_id,
            runs, pooled, block_ids), timeout)

    def plan_store(self, *, manifest_key: str, page_count: int,
                   binding: Optional[BindingLike] = None,
                   pooled: Optional[PooledLike] = None,
                   block_ids: Optional[BlockIds] = None,
                   placement: Optional["pb.Placement"] = None,
                   placement_id: Optional[str] = None,
                   dp_rank: Optional[int] = None,
                   limits: Optional["pb.Limits"] = None,
                   runs: bool = False, operation_id: str = "",
                   timeout: Optional[float] = None) -> StorePlan:
        """Plans a writer's copies from its memory (``binding`` or
        ``pooled`` with ``block_ids``, as for :meth:`plan_load`) into the
        Parts it writes for pages ``0 .. page_count-1`` (SPEC §2.5)."""
        return self._run(_calls.plan_store(
            manifest_key, binding, page_count, placement, placement_id,
            dp_rank, limits, runs, operation_id, pooled, block_ids), timeout)

    def register_memory(self, pool: PoolLike, *,
                        placement: Optional["pb.Placement"] = None,
                        placement_id: Optional[str] = None,
                        timeout: Optional[float] = None
                        ) -> RegisteredMemory:
        """Validates a memory pool (a :class:`reshard.Pool` or a
        ``MemoryPool``) against ``placement`` or a registered
        ``placement_id`` and stores it (SPEC §1.5a). Returns
        ``(memory_id, created)``; registering the same pool again returns
        the same id with ``created=False``."""
        call = _calls.register_memory(pool, placement, placement_id)
        return self._run(call, timeout)

    def plan_transfer(self, *,
                      source_memory_ids: Sequence[str],
                      source_block_ids: BlockIds, token_count: int,
                      source_placement: Optional["pb.Placement"] = None,
                      source_placement_id: Optional[str] = None,
                      source_dp_rank: Optional[int] = None,
                      target_placement: Optional["pb.Placement"] = None,
                      target_placement_id: Optional[str] = None,
                      target_dp_rank: Optional[int] = None,
                      binding: Optional[BindingLike] = None,
                      pooled: Optional[PooledLike] = None,
                      block_ids: Optional[BlockIds] = None,
                      limits: Optional["pb.Limits"] = None,
                      runs: bool = False, operation_id: str = "",
                      timeout: Optional[float] = None) -> TransferPlan:
        """Plans the transfer of tokens ``[0, token_count)`` from a live
        source instance's registered pools into one target participant's
        memory (SPEC §2.6, prefill/decode disaggregation).

        The source is ``source_placement`` or a registered
        ``source_placement_id`` (DP rank ``source_dp_rank``, default the
        lowest), ``source_memory_ids`` the memory ids its participants'
        pools were registered with (any order; pools the plan does not read
        are allowed) and ``source_block_ids`` the block table the source DP
        replica shares across its ranks. The target is ``target_placement``
        or ``target_placement_id`` (``target_dp_rank``) and its memory
        ``binding`` over the span or ``pooled`` with ``block_ids``, as for
        :meth:`plan_load`. ``runs`` asks for strided runs. Returns a
        :class:`reshard.TransferPlan`; every batch reads one source."""
        return self._run(_calls.plan_transfer(
            source_placement, source_placement_id, source_dp_rank,
            source_memory_ids, source_block_ids, token_count,
            target_placement, target_placement_id, target_dp_rank, binding,
            pooled, block_ids, limits, runs, operation_id), timeout)

    def forget_memory(self, memory_id: str, *,
                      timeout: Optional[float] = None) -> bool:
        """Forgets a registered pool (its engine restarted or left);
        returns whether it was known. Not retried: a replay would report
        False."""
        return self._run(_calls.forget_memory(memory_id), timeout)

    def health(self, service: str = "", *,
               timeout: Optional[float] = None) -> str:
        """``grpc.health.v1`` status name of ``service`` (``""``: the
        daemon, ``"reshard.v1.Planner"``): ``"SERVING"``,
        ``"NOT_SERVING"`` ..."""
        return self._run(_calls.health(service), timeout)
