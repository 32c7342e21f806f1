"""The admin commands' client of the AdminService.

One method per AdminService RPC the commands use, each with its protobuf request and response types, so
an IDE or a type checker sees every call; each applies the same deadline and metadata (the principal
recorded with a change, the operator token), so no command can forget them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import CliError

if TYPE_CHECKING:
    from quotaplane.services._security import ClientSecurity
    from quotaplane.v1 import admin_pb2 as pb

__all__ = ["TIMEOUT_S", "AdminClient", "check_result"]

#: Every call's deadline: an unreachable or stuck service is an error line, never a hang.
TIMEOUT_S = 30.0


def check_result(error_code: int, message: str) -> None:
    """A Kafka error code in a response entry as a :class:`CliError` (its message, else the code)."""
    if error_code:
        raise CliError(message or f"Kafka error code {error_code}")


class AdminClient:
    """One channel to the AdminService (TLS and the operator token as ``security`` says); every call
    carries the principal, the token and a deadline."""

    def __init__(self, address: str, principal: str | None, security: ClientSecurity) -> None:
        from quotaplane.services.admin import PRINCIPAL_METADATA
        from quotaplane.v1 import admin_pb2_grpc

        self.address = address
        self._channel = security.channel(address)
        self._stub = admin_pb2_grpc.AdminServiceStub(self._channel)
        self._metadata = (((PRINCIPAL_METADATA, principal),) if principal else ()) + security.metadata()

    def alter_client_quotas(self, request: pb.AlterClientQuotasRequest) -> pb.AlterClientQuotasResponse:
        return self._stub.AlterClientQuotas(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def describe_client_quotas(self, request: pb.DescribeClientQuotasRequest) -> pb.DescribeClientQuotasResponse:
        return self._stub.DescribeClientQuotas(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def incremental_alter_configs(
        self, request: pb.IncrementalAlterConfigsRequest
    ) -> pb.IncrementalAlterConfigsResponse:
        return self._stub.IncrementalAlterConfigs(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def describe_configs(self, request: pb.DescribeConfigsRequest) -> pb.DescribeConfigsResponse:
        return self._stub.DescribeConfigs(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def list_client_metrics_resources(
        self, request: pb.ListClientMetricsResourcesRequest
    ) -> pb.ListClientMetricsResourcesResponse:
        return self._stub.ListClientMetricsResources(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def get_log_offsets(self, request: pb.GetLogOffsetsRequest) -> pb.GetLogOffsetsResponse:
        return self._stub.GetLogOffsets(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def entity_history(self, request: pb.EntityHistoryRequest) -> pb.EntityHistoryResponse:
        return self._stub.EntityHistory(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def describe_client_quotas_at(self, request: pb.DescribeClientQuotasAtRequest) -> pb.DescribeClientQuotasAtResponse:
        return self._stub.DescribeClientQuotasAt(request, timeout=TIMEOUT_S, metadata=self._metadata)

    def close(self) -> None:
        self._channel.close()
