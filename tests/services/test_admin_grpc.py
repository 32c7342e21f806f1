"""The AdminService over real gRPC on loopback, against a real ConfigStore: Kafka's answers, gRPC statuses."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from quotaplane.errors import Errors
from quotaplane.services.admin import KAFKA_ERROR_CODE_TRAILER, PRINCIPAL_METADATA, SERVICE_NAME, serve
from quotaplane.v1 import admin_pb2 as pb
from quotaplane.v1 import admin_pb2_grpc
from quotaplane.v1 import config_events_pb2 as events_pb

from .conftest import T0_MS

Component = pb.DescribeClientQuotasRequest.ComponentData
Entry = pb.AlterClientQuotasRequest.EntryData
Op = pb.AlterClientQuotasRequest.OpData
Resource = pb.IncrementalAlterConfigsRequest.AlterConfigsResource
Config = pb.IncrementalAlterConfigsRequest.AlterableConfig


def entity(**names: str | None) -> list[events_pb.EntityData]:
    """``entity(user="alice", client_id=None)``: components as protobuf (None: the default entity)."""
    out = []
    for entity_type, name in names.items():
        data = events_pb.EntityData(entity_type=entity_type.replace("_", "-"))
        if name is not None:
            data.entity_name = name
        out.append(data)
    return out


def as_dict(entries) -> dict:
    """Describe entries as {((type, name), ...): {key: value}}."""
    return {
        tuple((e.entity_type, e.entity_name if e.HasField("entity_name") else None) for e in entry.entity): {
            v.key: v.value for v in entry.values
        }
        for entry in entries
    }


def alter(stub, *entries: Entry, principal: str | None = None, **kwargs) -> pb.AlterClientQuotasResponse:
    metadata = ((PRINCIPAL_METADATA, principal),) if principal else None
    return stub.AlterClientQuotas(pb.AlterClientQuotasRequest(entries=entries, **kwargs), metadata=metadata)


def rejected(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as exc:
        call(*args, **kwargs)
    return exc.value


def kafka_code(error: grpc.RpcError) -> int | None:
    for key, value in error.trailing_metadata() or ():
        if key == KAFKA_ERROR_CODE_TRAILER:
            return int(value)
    return None


# --- client quotas ---------------------------------------------------------------------------------------
def test_alter_and_describe_client_quotas(stub):
    response = alter(
        stub,
        Entry(entity=entity(user="alice"), ops=[Op(key="producer_byte_rate", value=1048576)]),
        Entry(entity=entity(user="alice", client_id=None), ops=[Op(key="consumer_byte_rate", value=2048)]),
        Entry(entity=entity(ip=None), ops=[Op(key="connection_creation_rate", value=10)]),
        request_id="r1",
    )
    assert [e.error_code for e in response.entries] == [0, 0, 0]
    assert not response.entries[0].HasField("error_message")
    assert response.entries[1].entity == entity(user="alice", client_id=None)

    everything = as_dict(stub.DescribeClientQuotas(pb.DescribeClientQuotasRequest()).entries)
    assert everything == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0},
        (("client-id", None), ("user", "alice")): {"consumer_byte_rate": 2048.0},
        (("ip", None),): {"connection_creation_rate": 10.0},
    }
    exact = pb.DescribeClientQuotasRequest(components=[Component(entity_type="user", match="alice")], strict=True)
    assert as_dict(stub.DescribeClientQuotas(exact).entries) == {
        (("user", "alice"),): {"producer_byte_rate": 1048576.0}
    }
    default_client = pb.DescribeClientQuotasRequest(
        components=[Component(entity_type="client-id", match_type=pb.MATCH_TYPE_DEFAULT)]
    )
    assert list(as_dict(stub.DescribeClientQuotas(default_client).entries)) == [
        (("client-id", None), ("user", "alice"))
    ]
    any_user = pb.DescribeClientQuotasRequest(
        components=[Component(entity_type="user", match_type=pb.MATCH_TYPE_SPECIFIED)]
    )
    assert len(stub.DescribeClientQuotas(any_user).entries) == 2

    # removal: an op without a value
    alter(stub, Entry(entity=entity(user="alice"), ops=[Op(key="producer_byte_rate")]))
    assert as_dict(stub.DescribeClientQuotas(exact).entries) == {}


def test_per_entity_kafka_errors_are_results_and_the_other_entities_apply(stub):
    response = alter(
        stub,
        Entry(entity=entity(user="bob"), ops=[Op(key="producer_byte_rate", value=-1)]),
        Entry(entity=entity(ip="10.0.0.1", user="x"), ops=[Op(key="connection_creation_rate", value=1)]),
        Entry(entity=entity(user="carol"), ops=[Op(key="no_such_key", value=1)]),
        Entry(entity=entity(user="dave"), ops=[Op(key="request_percentage", value=50)]),
    )
    codes = [e.error_code for e in response.entries]
    assert codes == [Errors.INVALID_REQUEST] * 3 + [0]
    assert response.entries[0].error_message == "Quota producer_byte_rate must be greater than 0"
    assert "IP entity shouldnot be combined" in response.entries[1].error_message
    assert response.entries[2].error_message == "Invalid configuration key no_such_key"
    assert as_dict(stub.DescribeClientQuotas(pb.DescribeClientQuotasRequest()).entries) == {
        (("user", "dave"),): {"request_percentage": 50.0}
    }


def test_validate_only_and_request_ids(admin_server, stub):
    entry = Entry(entity=entity(user="erin"), ops=[Op(key="producer_byte_rate", value=100)])
    assert alter(stub, entry, validate_only=True).entries[0].error_code == 0
    assert admin_server.store.end_offset == 0
    alter(stub, entry, request_id="same")
    alter(stub, Entry(entity=entity(user="erin"), ops=[Op(key="producer_byte_rate", value=200)]), request_id="same")
    assert admin_server.store.end_offset == 1  # the retry was answered, not applied again
    error = rejected(alter, stub, entry, request_id="x" * 257)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "request_id" in error.details()


@pytest.mark.parametrize(
    ("components", "message", "code"),
    [
        ([Component(entity_type="group", match="g")], "Unsupported entity type group", Errors.UNSUPPORTED_VERSION),
        ([Component(entity_type="user")], "MATCH_TYPE_EXACT, but set match string to null", Errors.INVALID_REQUEST),
        (
            [Component(entity_type="user", match_type=pb.MATCH_TYPE_DEFAULT, match="x")],
            "also specified a match string",
            Errors.INVALID_REQUEST,
        ),
        (
            [Component(entity_type="ip", match="1.2.3.4"), Component(entity_type="user", match="a")],
            "IP filter component should not be used",
            Errors.INVALID_REQUEST,
        ),
        ([Component(entity_type="user", match_type=7)], "Unknown match type 7", Errors.INVALID_REQUEST),
        ([Component(entity_type="")], "Invalid empty entity type.", Errors.INVALID_REQUEST),
    ],
)
def test_invalid_describe_filters_are_invalid_argument(stub, components, message, code):
    error = rejected(stub.DescribeClientQuotas, pb.DescribeClientQuotasRequest(components=components))
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.details()
    assert "Traceback" not in error.details()
    assert kafka_code(error) == code


# --- configs and client-metrics resources ----------------------------------------------------------------
def test_incremental_alter_and_describe_configs(stub):
    set_, delete, append = pb.ALTER_CONFIG_OP_TYPE_SET, pb.ALTER_CONFIG_OP_TYPE_DELETE, pb.ALTER_CONFIG_OP_TYPE_APPEND
    response = stub.IncrementalAlterConfigs(
        pb.IncrementalAlterConfigsRequest(
            resources=[
                Resource(
                    resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS,
                    resource_name="cm",
                    configs=[
                        Config(name="metrics", config_operation=set_, value="org.apache.kafka.producer."),
                        Config(name="interval.ms", config_operation=set_, value="60000"),
                    ],
                ),
                Resource(
                    resource_type=pb.RESOURCE_TYPE_BROKER,
                    resource_name="",
                    configs=[Config(name="max.connections", config_operation=set_, value="1000")],
                ),
                Resource(
                    resource_type=pb.RESOURCE_TYPE_TOPIC,
                    resource_name="orders",
                    configs=[
                        Config(name="leader.replication.throttled.replicas", config_operation=append, value="0:1")
                    ],
                ),
                # per-resource Kafka errors: a bad value, APPEND on a non-LIST, an unknown type, SET without value
                Resource(
                    resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS,
                    resource_name="bad",
                    configs=[Config(name="interval.ms", config_operation=set_, value="10")],
                ),
                Resource(
                    resource_type=pb.RESOURCE_TYPE_BROKER,
                    resource_name="1",
                    configs=[Config(name="max.connections", config_operation=append, value="1")],
                ),
                Resource(resource_type=pb.RESOURCE_TYPE_UNKNOWN, resource_name="x"),
                Resource(
                    resource_type=pb.RESOURCE_TYPE_BROKER,
                    resource_name="2",
                    configs=[Config(name="max.connections", config_operation=set_)],
                ),
            ],
            request_id="cfg-1",
        )
    )
    codes = [(r.resource_type, r.resource_name, r.error_code) for r in response.responses]
    assert codes == [
        (pb.RESOURCE_TYPE_CLIENT_METRICS, "cm", 0),
        (pb.RESOURCE_TYPE_BROKER, "", 0),
        (pb.RESOURCE_TYPE_TOPIC, "orders", 0),
        (pb.RESOURCE_TYPE_CLIENT_METRICS, "bad", Errors.INVALID_REQUEST),
        (pb.RESOURCE_TYPE_BROKER, "1", Errors.INVALID_CONFIG),
        (pb.RESOURCE_TYPE_UNKNOWN, "x", Errors.INVALID_REQUEST),
        (pb.RESOURCE_TYPE_BROKER, "2", Errors.INVALID_REQUEST),
    ]
    assert "because its type is not LIST" in response.responses[4].error_message
    assert response.responses[6].error_message == "Null value not supported for max.connections"

    describe = stub.DescribeConfigs(
        pb.DescribeConfigsRequest(
            resources=[
                pb.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS, resource_name="cm"
                ),
                pb.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=pb.RESOURCE_TYPE_BROKER, resource_name="1", configuration_keys=["max.connections"]
                ),
                pb.DescribeConfigsRequest.DescribeConfigsResource(
                    resource_type=pb.RESOURCE_TYPE_TOPIC, resource_name="bad/topic"
                ),
            ],
            include_documentation=True,
        )
    )
    cm, broker, topic = describe.results
    assert {c.name: (c.value, c.config_type) for c in cm.configs} == {
        "interval.ms": ("60000", pb.CONFIG_TYPE_INT),
        "metrics": ("org.apache.kafka.producer.", pb.CONFIG_TYPE_LIST),
    }
    [max_connections] = broker.configs
    # node 1 has no value of its own: the cluster default set above applies
    assert (max_connections.name, max_connections.value, max_connections.is_default) == (
        "max.connections",
        "1000",
        False,
    )
    assert max_connections.HasField("documentation")
    assert topic.error_code == Errors.INVALID_TOPIC_EXCEPTION and topic.error_message

    listed = stub.ListClientMetricsResources(pb.ListClientMetricsResourcesRequest())
    assert [r.name for r in listed.client_metrics_resources] == ["cm"]

    # deleting every config of a client-metrics resource deletes it
    stub.IncrementalAlterConfigs(
        pb.IncrementalAlterConfigsRequest(
            resources=[
                Resource(
                    resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS,
                    resource_name="cm",
                    configs=[
                        Config(name="metrics", config_operation=delete),
                        Config(name="interval.ms", config_operation=delete),
                    ],
                )
            ]
        )
    )
    assert not stub.ListClientMetricsResources(pb.ListClientMetricsResourcesRequest()).client_metrics_resources


# --- the log ---------------------------------------------------------------------------------------------
def test_log_offsets_history_and_principal(admin_server, stub):
    assert stub.GetLogOffsets(pb.GetLogOffsetsRequest()) == pb.GetLogOffsetsResponse(start_offset=0, end_offset=0)
    alice = entity(user="alice")
    alter(
        stub, Entry(entity=alice, ops=[Op(key="producer_byte_rate", value=100)]), principal="User:admin", request_id="a"
    )
    admin_server.clock.advance(1000)
    alter(stub, Entry(entity=alice, ops=[Op(key="producer_byte_rate", value=200)]), request_id="b")
    admin_server.clock.advance(1000)
    alter(stub, Entry(entity=alice, ops=[Op(key="producer_byte_rate"), Op(key="consumer_byte_rate", value=5)]))
    assert stub.GetLogOffsets(pb.GetLogOffsetsRequest()).end_offset == 4

    history = stub.EntityHistory(pb.EntityHistoryRequest(entity=pb.ClientQuotaEntity(entity=alice))).entries
    assert [(h.offset, h.commit_time_ms, h.principal, h.request_id, h.key) for h in history] == [
        (0, T0_MS, "User:admin", "a", "producer_byte_rate"),
        (1, T0_MS + 1000, "User:ANONYMOUS", "b", "producer_byte_rate"),
        (2, T0_MS + 2000, "User:ANONYMOUS", "", "producer_byte_rate"),
        (3, T0_MS + 2000, "User:ANONYMOUS", "", "consumer_byte_rate"),
    ]
    assert not history[0].old_value.HasField("quota_value") and history[0].new_value.quota_value == 100
    assert (history[1].old_value.quota_value, history[1].new_value.quota_value) == (100, 200)
    assert history[2].old_value.quota_value == 200 and history[2].new_value.WhichOneof("value") is None

    only = stub.EntityHistory(
        pb.EntityHistoryRequest(entity=pb.ClientQuotaEntity(entity=alice), key="consumer_byte_rate")
    ).entries
    assert [h.offset for h in only] == [3]


def test_history_of_client_metrics_and_config_resources(stub):
    set_ = pb.ALTER_CONFIG_OP_TYPE_SET
    stub.IncrementalAlterConfigs(
        pb.IncrementalAlterConfigsRequest(
            resources=[
                Resource(
                    resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS,
                    resource_name="cm",
                    configs=[Config(name="metrics", config_operation=set_, value="*")],
                ),
                Resource(
                    resource_type=pb.RESOURCE_TYPE_BROKER,
                    resource_name="3",
                    configs=[Config(name="max.connections", config_operation=set_, value="7")],
                ),
            ]
        ),
        metadata=((PRINCIPAL_METADATA, "User:ops"),),
    )
    [cm] = stub.EntityHistory(pb.EntityHistoryRequest(client_metrics="cm")).entries
    assert cm.new_value.client_metrics == events_pb.ClientMetricsRecord(name="cm", metrics="*")
    assert cm.principal == "User:ops"
    resource = pb.ConfigResource(resource_type=pb.RESOURCE_TYPE_BROKER, resource_name="3")
    [broker] = stub.EntityHistory(pb.EntityHistoryRequest(resource=resource)).entries
    assert (broker.key, broker.new_value.config_value) == ("max.connections", "7")


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (pb.EntityHistoryRequest(), "needs one of entity, client_metrics or resource"),
        (pb.EntityHistoryRequest(entity=pb.ClientQuotaEntity()), "Invalid empty client quota entity"),
        (
            pb.EntityHistoryRequest(entity=pb.ClientQuotaEntity(entity=entity(group="g"))),
            "Unhandled client quota entity type: group",
        ),
        (pb.EntityHistoryRequest(client_metrics=""), "must not be empty"),
        (
            pb.EntityHistoryRequest(resource=pb.ConfigResource(resource_type=pb.RESOURCE_TYPE_CLIENT_METRICS)),
            "Unsupported resource type 16",
        ),
    ],
)
def test_bad_history_requests_are_invalid_argument(stub, request_, message):
    error = rejected(stub.EntityHistory, request_)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert message in error.details()


def test_describe_client_quotas_at_a_time(admin_server, stub):
    bob = entity(user="bob")
    alter(stub, Entry(entity=bob, ops=[Op(key="producer_byte_rate", value=100)]))
    admin_server.clock.advance(60_000)
    alter(stub, Entry(entity=bob, ops=[Op(key="producer_byte_rate", value=200)]))

    def at(time_ms: int) -> pb.DescribeClientQuotasAtResponse:
        return stub.DescribeClientQuotasAt(pb.DescribeClientQuotasAtRequest(time_ms=time_ms))

    assert at(T0_MS - 1).end_offset == 0 and not at(T0_MS - 1).entries
    first = at(T0_MS + 59_999)
    assert (first.end_offset, first.last_commit_time_ms) == (1, T0_MS)
    assert as_dict(first.entries) == {(("user", "bob"),): {"producer_byte_rate": 100.0}}
    assert as_dict(at(T0_MS + 60_000).entries) == {(("user", "bob"),): {"producer_byte_rate": 200.0}}
    strict = pb.DescribeClientQuotasAtRequest(
        time_ms=T0_MS, components=[Component(entity_type="client-id", match_type=pb.MATCH_TYPE_SPECIFIED)]
    )
    assert not stub.DescribeClientQuotasAt(strict).entries

    error = rejected(at, -5)
    assert error.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "time_ms must be >= 0" in error.details()
    bad_filter = pb.DescribeClientQuotasAtRequest(time_ms=T0_MS, components=[Component(entity_type="nope", match="x")])
    assert rejected(stub.DescribeClientQuotasAt, bad_filter).code() is grpc.StatusCode.INVALID_ARGUMENT


# --- the server ------------------------------------------------------------------------------------------
def test_health_reports_serving(channel):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", SERVICE_NAME):
        response = health.Check(health_pb2.HealthCheckRequest(service=service))
        assert response.status == health_pb2.HealthCheckResponse.SERVING
    assert SERVICE_NAME == "quotaplane.v1.AdminService"


def test_reflection_lists_the_service(channel):
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
    [response] = reflection.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name for s in response.list_services_response.service}
    assert {SERVICE_NAME, "grpc.health.v1.Health"} <= names
    [described] = reflection.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE_NAME)])
    )
    assert described.file_descriptor_response.file_descriptor_proto


def test_a_closed_store_is_unavailable(admin_server, stub):
    admin_server.store.close()
    error = rejected(alter, stub, Entry(entity=entity(user="x"), ops=[Op(key="producer_byte_rate", value=1)]))
    assert error.code() is grpc.StatusCode.UNAVAILABLE
    assert "closed" in error.details()
    history = pb.EntityHistoryRequest(entity=pb.ClientQuotaEntity(entity=entity(user="x")))
    assert rejected(stub.EntityHistory, history).code() is grpc.StatusCode.UNAVAILABLE


class _BrokenBackend:
    def list_client_metrics_resources(self) -> list[str]:
        raise RuntimeError("secret internal detail\nTraceback (most recent call last): ...")


def test_unexpected_errors_are_internal_without_details():
    server, port = serve(_BrokenBackend())  # type: ignore[arg-type]
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
            error = rejected(
                admin_pb2_grpc.AdminServiceStub(ch).ListClientMetricsResources, pb.ListClientMetricsResourcesRequest()
            )
    finally:
        server.stop(None).wait()
    assert error.code() is grpc.StatusCode.INTERNAL
    assert error.details() == "internal error (RuntimeError); see the server's log"


def test_shard_rpcs_on_a_service_without_shards_are_unimplemented(stub) -> None:
    """An AdminService over a plain config store (no cluster) has no shards to reshard: UNIMPLEMENTED, one line."""
    for call, request in (
        (stub.AlterShardCount, pb.AlterShardCountRequest(shard_count=3)),
        (stub.DescribeShards, pb.DescribeShardsRequest()),
    ):
        with pytest.raises(grpc.RpcError) as raised:
            call(request)
        assert raised.value.code() is grpc.StatusCode.UNIMPLEMENTED
        assert "manages no shards" in raised.value.details()
