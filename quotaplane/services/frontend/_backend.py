"""The frontend's side of gRPC: batched calls to the gateway, plain calls to the AdminService.

Everything here runs on the frontend's event loop with ``grpc.aio`` channels. The hot paths
(GetTelemetrySubscriptions, PushTelemetry, request-time recording, the proxy's produce usage and topic
mutations, connection admission and release, disconnects) go through one :class:`~._batcher.Batcher` each, so
thousands of connections share a handful of RPCs per millisecond. Admin calls are rare and go one by one,
carrying the Kafka client's principal (``x-quotaplane-principal``; ``x-quotaplane-principal-bin``, its UTF-8
bytes, when it is not plain ASCII) and the frontend's own bearer token (``quotaplane up`` makes one up for it
at each start): the frontend has already authenticated the Kafka
client (SASL) and authorized it (Kafka's ACL check); the token proves to the AdminService that the call comes
from a frontend it trusts, and is what lets the principal asserted here be recorded with the change (the
AdminService ignores that header from any other credential, and records the credential's own principal).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import grpc

from quotaplane.services.admin import principal_metadata
from quotaplane.v1 import admin_pb2_grpc, connection_pb2_grpc, quota_pb2_grpc, telemetry_pb2_grpc
from quotaplane.v1 import connection_pb2 as conn_pb
from quotaplane.v1 import quota_pb2 as quota_pb
from quotaplane.v1 import telemetry_pb2 as tele_pb

from ._batcher import Batcher

__all__ = ["Backend", "GrpcTarget", "PushItem", "push_batch"]

#: One PushTelemetry for the gateway: (client_instance_id, subscription_id, terminating, compression_type, metrics,
#: context, now_ms), the columns of ``telemetry_pb2.PushTelemetryColumns`` in order (the context serialized:
#: ``ConnectionState.telemetry_context_wire``).
PushItem = tuple[bytes, int, bool, int, bytes, bytes, int]

#: The gateway refuses larger batches (GatewayConfig.max_batch_items is 10,000); stay well below it.
_MAX_BATCH = 1000
#: A PushTelemetry batch carries pushes of up to telemetry.max.bytes (1 MiB) each: one gRPC message stays
#: well below the gateway's 64 MiB limit, while typical pushes (~0.5 kB from librdkafka) batch by the hundred.
_MAX_PUSH_BATCH_BYTES = 16 * 1024 * 1024
_GRPC_OPTIONS = [
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


def push_batch(batch_id: int, items: Sequence[PushItem]) -> tele_pb.PushTelemetryBatch:
    """The batch message of ``items`` as columns (``PushTelemetryColumns``): one C call a column, where a
    ``PushTelemetryRequest`` per push, built in place, cost ~1.2 us a push more on the frontend's loop and ~1 us
    more to read in the gateway (docs/performance.md)."""
    batch = tele_pb.PushTelemetryBatch(batch_id=batch_id)
    if not items:
        return batch
    columns = batch.columns
    instance_ids, subscription_ids, terminating, compression_types, metrics, contexts, times = zip(*items, strict=True)
    columns.client_instance_id.extend(instance_ids)
    columns.subscription_id.extend(subscription_ids)
    columns.terminating.extend(terminating)
    columns.compression_type.extend(compression_types)
    columns.metrics.extend(metrics)
    columns.context.extend(contexts)
    columns.now_ms.extend(times)
    return batch


class GrpcTarget:
    """Where a service listens and how to reach it: plaintext, or TLS with the given roots (and a client
    certificate for mutual TLS), and an optional bearer token for the AdminService."""

    def __init__(
        self,
        address: str,
        *,
        root_certificates: bytes | None = None,
        private_key: bytes | None = None,
        certificate_chain: bytes | None = None,
        server_name: str | None = None,
        token: str | None = None,
    ) -> None:
        self.address = address
        self.root_certificates = root_certificates
        self.private_key = private_key
        self.certificate_chain = certificate_chain
        self.server_name = server_name
        self.token = token

    @property
    def tls(self) -> bool:
        return self.root_certificates is not None or self.certificate_chain is not None

    def channel(self) -> grpc.aio.Channel:
        options = list(_GRPC_OPTIONS)
        if not self.tls:
            return grpc.aio.insecure_channel(self.address, options=options)
        if self.server_name:
            options.append(("grpc.ssl_target_name_override", self.server_name))
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.root_certificates,
            private_key=self.private_key,
            certificate_chain=self.certificate_chain,
        )
        return grpc.aio.secure_channel(self.address, credentials, options=options)


class Backend:
    """The gateway's TelemetryService / ConnectionService / QuotaService and the AdminService, batched.

    Create it on the event loop that will use it; :meth:`close` on the same loop.
    """

    def __init__(
        self, gateway: GrpcTarget, admin: GrpcTarget, *, linger_s: float = 0.0, timeout_s: float = 30.0
    ) -> None:
        self._gateway_channel = gateway.channel()
        self._admin_channel = admin.channel()
        self._admin_token = admin.token
        self.timeout_s = timeout_s
        self.telemetry = telemetry_pb2_grpc.TelemetryServiceStub(self._gateway_channel)
        self.connections = connection_pb2_grpc.ConnectionServiceStub(self._gateway_channel)
        self.quotas = quota_pb2_grpc.QuotaServiceStub(self._gateway_channel)
        self.producer_ids = quota_pb2_grpc.ProducerIdServiceStub(self._gateway_channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self._admin_channel)
        self._ids = itertools.count(1)
        self.get_batcher: Batcher[tele_pb.GetTelemetrySubscriptionsRequest, tele_pb.GetTelemetrySubscriptionsResult] = (
            Batcher(self._get, linger_s=linger_s, max_items=_MAX_BATCH, name="get-telemetry-subscriptions")
        )
        self.push_batcher: Batcher[PushItem, tele_pb.PushTelemetryResult] = Batcher(
            self._push,
            linger_s=linger_s,
            max_items=_MAX_BATCH,
            max_bytes=_MAX_PUSH_BATCH_BYTES,
            size_of=lambda item: len(item[4]) + 256,  # the metrics + the context's strings, roughly
            name="push-telemetry",
        )
        self.disconnect_batcher: Batcher[tele_pb.ClientDisconnected, bool] = Batcher(
            self._disconnect, linger_s=linger_s, max_items=_MAX_BATCH, name="client-disconnected"
        )
        self.request_time_batcher: Batcher[quota_pb.RequestTimeItem, int] = Batcher(
            self._request_time, linger_s=linger_s, max_items=_MAX_BATCH, name="request-time"
        )
        self.usage_batcher: Batcher[quota_pb.UsageItem, int] = Batcher(
            self._usage, linger_s=linger_s, max_items=_MAX_BATCH, name="usage"
        )
        self.unrecord_batcher: Batcher[quota_pb.UsageItem, int] = Batcher(
            self._unrecord, linger_s=linger_s, max_items=_MAX_BATCH, name="unrecord"
        )
        self.max_value_batcher: Batcher[quota_pb.UsageItem, float] = Batcher(
            self._max_value, linger_s=linger_s, max_items=_MAX_BATCH, name="max-value-in-quota-window"
        )
        self.producer_id_batcher: Batcher[quota_pb.ProducerIdItem, int] = Batcher(
            self._producer_ids, linger_s=linger_s, max_items=_MAX_BATCH, name="producer-ids"
        )
        self.mutation_batcher: Batcher[quota_pb.MutationItem, quota_pb.MutationResult] = Batcher(
            self._mutations, linger_s=linger_s, max_items=_MAX_BATCH, name="mutations"
        )
        self.admit_batcher: Batcher[conn_pb.AdmitItem, conn_pb.AdmitResult] = Batcher(
            self._admit, linger_s=linger_s, max_items=_MAX_BATCH, name="admit"
        )
        self.release_batcher: Batcher[conn_pb.ReleaseItem, bool] = Batcher(
            self._release, linger_s=linger_s, max_items=_MAX_BATCH, name="release"
        )

    @property
    def batchers(self) -> dict[str, Batcher[Any, Any]]:
        return {
            "get_telemetry_subscriptions": self.get_batcher,
            "push_telemetry": self.push_batcher,
            "client_disconnected": self.disconnect_batcher,
            "request_time": self.request_time_batcher,
            "usage": self.usage_batcher,
            "unrecord": self.unrecord_batcher,
            "max_value_in_quota_window": self.max_value_batcher,
            "producer_ids": self.producer_id_batcher,
            "mutations": self.mutation_batcher,
            "admit": self.admit_batcher,
            "release": self.release_batcher,
        }

    # --- the batched RPCs ----------------------------------------------------------------------------
    async def _get(self, items: list[tele_pb.GetTelemetrySubscriptionsRequest]) -> Sequence[Any]:
        batch = tele_pb.GetTelemetrySubscriptionsBatch(batch_id=next(self._ids), requests=items)
        answer = await self.telemetry.GetTelemetrySubscriptions(batch, timeout=self.timeout_s)
        return answer.results

    async def _push(self, items: list[PushItem]) -> Sequence[Any]:
        batch = push_batch(next(self._ids), items)
        answer = await self.telemetry.PushTelemetry(batch, timeout=self.timeout_s)
        return answer.results

    async def _disconnect(self, items: list[tele_pb.ClientDisconnected]) -> Sequence[bool]:
        batch = tele_pb.ClientDisconnectedBatch(batch_id=next(self._ids), connections=items)
        answer = await self.telemetry.ClientDisconnected(batch, timeout=self.timeout_s)
        return [r.evicted for r in answer.results]

    async def _request_time(self, items: list[quota_pb.RequestTimeItem]) -> Sequence[int]:
        batch = quota_pb.RequestTimeBatch(batch_id=next(self._ids), items=items)
        answer = await self.quotas.RecordRequestTime(batch, timeout=self.timeout_s)
        return answer.throttle_time_ms

    async def _usage(self, items: list[quota_pb.UsageItem]) -> Sequence[int]:
        batch = quota_pb.UsageBatch(batch_id=next(self._ids), items=items)
        answer = await self.quotas.RecordUsageBatch(batch, timeout=self.timeout_s)
        return answer.throttle_time_ms

    async def _unrecord(self, items: list[quota_pb.UsageItem]) -> Sequence[int]:
        batch = quota_pb.UsageBatch(batch_id=next(self._ids), items=items)
        answer = await self.quotas.UnrecordUsage(batch, timeout=self.timeout_s)
        return answer.throttle_time_ms

    async def _max_value(self, items: list[quota_pb.UsageItem]) -> Sequence[float]:
        batch = quota_pb.UsageBatch(batch_id=next(self._ids), items=items)
        answer = await self.quotas.MaxValueInQuotaWindow(batch, timeout=self.timeout_s)
        return answer.max_value

    async def _producer_ids(self, items: list[quota_pb.ProducerIdItem]) -> Sequence[int]:
        batch = quota_pb.ProducerIdBatch(batch_id=next(self._ids), items=items)
        answer = await self.producer_ids.RecordProducerIds(batch, timeout=self.timeout_s)
        return answer.throttle_time_ms

    async def _mutations(self, items: list[quota_pb.MutationItem]) -> Sequence[quota_pb.MutationResult]:
        batch = quota_pb.MutationBatch(batch_id=next(self._ids), items=items)
        answer = await self.quotas.RecordMutations(batch, timeout=self.timeout_s)
        return answer.results

    async def _admit(self, items: list[conn_pb.AdmitItem]) -> Sequence[Any]:
        answer = await self.connections.Admit(
            conn_pb.AdmitBatch(batch_id=next(self._ids), items=items), timeout=self.timeout_s
        )
        return answer.results

    async def _release(self, items: list[conn_pb.ReleaseItem]) -> Sequence[bool]:
        answer = await self.connections.Release(
            conn_pb.ReleaseBatch(batch_id=next(self._ids), items=items), timeout=self.timeout_s
        )
        return answer.released

    # --- the AdminService ------------------------------------------------------------------------------
    async def admin_call(self, method: str, request: Any, principal: str) -> Any:
        """One AdminService RPC on behalf of ``principal``; gRPC errors propagate (``grpc.aio.AioRpcError``)."""
        metadata = [principal_metadata(principal)]
        if self._admin_token:
            metadata.append(("authorization", f"Bearer {self._admin_token}"))
        return await getattr(self.admin, method)(request, metadata=metadata, timeout=self.timeout_s)

    async def close(self) -> None:
        for batcher in self.batchers.values():
            await batcher.drain()
        await self._gateway_channel.close()
        await self._admin_channel.close()
