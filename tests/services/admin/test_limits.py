"""The AdminService, over real gRPC on loopback, accepts only names and values Kafka can carry back.

A request holding a string a Kafka client could not receive (over 32,767 bytes of UTF-8, or not valid
UTF-8) is refused whole before the store sees it: INVALID_ARGUMENT, the field named by its path, Kafka's
INVALID_REQUEST in the error-code trailer, and nothing written (the log's end offset does not move).
"""

from __future__ import annotations

import grpc
import pytest

from quotaplane.config import MAX_STRING_BYTES
from quotaplane.errors import Errors
from quotaplane.services.admin import KAFKA_ERROR_CODE_TRAILER, PRINCIPAL_METADATA, AdminServicer
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import config_events_pb2 as events_pb

Entry = pb.AlterClientQuotasRequest.EntryData
Op = pb.AlterClientQuotasRequest.OpData
Component = pb.DescribeClientQuotasRequest.ComponentData
Resource = pb.IncrementalAlterConfigsRequest.AlterConfigsResource
Config = pb.IncrementalAlterConfigsRequest.AlterableConfig
TOO_LONG = "n" * (MAX_STRING_BYTES + 1)


def quota_entry(name: str, entity_type: str = "user") -> Entry:
    return Entry(
        entity=[events_pb.EntityData(entity_type=entity_type, entity_name=name)],
        ops=[Op(key="producer_byte_rate", value=1024)],
    )


def refused(call, request, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as exc:
        call(request, **kwargs)
    error = exc.value
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT, error
    assert dict(error.trailing_metadata() or ())[KAFKA_ERROR_CODE_TRAILER] == str(int(Errors.INVALID_REQUEST))
    return error


def everything(stub) -> list:
    return list(stub.DescribeClientQuotas(pb.DescribeClientQuotasRequest()).entries)


def end_offset(stub) -> int:
    return stub.GetLogOffsets(pb.GetLogOffsetsRequest()).end_offset


def test_a_32768_byte_name_is_refused_naming_the_field_and_nothing_is_written(stub) -> None:
    before = end_offset(stub)
    request = pb.AlterClientQuotasRequest(entries=[quota_entry("fine"), quota_entry(TOO_LONG, "client-id")])
    error = refused(stub.AlterClientQuotas, request)
    assert error.details() == (
        "entries[1].entity[0].entity_name: 32768 bytes of UTF-8, above the 32767 a Kafka string can carry"
    )
    assert end_offset(stub) == before
    assert everything(stub) == []  # the whole request is refused: the good entry was not applied either


def test_a_32767_byte_name_is_accepted_and_described(stub) -> None:
    name = "é" * (MAX_STRING_BYTES // 2) + "x"
    answer = stub.AlterClientQuotas(pb.AlterClientQuotasRequest(entries=[quota_entry(name)]))
    assert [e.error_code for e in answer.entries] == [0]
    [entry] = stub.DescribeClientQuotas(
        pb.DescribeClientQuotasRequest(components=[Component(entity_type="user", match_type=0, match=name)])
    ).entries
    assert entry.entity[0].entity_name == name


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (
            pb.IncrementalAlterConfigsRequest(
                resources=[
                    Resource(
                        resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS,
                        resource_name="m",
                        configs=[Config(name="metrics", config_operation=pb.ALTER_CONFIG_OP_TYPE_SET, value=TOO_LONG)],
                    )
                ]
            ),
            "resources[0].configs[0].value",
        ),
        (
            pb.IncrementalAlterConfigsRequest(
                resources=[Resource(resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS, resource_name=TOO_LONG)]
            ),
            "resources[0].resource_name",
        ),
        (pb.AlterClientQuotasRequest(entries=[quota_entry("u")], request_id=TOO_LONG), "request_id"),
    ],
    ids=["config-value", "client-metrics-name", "request-id"],
)
def test_every_string_field_is_checked(stub, request_, field: str) -> None:
    before = end_offset(stub)
    call = stub.IncrementalAlterConfigs if isinstance(request_, pb.IncrementalAlterConfigsRequest) else None
    error = refused(call or stub.AlterClientQuotas, request_)
    assert error.details().startswith(f"{field}: 32768 bytes of UTF-8")
    assert end_offset(stub) == before
    assert list(stub.ListClientMetricsResources(pb.ListClientMetricsResourcesRequest()).client_metrics_resources) == []


def test_describe_filters_and_history_keys_are_checked_too(stub) -> None:
    refused(
        stub.DescribeClientQuotas,
        pb.DescribeClientQuotasRequest(components=[Component(entity_type="user", match_type=0, match=TOO_LONG)]),
    )
    refused(stub.EntityHistory, pb.EntityHistoryRequest(client_metrics="m", key=TOO_LONG))


def test_malformed_utf8_is_invalid_argument_naming_the_field(admin_server, channel, stub) -> None:
    """A lone surrogate cannot even be serialized by a protobuf client; a raw client can still send its bytes
    (CESU-style ``ED B0 80``), or any malformed UTF-8: the server names the field instead of gRPC's INTERNAL."""
    raw_call = channel.unary_unary(
        "/quotaplane.v1.AdminService/AlterClientQuotas",
        request_serializer=lambda data: data,
        response_deserializer=pb.AlterClientQuotasResponse.FromString,
    )
    placeholder = "\x01" * 3
    good = pb.AlterClientQuotasRequest(
        entries=[quota_entry("ok"), quota_entry(f"bad{placeholder}")]
    ).SerializeToString()
    for bad_bytes in (b"\xed\xb0\x80", b"\xff\xfe\xfd"):  # an encoded lone surrogate; bytes that are never UTF-8
        error = refused(raw_call, good.replace(placeholder.encode(), bad_bytes))
        assert error.details() == "entries[1].entity[0].entity_name: not valid UTF-8"
    assert end_offset(stub) == 0
    with pytest.raises(UnicodeEncodeError):  # what a Python client does with a lone surrogate
        pb.AlterClientQuotasRequest(entries=[quota_entry("a\udcff")]).SerializeToString()


def test_the_principal_is_a_kafka_string_too(stub) -> None:
    """The principal is logged with the change and returned by EntityHistory, so the same rule applies to it.
    gRPC metadata is printable ASCII and at most 8 KiB by default, so over the wire only that limit shows (a
    longer principal never reaches the servicer); the servicer's own check is the backstop behind it."""
    principal = "User:" + "p" * 7_000
    answer = stub.AlterClientQuotas(
        pb.AlterClientQuotasRequest(entries=[quota_entry("u")]), metadata=((PRINCIPAL_METADATA, principal),)
    )
    assert [e.error_code for e in answer.entries] == [0]
    [entry] = stub.EntityHistory(
        pb.EntityHistoryRequest(entity=pb.ClientQuotaEntity(entity=quota_entry("u").entity))
    ).entries
    assert entry.principal == principal

    class Context:
        def invocation_metadata(self):
            return ((PRINCIPAL_METADATA, "User:" + TOO_LONG),)

    with pytest.raises(Exception, match=r"x-quotaplane-principal 'User:nnn.*32773 bytes of UTF-8"):
        AdminServicer._principal(Context())  # type: ignore[arg-type]
