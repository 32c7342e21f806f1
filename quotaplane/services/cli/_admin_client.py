"""The admin commands' client of the AdminService.

One method per AdminService RPC the commands use, each with its protobuf request and response types, so
an IDE or a type checker sees every call; each applies the same deadline and metadata (the principal
recorded with a change, the operator token), so no command can forget them. Every answer's trailing
metadata names the cluster it comes from (``x-quotaplane-cluster-id``); told which cluster to expect
(``--cluster-id`` / ``$QUOTAPLANE_CLUSTER_ID``), the client refuses any other answer, errors included, with
one line naming both ids: with fixed default ports, a second instance on the same host would otherwise answer
silently in the first one's place.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import CliError

if TYPE_CHECKING:
    from quotaplane.services._security import ClientSecurity
    from quotaplane.v1 import admin_pb2 as pb

__all__ = ["TIMEOUT_S", "AdminClient", "check_result"]

_Response = TypeVar("_Response")

#: Every call's deadline: an unreachable or stuck service is an error line, never a hang.
TIMEOUT_S = 30.0
#: AlterShardCount answers once every shard has its moved state (new shards start first): give it longer
RESHARD_TIMEOUT_S = 180.0


def check_result(error_code: int, message: str) -> None:
    """A Kafka error code in a response entry as a :class:`CliError` (its message, else the code)."""
    if error_code:
        raise CliError(message or f"Kafka error code {error_code}")


class AdminClient:
    """One channel to the AdminService (TLS and the operator token as ``security`` says); every call
    carries the principal, the token and a deadline, and its answer's cluster id is checked against
    ``expected_cluster_id`` (None: any; :attr:`cluster_id` is the last one seen)."""

    def __init__(
        self,
        address: str,
        principal: str | None,
        security: ClientSecurity,
        *,
        expected_cluster_id: str | None = None,
    ) -> None:
        from quotaplane.services.admin import principal_metadata
        from quotaplane.v1 import admin_pb2_grpc

        self.address = address
        self.expected_cluster_id = expected_cluster_id or None
        self.cluster_id: str | None = None
        self._channel = security.channel(address)
        self._stub = admin_pb2_grpc.AdminServiceStub(self._channel)
        self._metadata = ((principal_metadata(principal),) if principal else ()) + security.metadata()

    def _check_cluster(self, trailers: Any) -> None:
        from quotaplane.services.admin import CLUSTER_ID_TRAILER

        found = next((v for k, v in trailers or () if k == CLUSTER_ID_TRAILER and isinstance(v, str)), None)
        self.cluster_id = found
        if self.expected_cluster_id is None or found == self.expected_cluster_id:
            return
        if found is None:
            raise CliError(
                f"the admin service at {self.address} does not say its cluster id; "
                f"expected cluster {self.expected_cluster_id}"
            )
        raise CliError(
            f"the admin service at {self.address} is cluster {found}, not the expected {self.expected_cluster_id} "
            "(another instance on this address?)"
        )

    def _call(
        self, method: Callable[..., tuple[_Response, Any]], request: Any, timeout_s: float = TIMEOUT_S
    ) -> _Response:
        """``method.with_call`` with the deadline and metadata, its answer's cluster id checked; an error from
        another cluster than the expected one is that mismatch, not the error."""
        import grpc

        try:
            response, call = method.with_call(request, timeout=timeout_s, metadata=self._metadata)  # type: ignore[attr-defined]
        except grpc.RpcError as e:
            if self.expected_cluster_id is not None and isinstance(e, grpc.Call):
                code = e.code()
                if code not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    self._check_cluster(e.trailing_metadata())
            raise
        self._check_cluster(call.trailing_metadata())
        return response

    def alter_client_quotas(self, request: pb.AlterClientQuotasRequest) -> pb.AlterClientQuotasResponse:
        return self._call(self._stub.AlterClientQuotas, request)

    def describe_client_quotas(self, request: pb.DescribeClientQuotasRequest) -> pb.DescribeClientQuotasResponse:
        return self._call(self._stub.DescribeClientQuotas, request)

    def incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest
    ) -> pb.IncrementalAlterConfigsResponse:
        return self._call(self._stub.IncrementalAlterConfigs, request)

    def describe_configs(self, request: pb.DescribeConfigsRequest) -> pb.DescribeConfigsResponse:
        return self._call(self._stub.DescribeConfigs, request)

    def list_client_metrics_resources(
        self, request: pb.ListClientMetricsResourcesRequest
    ) -> pb.ListClientMetricsResourcesResponse:
        return self._call(self._stub.ListClientMetricsResources, request)

    def get_log_offsets(self, request: pb.GetLogOffsetsRequest) -> pb.GetLogOffsetsResponse:
        return self._call(self._stub.GetLogOffsets, request)

    def entity_history(self, request: pb.EntityHistoryRequest) -> pb.EntityHistoryResponse:
        return self._call(self._stub.EntityHistory, request)

    def describe_client_quotas_at(self, request: pb.DescribeClientQuotasAtRequest) -> pb.DescribeClientQuotasAtResponse:
        return self._call(self._stub.DescribeClientQuotasAt, request)

    def alter_shard_count(self, request: pb.AlterShardCountRequest) -> pb.AlterShardCountResponse:
        # new shards start (Ray workers) and every shard hands its moved keys over before the answer
        return self._call(self._stub.AlterShardCount, request, timeout_s=RESHARD_TIMEOUT_S)

    def describe_shards(self, request: pb.DescribeShardsRequest) -> pb.DescribeShardsResponse:
        return self._call(self._stub.DescribeShards, request)

    def close(self) -> None:
        self._channel.close()
